"""Resuming a labelled pool's node that a killed invocation left mid-way (found by a review of the rollout):
the budget and the pause hold for a node whose disruption starts only on resume, a drained node no longer
cordoned is drained again, and a drain that stops says what it did to someone else's cordon."""

import json

import pytest

from tests.rollout.conftest import OLD, capacity, node_labels, snapshot

SMALL, GROWN = "3g.20gb", "3g.20gb-2g.10gb-1g.5gb"
SEVEN = "-".join(["1g.5gb"] * 7)
TWO = "3g.20gb-3g.20gb"
# A killed run's record of an add-only apply (no cordon, no drain) to GROWN; the label now asks SEVEN, which
# destroys instances: the node starts over on the drained path.
NO_DRAIN = {"target": "sequence=%s" % GROWN, "step": "applying", "cordoned": False, "since": 10.0, "reason": "",
            "owner": "deadrun", "expires": 20.0, "drain": False, "autoscaler": False}


def _cordons(api):
    """The most nodes cordoned at once, replaying the node writes in order."""
    state, peak = set(), 0
    for r in api.requests:
        if r.method == "PATCH" and "/api/v1/nodes/" in r.path and "spec" in (r.body or {}):
            name = r.path.rsplit("/", 1)[1]
            (state.add if r.body["spec"].get("unschedulable") else state.discard)(name)
            peak = max(peak, len(state))
    return peak


def test_a_node_whose_disruption_starts_on_resume_takes_a_slot_of_the_budget(cluster):
    """The planner counted node-b by its old record (no drain), so the wave's one slot went to node-a, and at
    its claim node-b was cordoned without a slot: two nodes disrupted under max-unavailable 1."""
    api = cluster.api
    cluster.add_nodes(["node-a"], sequence=TWO)
    api.add_node("node-b", labels=node_labels(SMALL), capacity=capacity(SMALL),
                 annotations={"ack-mig-hook/rollout": json.dumps(NO_DRAIN)})
    api.add_pod("team", "train-a", "node-a", gpus=1, owner_kind="ReplicaSet")
    api.add_pod("team", "train-b", "node-b", gpus=1, owner_kind="ReplicaSet")
    cluster.run(inventory=snapshot(SEVEN, names=["node-a", "node-b"]))  # max-unavailable 1
    assert _cordons(api) == 1


def test_a_paused_pool_starts_no_disruption_on_a_resumed_node(cluster):
    """operations.md: while paused, a node already in progress finishes; one whose disruption would start
    only now (its record had no drain) is not cordoned or drained."""
    api = cluster.api
    api.add_node("node-b", labels=node_labels(SMALL), capacity=capacity(SMALL),
                 annotations={"ack-mig-hook/rollout": json.dumps(NO_DRAIN)})
    api.add_pod("team", "train-b", "node-b", gpus=1, owner_kind="ReplicaSet")
    result = cluster.run(inventory=snapshot(SEVEN, names=["node-b"], pool_labels={"ack-mig-hook/paused": "true"}))
    assert not [r for r in api.requests if r.path.endswith("/eviction")]
    assert _cordons(api) == 0 and result.nodes[0]["outcome"] == "deferred", result.nodes[0]


def test_a_drained_node_no_longer_cordoned_is_cordoned_and_drained_again(cluster):
    """A killed run left node-a drained under someone else's cordon; the cordon was lifted and a GPU pod came.
    Resumed at `drained`, the apply went to a schedulable node with a running GPU pod."""
    api = cluster.api
    record = {"target": "sequence=3g.20gb-3g.20gb", "step": "drained", "cordoned": False, "since": 900.0,
              "reason": "", "owner": "deadrun", "expires": 950.0, "drain": True, "autoscaler": True}
    api.add_node("node-a", labels=node_labels(OLD), capacity=capacity(OLD), unschedulable=False,
                 annotations={"ack-mig-hook/rollout": json.dumps(record),
                              "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"})
    api.add_pod("team", "new-train", "node-a", gpus=1, owner_kind="ReplicaSet")  # came after the uncordon
    cluster.now[0] += 100000
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    evicted = [r.path for r in api.requests if r.path.endswith("/eviction")]
    assert evicted == ["/api/v1/namespaces/team/pods/new-train/eviction"], evicted
    assert result.nodes[0]["outcome"] == "partitioned", result.nodes[0]
    assert not cluster.unschedulable("node-a")


