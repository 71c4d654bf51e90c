"""Ticks of random pools (tests/layout/ticks.py): plan, carry the plan out, bind the waiting pods as the project
models the scheduler, plan again on the pods still waiting. No tick undoes what the tick before made, none
destroys an instance in use. The seeds below found flaps (a pod asking several instances of a profile the pool
is short of, served by the plan while the pods ahead of it in pod order took its instances first, so the next
tick destroyed them for others; 19149: a pod asking a profile the pool no longer allows beside another, not
counted, took what was made for others; 3543, 6594 and 16591: pods asking several profiles kept idle
instances that pods ahead of them in pod order took, and waited while the plan made more for those); the rest
are a sample."""

import pytest

from tests.layout.ticks import check

FOUND = [2984, 3543, 6594, 12044, 13684, 16591, 18079, 19149]


@pytest.mark.parametrize("seed", FOUND + list(range(0, 120)))
def test_no_tick_undoes_the_one_before_nor_destroys_an_instance_in_use(seed):
    assert check(seed) == []


def test_a_pod_asking_several_that_the_pods_ahead_of_it_leave_short_is_not_served_by_the_plan():
    """Seed 2984 by hand: four 3g.40gb pods on one 8-GPU A100 node with room for seven. p04 and p07 ask three
    each, p00 and p05 one: the plan made seven for p00, p04, p07 and left p05 short, but the scheduler binds
    p05 before p07, so p07 waited beside two idle 3g.40gb that the next tick destroyed. Now p07 is unserved,
    and the plan makes no instance that no pod takes."""
    from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan

    a80 = "NVIDIA A100-SXM4-80GB"
    supply = [GpuSupply("n", i, a80, ()) for i in range(3)] + [
        GpuSupply("n", 3, a80, (Instance("3g.40gb", 0, True),))]
    demand = [PodDemand("ns/p00", "o", "3g.40gb"), PodDemand("ns/p04", "o", "3g.40gb", 3),
              PodDemand("ns/p05", "o", "3g.40gb"), PodDemand("ns/p07", "o", "3g.40gb", 3)]
    result = plan(supply, demand, Bounds(profiles={"3g.40gb"}))
    made = sum(len(t.create) for t in result.changes)
    assert made == 5 and dict(result.unserved) == {"3g.40gb": 3}, (result.changes, result.unserved)


def test_a_pod_asking_several_profiles_whose_instances_a_pod_ahead_of_it_takes_keeps_none():
    """Seed 6594 made small: node a runs a pod and has an idle 4g.40gb and 1g.10gb, node b is empty. p01 asks
    both, p00 (ahead of it in pod order) a 4g.40gb. The plan kept a's two for p01 and made a 4g.40gb on b for
    p00, but the scheduler binds p00 first, onto a's 4g.40gb (the busier node): p01 waited, b's 4g.40gb
    served nothing, and the next tick could destroy it for another pod. Now p01 keeps nothing and is
    counted for a new node, and p00 takes what exists."""
    from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan

    a80 = "NVIDIA A100-SXM4-80GB"
    supply = [GpuSupply("a", 0, a80, (Instance("4g.40gb", 0, False), Instance("2g.20gb", 4, True),
                                      Instance("1g.10gb", 6, False))),
              GpuSupply("b", 0, a80, ())]
    demand = [PodDemand("ns/p00", "o", "4g.40gb"), PodDemand("ns/p01", "o", "4g.40gb"),
              PodDemand("ns/p01", "o", "1g.10gb")]
    result = plan(supply, demand, Bounds())
    assert result.changes == () and dict(result.unserved) == {"4g.40gb": 1, "1g.10gb": 1}, result
    assert any("pods ahead of it in pod order" in r for r in result.reasons), result.reasons


@pytest.mark.parametrize("seed", [904, 2252, 2330, 2490, 2523])
def test_an_applied_plan_planned_again_on_the_same_demand_changes_nothing(seed):
    """compose.py's rounds rest where no round changes a GPU; these pools of ticks.py need 5 or 6 rounds (pods
    asking several profiles take, round after round, what the round before made for others). With 4, the
    plan was the first round's and the next ticks changed GPUs again on the same demand."""
    import random

    from functions.decision.layout import plan
    from tests.layout.ticks import applied, pod_asks, pool

    rng = random.Random(seed)
    supply, limits = pool(rng)
    demand = pod_asks(rng, supply)
    result = plan(supply, demand, limits)
    assert plan(applied(supply, result), demand, limits, previous=result).changes == ()
