"""run_event end to end from a cluster snapshot: every sample event, the outcomes, the executor seam."""

import json
import os

import pytest

from functions import executor as executor_mod
from functions.cluster import InventoryLookup
from functions.errors import BadInventory
from functions.executor import DryRunExecutor, UnavailableExecutor, make_executor
from functions.logs import JsonLogger
from functions.pipeline import run_event
from functions.settings import load_settings
from tests.function.conftest import EVENTS, INVENTORY, event_bytes, event_json

CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
MIG_POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"


class Recorder:
    """A stand-in executor that records what it was asked (the real one is delivery's)."""

    def __init__(self):
        self.calls = []

    def execute(self, request, decisions):
        self.calls.append((request, list(decisions)))
        return [{"instance_id": d.instance_id, "outcome": "partitioned", "reason": "ok", "gpus": 8}
                for d in decisions if d.action == "partition"]


def settings(**env):
    base = {"ACK_MIG_CLUSTER_ID": CLUSTER}
    base.update(env)
    return load_settings(base)


def quiet():
    return JsonLogger("OFF")


def run(name, **kw):
    kw.setdefault("logger", quiet())
    return run_event(event_bytes(name), kw.pop("settings", settings()), inventory=INVENTORY, **kw)


@pytest.mark.parametrize("name, outcome, actions", [
    ("ess_scale_out_success.json", "done", {"partition": 2}),
    ("ess_scale_out_partial_success.json", "done", {"partition": 1}),
    ("ess_lifecycle_scale_out.json", "done", {"partition": 1}),
    ("ess_lifecycle_test.json", "skip", {}),
    ("cloudmonitor_scale_out_success.json", "done", {"partition": 2}),
    ("mns_lifecycle_scale_out.json", "done", {"partition": 1}),
    ("actiontrail_console_create_nodepool.json", "done", {"partition": 3}),
    ("actiontrail_api_scale_nodepool.json", "done", {"partition": 3}),
    ("actiontrail_api_describe_clusters.json", "skip", {}),
    ("ecs_instance_running.json", "done", {"partition": 1}),
    ("ecs_instance_stopping.json", "skip", {}),
    ("ess_scale_in_success.json", "skip", {}),
    ("fc_timer.json", "done", {"partition": 3, "skip": 2, "error": 1}),
    ("manual.json", "done", {"partition": 1}),
])
def test_every_sample_event(name, outcome, actions):
    recorder = Recorder()
    result = run(name, executor=recorder)
    assert result.outcome == outcome, result.reason
    counts = {}
    for d in result.decisions:
        counts[d.action] = counts.get(d.action, 0) + 1
    assert counts == actions
    if outcome == "done":
        assert result.cluster_id == CLUSTER
        partitions = [d for d in result.decisions if d.action == "partition"]
        if result.dry_run:
            assert all(n["outcome"] == "dry-run" for n in result.nodes) and not recorder.calls
        else:
            assert len(recorder.calls) == 1 and len(result.nodes) == len(partitions)
    else:
        assert result.nodes is None and not recorder.calls


def test_sample_events_cover_the_directory():
    tested = {p[0] for p in test_every_sample_event.pytestmark[0].args[1]}
    assert tested == set(os.listdir(EVENTS))


def test_timer_decisions_explain_every_pool():
    result = run("fc_timer.json", executor=Recorder())
    by_id = {d.instance_id: d for d in result.decisions}
    assert "passthrough" in by_id["i-2ze5gn7pass00x1r7t3"].reason
    assert "A10" in by_id["i-2ze5gn7ipass0x2w9y5"].reason
    assert "commas" in by_id["i-2ze8typo0a100x1c4v7"].reason
    assert "i-2ze3cpug7web0x1b6n0" not in by_id  # a pool without the label is not even listed
    new = by_id["i-2zeb7c1mig0a100x3q2h"]
    assert new.node_name is None and new.action == "partition"


