"""Every GPU instance is seen: profile indices are read until NVML answers INVALID_ARGUMENT (nvml.h's
documented way), so instances of the newer profiles (-me, +gfx, +me.all at indices 10 and up) are shown,
kept when wanted and destroyed when not; a profile unreadable while MIG is on stops the command with the
reason; a driver that rejects the v2 struct version, or that will not describe profiles while MIG is
off, still yields every profile."""

import ctypes
import json
import types

import pynvml
import pytest

from node_bootstrap.errors import NodeFailure
from node_bootstrap.driver.live import effective_model
from node_bootstrap.mig import find_gpu
from node_bootstrap.driver.nvml import NvmlReader
from tests.node.nodecli import Node

RTX = find_gpu("RTX-PRO-6000")



def with_profile_info(replacement):
    shim = types.ModuleType("pynvml_shim")
    for name in dir(pynvml):
        setattr(shim, name, getattr(pynvml, name))
    shim.nvmlDeviceGetGpuInstanceProfileInfo = replacement
    return shim


def rtx_node(tmp_path, gis):
    """An RTX PRO 6000 node whose GPU already holds ``gis``: (profile name, start) with one full CI each."""
    node = Node(tmp_path, gpu="RTX-PRO-6000", count=1)
    items = []
    for n, (name, start) in enumerate(gis):
        profile = RTX.profile_by_name(name)
        items.append({"id": n + 1, "profile_id": profile.id, "start": start, "size": profile.memory_slices,
                      "cis": [{"id": 0, "profile_id": {1: 0, 2: 1, 4: 3}[profile.compute_slices]}]})
    state = {"version": 1, "gpu": RTX.key, "count": 1, "boots": 0,
             "gpus": [{"mig_current": 1, "mig_pending": 1, "gis": items}]}
    with open(node.state, "w") as fh:
        json.dump(state, fh)
    return node


def test_instances_of_high_index_profiles_are_seen_and_destroyed_when_not_wanted(tmp_path):
    assert RTX.profile_by_name("1g.24gb-me").nvml_index == 13 and RTX.profile_by_name("2g.48gb+gfx").nvml_index == 11
    node = rtx_node(tmp_path, [("1g.24gb-me", 0), ("2g.48gb+gfx", 6)])
    status = node.run("status").json["gpus"][0]
    assert [(i["profile"], i["start"]) for i in status["instances"]] == [("1g.24gb-me", 0), ("2g.48gb+gfx", 6)]
    assert {p["nvml_index"] for p in status["profiles"]} >= {10, 11, 12, 13, 14, 15, 16}
    plan = node.run("plan", "--sequence", "4g.96gb").json["gpus"][0]
    assert [d["profile"] for d in plan["destroy"]] == ["1g.24gb-me", "2g.48gb+gfx"]
    res = node.run("apply", "--sequence", "4g.96gb")
    assert res.rc == 0, res.stderr
    assert node.layout() == [(0, 0, 1)]  # the 4g.96gb alone, with its compute instance


def test_a_wanted_high_index_instance_is_kept(tmp_path):
    node = rtx_node(tmp_path, [("1g.24gb-me", 3)])
    res = node.run("apply", "--sequence", "1g.24gb-me-2g.48gb")
    assert res.rc == 0, res.stderr
    assert res.json["changes"] == 2  # the 2g.48gb and its compute instance; the -me stays at 3
    assert node.layout() == [(5, 6, 1), (67, 3, 1)]


def test_a_profile_unreadable_while_mig_is_on_is_an_error_with_the_reason(sim):
    def refuse_index_2(dev, index, version=2):
        if index == 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(dev, index, version)

    sim(mig=True)
    with NvmlReader(with_profile_info(refuse_index_2)) as reader:
        with pytest.raises(NodeFailure) as err:
            reader.read_gpu(0)
    assert err.value.code == "nvml-unreadable"
    assert str(err.value) == ("GPU 0: GPU instance profile index 2: Insufficient Permissions (NVML error 4) while "
                              "MIG mode is on, so its instances of that profile cannot be seen")


def test_with_mig_off_an_unreadable_profile_is_only_a_note(sim):
    def refuse_index_2(dev, index, version=2):
        if index == 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(dev, index, version)

    sim(mig=False)
    with NvmlReader(with_profile_info(refuse_index_2)) as reader:
        gpu = reader.read_gpu(0)
    assert "GPU instance profile index 2: Insufficient Permissions (NVML error 4)" in gpu.notes
    assert 9 not in [p.id for p in gpu.profiles]  # the 3g.20gb is the one it could not read


def test_a_wrong_struct_version_answers_invalid_argument_and_the_reader_falls_back_to_v1(sim):
    sim(mig=True)
    pynvml.nvmlInit()
    try:
        dev = pynvml.nvmlDeviceGetHandleByIndex(0)
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.version = 0x01000098  # not a version this driver knows
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
        assert fn(dev, 0, ctypes.byref(info)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    finally:
        pynvml.nvmlShutdown()

    def wrong_version(dev, index, version=2):
        if version != 2:
            return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(dev, index, version)
        bad = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        bad.version = 0x03000000  # a pynvml newer than the driver
        ret = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")(dev, index, ctypes.byref(bad))
        pynvml._nvmlCheckReturn(ret)
        return bad

    with NvmlReader(with_profile_info(wrong_version)) as reader:
        gpu = reader.read_gpu(0)
    catalogue = find_gpu("A100-SXM4-40GB")
    assert sorted(p.id for p in gpu.profiles) == sorted(p.id for p in catalogue.profiles)
    assert all(p.name == "" for p in gpu.profiles)  # v1 structs carry no names: the catalogue names them
    assert effective_model(gpu)[0].profile_by_id(20).name == "1g.5gb+me"
    assert gpu.notes == ()


def test_profiles_refused_while_mig_is_off_come_from_the_catalogue_then_from_nvml(tmp_path):
    node = Node(tmp_path, count=1)
    before = node.run("status", "--sim-fault", "profiles-need-mig").json["gpus"][0]
    assert before["profiles_source"] == "catalogue" and before["notes"] == []
    res = node.run("apply", "--sequence", "1g.5gb-2g.10gb-3g.20gb", "--sim-fault", "profiles-need-mig")
    assert res.rc == 0, res.stderr
    after = node.run("status", "--sim-fault", "profiles-need-mig").json["gpus"][0]
    assert after["profiles_source"] == "nvml" and len(after["instances"]) == 3
