"""The pool's disruption budget holds across invocations (issue 25): a slot of ``max-unavailable`` is taken
on the pool's Lease by a compare-and-swap before a node is cordoned, and everything the cluster shows as
unavailable counts (cordoned by anyone, NotReady, a rollout step of any invocation)."""

import json
import os
import random
import threading
import time

import pytest

from functions.decision import budget as pb
from functions.kube import leases
from functions.kube.client import KubeApi
from functions.decision.waves import KubeNode, Progress
from tests.rollout.conftest import CLUSTER, NEW, POOL, snapshot

TWELVE = ["node-%02d" % i for i in range(12)]
# Seeded schedules per budget in test_overlapping_invocations_never_disrupt_more_than_the_budget: 8 under
# `make test` (about 2 s each on 2 cores: the suite's slowest test at 25); ACK_MIG_TEST_BUDGET_SEEDS=100 samples
# more schedules (seeds 0..N-1, so the first 8 are the ones `make test` runs).
SEEDS = int(os.environ.get("ACK_MIG_TEST_BUDGET_SEEDS", "8"))
LEASE = ("default", "ack-mig-hook-pool-np-mig")


def ids(name):
    return "i-%s" % name.replace("-", "")  # an ECS instance id: i- and letters and digits


def manual(names):
    return json.dumps({"cluster_id": CLUSTER, "nodepool_id": POOL, "instance_ids": [ids(n) for n in names]})


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def slots(api):
    lease = api.leases.get(LEASE)
    return pb.read_slots(lease["metadata"]["annotations"][pb.SLOTS_ANNOTATION]) if lease else {}


# ---- the count, pure ----

def _node(name, unschedulable=False, ready=None, step=None, owner="run-1", drain=True):
    notes = {}
    if step:
        notes["ack-mig-hook/rollout"] = Progress("sequence=x", step, owner=owner, expires=2000.0,
                                                 drain=drain).to_annotation()
    return KubeNode(name, annotations=notes, unschedulable=unschedulable, ready=ready)


def test_what_counts_as_disrupted_whoever_caused_it():
    nodes = [_node("a", unschedulable=True), _node("b", ready=False), _node("c", step="drained"),
             _node("d", step="applying", drain=False), _node("e"), _node("f", step="done")]
    table = {"e": pb.Slot("run-2", 1500.0), "f": pb.Slot("run-1", 1500.0), "gone": pb.Slot("run-3", 1500.0),
             "old": pb.Slot("run-4", 900.0)}
    counted = pb.disrupted(nodes, table, now=1000.0)
    # a: someone's cordon; b: NotReady; c: a drained step; e: a slot taken before its cordon landed
    assert counted == {"a": "cordoned", "b": "NotReady", "c": "rollout step drained", "e": "held by invocation run-2"}
    # d changes without drain (loses no capacity); f's holder ended it (a release that did not land); the
    # slot of a node that is gone and an expired slot count for nothing
    assert pb.admit("d", counted, 5, "np")[0] and not pb.admit("d", counted, 4, "np")[0]
    ok, why = pb.admit("d", counted, 4, "np (gpu)")
    assert "pool np (gpu) is taken: 4 node(s) unavailable, max-unavailable 4" in why and "b: NotReady" in why
    assert pb.admit("a", counted, 1, "np") == (True, "")  # already unavailable: taking it adds nothing
    assert pb.live_slots(nodes, table, now=1000.0) == {"e": table["e"]}


@pytest.mark.parametrize("text", ["[" * 5000, "x" * (pb.MAX_SLOTS_TEXT + 1), "[]", "5", "not json",
                                  '{"a": {"owner": "r", "expires": 1}'])
def test_a_slot_table_that_does_not_read_at_all_is_refused_never_read_as_empty(text):
    """Read as empty, such a table dropped every other run's slot: more runs than the budget got in."""
    with pytest.raises(pb.UnreadableSlots) as err:
        pb.read_slots(text)
    assert "\n" not in str(err.value) and str(err.value).startswith("the slot table ")


