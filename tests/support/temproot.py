"""A temporary directory the node runner trusts, for the tests and the benchmarks alike.

The node runner refuses a node directory with a group- or world-writable directory above it (sshd's
StrictModes rule, functions/delivery/node_runner.py), and /tmp is world-writable: every temporary file (tmp_path,
tempfile, and the subprocesses started, through TMPDIR) lives under the repository's own ``.pytest-tmp``
instead (mode 0700). A checkout inside a directory others can write to fails the runner, naming it.
"""

import os
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def use_private_tmp() -> str:
    """Point TMPDIR (and ``tempfile``) at ``<repository>/.pytest-tmp``, made 0700 when missing; returns it."""
    path = os.path.join(ROOT, ".pytest-tmp")
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.environ["TMPDIR"] = path
    tempfile.tempdir = None  # computed again from TMPDIR
    return path
