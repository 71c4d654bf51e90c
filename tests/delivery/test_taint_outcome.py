"""A startup taint that cannot be lifted is a visible failure of that node, never a reason to release it.

A whole lifecycle event through ``run_event``: the cluster from the example snapshot, Cloud Assistant and
Auto Scaling on the loopback emulator (real core SDK), the Kubernetes side on the local TLS API server
(the operator's kubeconfig, as ``--kubeconfig`` gives it). The API server refuses the taint's PATCH with
403, as it does for a ClusterRole without ``patch`` on nodes (RBAC's answer, ``Forbidden``): the GPUs are
right, but no pod can land on the node, so it ends ``failed`` with the code ``taint-not-removed``; the hook
was answered CONTINUE before (that code is not the node's verdict on its GPUs), and the next event lifts
the taint once the API server allows it."""

import json
import os

import pytest

from functions.cloud.cluster import InventoryLookup
from functions.delivery.cloud_assistant import CloudAssistantTransport
from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.outcome import NODE_VERDICTS, TAINT_NOT_REMOVED, settle
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from tests.delivery.conftest import SECRET, TOKEN
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.rpc_emulator import SimNode
from tests.support.webhook import Webhook

pytestmark = [pytest.mark.cloud_assistant, pytest.mark.kube]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(ROOT, "examples", "inventory.json")
GOOD, OTHER = "i-2zeb7c1mig0a100x1k4d", "i-2zeb7c1mig0a100x2m8f"  # two nodes of the A100 pool
NAMES = {GOOD: "cn-beijing.192.168.12.31", OTHER: "cn-beijing.192.168.12.47"}
TAINT = {"key": "ack-mig-hook/partition-pending", "value": "true", "effect": "NoSchedule"}
DONE = {"outcome": "success", "changes": 16, "sequence": "3g.20gb-3g.20gb", "gpus": []}


def run(emulator, ecs, maker, kube_api, tmp_path, event_file, notify=""):  # noqa: F811
    with open(INVENTORY) as fh:
        inventory = json.load(fh)
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert())
    settings = load_settings({
        "ACK_MIG_CLUSTER_ID": inventory["cluster_id"], "ACK_MIG_REGION": emulator.region,
        "ALIBABA_CLOUD_ACCESS_KEY_ID": emulator.access_key_id, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
        "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_ESS_ENDPOINT": emulator.endpoint,
        "ACK_MIG_KUBECONFIG": kubeconfig, "ACK_MIG_LIFECYCLE_FAILURE_RESULT": "ABANDON",
        "ACK_MIG_LOG_LEVEL": "ERROR", "ACK_MIG_NOTIFY_URL": notify})
    transport = CloudAssistantTransport(ecs, maker, agent_wait_s=0.3, poll_s=0.02, poll_max_s=0.05)
    with open(os.path.join(ROOT, *event_file.split("/"))) as fh:
        event = json.load(fh)
    event["data"]["instanceIds"] = [GOOD, OTHER]
    return run_event(json.dumps(event), settings, inventory=InventoryLookup.from_dict(inventory),
                     executor=DeliveryExecutor.from_settings(settings, transport), logger=JsonLogger("OFF"))


def test_a_refused_taint_fails_the_node_and_the_hook_still_continues(emulator, ecs, maker, kube_api, tmp_path):  # noqa: F811
    for iid, name in NAMES.items():
        kube_api.add_node(name, taints=[TAINT])  # just joined: the pool's startup taint, no state label
        emulator.nodes[iid] = SimNode(result=dict(DONE))
    kube_api.fail["PATCH"] = 403  # the function's ClusterRole lacks patch on nodes
    with Webhook() as hook:
        result = run(emulator, ecs, maker, kube_api, tmp_path, "tests/events/ess_lifecycle_scale_out.json",
                     hook.url())
        (told,) = hook.lines()
    assert told["kind"] == "node-failed" and told["text"].startswith("2 nodes failed (2 taint-not-removed)")
    assert result.outcome == "done", result.reason
    nodes = {n["instance_id"]: n for n in result.nodes}
    for iid in NAMES:
        node = nodes[iid]
        assert (node["outcome"], node["code"]) == ("failed", TAINT_NOT_REMOVED)
        assert node["reason"].startswith("taint-not-removed: the startup taint could not be lifted (")
        assert "403" in node["reason"] or "injected failure" in node["reason"]
        assert "the GPUs are right (16 changes)" in node["reason"] and node["changes"] == 16
        assert node["taint"].startswith("not removed: ")
    assert all(kube_api.nodes[name]["spec"]["taints"] == [TAINT] for name in NAMES.values())
    # Every node failed, and ABANDON is configured: still CONTINUE, since reaching the API server says
    # nothing about the instances' GPUs (releasing them would throw away two partitioned nodes).
    completes = [params for kind, params in emulator.lifecycle if kind == "complete"]
    assert [c["LifecycleActionResult"] for c in completes] == ["CONTINUE"]
    assert TAINT_NOT_REMOVED not in NODE_VERDICTS

    # The next event (here the scale-out's own success event) lifts it once the API server allows it.
    kube_api.fail.clear()
    for iid in NAMES:
        emulator.nodes[iid].result = dict(DONE, changes=0)
    again = run(emulator, ecs, maker, kube_api, tmp_path, "examples/event.json")
    assert {n["instance_id"]: (n["outcome"], n.get("taint")) for n in again.nodes} == {
        iid: ("unchanged", "removed") for iid in NAMES}
    assert all(kube_api.nodes[name]["spec"]["taints"] == [] for name in NAMES.values())


def test_a_node_not_joined_yet_keeps_its_outcome_and_waits_for_a_later_event():
    """Under a lifecycle hook the instance is often not a Kubernetes node yet: its taint is left for the
    next event by design, which is no failure."""
    node = {"instance_id": "i-1", "node_name": "", "outcome": "partitioned", "reason": "16 changes",
            "taint": "left for a later event: the node has not joined the cluster yet"}
    assert settle(dict(node))["outcome"] == "partitioned"
    refused = dict(node, node_name="n", taint="not removed: Forbidden", reason="16 changes; startup taint not "
                                                                               "removed: Forbidden")
    assert settle(refused)["outcome"] == "failed" and refused["code"] == TAINT_NOT_REMOVED
    assert settle(dict(refused)) == refused  # settled once: the same again
