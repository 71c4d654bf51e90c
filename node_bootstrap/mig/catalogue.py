"""The catalogue of MIG-capable GPUs: pure data and lookups, no I/O.

It serves validation before any node is touched (the function side) and is the fallback on a node; on
a node the live NVML answer wins (``node_bootstrap`` compares the two and reports differences).

Sources, per fact:

* Which GPUs, by PCI device id, and which profile names and counts each one takes: NVIDIA's own default
  mig-parted configuration (``deployments/systemd/config-default.yaml`` in github.com/NVIDIA/mig-parted,
  the same data as the GPU Operator's ``default-mig-parted-config``; a copy is test data in
  ``tests/core/data/``, and every one of its configurations must plan here).
* Slices, instance counts, media engines: NVIDIA's MIG user guide, "Supported MIG Profiles" tables.
* Profile ids (the ``ID`` column of ``nvidia-smi mig -lgip``) and placements (``-lgipp``): the guide's
  examples and real captures (an A30 on driver 535.183.01; an RTX PRO 6000 Blackwell Server Edition; a
  real H200 read with ``scripts/nvml_readonly_probe.py``, in ``tests/core/data/``).
* Profile indices (what ``nvmlDeviceGetGpuInstanceProfileInfo`` takes): ``nvml.h``; the name suffix of
  each index (``+me``, ``+me.all``, ``-me``, ``+gfx``) as go-nvlib derives it.

``memory_mib`` is NVML's ``memorySizeMB``. Where no real capture gave it, it is the guide's GB figure
times 1024, and :data:`MEMORY_CONFIRMED` says so: the live NVML answer replaces it on a node anyway.
"""

import re
import typing
from typing import Dict, Iterable, Optional, Tuple

from .errors import GpuWithoutMigError, UnknownGpuError

# NVML_GPU_INSTANCE_PROFILE_* indices (nvml.h): what nvmlDeviceGetGpuInstanceProfileInfo takes.
NVML_PROFILE_1_SLICE = 0
NVML_PROFILE_2_SLICE = 1
NVML_PROFILE_3_SLICE = 2
NVML_PROFILE_4_SLICE = 3
NVML_PROFILE_7_SLICE = 4
NVML_PROFILE_8_SLICE = 5
NVML_PROFILE_6_SLICE = 6
NVML_PROFILE_1_SLICE_REV1 = 7  # "+me": at least one media engine (one such instance per GPU)
NVML_PROFILE_2_SLICE_REV1 = 8  # "+me" 2-slice (A30)
NVML_PROFILE_1_SLICE_REV2 = 9  # the double-memory 1-slice profile (1g.10gb on A100 40GB)
NVML_PROFILE_1_SLICE_GFX = 10  # "+gfx": graphics capable (RTX PRO Blackwell)
NVML_PROFILE_2_SLICE_GFX = 11
NVML_PROFILE_4_SLICE_GFX = 12
NVML_PROFILE_1_SLICE_NO_ME = 13  # "-me": none of the decoder, encoder, JPEG, OFA engines
NVML_PROFILE_2_SLICE_NO_ME = 14
NVML_PROFILE_1_SLICE_ALL_ME = 15  # "+me.all": all media engines; nvml.h: "prevents allocation of all
NVML_PROFILE_2_SLICE_ALL_ME = 16  # but _NO_ME profiles" on the same GPU
NVML_PROFILE_3_SLICE_GFX = 17
NVML_PROFILE_COUNT = 18  # nvml.h's NVML_GPU_INSTANCE_PROFILE_COUNT at the time of writing

# The name suffix each index carries (go-nvlib's MigProfileInfo.String derives names the same way).
SUFFIX_BY_INDEX = {
    NVML_PROFILE_1_SLICE_REV1: "+me", NVML_PROFILE_2_SLICE_REV1: "+me",
    NVML_PROFILE_1_SLICE_GFX: "+gfx", NVML_PROFILE_2_SLICE_GFX: "+gfx", NVML_PROFILE_4_SLICE_GFX: "+gfx",
    NVML_PROFILE_3_SLICE_GFX: "+gfx",
    NVML_PROFILE_1_SLICE_NO_ME: "-me", NVML_PROFILE_2_SLICE_NO_ME: "-me",
    NVML_PROFILE_1_SLICE_ALL_ME: "+me.all", NVML_PROFILE_2_SLICE_ALL_ME: "+me.all",
}


