"""Desired versus live: what ``apply`` must change on each GPU. Pure: no NVML, no files.

The desired state of a GPU is: MIG mode enabled (current and pending), exactly the requested multiset of
GPU instances, and in each of them one compute instance spanning it. Instances that exist already are
kept wherever they sit, as long as the rest of the request can be placed around them: of all sets of
existing instances that can be completed to the request, the plan keeps the one that takes the fewest
instances a process runs in away from it, then a largest one (ties: the one needing fewest compute
instance changes, then the lowest starts) and places the rest in the free slots.
Only where no existing instance fits does it build the solver's own layout. A kept GPU instance whose
compute instances are not exactly one full-size instance gets them replaced; every other GPU instance is
destroyed. ``plan`` prints these actions, ``apply`` executes them: the same function decides both.
"""

import itertools
import typing
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import BadInput, NotMigCapable
from ..driver.live import LiveGi, LiveGpu, LiveProcess, effective_model, mode_name
from ..mig import GpuModel, Instance, Layout, PartitionSpec, Profile, plan as solve, render
from ..mig.solver import check_budget, complete
from ..kube.allocations import Allocations
from ..request import GpuLayouts
from .holdings import gi_holders


class GpuPlan(typing.NamedTuple):
    index: int
    name: str
    model: GpuModel
    profiles_source: str  # "nvml" or "catalogue"
    layout: Layout  # the request as the solver places it on an empty GPU: the node label's sequence
    target: Layout  # the instances the GPU should hold: the kept ones where they are, the rest around them
    enable_mig: bool  # MIG mode must be set (disabled, or a pending change away from enabled)
    keep: Tuple[LiveGi, ...]
    destroy_cis: Tuple[Tuple[int, int], ...]  # (gi id, ci id), stale ones first
    destroy_gis: Tuple[int, ...]
    create: Tuple[Instance, ...]
    create_cis: Tuple[Tuple[int, int], ...]  # (gi id, slices) of kept GPU instances needing a full CI
    pids: Tuple[int, ...]
    pids_unreadable: str = ""  # why NVML would not list the GPU's compute processes ("" when it did)
    processes: Tuple[LiveProcess, ...] = ()  # the same processes, with the instance each one runs in
    left: str = ""  # a per-GPU request (version 2) left this GPU as it is: why (busy, MIG off, not listed)

    @property
    def converged(self):
        # type: () -> bool
        return not (self.enable_mig or self.destroy_cis or self.destroy_gis or self.create or self.create_cis)

    @property
    def action_count(self):
        # type: () -> int
        """Mutating calls this plan needs, mode change included (creates count a GI and a CI each)."""
        return (int(self.enable_mig) + len(self.destroy_cis) + len(self.destroy_gis) + 2 * len(self.create)
                + len(self.create_cis))


def model_for(gpu):
    # type: (LiveGpu) -> Tuple[GpuModel, str]
    """The model to plan with, or NotMigCapable naming the GPU and why."""
    if not gpu.mig_capable:
        raise NotMigCapable("GPU %d (%s) is not MIG-capable: NVML does not report a MIG mode%s"
                            % (gpu.index, gpu.name or "unknown", _why(gpu)))
    model, source = effective_model(gpu)
    if model is None:
        raise NotMigCapable("GPU %d (%s) reports MIG mode but no GPU instance profiles, and it is not in the "
                            "catalogue" % (gpu.index, gpu.name))
    return model, source


def _why(gpu):
    # type: (LiveGpu) -> str
    for note in gpu.notes:
        if note.startswith("MIG mode"):
            return " (%s)" % note
    return ""


def _full_ci_ok(gi, slices):
    # type: (LiveGi, int) -> bool
    return len(gi.cis) == 1 and gi.cis[0].slices == slices


def _keepable(model, gis, wanted):
    # type: (GpuModel, Sequence[LiveGi], Counter) -> List[Tuple[LiveGi, Instance]]
    """Existing GPU instances of a requested profile, whole (their size is the profile's), as Instances."""
    out = []
    for gi in sorted(gis, key=lambda g: (g.start, g.id)):
        profile = model.profile_by_id(gi.profile_id)
        if profile is not None and wanted[profile] and gi.size == profile.memory_slices:
            out.append((gi, Instance(profile, gi.start)))
    return out


