"""The systemd unit that re-applies the layout at every boot, before the kubelet and the device plugin.

GPU and compute instances never survive a reboot, and Hopper-class GPUs can come back with MIG mode off,
so the unit runs a full ``apply`` (mode and instances) from a request file. The label value travels in
that JSON file, never in the unit's command line. At boot the kubelet is not running yet: the unit
skips the device plugin restart and the capacity wait (the plugin enumerates fresh when it starts).

The boot path is the run path. Run from a bundle, the unit runs that bundle's own runner exactly as delivery
does (``host/unitfile.py``: the node directory check, the bundle's SHA-256 and contents checked before
anything of it runs, a failed check ends the unit with ``bundle-missing`` and runs nothing); otherwise
``python -B -m node_bootstrap`` with ``PYTHONPATH`` the directory that holds the package.

For a per-GPU request (an auto pool) with Kubernetes access, the units that keep the holders report fresh
come with it (``host/holdersunit.py``); any other request removes them.

Installing twice with the same request changes nothing (no rewrite, no daemon-reload). :func:`uninstall`
disables and removes the unit, its request file and the holders units; with nothing left to remove it runs
no command.
"""

import os
import shlex
import stat
import sys
import typing
from typing import Callable, List, Optional, Tuple

from ..errors import NodeFailure
from ..mig import PartitionSpec
from ..request import GpuLayouts, request_document
from . import holdersunit
from .runner import last_line
from .unitfile import (BUNDLE_ENV, RUNNER_NAME, BundleOrigin, bundle_origin, check_values,  # noqa: F401 - re-exported
                       package_parent, quote, read_text, runner_argv, write_if_changed)

UNIT_NAME = "ack-mig-hook.service"
UNIT_DIR = "/etc/systemd/system"
CONFIG_DIR = "/etc/ack-mig-hook"
REQUEST_NAME = "request.json"
ENABLE_PENDING_NAME = "enable-pending"  # beside the request: the unit's enable is owed (see install)
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


class BootUnitResult(typing.NamedTuple):
    unit_path: str
    request_path: str
    changed: bool
    commands: List[List[str]]
    errors: List[str]  # systemctl commands that failed, or the marker that could not be removed; one line each
    holders_units: Tuple[str, ...] = ()  # the holders units' files now there (install) or removed (uninstall)


def apply_args(request_path, extra_args):
    # type: (str, List[str]) -> List[str]
    """node_bootstrap's arguments at boot: a full apply from the request file, no kubelet yet."""
    return ["apply", "--request-file", request_path, "--json", "--device-plugin-restart", "none",
            "--capacity-timeout", "0", "--lock-timeout", str(LOCK_TIMEOUT_S), "--at-boot"] + list(extra_args)


def exec_argv(python, package_dir, request_path, extra_args, bundle=None):
    # type: (str, str, str, List[str], Optional[BundleOrigin]) -> List[str]
    """What ExecStart runs: the bundle's runner (``unitfile.runner_argv``), or node_bootstrap itself, from
    ``package_dir`` on PYTHONPATH."""
    args = apply_args(request_path, extra_args)
    if bundle is None:
        return [python, "-B", "-m", "node_bootstrap"] + args
    return runner_argv(python, bundle, args, BOOT_DEADLINE_S, BOOT_GRACE_S)


def render_unit(python, package_dir, request_path, extra_args, bundle=None):
    # type: (str, str, str, List[str], Optional[BundleOrigin]) -> str
    """The unit; ``bundle`` (run from one) makes ExecStart the runner's, and there is no PYTHONPATH."""
    check_values([python, package_dir, request_path] + list(extra_args) +
                 ([bundle.root, bundle.digest] if bundle else []))
    argv = exec_argv(python, package_dir, request_path, extra_args, bundle)
    if bundle is None:
        environment = ["Environment=PYTHONPATH=%s" % quote(package_dir, exec_line=False)]
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
        "ExecStart=%s" % " ".join(quote(a) for a in argv),
        "TimeoutStartSec=%d" % START_TIMEOUT_S,
        "",
        "[Install]",
        "WantedBy=multi-user.target kubelet.service",
        "",
    ])


