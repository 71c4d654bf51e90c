"""The Guard's shared watchdog (functions/base/deadline.py ``_Watchdog``): one thread for every call, not one
per call (an event of 10,000 nodes makes thousands of calls), and still every call cut at its own deadline,
from several threads at once (the delivery pool runs nodes in parallel), and never a call that has ended
(Function Compute freezes the process between invocations: a watchdog asleep across them must not cut the
next invocation's sockets for an entry of the last one). Sockets are loopback socket pairs: ``recv`` on one
whose peer sends nothing blocks until the Guard shuts it down."""

import contextlib
import socket
import threading
import time

from functions.base.deadline import Guard


def test_guards_open_at_once_share_one_watchdog_thread():
    before = threading.active_count()
    with contextlib.ExitStack() as stack:
        guards = [stack.enter_context(Guard(60)) for _ in range(50)]
        during = threading.active_count()
    assert during - before <= 1, (before, during)  # a Timer per guard made it 50
    assert not any(guard.fired for guard in guards)


def test_sequential_calls_start_no_thread_each(monkeypatch):
    started = []
    start = threading.Thread.start

    def counted(self, *args, **kwargs):
        started.append(self.name)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(threading.Thread, "start", counted)
    for _ in range(200):
        with Guard(60):
            pass
    assert len(started) <= 1, len(started)  # the calls of one event share a thread (a Timer each: 200)


def _cut_at_deadline(deadline_s, results, index):
    """A call whose peer never answers: ``recv`` ends only when the Guard shuts the socket down."""
    mine, peer = socket.socketpair()
    with mine, peer:
        with Guard(deadline_s) as guard:
            guard.watch(mine)
            data = mine.recv(16)
            ended = time.monotonic()
        results[index] = (guard.fired, data, ended >= guard.end, guard.end)


def _answered(results, index):
    """A call whose peer answers at once: its Guard (far off) never fires, its socket stays usable."""
    mine, peer = socket.socketpair()
    with mine, peer:
        with Guard(60) as guard:
            guard.watch(mine)
            peer.sendall(b"answer")
            data = mine.recv(16)
        mine.sendall(b"still open")  # a shutdown socket raises here
        results[index] = (guard.fired, data, peer.recv(16))


def test_concurrent_calls_are_each_cut_at_their_own_deadline_and_no_other():
    results = {}
    threads = []
    for index in range(24):
        if index % 2:
            target, args = _answered, (results, index)
        else:
            target, args = _cut_at_deadline, (0.1 + 0.05 * (index % 8), results, index)
        threads.append(threading.Thread(target=target, args=args))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 24
    for index, result in results.items():
        if index % 2:
            assert result == (False, b"answer", b"still open"), (index, result)
        else:
            fired, data, not_early, _ = result
            assert fired and data == b"" and not_early, (index, result)


def test_a_call_that_ended_is_never_cut_when_its_deadline_passes_later():
    """The frozen-process case: the call ends before its deadline; the watchdog, kept asleep by a later entry,
    reaches the ended call's entry only after its deadline. Its socket is not shut down, its guard not fired.
    A Guard(0) entered after that deadline fires after the entry is handled (the heap is in deadline order),
    so its firing says the ended call's entry has been seen."""
    with Guard(60):  # keeps the watchdog alive and asleep past the first call's deadline
        for _ in range(50):  # a loaded machine may stop this thread past the deadline inside the call: again
            mine, peer = socket.socketpair()
            with Guard(0.2) as ended:
                ended.watch(mine)
            if time.monotonic() < ended.end:  # the call ended before its deadline, as the case needs
                break
            mine.close()
            peer.close()
        with mine, peer:
            while time.monotonic() <= ended.end:
                time.sleep(0.02)
            with Guard(0) as later:
                while not later.fired:
                    time.sleep(0.01)
            assert not ended.fired
            mine.sendall(b"ping")
            assert peer.recv(4) == b"ping"
            peer.sendall(b"pong")
            assert mine.recv(4) == b"pong"


def _cut_at_once():
    """A guard of no time at all over a socket nobody writes to: the watchdog cuts it (the read ends empty), and
    the guard says it fired."""
    mine, peer = socket.socketpair()
    with mine, peer:
        with Guard(0) as guard:
            guard.watch(mine)
            assert mine.recv(4) == b""
    return guard.fired


def test_a_guard_entered_past_its_deadline_fires_at_once_and_a_later_one_still_fires():
    """A zero deadline is cut at once; the watchdog thread that found its heap empty has ended, and the next
    guard starts another (an entry is never left without a thread to fire it)."""
    for _ in range(3):
        assert _cut_at_once()



def test_a_guard_without_end_leaves_the_watchdog_running(monkeypatch):
    """A Guard(float("inf")) (a Timer of its own waited it out alone): the shared thread, waiting on it, must not
    die of it (``Condition.wait`` refuses a timeout past threading.TIMEOUT_MAX) and leave others uncut."""
    from functions.base import deadline

    died = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    with Guard(float("inf")) as endless:
        assert _cut_at_once()
        time.sleep(0.2)  # the watchdog is now waiting on the endless guard alone
        assert not died and deadline._WATCHDOG._thread.is_alive(), died
    assert not endless.fired



def test_a_forked_child_gets_a_watchdog_of_its_own():
    """A fork while the watchdog holds its lock (firing a guard): the child has no watchdog thread and the lock
    stays held there forever, so the child starts afresh; a Guard entered in it is still cut at its deadline.
    Here the forking thread holds the lock, as the watchdog thread would."""
    import os
    import signal

    from functions.base import deadline

    with Guard(60):  # the parent's watchdog is running
        with deadline._WATCHDOG._cond:
            pid = os.fork()
            if pid == 0:  # the child, the lock held: exit status 0 only if its guard cut its socket
                code = 1
                try:
                    mine, peer = socket.socketpair()
                    with Guard(0.1) as guard:
                        guard.watch(mine)
                        code = 0 if mine.recv(4) == b"" and guard.fired else 2
                finally:
                    os._exit(code)
        for _ in range(300):  # a child stuck on the inherited lock never ends: 30 s, then it is killed
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung on the watchdog's inherited lock")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
