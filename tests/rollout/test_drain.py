"""The drain, like kubectl drain for the GPUs (k8s.io/kubectl/pkg/drain/filters.go): which pods move,
which stay, which keep the node from being drained, and what the settings change. Against the TLS API
server, and the rules one pod at a time."""

import time

import pytest

from functions.rollout import drain as dr
from tests.rollout.conftest import snapshot

ONE = snapshot(names=["node-a"])


def pod(containers=None, init=None, owner="ReplicaSet", controller=True, volumes=None, claims=None,
        phase="Running", annotations=None, terminating=False):
    meta = {"name": "p", "namespace": "team", "annotations": dict(annotations or {})}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": controller}]
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"containers": [{"name": "c", "resources": {"limits": limits}} for limits in containers or [{}]]}
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init}}]
    if volumes:
        spec["volumes"] = volumes
    if claims:
        spec["resourceClaims"] = claims
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


GPU = [{"nvidia.com/gpu": "1"}]
SHM = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
SCRATCH = {"name": "scratch", "emptyDir": {}}


@pytest.mark.parametrize("p, kind", [
    (pod(GPU), dr.EVICT),
    (pod([{"nvidia.com/mig-1g.5gb": "1"}]), dr.EVICT),
    (pod([{"aliyun.com/gpu-mem": "8"}]), dr.EVICT),  # ACK GPU sharing asks no nvidia.com resource
    (pod([{"aliyun.com/gpu-core.percentage": "30"}]), dr.EVICT),
    (pod([{"cpu": "1"}], init={"nvidia.com/gpu": "1"}), dr.EVICT),  # an init container's request counts
    (pod([{"cpu": "1"}], claims=[{"name": "gpu", "resourceClaimName": "a100"}]), dr.EVICT),  # DRA
    (pod([{"cpu": "1"}]), dr.LEAVE),
    (pod(GPU, owner="DaemonSet"), dr.LEAVE),
    (pod(GPU, owner="DaemonSet", controller=False), dr.REFUSE),  # a DaemonSet owner that is not the controller
    (pod(GPU, annotations={"kubernetes.io/config.mirror": "x"}), dr.LEAVE),
    (pod(GPU, phase="Succeeded"), dr.LEAVE),
    (pod(GPU, terminating=True), dr.WAIT),
    (pod(GPU, owner=None), dr.REFUSE),
    (pod(GPU, volumes=[SHM]), dr.EVICT),
    (pod(GPU, volumes=[SHM, SCRATCH]), dr.REFUSE),
])
def test_what_a_drain_does_with_each_pod_by_default(p, kind):
    assert dr.verdict(p, dr.Rules())[0] == kind


def test_the_settings_allow_what_kubectl_drains_flags_allow():
    bare, scratch, shm = pod(GPU, owner=None), pod(GPU, volumes=[SCRATCH]), pod(GPU, volumes=[SHM])
    assert "ACK_MIG_DRAIN_FORCE=true" in dr.verdict(bare, dr.Rules())[1]
    assert dr.verdict(bare, dr.Rules(force=True))[0] == dr.EVICT
    assert "ACK_MIG_DRAIN_EMPTYDIR=any" in dr.verdict(scratch, dr.Rules())[1]
    assert dr.verdict(scratch, dr.Rules(emptydir="any"))[0] == dr.EVICT
    assert dr.verdict(shm, dr.Rules(emptydir="none"))[0] == dr.REFUSE


def test_gpu_pods_without_nvidia_resources_are_drained_too(cluster):
    """A GPU-sharing pod and a DRA pod hold the GPUs without asking for nvidia.com/*: left running they
    would make the node refuse gpu-busy and stop the pool's rollout."""
    cluster.add_nodes(["node-a"])
    api = cluster.api
    api.add_pod("team", "share", "node-a", resources={"aliyun.com/gpu-mem": "8"}, owner_kind="ReplicaSet")
    api.add_pod("team", "dra", "node-a", resource_claims=[{"name": "gpu", "resourceClaimName": "c"}],
                owner_kind="ReplicaSet")
    api.add_pod("team", "shm", "node-a", gpus=1, volumes=[SHM], owner_kind="ReplicaSet")
    api.add_pod("team", "web", "node-a", owner_kind="ReplicaSet")
    result = cluster.run(inventory=ONE)
    assert result.nodes[0]["outcome"] == "partitioned"
    evicted = sorted(r.path.split("/")[-2] for r in api.requests if r.path.endswith("/eviction"))
    assert evicted == ["dra", "share", "shm"]
    assert set(api.pods) == {("team", "web")}


