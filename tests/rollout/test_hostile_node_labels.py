"""A Node whose labels or annotations are no text (a number, a list, an object: a proxy, a double or a hand edit
wrote them; the API server itself only ever serves strings) is read as a Node without them, by the reader rule
(node_bootstrap/outside.py): that node alone is judged on what reads, and the pool's other nodes are decided
and rolled out. ``KubeNode.from_object`` kept such values, and a reader after it raised: the GPU name label of
a node whose instance type names no GPU model (``waves._gpu_candidates``) ended the event in ``error``
("internal error while deciding: AttributeError"), no node of any pool decided, at every timer tick.

Through ``run_event`` with the test Kubernetes API server and the played nodes of tests/rollout/conftest.py."""

import pytest

from functions.decision.waves import KubeNode
from tests.rollout.conftest import NEW, snapshot

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

GPU_NAME = "aliyun.accelerator/nvidia_name"
UNKNOWN_TYPE = "ecs.ebmgn99.8xlarge"  # not in the family table: the node's GPU name label says the model
COUNT_UNKNOWN = "ecs.ebmgn7.32xlarge"  # A100, but how many: the node's GPU count label says


def of_type(instance_type):
    """The played pool's inventory with every node, and the scaling group, of ``instance_type``."""
    inventory = snapshot(NEW)
    for node in inventory["nodes"]:
        node["instance_type"] = instance_type
    inventory["nodepools"][0]["scaling_group"]["instance_types"] = [instance_type]
    return inventory


@pytest.mark.parametrize("value", [{"x": 1}, 5, ["NVIDIA-A100-SXM4-40GB"]], ids=["object", "number", "list"])
def test_a_gpu_name_label_that_is_no_text_fails_no_other_node(cluster, value):
    cluster.add_nodes()
    for name in ("node-a", "node-b", "node-c"):
        cluster.api.label_node(name, {GPU_NAME: "NVIDIA-A100-SXM4-40GB"})
    with cluster.api.lock:
        cluster.api.nodes["node-b"]["metadata"]["labels"][GPU_NAME] = value
    result = cluster.run(of_type(UNKNOWN_TYPE))
    assert result.outcome == "done", result.reason
    by_node = {n["node_name"]: n for n in result.nodes}
    assert by_node["node-a"]["outcome"] == "partitioned", by_node
    assert set(by_node) == {"node-a", "node-b", "node-c"}


def test_a_node_keeps_only_the_labels_and_annotations_that_are_text():
    node = KubeNode.from_object({"metadata": {
        "name": ["n"], "labels": {GPU_NAME: 5, "nvidia.com/mig.config.state": "success"},
        "annotations": {"ack-mig-hook/layouts": 7, "ack-mig-hook/rollout": None}}})
    assert node.name == "" and node.labels == {"nvidia.com/mig.config.state": "success"} and node.annotations == {}


def test_a_gpu_count_label_of_5000_digits_fails_no_other_node(cluster):
    """``int`` of a count label of 5,000 ASCII digits raised ValueError (Python's 4,300-digit limit) where the
    rollout reads how many GPUs a node has (run._gpus, for the capacity it waits for): a count past 18 digits
    reads as none."""
    cluster.add_nodes()
    cluster.api.label_node("node-a", {"aliyun.accelerator/nvidia_count": "9" * 5000})
    result = cluster.run(of_type(COUNT_UNKNOWN))
    assert result.outcome == "done", result.reason
    assert {n["node_name"] for n in result.nodes} == {"node-a", "node-b", "node-c"}
