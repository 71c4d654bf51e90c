"""Small JSON state files the node tool keeps (stopped clients, the reboot record, the simulated node's
stand-ins): read as "nothing" when missing or unreadable, written whole or not at all."""

import json
import os
import stat
import typing
from typing import Any, Optional

from ..localfile import make_dirs, read_file
from ..outside import OutsideDataError, loads

MAX_STATE_BYTES = 1 << 20  # a record of a few clients or GPUs: far below this


def read_json(path):
    # type: (str) -> Any
    """The document, or None when the file is missing, no regular file, or does not pass the reader rule
    (outside.py)."""
    try:
        return loads(read_file(path, MAX_STATE_BYTES), path, MAX_STATE_BYTES)  # a FIFO: None, not a wait
    except (IOError, OSError, OutsideDataError):
        return None


def open_new(path, mode=None):
    # type: (str, Optional[int]) -> typing.TextIO
    """``path`` created anew for writing: whatever was there (a killed run's leftover) is removed first, so a
    FIFO there cannot block the write and a symlink is not written through. ``mode``: the file's mode from
    its creation on (a chmod after the write left it readable as the umask allowed until then); None: 0666
    less the umask."""
    if os.path.lexists(path):
        os.remove(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask took away
        return os.fdopen(fd, "w")
    except BaseException:
        os.close(fd)
        raise


def write_json(path, doc, **dump_args):
    # type: (str, Any, Any) -> None
    """Write next to the file, fsync, then rename over it: a crash or a reboot right after leaves the old
    file or the new one, never half of one."""
    directory = os.path.dirname(path)
    if directory:
        make_dirs(directory, 0o700)  # a state directory: never writable by others, whatever the umask
    tmp = path + ".tmp"
    with open_new(tmp) as fh:
        # never writable by others, whatever the umask: a record others could write is refused by the next run
        # (clients.check_state_dir), since what it says may be anybody's
        os.fchmod(fh.fileno(), stat.S_IMODE(os.fstat(fh.fileno()).st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
        json.dump(doc, fh, **dump_args)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)
