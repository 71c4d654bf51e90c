"""The catalogue of MIG-capable GPUs: pure data and lookups, no I/O.

It serves validation before any node is touched (the function side) and is the fallback on a node; on
a node the live NVML answer wins (``node_bootstrap`` compares the two and reports differences).

Sources: NVIDIA's MIG user guide (``nvidia-smi mig -lgip`` tables), NVML's header for the profile
indices, and ``facts.md`` in the shared reference. ``memory_mib`` is what NVML's
``nvmlGpuInstanceProfileInfo_t.memorySizeMB`` reports to the best of our knowledge (taken from the
guide's GiB column, x1024); the H200 values were read from a real H200 with NVML.
"""

import typing
from typing import Dict, Optional, Tuple

from .errors import UnknownGpuError

# NVML_GPU_INSTANCE_PROFILE_* indices: what nvmlDeviceGetGpuInstanceProfileInfo takes as its argument.
NVML_PROFILE_1_SLICE = 0
NVML_PROFILE_2_SLICE = 1
NVML_PROFILE_3_SLICE = 2
NVML_PROFILE_4_SLICE = 3
NVML_PROFILE_7_SLICE = 4
NVML_PROFILE_8_SLICE = 5
NVML_PROFILE_6_SLICE = 6
NVML_PROFILE_1_SLICE_REV1 = 7  # the "+me" 1-slice profile (one instance owns the media engines)
NVML_PROFILE_2_SLICE_REV1 = 8  # the "+me" 2-slice profile (A30)
NVML_PROFILE_1_SLICE_REV2 = 9  # the double-memory 1-slice profile (1g.10gb on A100 40GB)


class Placement(typing.NamedTuple):
    """Where a GPU instance may sit: first memory slot and number of slots."""

    start: int
    size: int


class Profile(typing.NamedTuple):
    """One GPU instance profile of one GPU model."""

    name: str  # "3g.20gb"; "+me" suffix for the media-extension variant
    id: int  # NVML profile id (nvidia-smi's ID column)
    nvml_index: int  # NVML_GPU_INSTANCE_PROFILE_* index
    compute_slices: int
    memory_slices: int
    memory_mib: int
    max_instances: int
    placements: Tuple[Placement, ...]

    def to_dict(self):
        # type: () -> dict
        return {
            "name": self.name,
            "id": self.id,
            "nvml_index": self.nvml_index,
            "compute_slices": self.compute_slices,
            "memory_slices": self.memory_slices,
            "memory_mib": self.memory_mib,
            "max_instances": self.max_instances,
            "placements": [[p.start, p.size] for p in self.placements],
        }


class GpuModel(typing.NamedTuple):
    """One MIG-capable GPU model (several product names / PCI ids can share one)."""

    key: str  # short stable name, e.g. "A100-SXM4-40GB"
    product_names: Tuple[str, ...]  # NVML nvmlDeviceGetName answers; the first is canonical
    pci_device_ids: Tuple[int, ...]  # 16-bit PCI device ids (upper half of NVML pciDeviceId)
    memory_mib: int
    memory_slots: int
    compute_slices: int
    profiles: Tuple[Profile, ...]
    # At most this many instances of "+me" (media extension) profiles together, 0: only each profile's own
    # limit. The A30 has one JPEG decoder and one OFA in all (its 4g.24gb row in the MIG user guide's
    # "Supported MIG Profiles" table), and each +me profile takes them: 1g.6gb+me and 2g.12gb+me exclude
    # each other although each alone allows one instance.
    media_instances: int = 0

    @property
    def name(self):
        # type: () -> str
        return self.product_names[0]

    def profile_by_name(self, name):
        # type: (str) -> Optional[Profile]
        for p in self.profiles:
            if p.name == name:
                return p
        return None

    def profile_by_id(self, profile_id):
        # type: (int) -> Optional[Profile]
        for p in self.profiles:
            if p.id == profile_id:
                return p
        return None


