"""The simulated driver's rules, over a plain JSON-able state. No ctypes, no files.

Modelled after what the NVIDIA driver answers (facts.md):

* a GPU instance sits at one of its profile's allowed placements, never overlapping another; at most
  ``max_instances`` of a profile; compute slices add up to at most the GPU's;
* destroying a GPU instance that still has compute instances (or processes) is IN_USE;
* ``nvmlDeviceSetMigMode`` itself answers SUCCESS whenever the arguments are valid and reports the
  activation through ``activationStatus`` (see :func:`set_mig_mode` for the sources);
* nothing survives a reboot: instances are gone; Ampere comes back in the pending (InfoROM) mode,
  Hopper and later come back with MIG disabled.
"""

import typing
from typing import Any, Dict, List, Optional

from ..mig import GpuModel, Profile, find_gpu
from ..mig.solver import is_media_extension

SUCCESS = 0
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_RESET_REQUIRED = 16
ERROR_IN_USE = 19
ERROR_INSUFFICIENT_RESOURCES = 23

State = Dict[str, Any]

# Compute instance profile index -> compute slices (NVML_COMPUTE_INSTANCE_PROFILE_*); the CI profile
# id is the index, as on the real driver.
CI_PROFILE_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 6: 6}


class SimError(Exception):
    """An NVML return code from the simulated driver."""

    def __init__(self, code, message=""):
        # type: (int, str) -> None
        super(SimError, self).__init__(message or "NVML error %d" % code)
        self.code = code


class Process(typing.NamedTuple):
    pid: int
    gpu: int
    gi: Optional[int]
    ci: Optional[int]


def new_state(gpu_key, count, gpu_name=""):
    # type: (str, int, str) -> State
    state = {
        "version": 1,
        "gpu": gpu_key,
        "count": count,
        "boots": 0,
        "gpus": [{"mig_current": 0, "mig_pending": 0, "gis": []} for _ in range(count)],
    }  # type: State
    if gpu_name:
        # The product the node was asked to be (an alias such as "NVIDIA H20" shares its catalogue entry,
        # "gpu", with other products): nvmlDeviceGetName answers this name, as the real GPU would.
        state["gpu_name"] = gpu_name
    return state


def model_of(state):
    # type: (State) -> GpuModel
    return find_gpu(state.get("gpu_name") or state["gpu"])


def is_ampere(model):
    # type: (GpuModel) -> bool
    return model.key.startswith("A")


def gpu_of(state, index):
    # type: (State, int) -> Dict[str, Any]
    if not 0 <= index < len(state["gpus"]):
        raise SimError(ERROR_INVALID_ARGUMENT, "no GPU %d" % index)
    return state["gpus"][index]


def profile_by_id(model, profile_id):
    # type: (GpuModel, int) -> Profile
    profile = model.profile_by_id(profile_id)
    if profile is None:
        raise SimError(ERROR_INVALID_ARGUMENT, "no GPU instance profile id %d" % profile_id)
    return profile


def profile_by_index(model, nvml_index):
    # type: (GpuModel, int) -> Profile
    for profile in model.profiles:
        if profile.nvml_index == nvml_index:
            return profile
    raise SimError(ERROR_NOT_SUPPORTED, "profile index %d not supported" % nvml_index)


def gi_of(gpu, gi_id):
    # type: (Dict[str, Any], int) -> Dict[str, Any]
    for gi in gpu["gis"]:
        if gi["id"] == gi_id:
            return gi
    raise SimError(ERROR_NOT_FOUND, "no GPU instance %d" % gi_id)


def require_mig(gpu):
    # type: (Dict[str, Any]) -> None
    if gpu["mig_current"] != 1:
        raise SimError(ERROR_NOT_SUPPORTED, "MIG mode is disabled")


def processes_on(processes, index, gi=None, ci=None):
    # type: (List[Process], int, Optional[int], Optional[int]) -> List[Process]
    return [p for p in processes if p.gpu == index and (gi is None or p.gi == gi) and (ci is None or p.ci == ci)]


