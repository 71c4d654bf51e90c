"""Which instance a running pod holds decides an auto pool's plan, on the real kube-apiserver (issue 35 item 1),
with the hook's credential (deploy/rbac.yaml).

The node's holders report is the node's own: node_bootstrap ``report-holders`` on a simulated A100-SXM4-80GB
(3g.40gb at 0 and at 4) reads a kubelet device checkpoint in kubelet's format (tests/node/
test_kubelet_allocations.py) that gives the bound pod's real UID one of the MIG devices, lists the node's pods
and writes ``ack-mig-hook/gpu-holders`` on its Node with the control plane's kubelet credential (the Node
authorizer and NodeRestriction judge it, as on a cluster). That credential names one node, so the pool's node
is that one: the fixture takes it over (pods bound to it and the Node deleted before and after).

A 4g.40gb pod waits (the scheduler's Unschedulable, written by the admin: no scheduler runs). It fits only at
slot 0 (A100-80GB placements), so it is served on the GPU exactly when the instance at 0 is free:

* the pod holds the 3g.40gb at 0: the plan leaves the GPU (no node request) and the 4g.40gb goes to a new
  node (the pool's node-template tags);
* the pod holds the one at 4: the 3g.40gb at 0 goes for the 4g.40gb, the held one stays;
* the pod ends (Succeeded; the checkpoint still names it, the node drops it as the API server says it
  finished): the report says free and the GPU is repartitioned at slot 0.

The rollout's node side is played by the admin (tests/kube_real/test_auto_pool_real.py PlayedNode)."""

import json
import uuid

import pytest

from tests.kube_real.test_auto_pool_real import PlayedNode, tick, waiting
from tests.node.nodecli import NODE_PYTHON, Node, lay_out
from tests.node.test_kubelet_allocations import checkpoint, mig_devices, write_checkpoint

pytestmark = pytest.mark.kube_real

HOLDERS = "ack-mig-hook/gpu-holders"
LAYOUT = [("3g.40gb", 0), ("3g.40gb", 4)]
NEW_NODE_TAG = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-4g.40gb"


def _clear_node(cp, name):
    """Delete every pod bound to ``name`` (grace 0, what the kubelet's last delete does) and the Node."""
    for pod in cp.admin.get("/api/v1/pods", fieldSelector="spec.nodeName=" + name)["items"]:
        cp.finish(pod["metadata"]["namespace"], pod["metadata"]["name"])
    answer = cp.admin.call("DELETE", "/api/v1/nodes/" + name)
    assert answer.status in (200, 404), answer


