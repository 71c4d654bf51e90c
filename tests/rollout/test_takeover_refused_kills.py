"""The refused takeover of a node a killed run left cordoned, under a kill after each write and a failure of each
write (tests/rollout/test_interrupted.py's Killer; the test API server's ``break_next``).

A run is killed mid-node (after node-a's cordon, or after its apply): node-a stays cordoned under the killed run's
record in progress, its slot in the pool's Lease. Another party then fills node-a's annotations to the API
server's 262,144-byte limit, so the next run's takeover (a longer record) is a 422: that run gives the stopped
run's slot back, removes the stale record with its cordon (a write that only shrinks), tells node-a failed
(``claim-refused``, marked told in the alert Lease) and rolls node-b and node-c in its place. That run is in turn
killed after each of its writes, or has one of its writes fail once (503, the connection closed unanswered,
409); the runs after it must converge to the one invariant: no node left cordoned, no record in progress
without a live run, no slot left in the pool's Lease, node-b and node-c done, node-a's failure told at least
once, and not told again by later runs for the same cause once told."""

import pytest

from functions.decision import waves as rp
from tests.rollout.conftest import NAMES, NEW, PlayedNodes
from tests.rollout.test_claim_refused_kills import _run, _told
from tests.rollout.kills import cleared, timer_run
from tests.rollout.test_interrupted import LABELLED_LEASE, Killed, Killer, lease_slots
from tests.rollout.test_record_refused import fill
from tests.support.failpoints import failpoints

pytestmark = [pytest.mark.kube, pytest.mark.timeout(900)]

DAY = 86400.0
# the killed run's last write: (a write it names, how many writes after it)
FIRST = {"cordoned": ("patch node-a [('unschedulable', True)]", 0), "applying": ("apply node-a", 0),
         "applied": ("apply node-a", 1)}


# ``first`` -> the k whose kill left the first run right after that write: the run is the same every time (the
# same world, the same writes), so a matrix rebuilding its world at each point finds k once, not at each point
_FIRST_AT = {}


def _killed_first(cluster, first):
    """The world: three nodes, a pod on node-a, a run killed after ``first`` on node-a, node-a then filled."""
    api = cluster.api
    _reset(cluster)
    calls = []
    known = _FIRST_AT.get(first, 1)
    for k in list(range(known, 50)) + list(range(1, known)):  # the first run, killed right after its ``first`` write
        timer_run(cluster, k, calls=calls)
        if len(calls) > first[1] and first[0] in calls[-1 - first[1]]:
            _FIRST_AT[first] = k
            break
        _reset(cluster)
        calls.clear()
    record = cluster.annotation("node-a")
    assert record and record["step"] in rp.ACTIVE_STEPS and cluster.unschedulable("node-a"), (calls, record)
    assert "node-a" in str(lease_slots(api, LABELLED_LEASE)), lease_slots(api, LABELLED_LEASE)
    cluster.now[0] = record["expires"] + 1  # the killed run's lease is over
    fill(api, "node-a")


def _reset(cluster):
    api = cluster.api
    cleared(cluster)
    cluster.add_nodes()
    api.add_pod("team", "train-0", "node-a", gpus=1, owner_kind="ReplicaSet")
    # a GPU DaemonSet pod (dcgm-exporter): it holds instances an apply destroys, so it is restarted after one
    api.add_pod("gpu-system", "dcgm-exporter-a", "node-a", gpus=1, owner_kind="DaemonSet")


def _converge(cluster, hook):
    for _ in range(4):  # the next timer runs, each past the leases of the run before
        cluster.now[0] += 2 * DAY
        _run(cluster, hook.url())
        if all((cluster.annotation(n) or {}).get("step") == "done" for n in ("node-b", "node-c")) and \
                not any(cluster.unschedulable(n) for n in NAMES):
            break


