"""The one NVML backend: pynvml calls, for the real driver and the simulated one alike.

:class:`NvmlReader` only reads (``status`` and ``plan`` get nothing else, so they cannot change a GPU).
Every read tolerates the answers a real node gives: NOT_SUPPORTED (MIG disabled, GPU not MIG-capable),
NO_PERMISSION (not root), FUNCTION_NOT_FOUND (older driver) and pynvml builds lacking a function or a
newer signature; what could not be read is noted on the GPU instead of failing the command.

:class:`NvmlWriter` adds the five mutating calls, each counted in ``changes`` (attempts, successful or
not), for ``apply`` alone.
"""

import ctypes
from typing import Any, Callable, List, Optional, Tuple

from .live import LiveCi, LiveGi, LiveGpu, LiveProfile
from .mig import Placement

# NVML_GPU_INSTANCE_PROFILE_* indices worth asking about (0..9 cover every MIG GPU we know; the
# graphics and no-ME variants after them are not what a partition label names).
GI_PROFILE_INDICES = tuple(range(10))
# NVML_COMPUTE_INSTANCE_PROFILE_* index for a compute instance spanning a whole GPU instance of N slices.
FULL_CI_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
CI_PROFILE_INDICES = (0, 1, 2, 3, 4, 5, 6, 7)
_ARRAY = 64


class NvmlUnavailable(Exception):
    """pynvml or the NVML library cannot be loaded or initialised."""


def _code(exc):
    # type: (Exception) -> Optional[int]
    return getattr(exc, "value", None)


