"""``python3 -m node_bootstrap``: status, plan, apply, install-boot-unit (and sim-reboot for the simulator).

With ``--json`` the last line of stdout is one JSON object; logs go to stderr. Exit codes: 0 success,
2 bad input, 3 GPU not MIG-capable, 4 GPU busy, 5 reboot required, 1 anything else. Every error is
caught here and shown as one line: the user never sees a traceback.
"""

import argparse
import json
import os
import signal
import socket
import sys
from typing import Any, Dict, List, Optional, Tuple

from . import __version__, bootunit
from .backend import Backend, kill_process, open_backend, reset_gpus
from .clients import DEFAULT_CLIENTS, ClientControl, parse_clients
from .deviceplugin import METHODS, expected_capacity, restart_by_pod_delete, wait_for_capacity
from .errors import OUTCOME_SUCCESS, BadInput, NodeFailure, Terminated
from .holders import DEFAULT_DEVICE_GLOB, wait_released
from .kube import DEFAULT_KUBELET_KUBECONFIG, KubeClient, KubeError, load_kubeconfig, node_name_from_certificate
from .live import LiveGpu, effective_model, gpu_json
from .lock import DEFAULT_LOCK_FILE, NodeLock
from .mig import MigInputError, PartitionSpec
from .nodelabels import NodeLabeler, sequence_label_value
from .nvml import NvmlReader, NvmlUnavailable, NvmlWriter
from .planner import GpuPlan, node_sequence, plan_json, plan_node
from .reconcile import Host, reconcile
from .request import spec_from_options
from .runner import run

DEFAULT_STATE_DIR = "/var/lib/ack-mig-hook"
DEFAULT_CLIENT_STOP_TIMEOUT = 60.0
STATE_BY_OUTCOME = {"success": "success", "failed": "failed", "reboot-required": "rebooting"}


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


def _spec(args):
    # type: (argparse.Namespace) -> PartitionSpec
    return spec_from_options(args.size, args.sequence, args.request_b64, args.request_file)


def _log(args):
    # type: (argparse.Namespace) -> Any
    def log(message):
        # type: (str) -> None
        sys.stderr.write("node_bootstrap: %s\n" % message)
        sys.stderr.flush()

    return log


def _as_failure(exc, backend):
    # type: (Exception, Backend) -> NodeFailure
    if isinstance(exc, NodeFailure):
        return exc
    if isinstance(exc, MigInputError):
        return BadInput(str(exc))
    if isinstance(exc, backend.nv.NVMLError):
        return NodeFailure("NVML: %s (error %s)" % (exc, getattr(exc, "value", "?")), code="nvml-error")
    return NodeFailure("internal error: %s: %s" % (exc.__class__.__name__, " ".join(str(exc).split())[:300]),
                       code="internal-error")


def _read(backend):
    # type: (Backend) -> Tuple[List[LiveGpu], Optional[str]]
    try:
        with NvmlReader(backend.nv) as reader:
            return reader.read_all(), reader.driver_version()
    except NvmlUnavailable as exc:
        raise NodeFailure(str(exc), code="nvml-unavailable")
    except backend.nv.NVMLError as exc:  # a GPU that cannot even be enumerated
        raise _as_failure(exc, backend)


def _gpus_json(gpus):
    # type: (List[LiveGpu]) -> List[Dict[str, Any]]
    return [gpu_json(g, effective_model(g)[0]) for g in gpus]


# --- status / plan ------------------------------------------------------------------------------

