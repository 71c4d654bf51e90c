"""Who still holds a GPU: processes with one of its device files open, found through /proc/<pid>/fd.

Stopping a client only starts it going: the kubelet stops a static pod seconds after its manifest moves
away, and ``systemctl stop`` of a unit with a slow ExecStop or a forking helper can return first. A MIG
mode set while the device plugin or DCGM still has the GPU open stays pending (and the reset that
should apply it is refused for the same reason); DCGM also holds instances, so destroying them answers
IN_USE; and a static pod whose manifest comes back before the old pod is gone may never restart, so the
plugin would not re-enumerate. So apply waits, after stopping clients and before its first mutating
call, until no other process has a GPU's device file open, and fails naming the holders if that does
not happen in time.

Which files mean "holds the GPU" (``--gpu-device-glob``, default ``/dev/nvidia[0-9]*``): the per-GPU
device files. Every NVML or CUDA client opens them for the GPUs it uses (nvmlInit opens them all). Not
``/dev/nvidiactl``: everything that talks to the driver holds it, including this process's own NVML,
and it names no GPU; ``/dev/nvidia-uvm`` and ``/dev/nvidia-caps/*`` are held by CUDA programs together
with ``/dev/nvidiaN``, so they add nobody.

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
from typing import Callable, Iterable, List, Optional, Set

from .errors import GpuBusy

DEFAULT_DEVICE_GLOB = "/dev/nvidia[0-9]*"
# /proc/<pid>/comm is the command name cut to 15 characters.
IGNORED_COMMANDS = frozenset(["nvidia-persiste"])


class Holder(typing.NamedTuple):
    pid: int
    command: str
    paths: List[str]


def device_paths(pattern):
    # type: (str) -> Set[str]
    """The device files the pattern names, resolved as /proc/<pid>/fd links show them."""
    return set(os.path.realpath(p) for p in glob.glob(pattern))


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


def _holds(link, target, paths, rdevs, name_pattern):
    # type: (str, str, Set[str], Set[int], str) -> bool
    if target in paths:
        return True
    if not rdevs or not fnmatch.fnmatchcase(os.path.basename(target), name_pattern):
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


def holders(pattern, proc="/proc", ignore_pids=None):
    # type: (str, str, Optional[Iterable[int]]) -> List[Holder]
    """Processes other than ourselves (and nvidia-persistenced) with a matching device file open."""
    paths = device_paths(pattern)
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
            if _holds(link, target, paths, rdevs, os.path.basename(pattern)):
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


def wait_released(pattern, timeout, log, interval=0.2, sleep=time.sleep, clock=time.time):
    # type: (str, float, Callable[[str], None], float, Callable[[float], None], Callable[[], float]) -> float
    """Wait until no other process holds a matching device file; returns the seconds waited.

    Raises GpuBusy naming the holders (pid and command) when they are still there after ``timeout``.
    """
    start = clock()
    logged = False
    while True:
        found = holders(pattern)
        if not found:
            return clock() - start
        if clock() - start >= timeout:
            raise GpuBusy("the GPUs are still held %ds after stopping their clients: %s; add these to --clients "
                          "or stop them (a mode change or reset cannot go through while they hold the GPU)"
                          % (timeout, describe(found)))
        if not logged:
            log("waiting up to %ds for the GPUs to be released: %s" % (timeout, describe(found)))
            logged = True
        sleep(interval)