def test_a_drain_that_stops_on_someone_elses_cordon_does_not_say_uncordoned(cluster):
    api = cluster.api
    cluster.add_nodes(["node-a"], unschedulable=("node-a",))
    api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    result = cluster.run(inventory=snapshot(names=["node-a"]), ACK_MIG_DRAIN_TIMEOUT_S="30")
    assert cluster.unschedulable("node-a")  # rightly: not this hook's cordon
    said = [result.nodes[0]["reason"], cluster.annotation("node-a")["reason"],
            cluster.events("MigRolloutDrainTimeout")[0]["message"]]
    assert all("still cordoned (someone else's cordon, left as it was)" in text and " and uncordoned" not in text
               for text in said), said


def test_a_node_left_mid_rollout_in_a_pool_whose_label_went_is_finished_on_its_own_layout(cluster):
    """A run died after cordoning node-a; the pool's partition label was then removed. With
    ACK_MIG_ON_LABEL_REMOVAL=keep every later invocation skipped the node ("keeps its MIG layout"): cordoned and
    kept from scale-down for good. The next invocation rolls it to the layout it has and uncordons it; the
    ones after leave it alone."""
    api = cluster.api
    cluster.add_nodes(["node-b", "node-c"])
    record = {"target": "sequence=3g.20gb-3g.20gb", "step": "cordoned", "cordoned": True, "since": 900.0,
              "reason": "", "owner": "deadrun", "expires": 950.0, "drain": True, "autoscaler": True}
    api.add_node("node-a", labels=node_labels(OLD), capacity=capacity(OLD), unschedulable=True,
                 annotations={"ack-mig-hook/rollout": json.dumps(record),
                              "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"})
    cluster.now[0] += 100000
    first = cluster.run(inventory=snapshot(value=None))
    (a,) = [d for d in first.decisions if d.node_name == "node-a"]
    assert a.partition.value == OLD and "left mid-rollout (cordoned)" in a.reason, a.reason
    assert not cluster.unschedulable("node-a") and cluster.annotation("node-a")["step"] == "done"
    notes = api.nodes["node-a"]["metadata"].get("annotations", {})
    assert "cluster-autoscaler.kubernetes.io/scale-down-disabled" not in notes
    assert [d.action for d in first.decisions if d.node_name != "node-a"] == ["skip", "skip"]
    cluster.now[0] += 100000
    again = cluster.run(inventory=snapshot(value=None))
    assert all(d.action == "skip" for d in again.decisions), [(d.node_name, d.action) for d in again.decisions]


@pytest.mark.parametrize("value", ["false", "no", 1, ["x"]], ids=repr)
def test_a_record_whose_cordoned_is_no_boolean_never_lifts_the_cordon(cluster, value):
    """The reader rule on the rollout record (anyone with the node's kubelet credential may write its annotations):
    ``cordoned`` was read with bool(), so "false", "no" or 1 read as this hook's own cordon, and the node's end
    lifted a cordon a person set. A record whose field is of another type does not read (it starts over, as a
    hand-edited one does): someone else's cordon stays."""
    api = cluster.api
    record = {"target": "sequence=3g.20gb-3g.20gb", "step": "drained", "cordoned": value, "since": 900.0,
              "reason": "", "owner": "deadrun", "expires": 950.0, "drain": True, "autoscaler": False}
    api.add_node("node-a", labels=node_labels(OLD), capacity=capacity(OLD), unschedulable=True,
                 annotations={"ack-mig-hook/rollout": json.dumps(record)})
    cluster.now[0] += 100000
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert result.nodes[0]["outcome"] == "partitioned", result.nodes[0]
    assert cluster.unschedulable("node-a") and cluster.annotation("node-a")["cordoned"] is False


