"""Auto Scaling membership (functions.cloud.membership) with the real core SDK against the loopback ESS
emulator: the signed calls, their limits and paging, the answers, the failures; and run_event asking it
when the cluster comes from the ACK API (CS emulator) instead of a snapshot."""

import json

import pytest

from functions.cloud import membership as membership_mod
from functions.cloud.rpc import ESS_VERSION, ApiError, Backoff, RpcClient
from functions.base.errors import BadInventory, ConfigurationError, RetryLater
from functions.base.logs import JsonLogger
from functions.cloud.membership import EssMembership, SnapshotMembership
from functions.pipeline.event import run_event
from functions.base.settings import Credentials, Endpoint, load_settings
from tests.function.conftest import AK, ONE_KUBE_TRY, SECRET, TOKEN, cloud_env, event_json
from tests.support.rpc_emulator import Emulator

GROUP, OTHER = "asg-2ze4x7c1mig8a100q9wz", "asg-2ze9gn7pass3h1xk0tb"
HOOK = "ash-2ze6hook0mig1a100w3e"


@pytest.fixture
def ess(no_proxy):
    with Emulator(AK, SECRET, TOKEN, "cn-beijing") as emu:
        emu.scaling_instances = {GROUP: ["i-member%03d" % n for n in range(30)], OTHER: ["i-elsewhere001"]}
        emu.lifecycle_hooks = {HOOK: GROUP, "ash-other": OTHER}
        yield emu


def client(emu, secret=SECRET, attempts=3):
    return RpcClient("ess", ESS_VERSION, emu.region, Credentials(AK, secret, TOKEN),
                     Endpoint(emu.endpoint.split("://", 1)[1], "http"), timeout_s=5,
                     backoff=Backoff(attempts, sleep=lambda s: None))


def requests(emu, action):
    return [params for name, params in emu.requests if name == action]


def test_members_in_calls_of_at_most_20_ids_and_unknown_ids_left_out(ess):
    asked = ["i-member%03d" % n for n in range(0, 30, 2)] + ["i-elsewhere001"] + \
        ["i-unknown%03d" % n for n in range(25)]
    found = EssMembership(client(ess)).scaling_members(GROUP, asked)
    assert found == {"i-member%03d" % n for n in range(0, 30, 2)}
    calls = requests(ess, "DescribeScalingInstances")
    assert len(calls) == 3 and ess.rejected == []  # 41 ids: 20 + 20 + 1, each call signed and accepted
    for params in calls:
        ids = [k for k in params if k.startswith("InstanceIds.")]
        assert 1 <= len(ids) <= 20 and params["ScalingGroupId"] == GROUP and params["RegionId"] == "cn-beijing"
        assert params["PageSize"] == "50" and params["PageNumber"] == "1" and params["Version"] == "2022-02-22"


def test_members_follow_the_pages(ess, monkeypatch):
    monkeypatch.setattr(membership_mod, "PAGE_SIZE", 3)
    asked = ["i-member%03d" % n for n in range(8)]
    assert EssMembership(client(ess)).scaling_members(GROUP, asked) == set(asked)
    assert [p["PageNumber"] for p in requests(ess, "DescribeScalingInstances")] == ["1", "2", "3"]



@pytest.mark.contract_exempt("answers TotalCount as text on purpose")
@pytest.mark.parametrize("total", ["\u00b2", "\u0663", " 3"])
def test_a_total_count_of_other_scripts_digits_does_not_end_the_pages(ess, monkeypatch, total):
    """``TotalCount`` was read as a count when ``str.isdigit`` said so: a superscript (``\u00b2``) raised
    ValueError out of the membership check (``int`` refuses it), the event ending in an internal error for every
    instance, and another script's digit (``\u0663``, 3) read as a number that ended the paging early. Only
    ASCII digits are a count now (the reader rule's ``digits``); anything else reads as no total, and the pages
    are followed until one comes short."""
    monkeypatch.setattr(membership_mod, "PAGE_SIZE", 3)
    ess.mangle_next("DescribeScalingInstances", lambda answer: answer.update(TotalCount=total), times=10)
    asked = ["i-member%03d" % n for n in range(8)]
    assert EssMembership(client(ess)).scaling_members(GROUP, asked) == set(asked)
    assert [p["PageNumber"] for p in requests(ess, "DescribeScalingInstances")] == ["1", "2", "3"]

