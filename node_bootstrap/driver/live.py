"""What a GPU looks like right now, as read from NVML: plain values, no I/O.

Also the one place where live NVML profile data overrides the catalogue (:func:`effective_model`): on a
node the driver's answer wins, the catalogue fills in what the driver will not say (for instance while
MIG mode is disabled, when NVML answers NOT_SUPPORTED to profile queries).
"""

import typing
from typing import Dict, List, Optional, Tuple

from ..mig import GpuModel, Instance, Layout, Placement, Profile, find_gpu_or_none, render

MIG_DISABLED = 0
MIG_ENABLED = 1


class LiveCi(typing.NamedTuple):
    id: int
    profile_id: int
    slices: int  # compute slices of the CI profile (0 when unknown)


class LiveGi(typing.NamedTuple):
    id: int
    profile_id: int
    start: int
    size: int
    cis: Tuple[LiveCi, ...]


class LiveProcess(typing.NamedTuple):
    """A compute process as NVML lists it on a GPU (nvmlProcessInfo_t, v2 and later: "If MIG is enabled,
    stores a valid GPU instance ID. gpuInstanceId is set to 0xFFFFFFFF otherwise", and the same for the
    compute instance). ``gi``/``ci`` None: not on a MIG instance, or a list without the ids (the v1
    struct of an old pynvml): then nobody can tell which instance it uses."""

    pid: int
    gi: Optional[int]
    ci: Optional[int]
    started: Optional[int] = None  # its start time (/proc/<pid>/stat), read as NVML listed it


class LiveMigDevice(typing.NamedTuple):
    """A MIG device as NVML lists it (nvmlDeviceGetMigDeviceHandleByIndex): one per compute instance, the
    thing NVIDIA's device plugin advertises (``nvidia.com/mig-<profile>``) and kubelet allocates to pods."""

    index: int  # its MIG device index on the GPU (the device plugin's "<gpu>:<index>" ID strategy)
    gi: int
    ci: int
    uuid: str  # "MIG-<uuid>" (the device plugin's default device ID)


class LiveProfile(typing.NamedTuple):
    """A GPU instance profile as the driver reports it (placements empty when it would not say)."""

    nvml_index: int
    id: int
    name: str  # "" when the driver gave no name (v1 struct)
    slices: int
    instance_count: int
    memory_mib: int
    placements: Tuple[Placement, ...]


class LiveGpu(typing.NamedTuple):
    index: int
    name: str
    pci_device_id: Optional[int]  # NVML's 32-bit pciDeviceId (device << 16 | 0x10de)
    bus_id: str
    uuid: str
    mig_current: Optional[int]  # None: MIG mode unreadable (NOT_SUPPORTED: not MIG-capable)
    mig_pending: Optional[int]
    profiles: Tuple[LiveProfile, ...]
    gis: Tuple[LiveGi, ...]
    pids: Tuple[int, ...]  # compute processes on the GPU
    notes: Tuple[str, ...]  # what could not be read, and why (NOT_SUPPORTED, NO_PERMISSION, ...)
    # Why the compute process list could not be read ("" when it was): then ``pids`` says nothing, and
    # apply must not take an empty list for an idle GPU.
    pids_unreadable: str = ""
    # Why no call could list the processes at all: "pynvml" (this pynvml has none of the calls) or
    # "driver" (the driver lacks what pynvml calls); "" otherwise. Apply refuses then, whatever --force says.
    pids_missing: str = ""
    processes: Tuple[LiveProcess, ...] = ()  # the same processes with their instances (``pids`` is their ids)
    minor: Optional[int] = None  # nvmlDeviceGetMinorNumber: the GPU is /dev/nvidia<minor> (None: unknown)
    mig_devices: Tuple[LiveMigDevice, ...] = ()  # while MIG mode is on
    # Why the MIG devices could not be listed ("" when they were): then nobody can tell which instance a
    # kubelet allocation names, and the per-GPU path destroys nothing on this GPU.
    mig_devices_unreadable: str = ""

    @property
    def mig_capable(self):
        # type: () -> bool
        return self.mig_current is not None

    @property
    def mig_enabled(self):
        # type: () -> bool
        return self.mig_current == MIG_ENABLED and self.mig_pending == MIG_ENABLED


def _profile_name(live, catalogue):
    # type: (LiveProfile, Optional[Profile]) -> str
    name = live.name
    if name.startswith("MIG "):
        name = name[len("MIG "):]
    if name:
        return name.lower()
    if catalogue is not None:
        return catalogue.name
    return "%dg.%dgb" % (live.slices, int(round(live.memory_mib / 1024.0)))