def test_a_pod_without_a_controller_defers_the_node_untouched_and_is_named(cluster):
    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "notebook", "node-a", gpus=1)  # nothing would recreate it
    cluster.api.add_pod("team", "cache", "node-a", gpus=1, volumes=[SCRATCH], owner_kind="ReplicaSet")
    dry = cluster.run(inventory=ONE, dry_run=True)
    assert dry.nodes[0]["outcome"] == "deferred"
    assert "pod team/notebook declares no controller" in dry.nodes[0]["reason"]
    result = cluster.run(inventory=ONE)
    node = result.nodes[0]
    assert node["outcome"] == "deferred" and "pod team/notebook declares no controller" in node["reason"]
    assert "pod team/cache its emptyDir scratch holds data on the node's disk" in node["reason"]
    assert not cluster.unschedulable("node-a") and cluster.annotation("node-a") is None
    assert cluster.transport.seen == [] and not [r for r in cluster.api.requests if r.path.endswith("/eviction")]
    assert {("team", "notebook"), ("team", "cache")} <= set(cluster.api.pods)
    (told,) = cluster.events("MigRolloutDeferred")  # a cause of its own: an Event on the node
    assert told["type"] == "Warning" and "team/notebook" in told["message"]
    forced = cluster.run(inventory=ONE, ACK_MIG_DRAIN_FORCE="true", ACK_MIG_DRAIN_EMPTYDIR="any")
    assert forced.nodes[0]["outcome"] == "partitioned" and not {("team", "notebook"), ("team", "cache")} & set(
        cluster.api.pods)


def test_a_pod_without_a_controller_that_arrives_after_the_cordon_waits_until_the_drain_timeout(cluster):
    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")
    real_evict = cluster.kube.evict

    def evict_and_a_bare_pod_lands(namespace, name):  # bound by name, past the scheduler and the cordon
        real_evict(namespace, name)
        if ("team", "bare") not in cluster.api.pods:
            cluster.api.add_pod("team", "bare", "node-a", gpus=1)

    cluster.kube.evict = evict_and_a_bare_pod_lands
    result = cluster.run(inventory=ONE, ACK_MIG_DRAIN_TIMEOUT_S="10")
    node = result.nodes[0]
    assert node["outcome"] == "drain-timeout" and "pod team/bare declares no controller" in node["reason"]
    assert cluster.transport.seen == [] and not cluster.unschedulable("node-a")


def test_a_pod_the_lagging_watch_cache_does_not_show_yet_is_evicted_before_the_apply(cluster):
    """A list with resourceVersion=0 may be served from a watch cache that lags (API Concepts: "Any"): a pod
    bound a moment ago is missing from it. The drain's verdict that nothing is left is a consistent read, so
    the GPUs are never repartitioned under a pod that has just landed."""
    cluster.add_nodes(["node-a"])
    cluster.api.watch_cache_lags()
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")  # bound a moment ago
    assert cluster.kube.list_pods("node-a") == []  # what the lagging cache shows
    one = dr.evict_pass(cluster.kube, "node-a")
    assert one.evicted == ["team/train"] and one.remaining == 1
    result = cluster.run(inventory=ONE)
    assert result.nodes[0]["outcome"] == "partitioned" and ("team", "train") not in cluster.api.pods


def test_a_throttled_eviction_is_reported_as_throttling_not_as_a_budget(cluster):
    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")
    cluster.api.throttle(times=100, retry_after=1, method="POST", path="/api/v1/namespaces/team/pods")
    result = cluster.run(inventory=ONE, ACK_MIG_DRAIN_TIMEOUT_S="4", ACK_MIG_KUBE_MAX_ATTEMPTS="2")
    reason = result.nodes[0]["reason"]
    assert result.nodes[0]["outcome"] == "drain-timeout" and "throttling (429 Too Many Requests)" in reason
    assert "disruption budget" not in reason and not cluster.events("MigRolloutDrain")


