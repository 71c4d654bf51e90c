"""Fault injection for the simulated driver: ``--sim-fault KIND`` (repeatable).

Each fault lasts for the one command it is given to (the simulated node itself persists).
"""

import re
import typing
from typing import Iterable, Optional

KINDS = {
    "processes": "a compute process (pid 4242) runs on GPU 0",
    "process-on:GPU:START": "a compute process runs in the GPU instance placed at START on GPU GPU (pid "
                            "5000 + 10 x GPU + START; repeatable)",
    "driver:VERSION": "the driver answers this version (e.g. 470.256.02) and knows only the profile indices "
                      "and profiles of its branch",
    "reset-fails": "a GPU client apply does not stop holds the GPUs: a MIG mode change stays pending (activation "
                   "IN_USE) and nvidia-smi -r fails",
    "held-at-set": "a GPU client holds the GPUs while the MIG mode is set (pending, activation IN_USE) and has "
                   "let go by the reset, so nvidia-smi -r applies the mode",
    "crash-after:N": "the process is killed (SIGKILL) after N mutating calls, leaving partial state",
    "insufficient-resources": "creating a GPU instance answers INSUFFICIENT_RESOURCES",
    "not-mig-capable": "the GPUs answer NOT_SUPPORTED to MIG calls",
    "no-permission": "mutating calls and the process list answer NO_PERMISSION (not root)",
    "processes-unreadable": "the process list answers NO_PERMISSION (mutating calls still work)",
    "old-driver": "a driver before R470: no placement calls (query and create), no profile info V, no "
                  "processes _v3, no compute instance info _v2",
    "no-process-list": "the driver lacks the _v3 and _v2 process lists (pynvml's unversioned call then raises "
                       "NVMLLibraryMismatchError)",
    "profiles-need-mig": "GPU instance profile and placement queries answer NOT_SUPPORTED while MIG mode is off "
                         "(older Ampere drivers)",
    "passthrough": "the GPUs are passed through to a VM: no GPU reset, a pending mode needs a reboot",
    "gpu-lost:GPU": "GPU GPU has fallen off the bus (Xid 79): NVML answers GPU_IS_LOST for its handle, as a fresh "
                    "process finds it (nvidia-smi: \"Unable to determine the device handle for GPU ...: GPU is lost\")",
    "gpu-lost-late:GPU": "GPU GPU falls off the bus after this process took its handle: every later call on it "
                         "answers GPU_IS_LOST",
    "gpu-lost-after:GPU:N": "GPU GPU falls off the bus right after this process's N-th mutating call (on any GPU): "
                            "from then on its handle and every call on it answer GPU_IS_LOST",
    "gpu-error:GPU:CALL:CODE": "NVML answers error CODE (nvml.h's number, e.g. 999 UNKNOWN, 10 TIMEOUT) to every "
                               "call whose entry point starts with CALL (e.g. nvmlDeviceGetGpuInstances) on GPU GPU, "
                               "its handle's lookup or a handle of it or its instances; the other GPUs answer as usual "
                               "(repeatable)",
    "hung-mount": "the node's files named like a GPU device that --gpu-device-glob does not name are on a mount "
                  "that never answers (a FUSE daemon that does not reply): the holder scan's stat of such an "
                  "open file waits for good",
}

SIM_PID = 4242

_COUNT = re.compile(r"^[0-9]{1,4}\Z")  # ASCII digits only
_PROCESS_ON = re.compile(r"^process-on:([0-9]{1,2}):([0-9]{1,2})\Z")
_GPU_LOST = re.compile(r"^(gpu-lost|gpu-lost-late):([0-9]{1,2})\Z")
_GPU_LOST_AFTER = re.compile(r"^gpu-lost-after:([0-9]{1,2}):([0-9]{1,4})\Z")
# nvml.h's return codes are 1..999 (NVML_ERROR_UNKNOWN 999); an entry point's name, letters, digits and _
_GPU_ERROR = re.compile(r"^gpu-error:([0-9]{1,2}):(nvml[A-Za-z0-9_]{1,80}):([1-9][0-9]{0,2})\Z")
_DRIVER = re.compile(r"^driver:([0-9]{3})\.[0-9]{1,3}(\.[0-9]{1,3})?\Z")


