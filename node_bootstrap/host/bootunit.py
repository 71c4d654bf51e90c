"""The systemd unit that re-applies the layout at every boot, before the kubelet and the device plugin.

GPU and compute instances never survive a reboot, and Hopper-class GPUs can come back with MIG mode off,
so the unit runs a full ``apply`` (mode and instances) from a request file. The label value travels in
that JSON file, never in the unit's command line. At boot the kubelet is not running yet: the unit
skips the device plugin restart and the capacity wait (the plugin enumerates fresh when it starts).

The boot path is the run path. Run from a bundle (the node runner says so in ``ACK_MIG_BUNDLE_DIR``), the
unit runs that bundle's own copy of the runner, ``ack_mig_runner.py``, exactly as delivery does: the
node directory check, the bundle's SHA-256 and contents checked before anything of it runs (a failed check
ends the unit with ``bundle-missing`` and runs nothing), no bytecode written, a deadline on node_bootstrap's
process group, one JSON line. ``-I`` keeps the bundle directory off ``sys.path`` while the runner itself
starts (a planted ``json.py`` next to it would otherwise run before the check). Not run from a bundle (a
developer's install) the unit runs ``python -B -m node_bootstrap`` with ``PYTHONPATH`` the directory that
holds the package.

Installing twice with the same request changes nothing (no rewrite, no daemon-reload). :func:`uninstall`
disables and removes the unit and its request file; with nothing left to remove it runs no command.
"""

import base64
import json
import os
import re
import shlex
import sys
import typing
import zlib
from typing import Callable, List, Optional, Tuple

from ..errors import BadInput
from ..mig import PartitionSpec
from ..request import request_document
from .runner import last_line

UNIT_NAME = "ack-mig-hook.service"
UNIT_DIR = "/etc/systemd/system"
CONFIG_DIR = "/etc/ack-mig-hook"
REQUEST_NAME = "request.json"
# systemd sends SIGTERM when TimeoutStartSec passes; apply then restarts clients and labels the node.
# The lock wait is kept well under it so that a wait for another apply ends in its own clear "locked"
# failure, with time left for the apply itself (client stop wait 60 s, a reset up to 300 s).
START_TIMEOUT_S = 900
LOCK_TIMEOUT_S = 480
# The runner's own deadline at boot: SIGTERM to apply's group, GRACE_S later SIGKILL, then at most twice
# its 5 s pipe drain; all of it ends before systemd's TimeoutStartSec (860 + 15 + 10 < 900), and the lock
# wait, a client stop and a reset (480 + 60 + 300) fit before it.
BOOT_DEADLINE_S = 860
BOOT_GRACE_S = 15

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
    here = os.path.abspath(__file__)  # <parent>/node_bootstrap/host/bootunit.py
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


class BootUnitResult(typing.NamedTuple):
    unit_path: str
    request_path: str
    changed: bool
    commands: List[List[str]]
    errors: List[str]  # systemctl commands that failed, one line each


def _quote(arg, exec_line=True):
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


def apply_args(request_path, extra_args):
    # type: (str, List[str]) -> List[str]
    """node_bootstrap's arguments at boot: a full apply from the request file, no kubelet yet."""
    return ["apply", "--request-file", request_path, "--json", "--device-plugin-restart", "none",
            "--capacity-timeout", "0", "--lock-timeout", str(LOCK_TIMEOUT_S)] + list(extra_args)


def exec_argv(python, package_dir, request_path, extra_args, bundle=None):
    # type: (str, str, str, List[str], Optional[BundleOrigin]) -> List[str]
    """What ExecStart runs. From a bundle: the bundle's runner, with the arguments delivery gives it
    (``HASH ROOT ARGS_B64 DEADLINE PYTHON INSTANCE NAMES GRACE``; ARGS_B64 the base64 JSON list, no
    instance id, no names). Otherwise node_bootstrap itself, from ``package_dir`` on PYTHONPATH."""
    args = apply_args(request_path, extra_args)
    if bundle is None:
        return [python, "-B", "-m", "node_bootstrap"] + args
    encoded = base64.b64encode(json.dumps(args).encode("utf-8")).decode("ascii")
    return [python, "-B", "-I", os.path.join(bundle.directory, RUNNER_NAME), bundle.digest, bundle.root,
            encoded, str(BOOT_DEADLINE_S), python, "-", _NO_NAMES, str(BOOT_GRACE_S)]


