"""Rolling repartition of running nodes against the local TLS Kubernetes API: waves, defer, skip,
cordon/drain/apply/capacity/uncordon, PodDisruptionBudgets, drain timeout, someone else's cordon."""

import pytest

from tests.rollout.conftest import NAMES, NEW, OLD, POOL, capacity, node_labels, snapshot


def actions(result):
    return {d.node_name: d.action for d in result.decisions}


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def test_dry_run_shows_the_whole_plan_and_touches_nothing(cluster):
    cluster.add_nodes()
    cluster.api.add_pod("team", "train-0", "node-a", gpus=1, owner_kind="ReplicaSet")
    before = len([r for r in cluster.api.requests if r.method != "GET"])
    first_request = len(cluster.api.requests)
    result = cluster.run(dry_run=True)
    assert actions(result) == {"node-a": "partition", "node-b": "defer", "node-c": "defer"}
    # The plan reads the nodes' list a fixed number of times, not once more per wave node.
    lists = [r for r in cluster.api.requests[first_request:] if r.method == "GET" and r.path == "/api/v1/nodes"]
    assert len(lists) <= 2
    by = {d.node_name: d for d in result.decisions}
    assert "rollout of pool %s (gpu) to sequence=%s" % (POOL, NEW) in by["node-b"].reason
    assert "wave node-a (max-unavailable 1)" in by["node-b"].reason and "1 of 2 waiting" in by["node-b"].reason
    assert "applied layout %s differs" % OLD in by["node-a"].reason
    node_a = next(n for n in result.nodes if n["node_name"] == "node-a")
    assert node_a["outcome"] == "dry-run" and "would cordon, evict team/train-0" in node_a["reason"]
    assert outcomes(result)["node-b"] == "deferred"
    assert [r for r in cluster.api.requests if r.method != "GET"][before:] == [] and cluster.transport.seen == []


