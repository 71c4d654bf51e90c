"""The catalogue: every GPU of facts.md, lookups by every accepted form, internal consistency."""

import pytest

from node_bootstrap.mig import (GPUS, GpuWithoutMigError, UnknownGpuError, find_gpu, find_gpu_or_none, has_no_mig,
                                suffix_of)
from node_bootstrap.mig.catalogue import NVML_PROFILE_COUNT

EXPECTED_KEYS = {"A100-SXM4-40GB", "A100-PCIE-40GB", "A100-80GB", "A30", "H100-80GB", "H100-NVL",
                 "H100-96GB", "H200", "B200", "GH200-144GB", "GB200", "B300", "GB300", "RTX-PRO-6000"}


def test_every_gpu_of_the_facts_is_there():
    assert {g.key for g in GPUS} == EXPECTED_KEYS


@pytest.mark.parametrize("text,key", [
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("NVIDIA-A100-SXM4-40GB", "A100-SXM4-40GB"),  # ACK's aliyun.accelerator/nvidia_name form
    ("A100-SXM4-40GB", "A100-SXM4-40GB"),  # older drivers' names lack the vendor
    ("0x20b010de", "A100-SXM4-40GB"),
    ("0x20B0", "A100-SXM4-40GB"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA-H200", "H200"),
    ("0x233510de", "H200"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("NVIDIA-A100-80GB-PCIe", "A100-80GB"),
    ("NVIDIA H100 80GB HBM3", "H100-80GB"),
    ("nvidia a30", "A30"),
])
def test_find_gpu_accepts_every_documented_form(text, key):
    assert find_gpu(text).key == key


@pytest.mark.parametrize("text", ["", "Banana GPU 9000", "A100", "0x20b01234", "0xzz", "0x1234"])
def test_unknown_gpu_lists_known_ones(text):
    with pytest.raises(UnknownGpuError) as err:
        find_gpu(text)
    assert not isinstance(err.value, GpuWithoutMigError)
    assert "known GPUs:" in str(err.value)
    assert "H200" in str(err.value)


@pytest.mark.parametrize("text,shown", [
    ("A10", "A10"), ("NVIDIA A10", "NVIDIA A10"), ("NVIDIA-A10", "NVIDIA-A10"), ("L20", "L20"),
    ("NVIDIA L20", "NVIDIA L20"), ("T4", "T4"), ("Tesla T4", "Tesla T4"), ("V100", "V100"),
    ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-16GB"), ("0x1db610de", "Tesla V100-PCIE-32GB"),
    ("0x223610de", "NVIDIA A10"), ("0x26BA", "NVIDIA L20"), ("0x1EB8", "Tesla T4"),
])
def test_a_known_gpu_without_mig_is_refused_as_such(text, shown):
    with pytest.raises(GpuWithoutMigError) as err:
        find_gpu(text)
    msg = str(err.value)
    assert msg.startswith("%s has no MIG" % shown) and "unknown GPU" not in msg and "\n" not in msg
    assert has_no_mig(text)


@pytest.mark.parametrize("text", ["A100-SXM4-40GB", "NVIDIA H20", "0x233510de", "NVIDIA A100 80GB PCIe", "", "zz"])
def test_mig_gpus_and_unknown_names_are_not_called_without_mig(text):
    assert not has_no_mig(text)


@pytest.mark.parametrize("text,name", [
    ("NVIDIA H20", "NVIDIA H20"), ("NVIDIA-H20", "NVIDIA H20"), ("0x232910de", "NVIDIA H20"),
    ("NVIDIA GH200 480GB", "NVIDIA GH200 480GB"), ("NVIDIA H800", "NVIDIA H800"), ("0x2324", "NVIDIA H800"),
    ("NVIDIA H800 NVL", "NVIDIA H800 NVL"), ("0x233a10de", "NVIDIA H800 NVL"), ("NVIDIA H200 NVL", "NVIDIA H200 NVL"),
    ("NVIDIA A800-SXM4-80GB", "NVIDIA A800-SXM4-80GB"), ("0x20f310de", "NVIDIA A800-SXM4-80GB"),
    ("A100-80GB", "NVIDIA A100-SXM4-80GB"),  # a key gives the model's first product
    ("H100-96GB", "NVIDIA H100 96GB"),  # the key is also that product's name in ACK's hyphenated form
])
def test_an_alias_keeps_the_name_it_was_given(text, name):
    gpu = find_gpu(text)
    assert gpu.name == name
    assert name in gpu.product_names and gpu.profiles == find_gpu(gpu.key).profiles


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.key)
def test_a_key_gives_the_models_first_product(gpu):
    assert find_gpu(gpu.key) is gpu
    assert find_gpu(gpu.name) is gpu


@pytest.mark.parametrize("pci,key", [
    (0x2324, "H100-80GB"), (0x233A, "H100-NVL"), (0x2348, "GH200-144GB"), (0x2941, "GB200"), (0x31C2, "GB300"),
    (0x3182, "B300"), (0x2BB5, "RTX-PRO-6000"), (0x20B6, "H100-96GB"), (0x233D, "H100-96GB"), (0x2329, "H100-96GB"),
])
def test_newer_gpus_by_pci_id(pci, key):
    assert find_gpu("0x%04x10de" % pci).key == key
    assert find_gpu_or_none(None, (pci << 16) | 0x10DE).key == key


def test_live_lookup_prefers_pci_id():
    assert find_gpu_or_none("something else", 0x233510DE).key == "H200"
    assert find_gpu_or_none("NVIDIA H200", None).key == "H200"
    assert find_gpu_or_none("Tesla T4", 0x1EB810DE) is None


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.key)
def test_profiles_are_consistent(gpu):
    ids = [p.id for p in gpu.profiles]
    assert len(set(ids)) == len(ids)
    assert len({p.name for p in gpu.profiles}) == len(gpu.profiles)
    for p in gpu.profiles:
        assert p.name.startswith("%dg." % p.compute_slices)
        assert p.compute_slices <= gpu.compute_slices
        assert 0 < p.memory_mib <= gpu.memory_mib
        for placement in p.placements:
            assert placement.size == p.memory_slices
            assert 0 <= placement.start and placement.start + placement.size <= gpu.memory_slots
        assert p.max_instances <= len(p.placements)
        # Memory grows with the memory slices a profile takes.
    by_slices = sorted(gpu.profiles, key=lambda p: p.memory_slices)
    assert [p.memory_mib for p in by_slices] == sorted(p.memory_mib for p in by_slices)