def test_a_pod_terminating_past_the_skip_wait_setting_is_left_as_kubectl_leaves_it():
    """kubectl drain --skip-wait-for-delete-timeout (k8s.io/kubectl/pkg/drain/filters.go skipDeletedFilter)."""
    import calendar
    import time as _time

    deleted = calendar.timegm(_time.strptime("2026-01-01T00:00:00", "%Y-%m-%dT%H:%M:%S"))
    stuck = pod(GPU, terminating=True)
    rules = dr.Rules(skip_wait_s=300)
    assert dr.verdict(stuck, rules, now=deleted + 299)[0] == dr.WAIT
    assert dr.verdict(stuck, rules, now=deleted + 301) == (dr.LEAVE, "terminating for more than 300s: not waited for")
    assert dr.verdict(stuck, dr.Rules(skip_wait_s=0), now=deleted + 10 ** 6)[0] == dr.WAIT  # 0: always wait
    assert dr.verdict(stuck, rules)[0] == dr.WAIT  # no clock, no skip
    odd = pod(GPU, terminating=True)
    odd["metadata"]["deletionTimestamp"] = "yesterday"
    assert dr.verdict(odd, rules, now=deleted + 10 ** 6)[0] == dr.WAIT  # an unreadable time is waited for


def test_a_pod_under_two_budgets_ends_the_node_drain_refused_at_once(cluster):
    """eviction.go answers 500 for a pod that several budgets select; kubectl drain stops on it, so does the
    rollout: at once, not at the drain deadline, with the API server's message, the node uncordoned."""
    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet", labels={"app": "train"})
    cluster.api.add_pdb("team", "one", {"app": "train"}, max_unavailable=1)
    cluster.api.add_pdb("team", "two", {"app": "train"}, max_unavailable=1)
    started = time.monotonic()
    result = cluster.run(inventory=ONE, ACK_MIG_DRAIN_TIMEOUT_S="600")
    node = result.nodes[0]
    assert node["outcome"] == "drain-refused", node
    assert "more than one PodDisruptionBudget" in node["reason"] and "team/train" in node["reason"]
    assert time.monotonic() - started < 60  # not the 600 s deadline
    assert cluster.transport.seen == [] and not cluster.unschedulable("node-a")
    assert ("team", "train") in cluster.api.pods


def test_gpu_daemonset_pods_are_restarted_after_the_apply_and_listed_by_a_dry_run(cluster):
    """A DaemonSet pod holding a GPU is left by the drain (kubectl's rule) but would keep a destroyed
    instance: it is evicted after the apply, so its DaemonSet recreates it on the new instances. A
    DaemonSet pod without a GPU (the device plugin itself) is left alone."""
    from tests.rollout.conftest import snapshot

    cluster.add_nodes(["node-a"])
    api = cluster.api
    api.add_pod("gpu-system", "dcgm-exporter-a", "node-a", gpus=1, owner_kind="DaemonSet")
    api.add_pod("kube-system", "device-plugin-a", "node-a", owner_kind="DaemonSet")
    api.add_pod("team", "train-a", "node-a", gpus=1, owner_kind="ReplicaSet")
    inventory = snapshot(names=["node-a"])
    dry = cluster.run(inventory=inventory, dry_run=True)
    assert "after the apply, restart the GPU DaemonSet pods gpu-system/dcgm-exporter-a" in dry.nodes[0]["reason"]
    assert ("gpu-system", "dcgm-exporter-a") in api.pods
    evicted_before_apply = []
    real = cluster.transport.run

    def apply(targets):
        evicted_before_apply.append(("gpu-system", "dcgm-exporter-a") not in api.pods)
        return real(targets)
    cluster.transport.run = apply
    result = cluster.run(inventory=inventory)
    assert result.nodes[0]["outcome"] == "partitioned", result.nodes
    assert "GPU DaemonSet pods restarted: gpu-system/dcgm-exporter-a" in result.nodes[0]["reason"]
    assert evicted_before_apply == [False]  # the drain left it; the apply's restart took it
    assert ("gpu-system", "dcgm-exporter-a") not in api.pods and ("kube-system", "device-plugin-a") in api.pods
    assert [e["involvedObject"]["name"] for e in cluster.events("MigRolloutRestartGpuDaemons")] == ["node-a"]