def test_one_wave_per_invocation_until_every_node_is_right_then_nothing_is_sent(cluster):
    cluster.add_nodes()
    first = cluster.run()
    assert outcomes(first) == {"node-a": "partitioned", "node-b": "deferred", "node-c": "deferred"}
    assert cluster.transport.seen == ["node-a"]
    assert cluster.annotation("node-a")["step"] == "done" and not cluster.unschedulable("node-a")
    assert cluster.api.nodes["node-a"]["metadata"]["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == NEW
    assert "new capacity shows (nvidia.com/mig-3g.20gb=16)" in first.nodes[0]["reason"]
    # the cordon and the uncordon really went to the API server, each with its step recorded
    patches = [r.body for r in cluster.api.requests if r.method == "PATCH" and r.path.endswith("/node-a")]
    assert patches[0]["spec"] == {"unschedulable": True} and '"step": "cordoned"' in str(patches[0])
    assert patches[-1]["spec"] == {"unschedulable": None} and '"step": "done"' in str(patches[-1])
    # waiting for a later wave is the pool's state, not each node's: no Event per waiting node per invocation
    assert cluster.events("MigRolloutDeferred") == []
    assert cluster.events("MigRolloutCordon")[0]["involvedObject"]["name"] == "node-a"
    cluster.run()
    cluster.run()
    assert cluster.transport.seen == NAMES
    last = cluster.run()
    assert actions(last) == {n: "skip" for n in NAMES} and cluster.transport.seen == NAMES
    assert all("done" in d.reason for d in last.decisions)


def test_only_gpu_pods_are_evicted_daemonset_mirror_and_cpu_pods_stay(cluster):
    cluster.add_nodes(["node-a"])
    api = cluster.api
    api.add_pod("team", "train", "node-a", gpus=2, owner_kind="ReplicaSet")
    api.add_pod("kube-system", "dcgm-exporter", "node-a", gpus=1, owner_kind="DaemonSet")
    api.add_pod("kube-system", "nvidia-device-plugin-node-a", "node-a", gpus=1,
                annotations={"kubernetes.io/config.mirror": "abc"})
    api.add_pod("team", "web", "node-a", gpus=0, owner_kind="ReplicaSet")
    api.add_pod("team", "done-job", "node-a", gpus=1, phase="Succeeded")
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert outcomes(result) == {"node-a": "partitioned"}
    evictions = [r.path for r in api.requests if r.path.endswith("/eviction")]
    # the drain moves train; the GPU DaemonSet pod stays through the drain and is restarted after the apply
    assert evictions == ["/api/v1/namespaces/team/pods/train/eviction",
                         "/api/v1/namespaces/kube-system/pods/dcgm-exporter/eviction"]
    assert set(api.pods) == {("kube-system", "nvidia-device-plugin-node-a"), ("team", "web"), ("team", "done-job")}
    lists = [r.query for r in api.requests if r.path == "/api/v1/pods"]
    assert lists and all("fieldSelector=spec.nodeName%3Dnode-a" in q for q in lists)


def test_a_pdb_refuses_with_429_then_allows_once_a_replacement_runs(cluster):
    cluster.add_nodes()
    api = cluster.api
    api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)

    def replacement_scheduled(n):  # the ReplicaSet's new replica comes up on another node
        if n == 2:
            api.add_pod("team", "infer-1", "node-c", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")

    cluster.on_sleep = replacement_scheduled
    result = cluster.run()
    assert outcomes(result)["node-a"] == "partitioned"
    statuses = [r.status for r in api.requests if r.path.endswith("/infer-0/eviction")]
    assert statuses[:2] == [429, 429] and statuses[-1] == 201  # policy/v1 Eviction: 201 Created when granted
    assert ("team", "infer-0") not in api.pods and ("team", "infer-1") in api.pods
    waits = [e["message"] for e in cluster.events("MigRolloutDrain")]
    assert any("waiting on PodDisruptionBudget" in m and "disruption budget" in m for m in waits)


def test_drain_timeout_uncordons_keeps_the_old_layout_and_stops_the_pool(cluster):
    cluster.add_nodes()
    api = cluster.api
    api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)  # never satisfied
    result = cluster.run(ACK_MIG_DRAIN_TIMEOUT_S="30")
    node = result.nodes[0]
    assert node["outcome"] == "drain-timeout" and "disruption budget" in node["reason"]
    assert cluster.transport.seen == [] and not cluster.unschedulable("node-a")
    assert api.nodes["node-a"]["metadata"]["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == OLD
    assert cluster.annotation("node-a")["step"] == "drain-timeout"
    assert 30 <= sum(cluster.sleeps) <= 34  # waited the drain timeout, polling, no longer
    assert cluster.events("MigRolloutDrainTimeout")[0]["type"] == "Warning"
    again = cluster.run(ACK_MIG_DRAIN_TIMEOUT_S="30")
    assert set(actions(again).values()) == {"defer"} and cluster.transport.seen == []
    assert all("stopped: node node-a ended drain-timeout" in d.reason and "remove its annotation" in d.reason
               for d in again.decisions)


def test_a_node_cordoned_by_someone_else_stays_cordoned(cluster):
    cluster.add_nodes(["node-a"], unschedulable=("node-a",))
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert outcomes(result) == {"node-a": "partitioned"}
    assert cluster.unschedulable("node-a") and cluster.annotation("node-a")["cordoned"] is False
    assert "stays cordoned" in cluster.events("MigRolloutCordon")[0]["message"]


@pytest.mark.parametrize("value", ["false", "", 0, [], "true"], ids=repr)
def test_a_cordon_of_another_type_than_a_boolean_is_someone_elses_and_is_never_lifted(cluster, value):
    """The API serves spec.unschedulable as a boolean; a mangled Node (a string, 0, a list) cannot be told
    cordoned or not. bool() read the empty ones as not cordoned: the rollout cordoned the node as its own and
    lifted the cordon at the end, someone else's perhaps. Any such value now reads as cordoned by someone else:
    the rollout never records or lifts it (and the budget counts the node unavailable)."""
    cluster.add_nodes(["node-a"])
    cluster.api.nodes["node-a"]["spec"]["unschedulable"] = value
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert outcomes(result) == {"node-a": "partitioned"}
    assert cluster.annotation("node-a")["cordoned"] is False and cluster.unschedulable("node-a")
    assert "stays cordoned" in cluster.events("MigRolloutCordon")[0]["message"]


def test_a_failed_apply_uncordons_and_stops_the_pool(cluster):
    cluster.add_nodes()
    cluster.transport.fail = {"node-a"}
    result = cluster.run()
    assert outcomes(result)["node-a"] == "failed" and "gpu-busy" in result.nodes[0]["reason"]
    assert not cluster.unschedulable("node-a") and cluster.annotation("node-a")["step"] == "failed"
    assert set(actions(cluster.run()).values()) == {"defer"}


@pytest.mark.parametrize("env,pool_labels,wave", [
    ({}, {}, 1),
    ({"ACK_MIG_MAX_UNAVAILABLE": "2"}, {}, 2),
    ({"ACK_MIG_MAX_UNAVAILABLE": "67%"}, {}, 2),  # 67% of 3 nodes, rounded down
    ({"ACK_MIG_MAX_UNAVAILABLE": "10%"}, {}, 1),  # never less than one
    ({"ACK_MIG_MAX_UNAVAILABLE": "1"}, {"ack-mig-hook/max-unavailable": "3"}, 3),  # the pool label wins
])
def test_max_unavailable_setting_and_pool_label(cluster, env, pool_labels, wave):
    cluster.add_nodes()
    result = cluster.run(inventory=snapshot(pool_labels=pool_labels), dry_run=True, **env)
    assert list(actions(result).values()).count("partition") == wave


def test_a_bad_pool_max_unavailable_label_is_one_error_for_the_pool_naming_the_form(cluster):
    cluster.add_nodes()
    result = cluster.run(inventory=snapshot(pool_labels={"ack-mig-hook/max-unavailable": "25pct"}), dry_run=True)
    assert actions(result) == {"node-a": "error", "node-b": "skip", "node-c": "skip"}
    assert "ack-mig-hook/max-unavailable='25pct' is not a count" in result.decisions[0].reason
    assert result.decisions[0].reason.startswith("pool np-mig (gpu): ")
    assert all("reported once on node node-a" in d.reason for d in result.decisions[1:])
    assert cluster.transport.seen == []


def test_applied_layout_is_compared_in_normalized_form_and_state_must_be_success(cluster):
    cluster.add_nodes(["node-a"], sequence="3g.20gb-3g.20gb")  # the pool writes ids, another order
    cluster.add_nodes(["node-b"], sequence=NEW, state="failed")
    cluster.add_nodes(["node-c"], sequence=None, state="pending")
    result = cluster.run(inventory=snapshot(value=" 9-3G.20GB "), dry_run=True, ACK_MIG_MAX_UNAVAILABLE="3")
    assert actions(result) == {"node-a": "skip", "node-b": "partition", "node-c": "partition"}
    by = {d.node_name: d.reason for d in result.decisions}
    assert "already in the requested layout" in by["node-a"]
    assert "nvidia.com/mig.config.state is failed, not success" in by["node-b"]
    assert "a new node: nvidia.com/mig.config.state=pending (its first apply), so partitioned directly" in by["node-c"]


def test_a_snapshot_without_kube_nodes_knows_no_layouts_and_applies_as_before():
    from functions.cloud.cluster import InventoryLookup
    from functions.base.logs import JsonLogger
    from functions.pipeline.event import run_event
    from functions.base.settings import load_settings
    from tests.rollout.conftest import TIMER

    data = snapshot()
    result = run_event(TIMER, load_settings({}), inventory=InventoryLookup.from_dict(data), dry_run=True,
                       logger=JsonLogger("OFF"))
    assert set(actions(result).values()) == {"partition"}
    kube_nodes = {n: {"labels": node_labels(), "annotations": {}, "unschedulable": False} for n in NAMES}
    kube_nodes["node-b"]["labels"] = node_labels(NEW)
    result = run_event(TIMER, load_settings({}), inventory=InventoryLookup.from_dict(dict(data, kube_nodes=kube_nodes)),
                       dry_run=True, logger=JsonLogger("OFF"))
    assert actions(result) == {"node-a": "partition", "node-b": "skip", "node-c": "defer"}
    assert "would cordon, evict no GPU pod" in result.nodes[0]["reason"]


def test_bad_kube_nodes_in_a_snapshot_is_one_line_naming_the_form():
    from functions.cloud.cluster import InventoryLookup
    from functions.base.errors import BadInventory

    with pytest.raises(BadInventory, match=r"kube_nodes\['node-a'\].labels must map text to text"):
        InventoryLookup.from_dict(dict(snapshot(), kube_nodes={"node-a": {"labels": ["x"]}}))


def test_capacity_that_never_shows_fails_the_node_uncordoned(cluster):
    cluster.add_nodes(["node-a"])
    real_run = cluster.transport.run

    def no_device_plugin(targets):
        out = real_run(targets)
        cluster.api.set_capacity("node-a", capacity(OLD))  # the plugin still shows the old layout
        return out

    cluster.transport.run = no_device_plugin
    result = cluster.run(inventory=snapshot(names=["node-a"]), ACK_MIG_CAPACITY_TIMEOUT_S="10")
    assert result.nodes[0]["outcome"] == "failed" and "capacity-timeout" in result.nodes[0]["reason"]
    assert not cluster.unschedulable("node-a")


def _rbac(method, path):
    parts = path.strip("/").split("/")
    parts = parts[3:] if parts[0] == "apis" else parts[2:]  # after apis/<group>/<version> or api/v1
    if parts[0] == "namespaces":
        parts = parts[2:]
    verb = {"GET": "get" if len(parts) % 2 == 0 else "list", "PATCH": "patch", "POST": "create",
            "PUT": "update"}[method]
    resource = parts[0] + ("/" + parts[2] if len(parts) == 3 else "")
    return resource, "create" if method == "POST" else verb


def test_deploy_rbac_yaml_grants_exactly_the_calls_a_rollout_makes(cluster):
    import os

    import yaml

    cluster.add_nodes()
    cluster.api.add_pod("team", "train-0", "node-a", gpus=1, owner_kind="ReplicaSet")
    cluster.run()
    used = {_rbac(r.method, r.path) for r in cluster.api.requests}
    # the run's credential is held to deploy/rbac.yaml (tests/rollout/conftest.py): nothing it did was refused
    assert {r.user for r in cluster.api.requests} == {"ack-mig-hook-function-ram-role-id"}
    assert [r for r in cluster.api.requests if r.status == 403] == []
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "deploy", "rbac.yaml")) as fh:
        roles = [d for d in yaml.safe_load_all(fh) if d and d["kind"] in ("ClusterRole", "Role")]
    # events and leases are a Role in default (not cluster-wide): every Event and pool Lease is written there
    assert all(p.startswith(("/api/v1/namespaces/default/", "/apis/coordination.k8s.io/v1/namespaces/default/"))
               for r in cluster.api.requests for p in [r.path] if "/events" in p or "/leases" in p)
    assert {("leases", "get"), ("leases", "create"), ("leases", "update")} <= used
    granted = {(res, verb) for role in roles for rule in role["rules"] for res in rule["resources"]
               for verb in rule["verbs"]}
    assert used <= granted, used - granted
    # every rule is needed: the rollout (and the taint removal, which gets and patches nodes) use them all
    assert granted - used <= {("nodes", "get")}, granted - used
    # docs/deploy.md's opening of its Kubernetes RBAC section names every grant as "<resource> <verbs>"
    with open(os.path.join(root, "docs", "deploy.md")) as fh:
        opening = fh.read().split("## Kubernetes RBAC", 1)[1].split("\n\n", 2)[1]
    for role in roles:
        for rule in role["rules"]:
            for res in rule["resources"]:
                assert "%s %s" % (res, "/".join(rule["verbs"])) in " ".join(opening.split()), (res, opening)