class Placement(typing.NamedTuple):
    """Where a GPU instance may sit: first memory slot and number of slots."""

    start: int
    size: int


class Profile(typing.NamedTuple):
    """One GPU instance profile of one GPU model."""

    name: str  # "3g.20gb"; "+me", "+me.all", "-me" or "+gfx" suffix for the variants
    id: int  # NVML profile id (nvidia-smi's ID column)
    nvml_index: int  # NVML_GPU_INSTANCE_PROFILE_* index
    compute_slices: int
    memory_slices: int  # memory slots one instance takes (the placement size)
    memory_mib: int
    max_instances: int
    placements: Tuple[Placement, ...]
    # The NVIDIA driver branch that first offers this profile (MIG user guide, "Supported MIG Profiles"
    # notes); 0: every driver that supports the GPU at all. Only the catalogue knows it: a profile the
    # driver lists itself is one it offers.
    min_driver: int = 0

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
    """One MIG-capable GPU model (several product names / PCI ids can share one).

    ``product_names[0]`` is the name this lookup answered for: :func:`find_gpu` returns the model with
    the product the caller named (or whose PCI id was given) first, so output shows that name.
    """

    key: str  # short stable name, e.g. "A100-SXM4-40GB"
    product_names: Tuple[str, ...]  # NVML nvmlDeviceGetName answers
    pci_device_ids: Tuple[int, ...]  # 16-bit PCI device ids (upper half of NVML pciDeviceId)
    memory_mib: int
    memory_slots: int
    compute_slices: int
    profiles: Tuple[Profile, ...]
    # At most this many instances of "+me" (media extension) profiles together, 0: only each profile's own
    # limit. The A30 has one JPEG decoder and one OFA in all (its 4g.24gb row in the MIG user guide's
    # "Supported MIG Profiles" table), and each +me profile takes them: 1g.6gb+me and 2g.12gb+me exclude
    # each other although each alone allows one instance. The RTX PRO 6000 Blackwell likewise has one OFA,
    # which its +me and +me.all profiles each take (the guide's table: OFA 1 on those rows and on 4g.96gb).
    media_instances: int = 0

    @property
    def name(self):
        # type: () -> str
        return self.product_names[0]

    @property
    def shown(self):
        # type: () -> str
        """The model as a message names it: its key, or the product asked for where that is another GPU
        sharing the key's layout (``NVIDIA H20`` looks up H100-96GB's entry: a message about an H20 must not
        name an H100)."""
        def bare(text):
            # type: (str) -> str
            return re.sub(r"[^a-z0-9]", "", text.lower())
        ours = any(g.key == self.key for g in GPUS)  # a model made elsewhere (a test's) has only its key
        return self.name if ours and bare(self.key) not in bare(self.name) else self.key

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
    # type: (Iterable[int], int) -> Tuple[Placement, ...]
    return tuple(Placement(s, size) for s in starts)


def _gib(*sizes):
    # type: (*int) -> Tuple[int, ...]
    """MiB for GB figures taken from profile names: the estimate used where no capture gave NVML's."""
    return tuple(gb * 1024 for gb in sizes)


# Driver branches (MIG user guide, "Supported MIG Profiles" notes: "The 1g.6gb+me profile is only
# available starting with R470 drivers", "The 2g.12gb+me profile is only available starting with R525
# drivers", and for the A100 1g.5gb+me R470 and 1g.10gb R525). They match nvml.h's history (NVIDIA
# go-nvml): NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 (index 7) first appears in CUDA 11.4's header (R470),
# 2_SLICE_REV1 and 1_SLICE_REV2 (indices 8, 9) in CUDA 12.0's (R525). Hopper and later GPUs need newer
# drivers than these to run at all, so their profiles carry none.
R470, R525 = 470, 525


