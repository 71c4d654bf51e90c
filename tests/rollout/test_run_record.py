"""The function's run record (functions/kube/last_run.py, functions/decision/run_record.py) on the test API server,
shown by ``status`` (text and --json) and ``doctor``; a stopped rollout's ERROR line and each wave node's duration;
paused pools and pools in rollout in ``status``."""

import io
import json

import pytest

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.cloud.cluster import InventoryLookup
from functions.commands.doctor import last_run_checks
from functions.commands.status import collect, render
from functions.decision import run_record as lr
from functions.kube import last_run
from functions.kube.nodes import MemoryKube
from functions.pipeline.event import run_event
from tests.rollout.conftest import NEW, TIMER, snapshot

TIMER_EVENT = json.dumps({"triggerTime": "2026-11-29T02:00:00Z", "triggerName": "reconcile", "payload": ""})


def recorded(cluster, event, **kw):
    """One invocation as the handler runs it (record=True) against the test API server."""
    return run_event(event, load_settings({"ACK_MIG_CLUSTER_ID": "c-rollout", "ACK_MIG_STARTUP_TAINT": "none"}),
                     inventory=InventoryLookup.from_dict(snapshot()), kube=cluster.kube, dry_run=True,
                     logger=JsonLogger("OFF", request_id="req-%s" % kw.pop("request", "1")), record=True, **kw)


def lease(cluster):
    return cluster.api.leases[("default", lr.RECORD_LEASE)]


def test_each_run_is_recorded_per_trigger_on_the_api_servers_clock(cluster):
    cluster.add_nodes()
    recorded(cluster, TIMER_EVENT, request="t1")
    stored = lease(cluster)
    record = lr.read_text(stored["metadata"]["annotations"][lr.RECORD_ANNOTATION])
    timer = record["by_trigger"]["timer:reconcile"]
    assert record["last"] == timer and timer["request_id"] == "req-t1" and timer["dry_run"] is True
    assert timer["at"] == pytest.approx(1000.0, abs=2) and timer["clock"] == "server"  # the API server's Date
    # 3 running nodes, OLD -> NEW, max-unavailable 1: one in the wave, two wait (a dry run runs none)
    assert timer["outcome"] == "done" and timer["decisions"] == {"defer": 2, "partition": 1}
    assert timer["nodes"] == {"deferred": 2, "dry-run": 1}
    assert stored["spec"]["holderIdentity"] == "req-t1"  # `kubectl get lease` shows who wrote it
    cluster.now[0] += 600
    recorded(cluster, TIMER, request="m1")  # a manual run: its own entry; the timer's stays
    record = last_run.read(cluster.kube)["record"]
    assert set(record["by_trigger"]) == {"timer:reconcile", "manual"}
    assert record["last"]["trigger"] == "manual" and record["by_trigger"]["timer:reconcile"]["request_id"] == "req-t1"


def test_a_write_that_meets_another_writers_version_merges_instead_of_dropping_it():
    """Two invocations ending together: the second write is refused (409) and merged on the first one's record, so
    neither trigger's entry is lost (last-writer-wins would drop one)."""
    kube = MemoryKube()

    class Result:
        trigger, event_type, outcome, reason, dry_run, decisions, nodes = "scale-out", None, "done", "", False, [], []

    last_run.write(kube, Result, "r-1", 5.0)
    real_replace, raced = kube.replace_lease, []

    def replace(namespace, body):  # another invocation writes between our read and our write, once
        if not raced:
            raced.append(1)
            other = type("Other", (Result,), {"trigger": "timer", "event_type": "timer:reconcile"})
            last_run.write(kube, other, "r-2", 5.0)
        return real_replace(namespace, body)

    kube.replace_lease = replace
    last_run.write(kube, type("Pod", (Result,), {"trigger": "pod-unschedulable"}), "r-3", 5.0)
    record = last_run.read(kube)["record"]
    assert set(record["by_trigger"]) == {"scale-out", "timer:reconcile", "pod-unschedulable"}
    assert record["last"]["request_id"] == "r-3"


@pytest.mark.parametrize("text, why", [
    ("not json", "not JSON"), ('{"version": 1, "last": {"at": "x"}}', "not a number"),
    ("[" * 100, "nested too deeply"), ('{"version": 1, "last": {"at": 1e400}}', "out of range"),
    ("{" + '"a": 1,' * 5000 + '"b": 2}', "larger than")])
