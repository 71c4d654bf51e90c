"""Issue 37 items 3 and 4: a new node serves the most pods first, as one node shape the autoscaler copies
in one round; a pool with no node still names its new node; new instances go to the busiest nodes so the
others can empty (docs/auto-pools.md "New nodes" and "Consolidation")."""

import os
import sys
from collections import Counter

import pytest

from functions.decision.layout import CHANGE_NONE, Bounds, GpuSupply, Instance, PodDemand, plan

A100 = "NVIDIA A100-SXM4-80GB"
TEMPLATE = Bounds(model=A100, node_gpus=8)  # ecs.ebmgn7e.32xlarge: 8 A100 80GB


def pods(profile, n, owner="serve"):
    return [PodDemand("llm/%s-%s-%d" % (owner, profile, i), "deployment llm/" + owner, profile) for i in range(n)]


def per_node(shape):
    """Per profile, the instances one node of the shape holds."""
    out = Counter()
    for layout, gpus in shape:
        for name, _ in layout:
            out[name] += gpus
    return out


def copies_needed(shape, unserved):
    """How many copies of the template node the autoscaler adds for the unserved instances (None: some profile
    the template lacks still waits after the round)."""
    have = per_node(shape)
    if any(n > 0 and not have[p] for p, n in unserved):
        return None
    return max(-(-n // have[p]) for p, n in unserved if n > 0)


def test_the_filed_case_names_whole_gpu_nodes_first_and_serves_every_pod_in_one_round():
    # issue 37: 1x 1g, 1x 3g and 40x 7g waiting named "1g x4 + 3g" and left the 40 whole-GPU pods for later
    result = plan([], pods("1g.10gb", 1) + pods("3g.40gb", 1) + pods("7g.80gb", 40), TEMPLATE)
    assert dict(result.unserved) == {"1g.10gb": 1, "3g.40gb": 1, "7g.80gb": 40}
    assert result.new_node == (("7g.80gb", 0),)  # the layout most GPUs get: the most pods
    assert sum(n for _, n in result.new_node_shape) == 8
    assert per_node(result.new_node_shape) == {"7g.80gb": 7, "3g.40gb": 1, "1g.10gb": 4}
    # six copies of the node hold all 42 pods: one scale-out round, and no fewer nodes could (40 / 8 > 5)
    assert copies_needed(result.new_node_shape, result.unserved) == 6


def test_a_cold_start_asks_for_every_profile_in_one_round():
    # issue 37: 865x 7g, 279x 4g and 43 small pods took three scale-out rounds
    demand = pods("7g.80gb", 865) + pods("4g.40gb", 279) + pods("1g.10gb", 43)
    result = plan([], demand, TEMPLATE)
    k = copies_needed(result.new_node_shape, result.unserved)
    assert k is not None  # every profile is on the template: nothing waits for a later round
    # the fewest copies of any one 8-GPU shape: a 7g.80gb and a 4g.40gb each take a GPU of their own (one 4g per
    # A100; the 1g.10gb fit beside a 4g), so k copies need ceil(865 / k) + ceil(279 / k) <= 8
    assert k == min(c for c in range(1, 866) if -(-865 // c) + -(-279 // c) <= 8) == 145


def test_when_one_node_cannot_hold_every_profile_the_most_pods_go_first():
    # a one-GPU node holds 7g.80gb or the small ones, not both: the 40 whole-GPU pods first
    result = plan([], pods("1g.10gb", 1) + pods("3g.40gb", 1) + pods("7g.80gb", 40), Bounds(model=A100, node_gpus=1))
    assert result.new_node_shape == (((("7g.80gb", 0),), 1),)


def test_a_pool_with_no_node_names_a_new_node_from_its_template():
    result = plan([], pods("1g.10gb", 1), TEMPLATE)
    assert result.unserved == (("1g.10gb", 1),)
    assert result.new_node and per_node(result.new_node_shape)["1g.10gb"] == 8 * 7
    # without a template (no node, no instance type the family table knows) nothing can be named: said so
    bare = plan([], pods("1g.10gb", 1), Bounds())
    assert bare.new_node == () and bare.new_node_shape == ()
    assert any("no new node's layout can be named" in r for r in bare.reasons)


def gpu(node, index, *instances):
    return GpuSupply(node, index, A100, tuple(Instance(p, s, used) for p, s, used in instances))


def test_a_new_pod_goes_beside_the_busier_node_so_the_other_can_empty():
    # n1 runs one 1g.10gb pod, n2 one 3g.40gb pod; a 1g.10gb pod fits beside either
    supply = [gpu("n1", 0, ("1g.10gb", 0, True)), gpu("n2", 0, ("3g.40gb", 4, True))]
    result = plan(supply, pods("1g.10gb", 1, "new"), Bounds())
    changed = {(t.node, t.index): t.create for t in result.changes}
    assert list(changed) == [("n2", 0)] and [p for p, _ in changed[("n2", 0)]] == ["1g.10gb"]


def test_a_pod_that_needs_a_fresh_gpu_gets_one_on_the_busier_node():
    # each node runs one long pod on GPU 0 and has an empty GPU 1; the 4g.40gb pod fits beside neither pod
    # (one 4g per GPU), so it takes an empty GPU: n2's (7 slices in use) rather than n1's (4), so n1 can empty
    supply = [gpu("n1", 0, ("4g.40gb", 0, True)), gpu("n1", 1),
              gpu("n2", 0, ("7g.80gb", 0, True)), gpu("n2", 1)]
    result = plan(supply, pods("4g.40gb", 1, "new"), Bounds())
    assert [(t.node, t.index) for t in result.changes] == [("n2", 1)]
    assert all(t.change == CHANGE_NONE for t in result.targets if t.node == "n1")


def test_on_equally_busy_nodes_a_repartition_takes_the_gpus_the_scheduler_binds_to_last():
    # two fresh nodes, 4g.40gb on every GPU, none in use; two 4g.40gb pods and one 7g.80gb pod wait. The
    # scheduler binds to idle instances breaking ties by the first GPU, so the 4g pods take a/0 and a/1 unless
    # one of those is repartitioned; the 7g goes to b/1, so node a holds the 4g pods and b the 7g (taking
    # a/0 spread the 4g pods over both nodes: issue 37, a cold start's long pods kept a third node for days)
    fresh = [gpu(n, i, ("4g.40gb", 0, False)) for n in ("a", "b") for i in (0, 1)]
    result = plan(fresh, pods("4g.40gb", 2) + pods("7g.80gb", 1, "big"), Bounds())
    assert [(t.node, t.index, t.layout) for t in result.changes] == [("b", 1, (("7g.80gb", 0),))]
    assert result.unserved == ()


def test_a_repartition_still_goes_to_the_busier_node_first():
    # a runs a pod on GPU 0; a/1, b/0 and b/1 hold an idle 4g.40gb each: the 7g.80gb pod takes a/1 (b can empty)
    supply = [gpu("a", 0, ("7g.80gb", 0, True)), gpu("a", 1, ("4g.40gb", 0, False)),
              gpu("b", 0, ("4g.40gb", 0, False)), gpu("b", 1, ("4g.40gb", 0, False))]
    result = plan(supply, pods("7g.80gb", 1, "big"), Bounds())
    assert [(t.node, t.index) for t in result.changes] == [("a", 1)]


def _bench():
    pytest.importorskip("highspy")  # the bench's bound
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "bench"))
    import demand_peers as dp
    from demand_traces import PodEvent
    from node_bootstrap.mig.catalogue import find_gpu
    return dp, PodEvent, find_gpu(A100)


def test_the_bench_boots_a_new_node_as_the_hook_does_and_counts_it_as_its_template_meanwhile():
    # docs/auto-pools.md "New nodes": a fresh node gets new_node (the shape's first layout) on every GPU and
    # the next plan repartitions idle GPUs for the rest; while it boots, the autoscaler counts the template
    # (the tags). Booting for 3 steps: counted by its boot layout (7g.80gb only) the 1g and 3g pods would
    # look unplaceable and ask for another round.
    dp, PodEvent, a100 = _bench()
    names = {"1g": "1g.10gb", "3g": "3g.40gb", "7g": "7g.80gb"}
    events = [PodEvent("a/1g", "a", "1g", 0, 8), PodEvent("a/3g", "a", "3g", 0, 8)] + \
        [PodEvent("b/%d" % i, "b", "7g", 0, 8) for i in range(12)]
    peer = dp.AutoPool(a100, A100, sorted(names.values()), 0.5)
    seen = []
    plan_step = peer.prepare

    def prepare(step, nodes, waiting, stats):
        if nodes and not seen:  # the nodes as they boot, before the step's plan
            seen.append([{tuple(sorted(g)) for g in n.gpus} for n in nodes])
        plan_step(step, nodes, waiting, stats)

    peer.prepare = prepare
    row = dp.simulate(peer, events, names, 8, 0.5, boot_steps=3)
    assert seen == [[{(("7g.80gb", 0),)}, {(("7g.80gb", 0),)}]]  # two nodes, 7g.80gb on every GPU
    assert row["scale_outs"] == 1 and row["served"] == 14 and row["peak_nodes"] == 2
    assert row["wait_max_min"] == 3 * 30  # every pod at the step its node is ready


def test_the_bench_autoscaler_adds_every_node_of_a_cold_start_in_one_round():
    pytest.importorskip("highspy")  # the bench's bound
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "bench"))
    import demand_peers as dp
    from demand_traces import PodEvent
    from node_bootstrap.mig.catalogue import find_gpu

    names = {"1g": "1g.10gb", "3g": "3g.40gb", "7g": "7g.80gb"}
    events = [PodEvent("a/1g", "a", "1g", 0, 6), PodEvent("a/3g", "a", "3g", 0, 6)] + \
        [PodEvent("b/%d" % i, "b", "7g", 0, 6) for i in range(40)]
    gpu = find_gpu(A100)
    row = dp.simulate(dp.AutoPool(gpu, A100, sorted(names.values()), 0.5), events, names, 6, 0.5)
    assert row["scale_outs"] == 1 and row["served"] == 42 and row["peak_nodes"] == 6