def test_progress_as_nodes_finish_and_one_log_line_per_node(cluster):
    import io
    import json

    from functions.cloud.cluster import InventoryLookup
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.commands.invoke import Progress
    from functions.base.logs import JsonLogger
    from functions.pipeline.event import run_event
    from functions.base.settings import load_settings
    from tests.rollout.conftest import TIMER

    cluster.add_nodes()
    stream, err = io.StringIO(), io.StringIO()
    seen = []

    def progress(node, total):
        # called as the node ends: its final record is already on the API server
        record = cluster.annotation(node["node_name"])
        seen.append((node["node_name"], node["outcome"], total, record and record["step"]))
        if len(seen) == 1:  # node-a is reported while node-b, in the same wave, is still on its way
            seen.append(("node-b then", cluster.annotation("node-b")["step"]))

    printer = Progress(err)
    settings = load_settings({"ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_MAX_UNAVAILABLE": "2"})
    run_event(TIMER, settings, inventory=InventoryLookup.from_dict(snapshot()), logger=JsonLogger("INFO", stream=stream),
              executor=DeliveryExecutor.from_settings(settings, transport=cluster.transport), kube=cluster.kube,
              progress=lambda n, t: (progress(n, t), printer(n, t)))
    assert seen == [("node-a", "partitioned", 3, "done"), ("node-b then", "applied"),
                    ("node-b", "partitioned", 3, "done"),
                    ("node-c", "deferred", 3, None)]
    assert err.getvalue().splitlines() == ["ack-mig-hook: 1/3 nodes (1 partitioned)",
                                           "ack-mig-hook: 2/3 nodes (2 partitioned)",
                                           "ack-mig-hook: 3/3 nodes (1 deferred, 2 partitioned)"]
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    results = [line["instance_id"] for line in lines if line["message"] == "node result"]
    assert results == ["i-node-a", "i-node-b", "i-node-c"]


