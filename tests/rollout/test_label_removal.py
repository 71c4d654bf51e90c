"""A pool's partition label removed: its nodes keep their MIG layout (skip, with how to turn MIG off), or
with ACK_MIG_ON_LABEL_REMOVAL=disable they roll to MIG off in waves (node_bootstrap disable)."""

import json

from tests.rollout.conftest import CLUSTER, NAMES, POOL, snapshot

UNLABELLED = snapshot(value=None)
POOL_EVENT = json.dumps({"cluster_id": CLUSTER, "nodepool_id": POOL})  # e.g. after ModifyClusterNodePool


def test_by_default_the_nodes_keep_their_layout_and_nothing_is_sent(cluster):
    cluster.add_nodes()
    for event in (None, POOL_EVENT):
        result = cluster.run(inventory=UNLABELLED, event=event)
        assert result.outcome == "done" and {d.action for d in result.decisions} == {"skip"}
        reason = result.decisions[0].reason
        assert "has no partition label" in reason and "keeps its MIG layout (1g.5gb" in reason
        assert "ACK_MIG_ON_LABEL_REMOVAL=disable" in reason and "python3 -m node_bootstrap disable" in reason
        assert "from the bundle the function delivered there" in reason  # not on the system Python's path
    assert cluster.transport.seen == [] and not [r for r in cluster.api.requests if r.method == "PATCH"]


def test_disable_rolls_the_pool_to_mig_off_wave_by_wave(cluster):
    cluster.add_nodes()
    first = cluster.run(inventory=UNLABELLED, ACK_MIG_ON_LABEL_REMOVAL="disable")
    assert [d.action for d in first.decisions] == ["partition", "defer", "defer"]
    assert first.decisions[0].disable and "rollout of pool %s (gpu) to mig=off" % POOL in first.decisions[0].reason
    a = first.nodes[0]
    assert a["outcome"] == "partitioned" and "new capacity shows (none)" in a["reason"]
    assert cluster.annotation("node-a")["target"] == "mig=off" and not cluster.unschedulable("node-a")
    sent = [r for r in cluster.api.requests if r.method == "PATCH" and r.path.endswith("node-a")]
    assert sent[0].body["spec"] == {"unschedulable": True}
    cluster.run(inventory=UNLABELLED, ACK_MIG_ON_LABEL_REMOVAL="disable", event=POOL_EVENT)
    cluster.run(inventory=UNLABELLED, ACK_MIG_ON_LABEL_REMOVAL="disable")
    assert cluster.transport.seen == NAMES
    last = cluster.run(inventory=UNLABELLED, ACK_MIG_ON_LABEL_REMOVAL="disable")
    assert last.outcome == "skip" and cluster.transport.seen == NAMES  # nothing with MIG left: nothing to do


def test_the_node_command_is_node_bootstrap_disable(cluster):
    cluster.add_nodes(["node-a"])
    args = []
    real = cluster.transport.run
    cluster.transport.run = lambda targets: args.extend(t.args for t in targets) or real(targets)
    cluster.run(inventory=snapshot(value=None, names=["node-a"]), ACK_MIG_ON_LABEL_REMOVAL="disable")
    assert args == [("--json", "disable")]


def test_dry_run_shows_the_roll_to_mig_off(cluster):
    cluster.add_nodes()
    result = cluster.run(inventory=UNLABELLED, dry_run=True, ACK_MIG_ON_LABEL_REMOVAL="disable")
    assert result.nodes[0]["reason"].startswith("dry run: would cordon, evict no GPU pod")
    assert "apply MIG off (node_bootstrap disable)" in result.nodes[0]["reason"]
    assert cluster.transport.seen == []


def test_without_nodes_that_have_mig_an_unlabelled_cluster_is_still_skipped(cluster):
    cluster.add_nodes(sequence=None, state=None)
    for n in NAMES:
        cluster.api.nodes[n]["metadata"]["labels"].pop("nvidia.com/mig.config.state", None)
    result = cluster.run(inventory=UNLABELLED)
    assert result.outcome == "skip" and "carries a partition label" in result.reason


