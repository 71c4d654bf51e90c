"""``python3 -m node_bootstrap``: status, plan, apply, disable, install-boot-unit, uninstall-boot-unit (and
sim-reboot for the simulator).

With ``--json`` the last line of stdout is one JSON object; logs go to stderr. Exit codes: 0 success,
2 bad input, 3 GPU not MIG-capable, 4 GPU busy, 5 reboot required, 6 conflict (NVIDIA's mig-manager is in
charge of the node), 7 destroy required (``apply --no-destroy`` on a node that needs more than new
instances), 1 anything else. Every error is caught here and shown as one line: the user never
sees a traceback.

This module parses and dispatches; the commands are in :mod:`node_bootstrap.commands.common`,
:mod:`node_bootstrap.commands.apply` and :mod:`node_bootstrap.commands.disable`, the text output in
:mod:`node_bootstrap.commands.textout`.
"""

import argparse
import os
import signal
import sys
from typing import Any, Dict, List, Optional, Sequence

from .. import __version__
from .apply import cmd_apply, cmd_report_holders
from .backend import open_backend
from ..host.clients import DEFAULT_CLIENTS
from .common import (DEFAULT_CLIENT_STOP_TIMEOUT, DEFAULT_STATE_DIR, cmd_install_boot_unit, cmd_plan,
                       cmd_sim_reboot, cmd_status, say)
from ..kube.deviceplugin import METHODS
from .disable import cmd_disable, cmd_uninstall_boot_unit
from .holdings import FOLLOW_BUDGET_S
from ..errors import BadInput, NodeFailure, Terminated, one_line
from ..host.holders import DEFAULT_DEVICE_GLOB
from ..kube.allocations import DEFAULT_CHECKPOINT
from ..kube.client import DEFAULT_KUBELET_KUBECONFIG
from ..host.lock import DEFAULT_LOCK_FILE
from ..mig import MigInputError
from .simhost import resolve_defaults
from .resultline import result_line
from .textout import READ_ONLY, error_line, human


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2 (through BadInput), never argparse's usage dump
        raise BadInput("%s; see --help" % message)


# Which option groups each command takes: a command's --help lists only what applies to it. The parser
# before the command takes every option (delivery puts its options there: python3 -m node_bootstrap
# --json --clients ... apply ...), so an option meant for one command may come before it too.
GROUPS = ("node", "faults", "kube", "lock", "change", "plugin")
COMMAND_GROUPS = {
    "status": ("node", "faults"),
    "plan": ("node", "faults"),
    "apply": GROUPS,
    "disable": GROUPS,
    "install-boot-unit": ("node", "kube", "change"),  # the options the unit repeats at boot
    "uninstall-boot-unit": ("node",),
    "sim-reboot": ("node",),
    "report-holders": ("node", "kube", "lock"),  # the node lock: a round never straddles an apply's change
}


def _seconds(low, high):
    # type: (float, float) -> Any
    """An argparse type: a number of seconds in [low, high], or one line naming the accepted range."""
    def parse(text):
        # type: (str) -> float
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not a number of seconds; use %g..%g" % (text[:20], low, high))
        if not low <= value <= high:  # NaN fails both comparisons, so it is refused here too
            raise argparse.ArgumentTypeError("%s is out of range; use %g..%g seconds" % (text[:20], low, high))
        return value
    return parse


