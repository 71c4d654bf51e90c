"""run_event end to end from a cluster snapshot: every sample event, the outcomes, the executor seam."""

import json
import os

import pytest

from functions.pipeline import point_of_change as executor_mod
from functions.cloud.cluster import InventoryLookup
from functions.base.errors import BadInventory
from functions.pipeline.point_of_change import DryRunExecutor, UnavailableExecutor, make_executor
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
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
    ("mns_topic_json_base64_lifecycle_scale_out.json", "done", {"partition": 1}),  # same message, FC MNS wrapper
    ("actiontrail_console_create_nodepool.json", "done", {"partition": 3}),
    ("actiontrail_api_scale_nodepool.json", "done", {"partition": 3}),
    ("actiontrail_api_describe_clusters.json", "skip", {}),
    ("ecs_instance_running.json", "done", {"partition": 1}),
    ("ecs_instance_stopping.json", "skip", {}),
    ("ess_scale_in_success.json", "skip", {}),
    ("fc_timer.json", "done", {"partition": 3, "skip": 2, "error": 1}),
    ("manual.json", "done", {"partition": 1}),
    ("ack_pod_failed_scheduling.json", "skip", {}),  # the snapshot has no auto pool (tests/delivery/test_pod_events.py)
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


MIG_GROUP = "asg-2ze4x7c1mig8a100q9wz"
HOOK = "ash-2ze6hook0mig1a100w3e"
NEW = "i-2zebrandnew0000a1b2"


def _snapshot(**changes):
    inv = json.load(open(INVENTORY))
    for key, value in changes.items():
        if value is None:
            inv.pop(key, None)
        else:
            inv[key] = value
    return InventoryLookup.from_dict(inv)


def _lifecycle_for(*instance_ids, group=MIG_GROUP):
    event = event_json("ess_lifecycle_scale_out.json")
    event["data"]["instanceIds"] = list(instance_ids)
    event["data"]["scalingGroupId"] = group
    return json.dumps(event)


def test_instance_unknown_to_the_cluster_is_decided_from_the_pool_config_once_auto_scaling_lists_it():
    lookup = _snapshot(scaling_instances={MIG_GROUP: [NEW]})
    result = run_event(_lifecycle_for(NEW), settings(), inventory=lookup, executor=Recorder(), logger=quiet())
    (d,) = result.decisions
    assert d.action == "partition" and d.node_name is None and d.nodepool_id == MIG_POOL
    assert d.plan.gpu == "NVIDIA A100-SXM4-40GB"


@pytest.mark.parametrize("members", [{}, {"asg-2ze9gn7pass3h1xk0tb": [NEW]}, None],
                         ids=["listed-nowhere", "listed-in-another-group", "snapshot-without-the-key"])
def test_an_instance_auto_scaling_does_not_list_in_the_pool_group_gets_no_command(members):
    """The confused deputy: an event may put any instance id next to a pool's scaling group. An instance
    that is not a node yet is targeted only when Auto Scaling lists it in that group."""
    for raw in (_lifecycle_for(NEW, "i-2zeb7c1mig0a100x1k4d"),
                json.dumps(dict(event_json("ess_scale_out_success.json"),
                                data={"scalingGroupId": MIG_GROUP, "instanceIds": [NEW, "i-2zeb7c1mig0a100x1k4d"]}))):
        recorder = Recorder()
        result = run_event(raw, settings(), inventory=_snapshot(scaling_instances=members), executor=recorder,
                           logger=quiet())
        assert result.outcome == "done", result.reason
        by_id = {d.instance_id: d for d in result.decisions}
        assert by_id[NEW].action == "skip" and MIG_GROUP in by_id[NEW].reason
        assert "Auto Scaling does not list it" in by_id[NEW].reason
        assert by_id["i-2zeb7c1mig0a100x1k4d"].action == "partition"  # a node of the pool: its own pool
        (_, decisions), = recorder.calls
        assert [d.instance_id for d in decisions if d.action == "partition"] == ["i-2zeb7c1mig0a100x1k4d"]


