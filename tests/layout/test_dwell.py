"""The auto pool's dwell (issue 35 item 5; functions/decision/layout/dwell.py): a GPU changed within the
dwell is not repartitioned back for another profile unless a pod has waited longer than the bound; its idle
instances still serve, instances may be added beside them, and what the dwell holds back is not sent to the
autoscaler. The change marks (functions/decision/claim_rules.py) are read under the reader rule."""

import json
import math
import os
import random
import sys

from functions.decision import claim_rules as pc
from functions.decision.layout import CHANGE_ADD, CHANGE_REPARTITION, Bounds, GpuSupply, Instance, PodDemand, plan
from functions.decision.layout.dwell import Dwell, plan_steady
from functions.decision.claim_rules import waited_s

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import demand_alternating  # noqa: E402

A80 = "NVIDIA A100-SXM4-80GB"
NOW = 1_000_000.0
SEVEN = GpuSupply("a", 0, A80, (Instance("7g.80gb", 0, False),))


def pod(profile, key="llm/serve-0"):
    return PodDemand(key, "deployment llm/serve", profile)


def dwell(changed_ago=60.0, waited=0.0, key="llm/serve-0", dwell_s=600, max_wait_s=300):
    return Dwell({("a", 0): NOW - changed_ago}, NOW, dwell_s, max_wait_s, {key: waited})


def test_alternating_demand_over_two_hours_repartitions_at_most_once_per_dwell():
    free = demand_alternating.alternate(0, ticks=10)
    assert free["repartitions"] == 9 and free["adds"] == 1  # the thrash: every tick after the first
    held = demand_alternating.alternate(600, ticks=120)
    assert held["repartitions"] <= 120 * 60 // 600, held  # 12: one per dwell at most
    assert held["repartitions"] >= 1  # the dwell delays, it does not freeze the GPU for good
    assert held["repartitions_per_hour"] <= 6.0


def test_a_gpu_within_its_dwell_is_not_repartitioned_for_a_young_pod():
    result = plan_steady(plan, [SEVEN], [pod("3g.40gb")], Bounds(), dwell(changed_ago=60, waited=120))
    assert result.changes == ()
    assert result.unserved == () and result.new_node == ()  # held back here, not sent to the autoscaler
    (line,) = result.reasons
    assert "1x 3g.40gb instance(s) wait for GPUs changed within the last 600s" in line
    assert "a GPU 0 for 540s more" in line and "300s (ACK_MIG_AUTO_MAX_WAIT_S)" in line


def test_after_the_dwell_the_gpu_is_repartitioned():
    result = plan_steady(plan, [SEVEN], [pod("3g.40gb")], Bounds(), dwell(changed_ago=600, waited=0))
    (t,) = result.changes
    assert t.change == CHANGE_REPARTITION and t.destroy == (("7g.80gb", 0),)


def test_a_pod_that_waited_past_the_bound_overrides_the_dwell():
    result = plan_steady(plan, [SEVEN], [pod("3g.40gb")], Bounds(), dwell(changed_ago=60, waited=301))
    (t,) = result.changes
    assert t.change == CHANGE_REPARTITION and [p for p, _ in t.layout] == ["3g.40gb"]
    assert "a pod waited longer than 300s" in result.reasons[-1]
    # the old pod must be one the dwell keeps unserved: an old pod of another profile changes nothing
    other = plan_steady(plan, [SEVEN], [pod("3g.40gb"), pod("7g.80gb", "llm/old")], Bounds(),
                        Dwell({("a", 0): NOW - 60}, NOW, 600, 300, {"llm/old": 1000.0}))
    assert other.changes == ()


def test_a_pod_no_node_holds_never_lifts_the_dwell_however_long_it_waits():
    # llm/huge asks 3x 3g.40gb on one node of one GPU: not counted, so it waits forever; its hour of waiting
    # must not let the young pod of its profile repartition a GPU within its dwell
    huge = PodDemand("llm/huge", "pod llm/huge", "3g.40gb", 3)
    waited = Dwell({("a", 0): NOW - 60}, NOW, 600, 300, {"llm/serve-0": 10.0, "llm/huge": 3600.0})
    result = plan_steady(plan, [SEVEN], [pod("3g.40gb"), huge], Bounds(), waited)
    assert result.changes == () and [k for k, _ in result.not_counted] == ["llm/huge"]
    assert "wait for GPUs changed within the last 600s" in result.reasons[-1]


