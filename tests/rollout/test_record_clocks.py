"""A node's rollout record (``owner``, ``expires``) is written and judged on the API server's clock, as the
pool budget's slots are: an invocation whose own clock is off (an operator's laptop running ``invoke
--kubeconfig``, a host whose NTP broke) neither takes a live run's node over nor keeps a dead run's node
from being taken over. Two invocations against the TLS API server, one on a skewed clock (``run.clock``);
the cluster's clock (its answers' Date) is the test's (tests/rollout/conftest.py)."""

import json

import pytest

from tests.rollout.conftest import snapshot


def lease_s():
    from functions.base.settings import load_settings
    from functions.rollout.run import run_lease_s

    return run_lease_s(load_settings({}))


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def skewed(monkeypatch, cluster, offset):
    """Run what follows on an invocation clock ``offset`` seconds off the cluster's."""
    from functions.rollout import run as rollout

    monkeypatch.setattr(rollout, "clock", lambda: cluster.now[0] + offset)


@pytest.mark.parametrize("offset", ["ahead", "behind"])
def test_an_invocation_on_a_skewed_clock_leaves_a_live_runs_node_to_it(cluster, monkeypatch, offset):
    """Run A (on the cluster's time) drains node-a, held by a PodDisruptionBudget; meanwhile run B, whose
    clock is a run lease and two minutes ahead (A's record read as run out) or two minutes behind (A's
    expiry read as further than a run lease away, so forged), plans and claims the pool. B leaves node-a to A;
    A finishes it, applied once. Before, B took node-a over and both drained and applied it."""
    cluster.add_nodes(["node-a"])
    api = cluster.api
    api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    inventory = snapshot(names=["node-a"])
    shift = lease_s() + 120.0 if offset == "ahead" else -120.0
    seen = {}

    def b_runs_now(n):
        if n == 1:
            cluster.on_sleep = None
            api.add_pod("team", "infer-1", "node-c", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
            skewed(monkeypatch, cluster, shift)
            try:
                seen["b"] = cluster.run(inventory=inventory)
            finally:
                skewed(monkeypatch, cluster, 0.0)

    cluster.on_sleep = b_runs_now
    a = cluster.run(inventory=inventory)
    assert outcomes(seen["b"]) == {"node-a": "deferred"}, seen["b"].nodes
    assert "left to that run" in seen["b"].nodes[0]["reason"], seen["b"].nodes[0]["reason"]
    assert outcomes(a) == {"node-a": "partitioned"}, a.nodes
    assert cluster.transport.seen == ["node-a"] and cluster.annotation("node-a")["step"] == "done"
    evicted = [r.status for r in api.requests if r.method == "POST" and r.path.endswith("/eviction")]
    assert evicted.count(201) == 1, evicted  # drained by A alone (its first try met the budget)


def _held(cluster, name, owner, expires, **fields):
    from functions.decision import waves as rp

    record = dict({"target": "sequence=3g.20gb-3g.20gb", "step": rp.CORDONED, "cordoned": True, "owner": owner,
                   "expires": expires}, **fields)
    notes = cluster.api.nodes[name]["metadata"].setdefault("annotations", {})
    notes[rp.PROGRESS_ANNOTATION] = json.dumps(record)


@pytest.mark.parametrize("offset", [0.5, -0.5], ids=["ahead", "behind"])
def test_a_stopped_runs_node_is_taken_over_once_its_record_runs_out_on_the_cluster_clock(cluster, monkeypatch,
                                                                                      offset):
    """A run that stopped (killed) left node-a cordoned, its record running out one run lease after it
    started, on the cluster's clock. An invocation whose clock is half a run lease off leaves it while it is
    live there and takes it over just after, whatever its own clock says (behind, it read the record live
    for half a lease more; ahead, half a lease early)."""
    lease = lease_s()
    cluster.add_nodes(["node-a"], unschedulable=("node-a",))
    start = cluster.now[0]
    _held(cluster, "node-a", "stopped-run", start + lease)
    inventory = snapshot(names=["node-a"])
    skewed(monkeypatch, cluster, offset * lease)
    cluster.now[0] = start + lease - 60
    early = cluster.run(inventory=inventory)
    assert outcomes(early) == {"node-a": "deferred"} and "stopped-run" in early.nodes[0]["reason"], early.nodes
    assert cluster.transport.seen == []
    cluster.now[0] = start + lease + 1
    late = cluster.run(inventory=inventory)
    assert outcomes(late) == {"node-a": "partitioned"}, late.nodes
    assert cluster.transport.seen == ["node-a"] and not cluster.unschedulable("node-a")


@pytest.mark.parametrize("offset", [1.5, -0.5], ids=["ahead", "behind"])
def test_an_auto_tick_on_a_skewed_clock_ends_a_stranded_record_only_once_it_ran_out(cluster, monkeypatch, offset):
    """functions/rollout/auto_waves.py finish_stranded: an auto change's record (no drain) of a live run is
    left alone by a tick whose clock is off (ahead by more than a run lease it read the record as a stopped
    run's, and ended it under the run still applying), and ended by the first tick after it ran out on the
    cluster's clock."""
    from functions.decision import waves as rp
    from tests.rollout.test_auto_rollout import NAMES, PerGpuNodes, add_auto_nodes, inventory, tick

    lease = lease_s()
    add_auto_nodes(cluster.api, NAMES[:1])
    start = cluster.now[0]
    _held(cluster, NAMES[0], "live-run", start + lease, target="per-gpu=3g.20gb-3g.20gb", step=rp.APPLYING,
          cordoned=False, drain=False)
    skewed(monkeypatch, cluster, offset * lease)
    cluster.now[0] = start + lease - 60
    tick(cluster, PerGpuNodes(cluster.api), lookup=inventory(names=NAMES[:1]))
    assert cluster.annotation(NAMES[0])["step"] == rp.APPLYING and cluster.annotation(NAMES[0])["owner"] == "live-run"
    cluster.now[0] = start + lease + 1
    tick(cluster, PerGpuNodes(cluster.api), lookup=inventory(names=NAMES[:1]))
    record = cluster.annotation(NAMES[0])
    assert record["step"] == rp.DONE and "live-run stopped" in record["reason"], record


def test_status_counts_a_records_age_on_the_cluster_clock(cluster):
    """``status`` from a laptop (here the test process's real clock, decades past the cluster's): a stopped
    node's age counts from its record's ``since`` to the API server's now, the clock it was written on."""
    from functions.base.settings import load_settings
    from functions.cloud.cluster import InventoryLookup
    from functions.commands.status import collect, render
    from functions.decision import waves as rp

    cluster.add_nodes(["node-a"])
    cluster.now[0] = 1000.0 + 2 * 3600 + 5 * 60
    _held(cluster, "node-a", "stopped-run", 1000.0 + lease_s(), step=rp.DRAIN_TIMEOUT, since=1000.0,
          reason="drain-timeout after 900s")
    status = collect(load_settings({}), InventoryLookup.from_dict(snapshot(names=["node-a"])), kube=cluster.kube)
    text = " ".join(render(status, nodes=False).split())
    assert "failed node-a 2h 5m ago: drain-timeout" in text, text


def test_a_date_past_2100_from_the_api_server_is_no_clock_and_the_pool_s_claim_still_excludes(cluster):
    """The reader rule on the answers' ``Date`` (a proxy or a broken clock in front of the API server may send any
    HTTP-date): one in 2153 was taken as the cluster's time, so the planning claim one invocation wrote expired
    after 2100, which its reader refuses as not ours: the second invocation read no claim and planned the pool
    beside the first. A Date no record could hold (past 2100) reads as none, as an unparsable one does: the
    invocation's own clock times the claim, and the second invocation finds the pool claimed."""
    import time

    from functions.rollout.plan_claim import PlanClaims

    cluster.api.clock = lambda: 5.8e9  # 2153-10
    first = PlanClaims(cluster.client(clock=time.time), "tick-1", time.time, 600.0, 300.0)
    second = PlanClaims(cluster.client(clock=time.time), "tick-2", time.time, 600.0, 300.0)
    assert first.take("np-auto", "auto", time.time() + 600).why == ""
    taken = second.take("np-auto", "auto", time.time() + 600)
    assert "tick-1" in taken.why, taken
