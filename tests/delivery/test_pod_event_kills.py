"""A pod event's plan under a kill after each of its writes (tests/rollout/test_interrupted.py's Killer: the plan
marker's Lease written and let go, the planning claim, the node's record and the apply), then the next
invocations: another pod's event, then the auto pool timer. No pod's ask may be lost: the killed event's pod and
the pod that asked after it are both given their instances by the next plans, and no marker or planning claim of
the dead invocation outlives its run lease into a later timer run (the pool's Lease holds no live claim of it).

Through ``run_event`` against the test Kubernetes API server and the simulated node of
tests/delivery/test_pod_events.py. The cluster's clock (the test API server's) is the test's: the waits the
invocations make on it (a round's spacing after the last, the client's backoff after a failed write) move it
instead of sleeping, so the matrices cost their runs, not their waits."""

import time

import pytest

from functions.decision import claim_rules as pc, coalesce as co
from tests.delivery.test_auto_pool_e2e import TICK, add_node, seven_gb_node, waiting
from tests.delivery.test_pod_events import (ClusterClock, clock, cluster, pod_event, profiles,  # noqa: F401  (fixtures)
                                            run)
from tests.rollout.test_interrupted import Killed, Killer
from tests.support.failpoints import failpoints
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

pytestmark = [pytest.mark.kube, pytest.mark.timeout(900)]


class _Counted:
    """The event's executor with its apply counted (and killed after) as the Killer's transport is."""

    def __init__(self, inner, killer):
        self.inner, self.killer = inner, killer

    def execute(self, request, decisions):
        self.killer._alive("apply")
        out = self.inner.execute(request, decisions)
        self.killer._count("apply %s" % ",".join(str(d.node_name) for d in decisions))
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _world(server, tmp_path):
    if isinstance(server.clock, ClusterClock):  # the clock fixture's: back on the real time
        server.clock.shift = 0.0
    else:
        server.clock = time.time
    with server.lock:
        for table in (server.nodes, server.pods, server.events, server.leases):
            table.clear()
    add_node(server)
    seven_gb_node(tmp_path)
    waiting(server, "first", "2g.20gb")


def _event(cluster, name, k=10 ** 6):
    server, api, settings, executor, state_file = cluster
    killer = Killer(api, type("T", (), {"name": "local"})(), k)
    try:
        return killer.calls, run(pod_event("llm", name), (server, killer, settings, executor, state_file),
                                 executor=_Counted(executor, killer))
    except Killed:
        return killer.calls, None


def test_a_pod_event_killed_after_every_write_loses_no_pods_ask(cluster, clock, tmp_path):
    server, api, settings, executor, state_file = cluster
    _world(server, tmp_path)
    calls, result = _event(cluster, "first")
    assert result is not None and result.outcome == "done", result and result.reason
    assert "2g.20gb" in profiles(state_file)
    assert any(c.startswith("apply") for c in calls) and any("lease" in c for c in calls), calls
    for k in range(1, len(calls) + 1):
        _world(server, tmp_path)
        done, result = _event(cluster, "first", k)
        assert result is None, (k, calls)
        where = "killed after write %d (%s)" % (k, done[-1])
        waiting(server, "second", "1g.10gb")
        _event(cluster, "second")  # coalesced into the dead holder, or planned
        # the timer's next run, past the dead invocation's run lease (its marker and planning claim hold until then)
        clock.shift += 2 * 86400
        tick = run(TICK, cluster)
        assert tick.outcome in ("done", "skip"), (where, tick.reason)
        held = profiles(state_file)
        assert "2g.20gb" in held and "1g.10gb" in held, (where, held, tick.reason)


@pytest.mark.parametrize("status", [503, None, 409], ids=["5xx", "no-answer", "conflict"])
def test_a_pod_event_whose_each_write_fails_once_loses_no_pods_ask(cluster, clock, tmp_path, status):
    """The same event with its ``k``-th write failing once at the API server (503, the connection closed
    unanswered, 409), for each k (every third a kind in ``make test``: tests/support/failpoints.py); then another
    pod's event and the timer past the run lease: both pods' asks planned."""
    from tests.rollout.test_takeover_refused_kills import FailOnce

    server, api, settings, executor, state_file = cluster
    _world(server, tmp_path)
    calls = _event(cluster, "first")[0]
    for k in failpoints(len(calls), status):
        _world(server, tmp_path)
        failing = FailOnce(api, type("T", (), {"name": "local"})(), k, server, status)
        first = run(pod_event("llm", "first"), (server, failing, settings, executor, state_file),
                    executor=_Counted(executor, failing))
        where = "write %d (%s) failed once with %s: %s" % (k, calls[k - 1], status, first.reason[:200])
        with server.lock:
            assert not [t for t in server._throttles if t[0] > 0], where  # the failure was met
        waiting(server, "second", "1g.10gb")
        _event(cluster, "second")
        clock.shift += 2 * 86400
        tick = run(TICK, cluster)
        held = profiles(state_file)
        assert "2g.20gb" in held and "1g.10gb" in held, (where, held, tick.reason)


