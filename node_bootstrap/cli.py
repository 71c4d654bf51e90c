"""``python3 -m node_bootstrap``: status, plan, apply, install-boot-unit (and sim-reboot for the simulator).

With ``--json`` the last line of stdout is one JSON object; logs go to stderr. Exit codes: 0 success,
2 bad input, 3 GPU not MIG-capable, 4 GPU busy, 5 reboot required, 1 anything else. Every error is
caught here and shown as one line: the user never sees a traceback.

This module parses, dispatches and prints; the commands are in :mod:`node_bootstrap.commands` and
:mod:`node_bootstrap.apply`.
"""

import argparse
import json
import signal
import sys
from typing import Any, Dict, List, Optional

from . import __version__
from .apply import cmd_apply
from .backend import open_backend
from .clients import DEFAULT_CLIENTS
from .commands import (DEFAULT_CLIENT_STOP_TIMEOUT, DEFAULT_STATE_DIR, cmd_install_boot_unit, cmd_plan,
                       cmd_sim_reboot, cmd_status)
from .deviceplugin import METHODS
from .errors import BadInput, NodeFailure, Terminated
from .holders import DEFAULT_DEVICE_GLOB
from .kube import DEFAULT_KUBELET_KUBECONFIG
from .lock import DEFAULT_LOCK_FILE
from .mig import MigInputError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2 (through BadInput), never argparse's usage dump
        raise BadInput("%s; see --help" % message)


def _add_common(parser, suppress):
    # type: (argparse.ArgumentParser, bool) -> None
    """Global options; on subcommands with SUPPRESS defaults so that they work before or after it."""

    def d(value):
        # type: (Any) -> Any
        return argparse.SUPPRESS if suppress else value

    g = parser.add_argument_group("global options")
    g.add_argument("--backend", default=d("nvml"), help="nvml (default) or sim:<GPU>:<count>")
    g.add_argument("--sim-state", default=d(None), metavar="PATH", help="simulated node state file")
    g.add_argument("--sim-fault", action="append", default=d([]), metavar="KIND", help="inject a simulator fault")
    g.add_argument("--json", action="store_true", default=d(False), help="last stdout line is a JSON result")
    g.add_argument("--no-label", action="store_true", default=d(False),
                   help="no Kubernetes API calls: no labels, no capacity wait, no pod restarts")
    g.add_argument("--kubeconfig", default=d(DEFAULT_KUBELET_KUBECONFIG), metavar="PATH")
    g.add_argument("--node-name", default=d(None), metavar="NAME")
    g.add_argument("--lock-file", default=d(DEFAULT_LOCK_FILE), metavar="PATH")
    g.add_argument("--lock-timeout", type=float, default=d(900.0), metavar="SECONDS")
    g.add_argument("--force", action="store_true", default=d(False), help="kill compute processes in the way")
    g.add_argument("--no-reset", action="store_true", default=d(False),
                   help="never reset a GPU: a pending MIG mode ends in reboot-required")
    g.add_argument("--state-dir", default=d(DEFAULT_STATE_DIR), metavar="PATH")
    g.add_argument("--clients", default=d(",".join(DEFAULT_CLIENTS)), metavar="LIST",
                   help="GPU clients to stop around changes: systemd:UNIT,manifest:/path (empty: none)")
    g.add_argument("--client-stop-timeout", type=float, default=d(DEFAULT_CLIENT_STOP_TIMEOUT), metavar="SECONDS",
                   help="after stopping clients, wait this long for every other holder of a GPU device file to "
                        "let go, else fail gpu-busy naming them (0: do not check)")
    g.add_argument("--gpu-device-glob", default=d(None), metavar="PATTERN",
                   help="the device files that mean 'holds the GPU' (default %s; none on a simulated node)"
                        % DEFAULT_DEVICE_GLOB.replace("%", "%%"))
    g.add_argument("--device-plugin-restart", choices=METHODS, default=d("manifest"))
    g.add_argument("--device-plugin-namespace", default=d("kube-system"))
    g.add_argument("--device-plugin-selector", default=d("app.kubernetes.io/name=nvidia-device-plugin"))
    g.add_argument("--capacity-timeout", type=float, default=d(180.0), metavar="SECONDS",
                   help="wait this long for nvidia.com/mig-* capacity after apply (0: do not wait)")
    g.add_argument("--capacity-interval", type=float, default=d(3.0), metavar="SECONDS")


def _add_request(parser):
    # type: (argparse.ArgumentParser) -> None
    g = parser.add_argument_group("partition (exactly one)")
    g.add_argument("--size", metavar="VALUE", help="one profile, as many as fit: 1g.5gb or 19")
    g.add_argument("--sequence", metavar="VALUE", help="hyphen-joined profiles: 1g.5gb-2g.10gb-3g.20gb or 19-14-9")
    g.add_argument("--request-b64", metavar="B64", help='base64 of {"version": 1, "partition": {"kind", "value"}}')
    g.add_argument("--request-file", metavar="PATH", help="a file holding that JSON document")