@pytest.mark.parametrize("hooks, says", [
    ({HOOK: "asg-2ze9gn7pass3h1xk0tb"}, "says it is asg-2ze9gn7pass3h1xk0tb's"),
    ({}, "knows no such hook"),
    (None, "knows no such hook"),
], ids=["hook-of-another-group", "unknown-hook", "snapshot-without-the-key"])
def test_a_lifecycle_hook_auto_scaling_does_not_give_to_the_group_is_never_answered(hooks, says):
    recorder = Recorder()
    result = run_event(_lifecycle_for("i-2zeb7c1mig0a100x3q2h"), settings(), inventory=_snapshot(lifecycle_hooks=hooks),
                       executor=recorder, logger=quiet())
    assert result.outcome == "skip" and HOOK in result.reason and MIG_GROUP in result.reason
    assert says in result.reason and "left unanswered" in result.reason
    assert recorder.calls == []  # the executor, which answers hooks, never saw it


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


@pytest.mark.parametrize("maker", ["scale-out", "lifecycle", "manual"])
def test_a_node_in_no_pool_is_skipped_whatever_pool_the_event_names(maker):
    """A node ACK lists without a pool (a dedicated cluster's master, an old worker) never takes the pool
    the event names: skip, with the reason, and no command reaches it."""
    inv = json.load(open(INVENTORY))
    node = next(n for n in inv["nodes"] if n["instance_id"] == "i-2zeb7c1mig0a100x1k4d")
    node["nodepool_id"] = ""
    ids = ["i-2zeb7c1mig0a100x1k4d", "i-2zeb7c1mig0a100x2m8f"]
    raw = {"scale-out": json.dumps(dict(event_json("ess_scale_out_success.json"),
                                        data={"scalingGroupId": MIG_GROUP, "instanceIds": ids})),
           "lifecycle": _lifecycle_for(*ids),
           "manual": json.dumps({"cluster_id": CLUSTER, "nodepool_id": MIG_POOL, "instance_ids": ids})}[maker]
    recorder = Recorder()
    result = run_event(raw, settings(), inventory=InventoryLookup.from_dict(inv), executor=recorder, logger=quiet())
    by_id = {d.instance_id: d for d in result.decisions}
    assert by_id[ids[0]].action == "skip" and "in no node pool of cluster" in by_id[ids[0]].reason
    assert by_id[ids[0]].nodepool_id is None
    assert by_id[ids[1]].action == "partition"  # its neighbour, in the pool, is not held back
    (_, decisions), = recorder.calls
    assert [d.instance_id for d in decisions if d.action == "partition"] == [ids[1]]


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


# ---- nothing escapes run_event: hostile depth and bugs end as one error line ----

DEEP_OBJECT = '{"a":' * 2000 + "1" + "}" * 2000  # 2,000 levels: past the JSON decoder's recursion limit
DEEP_LIST = "[" * 2000 + "]" * 2000


def _deep_events():
    scale_out = event_json("ess_scale_out_success.json")
    scale_out["data"]["content"] = DEEP_OBJECT
    trail = event_json("actiontrail_api_scale_nodepool.json")
    trail["data"]["requestParameters"] = DEEP_OBJECT
    return {
        "data.content": scale_out,
        "timer.payload": {"triggerTime": "2026-11-29T01:00:00Z", "triggerName": "reconcile", "payload": DEEP_OBJECT},
        "data.requestParameters": trail,
        "payload.instance_ids": {"instance_ids": DEEP_LIST},
    }


@pytest.mark.parametrize("field", sorted(_deep_events()))
def test_a_2000_level_nested_json_string_ends_as_one_error_line(field):
    recorder = Recorder()
    result = run_event(json.dumps(_deep_events()[field]), settings(), inventory=INVENTORY, executor=recorder,
                       logger=quiet())
    assert result.outcome == "error" and field in result.reason and "nested too deeply" in result.reason
    assert "\n" not in result.reason and recorder.calls == []


def test_an_unexpected_exception_anywhere_ends_as_one_error_line_naming_the_stage(capsys):
    class Broken(InventoryLookup):
        def nodes(self, *a, **kw):
            raise RecursionError("maximum recursion depth exceeded\nwith a second line")

    lookup = Broken.from_dict(json.load(open(INVENTORY)))
    result = run_event(event_bytes("fc_timer.json"), settings(), inventory=lookup, executor=Recorder(),
                       logger=JsonLogger("INFO"))
    assert result.outcome == "error" and result.reason.startswith("internal error while deciding: RecursionError")
    assert "\n" not in result.reason and "second line" not in result.reason
    printed = capsys.readouterr().out
    assert "Traceback" not in printed
    last = json.loads(printed.splitlines()[-1])
    assert last["message"] == "event error" and last["level"] == "ERROR"

    class BrokenExecutor:
        def execute(self, request, decisions):
            raise KeyError("gpus")

    result = run_event(event_bytes("fc_timer.json"), settings(), inventory=INVENTORY, executor=BrokenExecutor(),
                       logger=quiet())
    assert result.outcome == "error" and result.reason.startswith("internal error while running the nodes: KeyError")


