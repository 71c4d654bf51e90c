"""An event costs about its size, never far more: at most MAX_INSTANCE_IDS instance ids (Auto Scaling's own
limit on one scaling activity, functions/pipeline/envelope.py cites it), refused whole in one line before any API
call; every string field we keep at most MAX_TEXT characters (they enter every log line and the result);
duplicates removed in one pass; the result at most MAX_RESULT_BYTES, repeated reasons grouped."""

import json

import pytest

from functions.pipeline.envelope import MAX_INSTANCE_IDS, MAX_TEXT
from functions.base.errors import BadEvent, SkipEvent
from functions.pipeline.intake import parse_event
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from tests.function.conftest import cloud_env, event_json


def ids(n, start=0):
    return ["i-2zebound%08d" % i for i in range(start, start + n)]


def scale_out(instance_ids):
    event = event_json("ess_scale_out_success.json")
    event["data"]["instanceIds"] = instance_ids
    return event


@pytest.mark.parametrize("form", ["list", "comma", "json-text"])
def test_one_scaling_activity_s_worth_of_ids_is_accepted_and_one_more_is_refused_whole(form):
    def encode(values):
        return values if form == "list" else ",".join(values) if form == "comma" else json.dumps(values)

    accepted = parse_event(json.dumps(scale_out(encode(ids(MAX_INSTANCE_IDS)))))
    assert len(accepted.instance_ids) == MAX_INSTANCE_IDS
    with pytest.raises(BadEvent) as info:
        parse_event(json.dumps(scale_out(encode(ids(MAX_INSTANCE_IDS + 1)))))
    reason = info.value.reason
    assert reason.startswith("event field data.instanceIds: %d instance ids; an event names at most %d"
                             % (MAX_INSTANCE_IDS + 1, MAX_INSTANCE_IDS)) and "\n" not in reason
    assert len(reason) < 300  # the ids themselves are not quoted


def test_an_event_over_the_limit_makes_no_api_call(emulator, capsys):
    """13,000 ids once meant 13,000 decisions and hundreds of signed calls: now one line. 8,000 ids fit the
    event size limit and are refused by their count; 13,000 are refused by the size, before any parsing."""
    settings = load_settings(cloud_env(emulator))
    result = run_event(json.dumps(scale_out(ids(8000))), settings, logger=JsonLogger("INFO", request_id="r"))
    assert result.outcome == "error" and "8000 instance ids" in result.reason
    result = run_event(json.dumps(scale_out(ids(13000))), settings, logger=JsonLogger("INFO", request_id="r"))
    assert result.outcome == "error" and "events are at most 262144 bytes" in result.reason
    assert emulator.requests == [] and emulator.ess.requests == []
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(len(line) < 1000 for line in lines)


def test_duplicates_are_removed_keeping_the_first_occurrence():
    named = ids(3) + ids(3)[::-1] + [" %s " % ids(1)[0], "not-an-id", "not-an-id"]
    request = parse_event(json.dumps({"instance_ids": named}))
    assert request.instance_ids == ids(3)
    assert [t.target for t in request.invalid_targets] == ["'not-an-id'"]


def _cloudevent(field, value):
    event = event_json("ess_scale_out_success.json")
    event[field] = value
    return event


def _timer(field, value):
    event = event_json("fc_timer.json")
    event[field] = value
    return event


def _mns(field, value):
    event = event_json("mns_lifecycle_scale_out.json")
    (event["content"] if field == "requestId" else event)[field] = value
    return event


def _trail(field, value):
    event = event_json("actiontrail_api_scale_nodepool.json")
    event["data"][field] = value
    return event


def _ecs(field, value):
    event = event_json("ecs_instance_running.json")
    event["data"][field] = value
    return event


def _lifecycle(field, value):
    event = event_json("ess_lifecycle_scale_out.json")
    event["data"][field] = value
    return event


STRING_FIELDS = [  # (event builder, field, where the error names it)
    (_cloudevent, "id", "envelope.id"), (_cloudevent, "source", "envelope.source"),
    (_cloudevent, "subject", "envelope.subject"), (_cloudevent, "aliyunregionid", "envelope.aliyunregionid"),
    (_cloudevent, "aliyunaccountid", "envelope.aliyunaccountid"), (_cloudevent, "time", "envelope.time"),
    (_timer, "triggerName", "timer.triggerName"), (_timer, "triggerTime", "timer.triggerTime"),
    (_mns, "requestId", "content.requestId"), (_mns, "regionId", "regionId"),
    (_trail, "errorCode", "data.errorCode"), (_trail, "acsRegion", "data.acsRegion"),
    (_ecs, "state", "data.state"), (_lifecycle, "lifecycleActionToken", "data.lifecycleActionToken"),
]


