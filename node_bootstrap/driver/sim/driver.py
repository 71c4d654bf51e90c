"""The simulated driver's rules, over a plain JSON-able state. No ctypes, no files.

Modelled after what the NVIDIA driver answers (facts.md, and the sources named at each rule):

* a GPU instance sits at one of its profile's allowed placements, never overlapping another; at most
  ``max_instances`` of a profile; compute slices add up to at most the GPU's; its id follows from its
  placement (:func:`gpu_instance_id`);
* destroying a GPU instance that still has compute instances (or processes) is IN_USE;
* ``nvmlDeviceSetMigMode`` itself answers SUCCESS whenever the arguments are valid and reports the
  activation through ``activationStatus`` (see :func:`set_mig_mode` for the sources);
* which profile indices a driver answers at all depends on its branch (:func:`gi_index_count`);
* nothing survives a reboot: instances are gone; Ampere comes back in the pending (InfoROM) mode,
  Hopper and later come back with MIG disabled.
"""

import typing
import uuid
from typing import Any, Dict, List, Optional, Tuple

from ...mig import GpuModel, Profile, find_gpu
from ...mig.solver import is_media_extension

SUCCESS = 0
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_GPU_IS_LOST = 15  # nvml.h NVML_ERROR_GPU_IS_LOST (pynvml's constant has the same value)
ERROR_RESET_REQUIRED = 16
ERROR_IN_USE = 19
ERROR_INSUFFICIENT_RESOURCES = 23

State = Dict[str, Any]

# Compute instance profile index -> compute slices (nvml.h NVML_COMPUTE_INSTANCE_PROFILE_*: 1_SLICE 0,
# 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4, 8_SLICE 5, 6_SLICE 6, 1_SLICE_REV1 7, 7_SLICE_NVL 8); the CI
# profile id is the index, as on the real driver (nvidia-smi mig -lcip; NVIDIA go-nvml's mocks).
CI_PROFILE_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 6: 6, 7: 1, 8: 7}
CI_1_SLICE_REV1 = 7

# The default simulated driver: the branch of the real H200 capture (tests/core/data/h200_nvml_probe.json).
DEFAULT_DRIVER = "580.159.04-sim"


def driver_branch(version):
    # type: (str) -> int
    """"580.159.04" -> 580 (0 when unreadable)."""
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0


def gi_index_count(branch):
    # type: (int) -> int
    """How many GPU instance profile indices a driver of this branch knows; it answers INVALID_ARGUMENT for
    the rest. nvml.h's NVML_GPU_INSTANCE_PROFILE_COUNT by CUDA release (NVIDIA go-nvml's header history):
    0x8 in 11.4 (R470), 0xA in 12.0 (R525), the +gfx indices 10-12 in 12.8 (R570), -me and +me.all 13-16
    in 12.9 (R575), 3_SLICE_GFX (17) in 13.2. A real R580 driver answers index 17 with INVALID_ARGUMENT
    (tests/core/data/h200_nvml_probe.json), so from R575 on the simulated driver knows 17 indices. Before
    R470 (R450, R460: CUDA 11.0-11.2) the 7 slice-count indices 0-6."""
    for since, count in ((575, 17), (570, 13), (525, 10), (470, 8)):
        if branch >= since:
            return count
    return 7


def ci_index_count(branch):
    # type: (int) -> int
    """Compute instance profile indices a driver knows: nvml.h's NVML_COMPUTE_INSTANCE_PROFILE_COUNT, 0x7 up
    to CUDA 11.4, 0x8 from 12.0 (R525: 1_SLICE_REV1), 0x9 from 13.3 (7_SLICE_NVL; no driver branch of that
    header is simulated, so index 8 answers INVALID_ARGUMENT like index 17 of the GPU profiles)."""
    return 8 if branch >= 525 else 7


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


def model_of(state, index=None):
    # type: (State, Optional[int]) -> GpuModel
    """The GPU's model: the node's (``gpu``, ``gpu_name``), or a GPU's own ``gpus[i].gpu`` where a fixture
    lays out a node with two GPU models."""
    if index is not None and 0 <= index < len(state["gpus"]):
        own = state["gpus"][index].get("gpu")
        if own:
            return find_gpu(state["gpus"][index].get("gpu_name") or own)
    return find_gpu(state.get("gpu_name") or state["gpu"])


