"""``apply``: bring every GPU to the plan, assert-then-apply, and nothing more.

1. Read the live state and plan (pure, :mod:`planner`). A node already right ends here: 0 changes.
2. Refuse while compute processes run on a GPU that needs changes (their PIDs named), or while NVML
   will not list them (an unreadable list is no proof of an idle GPU), unless ``force``: then the
   listed ones are killed first.
3. Stop the GPU's clients and wait until no other process holds a GPU device file (a stop only starts
   a client going); set MIG mode where needed; a mode left pending needs a GPU reset
   (``nvidia-smi -r``) where allowed, or else a reboot (RebootRequired).
4. Plan again from a fresh read (a reset clears instances), then destroy stale compute instances,
   then GPU instances, create GPU instances at the solver's placements and their compute instances.
5. Read back and plan once more: anything left to do is a failure. Start the clients again, always.

Every step re-reads NVML, so a run killed anywhere is repaired by the next one.
"""

import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .errors import GpuBusy, NodeFailure, RebootRequired
from .live import LiveGpu
from .mig import PartitionSpec
from .nvml import NvmlWriter
from .planner import GpuPlan, plan_node


class Host(typing.NamedTuple):
    """Everything apply does outside NVML, injected (real commands, or the simulator's equivalents)."""

    stop_clients: Callable[[], List[Any]]
    start_clients: Callable[[List[Any]], List[str]]
    # nvidia-smi -r -i <PCI bus ids>: (exit code, output). Bus ids, not indices: an index is NVML's
    # enumeration order, which CUDA_VISIBLE_DEVICES-style settings and driver versions can reorder, while
    # the bus id names one device for good (mig-parted resets by bus id too: util/device.go).
    reset_gpus: Callable[[List[Any]], Tuple[int, str]]
    kill: Callable[[int], bool]
    log: Callable[[str], None]
    # After the clients are stopped: return once nothing else holds the GPUs, or raise GpuBusy naming
    # the holders (holders.wait_released). A no-op where nothing can be checked (a simulated node).
    wait_released: Callable[[], None] = lambda: None


class ApplyReport(typing.NamedTuple):
    plans: List[GpuPlan]  # the final plans (all converged on success)
    gpus: List[LiveGpu]  # the state read back at the end
    initial_plans: List[GpuPlan]
    resets: int
    client_problems: List[str]


def _nvml_failure(writer, exc, what):
    # type: (NvmlWriter, Exception, str) -> NodeFailure
    nv = writer.nv
    code = getattr(exc, "value", None)
    text = "%s failed: %s" % (what, writer.error_text(exc))
    if code == getattr(nv, "NVML_ERROR_INSUFFICIENT_RESOURCES", 23):
        return NodeFailure(text, code="insufficient-resources")
    if code == getattr(nv, "NVML_ERROR_IN_USE", 19):
        return GpuBusy(text)
    if code == getattr(nv, "NVML_ERROR_NO_PERMISSION", 4):
        return NodeFailure(text + "; run as root", code="no-permission")
    if code == getattr(nv, "NVML_ERROR_RESET_REQUIRED", 16):
        return RebootRequired(text)
    return NodeFailure(text, code="nvml-error")


def _step(writer, what, call, *args):
    # type: (NvmlWriter, str, Callable[..., Any], Any) -> Any
    try:
        return call(*args)
    except writer.nv.NVMLError as exc:
        raise _nvml_failure(writer, exc, what)


def _busy(plans):
    # type: (Sequence[GpuPlan]) -> List[GpuPlan]
    """GPUs that need changes and run compute processes, or whose process list NVML would not give."""
    return [p for p in plans if not p.converged and (p.pids or p.pids_unreadable)]


def _busy_message(plans):
    # type: (Sequence[GpuPlan]) -> str
    parts = []
    for p in plans:
        if p.pids:
            parts.append("GPU %d runs compute process%s %s" % (p.index, "es" if len(p.pids) > 1 else "",
                                                             ", ".join(str(x) for x in p.pids)))
        else:
            parts.append("GPU %d may be in use: its process list is unreadable (%s)" % (p.index, p.pids_unreadable))
    if any(p.pids_unreadable for p in plans):
        return "; ".join(parts) + "; stop its clients, or rerun with --force to change it anyway"
    return "; ".join(parts) + "; stop them, or rerun with --force to kill them"