@pytest.mark.parametrize("build, field, where", STRING_FIELDS, ids=[w for _, _, w in STRING_FIELDS])
def test_a_string_field_longer_than_the_cap_is_refused_naming_it(build, field, where):
    longest = "a" * MAX_TEXT
    try:
        parse_event(json.dumps(build(field, longest)))  # at the cap: accepted
    except SkipEvent:
        pass  # an ECS state or an operation's error code that is not ours to act on: skipped, not refused
    with pytest.raises(BadEvent) as info:
        parse_event(json.dumps(build(field, longest + "a")))
    assert ("event field %s: " % where) in info.value.reason and str(MAX_TEXT) in info.value.reason
    assert str(MAX_TEXT + 1) in info.value.reason and "a" * 50 not in info.value.reason


@pytest.mark.parametrize("event", [_timer("triggerName", "t" * 250_000), _cloudevent("id", "x" * 250_000)],
                         ids=["triggerName", "cloudevent-id"])
def test_a_250_kb_trigger_name_or_event_id_never_reaches_the_log_lines(event, capsys):
    settings = load_settings({"ACK_MIG_CLUSTER_ID": "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"})
    result = run_event(json.dumps(event), settings, inventory="examples/inventory.json",
                       logger=JsonLogger("DEBUG", request_id="r"))
    assert result.outcome == "error" and len(json.dumps(result.to_json())) < 2000
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(len(line) < 2000 for line in lines)


# ---- the result's size ----

CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
MIG_POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"
GPU = {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-5a1f0c9e-3b7d-4e2a-9c8f-0d1e2f3a4b5c",
       "changes": 5, "instances": [{"profile": "3g.20gb", "start": s, "size": 4} for s in (0, 4)]}


class BigNodes:
    """An executor whose every node answers in full: 8 GPUs each, as node_bootstrap apply reports them."""

    def execute(self, request, decisions):
        return [{"instance_id": d.instance_id, "node_name": d.node_name, "outcome": "partitioned",
                 "reason": "5 changes", "gpus": [dict(GPU, index=i) for i in range(8)], "changes": 40,
                 "sequence": "3g.20gb-3g.20gb", "transport": "ssh"} for d in decisions if d.action != "skip"]


