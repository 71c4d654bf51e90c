"""The autoscaler tags through the real cs20151215 SDK against the loopback CS emulator: the write, the loop
our own write would start (its ActionTrail event must end as a no-op), label removal, the limits and the
API's refusals, the setting, and the RAM grant the write needs."""

import copy
import io
import json

import pytest

from functions.decision.autoscaler_tags import MODE_ON
from functions.commands.doctor import autoscaler_checks
from functions.cloud.cs_lookup import CsLookup
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from tests.function.conftest import ONE_KUBE_TRY, cloud_env, event_json
from tests.function.test_template import _code_actions, _expected_grant, _statements, _sub, REGION_ACCOUNT

pytestmark = pytest.mark.timeout(60)

POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"  # gpu-mig-a100 in examples/inventory.json: auto scaling on
SEQ = "ack.aliyun.com/gpu-partition-sequence"
K3G = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-3g.20gb"
K1G = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-1g.5gb"


@pytest.fixture
def cs(emulator):
    """The example cluster with its MIG pool scaled to zero (an autoscaling pool waiting for pods): no node to
    deliver to, so a real (not dry) run touches nothing but the pool's tags."""
    emulator.nodes = [n for n in emulator.nodes if n.get("nodepool_id") != POOL]
    return emulator


def modify_event(cluster_id, nodepool_id=POOL, body=None):
    """The ActionTrail record of a ModifyClusterNodePool call, as EventBridge delivers it (the ScaleClusterNodePool
    sample with the operation's own name and request)."""
    event = event_json("actiontrail_api_scale_nodepool.json")
    event["data"]["eventName"] = "ModifyClusterNodePool"
    event["data"]["requestParameters"] = {"ClusterId": cluster_id, "NodepoolId": nodepool_id,
                                          "body": json.dumps(body or {})}
    event["subject"] = "acs:cs:cn-beijing:1234567890123456:cluster/%s" % cluster_id
    return json.dumps(event)


def run(emu, raw, dry_run=False, **env):
    # No test here delivers to a node; should one try, ECS is a closed loopback port, never the real endpoint.
    env.setdefault("ACK_MIG_ECS_ENDPOINT", "http://127.0.0.1:9")
    env = dict(ONE_KUBE_TRY, **env)  # the Kubernetes side is not these tests' (the emulator's names no server)
    stream = io.StringIO()
    result = run_event(raw, load_settings(cloud_env(emu, **env)), dry_run=dry_run,
                       logger=JsonLogger("INFO", stream=stream))
    return result, [json.loads(line) for line in stream.getvalue().splitlines()]


def entry(result, nodepool_id=POOL):
    entries = result if isinstance(result, list) else result.pool_tags
    (found,) = [e for e in entries if e["nodepool_id"] == nodepool_id]
    return found


def test_a_pool_gets_its_tags_and_the_event_of_that_write_is_a_no_op(cs):
    result, _ = run(cs, modify_event(cs.cluster_id))
    assert result.outcome == "done"
    mine = entry(result)
    assert mine["written"] and not mine["in_sync"] and mine["set"] == {K3G: "16"} and mine["remove"] == []
    # the whole list, the other tag first and unchanged, and nothing but scaling_group.tags in the body
    assert cs.pool_tags(POOL) == [("team", "ml-platform"), (K3G, "16")]
    (sent,) = cs.modified
    assert sent["body"] == {"scaling_group": {"tags": [{"key": "team", "value": "ml-platform"},
                                                       {"key": K3G, "value": "16"}]}}
    assert cs.rejected == []
    # The write is recorded by ActionTrail as a ModifyClusterNodePool of this pool, which EventBridge sends
    # back to the function: it must find the pool in sync and write nothing.
    echo, _ = run(cs, modify_event(cs.cluster_id, body=sent["body"]))
    again = entry(echo)
    assert again["in_sync"] and not again["written"] and again["set"] == {} and again["remove"] == []
    assert cs.calls("ModifyClusterNodePool") == 1
    # and so must the periodic reconcile
    timer, _ = run(cs, json.dumps(event_json("fc_timer.json")))
    assert entry(timer)["in_sync"] and cs.calls("ModifyClusterNodePool") == 1


