"""Who still holds what a change needs: processes with one of its device files open, found through
/proc/<pid>/fd.

Stopping a client only starts it going: the kubelet stops a static pod seconds after its manifest moves
away, and ``systemctl stop`` of a unit with a slow ExecStop or a forking helper can return first. A MIG
mode set while the device plugin or DCGM still has the GPU open stays pending (and the reset that
should apply it is refused for the same reason), and a process inside a MIG instance makes destroying
it answer IN_USE. So apply waits, after stopping clients and before its first mutating call, until no
other process holds the device files of what changes, and fails naming the holders if that does not
happen in time. Only those (:class:`reconcile.ReleaseScope`): a GPU's own file where its MIG mode
changes, the capability files of the instances it destroys. Workloads on kept instances, and any GPU
user not in ``--clients``, hold their GPU's file for as long as they run: a change that only creates
instances beside them must not wait for them.

Which files (``--gpu-device-glob``, default ``/dev/nvidia[0-9]*``): the per-GPU device files, GPU
``minor`` being ``nvidia<minor>`` (nvmlDeviceGetMinorNumber). Every NVML or CUDA client opens them for
the GPUs it uses (nvmlInit opens them all). Not ``/dev/nvidiactl``: everything that talks to the driver
holds it, including this process's own NVML, and it names no GPU. A MIG instance's capability files are
``nvidia-caps/nvidia-cap<N>`` beside them, N from the driver's ``/proc/driver/nvidia-caps/mig-minors``
(``gpu<minor>/gi<id>/access``, ``gpu<minor>/gi<id>/ci<id>/access``; MIG user guide, "Device Nodes and
Capabilities"): what a process entering the instance opens (the NVIDIA container toolkit injects exactly
these into a container). Whether CUDA keeps them open for the process's lifetime is not confirmed here:
where it does not, the destroy's own IN_USE answer still names the instance.

A file system that never answers: a process on the node may hold a file named like a GPU device on a FUSE
or network mount whose daemon or server is gone, and a stat of it waits in the kernel for good (SIGKILL
does not end that wait). So a look never stats an fd's target on such a mount (the fd's ``mnt_id`` in
``/proc/<pid>/fdinfo``, its type in ``/proc/<pid>/mountinfo``: procfs answers without asking the file
system); fd links are read with readlink, which procfs answers from the kernel's own path of the file.
And every look runs in a child process under a deadline (:mod:`bounded`): a stat that still does not
answer, on a mount of a type not known to hang, or a ``--gpu-device-glob`` pointing into one, fails the
apply with ``holder-scan-timeout`` naming the pid and fd, and apply's usual way out starts the stopped
clients again, labels the node and frees the lock.

Never counted as holders: this process (its own NVML is shut down around the GPU reset) and
nvidia-persistenced, the driver's helper that keeps the GPUs initialised for the node's lifetime; it is
not a client that apply could stop.
"""

import fnmatch
import glob
import os
import stat
import time
import typing
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from . import bounded
from ..errors import GpuBusy, NodeFailure

DEFAULT_DEVICE_GLOB = "/dev/nvidia[0-9]*"
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
# /proc/<pid>/comm is the command name cut to 15 characters.
IGNORED_COMMANDS = frozenset(["nvidia-persiste"])
_DEVICE_NAMES = "nvidia*"  # an fd target named like this may be a container's own node for a GPU file
# Mount types (``/proc/<pid>/mountinfo``, a prefix: fuse.sshfs, nfs4, smb3) whose files a daemon or a
# server answers for, and whose stat can wait for good when it does not. A GPU's device node is never
# served by one (a container's /dev is a tmpfs, or a bind mount of the host's devtmpfs).
MAY_HANG = ("fuse", "nfs", "cifs", "smb", "9p", "ceph", "glusterfs", "lustre", "gfs2", "ocfs2", "afs",
            "virtiofs", "gpfs", "beegfs", "orangefs", "pvfs2", "coda", "ncpfs", "davfs")
# One look at /proc takes milliseconds; one that has not answered in this long is stuck.
SCAN_TIMEOUT = 10.0

Note = Callable[[str], None]
Stat = Callable[[str], Any]


def _quiet(text):
    # type: (str) -> None
    pass


class Holder(typing.NamedTuple):
    pid: int
    command: str
    paths: List[str]


def _printable(text, limit=200):
    # type: (str, int) -> str
    """A file or command name as one short printable line (it ends up in a node annotation)."""
    return "".join(c if c.isprintable() and not c.isspace() else "?" for c in text)[:limit]


