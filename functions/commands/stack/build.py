"""The function's code package with its dependencies for FC's python3.10 on Linux x86_64, checked.

The dependencies are the pins of :mod:`functions.commands.stack.lock` (``requirements-fc.txt``), fetched with
``pip download --require-hashes``: a file whose SHA-256 is not the locked one stops the build. Wheels are
fetched for ``manylinux2014_x86_64`` / cp310 (``--only-binary=:all: --platform ...``); the distributions
PyPI has only as source archives (marked ``# sdist`` in the lock) are fetched as such, by hash too, and
turned into wheels with ``pip wheel``; each must come out pure Python (``py3-none-any``), which FC's
python3.10 loads whatever built it. Then ``pip install --no-index --target`` puts them all in one folder,
never the ``deploy`` or ``dev`` extras. The check then reads each installed distribution's ``*.dist-info``
(``WHEEL`` tags) so a missing dependency or a wheel built for another Python or platform stops the deploy
with the names, instead of a function that cannot import pydantic at its first event. Every failure names
the distribution and the way out: ``--deps-dir`` with a folder prepared elsewhere.

Once per lock: :func:`cached` keeps the installed folder in ``~/.cache/ack-mig-hook/deps`` (``$XDG_CACHE_HOME``)
under the lock's SHA-256, so a later deploy of the same lock fetches nothing. Every download and every
temporary folder of pip lives in a work folder there, removed when the fetch ends, fails or is interrupted,
and by the next fetch when the process was killed. :func:`normalize` removes what names the machine or a
temporary path (``direct_url.json``, console scripts), and :mod:`code_package` writes the zip in a fixed
order with fixed times and modes: the same lock gives the same zip, byte for byte, so the dry run's code
object is the deploy's and an unchanged deploy uploads nothing.
"""

import contextlib
import csv
import errno
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from functions.base import settings
from functions.base.textsafe import clip
from functions.commands.stack import code_package

FC_PYTHON = "3.10"
FC_TAGS_PYTHON = ("cp310", "py3", "py310", "py30")
FC_PLATFORMS = ("any", "linux_x86_64")  # plus manylinux*_x86_64


class BuildError(RuntimeError):
    exit_code = 1


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_requirements() -> List[str]:
    """The function's runtime dependencies (code_package.DEPENDENCIES, which a test keeps equal to
    pyproject.toml's): never the ``deploy`` or ``dev`` extras."""
    return [requirement for requirement, _module in code_package.DEPENDENCIES]


def _name(requirement: str) -> str:
    return _norm(re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0])


def installed(deps_dir: str) -> Dict[str, List[str]]:
    """Distributions in a ``pip --target`` folder: normalized name -> their wheel tags."""
    out = {}
    for entry in os.listdir(deps_dir):
        if not entry.endswith(".dist-info"):
            continue
        name = _norm(entry[: -len(".dist-info")].rsplit("-", 1)[0])
        tags = []
        wheel = os.path.join(deps_dir, entry, "WHEEL")
        if os.path.isfile(wheel):
            with open(wheel, encoding="utf-8") as handle:
                tags = [line.split(":", 1)[1].strip() for line in handle if line.startswith("Tag:")]
        out[name] = tags
    return out


def _fits_fc(tag: str) -> bool:
    python, abi, platform = (tag.split("-") + ["", "", ""])[:3]

    def python_ok(p: str) -> bool:
        if p in FC_TAGS_PYTHON:
            return True
        # A stable-ABI wheel (cp37-abi3) loads on that CPython and every later one.
        return abi == "abi3" and p.startswith("cp3") and p[3:].isascii() and p[3:].isdigit() and int(p[3:]) <= 10

    return (any(python_ok(p) for p in python.split("."))
            and (platform in FC_PLATFORMS or (platform.startswith("manylinux") and platform.endswith("_x86_64"))))


def check(deps_dir: str, requirements: List[str]) -> Tuple[List[str], List[str]]:
    """(missing distributions, distributions with no wheel tag FC can load)."""
    have = installed(deps_dir)
    missing = sorted(_name(r) for r in requirements if _name(r) not in have)
    wrong = sorted("%s (%s)" % (name, ", ".join(tags)) for name, tags in have.items()
                   if tags and not any(_fits_fc(t) for t in tags))
    return missing, wrong


DEPS_DIR_HINT = ("or fetch them elsewhere (`pip install --target DIR --platform manylinux2014_x86_64 --python-version "
                 "3.10 --only-binary=:all:` on a machine that reaches the index) and pass --deps-dir DIR")


