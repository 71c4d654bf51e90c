"""The simulated driver as the NVML C library that pynvml loads.

pynvml keeps the loaded library in ``pynvml.nvmlLib`` and looks every entry point up with
``getattr(nvmlLib, "nvmlDeviceGetMigMode")``, skipping the load when ``nvmlLib`` is already set. So
:meth:`SimNvmlLibrary.install` puts this object there before ``nvmlInit``: each attribute is a ctypes
C function pointer (CFUNCTYPE) with the NVML signature, pynvml passes its real structs by reference, and
this module fills them in through their addresses, as ``libnvidia-ml.so`` would. The one NVML backend
(``node_bootstrap.driver.nvml``) then runs unchanged on a real GPU and here.

Handles are opaque integers that encode (GPU, GPU instance, compute instance); nothing dereferences them.
A missing attribute is what an older driver looks like (pynvml raises FUNCTION_NOT_FOUND).
"""

import ctypes
import errno
import os
import signal
from ctypes import CFUNCTYPE, c_int, c_uint, c_void_p
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import driver
from .driver import Process, SimError
from .faults import SIM_PID, Faults, process_on_pid
from .store import SimStore

_DEV = 0x10000  # device handle = _DEV * (index + 1); + 0x100 * (gi + 1) for a GI; + (ci + 1) for a CI

MUTATING = ("nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceDestroy",
            "nvmlGpuInstanceCreateComputeInstance", "nvmlComputeInstanceDestroy")

_ERROR_TEXT = {0: "Success", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
               6: "Not Found", 7: "Insufficient Size", 10: "Timeout", 13: "Function Not Found", 15: "GPU is lost",
               16: "GPU requires restart",
               19: "In use by another client", 23: "Insufficient resources", 999: "Unknown Error"}


class _EntryPoint(object):
    """An entry point as pynvml calls it: the C function, then the exception of a signal whose handler ran
    during the simulated call. In ``libnvidia-ml.so`` a Python handler runs only once the C call has returned
    (CPython runs them between bytecodes); here the call is Python, and an exception escaping a ctypes callback
    is printed and its result read as garbage ("NVML error -1200753952"): the interrupt was lost, the apply went
    on as if the driver had failed. pynvml's ``fn.restype = ...`` goes to the C function."""

    def __init__(self, function, interrupted):
        # type: (Any, List[BaseException]) -> None
        self.__dict__.update(_function=function, _interrupted=interrupted)

    def __call__(self, *args):
        # type: (Any) -> Any
        result = self._function(*args)
        if self._interrupted:
            exc = self._interrupted[0]
            del self._interrupted[:]
            raise exc
        return result

    def __getattr__(self, name):
        # type: (str) -> Any
        return getattr(self._function, name)

    def __setattr__(self, name, value):
        # type: (str, Any) -> None
        setattr(self._function, name, value)


def _dev_handle(index):
    # type: (int) -> int
    return _DEV * (index + 1)


def _gi_handle(index, gi_id):
    # type: (int, int) -> int
    return _dev_handle(index) + 0x100 * (gi_id + 1)


def _ci_handle(index, gi_id, ci_id):
    # type: (int, int, int) -> int
    return _gi_handle(index, gi_id) + ci_id + 1


def _decode(handle):
    # type: (Optional[int]) -> Tuple[int, int, int]
    """(gpu index, gi id or -1, ci id or -1)."""
    if not handle or handle < _DEV:
        raise SimError(driver.ERROR_INVALID_ARGUMENT, "bad handle")
    rest = handle % _DEV
    return handle // _DEV - 1, rest // 0x100 - 1, rest % 0x100 - 1


def _on_lost_gpu(name, args, lost):
    # type: (str, Tuple[Any, ...], Tuple[int, ...]) -> bool
    """Whether a call is on a handle (GPU, GPU instance or compute instance) of a GPU in ``lost``. nvml.h lists
    NVML_ERROR_GPU_IS_LOST ("the target GPU has fallen off the bus or is otherwise inaccessible") among the
    answers of the device queries and changes the node makes; the calls that take no handle answer as usual."""
    if not (name.startswith(("nvmlDevice", "nvmlGpuInstance", "nvmlComputeInstance")) and args) \
            or name.startswith(("nvmlDeviceGetHandleBy", "nvmlDeviceGetCount")):
        return False
    handle = args[0]
    return bool(handle) and handle >= _DEV and handle // _DEV - 1 in lost