def cmd_status(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    gpus, driver = _read(backend)
    out = []
    for gpu in gpus:
        model, source = effective_model(gpu)
        item = gpu_json(gpu, model)
        item.update({
            "pci_device_id": "0x%08x" % gpu.pci_device_id if gpu.pci_device_id is not None else None,
            "bus_id": gpu.bus_id, "uuid": gpu.uuid, "mig_capable": gpu.mig_capable,
            "profiles_source": source,
            "profiles": [p.to_dict() for p in model.profiles] if model is not None else [],
            "processes": list(gpu.pids), "notes": list(gpu.notes),
        })
        out.append(item)
    return {"command": "status", "backend": backend.name, "driver_version": driver, "gpus": out}, 0


def cmd_plan(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    spec = _spec(args)
    gpus, _ = _read(backend)
    plans = plan_node(gpus, spec)
    return {
        "command": "plan", "backend": backend.name, "sequence": node_sequence(plans),
        "converged": all(p.converged for p in plans),
        "mutating_calls": sum(p.action_count for p in plans),
        "gpus": [plan_json(p, g) for p, g in zip(plans, gpus)],
    }, 0


# --- apply --------------------------------------------------------------------------------------

def _labeler(args, log):
    # type: (argparse.Namespace, Any) -> NodeLabeler
    if args.no_label:
        return NodeLabeler(None, None, log)
    try:
        config = load_kubeconfig(args.kubeconfig)
        client = KubeClient(config)
    except KubeError as exc:
        labeler = NodeLabeler(None, args.node_name, log)
        labeler.error = "no Kubernetes access: %s" % exc
        log(labeler.error)
        return labeler
    name = args.node_name or node_name_from_certificate(config) or socket.gethostname()
    return NodeLabeler(client, name, log)


def _release_wait(args, backend, log):
    # type: (argparse.Namespace, Backend, Any) -> Any
    # A simulated node has no device files of its own: look at this machine's only when asked to.
    pattern = args.gpu_device_glob or (DEFAULT_DEVICE_GLOB if backend.sim is None else None)

    def wait():
        # type: () -> None
        if pattern and args.client_stop_timeout > 0:
            waited = wait_released(pattern, args.client_stop_timeout, log)
            if waited >= 0.5:
                log("the GPUs were released after %.1fs" % waited)

    return wait


def _sequence_value(plans):
    # type: (List[GpuPlan]) -> str
    ids = "-".join(str(i.profile.id) for i in plans[0].layout.instances) if plans else ""
    return sequence_label_value(node_sequence(plans), ids)


def _after_success(args, labeler, plans, changes, log):
    # type: (argparse.Namespace, NodeLabeler, List[GpuPlan], int, Any) -> Dict[str, Any]
    """Device plugin restart and capacity wait; returns the capacity report ({} when not checked)."""
    if not labeler.enabled:
        return {}
    client, node = labeler.client, labeler.node_name
    assert client is not None and node is not None
    if changes and args.device_plugin_restart == "pod-delete":
        try:
            deleted = restart_by_pod_delete(client, node, args.device_plugin_namespace, args.device_plugin_selector)
            log("device plugin pods deleted: %s" % (", ".join(deleted) or "none found"))
        except KubeError as exc:
            log("device plugin restart failed: %s" % exc)
    if args.capacity_timeout <= 0:
        return {}
    capacity = wait_for_capacity(client, node, expected_capacity(plans), args.capacity_timeout,
                                 args.capacity_interval)
    if not capacity["ready"]:
        raise NodeFailure("the node does not report the MIG resources after %ds (expected %s, reported %s): is the "
                          "device plugin running with the mixed strategy?"
                          % (args.capacity_timeout, _fmt(capacity["expected"]), _fmt(capacity["reported"]) or "none"),
                          code="capacity-timeout")
    return capacity


def _fmt(counts):
    # type: (Dict[str, int]) -> str
    return ", ".join("%s=%d" % kv for kv in sorted(counts.items()))


def _failure(exc, backend):
    # type: (BaseException, Backend) -> NodeFailure
    """Any way an apply can stop, as a NodeFailure (interrupts included: they end in a final state too)."""
    if isinstance(exc, Terminated):
        return NodeFailure("interrupted by SIGTERM", code="interrupted")
    if isinstance(exc, KeyboardInterrupt):
        return NodeFailure("interrupted (SIGINT)", code="interrupted")
    if isinstance(exc, NvmlUnavailable):
        return NodeFailure(str(exc), code="nvml-unavailable")
    if isinstance(exc, Exception):
        return _as_failure(exc, backend)
    return NodeFailure("internal error: %s" % exc.__class__.__name__, code="internal-error")


def _boot_unit(args, backend, spec):
    # type: (argparse.Namespace, Backend, PartitionSpec) -> Dict[str, Any]
    if backend.sim is not None and os.path.abspath(args.boot_unit_root) == "/":
        # A simulated node must never install a unit into this machine's real systemd.
        return {"installed": False, "skipped": "simulated node: give --boot-unit-root DIR to install one there"}
    return _install_boot_unit(args, spec, args.boot_unit_root)


class _Apply(object):
    """One apply: what exists so far (clients, NVML writer, resets), so that every way out, an exception,
    SIGTERM or SIGINT included, ends in :meth:`fail`: clients started again, a final label, a result."""

    def __init__(self, args, backend, labeler, log):
        # type: (argparse.Namespace, Backend, NodeLabeler, Any) -> None
        self.args, self.backend, self.labeler, self.log = args, backend, labeler, log
        self.result = {"command": "apply", "backend": backend.name, "outcome": OUTCOME_SUCCESS, "changes": 0,
                       "sequence": None}  # type: Dict[str, Any]
        self.exit_code = 0
        self.spec = None  # type: Optional[PartitionSpec]
        self.control = None  # type: Optional[ClientControl]
        self.writer = None  # type: Optional[NvmlWriter]
        self.resets = []  # type: List[List[int]]
        self.failed = False

    def _problems(self, problems):
        # type: (List[str]) -> None
        merged = list(self.result.get("client_problems", []))
        merged += [p for p in problems if p not in merged]
        if merged:
            self.result["client_problems"] = merged

    def _install_boot_unit(self):
        # type: () -> None
        # After a reboot no instance is left (and Hopper may come back with MIG off): the unit re-applies
        # before the kubelet starts. Installed while the node lock is held, as soon as the GPUs are right
        # (or only a reboot is missing: the reboot finishes the job), whatever the capacity wait says.
        if self.args.boot_unit and self.spec is not None and "boot_unit" not in self.result:
            self.result["boot_unit"] = _boot_unit(self.args, self.backend, self.spec)

    def run_locked(self):
        # type: () -> None
        args, backend, log = self.args, self.backend, self.log
        assert self.spec is not None and self.control is not None
        control = self.control
        reset = reset_gpus(backend)

        def counted_reset(indices):
            # type: (List[int]) -> Tuple[int, str]
            self.resets.append(indices)  # a GPU reset changes the GPU: it counts like a mutating call
            return reset(indices)

        host = Host(control.stop, control.start, counted_reset, kill_process(backend), log,
                    _release_wait(args, backend, log))
        writer = NvmlWriter(backend.nv)
        with writer:
            self.writer = writer
            try:
                report = reconcile(writer, self.spec, host, force=args.force, allow_reset=not args.no_reset,
                                   on_change=lambda plans: self.labeler.set("pending"))
                self.result["changes"] = writer.changes + len(self.resets)
                self.result["sequence"] = node_sequence(report.plans)
                self.result["gpus"] = _gpus_json(report.gpus)
                self._install_boot_unit()
                self._problems(report.client_problems + control.start(control.leftovers()))
                capacity = _after_success(args, self.labeler, report.plans, self.result["changes"], log)
                if capacity:
                    self.result["capacity"] = capacity
                self.labeler.set("success", _sequence_value(report.plans))
            except BaseException as exc:  # noqa: B036 - SIGTERM and SIGINT too: every path ends in a final label
                self.fail(exc, label=True)

    def fail(self, exc, label):
        # type: (BaseException, bool) -> None
        """Record the failure, start stopped clients again, label the node (when ``label``). Runs once."""
        if self.failed:
            return
        self.failed = True
        failure = _failure(exc, self.backend)
        self.result.update(outcome=failure.outcome, error={"code": failure.code, "message": failure.message})
        self.exit_code = failure.exit_code
        if self.writer is not None:
            self.result["changes"] = self.writer.changes + len(self.resets)
            try:
                self.result["gpus"] = _gpus_json(self.writer.read_all())
            except Exception:  # noqa: BLE001 - the state is a courtesy; the failure is what counts
                pass
        if self.control is not None:
            try:
                self._problems(self.control.start(self.control.leftovers()))
            except Exception as exc2:  # noqa: BLE001 - never let a client problem skip the label
                self._problems(["could not start the stopped clients: %s" % " ".join(str(exc2).split())[:200]])
        if failure.outcome == "reboot-required":
            self._install_boot_unit()
        if label:
            self.labeler.set(STATE_BY_OUTCOME[failure.outcome], reason=failure.message)


def cmd_apply(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    log = _log(args)
    # The labeler first: every failure after it, a bad request included, can be written on the node.
    apply = _Apply(args, backend, _labeler(args, log), log)
    try:
        apply.spec = _spec(args)
        apply.control = ClientControl(parse_clients(args.clients), run, args.state_dir, log)
        with NodeLock(args.lock_file, args.lock_timeout):
            try:
                apply.run_locked()
            except BaseException as exc:  # noqa: B036 - NVML unavailable, or an interrupt while failing
                apply.fail(exc, label=True)
    except BaseException as exc:  # noqa: B036 - before the lock: bad input, lock timeout, interrupted waiting
        # A bad request is a verdict on this node's request: say so on the node. A lock timeout or an
        # interrupt while waiting says nothing about the node; the apply holding the lock labels it.
        apply.fail(exc, label=isinstance(exc, BadInput) or isinstance(exc, MigInputError))
    apply.result["labels"] = apply.labeler.summary()
    return apply.result, apply.exit_code


# --- boot unit, simulator -------------------------------------------------------------------------

def _boot_args(args):
    # type: (argparse.Namespace) -> List[str]
    """The global options the boot unit repeats (all plain option values, never label text)."""
    out = ["--backend", args.backend, "--kubeconfig", args.kubeconfig, "--lock-file", args.lock_file,
           "--state-dir", args.state_dir, "--clients", args.clients]
    if args.sim_state:
        out += ["--sim-state", os.path.abspath(args.sim_state)]
    if args.node_name:
        out += ["--node-name", args.node_name]
    if args.gpu_device_glob:
        out += ["--gpu-device-glob", args.gpu_device_glob]
    if args.client_stop_timeout != DEFAULT_CLIENT_STOP_TIMEOUT:
        out += ["--client-stop-timeout", "%g" % args.client_stop_timeout]
    for flag in ("no_label", "no_reset", "force"):
        if getattr(args, flag):
            out.append("--" + flag.replace("_", "-"))
    return out


def _install_boot_unit(args, spec, root):
    # type: (argparse.Namespace, PartitionSpec, str) -> Dict[str, Any]
    """Install (or confirm) the boot unit; a failure is reported in the result, never raised."""
    try:
        installed = bootunit.install(spec, root=root, extra_args=_boot_args(args), runner=run)
    except (IOError, OSError) as exc:
        return {"installed": False, "error": "boot unit not written: %s" % exc}
    out = {"installed": not installed.errors, "unit": installed.unit_path, "request": installed.request_path,
           "changed": installed.changed, "commands": installed.commands}  # type: Dict[str, Any]
    if installed.errors:
        out["error"] = "; ".join(installed.errors)
    return out


def cmd_install_boot_unit(args, backend):
    # type: (argparse.Namespace, Optional[Backend]) -> Tuple[Dict[str, Any], int]
    spec = _spec(args)
    parse_clients(args.clients)
    if args.backend.startswith("sim:") and os.path.abspath(args.root) == "/":
        raise BadInput("a simulated node's boot unit goes under --root DIR, never into this machine's /etc")
    result = bootunit.install(spec, root=args.root, extra_args=_boot_args(args), runner=run)
    out = {"command": "install-boot-unit", "outcome": OUTCOME_SUCCESS, "unit": result.unit_path,
           "request": result.request_path, "changed": result.changed, "commands": result.commands}
    if result.errors:
        out.update(outcome="failed", error={"code": "boot-unit-failed", "message": "; ".join(result.errors)})
        return out, 1
    return out, 0


def cmd_sim_reboot(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    if backend.sim is None:
        raise BadInput("sim-reboot needs --backend sim:<GPU>:<count> and --sim-state PATH")
    backend.sim.reboot()
    gpus, _ = _read(backend)
    return {"command": "sim-reboot", "boots": backend.sim.store.load().get("boots"), "gpus": _gpus_json(gpus)}, 0


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