def _mig_minors(text):
    # type: (str) -> Dict[str, int]
    out = {}  # type: Dict[str, int]
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def scope_paths(pattern, gpus, instances, mig_minors_text="", note=_quiet):
    # type: (str, Iterable[Optional[int]], Iterable[Tuple[Optional[int], int, Tuple[int, ...]]], str, Note) -> Set[str]
    """The device files that matter: of the files ``pattern`` names, the GPUs' own ``nvidia<minor>`` (every
    one where a minor is unknown: no GPU is let off unseen), and the capability files of the instances
    ``(minor, GPU instance id, compute instance ids)`` beside them in ``nvidia-caps/``. (The default
    glob's /dev is devtmpfs, which always answers; a glob elsewhere is bounded like the rest of a look.)"""
    found = set()  # type: Set[str]
    note("listing %s" % _printable(pattern))
    files = glob.glob(pattern)
    for minor in gpus:
        found.update(os.path.realpath(f) for f in files if minor is None or os.path.basename(f) == "nvidia%d" % minor)
    minors = _mig_minors(mig_minors_text)
    caps = os.path.join(os.path.dirname(pattern), "nvidia-caps")
    for minor, gi, cis in instances:
        if minor is None:
            continue
        names = ["gpu%d/gi%d/access" % (minor, gi)] + ["gpu%d/gi%d/ci%d/access" % (minor, gi, ci) for ci in cis]
        for name in names:
            if name in minors:
                path = os.path.join(caps, "nvidia-cap%d" % minors[name])
                note("looking at %s" % _printable(path))
                if os.path.exists(path):
                    found.add(os.path.realpath(path))
    return found