def _unit_path(root, name):
    # type: (str, str) -> str
    return os.path.join(root, UNIT_DIR.lstrip("/"), name)


def _differs(path, text):
    # type: (str, str) -> bool
    """Whether ``write_if_changed(path, text)`` would write (the file is missing, unreadable or other)."""
    return read_text(path) != text


def _caller(runner, commands, errors):
    # type: (Optional[Callable[[List[str]], Tuple[int, str]]], List[List[str]], List[str]) -> Callable[[List[str]], None]
    def call(argv):
        # type: (List[str]) -> None
        if runner is None:
            return
        commands.append(argv)
        code, output = runner(argv)
        if code != 0:
            errors.append("%s exited %d: %s" % (" ".join(argv[:2]), code, last_line(output)))

    return call


def _remove_holders_units(root, call):
    # type: (str, Callable[[List[str]], None]) -> Tuple[str, ...]
    """Stop, disable and remove the holders units under ``root``; the paths removed."""
    present = [n for n in holdersunit.NAMES if os.path.lexists(_unit_path(root, n))]
    for argv in holdersunit.remove_commands(root, present):
        call(argv)
    for name in present:
        os.remove(_unit_path(root, name))
    return tuple(_unit_path(root, n) for n in present)


def _clear_marker(pending, errors):
    # type: (str, List[str]) -> None
    """Remove the enable-pending marker once nothing is owed; what stops that goes to ``errors``, one line.

    A directory there (made by hand, or left by someone else writing under /etc) is no marker of ours, yet it
    was read as one (present: the calls are owed, and were made). os.remove could never take it, so every
    install raised and the unit was never installed again: an empty one is removed as the marker would be; one
    with files in it is someone's, left as it is and named, with what to do."""
    if not os.path.lexists(pending):
        return
    try:
        if os.path.isdir(pending) and not os.path.islink(pending):
            os.rmdir(pending)
        else:
            os.remove(pending)
    except OSError as exc:
        errors.append("the enable-pending marker %s is not ack-mig-hook's and cannot be removed (%s): remove it "
                      "(rm -r %s); until then every install calls systemctl again" % (
                          pending, exc.strerror or exc, pending))


def check_config_dir(path, request, log, repair):
    # type: (str, str, Callable[[str], None], bool) -> None
    """The boot unit's directory (``/etc/ack-mig-hook``) and its request file checked before either is used: the
    unit applies that request as root at every boot. Owned by another user the directory is refused, always:
    not this tool's to take over. ``repair`` (install, about to write the request): a directory others may write
    (an older run's 0777, its directories followed the umask) is made go-w, and a request file others could
    write, another user owns, or a link is removed so install writes it anew. Without it (the boot run, about
    to read the request) either is refused: what the request says may be anybody's, and a directory the run
    was merely pointed at (``--request-file``) is not its to chmod."""
    try:
        info = os.lstat(path)
        where = path
        # A link (a node image keeping its configuration on another disk): the request is read and written
        # through it, so what it links to is judged as the directory, and the link itself must be this user's.
        if stat.S_ISLNK(info.st_mode) and info.st_uid == os.geteuid():
            where = "%s (a symbolic link to %s)" % (path, os.path.realpath(path))
            info = os.stat(path)
    except OSError:
        return  # install: made 0755 by the first write; the boot run: the read names it (a dangling link too)
    if not stat.S_ISDIR(info.st_mode) and not stat.S_ISLNK(info.st_mode):
        return  # a file where the directory goes: the write (or the read) names it
    if info.st_uid != os.geteuid():
        raise NodeFailure("the boot unit's directory %s is owned by uid %d, not this user (uid %d): the boot unit "
                          "applies the request in it as root, so it must be this user's alone; check what is in "
                          "it, then chown it, or uninstall-boot-unit and remove it"
                          % (where, info.st_uid, os.geteuid()), code="config-dir-unsafe")
    said = []  # type: List[str]
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        if not repair:
            raise NodeFailure("the boot unit's directory %s is writable by others (mode %04o): the request in it, "
                              "applied as root, may be anybody's; nothing was applied; check what is in it, then "
                              "chmod go-w it and run install-boot-unit again (it writes the request anew)"
                              % (where, mode), code="config-dir-unsafe")
        os.chmod(path, mode & ~(stat.S_IWGRP | stat.S_IWOTH))  # a link's: what it links to
        said.append("%s was writable by others (mode %04o): made %04o" % (
            where, mode, mode & ~(stat.S_IWGRP | stat.S_IWOTH)))
    try:
        held = os.lstat(request)
    except OSError:
        held = None
    if held is not None and (held.st_uid != os.geteuid() or held.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                             or stat.S_ISLNK(held.st_mode)):
        if not repair:
            why = "a symbolic link" if stat.S_ISLNK(held.st_mode) else \
                "owned by uid %d" % held.st_uid if held.st_uid != os.geteuid() else \
                "writable by others (mode %04o)" % stat.S_IMODE(held.st_mode)
            raise NodeFailure("the boot unit's request %s is %s: what it says, applied as root, may be anybody's; "
                              "nothing was applied; check it, then run install-boot-unit again (it writes the "
                              "request anew)" % (request, why), code="config-dir-unsafe")
        os.remove(request)  # what it says may be anybody's: written anew below
        said.append("a file in it others could write is written anew (%s)" % request)
    if said:
        log("; ".join(said))


