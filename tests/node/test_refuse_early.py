"""What would fail late is refused before anything changes: a driver or pynvml without an entry point the
plan needs (driver-too-old / pynvml-too-old), a process list no call can read (named, not "busy"), pynvml
and NVML out of step (NVMLLibraryMismatchError), and the A30's second +me instance."""

import types

import pynvml
import pytest

from node_bootstrap.errors import NodeFailure
from node_bootstrap.mig import KIND_SEQUENCE, PartitionSpec
from node_bootstrap.driver.nvml import NvmlReader, NvmlWriter
from node_bootstrap.commands.planner import plan_node
from node_bootstrap.commands.reconcile import Host, reconcile
from tests.node.nodecli import Node

SEQ = "1g.5gb-2g.10gb-3g.20gb"



def pynvml_without(*names, **replace):
    """pynvml as a build that lacks ``names`` (and with ``replace`` swapped in) looks."""
    shim = types.ModuleType("pynvml_shim")
    for name in dir(pynvml):
        if name not in names:
            setattr(shim, name, getattr(pynvml, name))
    for name, value in replace.items():
        setattr(shim, name, value)
    return shim


def quiet_host():
    calls = []
    host = Host(lambda: calls.append("stop") or [], lambda stopped: calls.append("start") or [],
                lambda gpus: (0, ""), lambda pid: False, lambda message: None)
    return host, calls


def reconcile_with(nv, spec=SEQ, force=False):
    host, calls = quiet_host()
    pending = []
    with NvmlWriter(nv) as writer:
        with pytest.raises(NodeFailure) as err:
            reconcile(writer, PartitionSpec(KIND_SEQUENCE, spec), host, force=force,
                      on_change=lambda plans: pending.append(1))
        assert writer.changes == 0
    assert calls == [] and pending == []  # no client stopped, no "pending" label
    return err.value


# --- the driver and pynvml have what the plan needs -------------------------------------------------

@pytest.mark.kube
def test_an_old_driver_is_refused_before_mig_mode_is_touched(tmp_path, kube_api):
    node = Node(tmp_path, count=2)
    kube_api.add_node("node-a")
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a"))
    assert node.run("status").rc == 0
    before = open(node.state).read()
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "old-driver")
    assert res.rc == 1 and res.json["error"]["code"] == "driver-too-old", res.stderr
    message = res.json["error"]["message"]
    # CUDA 11.2's nvml.h (R460) has the call: R460 is the minimum to name, not R470
    assert "450.248.02-sim lacks nvmlDeviceCreateGpuInstanceWithPlacement" in message and "R460 or newer" in message
    assert "R470" not in message
    assert "\n" not in message and "Traceback" not in res.stderr
    assert res.json["changes"] == 0 and open(node.state).read() == before  # MIG mode still off
    assert res.json["labels"]["states"] == ["failed"]  # never "pending" first
    assert kube_api.nodes["node-a"]["metadata"]["labels"]["nvidia.com/mig.config.state"] == "failed"


def test_a_pynvml_without_create_with_placement_is_refused(sim):
    sim()
    err = reconcile_with(pynvml_without("nvmlDeviceCreateGpuInstanceWithPlacement"))
    assert err.code == "pynvml-too-old"
    assert str(err).startswith("this pynvml lacks nvmlDeviceCreateGpuInstanceWithPlacement, needed for creating GPU "
                               "instances at a placement")


def test_only_what_the_plan_needs_is_asked_for(sim):
    sim()
    with NvmlWriter(pynvml_without("nvmlDeviceCreateGpuInstanceWithPlacement")) as writer:
        gpus = writer.read_all()
        plans = plan_node(gpus, PartitionSpec(KIND_SEQUENCE, SEQ))
        assert writer.missing_entry_points(plans, gpus).code == "pynvml-too-old"
        # a plan that only destroys (or has nothing to do) does not need the create call
        destroy_only = [p._replace(enable_mig=False, create=(), destroy_gis=(1,)) for p in plans]
        assert writer.missing_entry_points(destroy_only, gpus) is None


def test_a_pynvml_without_any_process_list_says_which_calls_are_missing_not_busy(sim):
    sim()
    nv = pynvml_without("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                        "nvmlDeviceGetComputeRunningProcesses")
    for force in (False, True):
        err = reconcile_with(nv, force=force)
        assert err.code == "pynvml-too-old" and err.exit_code == 1
        assert ("this pynvml has none of nvmlDeviceGetComputeRunningProcesses_v3, "
                "nvmlDeviceGetComputeRunningProcesses_v2, nvmlDeviceGetComputeRunningProcesses") in str(err)
        assert "busy" not in str(err) and "process list is unreadable" not in str(err)


def test_a_driver_without_a_process_list_for_this_pynvml_is_a_clear_outcome(tmp_path):
    node = Node(tmp_path, count=1)
    status = node.run("status", "--sim-fault", "no-process-list")
    assert status.rc == 0  # pynvml's NVMLLibraryMismatchError did not escape the read
    notes = status.json["gpus"][0]["notes"]
    assert any("NVMLLibraryMismatchError" in n for n in notes)
    before = open(node.state).read()
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "no-process-list", "--force")
    assert res.rc == 1 and res.json["error"]["code"] == "driver-too-old", res.stderr
    message = res.json["error"]["message"]
    assert "nvmlDeviceGetComputeRunningProcesses_v2 is not in the driver" in message
    assert "nvmlDeviceGetComputeRunningProcesses raised NVMLLibraryMismatchError" in message
    assert open(node.state).read() == before