@pytest.mark.parametrize("semantics", ["replace", "merge"])
def test_a_label_change_and_its_removal(cs, semantics):
    """Whether ModifyClusterNodePool replaces the tag list or merges into it is not documented: a stale key
    is written as 0, so under either the template stops advertising it, and nothing loops."""
    cs.list_semantics = semantics
    run(cs, modify_event(cs.cluster_id))
    cs.pool(POOL)["kubernetes_config"]["labels"] = [{"key": "ack.aliyun.com/gpu-partition-size", "value": "1g.5gb"}]
    changed, _ = run(cs, modify_event(cs.cluster_id))
    assert entry(changed)["set"] == {K1G: "56"} and entry(changed)["remove"] == [K3G]
    assert sorted(cs.pool_tags(POOL)) == sorted([("team", "ml-platform"), (K1G, "56"), (K3G, "0")])
    cs.pool(POOL)["kubernetes_config"]["labels"] = []
    removed, _ = run(cs, modify_event(cs.cluster_id))
    assert removed.outcome == "skip" and "no partition label" in removed.reason  # no node to decide ...
    assert entry(removed)["written"] and entry(removed)["remove"] == [K1G]  # ... but the tags went
    advertising = [(k, v) for k, v in cs.pool_tags(POOL) if k.startswith(K1G[:40]) and v != "0"]
    assert advertising == [] and ("team", "ml-platform") in cs.pool_tags(POOL)
    quiet, _ = run(cs, modify_event(cs.cluster_id))
    assert quiet.pool_tags == [] and cs.calls("ModifyClusterNodePool") == 3  # none of ours left: no entry


def test_a_pool_with_only_our_tags_loses_them_as_zeros_and_then_stays_quiet(cs):
    cs.pool(POOL)["scaling_group"]["tags"] = [{"key": K3G, "value": "16"}]
    cs.pool(POOL)["kubernetes_config"]["labels"] = []
    first, _ = run(cs, modify_event(cs.cluster_id))
    assert entry(first)["written"] and "written as 0" in entry(first)["reason"]
    assert cs.pool_tags(POOL) == [(K3G, "0")]
    second, _ = run(cs, modify_event(cs.cluster_id))
    assert second.pool_tags == [] and cs.calls("ModifyClusterNodePool") == 1  # a 0 advertises nothing: none of ours


def test_the_emulator_leaves_tags_alone_on_an_empty_list_as_the_stock_sdk_request_shows(cs):
    """Why an empty list cannot remove tags: the SDK's own scaling group model sends ``tags: []`` (and four
    other empty lists) whatever was set, so the API must take an empty list as "unchanged"."""
    from alibabacloud_cs20151215 import models

    client = CsLookup(load_settings(cloud_env(cs)))._client
    stock = models.ModifyClusterNodePoolRequest(scaling_group=models.ModifyClusterNodePoolRequestScalingGroup())
    assert stock.scaling_group.to_map() == {"data_disks": [], "disk_init": [], "instance_patterns": [],
                                            "spot_price_limit": [], "tags": []}
    client.modify_cluster_node_pool(cs.cluster_id, POOL, stock)
    assert cs.pool_tags(POOL) == [("team", "ml-platform")]
    detail = client.describe_cluster_node_pool_detail(cs.cluster_id, POOL).body
    assert [(t.key, t.value) for t in detail.scaling_group.tags] == [("team", "ml-platform")]
    assert detail.auto_scaling.enable is True and cs.rejected == []


@pytest.mark.parametrize("tags, needle", [
    ([("team", "a"), ("team", "b")], "duplicate tag keys"),
    ([("acs:owner", "x")], "reserved prefix"),
    ([("link", "https://example.com")], "reserved prefix or a URL"),
    ([("t%02d" % i, "v") for i in range(21)], "21 tags; at most 20"),
])
def test_the_emulator_refuses_what_the_sdk_model_documents(cs, tags, needle):
    from functions.base.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=needle):
        CsLookup(load_settings(cloud_env(cs)), sleep=lambda s: None).set_nodepool_tags(cs.cluster_id, POOL, tags)
    assert cs.pool_tags(POOL) == [("team", "ml-platform")] and cs.calls("ModifyClusterNodePool") == 1