def _stderr(message):
    # type: (str) -> None
    sys.stderr.write("node_bootstrap: %s\n" % message)
    sys.stderr.flush()


def install(spec, root="/", extra_args=None, runner=None, python=None, package_dir=None, report=None):
    # type: (PartitionSpec, str, Optional[List[str]], Optional[Callable[[List[str]], Tuple[int, str]]], Optional[str], Optional[str], Optional[holdersunit.Report]) -> BootUnitResult
    """Write the request file and the unit under ``root``; reload and enable systemd only on change.

    The unit runs what runs this: the checked bundle through its runner, or (not from a bundle, or
    ``package_dir`` given) node_bootstrap from ``package_dir``, by default the directory holding it.
    ``report`` (the holders report's options; None without Kubernetes access) with a per-GPU request adds
    the holders units, enabled and started; otherwise any that are there are stopped and removed."""
    python = python or sys.executable or "/usr/bin/python3"
    bundle = bundle_origin() if package_dir is None else None
    package_dir = package_dir or package_parent()
    request_path = os.path.join(CONFIG_DIR, REQUEST_NAME)
    unit_text = render_unit(python, package_dir, request_path, extra_args or [], bundle)
    wanted = holdersunit.files(python, package_dir, report, bundle) \
        if report is not None and isinstance(spec, GpuLayouts) else None
    on_disk_request = os.path.join(root, request_path.lstrip("/"))
    on_disk_unit = _unit_path(root, UNIT_NAME)
    commands = []  # type: List[List[str]]
    errors = []  # type: List[str]
    call = _caller(runner, commands, errors)
    live = os.path.abspath(root) == "/"
    # What systemd must be told after a change (reload, enable, the holders units' enable) is owed from the
    # first file changed until every such call has succeeded: the marker beside the request is written
    # before that first change and removed only then. A run killed anywhere in between (after a unit file,
    # before its reload or enable), or a systemctl that failed, leaves it, and the next install, finding its
    # files unchanged, still makes those calls. Without it every rerun found nothing changed, called no
    # systemctl and said "installed" of a unit that never ran at boot.
    pending = os.path.join(root, CONFIG_DIR.lstrip("/"), ENABLE_PENDING_NAME)
    check_config_dir(os.path.dirname(on_disk_request), on_disk_request, _stderr, repair=True)
    owed = os.path.lexists(pending)
    changing = _differs(on_disk_request, request_document(spec)) or _differs(on_disk_unit, unit_text) or \
        any(_differs(_unit_path(root, n), t) for n, t in (wanted or {}).items()) or \
        (wanted is None and any(os.path.lexists(_unit_path(root, n)) for n in holdersunit.NAMES))
    if changing and not owed:  # whatever is there already says so (a directory could not be replaced)
        write_if_changed(pending, UNIT_NAME + "\n", 0o600)
    removed = () if wanted is not None else _remove_holders_units(root, call)  # type: Tuple[str, ...]
    boot_changed = write_if_changed(on_disk_request, request_document(spec), 0o600)
    boot_changed = write_if_changed(on_disk_unit, unit_text) or boot_changed
    holders_changed = False
    for name, text in sorted((wanted or {}).items()):
        holders_changed = write_if_changed(_unit_path(root, name), text) or holders_changed
    if live and (boot_changed or holders_changed or removed or owed):
        call(["systemctl", "daemon-reload"])
    if boot_changed or owed:
        call(["systemctl", "enable", UNIT_NAME] if live else
             ["systemctl", "--root", os.path.abspath(root), "enable", UNIT_NAME])  # an image: offline
        boot_changed = True
    if wanted and (holders_changed or owed):
        for argv in holdersunit.install_commands(root):
            call(argv)
        holders_changed = True
    if (changing or owed) and not errors:
        _clear_marker(pending, errors)
    there = tuple(_unit_path(root, n) for n in sorted(wanted or {}))
    return BootUnitResult(on_disk_unit, on_disk_request, boot_changed or holders_changed or bool(removed),
                          commands, errors, there)