def test_the_lifecycle_hooks_group_comes_from_auto_scaling(ess):
    members = EssMembership(client(ess))
    assert members.lifecycle_hook_group(HOOK, GROUP) == GROUP
    # The service ignores ScalingGroupId when hook ids are given: the answer names the real owner.
    assert members.lifecycle_hook_group("ash-other", GROUP) == OTHER
    assert members.lifecycle_hook_group("ash-nosuchhook", GROUP) is None
    params = requests(ess, "DescribeLifecycleHooks")[0]
    assert params["LifecycleHookIds.1"] == HOOK and ess.rejected == []


def test_the_emulator_enforces_the_documented_limits_and_the_signature(ess):
    ess_client = client(ess, attempts=1)
    params = {"RegionId": "cn-beijing", "ScalingGroupId": GROUP}
    params.update(("InstanceIds.%d" % n, "i-member%03d" % n) for n in range(1, 22))
    with pytest.raises(ApiError, match="InvalidParameter"):
        ess_client.call("DescribeScalingInstances", params)
    with pytest.raises(ApiError, match="PageSize"):
        ess_client.call("DescribeLifecycleHooks", {"RegionId": "cn-beijing", "PageSize": 51})
    with pytest.raises(ConfigurationError, match="SignatureDoesNotMatch"):
        EssMembership(client(ess, secret="not-the-secret")).scaling_members(GROUP, ["i-member001"])


def test_an_instance_auto_scaling_lists_under_another_group_is_not_a_member(ess):
    """Each row of DescribeScalingInstances names its own group. Even an answer that lists other groups'
    instances (the emulator's ``list_other_groups`` fault) never makes them members of the asked group:
    being listed is not membership (issue 20, the confused deputy across the account's groups)."""
    ess.list_other_groups = True
    found = EssMembership(client(ess)).scaling_members(GROUP, ["i-member001", "i-elsewhere001", "i-unknown9"])
    listed = {row["InstanceId"]: row["ScalingGroupId"] for ex in ess.exchanges
              for row in ex.answer.get("ScalingInstances", [])}
    assert listed == {"i-member001": GROUP, "i-elsewhere001": OTHER}  # Auto Scaling did list it, under OTHER
    assert found == {"i-member001"}


def test_failures_retry_the_event_or_end_it_never_trust_the_instance(ess):
    ess.fail_next("DescribeScalingInstances", "Throttling.User", 400, times=1)
    assert EssMembership(client(ess)).scaling_members(GROUP, ["i-member001"]) == {"i-member001"}  # retried
    ess.fail_next("DescribeScalingInstances", "ServiceUnavailable", 503, times=3)
    with pytest.raises(RetryLater, match="DescribeScalingInstances"):
        EssMembership(client(ess)).scaling_members(GROUP, ["i-member001"])
    ess.fail_next("DescribeLifecycleHooks", "Forbidden.RAM", 403)
    with pytest.raises(ConfigurationError, match="Forbidden.RAM"):
        EssMembership(client(ess)).lifecycle_hook_group(HOOK, GROUP)


@pytest.mark.parametrize("data, fragment", [
    ({"scaling_instances": ["i-1"]}, "scaling_instances must map"),
    ({"scaling_instances": {GROUP: "i-1"}}, "scaling_instances must map"),
    ({"lifecycle_hooks": {HOOK: [GROUP]}}, "lifecycle_hooks must map"),
])
def test_snapshot_keys_are_checked(data, fragment):
    with pytest.raises(BadInventory, match=fragment):
        SnapshotMembership.from_dict(data)
    empty = SnapshotMembership.from_dict({})
    assert empty.scaling_members(GROUP, ["i-1"]) == set() and empty.lifecycle_hook_group(HOOK, GROUP) is None


