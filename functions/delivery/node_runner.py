"""The runner that every transport starts on the node. It is sent as text (never imported by the function)
and runs on the node's system Python: Python 3.6+, standard library only.

    python3 -I - HASH ROOT ARGS_B64 DEADLINE_S PYTHON INSTANCE_ID NAMES_Z GRACE_S  < node_runner.py

The bundle holds this file as ack_mig_runner.py: the boot unit runs it the same way (bootunit.py).

0. Refuses a node directory that someone other than root could have prepared (exit 2,
   ``unsafe-node-directory``, naming the path and why), the rule of OpenSSH's ``StrictModes``
   (sshd_config(5)): ROOT, ``incoming``, ``bundles`` and every directory above ROOT (symbolic links
   resolved) must be owned by root (or the user the runner runs as) and not writable by group or others.
   A bundle cached where another user can write would otherwise be run as root. Only then does it create
   what is missing (mode 0700).
1. Makes sure the bundle ``ROOT/bundles/HASH`` is there: if not, it assembles the parts that SendFile or
   SFTP left in ``ROOT/incoming`` (``HASH.<i>of<n>``), checks the SHA-256 of the unpacked tar against
   HASH, and unpacks it atomically (a temp dir renamed into place, the tar kept beside the files as
   ``.bundle.tar``), so a half-written bundle is never used and two concurrent runs cannot corrupt each
   other. Missing parts -> exit 10, ``bundle-missing``: the transport then sends the parts and runs again.
1b. EVERY run, before it runs anything, checks the cached bundle again: the SHA-256 of ``.bundle.tar`` is
   HASH, every file of the directory is a member of that tar with the same bytes, and there is nothing
   else (no stray ``sitecustomize.py`` or ``__pycache__``, which Python would load from PYTHONPATH). A cache
   that fails is removed and reported ``bundle-missing`` (the transport sends the parts again).
2. Runs ``PYTHON -m node_bootstrap ARGS`` (ARGS is a base64 JSON list, so no argument is ever shell text)
   with the bundle on PYTHONPATH, in its own session (process group), with a deadline. At the deadline the
   whole group gets SIGTERM (apply's own handler then starts the stopped clients again and labels the node
   ``failed``, reason ``interrupted``), GRACE_S seconds later SIGKILL; the pipes are read for a bounded
   time only, so a grandchild that left the group and kept them open cannot hold the runner either.
   NAMES_Z (base64 zlib JSON instance id -> node name) gives ``--node-name`` for this instance, so one
   script serves a whole Cloud Assistant batch.
3. Prints a few ``# `` lines of the node's stderr and, last, ONE JSON line: the node's own result, or one
   the runner wrote when the node gave none. Bounded: Cloud Assistant drops output past 24 KB.
"""

import base64
import json
import os
import re
import signal
import stat
import subprocess
import sys
import zlib

EXIT_BUNDLE_MISSING = 10
EXIT_TIMEOUT = 124
DEFAULT_GRACE_S = 15  # SIGTERM -> SIGKILL; apply's cleanup (start clients, label) fits well within it
PIPE_DRAIN_S = 5  # after SIGKILL: how long to keep reading pipes a stray grandchild may still hold
EXIT_UNSAFE_DIRECTORY = 2  # node_bootstrap's "bad input": nothing was run
BUNDLE_TAR = ".bundle.tar"  # the verified tar, kept in the unpacked bundle to check it again at every run
COMPLETE = ".complete"
_PART = re.compile(r"^([0-9a-f]{64})\.([0-9]+)of([0-9]+)$")
STDERR_LINES, STDERR_CHARS, RESULT_BYTES = 8, 300, 16384  # node_bootstrap/commands/resultline.py


def emit(code, message, exit_code, **extra):
    result = {"outcome": "failed", "changes": 0, "error": {"code": code, "message": message}}
    result.update(extra)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    sys.exit(exit_code)


