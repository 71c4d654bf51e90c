"""Files on the node's own disk, read under the reader rule (outside.py, which stays pure: this is its file
side). A state file (the clients records, the reboot record, kubelet's device checkpoint, the boot unit's
request and unit files) is read only when it is a regular file."""

import errno
import os
import stat
from typing import List


def describe(mode):
    # type: (int) -> str
    """What a file of ``mode`` (an ``lstat`` or ``fstat`` answer) is, for a message: "a FIFO", "a directory", ..."""
    return "a regular file" if stat.S_ISREG(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
        "a directory" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode) else \
        "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
        else "no regular file"


def make_dirs(path, mode):
    # type: (str, int) -> None
    """``path`` and every missing directory above it, each made ``mode`` at most whatever the umask. Since
    Python 3.7 os.makedirs gives the directories above the last 0777 less the umask: under umask 0 a state or
    config directory (and its parents) was writable by everyone, and what root reads from it anyone's."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path.rstrip(os.sep))
    if parent and parent != path:
        make_dirs(parent, mode)
    try:
        os.mkdir(path, mode)
    except OSError:
        if not os.path.isdir(path):  # made meanwhile by another run: fine; anything else is the error
            raise


def read_file(path, max_bytes):
    # type: (str, int) -> bytes
    """The first ``max_bytes + 1`` bytes of the regular file at ``path`` (a symlink to one is followed): one
    more than a reader takes, so it can say "too large". Anything else raises OSError at once, its
    ``strerror`` saying what it is: a FIFO would block the open until someone writes to it (the node run
    waits for good), and a device such as /dev/zero never ends. Opened without blocking, then checked."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file but %s" % describe(mode), path)
        chunks = []  # type: List[bytes]
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