def _on_gpu(name, args, gpu):
    # type: (str, Tuple[Any, ...], int) -> bool
    """Whether a call concerns GPU ``gpu``: its handle's lookup by index, or a call on a handle of it or of its
    GPU and compute instances (the handles encode the GPU)."""
    if name.startswith("nvmlDeviceGetHandleByIndex"):
        return bool(args) and args[0] == gpu
    if not (name.startswith(("nvmlDevice", "nvmlGpuInstance", "nvmlComputeInstance")) and args):
        return False
    handle = args[0]
    return bool(handle) and handle >= _DEV and handle // _DEV - 1 == gpu


def _put_uint(address, value):
    # type: (int, int) -> None
    c_uint.from_address(address).value = value


def _put_ptr(address, value):
    # type: (int, int) -> None
    c_void_p.from_address(address).value = value


def _put_str(address, size, text):
    # type: (int, int, str) -> None
    data = text.encode("utf-8")[:max(size - 1, 0)] + b"\0"
    ctypes.memmove(address, data, len(data))


class SimNvmlLibrary(object):
    """An object with NVML entry points as attributes, backed by a :class:`SimStore`."""

    def __init__(self, store, faults=None):
        # type: (SimStore, Optional[Faults]) -> None
        import pynvml  # the structs this library fills are pynvml's own (the NVML header's layouts)

        self._nv = pynvml
        self.store = store
        self.faults = faults or Faults()
        self.mutations = 0
        self.nvml_users = 0  # nvmlInit minus nvmlShutdown calls in this process (NVML refcounts them)
        self._killed = set()  # type: set
        self._strings = {}  # type: Dict[int, Any]
        self._functions = {}  # type: Dict[str, Any]
        self._interrupted = []  # type: List[BaseException]
        # old-driver: R450, the first branch with MIG, from before both placement calls
        self.driver_version = ("450.248.02-sim" if self.faults.old_driver
                               else self.faults.driver or driver.DEFAULT_DRIVER)
        self.branch = driver.driver_branch(self.driver_version)
        self._define()
        if self.faults.old_driver:
            # An R450 driver (the first with MIG): no create-at-placement (CUDA 11.2's nvml.h, R460) and no
            # placement query _v2 (CUDA 11.4's, R470; NVIDIA/go-nvml's header history), none of the later
            # versioned entry points.
            for name in ("nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
                         "nvmlDeviceGetGpuInstancePossiblePlacements_v2", "nvmlDeviceCreateGpuInstanceWithPlacement",
                         "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlComputeInstanceGetInfo_v2"):
                self._functions.pop(name, None)
        if self.faults.no_process_list:
            # Older than the _v2 process list as well: pynvml 13's unversioned call goes to _v3 and raises
            # NVMLLibraryMismatchError (pynvml.throwOnVersionMismatch).
            for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
                self._functions.pop(name, None)

    def __getattr__(self, name):
        # type: (str) -> Any
        functions = self.__dict__.get("_functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(name)

    def install(self):
        # type: () -> None
        """Make pynvml use this library (call before nvmlInit)."""
        self._nv.nvmlLib = self
        self._nv._nvmlGetFunctionPointer_cache.clear()

    # --- processes, reset and reboot: not NVML calls, used by the backend's sim adapters ----------

    def processes(self):
        # type: () -> List[Process]
        """The compute processes the faults put on the node, as the driver would list them now.

        ``processes``: pid 4242 on GPU 0, inside its first GPU instance that has a compute instance (or on
        the GPU itself while it has none). ``process-on:<gpu>:<start>``: a process inside the compute
        instance of the GPU instance placed at that start, listed only while one is there (a process runs in
        a compute instance; without one there is nothing for it to run in). A process killed with
        :meth:`signal` is gone for the rest of this command."""
        wanted = self.faults.processes or self.faults.process_on
        if not wanted:
            return []
        state = self.store.load()
        out = []  # type: List[Process]
        if self.faults.processes and SIM_PID not in self._killed and state["gpus"]:
            gis = [gi for gi in state["gpus"][0]["gis"] if gi["cis"]]
            out.append(Process(SIM_PID, 0, gis[0]["id"], gis[0]["cis"][0]["id"]) if gis
                       else Process(SIM_PID, 0, None, None))
        for index, start in self.faults.process_on:
            pid = process_on_pid(index, start)
            if pid in self._killed or not 0 <= index < len(state["gpus"]):
                continue
            gpu = state["gpus"][index]
            for gi in gpu["gis"] if gpu["mig_current"] == 1 else []:
                if gi["start"] == start and gi["cis"]:
                    out.append(Process(pid, index, gi["id"], gi["cis"][0]["id"]))
        return out

    def start_time(self, pid):
        # type: (int) -> Optional[int]
        """/proc/<pid>/stat's start time of a simulated process (a fixed number per pid), None when gone."""
        return 100000 + pid if any(p.pid == pid for p in self.processes()) else None

    def signal(self, pid, sig):
        # type: (int, int) -> None
        """``os.kill`` for a simulated process: SIGTERM or SIGKILL ends it at once; ESRCH when it is not
        there, as the kernel answers."""
        if not any(p.pid == pid for p in self.processes()):
            raise OSError(errno.ESRCH, "No such process")
        if sig in (signal.SIGTERM, signal.SIGKILL):
            self._killed.add(pid)

    def kill(self, pid):
        # type: (int) -> bool
        try:
            self.signal(pid, signal.SIGTERM)
        except OSError:
            return False
        return True

    def bus_index(self, gpu):
        # type: (Any) -> int
        """A GPU named by index or by the PCI bus id :meth:`_pci_info` gives it ("00000000:10:00.0")."""
        if isinstance(gpu, int):
            return gpu
        try:
            return int(str(gpu).split(":")[-2], 16) - 0x10
        except (IndexError, ValueError):
            raise SimError(driver.ERROR_INVALID_ARGUMENT, "no GPU %r" % (gpu,))

    def reset(self, gpus):
        # type: (List[Any]) -> Tuple[int, str]
        """What ``nvidia-smi -r -i <bus ids>`` does: (exit code, output)."""
        if self.faults.passthrough:
            return 3, "GPU reset is not supported in this (passthrough) configuration; reboot the node"
        if self.faults.reset_fails:
            return 255, "Unable to reset GPU: it is in use by another client (injected fault)"
        if self.nvml_users > 0:
            # The real driver refuses while any process has the GPU open, and nvmlInit opens them all.
            return 255, "Unable to reset GPU: it is in use by another client (this process has NVML initialised)"
        try:
            indices = [self.bus_index(g) for g in gpus]
            processes = self.processes()  # before the write lock (see _set_mig_mode)
            with self.store.transaction() as state:
                driver.reset(state, indices, processes)
        except SimError as exc:
            return 255, "Unable to reset GPU: %s" % exc
        self._count_mutation()
        return 0, "GPU reset successful"

    def reboot(self):
        # type: () -> None
        with self.store.transaction() as state:
            driver.reboot(state)

    # --- plumbing -------------------------------------------------------------------------------

    def _lost_by_now(self):
        # type: () -> Tuple[int, ...]
        """The GPUs gpu-lost-after has taken off the bus by now: each once the process made its number of
        mutating calls. A GPU off the bus stays lost: NVML answers GPU_IS_LOST for its handle and every call
        on it from then on ("the target GPU has fallen off the bus", nvml.h), until the node reboots (Xid 79)."""
        return tuple(gpu for gpu, after in self.faults.gpu_lost_after if self.mutations >= after)

    def _count_mutation(self):
        # type: () -> None
        self.mutations += 1
        if self.faults.crash_after is not None and self.mutations >= self.faults.crash_after:
            # The state file already holds this call's effect: die like a kill -9 right after it.
            os.kill(os.getpid(), signal.SIGKILL)

    def _fn(self, name, argtypes, body, restype=c_int):
        # type: (str, Tuple[Any, ...], Callable[..., Any], Any) -> None
        mutating = name in MUTATING
        interrupted = self._interrupted

        def call(*args):
            # An exception escaping a ctypes callback would be printed and read as 0 (SUCCESS): never.
            try:
                if mutating and self.faults.no_permission:
                    return driver.ERROR_NO_PERMISSION
                if self.faults.not_mig_capable and ("Mig" in name or "Instance" in name):
                    return driver.ERROR_NOT_SUPPORTED
                lost = self.faults.gpu_lost_late + self._lost_by_now()
                if lost and _on_lost_gpu(name, args, lost):
                    return driver.ERROR_GPU_IS_LOST
                for gpu, call_name, code in self.faults.gpu_error:
                    if name.startswith(call_name) and _on_gpu(name, args, gpu):
                        return code
                result = body(*args)
                if mutating:
                    self._count_mutation()
                return driver.SUCCESS if result is None else result
            except SimError as exc:
                return exc.code
            except Exception:  # noqa: BLE001 - a simulator bug must read as an error, not success
                return 999
            except BaseException as exc:  # noqa: B036 - a signal's (SIGTERM, SIGINT): raised once the call returns
                interrupted.append(exc)
                return 999

        def other(*args):
            # type: (Any) -> Any
            try:
                return body(*args)
            except BaseException as exc:  # noqa: B036 - as above; a C string result reads as none meanwhile
                interrupted.append(exc)
                return None

        function = CFUNCTYPE(c_int, *argtypes)(call) if restype is c_int else CFUNCTYPE(restype, *argtypes)(other)
        self._functions[name] = _EntryPoint(function, interrupted)

    def _define(self):
        # type: () -> None
        nv = self._nv
        P, U = c_void_p, c_uint

        def error_string(code):
            buf = self._strings.get(code)
            if buf is None:
                buf = self._strings[code] = ctypes.create_string_buffer(
                    _ERROR_TEXT.get(code, "NVML error %d" % code).encode())
            return ctypes.addressof(buf)

        self._fn("nvmlErrorString", (c_int,), error_string, restype=c_void_p)
        self._fn("nvmlInitWithFlags", (U,), lambda flags: self._init())
        self._fn("nvmlInit_v2", (), lambda: self._init())
        self._fn("nvmlShutdown", (), self._shutdown)
        self._fn("nvmlSystemGetDriverVersion", (P, U), lambda buf, size: _put_str(buf, size, self.driver_version))
        self._fn("nvmlDeviceGetCount_v2", (P,), lambda out: _put_uint(out, self.store.load()["count"]))
        self._fn("nvmlDeviceGetHandleByIndex_v2", (U, P), self._handle_by_index)
        self._fn("nvmlDeviceGetName", (P, P, U),
                 lambda dev, buf, size: _put_str(buf, size, self._model(dev).name))
        self._fn("nvmlDeviceGetUUID", (P, P, U), lambda dev, buf, size: _put_str(buf, size, self._uuid(dev)))
        # MIG devices (one per compute instance), as NVIDIA's device plugin walks them (go-nvlib
        # VisitMigDevices: GetMaxMigDeviceCount, then GetMigDeviceHandleByIndex, NOT_FOUND skipped) and
        # the node reads them to match kubelet's device IDs (node_bootstrap/kube/allocations.py).
        self._fn("nvmlDeviceGetMaxMigDeviceCount", (P, P), self._max_mig_devices)
        self._fn("nvmlDeviceGetMigDeviceHandleByIndex", (P, U, P), self._mig_device_handle)
        self._fn("nvmlDeviceGetGpuInstanceId", (P, P), lambda dev, out: _put_uint(out, self._mig_ids(dev)[1]))
        self._fn("nvmlDeviceGetComputeInstanceId", (P, P), lambda dev, out: _put_uint(out, self._mig_ids(dev)[2]))
        self._fn("nvmlDeviceIsMigDeviceHandle", (P, P), lambda dev, out: _put_uint(out, int(_decode(dev)[2] >= 0)))
        self._fn("nvmlDeviceGetPciInfo_v3", (P, P), self._pci_info)
        # The GPU's /dev/nvidia<minor>: here the index (a real node usually numbers them alike).
        self._fn("nvmlDeviceGetMinorNumber", (P, P), lambda dev, out: _put_uint(out, self._gpu(dev)[0]))
        self._fn("nvmlDeviceGetVirtualizationMode", (P, P), lambda dev, out: _put_uint(
            out, nv.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH if self.faults.passthrough
            else nv.NVML_GPU_VIRTUALIZATION_MODE_NONE))
        self._fn("nvmlDeviceGetMigMode", (P, P, P), self._get_mig_mode)
        self._fn("nvmlDeviceSetMigMode", (P, U, P), self._set_mig_mode)
        self._fn("nvmlDeviceGetGpuInstanceProfileInfoV", (P, U, P), lambda d, i, o: self._gi_profile(d, i, o, 2))
        self._fn("nvmlDeviceGetGpuInstanceProfileInfo", (P, U, P), lambda d, i, o: self._gi_profile(d, i, o, 1))
        self._fn("nvmlDeviceGetGpuInstancePossiblePlacements_v2", (P, U, P, P), self._placements)
        self._fn("nvmlDeviceCreateGpuInstanceWithPlacement", (P, U, P, P), self._create_gi)
        self._fn("nvmlGpuInstanceDestroy", (P,), self._destroy_gi)
        self._fn("nvmlDeviceGetGpuInstances", (P, U, P, P), self._gpu_instances)
        self._fn("nvmlDeviceGetGpuInstanceById", (P, U, P), self._gi_by_id)
        self._fn("nvmlGpuInstanceGetInfo", (P, P), self._gi_info)
        self._fn("nvmlGpuInstanceGetComputeInstanceProfileInfoV", (P, U, U, P),
                 lambda g, i, e, o: self._ci_profile(g, i, e, o, 2))
        self._fn("nvmlGpuInstanceGetComputeInstanceProfileInfo", (P, U, U, P),
                 lambda g, i, e, o: self._ci_profile(g, i, e, o, 1))
        self._fn("nvmlGpuInstanceCreateComputeInstance", (P, U, P), self._create_ci)
        self._fn("nvmlComputeInstanceDestroy", (P,), self._destroy_ci)
        self._fn("nvmlGpuInstanceGetComputeInstances", (P, U, P, P), self._compute_instances)
        self._fn("nvmlComputeInstanceGetInfo_v2", (P, P), self._ci_info)
        self._fn("nvmlComputeInstanceGetInfo", (P, P), self._ci_info)  # the pre-_v2 entry point
        self._fn("nvmlDeviceGetComputeRunningProcesses_v3", (P, P, P), self._running_processes)
        self._fn("nvmlDeviceGetComputeRunningProcesses_v2", (P, P, P), self._running_processes)

    def _init(self):
        # type: () -> None
        self.store.load()
        self.nvml_users += 1

    def _shutdown(self):
        # type: () -> None
        self.nvml_users = max(self.nvml_users - 1, 0)

    def _model(self, dev):
        # type: (int) -> Any
        index = _decode(dev)[0]
        state = self.store.load()
        if not 0 <= index < state["count"]:
            raise SimError(driver.ERROR_INVALID_ARGUMENT, "no GPU %d" % index)
        return driver.model_of(state, index)

    def _gpu(self, dev):
        # type: (int) -> Tuple[int, Dict[str, Any], Any]
        index = _decode(dev)[0]
        state = self.store.load()
        return index, driver.gpu_of(state, index), driver.model_of(state, index)

    # --- device ---------------------------------------------------------------------------------

    def _handle_by_index(self, index, out):
        if index >= self.store.load()["count"]:
            raise SimError(driver.ERROR_INVALID_ARGUMENT, "no GPU %d" % index)
        # nvml.h: "if the target GPU has fallen off the bus or is otherwise inaccessible"; one lost while the
        # process ran (gpu-lost-after) answers so for a handle asked for afterwards too
        if index in self.faults.gpu_lost + self._lost_by_now():
            raise SimError(driver.ERROR_GPU_IS_LOST, "GPU %d is lost" % index)
        _put_ptr(out, _dev_handle(index))

    def _pci_info(self, dev, out):
        index = _decode(dev)[0]
        model = self._model(dev)
        info = self._nv.nvmlPciInfo_t.from_address(out)
        bus = 0x10 + index
        info.domain, info.bus, info.device = 0, bus, 0
        # The product's own id (the catalogue lists the named product's ids first): pci.ids, e.g. H20 2329.
        info.pciDeviceId = (model.pci_device_ids[0] << 16) | 0x10DE
        info.pciSubSystemId = 0x147E10DE
        info.busId = ("00000000:%02X:00.0" % bus).encode()
        info.busIdLegacy = ("0000:%02X:00.0" % bus).encode()

    def _get_mig_mode(self, dev, current, pending):
        _, gpu, _ = self._gpu(dev)
        _put_uint(current, gpu["mig_current"])
        _put_uint(pending, gpu["mig_pending"])

    def _set_mig_mode(self, dev, mode, activation):
        index = _decode(dev)[0]
        processes = self.processes()  # read before the write lock: a second flock of ours would deadlock
        with self.store.transaction() as state:
            # reset-fails stands for a GPU client apply does not know (DCGM, a monitoring agent): it holds
            # the GPU, so the mode stays pending with IN_USE, as the real driver answers (driver.py).
            # held-at-set: the same client, gone by the time of the reset (the reset then applies the mode).
            status = driver.set_mig_mode(state, index, mode, processes,
                                         held=self.faults.reset_fails or self.faults.held_at_set,
                                         passthrough=self.faults.passthrough)
        _put_uint(activation, status)

    # --- GPU instances --------------------------------------------------------------------------

    def _profiles_need_mig(self, gpu):
        # type: (Dict[str, Any]) -> None
        """The profiles-need-mig fault: nvml.h on nvmlDeviceGetGpuInstanceProfileInfoV, NOT_SUPPORTED "If
        device doesn't have MIG mode enabled or profile isn't supported", as older Ampere drivers answer."""
        if self.faults.profiles_need_mig and gpu["mig_current"] != 1:
            raise SimError(driver.ERROR_NOT_SUPPORTED, "MIG mode is disabled")

    def _gi_profile(self, dev, nvml_index, out, version):
        _, gpu, model = self._gpu(dev)
        # The indices this driver branch knows (driver.gi_index_count: a real R580 answers 17 with
        # INVALID_ARGUMENT), whatever header pynvml was made from.
        if nvml_index >= driver.gi_index_count(self.branch):
            raise SimError(driver.ERROR_INVALID_ARGUMENT, "no profile index %d" % nvml_index)
        if version == 2 and self._nv.c_nvmlGpuInstanceProfileInfo_v2_t.from_address(out).version != \
                self._nv.nvmlGpuInstanceProfileInfo_v2:
            # nvml.h, nvmlDeviceGetGpuInstanceProfileInfoV: INVALID_ARGUMENT "If ... info->version are invalid".
            raise SimError(driver.ERROR_INVALID_ARGUMENT, "struct version mismatch")
        self._profiles_need_mig(gpu)
        # A real H200 (driver 580) answers profile and placement queries with MIG mode disabled
        # (scripts/nvml_readonly_probe.py showed it); only instance calls need MIG on.
        profile = driver.profile_by_index(model, nvml_index, self.branch)
        struct = self._nv.c_nvmlGpuInstanceProfileInfo_v2_t if version == 2 else self._nv.c_nvmlGpuInstanceProfileInfo_t
        info = struct.from_address(out)
        if version == 2:
            info.name = ("MIG " + profile.name).encode()
        info.id = profile.id
        info.isP2pSupported = 0
        info.sliceCount = profile.compute_slices
        info.instanceCount = profile.max_instances
        info.multiprocessorCount = 14 * profile.compute_slices
        info.copyEngineCount = profile.compute_slices
        info.decoderCount = profile.memory_slices // 2
        info.encoderCount = 0
        info.jpegCount = 1 if profile.name.endswith("+me") or profile.compute_slices == 7 else 0
        info.ofaCount = info.jpegCount
        info.memorySizeMB = profile.memory_mib

    def _placements(self, dev, profile_id, array, count):
        _, gpu, model = self._gpu(dev)
        self._profiles_need_mig(gpu)
        profile = driver.profile_by_id(model, profile_id)
        if not array:
            _put_uint(count, len(profile.placements))
            return None
        size = c_uint.from_address(count).value
        if size < len(profile.placements):
            _put_uint(count, len(profile.placements))
            return driver.ERROR_INSUFFICIENT_SIZE
        arr = (self._nv.c_nvmlGpuInstancePlacement_t * len(profile.placements)).from_address(array)
        for n, placement in enumerate(profile.placements):
            arr[n].start, arr[n].size = placement.start, placement.size
        _put_uint(count, len(profile.placements))
        return None

    def _create_gi(self, dev, profile_id, placement, out):
        index = _decode(dev)[0]
        if self.faults.insufficient_resources:
            raise SimError(driver.ERROR_INSUFFICIENT_RESOURCES, "injected")
        place = self._nv.c_nvmlGpuInstancePlacement_t.from_address(placement)
        with self.store.transaction() as state:
            gi_id = driver.create_gpu_instance(state, index, profile_id, place.start, place.size)
        _put_ptr(out, _gi_handle(index, gi_id))

    def _destroy_gi(self, gi_handle):
        index, gi_id, _ = _decode(gi_handle)
        processes = self.processes()  # before the write lock (see _set_mig_mode)
        with self.store.transaction() as state:
            driver.destroy_gpu_instance(state, index, gi_id, processes)

    def _gpu_instances(self, dev, profile_id, array, count):
        index, gpu, model = self._gpu(dev)
        driver.require_mig(gpu)
        driver.profile_by_id(model, profile_id)
        found = [gi for gi in gpu["gis"] if gi["profile_id"] == profile_id]
        handles = (c_void_p * max(len(found), 1)).from_address(array) if array else None
        for n, gi in enumerate(found):
            if handles is not None:
                handles[n] = _gi_handle(index, gi["id"])
        _put_uint(count, len(found))

    # --- MIG devices ----------------------------------------------------------------------------

    def _uuid(self, dev):
        # type: (int) -> str
        index, gi_id, ci_id = _decode(dev)
        if ci_id < 0:
            return "GPU-5151%04x-0000-4000-8000-%012x" % (index, index)
        for gi, ci, uuid in driver.mig_devices(self.store.load(), index):
            if (gi, ci) == (gi_id, ci_id):
                return uuid
        raise SimError(driver.ERROR_NOT_FOUND, "no MIG device %d/%d" % (gi_id, ci_id))

    def _max_mig_devices(self, dev, out):
        # nvml.h, nvmlDeviceGetMaxMigDeviceCount: "Returns zero if MIG is not supported or enabled" (SUCCESS,
        # not NOT_SUPPORTED); a real H200 with MIG off answered 0 (tests/core/data/h200_nvml_probe.json). A
        # pending mode is not yet enabled: the current one decides.
        index, _, _ = _decode(dev)
        state = self.store.load()
        model = driver.model_of(state, index)
        enabled = driver.gpu_of(state, index)["mig_current"] == 1
        _put_uint(out, max(p.max_instances for p in model.profiles) if enabled else 0)

    def _mig_device_handle(self, dev, mig_index, out):
        # nvml.h: NOT_FOUND "if no valid MIG device was found at index"; NOT_SUPPORTED "if device doesn't have
        # MIG mode enabled" (require_mig), not INVALID_ARGUMENT.
        index = _decode(dev)[0]
        state = self.store.load()
        driver.require_mig(driver.gpu_of(state, index))
        found = driver.mig_devices(state, index)
        if mig_index >= len(found):
            raise SimError(driver.ERROR_NOT_FOUND, "no MIG device at index %d" % mig_index)
        gi_id, ci_id, _ = found[mig_index]
        _put_ptr(out, _ci_handle(index, gi_id, ci_id))  # a MIG device handle names its GI and CI

    def _mig_ids(self, dev):
        # type: (int) -> Tuple[int, int, int]
        index, gi_id, ci_id = _decode(dev)
        if ci_id < 0:
            raise SimError(driver.ERROR_INVALID_ARGUMENT, "not a MIG device handle")
        return index, gi_id, ci_id

    def _gi_by_id(self, dev, gi_id, out):
        index, gpu, _ = self._gpu(dev)
        driver.require_mig(gpu)
        driver.gi_of(gpu, gi_id)
        _put_ptr(out, _gi_handle(index, gi_id))

    def _gi_info(self, gi_handle, out):
        index, gi_id, _ = _decode(gi_handle)
        gi = driver.gi_of(driver.gpu_of(self.store.load(), index), gi_id)
        info = self._nv.c_nvmlGpuInstanceInfo_t.from_address(out)
        c_void_p.from_address(out).value = _dev_handle(index)  # the "device" field comes first
        info.id = gi["id"]
        info.profileId = gi["profile_id"]
        info.placement.start = gi["start"]
        info.placement.size = gi["size"]

    # --- compute instances ----------------------------------------------------------------------

    def _ci_profile(self, gi_handle, ci_index, engine, out, version):
        index, gi_id, _ = _decode(gi_handle)
        state = self.store.load()
        gi = driver.gi_of(driver.gpu_of(state, index), gi_id)
        profiles = driver.ci_profiles(driver.model_of(state, index), gi, self.branch)
        # nvml.h, nvmlGpuInstanceGetComputeInstanceProfileInfo(V): INVALID_ARGUMENT for an index past what
        # this driver branch knows (driver.ci_index_count), and "If ... info->version are invalid".
        if ci_index >= driver.ci_index_count(self.branch):
            raise SimError(driver.ERROR_INVALID_ARGUMENT, "no compute instance profile index %d" % ci_index)
        if version == 2 and self._nv.c_nvmlComputeInstanceProfileInfo_v2_t.from_address(out).version != \
                self._nv.nvmlComputeInstanceProfileInfo_v2:
            raise SimError(driver.ERROR_INVALID_ARGUMENT, "struct version mismatch")
        if ci_index not in profiles or engine != 0:
            raise SimError(driver.ERROR_NOT_SUPPORTED, "CI profile not supported")
        struct = (self._nv.c_nvmlComputeInstanceProfileInfo_v2_t if version == 2
                  else self._nv.c_nvmlComputeInstanceProfileInfo_t)
        info = struct.from_address(out)
        if version == 2:
            info.name = ("MIG %dc" % profiles[ci_index]).encode()
        info.id = ci_index
        info.sliceCount = profiles[ci_index]
        info.instanceCount = max(profiles.values()) // profiles[ci_index]
        info.multiprocessorCount = 14 * profiles[ci_index]

    def _create_ci(self, gi_handle, ci_profile_id, out):
        index, gi_id, _ = _decode(gi_handle)
        with self.store.transaction() as state:
            ci_id = driver.create_compute_instance(state, index, gi_id, ci_profile_id)
        _put_ptr(out, _ci_handle(index, gi_id, ci_id))

    def _destroy_ci(self, ci_handle):
        index, gi_id, ci_id = _decode(ci_handle)
        processes = self.processes()  # before the write lock (see _set_mig_mode)
        with self.store.transaction() as state:
            driver.destroy_compute_instance(state, index, gi_id, ci_id, processes)

    def _compute_instances(self, gi_handle, ci_profile_id, array, count):
        index, gi_id, _ = _decode(gi_handle)
        gi = driver.gi_of(driver.gpu_of(self.store.load(), index), gi_id)
        found = [ci for ci in gi["cis"] if ci["profile_id"] == ci_profile_id]
        handles = (c_void_p * max(len(found), 1)).from_address(array) if array else None
        for n, ci in enumerate(found):
            if handles is not None:
                handles[n] = _ci_handle(index, gi_id, ci["id"])
        _put_uint(count, len(found))

    def _ci_info(self, ci_handle, out):
        index, gi_id, ci_id = _decode(ci_handle)
        gi = driver.gi_of(driver.gpu_of(self.store.load(), index), gi_id)
        for ci in gi["cis"]:
            if ci["id"] == ci_id:
                info = self._nv.c_nvmlComputeInstanceInfo_t.from_address(out)
                c_void_p.from_address(out).value = _dev_handle(index)
                info.gpuInstance = ctypes.cast(c_void_p(_gi_handle(index, gi_id)), self._nv.c_nvmlGpuInstance_t)
                info.id = ci_id
                info.profileId = ci["profile_id"]
                slices = driver.CI_PROFILE_SLICES.get(ci["profile_id"], 1)
                info.placement.start, info.placement.size = 0, slices
                return None
        raise SimError(driver.ERROR_NOT_FOUND, "no compute instance %d" % ci_id)

    # --- processes ------------------------------------------------------------------------------

    def _running_processes(self, dev, count, array):
        index = _decode(dev)[0]
        if self.faults.no_permission or self.faults.processes_unreadable:
            return driver.ERROR_NO_PERMISSION
        procs = [p for p in self.processes() if p.gpu == index]
        capacity = c_uint.from_address(count).value
        _put_uint(count, len(procs))
        if not procs:
            return None
        if not array or capacity < len(procs):
            return driver.ERROR_INSUFFICIENT_SIZE
        arr = (self._nv.c_nvmlProcessInfo_v2_t * len(procs)).from_address(array)
        for n, proc in enumerate(procs):
            arr[n].pid = proc.pid
            arr[n].usedGpuMemory = 512 * 1024 * 1024
            arr[n].gpuInstanceId = proc.gi if proc.gi is not None else 0xFFFFFFFF
            arr[n].computeInstanceId = proc.ci if proc.ci is not None else 0xFFFFFFFF
        return None
