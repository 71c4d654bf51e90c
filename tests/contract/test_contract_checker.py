"""The checker itself (tests/support/contract.py): it must find what the product used to send, and each
kind of departure from the official SDK models, so that a clean report means something."""

import pytest

from tests.support import contract

ECS, ESS = ("ecs", "2014-05-26"), ("ess", "2022-02-22")
RUN = {"RegionId": "cn-beijing", "Type": "RunShellScript", "CommandContent": "ZWNobw==", "ContentEncoding": "Base64",
       "Timeout": "660", "KeepCommand": "false", "EnableParameter": "true", "Name": "ack-mig-hook",
       "ClientToken": "abc", "InstanceId.1": "i-1", "InstanceId.2": "i-2"}


def test_the_requests_the_product_sends_now_pass():
    assert contract.check_request(*ECS, "RunCommand", RUN) == []
    assert contract.check_request(*ECS, "RunCommand", dict(RUN, KeepCommand="False", EnableParameter="True")) == []
    assert contract.check_request(*ECS, "DescribeInvocationResults", {
        "RegionId": "cn-beijing", "InvokeId": "t-1", "MaxResults": "50", "NextToken": "x",
        "ContentEncoding": "Base64"}) == []
    assert contract.check_request(*ESS, "DescribeScalingInstances", {
        "RegionId": "cn-beijing", "ScalingGroupId": "asg-1", "InstanceIds.1": "i-1", "PageSize": "50",
        "PageNumber": "1"}) == []
    assert contract.check_request(*ESS, "RecordLifecycleActionHeartbeat", {
        "RegionId": "cn-beijing", "lifecycleHookId": "ash-1", "lifecycleActionToken": "t", "heartbeatTimeout": "600"}) == []


@pytest.mark.parametrize("version, action, params, problem", [
    # what the product sent before (issue 16): deprecated paging, an ignored PageSize, 2014-08-28 names
    (ECS, "DescribeInvocationResults", {"RegionId": "r", "InvokeId": "t", "PageSize": "50", "PageNumber": "1"},
     "PageSize is deprecated"),
    (ECS, "DescribeCloudAssistantStatus", {"RegionId": "r", "PageSize": "50", "InstanceId.1": "i-1"},
     "PageSize is deprecated"),
    (ESS, "DescribeScalingInstances", {"RegionId": "r", "InstanceId.1": "i-1"}, "InstanceId.N is not a parameter"),
    (ESS, "DescribeLifecycleHooks", {"RegionId": "r", "LifecycleHookId.1": "h"}, "LifecycleHookId.N is not a"),
    # each kind of mistake
    (ECS, "RunCommand", dict(RUN, KeepCommand="no"), "KeepCommand='no' is not a boolean"),
    (ECS, "RunCommand", dict(RUN, Timeout="ten"), "Timeout='ten' is not an integer"),
    (ECS, "RunCommand", dict(RUN, **{"InstanceId.4": "i-4"}), "numbered 1..N without gaps"),
    (ECS, "RunCommand", dict(RUN, InstanceId="i-1"), "InstanceId is a list"),
    (ECS, "RunCommand", {k: v for k, v in RUN.items() if k != "Type"}, "Type is required"),
    (ECS, "RunCommand", dict(RUN, Parameters="{not json"), "Parameters='{not json' is not JSON"),
    (ECS, "RunCommand", dict(RUN, CommandText="x"), "CommandText is not a parameter"),
    (ECS, "RunCommand", dict(RUN, **{"Tag.1": "x"}), "Tag holds objects"),
    (ECS, "RunInstanceCommand", {"RegionId": "r"}, "not an action"),
    (("ess", "2014-08-28"), "DescribeScalingInstances", {"RegionId": "r"}, "no official SDK model"),
])
def test_each_departure_from_the_model_is_named(version, action, params, problem):
    found = contract.check_request(*version, action, params)
    assert any(problem in p for p in found), found


def test_answers_must_fit_the_response_model():
    good = {"Invocation": {"InvocationResults": {"InvocationResult": [
        {"InstanceId": "i-1", "InvocationStatus": "Success", "ExitCode": 0, "Output": "", "Dropped": 0}]},
        "NextToken": "", "TotalCount": 1}, "RequestId": "r"}
    assert contract.check_answer(*ECS, "DescribeInvocationResults", good) == []
    bad = {"Invocation": {"InvocationResults": {"InvocationResult": [{"InstanceId": "i-1", "ExitCode": "0",
                                                                      "Exit": 0}]}, "TotalCount": "1"}}
    found = contract.check_answer(*ECS, "DescribeInvocationResults", bad)
    assert any("ExitCode is str, the SDK model has int" in p for p in found)
    assert any("InvocationResult[0].Exit is not in the SDK model" in p for p in found)
    assert any("Invocation.TotalCount is str" in p for p in found)
    # Auto Scaling 2022-02-22 lists bare; the 2014-08-28 wrapper is not that model
    assert contract.check_answer(*ESS, "DescribeScalingInstances", {"ScalingInstances": [{"InstanceId": "i"}]}) == []
    assert contract.check_answer(*ESS, "DescribeScalingInstances",
                                 {"ScalingInstances": {"ScalingInstance": [{"InstanceId": "i"}]}}) != []


def test_reads_are_recorded_and_checked_against_the_model():
    reads = set()
    body = contract.track({"Invocation": {"InvocationResults": {"InvocationResult": [{"InstanceId": "i-1"}]}}},
                          reads)
    row = body["Invocation"].get("InvocationResults").get("InvocationResult")[0]
    assert row.get("InstanceId") == "i-1" and row.get("Outptu") is None
    assert ("Invocation", "InvocationResults", "InvocationResult", "[]", "InstanceId") in reads
    problems = {contract.check_read(*ECS, "DescribeInvocationResults", path) for path in reads} - {None}
    assert problems == {"DescribeInvocationResults: the product reads Invocation.InvocationResults."
                        "InvocationResult.[].Outptu, which is not in the SDK model"}


def test_the_rpc_emulator_requires_what_the_models_require():
    from tests.support.rpc_emulator import ECS_ACTIONS, ESS_ACTIONS

    for (product, version), actions in ((ECS, ECS_ACTIONS), (ESS, ESS_ACTIONS)):
        for name, required in actions.items():
            model = {p.wire for p in contract.action(product, version, name).params.values() if p.required}
            assert set(required) == model - {"InstanceId"}, name  # SendFile's InstanceId.N: its own 1..50 rule