@pytest.mark.parametrize("slot", ["3", '{"owner": 1, "expires": 5100}', '{"owner": "r", "expires": "soon"}',
                                  '{"owner": "r", "expires": %s}' % ("9" * 5000), '{"owner": "r", "expires": NaN}',
                                  '{"expires": 5100}', "[1]", "null"])
def test_a_slot_that_does_not_read_is_held_for_one_run_lease_and_the_others_still_count(slot):
    """One 5,000-digit number (Python's int refuses it) or one slot of another shape made the whole table
    read as empty, dropping the other runs' slots; it is held by an unknown run for one run lease now."""
    t = 5000.0
    text = '{"e": %s, "f": {"owner": "run-1", "expires": 5100}}' % slot
    slots = pb.bound(pb.read_slots(text), t, L)
    assert slots == {"e": pb.Slot(pb.UNKNOWN_OWNER, t + L), "f": pb.Slot("run-1", 5100.0)}
    nodes = [_node("e"), _node("f"), _node("g")]
    assert pb.disrupted(nodes, slots, t) == {"e": "held by invocation -", "f": "held by invocation run-1"}
    assert not pb.admit("g", pb.disrupted(nodes, slots, t), 2, "np")[0]
    written = pb.bound(pb.read_slots(pb.write_slots(pb.live_slots(nodes, slots, t), t, L)), t + L + 1, L)
    assert pb.disrupted(nodes, written, t + L + 1) == {}  # written back clamped: it runs out within one lease


# ---- whose clock (issue 36): a slot holds one run lease at most, on the cluster's clock ----

L = 600.0  # a run lease


def test_a_slot_from_a_clock_ahead_counts_until_one_run_lease_from_now():
    """Invocation A's clock runs 5 run leases ahead of B's: its slot, read by B, is live until B's now plus
    one run lease (not A's far expiry, not dropped); once written back clamped, it runs out then."""
    t = 5000.0
    table = {"e": pb.Slot("run-a", t + 5 * L + L)}  # A's now + one lease, on A's clock
    nodes = [_node("e")]
    seen = pb.bound(table, t, L)
    assert seen == {"e": pb.Slot("run-a", t + L)}
    assert pb.disrupted(nodes, seen, t) == {"e": "held by invocation run-a"}
    stored = pb.read_slots(pb.write_slots(table, t, L))  # B writes the table back: clamped there too
    assert stored == {"e": pb.Slot("run-a", t + L)}
    later = pb.bound(stored, t + L + 1, L)
    assert pb.disrupted(nodes, later, t + L + 1) == {} and pb.live_slots(nodes, later, t + L + 1) == {}


def test_a_slot_from_a_clock_behind_keeps_its_own_expiry():
    t = 5000.0
    table = {"e": pb.Slot("run-a", t + 30.0)}  # written by a clock behind: less than a lease left
    assert pb.bound(table, t, L) == table
    assert pb.disrupted([_node("e")], pb.bound(table, t + 31, L), t + 31) == {}


@pytest.mark.parametrize("expires", ["1e15", "Infinity", "-Infinity", "NaN", "1" + "0" * 400, "-5", "true",
                                     '"1e15"', '"soon"', "[1]", '{"a": 1}', "null"])
def test_a_forged_expiry_never_raises_and_holds_one_run_lease_at_most(expires):
    """Anyone who may update Leases can write the slot table: no value of ``expires`` raises or holds a
    node of the pool past one run lease after an invocation read it and wrote it back."""
    text = '{"e": {"owner": "forger", "expires": %s}, "f": {"owner": "run-1", "expires": 5100}}' % expires
    t = 5000.0
    slots = pb.bound(pb.read_slots(text), t, L)
    assert slots["f"] == pb.Slot("run-1", 5100.0)  # the other slot of the table still reads
    assert all(s.expires <= t + L for s in slots.values())
    written = pb.read_slots(pb.write_slots(slots, t, L))
    assert json.loads(pb.write_slots(slots, t, L))  # (finite numbers only: JSON any reader parses)
    nodes = [_node("e"), _node("f")]
    assert "e" not in pb.disrupted(nodes, pb.bound(written, t + L + 1, L), t + L + 1)


