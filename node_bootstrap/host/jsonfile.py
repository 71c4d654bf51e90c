"""Small JSON state files the node tool keeps (stopped clients, the reboot record, the simulated node's
stand-ins): read as "nothing" when missing or unreadable, written whole or not at all."""

import json
import os
from typing import Any

from ..outside import OutsideDataError, loads

MAX_STATE_BYTES = 1 << 20  # a record of a few clients or GPUs: far below this


def read_json(path):
    # type: (str) -> Any
    """The document, or None when the file is missing or does not pass the reader rule (outside.py)."""
    try:
        with open(path, "rb") as fh:
            return loads(fh.read(MAX_STATE_BYTES + 1), path, MAX_STATE_BYTES)
    except (IOError, OSError, OutsideDataError):
        return None


def write_json(path, doc, **dump_args):
    # type: (str, Any, Any) -> None
    """Write next to the file, fsync, then rename over it: a crash or a reboot right after leaves the old
    file or the new one, never half of one."""
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, **dump_args)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)
