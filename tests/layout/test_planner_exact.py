"""The exact form of a small pool's step (functions/decision/layout/exact.py, HiGHS): on seeded random pools
the plan with it never leaves more GPUs holding pods than the greedy search alone (both bound as a
bin-packing scheduler binds), sometimes fewer; its plans keep every rule the search's keep (placeable, every
used instance kept, nothing disallowed created, no change when asked again with the same demand)."""

import random
from collections import Counter

import pytest

from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan, planner
from functions.decision.layout.exact import gpus_after_binding
from node_bootstrap.mig.catalogue import find_gpu
from node_bootstrap.mig.solver import complete
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
