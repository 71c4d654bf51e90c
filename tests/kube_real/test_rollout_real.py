"""The rollout end to end on the real kube-apiserver with the hook's credential (deploy/rbac.yaml):
cordon, drain through the Eviction API under PodDisruptionBudgets the real disruption controller
computes, apply, capacity, uncordon, every step recorded in the node annotation."""

import re

import pytest

from tests.kube_real.rollout_harness import SEQUENCE, Harness
from tests.rollout.conftest import NEW

pytestmark = pytest.mark.kube_real


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


@pytest.fixture
def real_world(control_plane, tmp_path):
    from tests.kube_real.worlds import RealWorld

    return RealWorld(control_plane, tmp_path)


def test_a_small_pool_rolls_one_wave_per_invocation(real_world, monkeypatch):
    h = Harness(real_world, monkeypatch, 3)
    h.add_pods("train")
    first = h.run()
    assert list(outcomes(first).values()).count("partitioned") == 1, first.nodes
    done = next(n for n, o in outcomes(first).items() if o == "partitioned")
    node = real_world.node(done)
    assert node["metadata"]["labels"][SEQUENCE] == NEW and not node["spec"].get("unschedulable")
    assert h.annotation(done)["step"] == "done" and h.gpu_pods_on(done) == []
    for _ in range(3):
        h.run()
    assert h.transport.seen == h.names or sorted(h.transport.seen) == h.names
    assert all(h.annotation(n)["step"] == "done" for n in h.names)


def test_a_wave_runs_on_the_harness_time_its_polls_slept(real_world, monkeypatch):
    """The rollout's clock is the API server's, whose Date the harness's sleeps cannot move on the real server:
    the harness runs it on with them (rollout_harness.OnTestTime), so a wave of drain and capacity polls takes
    the time they slept, and an invocation whose time is one wave's is told how little is left after it, not
    the whole wave's time less a few real seconds (the boundary a second wave started on)."""
    from functions.base.settings import WAVE_MARGIN_S, load_settings, wave_s
    from functions.rollout.executor import POLL_S

    h = Harness(real_world, monkeypatch, 2)
    h.add_pods("train")  # its pod terminates until the kubelet ends it: the drain polls at least once
    first = h.run()
    done = next(n for n in first.nodes if n["outcome"] == "partitioned")
    waiting = next(n for n in first.nodes if n["outcome"] == "deferred")
    assert h.slept() >= POLL_S and done["duration_ms"] >= h.slept() * 1000, (h.slept(), done)
    needed = wave_s(load_settings(h.env)) + WAVE_MARGIN_S  # the invocation's time: one wave's (the default)
    left = int(re.search(r"this invocation has (\d+) s left", waiting["reason"]).group(1))
    assert needed - h.slept() - 60 <= left <= needed - h.slept(), (left, needed, h.slept())  # (60: its real seconds)