def test_over_the_20_tag_budget_nothing_is_written_and_doctor_warns(cs):
    cs.pool(POOL)["scaling_group"]["tags"] = [{"key": "t%02d" % i, "value": "v"} for i in range(19)]
    cs.pool(POOL)["kubernetes_config"]["labels"] = [{"key": SEQ, "value": "1g.5gb-3g.20gb"}]
    result, logs = run(cs, modify_event(cs.cluster_id))
    assert result.outcome == "done" and cs.calls("ModifyClusterNodePool") == 0
    mine = entry(result)
    assert not mine["written"] and "21 tags (19 of its own and 2 MIG resources); ESS takes at most 20" in mine["reason"]
    assert any(line["message"] == "pool tags" and line["level"] == "WARNING" for line in logs)
    pools = CsLookup(load_settings(cloud_env(cs))).nodepools(cs.cluster_id)
    (check,) = autoscaler_checks(pools, "auto")
    assert check.status == "warn" and check.area == "autoscaler gpu-mig-a100" and "at most 20" in check.text


def test_a_refusal_from_the_api_is_that_pools_reason_and_the_event_goes_on(cs):
    """ESS limits tag keys to 64 characters; every MIG key is longer. If ACK enforces that limit, the write
    is refused: the pool's entry says so, and the reconcile still decides every node of the cluster."""
    cs.tag_key_limit = 64
    result, logs = run(cs, json.dumps(event_json("fc_timer.json")), ACK_MIG_API_MAX_ATTEMPTS="3")
    assert result.outcome == "done"
    actions = {d.instance_id: d.action for d in result.decisions}
    assert actions == {"i-2ze5gn7pass00x1r7t3": "skip", "i-2ze5gn7ipass0x2w9y5": "skip",
                       "i-2ze8typo0a100x1c4v7": "error"}
    mine = entry(result)
    assert not mine["written"] and "InvalidParameter" in mine["reason"] and "longer than 64" in mine["reason"]
    assert cs.calls("ModifyClusterNodePool") == 1  # a refusal is not retried
    assert cs.pool_tags(POOL) == [("team", "ml-platform")]
    warned = [line for line in logs if line["message"] == "pool tags"]
    assert warned and warned[0]["level"] == "WARNING" and warned[0]["nodepool_id"] == POOL


def test_an_api_that_keeps_failing_does_not_fail_the_event(cs):
    cs.fail_next("ModifyClusterNodePool", 503, "ServiceUnavailable", times=5)
    result, _ = run(cs, modify_event(cs.cluster_id), ACK_MIG_API_MAX_ATTEMPTS="2")
    assert result.outcome != "retry" and cs.calls("ModifyClusterNodePool") == 2
    assert "failed 2 times" in entry(result)["reason"] and not entry(result)["written"]


def test_dry_runs_the_off_setting_and_events_that_do_not_concern_pools_write_nothing(cs):
    dry, _ = run(cs, modify_event(cs.cluster_id), dry_run=True)
    assert entry(dry)["set"] == {K3G: "16"} and "dry run: not written" in entry(dry)["reason"]
    off, _ = run(cs, modify_event(cs.cluster_id), ACK_MIG_AUTOSCALER_TAGS="off")
    assert off.pool_tags == []
    scale_out, _ = run(cs, json.dumps(event_json("ess_scale_out_success.json")), dry_run=True)
    assert scale_out.pool_tags is None and "pool_tags" not in scale_out.to_json()
    assert cs.calls("ModifyClusterNodePool") == 0
    on, _ = run(cs, json.dumps(event_json("fc_timer.json")), ACK_MIG_AUTOSCALER_TAGS=MODE_ON)
    # "on" tags every labelled pool: the passthrough pool cannot do MIG, the typo'd label does not read
    reasons = {e["name"]: e for e in on.pool_tags}
    assert reasons["gpu-mig-a100"]["written"] and not reasons["gpu-passthrough"]["written"]
    assert "passthrough" in reasons["gpu-passthrough"]["reason"] and cs.calls("ModifyClusterNodePool") == 1


def test_the_result_json_carries_pool_tags(cs):
    result, _ = run(cs, modify_event(cs.cluster_id), dry_run=True)
    (shown,) = result.to_json()["pool_tags"]
    assert set(shown) == {"nodepool_id", "name", "in_sync", "set", "remove", "written", "reason"}


def test_the_ram_grant_for_the_write_is_derived_from_the_code_and_limited_to_the_cluster():
    assert "cs:ModifyClusterNodePool" in _code_actions()
    (statement,) = [s for s in _statements() if "cs:ModifyClusterNodePool" in s["Action"]]
    assert statement["Action"] == ["cs:ModifyClusterNodePool"]  # a write: a statement of its own
    assert statement["Resource"] == [_expected_grant("cs:ModifyClusterNodePool")[0]]
    assert statement["Resource"] == [_sub("acs:cs:%s:cluster/${ClusterId}" % REGION_ACCOUNT)]
    assert "Condition" not in statement