def test_the_autoscaler_sees_only_what_both_plans_leave_short():
    # Found by a fuzz of 3,000 pools: with n0's GPUs kept the search leaves the 7g.80gb pod short (the dwell
    # holds it back) and serves the 4g.40gb one on n1; without the dwell the search did the opposite, and the
    # tags asked for a node for the 4g.40gb pod the applied (kept) plan serves. Without the dwell the exact
    # form now serves both (the search's shortfall is solved again), so neither plan names 4g.40gb.
    def gpu(node, index, *held):
        return GpuSupply(node, index, A80, tuple(Instance(p, s, u) for p, s, u in held))

    supply = [gpu("n0", 0, ("1g.20gb", 0, False), ("1g.20gb", 2, False), ("3g.40gb", 4, False)),
              gpu("n0", 1, *[("1g.10gb", i, i in (1, 6)) for i in range(7)]),
              gpu("n1", 0, ("3g.40gb", 0, False))]
    demand = [PodDemand("ns/p%d" % k, "x", p)
              for k, p in enumerate(["1g.10gb", "2g.20gb", "4g.40gb", "7g.80gb", "1g.20gb"])]
    bounds = Bounds(model=A80, node_gpus=2)
    held = Dwell({("n0", 0): NOW - 100, ("n0", 1): NOW - 100}, NOW, 600, 300, {})
    assert plan(supply, demand, bounds, keep=frozenset(held.changed)).unserved == (("7g.80gb", 1),)
    assert plan(supply, demand, bounds).unserved == ()
    result = plan_steady(plan, supply, demand, bounds, held)
    assert [(t.node, t.index) for t in result.changes] == [("n1", 0)]  # the kept plan's: 4g.40gb on n1
    assert result.unserved == () and result.new_node == () and result.new_node_shape == ()
    assert not any("4g.40gb instance beyond" in r for r in result.reasons)
    assert "1x 7g.80gb instance(s) wait for GPUs changed" in result.reasons[-1]


def test_within_the_dwell_idle_instances_serve_and_instances_are_added_beside_them():
    idle = GpuSupply("a", 0, A80, (Instance("3g.40gb", 0, False),))
    assert plan_steady(plan, [idle], [pod("3g.40gb")], Bounds(), dwell()).changes == ()  # served by the idle one
    result = plan_steady(plan, [idle], [pod("3g.40gb"), pod("3g.40gb", "llm/serve-1")], Bounds(), dwell())
    (t,) = result.changes
    assert t.change == CHANGE_ADD and t.destroy == () and ("3g.40gb", 0) in t.layout


def test_another_gpu_serves_while_one_dwells():
    empty = GpuSupply("b", 0, A80, ())
    result = plan_steady(plan, [SEVEN, empty], [pod("3g.40gb")], Bounds(), dwell())
    (t,) = result.changes
    assert (t.node, t.change) == ("b", CHANGE_ADD)


