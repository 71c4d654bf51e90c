"""``apply``: bring every GPU to the plan, assert-then-apply, and nothing more.

1. Read the live state and plan (pure, :mod:`planner`). A request that gives GPUs of two models different
   layouts is refused (the node label names one). A node already right ends here: 0 changes.
2. Refuse, before anything changes: a plan that would destroy an instance or change the MIG mode when
   the caller said "destroy nothing" (DestroyRequired); a driver without what the plan needs; compute
   processes in the way (:func:`planner.blockers`: on an instance the plan destroys, or on a GPU whose
   mode changes), or an unreadable process list where something must be idle, unless ``force``: then
   exactly those processes are ended first. Processes in kept instances never stop a create beside them.
3. Stop the GPU's clients and wait until no other process holds the device files of what changes (a
   GPU whose mode changes, the capability files of instances to destroy); set MIG mode where needed; a
   mode left pending needs a GPU reset (``nvidia-smi -r``) where allowed, or else a reboot
   (RebootRequired).
4. Plan again from a fresh read (a reset clears instances), then destroy stale compute instances,
   then GPU instances, create GPU instances at the solver's placements and their compute instances.
5. Read back and plan once more: anything left to do is a failure. Start the clients again, always.

Every step re-reads NVML, so a run killed anywhere is repaired by the next one.
"""

import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import DestroyRequired, GpuBusy, GpuLost, NodeFailure, RebootRequired
from ..driver.live import LiveGpu
from ..mig import PartitionSpec
from ..driver.nvml import NvmlWriter
from ..request import GpuLayouts
from .planner import GpuPlan, as_is, blockers, busy, mixed_layouts, plan_node

# (pid, its start time when NVML listed it) of each process --force ends
Targets = List[Tuple[int, Optional[int]]]


class ReleaseScope(typing.NamedTuple):
    """What must be let go of before the first change (the device files that matter, resolved by the host):
    GPUs whose MIG mode changes, as (index, minor number), and GPU instances to destroy, as (index, minor,
    GPU instance id, its compute instance ids). Empty for a change that only creates instances."""

    gpus: Tuple[Tuple[int, Optional[int]], ...] = ()
    instances: Tuple[Tuple[int, Optional[int], int, Tuple[int, ...]], ...] = ()

    @property
    def empty(self):
        # type: () -> bool
        return not (self.gpus or self.instances)


class Host(typing.NamedTuple):
    """Everything apply does outside NVML, injected (real commands, or the simulator's equivalents)."""

    stop_clients: Callable[[], List[Any]]
    start_clients: Callable[[List[Any]], List[str]]
    # nvidia-smi -r -i <PCI bus ids>: (exit code, output). Bus ids, not indices: an index is NVML's
    # enumeration order, which CUDA_VISIBLE_DEVICES-style settings and driver versions can reorder, while
    # the bus id names one device for good (mig-parted resets by bus id too: util/device.go).
    reset_gpus: Callable[[List[Any]], Tuple[int, str]]
    # --force: end these processes (processkill.end_all); the callable says whether NVML still lists a pid
    end_processes: Callable[[Targets, Callable[[int], bool]], Any]
    log: Callable[[str], None]
    # After the clients are stopped: return once nothing else holds the device files of the scope, or
    # raise GpuBusy naming the holders (holders.wait_released), or NodeFailure holder-scan-timeout when a
    # look at /proc does not answer in time. A no-op where nothing can be checked.
    wait_released: Callable[[ReleaseScope], None] = lambda scope: None
    # A process's start time (/proc/<pid>/stat), taken as NVML lists it (NvmlReader's stamp)
    start_time: Callable[[int], Optional[int]] = lambda pid: None
    # kubelet's allocations, read afresh at every plan of a per-GPU request (holdings.allocations_reader);
    # None: not read (the planner then destroys what the layout leaves out, as a labelled pool's rollout
    # does on a drained node)
    allocations: Callable[[], Any] = lambda: None


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
    if code == getattr(nv, "NVML_ERROR_GPU_IS_LOST", 15):
        return GpuLost(text + ": the GPU has fallen off the bus or is otherwise inaccessible; reboot the node "
                              "to recover it")
    return NodeFailure(text, code="nvml-error")


def _step(writer, what, call, *args):
    # type: (NvmlWriter, str, Callable[..., Any], Any) -> Any
    try:
        return call(*args)
    except writer.nv.NVMLError as exc:
        raise _nvml_failure(writer, exc, what)