def test_a_wave_of_twenty_nodes_under_budgets_never_disrupts_more_than_they_allow(real_world, monkeypatch):
    """20 nodes, five at a time; a training job with a GPU pod on every node under maxUnavailable 2 (its
    ReplicaSet's 20 replicas, as the real disruption controller counts them), an inference service with two
    pods on each of four nodes under minAvailable 6, a DaemonSet GPU pod and a CPU pod on every node."""
    h = Harness(real_world, monkeypatch, 20)
    h.add_pods("train")
    h.add_pods("infer", per_node=2, nodes=h.names[:4])
    h.add_pods("web", gpus=0)
    for node in h.names:
        real_world.add_pod(h.ns, "plugin-" + node, node, labels={"app": "plugin"}, gpus=1, owner_kind="DaemonSet",
                           owner_name="plugin")
    real_world.add_pdb(h.ns, "train", {"app": "train"}, max_unavailable=2)
    real_world.add_pdb(h.ns, "infer", {"app": "infer"}, min_available=6)
    disrupted = []

    def count_terminating():
        pods = real_world.pods(h.ns).values()
        for app in ("train", "infer"):
            ending = [p for p in pods if p["metadata"]["labels"].get("app") == app and p["metadata"].get("deletionTimestamp")]
            disrupted.append((app, len(ending)))

    h.before_kubelets = count_terminating
    results = []
    for _ in range(8):
        result = h.run(pool_labels={"ack-mig-hook/max-unavailable": "5"})
        results.append(outcomes(result))
        if all((h.annotation(n) or {}).get("step") == "done" for n in h.names):
            break
    assert all(h.annotation(n)["step"] == "done" for n in h.names), results
    assert len(results) == 4 and all(list(r.values()).count("partitioned") == 5 for r in results), results
    assert sorted(h.transport.seen) == h.names
    for name in h.names:
        node = real_world.node(name)
        assert node["metadata"]["labels"][SEQUENCE] == NEW and not node["spec"].get("unschedulable")
        # what a drain leaves is the DaemonSet pod and the CPU pod; the DaemonSet pod holds a GPU, so it was
        # evicted after the apply (its DaemonSet recreates it on the new instances; this world runs no
        # DaemonSet controller)
        pods = real_world.pods(h.ns)
        plugin = pods.get("plugin-" + name)
        assert plugin is None or plugin["metadata"].get("deletionTimestamp"), name  # gone or on its way
        assert [p for p in h.gpu_pods_on(name) if p != "plugin-" + name] == ["web-%s-0" % name]
        restarted = [e for e in real_world.events(name) if e["reason"] == "MigRolloutRestartGpuDaemons"]
        assert restarted and ("plugin-" + name) in restarted[0]["message"]
    assert max(n for app, n in disrupted if app == "train") == 2  # the budget was used, never overdrawn
    assert max(n for app, n in disrupted if app == "infer") == 2  # 8 pods, 6 must stay
    waits = [e for n in h.names for e in real_world.events(n) if "waiting on PodDisruptionBudget" in e["message"]]
    assert waits, "no drain had to wait for a budget: the test proves less than it says"


def test_a_node_deleted_mid_drain_ends_gone_and_the_pool_goes_on(real_world, monkeypatch):
    """The Node object disappears while its drain waits on a budget (a scale-in, kubectl delete node); the
    pod garbage collector then deletes its pods. The wave's node ends gone (an outcome, not an error: it
    does not stop the pool's rollout) and frees its slot; nothing else is touched; the next invocation goes
    on with the pool."""
    h = Harness(real_world, monkeypatch, 3)
    victim = h.names[0]
    h.add_pods("train", nodes=[victim])
    real_world.add_pdb(h.ns, "train", {"app": "train"}, min_available=1)  # its only pod: the drain waits

    def delete_node(n):
        if n == 2:
            real_world.delete_node(victim)
            for name in h.gpu_pods_on(victim):  # the pod GC: pods bound to a node that is gone
                real_world.cp.finish(h.ns, name)
    h.on_sleep = delete_node
    first = h.run()
    by = {n["node_name"]: n for n in first.nodes}
    assert by[victim]["outcome"] == "gone", by[victim]
    assert "the node was deleted during the rollout" in by[victim]["reason"], by[victim]
    lease = real_world.cp.admin.ok("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/"
                                   "ack-mig-hook-pool-" + h.pool)
    assert lease["metadata"]["annotations"]["ack-mig-hook/slots"] == "{}"  # the slot given back
    assert [o for n, o in outcomes(first).items() if n != victim] == ["deferred", "deferred"]
    assert all(not real_world.node(n)["spec"].get("unschedulable") for n in h.names[1:])
    assert h.transport.seen == []
    h.on_sleep = None
    h.transport.gone.add(victim)
    later = [h.run() for _ in range(3)]
    assert all(h.annotation(n)["step"] == "done" for n in h.names[1:])
    # While ACK still lists the instance as running, the rollout sees a node Kubernetes does not know and
    # partitions it directly, as it does a new node (no pod can be bound to it any more).
    victim_decision = next(d for d in later[0].decisions if d.node_name == victim)
    assert "not a Kubernetes node yet" in victim_decision.reason, victim_decision.reason
    assert h.transport.seen.count(victim) >= 1