def _eight_slot_profiles(mem_gb, mib, ampere=False):
    # type: (Tuple[int, int, int, int, int, int], Tuple[int, ...], bool) -> Tuple[Profile, ...]
    """Profiles of an 8-memory-slot, 7-compute-slice GPU (A100, H100, H200, B200 classes).

    ``mem_gb`` / ``mib`` give, in order, the 1g, 1g double-memory, 2g, 3g, 4g and 7g sizes: every such
    GPU shares ids, NVML indices and placements (MIG user guide tables; ``nvidia-smi mig -lgipp`` in the
    guide's "Getting Started"), only the memory differs. ``ampere``: the A100, whose ``+me`` and
    double-memory 1g profiles came with later drivers than the GPU itself.
    """
    g1, g1d, g2, g3, g4, g7 = mem_gb
    m1, m1d, m2, m3, m4, m7 = mib
    me, double = (R470, R525) if ampere else (0, 0)
    return (
        Profile("1g.%dgb" % g1, 19, NVML_PROFILE_1_SLICE, 1, 1, m1, 7, _starts(range(7), 1)),
        Profile("1g.%dgb+me" % g1, 20, NVML_PROFILE_1_SLICE_REV1, 1, 1, m1, 1, _starts(range(7), 1), me),
        Profile("1g.%dgb" % g1d, 15, NVML_PROFILE_1_SLICE_REV2, 1, 2, m1d, 4, _starts((0, 2, 4, 6), 2), double),
        Profile("2g.%dgb" % g2, 14, NVML_PROFILE_2_SLICE, 2, 2, m2, 3, _starts((0, 2, 4), 2)),
        Profile("3g.%dgb" % g3, 9, NVML_PROFILE_3_SLICE, 3, 4, m3, 2, _starts((0, 4), 4)),
        Profile("4g.%dgb" % g4, 5, NVML_PROFILE_4_SLICE, 4, 4, m4, 1, _starts((0,), 4)),
        Profile("7g.%dgb" % g7, 0, NVML_PROFILE_7_SLICE, 7, 8, m7, 1, _starts((0,), 8)),
    )


def _named(gb):
    # type: (Tuple[int, int, int, int, int, int]) -> Tuple[Profile, ...]
    """An 8-slot GPU known only by its profile names: memory estimated from them."""
    return _eight_slot_profiles(gb, _gib(*gb))


_A100_40GB = _eight_slot_profiles((5, 10, 10, 20, 20, 40), (4864, 9856, 9856, 19968, 19968, 40192), ampere=True)
_A100_80GB = _eight_slot_profiles((10, 20, 20, 40, 40, 80), (9984, 20096, 20096, 40448, 40448, 80896), ampere=True)
_80GB = _eight_slot_profiles((10, 20, 20, 40, 40, 80), (9984, 20096, 20096, 40448, 40448, 80896))
_94GB = _eight_slot_profiles((12, 24, 24, 47, 47, 94), (11264, 22784, 22784, 46080, 46080, 93184))
_96GB = _eight_slot_profiles((12, 24, 24, 48, 48, 96), (11520, 23296, 23296, 47104, 47104, 95232))
_H200 = _eight_slot_profiles((18, 35, 35, 71, 71, 141), (16384, 33280, 33280, 71424, 71424, 143360))
_B200 = _eight_slot_profiles((23, 45, 45, 90, 90, 180), (23040, 45056, 45056, 91136, 91136, 182528))
# Names from mig-parted's default config (its "GH200 144G HBM3e", "GB200 HGX", "B300", "GB300" blocks).
_GH200_144GB = _named((18, 36, 36, 72, 72, 144))
_GB200 = _named((23, 47, 47, 93, 93, 186))
_B300 = _named((34, 67, 67, 135, 135, 269))
_GB300 = _named((35, 70, 70, 139, 139, 278))

# A30: 4 memory slots and 4 compute slices; its own ids. Ids, counts, placements and memory from a real
# A30 (driver 535.183.01): -lgip 5.81 / 11.69 / 23.44 GiB, -lgipp {0,1,2,3}:1, {0,2}:2, {0}:4, and the
# MIG devices table's exact 5952 MiB and 11968 MiB.
_A30 = (
    Profile("1g.6gb", 14, NVML_PROFILE_1_SLICE, 1, 1, 5952, 4, _starts(range(4), 1)),
    Profile("1g.6gb+me", 21, NVML_PROFILE_1_SLICE_REV1, 1, 1, 5952, 1, _starts(range(4), 1), R470),
    Profile("2g.12gb", 5, NVML_PROFILE_2_SLICE, 2, 2, 11968, 2, _starts((0, 2), 2)),
    Profile("2g.12gb+me", 6, NVML_PROFILE_2_SLICE_REV1, 2, 2, 11968, 1, _starts((0, 2), 2), R525),
    Profile("4g.24gb", 0, NVML_PROFILE_4_SLICE, 4, 4, 24000, 1, _starts((0,), 4)),
)