def busy_message(plans, gpus=None):
    # type: (Sequence[Any], Optional[Sequence[LiveGpu]]) -> str
    """Which processes are in the way of which change, one clause per GPU."""
    by_index = dict((g.index, g) for g in gpus or ())
    parts = []
    for p in plans:
        found = blockers(p)
        if found:
            pids = ", ".join(str(x) for x in sorted(set(proc.pid for proc in found)))
            plural = "es" if len(set(proc.pid for proc in found)) > 1 else ""
            if p.enable_mig or getattr(p, "disable_mig", False):
                why = "and its MIG mode must change"
            else:
                gis = sorted(set(proc.gi for proc in found if proc.gi is not None))
                where = _instances_text(by_index.get(p.index), gis)
                why = ("in %s, which the plan destroys" % where if gis else "")
                if any(proc.gi is None for proc in found):
                    why = (why + "; " if why else "") + "in an instance NVML did not name, while the plan destroys"
            parts.append("GPU %d runs compute process%s %s %s" % (p.index, plural, pids, why))
        else:
            parts.append("GPU %d may be in use: its process list is unreadable (%s)" % (p.index, p.pids_unreadable))
    if any(p.pids_unreadable and not blockers(p) for p in plans):
        return "; ".join(parts) + "; stop its clients, or rerun with --force to change it anyway"
    return "; ".join(parts) + "; stop them, or rerun with --force to kill them"


def _instances_text(gpu, gi_ids):
    # type: (Optional[LiveGpu], List[int]) -> str
    """"GPU instance 3 (placed at 4)" for the message: the id NVML gives and where the instance sits."""
    starts = dict((gi.id, gi.start) for gi in (gpu.gis if gpu is not None else ()))
    return ", ".join("GPU instance %d%s" % (g, " (placed at %d)" % starts[g] if g in starts else "") for g in gi_ids)


def _still_listed(writer, index):
    # type: (NvmlWriter, int) -> Callable[[int], bool]
    """Whether NVML lists ``pid`` on GPU ``index`` right now (asked again before each signal of --force)."""
    def listed(pid):
        # type: (int) -> bool
        processes = writer.processes(index)
        return processes is None or any(p.pid == pid for p in processes)  # unreadable: no proof it is gone

    return listed


def _handle_processes(writer, plans, spec, host, force, replan=plan_node):
    # type: (NvmlWriter, List[Any], PartitionSpec, Host, bool, Callable[..., List[Any]]) -> List[Any]
    """Refuse while processes are in the way; with ``force`` end exactly those (the processes in kept
    instances go on), each re-listed by NVML and checked against the start time taken when NVML listed it,
    all sent SIGTERM first and given one grace period together."""
    found = busy(plans)
    if not found:
        return plans
    if not force:
        raise GpuBusy(busy_message(found))
    for plan in found:
        if plan.pids_unreadable:
            host.log("GPU %d: process list unreadable (%s); changing it anyway (--force)"
                     % (plan.index, plan.pids_unreadable))
        targets = blockers(plan)
        for proc in targets:
            host.log("killing compute process %d on GPU %d (--force)" % (proc.pid, plan.index))
        if targets:
            host.end_processes([(proc.pid, proc.started) for proc in targets], _still_listed(writer, plan.index))
    plans = replan(writer.read_all(), spec)  # (disable plans MIG off with its own planner)
    still = [p for p in plans if blockers(p)]  # an unreadable list was accepted above
    if still:
        raise GpuBusy(busy_message(still).split("; stop them")[0] + " even after killing; giving up")
    return plans


def release_scope(plans, gpus):
    # type: (Sequence[Any], Sequence[LiveGpu]) -> ReleaseScope
    """The device files that matter before the first change: a GPU's own (``/dev/nvidia<minor>``) where its
    MIG mode changes (a holder keeps the mode pending and refuses the reset), the capability files of the
    instances to destroy (a holder there makes the destroy answer IN_USE). A kept instance, or a GPU that
    only gets new instances, is nobody's business: its users go on."""
    minors = dict((g.index, g.minor) for g in gpus)
    gis_by_gpu = dict((g.index, g.gis) for g in gpus)
    mode = []
    instances = []
    for plan in plans:
        if plan.converged:
            continue
        minor = minors.get(plan.index)
        if plan.enable_mig or getattr(plan, "disable_mig", False):
            mode.append((plan.index, minor))
        doomed = set(plan.destroy_gis) | set(gi for gi, _ in plan.destroy_cis)
        for gi in gis_by_gpu.get(plan.index, ()):
            if gi.id in doomed:
                instances.append((plan.index, minor, gi.id, tuple(ci.id for ci in gi.cis)))
    return ReleaseScope(tuple(mode), tuple(instances))


def refuse_destroy(plans):
    # type: (Sequence[GpuPlan]) -> None
    """With "destroy nothing" (``apply --no-destroy``, a request with ``"destroy": false``): refuse, before
    anything changes, a plan that would destroy an existing instance (GPU or compute), change a MIG mode
    or (after one) reset a GPU. The caller falls back to a drained rollout."""
    parts = []
    for p in plans:
        what = []
        if p.enable_mig:
            what.append("a MIG mode change")
        if p.destroy_gis:
            what.append("destroying GPU instance%s %s" % ("s" if len(p.destroy_gis) > 1 else "",
                                                          ", ".join(str(g) for g in p.destroy_gis)))
        rebuilt = sorted(set(gi for gi, _ in p.destroy_cis) - set(p.destroy_gis))
        if rebuilt:
            what.append("replacing the compute instances of GPU instance%s %s" % ("s" if len(rebuilt) > 1 else "",
                                                                                 ", ".join(str(g) for g in rebuilt)))
        if what:
            parts.append("GPU %d needs %s" % (p.index, " and ".join(what)))
    if parts:
        raise DestroyRequired("the layout cannot be reached by only adding instances: %s; nothing was changed "
                              "(apply without --no-destroy, on a drained node, to change it)" % "; ".join(parts))


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