@pytest.fixture
def held_pool(control_plane, tmp_path):
    """(control plane, pool id, node name, namespace, the hook's client, the simulated node, the running
    pod's name): the kubelet credential's node in an auto pool of its own, its GPU laid out as LAYOUT on both
    the simulated node and the Node object, a running 3g.40gb pod bound to it."""
    from tests.kube_real.worlds import RealWorld

    cp = control_plane
    pool, name = "np" + uuid.uuid4().hex, cp.kubelet_node
    _clear_node(cp, name)  # another test may have made it (tests/kube_real/test_double_agrees.py)
    cp.node(name, labels={"alibabacloud.com/nodepool-id": pool, "nvidia.com/mig.config.state": "success",
                          "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                          "aliyun.accelerator/nvidia_count": "1", "pool-selector": pool[:20]},
            annotations={"ack-mig-hook/gpu-layouts": json.dumps({"0": [list(p) for p in LAYOUT]})},
            capacity={"nvidia.com/mig-3g.40gb": "2"})
    ns = cp.namespace("holders")
    cp.pod(ns, "serving", node=name, resources={"nvidia.com/mig-3g.40gb": "1"})
    sim = Node(tmp_path / "node", gpu="A100-80GB", count=1)
    lay_out(sim, [LAYOUT])
    sim.use_kube(cp.kubeconfig(str(tmp_path / "kubelet.conf"), cp.kubelet.token), node_name=name)
    world = RealWorld(cp, tmp_path)
    client = world.client()
    try:
        yield cp, pool, name, ns, client, sim, "serving"
    finally:
        client.close()
        _clear_node(cp, name)


def report_holders(cp, sim, node, ns, pod, start):
    """kubelet gave ``pod`` the MIG device of the instance at ``start`` (its checkpoint, as kubelet writes
    it); the node's own ``report-holders`` then writes the report on the Node. Returns the report read back
    from the API server."""
    uid = cp.admin.get("/api/v1/namespaces/%s/pods/%s" % (ns, pod))["metadata"]["uid"]
    device, _ = mig_devices(sim, 0)[start]
    write_checkpoint(sim, checkpoint([(uid, "main", "nvidia.com/mig-3g.40gb", [device])]))
    res = sim.run("report-holders", python=NODE_PYTHON)  # the node's own interpreter: stdlib and pynvml
    assert res.rc == 0 and res.json["written"] is True, (res.json, res.stderr)
    return uid, json.loads(cp.admin.get("/api/v1/nodes/" + node)["metadata"]["annotations"][HOLDERS])


def layouts(transport):
    """{node: {GPU index: [(profile, start), ...]}} of the per-GPU requests the tick sent."""
    return {node: {g["index"]: sorted((i["profile"], i["start"]) for i in g["layout"]) for g in request["gpus"]}
            for node, request in transport.requests}


def test_the_instance_the_node_reports_held_is_kept_and_the_waiting_pod_goes_to_a_new_node(held_pool):
    cp, pool, node, ns, client, sim, pod = held_pool
    uid, report = report_holders(cp, sim, node, ns, pod, start=0)
    assert report["pods"] == [uid] and report["gpus"] == {"0": [["3g.40gb", 0, uid], ["3g.40gb", 4, None]]}
    waiting(cp, ns, "big", "4g.40gb", pool)  # needs slot 0: the held instance's
    transport = PlayedNode(cp)
    result = tick(pool, node, client, transport)
    assert result.outcome == "done", result.reason
    assert transport.requests == [], layouts(transport)  # the GPU is left as it is: nothing to destroy
    assert not result.nodes and "no GPU of the auto pools changes" in result.reason, result
    (tags,) = result.pool_tags  # the pod is served by a new node: the template's 8 GPUs get a 4g.40gb each
    assert tags["set"] == {NEW_NODE_TAG: "8"}, tags
    annotations = cp.admin.get("/api/v1/nodes/" + node)["metadata"]["annotations"]
    assert json.loads(annotations["ack-mig-hook/gpu-layouts"]) == {"0": [["3g.40gb", 0], ["3g.40gb", 4]]}
    assert "ack-mig-hook/rollout" not in annotations

    # the negative control, same world: the pod finished; kubelet's checkpoint still names it, the node's
    # report drops it (the API server says it finished): the instance at 0 is free and the GPU changes
    cp.set_pod_status(ns, pod, "Succeeded", ready=False)
    _, report = report_holders(cp, sim, node, ns, pod, start=0)
    assert report["pods"] == [] and report["gpus"] == {"0": [["3g.40gb", 0, None], ["3g.40gb", 4, None]]}
    transport = PlayedNode(cp)
    result = tick(pool, node, client, transport)
    assert result.outcome == "done", result.reason
    ((_, request),) = transport.requests
    (gpu,) = layouts(transport)[node].values()
    assert ("4g.40gb", 0) in gpu and ("3g.40gb", 0) not in gpu, request  # repartitioned at the freed slots


def test_the_report_decides_which_instance_goes(held_pool):
    """The same world with the pod holding the instance at 4: the one at 0 goes for the 4g.40gb, the held one
    stays (without the report, both would count as in use: functions/kube/supply.py _in_use)."""
    cp, pool, node, ns, client, sim, pod = held_pool
    uid, report = report_holders(cp, sim, node, ns, pod, start=4)
    assert report["gpus"] == {"0": [["3g.40gb", 0, None], ["3g.40gb", 4, uid]]}
    waiting(cp, ns, "big", "4g.40gb", pool)
    transport = PlayedNode(cp)
    result = tick(pool, node, client, transport)
    assert result.outcome == "done", result.reason
    assert [n["outcome"] for n in result.nodes or []] == ["partitioned"], result
    assert layouts(transport) == {node: {0: [("3g.40gb", 4), ("4g.40gb", 0)]}}  # the held one kept in place
    (tags,) = result.pool_tags
    assert NEW_NODE_TAG not in tags["set"], tags  # served here: no new node for it
    assert cp.admin.get("/api/v1/namespaces/%s/pods/%s" % (ns, pod))["status"]["phase"] == "Running"
