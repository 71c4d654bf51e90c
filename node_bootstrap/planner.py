"""Desired versus live: what ``apply`` must change on each GPU. Pure: no NVML, no files.

The desired state of a GPU is: MIG mode enabled (current and pending), one GPU instance per planned
instance at exactly the solver's placement, and in each of them one compute instance spanning it. A GPU
instance that already sits at a planned placement with the planned profile is kept; a kept one whose
compute instances are not exactly one full-size instance gets them replaced; every other GPU instance
is destroyed. ``plan`` prints these actions, ``apply`` executes them: the same function decides both.
"""

import typing
from typing import Dict, List, Optional, Sequence, Tuple

from .errors import NotMigCapable
from .live import LiveGi, LiveGpu, effective_model, mode_name
from .mig import GpuModel, Instance, Layout, PartitionSpec, plan as solve, render


class GpuPlan(typing.NamedTuple):
    index: int
    name: str
    model: GpuModel
    profiles_source: str  # "nvml" or "catalogue"
    layout: Layout  # the desired instances
    enable_mig: bool  # MIG mode must be set (disabled, or a pending change away from enabled)
    keep: Tuple[LiveGi, ...]
    destroy_cis: Tuple[Tuple[int, int], ...]  # (gi id, ci id), stale ones first
    destroy_gis: Tuple[int, ...]
    create: Tuple[Instance, ...]
    create_cis: Tuple[Tuple[int, int], ...]  # (gi id, slices) of kept GPU instances needing a full CI
    pids: Tuple[int, ...]
    pids_unreadable: str = ""  # why NVML would not list the GPU's compute processes ("" when it did)

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


def plan_gpu(gpu, spec):
    # type: (LiveGpu, PartitionSpec) -> GpuPlan
    model, source = model_for(gpu)
    layout = solve(spec, model)  # MigInputError: bad label for this GPU
    wanted = {}  # type: Dict[Tuple[int, int], Instance]
    for inst in layout.instances:
        wanted[(inst.profile.id, inst.start)] = inst
    keep = []  # type: List[LiveGi]
    destroy_cis = []  # type: List[Tuple[int, int]]
    destroy_gis = []  # type: List[int]
    create_cis = []  # type: List[Tuple[int, int]]
    matched = set()
    for gi in sorted(gpu.gis, key=lambda g: (g.start, g.id)):
        inst = wanted.get((gi.profile_id, gi.start))
        if inst is not None and (gi.profile_id, gi.start) not in matched and gi.size == inst.size:
            matched.add((gi.profile_id, gi.start))
            keep.append(gi)
            if not _full_ci_ok(gi, inst.profile.compute_slices):
                destroy_cis.extend((gi.id, ci.id) for ci in gi.cis)
                create_cis.append((gi.id, inst.profile.compute_slices))
        else:
            destroy_cis.extend((gi.id, ci.id) for ci in gi.cis)
            destroy_gis.append(gi.id)
    create = tuple(inst for key, inst in sorted(wanted.items(), key=lambda kv: (kv[0][1], kv[0][0]))
                   if key not in matched)
    return GpuPlan(
        index=gpu.index, name=gpu.name, model=model, profiles_source=source, layout=layout,
        enable_mig=not gpu.mig_enabled, keep=tuple(keep), destroy_cis=tuple(destroy_cis),
        destroy_gis=tuple(destroy_gis), create=create, create_cis=tuple(create_cis), pids=gpu.pids,
        pids_unreadable=gpu.pids_unreadable,
    )


def plan_node(gpus, spec):
    # type: (Sequence[LiveGpu], PartitionSpec) -> List[GpuPlan]
    if not gpus:
        raise NotMigCapable("NVML reports no GPUs on this node")
    return [plan_gpu(gpu, spec) for gpu in gpus]


def node_sequence(plans):
    # type: (Sequence[GpuPlan]) -> str
    """The normalized sequence the node gets labelled with (every GPU gets the same label's layout)."""
    sequences = sorted(set(p.layout.sequence for p in plans))
    return sequences[0] if len(sequences) == 1 else "+".join(sequences)


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
        "mutating_calls": plan.action_count,
        "diagram": render(plan.layout, "GPU %d %s (planned)" % (plan.index, plan.name)),
    }


def first_busy(plans):
    # type: (Sequence[GpuPlan]) -> Optional[GpuPlan]
    for plan in plans:
        if not plan.converged and plan.pids:
            return plan
    return None