def test_a_library_mismatch_anywhere_in_a_read_is_a_clear_outcome(sim):
    sim()

    def mismatch(handle):
        raise pynvml.NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does not match")

    with NvmlReader(pynvml_without(nvmlDeviceGetMigMode=mismatch)) as reader:
        with pytest.raises(NodeFailure) as err:
            reader.read_gpu(0)
    assert err.value.code == "nvml-library-mismatch"
    assert "pynvml and the driver's NVML library do not match (Unversioned function called" in str(err.value)


# --- the A30's media engines --------------------------------------------------------------------------

def test_the_simulated_a30_refuses_a_second_media_extension_instance(sim):
    sim("A30", 1)
    with NvmlWriter(pynvml) as w:
        w.set_mig_mode(0, True)
        assert w.read_gpu(0).mig_current == 1
        w.create_gpu_instance(0, 21, 0, 1)  # 1g.6gb+me
        with pytest.raises(pynvml.NVMLError_InsufficientResources):
            w.create_gpu_instance(0, 6, 2, 2)  # 2g.12gb+me: no JPEG decoder or OFA left
        w.create_gpu_instance(0, 5, 2, 2)  # a plain 2g.12gb fits
        assert sorted(g.profile_id for g in w.read_gpu(0).gis) == [5, 21]


def test_the_node_refuses_two_media_extension_instances_on_an_a30(tmp_path):
    node = Node(tmp_path, count=1)
    node.gpu = "A30"
    res = node.run("plan", "--sequence", "21-6")
    assert res.rc == 2 and res.json["error"]["code"] == "bad-input"
    assert res.json["error"]["message"] == ("1g.6gb+me + 2g.12gb+me requested, but A30 holds at most 1 +me "
                                            "instance in all (they share its one JPEG decoder and OFA)")


def test_disable_refuses_a_gpu_whose_processes_no_call_can_read_even_with_force(tmp_path):
    # Turning MIG off destroys instances that processes may be using: as apply, disable must see the
    # process list, whatever --force says, and changes nothing when it cannot.
    node = Node(tmp_path, count=1)
    assert node.run("apply", "--sequence", SEQ).rc == 0
    before = open(node.state).read()
    res = node.run("disable", "--sim-fault", "no-process-list", "--force")
    assert res.rc == 1 and res.json["error"]["code"] == "driver-too-old", res.stderr
    assert "nvmlDeviceGetComputeRunningProcesses_v2 is not in the driver" in res.json["error"]["message"]
    assert open(node.state).read() == before


# --- profiles the driver does not offer yet (the MIG user guide's driver notes) ----------------------

@pytest.mark.parametrize("gpu, sequence, needs", [
    ("A30", "2g.12gb.me-2g.12gb", "2g.12gb+me (R525)"),  # "only available starting with R525 drivers"
    ("A100-SXM4-40GB", "1g.10gb-3g.20gb", "1g.10gb (R525)"),
])
def test_a_profile_newer_than_the_driver_is_refused_before_mig_mode_is_touched(tmp_path, gpu, sequence, needs):
    """An R470 driver that answers profile queries NOT_SUPPORTED while MIG is off: the plan comes from the
    catalogue, which offers the profile; without the gate MIG would be enabled (maybe with a reset) and the
    replan would not find the profile, leaving the GPU MIG-on and empty."""
    node = Node(tmp_path, gpu=gpu, count=1)
    faults = ["--sim-fault", "profiles-need-mig", "--sim-fault", "driver:470.256.02"]
    assert node.run("status", *faults).json["gpus"][0]["profiles_source"] == "catalogue"
    before = open(node.state).read()
    res = node.run("apply", "--sequence", sequence, *faults)
    assert res.rc == 1 and res.json["error"]["code"] == "driver-too-old", res.stderr
    message = res.json["error"]["message"]
    assert "the NVIDIA driver 470.256.02 (R470) does not offer GPU 0" in message and needs in message
    assert res.json["changes"] == 0 and open(node.state).read() == before  # MIG mode still off
    # the driver branch the guide names does it
    ok = node.run("apply", "--sequence", sequence, "--sim-fault", "profiles-need-mig", "--sim-fault",
                  "driver:525.147.05")
    assert ok.rc == 0, ok.stderr


def test_a_driver_that_lists_its_profiles_with_mig_off_has_the_last_word(tmp_path):
    """Where the driver answers profile queries with MIG off, its table is the plan's: an R470 driver does
    not know index 8 (2_SLICE_REV1, CUDA 12.0's nvml.h), so 2g.12gb+me is an unknown profile, refused as
    bad input before any change."""
    node = Node(tmp_path, gpu="A30", count=1)
    status = node.run("status", "--sim-fault", "driver:470.256.02").json["gpus"][0]
    assert status["profiles_source"] == "nvml"
    assert [p["name"] for p in status["profiles"]] == ["1g.6gb", "1g.6gb+me", "2g.12gb", "4g.24gb"]
    res = node.run("apply", "--sequence", "2g.12gb.me-2g.12gb", "--sim-fault", "driver:470.256.02")
    assert res.rc == 2 and "unknown profile" in res.json["error"]["message"], res.stderr