def test_no_plan_destroys_an_instance_of_a_kept_gpu_search_or_exact():
    """Random small pools (the exact solve runs on them) and random demand: a GPU in ``keep`` loses nothing."""
    rng = random.Random(35)
    layouts = [(), (("7g.80gb", 0),), (("3g.40gb", 0), ("3g.40gb", 4)), (("4g.40gb", 0),),
               (("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)), (("1g.10gb", 0), ("1g.10gb", 1))]
    profiles = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    for case in range(60):
        supply = [GpuSupply("n%d" % i, 0, A80, tuple(Instance(p, s, rng.random() < 0.2)
                                                     for p, s in rng.choice(layouts)))
                  for i in range(rng.randint(1, 4))]
        keep = frozenset((s.node, 0) for s in supply if rng.random() < 0.6)
        demand = [pod(rng.choice(profiles), "x/p%d" % i) for i in range(rng.randint(1, 4))]
        result = plan(supply, demand, Bounds(), keep=keep)
        for t in result.targets:
            if (t.node, t.index) in keep:
                assert t.destroy == (), (case, t, keep)


def test_a_pods_wait_starts_at_its_unschedulable_condition_never_before_its_creation():
    def p(created=None, since=None, status="False"):
        obj = {"metadata": {}, "status": {"conditions": []}}
        if created:
            obj["metadata"]["creationTimestamp"] = created
        if since:
            obj["status"]["conditions"].append({"type": "PodScheduled", "status": status, "lastTransitionTime": since})
        return obj

    now = 1796256000.0  # 2026-12-03T00:00:00Z
    assert waited_s(p("2026-12-02T23:50:00Z", "2026-12-02T23:55:00Z"), now) == 300
    assert waited_s(p("2026-12-02T23:50:00Z"), now) == 600
    assert waited_s(p("2026-12-02T23:50:00Z", "2020-01-01T00:00:00Z"), now) == 600  # a forged condition
    assert waited_s(p(None, "2026-12-02T23:59:00Z"), now) == 60
    assert waited_s(p("soon", "x" * 100), now) == 0 and waited_s({}, now) == 0
    assert waited_s(p("2026-12-03T00:10:00Z"), now) == 0  # a clock ahead: no negative wait


def test_the_change_marks_read_under_the_reader_rule_and_pruned_by_the_dwell():
    text = json.dumps({"a/0": 100.0, "b/3": 5e9, "c/x": 1.0, "d/1": "soon", "/2": 1.0, "e/100": 1.0, "f/2": True,
                       "g/1": 2.0})
    assert pc.read_changed(text, 1000.0) == {("a", 0): 100.0, ("g", 1): 2.0}  # 5e9: past 2100, not ours
    assert pc.read_changed(json.dumps({"a/0": 2000.0}), 1000.0) == {("a", 0): 1000.0}  # a time ahead reads as now
    for bad in ("{", "[1]", json.dumps({"a/0": {"x": 1}}), "x" * (pc.MAX_CHANGED_TEXT + 1), None, ""):
        assert pc.read_changed(bad, 1000.0) == {}
    written = pc.write_changed({("a", 0): 100.0, ("b", 1): 900.0}, 1000.0, 600.0, [("c", 2)])
    assert json.loads(written) == {"b/1": 900.0, "c/2": 1000.0}  # a/0 is older than the dwell
    big = {("node-%04d" % i, 0): 1000.0 - i * 0.001 for i in range(5000)}
    assert len(pc.write_changed(big, 1000.0, 600.0)) <= pc.MAX_CHANGED_TEXT  # the newest kept within the limit


def test_the_planning_claim_is_read_under_the_reader_rule_and_clamped():
    assert pc.read_claim(pc.write_claim(pc.Claim("run-1", 1500.0))) == pc.Claim("run-1", 1500.0)
    for bad in ("{", json.dumps({"owner": "", "expires": 1.0}), json.dumps({"owner": "r", "expires": 1e15}),
                json.dumps({"owner": "r", "expires": "later"}), json.dumps({"owner": 5, "expires": 1.0}),
                json.dumps({"owner": "r", "expires": {"a": 1}}), "x" * 2000):
        said = []
        assert pc.read_claim(bad, said.append) == pc.Claim(pc.UNREADABLE_OWNER, math.inf), bad  # holds, bounded
        assert len(said) == 1 and "is not ours" in said[0] and pc.CLAIM_FORM in said[0], said
    assert pc.read_claim(None) is None and pc.read_claim("") is None  # none
    assert pc.bound_claim(pc.read_claim("{"), 1000.0, 900.0) == pc.Claim(pc.UNREADABLE_OWNER, 1900.0)
    claim = pc.Claim("other", 4.0e9)
    assert pc.bound_claim(claim, 1000.0, 900.0) == pc.Claim("other", 1900.0)
    assert pc.held_by_another(claim, "me", 1000.0, 900.0) == "other"
    assert pc.held_by_another(pc.Claim("me", 1500.0), "me", 1000.0, 900.0) == ""
    assert pc.held_by_another(pc.Claim("other", 999.0), "me", 1000.0, 900.0) == ""  # expired


def test_what_the_dwell_holds_back_advertises_no_node_for_a_pod_no_new_node_holds():
    """The dwell names its own new node (for what both plans leave short) where the plan without it is short of
    more. A pod asking a whole GPU beside a 2g.12gb+me is short, and no new node can hold it (a new node's GPUs
    all get MIG, or all stay whole): the planner names no node for it, but the dwell's own named three GPUs of
    2g.12gb+me for it, a node the autoscaler would add and the pod could never use."""
    from functions.decision.layout import WHOLE_GPU
    a30 = "NVIDIA A30"
    supply = [GpuSupply("n", 0, a30, (Instance("4g.24gb", 0, True),), busy=True),
              GpuSupply("n", 1, a30, (Instance("2g.12gb+me", 0, False),)),
              GpuSupply("n", 2, a30, (Instance("2g.12gb+me", 0, False), Instance("2g.12gb", 2, False)))]
    demand = [PodDemand("zz/mixed", "o", "2g.12gb+me"), PodDemand("zz/mixed", "o", WHOLE_GPU),
              PodDemand("ns/p00", "o", "1g.6gb"), PodDemand("ns/p01", "o", "2g.12gb", 2),
              PodDemand("ns/p03", "o", "2g.12gb", 2)]
    held = Dwell({("n", 2): NOW - 10}, NOW, 100, 10 ** 9, {})
    free = plan(supply, demand, Bounds())
    result = plan_steady(plan, supply, demand, Bounds(), held)
    assert dict(free.unserved) == {"1g.6gb": 1, "2g.12gb+me": 1, WHOLE_GPU: 1}, free.unserved
    assert dict(result.unserved) == {"2g.12gb+me": 1, WHOLE_GPU: 1} and any("ACK_MIG_AUTO_DWELL_S" in r for r in result.reasons)
    assert result.new_node_shape == () and result.new_node == ()
