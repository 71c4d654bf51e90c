"""Every stop record a run reads is told, not only those that hold its rollout up (functions/rollout/run.py
``read_stops``, functions/pipeline/notify.py): a stop whose telling run was killed, in a pool where no later run is
held up (nothing is left to do there: the pool's label went back to the layout its nodes hold), was never told,
although ``status`` showed it. Told once (the alert marks), from the node lists the run reads anyway."""

import json

import pytest

from functions.decision import alert_marks as am
from functions.decision import waves as rp
from tests.rollout.conftest import NEW, OLD, POOL, snapshot
from tests.rollout.test_claim_refused_kills import _marked
from tests.rollout.test_stop_told_level import _put_marks, _stops

pytestmark = [pytest.mark.kube]

OWNER = "0a1b2c3d4e5f"  # the killed run that wrote the stop


def _left_stop(cluster, target="sequence=" + OLD):
    """Every node holds NEW, as the pool asks; node-a keeps the drain-timeout record of a rollout to ``target``
    whose run was killed before its line (the pool's label was set back since): nothing is left to do."""
    cluster.add_nodes(sequence=NEW)
    record = rp.Progress(target, rp.DRAIN_TIMEOUT, cordoned=False, since=900.0, reason="drain timed out: pod team/x",
                         owner=OWNER, expires=0.0)
    cluster.api.update_node("node-a", lambda node: node["metadata"].setdefault("annotations", {}).update(
        {rp.PROGRESS_ANNOTATION: record.to_annotation()}))


def test_a_stop_in_a_pool_with_nothing_left_to_do_is_told_once(cluster):
    from tests.support.webhook import Webhook

    _left_stop(cluster)
    with Webhook() as hook:
        for _ in range(3):  # the timer's runs: nothing to do in the pool, none held up by node-a
            cluster.now[0] += 2 * 86400
            result = cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
            assert result.outcome == "done" and cluster.transport.seen == [], result
        stops = _stops(hook)
        assert len(stops) == 1, hook.lines()
        assert stops[0]["nodepool_id"] == POOL and stops[0]["nodes"][0]["node_name"] == "node-a", stops
        assert stops[0]["target"] == "sequence=" + OLD and "drain timed out" in stops[0]["text"], stops
        assert _marked(cluster.api)[am.stop_id("node-a")]["key"] == am.stop_key("node-a", OWNER)
        assert cluster.annotation("node-a")["owner"] == OWNER  # told, never touched


def test_a_stop_in_a_pool_without_a_label_is_told(cluster):
    """The pool's label was removed after the stop (its nodes keep their layout): the run lists the pool for MIG
    nodes and tells the record it finds."""
    from tests.support.webhook import Webhook

    _left_stop(cluster, "sequence=" + NEW)
    with Webhook() as hook:
        cluster.now[0] += 2 * 86400
        cluster.run(inventory=snapshot(value=None), ACK_MIG_NOTIFY_URL=hook.url())
        assert [line["nodes"][0]["node_name"] for line in _stops(hook)] == ["node-a"], hook.lines()


def _calls(api):
    """(method, path, query without its continue token, which names the list's version) of each request."""
    return [(r.method, r.path, "&".join(q for q in r.query.split("&") if not q.startswith("continue=")))
            for r in api.requests]


def test_the_sweep_reads_nothing_more_than_the_run_did(cluster):
    """The records come from the node lists the run makes anyway: with a stop told before (marks present, as after
    an upgrade) a run makes the calls a run without any record makes, and one read of the marks; not told again."""
    from tests.support.webhook import Webhook

    cluster.add_nodes(sequence=NEW)
    with Webhook() as hook:
        cluster.now[0] += 2 * 86400
        cluster.api.requests.clear()
        cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        plain = _calls(cluster.api)
        record = rp.Progress("sequence=" + OLD, rp.FAILED, cordoned=False, since=900.0, reason="apply: gpu-busy",
                             owner=OWNER, expires=0.0)
        cluster.api.update_node("node-b", lambda node: node["metadata"].setdefault("annotations", {}).update(
            {rp.PROGRESS_ANNOTATION: record.to_annotation()}))
        _put_marks(cluster, {am.stop_id("node-b"): am.stop_key("node-b", OWNER)})
        cluster.now[0] += 2 * 86400
        cluster.api.requests.clear()
        cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        swept = _calls(cluster.api)
        lease = "/apis/coordination.k8s.io/v1/namespaces/default/leases/" + am.MARK_LEASE
        assert [c for c in swept if c[1] != lease] == plain, (swept, plain)
        assert [c[0] for c in swept if c[1] == lease] == ["GET"], swept
        assert _stops(hook) == [], hook.lines()
        # the same record of another run is news
        cluster.api.update_node("node-b", lambda node: node["metadata"]["annotations"].update(
            {rp.PROGRESS_ANNOTATION: json.dumps(dict(cluster.annotation("node-b"), owner="ffffffffffff"))}))
        cluster.now[0] += 2 * 86400
        cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        assert [line["nodes"][0]["node_name"] for line in _stops(hook)] == ["node-b"], hook.lines()