def _pip(args: List[str], what: str, env: Optional[Dict[str, str]] = None,
         on_line: Optional[Callable[[str], None]] = None) -> subprocess.CompletedProcess:
    """pip, bounded at 900 s; ``on_line`` sees each line of its output as it comes (progress). pip is
    killed when we stop (an interrupt included), and its temporary folders live under ``env``'s TMPDIR,
    which the caller removes."""
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check"] + args
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env, errors="replace")
    late = []

    def kill() -> None:
        late.append(True)
        process.kill()

    timer = threading.Timer(900, kill)
    timer.start()
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))
        process.wait()
    finally:
        timer.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
    if late:
        raise BuildError("pip did not finish %s in 900 s; %s" % (what, DEPS_DIR_HINT))
    return subprocess.CompletedProcess(command, process.returncode, "".join(lines), "")


# pip stopped by a folder it could not write (its --target, a download or temporary folder): the system's
# errno for a path where a folder cannot be made or written (EPERM, EACCES, ENOTDIR, EROFS) or a disk that is
# full (ENOSPC, EDQUOT). pip says it as "ERROR: Could not install packages due to an OSError: [Errno 13] ..."
# or, from its --target handling, as a traceback's last line "NotADirectoryError: [Errno 20] ...".
_UNWRITABLE = re.compile(r"^(?:ERROR: Could not install packages due to an OSError: |[A-Za-z]*Error: )"
                         r"(\[Errno (\d+)\] .*)$", re.M)
_UNWRITABLE_ERRNOS = {errno.EPERM, errno.EACCES, errno.ENOTDIR, errno.EROFS, errno.ENOSPC, errno.EDQUOT}


def _pip_failure(done: subprocess.CompletedProcess, what: str) -> BuildError:
    """One line: the distribution pip names (not found, or not the locked hash), pip's reason, the way out
    (a folder pip could not write is no stale lock: refreshing it would change nothing)."""
    text = done.stderr + done.stdout
    unwritable = [m for m in _UNWRITABLE.finditer(text) if int(m.group(2)) in _UNWRITABLE_ERRNOS]
    if unwritable:  # its own line: pip may add one after it ("Consider using the `--user` option ...")
        return BuildError("pip could not %s for python%s on Linux x86_64: %s; a folder it writes to cannot be "
                          "written: check it (no file in its path, writable by this user, space left on its disk) "
                          "%s" % (what, FC_PYTHON, clip(unwritable[-1].group(1), 200), DEPS_DIR_HINT))
    named = re.findall(r"(?:found for|satisfies the requirement) ([A-Za-z0-9._-]+)", text)
    named += re.findall(r"^\s+([A-Za-z0-9._-]+)==\S+ from ", text, re.M)  # the hash-mismatch listing
    lines = [l for l in text.strip().splitlines() if l.strip() and not l.startswith("WARNING: Location")]
    reason = "the file does not have the locked SHA-256" if "DO NOT MATCH THE HASHES" in text \
        else clip((lines or ["pip failed"])[-1], 200)
    return BuildError("pip could not %s%s for python%s on Linux x86_64: %s; refresh the lock (make lock) %s"
                      % (what, " " + ", ".join(sorted(set(named))) if named else "", FC_PYTHON, reason,
                         DEPS_DIR_HINT))


def _quiet(line: str) -> None:
    pass


