"""Nodes vanish (the autoscaler, a spot reclaim, an operator): a node deleted at any step of a wave ends
``gone`` with a reason and an Event, its slot of the pool's budget is free, and the wave's other nodes go on.
And the cluster-autoscaler keeps its hands off a node the hook works on (issue 25 items 2 and 4)."""

import pytest

from functions.decision import budget as pb
from functions.delivery.outcome import NodeResult
from tests.rollout.conftest import NEW, snapshot

SCALE_DOWN = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
LEASE = ("default", "ack-mig-hook-pool-np-mig")


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def delete(api, name):
    with api.lock:
        api.nodes.pop(name, None)


class Reads:
    """A backend that runs ``before`` ahead of every node read by name."""

    def __init__(self, backend, before):
        self.backend, self.before = backend, before

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def get_node(self, name):
        self.before(name)
        return self.backend.get_node(name)


def _at_claim(cluster):
    return dict(kube=Reads(cluster.client(), lambda name: delete(cluster.api, "node-a") if name == "node-a" else None))


def _at_drain(cluster):
    cluster.api.add_pod("team", "train-a", "node-a", gpus=1, owner_kind="ReplicaSet")

    def cordoned(name, node):
        if name == "node-a" and node["spec"].get("unschedulable"):
            delete(cluster.api, "node-a")
    cluster.api.on_node_patch = cordoned
    return {}


def _at_apply(cluster):
    real = cluster.transport.run

    def released(targets):  # the instance is released while the apply is on its way: the agent never answers
        delete(cluster.api, "node-a")
        out = real([t for t in targets if t.node_name != "node-a"])
        return out + [NodeResult(t.instance_id, "played", 1, {"outcome": "failed", "error": {
            "code": "unreachable", "message": "InvalidInstanceId.NotFound"}}) for t in targets if t.node_name == "node-a"]
    cluster.transport.run = released
    return {}


def _at_capacity(cluster):
    real = cluster.transport.run

    def applied_then_deleted(targets):
        out = real(targets)
        delete(cluster.api, "node-a")
        return out
    cluster.transport.run = applied_then_deleted
    return {}


@pytest.mark.parametrize("step", [_at_claim, _at_drain, _at_apply, _at_capacity],
                         ids=["claim", "drain", "apply", "capacity"])
def test_a_node_deleted_at_any_step_ends_gone_and_the_wave_goes_on(cluster, step):
    cluster.add_nodes(["node-a", "node-b"])
    options = step(cluster)
    result = cluster.run(inventory=snapshot(names=["node-a", "node-b"]), ACK_MIG_MAX_UNAVAILABLE="2", **options)
    assert outcomes(result) == {"node-a": "gone", "node-b": "partitioned"}, result.nodes
    reason = result.nodes[0]["reason"]
    assert reason.startswith("gone: the node was deleted during the rollout") and "slot is free" in reason
    assert cluster.annotation("node-b")["step"] == "done" and not cluster.unschedulable("node-b")
    assert [e["involvedObject"]["name"] for e in cluster.events("MigRolloutNodeGone")] == ["node-a"]
    lease = cluster.api.leases[LEASE]
    assert pb.read_slots(lease["metadata"]["annotations"][pb.SLOTS_ANNOTATION]) == {}
    assert result.outcome == "done"


def test_a_gone_node_does_not_stop_the_pool(cluster):
    cluster.add_nodes(["node-a", "node-b", "node-c"])
    _at_capacity(cluster)
    first = cluster.run(ACK_MIG_MAX_UNAVAILABLE="1")
    assert outcomes(first)["node-a"] == "gone"
    again = cluster.run(inventory=snapshot(names=["node-b", "node-c"]), ACK_MIG_MAX_UNAVAILABLE="1")
    assert outcomes(again)["node-b"] == "partitioned"


# ---- the cluster-autoscaler's opt-out ----

def test_a_node_in_work_carries_the_scale_down_opt_out_until_it_ends(cluster):
    cluster.add_nodes(["node-a"])
    seen = []
    cluster.api.on_node_patch = lambda name, node: seen.append(
        (node["spec"].get("unschedulable", False), node["metadata"]["annotations"].get(SCALE_DOWN)))
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert outcomes(result) == {"node-a": "partitioned"}
    assert seen[0] == (True, "true")  # set in the same write as the cordon
    assert all(note == "true" for cordoned, note in seen if cordoned)
    assert SCALE_DOWN not in cluster.api.nodes["node-a"]["metadata"]["annotations"]  # gone with the uncordon
    assert cluster.annotation("node-a")["autoscaler"] is False


def test_someone_elses_opt_out_stays(cluster):
    cluster.add_nodes(["node-a"])
    cluster.api.update_node("node-a", lambda n: n["metadata"]["annotations"].__setitem__(SCALE_DOWN, "true"))
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert outcomes(result) == {"node-a": "partitioned"}
    assert cluster.api.nodes["node-a"]["metadata"]["annotations"][SCALE_DOWN] == "true"
    assert cluster.api.nodes["node-a"]["metadata"]["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == NEW


def test_a_node_that_only_gains_instances_carries_it_too(cluster):
    from tests.rollout.conftest import capacity, node_labels

    old = "3g.20gb"  # one 3g.20gb per GPU; the pool asks for two: only added, no drain
    for n in ("node-a",):
        cluster.api.add_node(n, labels=node_labels(old), capacity=capacity(old))
    seen = []
    cluster.api.on_node_patch = lambda name, node: seen.append(node["metadata"]["annotations"].get(SCALE_DOWN))
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert outcomes(result) == {"node-a": "partitioned"} and not cluster.unschedulable("node-a")
    assert cluster.annotation("node-a")["drain"] is False
    assert seen[0] == "true" and SCALE_DOWN not in cluster.api.nodes["node-a"]["metadata"]["annotations"]