def choose_keep(model, gis, wanted, busy=frozenset()):
    # type: (GpuModel, Sequence[LiveGi], Sequence[Profile], typing.AbstractSet[int]) -> Tuple[Tuple[LiveGi, ...], Layout]
    """The existing GPU instances to keep and the layout they complete to (kept ones at their starts).

    Tries sets of existing instances from the largest down: a set qualifies when its profiles are part of
    the request and :func:`complete` places the rest of the request around it. First the set that takes
    the fewest ``busy`` instances (GPU instance ids a compute process runs in) away from their processes,
    destroyed or their compute instances replaced: a plan that takes one is refused (or, with --force,
    kills its process) where an equal plan would have left it serving. Then the largest set; then the one
    whose compute instances need no change most often; then the lowest (start, id) list. The empty set
    always qualifies when the request fits the GPU at all. Instances take at least one compute slice each
    and a GPU has at most 7, so at most 2^7 = 128 sets are tried, each a small placement search.
    """
    need = Counter(wanted)
    cands = _keepable(model, gis, need)
    best = None  # type: Optional[Tuple[Tuple[int, int, int, Tuple[Tuple[int, int], ...]], Tuple[LiveGi, ...], Layout]]
    for size in range(min(len(cands), len(wanted)), -1, -1):
        if best is not None and best[0][0] == 0:
            break  # nothing busy is taken: a smaller set cannot do better
        for subset in itertools.combinations(cands, size):
            kept = Counter(inst.profile for _, inst in subset)
            if any(kept[p] > need[p] for p in kept):
                continue
            rest = list(wanted)
            for p in kept.elements():
                rest.remove(p)
            layout = complete(model, [inst for _, inst in subset], rest)
            if layout is None:
                continue
            whole = set(gi.id for gi, inst in subset if _full_ci_ok(gi, inst.profile.compute_slices))
            taken = sum(1 for gi, _ in cands if gi.id in busy and gi.id not in whole)
            rank = (taken, -size, -len(whole), tuple((gi.start, gi.id) for gi, _ in subset))
            if best is None or rank < best[0]:
                best = (rank, tuple(gi for gi, _ in subset), layout)
    if best is not None:
        return best[1], best[2]
    raise AssertionError("the request was placed on an empty GPU, so keeping nothing must complete")


def plan_gpu(gpu, spec):
    # type: (LiveGpu, PartitionSpec) -> GpuPlan
    model, source = model_for(gpu)
    layout = solve(spec, model)  # MigInputError: bad label for this GPU
    # The instances compute processes run in (a process NVML did not place blocks any destroy whatever is kept)
    busy = frozenset(p.gi for p in gpu.processes if p.gi is not None)
    kept, target = choose_keep(model, gpu.gis, [i.profile for i in layout.instances], busy)
    kept_ids = set(gi.id for gi in kept)
    keep = []  # type: List[LiveGi]
    destroy_cis = []  # type: List[Tuple[int, int]]
    destroy_gis = []  # type: List[int]
    create_cis = []  # type: List[Tuple[int, int]]
    for gi in sorted(gpu.gis, key=lambda g: (g.start, g.id)):
        if gi.id in kept_ids:
            keep.append(gi)
            slices = model.profile_by_id(gi.profile_id).compute_slices  # type: ignore[union-attr]
            if not _full_ci_ok(gi, slices):
                destroy_cis.extend((gi.id, ci.id) for ci in gi.cis)
                create_cis.append((gi.id, slices))
        else:
            destroy_cis.extend((gi.id, ci.id) for ci in gi.cis)
            destroy_gis.append(gi.id)
    existing = set((gi.profile_id, gi.start) for gi in kept)
    create = tuple(inst for inst in target.instances if (inst.profile.id, inst.start) not in existing)
    return GpuPlan(
        index=gpu.index, name=gpu.name, model=model, profiles_source=source, layout=layout, target=target,
        enable_mig=not gpu.mig_enabled, keep=tuple(keep), destroy_cis=tuple(destroy_cis),
        destroy_gis=tuple(destroy_gis), create=create, create_cis=tuple(create_cis), pids=gpu.pids,
        pids_unreadable=gpu.pids_unreadable, processes=gpu.processes,
    )