# RTX PRO 6000 Blackwell: 4 compute slices over a 12-unit placement grid. Ids, counts and placements
# from a real Server Edition's nvidia-smi mig -lgip / -lgipp ({0,3,6,9}:3, {0,6}:6, {0}:12); the names
# and counts also match the MIG user guide's RTX PRO 6000 table. Memory: 1g 24192 MiB as CUDA reported it
# inside a 1g.24gb device; 2g and 4g from -lgip's 47.38 / 95.12 GiB.
_RTX_1G = _starts((0, 3, 6, 9), 3)
_RTX_2G = _starts((0, 6), 6)
_RTX_4G = _starts((0,), 12)
_RTX_PRO_6000 = (
    Profile("1g.24gb", 14, NVML_PROFILE_1_SLICE, 1, 3, 24192, 4, _RTX_1G),
    Profile("1g.24gb+me", 21, NVML_PROFILE_1_SLICE_REV1, 1, 3, 24192, 1, _RTX_1G),
    Profile("1g.24gb+gfx", 47, NVML_PROFILE_1_SLICE_GFX, 1, 3, 24192, 4, _RTX_1G),
    Profile("1g.24gb+me.all", 65, NVML_PROFILE_1_SLICE_ALL_ME, 1, 3, 24192, 1, _RTX_1G),
    Profile("1g.24gb-me", 67, NVML_PROFILE_1_SLICE_NO_ME, 1, 3, 24192, 4, _RTX_1G),
    Profile("2g.48gb", 5, NVML_PROFILE_2_SLICE, 2, 6, 48512, 2, _RTX_2G),
    Profile("2g.48gb+gfx", 35, NVML_PROFILE_2_SLICE_GFX, 2, 6, 48512, 2, _RTX_2G),
    Profile("2g.48gb+me.all", 64, NVML_PROFILE_2_SLICE_ALL_ME, 2, 6, 48512, 1, _RTX_2G),
    Profile("2g.48gb-me", 66, NVML_PROFILE_2_SLICE_NO_ME, 2, 6, 48512, 2, _RTX_2G),
    Profile("4g.96gb", 0, NVML_PROFILE_4_SLICE, 4, 12, 97408, 1, _RTX_4G),
    Profile("4g.96gb+gfx", 32, NVML_PROFILE_4_SLICE_GFX, 4, 12, 97408, 1, _RTX_4G),
)

Product = Tuple[str, Tuple[int, ...]]  # an NVML product name and the PCI device ids that answer it


class _Entry(typing.NamedTuple):
    key: str
    products: Tuple[Product, ...]  # the first is the model's canonical product
    memory_mib: int
    profiles: Tuple[Profile, ...]
    memory_slots: int
    compute_slices: int
    media_instances: int


def _entry(key, products, memory_mib, profiles, slots=8, compute=7, media=0):
    # type: (str, Tuple[Product, ...], int, Tuple[Profile, ...], int, int, int) -> _Entry
    return _Entry(key, products, memory_mib, profiles, slots, compute, media)