def _char_devices(paths, stat_path, note):
    # type: (Set[str], Stat, Note) -> Set[int]
    """Device numbers of those that are character devices: a container's own /dev/nvidia0 node is
    another inode, and its fd link shows the path inside the container, but the number is the GPU's."""
    found = set()
    for path in sorted(paths):
        note("a stat of %s" % _printable(path))
        try:
            st = stat_path(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            found.add(st.st_rdev)
    return found


def fd_mount_id(fdinfo_text):
    # type: (str) -> Optional[int]
    """The ``mnt_id`` of ``/proc/<pid>/fdinfo/<fd>`` (Linux 3.15 and later; None before)."""
    for line in fdinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key == "mnt_id" and value.strip().isdigit():
            return int(value.strip())
    return None


def mount_types(mountinfo_text):
    # type: (str) -> Dict[int, str]
    """Mount id -> file system type, from ``/proc/<pid>/mountinfo`` (proc(5): the optional fields end at
    ``-``, the type follows it)."""
    out = {}  # type: Dict[int, str]
    for line in mountinfo_text.splitlines():
        fields = line.split()
        if "-" not in fields or not fields[0].isdigit():
            continue
        after = fields.index("-") + 1
        if after < len(fields):
            out[int(fields[0])] = fields[after]
    return out


def may_hang(fstype):
    # type: (Optional[str]) -> bool
    return fstype is not None and fstype.startswith(MAY_HANG)


def _read(path):
    # type: (str) -> Optional[str]
    """A procfs file's text, bytes that are not UTF-8 replaced: a process's name and its mount points are any
    bytes (read strictly, one such mount point made its whole mountinfo unreadable, and the FUSE guard blind)."""
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None


class _Process(object):
    """What a look learns of one process from procfs: the type of the mount each fd is on."""

    def __init__(self, proc, pid):
        # type: (str, str) -> None
        self.proc, self.pid = proc, pid
        self._types = None  # type: Optional[Dict[int, str]]

    def fd_fstype(self, fd):
        # type: (str) -> Optional[str]
        """The file system type under ``fd``; None where procfs does not say (an older kernel)."""
        mnt = fd_mount_id(_read(os.path.join(self.proc, self.pid, "fdinfo", fd)) or "")
        if mnt is None:
            return None
        if self._types is None:
            self._types = mount_types(_read(os.path.join(self.proc, self.pid, "mountinfo")) or "")
        return self._types.get(mnt)


def _holds(process, fd, link, target, paths, rdevs, stat_path, note):
    # type: (_Process, str, str, str, Set[str], Set[int], Stat, Note) -> bool
    if target in paths:
        return True
    if not rdevs or not fnmatch.fnmatchcase(os.path.basename(target), _DEVICE_NAMES):
        return False  # never stat other targets: a file on a hung network mount would block the look
    if may_hang(process.fd_fstype(fd)):
        return False  # a FUSE or network file named like a device: no GPU node, and its stat may never return
    note("a stat of pid %s's %s (-> %s)" % (process.pid, link, _printable(target)))
    try:
        st = stat_path(link)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev in rdevs


def _command(proc, pid):
    # type: (str, str) -> str
    text = _read(os.path.join(proc, pid, "comm"))
    if text is None:
        return "?"
    # a process names itself: keep it one short printable line (it ends up in a node annotation)
    return _printable(text.strip(), 32) or "?"


def holders(paths, proc="/proc", ignore_pids=None, stat_path=os.stat, note=_quiet):
    # type: (Set[str], str, Optional[Iterable[int]], Stat, Note) -> List[Holder]
    """Processes other than ourselves (and nvidia-persistenced) with one of ``paths`` open (resolved paths,
    as :func:`scope_paths` gives them). ``stat_path`` is the one call that may reach
    a foreign file system (``note`` announces each); run it where a deadline bounds it (:func:`look`)."""
    if not paths:
        return []
    rdevs = _char_devices(paths, stat_path, note)
    ignore = set(ignore_pids if ignore_pids is not None else [os.getpid()])
    found = []  # type: List[Holder]
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    for entry in sorted(entries, key=lambda e: (len(e), e)):
        if not entry.isdigit() or int(entry) in ignore:
            continue
        fd_dir = os.path.join(proc, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # exited meanwhile, or (not root) another user's process we cannot inspect
        process = _Process(proc, entry)
        held = set()
        for fd in fds:
            link = os.path.join(fd_dir, fd)
            try:
                target = os.readlink(link)  # procfs: the kernel's path of the file, no question to its mount
            except OSError:
                continue
            if _holds(process, fd, link, target, paths, rdevs, stat_path, note):
                held.add(target)
        if not held:
            continue
        command = _command(proc, entry)
        if command in IGNORED_COMMANDS:
            continue
        found.append(Holder(int(entry), command, sorted(held)))
    return found


class Scope(typing.NamedTuple):
    """What one look checks: the device glob, the GPUs' minors (mode changes), the instances to destroy
    as (minor, GPU instance id, compute instance ids) and the driver's mig-minors table."""

    pattern: str
    gpus: Tuple[Optional[int], ...] = ()
    instances: Tuple[Tuple[Optional[int], int, Tuple[int, ...]], ...] = ()
    mig_minors_text: str = ""


def look(scope, proc="/proc", ignore_pids=None, stat_path=os.stat, note=_quiet):
    # type: (Scope, str, Optional[Iterable[int]], Stat, Note) -> List[Holder]
    """One look: the scope's device files, then who holds them. Runs in :func:`wait_released`'s worker."""
    paths = scope_paths(scope.pattern, scope.gpus, scope.instances, scope.mig_minors_text, note)
    return holders(paths, proc, ignore_pids, stat_path, note)


def describe(found):
    # type: (List[Holder]) -> str
    return "; ".join("pid %d (%s) holds %s" % (h.pid, h.command, ", ".join(h.paths)) for h in found)


def bounded_look(find, timeout, kill=os.kill):
    # type: (Callable[[Note], List[Holder]], float, Callable[[int, int], None]) -> List[Holder]
    """``find(note)`` in a child process (:func:`bounded.call`), given ``timeout`` seconds. Raises
    NodeFailure ``holder-scan-timeout`` naming what did not answer, ``holder-scan-failed`` when it broke."""
    try:
        found = bounded.call(lambda note: [list(h) for h in find(note)], timeout, "the look at /proc", kill)
    except bounded.NoAnswer as exc:
        raise NodeFailure("the holder scan got no answer within %gs from %s: a file system that does not answer "
                          "(a FUSE or network mount whose daemon or server is gone?); the GPUs were not changed "
                          "(unmount it, or stop that process, and apply again)" % (exc.timeout, exc.last),
                          code="holder-scan-timeout")
    except bounded.WorkFailed as exc:
        raise NodeFailure("the holder scan failed: %s; the GPUs were not changed" % exc, code="holder-scan-failed")
    return [Holder(int(pid), str(command), [str(p) for p in paths]) for pid, command, paths in found]


def wait_released(find, timeout, log, interval=0.2, sleep=time.sleep, clock=time.time, scan_timeout=SCAN_TIMEOUT,
                  kill=os.kill):
    # type: (Callable[[Note], List[Holder]], float, Callable[[str], None], float, Callable[[float], None], Callable[[], float], float, Callable[[int, int], None]) -> float
    """Wait until ``find(note)`` (:func:`look`) finds no holder; returns the seconds waited.

    Raises GpuBusy naming the holders (pid and command) when they are still there after ``timeout``.
    Each look runs in a child process with ``scan_timeout`` seconds, never more than the wait has left
    (at least 1 s): one that does not answer raises NodeFailure ``holder-scan-timeout`` (:func:`bounded_look`).
    """
    start = clock()
    logged = False
    while True:
        found = bounded_look(find, min(scan_timeout, max(timeout - (clock() - start), 1.0)), kill)
        if not found:
            return clock() - start
        if clock() - start >= timeout:
            raise GpuBusy("the GPUs are still held %ds after stopping their clients: %s; add these to --clients "
                          "or stop them (a MIG mode change, a GPU reset or destroying an instance cannot go "
                          "through while they hold it)" % (timeout, describe(found)))
        if not logged:
            log("waiting up to %ds for the GPUs to be released: %s" % (timeout, describe(found)))
            logged = True
        sleep(interval)
