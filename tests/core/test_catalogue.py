"""The catalogue: every GPU of facts.md, lookups by every accepted form, internal consistency."""

import pytest

from node_bootstrap.mig import GPUS, UnknownGpuError, find_gpu, find_gpu_or_none

EXPECTED_KEYS = {"A100-SXM4-40GB", "A100-PCIE-40GB", "A100-80GB", "A30", "H100-80GB", "H100-NVL",
                 "H100-96GB", "H200", "B200"}


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


@pytest.mark.parametrize("text", ["", "Tesla V100", "0x1db610de", "0x20b01234", "0xzz"])
def test_unknown_gpu_lists_known_ones(text):
    with pytest.raises(UnknownGpuError) as err:
        find_gpu(text)
    assert "known GPUs:" in str(err.value)
    assert "H200" in str(err.value)


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