def test_a_pod_of_another_shape_is_judged_alone_and_the_node_drained_or_deferred_by_the_others(cluster):
    """A pod of the node whose ``ownerReferences`` was no list of objects, whose containers or volumes were no
    list, or whose metadata was no object (a proxy or a mangled answer; the API server serves no such pod)
    ended the drain's verdicts in an AttributeError or TypeError, and the rollout in an internal error. A part
    of another shape reads as absent now (the reader rule, node_bootstrap/outside.py): a GPU pod whose owner
    cannot be read declares no controller, and keeps the node untouched and named as such a pod does; a pod
    whose containers cannot be read asks for no GPU."""
    cluster.add_nodes(["node-a"])
    api = cluster.api
    api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")
    api.add_pod("team", "bare", "node-a", gpus=1, owner_kind="ReplicaSet")
    api.add_pod("team", "web", "node-a", owner_kind="ReplicaSet")
    with api.lock:
        api.pods[("team", "bare")]["metadata"]["ownerReferences"] = "bare-owner"
        api.pods[("team", "bare")]["spec"]["volumes"] = "scratch"
        api.pods[("team", "web")]["spec"]["containers"] = "web"
        api.pods[("team", "web")]["metadata"]["annotations"] = 7
    dry = cluster.run(inventory=ONE, dry_run=True)
    assert dry.nodes and dry.nodes[0]["outcome"] == "deferred", (dry.outcome, dry.reason)
    assert "pod team/bare declares no controller" in dry.nodes[0]["reason"]
    result = cluster.run(inventory=ONE)
    node = result.nodes[0]
    assert node["outcome"] == "deferred" and "pod team/bare declares no controller" in node["reason"]
    assert "team/web" not in node["reason"] and not cluster.unschedulable("node-a")
    assert not [r for r in api.requests if r.path.endswith("/eviction")]
    forced = cluster.run(inventory=ONE, ACK_MIG_DRAIN_FORCE="true")
    assert forced.nodes[0]["outcome"] == "partitioned", forced.nodes[0]
    assert set(api.pods) == {("team", "web")}


def test_pods_anyone_binds_to_the_node_past_the_clients_bound_do_not_stop_its_drain(cluster, monkeypatch):
    """A pod may be created with ``spec.nodeName`` set (pods create rights in any namespace; kubelet may refuse
    it, Failed, and it stays), up to 1.5 MiB each: the node's pod list then holds whatever they carry. The drain
    read it as one answer, so enough of them made it larger than the client reads (64 MiB) and every drain pass
    failed: the node's rollout stopped for good. Now the list is decoded pod by pod, only GPU pods kept (and only
    what the drain reads of them), and a list larger than the client reads is read again in pages; the verdict
    that no GPU pod is left is still a consistent read. The client's bound is lowered to 12 MiB here (30 pods of
    0.5 MB; a page of 16 is 8 MB), the same rule at a size the test server writes quickly."""
    from functions.kube import client as client_module
    from tests.rollout.test_auto_pool_bounded import big_affinity

    monkeypatch.setattr(client_module, "MAX_ANSWER_BYTES", 12 * 1024 * 1024)
    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet", volumes=[SHM])
    affinity = big_affinity(15_000)
    for i in range(30):
        bound = cluster.api.add_pod("batch", "bound-%02d" % i, "node-a", phase=("Running", "Failed")[i % 2],
                                    resources={"cpu": "1"}, labels={"l%04d" % j: "v" for j in range(500)})
        with cluster.api.lock:
            bound["spec"]["affinity"] = affinity
    listed = dr.node_pods(cluster.kube, "node-a")
    assert [dr.pod_name(p) for p in listed] == ["team/train"] and len(repr(listed)) < 1000, listed
    assert dr.verdict(listed[0], dr.Rules()) == (dr.EVICT, "uses the GPUs")
    result = cluster.run(inventory=ONE)
    assert result.nodes[0]["outcome"] == "partitioned", result.nodes[0]
    assert ("team", "train") not in cluster.api.pods and ("batch", "bound-00") in cluster.api.pods
    lists = [r.query for r in cluster.api.requests if r.path == "/api/v1/pods"]
    assert any("resourceVersion=0" in q and "limit" not in q for q in lists), lists  # the watch cache first
    paged = [q for q in lists if "limit=" in q]
    assert paged and not [q for q in paged if "resourceVersion" in q], lists  # then pages of one consistent list


@pytest.mark.parametrize("body", ['{"items": 5}', '{"items": {"a": {}}}', '{"items": [1]}', "null",
                                  '{"items": [{"metadata": {"name": "p"}}, "x"]}'])
def test_a_pod_list_of_another_shape_fails_the_drains_read_not_counted_empty(cluster, body):
    """Read pod by pod, a list whose items are no list, or hold an item that is no object, would otherwise
    read as a node without those pods: drained, its GPUs repartitioned under them."""
    from functions.kube.client import ApiError

    cluster.add_nodes(["node-a"])
    cluster.api.answer_next("GET", "/api/v1/pods", body)
    with pytest.raises(ApiError) as err:
        dr.node_pods(cluster.kube, "node-a")
    assert "\n" not in str(err.value) and str(err.value).startswith("GET /api/v1/pods: "), err.value