def test_two_invocations_that_both_list_before_either_claims_apply_each_node_once(real_world, monkeypatch):
    """tests/rollout/test_concurrency.py's race on the real server: the per-node lease is a merge patch
    carrying the Node's resourceVersion, so one of two runs that listed the same nodes loses each claim
    with a 409 and every node is applied exactly once."""
    import threading

    from tests.rollout.test_concurrency import Gate

    h = Harness(real_world, monkeypatch, 3)
    h.add_pods("train")
    both_listed = threading.Barrier(2, timeout=30)
    results, errors = {}, []

    def invocation(key):
        try:
            results[key] = h.run(kube=Gate(real_world.client(), after_list=both_listed.wait),
                                 ACK_MIG_MAX_UNAVAILABLE="3")
        except BaseException as exc:  # noqa: BLE001 - reported below by name, never a hang
            errors.append(exc)
            both_listed.abort()

    threads = [threading.Thread(target=invocation, args=(k,), daemon=True) for k in ("timer", "event")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads) and errors == []
    assert sorted(h.transport.seen) == h.names  # each node applied exactly once
    for n in h.names:
        ends = sorted(node["outcome"] for r in results.values() for node in r.nodes if node["node_name"] == n)
        assert ends in (["deferred", "partitioned"], ["partitioned", "skipped"]), (n, ends)
        assert h.annotation(n)["step"] == "done" and not real_world.node(n)["spec"].get("unschedulable")


def test_overlapping_invocations_share_the_pools_budget_on_the_real_server(real_world, monkeypatch):
    """tests/rollout/test_pool_budget.py's race on the real server: three events at once, each naming its own
    nodes of a pool of 6 under max-unavailable 1. The slots are taken on the pool's Lease by an update that
    carries its resourceVersion (the real server's 409 decides), so a watcher listing the nodes never sees
    two cordoned at once, and every node is applied exactly once."""
    import threading
    import time

    h = Harness(real_world, monkeypatch, 6)
    peak, stop = [0], threading.Event()

    def watch():
        # One LIST a look: the nodes as etcd held them at one revision. Read one GET at a time, a node uncordoned
        # after its read and the next one cordoned before its own read both counted, two "at once" that never were
        # (seen on a loaded machine: the slot goes back just before the uncordon, and the next run's cordon can
        # land within the six reads).
        names = set(h.names)
        while not stop.is_set():
            nodes = [n for n in real_world.cp.admin.get("/api/v1/nodes")["items"] if n["metadata"]["name"] in names]
            peak[0] = max(peak[0], sum(bool(n["spec"].get("unschedulable")) for n in nodes))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    errors = []
    for _ in range(8):
        todo = [n for n in h.names if (h.annotation(n) or {}).get("step") != "done"]
        if not todo:
            break

        def invocation(names):
            try:
                h.run(names=names, ACK_MIG_MAX_UNAVAILABLE="1", ACK_MIG_INVOCATION_TIMEOUT_S="86400")
            except BaseException as exc:  # noqa: BLE001 - reported below by name, never a hang
                errors.append(exc)

        threads = [threading.Thread(target=invocation, args=(todo[i::3],), daemon=True) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads) and errors == []
    stop.set()
    watcher.join(5)
    assert sorted(h.transport.seen) == h.names  # each node applied exactly once
    assert all(h.annotation(n)["step"] == "done" for n in h.names)
    assert peak[0] == 1  # one at a time, and the watcher did see the cordons
    lease = real_world.cp.admin.ok("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/"
                                   "ack-mig-hook-pool-" + h.pool)
    assert lease["metadata"]["annotations"]["ack-mig-hook/slots"] == "{}" and lease["spec"]["holderIdentity"]