def test_a_stop_in_a_pool_without_a_label_or_mig_is_told_once_from_the_list_the_run_makes(cluster):
    """The pool's label was removed and its nodes have MIG off (turned off by hand after a stopped rollout): no
    node is a target and the event skips, but the list of the pool's nodes that finds no MIG (``removal_targets``)
    holds node-a's stop record. It is told once, marked, with no API call beyond that list and the marks'."""
    from tests.support.webhook import Webhook

    cluster.add_nodes(sequence=None)
    unlabelled = snapshot(value=None)
    with Webhook() as hook:
        cluster.now[0] += 2 * 86400
        cluster.api.requests.clear()
        before = cluster.run(inventory=unlabelled, ACK_MIG_NOTIFY_URL=hook.url())
        plain = _calls(cluster.api)
        record = rp.Progress("sequence=" + OLD, rp.DRAIN_TIMEOUT, cordoned=False, since=900.0,
                             reason="drain timed out: pod team/x", owner=OWNER, expires=0.0)
        cluster.api.update_node("node-a", lambda node: node["metadata"].setdefault("annotations", {}).update(
            {rp.PROGRESS_ANNOTATION: record.to_annotation()}))
        leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
        marks = (leases, leases + "/" + am.MARK_LEASE)  # the marks' Lease: read, made on the first telling
        for _ in range(3):
            cluster.now[0] += 2 * 86400
            cluster.api.requests.clear()
            result = cluster.run(inventory=unlabelled, ACK_MIG_NOTIFY_URL=hook.url())
            assert (result.outcome, cluster.transport.seen) == (before.outcome, []), result
            assert [c for c in _calls(cluster.api) if c[1] not in marks] == plain, (_calls(cluster.api), plain)
        stops = _stops(hook)
        assert [(st["nodepool_id"], st["nodes"][0]["node_name"]) for st in stops] == [(POOL, "node-a")], hook.lines()
        assert stops[0]["target"] == "sequence=" + OLD and "drain timed out" in stops[0]["text"], stops
        assert _marked(cluster.api)[am.stop_id("node-a")]["key"] == am.stop_key("node-a", OWNER)
        assert cluster.annotation("node-a")["owner"] == OWNER  # told, never touched


def test_a_dry_run_that_reads_a_stop_sends_and_marks_nothing(cluster):
    from tests.support.webhook import Webhook

    _left_stop(cluster)
    with Webhook() as hook:
        cluster.run(dry_run=True, ACK_MIG_NOTIFY_URL=hook.url())
        assert hook.lines() == []
        assert ("default", am.MARK_LEASE) not in cluster.api.leases


# ---- auto pools ----

class _Busy:
    """An auto node whose per-GPU apply fails (gpu-busy), as node_bootstrap answers for a GPU in use."""

    name = "played"

    def run(self, targets):
        from functions.delivery.outcome import NodeResult

        return [NodeResult(t.instance_id, self.name, 4, {"outcome": "failed", "error": {
            "code": "gpu-busy", "message": "GPU 0 is used by pid 4242"}}) for t in targets]


def test_an_auto_nodes_stop_holds_it_and_is_told_once_by_the_ticks_after(cluster):
    """A node whose per-GPU change ended ``failed`` keeps its record: every later tick asking it the same layout
    defers it ("the rollout stopped meanwhile") until a person removes the record. It was told only as the failing
    tick's node-failed line (lost if that tick was killed before it); a tick that reads the record tells it."""
    from tests.rollout.test_auto_rollout import NAMES as AUTO, PerGpuNodes, add_auto_nodes, tick, waiting
    from tests.support.webhook import Webhook

    add_auto_nodes(cluster.api, AUTO[:1])
    waiting(cluster.api, 2)
    with Webhook() as hook:
        (node,) = tick(cluster, _Busy(), ACK_MIG_NOTIFY_URL=hook.url()).nodes
        assert node["outcome"] == "failed" and cluster.annotation("auto-a")["step"] == rp.FAILED, node
        owner = cluster.annotation("auto-a")["owner"]
        for _ in range(3):
            cluster.now[0] += 3600
            (node,) = tick(cluster, PerGpuNodes(cluster.api), ACK_MIG_NOTIFY_URL=hook.url()).nodes
            assert node["outcome"] == "deferred" and "stopped" in node["reason"], node  # held up
        stops = _stops(hook)
        assert [(s["nodepool_id"], s["nodes"][0]["node_name"]) for s in stops] == [(POOL, "auto-a")], hook.lines()
        assert stops[0]["target"].startswith("per-gpu=") and "gpu-busy" in stops[0]["text"], stops
        # Only the node is held (the pool's other nodes go on): the line says so, not that a pool's rollout stopped
        text = stops[0]["text"]
        assert text.startswith("node auto-a of auto pool %s held: its per-GPU change to per-gpu=" % POOL), text
        assert "stopped" not in text and "rollout of pool" not in text, text
        assert stops[0]["kind"] == "rollout-stopped", stops  # the alert's kind, for whoever routes on it
        assert _marked(cluster.api)[am.stop_id("auto-a")]["key"] == am.stop_key("auto-a", owner)