def test_the_snapshot_cannot_be_written(inventory_dict, tmp_path):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(copy.deepcopy(inventory_dict)))
    result = run_event(modify_event(inventory_dict["cluster_id"]), load_settings({}), inventory=str(path),
                       logger=JsonLogger("OFF"), dry_run=True)
    assert entry(result)["set"] == {K3G: "16"} and not entry(result)["written"]


def test_an_auto_pools_tags_name_the_planned_new_node_layout(cs):
    """An auto pool (issue 27): the tags follow the planner's new-node layout, written through the real SDK;
    when nothing is left unserved the MIG keys stop advertising (written as 0)."""
    from functions.base.event_result import Trigger
    from functions.base.model import Request
    from functions.pipeline.autoscaler_sync import sync_pool_tags

    pool = cs.pool(POOL)
    labels = pool["kubernetes_config"]["labels"]
    labels[:] = [kv for kv in labels if kv["key"] != SEQ] + [{"key": "ack-mig-hook/layout", "value": "auto"}]
    settings = load_settings(cloud_env(cs))
    lookup = CsLookup(settings)
    request = Request(trigger=Trigger.TIMER, event_type="timer:auto", cluster_id=cs.cluster_id)
    layout = (("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6))
    written = entry(sync_pool_tags(request, lookup, cs.cluster_id, settings, False, JsonLogger("OFF"),
                                   new_nodes={POOL: layout}))
    assert written["written"] and "3g.20gb-2g.10gb-1g.5gb" in written["reason"]
    k2g = K1G.replace("1g.5gb", "2g.10gb")
    assert dict(cs.pool_tags(POOL))[K3G] == "8" and dict(cs.pool_tags(POOL))[k2g] == "8"  # 8 GPUs a node
    cleared = entry(sync_pool_tags(request, lookup, cs.cluster_id, settings, False, JsonLogger("OFF"),
                                   new_nodes={POOL: ()}))
    assert cleared["written"] and sorted(cleared["remove"]) == sorted([K1G, k2g, K3G])
    assert {k: v for k, v in cs.pool_tags(POOL) if k.startswith("k8s.io/")} == {K1G: "0", k2g: "0", K3G: "0"}


def test_a_tag_the_console_adds_between_the_read_and_the_write_is_kept(cs):
    """ModifyClusterNodePool has no precondition: the tags are read again just before the write; a list that
    moved is taken again, so the console's tag stands beside ours (functions/cloud/checked_write.py)."""
    before = copy.deepcopy(cs.pool(POOL)["scaling_group"]["tags"])
    run(cs, modify_event(cs.cluster_id))  # a first run finds where the sync reads: the read just before its write
    actions = [r.action for r in cs.requests]
    reread = actions[:actions.index("ModifyClusterNodePool")].count("DescribeClusterNodePools")
    cs.pool(POOL)["scaling_group"]["tags"] = before
    cs.requests.clear()
    cs.modified.clear()

    def console(action, count):  # the console writes after the sync computed its list, before it writes
        if action == "DescribeClusterNodePools" and count == reread:
            cs.pool(POOL)["scaling_group"]["tags"].append({"key": "cost-center", "value": "cv-42"})
    cs.on_request = console
    result, _ = run(cs, modify_event(cs.cluster_id))
    assert entry(result)["written"]
    assert cs.pool_tags(POOL) == [("team", "ml-platform"), ("cost-center", "cv-42"), (K3G, "16")]
    assert cs.calls("ModifyClusterNodePool") == 1


def test_tags_that_change_under_every_attempt_are_that_pools_plain_reason(cs):
    def busy(action, count):
        if action == "DescribeClusterNodePools" and count >= 2:
            cs.pool(POOL)["scaling_group"]["tags"].append({"key": "busy-%d" % count, "value": "x"})
    cs.on_request = busy
    result, _ = run(cs, modify_event(cs.cluster_id))
    mine = entry(result)
    assert not mine["written"] and cs.calls("ModifyClusterNodePool") == 0
    assert "changed under each of 3 attempts to write them" in mine["reason"] and result.outcome == "done"