def test_lease_names_are_dns_subdomains():
    assert pb.lease_name("np6a0f0b2c1d") == "ack-mig-hook-pool-np6a0f0b2c1d"
    assert pb.lease_name("NP_1/x") == "ack-mig-hook-pool-np-1-x"
    assert len(pb.lease_name("n" * 400)) == 253


def test_node_ready_is_read_from_its_conditions():
    def ready(status):
        return KubeNode.from_object({"metadata": {"name": "n"}, "status": {"conditions": [
            {"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": status}]}}).ready
    assert (ready("True"), ready("False"), ready("Unknown")) == (True, False, False)
    assert KubeNode.from_object({"metadata": {"name": "n"}}).ready is None


# ---- against the test API server ----

def _not_ready(api, name):
    def change(node):
        node.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "Unknown",
                                                         "reason": "NodeStatusUnknown"}]
    api.update_node(name, change)


def test_a_notready_node_takes_the_only_slot(cluster):
    cluster.add_nodes()
    _not_ready(cluster.api, "node-c")
    result = cluster.run(ACK_MIG_MAX_UNAVAILABLE="1")
    assert set(outcomes(result).values()) == {"deferred"}, result.nodes
    reason = dict((n["node_name"], n["reason"]) for n in result.nodes)["node-a"]
    assert "node-c: NotReady" in reason and "max-unavailable 1" in reason
    assert not any(cluster.unschedulable(n) for n in ("node-a", "node-b")) and cluster.transport.seen == []


def test_the_slot_is_given_back_when_the_node_ends_and_the_lease_names_its_holder(cluster):
    cluster.add_nodes()
    result = cluster.run(ACK_MIG_MAX_UNAVAILABLE="3")
    assert set(outcomes(result).values()) == {"partitioned"}
    lease = cluster.api.leases[LEASE]
    assert slots(cluster.api) == {}
    assert lease["spec"]["holderIdentity"] and lease["spec"]["leaseDurationSeconds"] > 0
    assert lease["spec"]["renewTime"].endswith("Z") and lease["metadata"]["annotations"][
        "ack-mig-hook/nodepool-id"] == POOL
    writes = [r for r in cluster.api.requests if r.method == "PUT" and "/leases/" in r.path]
    assert writes and all(r.body["metadata"]["resourceVersion"] for r in writes)  # every write a CAS


def test_a_pause_set_after_planning_is_read_before_the_slot(cluster):
    from functions.cloud.cluster import InventoryLookup

    cluster.add_nodes()
    paused = InventoryLookup.from_dict(snapshot(pool_labels={"ack-mig-hook/paused": "true"}))
    plain = InventoryLookup.from_dict(snapshot())
    calls = []

    class Switch:  # the ACK API: the pool as planned, then paused when read again
        def __getattr__(self, name):
            return getattr(plain, name)

        def nodepools(self, *args, **kwargs):
            calls.append(1)
            return (plain if len(calls) == 1 else paused).nodepools(*args, **kwargs)

    result = cluster.run(lookup=Switch(), ACK_MIG_MAX_UNAVAILABLE="3")
    assert set(outcomes(result).values()) == {"deferred"}, result.nodes
    assert all("paused" in n["reason"] and "resume" in n["reason"] for n in result.nodes)
    assert cluster.transport.seen == [] and not any(cluster.unschedulable(n) for n in ("node-a", "node-b", "node-c"))


def test_without_lease_rights_nothing_is_cordoned(cluster):
    cluster.add_nodes(["node-a"])
    # (only the Lease is written with PUT) RBAC's words, as kube-apiserver's authorizer gives them
    cluster.api.break_next(times=100, status=403, method="PUT", message=(
        'leases.coordination.k8s.io "ack-mig-hook-pool-np-mig" is forbidden: User "ack-mig-hook" cannot update '
        'resource "leases" in API group "coordination.k8s.io" in the namespace "default"'))
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert outcomes(result) == {"node-a": "deferred"} and result.outcome == "retry"
    assert "deploy/rbac.yaml grants leases" in result.nodes[0]["reason"] and not cluster.unschedulable("node-a")
    assert "may not update leases" in result.nodes[0]["reason"]