def test_a_profile_the_new_node_leaves_out_is_named_not_dropped_silently():
    # the pool's node is an A100 40GB, its template an A100 80GB: 1g.5gb exists only on the first, so the new
    # node's layout serves the 1g.10gb pod and the plan says the 1g.5gb one is not in it
    from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan

    a40, a80 = "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB"
    supply = [GpuSupply("a", 0, a40, (Instance("7g.40gb", 0, True),))]
    result = plan(supply, [PodDemand("x/a", "x", "1g.5gb"), PodDemand("x/b", "x", "1g.10gb")],
                  Bounds(model=a80, node_gpus=8))
    assert {p for layout, _ in result.new_node_shape for p, _ in layout} == {"1g.10gb"}
    assert any(r.startswith("1 pending 1g.5gb instance not in the new node's layout") for r in result.reasons)
    assert not any("1g.10gb instance not in" in r for r in result.reasons)


def test_each_copy_of_the_new_node_holds_the_largest_pod_asking_several_of_a_profile():
    # 40 pods of 7g.80gb and one pod asking 4x 3g.40gb on one node: the shape served the instance counts
    # over the copies (2x 3g.40gb per node) and no copy held the 4, so the autoscaler, which adds a node only
    # for a pod its template holds, never added one for that pod; one asking 8 fills half a node
    from collections import Counter

    from functions.decision.layout import Bounds, PodDemand, plan

    def per_node(shape):
        out = Counter()  # type: Counter
        for layout, gpus in shape:
            for name, _ in layout:
                out[name] += gpus
        return out

    many = [PodDemand("ns/w%d" % i, "deployment ns/w", "7g.80gb") for i in range(40)]
    for big in (4, 8):
        result = plan([], [PodDemand("ns/big", "pod ns/big", "3g.40gb", big)] + many, Bounds(model=A100, node_gpus=8))
        held = per_node(result.new_node_shape)
        assert held["3g.40gb"] >= big and held["7g.80gb"] >= 1, (big, held)
    # the same pod asked as 4 pods of one 3g.40gb each may spread over the copies: no floor
    result = plan([], [PodDemand("ns/s%d" % i, "deployment ns/s", "3g.40gb") for i in range(4)] + many,
                  Bounds(model=A100, node_gpus=8))
    assert per_node(result.new_node_shape)["3g.40gb"] == 2