# PCI ids: those in mig-parted's device filters, with the product its comments name; the two RTX PRO 6000
# Workstation editions from the PCI ID registry (go-nvlib's pci.ids: 2bb1, 2bb4). Product names are
# NVML's nvmlDeviceGetName answers where seen; docs/gpus.md marks the ones that are believed.
_ENTRIES = (
    _entry("A100-SXM4-40GB", (("NVIDIA A100-SXM4-40GB", (0x20B0,)),), 40960, _A100_40GB),
    _entry("A100-PCIE-40GB", (("NVIDIA A100-PCIE-40GB", (0x20B1, 0x20F1)), ("NVIDIA A800 40GB PCIe", (0x20F6,))),
           40960, _A100_40GB),
    _entry("A100-80GB", (("NVIDIA A100-SXM4-80GB", (0x20B2,)), ("NVIDIA A100 80GB PCIe", (0x20B5,)),
                         ("NVIDIA A800-SXM4-80GB", (0x20F3,)), ("NVIDIA A800 80GB PCIe", (0x20F5,))),
           81920, _A100_80GB),
    _entry("A30", (("NVIDIA A30", (0x20B7,)),), 24576, _A30, slots=4, compute=4, media=1),
    _entry("H100-80GB", (("NVIDIA H100 80GB HBM3", (0x2330,)), ("NVIDIA H100 PCIe", (0x2331,)),
                         ("NVIDIA H800 PCIe", (0x2322,)), ("NVIDIA H800", (0x2324,))),
           81559, _80GB),
    _entry("H100-NVL", (("NVIDIA H100 NVL", (0x2321,)), ("NVIDIA H800 NVL", (0x233A,))), 95830, _94GB),
    # The key "H100-96GB" is also ACK's hyphenated form of "NVIDIA H100 96GB": that product comes first.
    _entry("H100-96GB", (("NVIDIA H100 96GB", (0x233D,)), ("NVIDIA GH200 480GB", (0x2342,)),
                         ("NVIDIA H20", (0x2329,)), ("NVIDIA PG506-96GB", (0x20B6,))),
           97871, _96GB),
    _entry("H200", (("NVIDIA H200", (0x2335,)), ("NVIDIA H200 NVL", (0x233B,))), 143771, _H200),
    _entry("GH200-144GB", (("NVIDIA GH200 144G HBM3e", (0x2348,)),), 144 * 1024, _GH200_144GB),
    _entry("B200", (("NVIDIA B200", (0x2901,)),), 183359, _B200),
    _entry("GB200", (("NVIDIA GB200", (0x2941,)),), 186 * 1024, _GB200),
    _entry("B300", (("NVIDIA B300 SXM6 AC", (0x3182,)),), 269 * 1024, _B300),
    _entry("GB300", (("NVIDIA GB300", (0x31C2,)),), 278 * 1024, _GB300),
    _entry("RTX-PRO-6000", (("NVIDIA RTX PRO 6000 Blackwell Server Edition", (0x2BB5,)),
                            ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (0x2BB1,)),
                            ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", (0x2BB4,))),
           97887, _RTX_PRO_6000, slots=12, compute=4, media=1),
)

# Models whose profile memory figures come from a real NVML or nvidia-smi answer; the others are GB
# figures times 1024 (the profile names', or the guide's for the older entries), to be read as estimates.
MEMORY_CONFIRMED = frozenset(["A30", "H200", "RTX-PRO-6000"])


def _model(entry, first):
    # type: (_Entry, int) -> GpuModel
    """The model with product ``first`` named first, its PCI ids first too: how a lookup keeps the product it
    was given (an NVIDIA H20 answers 0x2329, the H20's id in the PCI ID registry, not the H100 96GB's)."""
    names = [entry.products[first][0]] + [n for i, (n, _) in enumerate(entry.products) if i != first]
    order = [first] + [i for i in range(len(entry.products)) if i != first]
    pci = tuple(pid for i in order for pid in entry.products[i][1])
    return GpuModel(entry.key, tuple(names), pci, entry.memory_mib, entry.memory_slots, entry.compute_slices,
                    entry.profiles, entry.media_instances)


# One model per product; GPUS holds each model once, with its canonical product first.
_VARIANTS = {(e.key, i): _model(e, i) for e in _ENTRIES for i in range(len(e.products))}
GPUS = tuple(_VARIANTS[(e.key, 0)] for e in _ENTRIES)

# GPUs that have no MIG at all, so "A10" is refused as such rather than as an unknown name. The
# pattern is matched against the normalized name (vendor and "tesla" dropped, hyphens for spaces). The
# PCI ids are the products' entries in the public PCI ID registry, as remembered, not checked against a
# device here: believed. A wrong one could only call a GPU outside every MIG filter "without MIG".
_NO_MIG_NAMES = re.compile(
    r"^(?:a2|a10g?|a16|a40|l4|l20|l40s?|t4|p4|p40|p100|v100s?|k80|m60|rtx-?a[0-9]{4}|rtx-[0-9]{4}(?:-ada)?)"
    r"(?:-.*)?\Z")
