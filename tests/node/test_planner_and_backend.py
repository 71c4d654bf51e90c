"""The pure planner (live state in, actions out) and the NVML backend's tolerance of what real nodes
answer: NOT_SUPPORTED, NO_PERMISSION, MIG disabled, and older pynvml builds."""

import types

import pynvml
import pytest

from node_bootstrap.errors import NotMigCapable
from node_bootstrap.driver.live import LiveCi, LiveGi, LiveGpu, LiveProfile, effective_model
from node_bootstrap.mig import KIND_SEQUENCE, KIND_SIZE, PartitionSpec, Placement, PlacementError, find_gpu
from node_bootstrap.driver.nvml import NvmlReader, NvmlWriter
from node_bootstrap.commands.planner import plan_gpu

A100 = "NVIDIA A100-SXM4-40GB"
A100_PCI = (0x20B0 << 16) | 0x10DE


def gpu(gis=(), current=1, pending=1, profiles=(), pids=(), name=A100, pci=A100_PCI):
    return LiveGpu(0, name, pci, "", "", current, pending, tuple(profiles), tuple(gis), tuple(pids), ())


def gi(gi_id, profile_id, start, size, slices, cis=1):
    return LiveGi(gi_id, profile_id, start, size, tuple(LiveCi(c, 0, slices) for c in range(cis)))


def seq(value):
    return PartitionSpec(KIND_SEQUENCE, value)


def test_matching_instances_are_kept_and_the_rest_replaced():
    plan = plan_gpu(gpu([gi(1, 9, 0, 4, 3), gi(2, 9, 4, 4, 3)]), seq("4g.20gb-3g.20gb"))
    assert [g.id for g in plan.keep] == [2]
    assert plan.destroy_cis == ((1, 0),) and plan.destroy_gis == (1,)
    assert [(i.profile.name, i.start) for i in plan.create] == [("4g.20gb", 0)]
    assert not plan.enable_mig and not plan.converged and plan.action_count == 4


def test_a_kept_instance_with_the_wrong_compute_instances_gets_them_replaced():
    odd = LiveGi(1, 9, 0, 4, (LiveCi(0, 0, 1), LiveCi(1, 0, 1)))  # two 1-slice CIs in a 3g
    plan = plan_gpu(gpu([odd, gi(2, 9, 4, 4, 3)]), seq("9-9"))
    assert plan.destroy_cis == ((1, 0), (1, 1)) and plan.destroy_gis == ()
    assert plan.create_cis == ((1, 3),) and plan.create == ()


def test_converged_gpu_plans_nothing_and_pending_mode_is_a_change():
    layout = [gi(1, 9, 0, 4, 3), gi(2, 9, 4, 4, 3)]
    assert plan_gpu(gpu(layout), seq("9-9")).converged
    assert plan_gpu(gpu(layout, pending=0), seq("9-9")).enable_mig
    assert plan_gpu(gpu([], current=0, pending=0), seq("9-9")).action_count == 1 + 4


def test_not_mig_capable_and_unknown_gpus_are_refused():
    with pytest.raises(NotMigCapable):
        plan_gpu(gpu(current=None, pending=None), seq("9"))
    with pytest.raises(NotMigCapable):
        plan_gpu(gpu(name="NVIDIA T4", pci=(0x1EB8 << 16) | 0x10DE), seq("9"))


def test_live_profiles_override_the_catalogue():
    # A driver that offers the 3g only at start 4 and at most one: the plan follows the driver.
    live = [LiveProfile(2, 9, "MIG 3g.20gb", 3, 1, 19968, (Placement(4, 4),)),
            LiveProfile(0, 19, "MIG 1g.5gb", 1, 7, 4864, ())]  # no placements reported: catalogue's
    g = gpu(profiles=live)
    model, source = effective_model(g)
    assert source == "nvml" and [p.name for p in model.profiles] == ["1g.5gb", "3g.20gb"]
    plan = plan_gpu(g, seq("3g.20gb-1g.5gb"))
    assert [(i.profile.name, i.start) for i in plan.layout.instances] == [("1g.5gb", 0), ("3g.20gb", 4)]
    with pytest.raises(PlacementError):
        plan_gpu(g, seq("9-9"))
    with pytest.raises(Exception) as err:  # the driver does not offer 2g.10gb here
        plan_gpu(g, seq("2g.10gb"))
    assert "valid profiles" in str(err.value)


