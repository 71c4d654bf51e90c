"""One apply at a time per node: an flock on a lock file, waited for with a timeout.

The kernel drops the lock when the holder dies, so a killed run never leaves the node locked.
"""

import fcntl
import os
import time
from typing import Optional

from ..errors import NodeFailure

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
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            os.makedirs(directory)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        start = time.time()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError):
                if time.time() - start >= self.timeout:
                    os.close(fd)
                    raise NodeFailure("another apply holds %s for more than %ds" % (self.path, self.timeout),
                                      code="locked")
                time.sleep(self.poll)
        self.waited = time.time() - start
        os.ftruncate(fd, 0)
        os.write(fd, ("%d\n" % os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc):
        # type: (object) -> None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
