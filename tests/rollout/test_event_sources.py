"""Running nodes change only through the rollout, whatever event names them: an Auto Scaling scale-out
(with or without its scaling group), a lifecycle hook (EventBridge or MNS), an ECS state change, a
CloudMonitor notice, an ActionTrail pool operation, a manual run, the timer. Nodes that have just joined
are partitioned directly, as a scale-out always did. Against the TLS API server."""

import json
import os

import pytest

from tests.rollout.conftest import CLUSTER, NEW, POOL, snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUP, HOOK = "asg-1", "ash-1"
NAMES = ["node-a", "node-b", "node-c"]  # a and b run the old layout, c has just joined


def ids(name):
    return "i-" + name.replace("-", "")  # ECS instance ids are letters and digits after "i-"


def inventory(names=NAMES):
    data = snapshot(names=names, ids=ids)
    data["scaling_instances"] = {GROUP: [ids(n) for n in names]}
    data["lifecycle_hooks"] = {HOOK: GROUP}
    return data


def _event(name, change):
    with open(os.path.join(ROOT, "tests", "events", name)) as fh:
        doc = json.load(fh)
    change(doc)
    return json.dumps(doc)


def scale_out(names, group=True):
    def change(doc):
        doc["data"] = {"instanceIds": [ids(n) for n in names]}
        if group:
            doc["data"]["scalingGroupId"] = GROUP
        else:
            doc.pop("subject", None)
    return _event("ess_scale_out_success.json", change)


def cloudmonitor(names):
    def change(doc):
        doc["data"]["resourceId"] = "acs:ess:cn-beijing:1234567890123456:scalinggroup/%s" % GROUP
        doc["data"]["content"] = {"scalingGroupId": GROUP, "instanceIds": [ids(n) for n in names]}
    return _event("cloudmonitor_scale_out_success.json", change)


def lifecycle(names):
    def change(doc):
        doc["data"].update(lifecycleHookId=HOOK, scalingGroupId=GROUP, instanceIds=[ids(n) for n in names])
    return _event("ess_lifecycle_scale_out.json", change)


def mns(names):
    def change(doc):
        doc["content"].update(lifecycleHookId=HOOK, scalingGroupId=GROUP, instanceIds=[ids(n) for n in names])
        doc["resourceArn"] = "acs:ess:cn-beijing:1234567890123456:lifecyclehook/%s/%s" % (GROUP, HOOK)
    return _event("mns_lifecycle_scale_out.json", change)


def ecs_running(names):
    def change(doc):
        doc["data"]["resourceId"] = ids(names[0])
        doc["subject"] = "acs:ecs:cn-beijing:1234567890123456:instance/%s" % ids(names[0])
    return _event("ecs_instance_running.json", change)


def actiontrail(names):
    def change(doc):
        doc["data"]["requestParameters"].update(ClusterId=CLUSTER, NodepoolId=POOL)
    return _event("actiontrail_api_scale_nodepool.json", change)


def manual(names):
    return json.dumps({"cluster_id": CLUSTER, "nodepool_id": POOL, "instance_ids": [ids(n) for n in names]})


def timer(names):
    return _event("fc_timer.json", lambda doc: None)


SOURCES = {"scale-out": scale_out, "scale-out without group": lambda n: scale_out(n, group=False),
           "cloudmonitor": cloudmonitor, "lifecycle hook": lifecycle, "mns lifecycle hook": mns,
           "manual": manual, "actiontrail": actiontrail, "timer": timer}


def add_cluster(cluster):
    cluster.add_nodes(["node-a", "node-b"])
    cluster.add_nodes(["node-c"], sequence=None, state=None)  # joined a minute ago: no state label yet


def by_node(result):
    return {d.node_name: d for d in result.decisions}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_every_source_sends_running_nodes_through_the_rollout_and_new_ones_directly(cluster, source):
    add_cluster(cluster)
    result = cluster.run(inventory=inventory(), event=SOURCES[source](NAMES), dry_run=True)
    assert result.outcome == "done", result.reason
    d = by_node(result)
    assert d["node-a"].action == "partition" and "a running node (nvidia.com/mig.config.state=success), so " \
        "through the rollout: rollout of pool %s (gpu) to sequence=%s, wave node-a" % (POOL, NEW) in d["node-a"].reason
    assert d["node-b"].action == "defer" and "waits for a later wave" in d["node-b"].reason
    assert d["node-c"].action == "partition" and d["node-c"].reason.endswith(
        "a new node: no nvidia.com/mig.config.state yet, so partitioned directly")
    nodes = {n["instance_id"]: n for n in result.nodes}
    nodes = {name: nodes[ids(name)] for name in NAMES}
    assert nodes["node-a"]["reason"].startswith("dry run: would cordon")
    assert nodes["node-b"]["outcome"] == "deferred"
    assert nodes["node-c"]["reason"].startswith("dry run: would partition each GPU")
    assert cluster.transport.seen == [] and not [r for r in cluster.api.requests if r.method != "GET"]