def effective_model(gpu):
    # type: (LiveGpu) -> Tuple[Optional[GpuModel], str]
    """The GPU model to plan with, and where its profiles came from: "nvml", "catalogue" or "none".

    Live profiles (ids, names, counts, memory, placements) replace the catalogue's; a profile the driver
    reports without placements keeps the catalogue's placements; a profile the driver does not list is
    not offered. Without any live profile the catalogue model is used as is.
    """
    catalogue = find_gpu_or_none(gpu.name, gpu.pci_device_id)
    if not gpu.profiles:
        return catalogue, ("catalogue" if catalogue is not None else "none")
    profiles = []  # type: List[Profile]
    for live in gpu.profiles:
        known = catalogue.profile_by_id(live.id) if catalogue is not None else None
        placements = live.placements or (known.placements if known is not None else ())
        if not placements:
            continue  # cannot be placed deliberately: leave it out rather than guess
        profiles.append(Profile(
            name=_profile_name(live, known),
            id=live.id,
            nvml_index=live.nvml_index,
            compute_slices=live.slices,
            memory_slices=placements[0].size,
            memory_mib=live.memory_mib,
            max_instances=live.instance_count,
            placements=tuple(placements),
        ))
    if not profiles:
        return catalogue, ("catalogue" if catalogue is not None else "none")
    slots = max(p.start + p.size for prof in profiles for p in prof.placements)
    compute = max(p.compute_slices for p in profiles)
    model = GpuModel(
        key=catalogue.key if catalogue is not None else gpu.name.replace("NVIDIA ", "").replace(" ", "-"),
        product_names=(gpu.name,) + tuple(n for n in (catalogue.product_names if catalogue else ()) if n != gpu.name),
        pci_device_ids=catalogue.pci_device_ids if catalogue is not None else (),
        memory_mib=catalogue.memory_mib if catalogue is not None else 0,
        memory_slots=max(slots, catalogue.memory_slots if catalogue is not None else 0),
        compute_slices=max(compute, catalogue.compute_slices if catalogue is not None else 0),
        profiles=tuple(sorted(profiles, key=lambda p: (p.compute_slices, p.memory_slices, p.id))),
        media_instances=catalogue.media_instances if catalogue is not None else 0,
    )
    return model, "nvml"


def live_layout(gpu, model):
    # type: (LiveGpu, Optional[GpuModel]) -> Optional[Layout]
    """The GPU's current instances as a core Layout (for diagrams); None if a profile is unknown."""
    if model is None:
        return None
    instances = []  # type: List[Instance]
    for gi in gpu.gis:
        profile = model.profile_by_id(gi.profile_id)
        if profile is None:
            return None
        instances.append(Instance(profile, gi.start))
    return Layout(model, tuple(sorted(instances, key=lambda i: (i.start, i.profile.id))))


def mode_name(value):
    # type: (Optional[int]) -> Optional[str]
    if value is None:
        return None
    return "enabled" if value == MIG_ENABLED else "disabled"


def instances_json(gpu, model):
    # type: (LiveGpu, Optional[GpuModel]) -> List[Dict[str, typing.Any]]
    out = []
    for gi in sorted(gpu.gis, key=lambda g: (g.start, g.id)):
        profile = model.profile_by_id(gi.profile_id) if model is not None else None
        out.append({"profile": profile.name if profile is not None else "profile-%d" % gi.profile_id,
                    "id": gi.profile_id, "start": gi.start, "size": gi.size, "gpu_instance_id": gi.id,
                    "compute_instances": [ci.id for ci in gi.cis],
                    # the UUIDs the device plugin advertises for it (one per compute instance)
                    "mig_devices": [d.uuid for d in gpu.mig_devices if d.gi == gi.id]})
    return out


def gpu_json(gpu, model):
    # type: (LiveGpu, Optional[GpuModel]) -> Dict[str, typing.Any]
    """The per-GPU part of every command's JSON result."""
    layout = live_layout(gpu, model)
    return {
        "index": gpu.index,
        "name": gpu.name,
        "mig_mode": {"current": mode_name(gpu.mig_current), "pending": mode_name(gpu.mig_pending)},
        "instances": instances_json(gpu, model),
        "diagram": render(layout, "GPU %d %s" % (gpu.index, gpu.name)) if layout is not None else "",
    }