def plan_node(gpus, spec, allocations=None, at_boot=False):
    # type: (Sequence[LiveGpu], typing.Any, Optional[Allocations], bool) -> List[GpuPlan]
    """``allocations``: kubelet's (a per-GPU request never destroys what a pod was given); None: not read
    (a labelled pool's request: its rollout drains the node first, and at boot no pod runs). ``at_boot``:
    the boot unit's run (:func:`plan_gpu_layout`)."""
    if not gpus:
        raise NotMigCapable("NVML reports no GPUs on this node")
    if isinstance(spec, GpuLayouts):
        missing = sorted(set(i for i, _ in spec.gpus) - set(g.index for g in gpus))
        if missing:
            raise BadInput("the request names GPU %s, which this node does not have (GPUs %s)"
                           % (", ".join(str(i) for i in missing), ", ".join(str(g.index) for g in gpus)))
        return [plan_gpu_layout(gpu, spec.layout_of(gpu.index),
                                gi_holders(gpu, allocations) if allocations is not None else ({}, ""), at_boot)
                for gpu in gpus]
    return [plan_gpu(gpu, spec) for gpu in gpus]


def as_is(gpu, model, source, why):
    # type: (LiveGpu, GpuModel, str, str) -> GpuPlan
    """A plan that changes nothing on the GPU (its instances kept as they are, whatever their compute ones)."""
    current = tuple(sorted((Instance(model.profile_by_id(gi.profile_id), gi.start) for gi in gpu.gis
                            if model.profile_by_id(gi.profile_id) is not None), key=lambda i: i.start))
    layout = Layout(model, current)
    return GpuPlan(index=gpu.index, name=gpu.name, model=model, profiles_source=source, layout=layout, target=layout,
                   enable_mig=False, keep=tuple(gpu.gis), destroy_cis=(), destroy_gis=(), create=(), create_cis=(),
                   pids=gpu.pids, pids_unreadable=gpu.pids_unreadable, processes=gpu.processes, left=why)


def _exact_layout(gpu, model, pairs):
    # type: (LiveGpu, GpuModel, Sequence[Tuple[str, int]]) -> Layout
    """The per-GPU layout as asked, checked with the catalogue's placements and the counting rules."""
    instances, used = [], 0
    for name, start in pairs:
        profile = model.profile_by_name(name)
        if profile is None:
            raise BadInput("GPU %d (%s) has no profile %s; its profiles: %s" % (
                gpu.index, model.key, name[:32], ", ".join(p.name for p in model.profiles)))
        if start not in [p.start for p in profile.placements]:
            raise BadInput("GPU %d: %s cannot start at slot %d; its starts: %s" % (
                gpu.index, name, start, ",".join(str(p.start) for p in profile.placements)))
        bits = ((1 << profile.memory_slices) - 1) << start
        if used & bits:
            raise BadInput("GPU %d: %s at slot %d overlaps another instance of the request" % (gpu.index, name, start))
        used |= bits
        instances.append(Instance(profile, start))
    reason = check_budget(model, [i.profile for i in instances])
    if reason is not None:
        raise BadInput("GPU %d: %s" % (gpu.index, reason))
    return Layout(model, tuple(instances))


