"""The exact form of a small pool's step (functions/decision/layout/exact.py, HiGHS): on seeded random pools
the plan with it never leaves more GPUs holding pods than the greedy search alone (both bound as a
bin-packing scheduler binds), sometimes fewer; its plans keep every rule the search's keep (placeable, every
used instance kept, nothing disallowed created, no change when asked again with the same demand)."""

import os
import random
import sys
from collections import Counter

import pytest

from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan, planner
from functions.decision.layout import exact
from functions.decision.layout.exact import gpus_after_binding
from node_bootstrap.mig.catalogue import find_gpu
from node_bootstrap.mig.solver import check_budget, complete
from tests.layout.test_planner_properties import applied

pytest.importorskip("highspy")

MODEL = "NVIDIA A100-SXM4-40GB"
GPU = find_gpu(MODEL)
PROFILES = ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]


def random_case(rng):
    supply = []
    for n in range(rng.randint(1, 3)):
        for i in range(rng.randint(1, 4)):
            placed = []
            for name in rng.sample(PROFILES * 3, rng.randint(0, 5)):
                layout = complete(GPU, placed, [GPU.profile_by_name(name)])
                if layout is not None:
                    placed = list(layout.instances)
            supply.append(GpuSupply("n%d" % n, i, MODEL, tuple(
                Instance(x.profile.name, x.start, rng.random() < 0.5) for x in placed)))
    demand = [PodDemand("ns/p%02d" % k, "deployment a/%d" % (k % 3), rng.choice(PROFILES))
              for k in range(rng.randint(1, 10))]
    return supply, demand


def after_binding(supply, result, demand):
    pool = applied(supply, result)
    waiting = [d.profile for d in sorted(demand, key=lambda d: d.key) for _ in range(d.count)]
    states = [[(i.profile, GPU.profile_by_name(i.profile).compute_slices, i.in_use) for i in g.instances]
              for g in pool]
    return gpus_after_binding(states, waiting)


def test_the_exact_step_never_uses_more_gpus_than_the_search_and_sometimes_fewer(monkeypatch):
    rng = random.Random(27)
    fewer = 0
    for _ in range(150):
        supply, demand = random_case(rng)
        bounds = Bounds(profiles=frozenset(PROFILES))
        with_exact = plan(supply, demand, bounds)
        monkeypatch.setattr(planner, "exact_available", lambda: False)
        search = plan(supply, demand, bounds)
        monkeypatch.undo()
        if with_exact.unserved or search.unserved:
            continue
        ours, theirs = after_binding(supply, with_exact, demand), after_binding(supply, search, demand)
        assert ours <= theirs, (supply, demand)
        fewer += ours < theirs
        for t, s in zip(with_exact.targets, supply):  # every instance in use kept where it is
            assert {(i.profile, i.start) for i in s.instances if i.in_use} <= set(t.layout)
        again = plan(applied(supply, with_exact), demand, bounds, with_exact)  # the same demand: no change
        assert not again.changes, [t.reason for t in again.changes]
    assert fewer > 0  # the search alone is not always optimal: the exact form must show where it is not


