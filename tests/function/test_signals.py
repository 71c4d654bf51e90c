"""Signals that alert (docs/operations.md, "Signals"): failures logged at WARNING or ERROR, every node line with its
node, pool, code and duration, and the saved searches and alert rules the stack creates in Simple Log Service,
checked against the published ROS schema and the index."""

import io
import json
import os
import re

import pytest
import yaml

from functions.base.logs import JsonLogger, decision_level, node_code, node_level
from functions.base.settings import load_settings
from functions.pipeline.event import run_event
from tests.function.conftest import INVENTORY, ROOT, event_bytes
from tests.support.module_time import module_time

CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
FAILING = "i-2zeb7c1mig0a100x1k4d"  # a node of the labelled pool np8d3c... (examples/inventory.json)


class FailingOne:
    """Delivery's shape of results: the first node fails on the node (gpu-busy), the other partitions; a decision
    that is an error fails without being run (as functions/delivery/node_executor.py ends it)."""

    def execute(self, request, decisions):
        out = []
        for d in decisions:
            if d.action == "error":
                out.append({"instance_id": d.instance_id, "node_name": d.node_name or "", "outcome": "failed",
                            "reason": d.reason})
            elif d.instance_id == FAILING:
                out.append({"instance_id": d.instance_id, "node_name": d.node_name, "outcome": "failed",
                            "code": "gpu-busy", "reason": "gpu-busy: GPU 0 is used by pid 7", "duration_ms": 2500.0})
            elif d.action == "partition":
                out.append({"instance_id": d.instance_id, "node_name": d.node_name, "outcome": "partitioned",
                            "reason": "8 changes", "duration_ms": 1800.0})
        return out


def timer_lines(executor=None):
    out = io.StringIO()
    result = run_event(event_bytes("fc_timer.json"), load_settings({"ACK_MIG_CLUSTER_ID": CLUSTER}),
                       inventory=INVENTORY, executor=executor or FailingOne(),
                       logger=JsonLogger("INFO", stream=out, request_id="r-1"))
    return result, [json.loads(line) for line in out.getvalue().splitlines()]


def test_failures_are_logged_at_warning_or_error_and_successes_at_info():
    result, lines = timer_lines()
    decisions = [line for line in lines if line["message"] == "decision"]
    nodes = {line["instance_id"]: line for line in lines if line["message"] == "node result"}
    bad_label = [d for d in decisions if d["action"] == "error"]
    assert bad_label and all(d["level"] == "WARNING" for d in bad_label)  # '1g.5gb,2g.10gb' does not parse
    assert all(d["level"] == "INFO" for d in decisions if d["action"] != "error")
    assert nodes[FAILING]["level"] == "ERROR" and nodes[FAILING]["code"] == "gpu-busy"
    for d in bad_label:  # its node's line is the ERROR an alert counts: once per node
        assert nodes[d["instance_id"]]["level"] == "ERROR" and nodes[d["instance_id"]]["outcome"] == "failed"
    assert all(n["level"] == "INFO" for n in nodes.values() if n["outcome"] == "partitioned")
    (summary,) = [line for line in lines if line["message"] == "event done"]
    failed = sum(n["outcome"] == "failed" for n in nodes.values())
    assert summary["level"] == "WARNING" and summary["nodes_failed"] == failed >= 2  # done, but not for every node
    assert lines[0]["message"] == "event start" and lines[0]["event_type"].startswith("timer:")


def test_every_node_line_carries_node_pool_outcome_code_and_duration():
    result, lines = timer_lines()
    nodes = [line for line in lines if line["message"] == "node result"]
    assert len(nodes) == len(result.nodes) >= 3
    pools = {d.instance_id: d.nodepool_id for d in result.decisions}
    for line in nodes:
        assert {"instance_id", "nodepool_id", "outcome", "code", "duration_ms", "reason"} <= set(line), line
        assert line["nodepool_id"] == pools[line["instance_id"]]
        assert line.get("node_name") == next(n.get("node_name") for n in result.nodes
                                             if n["instance_id"] == line["instance_id"]) or None
    by_id = {line["instance_id"]: line for line in nodes}
    assert by_id[FAILING]["duration_ms"] == 2500.0 and by_id[FAILING]["node_name"]
    never_run = [line for line in nodes if line["code"] != "gpu-busy" and line["outcome"] == "failed"]
    assert never_run and all(line["duration_ms"] == 0 for line in never_run)  # an error decision is not run


