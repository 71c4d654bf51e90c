"""The simulated driver answers as real drivers do where the node's behaviour depends on it: profile indices
as a captured R580 driver, GPU instance ids as real A100, H100 and A30 captures, compute instance profile
indices of nvml.h, PCI ids of the PCI ID registry, compute processes in their instances (issue 18, point 2).
Each expectation names its source; node_bootstrap/driver/sim/driver.py cites the same."""

import json
import os

import pynvml
import pytest

from node_bootstrap.mig import find_gpu
from node_bootstrap.driver.nvml import NvmlReader, NvmlWriter
from node_bootstrap.driver.sim import driver
from node_bootstrap.driver.sim.faults import process_on_pid

PROBE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "core", "data", "h200_nvml_probe.json")


def _profile_answer(dev, index):
    try:
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(dev, index).id
    except pynvml.NVMLError as exc:
        return {pynvml.NVML_ERROR_NOT_SUPPORTED: "NVMLError: Not Supported",
                pynvml.NVML_ERROR_INVALID_ARGUMENT: "NVMLError: Invalid Argument"}[exc.value]


def test_the_simulated_h200_answers_every_profile_index_as_the_captured_r580_driver(sim):
    with open(PROBE) as fh:
        probe = json.load(fh)
    lib = sim("H200", 1)
    assert lib.driver_version.startswith(probe["driver"].split(".")[0] + ".")
    with NvmlReader(pynvml):
        dev = pynvml.nvmlDeviceGetHandleByIndex(0)
        for captured in probe["gpus"][0]["profiles"]:
            assert _profile_answer(dev, captured["index"]) == captured.get("id", captured.get("error")), captured
        assert _profile_answer(dev, 17) == "NVMLError: Invalid Argument"  # 3_SLICE_GFX, unknown to R580


def test_the_reader_scans_past_an_index_the_driver_does_not_know(sim, monkeypatch):
    """NVIDIA's walkers (mig-parted internal/nvlib/mig, go-nvlib VisitMigProfiles) skip INVALID_ARGUMENT up to
    the profile count: a driver that leaves a gap (here index 8 on an A100) still shows index 9, 1g.10gb."""
    sim("A100-SXM4-40GB", 1)
    real = driver.profile_by_index

    def gap(model, nvml_index, branch=0):
        if nvml_index == 8:
            raise driver.SimError(driver.ERROR_INVALID_ARGUMENT, "a gap")
        return real(model, nvml_index, branch)

    monkeypatch.setattr(driver, "profile_by_index", gap)
    with NvmlReader(pynvml) as reader:
        assert sorted(p.id for p in reader.read_gpu(0).profiles) == [0, 5, 9, 14, 15, 19, 20]


@pytest.mark.parametrize("gpu, profile, size, starts, ids", [
    # an A100-SXM4-40GB with 7 x 1g.5gb: ids 11, 12, 13, 14 at 0-3 and 7, 8, 9 at 4-6
    ("A100-SXM4-40GB", 19, 1, range(7), [11, 12, 13, 14, 7, 8, 9]),
    # an A100-PCIE-40GB (510.47.03): 2g.10gb at 2 -> 6; an A100 80GB (550.54.14): 4g at 0 -> 2
    ("A100-SXM4-40GB", 14, 2, [2], [6]),
    ("A100-80GB", 5, 4, [0], [2]),
    ("A100-80GB", 9, 4, [4], [1]),
    # an H100 80GB HBM3 with 7 x 1g.10gb: 7-13 at 0-6; an A30 with 4 x 1g.6gb: 3-6 at 0-3
    ("H100-80GB", 19, 1, range(7), [7, 8, 9, 10, 11, 12, 13]),
    ("A30", 14, 1, range(4), [3, 4, 5, 6]),
])
def test_gpu_instance_ids_follow_the_placement_as_real_drivers_answer(sim, gpu, profile, size, starts, ids):
    sim(gpu, 1, mig=True)
    with NvmlWriter(pynvml) as writer:
        # created from the last start down: the id is the placement's, not the order's
        made = dict((start, writer.create_gpu_instance(0, profile, start, size)) for start in reversed(list(starts)))
    assert [made[start] for start in starts] == ids