_NO_MIG_PCI = {
    0x2236: "NVIDIA A10", 0x2237: "NVIDIA A10G", 0x2235: "NVIDIA A40", 0x26BA: "NVIDIA L20",
    0x26B5: "NVIDIA L40", 0x26B9: "NVIDIA L40S", 0x27B8: "NVIDIA L4", 0x1EB8: "Tesla T4",
    0x1DB1: "Tesla V100-SXM2-16GB", 0x1DB4: "Tesla V100-PCIE-16GB", 0x1DB5: "Tesla V100-SXM2-32GB",
    0x1DB6: "Tesla V100-PCIE-32GB", 0x1DF6: "Tesla V100S-PCIE-32GB", 0x15F8: "Tesla P100-PCIE-16GB",
    0x1BB3: "Tesla P4",
}


def _norm_name(text):
    # type: (str) -> str
    """ACK's aliyun.accelerator/nvidia_name label writes NVML names with hyphens for spaces."""
    norm = "-".join(text.strip().lower().replace("_", " ").split()).replace(" ", "-")
    for vendor in ("nvidia-", "tesla-"):
        if norm.startswith(vendor):
            norm = norm[len(vendor):]
    return norm


def _build_index():
    # type: () -> Dict[str, GpuModel]
    index = {}  # type: Dict[str, GpuModel]
    for entry in _ENTRIES:
        for i, (name, _) in enumerate(entry.products):
            index[_norm_name(name)] = _VARIANTS[(entry.key, i)]
    for entry in _ENTRIES:  # a key always gives the model's first product (a simulator stores the key)
        index[_norm_name(entry.key)] = _VARIANTS[(entry.key, 0)]
    return index


_BY_NAME = _build_index()
_BY_PCI = {pid: _VARIANTS[(e.key, i)] for e in _ENTRIES for i, (_, ids) in enumerate(e.products) for pid in ids}


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


def _without_mig(text, pci):
    # type: (str, Optional[int]) -> Optional[str]
    """The product name of a known GPU that has no MIG, or None."""
    if pci is not None:
        return _NO_MIG_PCI.get(pci)
    return text.strip()[:80] if _NO_MIG_NAMES.match(_norm_name(text)) else None


def find_gpu(text):
    # type: (str) -> GpuModel
    """Look a GPU up by NVML product name, ACK's hyphenated label form, catalogue key or PCI id.

    The model returned names the product that was asked for first (``NVIDIA H20`` stays ``NVIDIA H20``).
    """
    if not isinstance(text, str) or not text.strip():
        raise UnknownGpuError("no GPU given; known GPUs: %s" % known_gpus())
    pci = _parse_pci(text)
    gpu = _BY_PCI.get(pci) if pci is not None else _BY_NAME.get(_norm_name(text))
    if gpu is not None:
        return gpu
    plain = _without_mig(text, pci)
    if plain is not None:
        raise GpuWithoutMigError("%s has no MIG: MIG needs an NVIDIA A100, A30, H100, H20, H200, B200 or newer "
                                 "data-center GPU; GPUs with MIG: %s" % (plain, known_gpus()))
    raise UnknownGpuError("unknown GPU %r; known GPUs: %s" % (text.strip()[:80], known_gpus()))


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


def has_no_mig(text):
    # type: (str) -> bool
    """True for a GPU known to have no MIG at all (A10, L20, T4, V100...), by name or PCI id."""
    if not isinstance(text, str) or not text.strip():
        return False
    return _without_mig(text, _parse_pci(text)) is not None


def suffix_of(profile):
    # type: (Profile) -> str
    """The variant suffix of a profile ("+me", "+me.all", "-me", "+gfx"; "" for a plain one), by index."""
    return SUFFIX_BY_INDEX.get(profile.nvml_index, "")


def all_media_conflict(gpu, profiles):
    # type: (GpuModel, Iterable[Profile]) -> Optional[str]
    """Why a "+me.all" instance cannot share the GPU with these profiles, or None.

    nvml.h on NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME / 2_SLICE_ALL_ME: "Allocation of instance of this
    profile prevents allocation of all but _NO_ME profiles": beside it only "-me" instances fit.
    """
    chosen = list(profiles)
    owners = [p for p in chosen if suffix_of(p) == "+me.all"]
    if not owners:
        return None
    others = sorted({p.name for p in chosen if p is not owners[0] and suffix_of(p) != "-me"})
    if not others:
        return None
    return ("%s takes every media engine of %s, so only -me profiles can share the GPU with it, not %s"
            % (owners[0].name, gpu.key, ", ".join(others)))