def test_the_modify_nodepool_event_plans_the_rollout_of_that_pool():
    """The ActionTrail record of ModifyClusterNodePool (the console's label edit) over the rollout example."""
    import os

    from functions.base.logs import JsonLogger
    from functions.pipeline.event import run_event
    from functions.base.settings import load_settings

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    event = json.load(open(os.path.join(root, "tests", "events", "actiontrail_console_create_nodepool.json")))
    event["data"]["eventName"] = "ModifyClusterNodePool"
    event["data"]["requestParameters"]["NodepoolId"] = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"
    result = run_event(json.dumps(event), load_settings({}), logger=JsonLogger("OFF"), dry_run=True,
                       inventory=os.path.join(root, "examples", "inventory-rollout.json"))
    assert result.trigger == "nodepool-operation" and result.outcome == "done"
    assert [(d.node_name, d.action) for d in result.decisions] == [
        ("cn-beijing.192.168.12.31", "partition"), ("cn-beijing.192.168.12.47", "defer"),
        ("cn-beijing.192.168.12.58", "skip")]  # only the modified pool: the retired one is not touched


def test_a_node_mig_manager_runs_is_never_cordoned_drained_or_disabled(cluster):
    """NVIDIA mig-manager writes nvidia.com/mig.config.state itself: that is not MIG this hook set up. Its
    node is left alone when the label is removed with disable; ours next to it rolls to MIG off."""
    cluster.add_nodes(["node-a", "node-b"])
    cluster.api.label_node("node-a", {"nvidia.com/mig.config": "all-balanced",
                                      "aliyun.accelerator/nvidia_mig_sequence": None})  # mig-manager's node
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")
    result = cluster.run(inventory=snapshot(value=None, names=["node-a", "node-b"]),
                         ACK_MIG_ON_LABEL_REMOVAL="disable", ACK_MIG_MAX_UNAVAILABLE="2")
    by = {d.node_name: d for d in result.decisions}
    assert by["node-b"].action == "partition" and by["node-b"].disable
    assert "node-a" not in by  # no MIG of this hook's on it: not even a target
    assert cluster.transport.seen == ["node-b"]
    assert not [r for r in cluster.api.requests if r.method in ("PATCH", "POST") and "node-a" in r.path]
    assert ("team", "train") in cluster.api.pods and not cluster.unschedulable("node-a")


def test_a_mig_manager_node_in_a_labelled_pool_is_skipped_as_conflict(cluster):
    """Even with this hook's own applied label on it: the node carries nvidia.com/mig.config."""
    cluster.add_nodes(["node-a", "node-b"])
    cluster.api.label_node("node-a", {"nvidia.com/mig.config": "custom"})
    for event in (None, json.dumps({"cluster_id": CLUSTER, "nodepool_id": POOL, "instance_ids": []})):
        result = cluster.run(inventory=snapshot(names=["node-a", "node-b"]), event=event, ACK_MIG_MAX_UNAVAILABLE="2")
        by = {d.node_name: d for d in result.decisions}
        assert by["node-a"].action == "skip" and by["node-a"].reason.startswith(
            "conflict: the node carries nvidia.com/mig.config=custom, NVIDIA mig-manager's")
    assert cluster.transport.seen == ["node-b"]
    assert not [r for r in cluster.api.requests if r.method == "PATCH" and r.path.endswith("/node-a")]
    off = cluster.run(inventory=snapshot(value=None, names=["node-a", "node-b"]), ACK_MIG_ON_LABEL_REMOVAL="disable")
    a = next(d for d in off.decisions if d.node_name == "node-a")
    assert a.action == "skip" and not a.disable and "conflict: the node carries nvidia.com/mig.config" in a.reason
    assert not [r for r in cluster.api.requests if r.method == "PATCH" and r.path.endswith("/node-a")]


def test_an_auto_pool_is_not_a_pool_whose_label_was_removed(cluster):
    """An auto pool (ack-mig-hook/layout=auto) carries no partition label by design: even with disable, its
    MIG nodes are never rolled to MIG off nor reported as a removed label (functions/pipeline/auto_pool.py
    plans them)."""
    cluster.add_nodes()
    auto = snapshot(value=None, pool_labels={"ack-mig-hook/layout": "auto"})
    result = cluster.run(inventory=auto, ACK_MIG_ON_LABEL_REMOVAL="disable")
    assert result.outcome == "skip" and result.decisions == []
    assert cluster.transport.seen == [] and not [r for r in cluster.api.requests if r.method == "PATCH"]