def test_json_shape():
    out = run("ess_scale_out_success.json", executor=Recorder()).to_json()
    assert out["trigger"] == "scale-out" and out["outcome"] == "done"
    d = out["decisions"][0]
    assert {"instance_id", "node_name", "nodepool_id", "action", "reason", "plan", "ip_address",
            "instance_type", "partition"} <= set(d)
    assert d["plan"]["gpu"] == "NVIDIA A100-SXM4-40GB"
    assert d["plan"]["partition"] == {"kind": "sequence", "value": "3g.20gb-3g.20gb"}
    assert d["plan"]["sequence"] == "3g.20gb-3g.20gb"
    assert [i["start"] for i in d["plan"]["instances"]] == [0, 4]
    assert d["ip_address"] == "192.168.12.31"
    assert out["nodes"][0]["outcome"] == "partitioned"
    json.dumps(out)


def test_dry_run_from_any_source_swaps_the_executor():
    for kw in ({"dry_run": True}, {"settings": settings(ACK_MIG_DRY_RUN="true")}):
        recorder = Recorder()
        result = run("ess_scale_out_success.json", executor=recorder, **kw)
        assert result.dry_run and not recorder.calls
        assert [n["outcome"] for n in result.nodes] == ["dry-run", "dry-run"]


def test_instance_unknown_to_the_cluster_is_decided_from_the_pool_config():
    event = event_json("ess_lifecycle_scale_out.json")
    event["data"]["instanceIds"] = ["i-2zebrandnew0000a1b2"]
    result = run_event(json.dumps(event).encode(), settings(), inventory=INVENTORY, executor=Recorder(),
                       logger=quiet())
    (d,) = result.decisions
    assert d.action == "partition" and d.node_name is None and d.nodepool_id == MIG_POOL
    assert d.plan.gpu == "NVIDIA A100-SXM4-40GB"


def test_lifecycle_hooks_that_are_not_ours_are_never_answered():
    """The EventBridge rule sees every scaling group of the account: a hook of an unlabelled pool, or of a
    group that is no pool of this cluster, is someone else's; answering it would release their instances."""
    inv = json.load(open(INVENTORY))
    for group, why in (("asg-2ze1cpu6g7b0n3m5ka", "not for a node pool with a partition label"),
                       ("asg-someone-elses-group", "is not a node pool of cluster")):
        recorder = Recorder()
        event = event_json("ess_lifecycle_scale_out.json")
        event["data"]["scalingGroupId"] = group
        event["data"]["instanceIds"] = ["i-otherteam0001"]
        result = run_event(json.dumps(event), settings(), inventory=InventoryLookup.from_dict(inv),
                           executor=recorder, logger=quiet())
        assert result.outcome == "skip" and why in result.reason and "left for its owner" in result.reason
        assert recorder.calls == []  # the executor, which answers hooks, never saw it


def test_a_manual_payload_cannot_target_an_instance_outside_the_cluster():
    """Naming a pool next to an instance id must not make any instance of the account a target."""
    recorder = Recorder()
    payload = {"nodepool_id": MIG_POOL, "instance_ids": ["i-someoneelsesbox1", "i-2zeb7c1mig0a100x1k4d"]}
    result = run_event(json.dumps(payload), settings(), inventory=INVENTORY, executor=recorder, logger=quiet())
    actions = {d.instance_id: d.action for d in result.decisions}
    assert actions["i-someoneelsesbox1"] == "skip" and actions["i-2zeb7c1mig0a100x1k4d"] == "partition"
    (_, decisions), = recorder.calls
    assert [d.instance_id for d in decisions if d.action == "partition"] == ["i-2zeb7c1mig0a100x1k4d"]


def test_scale_out_of_an_unlabelled_pool_ends_without_listing_nodes():
    class Counting(InventoryLookup):
        node_calls = 0

        def nodes(self, *a, **kw):
            Counting.node_calls += 1
            return super().nodes(*a, **kw)

    inv = json.load(open(INVENTORY))
    lookup = Counting.from_dict(inv)
    event = event_json("ess_scale_out_success.json")
    event["data"] = {"scalingGroupId": "asg-2ze1cpu6g7b0n3m5ka"}
    result = run_event(json.dumps(event), settings(), inventory=lookup, executor=Recorder(), logger=quiet())
    assert result.outcome == "skip" and "no partition label" in result.reason
    assert Counting.node_calls == 0