class NvmlReader(object):
    """Read-only NVML access. Use as a context manager (nvmlInit / nvmlShutdown)."""

    def __init__(self, pynvml_module):
        # type: (Any) -> None
        self.nv = pynvml_module
        self._open = False

    # --- lifecycle ------------------------------------------------------------------------------

    def __enter__(self):
        # type: () -> NvmlReader
        try:
            self.nv.nvmlInit()
        except self.nv.NVMLError as exc:
            raise NvmlUnavailable("NVML did not initialise: %s" % self.error_text(exc))
        self._open = True
        return self

    def __exit__(self, *exc):
        # type: (Any) -> None
        if self._open:
            self._open = False
            try:
                self.nv.nvmlShutdown()
            except self.nv.NVMLError:
                pass

    def error_text(self, exc):
        # type: (Exception) -> str
        code = _code(exc)
        try:
            text = str(exc)
        except Exception:  # noqa: BLE001 - str() of an NVML error calls into the library again
            text = ""
        return "%s (NVML error %s)" % (text or "NVML error", code) if code is not None else str(exc)

    def _is(self, exc, *names):
        # type: (Exception, str) -> bool
        return _code(exc) in [getattr(self.nv, n, -1) for n in names]

    def _try(self, notes, what, call, *args):
        # type: (List[str], str, Callable[..., Any], Any) -> Any
        """Call one read; on an NVML refusal or a missing binding note why and return None."""
        try:
            return call(*args)
        except self.nv.NVMLError as exc:
            notes.append("%s: %s" % (what, self.error_text(exc)))
        except (AttributeError, TypeError) as exc:  # an older pynvml without this function or argument
            notes.append("%s: unavailable in this pynvml (%s)" % (what, exc.__class__.__name__))
        return None

    # --- reads ----------------------------------------------------------------------------------

    def driver_version(self):
        # type: () -> Optional[str]
        try:
            value = self.nv.nvmlSystemGetDriverVersion()
        except (self.nv.NVMLError, AttributeError):
            return None
        return value.decode() if isinstance(value, bytes) else value

    def count(self):
        # type: () -> int
        return int(self.nv.nvmlDeviceGetCount())

    def handle(self, index):
        # type: (int) -> Any
        return self.nv.nvmlDeviceGetHandleByIndex(index)

    def read_all(self):
        # type: () -> List[LiveGpu]
        return [self.read_gpu(i) for i in range(self.count())]

    def read_gpu(self, index):
        # type: (int) -> LiveGpu
        nv = self.nv
        notes = []  # type: List[str]
        dev = self.handle(index)
        name = self._try(notes, "name", nv.nvmlDeviceGetName, dev) or ""
        name = name.decode() if isinstance(name, bytes) else name
        pci = self._try(notes, "PCI info", nv.nvmlDeviceGetPciInfo, dev)
        uuid = self._try(notes, "UUID", nv.nvmlDeviceGetUUID, dev) or ""
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        bus_id = ""
        if pci is not None:
            bus_id = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
        mode = self._try(notes, "MIG mode", nv.nvmlDeviceGetMigMode, dev)
        current, pending = (int(mode[0]), int(mode[1])) if mode is not None else (None, None)
        profiles = ()  # type: Tuple[LiveProfile, ...]
        gis = ()  # type: Tuple[LiveGi, ...]
        if current is not None:
            # A real H200 (driver 580) answers profile and placement queries with MIG mode off, so
            # `plan` can use the driver's own table before the first apply; a driver that says
            # NOT_SUPPORTED there leaves the profiles empty and the catalogue fills in.
            profiles = self._profiles(dev, notes)
        if current == 1:  # instances exist only while MIG mode is on
            gis = self._gpu_instances(dev, profiles, notes)
        pids, pids_unreadable = self._pids(dev, notes)
        return LiveGpu(index, name, int(pci.pciDeviceId) if pci is not None else None, bus_id, uuid,
                       current, pending, profiles, gis, pids, tuple(notes), pids_unreadable)

    def _profile_info(self, dev, nvml_index):
        # type: (Any, int) -> Tuple[Any, str]
        """Profile info through the newest call this pynvml and driver have: (struct, name)."""
        info = self._versioned(self.nv.nvmlDeviceGetGpuInstanceProfileInfo, dev, nvml_index)
        raw = getattr(info, "name", b"")
        return info, raw.decode() if isinstance(raw, bytes) else str(raw)

    def _versioned(self, call, *args):
        # type: (Callable[..., Any], Any) -> Any
        """Profile info calls: the v2 struct where pynvml and the driver have it, else the v1 one.

        pynvml 11.5+ takes a ``version`` argument (v2 = the ``...V`` entry point, with names); older
        pynvml has no such argument and calls the v1 entry point; older drivers lack the ``V`` one.
        """
        nv = self.nv
        for version in (2, 1):
            try:
                return call(*(args + (version,)))
            except nv.NVMLError as exc:
                if not self._is(exc, "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"):
                    raise
            except TypeError:  # pynvml before the version argument
                break
        return call(*args)

    @staticmethod
    def _listed(ctype, call, *args):
        # type: (Any, Callable[..., Any], Any) -> List[Any]
        """NVML's fill-an-array queries: pass an array of _ARRAY items and its size; get the filled ones."""
        array = (ctype * _ARRAY)()
        count = ctypes.c_uint(_ARRAY)
        call(*(args + (array, ctypes.byref(count))))
        return [array[i] for i in range(count.value)]

    def _placements(self, dev, profile_id):
        # type: (Any, int) -> Tuple[Placement, ...]
        nv = self.nv
        found = self._listed(nv.c_nvmlGpuInstancePlacement_t, nv.nvmlDeviceGetGpuInstancePossiblePlacements,
                             dev, profile_id)
        return tuple(Placement(int(p.start), int(p.size)) for p in found)

    def _profiles(self, dev, notes):
        # type: (Any, List[str]) -> Tuple[LiveProfile, ...]
        nv = self.nv
        found = []  # type: List[LiveProfile]
        for nvml_index in GI_PROFILE_INDICES:
            try:
                info, name = self._profile_info(dev, nvml_index)
            except nv.NVMLError as exc:
                if not self._is(exc, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT"):
                    notes.append("profile index %d: %s" % (nvml_index, self.error_text(exc)))
                continue  # NOT_SUPPORTED: this GPU lacks the profile
            except AttributeError:
                notes.append("profile info: unavailable in this pynvml")
                break
            placements = self._try(notes, "placements of profile %d" % info.id, self._placements, dev, info.id) or ()
            found.append(LiveProfile(nvml_index, int(info.id), name, int(info.sliceCount),
                                     int(info.instanceCount), int(info.memorySizeMB), placements))
        return tuple(found)

    def gi_handles(self, dev, profile_id):
        # type: (Any, int) -> List[Any]
        return self._listed(self.nv.c_nvmlGpuInstance_t, self.nv.nvmlDeviceGetGpuInstances, dev, profile_id)

    def _gpu_instances(self, dev, profiles, notes):
        # type: (Any, Tuple[LiveProfile, ...], List[str]) -> Tuple[LiveGi, ...]
        nv = self.nv
        ids = sorted(set(p.id for p in profiles))
        gis = []  # type: List[LiveGi]
        for profile_id in ids:
            handles = self._try(notes, "GPU instances of profile %d" % profile_id, self.gi_handles, dev, profile_id)
            for handle in handles or []:
                info = self._try(notes, "GPU instance info", nv.nvmlGpuInstanceGetInfo, handle)
                if info is None:
                    continue
                cis = self._compute_instances(handle, notes)
                gis.append(LiveGi(int(info.id), int(info.profileId), int(info.placement.start),
                                  int(info.placement.size), cis))
        return tuple(sorted(gis, key=lambda g: (g.start, g.id)))

    def ci_profile(self, gi_handle, ci_index):
        # type: (Any, int) -> Any
        return self._versioned(self.nv.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi_handle, ci_index, 0)

    def ci_handles(self, gi_handle, ci_profile_id):
        # type: (Any, int) -> List[Any]
        return self._listed(self.nv.c_nvmlComputeInstance_t, self.nv.nvmlGpuInstanceGetComputeInstances,
                            gi_handle, ci_profile_id)

    def _ci_info(self, ci_handle):
        # type: (Any) -> Any
        nv = self.nv
        try:
            return nv.nvmlComputeInstanceGetInfo(ci_handle)
        except nv.NVMLError as exc:
            if not self._is(exc, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                raise
        # Drivers before the _v2 entry point: the same struct through the original one.
        info = nv.c_nvmlComputeInstanceInfo_t()
        fn = nv._nvmlGetFunctionPointer("nvmlComputeInstanceGetInfo")
        nv._nvmlCheckReturn(fn(ci_handle, ctypes.byref(info)))
        return info

    def _compute_instances(self, gi_handle, notes):
        # type: (Any, List[str]) -> Tuple[LiveCi, ...]
        nv = self.nv
        cis = []  # type: List[LiveCi]
        for ci_index in CI_PROFILE_INDICES:
            try:
                profile = self.ci_profile(gi_handle, ci_index)
            except nv.NVMLError:
                continue  # this GPU instance does not offer that CI profile
            except AttributeError:
                notes.append("compute instance profiles: unavailable in this pynvml")
                break
            handles = self._try(notes, "compute instances", self.ci_handles, gi_handle, profile.id)
            for handle in handles or []:
                info = self._try(notes, "compute instance info", self._ci_info, handle)
                if info is not None:
                    cis.append(LiveCi(int(info.id), int(info.profileId), int(profile.sliceCount)))
        return tuple(sorted(cis))

    def _pids(self, dev, notes):
        # type: (Any, List[str]) -> Tuple[Tuple[int, ...], str]
        """(compute process ids, "") or ((), why the list could not be read)."""
        nv = self.nv
        procs = None
        for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                     "nvmlDeviceGetComputeRunningProcesses"):
            fn = getattr(nv, name, None)
            if fn is None:
                continue
            try:
                procs = fn(dev)
                break
            except nv.NVMLError as exc:
                if self._is(exc, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                    continue
                notes.append("compute processes: %s" % self.error_text(exc))
                return (), notes[-1]
        if procs is None:
            notes.append("compute processes: unavailable in this pynvml")
            return (), notes[-1]
        return tuple(sorted(set(int(p.pid) for p in procs))), ""

    def passthrough(self, index):
        # type: (int) -> bool
        """True when the GPU is passed through to a VM: no reset, a pending mode needs a reboot."""
        nv = self.nv
        try:
            mode = nv.nvmlDeviceGetVirtualizationMode(self.handle(index))
        except (nv.NVMLError, AttributeError):
            return False
        return mode == getattr(nv, "NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH", 1)


class NvmlWriter(NvmlReader):
    """Read access plus the mutating calls, counted in ``changes``."""

    def __init__(self, pynvml_module):
        # type: (Any) -> None
        super(NvmlWriter, self).__init__(pynvml_module)
        self.changes = 0

    def _gi_handle(self, index, gi_id):
        # type: (int, int) -> Any
        return self.nv.nvmlDeviceGetGpuInstanceById(self.handle(index), gi_id)

    def released(self, call, *args):
        # type: (Callable[..., Any], Any) -> Any
        """``call(*args)`` with NVML shut down in this process, initialised again afterwards.

        After nvmlInit this process keeps every /dev/nvidiaN open, and the driver refuses a GPU reset
        (``nvidia-smi -r``) while any client holds the GPU, ourselves included. Nothing stale survives
        the re-init: every method looks its device handle up by index on each call.
        """
        if self._open:
            self._open = False
            try:
                self.nv.nvmlShutdown()
            except self.nv.NVMLError:
                pass  # still held: the reset will be refused and say so
        try:
            return call(*args)
        finally:
            try:
                self.nv.nvmlInit()
            except self.nv.NVMLError as exc:
                raise NvmlUnavailable("NVML did not initialise again after the GPU reset: %s" % self.error_text(exc))
            self._open = True

    def set_mig_mode(self, index, enabled):
        # type: (int, bool) -> int
        """Returns NVML's activation status (0, or e.g. RESET_REQUIRED while the mode is pending)."""
        mode = self.nv.NVML_DEVICE_MIG_ENABLE if enabled else self.nv.NVML_DEVICE_MIG_DISABLE
        dev = self.handle(index)
        self.changes += 1
        return int(self.nv.nvmlDeviceSetMigMode(dev, mode))

    def destroy_compute_instance(self, index, gi_id, ci_id):
        # type: (int, int, int) -> None
        gi = self._gi_handle(index, gi_id)
        handle = None
        for ci_index in CI_PROFILE_INDICES:
            try:
                profile = self.ci_profile(gi, ci_index)
            except self.nv.NVMLError:
                continue
            for candidate in self.ci_handles(gi, profile.id):
                if int(self._ci_info(candidate).id) == ci_id:
                    handle = candidate
        if handle is None:
            return  # already gone: nothing to change
        self.changes += 1
        self.nv.nvmlComputeInstanceDestroy(handle)

    def destroy_gpu_instance(self, index, gi_id):
        # type: (int, int) -> None
        gi = self._gi_handle(index, gi_id)
        self.changes += 1
        self.nv.nvmlGpuInstanceDestroy(gi)

    def create_gpu_instance(self, index, profile_id, start, size):
        # type: (int, int, int, int) -> int
        """Create at exactly this placement; returns the new GPU instance id."""
        placement = self.nv.c_nvmlGpuInstancePlacement_t()
        placement.start = start
        placement.size = size
        dev = self.handle(index)
        self.changes += 1
        gi = self.nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, profile_id, ctypes.byref(placement))
        return int(self.nv.nvmlGpuInstanceGetInfo(gi).id)

    def create_full_compute_instance(self, index, gi_id, slices):
        # type: (int, int, int) -> None
        """One compute instance spanning the whole GPU instance (what ``nvidia-smi mig -cgi ... -C`` does)."""
        gi = self._gi_handle(index, gi_id)
        profile = self.ci_profile(gi, FULL_CI_INDEX.get(slices, 0))
        self.changes += 1
        self.nv.nvmlGpuInstanceCreateComputeInstance(gi, profile.id)
