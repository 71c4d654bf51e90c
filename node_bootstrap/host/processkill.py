"""``--force``: end the compute processes NVML named, and nothing else.

A PID from NVML is a number read a moment ago. Before any signal it must still be the process NVML
meant, and never one whose death takes this node down or takes us with it:

* never PID 0 or 1 (``kill(0)`` signals our own process group, ``kill(-1)`` everything, PID 1 is init),
  never this process, and never a member of this process's group (our own parent shell, systemd's
  cgroup of the boot unit, a container's init): a GPU process of ours would be a bug, not a target;
* its start time (``/proc/<pid>/stat``) is taken as NVML lists it; before each signal NVML is asked
  again and the start time compared: a PID NVML no longer lists, or one freed and reused meanwhile, is
  left alone;
* SIGTERM to all of them first, one ``grace`` period for all together, then SIGKILL to those still
  there (checked again the same way): a long list never stretches to one grace per process, during
  which a later PID of the list could be reused.
"""

import os
import signal
import time
import typing
from typing import Callable, List, Optional, Tuple

PROC = "/proc"


def start_time(pid, proc=PROC):
    # type: (int, str) -> Optional[int]
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), or None when the process is gone (or a zombie).

    The command name (field 2) is in parentheses and may itself hold spaces and ")", so the fields are
    counted after its last ")" (proc(5)). Read as bytes: the name is any bytes its process chose, and read as
    text one that is not in the locale's encoding raised out of every GPU read that stamps its processes."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as fh:
            raw = fh.read()
    except (IOError, OSError):
        return None
    fields = raw[raw.rfind(b")") + 2:].decode("ascii", "replace").split()
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
    """One process, its start time taken now: :func:`end_all` for a PID known to be meant. Returns True when
    it was signalled, False when it was refused or not found."""
    started = start_time(pid, proc)
    if started is None:
        return False  # gone (or never there): nothing to signal
    ops = ProcessOps(lambda p: start_time(p, proc), send, refusal, sleep, clock)
    return bool(end_all([(pid, started)], lambda p: True, log, grace, ops))

Targets = List[Tuple[int, Optional[int]]]  # (pid, its start time when NVML listed it)


class ProcessOps(typing.NamedTuple):
    """What ending processes takes from the host: the kernel's, or a simulated node's (its driver's)."""

    start_time: Callable[[int], Optional[int]]
    send: Callable[[int, int], None]  # os.kill
    refusal: Callable[[int], Optional[str]]
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time


HOST_OPS = ProcessOps(start_time, os.kill, refusal)


def _ours(pid, started, still_listed, log, ops):
    # type: (int, Optional[int], Callable[[int], bool], Callable[[str], None], ProcessOps) -> bool
    """Whether ``pid`` is still the process NVML listed: not refused, listed again, same start time."""
    why = ops.refusal(pid)
    if why:
        log("not killing %d: %s" % (pid, why))
        return False
    if not still_listed(pid):
        log("compute process %d is gone (NVML no longer lists it)" % pid)
        return False
    now = ops.start_time(pid)
    if started is None or now != started:
        log("not killing %d: it is not the process NVML listed (%s)"
            % (pid, "gone" if now is None else "its start time changed" if started is not None
               else "its start time was unknown when listed"))
        return False
    return True


def end_all(targets, still_listed, log, grace=10.0, ops=HOST_OPS):
    # type: (Targets, Callable[[int], bool], Callable[[str], None], float, ProcessOps) -> List[int]
    """End ``targets`` ((pid, start time when NVML listed it)): SIGTERM to each one still ours, one grace
    period for all, SIGKILL to those still ours then. Returns the pids signalled."""
    termed = []  # type: List[Tuple[int, Optional[int]]]
    for pid, started in targets:
        if not _ours(pid, started, still_listed, log, ops):
            continue
        try:
            ops.send(pid, signal.SIGTERM)
        except OSError:
            continue  # gone since: nothing to end
        termed.append((pid, started))
    deadline = ops.clock() + grace
    left = list(termed)
    while left and ops.clock() < deadline:
        left = [(pid, started) for pid, started in left if ops.start_time(pid) == started]
        if left:
            ops.sleep(0.2)
    for pid, started in left:
        if ops.start_time(pid) == started and _ours(pid, started, still_listed, log, ops):
            try:
                ops.send(pid, signal.SIGKILL)
            except OSError:
                pass
    return [pid for pid, _ in termed]