def _passthrough(writer, indices):
    # type: (NvmlWriter, List[int]) -> Tuple[List[int], List[str]]
    """The GPUs passed through to a VM, and "GPU i: NVML's answer" for each whose virtualization mode cannot be
    read: such a GPU may be one, so it is never reset (a reboot applies the mode either way). GPU_IS_LOST
    fails the GPU as lost."""
    passed, unknown = [], []  # type: Tuple[List[int], List[str]]
    for index in indices:
        try:
            if writer.passthrough(index):
                passed.append(index)
        except writer.nv.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(writer.nv, "NVML_ERROR_GPU_IS_LOST", 15):
                raise _nvml_failure(writer, exc, "GPU %d: reading its virtualization mode" % index)
            unknown.append("GPU %d: %s" % (index, writer.error_text(exc)))
    return passed, unknown


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
    passthrough, unknown = _passthrough(writer, pending)
    if passthrough or unknown or not allow_reset:
        why = "the GPUs are passed through to a VM" if passthrough else \
            "whether the GPUs are passed through to a VM cannot be read (%s)" % "; ".join(unknown) if unknown else \
            "GPU reset is disabled (--no-reset)"
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
    driver entry point the plans need, a readable process list (an old driver would otherwise take the
    MIG mode change and then fail on the first placement) and a driver that offers every profile to
    create; then no process in the way unless ``force``. Then ``on_change`` runs (the caller labels the
    node pending, or removes its boot unit)."""
    missing = writer.missing_entry_points(plans, gpus)
    if missing is not None:
        raise missing
    found = busy([p for p in plans if not p.converged])
    if found and not force:
        raise GpuBusy(busy_message(found, gpus))  # refused before anything changed
    if on_change is not None:
        on_change()


def reconcile(writer, spec, host, force=False, allow_reset=True, on_change=None, allow_destroy=True, at_boot=False):
    # type: (NvmlWriter, PartitionSpec, Host, bool, bool, Callable[[List[GpuPlan]], None], bool, bool) -> ApplyReport
    """Bring the node to ``spec``. ``on_change`` runs once, before the first mutating step, and only if
    something will change (the caller labels the node pending there). ``allow_destroy`` False: refuse
    (DestroyRequired) where more than adding instances is needed."""
    left = {}  # type: Dict[int, str]

    def planned(gpus, _spec=spec):
        # type: (List[Any], Any) -> List[GpuPlan]
        # Kubelet's allocations are read after NVML each time: the last read, just before the destroys
        # (and after the clients, the device plugin among them, were stopped), is what decides. A GPU a plan
        # of this run left as it is stays so for the rest of the run: a process that ends, or a pod that goes,
        # meanwhile would make a later plan change it without the holder wait of its instances, with the
        # result still saying it was left, or the read-back find it short of a layout it was never given.
        plans = plan_node(gpus, spec, host.allocations() if isinstance(spec, GpuLayouts) else None, at_boot)
        out = []
        for plan, gpu in zip(plans, gpus):
            if plan.left:
                left.setdefault(plan.index, plan.left)
            elif plan.index in left:
                plan = as_is(gpu, plan.model, plan.profiles_source, left[plan.index])
            out.append(plan)
        return out

    gpus = writer.read_all()
    initial = planned(gpus)
    mixed = None if isinstance(spec, GpuLayouts) else mixed_layouts(initial)  # per GPU: layouts differ by design
    if mixed is not None:
        raise mixed
    if all(p.converged for p in initial):
        return ApplyReport(initial, gpus, initial, 0, [])
    if not allow_destroy:
        refuse_destroy(initial)
    before_first_change(writer, initial, gpus, force, on_change and (lambda: on_change(initial)))
    plans = _handle_processes(writer, initial, spec, host, force, replan=planned)
    stopped = host.stop_clients()
    problems = []  # type: List[str]
    resets = 0
    try:
        # Before the first mutating call: whoever holds the device files of what changes (a GPU whose
        # mode changes, an instance to destroy) is waited for, and named if it does not let go. Users of
        # kept instances are not: creating beside them needs nothing of theirs.
        host.wait_released(release_scope(plans, gpus))
        todo = [p for p in plans if not p.converged]
        resets = _set_modes(writer, todo, host, allow_reset)
        plans = planned(writer.read_all())
        if not allow_destroy:
            refuse_destroy(plans)  # the node changed since the first read: still nothing may be destroyed
        _converge_instances(writer, [p for p in plans if not p.converged], host)
        gpus = writer.read_all()
        plans = planned(gpus)
        short = [p for p in plans if not p.converged]
        if short:
            raise NodeFailure("GPU %s did not reach the planned layout (read back after applying)"
                              % ", ".join(str(p.index) for p in short), code="verify-failed")
    finally:
        problems = host.start_clients(stopped)
    return ApplyReport(plans, gpus, initial, resets, problems)
