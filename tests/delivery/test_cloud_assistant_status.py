"""Cloud Assistant's agent status covers every pending instance in each round (functions/delivery/
cloud_assistant.py): ``DescribeCloudAssistantStatus`` takes at most 100 ``InstanceId.N`` (ECS API reference),
so 150 nodes need two calls in the same round. With one round only (no agent wait), a transport that asked
for the first 100 alone would leave 50 ready nodes ``agent-not-ready`` (issue 30, "tests that bite")."""

import pytest

from functions.delivery.cloud_assistant import CloudAssistantTransport
from functions.delivery.outcome import outcome
from tests.delivery.conftest import targets
from tests.support.rpc_emulator import SimNode

pytestmark = pytest.mark.cloud_assistant


def test_150_ready_agents_are_all_seen_in_a_single_status_round(emulator, ecs, maker):
    emulator.add_nodes(150, lambda iid: SimNode(duration_s=0.05))
    transport = CloudAssistantTransport(ecs, maker, agent_wait_s=0, poll_s=0.02, poll_max_s=0.05)
    results = transport.run(targets(150, prefix="i-emu"))
    assert emulator.calls["DescribeCloudAssistantStatus"] == 2  # one round: 100 + 50
    asked = sorted(p["InstanceId.%d" % (i + 1)] for a, p in emulator.requests if a == "DescribeCloudAssistantStatus"
                   for i in range(100) if "InstanceId.%d" % (i + 1) in p)
    assert asked == sorted(t.instance_id for t in targets(150, prefix="i-emu"))
    assert {outcome(r).outcome for r in results} == {"partitioned"}