def _handle_processes(writer, plans, spec, host, force, replan=plan_node):
    # type: (NvmlWriter, List[GpuPlan], PartitionSpec, Host, bool, Callable[..., List[GpuPlan]]) -> List[GpuPlan]
    busy = _busy(plans)
    if not busy:
        return plans
    if not force:
        raise GpuBusy(_busy_message(busy))
    for plan in busy:
        if plan.pids_unreadable:
            host.log("GPU %d: process list unreadable (%s); changing it anyway (--force)"
                     % (plan.index, plan.pids_unreadable))
        for pid in plan.pids:
            host.log("killing compute process %d on GPU %d (--force)" % (pid, plan.index))
            host.kill(pid)
    plans = replan(writer.read_all(), spec)  # (disable plans MIG off with its own planner)
    still = [p for p in plans if not p.converged and p.pids]  # an unreadable list was accepted above
    if still:
        raise GpuBusy(_busy_message(still).split("; stop them")[0] + " even after killing; giving up")
    return plans


def _activation_text(writer, activation, pending):
    # type: (NvmlWriter, Dict[int, int], List[int]) -> str
    """What nvmlDeviceSetMigMode said about activating the mode on the pending GPUs, e.g.
    " (activation: GPU requires restart, NVML error 16)": RESET_REQUIRED is the expected Ampere answer,
    IN_USE means a client still held the GPU."""
    codes = {}  # type: Dict[int, List[int]]
    for index in pending:
        if activation.get(index):
            codes.setdefault(activation[index], []).append(index)
    parts = []
    for code, indices in sorted(codes.items()):
        try:
            text = writer.nv.nvmlErrorString(code)
            text = text.decode() if isinstance(text, bytes) else str(text)
        except Exception:  # noqa: BLE001 - only words for a message; the number is enough
            text = "error"
        which = "" if len(codes) == 1 else "GPU %s: " % ", ".join(str(i) for i in indices)
        parts.append("%s%s, NVML error %d" % (which, text, code))
    return " (activation: %s)" % "; ".join(parts) if parts else ""


def _set_modes(writer, plans, host, allow_reset, enable=True):
    # type: (NvmlWriter, List[Any], Host, bool, bool) -> int
    """Enable MIG (``disable``: MIG off, plans with ``disable_mig``) where needed; reset GPUs whose mode
    stays pending. Returns the number of resets."""
    activation = {}  # type: Dict[int, int]
    word = "enabling" if enable else "disabling"
    todo = [p for p in plans if (p.enable_mig if enable else p.disable_mig)]
    for plan in todo:
        host.log("GPU %d: %s MIG mode" % (plan.index, word))
        activation[plan.index] = _step(writer, "GPU %d: %s MIG mode" % (plan.index, word), writer.set_mig_mode,
                                       plan.index, enable)
    # nvmlDeviceSetMigMode answers SUCCESS and reports activation separately: the mode is pending while a
    # client held the GPU (activation IN_USE) or where no reset is exposed (passthrough, RESET_REQUIRED).
    # Like mig-parted, what counts is current versus pending read back afterwards, not the status.
    target = 1 if enable else 0
    read = [g for g in (writer.read_gpu(p.index) for p in todo)
            if not (g.mig_current == target and g.mig_pending == target)]
    pending = [g.index for g in read]
    bus_ids = [g.bus_id or g.index for g in read]  # the index only where NVML gave no PCI info
    if not pending:
        return 0
    names = ", ".join(str(i) for i in pending) + _activation_text(writer, activation, pending)
    passthrough = [i for i in pending if writer.passthrough(i)]
    if passthrough or not allow_reset:
        why = "the GPUs are passed through to a VM" if passthrough else "GPU reset is disabled (--no-reset)"
        raise RebootRequired("MIG mode is pending on GPU %s and %s: reboot the node to apply it" % (names, why))
    host.log("GPU %s: MIG mode pending, resetting (nvidia-smi -r)" % names)
    rc, output = writer.released(host.reset_gpus, bus_ids)  # our own NVML handle would block the reset
    if rc != 0:
        last = [line for line in output.splitlines() if line.strip()]
        raise RebootRequired("MIG mode is pending on GPU %s and the GPU reset failed (exit %d: %s): reboot the node"
                             " to apply it" % (names, rc, last[-1].strip()[:200] if last else "no output"))
    # Read back as above: the mode each GPU was set to, current and pending (disable sets 0, where the old
    # "MIG enabled" test called every successfully reset GPU still pending).
    after = (writer.read_gpu(i) for i in pending)
    still = [g.index for g in after if not (g.mig_current == target and g.mig_pending == target)]
    if still:
        raise RebootRequired("MIG mode is still pending on GPU %s after a reset: reboot the node to apply it"
                             % ", ".join(str(i) for i in still))
    return 1