def render_unit(python, package_dir, request_path, extra_args, bundle=None):
    # type: (str, str, str, List[str], Optional[BundleOrigin]) -> str
    """The unit; ``bundle`` (run from one) makes ExecStart the runner's, and there is no PYTHONPATH."""
    check_values([python, package_dir, request_path] + list(extra_args) +
                 ([bundle.root, bundle.digest] if bundle else []))
    argv = exec_argv(python, package_dir, request_path, extra_args, bundle)
    if bundle is None:
        environment = ["Environment=PYTHONPATH=%s" % _quote(package_dir, exec_line=False)]
    else:  # the runner sets node_bootstrap's PYTHONPATH itself, to the bundle it has just checked
        environment = ["# The bundle's runner checks it (SHA-256, contents) before it runs node_bootstrap with:",
                       "#   node_bootstrap " + " ".join(shlex.quote(a) for a in apply_args(request_path, extra_args))]
    return "\n".join([
        "# Written by ack-mig-hook (node_bootstrap install-boot-unit); reinstalling replaces it.",
        "[Unit]",
        "Description=Re-apply the NVIDIA MIG layout of this node pool (ack-mig-hook)",
        "# Instances never survive a reboot: recreate them before anything uses the GPUs.",
        # After= only orders units that are part of the boot: absent ones are ignored, present ones run
        # first. The fabric manager must have trained NVSwitch systems and persistenced must hold the
        # GPUs initialised before MIG mode is set (NVIDIA's nvidia-mig-manager.service does the same:
        # After=nvidia-persistenced.service nvidia-fabricmanager.service).
        "After=systemd-modules-load.service nvidia-persistenced.service nvidia-fabricmanager.service "
        "network-online.target",
        "Wants=network-online.target",
        "Before=kubelet.service containerd.service docker.service dcgm-exporter.service nvidia-dcgm.service",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
    ] + environment + [
        "ExecStart=%s" % " ".join(_quote(a) for a in argv),
        "TimeoutStartSec=%d" % START_TIMEOUT_S,
        "",
        "[Install]",
        "WantedBy=multi-user.target kubelet.service",
        "",
    ])


def _write_if_changed(path, text, mode=0o644):
    # type: (str, str, int) -> bool
    try:
        with open(path) as fh:
            if fh.read() == text:
                return False
    except (IOError, OSError):
        pass
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.rename(tmp, path)
    return True


def install(spec, root="/", extra_args=None, runner=None, python=None, package_dir=None):
    # type: (PartitionSpec, str, Optional[List[str]], Optional[Callable[[List[str]], Tuple[int, str]]], Optional[str], Optional[str]) -> BootUnitResult
    """Write the request file and the unit under ``root``; reload and enable systemd only on change.

    The unit runs what runs this: the checked bundle through its runner, or (not from a bundle, or
    ``package_dir`` given) node_bootstrap from ``package_dir``, by default the directory holding it."""
    python = python or sys.executable or "/usr/bin/python3"
    bundle = bundle_origin() if package_dir is None else None
    package_dir = package_dir or package_parent()
    request_path = os.path.join(CONFIG_DIR, REQUEST_NAME)
    unit_text = render_unit(python, package_dir, request_path, extra_args or [], bundle)
    on_disk_request = os.path.join(root, request_path.lstrip("/"))
    on_disk_unit = os.path.join(root, UNIT_DIR.lstrip("/"), UNIT_NAME)
    changed = _write_if_changed(on_disk_request, request_document(spec), 0o600)
    changed = _write_if_changed(on_disk_unit, unit_text) or changed
    commands = []  # type: List[List[str]]
    errors = []  # type: List[str]
    if changed and runner is not None:
        if os.path.abspath(root) == "/":
            todo = [["systemctl", "daemon-reload"], ["systemctl", "enable", UNIT_NAME]]
        else:  # an image being prepared: enable offline, nothing to reload
            todo = [["systemctl", "--root", os.path.abspath(root), "enable", UNIT_NAME]]
        for argv in todo:
            commands.append(argv)
            code, output = runner(argv)
            if code != 0:
                errors.append("%s exited %d: %s" % (" ".join(argv[:2]), code, last_line(output)))
    return BootUnitResult(on_disk_unit, on_disk_request, changed, commands, errors)


def uninstall(root="/", runner=None):
    # type: (str, Optional[Callable[[List[str]], Tuple[int, str]]]) -> BootUnitResult
    """Disable the unit, remove it and its request file under ``root``; ``changed`` when anything was there.

    The files go even when ``systemctl disable`` fails (reported in ``errors``): a unit file that is gone
    can no longer run at boot, while a dangling wants-link is only ignored by systemd.
    """
    on_disk_request = os.path.join(root, CONFIG_DIR.lstrip("/"), REQUEST_NAME)
    on_disk_unit = os.path.join(root, UNIT_DIR.lstrip("/"), UNIT_NAME)
    present = [p for p in (on_disk_unit, on_disk_request) if os.path.lexists(p)]
    commands = []  # type: List[List[str]]
    errors = []  # type: List[str]

    def call(argv):
        # type: (List[str]) -> None
        if runner is None:
            return
        commands.append(argv)
        code, output = runner(argv)
        if code != 0:
            errors.append("%s exited %d: %s" % (" ".join(argv[:2]), code, last_line(output)))

    live = os.path.abspath(root) == "/"
    if os.path.lexists(on_disk_unit):  # the wants-links of WantedBy= first, while the unit file still says which
        call(["systemctl", "disable", UNIT_NAME] if live else
             ["systemctl", "--root", os.path.abspath(root), "disable", UNIT_NAME])
    for path in present:
        os.remove(path)
    try:
        os.rmdir(os.path.dirname(on_disk_request))  # only when empty: someone else's files stay
    except OSError:
        pass
    if present and live:
        call(["systemctl", "daemon-reload"])
    return BootUnitResult(on_disk_unit, on_disk_request, bool(present), commands, errors)