# Pools of 32 A100 80GB GPUs of the kind the issue filed (issue 35: 1 to 7 s, past the 1 s limit, in the
# per-GPU form): GPUs with running pods and idle instances beside them, GPUs left with idle instances only
# (several in the same state), empty ones, and some 60 pods of six profiles waiting. Taken from
# bench/demand.py's steps where the per-GPU form ran out of time.
A80 = find_gpu("NVIDIA A100-SXM4-80GB")
IDLE_ONLY = [[("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]] + \
    [[("1g.20gb", 6), ("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)]] * 4 + \
    [[("1g.10gb", 0), ("1g.10gb", 1), ("1g.20gb", 6), ("2g.20gb", 2), ("2g.20gb", 4)]] + \
    [[("1g.10gb", s) for s in range(6)] + [("1g.20gb", 6)]] * 2 + [[("1g.10gb", s) for s in range(7)]] * 3 + \
    [[("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6)]]
USED = [  # (in use, idle) per GPU
    ([], [("7g.80gb", 0)]), ([("7g.80gb", 0)], []), ([("7g.80gb", 0)], []), ([("7g.80gb", 0)], []),
    ([], [("7g.80gb", 0)]), ([("3g.40gb", 4), ("4g.40gb", 0)], []), ([("3g.40gb", 4), ("4g.40gb", 0)], []),
    ([("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)], []), ([("2g.20gb", 2), ("3g.40gb", 4)], [("2g.20gb", 0)]),
    ([("1g.20gb", 6), ("2g.20gb", 0), ("2g.20gb", 2)], [("2g.20gb", 4)]),
    ([("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 3), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.20gb", 6)], [("1g.10gb", 2)]),
    ([("1g.10gb", s) for s in (0, 1, 3, 4, 5, 6)], [("1g.10gb", 2)]),
    ([("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2)], [("1g.20gb", 6), ("2g.20gb", 4)]),
    ([("3g.40gb", 0), ("3g.40gb", 4)], []), ([("3g.40gb", 4), ("4g.40gb", 0)], []),
    ([("2g.20gb", 0), ("3g.40gb", 4)], [("2g.20gb", 2)]), ([("1g.20gb", 6), ("4g.40gb", 0)], [("2g.20gb", 4)]),
    ([("1g.10gb", 6), ("2g.20gb", 4)], [("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2)]),
    ([("1g.10gb", 0), ("1g.10gb", 2), ("3g.40gb", 4)], [("1g.10gb", 1), ("1g.10gb", 3)]),
    ([("3g.40gb", 0), ("3g.40gb", 4)], []), ([], [("3g.40gb", 4), ("4g.40gb", 0)]),
    ([], [("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4)]), ([], [("3g.40gb", 0), ("3g.40gb", 4)]),
    ([], [("3g.40gb", 0), ("3g.40gb", 4)]), ([], [("1g.10gb", 4), ("1g.10gb", 5)])]


def _placed(pairs):
    return [(A80.profile_by_name(n), s) for n, s in pairs]


@pytest.mark.parametrize("pool, pending", [
    ([([], idle) for idle in IDLE_ONLY], {"1g.10gb": 38, "2g.20gb": 16, "1g.20gb": 7, "3g.40gb": 1}),
    (USED, {"3g.40gb": 6, "1g.10gb": 10, "2g.20gb": 7, "4g.40gb": 1, "7g.80gb": 1, "1g.20gb": 1}),
], ids=["idle-gpus-alike", "running-pods-beside-idle"])
def test_a_32_gpu_pool_of_the_filed_kind_is_solved_to_proven_optimality_at_the_independent_optimum(pool, pending):
    """The pattern model (identical GPUs one class, two lexicographic solves) proves the optimum (HiGHS'
    status, with a limit no machine reaches: speed is bench/demand.py's), and its GPUs holding pods equal
    bench's step_optimum, an independent per-GPU program; every GPU of the answer keeps the MIG rules and
    every waiting pod has a free instance of its profile."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
    import demand_bound

    pool = pool + [([], [])] * (32 - len(pool))
    steps = [exact.Step(A80, _placed(busy), _placed(idle), bool(busy)) for busy, idle in pool]
    names = sorted(p.name for p in A80.profiles)
    stats = {}
    answer = exact.solve(steps, dict(pending), {}, names, time_limit=600, stats=stats)
    assert stats["status"] == "Optimal" and answer is not None
    holding, free = 0, Counter()
    for step, (kept, made, pods) in zip(steps, answer):
        mine = [step.idle[i] for i in kept] + list(made)
        layout = list(step.fixed) + mine
        assert check_budget(A80, [p for p, _ in layout]) is None
        taken = 0
        for p, s in layout:
            bits = ((1 << p.memory_slices) - 1) << s
            assert not taken & bits and any(pl.start == s for pl in p.placements)
            taken |= bits
        here = Counter(p.name for p, _ in mine)
        assert all(here[n] >= k for n, k in pods.items())
        free.update(pods)
        holding += bool(step.used or pods or any(p.name in pending for p, _ in mine))
    assert free == Counter(pending)
    in_use = [busy for busy, _ in pool if busy]
    best, proven = demand_bound.step_optimum(A80, in_use, len(pool) - len(in_use), dict(pending))
    assert proven and holding == best


def test_a_gpu_whose_instances_are_still_being_created_is_not_ordered_as_an_empty_one():
    """The per-GPU form ordered every GPU without idle instances as if empty, so a GPU holding only an
    instance still being created (no room for another +me) came first and the empty GPU could not be used:
    it destroyed an idle 7g.80gb instead (2 changes). Classes group only GPUs in the same state."""
    me = A80.profile_by_name("1g.10gb+me")
    steps = [exact.Step(A80, [], _placed([("7g.80gb", 0)]), False),
             exact.Step(A80, [], _placed([("7g.80gb", 0)]), False),
             exact.Step(A80, _placed([("1g.10gb", 0), ("1g.10gb+me", 1)]), [], False),
             exact.Step(A80, [], [], False),
             exact.Step(A80, _placed([("7g.80gb", 0)]), [], True)]
    stats = {}
    answer = exact.solve(steps, {"1g.10gb+me": 1}, {"7g.80gb": 1}, ["1g.10gb+me", "7g.80gb"], time_limit=600,
                         stats=stats)
    assert stats["status"] == "Optimal"
    assert answer[0][0] == [0] and answer[1][0] == [0]  # both idle 7g.80gb kept
    assert answer[3][1] == [(me, 6)] and answer[3][2] == {"1g.10gb+me": 1}
    assert sum(len(made) for _, made, _ in answer) == 1


def test_a_pod_the_search_leaves_short_is_served_when_the_exact_form_can_serve_every_pod():
    """One H200 with an idle 1g.35gb at slot 0; pods ask 1g.35gb and 4g.71gb. The search never destroys an idle
    instance a waiting pod could use, so it found no room for the 4g.71gb and asked for a new node; moving the
    1g.35gb to slot 6 serves both on this GPU."""
    from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan

    supply = [GpuSupply("n0", 0, "NVIDIA H200", (Instance("1g.35gb", 0, False),))]
    demand = [PodDemand("ns/small", "o", "1g.35gb"), PodDemand("ns/big", "o", "4g.71gb")]
    result = plan(supply, demand, Bounds())
    assert result.unserved == () and result.new_node == (), result
    (target,) = result.changes
    assert sorted(target.layout) == [("1g.35gb", 6), ("4g.71gb", 0)]
    assert not any("beyond what the pool's GPUs can hold" in r for r in result.reasons)
    # A pool without the compute for every pod is not asked to prove it (each step of a scale-out would): the
    # search's shortfall stands, whole (the exact form serves every pod or none)
    full = plan(supply, demand + [PodDemand("ns/big-%d" % i, "o", "4g.71gb") for i in range(2)], Bounds())
    assert dict(full.unserved) == {"4g.71gb": 3}


def test_the_exact_form_is_not_asked_again_where_the_pool_cannot_hold_the_pods_and_the_headroom(monkeypatch):
    """The exact form must place the headroom too: where the pool's free compute cannot hold it beside the pods
    that wait, asking it again after the search left pods short only spends up to its 1 s limit."""
    calls = []
    solve = planner.solve_exactly
    monkeypatch.setattr(planner, "solve_exactly", lambda *a, **k: calls.append(1) or solve(*a, **k))
    supply = [GpuSupply("n0", 0, "NVIDIA H200", (Instance("1g.35gb", 0, False),))]
    demand = [PodDemand("ns/small", "o", "1g.35gb"), PodDemand("ns/big", "o", "4g.71gb")]
    crowded = plan(supply, demand, Bounds(headroom={"3g.71gb": 1}))  # 1 + 4 + 3 slices of 7
    assert calls == [] and dict(crowded.unserved).get("4g.71gb") == 1
    assert plan(supply, demand, Bounds()).unserved == () and calls == [1]


@pytest.mark.parametrize("usable, asked", [(96, 1), (97, 0)])
def test_the_exact_form_is_asked_on_pools_of_at_most_96_usable_gpus(monkeypatch, usable, asked):
    calls = []
    monkeypatch.setattr(planner, "solve_exactly", lambda *a, **k: calls.append(1))
    supply = [GpuSupply("n%02d" % (i // 8), i % 8, "NVIDIA A100-SXM4-80GB", ()) for i in range(usable)]
    plan(supply, [PodDemand("ns/p", "o", "1g.10gb")], Bounds())
    assert len(calls) == asked


def test_a_solve_not_proven_optimal_in_time_changes_nothing(monkeypatch):
    """HiGHS stopped by its time limit returns no answer: the search's plan stands, as without HiGHS."""
    supply = [GpuSupply("n0", 0, "NVIDIA H200", (Instance("1g.35gb", 0, False),))]
    demand = [PodDemand("ns/small", "o", "1g.35gb"), PodDemand("ns/big", "o", "4g.71gb")]
    solved = plan(supply, demand, Bounds())
    monkeypatch.setattr(planner, "exact_available", lambda: False)
    search = plan(supply, demand, Bounds())
    assert solved != search  # the exact form does change this plan (see the test above)
    monkeypatch.setattr(planner, "exact_available", lambda: True)
    stopped = {}
    real = planner.solve_exactly
    monkeypatch.setattr(planner, "solve_exactly", lambda *a, **k: real(*a, time_limit=1e-9, stats=stopped))
    assert plan(supply, demand, Bounds()) == search and stopped.get("status") == "Time limit reached", stopped