def set_mig_mode(state, index, mode, processes, held=False, passthrough=False):
    # type: (State, int, int, List[Process], bool, bool) -> int
    """``nvmlDeviceSetMigMode``: the new mode always becomes pending; returns the activation status.

    nvml.h (NVIDIA go-nvml gen/nvml/nvml.h, nvmlDeviceSetMigMode): the call's own return codes are
    SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NO_PERMISSION and NOT_SUPPORTED; "This API may unbind or
    reset the device to activate the requested mode"; "On certain platforms like pass-through
    virtualization, where reset functionality may not be exposed directly, VM reboot is required.
    activationStatus would return NVML_ERROR_RESET_REQUIRED for such cases"; "if device unbind fails
    because the device isn't idle, NVML_ERROR_IN_USE would be returned. The caller of this API is
    expected to idle the device and retry setting the mode." nvidia-smi prints that case as "Warning: MIG
    mode is in pending enable state for GPU ...: In use by another client". mig-parted
    (pkg/mig/mode/nvml.go, cmd/nvidia-mig-parted/apply/mode.go) likewise ignores the status and only
    compares current with pending afterwards, resetting the GPUs when they differ.

    So, for every generation (the header makes no Ampere/Hopper distinction inside the call):

    * the mode asked for is already current: SUCCESS, nothing to activate;
    * something holds the GPU (``processes``, or ``held``: a client such as DCGM): pending, IN_USE;
    * passed through to a VM (``passthrough``): pending, RESET_REQUIRED (a reboot activates it);
    * idle on bare metal: the driver resets the GPU inside the call: current at once, SUCCESS.

    Ampere and Hopper differ at a reboot (:func:`reboot`), not here.
    """
    gpu = gpu_of(state, index)
    if mode not in (0, 1):
        raise SimError(ERROR_INVALID_ARGUMENT, "mode must be 0 or 1")
    if mode == 0 and gpu["gis"]:
        raise SimError(ERROR_IN_USE, "GPU instances exist")
    gpu["mig_pending"] = mode
    if gpu["mig_current"] == mode:
        return SUCCESS
    if held or processes_on(processes, index):
        return ERROR_IN_USE
    if passthrough:
        return ERROR_RESET_REQUIRED
    gpu["mig_current"] = mode
    gpu["gis"] = []  # the reset that activated the mode leaves no instance behind
    return SUCCESS


def create_gpu_instance(state, index, profile_id, start, size):
    # type: (State, int, int, int, int) -> int
    gpu = gpu_of(state, index)
    require_mig(gpu)
    model = model_of(state)
    profile = profile_by_id(model, profile_id)
    if (start, size) not in [(p.start, p.size) for p in profile.placements]:
        raise SimError(ERROR_INVALID_ARGUMENT, "placement %d:%d not allowed for %s" % (start, size, profile.name))
    same = [gi for gi in gpu["gis"] if gi["profile_id"] == profile_id]
    if len(same) >= profile.max_instances:
        raise SimError(ERROR_INSUFFICIENT_RESOURCES, "at most %d x %s" % (profile.max_instances, profile.name))
    if model.media_instances and is_media_extension(profile):
        # MIG user guide, A30 table: each +me profile has 1 JPEG / 1 OFA, and so has the whole GPU (4g.24gb):
        # a second +me instance finds no media engines left.
        media = [gi for gi in gpu["gis"] if is_media_extension(profile_by_id(model, gi["profile_id"]))]
        if len(media) >= model.media_instances:
            raise SimError(ERROR_INSUFFICIENT_RESOURCES, "the media engines belong to GPU instance %d" % media[0]["id"])
    for gi in gpu["gis"]:
        if start < gi["start"] + gi["size"] and gi["start"] < start + size:
            raise SimError(ERROR_INSUFFICIENT_RESOURCES, "placement overlaps GPU instance %d" % gi["id"])
    used = sum(profile_by_id(model, gi["profile_id"]).compute_slices for gi in gpu["gis"])
    if used + profile.compute_slices > model.compute_slices:
        raise SimError(ERROR_INSUFFICIENT_RESOURCES, "not enough compute slices")
    taken = set(gi["id"] for gi in gpu["gis"])
    gi_id = 0 if profile.memory_slices == model.memory_slots else min(i for i in range(1, 64) if i not in taken)
    gpu["gis"].append({"id": gi_id, "profile_id": profile_id, "start": start, "size": size, "cis": []})
    gpu["gis"].sort(key=lambda g: g["id"])
    return gi_id