def parts_of(incoming, digest):
    found = {}
    total = None
    for name in (os.listdir(incoming) if os.path.isdir(incoming) else ()):
        m = _PART.match(name)
        if m and m.group(1) == digest:
            found[int(m.group(2))] = os.path.join(incoming, name)
            total = int(m.group(3))
    if total is None or sorted(found) != list(range(1, total + 1)):
        return None
    return [found[i] for i in range(1, total + 1)]


def safe_members(tar):
    for member in tar.getmembers():
        name = member.name
        if name.startswith("/") or ".." in name.split("/") or not (member.isfile() or member.isdir()):
            raise ValueError("unexpected member %r" % name)
        yield member


def unsafe(path, uid):
    """Why the directory ``path`` cannot be trusted, or "": owned by neither root nor ``uid``, writable by
    group or others, or not a directory (``lstat``: a link is judged as itself, never followed)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return "cannot be read (%s)" % (exc.strerror or exc)
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in (0, uid):
        return "is owned by uid %d, not by root" % st.st_uid
    if st.st_mode & 0o022:
        return "is writable by %s (mode %04o)" % (
            "group and others" if st.st_mode & 0o022 == 0o022 else "group" if st.st_mode & 0o020 else "others",
            stat.S_IMODE(st.st_mode))
    return ""


def check_node_directory(root, uid=None):
    """Refuse (exit 2) a node directory another user could have prepared, like sshd's StrictModes: ROOT,
    every directory above it, and ``incoming``/``bundles`` below it. Then create what is missing, mode 0700."""
    uid = os.geteuid() if uid is None else uid
    real = os.path.realpath(root)  # what the path really names: every directory on the way is checked
    parts = [p for p in real.split("/") if p]
    chain = ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    chain += [os.path.join(real, "incoming"), os.path.join(real, "bundles")]
    for path in chain:
        if not os.path.lexists(path):
            try:  # its parent passed: only root (or we) could have made or can change what we make here
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            except OSError as exc:
                emit("unsafe-node-directory", "node directory %s: cannot create %s (%s)"
                     % (root, path, exc.strerror or exc), EXIT_UNSAFE_DIRECTORY)
        why = unsafe(path, uid)
        if why:
            emit("unsafe-node-directory", "node directory %s refused: %s %s; it must be owned by root and "
                 "not writable by group or others, and so must every directory above it"
                 % (root, path, why), EXIT_UNSAFE_DIRECTORY)
    return real


def verified(target, digest):
    """Whether the unpacked bundle ``target`` is exactly the tar whose SHA-256 is ``digest``: the tar's
    hash, every member's bytes, and no file or directory that is not a member."""
    import hashlib
    import tarfile

    try:
        with open(os.path.join(target, BUNDLE_TAR), "rb") as fh:
            raw = fh.read()
        if hashlib.sha256(raw).hexdigest() != digest:
            return False
        expected = {COMPLETE: None, BUNDLE_TAR: None}
        with tarfile.open(fileobj=_Bytes(raw), mode="r:") as tar:
            for member in safe_members(tar):
                name = member.name.rstrip("/")
                # the directories above each member exist too (tar does not list them all)
                bits = name.split("/")
                for i in range(1, len(bits)):
                    expected.setdefault("/".join(bits[:i]) + "/", None)
                if member.isdir():
                    expected[name + "/"] = None
                else:
                    expected[name] = tar.extractfile(member).read()
        found = set()
        for dirpath, dirnames, filenames in os.walk(target):
            rel = os.path.relpath(dirpath, target)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for d in dirnames:
                found.add(prefix + d + "/")
                if os.path.islink(os.path.join(dirpath, d)):
                    return False
            for f in filenames:
                found.add(prefix + f)
        if found != set(expected):
            return False
        for name, data in expected.items():
            if data is not None:
                path = os.path.join(target, name)
                if os.path.islink(path):
                    return False
                with open(path, "rb") as fh:
                    if fh.read() != data:
                        return False
        return True
    except (OSError, ValueError, tarfile.TarError):
        return False