def test_a_pod_asking_several_gets_its_reserved_instances_and_the_rest_is_counted_for_a_new_node():
    """ns/p4 asks 2x 2g.12gb+me (an A30 holds one +me instance per GPU). The search reserves two on node-1 for
    it; the check that every change serves a pod bound the pods by name, let others take them, found ns/p4
    unbound and reported it short, while each copy of the new node held one 2g.12gb+me: no node the
    autoscaler could add would ever hold it. Now the reserved pods bind first: ns/p4 is served in the pool,
    and what is short (the pod asking two profiles, no node with both) is counted on top."""
    from collections import Counter

    from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan

    a30 = "NVIDIA A30"
    supply = [GpuSupply("node-0", 0, a30, (Instance("2g.12gb+me", 0, False),)),
              GpuSupply("node-1", 0, a30, (Instance("4g.24gb", 0, True),)),
              GpuSupply("node-1", 1, a30, ()),
              GpuSupply("node-1", 2, a30, (Instance("1g.6gb+me", 0, False), Instance("1g.6gb", 1, True)))]
    demand = [PodDemand("ns/p1", "o", "4g.24gb"),
              PodDemand("ns/p2", "o", "4g.24gb"), PodDemand("ns/p2", "o", "2g.12gb+me"),  # one pod, two profiles
              PodDemand("ns/p3", "o", "2g.12gb+me"),
              PodDemand("ns/p4", "o", "2g.12gb+me", count=2)]  # two, on one node
    result = plan(supply, demand, Bounds(profiles={"4g.24gb", "1g.6gb+me", "2g.12gb+me"}))
    made = Counter(name for t in result.changes if t.node == "node-1" for name, _ in t.create)
    assert made["2g.12gb+me"] == 2, result.changes  # ns/p4's two, on node-1
    assert dict(result.unserved) == {"2g.12gb+me": 1, "4g.24gb": 2}, result.unserved
    per_node = Counter()
    for layout, n in result.new_node_shape:
        for name, _ in layout:
            per_node[name] += n
    assert per_node["2g.12gb+me"] >= 1 and per_node["4g.24gb"] >= 2, result.new_node_shape
