"""Rollout pace and control (issue 19 point 6), on the rollout executor's injectable clock against the
local TLS Kubernetes API: one invocation starts wave after wave while its time allows the next wave's
worst case, each wave with a lease of its own; it stops when the time is up; a pool label
``ack-mig-hook/paused=true`` stops new waves (also one set while a wave runs), and removing it resumes."""

from functions.cloud.cluster import InventoryLookup
from functions.base.settings import load_settings, longest_run_s
from tests.rollout.conftest import NAMES, NEW, snapshot

LEASE = longest_run_s(load_settings({}))  # 600 + 900 + 300 + 420 s: how long one wave's records hold a node


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def cordons(api):
    """(node, cordon or uncordon) for every spec write, in order."""
    return [(r.path.rsplit("/", 1)[1], "cordon" if r.body["spec"]["unschedulable"] else "uncordon")
            for r in api.requests if r.method == "PATCH" and "spec" in (r.body or {})]


def slow_applies(cluster, seconds):
    """Each node's apply takes ``seconds`` of the rollout's clock."""
    played = cluster.transport.run

    def run(targets):
        cluster.now[0] += seconds
        return played(targets)

    cluster.transport.run = run


def claims(api, name):
    """The expiry of each claim (the cordoning write) of a node's record."""
    import json

    out = []
    for r in api.requests:
        if r.method == "PATCH" and r.path.endswith("/" + name) and (r.body or {}).get("spec", {}).get("unschedulable"):
            out.append(json.loads(r.body["metadata"]["annotations"]["ack-mig-hook/rollout"])["expires"])
    return out


def test_one_invocation_runs_wave_after_wave_while_it_has_time(cluster):
    cluster.add_nodes()
    slow_applies(cluster, 100)
    result = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")  # max-unavailable 1
    assert outcomes(result) == {n: "partitioned" for n in NAMES}
    assert cluster.transport.seen == NAMES
    # one node disrupted at a time: each uncordoned before the next is cordoned
    assert cordons(cluster.api) == [(n, what) for n in NAMES for what in ("cordon", "uncordon")]
    # each wave's records carry a lease from that wave's start (the rollout's clock starts at 1000)
    assert [claims(cluster.api, n) for n in NAMES] == [[1000.0 + LEASE], [1100.0 + LEASE], [1200.0 + LEASE]]
    # the result's decisions are the ones carried out, not the first plan's deferrals
    assert [d.action for d in result.decisions] == ["partition"] * 3 and result.reason.count("partition") == 1
    assert all(cluster.annotation(n)["step"] == "done" for n in NAMES)


def test_no_wave_starts_that_the_invocation_has_no_time_for(cluster):
    cluster.add_nodes()
    slow_applies(cluster, 400)
    env = dict(ACK_MIG_NODE_TIMEOUT_S="60", ACK_MIG_DRAIN_TIMEOUT_S="300", ACK_MIG_CAPACITY_TIMEOUT_S="60",
               ACK_MIG_INVOCATION_TIMEOUT_S="1500")  # a drained wave's worst case: 60 + 300 + 60 + 420 = 840 s
    first = cluster.run(**env)
    # wave 1 at 0 s, wave 2 at 400 s (1100 s left), none at 800 s (700 s left)
    assert outcomes(first) == {"node-a": "partitioned", "node-b": "partitioned", "node-c": "deferred"}
    reason = next(n["reason"] for n in first.nodes if n["node_name"] == "node-c")
    assert reason.startswith("this invocation has 700 s left, less than a wave may take (840 s: node, drain, "
                             "capacity timeouts and 420 s); the next invocation goes on")
    assert cluster.annotation("node-c") is None and not cluster.unschedulable("node-c")
    second = cluster.run(**env)
    assert outcomes(second)["node-c"] == "partitioned" and cluster.transport.seen == NAMES


def test_the_api_servers_clock_set_back_mid_wave_gives_the_invocation_no_more_time(cluster):
    """FC ends the invocation on its own time; the API server's clock, which the records are timed on, may be
    set back (an NTP step) while a wave runs. The invocation's time was counted on the server's clock too, so
    an hour's step back read as an hour more: an invocation whose time is one wave's (template.yml's default)
    started a second wave that FC would cut, the node left cordoned mid-drain. It is counted on the
    invocation's own clock, and the step starts nothing."""
    cluster.add_nodes()
    cluster.now[0], step = 1767225600.0, [0.0]  # 2026-01-01: an hour back is still a Date a record can hold
    cluster.api.clock = lambda: cluster.now[0] - step[0]  # the API server's clock: the test's, less the step
    played = cluster.transport.run

    def applied_as_the_server_clock_steps_back(targets):
        step[0] = 3600.0
        return played(targets)

    cluster.transport.run = applied_as_the_server_clock_steps_back
    first = cluster.run()
    assert sorted(outcomes(first).values()) == ["deferred", "deferred", "partitioned"], first.nodes
    waiting = [n["reason"] for n in first.nodes if n["outcome"] == "deferred"]
    assert all("less than a wave may take" in r for r in waiting), waiting