def discard(target):
    """Move a cached bundle that failed its check out of the way, then remove it."""
    import shutil
    import tempfile

    try:
        aside = tempfile.mkdtemp(prefix=".stale-", dir=os.path.dirname(target))
        os.rename(target, os.path.join(aside, "bundle"))
    except OSError:
        return  # a concurrent run moved it already
    shutil.rmtree(aside, ignore_errors=True)


def install(root, digest, stale=False):
    bundles = os.path.join(root, "bundles")
    target = os.path.join(bundles, digest)
    if os.path.isfile(os.path.join(target, COMPLETE)):
        return target  # main() checks it before anything runs
    # Only a node without the bundle needs these: a warm run (every run after the first) skips their
    # import, about a quarter of this interpreter's start-up.
    import hashlib
    import lzma
    import shutil
    import tarfile
    import tempfile
    import time

    incoming = os.path.join(root, "incoming")
    parts = parts_of(incoming, digest)
    if parts is None and os.path.isfile(os.path.join(target, COMPLETE)) and verified(target, digest):
        return target  # a concurrent run installed it and removed the parts in between
    if parts is None:
        emit("bundle-missing", "bundle %s is not on this node%s" % (
            digest[:12], "; the cached copy failed its SHA-256 check and was removed" if stale else ""),
            EXIT_BUNDLE_MISSING, bundle="missing")
    def unpacked():
        try:
            packed = b"".join(open(p, "rb").read() for p in parts)
        except OSError:  # a concurrent run installed the bundle and removed the parts meanwhile
            if os.path.isfile(os.path.join(target, COMPLETE)) and verified(target, digest):
                return None
            emit("bundle-missing", "bundle %s parts vanished" % digest[:12], EXIT_BUNDLE_MISSING,
                 bundle="missing")
        try:
            data = lzma.decompress(packed)
        except lzma.LZMAError:
            return b""
        return data if hashlib.sha256(data).hexdigest() == digest else b""

    raw = unpacked()
    if raw == b"":
        # A duplicate event may be sending the same parts right now (written in place): look once more
        # after a moment before calling them corrupt, or this run would delete the other one's upload.
        time.sleep(2.0)
        raw = unpacked()
    if raw is None:
        return target
    if raw == b"":
        for p in parts:
            try:
                os.unlink(p)
            except OSError:
                pass
        emit("bundle-missing", "bundle %s arrived corrupt; parts removed" % digest[:12], EXIT_BUNDLE_MISSING,
             bundle="missing")
    if not os.path.isdir(bundles):
        os.makedirs(bundles, 0o700)
    tmp = tempfile.mkdtemp(prefix=".unpack-", dir=bundles)
    with tarfile.open(fileobj=_Bytes(raw), mode="r:") as tar:
        tar.extractall(tmp, members=safe_members(tar))
    with open(os.path.join(tmp, BUNDLE_TAR), "wb") as fh:
        fh.write(raw)
    open(os.path.join(tmp, COMPLETE), "w").close()
    try:
        os.rename(tmp, target)
    except OSError:  # a concurrent run installed it first: theirs is identical (same hash)
        shutil.rmtree(tmp, ignore_errors=True)
    for p in parts:
        try:
            os.unlink(p)
        except OSError:
            pass
    return target


def _Bytes(data):
    import io
    return io.BytesIO(data)


def _signal_group(proc, signum):
    try:
        os.killpg(proc.pid, signum)  # the session leader's pid is its group id (start_new_session)
    except OSError:  # the group is gone already
        pass


def _drain(proc, seconds):
    """What the process wrote, reading for at most ``seconds``; (b"", b"") when the pipes stay open."""
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            try:
                pipe.close()
            except OSError:
                pass
        return b"", b""
    except ValueError:  # pipes closed by an earlier drain
        return b"", b""