def test_an_evicted_pod_that_terminates_gracefully_is_waited_for_not_evicted_again(cluster):
    cluster.add_nodes(["node-a"])
    api = cluster.api
    api.graceful_evictions = True  # the pod stays, terminating, until its kubelet has stopped it
    api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")

    def kubelet_stops_it(n):
        if n == 3:
            api.finish_termination("team", "train")
            assert cluster.transport.seen == []  # nothing applied while the pod still ran

    cluster.on_sleep = kubelet_stops_it
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert result.nodes[0]["outcome"] == "partitioned" and len(cluster.sleeps) == 3
    assert [r.status for r in api.requests if r.path.endswith("/eviction")] == [201]


def test_the_api_server_failing_mid_wave_leaves_a_state_the_next_run_resumes(cluster):
    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")

    def outage(n):
        cluster.api.fail = {"PATCH": 503} if n == 1 else {}

    cluster.on_sleep = outage  # after the first eviction pass, the API server refuses every change
    first = cluster.run(inventory=snapshot(names=["node-a"]))
    node = first.nodes[0]
    assert first.outcome == "retry" and node["outcome"] == "failed" and node["code"] == "api-failed"
    assert "the Kubernetes API failed after step cordoned" in node["reason"] and "HTTP 503" in node["reason"]
    assert cluster.unschedulable("node-a") and cluster.transport.seen == []  # nothing applied meanwhile
    cluster.api.fail = {}
    cluster.on_sleep = None
    # The failed run could not release its record: until its deadline another run leaves the node be
    # (it cannot tell that run from one still working), then resumes it.
    early = cluster.run(inventory=snapshot(names=["node-a"]))
    assert early.nodes[0]["outcome"] == "deferred" and "left to that run" in early.nodes[0]["reason"]
    assert cluster.transport.seen == []
    cluster.now[0] = cluster.annotation("node-a")["expires"] + 1
    again = cluster.run(inventory=snapshot(names=["node-a"]))
    assert again.nodes[0]["outcome"] == "partitioned" and not cluster.unschedulable("node-a")