def test_the_function_timeout_from_fc_sets_the_invocations_time(cluster):
    """Without the setting, the FC context's ``function.timeout`` is the invocation's time; the template's
    default (one wave's worst case) runs one wave."""
    from types import SimpleNamespace

    from functions.base import settings as settings_mod

    context = SimpleNamespace(function=SimpleNamespace(timeout=7200))
    assert settings_mod.invocation_s(load_settings({}, context)) == 7200
    assert settings_mod.invocation_s(load_settings({})) == LEASE
    assert settings_mod.invocation_s(load_settings({"ACK_MIG_INVOCATION_TIMEOUT_S": "900"}, context)) == 900
    # never past what FC enforces
    assert settings_mod.invocation_s(load_settings({"ACK_MIG_INVOCATION_TIMEOUT_S": "9000"}, context)) == 7200
    assert settings_mod.invocation_s(load_settings({"ACK_MIG_INVOCATION_TIMEOUT_S": "9000"})) == 9000
    cluster.add_nodes()
    assert outcomes(cluster.run()) == {"node-a": "partitioned", "node-b": "deferred", "node-c": "deferred"}


class PausableSnapshot(InventoryLookup):
    """The ACK API's node pools, whose pause label an operator sets (or removes) while a run goes on."""

    paused = False

    def nodepools(self, cluster_id):
        pools = super().nodepools(cluster_id)
        if not self.paused:
            return pools
        return [p.model_copy(update={"labels": dict(p.labels, **{"ack-mig-hook/paused": "true"})}) for p in pools]


def test_a_paused_pool_starts_nothing_its_node_in_progress_finishes_and_resume_goes_on(cluster):
    import json

    from functions.decision.waves import PROGRESS_ANNOTATION, Progress

    cluster.add_nodes()
    # node-b was cordoned and drained by a run that was killed (its lease is over)
    record = Progress("sequence=%s" % NEW, "drained", True, 900.0, "", "killed-run", 950.0)
    cluster.api.update_node("node-b", lambda node: (node["metadata"].setdefault("annotations", {}).update(
        {PROGRESS_ANNOTATION: record.to_annotation()}), node.setdefault("spec", {}).update(unschedulable=True)))
    paused = snapshot(pool_labels={"ack-mig-hook/paused": "true"})
    first = cluster.run(inventory=paused, ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    assert outcomes(first) == {"node-a": "deferred", "node-b": "partitioned", "node-c": "deferred"}
    assert cluster.transport.seen == ["node-b"] and not cluster.unschedulable("node-b")
    by = {d.node_name: d.reason for d in first.decisions}
    for n in ("node-a", "node-c"):
        assert "paused: rollout of pool" in by[n] and "ack-mig-hook/paused=true" in by[n], by[n]
        assert cluster.annotation(n) is None
    assert json.loads(cluster.api.nodes["node-b"]["metadata"]["annotations"][PROGRESS_ANNOTATION])["step"] == "done"
    again = cluster.run(inventory=paused, ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    assert outcomes(again) == {"node-a": "deferred", "node-b": "skipped", "node-c": "deferred"}
    assert cluster.transport.seen == ["node-b"]
    resumed = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")  # the label removed
    assert outcomes(resumed) == {"node-a": "partitioned", "node-b": "skipped", "node-c": "partitioned"}


def test_a_pause_set_while_a_wave_runs_stops_the_next_waves(cluster):
    cluster.add_nodes()
    lookup = PausableSnapshot.from_dict(snapshot())
    played = cluster.transport.run

    def operator_pauses(targets):  # `ack-mig-hook rollout pause` while node-a is applied
        lookup.paused = True
        return played(targets)

    cluster.transport.run = operator_pauses
    result = cluster.run(lookup=lookup, ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    assert outcomes(result) == {"node-a": "partitioned", "node-b": "deferred", "node-c": "deferred"}
    assert not cluster.unschedulable("node-a") and cluster.transport.seen == ["node-a"]
    assert all(n["reason"].startswith("a running node") and "paused: rollout of pool" in n["reason"]
               for n in result.nodes if n["outcome"] == "deferred")
    lookup.paused = False
    cluster.transport.run = played
    assert outcomes(cluster.run(lookup=lookup, ACK_MIG_INVOCATION_TIMEOUT_S="86400")) == {
        "node-a": "skipped", "node-b": "partitioned", "node-c": "partitioned"}


def test_a_label_changed_during_the_run_ends_its_waves_of_that_pool(cluster):
    cluster.add_nodes()
    lookup = InventoryLookup.from_dict(snapshot())
    changed = InventoryLookup.from_dict(snapshot("7g.40gb"))
    played = cluster.transport.run

    def relabelled(targets):
        lookup.nodepools = changed.nodepools  # the operator sets a new layout meanwhile
        return played(targets)

    cluster.transport.run = relabelled
    result = cluster.run(lookup=lookup, ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    assert outcomes(result) == {"node-a": "partitioned", "node-b": "deferred", "node-c": "deferred"}
    assert "partition labels changed during this invocation (now ack.aliyun.com/gpu-partition-sequence=7g.40gb)" \
        in result.nodes[1]["reason"]


def test_a_pool_whose_wave_moved_no_node_waits_for_the_next_invocation(cluster):
    """A pod the drain rules keep defers the node at its claim: the next wave would take it again, so the
    invocation does not spin on it (its pool's rollout waits on that node, as before)."""
    cluster.add_nodes()
    cluster.api.add_pod("team", "bare", "node-a", gpus=1)  # no controller: it keeps node-a from being drained
    result = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    assert outcomes(result) == {"node-a": "deferred", "node-b": "deferred", "node-c": "deferred"}
    assert cluster.transport.seen == [] and len([r for r in cluster.api.requests if r.path == "/api/v1/pods"]) == 1
