"""The emulators accept exactly what the official Tea SDKs send, and the product's own requests match
those SDKs' models.

The Tea clients (alibabacloud_ecs20140526, alibabacloud_ess20220222) sign with ACS3-HMAC-SHA256 and put
booleans on the wire as ``str(bool)`` ("True"/"False"); the product's core-SDK CommonRequest signs with
HMAC-SHA1 and sends "true"/"false". Both must be served; both are checked against the same models.
"""

import base64

import pytest

from functions.delivery.cloud_assistant import CloudAssistantTransport
from tests.delivery.conftest import SECRET, TOKEN, fake_bundle, maker, node_root, rpc, targets  # noqa: F401
from tests.support import contract
from tests.support.rpc_emulator import Emulator, SimNode

AK = "LTAIdelivery"


@pytest.fixture
def emulator():
    with Emulator(access_key_id=AK, secret=SECRET, token=TOKEN) as emu:
        yield emu


def _config(emu):
    from alibabacloud_tea_openapi import utils_models as openapi_models

    return openapi_models.Config(access_key_id=AK, access_key_secret=SECRET, security_token=TOKEN,
                                 region_id=emu.region, endpoint=emu.endpoint.split("://", 1)[1], protocol="http",
                                 read_timeout=5000, connect_timeout=5000)


def _runtime():
    from darabonba.runtime import RuntimeOptions

    return RuntimeOptions(autoretry=False, read_timeout=5000, connect_timeout=5000)


def test_the_ecs_tea_sdk_is_served_as_the_api_would(emulator):
    from alibabacloud_ecs20140526 import models
    from alibabacloud_ecs20140526.client import Client

    ids = emulator.add_nodes(3)
    ecs, rt = Client(_config(emulator)), _runtime()
    status = ecs.describe_cloud_assistant_status_with_options(
        models.DescribeCloudAssistantStatusRequest(region_id=emulator.region, instance_id=ids), rt)
    rows = status.body.instance_cloud_assistant_status_set.instance_cloud_assistant_status
    assert sorted(r.instance_id for r in rows) == ids and {r.cloud_assistant_status for r in rows} == {"true"}
    script = base64.b64encode(b'echo \'{"outcome": "success", "changes": 0, "gpus": []}\'').decode()
    run = ecs.run_command_with_options(models.RunCommandRequest(
        region_id=emulator.region, type="RunShellScript", command_content=script, content_encoding="Base64",
        instance_id=ids, keep_command=False, enable_parameter=False, timeout=60, name="tea"), rt)
    assert run.body.invoke_id.startswith("t-")
    sent = [ex.params for ex in emulator.exchanges if ex.action == "RunCommand"][0]
    assert sent["KeepCommand"] == "False" and sent["EnableParameter"] == "False"  # str(bool), as the SDK sends
    first = ecs.describe_invocation_results_with_options(models.DescribeInvocationResultsRequest(
        region_id=emulator.region, invoke_id=run.body.invoke_id, max_results=2), rt).body.invocation
    rest = ecs.describe_invocation_results_with_options(models.DescribeInvocationResultsRequest(
        region_id=emulator.region, invoke_id=run.body.invoke_id, max_results=2, next_token=first.next_token),
        rt).body.invocation
    got = first.invocation_results.invocation_result + rest.invocation_results.invocation_result
    assert sorted(r.instance_id for r in got) == ids and first.next_token and not rest.next_token
    send = ecs.send_file_with_options(models.SendFileRequest(
        region_id=emulator.region, name="f", target_dir="/tmp/x", content=base64.b64encode(b"x").decode(),
        content_type="Base64", instance_id=ids[:1], overwrite=True, file_mode="0600"), rt)
    results = ecs.describe_send_file_results_with_options(models.DescribeSendFileResultsRequest(
        region_id=emulator.region, invoke_id=send.body.invoke_id), rt).body
    (row,) = results.invocations.invocation[0].invoke_instances.invoke_instance
    assert row.instance_id == ids[0] and row.invocation_status == "Success"
    assert emulator.rejected == [] and contract.check_exchanges(emulator.exchanges) == []