def test_the_handler_and_the_cli_return_the_error_instead_of_a_traceback(tmp_path, monkeypatch):
    from functions.handler import handler

    raw = json.dumps(_deep_events()["timer.payload"])
    monkeypatch.setenv("ACK_MIG_CLUSTER_ID", CLUSTER)
    monkeypatch.setenv("ACK_MIG_LOG_LEVEL", "ERROR")
    out = json.loads(handler(raw.encode(), None))
    assert out["outcome"] == "error" and "nested too deeply" in out["reason"]
    import subprocess
    import sys

    from tests.function.conftest import ROOT

    event = tmp_path / "deep.json"
    event.write_text(json.dumps(_deep_events()["data.content"]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))}
    proc = subprocess.run([sys.executable, "-m", "functions.commands.main", "invoke", "--event", str(event), "--inventory",
                           INVENTORY], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("ack-mig-hook: error: event field data.content") and "nested too deeply" in line


# ---- one bad target fails alone ----

def test_an_instance_id_that_fails_validation_gets_its_own_error_and_the_rest_goes_on():
    recorder = Recorder()
    payload = {"nodepool_id": MIG_POOL, "instance_ids": ["i-2zeb7c1mig0a100x1k4d", "$(reboot)", 7,
                                                         "i-2zeb7c1mig0a100x2m8f"]}
    result = run_event(json.dumps(payload), settings(), inventory=INVENTORY, executor=recorder, logger=quiet())
    assert result.outcome == "done", result.reason
    actions = [(d.instance_id, d.action) for d in result.decisions]
    assert actions == [("i-2zeb7c1mig0a100x1k4d", "partition"), ("i-2zeb7c1mig0a100x2m8f", "partition"),
                       ("'$(reboot)'", "error"), ("'7'", "error")]
    assert all("not an ECS instance id" in d.reason for d in result.decisions if d.action == "error")
    (_, decisions), = recorder.calls
    assert [d.instance_id for d in decisions if d.action == "partition"] == ["i-2zeb7c1mig0a100x1k4d",
                                                                            "i-2zeb7c1mig0a100x2m8f"]
    # Only bad ids, with or without a pool: their errors, never "every node of the pool / labelled pool".
    for payload in ({"instance_ids": ["not-an-id"]}, {"nodepool_id": MIG_POOL, "instance_ids": ["not-an-id"]}):
        alone = run_event(json.dumps(payload), settings(), inventory=INVENTORY, executor=Recorder(), logger=quiet())
        assert alone.outcome == "done" and [(d.instance_id, d.action) for d in alone.decisions] == [
            ("'not-an-id'", "error")]
    # An instance outside the cluster next to a bad id: a skip for the one, the error for the other.
    mixed = run_event(json.dumps({"instance_ids": ["i-notinthecluster1", "x"]}), settings(), inventory=INVENTORY,
                      executor=Recorder(), logger=quiet())
    assert [(d.instance_id, d.action) for d in mixed.decisions] == [("i-notinthecluster1", "skip"), ("'x'", "error")]


@pytest.mark.parametrize("field, value, what", [
    ("node_name", "Bad Name; reboot", "node name"),
    ("node_name", "cn-beijing.192.168.12.47\n", "node name"),
    ("instance_id", "i-2zeb7c1mig0a100x2m8f;id", "instance id"),
])
def test_a_node_the_api_lists_with_a_bad_name_or_id_fails_alone(field, value, what):
    """The node command checks every name and id it carries and refuses the whole batch for one bad one;
    so each target is checked alone first, and only that one gets an error."""
    inv = json.load(open(INVENTORY))
    (node,) = [n for n in inv["nodes"] if n["instance_id"] == "i-2zeb7c1mig0a100x2m8f"]
    node[field] = value
    recorder = Recorder()
    result = run_event(event_bytes("fc_timer.json"), settings(), inventory=InventoryLookup.from_dict(inv),
                       executor=recorder, logger=quiet())
    assert result.outcome == "done", result.reason
    bad = [d for d in result.decisions if d.action == "error" and what in d.reason]
    assert len(bad) == 1 and "\n" not in bad[0].reason and "the others go on" in bad[0].reason
    (_, decisions), = recorder.calls
    assert "i-2zeb7c1mig0a100x1k4d" in [d.instance_id for d in decisions if d.action == "partition"]