def _add_options(parser, suppress, groups=GROUPS):
    # type: (argparse.ArgumentParser, bool, Sequence[str]) -> None
    """The options of ``groups``; on a command with SUPPRESS defaults, so that they work before or after it."""

    def d(value):
        # type: (Any) -> Any
        return argparse.SUPPRESS if suppress else value

    g = parser.add_argument_group("node options")
    g.add_argument("--backend", default=d("nvml"), help="nvml (the driver, default) or sim:<GPU>:<count>")
    g.add_argument("--sim-state", default=d(None), metavar="PATH", help="simulated node state file")
    if "faults" in groups:
        g.add_argument("--sim-fault", action="append", default=d([]), metavar="KIND",
                       help="inject a simulator fault (repeatable; the kinds are listed in docs/simulator.md, Faults)")
    g.add_argument("--json", action="store_true", default=d(False), help="last stdout line is a JSON result")
    g.add_argument("--kubelet-checkpoint", default=d(None), metavar="PATH",
                   help="kubelet's device manager checkpoint: which device each pod holds (default %s; a simulated "
                        "node: the same path under <state>.host/)" % DEFAULT_CHECKPOINT)
    if "kube" in groups:
        g = parser.add_argument_group("Kubernetes (the kubelet's credential)")
        g.add_argument("--no-label", action="store_true", default=d(False),
                       help="no Kubernetes API calls: no labels, no events, no capacity wait, no pod restarts")
        # Host paths default to None: simhost.resolve_defaults fills in the real path, or one under a simulated
        # node's own directory (a sim node never touches this machine unless a path is named explicitly).
        g.add_argument("--kubeconfig", default=d(None), metavar="PATH",
                       help="default %s (a simulated node: labels go to <state>.host/node-labels.json)"
                            % DEFAULT_KUBELET_KUBECONFIG)
        g.add_argument("--node-name", default=d(None), metavar="NAME",
                       help="this node's name in Kubernetes (default: from the kubelet certificate, else the "
                            "hostname)")
    if "change" in groups or "lock" in groups:
        g = parser.add_argument_group("changing the GPUs" if "change" in groups else "the node lock")
        g.add_argument("--lock-file", default=d(None), metavar="PATH",
                       help="one change at a time per node (default %s)" % DEFAULT_LOCK_FILE)
    if "change" in groups:
        g.add_argument("--lock-timeout", type=_seconds(0, 86400), default=d(900.0), metavar="SECONDS",
                       help="wait this long for another run holding the lock (default 900)")
        g.add_argument("--force", action="store_true", default=d(False), help="kill compute processes in the way")
        g.add_argument("--no-reset", action="store_true", default=d(False),
                       help="never reset a GPU: a pending MIG mode ends in reboot-required")
        g.add_argument("--state-dir", default=d(None), metavar="PATH",
                       help="where stopped clients are recorded (default %s)" % DEFAULT_STATE_DIR)
        g.add_argument("--clients", default=d(None), metavar="LIST",
                       help="GPU clients to stop around changes: systemd:UNIT,manifest:/path (empty: none; "
                            "default %s)" % ",".join(DEFAULT_CLIENTS))
        g.add_argument("--client-stop-timeout", type=_seconds(0, 3600), default=d(DEFAULT_CLIENT_STOP_TIMEOUT),
                       metavar="SECONDS",
                       help="after stopping clients, wait this long for every other holder of a GPU device file "
                            "to let go, else fail gpu-busy naming them (0: do not check)")
        g.add_argument("--gpu-device-glob", default=d(None), metavar="PATTERN",
                       help="the device files that mean 'holds the GPU' (default %s; none on a simulated node)"
                            % DEFAULT_DEVICE_GLOB.replace("%", "%%"))
    if "plugin" in groups:
        g = parser.add_argument_group("device plugin")
        g.add_argument("--device-plugin-restart", choices=METHODS, default=d("manifest"),
                       help="how the plugin re-enumerates after a change: manifest (a static pod among "
                            "--clients, default), pod-delete (a DaemonSet's pod), none")
        g.add_argument("--device-plugin-namespace", default=d("kube-system"), metavar="NAMESPACE",
                       help="with pod-delete: the plugin's namespace (default kube-system)")
        g.add_argument("--device-plugin-selector", default=d("app.kubernetes.io/name=nvidia-device-plugin"),
                       metavar="SELECTOR", help="with pod-delete: the plugin pods' label selector (default "
                                                "app.kubernetes.io/name=nvidia-device-plugin)")
        g.add_argument("--capacity-timeout", type=_seconds(0, 3600), default=d(180.0), metavar="SECONDS",
                       help="wait this long for the node's nvidia.com/mig-* resources to match (after "
                            "disable: to be gone) (0: do not wait)")
        g.add_argument("--capacity-interval", type=_seconds(0.1, 600), default=d(3.0), metavar="SECONDS",
                       help="how often to look during that wait (default 3)")


def _add_request(parser):
    # type: (argparse.ArgumentParser) -> None
    g = parser.add_argument_group("partition (exactly one)")
    g.add_argument("--size", metavar="VALUE", help="one profile, as many as fit: 1g.5gb or 19")
    g.add_argument("--sequence", metavar="VALUE", help="hyphen-joined profiles: 1g.5gb-2g.10gb-3g.20gb or 19-14-9")
    g.add_argument("--request-b64", metavar="B64", help='base64 of {"version": 1, "partition": {"kind", "value"}}')
    g.add_argument("--request-file", metavar="PATH", help="a file holding that JSON document")