def test_scaling_group_of_another_cluster_is_skipped():
    event = event_json("ess_scale_out_success.json")
    event["data"] = {"scalingGroupId": "asg-someoneelse"}
    result = run_event(json.dumps(event), settings(), inventory=INVENTORY, logger=quiet())
    assert result.outcome == "skip" and "asg-someoneelse" in result.reason


def test_cluster_id_sources_and_mismatch():
    no_cluster = load_settings({})
    # From the snapshot when neither the event nor configuration names one.
    assert run_event(event_bytes("fc_timer.json"), no_cluster, inventory=INVENTORY, executor=Recorder(),
                     logger=quiet()).cluster_id == CLUSTER
    other = run_event(json.dumps({"cluster_id": "c-other"}), no_cluster, inventory=INVENTORY, logger=quiet())
    assert other.outcome == "error" and "c-other" in other.reason
    # With the function's own cluster configured, an event about another cluster (ActionTrail sees them
    # all) is not ours: a skip, before any API call.
    recorder = Recorder()
    event = event_json("actiontrail_console_create_nodepool.json")
    event["data"]["requestParameters"]["ClusterId"] = "c-someoneelse"
    mine = load_settings({"ACK_MIG_CLUSTER_ID": CLUSTER})
    skipped = run_event(json.dumps(event), mine, inventory=INVENTORY, executor=recorder, logger=quiet())
    assert skipped.outcome == "skip" and "c-someoneelse" in skipped.reason and CLUSTER in skipped.reason
    assert recorder.calls == []


def test_missing_cluster_and_credentials_are_configuration_errors():
    result = run_event(event_bytes("fc_timer.json"), load_settings({"ACK_MIG_REGION": "cn-beijing"}),
                       logger=quiet())
    assert result.outcome == "error" and "ACK_MIG_CLUSTER_ID" not in result.reason
    assert "credentials" in result.reason  # asked for the API: no role, no keys
    result = run_event(event_bytes("fc_timer.json"), load_settings({}), logger=quiet())
    assert result.outcome == "error" and "region" in result.reason


def test_bad_inventory_is_raised_for_the_caller(tmp_path):
    bad = tmp_path / "inv.json"
    bad.write_text(json.dumps({"cluster_id": "c-1", "nodes": [{"node_name": "x"}]}))
    with pytest.raises(BadInventory, match=r"nodes\[0\] has no instance_id"):
        run_event(event_bytes("fc_timer.json"), settings(), inventory=str(bad), logger=quiet())


def test_make_executor_without_delivery(monkeypatch):
    assert isinstance(make_executor(settings(), True), DryRunExecutor)
    monkeypatch.setattr(executor_mod, "DELIVERY_MODULE", "functions.delivery.no_such_module_xyz")
    chosen = make_executor(settings(), False)
    assert isinstance(chosen, UnavailableExecutor)
    result = run("ess_scale_out_success.json", executor=chosen)
    assert [n["outcome"] for n in result.nodes] == ["failed", "failed"]
    assert all(n["reason"] == "delivery not available" for n in result.nodes)


def test_one_log_line_per_decision_and_a_summary(capsys):
    result = run_event(event_bytes("fc_timer.json"), settings(), inventory=INVENTORY, executor=Recorder(),
                       logger=JsonLogger("INFO", request_id="req-1"))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    decisions = [l for l in lines if l["message"] == "decision"]
    assert len(decisions) == len(result.decisions)
    assert all(l["request_id"] == "req-1" and l["trigger"] == "timer" and l["instance_id"] for l in decisions)
    summary = lines[-1]
    assert summary["message"] == "event done" and summary["level"] == "INFO" and "duration_ms" in summary
    assert all({"time", "level", "message"} <= set(l) for l in lines)


def test_instance_outside_the_cluster_is_skipped_after_one_lookup():
    class Counting(InventoryLookup):
        pool_calls = 0

        def nodepools(self, cluster_id):
            Counting.pool_calls += 1
            return super().nodepools(cluster_id)

    event = event_json("ecs_instance_running.json")
    event["data"]["resourceId"] = "i-2zenotinthecluster01"
    lookup = Counting.from_dict(json.load(open(INVENTORY)))
    result = run_event(json.dumps(event), settings(), inventory=lookup, executor=Recorder(), logger=quiet())
    assert result.outcome == "skip" and "not a node of cluster" in result.reason
    assert Counting.pool_calls == 0