@pytest.mark.parametrize("gpu, seven", [("A100-SXM4-40GB", 1), ("H100-80GB", None)])
def test_compute_instance_profile_indices_seven_and_eight(sim, gpu, seven):
    """nvml.h: NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 7 (CUDA 12.0, R525), 7_SLICE_NVL = 8 (CUDA 13.3,
    after the simulated R580). NVIDIA go-nvml's A100 mock offers 1_SLICE_REV1 in every GPU instance, its H100
    mock does not."""
    sim(gpu, 1, mig=True)
    with NvmlWriter(pynvml) as writer:
        gi = writer.create_gpu_instance(0, 9, 0, 4)
        handle = pynvml.nvmlDeviceGetGpuInstanceById(pynvml.nvmlDeviceGetHandleByIndex(0), gi)
        if seven is None:
            with pytest.raises(pynvml.NVMLError_NotSupported):
                writer.ci_profile(handle, 7)
        else:
            assert writer.ci_profile(handle, 7).sliceCount == seven
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            writer.ci_profile(handle, 8)
        if seven is not None:
            # an instance whose compute instance has profile 7 is seen, and spans its 1-slice GPU instance
            small = writer.create_gpu_instance(0, 19, 4, 1)
            pynvml.nvmlGpuInstanceCreateComputeInstance(
                pynvml.nvmlDeviceGetGpuInstanceById(pynvml.nvmlDeviceGetHandleByIndex(0), small), 7)
            seen = dict((g.id, g) for g in writer.read_gpu(0).gis)[small]
            assert [(c.profile_id, c.slices) for c in seen.cis] == [(7, 1)]


@pytest.mark.parametrize("name, pci", [("NVIDIA H20", 0x2329), ("NVIDIA H100 96GB", 0x233D),
                                       ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 0x2BB4)])
def test_a_simulated_product_answers_its_own_pci_id(tmp_path, name, pci):
    """go-nvlib's pci.ids: 2329 GH100 [H20], 233d GH100 [H100 96GB], 2bb4 GB202GL [RTX PRO 6000 Blackwell
    Max-Q Workstation Edition]: products that share a catalogue entry do not share an id."""
    from tests.node.nodecli import Node

    node = Node(tmp_path, gpu=name.replace(" ", "-"), count=1)
    status = node.run("status").json["gpus"][0]
    assert status["name"] == name and status["pci_device_id"] == "0x%04x10de" % pci
    assert find_gpu(name).pci_device_ids[0] == pci


def test_a_process_on_an_instance_is_listed_with_it_and_keeps_it_from_being_destroyed(sim):
    lib = sim("A100-SXM4-40GB", 1, ["process-on:0:4"], mig=True)
    with NvmlWriter(pynvml) as writer:
        gi = writer.create_gpu_instance(0, 9, 4, 4)
        assert writer.read_gpu(0).pids == ()  # no compute instance: nothing runs in it yet
        writer.create_full_compute_instance(0, gi, 3)
        listed = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(0))
        assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in listed] == [(process_on_pid(0, 4), gi, 0)]
        with pytest.raises(pynvml.NVMLError_InUse):
            writer.destroy_compute_instance(0, gi, 0)
        lib.kill(process_on_pid(0, 4))
        writer.destroy_compute_instance(0, gi, 0)
        writer.destroy_gpu_instance(0, gi)


def test_the_driver_version_decides_which_indices_exist():
    """nvml.h's NVML_GPU_INSTANCE_PROFILE_COUNT by release: 8 in CUDA 11.4 (R470), 10 in 12.0 (R525), 17 known
    to the captured R580 (it answers 17 INVALID_ARGUMENT)."""
    assert [driver.gi_index_count(b) for b in (450, 470, 525, 550, 570, 575, 580)] == [7, 8, 10, 10, 13, 17, 17]
    a30 = find_gpu("A30")
    with pytest.raises(driver.SimError) as unknown:
        driver.profile_by_index(a30, 8, 470)
    assert unknown.value.code == driver.ERROR_INVALID_ARGUMENT
    assert driver.profile_by_index(a30, 8, 525).name == "2g.12gb+me"


def test_a_mig_device_handle_is_not_supported_with_mig_off(sim):
    """nvml.h, nvmlDeviceGetMigDeviceHandleByIndex: NOT_SUPPORTED "if device doesn't have MIG mode enabled";
    with MIG on, NOT_FOUND "if no valid MIG device was found at index" (the next test)."""
    sim("A100-SXM4-40GB", 2, mig=False)
    with NvmlReader(pynvml):
        dev = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(dev, 0)


def test_an_empty_mig_gpu_has_no_mig_device_at_index_zero(sim):
    sim("A100-SXM4-40GB", 1, mig=True)
    with NvmlReader(pynvml):
        dev = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(dev, 0)


@pytest.mark.parametrize("mig, count", [(False, 0), (True, 7)])
def test_the_max_mig_device_count_is_zero_while_mig_mode_is_off(sim, mig, count):
    """nvml.h, nvmlDeviceGetMaxMigDeviceCount: "Returns zero if MIG is not supported or enabled"; the captured
    H200 (driver 580, MIG off, tests/core/data/h200_nvml_probe.json) answered 0. NVIDIA's device plugin walks
    the MIG devices below this count (go-nvlib VisitMigDevices), so with MIG off it walks none."""
    with open(PROBE) as fh:
        captured = json.load(fh)["gpus"][0]
    assert (captured["mig_mode"], captured["max_mig_devices"]) == ([0, 0], 0)
    sim("H200", 1, mig=mig)
    with NvmlReader(pynvml):
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(pynvml.nvmlDeviceGetHandleByIndex(0)) == count
