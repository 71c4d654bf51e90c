"""A stop record is told by the runs it halts until the alert marks show it told (functions/pipeline/notify.py,
functions/decision/alert_marks.py ``stop_id``/``stop_key``): level-triggered, at least once, once told never again
for the same record. Here the record is one an earlier run left (written as that run wrote it), found by the
timer's runs on the test API server, with a webhook taking the lines."""

import json

import pytest

from functions.decision import alert_marks as am
from functions.decision import waves as rp
from tests.rollout.conftest import NEW, POOL
from tests.rollout.test_claim_refused_kills import _marked

pytestmark = [pytest.mark.kube]

OWNER = "0a1b2c3d4e5f"  # the run that wrote the stop (an invocation's owner id)
TARGET = "sequence=" + NEW


def _stopped(cluster):
    """node-a stopped by an earlier run's drain timeout (its record, uncordoned as that run left it)."""
    cluster.add_nodes()
    record = rp.Progress(TARGET, rp.DRAIN_TIMEOUT, cordoned=False, since=900.0, reason="drain timed out: pod team/x",
                         owner=OWNER, expires=0.0)
    cluster.api.update_node("node-a", lambda node: node["metadata"].setdefault("annotations", {}).update(
        {rp.PROGRESS_ANNOTATION: record.to_annotation()}))


def _stops(hook):
    return [line for line in hook.lines() if line["kind"] == "rollout-stopped"]


def _put_marks(cluster, marks):
    """The alert marks Lease as a run of this version leaves it."""
    from functions.kube import alerted

    alerted.mark(cluster.kube, {k: v for k, v in marks.items()}, sticky=list(marks))


def test_a_stop_no_run_told_is_told_by_the_next_run_once(cluster):
    from tests.support.webhook import Webhook

    _stopped(cluster)
    with Webhook() as hook:
        for _ in range(3):  # the timer's runs, each halted by node-a's stop
            cluster.now[0] += 2 * 86400
            cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        stops = _stops(hook)
        assert len(stops) == 1, hook.lines()
        assert stops[0]["nodepool_id"] == POOL and stops[0]["nodes"][0]["node_name"] == "node-a", stops
        assert stops[0]["nodes"][0]["outcome"] == rp.DRAIN_TIMEOUT and "drain timed out" in stops[0]["text"], stops
        # marked told, and kept past the two days a failure's mark lasts: the stop waits for a person
        assert _marked(cluster.api)[am.stop_id("node-a")]["key"] == am.stop_key("node-a", OWNER)
        assert not any(cluster.unschedulable(n) for n in ("node-a", "node-b", "node-c"))


def test_a_stop_already_marked_told_is_not_told_again(cluster):
    """Marks present (told by an earlier run, before a redeploy): not told again; a new stop of the same node (another
    run's record) is news."""
    from tests.support.webhook import Webhook

    _stopped(cluster)
    _put_marks(cluster, {am.stop_id("node-a"): am.stop_key("node-a", OWNER)})
    with Webhook() as hook:
        cluster.now[0] += 2 * 86400
        cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        assert _stops(hook) == [], hook.lines()
        record = dict(cluster.annotation("node-a"), owner="ffffffffffff")  # another run's stop of node-a
        cluster.api.update_node("node-a", lambda node: node["metadata"]["annotations"].update(
            {rp.PROGRESS_ANNOTATION: json.dumps(record)}))
        cluster.now[0] += 2 * 86400
        cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        assert [line["nodes"][0]["node_name"] for line in _stops(hook)] == ["node-a"], hook.lines()


def test_a_dry_run_halted_by_a_stop_sends_nothing_and_marks_nothing(cluster):
    from tests.support.webhook import Webhook

    _stopped(cluster)
    with Webhook() as hook:
        cluster.run(dry_run=True, ACK_MIG_NOTIFY_URL=hook.url())
        assert hook.lines() == []
        assert ("default", am.MARK_LEASE) not in cluster.api.leases


def test_a_stop_mark_dated_past_the_cluster_clock_is_no_mark_and_the_stop_is_told(cluster):
    """The reader rule on the marks' times: anyone who may update Leases in the namespace can write the marks, and a
    mark whose time is years ahead of the API server's clock (before 2100, so it read) was never dropped: ``kept``
    measures a mark's age from its time, and the newest-first cut keeps it first. One such write silenced a node's
    stop (and a refusal) for good. A mark dated further ahead than a skewed clock explains is not ours: not told, so
    the stop is told (a repeat at worst, never a loss), and the write replaces the mark with one at the cluster's
    time."""
    from tests.support.webhook import Webhook
    from functions.decision.waves import MAX_EPOCH
    from functions.kube import leases

    _stopped(cluster)
    forged = {am.stop_id("node-a"): {"key": am.stop_key("node-a", OWNER), "at": MAX_EPOCH - 86400, "sticky": True}}
    lease = leases.read_or_create(cluster.kube, "default", am.MARK_LEASE, {})
    leases.write(cluster.kube, "default", lease, {am.MARK_ANNOTATION: am.write_text(forged)})
    with Webhook() as hook:
        cluster.now[0] += 2 * 86400
        cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        assert [line["nodes"][0]["node_name"] for line in _stops(hook)] == ["node-a"], hook.lines()
    assert _marked(cluster.api)[am.stop_id("node-a")]["at"] <= cluster.now[0]