def test_an_ecs_running_event_for_one_running_node_rolls_it(cluster):
    add_cluster(cluster)
    result = cluster.run(inventory=inventory(), event=ecs_running(["node-b"]))
    assert {n["node_name"]: n["outcome"] for n in result.nodes} == {"node-b": "partitioned"}
    patches = [r.body for r in cluster.api.requests if r.method == "PATCH" and r.path.endswith("/node-b")]
    assert patches[0]["spec"] == {"unschedulable": True} and '"step": "cordoned"' in str(patches[0])
    assert cluster.annotation("node-b")["step"] == "done" and not cluster.unschedulable("node-b")


def test_a_scale_out_naming_a_running_node_cordons_drains_and_waits_for_capacity(cluster):
    add_cluster(cluster)
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")
    result = cluster.run(inventory=inventory(), event=scale_out(["node-a", "node-c"]))
    assert {n["node_name"]: n["outcome"] for n in result.nodes} == {"node-a": "partitioned", "node-c": "partitioned"}
    assert sorted(cluster.transport.seen) == ["node-a", "node-c"]
    assert ("team", "train") not in cluster.api.pods  # evicted before the apply
    assert [r.path for r in cluster.api.requests if r.path.endswith("/eviction")] == [
        "/api/v1/namespaces/team/pods/train/eviction"]
    assert cluster.annotation("node-a")["step"] == "done" and cluster.annotation("node-c") is None
    assert not [r for r in cluster.api.requests if r.method == "PATCH" and r.path.endswith("/node-c")]
    assert "new capacity shows" in next(n for n in result.nodes if n["node_name"] == "node-a")["reason"]


def test_a_stopped_rollout_stays_stopped_for_any_event(cluster):
    add_cluster(cluster)
    cluster.api.add_pod("team", "infer-0", "node-b", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    cluster.api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    stopped = cluster.run(inventory=inventory(["node-b"]), event=scale_out(["node-b"]), ACK_MIG_DRAIN_TIMEOUT_S="10")
    assert stopped.nodes[0]["outcome"] == "drain-timeout"
    for make in (scale_out, lifecycle, cloudmonitor, manual):
        result = cluster.run(inventory=inventory(), event=make(["node-a"]), dry_run=make is lifecycle)
        d = by_node(result)["node-a"]
        assert d.action == "defer" and "stopped: node node-b ended drain-timeout" in d.reason, make
    assert cluster.transport.seen == []


def test_a_node_another_invocation_holds_takes_the_pools_slot(cluster):
    add_cluster(cluster)
    cluster.api.add_pod("team", "infer-0", "node-b", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    cluster.api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    seen = {}

    def event_meanwhile(n):  # the timer is draining node-b when a scale-out names node-a
        if n == 1:
            cluster.on_sleep = None
            seen["event"] = cluster.run(inventory=inventory(), event=scale_out(["node-a"]))
            cluster.api.add_pod("team", "infer-1", "node-x", labels={"app": "infer"}, gpus=1,
                                owner_kind="ReplicaSet")

    cluster.on_sleep = event_meanwhile
    cluster.run(inventory=inventory(["node-b"]))
    d = by_node(seen["event"])["node-a"]
    assert d.action == "defer" and "wave node-b (max-unavailable 1)" in d.reason
    assert cluster.transport.seen == ["node-b"]


def test_a_lifecycle_hook_naming_a_running_node_is_answered_once_and_the_node_rolls(cluster):
    from tests.function.conftest import AK, SECRET, TOKEN
    from tests.support.rpc_emulator import Emulator

    add_cluster(cluster)
    with Emulator(AK, SECRET, TOKEN, "cn-beijing").load_inventory(inventory()) as ess:
        result = cluster.run(inventory=inventory(), event=lifecycle(["node-a", "node-c"]),
                             ACK_MIG_ESS_ENDPOINT=ess.endpoint, ACK_MIG_REGION="cn-beijing",
                             ALIBABA_CLOUD_ACCESS_KEY_ID=AK, ALIBABA_CLOUD_ACCESS_KEY_SECRET=SECRET,
                             ALIBABA_CLOUD_SECURITY_TOKEN=TOKEN)
        answers = [p for kind, p in ess.lifecycle if kind == "complete"]
    assert {n["node_name"]: n["outcome"] for n in result.nodes} == {"node-a": "partitioned", "node-c": "partitioned"}
    assert len(answers) == 1 and answers[0]["LifecycleHookId"] == HOOK
    assert cluster.annotation("node-a")["step"] == "done" and cluster.annotation("node-c") is None


@pytest.mark.parametrize("taint", [True, False])
def test_a_node_with_the_startup_taint_or_pending_state_is_new(cluster, taint):
    startup = {"key": "ack-mig-hook/partition-pending", "value": "true", "effect": "NoSchedule"}
    if taint:  # its first apply failed: state failed, still tainted
        cluster.add_nodes(["node-a"], sequence=None, state="failed", taints=[startup])
    else:
        cluster.add_nodes(["node-a"], sequence=None, state="pending")
    result = cluster.run(inventory=inventory(["node-a"]), event=scale_out(["node-a"]), dry_run=True,
                         ACK_MIG_STARTUP_TAINT="ack-mig-hook/partition-pending=true:NoSchedule")
    reason = by_node(result)["node-a"].reason
    assert by_node(result)["node-a"].action == "partition" and "so partitioned directly" in reason
    assert ("still carries the startup taint" if taint else "=pending (its first apply)") in reason