def test_a_record_that_is_not_ours_is_unreadable_never_half_used(text, why):
    kube = MemoryKube()
    kube.create_lease("default", {"metadata": {"name": lr.RECORD_LEASE, "annotations": {lr.RECORD_ANNOTATION: text}},
                                  "spec": {}})
    info = last_run.read(kube)
    assert info["record"] is None and why in info["error"]
    assert "not read" in last_run_checks(info, "@every 30m")[0].text


def test_status_shows_when_the_function_last_ran_and_what_it_did(cluster, capsys):
    cluster.add_nodes()
    recorded(cluster, TIMER_EVENT)
    cluster.now[0] += 125
    status = collect(load_settings({}), InventoryLookup.from_dict(snapshot()), kube=cluster.client())
    record = status["function"]["record"]
    assert record["last"]["trigger"] == "timer" and status["function"]["error"] is None
    assert status["function"]["now"] - record["last"]["at"] == pytest.approx(125, abs=2)
    assert json.loads(json.dumps(status))["function"]["record"]["by_trigger"]["timer:reconcile"]["outcome"] == "done"
    text = " ".join(render(status, nodes=False).split())
    assert ("function: last ran 2m ago, timer:reconcile: done (2 defer, 1 partition; nodes: 2 deferred, 1 dry-run), "
            "dry run") in text
    assert "by trigger: timer:reconcile 2m ago done" in text


def test_status_says_when_no_run_is_recorded_and_a_snapshot_shows_none(cluster):
    cluster.add_nodes()
    status = collect(load_settings({}), InventoryLookup.from_dict(snapshot()), kube=cluster.client())
    assert status["function"] == {"record": None, "now": pytest.approx(1000.0, abs=2), "error": None}
    assert "function: no run recorded yet" in render(status, nodes=False)
    assert "function" not in collect(load_settings({}), InventoryLookup.from_dict(snapshot(kube_nodes={})))


def test_doctor_judges_the_reconcile_timer_by_twice_its_schedule():
    entry = {"at": 1000.0, "clock": "server", "trigger": "timer", "event_type": "timer:reconcile", "outcome": "done",
             "reason": "", "request_id": "r", "dry_run": False, "duration_ms": 1.0, "decisions": {"skip": 2},
             "nodes": {}}
    record = {"version": 1, "last": entry, "by_trigger": {"timer:reconcile": entry}}
    fresh = last_run_checks({"record": record, "now": 1000.0 + 3500, "error": None}, "@every 30m")
    assert [c.status for c in fresh] == ["ok", "ok"] and "58 min ago" in fresh[1].text
    stale = last_run_checks({"record": record, "now": 1000.0 + 3700, "error": None}, "@every 30m")
    assert stale[1].status == "PROBLEM" and "more than twice its schedule" in stale[1].text
    assert last_run_checks({"record": record, "now": 1000.0 + 3700, "error": None}, "@every 1h")[1].status == "ok"
    other = dict(record, by_trigger={"scale-out": dict(entry, trigger="scale-out")})
    assert last_run_checks({"record": other, "now": 1001.0, "error": None}, "")[1].status == "PROBLEM"
    assert last_run_checks({"record": None, "now": 0.0, "error": None}, "")[0].status == "warn"
    assert lr.every_seconds("@every 1h30m") == 5400 and lr.every_seconds("0 */30 * * * *") is None


def test_a_stopped_rollout_logs_one_error_line_per_invocation_and_wave_nodes_carry_their_duration(cluster):
    cluster.add_nodes()
    cluster.api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    cluster.api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    out = io.StringIO()
    settings = load_settings(dict(cluster.settings_env, ACK_MIG_DRAIN_TIMEOUT_S="5"))
    from functions.delivery.node_executor import DeliveryExecutor

    def run():
        return run_event(TIMER, settings, inventory=InventoryLookup.from_dict(snapshot()),
                         executor=DeliveryExecutor.from_settings(settings, transport=cluster.transport),
                         logger=JsonLogger("INFO", stream=out), kube=cluster.kube)

    run()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    (timed_out,) = [line for line in lines if line["message"] == "node result" and line["outcome"] == "drain-timeout"]
    assert timed_out["level"] == "ERROR" and timed_out["node_name"] == "node-a" and timed_out["nodepool_id"] == "np-mig"
    assert timed_out["code"] == "drain-timeout"
    assert timed_out["duration_ms"] >= 5000  # claim to end on the rollout's clock: at least the drain timeout
    out.truncate(0), out.seek(0)
    run()  # the next invocation finds the pool stopped
    stops = [json.loads(line) for line in out.getvalue().splitlines() if '"rollout stopped"' in line]
    assert len(stops) == 1 and stops[0]["level"] == "ERROR"
    assert (stops[0]["nodepool_id"], stops[0]["node_name"], stops[0]["outcome"]) == ("np-mig", "node-a",
                                                                                       "drain-timeout")
    status = collect(load_settings({}), InventoryLookup.from_dict(snapshot()), kube=cluster.kube)
    (pool,) = status["pools"]
    assert pool["rollout"] == "stopped" and pool["stopped_by"]["node"] == "node-a"
    assert status["rollouts"] == {"np-mig": "stopped"}
    text = " ".join(render(status, nodes=False).split())
    assert "pools in rollout: np-mig (stopped)" in text and "STOPPED at node node-a (drain-timeout)" in text