def plan_gpu_layout(gpu, pairs, held=({}, ""), at_boot=False):
    # type: (LiveGpu, Optional[Sequence[Tuple[str, int]]], Tuple[Optional[Dict[int, Tuple[str, ...]]], str], bool) -> GpuPlan
    """A version 2 (per-GPU) plan: keep the instances the layout names where they are, destroy only the
    others, create the missing ones. Left as it is: a GPU the request does not list, one with MIG off (turning
    it on may need a reset: never part of an auto pool's change), one where a process runs in an instance
    the layout leaves out (it turned busy after the plan was made: the next plan sees it), and one where
    kubelet allocated such an instance to a pod that exists, process or not (``held``, from
    :func:`holdings.gi_holders`: a pod pulling its image or loading a model has no process yet), or where
    that cannot be known (``held`` (None, why): the checkpoint or the MIG devices unreadable). ``at_boot``:
    the boot unit's run, before anything uses the GPUs: a listed GPU with MIG off and a layout that is not
    empty had MIG on when the request was made (a Hopper GPU comes back from a reboot with it off), so the
    mode is turned on and the layout created, as a labelled pool's boot unit does."""
    model, source = model_for(gpu)
    if pairs is None:
        return as_is(gpu, model, source, "not in the request")
    target = _exact_layout(gpu, model, pairs)
    if not gpu.mig_enabled:
        if at_boot and target.instances and not gpu.gis:
            return GpuPlan(index=gpu.index, name=gpu.name, model=model, profiles_source=source, layout=target,
                           target=target, enable_mig=True, keep=(), destroy_cis=(), destroy_gis=(),
                           create=tuple(target.instances), create_cis=(), pids=gpu.pids,
                           pids_unreadable=gpu.pids_unreadable, processes=gpu.processes)
        return as_is(gpu, model, source, "MIG mode is off")
    wanted = set((i.profile.id, i.start) for i in target.instances)
    keep = tuple(gi for gi in gpu.gis if (gi.profile_id, gi.start) in wanted
                 and gi.size == model.profile_by_id(gi.profile_id).memory_slices)  # type: ignore[union-attr]
    kept = set((gi.profile_id, gi.start) for gi in keep)
    doomed = tuple(gi for gi in gpu.gis if gi not in keep)
    # Every instance whose MIG device the plan takes away: destroyed, or its compute instances replaced (a
    # process in a compute instance the plan replaces is in the way as much as one in a destroyed instance).
    # A kept instance with no compute instance has no MIG device: nothing can run in it or be allocated it,
    # so creating its compute instance frees nothing (a run killed between the two creates leaves one).
    touched = [gi for gi in doomed] + [gi for gi in keep if gi.cis and not _full_ci_ok(
        gi, model.profile_by_id(gi.profile_id).compute_slices)]  # type: ignore[union-attr]
    busy_in = [p for p in gpu.processes if p.gi is None or p.gi in set(gi.id for gi in touched)]
    if touched and (busy_in or gpu.pids_unreadable):
        return as_is(gpu, model, source, "busy: a process runs in an instance the layout frees")
    holders, why = held
    if touched and holders is None:
        return as_is(gpu, model, source, "allocations unknown (%s): nothing is destroyed" % why)
    taken = [gi for gi in touched if holders and gi.id in holders]
    if taken:
        gi = taken[0]
        return as_is(gpu, model, source, "held: GPU instance %d (placed at %d) is allocated to pod %s, which the "
                      "layout frees" % (gi.id, gi.start, ", ".join(holders[gi.id])))  # type: ignore[index]
    destroy_cis, create_cis = [], []  # type: List[Tuple[int, int]], List[Tuple[int, int]]
    for gi in sorted(gpu.gis, key=lambda g: (g.start, g.id)):
        slices = model.profile_by_id(gi.profile_id).compute_slices if model.profile_by_id(gi.profile_id) else 0
        if gi in keep and not _full_ci_ok(gi, slices):
            destroy_cis.extend((gi.id, ci.id) for ci in gi.cis)
            create_cis.append((gi.id, slices))
        elif gi not in keep:
            destroy_cis.extend((gi.id, ci.id) for ci in gi.cis)
    create = tuple(i for i in target.instances if (i.profile.id, i.start) not in kept)
    return GpuPlan(index=gpu.index, name=gpu.name, model=model, profiles_source=source, layout=target, target=target,
                   enable_mig=False, keep=keep, destroy_cis=tuple(destroy_cis),
                   destroy_gis=tuple(gi.id for gi in sorted(doomed, key=lambda g: (g.start, g.id))), create=create,
                   create_cis=tuple(create_cis), pids=gpu.pids, pids_unreadable=gpu.pids_unreadable,
                   processes=gpu.processes)


def node_sequence(plans):
    # type: (Sequence[GpuPlan]) -> str
    """The normalized sequence the node gets labelled with: the one layout every GPU gets (see
    :func:`mixed_layouts`; several only where that check was not made)."""
    sequences = sorted(set(p.layout.sequence for p in plans))
    return sequences[0] if len(sequences) == 1 else "+".join(sequences)