def build_parser():
    # type: () -> argparse.ArgumentParser
    parser = _Parser(prog="python3 -m node_bootstrap", description="NVIDIA MIG partitions on this node.")
    parser.add_argument("--version", action="version", version="node_bootstrap %s" % __version__)
    _add_common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, text, request in (
            ("status", "read-only: GPUs, MIG mode, instances, profiles, diagrams", False),
            ("plan", "read-only: what apply would change", True),
            ("apply", "bring the GPUs to the partition, label the node", True),
            ("install-boot-unit", "install the systemd unit that re-applies at boot", True),
            ("sim-reboot", "simulator only: reboot the simulated node", False)):
        sp = sub.add_parser(name, help=text, description=text)
        _add_common(sp, suppress=True)
        if request:
            _add_request(sp)
        if name == "install-boot-unit":
            sp.add_argument("--root", default="/", metavar="DIR", help="install under this root (image builds, tests)")
        if name == "apply":
            sp.add_argument("--boot-unit", action="store_true",
                            help="after success or reboot-required, install the boot unit for this partition "
                                 "(what delivery does, so the layout survives reboots)")
            sp.add_argument("--boot-unit-root", default="/", metavar="DIR", help="with --boot-unit: install under DIR")
    return parser


COMMANDS = {"status": cmd_status, "plan": cmd_plan, "apply": cmd_apply, "sim-reboot": cmd_sim_reboot}


# --- output -------------------------------------------------------------------------------------

def _human(result):
    # type: (Dict[str, Any]) -> str
    lines = []
    command = result.get("command")
    if "outcome" in result:
        line = "%s: %s" % (command or "node_bootstrap", result["outcome"])
        if "changes" in result:
            line += ", %d change%s" % (result["changes"], "" if result["changes"] == 1 else "s")
        if result.get("sequence"):
            line += ", sequence %s" % result["sequence"]
        lines.append(line)
    if result.get("error"):
        lines.append("error (%s): %s" % (result["error"]["code"], result["error"]["message"]))
    for gpu in result.get("gpus", []):
        if command == "plan":
            what = "no change" if gpu["converged"] else "%d mutating call%s%s" % (
                gpu["mutating_calls"], "" if gpu["mutating_calls"] == 1 else "s",
                ", enable MIG mode" if gpu["mode_change"] else "")
            lines.append("GPU %d %s: keep %d, destroy %d, create %d (%s)" % (
                gpu["index"], gpu["name"], len(gpu["keep"]), len(gpu["destroy"]), len(gpu["create"]), what))
        else:
            mode = gpu["mig_mode"]
            lines.append("GPU %d %s: MIG %s%s" % (gpu["index"], gpu["name"], mode["current"] or "unknown",
                                                  " (pending %s)" % mode["pending"]
                                                  if mode["pending"] != mode["current"] else ""))
        if gpu.get("diagram"):
            lines.append(gpu["diagram"])
        for note in gpu.get("notes", []):
            lines.append("  note: %s" % note)
    if command == "install-boot-unit":
        lines.append("%s %s (request %s)" % ("installed" if result["changed"] else "unchanged", result["unit"],
                                             result["request"]))
    if result.get("labels", {}).get("error"):
        lines.append("labels: %s" % result["labels"]["error"])
    return "\n".join(lines)


def _emit(result, as_json):
    # type: (Dict[str, Any], bool) -> None
    if as_json:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    else:
        text = _human(result)
        if text:
            sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _on_sigterm(signum, frame):
    # type: (int, Any) -> None
    # Once only: a second SIGTERM must not cut short the cleanup the first one started (systemd follows
    # up with SIGKILL after TimeoutStopSec if the cleanup hangs).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


def main(argv=None):
    # type: (Optional[List[str]]) -> int
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # Without a handler SIGTERM kills us without unwinding: clients stay stopped, the label pending.
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (main called from a library): the caller owns signals
        pass
    as_json = "--json" in argv
    command = next((a for a in argv if a in COMMANDS or a == "install-boot-unit"), None)
    try:
        args = build_parser().parse_args(argv)
        as_json = args.json
        if args.command == "install-boot-unit":
            if args.backend != "nvml" or args.sim_fault:
                open_backend(args.backend, args.sim_state, None)  # validate the option only
            result, code = cmd_install_boot_unit(args, None)
        else:
            backend = open_backend(args.backend, args.sim_state, args.sim_fault)
            result, code = COMMANDS[args.command](args, backend)
    except (NodeFailure, MigInputError) as exc:
        failure = exc if isinstance(exc, NodeFailure) else BadInput(str(exc))
        result = {"command": command, "outcome": failure.outcome, "changes": 0,
                  "error": {"code": failure.code, "message": failure.message}}
        code = failure.exit_code
    except (KeyboardInterrupt, Terminated) as exc:
        message = "interrupted by SIGTERM" if isinstance(exc, Terminated) else "interrupted (SIGINT)"
        result = {"command": command, "outcome": "failed", "changes": 0,
                  "error": {"code": "interrupted", "message": message}}
        code = 1
    except Exception as exc:  # noqa: BLE001 - the CLI boundary: one line, never a traceback
        message = "internal error: %s: %s" % (exc.__class__.__name__, " ".join(str(exc).split())[:300])
        result = {"command": command, "outcome": "failed", "changes": 0,
                  "error": {"code": "internal-error", "message": message}}
        code = 1
    if result.get("error"):
        sys.stderr.write("node_bootstrap: error: %s\n" % result["error"]["message"])
    _emit(result, as_json)
    return code
