"""Changes that serve (issue 35, item 2): every GPU a plan changes is changed for a pod or headroom it
serves. The property: for every plan, dropping any one GPU's change (that GPU as it is, the rest of the plan
carried out) leaves a pod or a headroom instance of some profile unserved, or leaves more GPUs holding pods,
once the waiting pods bind. The binding below is this file's own, written from the model the docs state
(docs/auto-pools.md "What it never does"; bench/demand.py binds single-instance pods the same way): pods in
key order; one instance: the GPU with the most compute in use that has an idle one of its profile (ties: the
first GPU); several: the node with the most compute in use that has enough idle ones (ties: the first node),
from its busiest GPUs first.

And the filed cases: pods no node of the pool can hold are "not counted" (a count beyond a node, one of
10**8, a profile the GPUs lack), cost nothing and never switch the exact solve off."""

from collections import Counter

import pytest
from hypothesis import example, given, settings

from functions.decision.layout import CHANGE_NONE, WHOLE_GPU, Bounds, GpuSupply, Instance, PodDemand, plan
from node_bootstrap.mig.catalogue import find_gpu
from tests.layout.test_planner_properties import applied, bounds, demands, pools

A80 = "NVIDIA A100-SXM4-80GB"
A40 = "NVIDIA A100-SXM4-40GB"


def bind(supply, demand, limits):
    """(per profile: waiting instances left unbound plus headroom missing, GPUs holding a pod)."""
    gpus = [s for s in supply if s.mig and not s.busy]
    compute = {}
    state = []
    for s in gpus:
        model = find_gpu(s.model)
        for i in s.instances:
            compute[i.profile] = model.profile_by_name(i.profile).compute_slices
        state.append({"node": s.node, "used": sum(compute[i.profile] for i in s.instances if i.in_use),
                      "holds": any(i.in_use for i in s.instances),
                      "idle": Counter(i.profile for i in s.instances if not i.in_use)})
    short = Counter()
    for d in sorted((d for d in demand if d.pending and d.profile != WHOLE_GPU), key=lambda d: d.key):
        if d.count == 1:
            best = None
            for g in state:
                if g["idle"][d.profile] > 0 and (best is None or g["used"] > best["used"]):
                    best = g
            chosen = [best] if best is not None else []
        else:
            nodes = []
            for g in state:
                if g["node"] not in nodes:
                    nodes.append(g["node"])
            best = None
            for node in nodes:
                mine = [g for g in state if g["node"] == node]
                if sum(g["idle"][d.profile] for g in mine) >= d.count and \
                        (best is None or sum(g["used"] for g in mine) > sum(g["used"] for g in best)):
                    best = mine
            chosen = [] if best is None else sorted(best, key=lambda g: -g["used"])  # stable: ties in order
        if not chosen:
            short[d.profile] += d.count
            continue
        left = d.count
        for g in chosen:
            while left and g["idle"][d.profile] > 0:
                g["idle"][d.profile] -= 1
                g["used"] += compute[d.profile]
                g["holds"] = True
                left -= 1
    for name, k in limits.headroom:
        spare = sum(g["idle"][name] for g in state)
        short[name] += max(0, k - spare)
    return short, sum(1 for g in state if g["holds"])


def assert_every_change_serves(supply, demand, limits, result):
    assert not any("unchecked" in r for r in result.reasons)
    left_out = {key for key, _ in result.not_counted}
    counted = [d for d in demand if d.key not in left_out]
    after = applied(supply, result)
    short, holding = bind(after, counted, limits)
    for k, t in enumerate(result.targets):
        if t.change == CHANGE_NONE:
            continue
        without = list(after)
        without[k] = supply[k]  # this GPU as it is; every other change carried out
        less, fewer = bind(without, counted, limits)
        assert fewer > holding or any(less[n] > short[n] for n in less), (
            "dropping %s GPU %d's change serves as much on as many GPUs: %s" % (t.node, t.index, t.reason))


@settings(max_examples=40)
@given(pools(), demands, bounds)
# the filed shape: two 3g.20gb pods wait, idle instances serve them, and the exact answer also destroyed an
# idle 3g.20gb on a GPU nothing uses ("3g.20gb idle + ... -> ... for nothing")
@example(supply=[GpuSupply("n0", 0, A40, (Instance("4g.20gb", 0, False),)),
                 GpuSupply("n1", 0, A40, (Instance("2g.10gb", 0, False), Instance("1g.5gb+me", 2, False))),
                 GpuSupply("n1", 1, A40, (Instance("3g.20gb", 0, False),)),
                 GpuSupply("n1", 2, A40, (Instance("1g.5gb+me", 0, False), Instance("2g.10gb", 2, False),
                                          Instance("3g.20gb", 4, False)))],
         demand=[PodDemand("ns/p0", "d", "4g.20gb"), PodDemand("ns/p1", "d", "3g.20gb"),
                 PodDemand("ns/p2", "d", "3g.20gb")], limits=Bounds())
def test_dropping_any_one_gpus_change_leaves_a_pod_unserved_or_costs_a_gpu(supply, demand, limits):
    supply = sorted(supply, key=lambda s: (s.node, s.index))
    assert_every_change_serves(supply, demand, limits, plan(supply, demand, limits))


