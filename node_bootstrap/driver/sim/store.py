"""The simulated node's state file: read and written under a lock, replaced atomically.

Every simulated NVML call re-reads the file, as every real call asks the one driver: two processes
(an apply and a status, or two applies racing for the node lock) see one node. A process killed mid-run
leaves the file as it was after its last completed call, like a real GPU.
"""

import contextlib
import fcntl
import json
import os
import tempfile
import threading
from typing import Any, Dict, Iterator, Optional, Tuple

from .driver import State


class SimStateError(Exception):
    pass


class _Held(object):
    """One open descriptor of the lock file (flock'ed, or about to be): closed once, by whoever comes first,
    its own ``with`` block's end or the next lock this thread takes on the file (:meth:`SimStore._locked`)."""

    def __init__(self, fd):
        # type: (int) -> None
        self.fd = fd  # type: Optional[int]
        self.pid = os.getpid()  # a forked child (bounded.py) closed what it inherited: never closed twice there

    def release(self):
        # type: () -> None
        fd, self.fd = self.fd, None
        if fd is not None and self.pid == os.getpid():
            os.close(fd)  # closing releases the flock


# Per lock file and thread, the lock it took last and has not released. Only an interrupt leaves one here
# when a lock is taken: see _locked. (Per thread: another thread's lock is its own, waited for as before.)
_HELD = {}  # type: Dict[Tuple[str, int], _Held]


class SimStore(object):
    def __init__(self, path):
        # type: (str) -> None
        self.path = os.path.abspath(path)
        self._lock_path = self.path + ".lock"

    def exists(self):
        # type: () -> bool
        return os.path.exists(self.path)

    @contextlib.contextmanager
    def _locked(self, exclusive):
        # type: (bool) -> Iterator[None]
        directory = os.path.dirname(self.path)
        if directory and not os.path.isdir(directory):
            os.makedirs(directory)
        # A lock of this process still here was left by a ``with`` block that never began: SIGTERM's or
        # SIGINT's exception raised as __enter__ returned (CPython runs handlers between bytecodes,
        # bpo-29988) skips __exit__, and the suspended generator, kept by that exception's traceback, held
        # the flock while apply's failure path read the GPUs back under the same file: a wait on itself,
        # for good. Calls never nest (a nested one would wait on the outer), so it is released here.
        key = (self._lock_path, threading.get_ident())
        left = _HELD.pop(key, None)
        if left is not None:
            left.release()
        held = _Held(os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600))
        _HELD[key] = held
        try:
            fcntl.flock(held.fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            held.release()
            if _HELD.get(key) is held:
                del _HELD[key]

    def _read(self):
        # type: () -> State
        try:
            with open(self.path) as fh:
                state = json.load(fh)
        except (IOError, OSError) as exc:
            raise SimStateError("cannot read simulator state %s: %s" % (self.path, exc))
        except ValueError as exc:
            raise SimStateError("simulator state %s is not JSON: %s" % (self.path, exc))
        if not isinstance(state, dict) or state.get("version") != 1:
            raise SimStateError("simulator state %s has an unknown format" % self.path)
        return state

    def _write(self, state):
        # type: (State) -> None
        fd, tmp = tempfile.mkstemp(prefix=".sim-", dir=os.path.dirname(self.path))
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(state, fh, indent=1, sort_keys=True)
            # No fsync: the rename alone is atomic for every other process and survives a kill -9 (the page
            # cache outlives the process), which is all a simulated GPU models; a power cut it does not model,
            # and an fsync per simulated call made every sim apply wait on the disk (15 a run).
            os.rename(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def load(self):
        # type: () -> State
        with self._locked(False):
            return self._read()

    def init(self, state):
        # type: (State) -> State
        """Write ``state`` unless a state exists already; returns the state in force."""
        with self._locked(True):
            if os.path.exists(self.path):
                return self._read()
            self._write(state)
            return state

    @contextlib.contextmanager
    def transaction(self):
        # type: () -> Iterator[Dict[str, Any]]
        """Read-modify-write under the exclusive lock; written back only if the block succeeds."""
        with self._locked(True):
            state = self._read()
            yield state
            self._write(state)