class _Counter:
    """pip's ``Collecting NAME==VERSION`` lines (``Processing FILE`` for a local file) as ``k/n`` progress:
    the first, the last, and one every 5 s between."""

    def __init__(self, total: int, progress: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.total, self.progress, self.clock = total, progress, clock
        self.count, self.shown = 0, None

    def __call__(self, line: str) -> None:
        if not line.startswith(("Collecting ", "Processing ")):
            return
        self.count += 1
        now = self.clock()
        if self.count in (1, self.total) or self.shown is None or now - self.shown >= 5:
            self.shown = now
            self.progress("  fetched %d/%d: %s" % (self.count, self.total, clip(os.path.basename(line.split()[1]), 60)))


def fetch(deps_dir: str, lock_path: str = "", progress: Callable[[str], None] = _quiet, work: str = "") -> None:
    """Install the locked dependencies into ``deps_dir`` (see the module's docstring), every download and
    every pip temporary folder under ``work`` (a fresh temporary folder when not given), removed after."""
    from functions.commands.stack import lock

    try:
        pins = lock.read(lock_path or lock.LOCK)
    except (OSError, lock.LockError) as exc:
        raise BuildError("cannot read the dependency lock: %s" % exc) from None
    if not work:
        with tempfile.TemporaryDirectory(prefix="ack-mig-hook-fetch-") as folder:
            return fetch(deps_dir, lock_path, progress, folder)
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    # pip's own temporary folders: ours to remove. No cloud credential: pip, and the build backend of each source
    # archive it runs, need none (settings.child_environment).
    env = dict(settings.child_environment(), TMPDIR=tmp, TEMP=tmp, TMP=tmp)
    files = lock.split(pins, work)
    wheels, sdists = os.path.join(work, "wheels"), os.path.join(work, "sdists")
    wheel_pins = [p for p in pins.pins if not p.sdist]
    sdist_pins = [p for p in pins.pins if p.sdist]
    if "wheel" in files:
        progress("  fetching %d wheels ..." % len(wheel_pins))
        done = _pip(["download", "--no-deps", "--require-hashes", "--only-binary=:all:", "--progress-bar", "off",
                     "-d", wheels] + lock.FC_TARGET + ["-r", files["wheel"]], "fetching the wheels", env,
                    _Counter(len(wheel_pins), progress))
        if done.returncode != 0:
            raise _pip_failure(done, "fetch")
    if "sdist" in files:
        # --no-binary names them: with :all: pip would also build the build environment's setuptools from source.
        names = ",".join(p.name for p in sdist_pins)
        progress("  fetching %d source archives ..." % len(sdist_pins))
        done = _pip(["download", "--quiet", "--no-deps", "--require-hashes", "--no-binary=%s" % names, "-d",
                     sdists, "-r", files["sdist"]], "fetching the source archives", env)
        if done.returncode != 0:
            raise _pip_failure(done, "fetch")
        archives = sorted(os.listdir(sdists))
        for number, archive in enumerate(archives, 1):
            progress("  building %s into a wheel (%d/%d)" % (archive, number, len(archives)))
            _wheel_from_source(os.path.join(sdists, archive), wheels, env)
    built = sorted(os.path.join(wheels, f) for f in os.listdir(wheels)) if os.path.isdir(wheels) else []
    progress("  installing %d distributions for python%s ..." % (len(built), FC_PYTHON))
    # --no-compile: no .pyc, so RECORD lists no byte code named after the interpreter that ran pip.
    done = _pip(["install", "--quiet", "--no-deps", "--no-index", "--no-compile", "--only-binary=:all:",
                 "--target", deps_dir] + lock.FC_TARGET + built, "installing the dependencies", env)
    if done.returncode != 0:
        raise _pip_failure(done, "install")
    normalize(deps_dir)


def normalize(deps_dir: str) -> List[str]:
    """Drop what names the machine or the folder it was built in, so the same lock gives the same bytes:
    ``*.dist-info/direct_url.json`` (pip writes the ``file://`` path of each wheel it installed from a file,
    here a temporary folder) and ``bin/`` (console scripts, whose first line names the python that ran pip;
    FC never runs them); each ``RECORD`` keeps only the lines of files still there. Returns what it
    removed, relative to ``deps_dir``."""
    removed = []
    scripts = os.path.join(deps_dir, "bin")
    if os.path.isdir(scripts):
        shutil.rmtree(scripts)
        removed.append("bin")
    infos = sorted(e for e in os.listdir(deps_dir) if e.endswith(".dist-info"))
    for info in infos:
        direct = os.path.join(deps_dir, info, "direct_url.json")
        if os.path.exists(direct):
            os.remove(direct)
            removed.append(os.path.join(info, "direct_url.json"))
    top = os.path.realpath(deps_dir)
    for info in infos:
        record = os.path.join(deps_dir, info, "RECORD")
        if not os.path.isfile(record):
            continue
        with open(record, encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle))
        kept = []
        for row in rows:
            where = os.path.realpath(os.path.join(deps_dir, row[0])) if row else ""
            if row and (where == top or where.startswith(top + os.sep)) and os.path.isfile(where):
                kept.append(row)
        if kept != rows:
            with open(record, "w", encoding="utf-8", newline="") as handle:
                csv.writer(handle, lineterminator="\n").writerows(kept)
    return removed


# ---- the cache: one installed folder per lock, named by the lock's SHA-256 ----

CACHE_KEEP = 2  # this lock's folder and the one before it (going back a version fetches nothing)
_WORK = ".work-"


def cache_root() -> str:
    """``$XDG_CACHE_HOME/ack-mig-hook/deps`` (``~/.cache/...`` without it), where pip keeps its own cache too."""
    base = settings.environment().get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ack-mig-hook", "deps")