def is_ampere(model):
    # type: (GpuModel) -> bool
    return model.key.startswith("A")


def gpu_instance_id(model, gpu, start, size):
    # type: (GpuModel, Dict[str, Any], int, int) -> int
    """The id the driver gives a new GPU instance: it follows the placement, not the order of creation.

    Real captures (``nvidia-smi mig -lgi``) show the ids of a binary tree over the memory slots: the whole
    GPU 0, its halves 1-2, quarters 3-6, eighths 7-14 (on a 4-slot A30: 0, 1-2, 3-6). An H100 80GB (7 x
    1g.10gb at 0-6: ids 7-13) and an A30 (1g.6gb at 0-3: ids 3-6) number each level from slot 0. An A100
    numbers the upper half first: an A100-SXM4-40GB with 7 x 1g.5gb answered ids 11, 12, 13, 14, 7, 8, 9 for
    starts 0-6, an A100-PCIE-40GB (driver 510.47.03) id 1 for a 3g.20gb at 4 and 6 for a 2g.10gb at 2, an
    A100 80GB (driver 550.54.14) id 1 for a 3g.40gb at 4 and 2 for a 4g.40gb at 0. A GPU whose placements
    are not such a tree (the RTX PRO 6000's 12-unit grid counts 4 slots of 3 units: the same tree), or a
    fixture whose id is taken, gets the lowest free id."""
    unit = min(p.size for prof in model.profiles for p in prof.placements)
    slots, span, first = model.memory_slots // unit, size // unit, start // unit
    taken = set(gi["id"] for gi in gpu["gis"])
    if slots & (slots - 1) == 0 and span and slots % span == 0 and first % span == 0:
        if is_ampere(model) and model.memory_slots == 8 * unit:
            first = (first + slots // 2) % slots  # the upper half first (the A100 captures above)
        gi_id = slots // span - 1 + first // span
        if gi_id not in taken:
            return gi_id
    return min(i for i in range(0, 64) if i not in taken)


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


def profile_by_index(model, nvml_index, branch=0):
    # type: (GpuModel, int, int) -> Profile
    """``nvmlDeviceGetGpuInstanceProfileInfo``: INVALID_ARGUMENT for an index this driver branch does not
    know (:func:`gi_index_count`), NOT_SUPPORTED for one this GPU lacks, or that came with a later driver
    (the catalogue's ``min_driver``: the MIG user guide's "only available starting with" notes)."""
    if branch and nvml_index >= gi_index_count(branch):
        raise SimError(ERROR_INVALID_ARGUMENT, "profile index %d unknown to driver R%d" % (nvml_index, branch))
    for profile in model.profiles:
        if profile.nvml_index == nvml_index and (not branch or branch >= profile.min_driver):
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

    Ampere and Hopper differ at a reboot (:func:`reboot`), not here. Unconfirmed for Hopper: mig-parted
    links hooks that stop no GPU client on GPUs of compute capability 9.0 and newer
    (``deployments/systemd/utils.sh``, "hooks-minimal.yaml that gets linked if on Hopper or above"), and the
    MIG user guide says "Setting MIG mode on the A100/A30 requires a GPU reset": both suggest Hopper takes
    the mode with a client holding the GPU. No Hopper capture shows it (our H200 was only read), so the
    simulator keeps the stricter answer, IN_USE, for every generation: a double kinder than the hardware
    would hide a missing client stop.
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
    model = model_of(state, index)
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
    gi_id = gpu_instance_id(model, gpu, start, size)
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


def ci_profiles(model, gi, branch=0):
    # type: (GpuModel, Dict[str, Any], int) -> Dict[int, int]
    """CI profile index -> slices, for the CI profiles a GPU instance supports: the slice-count profiles up
    to its size and, from R525 on an A100, 1_SLICE_REV1 (NVIDIA go-nvml's A100 mock offers it in every GPU
    instance; its A30, H100, H200 and B200 mocks do not; a real A100 80GB on R515 listed only 1c, 2c, 3c
    in a 3g.40gb). No simulated GPU offers 7_SLICE_NVL (index 8): no mock or capture shows one."""
    slices = profile_by_id(model, gi["profile_id"]).compute_slices
    out = {i: s for i, s in CI_PROFILE_SLICES.items() if s <= slices and i < CI_1_SLICE_REV1}
    if is_ampere(model) and model.memory_slots == 8 and (not branch or branch >= 525):
        out[CI_1_SLICE_REV1] = 1
    return out


def create_compute_instance(state, index, gi_id, ci_profile_id):
    # type: (State, int, int, int) -> int
    gpu = gpu_of(state, index)
    gi = gi_of(gpu, gi_id)
    profiles = ci_profiles(model_of(state, index), gi)
    if ci_profile_id not in profiles:
        raise SimError(ERROR_NOT_SUPPORTED, "CI profile %d not supported here" % ci_profile_id)
    used = sum(profiles.get(ci["profile_id"], 0) for ci in gi["cis"])
    if used + profiles[ci_profile_id] > max(profiles.values()):
        raise SimError(ERROR_INSUFFICIENT_RESOURCES, "not enough slices left in GPU instance %d" % gi_id)
    taken = set(ci["id"] for ci in gi["cis"])
    ci_id = min(i for i in range(0, 64) if i not in taken)
    serial = state["mig_serial"] = state.get("mig_serial", 0) + 1
    gi["cis"].append({"id": ci_id, "profile_id": ci_profile_id,
                      "uuid": mig_uuid(index, gi_id, ci_id, serial)})
    return ci_id


_MIG_NAMESPACE = uuid.UUID("5151a0c3-0000-4000-8000-00000000a1b2")


def mig_uuid(index, gi_id, ci_id, serial):
    # type: (int, int, int, int) -> str
    """A MIG device's UUID as NVML answers it (nvmlDeviceGetUUID on a MIG device handle, R470 and later:
    "MIG-" and a UUID; older drivers answered "MIG-GPU-<gpu uuid>/<gi>/<ci>"). NVIDIA's device plugin uses
    this string as the device ID it advertises and kubelet records (k8s-device-plugin internal/rm/devices.go,
    BuildDevice: ``dev.ID = uuid``). ``serial`` counts creations on the node, so an instance destroyed and
    created again at the same place is a new device with a new UUID (deterministic, for repeatable tests)."""
    return "MIG-%s" % uuid.uuid5(_MIG_NAMESPACE, "%d/%d/%d/%d" % (index, gi_id, ci_id, serial))


def mig_devices(state, index):
    # type: (State, int) -> List[Tuple[int, int, str]]
    """The GPU's MIG devices, one per compute instance, as (gi id, ci id, UUID) in the order
    nvmlDeviceGetMigDeviceHandleByIndex numbers them here (by GPU instance id, then compute instance id).
    A compute instance recorded before UUIDs were kept gets a fixed one."""
    gpu = gpu_of(state, index)
    if gpu["mig_current"] != 1:
        return []
    out = []
    for gi in sorted(gpu["gis"], key=lambda g: g["id"]):
        for ci in sorted(gi["cis"], key=lambda c: c["id"]):
            out.append((gi["id"], ci["id"], ci.get("uuid") or mig_uuid(index, gi["id"], ci["id"], 0)))
    return out


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
    for index, gpu in enumerate(state["gpus"]):
        gpu["gis"] = []
        if is_ampere(model_of(state, index)):
            gpu["mig_current"] = gpu["mig_pending"]
        else:
            gpu["mig_current"] = gpu["mig_pending"] = 0
    state["boots"] = state.get("boots", 0) + 1


def mig_minors(count):
    # type: (int) -> str
    """``/proc/driver/nvidia-caps/mig-minors`` as the driver writes it at load, for GPU minors 0..count-1:
    "config 1", "monitor 2", then per GPU 15 GPU instances of 8 compute instances each, the capability
    device /dev/nvidia-caps/nvidia-cap<minor> of each (NVIDIA k8s-dra-driver-gpu's listing of a real file:
    "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4", ..., "gpu3/gi3/ci3/access 439", "gpu6/gi11/ci7/access 920")."""
    lines = ["config 1", "monitor 2"]
    for gpu in range(count):
        for gi in range(15):
            base = 3 + gpu * 135 + gi * 9
            lines.append("gpu%d/gi%d/access %d" % (gpu, gi, base))
            lines.extend("gpu%d/gi%d/ci%d/access %d" % (gpu, gi, ci, base + 1 + ci) for ci in range(8))
    return "\n".join(lines) + "\n"