def _converge_instances(writer, plans, host):
    # type: (NvmlWriter, List[GpuPlan], Host) -> None
    for plan in plans:
        i = plan.index
        for gi_id, ci_id in plan.destroy_cis:
            _step(writer, "GPU %d: destroying compute instance %d of GPU instance %d" % (i, ci_id, gi_id),
                  writer.destroy_compute_instance, i, gi_id, ci_id)
        for gi_id in plan.destroy_gis:
            _step(writer, "GPU %d: destroying GPU instance %d" % (i, gi_id), writer.destroy_gpu_instance, i, gi_id)
        for gi_id, slices in plan.create_cis:
            _step(writer, "GPU %d: creating the compute instance of GPU instance %d" % (i, gi_id),
                  writer.create_full_compute_instance, i, gi_id, slices)
        for inst in plan.create:
            what = "GPU %d: creating %s at start %d" % (i, inst.profile.name, inst.start)
            host.log(what)
            gi_id = _step(writer, what, writer.create_gpu_instance, i, inst.profile.id, inst.start, inst.size)
            _step(writer, "GPU %d: creating the compute instance of %s at start %d" % (i, inst.profile.name, inst.start),
                  writer.create_full_compute_instance, i, gi_id, inst.profile.compute_slices)


def before_first_change(writer, plans, gpus, force, on_change=None):
    # type: (NvmlWriter, List[Any], List[Any], bool, Optional[Callable[[], None]]) -> None
    """What apply and disable check before anything changes, in this order: every pynvml function and
    driver entry point the plans need, and a readable process list (an old driver would otherwise take
    the MIG mode change and then fail on the first placement); then no busy GPU unless ``force``. Then
    ``on_change`` runs (the caller labels the node pending, or removes its boot unit)."""
    missing = writer.missing_entry_points(plans, gpus)
    if missing is not None:
        raise missing
    busy = _busy(plans)
    if busy and not force:
        raise GpuBusy(_busy_message(busy))  # refused before anything changed
    if on_change is not None:
        on_change()


def reconcile(writer, spec, host, force=False, allow_reset=True, on_change=None):
    # type: (NvmlWriter, PartitionSpec, Host, bool, bool, Callable[[List[GpuPlan]], None]) -> ApplyReport
    """Bring the node to ``spec``. ``on_change`` runs once, before the first mutating step, and only if
    something will change (the caller labels the node pending there)."""
    gpus = writer.read_all()
    initial = plan_node(gpus, spec)
    if all(p.converged for p in initial):
        return ApplyReport(initial, gpus, initial, 0, [])
    before_first_change(writer, initial, gpus, force, on_change and (lambda: on_change(initial)))
    plans = _handle_processes(writer, initial, spec, host, force)
    stopped = host.stop_clients()
    problems = []  # type: List[str]
    resets = 0
    try:
        # Always before the first mutating call, not only before a mode change: DCGM holds instances
        # (destroying them answers IN_USE), and a static-pod plugin whose manifest returns before the
        # old pod is gone is not restarted, so it would never re-enumerate.
        host.wait_released()
        todo = [p for p in plans if not p.converged]
        resets = _set_modes(writer, todo, host, allow_reset)
        plans = plan_node(writer.read_all(), spec)
        _converge_instances(writer, [p for p in plans if not p.converged], host)
        gpus = writer.read_all()
        plans = plan_node(gpus, spec)
        left = [p for p in plans if not p.converged]
        if left:
            raise NodeFailure("GPU %s did not reach the planned layout (read back after applying)"
                              % ", ".join(str(p.index) for p in left), code="verify-failed")
    finally:
        problems = host.start_clients(stopped)
    return ApplyReport(plans, gpus, initial, resets, problems)