@pytest.mark.parametrize("owner", [{}, [], 0, False, ["run-1"], {"id": "run-1"}], ids=repr)
def test_a_record_whose_owner_is_no_text_holds_the_node_as_an_unknown_runs_until_it_expires(cluster, owner):
    """The reader rule on the rollout record: ``owner`` was read with ``str(x or "")``, so an owner of {}, [],
    0 or false read as no holder (this run took the node over at once) while ["run-1"] read as a holder named
    "['run-1']". An owner that is no text is an unknown run's: it holds the node until the record's expiry
    (bounded by one run lease, as any hold), then the node is resumed as a killed run's."""
    from functions.decision.waves import Progress, UNKNOWN_OWNER

    api = cluster.api
    record = {"target": "sequence=%s" % TWO, "step": "drained", "cordoned": True, "since": cluster.now[0],
              "reason": "", "owner": owner, "expires": cluster.now[0] + 120, "drain": True, "autoscaler": False}
    assert Progress.from_annotation(json.dumps(record)).owner == UNKNOWN_OWNER
    api.add_node("node-a", labels=node_labels(OLD), capacity=capacity(OLD), unschedulable=True,
                 annotations={"ack-mig-hook/rollout": json.dumps(record)})
    held = cluster.run(inventory=snapshot(names=["node-a"]))
    assert held.nodes[0]["outcome"] == "deferred" and UNKNOWN_OWNER in held.nodes[0]["reason"], held.nodes[0]
    cluster.now[0] += 121
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert result.nodes[0]["outcome"] == "partitioned", result.nodes[0]


@pytest.mark.parametrize("field,value,why", [("target", ["sequence=x"], "target is a list, not text"),
                                             ("step", 5, "step is a number, not text"),
                                             ("cordoned", "no", "cordoned is text, not true/false")])
def test_a_record_that_does_not_read_is_named_in_one_warning_line_as_it_starts_over(cluster, capsys, field, value,
                                                                                       why):
    """A record that does not read started over with nothing said: a person saw a node drained again and no
    reason. One WARNING line names the node, what is wrong and the form."""
    api = cluster.api
    record = {"target": "sequence=%s" % TWO, "step": "drained", "cordoned": False, "since": 900.0, "reason": "",
              "owner": "deadrun", "expires": 950.0, "drain": True, "autoscaler": False}
    api.add_node("node-a", labels=node_labels(OLD), capacity=capacity(OLD),
                 annotations={"ack-mig-hook/rollout": json.dumps(dict(record, **{field: value}))})
    cluster.now[0] += 100000
    capsys.readouterr()
    result = cluster.run(inventory=snapshot(names=["node-a"]), log_level="WARNING")
    assert result.nodes[0]["outcome"] == "partitioned", result.nodes[0]
    lines = [line["message"] for line in map(json.loads, capsys.readouterr().out.splitlines())
             if "rollout record" in line["message"] and line["level"] == "WARNING"]
    assert len(lines) == 1 and "node node-a" in lines[0] and why in lines[0] and "starts over" in lines[0], lines


@pytest.mark.parametrize("field,value", [("target", ["sequence=x"]), ("step", {"drained": 1}), ("step", 5)])
def test_a_record_whose_target_or_step_is_no_text_does_not_read(field, value):
    """``str()`` made a list target or a dict step into text no version wrote; such a record does not read (it
    starts over, as one whose cordoned is no boolean), and a reason of another type reads as none (it is only
    shown)."""
    from functions.decision.waves import Progress

    record = {"target": "sequence=%s" % TWO, "step": "drained", "cordoned": False, "since": 1.0, "reason": "r",
              "owner": "run-1", "expires": 2.0, "drain": True, "autoscaler": False}
    assert Progress.from_annotation(json.dumps(dict(record, **{field: value}))) is None
    assert Progress.from_annotation(json.dumps(dict(record, reason=["x"]))).reason == ""
    assert Progress.from_annotation(json.dumps(dict(record, reason=None))).reason == ""