def test_status_lists_paused_pools_and_a_paused_rollout(cluster, capsys):
    cluster.add_nodes()
    paused = snapshot(pool_labels={"ack-mig-hook/paused": "true"})
    status = collect(load_settings({}), InventoryLookup.from_dict(paused), kube=cluster.kube)
    (pool,) = status["pools"]
    assert pool["paused"] is True and status["paused_pools"] == ["np-mig"]
    text = " ".join(render(status, nodes=False).split())
    assert "paused pools: np-mig" in text and "PAUSED (ack-mig-hook/paused=true)" in text
    unpaused = collect(load_settings({}), InventoryLookup.from_dict(snapshot()), kube=cluster.kube)
    assert unpaused["paused_pools"] == [] and unpaused["pools"][0]["paused"] is False
    assert NEW in unpaused["pools"][0]["label"]


def test_an_event_that_never_needed_the_cluster_costs_no_credential_but_a_timer_always_records(cluster):
    """Most scale-outs are of pools without MIG: they end before the API server is asked, and the record does
    not ask for them (a credential from ACK each time); the timer is the heartbeat and always records."""
    import time

    from functions.base.event_result import HandlerResult
    from functions.pipeline.event import _record

    from functions.kube.client import KubeApi

    fresh = KubeApi(lambda: cluster.config)  # its credential comes on the first call, as ACK's does: none made yet
    _record(HandlerResult(trigger="scale-out", outcome="skip", reason="no label"), fresh, JsonLogger("OFF"),
            time.monotonic())
    assert ("default", lr.RECORD_LEASE) not in cluster.api.leases and fresh.connected is False
    _record(HandlerResult(trigger="timer", event_type="timer:reconcile", outcome="skip", reason="no label"), fresh,
            JsonLogger("OFF"), time.monotonic())
    assert last_run.read(cluster.kube)["record"]["last"]["outcome"] == "skip"


def test_a_record_that_cannot_be_written_is_a_warning_and_the_event_stands(cluster):
    import time

    from functions.base.event_result import HandlerResult
    from functions.pipeline.event import _record

    out = io.StringIO()

    class Refusing:
        def get_lease(self, namespace, name):
            from node_bootstrap.kube import KubeError

            raise KubeError('leases.coordination.k8s.io is forbidden: User "x" cannot get resource "leases"', 403)

    _record(HandlerResult(trigger="timer", outcome="done"), Refusing(), JsonLogger("INFO", stream=out),
            time.monotonic())
    (line,) = [json.loads(x) for x in out.getvalue().splitlines()]
    assert line["level"] == "WARNING" and line["message"] == "run record not written" and "403" not in line["message"]
    assert "forbidden" in line["reason"]


def test_timers_of_names_the_template_does_not_declare_never_push_the_reconcile_timers_entry_out():
    """Forty timer events with new, long trigger names: each added an entry for good, the record grew past
    what its reader takes, and the next write replaced it, the reconcile timer's entry with it (found by a
    review of the event intake). Now the newest four of such names stay, beside the template's timers."""
    kube = MemoryKube()
    settings = load_settings({"ACK_MIG_CLUSTER_ID": "c-rollout", "ACK_MIG_STARTUP_TAINT": "none"})

    def timer(name):
        event = json.dumps({"triggerTime": "2026-11-29T02:00:00Z", "triggerName": name, "payload": ""})
        return run_event(event, settings, inventory=InventoryLookup.from_dict(snapshot()), kube=kube, dry_run=True,
                         logger=JsonLogger("OFF", request_id="r"), record=True)

    timer("reconcile")
    for n in range(40):
        timer("t%02d-" % n + "x" * 400)
    info = last_run.read(kube)
    assert info["error"] is None, info["error"]
    keys = sorted(info["record"]["by_trigger"])
    assert "timer:reconcile" in keys
    assert [k[:9] for k in keys if k != "timer:reconcile"] == ["timer:t36", "timer:t37", "timer:t38", "timer:t39"]
    assert all(len(e["event_type"]) <= 64 for e in info["record"]["by_trigger"].values())


