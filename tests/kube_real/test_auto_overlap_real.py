"""One plan at a time per auto pool on the real kube-apiserver (issue 35 item 4), with the hook's credential
(deploy/rbac.yaml): a second tick starts while the first applies (from inside its transport, after the node
said ``pending`` as node_bootstrap apply does); its claim on the pool's Lease is refused by the server's
resourceVersion check or found held, so only one node is repartitioned for the two waiting pods.
The node side is played by the admin, as tests/kube_real/test_auto_pool_real.py does."""

import json
import uuid

import pytest

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.cloud.cluster import InventoryLookup
from functions.delivery.node_executor import DeliveryExecutor
from functions.pipeline.event import run_event
from tests.kube_real.test_auto_pool_real import CLUSTER, MERGE_PATCH, TICK, PlayedNode, waiting

pytestmark = pytest.mark.kube_real

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases/"


@pytest.fixture
def two_node_pool(control_plane, tmp_path):
    """(control plane, pool id, node names, namespace, two hook clients: one per invocation)."""
    from tests.kube_real.worlds import RealWorld

    cp = control_plane
    pool = "np" + uuid.uuid4().hex
    nodes = [cp.unique("auto-a"), cp.unique("auto-b")]
    for node in nodes:
        cp.node(node, labels={"alibabacloud.com/nodepool-id": pool, "nvidia.com/mig.config.state": "success",
                              "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                              "aliyun.accelerator/nvidia_count": "1", "pool-selector": pool[:20]},
                annotations={"ack-mig-hook/gpu-layouts": json.dumps({"0": [["7g.80gb", 0]]})},
                capacity={"nvidia.com/mig-7g.80gb": "1"})
    world = RealWorld(cp, tmp_path)
    clients = [world.client(), world.client()]
    yield cp, pool, nodes, cp.namespace("overlap"), clients
    for client in clients:
        client.close()


def lookup(pool, nodes):
    return InventoryLookup.from_dict({
        "cluster_id": CLUSTER,
        "nodepools": [{"nodepool_info": {"nodepool_id": pool, "name": "llm-auto"},
                       "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}]},
                       "scaling_group": {"scaling_group_id": "asg-" + pool[2:12],
                                         "instance_types": ["ecs.ebmgn7e.32xlarge"]}}],
        "nodes": [{"instance_id": "i-" + node.replace("-", ""), "node_name": node, "nodepool_id": pool,
                   "state": "running", "instance_type": "ecs.ebmgn7e.32xlarge", "ip_address": ["127.0.0.1"]}
                  for node in nodes]})


def tick(pool, nodes, client, transport):
    settings = load_settings({"ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_CLUSTER_ID": CLUSTER,
                              "ACK_MIG_LOG_LEVEL": "ERROR", "ACK_MIG_MAX_UNAVAILABLE": "2"})
    return run_event(TICK, settings, inventory=lookup(pool, nodes), logger=JsonLogger("OFF"),
                     executor=DeliveryExecutor.from_settings(settings, transport=transport), kube=client)


class Overlapping(PlayedNode):
    """The first tick's node: it says ``pending`` (node_bootstrap apply's first write), then the second tick
    runs to its end, then the node finishes."""

    def __init__(self, cp, second):
        super().__init__(cp)
        self.second, self.seen = second, []

    def run(self, targets):
        for t in targets:
            self.cp.admin.ok("PATCH", "/api/v1/nodes/" + t.node_name, {"metadata": {
                "labels": {"nvidia.com/mig.config.state": "pending"}}}, content_type=MERGE_PATCH)
        if self.second is not None:
            second, self.second = self.second, None
            self.seen.append(second())
        return super().run(targets)


def test_two_overlapping_ticks_repartition_one_node_for_the_same_pods(two_node_pool):
    cp, pool, nodes, ns, (first_client, second_client) = two_node_pool
    for i in range(2):
        waiting(cp, ns, "big-%d" % i, "3g.40gb", pool)  # one GPU's two 3g.40gb serve both
    inner = PlayedNode(cp)
    outer = Overlapping(cp, lambda: tick(pool, nodes, second_client, inner))
    first = tick(pool, nodes, first_client, outer)
    assert first.outcome == "done", first.reason
    assert [n["outcome"] for n in first.nodes] == ["partitioned"], first.nodes
    (second,) = outer.seen
    assert second.outcome == "skip" and second.reason.startswith("pool %s is being planned by invocation " % pool), \
        second.reason
    assert inner.requests == []  # the other node is left as it is
    (changed,) = [n for n, _ in outer.requests]
    other = (set(nodes) - {changed}).pop()
    untouched = cp.admin.get("/api/v1/nodes/" + other)
    assert "ack-mig-hook/rollout" not in (untouched["metadata"].get("annotations") or {})
    lease = cp.admin.get(LEASES + "ack-mig-hook-pool-" + pool)
    notes = lease["metadata"]["annotations"]
    assert "ack-mig-hook/planning" not in notes  # given back at the end
    assert list(json.loads(notes["ack-mig-hook/changed"])) == ["%s/0" % changed]  # the dwell's mark
    owner = json.loads(cp.admin.get("/api/v1/nodes/" + changed)["metadata"]["annotations"]["ack-mig-hook/rollout"]
                       )["owner"]
    assert second.reason.endswith(owner)  # the claim's invocation is the one whose record the node carries


def test_a_renewal_written_onto_the_version_read_before_the_give_back_is_refused(two_node_pool):
    """A planning claim's renewal whose PUT kube-apiserver takes after the holder gave the claim back (it read
    the Lease before, its answer was slow): the give-back is a real change of the Lease (a new
    resourceVersion), so the late write is 409 Conflict and the claim stays given back; the renewal, reading
    again, writes nothing (functions/rollout/plan_claim.py)."""
    import time

    from node_bootstrap.kube import KubeError

    from functions.decision import claim_rules as pc
    from functions.decision.budget import lease_name
    from functions.kube import leases
    from functions.rollout.plan_claim import PlanClaims

    _, pool, _, _, (client, renewals) = two_node_pool
    holder = PlanClaims(client, "tick-1", time.time, 3600.0, 300.0)
    assert holder.take(pool, pool, time.time() + 3600).why == ""
    read = renewals.get_lease("default", lease_name(pool))  # the renewal's read, before the give-back
    holder.release(pool)
    with pytest.raises(KubeError) as late:
        leases.write(renewals, "default", read,
                     {pc.PLANNING_ANNOTATION: pc.write_claim(pc.Claim("tick-1", time.time() + 120))})
    assert late.value.status == 409, late.value
    notes = renewals.get_lease("default", lease_name(pool))["metadata"].get("annotations") or {}
    assert pc.PLANNING_ANNOTATION not in notes, notes
    assert not holder.renew(pool)
    assert PlanClaims(renewals, "tick-2", time.time, 3600.0, 300.0).take(pool, pool, time.time() + 3600).why == ""
