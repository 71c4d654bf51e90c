"""One apply at a time per node: an flock on a lock file, waited for with a timeout.

The kernel drops the lock when the holder dies, so a killed run never leaves the node locked. ``report-holders``
takes it too, without waiting (timeout 0), for each round from its GPU read to its write: a report read before
an apply's change can then never land after the apply's own.
"""

import fcntl
import os
import stat
import time
from typing import Optional

from ..errors import Locked, NodeFailure, one_line
from ..localfile import describe, make_dirs

DEFAULT_LOCK_FILE = "/run/ack-mig-hook.lock" if os.path.isdir("/run") else "/var/run/ack-mig-hook.lock"


class NodeLock(object):
    def __init__(self, path, timeout=900.0, poll=0.1):
        # type: (str, float, float) -> None
        self.path = path
        self.timeout = timeout
        self.poll = poll
        self._fd = None  # type: Optional[int]
        self.waited = 0.0

    def __enter__(self):
        # type: () -> NodeLock
        # 0755 at most whatever the umask: in a directory others may write, anyone could remove the lock file
        # while one run holds it, and the next run would lock a new file and change the same GPUs at once
        make_dirs(os.path.dirname(os.path.abspath(self.path)), 0o755)
        fd = self._open()
        start = time.time()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError):
                if time.time() - start >= self.timeout:
                    os.close(fd)
                    raise Locked("another node command (apply, disable or a holders report) holds %s for more than %ds"
                                 % (self.path, self.timeout))
                time.sleep(self.poll)
        self.waited = time.time() - start
        os.ftruncate(fd, 0)
        os.write(fd, ("%d\n" % os.getpid()).encode())
        self._fd = fd
        return self

    def _open(self):
        # type: () -> int
        """The lock file, a regular file of its own. Opened through a symbolic link, the PID written below
        truncated whatever file the link named (run as root: any file); a FIFO or a directory there was an
        internal error, the FIFO's not even naming the file. The link is not followed, nor replaced: a second
        run must lock the same file as the first, so it is named, with what to do."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) |
                         getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0), 0o600)
        except (IOError, OSError) as exc:
            mode = os.lstat(self.path).st_mode if os.path.lexists(self.path) else None
            raise self._unusable(describe(mode) if mode is not None and not stat.S_ISREG(mode) else
                                 one_line(exc.strerror or exc))
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise self._unusable(describe(mode))
        return fd

    def _unusable(self, what):
        # type: (str) -> NodeFailure
        return NodeFailure("cannot use the lock file %s: %s, not a regular file; remove it or pass --lock-file"
                           % (self.path, what), code="lock-unusable")

    def __exit__(self, *exc):
        # type: (object) -> None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
