"""The node commands other than apply: status, plan, install-boot-unit, sim-reboot, and the helpers
every command shares (the partition from the options, NVML reads, result documents).

Each command takes the parsed options and a backend and returns ``(result document, exit code)``;
:mod:`node_bootstrap.commands.cli` parses, dispatches and prints. ``apply`` lives in :mod:`node_bootstrap.commands.apply`.
"""

import argparse
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..host import bootunit, holdersunit
from .backend import Backend
from ..host.clients import parse_clients
from ..errors import OUTCOME_SUCCESS, BadInput, GpuLost, NodeFailure, one_line
from ..driver.live import LiveGpu, effective_model, gpu_json
from ..mig import MigInputError, PartitionSpec
from ..driver.nvml import NvmlReader, NvmlUnavailable
from .planner import busy, mixed_layouts, node_sequence, plan_json, plan_node
from .reconcile import busy_message
from ..request import GpuLayouts, spec_from_options
from .holdings import checkpoint_reader
from .simhost import DEFAULT_STATE_DIR, host_runner, is_host_root, is_sim  # noqa: F401 - DEFAULT_STATE_DIR re-exported for the CLI

DEFAULT_CLIENT_STOP_TIMEOUT = 60.0


def request_spec(args):
    # type: (argparse.Namespace) -> PartitionSpec
    return spec_from_options(args.size, args.sequence, args.request_b64, args.request_file)


def say(line):
    # type: (str) -> None
    """``line`` on stderr. A stderr that cannot take it (its reader gone: ``... 2>&1 | head``; a full disk) is
    pointed at /dev/null from then on: a log line is advice, and a run must not end halfway for it."""
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (OSError, ValueError):
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
        except (OSError, ValueError):  # no descriptor of its own (a caller's stand-in): replaced instead
            sys.stderr = open(os.devnull, "w")


def stderr_log(args):
    # type: (argparse.Namespace) -> Any
    def log(message):
        # type: (str) -> None
        say("node_bootstrap: %s\n" % message)

    return log


def as_failure(exc, backend):
    # type: (Exception, Backend) -> NodeFailure
    if isinstance(exc, NodeFailure):
        return exc
    if isinstance(exc, MigInputError):
        return BadInput(str(exc))
    if isinstance(exc, backend.nv.NVMLError):
        if getattr(exc, "value", None) == getattr(backend.nv, "NVML_ERROR_GPU_IS_LOST", 15):
            return GpuLost("a GPU is lost (NVML: %s): it has fallen off the bus or is otherwise inaccessible; "
                           "reboot the node to recover it" % exc)
        return NodeFailure("NVML: %s (error %s)" % (exc, getattr(exc, "value", "?")), code="nvml-error")
    return NodeFailure("internal error: %s: %s" % (exc.__class__.__name__, one_line(exc, 300)),
                       code="internal-error")


def _with_reader(backend, read):
    # type: (Backend, Callable[[NvmlReader], Any]) -> Any
    try:
        with NvmlReader(backend.nv) as reader:
            return read(reader)
    except NvmlUnavailable as exc:
        raise NodeFailure(str(exc), code="nvml-unavailable")
    except backend.nv.NVMLError as exc:  # a GPU that cannot even be enumerated
        raise as_failure(exc, backend)


def read_gpus(backend):
    # type: (Backend) -> Tuple[List[LiveGpu], Optional[str]]
    return _with_reader(backend, lambda reader: (reader.read_all(), reader.driver_version()))


def read_gpus_each(backend):
    # type: (Backend) -> Tuple[List[LiveGpu], Dict[int, NodeFailure]]
    """Every GPU that can be read and why each other one cannot (``NvmlReader.read_each``): for a report
    (a failed apply's, ``report-holders``) that must go on saying what the healthy GPUs hold while one is
    off the bus, rather than stop until the node reboots."""
    return _with_reader(backend, lambda reader: reader.read_each())


def gpus_json(gpus, unreadable=None):
    # type: (List[LiveGpu], Optional[Dict[int, NodeFailure]]) -> List[Dict[str, Any]]
    """The result's ``gpus`` in index order. A GPU that could not be read back (``NvmlReader.read_each``)
    says why and has no ``instances``: what it holds is unknown, neither empty nor what it held before."""
    out = [gpu_json(g, effective_model(g)[0]) for g in gpus]
    out += [{"index": i, "unreadable": {"code": exc.code, "message": exc.message}}
            for i, exc in (unreadable or {}).items()]
    return sorted(out, key=lambda g: g["index"])


def cmd_status(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    gpus, driver = read_gpus(backend)
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
            # each process with the instance it runs in (null off MIG, or where NVML did not say)
            "compute_processes": [{"pid": p.pid, "gpu_instance_id": p.gi, "compute_instance_id": p.ci}
                                  for p in sorted(gpu.processes)],
        })
        out.append(item)
    return {"command": "status", "backend": backend.name, "driver_version": driver, "gpus": out}, 0