def test_the_filed_shape_destroys_nothing_for_nothing():
    supply = [GpuSupply("n0", 0, A40, (Instance("4g.20gb", 0, False),)),
              GpuSupply("n1", 0, A40, (Instance("3g.20gb", 0, False),)),
              GpuSupply("n1", 1, A40, (Instance("3g.20gb", 0, False), Instance("4g.20gb", 4, False)))]
    demand = [PodDemand("ns/p0", "d", "4g.20gb"), PodDemand("ns/p1", "d", "3g.20gb"),
              PodDemand("ns/p2", "d", "3g.20gb")]
    result = plan(supply, demand, Bounds())
    assert not any("for nothing" in r for r in result.reasons)
    assert all(not t.destroy or t.create for t in result.targets)
    assert_every_change_serves(supply, demand, Bounds(), result)


def eight_gpu_nodes(nodes, layout=("7g.80gb",)):
    """Idle GPUs on 8-GPU A100 80GB nodes, each GPU holding ``layout`` (idle)."""
    starts = {"7g.80gb": [0], "1g.10gb": list(range(7)), "3g.40gb": [0, 4]}
    out = []
    for n in range(nodes):
        for i in range(8):
            inst, seen = [], Counter()
            for name in layout:
                inst.append(Instance(name, starts[name][seen[name]], False))
                seen[name] += 1
            out.append(GpuSupply("node-%d" % n, i, A80, tuple(inst)))
    return out


@pytest.mark.parametrize("count", [57, 224, 10 ** 8])
def test_a_pod_asking_more_than_a_node_holds_is_not_counted_and_changes_nothing(count):
    supply = eight_gpu_nodes(4)  # 32 idle 7g.80gb GPUs; a node holds at most 56 x 1g.10gb
    greedy = PodDemand("ns/greedy", "job ns/greedy", "1g.10gb", count)
    result = plan(supply, [greedy], Bounds())
    assert result.changes == () and result.unserved == () and result.new_node == ()
    shown = count if count < 113 else "over 112"  # counts are capped before anything counts them
    assert result.not_counted == (("ns/greedy", "asks %sx 1g.10gb, more than a node of the pool holds (at most 56 "
                                                "on 8 GPUs)" % shown),)
    # the pod after it is served as if the greedy one were not there
    fair = PodDemand("ns/fair", "deployment ns/fair", "7g.80gb")
    assert plan(supply, [greedy, fair], Bounds()).targets == plan(supply, [fair], Bounds()).targets


def test_56_on_one_node_is_counted_and_planned_on_one_node():
    result = plan(eight_gpu_nodes(2), [PodDemand("ns/big", "job ns/big", "1g.10gb", 56)], Bounds())
    assert result.not_counted == () and result.unserved == ()
    assert {t.node for t in result.changes} == {"node-0"} and len(result.changes) == 8


def test_a_pod_over_several_profiles_counts_what_they_need_together():
    # 50 x 1g.10gb and 10 x 2g.20gb each fit an 8-GPU node alone, not together (70 compute slices of 56)
    asks = [PodDemand("ns/two", "pod ns/two", "1g.10gb", 50), PodDemand("ns/two", "pod ns/two", "2g.20gb", 10)]
    result = plan(eight_gpu_nodes(1), asks, Bounds())
    assert result.changes == () and [k for k, _ in result.not_counted] == ["ns/two"]
    assert "50x 1g.10gb + 10x 2g.20gb" in result.not_counted[0][1]


def test_whole_gpus_beyond_a_node_are_not_counted():
    supply = [GpuSupply("a", i, A80, (), mig=False) for i in range(8)]
    result = plan(supply, [PodDemand("ns/w", "pod ns/w", WHOLE_GPU, 9)], Bounds())
    assert result.unserved == () and [k for k, _ in result.not_counted] == ["ns/w"]


def test_a_profile_the_gpus_lack_does_not_switch_off_the_exact_solve():
    pytest.importorskip("highspy")
    # A pool where the search alone uses more GPUs than needed (tests/layout/test_planner_exact.py's kind):
    # one stray pod asking a profile no A100 40GB has must not change the answer.
    supply = [GpuSupply("n0", 0, A40, (Instance("4g.20gb", 0, False),)),
              GpuSupply("n1", 0, A40, (Instance("3g.20gb", 0, False),)),
              GpuSupply("n1", 1, A40, (Instance("3g.20gb", 0, False),))]
    demand = [PodDemand("ns/p0", "d", "4g.20gb"), PodDemand("ns/p1", "d", "3g.20gb"),
              PodDemand("ns/p2", "d", "3g.20gb")]
    stray = PodDemand("ns/stray", "pod ns/stray", "1g.12gb")
    alone, with_stray = plan(supply, demand, Bounds()), plan(supply, demand + [stray], Bounds())
    assert with_stray.targets == alone.targets and with_stray.unserved == ()
    assert with_stray.not_counted == (("ns/stray", "asks 1g.12gb, which no GPU of the pool has (A100-SXM4-40GB)"),)
    # and the exact answer is the better one: the pods fit on two GPUs, not three
    holding = bind(applied(supply, alone), demand, Bounds())[1]
    assert holding == 2


def test_a_pod_asking_several_that_no_node_gives_together_waits_for_a_new_node_not_spread():
    # each node has room for three 1g.10gb beside its running 4g.40gb; a pod asking four needs one node
    supply = [GpuSupply(n, 0, A80, (Instance("4g.40gb", 0, True),)) for n in ("a", "b")]
    result = plan(supply, [PodDemand("ns/four", "job ns/four", "1g.10gb", 4)], Bounds())
    assert result.changes == () and result.unserved == (("1g.10gb", 4),)
    assert result.new_node  # the autoscaler is asked for a node that holds them
    three = plan(supply, [PodDemand("ns/three", "job ns/three", "1g.10gb", 3)], Bounds())
    assert [len(t.create) for t in three.targets] == [3, 0] and three.unserved == ()