def test_without_live_profiles_the_catalogue_is_used():
    model, source = effective_model(gpu(current=0, pending=0))
    assert source == "catalogue" and model.key == "A100-SXM4-40GB"


# --- the backend against the simulated library ----------------------------------------------------


def test_reader_has_no_mutating_methods():
    for name in ("set_mig_mode", "create_gpu_instance", "destroy_gpu_instance", "create_full_compute_instance",
                 "destroy_compute_instance"):
        assert not hasattr(NvmlReader, name) and hasattr(NvmlWriter, name)


def test_mig_disabled_h200_reads_cleanly_with_notes_not_errors(sim):
    sim("H200", 1)
    with NvmlReader(pynvml) as reader:
        g = reader.read_gpu(0)
    assert (g.name, g.mig_current, g.mig_pending) == ("NVIDIA H200", 0, 0)
    assert g.gis == () and g.notes == ()
    # The driver's own profile table, read while MIG is off, matches the catalogue's H200 entry.
    model, source = effective_model(g)
    assert source == "nvml"
    catalogue = find_gpu("NVIDIA H200")
    assert sorted((p.id, p.name, p.memory_mib, p.placements) for p in model.profiles) == \
        sorted((p.id, p.name, p.memory_mib, p.placements) for p in catalogue.profiles)


def test_no_permission_and_not_supported_become_notes(sim):
    sim("A100-SXM4-40GB", 1, ["no-permission", "not-mig-capable"])
    with NvmlReader(pynvml) as reader:
        g = reader.read_gpu(0)
    assert g.mig_current is None and not g.mig_capable
    assert any(n.startswith("MIG mode: Not Supported") for n in g.notes)
    assert any(n.startswith("compute processes: Insufficient Permissions") for n in g.notes)


def _old_pynvml():
    """pynvml as an older release looks: no version argument, no placements, no _v3 process list."""
    hidden = {"nvmlDeviceGetGpuInstancePossiblePlacements", "nvmlDeviceGetComputeRunningProcesses_v3"}
    old = types.ModuleType("pynvml_old")
    for name in dir(pynvml):
        if name not in hidden:
            setattr(old, name, getattr(pynvml, name))
    old.nvmlDeviceGetGpuInstanceProfileInfo = lambda dev, profile: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        dev, profile, 1)
    old.nvmlGpuInstanceGetComputeInstanceProfileInfo = lambda gi, p, e: (
        pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, p, e, 1))
    return old


def test_older_pynvml_without_newer_functions_still_reads_and_applies(sim):
    sim("A100-SXM4-40GB", 1)
    old = _old_pynvml()
    with NvmlWriter(old) as writer:
        writer.set_mig_mode(0, True)
    sim("A100-SXM4-40GB", 1).reset([0])
    with NvmlWriter(old) as writer:
        gi_id = writer.create_gpu_instance(0, 9, 4, 4)
        writer.create_full_compute_instance(0, gi_id, 3)
        g = writer.read_gpu(0)
        assert writer.changes == 2
    assert [(x.profile_id, x.start, [c.slices for c in x.cis]) for x in g.gis] == [(9, 4, [3])]
    assert {p.id for p in g.profiles} == {19, 20, 15, 14, 9, 5, 0}
    assert all(p.placements == () for p in g.profiles)  # unavailable: the catalogue's are used
    assert any("placements" in n for n in g.notes)
    model, source = effective_model(g)
    assert source == "nvml" and model.profile_by_id(9).placements == (Placement(0, 4), Placement(4, 4))