def _check(cluster, hook, where, persons=()):
    """The invariant (module docstring); ``persons``: nodes whose scale-down opt-out a person set (kept)."""
    api = cluster.api
    for name in NAMES:
        assert not cluster.unschedulable(name), (where, name)
        assert name in persons or rp.SCALE_DOWN_DISABLED not in api.nodes[name]["metadata"]["annotations"], \
            (where, name)
        record = cluster.annotation(name)
        assert record is None or record["step"] not in rp.ACTIVE_STEPS, (where, name, record)
    for name in ("node-b", "node-c"):
        assert (cluster.annotation(name) or {}).get("step") == "done", (where, name, cluster.annotation(name))
        assert NEW in str(cluster.annotation(name)), (where, name)
    assert lease_slots(api, LABELLED_LEASE) == {}, (where, lease_slots(api, LABELLED_LEASE))
    applied = NEW in str(api.nodes["node-a"]["metadata"]["labels"])
    # node-a changed by the killed run's apply: its GPU DaemonSet pod no longer holds the destroyed instances
    assert not applied or ("gpu-system", "dcgm-exporter-a") not in api.pods, (where, "dcgm-exporter-a kept")
    # told at least once; or nothing to tell, the killed run's apply having left node-a in its layout (the next
    # plans skip it) and no record on it
    assert "node-a" in _told(hook) or applied and cluster.annotation("node-a") is None, (where, hook.lines())
    told = len(_told(hook))
    for _ in range(2):  # once told and marked, later runs meeting the same refusal tell it no more
        cluster.now[0] += 2 * DAY
        _run(cluster, hook.url())
    assert len(_told(hook)) == told, (where, _told(hook))
    assert not cluster.unschedulable("node-a"), where


@pytest.mark.parametrize("first", sorted(FIRST), ids=sorted(FIRST))
def test_a_refused_takeover_killed_after_every_write_converges(cluster, first):
    from tests.support.webhook import Webhook

    cluster.transport = PlayedNodes(cluster.api)
    with Webhook() as hook:
        _killed_first(cluster, FIRST[first])
        calls, killed = _run(cluster, hook.url())
        assert not killed
        joined = " | ".join(calls)
        # the stopped run's slot given back, the stale record removed with its cordon, the failure told
        assert "patch node-a [('unschedulable', None)]" in joined, calls
        assert "event MigRolloutFailed" in joined and "lease ack-mig-hook-alerts" in joined, calls
        _check(cluster, hook, "never killed")
        for k in range(1, len(calls) + 1):
            _killed_first(cluster, FIRST[first])
            hook.received.clear()
            done, killed = _run(cluster, hook.url(), k)
            assert killed, (k, calls)
            where = "second run killed after write %d (%s)" % (k, done[-1])
            _converge(cluster, hook)
            _check(cluster, hook, where)