def _budget(api, tmp_path, owner, offset, lease_s=L):
    """A PoolBudget of invocation ``owner`` whose own clock is ``offset`` seconds off the cluster's."""
    from functions.kube.client import KubeApi
    from functions.rollout.pool_lease import PoolBudget
    from node_bootstrap.kube import load_kubeconfig

    config = load_kubeconfig(api.write_kubeconfig(tmp_path / ("%s.conf" % owner), cert=api.admin_cert()))
    return PoolBudget(KubeApi(config, sleep=lambda s: None), owner, lambda: api.clock() + offset, lease_s)


def _pool(api, names, pool=POOL):
    from functions.decision.waves import POOL_LABEL

    for name in names:
        api.add_node(name, labels={POOL_LABEL: pool})


def _take(budget, node, pool=POOL, limit=1):
    return budget.take(pool, pool, node, limit, budget.clock() + budget.lease_s)


@pytest.mark.parametrize("a_off, b_off", [(-5 * L, 5 * L), (5 * L, -5 * L), (0.0, 3 * L), (-3 * L, 0.0)])
def test_invocations_whose_clocks_differ_count_each_others_slots(kube_api, tmp_path, a_off, b_off):
    """Issue 36: two invocations whose clocks are several run leases apart, either way. The slots are
    compared on the API server's clock (its answers' Date): B counts A's live slot whatever B's clock says,
    and A's slot, never given back (a killed run), runs out one run lease after it was taken."""
    kube_api.clock = lambda: 1767225600.0 + shift[0]  # the cluster's clock, moved by the test
    shift = [0.0]
    _pool(kube_api, ["n-1", "n-2"])
    a, b = _budget(kube_api, tmp_path, "run-a", a_off), _budget(kube_api, tmp_path, "run-b", b_off)
    assert _take(a, "n-1") == ""
    stored = pb.read_slots(kube_api.leases[("default", pb.lease_name(POOL))]["metadata"]["annotations"][
        pb.SLOTS_ANNOTATION])
    assert list(stored) == ["n-1"] and stored["n-1"].owner == "run-a"
    assert stored["n-1"].expires == pytest.approx(kube_api.clock() + L, abs=1)  # the cluster's clock, not A's
    why = _take(b, "n-2")
    assert "max-unavailable 1 (n-1: held by invocation run-a)" in why, why
    shift[0] = L - 2
    assert "held by invocation run-a" in _take(b, "n-2")
    shift[0] = L + 1
    assert _take(b, "n-2") == ""
    assert set(slots(kube_api)) == {"n-2"}  # A's expired slot dropped when B wrote


def _annotate(api, text):
    api.leases[LEASE]["metadata"]["annotations"][pb.SLOTS_ANNOTATION] = text


def test_a_slot_table_with_one_unreadable_slot_never_lets_more_runs_in_than_the_budget(kube_api, tmp_path):
    """max-unavailable 2: run-a holds n-1, and a slot of 5,000 digits sits on n-2. The table read as empty let
    run-b take n-3 (three nodes out) and wrote run-a's slot away; now run-b waits and run-a's slot stays."""
    kube_api.clock = lambda: 1767225600.0
    _pool(kube_api, ["n-1", "n-2", "n-3"])
    a, b = _budget(kube_api, tmp_path, "run-a", 0.0), _budget(kube_api, tmp_path, "run-b", 0.0)
    assert _take(a, "n-1", limit=2) == ""
    table = json.loads(kube_api.leases[LEASE]["metadata"]["annotations"][pb.SLOTS_ANNOTATION])
    _annotate(kube_api, json.dumps(table)[:-1] + ', "n-2": {"owner": "run-x", "expires": %s}}' % ("9" * 5000))
    why = _take(b, "n-3", limit=2)
    assert "max-unavailable 2 (n-1: held by invocation run-a, n-2: held by invocation -)" in why, why
    assert slots(kube_api)["n-1"].owner == "run-a"