@pytest.mark.parametrize("outcome, level", [
    ("failed", "ERROR"), ("drain-timeout", "ERROR"), ("drain-refused", "ERROR"), ("reboot-required", "WARNING"),
    ("conflict", "WARNING"), ("partitioned", "INFO"), ("unchanged", "INFO"), ("deferred", "INFO"), ("gone", "INFO"),
    ("destroy-required", "INFO"), ("dry-run", "INFO"), ("skipped", "INFO")])
def test_the_level_of_each_node_outcome(outcome, level):
    assert node_level(outcome) == level


def test_decision_levels_and_codes():
    assert [decision_level(a) for a in ("error", "partition", "skip", "defer")] == ["WARNING", "INFO", "INFO", "INFO"]
    assert node_code({"outcome": "failed", "code": "agent-not-ready", "reason": "x"}) == "agent-not-ready"
    assert node_code({"outcome": "failed", "reason": "bad-input: 9g.99gb is not a profile"}) == "bad-input"
    # a failed node whose reason is a sentence, not "code: text" (an error decision): the outcome stands for it
    assert node_code({"outcome": "failed", "reason": "node pool np-1 carries both labels: keep one"}) == "failed"
    assert node_code({"outcome": "drain-timeout", "reason": "drain-timeout after 900s"}) == "drain-timeout"


def test_the_delivery_executor_times_each_node_from_the_transports_start(monkeypatch):
    """The transport yields each node's result as it comes: the time to it is the node's ``duration_ms``; a node
    it never ran (skipped) carries none (its line says 0)."""
    from functions.base.model import Decision, PartitionLabel
    from functions.delivery import node_executor
    from functions.delivery.outcome import NodeResult

    class Transport:
        name = "test"

        def run(self, targets):
            for t in targets:
                yield NodeResult(t.instance_id, "test", 0, {"outcome": "success", "changes": 3})

    ticks = iter([100.0, 101.25, 103.5])
    monkeypatch.setattr(node_executor, "time", module_time(monotonic=lambda: next(ticks)))  # its clock alone
    decisions = [Decision(instance_id="i-a", node_name="n-a", action="partition", reason="r",
                          partition=PartitionLabel(kind="size", value="1g.5gb")),
                 Decision(instance_id="i-b", node_name="n-b", action="partition", reason="r",
                          partition=PartitionLabel(kind="size", value="1g.5gb")),
                 Decision(instance_id="i-c", node_name="n-c", action="skip", reason="no label")]
    out = {n["instance_id"]: n for n in node_executor.DeliveryExecutor(Transport()).execute(None, decisions)}
    assert out["i-a"]["duration_ms"] == 1250.0 and out["i-b"]["duration_ms"] == 3500.0
    assert "duration_ms" not in out["i-c"] and out["i-c"]["outcome"] == "skipped"


# ---- the stack's saved searches and alert rules ----

def template():
    with open(os.path.join(ROOT, "template.yml")) as handle:
        return yaml.safe_load(handle)


def of_type(doc, kind):
    return {k: r for k, r in doc["Resources"].items() if r["Type"] == kind}


def _text(value):
    """A template string: plain, or the string of a one-argument Fn::Sub."""
    return value["Fn::Sub"] if isinstance(value, dict) else value


