"""Hostile or odd cluster data through the whole path (issue 25 item 7): every annotation, label and tag the
hook parses, as anyone with node or pool write rights could set them (a rollout record of 1,000 ``[``, a
superscript digit, a megabyte of text, a slot table that is not ours, a node without a name), through
``run_event`` with a snapshot of Kubernetes nodes (MemoryKube) and a real rollout (not a dry run) whose
transport records the scripts. Every input ends in a typed result; no node's bad data stops another
node or pool; 0 internal errors."""

import copy
import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.cloud.cluster import InventoryLookup
from functions.delivery.node_executor import DeliveryExecutor
from functions.pipeline.event import run_event
from tests.fuzz.harness import _MAKER, OUTCOMES, RecordingTransport

POOL = "np-fuzz"
TIMER = json.dumps({"cluster_id": "c-fuzz"})
KNOWN = {"partitioned", "unchanged", "skipped", "deferred", "failed", "drain-timeout", "drain-refused", "gone",
         "destroy-required", "error"}

ODD_TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "²", "３", "٣", "1e9", "-1", "0", "99999999999999999999", "true", "TRUE", "null", "{}", "[]",
                     '{"target": 1, "step": {}}', '{"target": "x", "step": "cordoned", "expires": "soon"}',
                     '{"target": "x", "step": "applying", "owner": "other", "expires": 1e308}', "\x00", "\u202e"]),
    st.sampled_from([5, 1000, 3000]).map(lambda n: "[" * n),  # past the JSON decoder's recursion limit
    st.sampled_from([5, 1000, 3000]).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.sampled_from([5000, 300_000]).map(lambda n: "x" * n),
)
NODE_KEYS = ("ack-mig-hook/rollout", "cluster-autoscaler.kubernetes.io/scale-down-disabled",
             "ack-mig-hook/mig-config-reason")
LABEL_KEYS = ("nvidia.com/mig.config.state", "aliyun.accelerator/nvidia_mig_sequence",
              "aliyun.accelerator/nvidia_count", "aliyun.accelerator/nvidia_name", "nvidia.com/mig.config")
POOL_KEYS = ("ack-mig-hook/max-unavailable", "ack-mig-hook/paused", "ack.aliyun.com/gpu-partition-sequence")


def _base():
    names = ["node-a", "node-b", "node-c"]
    nodes = [{"instance_id": "i-fuzz%s" % n[-1], "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge",
              "nodepool_id": POOL, "state": "running", "ip_address": ["10.0.0.%d" % i]}
             for i, n in enumerate(names, 1)]
    kube = {n: {"labels": {"alibabacloud.com/nodepool-id": POOL, "nvidia.com/mig.config.state": "success",
                           "aliyun.accelerator/nvidia_count": "8",
                           "aliyun.accelerator/nvidia_mig_sequence": "1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb"},
                "annotations": {}, "allocatable": {"nvidia.com/mig-1g.5gb": "56"}} for n in names}
    pool = {"nodepool_info": {"nodepool_id": POOL, "name": "gpu"},
            "kubernetes_config": {"labels": [{"key": "ack.aliyun.com/gpu-partition-sequence",
                                              "value": "3g.20gb-3g.20gb"}]},
            "scaling_group": {"scaling_group_id": "asg-fuzz", "instance_types": ["ecs.ebmgn7.26xlarge"]}}
    return {"cluster_id": "c-fuzz", "nodepools": [pool], "nodes": nodes, "kube_nodes": kube}


EDITS = st.lists(st.one_of(
    st.tuples(st.just("annotation"), st.sampled_from(["node-a", "node-b", "node-c"]), st.sampled_from(NODE_KEYS),
              ODD_TEXT),
    st.tuples(st.just("label"), st.sampled_from(["node-a", "node-b", "node-c"]), st.sampled_from(LABEL_KEYS),
              ODD_TEXT),
    st.tuples(st.just("pool"), st.just(POOL), st.sampled_from(POOL_KEYS), ODD_TEXT),
    st.tuples(st.just("unnamed"), st.sampled_from(["node-a", "node-b", "node-c"]), st.just(""), st.just("")),
    st.tuples(st.just("cordon"), st.sampled_from(["node-a", "node-b", "node-c"]), st.just(""), st.just("")),
), max_size=4)


def _apply(doc, edits):
    doc = copy.deepcopy(doc)
    for kind, target, key, value in edits:
        if kind == "annotation":
            doc["kube_nodes"][target]["annotations"][key] = value
        elif kind == "label":
            doc["kube_nodes"][target]["labels"][key] = value
        elif kind == "pool":
            labels = doc["nodepools"][0]["kubernetes_config"]["labels"]
            labels[:] = [x for x in labels if x["key"] != key] + [{"key": key, "value": value}]
        elif kind == "unnamed":
            for n in doc["nodes"]:
                if n["node_name"] == target:
                    n["node_name"] = ""
        else:
            doc["kube_nodes"][target]["unschedulable"] = True
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(EDITS)
@example([("annotation", "node-a", "ack-mig-hook/rollout", "[" * 1000)])  # the issue's own case
@example([("label", "node-b", "aliyun.accelerator/nvidia_count", "²"), ("pool", POOL, "ack-mig-hook/paused", "\x00")])
@example([("pool", POOL, "ack-mig-hook/max-unavailable", "３"), ("unnamed", "node-c", "", "")])
@example([("annotation", "node-c", "ack-mig-hook/rollout", '{"a":' * 1000 + "1" + "}" * 1000),
          ("cordon", "node-a", "", "")])
def test_hostile_cluster_data_ends_in_a_typed_result_and_fails_alone(edits):
    doc = _apply(_base(), edits)
    transport = RecordingTransport(_MAKER)
    with _fake_time():  # the capacity wait (no device plugin here) runs out on the test's clock, not the wall's
        result = _run(doc, transport)
    _check(result, edits)


class _fake_time:
    def __enter__(self):
        from functions.rollout import run as rollout

        self.saved, now = (rollout.clock, rollout.sleep), [1000.0]
        rollout.clock = lambda: now[0]
        rollout.sleep = lambda s: now.__setitem__(0, now[0] + s)

    def __exit__(self, *exc):
        from functions.rollout import run as rollout

        rollout.clock, rollout.sleep = self.saved


def _run(doc, transport):
    return run_event(TIMER, load_settings({"ACK_MIG_LOG_LEVEL": "ERROR", "ACK_MIG_STARTUP_TAINT": "none",
                                             "ACK_MIG_MAX_UNAVAILABLE": "3"}),
                       inventory=InventoryLookup.from_dict(doc), executor=DeliveryExecutor(transport),
                       logger=JsonLogger("OFF"))


def _check(result, edits):
    assert result.outcome in OUTCOMES, result.outcome
    text = json.dumps(result.to_json())
    assert "Traceback" not in text and "RecursionError" not in text and "internal error" not in text.lower()
    assert all(n["outcome"] in KNOWN for n in result.nodes or []), result.nodes
    # one node's data never stops another: a node nobody edited, in a pool nobody edited, still moves
    touched = {target for kind, target, _, _ in edits}
    if POOL not in touched and result.nodes:
        clean = [n for n in result.nodes if n["node_name"] not in touched]
        assert all(n["outcome"] != "error" for n in clean), result.nodes