def test_the_ess_tea_sdk_is_served_as_the_api_would(emulator):
    from alibabacloud_ess20220222 import models
    from alibabacloud_ess20220222.client import Client

    emulator.scaling_instances = {"asg-a": ["i-1", "i-2"], "asg-b": ["i-3"]}
    emulator.lifecycle_hooks = {"ash-1": "asg-a"}
    ess, rt = Client(_config(emulator)), _runtime()
    listed = ess.describe_scaling_instances_with_options(models.DescribeScalingInstancesRequest(
        region_id=emulator.region, scaling_group_id="asg-a", instance_ids=["i-1", "i-3"], page_size=50), rt)
    assert [(r.instance_id, r.scaling_group_id) for r in listed.body.scaling_instances] == [("i-1", "asg-a")]
    hooks = ess.describe_lifecycle_hooks_with_options(models.DescribeLifecycleHooksRequest(
        region_id=emulator.region, lifecycle_hook_ids=["ash-1"]), rt)
    assert [h.scaling_group_id for h in hooks.body.lifecycle_hooks] == ["asg-a"]
    ess.record_lifecycle_action_heartbeat_with_options(models.RecordLifecycleActionHeartbeatRequest(
        region_id=emulator.region, lifecycle_hook_id="ash-1", lifecycle_action_token="tok", heartbeat_timeout=600), rt)
    ess.complete_lifecycle_action_with_options(models.CompleteLifecycleActionRequest(
        region_id=emulator.region, lifecycle_hook_id="ash-1", lifecycle_action_token="tok",
        lifecycle_action_result="CONTINUE"), rt)
    assert [kind for kind, _ in emulator.lifecycle] == ["heartbeat", "complete"]
    assert emulator.rejected == [] and contract.check_exchanges(emulator.exchanges) == []


def test_every_request_and_read_of_a_delivery_run_matches_the_sdk_models(emulator, maker):
    """The product's own calls (core SDK): a run of 120 nodes with a cold bundle covers status, RunCommand
    in two batches, results over two pages, SendFile and its results. Nothing differs from the models,
    and every field the product reads is in the response models."""
    emulator.add_nodes(120, lambda iid: SimNode(bundle=False))
    reads = set()
    ecs = rpc(emulator)
    original = ecs.call
    ecs.call = lambda action, params: contract.track(original(action, params), reads)
    results = CloudAssistantTransport(ecs, maker, poll_s=0.05).run(targets(120, prefix="i-emu"))
    assert all(r.error is None for r in results)
    actions = {ex.action for ex in emulator.exchanges}
    assert actions == {"DescribeCloudAssistantStatus", "RunCommand", "DescribeInvocationResults", "SendFile",
                       "DescribeSendFileResults"}
    assert any("NextToken" in ex.params for ex in emulator.exchanges)  # the second page of a batch of 100
    assert contract.check_exchanges(emulator.exchanges) == []
    # what the product read, by action: each path exists in that action's response model
    assert ("Invocation", "InvocationResults", "InvocationResult", "[]", "Output") in reads
    problems = [contract.check_read("ecs", "2014-05-26", action, path) for action in actions for path in reads
                if path[0] in contract.fields(contract.body_model("ecs", "2014-05-26", action))]
    assert [p for p in problems if p] == []


@pytest.mark.parametrize("encoding", ["PlainText", "Base64", None])
def test_invocation_output_comes_in_the_encoding_asked_for(emulator, encoding):
    """DescribeInvocationResults ``ContentEncoding`` (ECS SDK model, DescribeInvocationResultsRequest): "The
    encoding method for the `CommandContent` and `Output` fields in the response", PlainText or Base64,
    "Default value: Base64". An emulator that answers Base64 whatever was asked would pass a reader that asks
    for one encoding and decodes the other."""
    from alibabacloud_ecs20140526 import models
    from alibabacloud_ecs20140526.client import Client

    ids = emulator.add_nodes(1)
    ecs, rt = Client(_config(emulator)), _runtime()
    ecs.describe_cloud_assistant_status_with_options(  # the agent is seen ready first, as delivery sees it
        models.DescribeCloudAssistantStatusRequest(region_id=emulator.region, instance_id=ids), rt)
    run = ecs.run_command_with_options(models.RunCommandRequest(
        region_id=emulator.region, type="RunShellScript", command_content=base64.b64encode(b"true").decode(),
        content_encoding="Base64", instance_id=ids, keep_command=False, enable_parameter=False, timeout=60), rt)
    (row,) = ecs.describe_invocation_results_with_options(models.DescribeInvocationResultsRequest(
        region_id=emulator.region, invoke_id=run.body.invoke_id, content_encoding=encoding), rt
    ).body.invocation.invocation_results.invocation_result
    text = row.output if encoding == "PlainText" else base64.b64decode(row.output).decode()
    assert text.startswith("# node log\n{") and text.endswith("}\n"), row.output
    assert emulator.rejected == [] and contract.check_exchanges(emulator.exchanges) == []