def test_guide_table_for_a100():
    gpu = find_gpu("NVIDIA A100-SXM4-40GB")
    table = {p.name: (p.id, p.max_instances, p.compute_slices, p.memory_slices) for p in gpu.profiles}
    assert table["1g.5gb"] == (19, 7, 1, 1)
    assert table["2g.10gb"] == (14, 3, 2, 2)
    assert table["3g.20gb"] == (9, 2, 3, 4)
    assert table["4g.20gb"] == (5, 1, 4, 4)
    assert table["7g.40gb"] == (0, 1, 7, 8)


def test_h200_entry_matches_a_real_h200():
    """tests/core/data/h200_nvml_probe.json is scripts/nvml_readonly_probe.py's output on a real H200
    (driver 580.159.04, MIG disabled): the catalogue must agree with the driver on every profile."""
    import json
    import os

    with open(os.path.join(os.path.dirname(__file__), "data", "h200_nvml_probe.json")) as f:
        probe = json.load(f)["gpus"][0]
    gpu = find_gpu(probe["pci_device_id"])
    assert gpu is find_gpu(probe["name"])
    assert gpu.memory_mib == probe["memory_total_mib"]
    live = {row["id"]: row for row in probe["profiles"] if "id" in row}
    assert set(live) == {p.id for p in gpu.profiles}
    for p in gpu.profiles:
        row = live[p.id]
        assert row["name"] == "MIG " + p.name
        assert row["index"] == p.nvml_index
        assert row["slices"] == p.compute_slices
        assert row["instances"] == p.max_instances
        assert row["memory_mib"] == p.memory_mib
        assert [tuple(x) for x in row["placements"]] == [tuple(x) for x in p.placements]