def _valid_record():
    entry = {"at": 1000.0, "clock": "server", "trigger": "timer", "event_type": "timer:reconcile", "outcome": "done",
             "reason": "", "request_id": "r", "dry_run": False, "duration_ms": 1.0, "decisions": {"skip": 2},
             "nodes": {}}
    return {"version": 1, "last": entry, "by_trigger": {"timer:reconcile": dict(entry)}}


@pytest.mark.parametrize("change, why", [
    (lambda r: r["last"].update(dry_run="yes"), "last.dry_run is not true or false"),
    (lambda r: r.update(version="1"), "version is text, not a whole number"),
    (lambda r: r.update(version=0), "version 0 is outside 1 to 1000"),
    (lambda r: r["by_trigger"].update({"t%d" % i: r["last"] for i in range(lr.MAX_KEYS)}),
     "by_trigger is not a small object"),
    (lambda r: r["last"].update(decisions={"a%d" % i: 1 for i in range(lr.MAX_KEYS + 1)}),
     "last.decisions is not a small object of counts")],
    ids=["dry-run-text", "version-text", "version-zero", "triggers-many", "counts-many"])
def test_each_field_of_a_record_is_checked_against_its_kind_and_bound(change, why):
    """The reader rule for the record (run_record.read_text): a field of another kind or past its bound makes the
    record unreadable, with the field named; the same record without the change reads."""
    assert lr.read_text(json.dumps(_valid_record()))["last"]["decisions"] == {"skip": 2}
    record = _valid_record()
    change(record)
    with pytest.raises(lr.OutsideDataError, match=why):
        lr.read_text(json.dumps(record))


def test_a_long_reason_is_cut_in_the_stored_record_not_only_when_read():
    """The reader cuts text fields too, so only the Lease's own text shows whether the writer cut the reason:
    a round's reasons can run to kilobytes, and a record past its reader's bound is replaced by the next write."""
    from functions.base.logs import redact_text

    kube = MemoryKube()

    class Result:
        trigger, event_type, outcome, dry_run, decisions, nodes = "pod-unschedulable", None, "done", False, [], []
        reason = "round planned; " * 400

    for redact in (None, redact_text):
        entry = last_run.write(kube, Result, "r-1", 5.0, redact=redact)
        assert len(entry["reason"]) == lr.MAX_REASON and entry["reason"].endswith("...")
        text = kube.leases[("default", lr.RECORD_LEASE)]["metadata"]["annotations"][lr.RECORD_ANNOTATION]
        assert len(text) < 2 * lr.MAX_REASON + 600


def test_a_timer_schedule_of_no_time_is_no_interval():
    assert lr.every_seconds("@every 0s") is None and lr.every_seconds("@every 0h0m") is None
    assert lr.every_seconds("@every 90s") == 90 and lr.every_seconds("@every 2h") == 7200


def test_a_reconcile_entry_dated_past_the_cluster_clock_never_shows_the_timer_running(cluster):
    """The reader rule on the record's times: anyone who may update Leases in ``default`` can write the record, and
    an entry dated years ahead of the API server's clock (before 2100, so it read) made ``doctor`` say the reconcile
    timer last ran 0 s ago for good, a timer that stopped included. The record is written on the API server's clock:
    one dated further ahead than a skewed clock explains does not read (one line), and the next write replaces it."""
    from functions.kube import leases

    cluster.add_nodes()
    recorded(cluster, TIMER_EVENT)
    lease = cluster.kube.get_lease("default", lr.RECORD_LEASE)
    record = lr.read_text(lease["metadata"]["annotations"][lr.RECORD_ANNOTATION])
    record["by_trigger"]["timer:reconcile"]["at"] = record["last"]["at"] = 4.0e9  # 2096
    leases.write(cluster.kube, "default", lease, {lr.RECORD_ANNOTATION: lr.write_text(record)})
    cluster.now[0] += 3 * 3600  # the timer stopped
    info = last_run.read(cluster.client())
    checks = last_run_checks(info, "@every 30m")
    assert info["record"] is None and "last.at" in info["error"] and "\n" not in info["error"], info
    assert [c.status for c in checks] == ["warn"] and "not read" in checks[0].text
    recorded(cluster, TIMER_EVENT, request="2")  # the next run's write replaces it
    assert last_run.read(cluster.client())["record"]["last"]["at"] == pytest.approx(cluster.now[0], abs=2)
