"""``--force``: end a compute process NVML named, and nothing else.

A PID from NVML is a number read a moment ago. Before any signal it must still be the process NVML
meant, and never one whose death takes this node down or takes us with it:

* never PID 0 or 1 (``kill(0)`` signals our own process group, ``kill(-1)`` everything, PID 1 is init),
  never this process, and never a member of this process's group (our own parent shell, systemd's
  cgroup of the boot unit, a container's init): a GPU process of ours would be a bug, not a target;
* SIGTERM first; SIGKILL only after ``grace`` seconds, and only if ``/proc/<pid>/stat`` still shows the
  same start time: a PID freed meanwhile and reused by a new process is left alone.
"""

import os
import signal
import time
from typing import Callable, Optional

PROC = "/proc"


def start_time(pid, proc=PROC):
    # type: (int, str) -> Optional[int]
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), or None when the process is gone (or a zombie).

    The command name (field 2) is in parentheses and may itself hold spaces and ")", so the fields are
    counted after its last ")" (proc(5))."""
    try:
        with open(os.path.join(proc, str(pid), "stat")) as fh:
            text = fh.read()
    except (IOError, OSError):
        return None
    fields = text[text.rfind(")") + 2:].split()
    if fields[:1] in (["Z"], ["X"]):
        return None  # exited; a zombie only waits for its parent to collect it
    try:
        return int(fields[19])  # field 22 overall: field 3 (the state) is fields[0]
    except (IndexError, ValueError):
        return None


def refusal(pid, own_pid=None, own_group=None, group_of=os.getpgid):
    # type: (int, Optional[int], Optional[int], Callable[[int], int]) -> Optional[str]
    """Why ``pid`` must not be signalled, or None."""
    own_pid = os.getpid() if own_pid is None else own_pid
    own_group = os.getpgrp() if own_group is None else own_group
    if pid <= 1:
        return "PID %d is not a process that --force may signal" % pid
    if pid == own_pid:
        return "PID %d is this process" % pid
    try:
        if group_of(pid) == own_group:
            return "PID %d is in this process's own process group" % pid
    except OSError:
        return None  # gone already: nothing will be signalled (kill answers ESRCH)
    return None


def kill(pid, log, grace=10.0, proc=PROC, send=os.kill, sleep=time.sleep, clock=time.time):
    # type: (int, Callable[[str], None], float, str, Callable[[int, int], None], Callable[[float], None], Callable[[], float]) -> bool
    """SIGTERM, then SIGKILL after ``grace`` seconds if the very same process is still there.
    Returns True when the process is gone (or was sent SIGKILL), False when it was refused or not found."""
    why = refusal(pid)
    if why:
        log("not killing %d: %s" % (pid, why))
        return False
    started = start_time(pid, proc)
    if started is None:
        return False
    try:
        send(pid, signal.SIGTERM)
    except OSError:
        return False
    deadline = clock() + grace
    while clock() < deadline:
        if start_time(pid, proc) != started:
            return True  # gone (or gone and its PID reused: either way not ours to kill any more)
        sleep(0.2)
    if start_time(pid, proc) != started:
        return True
    try:
        send(pid, signal.SIGKILL)
    except OSError:
        pass
    return True