def mixed_layouts(plans):
    # type: (Sequence[GpuPlan]) -> Optional[BadInput]
    """Why the node label could not name one layout for every GPU, or None.

    A node with two GPU models can get different layouts from one request (``--size 1g.10gb``: four on an
    A100 40GB, seven on an A100 80GB). ``aliyun.accelerator/nvidia_mig_sequence`` names one layout for the
    node, so such a request is refused before anything changes (exit 2, label ``failed`` with this reason),
    rather than labelled with the layout of one GPU. The same names on every GPU pass, whatever the models.
    """
    by_layout = {}  # type: Dict[str, List[GpuPlan]]
    for plan in plans:
        by_layout.setdefault(plan.layout.sequence, []).append(plan)
    if len(by_layout) < 2:
        return None
    parts = []
    for sequence, group in sorted(by_layout.items(), key=lambda kv: kv[1][0].index):
        indices = ", ".join(str(p.index) for p in group)
        names = sorted(set(p.name for p in group))
        parts.append("GPU %s (%s) %s" % (indices, ", ".join(names), sequence))
    return BadInput("this request gives the GPUs of this node different layouts (%s), and the node label names one "
                    "layout for every GPU: use a sequence every GPU model here holds, or one GPU model per node"
                    % "; ".join(parts), code="mixed-layouts")


def needs_idle(plan):
    # type: (typing.Any) -> bool
    """Whether carrying out the plan takes anything from a running process: a MIG mode change (and the GPU
    reset that may follow) needs the whole GPU, a destroy its instance. Creating in free slots takes
    nothing from the instances that stay."""
    return bool(plan.enable_mig or getattr(plan, "disable_mig", False) or plan.destroy_gis or plan.destroy_cis)


def blockers(plan):
    # type: (typing.Any) -> Tuple[LiveProcess, ...]
    """The compute processes in the way of ``plan`` (a GpuPlan, or disable's OffPlan).

    A MIG mode change blocks on every process of the GPU (nvmlDeviceSetMigMode's activation answers IN_USE,
    ``nvidia-smi -r`` refuses); a destroy on the processes in the instance it destroys (nvmlGpuInstanceDestroy
    and nvmlComputeInstanceDestroy answer IN_USE). A process whose instance NVML did not name blocks any
    destroy. Processes in kept instances never block: creating beside them needs nothing of theirs."""
    processes = tuple(getattr(plan, "processes", ()))
    if plan.enable_mig or getattr(plan, "disable_mig", False):
        return processes
    doomed_gis = set(plan.destroy_gis)
    doomed_cis = set(plan.destroy_cis)
    rebuilt = set(gi for gi, _ in doomed_cis)
    if not (doomed_gis or doomed_cis):
        return ()
    return tuple(p for p in processes if p.gi is None or p.gi in doomed_gis
                 or (p.gi in rebuilt and (p.ci is None or (p.gi, p.ci) in doomed_cis)))


def busy(plans):
    # type: (Sequence[typing.Any]) -> List[typing.Any]
    """Plans that cannot go ahead while processes run: some are in the way (:func:`blockers`), or NVML would
    not list them while the plan needs something idle (an unreadable list is no proof of an idle GPU)."""
    return [p for p in plans if blockers(p) or (p.pids_unreadable and needs_idle(p))]


def plan_json(plan, gpu):
    # type: (GpuPlan, LiveGpu) -> Dict[str, typing.Any]
    """The per-GPU part of ``plan``'s JSON: what apply would do."""
    by_id = {gi.id: gi for gi in gpu.gis}

    def gi_json(gi):
        # type: (LiveGi) -> Dict[str, typing.Any]
        profile = plan.model.profile_by_id(gi.profile_id)
        return {"profile": profile.name if profile else "profile-%d" % gi.profile_id, "id": gi.profile_id,
                "start": gi.start, "size": gi.size, "gpu_instance_id": gi.id}

    return {
        "index": plan.index,
        "name": plan.name,
        "mig_mode": {"current": mode_name(gpu.mig_current), "pending": mode_name(gpu.mig_pending)},
        "profiles_source": plan.profiles_source,
        "converged": plan.converged,
        "mode_change": plan.enable_mig,
        "keep": [gi_json(gi) for gi in plan.keep],
        "destroy": [gi_json(by_id[g]) for g in plan.destroy_gis],
        "destroy_compute_instances": [{"gpu_instance_id": g, "compute_instance_id": c} for g, c in plan.destroy_cis],
        "create": [i.to_dict() for i in plan.create],
        "create_compute_instances": [{"gpu_instance_id": g} for g, _ in plan.create_cis],
        "processes": list(plan.pids),
        "blocking_processes": [p.pid for p in blockers(plan)],
        "mutating_calls": plan.action_count,
        "diagram": render(plan.target, "GPU %d %s (planned)" % (plan.index, plan.name)),
    }