def test_the_stack_creates_the_saved_searches_and_alerts_an_on_call_engineer_needs():
    doc = template()
    searches, alerts = of_type(doc, "ALIYUN::SLS::Savedsearch"), of_type(doc, "ALIYUN::SLS::Alert")
    assert set(alerts) == {"FailedNodesAlert", "FailedEventsAlert", "StoppedRolloutsAlert", "NoRunAlert"}
    assert {"FailedNodesSearch", "FailedEventsSearch", "StoppedRolloutsSearch", "RunsSearch"} <= set(searches)
    assert doc["Conditions"]["CreateLogAlerts"] == {"Fn::Equals": ["true", {"Ref": "LogAlerts"}]}
    assert doc["Parameters"]["LogAlerts"]["Default"] == "true"
    function = doc["Resources"]["Function"]["Properties"]["LogConfig"]
    cluster = "c" + "0" * 32  # the longest name a stack gives: the cluster id is 33 characters
    for name, r in list(searches.items()) + list(alerts.items()):
        assert r["Condition"] == "CreateLogAlerts", name
        assert r["Properties"]["Project"] == function["Project"], name
        detail = r["Properties"]["Detail"]
        own = _text(detail.get("SavedsearchName") or detail.get("Name")).replace("${ClusterId}", cluster)
        assert re.match(r"^[a-z0-9][a-z0-9_-]{2,62}\Z", own), (name, own)  # SLS names: 3..63, lower case
    for name, r in alerts.items():
        config = r["Properties"]["Detail"]["Configuration"]
        assert config["Version"] == "2.0" and config["PolicyConfiguration"]["ActionPolicyId"] == {
            "Ref": "AlertActionPolicyId"}
        (query,) = config["QueryList"]
        assert (query["Project"], query["Store"]) == (function["Project"], function["Logstore"])
        assert '"${ClusterId}"' in _text(query["Query"]), name  # this cluster's lines only: a logstore is shared
    no_run = alerts["NoRunAlert"]["Properties"]["Detail"]["Configuration"]
    assert no_run["QueryList"][0]["Start"] == {"Fn::Sub": "-${NoRunAlertMinutes}m"}
    assert "timer:reconcile" in _text(no_run["QueryList"][0]["Query"])
    assert no_run["SeverityConfigurations"][0]["EvalCondition"]["Condition"] == "lines < 1"
    assert doc["Parameters"]["NoRunAlertMinutes"]["Default"] == 60  # twice the reconcile timer's default
    assert doc["Parameters"]["ReconcileSchedule"]["Default"] == "@every 30m"
    # the key the alert, status and doctor know the reconcile timer by: "timer:" + its trigger's name (intake)
    from functions.commands.doctor import RECONCILE_KEY

    assert RECONCILE_KEY == "timer:" + doc["Resources"]["ReconcileTimer"]["Properties"]["TriggerName"]


def test_every_field_the_searches_and_alerts_ask_for_is_indexed_and_written():
    doc = template()
    (message,) = [k for k in doc["Resources"]["FunctionLogIndex"]["Properties"]["KeyIndices"]
                  if k["Name"] == "message"]
    indexed = {k["Name"] for k in message["JsonKeyIndices"]}
    queries = [_text(r["Properties"]["Detail"]["SearchQuery"])
               for r in of_type(doc, "ALIYUN::SLS::Savedsearch").values()]
    queries += [_text(r["Properties"]["Detail"]["Configuration"]["QueryList"][0]["Query"])
                for r in of_type(doc, "ALIYUN::SLS::Alert").values()]
    used = {m[len("message."):] for q in queries for m in re.findall(r"\bmessage\.[a-z_]+", q)}
    assert used and used <= indexed, used - indexed
    # and the lines carry them: a timer run's lines and the "rollout stopped" line name these fields
    _, lines = timer_lines()
    written = {key for line in lines for key in line} | {"logger", "wave"}  # rollout lines: tests/rollout
    assert used <= written, used - written


def test_the_handler_records_each_run():
    """The FC entry point asks run_event for the run record (functions/kube/last_run.py); invoke and status do not."""
    import inspect

    from functions import handler

    assert "record=True" in inspect.getsource(handler.handler)
    assert inspect.signature(run_event).parameters["record"].default is False