# ---- run_event with the cluster from the ACK API: membership from Auto Scaling ----

def _scale_out(*ids):
    event = event_json("ess_scale_out_success.json")
    event["data"] = {"scalingGroupId": GROUP, "instanceIds": list(ids)}
    return json.dumps(event)


def test_run_event_asks_auto_scaling_only_for_instances_that_are_not_nodes(emulator, ess):
    from functions.kube.nodes import MemoryKube

    settings = load_settings(cloud_env(emulator, ACK_MIG_ESS_ENDPOINT=ess.endpoint, **ONE_KUBE_TRY))
    # Both named instances are nodes the ACK API lists: Auto Scaling is not asked at all. (Kubernetes, an
    # empty MemoryKube here, knows them as new nodes: partitioned directly.)
    known = run_event(_scale_out("i-2zeb7c1mig0a100x1k4d", "i-2zeb7c1mig0a100x2m8f"), settings, dry_run=True,
                      logger=JsonLogger("OFF"), kube=MemoryKube())
    assert [d.action for d in known.decisions] == ["partition", "partition"] and ess.calls == {}
    # A new instance: partitioned when Auto Scaling lists it in the pool's group, skipped otherwise.
    mixed = run_event(_scale_out("i-member007", "i-elsewhere001"), settings, dry_run=True,
                      logger=JsonLogger("OFF"))
    by_id = {d.instance_id: d for d in mixed.decisions}
    assert by_id["i-member007"].action == "partition"
    assert by_id["i-elsewhere001"].action == "skip" and GROUP in by_id["i-elsewhere001"].reason
    assert [n["instance_id"] for n in mixed.nodes] == ["i-member007"]
    assert ess.calls["DescribeScalingInstances"] == 1 and ess.rejected == []
    # The same when Auto Scaling's answer lists the other instance under its own (other) group.
    ess.list_other_groups = True
    again = run_event(_scale_out("i-member007", "i-elsewhere001"), settings, dry_run=True,
                      logger=JsonLogger("OFF"))
    assert {d.instance_id: d.action for d in again.decisions} == {"i-member007": "partition",
                                                                   "i-elsewhere001": "skip"}
    assert any(row.get("ScalingGroupId") == OTHER for ex in ess.exchanges
               for row in ex.answer.get("ScalingInstances", []))


def test_run_event_leaves_a_foreign_hook_unanswered(emulator, ess):
    settings = load_settings(cloud_env(emulator, ACK_MIG_ESS_ENDPOINT=ess.endpoint))
    event = event_json("ess_lifecycle_scale_out.json")
    ess.lifecycle_hooks[HOOK] = OTHER  # Auto Scaling says the hook is another group's
    result = run_event(json.dumps(event), settings, logger=JsonLogger("OFF"))
    assert result.outcome == "skip" and "says it is %s's" % OTHER in result.reason
    assert ess.calls["DescribeLifecycleHooks"] == 1
    assert ess.calls["CompleteLifecycleAction"] == 0 and ess.lifecycle == []


def test_a_pool_without_a_partition_label_needs_no_membership_answer(emulator, ess):
    settings = load_settings(cloud_env(emulator, ACK_MIG_ESS_ENDPOINT=ess.endpoint))
    event = event_json("ess_scale_out_success.json")
    event["data"] = {"scalingGroupId": "asg-2ze1cpu6g7b0n3m5ka", "instanceIds": ["i-brandnewcpu01"]}
    result = run_event(json.dumps(event), settings, dry_run=True, logger=JsonLogger("OFF"))
    (d,) = result.decisions
    assert d.action == "skip" and "no partition label" in d.reason and ess.calls == {}
