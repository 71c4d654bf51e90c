"""A pool's Node objects of any shape (the reader rule, node_bootstrap/outside.py): whatever a listed Node holds
at any level (``metadata`` a list, a taint a string, annotations of numbers, a 100 KB label), the pods a pool's
plan counts (``pool_of.counted_pods``, what a tick and a pod event decide with) are read from the other
Nodes, and the stranded-record finisher reads it as a node without a record; nothing raises.

Before ``supply.node_object``, such a Node ended the tick or the pod event of every pool in an internal error
(AttributeError in ``places_of``, TypeError/ValueError in ``Place``, TypeError sorting names in
``pool_supply``)."""

import copy

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from functions.base.settings import load_settings
from functions.cloud.cluster import InventoryLookup
from functions.decision.layout.matching import waiting_pod
from functions.kube.demand import slim
from functions.kube.nodes import MemoryKube
from functions.kube.supply import list_pool_nodes, node_object
from functions.pipeline.pool_of import counted_pods
from functions.rollout.auto_waves import finish_stranded
from tests.fuzz.test_reader_rule import put_at
from tests.rollout.test_auto_pool_advise import CLUSTER, POOL_ID
from tests.rollout.test_auto_pool_advise import pool as pool_doc

POOL = InventoryLookup.from_dict({"cluster_id": CLUSTER, "nodepools": [pool_doc()], "nodes": []}).nodepools(CLUSTER)[0]


def _node(name, sequence):
    return {"metadata": {"name": name, "resourceVersion": "1", "annotations": {},
                         "labels": {"alibabacloud.com/nodepool-id": POOL_ID, "aliyun.accelerator/nvidia_count": "1",
                                    "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                                    "nvidia.com/mig.config.state": "success",
                                    "aliyun.accelerator/nvidia_mig_sequence": sequence}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "mig", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/mig-3g.40gb": "2"}}}


POD = waiting_pod({
    "metadata": {"name": "p", "namespace": "llm"},
    "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
             "containers": [{"resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}]},
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                   "reason": "Unschedulable"}]}})
GOOD = _node("n-good", "3g.40gb-3g.40gb")
SETTINGS = load_settings({"ACK_MIG_CLUSTER_ID": CLUSTER, "ACK_MIG_LOG_LEVEL": "ERROR"})
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8),
              st.sampled_from(["x" * 100_000, "\ud800", "3g.40gb", '{"target": "x", "step": "applying"}'])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8)
PATHS = [(), ("metadata",), ("metadata", "name"), ("metadata", "labels"), ("metadata", "annotations"),
         ("metadata", "annotations", "ack-mig-hook/rollout"), ("metadata", "annotations", "ack-mig-hook/gpu-holders"),
         ("metadata", "annotations", "ack-mig-hook/layouts"), ("metadata", "resourceVersion"), ("spec",),
         ("spec", "taints"), ("spec", "taints", 0), ("spec", "providerID"), ("spec", "unschedulable"), ("status",),
         ("status", "allocatable"), ("status", "allocatable", "nvidia.com/mig-3g.40gb"), ("status", "conditions")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3))
@example([((), None)])
@example([(("metadata",), [False])])
@example([(("spec", "taints", 0), [1])])
@example([(("metadata", "name"), {"a": 1})])
@example([(("metadata", "annotations"), ["x"])])
@example([(("metadata", "annotations", "ack-mig-hook/rollout"),
           '{"target": "x", "step": "applying", "owner": "gone", "drain": false}'), (("spec", "taints"), "x")])
def test_a_node_of_any_shape_is_read_alone_and_the_pools_other_nodes_count(edits):
    bad = copy.deepcopy(_node("n-bad", "3g.40gb-3g.40gb"))
    for path, value in edits:
        try:
            bad = put_at(bad, path, value)
        except (TypeError, KeyError, IndexError):  # an earlier edit changed the shape above it
            continue
    kube = MemoryKube({})
    kube.nodes = {"n-bad": bad, "n-good": copy.deepcopy(GOOD)}
    listed = list_pool_nodes(kube, "")
    assert [n["metadata"]["name"] for n in listed if n["metadata"]["name"] == "n-good"] == ["n-good"]
    counted = counted_pods(POOL, listed, [POD], lambda names: {n: [] for n in names})
    assert counted <= {"llm/p"}
    assert counted_pods(POOL, [n for n in listed if n["metadata"]["name"] == "n-good"], [POD],
                        lambda names: {n: [] for n in names}) == {"llm/p"}
    for line in finish_stranded(kube, listed, SETTINGS, "me", "np-1", dry_run=True):
        assert line.startswith("node n-bad: dry run"), line  # only a record the bad node holds is ended


def test_a_listed_item_that_is_no_object_is_left_out():
    assert node_object(None) is None and node_object([GOOD]) is None and node_object("n") is None
    assert node_object({"metadata": [1]})["metadata"]["name"] == ""


def test_a_gpu_count_label_of_5000_digits_leaves_that_node_out():
    """``int`` of a count label of 5,000 ASCII digits raised ValueError (Python's 4,300-digit limit) in
    ``supply.node_supply``, out of the pods a pool counts: a tick or a pod event of every auto pool ended in an
    internal error. Past 18 digits the count reads as unknown: that node is left out with its note."""
    bad = _node("n-bad", "3g.40gb-3g.40gb")
    bad["metadata"]["labels"]["aliyun.accelerator/nvidia_count"] = "9" * 5000
    kube = MemoryKube({})
    kube.nodes = {"n-bad": bad, "n-good": copy.deepcopy(GOOD)}
    assert counted_pods(POOL, list_pool_nodes(kube, ""), [POD], lambda names: {n: [] for n in names}) == {"llm/p"}
