"""A rollout on a busy API server: one transient error no longer fails the wave, the capacity wait has its
own deadline, polling costs one pod list per wave node per pass over kept-alive connections, and every
listing is read to its last page."""

from tests.rollout.conftest import NAMES, NEW, OLD, capacity, snapshot
from tests.support.kubeapi import FUNCTION_USER

ONE = snapshot(names=["node-a"])


def test_one_5xx_while_recording_progress_does_not_fail_the_wave(cluster):
    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")

    def outage(n):
        if n == 1:  # between eviction passes: the next record write meets one 503, then a dropped connection
            cluster.api.break_next(times=1, status=503, method="PATCH")
            cluster.api.break_next(times=1, status=None, method="PATCH")

    cluster.on_sleep = outage
    result = cluster.run(inventory=ONE)
    assert result.nodes[0]["outcome"] == "partitioned" and cluster.annotation("node-a")["step"] == "done"
    assert [r.status for r in cluster.api.requests if r.method == "PATCH"][1:3] == [503, 0]
    assert len(cluster.retry_sleeps) >= 2 and not cluster.unschedulable("node-a")


def test_a_capacity_read_that_fails_is_polled_again_until_the_capacity_deadline(cluster):
    cluster.add_nodes(["node-a"])
    real_run = cluster.transport.run

    def apply_with_a_slow_device_plugin(targets):
        out = real_run(targets)
        cluster.api.set_capacity("node-a", capacity(OLD))
        return out

    def api_server_restarts_then_plugin_publishes(n):
        if n == 1:  # every attempt of the next read fails (2 attempts: ACK_MIG_KUBE_MAX_ATTEMPTS)
            cluster.api.break_next(times=2, status=503, method="GET", path="/api/v1/nodes/node-a")
        if n == 2:
            cluster.api.set_capacity("node-a", capacity(NEW))

    cluster.transport.run = apply_with_a_slow_device_plugin
    cluster.on_sleep = api_server_restarts_then_plugin_publishes
    result = cluster.run(inventory=ONE, ACK_MIG_KUBE_MAX_ATTEMPTS="2")
    assert result.nodes[0]["outcome"] == "partitioned" and "new capacity shows" in result.nodes[0]["reason"]
    assert [r.status for r in cluster.api.requests if r.path == "/api/v1/nodes/node-a"].count(503) == 2


def test_the_capacity_wait_has_its_own_deadline_not_the_drain_timeout(cluster):
    """The device plugin publishes the new resources 60 s after the apply: a capacity timeout of 100 s
    waits for them although the drain timeout is 30 s; a capacity timeout of 20 s gives up at 20 s
    although the drain timeout is 900 s."""
    cluster.add_nodes(["node-a"])
    real_run = cluster.transport.run
    applied_at = []

    def slow_device_plugin(targets):
        out = real_run(targets)
        cluster.api.set_capacity("node-a", capacity(OLD))  # still the old layout for now
        applied_at.append(cluster.now[0])
        return out

    def publish_after_60s(n):
        if applied_at and cluster.now[0] - applied_at[0] >= 60:
            cluster.api.set_capacity("node-a", capacity(NEW))

    cluster.transport.run = slow_device_plugin
    cluster.on_sleep = publish_after_60s
    waited = cluster.run(inventory=ONE, ACK_MIG_DRAIN_TIMEOUT_S="30", ACK_MIG_CAPACITY_TIMEOUT_S="100")
    assert waited.nodes[0]["outcome"] == "partitioned", waited.nodes[0]["reason"]
    assert 60 <= cluster.now[0] - applied_at[0] < 100
    cluster.api.nodes.clear()
    cluster.add_nodes(["node-a"])
    applied_at.clear()
    start = len(cluster.sleeps)
    short = cluster.run(inventory=ONE, ACK_MIG_DRAIN_TIMEOUT_S="900", ACK_MIG_CAPACITY_TIMEOUT_S="20")
    assert short.nodes[0]["outcome"] == "failed" and "capacity-timeout: after 20s" in short.nodes[0]["reason"]
    assert 20 <= sum(cluster.sleeps[start:]) <= 24


def test_polling_costs_one_cached_pod_list_per_wave_node_per_pass_and_one_consistent_one_a_node(cluster):
    cluster.add_nodes()
    api = cluster.api
    for n in NAMES:
        api.add_pod("team", "infer-%s" % n, n, labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    api.add_pdb("team", "infer", {"app": "infer"}, max_unavailable=0)  # nothing may go for now

    def allow_after_three_passes(n):
        if n == 3:
            api.pdbs.clear()

    cluster.on_sleep = allow_after_three_passes
    result = cluster.run(ACK_MIG_MAX_UNAVAILABLE="3")
    assert {n["outcome"] for n in result.nodes} == {"partitioned"}
    lists = [r for r in api.requests if r.path == "/api/v1/pods"]
    passes = len(cluster.sleeps) + 1  # the drain passes (the capacity showed at once)
    claims = len(NAMES)  # one look before each cordon: a pod the rules keep defers the node untouched
    applies = len(NAMES)  # one before each apply: the GPU DaemonSet pods to restart after it
    cached = [r for r in lists if "resourceVersion=0" in r.query]
    assert len(cached) <= claims + passes * len(NAMES) + applies
    assert all("spec.nodeName" in r.query for r in lists)
    # one consistent read a node: the last pass's, which found no GPU pod left in the cache (drain.evict_pass)
    assert sorted(r.query for r in lists if r not in cached) == [
        "fieldSelector=spec.nodeName%%3D%s" % n for n in sorted(NAMES)]
    assert len({r.connection for r in api.requests if r.user == FUNCTION_USER}) == 1


def test_every_listing_is_read_to_its_last_page(cluster):
    """The rollout's client pages by 2 (conftest): node-c is on the second page of every node listing."""
    cluster.add_nodes()
    result = cluster.run(dry_run=True)
    assert {d.node_name: d.action for d in result.decisions} == {"node-a": "partition", "node-b": "defer",
                                                                "node-c": "defer"}
    lists = [r for r in cluster.api.requests if r.path == "/api/v1/nodes"]
    assert len(lists) == 2 and "continue=" in lists[1].query
    assert "labelSelector=alibabacloud.com%2Fnodepool-id%3Dnp-mig" in lists[0].query
    assert not [r for r in cluster.api.requests if r.path.startswith("/api/v1/nodes/")]  # no read per node