def _starts(starts, size):
    # type: (typing.Iterable[int], int) -> Tuple[Placement, ...]
    return tuple(Placement(s, size) for s in starts)


def _eight_slot_profiles(mem_gb, mib):
    # type: (Tuple[int, int, int, int, int, int], Tuple[int, int, int, int, int, int]) -> Tuple[Profile, ...]
    """Profiles of an 8-memory-slot, 7-compute-slice GPU (A100, H100, H200, B200 classes).

    ``mem_gb`` / ``mib`` give, in order, the 1g, 1g double-memory, 2g, 3g, 4g and 7g sizes: every such
    GPU shares ids, NVML indices and placements, only the memory differs.
    """
    g1, g1d, g2, g3, g4, g7 = mem_gb
    m1, m1d, m2, m3, m4, m7 = mib
    return (
        Profile("1g.%dgb" % g1, 19, NVML_PROFILE_1_SLICE, 1, 1, m1, 7, _starts(range(7), 1)),
        Profile("1g.%dgb+me" % g1, 20, NVML_PROFILE_1_SLICE_REV1, 1, 1, m1, 1, _starts(range(7), 1)),
        Profile("1g.%dgb" % g1d, 15, NVML_PROFILE_1_SLICE_REV2, 1, 2, m1d, 4, _starts((0, 2, 4, 6), 2)),
        Profile("2g.%dgb" % g2, 14, NVML_PROFILE_2_SLICE, 2, 2, m2, 3, _starts((0, 2, 4), 2)),
        Profile("3g.%dgb" % g3, 9, NVML_PROFILE_3_SLICE, 3, 4, m3, 2, _starts((0, 4), 4)),
        Profile("4g.%dgb" % g4, 5, NVML_PROFILE_4_SLICE, 4, 4, m4, 1, _starts((0,), 4)),
        Profile("7g.%dgb" % g7, 0, NVML_PROFILE_7_SLICE, 7, 8, m7, 1, _starts((0,), 8)),
    )


def _gpu(key, names, pci_ids, memory_mib, profiles, slots=8, compute=7, media=0):
    # type: (str, Tuple[str, ...], Tuple[int, ...], int, Tuple[Profile, ...], int, int, int) -> GpuModel
    return GpuModel(key, names, pci_ids, memory_mib, slots, compute, profiles, media)


_A100_40GB = _eight_slot_profiles((5, 10, 10, 20, 20, 40), (4864, 9856, 9856, 19968, 19968, 40192))
_80GB = _eight_slot_profiles((10, 20, 20, 40, 40, 80), (9984, 20096, 20096, 40448, 40448, 80896))
_94GB = _eight_slot_profiles((12, 24, 24, 47, 47, 94), (11264, 22784, 22784, 46080, 46080, 93184))
_96GB = _eight_slot_profiles((12, 24, 24, 48, 48, 96), (11520, 23296, 23296, 47104, 47104, 95232))
_H200 = _eight_slot_profiles((18, 35, 35, 71, 71, 141), (16384, 33280, 33280, 71424, 71424, 143360))
_B200 = _eight_slot_profiles((23, 45, 45, 90, 90, 180), (23040, 45056, 45056, 91136, 91136, 182528))

# A30: 4 memory slots and 4 compute slices; its own ids (nvidia-smi mig -lgip on an A30).
_A30 = (
    Profile("1g.6gb", 14, NVML_PROFILE_1_SLICE, 1, 1, 5836, 4, _starts(range(4), 1)),
    Profile("1g.6gb+me", 21, NVML_PROFILE_1_SLICE_REV1, 1, 1, 5836, 1, _starts(range(4), 1)),
    Profile("2g.12gb", 5, NVML_PROFILE_2_SLICE, 2, 2, 11672, 2, _starts((0, 2), 2)),
    Profile("2g.12gb+me", 6, NVML_PROFILE_2_SLICE_REV1, 2, 2, 11672, 1, _starts((0, 2), 2)),
    Profile("4g.24gb", 0, NVML_PROFILE_4_SLICE, 4, 4, 23456, 1, _starts((0,), 4)),
)

