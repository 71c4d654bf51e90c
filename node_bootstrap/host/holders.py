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
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from ..errors import GpuBusy

DEFAULT_DEVICE_GLOB = "/dev/nvidia[0-9]*"
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
# /proc/<pid>/comm is the command name cut to 15 characters.
IGNORED_COMMANDS = frozenset(["nvidia-persiste"])
_DEVICE_NAMES = "nvidia*"  # an fd target named like this may be a container's own node for a GPU file


class Holder(typing.NamedTuple):
    pid: int
    command: str
    paths: List[str]


def device_paths(pattern):
    # type: (str) -> Set[str]
    """The device files the pattern names, resolved as /proc/<pid>/fd links show them."""
    return set(os.path.realpath(p) for p in glob.glob(pattern))


def _mig_minors(text):
    # type: (str) -> Dict[str, int]
    out = {}  # type: Dict[str, int]
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def scope_paths(pattern, gpus, instances, mig_minors_text=""):
    # type: (str, Iterable[Optional[int]], Iterable[Tuple[Optional[int], int, Tuple[int, ...]]], str) -> Set[str]
    """The device files that matter: of the files ``pattern`` names, the GPUs' own ``nvidia<minor>`` (every
    one where a minor is unknown: no GPU is let off unseen), and the capability files of the instances
    ``(minor, GPU instance id, compute instance ids)`` beside them in ``nvidia-caps/``."""
    found = set()  # type: Set[str]
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
                if os.path.exists(path):
                    found.add(os.path.realpath(path))
    return found


def _char_devices(paths):
    # type: (Set[str]) -> Set[int]
    """Device numbers of those that are character devices: a container's own /dev/nvidia0 node is
    another inode, and its fd link shows the path inside the container, but the number is the GPU's."""
    found = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            found.add(st.st_rdev)
    return found


def _holds(link, target, paths, rdevs):
    # type: (str, str, Set[str], Set[int]) -> bool
    if target in paths:
        return True
    if not rdevs or not fnmatch.fnmatchcase(os.path.basename(target), _DEVICE_NAMES):
        return False  # never stat other targets: a file on a hung network mount would block the scan
    try:
        st = os.stat(link)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev in rdevs


def _command(proc, pid):
    # type: (str, str) -> str
    try:
        with open(os.path.join(proc, pid, "comm")) as fh:
            text = fh.read()
    except (IOError, OSError):
        return "?"
    # a process names itself: keep it one short printable line (it ends up in a node annotation)
    return "".join(c if c.isprintable() and not c.isspace() else "?" for c in text.strip())[:32] or "?"


def holders(paths, proc="/proc", ignore_pids=None):
    # type: (Set[str], str, Optional[Iterable[int]]) -> List[Holder]
    """Processes other than ourselves (and nvidia-persistenced) with one of ``paths`` open (resolved paths,
    as :func:`device_paths` and :func:`scope_paths` give them)."""
    if not paths:
        return []
    rdevs = _char_devices(paths)
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
        held = set()
        for fd in fds:
            link = os.path.join(fd_dir, fd)
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if _holds(link, target, paths, rdevs):
                held.add(target)
        if not held:
            continue
        command = _command(proc, entry)
        if command in IGNORED_COMMANDS:
            continue
        found.append(Holder(int(entry), command, sorted(held)))
    return found


def describe(found):
    # type: (List[Holder]) -> str
    return "; ".join("pid %d (%s) holds %s" % (h.pid, h.command, ", ".join(h.paths)) for h in found)


def wait_released(paths, timeout, log, interval=0.2, sleep=time.sleep, clock=time.time):
    # type: (Set[str], float, Callable[[str], None], float, Callable[[float], None], Callable[[], float]) -> float
    """Wait until no other process holds one of ``paths``; returns the seconds waited.

    Raises GpuBusy naming the holders (pid and command) when they are still there after ``timeout``.
    """
    start = clock()
    logged = False
    while True:
        found = holders(paths)
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
