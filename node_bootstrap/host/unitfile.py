"""What every systemd unit of ours shares: the checked bundle it runs from, systemd's quoting, the refusal
of control characters, and files rewritten only when their text changes.

A unit runs what runs this package. Run from a bundle (the node runner says so in ``ACK_MIG_BUNDLE_DIR``),
it runs that bundle's own copy of the runner, ``ack_mig_runner.py``, exactly as delivery does: the node
directory check, the bundle's SHA-256 and contents checked before anything of it runs, no bytecode written,
a deadline on node_bootstrap's process group, one JSON line (:func:`runner_argv`). Not run from a bundle (a
developer's install) it runs ``python -B -m node_bootstrap`` with ``PYTHONPATH`` the directory that holds
the package.
"""

import base64
import json
import os
import re
import typing
import zlib
from typing import List, Optional

from ..errors import BadInput
from ..localfile import make_dirs, read_file
from .jsonfile import open_new

# Written by the node runner (functions/delivery/node_runner.py) into node_bootstrap's environment: the
# bundle directory it has just checked, ROOT/bundles/HASH. The runner is that bundle's top-level member.
BUNDLE_ENV = "ACK_MIG_BUNDLE_DIR"
RUNNER_NAME = "ack_mig_runner.py"
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
# the runner's NAMES_Z argument with no names: the unit's --node-name, if any, is among its own options
_NO_NAMES = base64.b64encode(zlib.compress(b"{}", 9)).decode("ascii")


class BundleOrigin(typing.NamedTuple):
    root: str  # the node directory (symbolic links resolved, as the runner checked it)
    digest: str  # the bundle hash

    @property
    def directory(self):
        # type: () -> str
        return os.path.join(self.root, "bundles", self.digest)


def package_parent():
    # type: () -> str
    """The directory that holds the ``node_bootstrap`` package: what ``PYTHONPATH`` must name."""
    here = os.path.abspath(__file__)  # <parent>/node_bootstrap/host/unitfile.py
    return os.path.dirname(os.path.dirname(os.path.dirname(here)))


def bundle_origin(environ=None, parent=None):
    # type: (Optional[typing.Mapping[str, str]], Optional[str]) -> Optional[BundleOrigin]
    """The checked bundle this node_bootstrap runs from, or None (not started by the runner, or the
    runner's word does not match where this package really is: then the unit is a plain one)."""
    environ = os.environ if environ is None else environ
    claimed = environ.get(BUNDLE_ENV, "")
    if not claimed or not os.path.isabs(claimed):
        return None
    real = os.path.realpath(claimed)
    bundles, digest = os.path.split(real)
    if not _HEX64.match(digest) or os.path.basename(bundles) != "bundles":
        return None
    if os.path.realpath(parent or package_parent()) != real or not os.path.isfile(os.path.join(real, RUNNER_NAME)):
        return None
    return BundleOrigin(os.path.dirname(bundles), digest)


def runner_argv(python, bundle, args, deadline, grace):
    # type: (str, BundleOrigin, List[str], int, int) -> List[str]
    """The bundle's runner running node_bootstrap ``args``, with the arguments delivery gives it
    (``HASH ROOT ARGS_B64 DEADLINE PYTHON INSTANCE NAMES GRACE``; ARGS_B64 the base64 JSON list, no
    instance id, no names). ``-I`` keeps the bundle directory off ``sys.path`` while the runner itself starts
    (a planted ``json.py`` next to it would otherwise run before the check)."""
    encoded = base64.b64encode(json.dumps(args).encode("utf-8")).decode("ascii")
    return [python, "-B", "-I", os.path.join(bundle.directory, RUNNER_NAME), bundle.digest, bundle.root,
            encoded, str(deadline), python, "-", _NO_NAMES, str(grace)]


def quote(arg, exec_line=True):
    # type: (str, bool) -> str
    """systemd quoting (not a shell): double quotes, backslash escapes, % doubled, and in ExecStart $ doubled.

    systemd expands %specifiers everywhere, and $VAR / ${VAR} in ExecStart even inside quotes; doubling
    passes them through literally (a state dir or kubeconfig path holding "$" must reach us as written).
    Environment= does no $ expansion, so there a doubled $ would stay doubled.
    """
    if arg and all(c.isalnum() or c in "/._-:=,@" for c in arg):
        return arg.replace("%", "%%")
    quoted = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return '"%s"' % (quoted.replace("$", "$$") if exec_line else quoted)


def check_values(values, what="boot unit option"):
    # type: (List[str], str) -> None
    """Refuse control characters in anything written into the unit.

    systemd reads a unit line by line; a newline inside a quoted value still ends the line, so a
    ``--kubeconfig`` of "x\nExecStart=/bin/sh ..." would add a command of its own. No escaping makes a
    control character safe in every systemd version, and no path or unit name needs one."""
    for value in values:
        bad = [c for c in value if ord(c) < 0x20 or ord(c) == 0x7f]
        if bad:
            raise BadInput("%s %r holds a control character (%r); use a value without newlines, tabs or other "
                           "control characters" % (what, value[:60], bad[0]))


MAX_UNIT_FILE_BYTES = 1 << 20  # a unit file or a request file of ours: a few KB


def read_text(path):
    # type: (str) -> Optional[str]
    """The text of the regular file at ``path``; None when it is missing, unreadable, not UTF-8, larger than
    any file of ours, or no regular file (a FIFO there would block the open until someone wrote to it)."""
    try:
        data = read_file(path, MAX_UNIT_FILE_BYTES)
        return data.decode("utf-8") if len(data) <= MAX_UNIT_FILE_BYTES else None
    except (IOError, OSError, UnicodeDecodeError):
        return None


def write_if_changed(path, text, mode=0o644):
    # type: (str, str, int) -> bool
    if read_text(path) == text:
        return False
    directory = os.path.dirname(path)
    make_dirs(directory, 0o755)  # never writable by others: the boot unit applies what is here as root
    tmp = path + ".tmp"
    with open_new(tmp, mode) as fh:
        fh.write(text)
        # on disk before the rename, as jsonfile.write_json: the request file is written just before a reboot
        # a reboot-required apply asks for, and a power loss must leave the old file or the new, never half
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)
    return True