def test_a_slot_table_that_does_not_read_takes_no_slot_and_is_not_written_over(kube_api, tmp_path):
    kube_api.clock = lambda: 1767225600.0
    _pool(kube_api, ["n-1", "n-2"])
    a, b = _budget(kube_api, tmp_path, "run-a", 0.0), _budget(kube_api, tmp_path, "run-b", 0.0)
    assert _take(a, "n-1", limit=2) == ""
    _annotate(kube_api, '{"n-1": {"owner": "run-a", "expires": 1767226200}')  # cut short: no JSON
    version = kube_api.leases[LEASE]["metadata"]["resourceVersion"]
    why = _take(b, "n-2", limit=2)
    assert why.startswith("the disruption budget of pool %s cannot be counted: the slot table is not JSON" % POOL)
    assert "kubectl annotate lease -n default %s %s-" % (pb.lease_name(POOL), pb.SLOTS_ANNOTATION) in why
    assert kube_api.leases[LEASE]["metadata"]["resourceVersion"] == version  # nothing written
    assert a.release(POOL, "n-1") is False  # nothing given back that cannot be told apart


def test_a_forged_far_future_slot_blocks_the_pool_for_one_run_lease_at_most(kube_api, tmp_path):
    """Anyone who may update Leases can write ``expires: 1e15`` (or Infinity, or a string): the first
    invocation that reads it counts the node until one run lease from then and writes that back; after it,
    the pool is free again. Nothing raises."""
    kube_api.clock = lambda: 1767225600.0 + shift[0]
    shift = [0.0]
    _pool(kube_api, ["n-1", "n-2", "n-3"])
    b = _budget(kube_api, tmp_path, "run-b", 3 * L)
    assert _take(b, "n-1", limit=3) == "" and b.release(POOL, "n-1") is True  # the Lease exists
    key = ("default", pb.lease_name(POOL))
    with kube_api.lock:
        kube_api.leases[key]["metadata"]["annotations"][pb.SLOTS_ANNOTATION] = (
            '{"n-2": {"owner": "forger", "expires": 1e15}, "n-3": {"owner": "forger", "expires": Infinity}}')
    why = _take(b, "n-1")
    # Infinity does not read as an expiry: that slot is held by an unknown run, for one run lease too
    assert "max-unavailable 1 (n-2: held by invocation forger, n-3: held by invocation -)" in why, why
    clamped = slots(kube_api)
    assert list(clamped) == ["n-2", "n-3"]
    assert all(s.expires == pytest.approx(1767225600.0 + L, abs=1) for s in clamped.values())
    shift[0] = L / 2
    assert "held by invocation forger" in _take(b, "n-1")
    assert slots(kube_api) == clamped  # the clamp written back holds: it does not slide with the reader's now
    shift[0] = L + 1
    assert _take(b, "n-1") == "" and set(slots(kube_api)) == {"n-1"}


class Interleaved:
    """A Kubernetes backend on which ``between`` runs once, after the first read of a Lease: another writer's
    Lease write lands between this invocation's read and its compare-and-swap write."""

    def __init__(self, backend, between):
        self.backend, self.between = backend, [between]

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def get_lease(self, namespace, name):
        lease = self.backend.get_lease(namespace, name)
        if self.between:
            self.between.pop()()
        return lease