def _pool_of(n):
    from tests.function.conftest import INVENTORY

    with open(INVENTORY) as fh:
        inventory = json.load(fh)
    model = next(x for x in inventory["nodes"] if x["nodepool_id"] == MIG_POOL)
    inventory["nodes"] = [dict(model, instance_id=i, node_name="cn-beijing.10.%d.%d" % (k // 250, k % 250),
                               ip_address=["10.%d.%d.1" % (k // 250, k % 250)]) for k, i in enumerate(ids(n))]
    return inventory


def _total_ids(doc):
    groups = doc.get("decision_groups", []) + doc.get("node_groups", [])
    return sum(g["count"] for g in groups), sum(len(g["instance_ids"]) for g in groups)


def test_a_pool_of_two_thousand_nodes_gives_a_grouped_result_within_the_bound():
    from functions.cloud.cluster import InventoryLookup
    from functions.base.event_result import MAX_RESULT_BYTES

    lookup = InventoryLookup.from_dict(_pool_of(2000))
    settings = load_settings({"ACK_MIG_CLUSTER_ID": CLUSTER, "ACK_MIG_MAX_UNAVAILABLE": "100%"})
    result = run_event(json.dumps({"cluster_id": CLUSTER, "nodepool_id": MIG_POOL}), settings, inventory=lookup,
                       executor=BigNodes(), logger=JsonLogger("OFF"))
    assert result.outcome == "done" and len(result.decisions) == 2000
    doc = result.to_json()
    text = json.dumps(doc)
    assert len(text) <= MAX_RESULT_BYTES, len(text)
    note = doc["grouped"]
    assert note["full_bytes"] > MAX_RESULT_BYTES and note["decisions"] == 2000 and "decisions" not in doc
    counted, listed = _total_ids(doc)
    assert note["groups_left_off"] == 0 and counted == note["decisions"] + note["nodes"] == 2000 + 2000
    assert listed + note["instance_ids_left_off"] == counted
    # repeated reasons are grouped: far fewer groups than decisions
    assert len(doc["decision_groups"]) < 10 and len(doc["node_groups"]) == 1


@pytest.mark.parametrize("shape", ["distinct-long-reasons", "one-reason-many-ids", "non-ascii-reasons"])
def test_no_result_grows_past_the_bound(shape):
    """Hostile shapes for grouping: every reason different and long (nothing to group), one group of
    6,000 ids, reasons of characters JSON writes as 6 bytes each."""
    from functions.base.event_result import MAX_RESULT_BYTES, HandlerResult
    from functions.base.model import Decision

    n = 6000 if shape == "one-reason-many-ids" else 1000
    def reason(k):
        return ("ключ %d " % k) * 120 if shape == "non-ascii-reasons" else \
            "same reason" if shape == "one-reason-many-ids" else ("node %d said: " % k) + "x" * 1200
    decisions = [Decision(instance_id=i, action="error", reason=reason(k)) for k, i in enumerate(ids(n))]
    nodes = [{"instance_id": i, "outcome": "failed", "reason": reason(k)} for k, i in enumerate(ids(n))]
    result = HandlerResult(trigger="timer", outcome="done", reason="r" * 5000, event_type="timer:t",
                           decisions=decisions, nodes=nodes)
    doc = result.to_json()
    assert len(json.dumps(doc)) <= MAX_RESULT_BYTES
    note = doc["grouped"]
    counted, listed = _total_ids(doc)
    assert listed + note["instance_ids_left_off"] == 2 * n  # every id is either listed or counted as left off
    assert listed > 0 and len(doc["reason"]) <= 1000
    if shape == "one-reason-many-ids":
        assert note["groups_left_off"] == 0 and counted == 2 * n
    else:
        assert note["groups_left_off"] > 0 and all(len(g["reason"]) <= 1000 for g in doc["decision_groups"])


def test_a_result_that_fits_is_returned_in_full():
    from functions.base.event_result import HandlerResult
    from functions.base.model import Decision

    result = HandlerResult(trigger="manual", outcome="done", reason="1 error", decisions=[
        Decision(instance_id="i-1", action="error", reason="why")], nodes=[{"instance_id": "i-1", "outcome": "x"}])
    doc = result.to_json()
    assert "grouped" not in doc and doc["decisions"][0]["reason"] == "why" and doc["nodes"] == result.nodes


def test_a_context_value_is_cut_before_it_is_repeated_on_every_line():
    """Whatever path binds a long value (intake refuses long event fields; this is the logger's own
    bound), each line carries at most MAX_CONTEXT_CHARS of it."""
    import io

    from functions.base.logs import MAX_CONTEXT_CHARS

    stream = io.StringIO()
    log = JsonLogger("INFO", stream=stream, request_id="r" * 100_000).bind(event_type="t" * 250_000)
    log.info("one")
    log.info("two", instance_id="i-1")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 2 and all(len(json.dumps(line)) < 3 * MAX_CONTEXT_CHARS for line in lines)
    cut = lines[1]["event_type"]
    assert cut.startswith("t" * MAX_CONTEXT_CHARS) and cut.endswith("...(250000 characters)")


@pytest.mark.parametrize("argv", [["--event", "/dev/zero", "--inventory", "examples/inventory.json", "--dry-run"],
                                  ["--event", "-", "--inventory", "examples/inventory.json", "--dry-run"],
                                  ["--remote", "--event", "/dev/zero", "--cluster-id", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b",
                                   "--region", "cn-beijing", "--nodepool-id", "np-1"]])
def test_an_endless_event_file_is_refused_after_its_limit_in_one_line(argv):
    """The file was read whole before its size was checked: /dev/zero ran until memory ran out and ended in an
    internal error (exit 70), and with --remote any unreadable file did (found by the docs audit). Run as a
    person runs it, under a memory limit so the old way fails fast."""
    import os
    import shlex
    import subprocess
    import sys

    from tests.support.cli_errors import error_text

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    command = "ulimit -v 1500000; exec %s -m functions.commands.main invoke %s < /dev/zero" % (
        shlex.quote(sys.executable), " ".join(shlex.quote(a) for a in argv))
    done = subprocess.run(["bash", "-c", command], cwd=root, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_"))})
    assert done.returncode == 2, done.stderr[-300:]
    assert "is larger than 262144 bytes" in error_text(done.stderr)


def test_a_grouped_result_keeps_its_refused_pools_within_the_bound():
    """``refused_pools`` is in the grouped form too (an alert reads it), each line cut as a reason is, and
    pools past the bound counted as left off: the result never grows past MAX_RESULT_BYTES."""
    from functions.base.event_result import MAX_GROUP_REASON, MAX_RESULT_BYTES, HandlerResult
    from functions.base.model import Decision

    decisions = [Decision(instance_id=i, action="error", reason="node %d: " % k + "x" * 1200)
                 for k, i in enumerate(ids(200))]
    few = HandlerResult(trigger="timer", outcome="done", decisions=decisions, refused_pools={"np-1": "y" * 5000})
    doc = few.to_json()
    assert doc["grouped"]["refused_pools_left_off"] == 0 and len(doc["refused_pools"]["np-1"]) == MAX_GROUP_REASON
    many = HandlerResult(trigger="timer", outcome="done", decisions=decisions,
                         refused_pools={"np-%d" % k: "z" * 5000 for k in range(500)})
    doc = many.to_json()
    assert len(json.dumps(doc)) <= MAX_RESULT_BYTES
    assert len(doc["refused_pools"]) + doc["grouped"]["refused_pools_left_off"] == 500 and doc["refused_pools"]