def test_an_auto_nodes_stop_is_told_by_an_idle_tick_and_not_by_a_dry_run(cluster):
    """The tick that wrote the stop was killed before any line; no pod waits any more: the idle tick, which lists
    the pool's nodes anyway, tells it, once; a dry run first sends and marks nothing."""
    from tests.rollout.test_auto_rollout import NAMES as AUTO, PerGpuNodes, add_auto_nodes, tick
    from tests.support.webhook import Webhook

    add_auto_nodes(cluster.api, AUTO[:2])
    record = rp.Progress("per-gpu=0:3g.20gb@0,3g.20gb@4", rp.FAILED, cordoned=False, since=900.0,
                         reason="apply: gpu-busy: GPU 0 is used by pid 4242", owner=OWNER, expires=0.0, drain=False)
    cluster.api.update_node("auto-b", lambda node: node["metadata"].setdefault("annotations", {}).update(
        {rp.PROGRESS_ANNOTATION: record.to_annotation()}))
    with Webhook() as hook:
        result = tick(cluster, PerGpuNodes(cluster.api), dry_run=True, ACK_MIG_NOTIFY_URL=hook.url())
        assert result.outcome == "skip" and hook.lines() == [], (result, hook.lines())
        assert ("default", am.MARK_LEASE) not in cluster.api.leases
        for _ in range(3):
            cluster.now[0] += 3600
            assert tick(cluster, PerGpuNodes(cluster.api), ACK_MIG_NOTIFY_URL=hook.url()).outcome == "skip"
        assert [s["nodes"][0]["node_name"] for s in _stops(hook)] == ["auto-b"], hook.lines()
        assert _marked(cluster.api)[am.stop_id("auto-b")]["key"] == am.stop_key("auto-b", OWNER)


def test_a_run_whose_wave_stops_the_pool_tells_the_other_stops_it_read_in_the_same_line(cluster):
    """node-c keeps an untold stop of another rollout (the pool's label changed since); this run's wave stops the
    pool at node-b: its line names both, both are marked, and the marks' Lease is read once for the node failure and
    the stops alike."""
    from tests.support.webhook import Webhook

    cluster.add_nodes()
    record = rp.Progress("sequence=7g.40gb", rp.FAILED, cordoned=False, since=900.0, reason="apply: gpu-busy",
                         owner=OWNER, expires=0.0)
    cluster.api.update_node("node-c", lambda node: node["metadata"].setdefault("annotations", {}).update(
        {rp.PROGRESS_ANNOTATION: record.to_annotation()}))
    cluster.transport.fail = {"node-b"}
    with Webhook() as hook:
        cluster.api.requests.clear()
        cluster.run(ACK_MIG_NOTIFY_URL=hook.url(), ACK_MIG_INVOCATION_TIMEOUT_S="86400")
        assert cluster.transport.seen == ["node-a", "node-b"], cluster.transport.seen
        (line,) = _stops(hook)
        assert [n["node_name"] for n in line["nodes"]] == ["node-b", "node-c"] and line["count"] == 2, line
        assert line["text"].startswith("rollout of pool %s to sequence=" % POOL), line  # a labelled pool's own words
        marked = _marked(cluster.api)
        assert marked[am.stop_id("node-b")]["key"] == am.stop_key("node-b", cluster.annotation("node-b")["owner"])
        assert marked[am.stop_id("node-c")]["key"] == am.stop_key("node-c", OWNER), marked
        lease = "/apis/coordination.k8s.io/v1/namespaces/default/leases/" + am.MARK_LEASE
        assert [r.method for r in cluster.api.requests if r.path == lease][:1] == ["GET"], cluster.api.requests
        # one read before the lines (the write's own read-modify-write comes after them)
        reads = [r for r in cluster.api.requests if r.path == lease and r.method == "GET"]
        assert len(reads) == 2, reads
        cluster.now[0] += 2 * 86400
        cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        assert len(_stops(hook)) == 1, hook.lines()  # neither told again


def test_a_stop_that_waits_past_thirty_days_is_told_again_once_a_month(cluster):
    """A stop's mark is sticky: it lasts past the two days of a failure's mark, but not for ever
    (``alert_marks.STICKY_KEEP_S``): a stop no person has looked at for thirty days is told again, once."""
    from tests.support.webhook import Webhook

    _left_stop(cluster)
    with Webhook() as hook:
        for _ in range(16):  # the timer's runs, every two days and a minute: 32 days (not 30 to the second after
            cluster.now[0] += 2 * 86400 + 60  # the first run: a mark's age then is only as exact as its clock)
            cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        assert am.STICKY_KEEP_S == 30 * 86400
        assert [line["nodes"][0]["node_name"] for line in _stops(hook)] == ["node-a", "node-a"], hook.lines()