def test_a_stopped_runs_slot_goes_back_only_once_run_out_and_only_that_runs(kube_api, tmp_path):
    """What an auto tick that ends a stranded record gives back (functions/rollout/auto_waves.py): the slot of
    the stopped run on that node, only once it has run out on the cluster's clock (the record was judged on
    the invocation's; until then the run may be alive and its slot counts), never another run's. Another
    write of the Lease between the read and the write (a planning claim, on the same Lease) is a 409: read
    again, judged again, given back, the other writer's annotation kept."""
    kube_api.clock = lambda: 1767225600.0 + shift[0]
    shift = [0.0]
    _pool(kube_api, ["n-1", "n-2"])
    a, tick = _budget(kube_api, tmp_path, "run-a", 0.0), _budget(kube_api, tmp_path, "tick-2", 3 * L)
    assert tick.release(POOL, "n-1", holder="run-a") is False  # no Lease yet: none is made to say so
    assert ("default", pb.lease_name(POOL)) not in kube_api.leases
    assert _take(a, "n-1", limit=2) == ""
    assert tick.release(POOL, "n-1", holder="run-a") is False  # live on the cluster's clock: it still counts
    shift[0] = L + 1
    assert tick.release(POOL, "n-1", holder="run-x") is False  # another run's slot stays
    assert set(slots(kube_api)) == {"n-1"}
    c = _budget(kube_api, tmp_path, "run-c", 0.0)
    claim = {"ack-mig-hook/planning": json.dumps({"owner": "run-c", "expires": kube_api.clock() + L})}
    tick.kube = Interleaved(tick.kube, lambda: leases.write(c.kube, "default", c.kube.get_lease(
        "default", pb.lease_name(POOL)), claim))
    puts = len([r for r in kube_api.requests if r.method == "PUT"])
    assert tick.release(POOL, "n-1", holder="run-a") is True
    assert [r.status for r in kube_api.requests if r.method == "PUT"][puts:] == [200, 409, 200]
    lease = kube_api.leases[("default", pb.lease_name(POOL))]
    assert slots(kube_api) == {} and lease["metadata"]["annotations"]["ack-mig-hook/planning"] == claim[
        "ack-mig-hook/planning"]


def test_without_a_server_clock_a_slot_from_a_clock_ahead_still_counts(tmp_path):
    """The snapshot's backend (MemoryKube) has no clock of its own: the invocation's is used, and a slot
    written by a clock ahead counts until one run lease from the reader's now, then runs out."""
    from functions.decision.waves import POOL_LABEL
    from functions.kube.nodes import MemoryKube
    from functions.rollout.pool_lease import PoolBudget

    kube = MemoryKube({n: {"metadata": {"name": n, "labels": {POOL_LABEL: POOL}}} for n in ("n-1", "n-2")})
    now = [5000.0]
    a = PoolBudget(kube, "run-a", lambda: now[0] + 5 * L, L)
    b = PoolBudget(kube, "run-b", lambda: now[0], L)
    assert _take(a, "n-1") == ""
    assert "held by invocation run-a" in _take(b, "n-2")
    now[0] += L - 1
    assert "held by invocation run-a" in _take(b, "n-2")  # the clamp B wrote back: 5000 + L
    now[0] += 2
    assert _take(b, "n-2") == ""


class Jitter:
    """A Kubernetes backend whose every call waits a seeded random moment first: other schedules of the
    same invocations."""

    def __init__(self, backend, rng):
        self.backend, self.rng = backend, rng

    def __getattr__(self, name):
        real = getattr(self.backend, name)
        if not callable(real):
            return real

        def call(*args, **kwargs):
            time.sleep(self.rng.choice((0, 0, 0, 0.0002, 0.001)))
            return real(*args, **kwargs)
        return call


def _overlapping(cluster, seed, limit):
    """3 events at once and, a moment later, 8 more, each naming its own share of the twelve nodes (as a
    scale-out, the timer and a manual run would), each running waves while it has nodes; repeated until every
    node is done. Returns the most nodes the pool ever had disrupted, checked at every node write, and the
    nodes applied."""
    api, rng = cluster.api, random.Random(seed)
    peak = [0]

    def check(name, stored):  # with the server's lock held: the state right after this write
        busy = 0
        for node in api.nodes.values():
            text = (node["metadata"].get("annotations") or {}).get("ack-mig-hook/rollout")
            record = Progress.from_annotation(text)
            busy += bool((node.get("spec") or {}).get("unschedulable")
                         or (record is not None and record.step in ("cordoned", "drained", "applying", "applied")))
        peak[0] = max(peak[0], busy)

    api.on_node_stored = check
    inventory = snapshot(names=TWELVE, ids=ids)
    for _ in range(20):
        todo = [n for n in TWELVE if (cluster.annotation(n) or {}).get("step") != "done"]
        if not todo:
            break
        errors, threads = [], []

        def run(names, seed_k):
            try:
                cluster.run(inventory=inventory, event=manual(names), ACK_MIG_MAX_UNAVAILABLE=str(limit),
                            ACK_MIG_INVOCATION_TIMEOUT_S="86400", kube=Jitter(KubeApi(cluster.config, sleep=lambda s: None),
                                                                                random.Random(seed_k)))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        for count in (3, 8):
            rng.shuffle(todo)
            for share in [todo[i::count] or todo[:1] for i in range(count)]:
                threads.append(threading.Thread(target=run, args=(share, rng.random()), daemon=True))
                threads[-1].start()
            time.sleep(rng.choice((0, 0.001, 0.005)))
        for t in threads:
            t.join(120)
        assert errors == [] and not any(t.is_alive() for t in threads)
    return peak[0], list(cluster.transport.seen)


