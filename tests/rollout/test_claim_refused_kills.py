"""The labelled rollout's claim-refused path and the node-failed alert's mark under a kill at each write
(tests/rollout/test_interrupted.py's Killer): node-a refuses every claim (its annotations filled to the limit by
another party), so a run takes its slot, tells MigRolloutFailed, gives the slot back, plans the pool again
without it and rolls node-b and node-c in its place, then tells the webhook node-a failed and marks that told
in the alert Lease. A run killed after any of those writes, and the runs after it (the same event, as FC's
retries of it), must leave what a run never killed leaves: node-b and node-c done and uncordoned, each applied
once (twice only when the kill fell between an apply and its record), node-a untouched, no slot in the pool's
Lease, and node-a's failure told (a mark without the webhook's line would keep it untold for good)."""

import pytest

from tests.rollout.conftest import NAMES, NEW
from tests.rollout.kills import cleared, timer_run
from tests.rollout.test_claim_refused import add_nodes
from tests.rollout.test_interrupted import LABELLED_LEASE, lease_slots

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]

DAY = 86400.0


def _world(cluster):
    cleared(cluster)
    add_nodes(cluster)


def _run(cluster, url, k=10 ** 6):
    """One run of the timer's payload (time for every wave) with every write through a Killer: (calls, killed)."""
    return timer_run(cluster, k, ACK_MIG_NOTIFY_URL=url)


def _told(hook):
    return [n["node_name"] for line in hook.lines() if line["kind"] == "node-failed" for n in line["nodes"]]


def _marked(api):
    from functions.decision import alert_marks as am

    lease = api.leases.get(("default", am.MARK_LEASE))
    return am.read_text(((lease or {}).get("metadata", {}).get("annotations") or {}).get(am.MARK_ANNOTATION)) \
        if lease else {}


def check_converged(cluster, hook, where, calls):
    api, played = cluster.api, cluster.transport
    for name in ("node-b", "node-c"):
        assert (cluster.annotation(name) or {}).get("step") == "done", (where, name, cluster.annotation(name))
        assert NEW in str(cluster.annotation(name)), (where, name)
    for name in NAMES:  # the replan's node is never left cordoned, the refused one never cordoned
        assert not cluster.unschedulable(name), (where, name)
        notes = api.nodes[name]["metadata"]["annotations"]
        assert "cluster-autoscaler.kubernetes.io/scale-down-disabled" not in notes, (where, name)
    assert cluster.annotation("node-a") is None, where
    assert lease_slots(api, LABELLED_LEASE) == {}, (where, lease_slots(api, LABELLED_LEASE))
    for name in ("node-b", "node-c"):
        twice = any(c == "apply %s" % name for c in calls[-1:])
        assert played.seen.count(name) == (2 if twice else 1), (where, played.seen)
    assert "node-a" not in played.seen, where
    # node-a's failure reached the webhook: marked told only after a line naming it was taken
    assert "node-a" in _told(hook), (where, hook.lines())
    marked = _marked(api)
    assert set(marked) <= {"i-node-a"}, (where, marked)


def test_a_claim_refused_run_killed_after_every_write_converges(cluster):
    from tests.support.webhook import Webhook

    with Webhook() as hook:
        _world(cluster)
        calls, killed = _run(cluster, hook.url())
        assert not killed
        kinds = " | ".join(calls)
        for kind in ('lease {"node-a"', "event MigRolloutFailed", "lease {}", '[(\'unschedulable\', True)]',
                     "apply node-b", "apply node-c", "create lease ack-mig-hook-alerts",
                     "lease ack-mig-hook-alerts"):
            assert kind in kinds, (kind, calls)
        # the refused node's slot goes back before the replan takes node-b's
        assert calls.index("event MigRolloutFailed") < next(i for i, c in enumerate(calls) if '"node-b"' in c), calls
        check_converged(cluster, hook, "never killed", calls)
        points = []
        for k in range(1, len(calls) + 1):
            _world(cluster)
            hook.received.clear()
            done, killed = _run(cluster, hook.url(), k)
            assert killed and done[-1].split(" {")[0] == calls[k - 1].split(" {")[0], (k, done, calls)
            where = "killed after write %d (%s)" % (k, done[-1])
            points.append(where)
            for _ in range(4):  # FC's retries of the event, each past the killed run's leases
                cluster.now[0] += 2 * DAY
                _run(cluster, hook.url())
                if all((cluster.annotation(n) or {}).get("step") == "done" for n in ("node-b", "node-c")):
                    break
            check_converged(cluster, hook, where, done)
        assert len(points) >= 12, points