def destroy_gpu_instance(state, index, gi_id, processes):
    # type: (State, int, int, List[Process]) -> None
    gpu = gpu_of(state, index)
    gi = gi_of(gpu, gi_id)
    if gi["cis"] or processes_on(processes, index, gi=gi_id):
        raise SimError(ERROR_IN_USE, "GPU instance %d has compute instances or processes" % gi_id)
    gpu["gis"].remove(gi)


def ci_profiles(model, gi):
    # type: (GpuModel, Dict[str, Any]) -> Dict[int, int]
    """CI profile index -> slices, for the CI profiles a GPU instance supports."""
    slices = profile_by_id(model, gi["profile_id"]).compute_slices
    return {i: s for i, s in CI_PROFILE_SLICES.items() if s <= slices}


def create_compute_instance(state, index, gi_id, ci_profile_id):
    # type: (State, int, int, int) -> int
    gpu = gpu_of(state, index)
    gi = gi_of(gpu, gi_id)
    profiles = ci_profiles(model_of(state), gi)
    if ci_profile_id not in profiles:
        raise SimError(ERROR_NOT_SUPPORTED, "CI profile %d not supported here" % ci_profile_id)
    used = sum(profiles.get(ci["profile_id"], 0) for ci in gi["cis"])
    if used + profiles[ci_profile_id] > max(profiles.values()):
        raise SimError(ERROR_INSUFFICIENT_RESOURCES, "not enough slices left in GPU instance %d" % gi_id)
    taken = set(ci["id"] for ci in gi["cis"])
    ci_id = min(i for i in range(0, 64) if i not in taken)
    gi["cis"].append({"id": ci_id, "profile_id": ci_profile_id})
    return ci_id


def destroy_compute_instance(state, index, gi_id, ci_id, processes):
    # type: (State, int, int, int, List[Process]) -> None
    gi = gi_of(gpu_of(state, index), gi_id)
    for ci in gi["cis"]:
        if ci["id"] == ci_id:
            if processes_on(processes, index, gi=gi_id, ci=ci_id):
                raise SimError(ERROR_IN_USE, "processes run on compute instance %d" % ci_id)
            gi["cis"].remove(ci)
            return
    raise SimError(ERROR_NOT_FOUND, "no compute instance %d" % ci_id)


def reset(state, indices, processes):
    # type: (State, List[int], List[Process]) -> None
    """``nvidia-smi -r``: applies a pending mode; fails while processes hold any of the GPUs."""
    for index in indices:
        gpu_of(state, index)
        if processes_on(processes, index):
            raise SimError(ERROR_IN_USE, "GPU %d is in use by another client" % index)
    for index in indices:
        gpu = state["gpus"][index]
        gpu["mig_current"] = gpu["mig_pending"]
        gpu["gis"] = []


def reboot(state):
    # type: (State) -> None
    """A node reboot. MIG user guide, Deployment Considerations: "On NVIDIA Ampere architecture GPUs,
    similar to ECC mode, MIG mode setting is persistent across reboots until the user toggles the setting
    explicitly", so a pending mode becomes current. Hopper and later do not keep it (issue 10 of this
    project and the GPU operator's vGPU notes, NVIDIA/gpu-operator#2603: "neither the MIG mode nor the
    SR-IOV VFs survive a node reboot"): they come back with MIG disabled. GPU and compute instances
    never survive a reboot (mig-parted README: the tool alone "does not ensure that MIG device
    configurations will persist across node reboots"; its systemd service re-applies them at boot)."""
    ampere = is_ampere(model_of(state))
    for gpu in state["gpus"]:
        gpu["gis"] = []
        if ampere:
            gpu["mig_current"] = gpu["mig_pending"]
        else:
            gpu["mig_current"] = gpu["mig_pending"] = 0
    state["boots"] = state.get("boots", 0) + 1