def stale(spec, root="/"):
    # type: (PartitionSpec, str) -> str
    """Why the boot unit under ``root`` would undo ``spec`` at the next boot ("" when it would not): it is
    there, and its request file holds another request (or cannot be read). An apply without --boot-unit
    leaves the unit as it is; this says so, so the layout applied by hand is not lost at a reboot unseen."""
    on_disk_unit = _unit_path(root, UNIT_NAME)
    if not os.path.lexists(on_disk_unit):
        return ""
    on_disk_request = os.path.join(root, CONFIG_DIR.lstrip("/"), REQUEST_NAME)
    held = read_text(on_disk_request)
    if held == request_document(spec):
        return ""
    return ("the boot unit %s from an earlier apply re-applies %s at every boot, not this request: pass "
            "--boot-unit to make it this one, or run uninstall-boot-unit" % (
                UNIT_NAME, "another request (%s)" % on_disk_request if held is not None else
                "a request file that cannot be read (%s)" % on_disk_request))


def uninstall(root="/", runner=None):
    # type: (str, Optional[Callable[[List[str]], Tuple[int, str]]]) -> BootUnitResult
    """Disable the unit, remove it, its request file and the holders units under ``root``; ``changed`` when
    anything was there.

    The files go even when ``systemctl disable`` fails (reported in ``errors``): a unit file that is gone
    can no longer run at boot, while a dangling wants-link is only ignored by systemd.
    """
    on_disk_request = os.path.join(root, CONFIG_DIR.lstrip("/"), REQUEST_NAME)
    on_disk_unit = _unit_path(root, UNIT_NAME)
    pending = os.path.join(root, CONFIG_DIR.lstrip("/"), ENABLE_PENDING_NAME)
    present = [p for p in (on_disk_unit, on_disk_request, pending) if os.path.lexists(p)]
    commands = []  # type: List[List[str]]
    errors = []  # type: List[str]
    call = _caller(runner, commands, errors)
    live = os.path.abspath(root) == "/"
    removed = _remove_holders_units(root, call)  # first: no report written after the GPUs are turned off
    if os.path.lexists(on_disk_unit):  # the wants-links of WantedBy= first, while the unit file still says which
        call(["systemctl", "disable", UNIT_NAME] if live else
             ["systemctl", "--root", os.path.abspath(root), "disable", UNIT_NAME])
    for path in present:
        if path == pending:
            _clear_marker(pending, errors)
        else:
            os.remove(path)
    try:
        os.rmdir(os.path.dirname(on_disk_request))  # only when empty: someone else's files stay
    except OSError:
        pass
    if (present or removed) and live:
        call(["systemctl", "daemon-reload"])
    return BootUnitResult(on_disk_unit, on_disk_request, bool(present or removed), commands, errors, removed)