def test_simulator_enforces_the_drivers_rules_through_pynvml(sim):
    lib = sim("A100-SXM4-40GB", 1)
    with NvmlWriter(pynvml) as w:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            w.create_gpu_instance(0, 9, 0, 4)  # MIG disabled
        assert w.set_mig_mode(0, True) == pynvml.NVML_SUCCESS  # idle bare metal: activated inside the call
        assert w.released(lib.reset, [0])[0] == 0
        low = w.create_gpu_instance(0, 9, 0, 4)
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            w.create_gpu_instance(0, 9, 2, 4)  # not an allowed start
        with pytest.raises(pynvml.NVMLError_InsufficientResources):
            w.create_gpu_instance(0, 14, 2, 2)  # overlaps the 3g at 0-3
        with pytest.raises(pynvml.NVMLError_InsufficientResources):
            w.create_gpu_instance(0, 5, 0, 4)  # overlaps as well
        high = w.create_gpu_instance(0, 9, 4, 4)
        assert (low, high) == (2, 1)  # ids by placement, the upper half first, as real A100s answer
        with pytest.raises(pynvml.NVMLError_InsufficientResources):
            w.create_gpu_instance(0, 19, 6, 1)  # slot 6 belongs to the 3g.20gb at 4-7
        w.create_full_compute_instance(0, low, 3)
        with pytest.raises(pynvml.NVMLError_InUse):
            w.destroy_gpu_instance(0, low)  # compute instance still there
        with pytest.raises(pynvml.NVMLError_InUse):
            w.set_mig_mode(0, False)  # instances exist
        w.destroy_compute_instance(0, low, 0)
        w.destroy_gpu_instance(0, low)
        assert [x.start for x in w.read_gpu(0).gis] == [4]


def test_a_reset_needs_this_process_to_let_go_of_nvml(sim):
    lib = sim("A100-SXM4-40GB", 2, faults=["processes"])
    with NvmlWriter(pynvml) as w:
        assert w.set_mig_mode(0, True) == pynvml.NVML_ERROR_IN_USE  # a process held GPU 0: pending
        lib.kill(4242)
        rc, output = lib.reset([0])  # as the driver would: our own open NVML holds the GPU
        assert rc != 0 and "in use" in output and w.read_gpu(0).mig_current == 0
        assert w.released(lib.reset, [0]) == (0, "GPU reset successful")
        assert lib.nvml_users == 1  # initialised again, and reads work on fresh handles
        assert (w.read_gpu(0).mig_current, w.read_gpu(1).mig_current) == (1, 0)
    assert lib.nvml_users == 0


def test_simulator_enforces_maximum_counts(sim):
    sim("A100-SXM4-40GB", 1)
    with NvmlWriter(pynvml) as w:
        w.set_mig_mode(0, True)
    sim("A100-SXM4-40GB", 1).reset([0])
    with NvmlWriter(pynvml) as w:
        w.create_gpu_instance(0, 20, 0, 1)  # the one 1g.5gb+me
        with pytest.raises(pynvml.NVMLError_InsufficientResources):
            w.create_gpu_instance(0, 20, 1, 1)  # at most one +me instance
        for start in range(1, 7):
            w.create_gpu_instance(0, 19, start, 1)
        assert len(w.read_gpu(0).gis) == 7


def test_size_spec_fills_per_live_model():
    plan = plan_gpu(gpu(current=0, pending=0), PartitionSpec(KIND_SIZE, "2g.10gb"))
    assert [i.start for i in plan.create] == [0, 2, 4]


def test_live_a30_profiles_keep_the_one_media_extension_rule():
    # The driver's own profile table replaces the catalogue's, but not the GPU's media engine count.
    a30 = find_gpu("NVIDIA A30")
    live = [LiveProfile(p.nvml_index, p.id, "MIG " + p.name, p.compute_slices, p.max_instances, p.memory_mib,
                        p.placements) for p in a30.profiles]
    g = gpu(profiles=live, name="NVIDIA A30", pci=(0x20B7 << 16) | 0x10DE)
    assert effective_model(g)[0].media_instances == 1
    with pytest.raises(PlacementError, match=r"at most 1 \+me instance in all"):
        plan_gpu(g, seq("21-6"))
    assert sorted(i.profile.id for i in plan_gpu(g, seq("21-5")).create) == [5, 21]
