"""The systemd unit that re-applies the layout at every boot, before the kubelet and the device plugin.

GPU and compute instances never survive a reboot, and Hopper-class GPUs can come back with MIG mode off,
so the unit runs a full ``apply`` (mode and instances) from a request file. The label value travels in
that JSON file, never in the unit's command line. At boot the kubelet is not running yet: the unit
skips the device plugin restart and the capacity wait (the plugin enumerates fresh when it starts).

Installing twice with the same request changes nothing (no rewrite, no daemon-reload). :func:`uninstall`
disables and removes the unit and its request file; with nothing left to remove it runs no command.
"""

import os
import sys
import typing
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


def render_unit(python, package_dir, request_path, extra_args):
    # type: (str, str, str, List[str]) -> str
    check_values([python, package_dir, request_path] + list(extra_args))
    argv = [python, "-m", "node_bootstrap", "apply", "--request-file", request_path, "--json",
            "--device-plugin-restart", "none", "--capacity-timeout", "0",
            "--lock-timeout", str(LOCK_TIMEOUT_S)] + list(extra_args)
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
        "Environment=PYTHONPATH=%s" % _quote(package_dir, exec_line=False),
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
    """Write the request file and the unit under ``root``; reload and enable systemd only on change."""
    python = python or sys.executable or "/usr/bin/python3"
    package_dir = package_dir or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    request_path = os.path.join(CONFIG_DIR, REQUEST_NAME)
    unit_text = render_unit(python, package_dir, request_path, extra_args or [])
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