# The slice class of each NVML_GPU_INSTANCE_PROFILE_* index (nvml.h; go-nvlib's NewMigProfile maps them
# the same way) and the name suffix it carries.
_INDEX_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6, 7: 1, 8: 2, 9: 1, 10: 1, 11: 2, 12: 4, 13: 1, 14: 2,
                 15: 1, 16: 2, 17: 3}


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.key)
def test_every_profile_records_its_nvml_index_and_the_index_matches_its_name(gpu):
    assert len({p.nvml_index for p in gpu.profiles}) == len(gpu.profiles)
    for p in gpu.profiles:
        assert 0 <= p.nvml_index < NVML_PROFILE_COUNT
        assert _INDEX_SLICES[p.nvml_index] == p.compute_slices, p.name
        base = "%dg.%dgb" % (p.compute_slices, int(p.name.split(".")[1].split("gb")[0]))
        assert p.name == base + suffix_of(p), p.name


def test_a30_memory_matches_a_real_a30():
    """A public capture of an A30 on driver 535.183.01: nvidia-smi's MIG devices table shows 5952 MiB for
    a 1g.6gb and 11968 MiB for a 2g.12gb; mig -lgip shows 5.81 / 11.69 / 23.44 GiB; -lgipp shows the
    placements {0,1,2,3}:1, {0,2}:2 and {0}:4 (the old 5836 / 11672 / 23456 MiB were not what NVML says)."""
    gpu = find_gpu("NVIDIA A30")
    table = {p.id: (p.name, p.max_instances, p.memory_mib, [(x.start, x.size) for x in p.placements])
             for p in gpu.profiles}
    assert table == {
        14: ("1g.6gb", 4, 5952, [(0, 1), (1, 1), (2, 1), (3, 1)]),
        21: ("1g.6gb+me", 1, 5952, [(0, 1), (1, 1), (2, 1), (3, 1)]),
        5: ("2g.12gb", 2, 11968, [(0, 2), (2, 2)]),
        6: ("2g.12gb+me", 1, 11968, [(0, 2), (2, 2)]),
        0: ("4g.24gb", 1, 24000, [(0, 4)]),
    }
    for p in gpu.profiles:  # the GiB column, as nvidia-smi rounds it
        assert "%.2f" % (p.memory_mib / 1024.0) in ("5.81", "11.69", "23.44")


def test_rtx_pro_6000_matches_a_real_one():
    """nvidia-smi mig -lgip / -lgipp on an RTX PRO 6000 Blackwell Server Edition (a public capture): ids,
    counts and placements on its 12-unit grid; the names and counts are also the MIG user guide's table."""
    gpu = find_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert (gpu.memory_slots, gpu.compute_slices) == (12, 4)
    rows = {p.name: (p.id, p.max_instances, p.placements[0].size, [x.start for x in p.placements])
            for p in gpu.profiles}
    one, two = [0, 3, 6, 9], [0, 6]
    assert rows == {
        "1g.24gb": (14, 4, 3, one), "1g.24gb+me": (21, 1, 3, one), "1g.24gb+gfx": (47, 4, 3, one),
        "1g.24gb+me.all": (65, 1, 3, one), "1g.24gb-me": (67, 4, 3, one),
        "2g.48gb": (5, 2, 6, two), "2g.48gb+gfx": (35, 2, 6, two), "2g.48gb+me.all": (64, 1, 6, two),
        "2g.48gb-me": (66, 2, 6, two), "4g.96gb": (0, 1, 12, [0]), "4g.96gb+gfx": (32, 1, 12, [0]),
    }
    assert {p.name: "%.2f" % (p.memory_mib / 1024.0) for p in gpu.profiles if "+" not in p.name and "-" not in p.name} \
        == {"1g.24gb": "23.62", "2g.48gb": "47.38", "4g.96gb": "95.12"}


@pytest.mark.parametrize("sequence,ok", [
    ("65-67-67-67", True), ("64-66", True), ("1g.24gb+me.all", True),
    ("65-14", False), ("65-47", False), ("64-5", False), ("64-67-14", False), ("65-21", False),
])
def test_me_all_shares_the_gpu_only_with_no_me_profiles(sequence, ok):
    """nvml.h: allocating a +me.all instance "prevents allocation of all but _NO_ME profiles"."""
    from node_bootstrap.mig import PartitionSpec, PlacementError, plan

    rtx = find_gpu("RTX-PRO-6000")
    if ok:
        assert plan(PartitionSpec("sequence", sequence), rtx).instances
    else:
        with pytest.raises(PlacementError) as err:
            plan(PartitionSpec("sequence", sequence), rtx)
        assert ("only -me profiles" in str(err.value)) or ("+me instance" in str(err.value))