GPUS = (
    _gpu("A100-SXM4-40GB", ("NVIDIA A100-SXM4-40GB",), (0x20B0,), 40960, _A100_40GB),
    _gpu("A100-PCIE-40GB", ("NVIDIA A100-PCIE-40GB",), (0x20B1, 0x20F1, 0x20F6), 40960, _A100_40GB),
    _gpu(
        "A100-80GB",
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe"),
        (0x20B2, 0x20B5, 0x20F3, 0x20F5),
        81920,
        _80GB,
    ),
    _gpu("A30", ("NVIDIA A30",), (0x20B7,), 24576, _A30, slots=4, compute=4, media=1),
    _gpu(
        "H100-80GB",
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H800 PCIe"),
        (0x2330, 0x2331, 0x2322),
        81559,
        _80GB,
    ),
    _gpu("H100-NVL", ("NVIDIA H100 NVL",), (0x2321,), 95830, _94GB),
    _gpu("H100-96GB", ("NVIDIA GH200 480GB", "NVIDIA H20", "NVIDIA H100 96GB"), (0x2342, 0x2329), 97871, _96GB),
    _gpu("H200", ("NVIDIA H200", "NVIDIA H200 NVL"), (0x2335, 0x233B), 143771, _H200),
    _gpu("B200", ("NVIDIA B200",), (0x2901,), 183359, _B200),
)


def _norm_name(text):
    # type: (str) -> str
    """ACK's aliyun.accelerator/nvidia_name label writes NVML names with hyphens for spaces."""
    norm = "-".join(text.strip().lower().replace("_", " ").split()).replace(" ", "-")
    if norm.startswith("nvidia-"):
        norm = norm[len("nvidia-"):]
    return norm


def _build_index():
    # type: () -> Dict[str, GpuModel]
    index = {}  # type: Dict[str, GpuModel]
    for gpu in GPUS:
        index[_norm_name(gpu.key)] = gpu
        for name in gpu.product_names:
            index[_norm_name(name)] = gpu
    return index


_BY_NAME = _build_index()
_BY_PCI = {pci: gpu for gpu in GPUS for pci in gpu.pci_device_ids}


def _parse_pci(text):
    # type: (str) -> Optional[int]
    """``0x20b010de`` (NVML's pciDeviceId, vendor in the low half) or ``0x20B0`` -> 0x20B0."""
    t = text.strip().lower()
    if not t.startswith("0x"):
        return None
    try:
        value = int(t, 16)
    except ValueError:
        return None
    if len(t) > 6:  # a full 32-bit NVML id: device in the high half, NVIDIA's vendor id 0x10de low
        if value & 0xFFFF != 0x10DE:
            return None
        return value >> 16
    return value


def known_gpus():
    # type: () -> str
    return ", ".join("%s (%s)" % (g.key, g.name) for g in GPUS)


def find_gpu(text):
    # type: (str) -> GpuModel
    """Look a GPU up by NVML product name, ACK's hyphenated label form, catalogue key or PCI id."""
    if not isinstance(text, str) or not text.strip():
        raise UnknownGpuError("no GPU given; known GPUs: %s" % known_gpus())
    pci = _parse_pci(text)
    gpu = _BY_PCI.get(pci) if pci is not None else _BY_NAME.get(_norm_name(text))
    if gpu is None:
        shown = text.strip()[:80]
        raise UnknownGpuError("unknown GPU %r; known GPUs: %s" % (shown, known_gpus()))
    return gpu


def find_gpu_or_none(name=None, pci_device_id=None):
    # type: (Optional[str], Optional[int]) -> Optional[GpuModel]
    """Lookup for live NVML answers: PCI id first (stable across driver naming), then the name."""
    if pci_device_id is not None:
        gpu = _BY_PCI.get(pci_device_id >> 16 if pci_device_id > 0xFFFF else pci_device_id)
        if gpu is not None:
            return gpu
    if name:
        return _BY_NAME.get(_norm_name(name))
    return None