def process_on_pid(gpu, start):
    # type: (int, int) -> int
    """The pid of the process ``process-on:<gpu>:<start>`` puts on the node."""
    return 5000 + 10 * gpu + start


class FaultError(ValueError):
    pass


class Faults(typing.NamedTuple):
    processes: bool = False
    reset_fails: bool = False
    held_at_set: bool = False
    crash_after: Optional[int] = None
    insufficient_resources: bool = False
    not_mig_capable: bool = False
    no_permission: bool = False
    processes_unreadable: bool = False
    old_driver: bool = False
    no_process_list: bool = False
    profiles_need_mig: bool = False
    passthrough: bool = False
    hung_mount: bool = False
    process_on: typing.Tuple[typing.Tuple[int, int], ...] = ()  # (gpu index, placement start)
    driver: str = ""  # the driver version to answer ("" : the default one)
    gpu_lost: typing.Tuple[int, ...] = ()  # GPU indices whose handle answers GPU_IS_LOST
    gpu_lost_late: typing.Tuple[int, ...] = ()  # GPU indices whose calls, after the handle, answer GPU_IS_LOST
    # (GPU index, N): the GPU is lost once the process made N mutating calls (a run that already changed others)
    gpu_lost_after: typing.Tuple[typing.Tuple[int, int], ...] = ()
    # (GPU index, entry point prefix, NVML error code): that GPU's calls of that entry point answer the code
    gpu_error: typing.Tuple[typing.Tuple[int, str, int], ...] = ()


def parse_faults(items):
    # type: (Iterable[str]) -> Faults
    values = {}  # type: typing.Dict[str, typing.Any]
    process_on = []  # type: typing.List[typing.Tuple[int, int]]
    lost_after = []  # type: typing.List[typing.Tuple[int, int]]
    errors = []  # type: typing.List[typing.Tuple[int, str, int]]
    for raw in items:
        item = raw.strip()
        if item.startswith("gpu-lost-after:"):
            match = _GPU_LOST_AFTER.match(item)
            if not match:
                raise FaultError("gpu-lost-after takes a GPU index and a number of mutating calls, "
                                 "e.g. gpu-lost-after:1:10")
            lost_after.append((int(match.group(1)), int(match.group(2))))
            continue
        if item.startswith("gpu-error:"):
            match = _GPU_ERROR.match(item)
            if not match:
                raise FaultError("gpu-error takes a GPU index, an NVML entry point and an NVML error code (1-999), "
                                 "e.g. gpu-error:1:nvmlDeviceGetGpuInstances:999")
            errors.append((int(match.group(1)), match.group(2), int(match.group(3))))
            continue
        if item.startswith("process-on:"):
            match = _PROCESS_ON.match(item)
            if not match:
                raise FaultError("process-on takes a GPU index and a placement start, e.g. process-on:0:4")
            process_on.append((int(match.group(1)), int(match.group(2))))
            continue
        if item.startswith("gpu-lost"):
            match = _GPU_LOST.match(item)
            if not match:
                raise FaultError("gpu-lost and gpu-lost-late take a GPU index, e.g. gpu-lost:1")
            key = match.group(1).replace("-", "_")
            values[key] = tuple(sorted(set(values.get(key, ()) + (int(match.group(2)),))))
            continue
        if item.startswith("driver:"):
            if not _DRIVER.match(item):
                raise FaultError("driver takes an NVIDIA driver version, e.g. driver:470.256.02")
            values["driver"] = item[len("driver:"):]
            continue
        if item.startswith("crash-after:"):
            count = item[len("crash-after:"):]
            if not _COUNT.match(count):
                raise FaultError("crash-after takes a whole number of mutating calls, e.g. crash-after:3")
            values["crash_after"] = int(count)
            continue
        if item not in KINDS or ":" in item:
            raise FaultError("unknown --sim-fault %r; known: %s" % (item[:40], ", ".join(sorted(KINDS))))
        values[item.replace("-", "_")] = True
    values["process_on"] = tuple(process_on)
    values["gpu_lost_after"] = tuple(sorted(set(lost_after)))
    values["gpu_error"] = tuple(sorted(set(errors)))
    return Faults(**values)
