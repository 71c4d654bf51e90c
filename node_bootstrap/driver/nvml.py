"""The one NVML backend: pynvml calls, for the real driver and the simulated one alike.

:class:`NvmlReader` only reads (``status`` and ``plan`` get nothing else, so they cannot change a GPU).
Every read tolerates the answers a real node gives: NOT_SUPPORTED (MIG disabled, GPU not MIG-capable),
NO_PERMISSION (not root), FUNCTION_NOT_FOUND (older driver) and pynvml builds lacking a function or a
newer signature; what could not be read is noted on the GPU instead of failing the command. The one
exception is a GPU instance or compute instance profile that cannot be read while MIG mode is on: its
instances would be invisible (never destroyed, in the way of every create), so that is an error.

Profiles are enumerated the way NVIDIA's own walkers do (mig-parted ``internal/nvlib/mig``, go-nvlib
``VisitMigProfiles``): every index below the profile count, skipping INVALID_ARGUMENT and NOT_SUPPORTED,
since a real R580 driver answers an index the header defines (17) with INVALID_ARGUMENT and a later driver
may leave such a gap before indices it does know. Past the count, nvml.h's rule for
``nvmlDeviceGetGpuInstanceProfileInfo`` ("invoking it on profile values starting from 0, until the API
returns NVML_ERROR_INVALID_ARGUMENT") decides, so a driver newer than this pynvml still shows every
instance. Compute instance profiles are enumerated the same way.

:class:`NvmlWriter` adds the five mutating calls, each counted in ``changes`` (attempts, successful or
not), for ``apply`` alone, and :meth:`NvmlWriter.missing_entry_points`, which apply asks before the first.
"""

import ctypes
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import GpuLost, NodeFailure, one_line
from .live import LiveMigDevice, LiveCi, LiveGi, LiveGpu, LiveProcess, LiveProfile
from ..mig import Placement

# A stop for a driver that never answers INVALID_ARGUMENT.
MAX_PROFILE_INDEX = 64
# The profile counts of today's nvml.h (NVIDIA go-nvml gen/nvml/nvml.h): NVML_GPU_INSTANCE_PROFILE_COUNT
# 0x12, NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9 (pynvml 13.615 defines the same); an older pynvml's smaller
# counts never shorten the scan.
GI_PROFILE_COUNT = 0x12
CI_PROFILE_COUNT = 0x9
NO_INSTANCE = 0xFFFFFFFF  # nvmlProcessInfo_t's gpuInstanceId / computeInstanceId off MIG
# NVML_COMPUTE_INSTANCE_PROFILE_* index for a compute instance spanning a whole GPU instance of N slices.
FULL_CI_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
_ARRAY = 64

# The compute process list, newest first; pynvml 13 maps the unversioned name to _v3 and raises
# NVMLLibraryMismatchError (not an NVMLError) when the driver lacks _v3.
PROCESS_CALLS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                 "nvmlDeviceGetComputeRunningProcesses")

# What each kind of change calls, beyond the reads every command makes: pynvml functions and the
# driver's entry points of the same names. nvmlDeviceCreateGpuInstanceWithPlacement first appears in
# CUDA 11.2's nvml.h (R460), nvmlDeviceGetGpuInstancePossiblePlacements_v2 in CUDA 11.4's (R470)
# (NVIDIA/go-nvml's header history): creating at a placement needs R460; the placement query is only a
# read (the catalogue's placements stand in where the driver lacks it), so R470 is not required.
ENTRY_POINTS = {
    "mode": ("nvmlDeviceSetMigMode",),
    "destroy_cis": ("nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetComputeInstances",
                    "nvmlComputeInstanceDestroy"),
    "destroy_gis": ("nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceDestroy"),
    "create": ("nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceGetInfo",
               "nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceCreateComputeInstance"),
    "create_cis": ("nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceCreateComputeInstance"),
}
_WHY = {"mode": "setting MIG mode", "destroy_cis": "destroying compute instances",
        "destroy_gis": "destroying GPU instances", "create": "creating GPU instances at a placement (R460+)",
        "create_cis": "creating compute instances"}


class NvmlUnavailable(Exception):
    """pynvml or the NVML library cannot be loaded or initialised."""


