"""The lifecycle hook's answer, decided by the nodes' outcomes: a whole lifecycle event through
``run_event`` (snapshot, decisions, the real delivery executor), Cloud Assistant and Auto Scaling on the
loopback emulator with the real core SDK, and the answer read from the emulator's CompleteLifecycleAction.

One token covers every instance of the scaling activity, so the answer is per hook: ABANDON releases
every instance under it. It may only be sent when every node failed by its own verdict on its GPUs; one
healthy node, or one that simply could not be reached, means CONTINUE."""

import json
import os

import pytest

from functions.cloud.cluster import InventoryLookup
from functions.delivery.cloud_assistant import CloudAssistantTransport
from functions.delivery.node_executor import DeliveryExecutor
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from tests.delivery.conftest import SECRET, TOKEN
from tests.support.rpc_emulator import SimNode

pytestmark = pytest.mark.cloud_assistant
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(ROOT, "examples", "inventory.json")
GOOD, OTHER = "i-2zeb7c1mig0a100x1k4d", "i-2zeb7c1mig0a100x2m8f"  # two nodes of the A100 pool
HOOK = "ash-2ze6hook0mig1a100w3e"

BUSY = {"outcome": "failed", "changes": 0, "gpus": [],
        "error": {"code": "gpu-busy", "message": "GPU 0 has running processes: 4242"}}


def busy():
    return SimNode(result=BUSY, exit_code=4)  # node_bootstrap's exit code for a busy GPU


def answer(emulator, ecs, maker, nodes):
    """Run the lifecycle event for GOOD and OTHER; return the node outcomes and the hook's answer."""
    emulator.nodes.update(nodes)
    with open(INVENTORY) as fh:
        inventory = json.load(fh)
    settings = load_settings({
        "ACK_MIG_CLUSTER_ID": inventory["cluster_id"], "ACK_MIG_REGION": emulator.region,
        "ALIBABA_CLOUD_ACCESS_KEY_ID": emulator.access_key_id, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
        "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_ESS_ENDPOINT": emulator.endpoint,
        "ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_LOG_LEVEL": "ERROR"})
    transport = CloudAssistantTransport(ecs, maker, agent_wait_s=0.3, poll_s=0.02, poll_max_s=0.05)
    with open(os.path.join(ROOT, "tests", "events", "ess_lifecycle_scale_out.json")) as fh:
        event = json.load(fh)
    event["data"]["instanceIds"] = [GOOD, OTHER]
    result = run_event(json.dumps(event), settings, inventory=InventoryLookup.from_dict(inventory),
                       executor=DeliveryExecutor.from_settings(settings, transport), logger=JsonLogger("OFF"))
    assert result.outcome == "done", result.reason
    completes = [params for kind, params in emulator.lifecycle if kind == "complete"]
    assert len(completes) == 1 and completes[0]["LifecycleHookId"] == HOOK and emulator.rejected == []
    return {n["instance_id"]: n["outcome"] for n in result.nodes}, completes[0]["LifecycleActionResult"]


def test_one_partitioned_node_and_one_busy_node_continue(emulator, ecs, maker):
    # ABANDON here would release the healthy instance too (and with `any` instead of `all` it would be sent).
    outcomes, sent = answer(emulator, ecs, maker, {GOOD: SimNode(), OTHER: busy()})
    assert outcomes == {GOOD: "partitioned", OTHER: "failed"}
    assert sent == "CONTINUE"


def test_every_node_busy_gives_up_on_the_instances(emulator, ecs, maker):
    outcomes, sent = answer(emulator, ecs, maker, {GOOD: busy(), OTHER: busy()})
    assert outcomes == {GOOD: "failed", OTHER: "failed"}
    assert sent == "ABANDON"  # ACK_MIG_LIFECYCLE_FAILURE_RESULT's default


def test_a_busy_node_and_an_unreachable_one_continue(emulator, ecs, maker):
    # Not reaching a node says nothing about its GPUs: no verdict, no release.
    outcomes, sent = answer(emulator, ecs, maker, {GOOD: SimNode(agent_ready=False), OTHER: busy()})
    assert outcomes == {GOOD: "failed", OTHER: "failed"}
    assert sent == "CONTINUE"


def test_a_busy_node_and_one_run_by_another_mig_manager_continue(emulator, ecs, maker):
    # A node NVIDIA's mig-manager runs answers `conflict` (exit 6), its own outcome: nothing was changed and
    # nothing is wrong with its GPUs, so it is no reason to release the instances.
    conflict = SimNode(result={"outcome": "conflict", "changes": 0, "gpus": [], "error": {
        "code": "conflict", "message": "node label nvidia.com/mig.config is set: NVIDIA mig-manager is in charge"}},
        exit_code=6)
    outcomes, sent = answer(emulator, ecs, maker, {GOOD: conflict, OTHER: busy()})
    assert outcomes == {GOOD: "conflict", OTHER: "failed"}
    assert sent == "CONTINUE"


def test_every_node_with_a_lost_gpu_gives_up_on_the_instances(emulator, ecs, maker):
    # A GPU fallen off the bus (node_bootstrap's `gpu-lost`) is the node's verdict on its hardware: a fresh
    # instance serves the pool, this one never will until someone reboots or services it.
    lost = {"outcome": "failed", "changes": 0,
            "error": {"code": "gpu-lost", "message": "GPU 1 is lost (NVML GPU_IS_LOST): reboot the node"}}
    outcomes, sent = answer(emulator, ecs, maker, {GOOD: SimNode(result=lost, exit_code=1),
                                                   OTHER: SimNode(result=lost, exit_code=1)})
    assert outcomes == {GOOD: "failed", OTHER: "failed"}
    assert sent == "ABANDON"