class FailOnce(Killer):
    """The Killer's count of writes, but instead of a kill the ``k``-th write fails once at the API server: the
    test API server's ``break_next`` is armed for that request just before it is sent (``status`` None: the
    connection is closed unanswered, as a restarting API server or a dropped load balancer leaves it)."""

    def __init__(self, kube, transport, k, api, status, calls=None, armed=None):
        super().__init__(kube, transport, 10 ** 6, calls)
        self.api, self.status, self.at = api, status, k
        self.armed = [] if armed is None else armed  # shared with a sibling client: one failure in all

    def _arm(self, method, path):
        if len(self.calls) + 1 == self.at and not self.armed:
            self.armed.append(path)
            self.api.break_next(times=1, status=self.status, method=method, path=path,
                                message="injected failure" if self.status != 409 else
                                "the object has been modified; please apply your changes to the latest version")

    def patch_node(self, name, patch):
        self._arm("PATCH", "/api/v1/nodes/%s" % name)
        return super().patch_node(name, patch)

    def create_lease(self, namespace, lease):
        self._arm("POST", "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % namespace)
        return super().create_lease(namespace, lease)

    def replace_lease(self, namespace, lease):
        self._arm("PUT", "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s"
                  % (namespace, lease["metadata"]["name"]))
        return super().replace_lease(namespace, lease)

    def create_event(self, event):
        self._arm("POST", "/api/v1/namespaces/%s/events" % event["metadata"].get("namespace", "default"))
        return super().create_event(event)

    def sibling(self, *args, **kwargs):
        return FailOnce(self.kube.sibling(*args, **kwargs), self.transport, self.at, self.api, self.status,
                        self.calls, self.armed)


def _failing_run(cluster, url, k, status):
    """One run of the timer's payload whose ``k``-th write fails once."""
    from functions.base.logs import JsonLogger
    from functions.base.settings import load_settings
    from functions.cloud.cluster import InventoryLookup
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from tests.rollout.conftest import TIMER, snapshot

    failing = FailOnce(cluster.kube, cluster.transport, k, cluster.api, status)
    settings = load_settings(dict(cluster.settings_env, ACK_MIG_NOTIFY_URL=url, ACK_MIG_INVOCATION_TIMEOUT_S="86400"))
    run_event(TIMER, settings, inventory=InventoryLookup.from_dict(snapshot()), logger=JsonLogger("OFF"),
              kube=failing, executor=DeliveryExecutor.from_settings(settings, transport=failing))
    return failing.calls


@pytest.mark.parametrize("first", ["cordoned", "applied"])
@pytest.mark.parametrize("status", [503, None, 409], ids=["5xx", "no-answer", "conflict"])
def test_a_refused_takeover_whose_each_write_fails_once_converges(cluster, status, first):
    """The takeover's run with its ``k``-th write failing once (503, no answer, 409), for each k, then the runs
    after it: the same invariant as under a kill."""
    from tests.support.webhook import Webhook

    cluster.transport = PlayedNodes(cluster.api)
    with Webhook() as hook:
        _killed_first(cluster, FIRST[first])
        calls = _run(cluster, hook.url())[0]
        for k in failpoints(len(calls), status):
            _killed_first(cluster, FIRST[first])
            hook.received.clear()
            done = _failing_run(cluster, hook.url(), k, status)
            where = "write %d (%s) failed once with %s" % (k, calls[k - 1], status)
            with cluster.api.lock:
                assert not [t for t in cluster.api._throttles if t[0] > 0], where  # the failure was met
            _converge(cluster, hook)
            _check(cluster, hook, where + "; the run wrote " + " | ".join(done))


@pytest.mark.parametrize("status", [503, None, 409], ids=["5xx", "no-answer", "conflict"])
def test_a_record_refused_run_whose_each_write_fails_once_converges(cluster, status):
    """tests/rollout/test_record_refused.py's first case (node-a filled as it applies: its end with the reason no
    longer fits) with its ``k``-th write failing once, for each k, then the timer's next runs: every node
    uncordoned and in its layout, node-a's record done or gone, node-b and node-c done, no slot, the person's
    opt-out on node-a kept."""
    from functions.base.logs import JsonLogger
    from functions.base.settings import load_settings
    from functions.cloud.cluster import InventoryLookup
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from tests.rollout.conftest import OLD, TIMER, capacity, node_labels, snapshot
    from tests.rollout.test_record_refused import OPT_OUT, FillsWhenApplied, converged

    played = PlayedNodes(cluster.api)
    cluster.transport = FillsWhenApplied(played, "node-a", 0)

    def world():
        _reset(cluster)
        with cluster.api.lock:
            cluster.api.nodes.clear()
            cluster.api.pods.clear()
        for n in NAMES:
            cluster.api.add_node(n, labels=node_labels(OLD), capacity=capacity(OLD),
                                 annotations={OPT_OUT: "true"} if n == "node-a" else None)

    def run(k=10 ** 6):
        failing = FailOnce(cluster.kube, cluster.transport, k, cluster.api, status)
        settings = load_settings(dict(cluster.settings_env, ACK_MIG_INVOCATION_TIMEOUT_S="86400"))
        run_event(TIMER, settings, inventory=InventoryLookup.from_dict(snapshot()), logger=JsonLogger("OFF"),
                  kube=failing, executor=DeliveryExecutor.from_settings(settings, transport=failing))
        return failing.calls

    world()
    calls = run()
    for k in failpoints(len(calls), status):
        world()
        run(k)
        where = "write %d (%s) failed once with %s" % (k, calls[k - 1], status)
        with cluster.api.lock:
            assert not [t for t in cluster.api._throttles if t[0] > 0], where
        for _ in range(4):
            cluster.now[0] += 2 * DAY
            run()
        converged(cluster, where)


def _named(hook):
    """The nodes any line names (a stop is told as ``rollout-stopped``, a failure as ``node-failed``)."""
    return [n.get("node_name") for line in hook.lines() for n in line.get("nodes") or []] + \
        [line.get("node_name") for line in hook.lines() if line.get("node_name")] + \
        [str(line.get("reason") or "") for line in hook.lines()]


def test_a_stop_that_no_longer_fits_killed_after_every_write_converges(cluster):
    """tests/rollout/test_record_refused.py's drain-timeout case (node-a's drain waits on a PodDisruptionBudget
    while its annotations fill to the limit: its stop record, even without its reason, no longer fits) killed
    after each write, then the timer's next runs. The stop used to be removed with the record, and node-a's claim,
    shorter than that stop, fitted again: every run claimed node-a, cordoned and drained it for the drain
    timeout, and removed its record again, node-b and node-c waiting for good. Now the stop is recorded short:
    node-a is a stop a person sees, as any drain-timeout, drained once. After any kill: no node cordoned, no
    record in progress, no slot, node-a's pod never evicted, node-a's record a stop or none, its end told."""
    from tests.rollout.test_record_refused import OPT_OUT
    from tests.support.webhook import Webhook

    cluster.transport = PlayedNodes(cluster.api)
    drains = []

    def world():
        _reset(cluster)
        api = cluster.api
        with api.lock:
            api.pods.clear()
        api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet", labels={"app": "train"})
        api.add_pdb("team", "train", {"app": "train"}, max_unavailable=0)
        api.update_node("node-a", lambda node: node["metadata"].setdefault("annotations", {}).update({OPT_OUT: "true"}))
        cluster.settings_env = dict(cluster.settings_env, ACK_MIG_DRAIN_TIMEOUT_S="10")
        base = len(cluster.sleeps)
        # grown by another party as the drain first waits (test_record_refused.py's world)
        cluster.on_sleep = lambda count: fill(api, "node-a") if count == base + 1 else None
        drains.clear()

    def stops_told():
        return sum(1 for line in hook.lines() if line["kind"] == "rollout-stopped"
                   and "node-a" in [n.get("node_name") for n in line["nodes"]])

    def check(where, told=True, twice=False):
        api = cluster.api
        for name in NAMES:
            assert not cluster.unschedulable(name), (where, name)
            record = cluster.annotation(name)
            assert record is None or record["step"] not in rp.ACTIVE_STEPS, (where, name, record)
        for name in ("node-b", "node-c"):
            assert rp.SCALE_DOWN_DISABLED not in api.nodes[name]["metadata"]["annotations"], (where, name)
        assert api.nodes["node-a"]["metadata"]["annotations"][OPT_OUT] == "true", where
        assert (cluster.annotation("node-a") or {}).get("step") in (None, rp.DRAIN_TIMEOUT), where
        assert ("team", "train") in api.pods and "node-a" not in cluster.transport.seen, where
        assert lease_slots(api, LABELLED_LEASE) == {}, (where, lease_slots(api, LABELLED_LEASE))
        assert not told or "node-a" in " ".join(_named(hook)), (where, hook.lines())
        # a stop left on node-a told once (twice only when a run was killed after the webhook took it, before its
        # mark); a node-a whose record went (record-refused) stops nothing and is told as a failed node
        stopped = (cluster.annotation("node-a") or {}).get("step") == rp.DRAIN_TIMEOUT
        assert not (told and stopped) or stops_told() in ((1, 2) if twice else (1,)), (where, hook.lines())
        before = stops_told()
        cordons = sum(1 for e in api.events.values() if e["reason"] == "MigRolloutCordon"
                      and e["involvedObject"]["name"] == "node-a")
        for _ in range(2):  # the stop holds: later runs neither claim nor cordon node-a again
            cluster.now[0] += 2 * DAY
            calls = _run(cluster, hook.url())[0]
            assert not any(c.startswith("patch node-a") for c in calls), (where, calls)
        assert cordons == sum(1 for e in api.events.values() if e["reason"] == "MigRolloutCordon"
                              and e["involvedObject"]["name"] == "node-a"), where
        assert stops_told() == before, (where, hook.lines())  # once told and marked, never again

    with Webhook() as hook:
        world()
        calls, killed = _run(cluster, hook.url())
        assert not killed and "patch node-a [('unschedulable', None)]" in " | ".join(calls), calls
        assert cluster.annotation("node-a")["step"] == rp.DRAIN_TIMEOUT, cluster.annotation("node-a")
        check("never killed")
        stop = calls.index("patch node-a [('unschedulable', None)]") + 1
        for k in range(1, len(calls) + 1):
            world()
            hook.received.clear()
            done, killed = _run(cluster, hook.url(), k)
            assert killed, (k, calls)
            where = "killed after write %d (%s)" % (k, done[-1])
            for _ in range(3):
                cluster.now[0] += 2 * DAY
                _run(cluster, hook.url())
            # a run killed after the stop's record, before its notification: the next run, halted by that record,
            # tells it (level-triggered), once
            check(where, twice="create lease ack-mig-hook-alerts" in done[-1])


@pytest.mark.parametrize("status", ["kill", 503, None, 409], ids=["kill", "5xx", "no-answer", "conflict"])
def test_a_tick_ending_stranded_records_that_no_longer_fit_converges(cluster, status):
    """tests/rollout/test_stranded_kills.py's stranded auto records (a stopped run's, at applying, its opt-out and
    run-out slot on each node) on nodes another party has since filled to the annotation limit
    (tests/rollout/test_record_refused.py's last case), with the tick killed after each write, or each write
    failing once: after the next ticks every record is final or gone, no opt-out and no slot is left."""
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from functions.base.logs import JsonLogger
    from functions.base.settings import load_settings
    from tests.rollout.test_auto_rollout import NAMES as AUTO, TICK, PerGpuNodes, inventory
    from tests.rollout.test_stranded_kills import _stranded_world

    def world():
        _stranded_world(cluster, 0)
        for name in AUTO[:2]:
            fill(cluster.api, name)

    def tick(k=10 ** 6, failing=False):
        transport = PerGpuNodes(cluster.api)
        killer = (FailOnce(cluster.kube, transport, k, cluster.api, status) if failing
                  else Killer(cluster.kube, transport, k))
        settings = load_settings(dict(cluster.settings_env))
        try:
            run_event(TICK, settings, inventory=killer.lookup(inventory(names=AUTO[:2])), logger=JsonLogger("OFF"),
                      kube=killer, executor=DeliveryExecutor.from_settings(settings, transport=killer))
        except Killed:
            pass
        return killer.calls

    world()
    calls = tick()
    assert any(c.startswith("patch auto-a") for c in calls), calls
    # the ends written without their reason (they no longer fit with one), the run-out slots given back
    assert all(cluster.annotation(n) is None or cluster.annotation(n)["reason"] == "" for n in AUTO[:2]), calls
    assert len(calls) >= 3, calls
    for k in range(1, len(calls) + 1) if status == "kill" else failpoints(len(calls), status):
        world()
        done = tick(k, failing=status != "kill")
        where = "write %d (%s), %s" % (k, calls[k - 1], status)
        cluster.now[0] += 2 * 3600  # past the killed run's lease
        for _ in range(3):
            tick()
            cluster.now[0] += 60
        for name in AUTO[:2]:
            record = cluster.annotation(name)
            assert record is None or record["step"] not in rp.ACTIVE_STEPS, (where, name, record, done)
            assert rp.SCALE_DOWN_DISABLED not in cluster.api.nodes[name]["metadata"]["annotations"], (where, name)
            assert not cluster.unschedulable(name), (where, name)
        assert lease_slots(cluster.api) == {}, (where, lease_slots(cluster.api))
