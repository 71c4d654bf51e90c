"""An auto pool end to end on the real kube-apiserver with the hook's credential (deploy/rbac.yaml): the auto
pool timer's event through run_event, Pending pods the scheduler marked Unschedulable, one node holding an
idle 7g.80gb. The pods of three profiles get their instances through the rollout (claim, the pool's Lease,
Events, capacity) with no eviction and no cordon; demand beyond the pool sets the node-template tags. The
node side is played (the node's own label and annotation writes and the device plugin's capacity) by the
admin, as the rest of tests/kube_real does."""

import base64
import json
import uuid

import pytest

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.cloud.cluster import InventoryLookup
from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.outcome import NodeResult
from functions.pipeline.event import run_event

pytestmark = pytest.mark.kube_real

CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
TICK = json.dumps({"triggerTime": "2026-12-04T00:00:00Z", "triggerName": "auto-pools",
                   "payload": '{"auto_pools": true}'})
MERGE_PATCH = "application/merge-patch+json"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases/"


class PlayedNode:
    """The node's apply of a per-GPU request, on the real server: what node_bootstrap writes (state label and
    the layouts annotation) and what the device plugin publishes (one resource per instance)."""

    name = "played"

    def __init__(self, cp):
        self.cp, self.requests = cp, []

    def run(self, targets):
        out = []
        for t in targets:
            request = json.loads(base64.b64decode(t.args[-1]))
            self.requests.append((t.node_name, request))
            layouts = {str(g["index"]): [[i["profile"], i["start"]] for i in g["layout"]] for g in request["gpus"]}
            counts = {}
            for gpu in layouts.values():
                for profile, _ in gpu:
                    counts["nvidia.com/mig-" + profile] = str(int(counts.get("nvidia.com/mig-" + profile, "0")) + 1)
            self.cp.admin.ok("PATCH", "/api/v1/nodes/" + t.node_name, {"metadata": {
                "labels": {"nvidia.com/mig.config.state": "success"},
                "annotations": {"ack-mig-hook/gpu-layouts": json.dumps(layouts)}}}, content_type=MERGE_PATCH)
            status = self.cp.admin.get("/api/v1/nodes/" + t.node_name)["status"]
            old = {k: None for k in status.get("allocatable") or {} if k.startswith("nvidia.com/mig-")}
            self.cp.admin.ok("PATCH", "/api/v1/nodes/%s/status" % t.node_name, {"status": {
                "capacity": dict(old, **counts), "allocatable": dict(old, **counts)}}, content_type=MERGE_PATCH)
            out.append(NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 5, "gpus": []}))
        return out


@pytest.fixture
def auto_pool(control_plane, tmp_path):
    """(control plane, pool id, node name, namespace, the hook's client): a pool of its own on the shared server."""
    from tests.kube_real.worlds import RealWorld

    cp = control_plane
    pool = "np" + uuid.uuid4().hex
    node = cp.unique("auto")
    cp.node(node, labels={"alibabacloud.com/nodepool-id": pool, "nvidia.com/mig.config.state": "success",
                          "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                          "aliyun.accelerator/nvidia_count": "1", "pool-selector": pool[:20]},
            annotations={"ack-mig-hook/gpu-layouts": json.dumps({"0": [["7g.80gb", 0]]})},
            capacity={"nvidia.com/mig-7g.80gb": "1"})
    client = RealWorld(cp, tmp_path).client()
    yield cp, pool, node, cp.namespace("auto"), client
    client.close()


def waiting(cp, ns, name, profile, pool):
    """A pod the scheduler found no room for: Pending, PodScheduled False/Unschedulable (the scheduler's own
    status write, done here by the admin since no scheduler runs), selecting the pool's nodes."""
    cp.admin.ok("POST", "/api/v1/namespaces/%s/pods" % ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeSelector": {"pool-selector": pool[:20]}, "containers": [
            {"name": "main", "image": "registry.invalid/serve:1",
             "resources": {"limits": {"nvidia.com/mig-" + profile: "1"}}}]}})
    cp.admin.ok("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (ns, name), {"status": {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": "0/1 nodes are available"}]}}, content_type=MERGE_PATCH)


def lookup(pool, node):
    return InventoryLookup.from_dict({
        "cluster_id": CLUSTER,
        "nodepools": [{"nodepool_info": {"nodepool_id": pool, "name": "llm-auto"},
                       "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}]},
                       "auto_scaling": {"enable": True},
                       "scaling_group": {"scaling_group_id": "asg-" + pool[2:12],
                                         "instance_types": ["ecs.ebmgn7e.32xlarge"]}}],
        "nodes": [{"instance_id": "i-" + node.replace("-", ""), "node_name": node, "nodepool_id": pool,
                   "state": "running", "instance_type": "ecs.ebmgn7e.32xlarge", "ip_address": ["127.0.0.1"]}]})


def tick(pool, node, client, transport, dry_run=False):
    settings = load_settings({"ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_CLUSTER_ID": CLUSTER,
                              "ACK_MIG_LOG_LEVEL": "ERROR"})
    return run_event(TICK, settings, inventory=lookup(pool, node), dry_run=dry_run, logger=JsonLogger("OFF"),
                     executor=DeliveryExecutor.from_settings(settings, transport=transport), kube=client)