@pytest.mark.parametrize("limit", [1, 2])
def test_overlapping_invocations_never_disrupt_more_than_the_budget(kube_api, tmp_path, monkeypatch, limit):
    """3 and then 8 invocations at once on a pool of 12, SEEDS seeded schedules for each budget: the pool never
    has more than max-unavailable nodes disrupted; every node ends partitioned, none twice."""
    from functions.rollout import run as rollout
    from tests.rollout.conftest import Cluster

    violations, runs = [], 0
    for seed in range(SEEDS):
        cluster = Cluster(kube_api, tmp_path)
        monkeypatch.setattr(rollout, "clock", cluster.clock)
        monkeypatch.setattr(rollout, "sleep", cluster.sleep)
        _reset(kube_api)
        cluster.add_nodes(TWELVE)
        peak, seen = _overlapping(cluster, seed * 10 + limit, limit)
        runs += 1
        if peak > limit:
            violations.append((seed, peak))
        assert sorted(seen) == TWELVE, (seed, sorted(seen))  # each node applied exactly once
        assert all(cluster.annotation(n)["step"] == "done" and not cluster.unschedulable(n) for n in TWELVE)
        assert slots(kube_api) == {}
        assert all(kube_api.nodes[n]["metadata"]["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == NEW
                   for n in TWELVE)
    assert runs == SEEDS and violations == []


def _reset(api):
    with api.lock:
        api.nodes.clear()
        api.pods.clear()
        api.events.clear()
        api.leases.clear()
        api.requests.clear()


def test_a_running_node_listed_without_a_name_is_matched_by_instance_id(cluster):
    """ACK reports a node name late: the running node is found by its spec.providerID and goes through the
    rollout (cordon, drain) instead of being partitioned in place; an instance no Node claims is new."""
    cluster.add_nodes(["node-a", "node-b"])
    cluster.api.update_node("node-a", lambda n: n["spec"].__setitem__("providerID", "cn-hangzhou.i-nodea"))
    inventory = snapshot(names=["node-a", "node-b"], ids=lambda n: "i-%s" % n.replace("-", ""))
    inventory["nodes"][0]["node_name"] = ""
    inventory["nodes"].append(dict(inventory["nodes"][1], instance_id="i-fresh", node_name=""))
    result = cluster.run(inventory=inventory, ACK_MIG_MAX_UNAVAILABLE="2", dry_run=True)
    by = {d.instance_id: d for d in result.decisions}
    assert by["i-nodea"].node_name == "node-a" and by["i-nodea"].action == "partition"
    assert "through the rollout" in by["i-nodea"].reason
    assert "no Kubernetes node has this instance (spec.providerID)" in by["i-fresh"].reason


def test_provider_ids_as_the_cloud_controller_manager_writes_them():
    from functions.decision.waves import instance_of

    assert instance_of("cn-hangzhou.i-bp1abc") == "i-bp1abc"
    assert instance_of("alicloud://cn-beijing.i-2ze0xyz") == "i-2ze0xyz"
    assert [instance_of(v) for v in ("", None, "aws:///us-east-1a/i-0abc", "cn.i-ABC", "a.b.i-x", "cn.i-x;rm")] == [""] * 6