class _NeverRaised(Exception):
    """Stands in for pynvml's NVMLLibraryMismatchError where an older pynvml has none."""


class NvmlReadError(NodeFailure):
    """A read that must not fail did (a profile unreadable while MIG is on), or pynvml and the driver do
    not match: no plan can be trusted, so every command stops with this reason."""

    code = "nvml-unreadable"


def _code(exc):
    # type: (Exception) -> Optional[int]
    return getattr(exc, "value", None)


def driver_branch(version):
    # type: (Optional[str]) -> Optional[int]
    """"535.183.01" -> 535; None when there is no readable version."""
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


class NvmlReader(object):
    """Read-only NVML access. Use as a context manager (nvmlInit / nvmlShutdown).

    ``stamp(pid)``, when given, is called for each compute process right after NVML listed it and returns
    its start time (``/proc/<pid>/stat``): recorded then, a later signal can tell the process NVML meant
    from another that got its PID in between.
    """

    def __init__(self, pynvml_module, stamp=None):
        # type: (Any, Optional[Callable[[int], Optional[int]]]) -> None
        self.nv = pynvml_module
        self.stamp = stamp
        self._open = False
        self._v1_only = False  # the driver rejected the v2 profile structs' version: ask v1 from then on

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

    def _lost(self, exc):
        # type: (Exception) -> bool
        """GPU_IS_LOST (nvml.h: the GPU "has fallen off the bus or is otherwise inaccessible"), from any call on
        the GPU: never a missing feature, an unreadable list or a profile to skip. The caller re-raises it, and
        read_gpu (or, for a change, reconcile's _step) fails the GPU as lost."""
        return self._is(exc, "NVML_ERROR_GPU_IS_LOST")

    def _try(self, notes, what, call, *args):
        # type: (List[str], str, Callable[..., Any], Any) -> Any
        """Call one read; on an NVML refusal or a missing binding note why and return None."""
        try:
            return call(*args)
        except self.nv.NVMLError as exc:
            if self._lost(exc):
                raise  # not a missing feature: the GPU is gone (read_gpu names it)
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

    def read_each(self):
        # type: () -> Tuple[List[LiveGpu], Dict[int, NodeFailure]]
        """Every GPU that can be read, and why each other one cannot (GPU_IS_LOST, an unreadable profile).
        For a run that failed: one GPU off the bus must not hide what the healthy ones hold, which this run
        may have changed already; read_all gives up on the first."""
        gpus = []  # type: List[LiveGpu]
        unreadable = {}  # type: Dict[int, NodeFailure]
        for index in range(self.count()):
            try:
                gpus.append(self.read_gpu(index))
            except NodeFailure as exc:
                unreadable[index] = exc
            except self.nv.NVMLError as exc:
                # Any other answer on this GPU (UNKNOWN, TIMEOUT: its handle, its MIG mode) leaves only what it
                # holds unknown, as a lost GPU does: raised, it would fail the report of every GPU.
                unreadable[index] = NvmlReadError("GPU %d: NVML answered %s; what it holds is unknown"
                                                  % (index, self.error_text(exc)), code="nvml-error")
        return gpus, unreadable

    def read_gpu(self, index):
        # type: (int) -> LiveGpu
        """One GPU as NVML reports it. A MIG mode NVML cannot tell, for another reason than a GPU without MIG,
        raises (``_mig_mode``) for every command alike: read as no MIG it reported the GPU empty and not
        MIG-capable (status, plan, a report), or made apply and disable act on that."""
        try:
            return self._read_gpu(index)
        except self.nv.NVMLError as exc:
            if self._is(exc, "NVML_ERROR_GPU_IS_LOST"):
                raise GpuLost("GPU %d is lost (NVML GPU_IS_LOST): it has fallen off the bus or is otherwise "
                              "inaccessible; reboot the node to recover it" % index)
            # Any other answer on this GPU (its handle: UNKNOWN, TIMEOUT) names it: on a node of eight, "NVML:
            # Unknown Error" alone said nothing of which
            raise NvmlReadError("GPU %d: NVML answered %s; what it holds is unknown" % (index, self.error_text(exc)),
                                code="nvml-error")
        except self._mismatch_error() as exc:
            raise NvmlReadError("pynvml and the driver's NVML library do not match (%s); install the "
                                "nvidia-ml-py release for this driver" % one_line(exc, 300),
                                code="nvml-library-mismatch")

    def _mismatch_error(self):
        # type: () -> Any
        """pynvml's NVMLLibraryMismatchError (pynvml 11.5+), or a class nothing raises."""
        return getattr(self.nv, "NVMLLibraryMismatchError", _NeverRaised)

    def _read_gpu(self, index):
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
        mode = self._mig_mode(dev, notes, index)
        current, pending = (int(mode[0]), int(mode[1])) if mode is not None else (None, None)
        profiles = ()  # type: Tuple[LiveProfile, ...]
        gis = ()  # type: Tuple[LiveGi, ...]
        if current is not None:
            # A real H200 (driver 580) answers profile and placement queries with MIG mode off, so
            # `plan` can use the driver's own table before the first apply; a driver that says
            # NOT_SUPPORTED there leaves the profiles empty and the catalogue fills in.
            profiles = self._profiles(dev, notes, index if current == 1 else None)
        if current == 1:  # instances exist only while MIG mode is on
            gis = self._gpu_instances(dev, profiles, notes, index)
        processes, pids_unreadable, pids_missing = self._processes(dev, notes)
        minor = self._try(notes, "minor number", nv.nvmlDeviceGetMinorNumber, dev)
        pids = tuple(sorted(set(p.pid for p in processes)))
        mig_devices, mig_unreadable = self._mig_devices(dev) if current == 1 else ((), "")
        cis = sum(len(gi.cis) for gi in gis)
        if not mig_unreadable and len(mig_devices) < cis:
            # each compute instance is one MIG device: fewer is a partial walk (NOT_FOUND where one exists, a
            # count below the instances), and an allocated instance left out would look free
            mig_devices, mig_unreadable = (), "NVML listed %d MIG devices for its %d compute instances" % (
                len(mig_devices), cis)
        return LiveGpu(index, name, int(pci.pciDeviceId) if pci is not None else None, bus_id, uuid,
                       current, pending, profiles, gis, pids, tuple(notes), pids_unreadable, pids_missing,
                       processes, int(minor) if minor is not None else None, mig_devices, mig_unreadable)

    def _mig_mode(self, dev, notes, index):
        # type: (Any, List[str], int) -> Any
        """The MIG mode, None where the GPU has none (NOT_SUPPORTED: no MIG; a driver or pynvml without the
        call); any other NVML answer raises, naming the GPU: the GPU's instances cannot be told from none."""
        try:
            return self.nv.nvmlDeviceGetMigMode(dev)
        except self.nv.NVMLError as exc:
            if self._lost(exc):
                raise  # read_gpu names the GPU lost
            if not self._is(exc, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND"):
                raise NvmlReadError("GPU %d: NVML answered %s for its MIG mode, which says neither MIG on nor off "
                                    "(a GPU without MIG answers NOT_SUPPORTED): what it holds is unknown"
                                    % (index, self.error_text(exc)), code="nvml-error")
            notes.append("MIG mode: %s" % self.error_text(exc))
        except (AttributeError, TypeError) as exc:
            notes.append("MIG mode: unavailable in this pynvml (%s)" % exc.__class__.__name__)
        return None

    def _mig_devices(self, dev):
        # type: (Any) -> Tuple[Tuple[LiveMigDevice, ...], str]
        """The GPU's MIG devices with their UUIDs, walked as NVIDIA's device plugin walks them (go-nvlib
        ``VisitMigDevices``: every index below nvmlDeviceGetMaxMigDeviceCount, NOT_FOUND skipped), or
        ((), why) when any of it cannot be read: a partial list would make an allocated instance look free."""
        nv = self.nv
        found = []  # type: List[LiveMigDevice]
        try:
            count = int(nv.nvmlDeviceGetMaxMigDeviceCount(dev))
            for j in range(min(count, 64)):
                try:
                    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(dev, j)
                except nv.NVMLError as exc:
                    if self._is(exc, "NVML_ERROR_NOT_FOUND"):
                        continue
                    raise
                uuid = nv.nvmlDeviceGetUUID(mig)
                found.append(LiveMigDevice(j, int(nv.nvmlDeviceGetGpuInstanceId(mig)),
                                           int(nv.nvmlDeviceGetComputeInstanceId(mig)),
                                           uuid.decode() if isinstance(uuid, bytes) else str(uuid)))
        except nv.NVMLError as exc:
            if self._lost(exc):
                raise
            return (), "MIG devices: %s" % self.error_text(exc)
        except (AttributeError, TypeError) as exc:
            return (), "MIG devices: unavailable in this pynvml (%s)" % exc.__class__.__name__
        return tuple(found), ""

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
        pynvml has no such argument and calls the v1 entry point; older drivers lack the ``V`` one. The
        ``V`` call answers INVALID_ARGUMENT for a struct version it does not know (nvml.h: "If ... info->version
        are invalid"), which is also how the end of the profiles is told: so on INVALID_ARGUMENT the v1
        call decides; if it answers, v1 is used from then on.
        """
        nv = self.nv
        if not self._v1_only:
            try:
                return call(*(args + (2,)))
            except nv.NVMLError as exc:
                if not self._is(exc, "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
                                "NVML_ERROR_INVALID_ARGUMENT"):
                    raise
                if self._is(exc, "NVML_ERROR_INVALID_ARGUMENT"):
                    try:
                        info = call(*(args + (1,)))  # INVALID_ARGUMENT again: really past the last index
                    except nv.NVMLError as exc1:
                        if self._is(exc1, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                            raise exc  # no v1 to ask: the V call's answer stands
                        raise
                    self._v1_only = True
                    return info
            except TypeError:  # pynvml before the version argument
                return call(*args)
        try:
            return call(*(args + (1,)))
        except TypeError:
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

    def _profiles(self, dev, notes, mig_on_index=None):
        # type: (Any, List[str], Optional[int]) -> Tuple[LiveProfile, ...]
        """Every GPU instance profile the driver offers. ``mig_on_index``: the GPU's index when MIG mode
        is on; then a profile that cannot be read is an error (its instances would go unseen)."""
        nv = self.nv
        found = []  # type: List[LiveProfile]
        refused = ""  # NVML's last NOT_SUPPORTED answer
        known = max(GI_PROFILE_COUNT, int(getattr(nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)))
        for nvml_index in range(MAX_PROFILE_INDEX):
            try:
                info, name = self._profile_info(dev, nvml_index)
            except nv.NVMLError as exc:
                if self._is(exc, "NVML_ERROR_INVALID_ARGUMENT"):
                    if nvml_index < known:
                        continue  # a gap this driver does not know (R580: 17); later ones may answer
                    break  # past the header's count: nvml.h's end of the profiles
                if self._is(exc, "NVML_ERROR_NOT_SUPPORTED"):
                    refused = self.error_text(exc)
                    continue  # this GPU lacks the profile (or, on older drivers, MIG mode is off)
                if self._lost(exc):
                    raise
                what = "GPU instance profile index %d: %s" % (nvml_index, self.error_text(exc))
                if mig_on_index is not None:
                    raise NvmlReadError("GPU %d: %s while MIG mode is on, so its instances of that profile "
                                        "cannot be seen" % (mig_on_index, what))
                notes.append(what)
                continue
            except AttributeError:
                if mig_on_index is not None:
                    raise NvmlReadError("GPU %d: this pynvml has no nvmlDeviceGetGpuInstanceProfileInfo, so "
                                        "its GPU instances cannot be seen; install nvidia-ml-py 11.450 or newer"
                                        % mig_on_index, code="pynvml-too-old")
                notes.append("profile info: unavailable in this pynvml")
                break
            placements = self._try(notes, "placements of profile %d" % info.id, self._placements, dev, info.id) or ()
            found.append(LiveProfile(nvml_index, int(info.id), name, int(info.sliceCount),
                                     int(info.instanceCount), int(info.memorySizeMB), placements))
        if mig_on_index is not None and not found and refused:
            # A GPU with MIG on offers at least one profile: none at all hides every instance it holds
            raise NvmlReadError("GPU %d: nvmlDeviceGetGpuInstanceProfileInfo answered %s for every GPU instance "
                                "profile while MIG mode is on, so its GPU instances cannot be seen"
                                % (mig_on_index, refused))
        return tuple(found)

    def gi_handles(self, dev, profile_id):
        # type: (Any, int) -> List[Any]
        return self._listed(self.nv.c_nvmlGpuInstance_t, self.nv.nvmlDeviceGetGpuInstances, dev, profile_id)

    def _must(self, index, what, call, *args):
        # type: (int, str, Callable[..., Any], Any) -> Any
        """A read that must succeed while MIG mode is on: else NvmlReadError naming GPU, call and answer."""
        try:
            return call(*args)
        except self.nv.NVMLError as exc:
            if self._lost(exc):
                raise
            raise NvmlReadError("GPU %d: %s failed while MIG mode is on: %s" % (index, what, self.error_text(exc)))
        except AttributeError as exc:
            raise NvmlReadError("GPU %d: %s is not in this pynvml (%s); install a newer nvidia-ml-py"
                                % (index, what, exc), code="pynvml-too-old")

    def _gpu_instances(self, dev, profiles, notes, index):
        # type: (Any, Tuple[LiveProfile, ...], List[str], int) -> Tuple[LiveGi, ...]
        nv = self.nv
        ids = sorted(set(p.id for p in profiles))
        gis = []  # type: List[LiveGi]
        for profile_id in ids:
            handles = self._must(index, "listing GPU instances of profile %d" % profile_id, self.gi_handles, dev,
                                 profile_id)
            offered = None  # type: Optional[List[Any]]  # the same for every instance of one profile
            for handle in handles or []:
                info = self._must(index, "GPU instance info", nv.nvmlGpuInstanceGetInfo, handle)
                if offered is None:
                    offered = self.ci_profiles(handle, index)
                cis = self._compute_instances(handle, notes, index, offered)
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

    def ci_profiles(self, gi_handle, index=None):
        # type: (Any, Optional[int]) -> List[Any]
        """The compute instance profiles a GPU instance offers, every index to the count, then until
        INVALID_ARGUMENT (nvml.h).
        ``index``: the GPU's, to name in the error when a profile answers anything but NOT_SUPPORTED."""
        nv = self.nv
        found = []
        refused = ""  # NVML's last NOT_SUPPORTED answer
        known = max(CI_PROFILE_COUNT, int(getattr(nv, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 0)))
        for ci_index in range(MAX_PROFILE_INDEX):
            try:
                found.append(self.ci_profile(gi_handle, ci_index))
            except nv.NVMLError as exc:
                if self._is(exc, "NVML_ERROR_INVALID_ARGUMENT"):
                    if ci_index < known:
                        continue  # unknown to this driver (an R580 and index 8): keep scanning to the count
                    break
                if self._is(exc, "NVML_ERROR_NOT_SUPPORTED"):
                    refused = self.error_text(exc)
                    continue  # this GPU instance does not offer that CI profile
                if self._lost(exc):
                    raise
                raise NvmlReadError("GPU %s: compute instance profile index %d: %s while MIG mode is on, so "
                                    "compute instances of that profile cannot be seen"
                                    % ("?" if index is None else index, ci_index, self.error_text(exc)))
            except AttributeError:
                raise NvmlReadError("this pynvml has no nvmlGpuInstanceGetComputeInstanceProfileInfo, so compute "
                                    "instances cannot be seen; install nvidia-ml-py 11.450 or newer",
                                    code="pynvml-too-old")
        if not found and refused:
            # Every GPU instance offers at least its full compute instance: none readable hides the ones it
            # holds (a destroy of the GPU instance would then answer IN_USE, read as a busy GPU)
            raise NvmlReadError("GPU %s: nvmlGpuInstanceGetComputeInstanceProfileInfo answered %s for every compute "
                                "instance profile while MIG mode is on, so its compute instances cannot be seen"
                                % ("?" if index is None else index, refused))
        return found

    def _compute_instances(self, gi_handle, notes, index, offered=None):
        # type: (Any, List[str], int, Optional[List[Any]]) -> Tuple[LiveCi, ...]
        cis = []  # type: List[LiveCi]
        for profile in offered if offered is not None else self.ci_profiles(gi_handle, index):
            handles = self._must(index, "listing compute instances of profile %d" % profile.id, self.ci_handles,
                                 gi_handle, profile.id)
            for handle in handles or []:
                info = self._must(index, "compute instance info", self._ci_info, handle)
                cis.append(LiveCi(int(info.id), int(info.profileId), int(profile.sliceCount)))
        return tuple(sorted(cis))

    def _processes(self, dev, notes):
        # type: (Any, List[str]) -> Tuple[Tuple[LiveProcess, ...], str, str]
        """(compute processes, "", "") or ((), why the list could not be read, "pynvml"/"driver"/"").

        On a MIG-enabled GPU the device handle gives the processes of every instance, each with its GPU
        and compute instance ids (nvml.h, nvmlDeviceGetComputeRunningProcesses: "In MIG mode, if device
        handle is provided, the API returns aggregate information, only if the caller has appropriate
        privileges"; a non-root caller gets NO_PERMISSION, an unreadable list)."""
        nv = self.nv
        gaps = []  # type: List[str]
        in_pynvml = False
        for name in PROCESS_CALLS:
            fn = getattr(nv, name, None)
            if fn is None:
                gaps.append("%s is not in this pynvml" % name)
                continue
            in_pynvml = True
            try:
                listed = fn(dev)
            except nv.NVMLError as exc:
                if self._is(exc, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                    gaps.append("%s is not in the driver" % name)
                    continue
                if self._lost(exc):
                    raise  # not a list that may hide a process: the GPU is gone
                notes.append("compute processes: %s" % self.error_text(exc))
                return (), notes[-1], ""
            except self._mismatch_error():
                gaps.append("%s raised NVMLLibraryMismatchError (the driver lacks the version pynvml calls)" % name)
                continue
            return tuple(self._process(p) for p in listed), "", ""
        notes.append("compute processes: no process-list call works: %s" % "; ".join(gaps))
        return (), notes[-1], "driver" if in_pynvml else "pynvml"

    def _process(self, info):
        # type: (Any) -> LiveProcess
        pid = int(info.pid)
        gi, ci = getattr(info, "gpuInstanceId", None), getattr(info, "computeInstanceId", None)
        gi = None if gi is None or int(gi) == NO_INSTANCE else int(gi)
        ci = None if ci is None or int(ci) == NO_INSTANCE or gi is None else int(ci)
        started = self.stamp(pid) if self.stamp is not None else None
        return LiveProcess(pid, gi, ci, started)

    def processes(self, index):
        # type: (int) -> Optional[Tuple[LiveProcess, ...]]
        """The GPU's compute processes listed again (before each signal of --force); None if unreadable."""
        listed, unreadable, _ = self._processes(self.handle(index), [])
        return None if unreadable else listed

    def passthrough(self, index):
        # type: (int) -> bool
        """True when the GPU is passed through to a VM: no reset, a pending mode needs a reboot. nvml.h: the call
        answers SUCCESS on every GPU since Kepler, else GPU_IS_LOST or UNKNOWN; any such answer (TIMEOUT too)
        raises, for the caller to decide: read as "not passed through" it sent a passthrough GPU a reset. Only a
        pynvml or driver without the call (no virtualization to speak of) reads as False."""
        nv = self.nv
        try:
            mode = nv.nvmlDeviceGetVirtualizationMode(self.handle(index))
        except nv.NVMLError as exc:
            if self._is(exc, "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NOT_SUPPORTED"):
                return False
            raise
        except AttributeError:
            return False
        return mode == getattr(nv, "NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH", 1)


class NvmlWriter(NvmlReader):
    """Read access plus the mutating calls, counted in ``changes``."""

    def __init__(self, pynvml_module, stamp=None):
        # type: (Any, Optional[Callable[[int], Optional[int]]]) -> None
        super(NvmlWriter, self).__init__(pynvml_module, stamp)
        self.changes = 0

    def _gi_handle(self, index, gi_id):
        # type: (int, int) -> Any
        return self.nv.nvmlDeviceGetGpuInstanceById(self.handle(index), gi_id)

    def _in_driver(self, name):
        # type: (str) -> Optional[bool]
        """Whether the loaded NVML library exports ``name`` (a symbol lookup, no call); None when this
        pynvml has no way to ask."""
        lookup = getattr(self.nv, "_nvmlGetFunctionPointer", None)
        if lookup is None:
            return None
        try:
            lookup(name)
        except self.nv.NVMLError as exc:
            if self._is(exc, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                return False
            raise
        return True

    def missing_entry_points(self, plans, gpus):
        # type: (Sequence[Any], Sequence[LiveGpu]) -> Optional[NodeFailure]
        """Why these plans cannot be carried out with this pynvml and driver, before anything changes:
        a pynvml function or driver entry point a planned change needs, or a process list no call can
        read (apply must know whether the GPU is in use). None when everything is there."""
        needed = {}  # type: Dict[str, str]
        by_index = dict((g.index, g) for g in gpus)
        for plan in plans:
            if plan.converged:
                continue
            gpu = by_index.get(plan.index)
            if gpu is not None and gpu.pids_missing == "pynvml":
                return NodeFailure("this pynvml has none of %s, which are needed to see whether GPU %d is in "
                                   "use; install nvidia-ml-py 11.450 or newer (nothing was changed)"
                                   % (", ".join(PROCESS_CALLS), plan.index), code="pynvml-too-old")
            if gpu is not None and gpu.pids_missing == "driver":
                return NodeFailure("GPU %d: %s; install the nvidia-ml-py release that matches the driver, or a "
                                   "newer driver (nothing was changed)" % (plan.index, gpu.pids_unreadable),
                                   code="driver-too-old")
            # disable's plans turn the mode off (disable_mig): the same mode entry point
            mode = plan.enable_mig or getattr(plan, "disable_mig", False)
            kinds = [("mode", mode), ("destroy_cis", plan.destroy_cis), ("destroy_gis", plan.destroy_gis),
                     ("create", plan.create), ("create_cis", plan.create_cis)]
            for kind, todo in kinds:
                if todo:
                    for name in ENTRY_POINTS[kind]:
                        needed.setdefault(name, _WHY[kind])
        names = sorted(needed)
        lacking = [n for n in names if not callable(getattr(self.nv, n, None))]
        if lacking:
            return NodeFailure("this pynvml lacks %s, needed for %s; install a newer nvidia-ml-py (nothing was "
                               "changed)" % (", ".join(lacking), "; ".join(sorted(set(needed[n] for n in lacking)))),
                               code="pynvml-too-old")
        absent = [n for n in names if self._in_driver(n) is False]
        if absent:
            return NodeFailure("the NVIDIA driver %s lacks %s, needed for %s; creating MIG instances at a "
                               "placement needs driver R460 or newer (nothing was changed)"
                               % (self.driver_version() or "(version unknown)", ", ".join(absent),
                                  "; ".join(sorted(set(needed[n] for n in absent)))),
                               code="driver-too-old")
        return self.profiles_too_new(plans)

    def profiles_too_new(self, plans):
        # type: (Sequence[Any]) -> Optional[NodeFailure]
        """Profiles the plans create that this driver does not offer yet (the catalogue's ``min_driver``,
        from the MIG user guide), or None. Only a plan made from the catalogue can name one: a profile the
        driver listed itself is one it offers. Where the driver answers profile queries NOT_SUPPORTED while
        MIG is off, this is the only check before MIG mode is set and the GPU possibly reset."""
        branch = driver_branch(self.driver_version())
        if branch is None:
            return None  # nothing to compare with; the driver's own answers decide later
        too_new = []  # type: List[str]
        for plan in plans:
            names = sorted(set("%s (R%d)" % (i.profile.name, i.profile.min_driver) for i in plan.create
                               if i.profile.min_driver > branch))
            if names:
                too_new.append("GPU %d (%s): %s" % (plan.index, plan.name, ", ".join(names)))
        if not too_new:
            return None
        return NodeFailure("the NVIDIA driver %s (R%d) does not offer %s; these profiles need the driver branch "
                           "named (MIG user guide); install a newer driver or choose other profiles (nothing was "
                           "changed)" % (self.driver_version(), branch, "; ".join(too_new)), code="driver-too-old")

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
        for profile in self.ci_profiles(gi, index):
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
