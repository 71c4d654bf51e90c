"""A temporary directory the node runner trusts, for the tests and the benchmarks alike, wherever the
repository is cloned.

The node runner refuses a node directory with a group- or world-writable directory above it, or one owned by
another user (sshd's StrictModes rule, functions/delivery/node_runner.py), and /tmp is world-writable. So
every temporary file (tmp_path, tempfile, and the subprocesses started, through TMPDIR) lives in a private
directory (mode 0700) whose whole path passes the runner's own check: the repository's ``.pytest-tmp`` when
the checkout's path passes it, else (a clone under /tmp, say) ``~/.cache/ack-mig-hook-tests/<checkout>-<hash
of its path>``; when neither passes, the run stops with one line naming the paths and why. The runner's rule
itself is never relaxed for the tests.
"""

import hashlib
import os
import tempfile
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _problem(path: str) -> str:
    """Why the runner would refuse a node directory inside ``path`` ("" when it would not): the same check,
    on every directory from / down to ``path`` (node_runner.unsafe)."""
    from functions.delivery.node_runner import unsafe

    real = os.path.realpath(path)
    parts = [p for p in real.split("/") if p]
    for chain in ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]:
        why = unsafe(chain, os.geteuid())
        if why:
            return "%s %s" % (chain, why)
    return ""


def _private(path: str) -> Optional[str]:
    """``path`` made (0700) and returned when the runner would trust it, else None."""
    parent = os.path.dirname(path)
    if _problem(parent):
        return None
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return None if _problem(path) else path


def private_tmp() -> str:
    """The directory (see the module docstring); RuntimeError naming the paths when there is none."""
    inside = _private(os.path.join(ROOT, ".pytest-tmp"))
    if inside:
        return inside
    key = hashlib.sha256(os.path.realpath(ROOT).encode("utf-8")).hexdigest()[:12]
    home = os.path.join(os.path.expanduser("~"), ".cache", "ack-mig-hook-tests")
    if not _problem(os.path.expanduser("~")):
        os.makedirs(home, mode=0o700, exist_ok=True)
        outside = _private(os.path.join(home, "%s-%s" % (os.path.basename(ROOT) or "repo", key)))
        if outside:
            return outside
    raise RuntimeError("no private directory for the tests' node directories: %s, and %s; clone the repository "
                       "below directories only you can write to" % (_problem(ROOT), _problem(os.path.expanduser("~"))
                                                                    or home + " cannot be made private"))


def use_private_tmp() -> str:
    """Point TMPDIR (and ``tempfile``) at :func:`private_tmp`; returns it."""
    path = private_tmp()
    os.environ["TMPDIR"] = path
    tempfile.tempdir = None  # computed again from TMPDIR
    return path
