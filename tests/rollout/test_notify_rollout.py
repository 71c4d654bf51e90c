"""Notifications from real rollouts: the rollout of the test pool (three running A100 nodes, the TLS API
server, the played nodes of conftest.py) with ACK_MIG_NOTIFY_URL pointing at a loopback webhook
(tests/support/webhook.py). One line when the pool's rollout finishes, one when it stops, one when nodes
fail; nothing while it simply goes on, and nothing again while it stays stopped."""

from tests.support.webhook import Webhook

SCHEMA = "ack-mig-hook/notification/v1"


def test_a_rollout_tells_the_webhook_once_when_it_finishes(cluster):
    cluster.add_nodes()
    with Webhook() as hook:
        results = [cluster.run(ACK_MIG_NOTIFY_URL=hook.url()) for _ in range(4)]  # one node per run, then idle
        lines = hook.lines()
        paths = {r.path for r in hook.received}
    assert [r.outcome for r in results] == ["done"] * 4
    (line,) = lines
    assert line["schema"] == SCHEMA and line["kind"] == "rollout-finished"
    assert (line["cluster_id"], line["nodepool_id"]) == ("c-rollout", "np-mig")
    assert line["target"] == "sequence=3g.20gb-3g.20gb" and line["trigger"] == "manual"
    assert [n["node_name"] for n in line["nodes"]] == ["node-c"]  # the last wave's node
    assert "holds sequence=3g.20gb-3g.20gb on every node" in line["text"]
    assert paths == {"/hooks/T0KEN-abc123-secret-part"}


def test_a_stopped_rollout_is_told_once_and_not_again_while_it_stays_stopped(cluster):
    cluster.add_nodes()
    cluster.api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    cluster.api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    with Webhook() as hook:
        first = cluster.run(ACK_MIG_NOTIFY_URL=hook.url(), ACK_MIG_DRAIN_TIMEOUT_S="5")
        second = cluster.run(ACK_MIG_NOTIFY_URL=hook.url(), ACK_MIG_DRAIN_TIMEOUT_S="5")
        lines = hook.lines()
    assert {n["node_name"]: n["outcome"] for n in first.nodes}["node-a"] == "drain-timeout"
    assert {n["outcome"] for n in second.nodes} == {"deferred"}  # the pool waits on node-a
    (line,) = lines
    assert line["kind"] == "rollout-stopped" and line["nodepool_id"] == "np-mig"
    assert [(n["node_name"], n["outcome"]) for n in line["nodes"]] == [("node-a", "drain-timeout")]
    assert "remove the node's annotation ack-mig-hook/rollout to resume" in line["text"]


def test_a_node_that_fails_in_a_wave_stops_the_rollout_and_is_a_failed_node(cluster):
    cluster.add_nodes()
    cluster.transport.fail = {"node-a"}
    with Webhook() as hook:
        cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        lines = hook.lines()
    assert [line["kind"] for line in lines] == ["rollout-stopped", "node-failed"]
    failed = lines[1]
    assert failed["count"] == 1 and failed["nodes"][0]["node_name"] == "node-a"
    assert "gpu-busy" in failed["nodes"][0]["reason"] and failed["text"] == "1 node failed (1 gpu-busy): node-a"


def test_a_dry_run_tells_nothing(cluster):
    cluster.add_nodes()
    cluster.transport.fail = {"node-a"}
    with Webhook() as hook:
        cluster.run(dry_run=True, ACK_MIG_NOTIFY_URL=hook.url())
        assert hook.received == []


def test_a_node_that_fails_in_a_later_wave_of_the_invocation_stops_the_rollout_too(cluster):
    """An invocation with time for every wave: node-a and node-b are rolled in waves 1 and 2, node-c fails in
    wave 3, and its failed record stops the pool's rollout. The webhook heard only `node-failed`: the stop was
    judged over the first wave's nodes alone (the later waves' were left out), so nobody was told the pool
    waits on a person. Now every wave of the invocation counts."""
    cluster.add_nodes()
    cluster.transport.fail.add("node-c")
    with Webhook() as hook:
        result = cluster.run(ACK_MIG_NOTIFY_URL=hook.url(), ACK_MIG_INVOCATION_TIMEOUT_S="86400")
        lines = hook.lines()
    assert {n["node_name"]: (n["outcome"], n.get("wave")) for n in result.nodes} == {
        "node-a": ("partitioned", 1), "node-b": ("partitioned", 2), "node-c": ("failed", 3)}
    assert cluster.annotation("node-c")["step"] == "failed"
    assert sorted(line["kind"] for line in lines) == ["node-failed", "rollout-stopped"], lines
    stopped = next(line for line in lines if line["kind"] == "rollout-stopped")
    assert [n["node_name"] for n in stopped["nodes"]] == ["node-c"]
