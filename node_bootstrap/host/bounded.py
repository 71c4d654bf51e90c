"""Work that may touch a file system which never answers, run in a child process under a deadline.

A stat of a file on a FUSE mount whose daemon is gone, or on a hard NFS mount whose server is, waits in
the kernel for an answer; the wait is uninterruptible (FUSE's request_wait_answer once the request was
handed to the daemon) and SIGKILL does not end it. Such work must never run in the main process: apply
has to restart the clients it stopped, label the node and free the node lock whatever happens.

Why a child process and not a thread: a thread stuck in the kernel keeps the whole process from ending
(Linux reports a process gone only once its last thread has exited), and with it the shared descriptor
table, so whoever reads the process's stdout would never see the end of it. A forked child is abandoned
instead: it is sent SIGKILL and never waited for without a deadline; the parent goes on and exits, and
init (or the unit's cgroup) inherits the child. Right after the fork (SIGTERM and SIGINT held back until
its own handlers are set) the child closes every descriptor it inherited but its own pipe (stdin, stdout
and stderr become /dev/null): a stuck child must not keep
the node lock's flock (held by the open file, which a fork shares), the caller's output pipe or this
process's GPU device files open.

The child reports through its pipe, one JSON document a line: ``{"note": ...}`` before each step that
may not answer (what it is about to touch), then ``{"result": ...}`` or ``{"error": ...}``. When the
deadline passes first, :class:`NoAnswer` carries the last note: what did not answer.
"""

import errno
import json
import os
import select
import signal
import time
from typing import Any, Callable, List

from ..errors import one_line

# The children given up on (sent SIGKILL, not yet gone): reaped without waiting at the next call.
_abandoned = []  # type: List[int]

# The signals whose handlers raise into the caller's cleanup (apply's SIGTERM, Python's SIGINT): they wait
# while the process forks, so that a child never runs the caller's handler (systemd's stop sends SIGTERM to
# every process of the unit, the child included): its exception unwound the child through the caller's own
# frames, and the child ran apply's way out (clients started, node labelled, a result on apply's stdout).
_DEFERRED = (signal.SIGTERM, signal.SIGINT)


class NoAnswer(Exception):
    """The work did not finish within its deadline (``last``: the last step it announced)."""

    def __init__(self, last, timeout):
        # type: (str, float) -> None
        super(NoAnswer, self).__init__("no answer within %gs: %s" % (timeout, last))
        self.last = last
        self.timeout = timeout


class WorkFailed(Exception):
    """The work raised (the text names the exception), or the child ended without a result."""


def _send(fd, doc):
    # type: (int, Any) -> None
    data = (json.dumps(doc) + "\n").encode("ascii")  # ensure_ascii: odd file names travel as escapes
    while data:
        data = data[os.write(fd, data):]


def _close_inherited(keep):
    # type: (int) -> None
    """Every descriptor but ``keep``; 0, 1 and 2 on /dev/null (devtmpfs: it always answers)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != null:
            os.dup2(null, fd)
    try:
        # /proc/self/fd lists what is open (procfs answers); closing up to SC_OPEN_MAX can be a million calls
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        open_fds = list(range(3, 1024))
    for fd in open_fds:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _block():
    # type: () -> Any
    """Hold back _DEFERRED in this thread; the mask to restore (None where there is no mask to set)."""
    try:
        return signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    except (AttributeError, OSError, ValueError):
        return None


def _unblock(mask):
    # type: (Any) -> None
    """The mask before :func:`_block`: what came meanwhile is delivered now (its handler runs next)."""
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _child(work, write_fd, mask):
    # type: (Callable[[Callable[[str], None]], Any], int, Any) -> None
    """In the forked child: never returns (os._exit: no atexit, no buffers of the parent flushed twice)."""
    try:
        # The parent's handlers raise into its own cleanup; here a signal just ends the child: set before the
        # signals held back since the fork are let through (one that came meanwhile ends the child here).
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _unblock(mask)
        _close_inherited(write_fd)
        result = work(lambda text: _send(write_fd, {"note": text}))
        _send(write_fd, {"result": result})
    except BaseException as exc:  # noqa: B036 - whatever happens, the parent hears of it and the child ends
        try:
            _send(write_fd, {"error": "%s: %s" % (exc.__class__.__name__, one_line(exc, 300))})
        except BaseException:  # noqa: B036 - the pipe is gone: the parent gave up already
            pass
    finally:
        os._exit(0)


def _reap(pid):
    # type: (int) -> bool
    """Whether ``pid`` is gone (reaped now or before); never waits."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except OSError as exc:
        return exc.errno == errno.ECHILD
    return done == pid


def call(work, timeout, start="starting", kill=os.kill, clock=time.time):
    # type: (Callable[[Callable[[str], None]], Any], float, str, Callable[[int, int], None], Callable[[], float]) -> Any
    """``work(note)`` in a forked child; its result (JSON-able), within ``timeout`` seconds.

    Raises :class:`NoAnswer` naming the last note (``start`` before the first) when the deadline passes,
    :class:`WorkFailed` when the work raised or the child died without a result. ``kill`` is how a child
    is ended (a test stands in one that SIGKILL does not end)."""
    for pid in list(_abandoned):
        if _reap(pid):
            _abandoned.remove(pid)
    read_fd, write_fd = os.pipe()
    mask = _block()
    try:
        pid = os.fork()
    except BaseException:  # noqa: B036 - no child: the pipe and the mask as they were
        _unblock(mask)
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:
        os.close(read_fd)
        _child(work, write_fd, mask)
    os.close(write_fd)
    deadline = clock() + timeout
    last = start
    buf = b""
    finished = False
    try:
        _unblock(mask)  # a signal held back since the fork: its handler runs here, and the child is ended below
        poller = select.poll()  # not select(): a descriptor above 1024 is fine here
        poller.register(read_fd, select.POLLIN)
        while True:
            left = deadline - clock()
            if left <= 0:
                raise NoAnswer(last, timeout)
            if not poller.poll(max(1, int(left * 1000))):
                continue
            chunk = os.read(read_fd, 65536)
            if not chunk:
                finished = True  # its end of the pipe is closed: it is exiting
                raise WorkFailed("the worker process ended without an answer (after: %s)" % last)
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                doc = json.loads(line.decode("ascii"))
                if "note" in doc:
                    last = doc["note"]
                finished = "note" not in doc  # after its answer it only exits
                if "error" in doc:
                    raise WorkFailed(doc["error"])
                if finished:
                    return doc["result"]
    finally:
        os.close(read_fd)
        _settle(pid, finished, kill, clock)


def _settle(pid, finished, kill, clock):
    # type: (int, bool, Callable[[int, int], None], Callable[[], float]) -> None
    """Reap the child: one that answered ends at once (a moment is allowed, never a wait without a
    deadline); any other is sent SIGKILL and left behind if that does not end it."""
    if finished:
        end = clock() + 1.0
        while clock() < end:
            if _reap(pid):
                return
            time.sleep(0.005)
    try:
        kill(pid, signal.SIGKILL)
    except OSError:
        pass
    if not _reap(pid):
        _abandoned.append(pid)  # stuck in the kernel: this process goes on and exits without it