def lock_digest(lock_path: str = "") -> str:
    from functions.commands.stack import lock

    with open(lock_path or lock.LOCK, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _remove_stale(root: str) -> None:
    """Work folders of fetches whose process is gone (killed before it could clean up)."""
    for entry in os.listdir(root):
        pid = entry[len(_WORK):].split("-", 1)[0]
        if entry.startswith(_WORK) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)


def _prune_cache(root: str, current: str, keep: int = CACHE_KEEP) -> None:
    folders = [os.path.join(root, e) for e in os.listdir(root) if not e.startswith(".")]
    others = sorted((f for f in folders if f != current and os.path.isdir(f)), key=os.path.getmtime, reverse=True)
    for folder in others[keep - 1:]:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def work_folder():
    """A folder for one build (downloads, pip's temporary folders, the zip) in the cache's root, removed
    when the block ends however it ends; one left by a killed process goes at the next call."""
    root = cache_root()
    try:
        os.makedirs(root, exist_ok=True)
        _remove_stale(root)
        work = tempfile.mkdtemp(prefix="%s%d-" % (_WORK, os.getpid()), dir=root)
    except OSError as exc:
        raise BuildError("cannot use the dependency cache %s: %s" % (root, exc.strerror or exc)) from None
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cached(lock_path: str = "", progress: Callable[[str], None] = _quiet) -> str:
    """The folder of the lock's dependencies installed for FC: from the cache when this lock was fetched
    before, else fetched into it (a work folder renamed into place once complete, so a cached folder is
    never a partial one; a fetch that was killed leaves its work folder, which the next one removes)."""
    try:
        digest = lock_digest(lock_path)
    except OSError as exc:
        raise BuildError("cannot read the dependency lock: %s" % exc) from None
    root = cache_root()
    final = os.path.join(root, "%s-python%s" % (digest[:16], FC_PYTHON))
    if os.path.isdir(final):
        os.utime(final)  # the newest used: the last pruned
        progress("dependencies: from the cache %s (lock sha256 %s)" % (final, digest[:16]))
        return final
    progress("dependencies: fetching for python%s on Linux x86_64 as the lock pins them (lock sha256 %s), "
             "once: kept in %s" % (FC_PYTHON, digest[:16], final))
    with work_folder() as work:
        target = os.path.join(work, "deps")
        fetch(target, lock_path, progress, work)
        try:
            os.rename(target, final)
        except OSError:
            if not os.path.isdir(final):  # else another deploy cached the same lock first: use that one
                raise
    _prune_cache(root, final)
    return final


def _wheel_from_source(archive: str, out: str, env: Optional[Dict[str, str]] = None) -> None:
    """``pip wheel`` one locked source archive into ``out``; the wheel must be pure Python (``*-none-any``):
    only then does the machine that built it not matter to FC's python3.10."""
    before = set(os.listdir(out)) if os.path.isdir(out) else set()
    name = os.path.basename(archive)
    done = _pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", out, archive], "building %s" % name, env)
    if done.returncode != 0:
        raise BuildError("%s is published only as source and did not build into a wheel: %s; %s"
                         % (name, clip((done.stderr.strip().splitlines() or ["pip wheel failed"])[-1], 200),
                            DEPS_DIR_HINT))
    for wheel in sorted(set(os.listdir(out)) - before):
        tags = wheel[:-len(".whl")].split("-")[-3:]
        if tags[1:] != ["none", "any"] or not _fits_fc("-".join(tags)):
            raise BuildError("%s is published only as source and built %s, not a pure-Python wheel FC's python%s "
                             "can load; %s" % (name, wheel, FC_PYTHON, DEPS_DIR_HINT))


def build(out_path: str, deps_dir: str, known_hosts: str = "") -> str:
    """Check ``deps_dir``, write the zip; return its SHA-256 (it names the OSS object, so every code change
    is a new object and ROS sees the function's Code change)."""
    missing, wrong = check(deps_dir, runtime_requirements())
    if missing:
        raise BuildError("the code package would lack %s: leave out the dependency folder to have them fetched, "
                         "or `pip install --target DIR` them for python%s" % (", ".join(missing), FC_PYTHON))
    if wrong:
        raise BuildError("built for another Python or platform than FC's python%s on Linux x86_64: %s"
                         % (FC_PYTHON, "; ".join(wrong)))
    code_package.build(out_path, deps_dir, known_hosts=known_hosts)
    digest = hashlib.sha256()
    with open(out_path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