def test_pending_pods_of_three_profiles_get_instances_through_the_rollout_without_an_eviction(auto_pool):
    cp, pool, node, ns, client = auto_pool
    for name, profile in (("small-0", "1g.10gb"), ("small-1", "1g.10gb"), ("mid", "2g.20gb"), ("big", "3g.40gb")):
        waiting(cp, ns, name, profile, pool)
    transport = PlayedNode(cp)
    result = tick(pool, node, client, transport)
    assert result.outcome == "done", result.reason
    (done,) = result.nodes
    assert done["outcome"] == "partitioned" and "new capacity shows" in done["reason"], done
    ((_, request),) = transport.requests
    profiles = sorted(i["profile"] for i in request["gpus"][0]["layout"])
    assert profiles.count("1g.10gb") >= 2 and "2g.20gb" in profiles and "3g.40gb" in profiles, profiles
    after = cp.admin.get("/api/v1/nodes/" + node)
    record = json.loads(after["metadata"]["annotations"]["ack-mig-hook/rollout"])
    assert record["step"] == "done" and record["drain"] is False and record["target"].startswith("per-gpu=")
    assert not after["spec"].get("unschedulable")  # never cordoned
    reasons = sorted(e["reason"] for e in cp.admin.get("/api/v1/namespaces/default/events",
                                                       fieldSelector="involvedObject.name=" + node)["items"])
    assert reasons == ["MigRolloutDone", "MigRolloutNoDrain"], reasons
    lease = cp.admin.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/ack-mig-hook-pool-" + pool)
    assert json.loads(lease["metadata"]["annotations"]["ack-mig-hook/slots"]) == {}  # taken, then given back
    assert sorted(p["metadata"]["name"] for p in cp.pods(ns)) == ["big", "mid", "small-0", "small-1"]


def test_demand_beyond_the_pool_sets_the_node_template_tags(auto_pool):
    cp, pool, node, ns, client = auto_pool
    for i in range(4):
        waiting(cp, ns, "big-%d" % i, "3g.40gb", pool)  # two fit the GPU; two need a new node
    transport = PlayedNode(cp)
    result = tick(pool, node, client, transport, dry_run=True)
    assert result.outcome == "done", result.reason
    (tags,) = result.pool_tags
    assert tags["set"] == {"k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-3g.40gb": "16"}, tags
    assert transport.requests == [] and "ack-mig-hook/rollout" not in (
        cp.admin.get("/api/v1/nodes/" + node)["metadata"].get("annotations") or {})  # a dry run writes nothing


def test_a_tick_with_nothing_to_plan_ends_a_record_a_stopped_run_left_and_lifts_its_opt_out(auto_pool):
    """finish_stranded through the timer's tick with no pod of the pool waiting, the hook's credential: the pool's Nodes
    listed by label, the record a killed run left (applying, its lease long over) ended by a merge patch at
    the version listed, the autoscaler's opt-out removed by its null; the node's other annotations kept."""
    cp, pool, node, _ns, client = auto_pool
    record = json.dumps({"target": "per-gpu=3g.40gb-3g.40gb", "step": "applying", "owner": "x", "expires": 1.0,
                         "drain": False, "autoscaler": True})
    cp.admin.ok("PATCH", "/api/v1/nodes/" + node, {"metadata": {"annotations": {
        "ack-mig-hook/rollout": record, "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}}},
        content_type=MERGE_PATCH)
    transport = PlayedNode(cp)
    result = tick(pool, node, client, transport)
    # no pod of this pool waits (other tests' pods may, on the shared server): nothing is sent to the node
    assert result.outcome in ("skip", "done") and transport.requests == [], result.reason
    notes = cp.admin.get("/api/v1/nodes/" + node)["metadata"]["annotations"]
    ended = json.loads(notes["ack-mig-hook/rollout"])
    assert ended["step"] == "done" and "invocation x stopped" in ended["reason"], ended
    assert "cluster-autoscaler.kubernetes.io/scale-down-disabled" not in notes
    assert json.loads(notes["ack-mig-hook/gpu-layouts"]) == {"0": [["7g.80gb", 0]]}


def test_a_pool_changed_just_before_the_tick_is_planned_on_the_pods_read_again(auto_pool):
    """The relist (functions/pipeline/auto_pool.py) on the real server's clock: another invocation marked the
    pool changed (the pool Lease's ack-mig-hook/pool-changed, at the server's time) as this tick read its
    pending list, so the tick cannot tell whether that change bound its pods; under its claim it reads them
    again two STALE_MARGIN_S later, and that list, on the Date header's whole seconds, reads after the change:
    the pool is planned this tick, not left to the next.

    The mark is written once the tick's first list is in, at the server's time then (as the other invocation
    reads it): a mark from a read before the tick started (the Date of a GET) was within the list's second only
    when the tick listed before the server's next second, and a tick that crossed it read the mark as before
    its list, planned on that one list, and failed the test (one run in six on a loaded machine)."""
    cp, pool, node, ns, client = auto_pool
    waiting(cp, ns, "small", "1g.10gb", pool)
    cp.hook.ok("POST", LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {
        "name": "ack-mig-hook-pool-" + pool, "annotations": {
            "ack-mig-hook/slots": "{}", "ack-mig-hook/nodepool-id": pool}},
        "spec": {}})
    lists, request = [], client.request

    def recording(method, path, *args, **kwargs):
        answer = request(method, path, *args, **kwargs)
        if path == "/api/v1/pods" and "status.phase=Pending" in str(kwargs.get("query")):  # a pending list
            lists.append(kwargs.get("query"))
            if len(lists) == 1:  # the other invocation's mark, at the server's time as the tick's list is in
                cp.admin.ok("PATCH", LEASES + "ack-mig-hook-pool-" + pool, {"metadata": {"annotations": {
                    "ack-mig-hook/pool-changed": json.dumps(client.server_time())}}}, content_type=MERGE_PATCH)
        return answer

    client.request = recording
    transport = PlayedNode(cp)
    result = tick(pool, node, client, transport)
    assert result.outcome == "done" and len(lists) == 2, (result.reason, lists)
    assert [n["outcome"] for n in result.nodes] == ["partitioned"] and len(transport.requests) == 1