_ROOT_HELP = "the boot unit under this root (image builds, tests; default /, a simulated node's own)"


def build_parser():
    # type: () -> argparse.ArgumentParser
    parser = _Parser(prog="python3 -m node_bootstrap", description="NVIDIA MIG partitions on this node.")
    parser.add_argument("--version", action="version", version="node_bootstrap %s" % __version__,
                        help="print the version and exit")
    _add_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, text, request in (
            ("status", "read-only: GPUs, MIG mode, instances, profiles, processes, diagrams", False),
            ("plan", "read-only: what apply would change", True),
            ("apply", "bring the GPUs to the partition, label the node", True),
            ("disable", "turn MIG off: destroy every instance, MIG mode off, remove the boot unit, clear the "
                        "labels", False),
            ("install-boot-unit", "install the systemd unit that re-applies at boot", True),
            ("uninstall-boot-unit", "remove that systemd unit (the GPUs keep their layout until a reboot)", False),
            ("sim-reboot", "simulator only: reboot the simulated node", False),
            ("report-holders", "write which pod holds each MIG instance (kubelet's allocations) on the node "
                               "(annotation ack-mig-hook/gpu-holders); changes no GPU", False)):
        sp = sub.add_parser(name, help=text, description=text)
        _add_options(sp, suppress=True, groups=COMMAND_GROUPS[name])
        if request:
            _add_request(sp)
        if name in ("install-boot-unit", "uninstall-boot-unit", "disable"):
            sp.add_argument("--root", default=None, metavar="DIR", help=_ROOT_HELP)
        if name == "report-holders":
            sp.add_argument("--min-interval", type=_seconds(0, 600), default=0.0, metavar="SECONDS",
                            help="stay this long after reporting and report again while kubelet's checkpoint "
                                 "changed meanwhile, for at most %g s (the holders unit's rate limit; default 0: "
                                 "report once)" % FOLLOW_BUDGET_S)
        if name == "apply":
            sp.add_argument("--boot-unit", action="store_true",
                            help="after success or reboot-required, install the boot unit for this partition "
                                 "(what delivery does, so the layout survives reboots)")
            sp.add_argument("--boot-unit-root", default=None, metavar="DIR",
                            help="with --boot-unit: install under DIR (default /, a simulated node's own)")
            sp.add_argument("--at-boot", action="store_true",
                            help="the boot unit's run (nothing runs on the GPUs yet): a per-GPU request turns MIG "
                                 "back on for a listed GPU whose layout is not empty (a Hopper GPU comes back from "
                                 "a reboot with MIG off); without it a per-GPU request never changes the mode")
            sp.add_argument("--no-destroy", action="store_true",
                            help="only add instances: refuse (destroy-required, exit 7) before any change where an "
                                 "existing instance would be destroyed, the MIG mode changed or a GPU reset")
    return parser


COMMANDS = {"status": cmd_status, "plan": cmd_plan, "apply": cmd_apply, "disable": cmd_disable,
            "sim-reboot": cmd_sim_reboot, "report-holders": cmd_report_holders}
FILE_COMMANDS = {"install-boot-unit": cmd_install_boot_unit, "uninstall-boot-unit": cmd_uninstall_boot_unit}


# --- output -------------------------------------------------------------------------------------

def _emit(result, as_json, code):
    # type: (Dict[str, Any], bool, int) -> int
    """Print the result; the exit code: ``code``, or where the command itself succeeded, 141 when the reader of
    stdout went away (``| head``, as a shell reports a writer SIGPIPE kills) or 1 for a result that could not be
    written (``> /dev/full``). A failed command keeps its own code either way. One line on stderr, never a
    traceback."""
    try:
        if as_json:
            sys.stdout.write(result_line(result) + "\n")
        else:
            text = human(result)
            if text:
                sys.stdout.write(_carried(text + "\n", sys.stdout))
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return code or 141  # a failure (gpu-busy, reboot-required) is what the caller must learn, not the pipe
    except OSError as exc:
        say("node_bootstrap: error: cannot write the result to stdout: %s\n" % (exc.strerror or exc))
        _discard_stdout()
        return code or 1
    return code


