"""The run that writes a stop record and tells it, killed after each of its writes (tests/rollout/
test_interrupted.py's Killer), and the timer's runs after it: node-a's apply fails (gpu-busy), so its record ends
``failed`` and the pool's rollout stops. Whatever the kill, the stop reaches the webhook (at least once: the run
that wrote it, or the first later run that reads the record untold, ``functions.pipeline.notify``), and a record
is never told twice by runs one after the other, but where the kill fell between the webhook's 2xx and the mark's
write: no run can tell that kill from one before the line, so the next run tells it again (docs/operations.md,
Notifications: the price of at least once)."""

import pytest

from functions.decision import alert_marks as am
from tests.rollout.kills import cleared, timer_run
from tests.rollout.test_claim_refused_kills import _marked

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]

DAY = 86400.0
MARKS = "create lease %s" % am.MARK_LEASE  # the first mark's write: the Lease made after the line went out


def _world(cluster):
    cleared(cluster)
    cluster.transport.fail = {"node-a"}  # its apply fails for good: the record ends failed and stays
    cluster.add_nodes()


def _run(cluster, url, k=10 ** 6):
    """One timer run with every write through a Killer: (the writes, whether it was killed)."""
    return timer_run(cluster, k, ACK_MIG_NOTIFY_URL=url)


def _told(hook):
    """Each rollout-stopped line's nodes, by name."""
    return [n["node_name"] for line in hook.lines() if line["kind"] == "rollout-stopped" for n in line["nodes"]]


def test_the_telling_run_killed_after_every_write_tells_each_stop_once(cluster):
    from tests.support.webhook import Webhook

    with Webhook() as hook:
        _world(cluster)
        calls, killed = _run(cluster, hook.url())
        assert not killed and _told(hook) == ["node-a"], (calls, hook.lines())
        assert (cluster.annotation("node-a") or {}).get("step") == "failed", cluster.annotation("node-a")
        assert any(c.startswith(MARKS) for c in calls), calls
        points = []
        for k in range(1, len(calls) + 1):
            _world(cluster)
            hook.received.clear()
            done, killed = _run(cluster, hook.url(), k)
            assert killed, (k, done)
            where = "killed after write %d (%s)" % (k, done[-1])
            points.append(where)
            for _ in range(3):  # the timer's runs after it, each past the killed run's leases
                cluster.now[0] += 2 * DAY
                _run(cluster, hook.url())
            record = cluster.annotation("node-a") or {}
            assert record.get("step") == "failed", (where, record)
            # told at least once, and marked told as the record that stays (whichever run wrote it)
            assert "node-a" in _told(hook), (where, hook.lines())
            assert _marked(cluster.api)[am.stop_id("node-a")]["key"] == am.stop_key("node-a", record["owner"]), where
            # never twice, but for a kill between the line's 2xx and the mark's write
            twice = done[-1].startswith(MARKS)
            assert _told(hook).count("node-a") == (2 if twice else 1), (where, hook.lines())
        assert len(points) >= 8, points