def cmd_plan(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    spec = request_spec(args)
    gpus, _ = read_gpus(backend)
    # A per-GPU request is planned with kubelet's allocations, as apply plans it (the checkpoint only:
    # plan makes no Kubernetes call, so an entry of a pod that is gone counts here).
    allocations = checkpoint_reader(args, backend)() if isinstance(spec, GpuLayouts) else None
    plans = plan_node(gpus, spec, allocations)
    result = {
        "command": "plan", "backend": backend.name, "sequence": node_sequence(plans),
        "converged": all(p.converged for p in plans),
        "mutating_calls": sum(p.action_count for p in plans),
        "gpus": [plan_json(p, g) for p, g in zip(plans, gpus)],
    }  # type: Dict[str, Any]
    left = [{"gpu": p.index, "why": p.left} for p in plans if p.left]
    if left:
        result["left"] = left
    warnings = []
    mixed = mixed_layouts(plans)
    if mixed is not None:  # apply's own rules and words: what it would answer, said before anyone runs it
        warnings.append("apply will be refused as %s: %s" % (mixed.code, mixed.message))
    found = busy([p for p in plans if not p.converged])
    if found:
        warnings.append("apply will be refused as gpu-busy: %s" % busy_message(found, gpus))
    if warnings:
        result["warnings"] = warnings
    return result, 0


def boot_args(args):
    # type: (argparse.Namespace) -> List[str]
    """The global options the boot unit repeats (all plain option values, never label text)."""
    out = ["--backend", args.backend, "--lock-file", args.lock_file, "--state-dir", args.state_dir,
           "--clients", args.clients]
    if not getattr(args, "sim_labels", False):  # a simulated node's labels go to its own stand-in
        out += ["--kubeconfig", args.kubeconfig]
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


def holders_report(args):
    # type: (argparse.Namespace) -> Optional[holdersunit.Report]
    """What the holders units run report-holders with: the options that reach this node's report (all plain
    option values, never label text); None with --no-label (it could never write one)."""
    if getattr(args, "no_label", False):
        return None
    checkpoint = os.path.abspath(args.kubelet_checkpoint)
    out = ["--backend", args.backend, "--lock-file", os.path.abspath(args.lock_file)]  # apply's own lock
    if args.sim_state:
        out += ["--sim-state", os.path.abspath(args.sim_state)]
    if not getattr(args, "sim_labels", False):  # a simulated node's labels go to its own stand-in
        out += ["--kubeconfig", os.path.abspath(args.kubeconfig)]
    if args.node_name:
        out += ["--node-name", args.node_name]
    return holdersunit.Report(out + ["--kubelet-checkpoint", checkpoint], checkpoint)


def boot_unit_files(what, call):
    # type: (str, Callable[[], Any]) -> Any
    """``call()``, bootunit's install or uninstall; a file it cannot write or remove (a directory where the
    request or the unit goes, a read-only /etc) is ``boot-unit-failed`` in one line naming it. install-boot-unit
    and uninstall-boot-unit let it out as an internal error, as if a bug."""
    try:
        return call()
    except (IOError, OSError) as exc:
        raise NodeFailure("boot unit not %s: %s" % (what, one_line(exc)), code="boot-unit-failed")


def install_boot_unit(args, spec, root):
    # type: (argparse.Namespace, PartitionSpec, str) -> Dict[str, Any]
    """Install (or confirm) the boot unit (and for a per-GPU request the holders units); a failure is
    reported in the result, never raised."""
    try:
        installed = boot_unit_files("written", lambda: bootunit.install(
            spec, root=root, extra_args=boot_args(args), runner=host_runner(args), report=holders_report(args)))
    except NodeFailure as exc:
        return {"installed": False, "error": str(exc)}
    out = {"installed": not installed.errors, "unit": installed.unit_path, "request": installed.request_path,
           "changed": installed.changed, "commands": installed.commands}  # type: Dict[str, Any]
    if installed.holders_units:
        out["holders_units"] = list(installed.holders_units)
    if installed.errors:
        out["error"] = "; ".join(installed.errors)
    return out


def cmd_install_boot_unit(args, backend):
    # type: (argparse.Namespace, Optional[Backend]) -> Tuple[Dict[str, Any], int]
    spec = request_spec(args)
    parse_clients(args.clients)
    if is_sim(args) and is_host_root(args.root):
        raise BadInput("a simulated node's boot unit goes under --root DIR, never into this machine's /etc")
    result = boot_unit_files("written", lambda: bootunit.install(
        spec, root=args.root, extra_args=boot_args(args), runner=host_runner(args), report=holders_report(args)))
    return boot_unit_outcome("install-boot-unit", result, "changed")


def boot_unit_outcome(command, result, changed_key):
    # type: (str, Any, str) -> Tuple[Dict[str, Any], int]
    """The result of install-boot-unit / uninstall-boot-unit (``changed_key``: how each names a change)."""
    out = {"command": command, "outcome": OUTCOME_SUCCESS, "unit": result.unit_path,
           "request": result.request_path, changed_key: result.changed, "commands": result.commands}
    if result.holders_units:
        out["holders_units"] = list(result.holders_units)
    if result.errors:
        out.update(outcome="failed", error={"code": "boot-unit-failed", "message": "; ".join(result.errors)})
        return out, 1
    return out, 0


def cmd_sim_reboot(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    if backend.sim is None:
        raise BadInput("sim-reboot needs --backend sim:<GPU>:<count> and --sim-state PATH")
    backend.sim.reboot()
    gpus, _ = read_gpus(backend)
    return {"command": "sim-reboot", "boots": backend.sim.store.load().get("boots"), "gpus": gpus_json(gpus)}, 0
