"""A valid layout is kept wherever it sits: the plan keeps a largest set of existing instances that can be
completed to the request and places the rest around them (checked against a brute force), and a node
laid out by someone else (nvidia-smi, mig-parted, ACK) in a simulator state file is left alone."""

import json
import random
import subprocess
from collections import Counter

import pytest

from node_bootstrap.driver.live import LiveCi, LiveGi, LiveGpu
from node_bootstrap.mig import KIND_SEQUENCE, KIND_SIZE, PartitionSpec, find_gpu
from node_bootstrap.commands.planner import plan_gpu
from tests.node.nodecli import Node, node_python

A100 = find_gpu("NVIDIA A100-SXM4-40GB")
A30 = find_gpu("NVIDIA A30")
PCI = {A100.key: (0x20B0 << 16) | 0x10DE, A30.key: (0x20B7 << 16) | 0x10DE}


def live_gpu(model, gis):
    return LiveGpu(0, model.name, PCI[model.key], "", "", 1, 1, (), tuple(gis), (), ())


def live_gi(gi_id, profile, start, cis=1):
    return LiveGi(gi_id, profile.id, start, profile.memory_slices,
                  tuple(LiveCi(c, 0, profile.compute_slices // cis) for c in range(cis)))


def seq(*profiles):
    return PartitionSpec(KIND_SEQUENCE, "-".join(str(p.id) for p in profiles))


# --- the pure planner ---------------------------------------------------------------------------------

def test_the_requested_instances_at_other_valid_starts_are_all_kept():
    p = A100.profile_by_name
    # The solver alone would put 3g at 0, 2g at 4, 1g at 6; nvidia-smi made 1g at 0, 2g at 2, 3g at 4.
    gis = [live_gi(7, p("1g.5gb"), 0), live_gi(3, p("2g.10gb"), 2), live_gi(1, p("3g.20gb"), 4)]
    plan = plan_gpu(live_gpu(A100, gis), PartitionSpec(KIND_SEQUENCE, "3g.20gb-2g.10gb-1g.5gb"))
    assert plan.converged and plan.action_count == 0
    assert [g.id for g in plan.keep] == [7, 3, 1] and plan.destroy_gis == () and plan.create == ()
    assert [(i.profile.name, i.start) for i in plan.target.instances] == [("1g.5gb", 0), ("2g.10gb", 2),
                                                                         ("3g.20gb", 4)]
    # the node label still names the request in the solver's normal order
    assert plan.layout.sequence == "3g.20gb-2g.10gb-1g.5gb"


def test_the_largest_completable_part_is_kept_and_the_rest_placed_around_it():
    p = A100.profile_by_name
    # 1g at 0 and 3g at 4 exist; 2g.10gb fits at 2 between them.
    gis = [live_gi(2, p("1g.5gb"), 0), live_gi(1, p("3g.20gb"), 4)]
    plan = plan_gpu(live_gpu(A100, gis), PartitionSpec(KIND_SEQUENCE, "3g.20gb-2g.10gb-1g.5gb"))
    assert [g.id for g in plan.keep] == [2, 1] and plan.destroy_gis == ()
    assert [(i.profile.name, i.start) for i in plan.create] == [("2g.10gb", 2)]
    # 1g at 1 and 1g at 5: a 3g.20gb (starts 0 or 4) fits only if one goes; the other stays
    gis = [live_gi(1, p("1g.5gb"), 1), live_gi(2, p("1g.5gb"), 5)]
    plan = plan_gpu(live_gpu(A100, gis), PartitionSpec(KIND_SEQUENCE, "3g.20gb-1g.5gb-1g.5gb"))
    assert len(plan.keep) == 1 and len(plan.destroy_gis) == 1
    assert sorted((i.profile.name, i.start) for i in plan.target.instances)[-1][0] == "3g.20gb"


def test_where_nothing_fits_the_solvers_layout_is_built():
    p = A100.profile_by_name
    gis = [live_gi(1, p("1g.5gb"), 3), live_gi(2, p("2g.10gb"), 4)]  # neither is part of the request
    plan = plan_gpu(live_gpu(A100, gis), PartitionSpec(KIND_SEQUENCE, "4g.20gb-3g.20gb"))
    assert plan.keep == () and plan.destroy_gis == (1, 2)
    assert plan.target == plan.layout


def test_among_equal_sets_the_one_whose_compute_instances_are_right_is_kept():
    p = A100.profile_by_name
    gis = [live_gi(1, p("2g.10gb"), 0, cis=2), live_gi(2, p("2g.10gb"), 2, cis=1)]
    # one 2g.10gb is asked for and either could stay (the 3g.20gb goes to 4): the one with one full-size
    # compute instance stays, not the one with two 1-slice ones
    plan = plan_gpu(live_gpu(A100, gis), PartitionSpec(KIND_SEQUENCE, "2g.10gb-3g.20gb"))
    assert [g.id for g in plan.keep] == [2] and plan.destroy_gis == (1,) and plan.create_cis == ()
    # a 4g.20gb needs slots 0-3: neither can stay
    plan = plan_gpu(live_gpu(A100, gis), PartitionSpec(KIND_SEQUENCE, "2g.10gb-4g.20gb"))
    assert plan.keep == () and plan.destroy_gis == (1, 2)


# --- against a brute force --------------------------------------------------------------------------

def all_layouts(gpu):
    """Every valid set of (profile, start) on ``gpu``, by plain include/exclude enumeration of placements.

    Independent of the solver: only the hardware rules (no overlap, per-profile limits, compute slices,
    the A30's one +me instance)."""
    cands = [(p, pl.start, pl.size) for p in gpu.profiles for pl in p.placements]
    out = []

    def ok(chosen):
        counts = Counter(p for p, _, _ in chosen)
        if any(n > p.max_instances for p, n in counts.items()):
            return False
        if sum(p.compute_slices for p, _, _ in chosen) > gpu.compute_slices:
            return False
        return not (gpu.key == "A30" and sum(n for p, n in counts.items() if p.name.endswith("+me")) > 1)

    def walk(i, used, chosen):
        if i == len(cands):
            out.append(tuple(chosen))
            return
        walk(i + 1, used, chosen)
        p, start, size = cands[i]
        bits = ((1 << size) - 1) << start
        if not used & bits and ok(chosen + [(p, start, size)]):
            walk(i + 1, used | bits, chosen + [(p, start, size)])

    walk(0, 0, [])
    return out


@pytest.mark.parametrize("gpu", [A100, A30], ids=lambda g: g.key)
def test_kept_count_is_the_maximum_over_all_completable_subsets(gpu):
    layouts = [lay for lay in all_layouts(gpu) if lay]
    rng = random.Random(20261201)
    checked = 0
    for _ in range(250):
        start_state = rng.choice(layouts)
        request = [p for p, _, _ in rng.choice(layouts)]
        gis = [live_gi(n + 1, p, s, cis=rng.choice((1, 1, 0))) for n, (p, s, _) in enumerate(start_state)]
        plan = plan_gpu(live_gpu(gpu, gis), seq(*request))
        existing = set((p.id, s) for p, s, _ in start_state)
        want = Counter(p.id for p in request)
        best = max(len(existing & set((p.id, s) for p, s, _ in lay))
                   for lay in layouts if Counter(p.id for p, _, _ in lay) == want)
        assert len(plan.keep) == best, (start_state, request)
        # the target is the request, holds every kept instance where it is, and is itself valid
        target = set((i.profile.id, i.start) for i in plan.target.instances)
        assert Counter(i.profile.id for i in plan.target.instances) == want
        assert set((g.profile_id, g.start) for g in plan.keep) <= target
        assert any(set((p.id, s) for p, s, _ in lay) == target for lay in layouts)
        # and once applied, the plan for it changes nothing
        after = [live_gi(n + 1, i.profile, i.start) for n, i in enumerate(plan.target.instances)]
        assert plan_gpu(live_gpu(gpu, after), seq(*request)).converged
        checked += 1
    assert checked == 250


def test_a_size_request_keeps_existing_instances_of_that_profile():
    p = A100.profile_by_name("1g.5gb")
    gis = [live_gi(1, p, 1), live_gi(2, p, 4)]
    plan = plan_gpu(live_gpu(A100, gis), PartitionSpec(KIND_SIZE, "1g.5gb"))
    assert [g.id for g in plan.keep] == [1, 2] and len(plan.create) == 5 and plan.destroy_gis == ()


# --- a node laid out by someone else, from a simulator state file ------------------------------------

def write_state(node, gpus):
    """A simulator state file (version 1, docs/simulator.md) holding ``gpus``: lists of (profile, start)."""
    state = {"version": 1, "gpu": node.gpu, "count": len(gpus), "boots": 0, "gpus": []}
    model = find_gpu(node.gpu)
    for layout in gpus:
        gis = []
        for n, (name, start) in enumerate(layout):
            profile = model.profile_by_name(name)
            ci_profile = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[profile.compute_slices]
            gis.append({"id": n + 1, "profile_id": profile.id, "start": start, "size": profile.memory_slices,
                        "cis": [{"id": 0, "profile_id": ci_profile}]})
        state["gpus"].append({"mig_current": 1, "mig_pending": 1, "gis": gis})
    with open(node.state, "w") as fh:
        json.dump(state, fh)


def test_a_node_partitioned_elsewhere_is_kept_as_it_is(tmp_path):
    node = Node(tmp_path, count=2)
    write_state(node, [[("1g.5gb", 0), ("2g.10gb", 2), ("3g.20gb", 4)],
                       [("2g.10gb", 0), ("1g.5gb", 2), ("3g.20gb", 4)]])
    before = open(node.state).read()
    res = node.run("plan", "--sequence", "3g.20gb-2g.10gb-1g.5gb")
    assert res.rc == 0 and res.json["converged"] and res.json["mutating_calls"] == 0
    assert [(len(g["keep"]), len(g["destroy"]), len(g["create"])) for g in res.json["gpus"]] == [(3, 0, 0)] * 2
    text = subprocess.run([node_python(), "-m", "node_bootstrap"] + node.args("plan", "--sequence", "9-14-19"),
                          cwd=node.dir, env=node.env(), stdout=subprocess.PIPE, universal_newlines=True,
                          timeout=120).stdout
    assert text.count("keep 3, destroy 0, create 0") == 2, text
    res = node.run("apply", "--sequence", "3g.20gb-2g.10gb-1g.5gb")
    assert res.rc == 0 and res.json["outcome"] == "success" and res.json["changes"] == 0, res.stderr
    assert res.json["sequence"] == "3g.20gb-2g.10gb-1g.5gb"
    assert open(node.state).read() == before  # not one NVML call changed the simulated driver


def test_apply_fills_in_around_what_exists(tmp_path):
    node = Node(tmp_path, count=1)
    write_state(node, [[("1g.5gb", 0), ("3g.20gb", 4)]])
    res = node.run("apply", "--sequence", "3g.20gb-2g.10gb-1g.5gb")
    assert res.rc == 0, res.stderr
    assert res.json["changes"] == 2  # one GPU instance and its compute instance, nothing destroyed
    gis = sorted((gi["profile_id"], gi["start"], gi["id"]) for gi in node.sim()["gpus"][0]["gis"])
    # the existing ones keep their ids; the new 2g.10gb at 2 gets 6, as on a real A100 (sim.driver.gpu_instance_id)
    assert gis == [(9, 4, 2), (14, 2, 6), (19, 0, 1)]
