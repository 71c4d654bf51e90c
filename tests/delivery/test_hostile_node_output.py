"""A node's output is input too: whatever a node prints (here a result line nested 2,000 levels deep, past
the JSON decoder's recursion limit) ends that node alone as ``failed`` with a one-line reason; the other
node of the same Cloud Assistant batch is still partitioned, and nothing escapes ``run_event``.

A node that never stops writing (stdout, stderr, or lines) over SSH (the real sshd) or the local
transport ends ``output-too-large`` once it passes the cap, the other nodes finish, and the function's
process stays small: measured in a child process (tests/support/flood_nodes.py; bench/endless_output.py
has the larger run)."""

import json
import os

import pytest

from functions.cloud.cluster import InventoryLookup
from functions.delivery.cloud_assistant import CloudAssistantTransport
from functions.delivery.node_executor import DeliveryExecutor
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from tests.delivery.conftest import rpc
from tests.support.flood_nodes import local_config, measure, node_bundle, ssh_config, write_standin
from tests.support.rpc_emulator import Run, SimNode
from tests.support.sshd import sshd  # noqa: F401  (fixture)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(ROOT, "examples", "inventory.json")
GOOD, HOSTILE = "i-2zeb7c1mig0a100x1k4d", "i-2zeb7c1mig0a100x2m8f"


class DeepOutputNode(SimNode):
    """Prints a last line that is valid JSON nested deeper than Python's recursion limit."""

    def run(self, script, timeout_s):
        return Run(0, "# node log\n" + '{"a":' * 2000 + "1" + "}" * 2000 + "\n", "", 0.0)


@pytest.mark.cloud_assistant
def test_a_node_printing_deeply_nested_json_fails_alone(emulator, ecs, maker):
    emulator.nodes.update({GOOD: SimNode(), HOSTILE: DeepOutputNode()})
    inventory = InventoryLookup.from_file(INVENTORY)
    settings = load_settings({"ACK_MIG_CLUSTER_ID": inventory.cluster_id, "ACK_MIG_STARTUP_TAINT": "none"})
    transport = CloudAssistantTransport(ecs, maker, agent_wait_s=0.3, poll_s=0.02, poll_max_s=0.05)
    with open(os.path.join(ROOT, "examples", "event.json"), "rb") as fh:  # scale-out of GOOD and HOSTILE
        raw = fh.read()
    result = run_event(raw, settings, inventory=inventory, executor=DeliveryExecutor.from_settings(settings, transport),
                       logger=JsonLogger("OFF"))
    assert result.outcome == "done", result.reason
    nodes = {n["instance_id"]: n for n in result.nodes}
    assert nodes[GOOD]["outcome"] == "partitioned"
    assert nodes[HOSTILE]["outcome"] == "failed" and "\n" not in nodes[HOSTILE]["reason"]
    json.dumps(result.to_json())


FLOODS = ["i-flood-out0", "i-flood-err0", "i-flood-lines0"]
PEAK_RSS_MB = 200  # issue 16: the function stays under this with endless output (FC gives it 512 MB)


@pytest.mark.parametrize("kind", [pytest.param("ssh", marks=pytest.mark.ssh), "local"])
def test_nodes_streaming_endless_output_end_output_too_large_and_the_function_stays_small(kind, sshd, tmp_path):
    """Three nodes stream without end (the deadline, 20 s, is far away); two good nodes run beside them."""
    targets = ["i-good0"] + FLOODS + ["i-good1"]
    config = ssh_config(sshd, str(tmp_path), targets) if kind == "ssh" else local_config(str(tmp_path), targets)
    report = measure(config, timeout_s=60)
    nodes = report["nodes"]
    assert [nodes[t]["error"] for t in FLOODS] == ["output-too-large"] * 3, nodes
    assert all(nodes[t]["outcome"] == "failed" and "1048576 bytes" in nodes[t]["message"] for t in FLOODS)
    assert nodes["i-good0"]["outcome"] == nodes["i-good1"]["outcome"] == "partitioned", nodes
    assert report["peak_rss_mb"] < PEAK_RSS_MB, report
    # Cut off at the cap, not at the node's deadline: the error says so (a deadline would be node-timeout);
    # no wall-clock bound here, which a loaded machine would break.


@pytest.mark.cloud_assistant
def test_a_streaming_node_under_a_lifecycle_hook_fails_alone_and_the_hook_is_still_answered(emulator, tmp_path):
    """The executor's view (local transport, the ESS emulator): the streaming node is failed
    output-too-large, the good one partitioned, and the hook answered CONTINUE (not the node's verdict on
    its GPUs, so never ABANDON)."""
    from functions.delivery.lifecycle import Lifecycle
    from functions.delivery.local import LocalTransport
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.delivery.transport import ScriptMaker
    from tests.delivery.test_executor import decision, request

    maker = ScriptMaker(node_bundle(), 20, str(tmp_path / "root"), write_standin(str(tmp_path / "python")),
                        grace_s=1)
    life = Lifecycle(rpc(emulator, "ess"), "ABANDON", heartbeat_s=600)
    nodes = DeliveryExecutor(LocalTransport(maker), lifecycle=lambda: life).execute(
        request(hook=True), [decision("i-good0"), decision("i-flood-out0")])
    by_id = {n["instance_id"]: n for n in nodes}
    assert by_id["i-good0"]["outcome"] == "partitioned"
    assert by_id["i-flood-out0"]["outcome"] == "failed" and by_id["i-flood-out0"]["reason"].startswith(
        "output-too-large: the node wrote more than 1048576 bytes")
    assert emulator.lifecycle[-1][0] == "complete"
    assert emulator.lifecycle[-1][1]["LifecycleActionResult"] == "CONTINUE"