def stop_group(proc, grace):
    """SIGTERM to the whole group, up to ``grace`` s for it to finish, then SIGKILL. Returns the output
    and how it ended ("terminated" or "killed")."""
    _signal_group(proc, signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=grace)
        _signal_group(proc, signal.SIGKILL)  # the leader finished: leave no straggler of its group behind
        return out, err, "terminated"
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)
    out, err = _drain(proc, PIPE_DRAIN_S)
    try:
        proc.wait(timeout=PIPE_DRAIN_S)
    except subprocess.TimeoutExpired:
        pass
    return out, err, "killed"


def main(argv):
    digest, root, args_b64, deadline, python, instance_id, names_z = argv[1:8]
    grace = float(argv[8]) if len(argv) > 8 else DEFAULT_GRACE_S
    args = json.loads(base64.b64decode(args_b64.encode("ascii")).decode("utf-8"))
    names = json.loads(zlib.decompress(base64.b64decode(names_z.encode("ascii"))).decode("utf-8"))
    if instance_id in names:
        args = ["--node-name", names[instance_id]] + args
    root = check_node_directory(root)
    target = install(root, digest)
    if not verified(target, digest):  # what runs is what was checked, every run (not only on arrival)
        discard(target)  # a stale or altered cache: never run it; parts still here (or a resend) rebuild it
        target = install(root, digest, stale=True)
    if not verified(target, digest):
        discard(target)
        emit("bundle-missing", "bundle %s in %s failed its SHA-256 check; removed" % (digest[:12], target),
             EXIT_BUNDLE_MISSING, bundle="missing")
    env = dict(os.environ)
    env["PYTHONPATH"] = target
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["ACK_MIG_BUNDLE_DIR"] = target  # its boot unit then runs this bundle's ack_mig_runner.py
    env["ACK_MIG_RESULT_BYTES"] = str(RESULT_BYTES)
    proc = subprocess.Popen([python, "-m", "node_bootstrap"] + args, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=target,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=float(deadline))
    except subprocess.TimeoutExpired:
        if proc.poll() is not None:  # it finished; a grandchild in its group kept the pipes open
            _signal_group(proc, signal.SIGKILL)
            out, err = _drain(proc, PIPE_DRAIN_S)
            how = ""
        else:
            out, err, how = stop_group(proc, grace)
    else:
        how = ""
    if how:
        said = [l for l in out.decode("utf-8", "replace").splitlines() if l.strip()]
        try:
            doc = json.loads(said[-1]) if said else None
        except ValueError:
            doc = None
        own = doc.get("error") if isinstance(doc, dict) and isinstance(doc.get("error"), dict) else {}
        message = "node_bootstrap did not finish within %s s: %s" % (
            deadline, "stopped by SIGTERM" if how == "terminated" else
            "killed (SIGKILL) %g s after SIGTERM" % grace)
        if own.get("message"):
            message += "; it reported: %s" % str(own["message"])[:200]
        extra = {"node": {"outcome": doc.get("outcome"), "error": own, "labels": doc.get("labels")}} \
            if isinstance(doc, dict) else {}
        emit("node-timeout", message, EXIT_TIMEOUT, **extra)
    for line in err.decode("utf-8", "replace").splitlines()[-STDERR_LINES:]:  # ASCII: 1 byte a character
        sys.stdout.write("# %s\n" % line.encode("ascii", "backslashreplace").decode()[:STDERR_CHARS])
    lines = [l for l in out.decode("utf-8", "replace").splitlines() if l.strip()]
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        errs = [l for l in err.decode("utf-8", "replace").splitlines() if l.strip()]
        tail = (lines[-1] if lines else errs[-1] if errs else "no output")[:300]
        emit("no-result", "node_bootstrap exited %d without a JSON result: %s" % (proc.returncode, tail),
             proc.returncode or 1)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main(sys.argv)