def _live_claim(server, now):
    """The pool's planning claim as its Lease holds it, when it is still live at ``now`` (None otherwise)."""
    from functions.decision.budget import lease_name
    from tests.delivery.test_auto_pool_e2e import POOL

    lease = server.leases.get(("default", lease_name(POOL)))
    claim = pc.read_claim(((lease or {}).get("metadata", {}).get("annotations") or {}).get(pc.PLANNING_ANNOTATION))
    return claim if claim is not None and claim.expires > now else None


def test_a_pod_event_killed_after_every_write_frees_its_pool_for_the_next_event_within_its_hold(cluster, tmp_path,
                                                                                                monkeypatch):
    """The holder killed after each of its writes (FC ends the instance): its marker held the pool for a whole
    run lease (the longest run, 37 minutes with the defaults), and every event of the pool meanwhile was
    answered ``coalesced`` into a plan that never came: their pods waited for the auto pool timer. The hold is
    now short (``coalesce.HOLD_S``) and renewed while the holder works, so a dead holder's pool is free within
    it: the next event, that much later, plans the pool (every pod waiting, the dead holder's too). Where the
    dead invocation still holds the pool's planning claim (a node's apply it started may still run), that
    claim, not the marker, keeps the pool until the claim's end: the next event waited for it as long as its
    own invocation allowed (hours, billed, its pod waiting anyway). It waits ``pod_event.CLAIM_WAIT_S`` at most
    (shortened here), ends in one skip naming the claim's holder and its end, and lets the marker go; the
    timer plans both pods once the claim has ended."""
    from functions.pipeline import pod_event
    from functions.rollout.plan_marker import marker_lease
    from tests.delivery.test_auto_pool_e2e import POOL

    server, api, settings, executor, state_file = cluster
    hold = co.HOLD_S
    _world(server, tmp_path)
    calls = _event(cluster, "first")[0]
    monkeypatch.setattr(pod_event, "CLAIM_POLL_S", 0.05)
    monkeypatch.setattr(pod_event, "CLAIM_WAIT_S", 0.3)
    planned = waited = 0
    for k in range(1, len(calls) + 1):
        _world(server, tmp_path)
        done, result = _event(cluster, "first", k)
        assert result is None, (k, calls)
        where = "killed after write %d (%s)" % (k, done[-1])
        server.clock = lambda: time.time() + hold + 1  # one hold on
        now = server.clock()
        lease = server.leases.get(("default", marker_lease(POOL))) or {"metadata": {}}
        marker = co.read_marker((lease["metadata"].get("annotations") or {}).get(co.MARKER_ANNOTATION), now, hold)
        assert not marker.live(now), (where, marker)
        claim = _live_claim(server, now)
        waiting(server, "second", "1g.10gb")
        if claim:  # a node's apply the dead run started may still run: the pool waits for the claim's end
            waited += 1
            second = _event(cluster, "second")[1]
            assert second is not None and second.outcome == "skip", (where, second and second.reason)
            until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(claim.expires))
            assert "invocation %s holds the pool's planning claim until %s" % (claim.owner, until) in second.reason, \
                (where, second.reason)
            assert "waited 0 s for it" in second.reason and "auto pool timer" in second.reason, second.reason
            lease = server.leases[("default", marker_lease(POOL))]
            assert co.read_marker(lease["metadata"]["annotations"][co.MARKER_ANNOTATION], now, hold).holder == "", \
                where  # let go: the next event is not coalesced into a waiter that left
            server.clock = lambda: time.time() + 2 * 86400  # the timer, once the claim has ended
            tick = run(TICK, cluster)
            held = profiles(state_file)
            assert "2g.20gb" in held and "1g.10gb" in held, (where, held, tick.reason)
            continue
        planned += 1
        second = _event(cluster, "second")[1]
        assert second is not None and second.outcome == "done", (where, second and second.reason)
        held = profiles(state_file)
        assert "2g.20gb" in held and "1g.10gb" in held, (where, held, second.reason)
    assert planned >= 2, calls  # a kill before the planning claim and one after it was given back, at least
    assert waited >= 1, calls  # a kill while the claim was held
