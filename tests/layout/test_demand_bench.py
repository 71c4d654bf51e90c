"""A small sample of bench/demand.py (the full runs are in the benchmark): an 8-GPU pool over a quarter
of a day of the mixed family. Nothing is evicted, nothing flaps, every pod is served in its step, and the
planner never beats the integer program's optimum (which would mean a wrong bound or a wrong count)."""

import os
import sys

import pytest

pytest.importorskip("highspy")  # the dev extra's: the integer program of the optimum
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import demand  # noqa: E402


def test_a_short_replay_evicts_nothing_and_stays_at_or_above_the_optimum():
    result = demand.replay("mixed", "A100-80GB", 8, seed=3, steps=12)
    assert result["pods"] > 10
    assert result["evicted"] == 0 and result["flaps"] == 0 and result["unserved_pod_steps"] == 0
    assert result["optimum_exact"] and 0 < result["optimum_gpus"] <= result["planner_gpus"]
    assert result["created"] > 0
    # every step at the exact optimum of its own problem (running pods stay where they are)
    assert result["steps_solved"] > 5 and result["steps_at_optimum"] == result["steps_solved"]


def test_the_step_optimum_agrees_with_brute_force_on_small_cases():
    """bench's step_optimum (its own program) against every placement of the waiting instances beside the
    running ones, by the project's solver, on one or two GPUs: the fewest GPUs holding a pod."""
    import itertools

    import demand_bound
    from node_bootstrap.mig.catalogue import find_gpu
    from node_bootstrap.mig.solver import Instance, complete

    gpu = find_gpu("NVIDIA A100-SXM4-40GB")
    p = gpu.profile_by_name
    cases = [([[("3g.20gb", 4)]], 1, {"4g.20gb": 1}), ([[("3g.20gb", 0)]], 2, {"4g.20gb": 1}),
             ([[("2g.10gb", 0)], [("1g.5gb", 6)]], 1, {"3g.20gb": 2}), ([], 2, {"1g.5gb": 8}),
             ([[("7g.40gb", 0)]], 2, {"1g.5gb": 1, "2g.10gb": 1})]
    for in_use, spare, pending in cases:
        waiting = [n for n, k in sorted(pending.items()) for _ in range(k)]
        gpus = len(in_use) + spare
        best = None
        for spread in itertools.product(range(gpus), repeat=len(waiting)):
            ok = True
            for g in range(gpus):
                fixed = [Instance(p(n), s) for n, s in (in_use[g] if g < len(in_use) else [])]
                mine = [p(w) for w, gg in zip(waiting, spread) if gg == g]
                if mine and complete(gpu, fixed, mine) is None:
                    ok = False
                    break
            if ok:
                used = len(in_use) + len({g for g in spread if g >= len(in_use)})
                best = used if best is None else min(best, used)
        assert demand_bound.step_optimum(gpu, in_use, spare, pending) == ((best, True) if best is not None
                                                                          else (None, False)), (in_use, pending)


def test_the_optimums_configurations_are_every_maximal_multiset_the_solver_places():
    """The bound's own enumeration against brute force through the project's solver: every multiset within
    the instance limits that ``try_place`` accepts, keeping those nothing more fits beside."""
    import itertools

    import demand_bound
    from node_bootstrap.mig.catalogue import find_gpu
    from node_bootstrap.mig.solver import try_place

    gpu = find_gpu("NVIDIA A100-SXM4-80GB")
    names = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
    profiles = [gpu.profile_by_name(n) for n in names]
    fits = set()
    for counts in itertools.product(*[range(p.max_instances + 1) for p in profiles]):
        chosen = [p for p, k in zip(profiles, counts) for _ in range(k)]
        if chosen and try_place(gpu, chosen) is not None:
            fits.add(tuple((n, k) for n, k in zip(names, counts) if k))
    maximal = {c for c in fits if not any(demand_bound._dominates(o, c) for o in fits)}
    assert set(demand_bound.configurations(gpu, names)) == {tuple(sorted(c)) for c in maximal}
    assert (("1g.10gb", 7),) in maximal and (("3g.40gb", 1), ("4g.40gb", 1)) in maximal