def _carried(text, stream):
    # type: (str, Any) -> str
    """``text`` as ``stream``'s encoding can carry it: what it cannot, as backslash escapes (3.6's stderr does
    the same). Python 3.6 gives stdout the C locale's ASCII codec, strict but for surrogates (3.7+ reads that
    locale as UTF-8); the words of systemctl or an API server in other characters then raised out of here
    after the GPUs had changed, a traceback in place of the result."""
    encoding = getattr(stream, "encoding", None)
    if not encoding:
        return text  # a stream of text (a caller's StringIO): anything goes
    try:
        text.encode(encoding, getattr(stream, "errors", None) or "strict")
        return text
    except (UnicodeEncodeError, LookupError):
        return text.encode(encoding, "backslashreplace").decode(encoding, "replace")


def _discard_stdout():
    # type: () -> None
    """stdout points at /dev/null from here on: what is still buffered is dropped at exit, not failed again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _on_sigterm(signum, frame):
    # type: (int, Any) -> None
    # Once only: a second SIGTERM must not cut short the cleanup the first one started (systemd follows
    # up with SIGKILL after TimeoutStopSec if the cleanup hangs).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


_sigint_was = []  # type: List[Any]  # the SIGINT handler main replaced, put back as it returns


def _on_sigint(signum, frame):
    # type: (int, Any) -> None
    # Once only, as SIGTERM: a second Ctrl-C raised out of the way out the first one started (the final label
    # not written: the node stayed "pending"). A run whose way out hangs still ends by SIGQUIT or SIGKILL.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt()


def main(argv=None):
    # type: (Optional[List[str]]) -> int
    try:
        return _main(argv)
    except SystemExit as exc:  # argparse: --help, or a refused option (said on stderr already)
        return _flushed(exc.code if isinstance(exc.code, int) else 2)
    finally:
        try:  # a caller in this process (a library, a test) gets its Ctrl-C back as it was
            if signal.getsignal(signal.SIGINT) in (_on_sigint, signal.SIG_IGN) and _sigint_was[:1]:
                signal.signal(signal.SIGINT, _sigint_was.pop())
        except ValueError:  # not the main thread: nothing was set
            pass


def _flushed(code):
    # type: (int) -> int
    """``code`` once what argparse printed (--help) is flushed: a reader gone (``--help | head -1``) or a full
    disk is met here, 141 or one line and 1 as for a result, not at the interpreter's exit ("Exception ignored
    ... BrokenPipeError", exit 120). A refused option keeps its 2."""
    if sys.stdout is None:
        return code
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return code or 141
    except OSError as exc:
        say("node_bootstrap: error: cannot write the result to stdout: %s\n" % (exc.strerror or exc))
        _discard_stdout()
        return code or 1
    return code


def _main(argv):
    # type: (Optional[List[str]]) -> int
    argv = list(sys.argv[1:] if argv is None else argv)
    if sys.stderr is None:  # started with stderr closed (2>&-): nowhere to say a problem, the exit code still does
        sys.stderr = open(os.devnull, "w")
    if sys.stdout is None:  # started with stdout closed (>&-): no result could be printed, so nothing is done
        say("node_bootstrap: error: stdout is closed: no result could be printed; run it with stdout open "
            "(> /dev/null discards the result)\n")
        return 2
    try:
        # Without a handler SIGTERM kills us without unwinding: clients stay stopped, the label pending.
        signal.signal(signal.SIGTERM, _on_sigterm)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where SIGINT was ignored (nohup)
            _sigint_was[:] = [signal.signal(signal.SIGINT, _on_sigint)]
    except ValueError:  # not the main thread (main called from a library): the caller owns signals
        pass
    as_json = "--json" in argv
    command = next((a for a in argv if a in COMMANDS or a in FILE_COMMANDS), None)
    try:
        args = build_parser().parse_args(argv)
        as_json = args.json
        resolve_defaults(args)
        if args.command in FILE_COMMANDS:  # the boot unit's files only: no NVML
            if args.backend != "nvml" or args.sim_fault:
                open_backend(args.backend, args.sim_state, None)  # validate the option only
            result, code = FILE_COMMANDS[args.command](args, None)
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
        message = "internal error: %s: %s" % (exc.__class__.__name__, one_line(exc, 300))
        result = {"command": command, "outcome": "failed", "changes": 0,
                  "error": {"code": "internal-error", "message": message}}
        code = 1
    if command in READ_ONLY and result.get("outcome") == "failed":  # nothing was attempted, so nothing failed:
        result.update(outcome="error")                              # it could not be done
        result.pop("changes", None)
    if result.get("error"):
        say(error_line(result) + "\n")
    return _emit(result, as_json, code)