def test_an_overlapping_invocation_leaves_the_node_another_run_holds(cluster):
    """FC may run the timer and an event (or a retried event) at once: while the first run waits on a
    PodDisruptionBudget, a second one must neither touch node-a nor take node-b into the wave."""
    cluster.add_nodes()
    api = cluster.api
    api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    seen = {}

    def second_invocation(n):
        if n == 1:  # the first run is between eviction attempts on node-a
            cluster.on_sleep = None
            before = len(api.requests)
            seen["result"] = cluster.run()
            seen["writes"] = [r for r in api.requests[before:] if r.method in ("PATCH", "POST", "DELETE")
                              and not r.path.endswith("/events")]
            # the PDB now allows
            api.add_pod("team", "infer-1", "node-c", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")

    cluster.on_sleep = second_invocation
    first = cluster.run()
    second = outcomes(seen["result"])
    assert second["node-a"] == "deferred" and second["node-b"] == "deferred"
    held = next(n for n in seen["result"].nodes if n["node_name"] == "node-a")["reason"]
    assert "left to that run" in held and "at step cordoned" in held
    assert seen["writes"] == []  # no cordon, eviction or annotation from the second run
    assert outcomes(first)["node-a"] == "partitioned" and cluster.transport.seen == ["node-a"]
    record = cluster.annotation("node-a")
    assert record["step"] == "done" and not cluster.unschedulable("node-a")


def test_the_capacity_a_layout_must_publish_uses_the_device_plugins_names():
    # The plugin cannot publish "+" in a resource name: a +me instance shows as nvidia.com/mig-1g.5gb.me. A
    # rollout that waited for "nvidia.com/mig-1g.5gb+me" would time out on every such layout.
    from functions.rollout import run as rollout_run
    from functions.decision.waves import expected_capacity
    from functions.base.model import Decision, PartitionLabel

    assert expected_capacity(["1g.5gb+me", "3g.20gb", "1g.5gb"], 8) == (
        {"nvidia.com/mig-1g.5gb.me": 8, "nvidia.com/mig-3g.20gb": 8, "nvidia.com/mig-1g.5gb": 8}, True)
    # A GPU the function cannot name: every profile the label lists, as the plugin would name it.
    d = Decision(instance_id="i-1", node_name="n", action="partition", reason="r",
                 partition=PartitionLabel(kind="sequence", value="1g.24gb-me-1g.12gb.me-14"))
    assert rollout_run._expected(d, None) == ({"nvidia.com/mig-1g.24gb-me": 1, "nvidia.com/mig-1g.12gb.me": 1},
                                              False)


def test_a_hostile_rollout_record_reads_as_none_and_never_raises():
    from functions.decision.waves import MAX_PROGRESS_TEXT, Progress

    good = Progress("3g.20gb", "cordoned", owner="me", expires=5.0)
    assert Progress.from_annotation(good.to_annotation()) == good
    deep = "[" * 1000 + "]" * 1000  # json.loads raises RecursionError on this: every reconcile stopped once
    for text in (deep, "[" * 1000, '{"target": ' * 600, "x" * (MAX_PROGRESS_TEXT + 1),
                 '{"target": "3g.20gb", "step": "cordoned", "pad": "%s"}' % ("y" * MAX_PROGRESS_TEXT), "[1, 2]", "7"):
        assert Progress.from_annotation(text) is None, text[:30]


def test_retry_after_counts_only_ascii_seconds():
    from functions.kube.client import _retry_after

    assert _retry_after({"Retry-After": "7"}) == 7.0
    assert [_retry_after({"Retry-After": v}) for v in ("²", "٣", "1.5", "-1", "")] == [None] * 5
