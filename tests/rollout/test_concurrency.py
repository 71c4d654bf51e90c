"""Overlapping invocations (the timer and an event, a retried event, a run that outlasts the timer) against
the TLS API server, which refuses a write on a stale resourceVersion with 409 as kube-apiserver does: the
per-node lease is a compare-and-swap, so each node is applied exactly once."""

import threading

from tests.rollout.conftest import NAMES, NEW, snapshot


class Gate:
    """A Kubernetes backend that runs ``after_list`` once its node listing is complete, and ``after_get``
    after a node read (name, answer): a place to hold one invocation while another one moves."""

    def __init__(self, backend, after_list=None, after_get=None):
        self.backend, self.after_list, self.after_get = backend, after_list, after_get

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def list_nodes(self, *args, **kwargs):
        out = self.backend.list_nodes(*args, **kwargs)
        if self.after_list is not None:
            hook, self.after_list = self.after_list, None  # the planning listing only
            hook()
        return out

    def get_node(self, name):
        out = self.backend.get_node(name)
        if self.after_get is not None:
            self.after_get(name, out)
        return out


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def test_two_invocations_that_both_list_before_either_claims_apply_each_node_once(cluster):
    cluster.add_nodes()
    for n in NAMES:
        cluster.api.add_pod("team", "train-%s" % n, n, gpus=1, owner_kind="ReplicaSet")
    both_listed = threading.Barrier(2, timeout=30)
    results, errors = {}, []

    def invocation(key):
        try:
            gate = Gate(cluster.client(), after_list=both_listed.wait)
            results[key] = cluster.run(kube=gate, ACK_MIG_MAX_UNAVAILABLE="3")
        except BaseException as exc:  # noqa: BLE001 - reported below by name, never a hang
            errors.append(exc)
            both_listed.abort()

    threads = [threading.Thread(target=invocation, args=(k,), daemon=True) for k in ("timer", "event")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads) and errors == []
    assert sorted(cluster.transport.seen) == NAMES  # each node applied exactly once
    for n in NAMES:
        ends = sorted((node["outcome"], node["reason"]) for r in results.values() for node in r.nodes
                      if node["node_name"] == n)
        assert [o for o, _ in ends] in (["deferred", "partitioned"], ["partitioned", "skipped"]), (n, ends)
        loser = next(reason for o, reason in ends if o != "partitioned")
        # what the losing run's claim found, or its next wave's plan: the node is the other run's, or done
        assert any(why in loser for why in ("took this node", "finished this node meanwhile", "left to that run",
                                            "this node is done")), loser
        assert cluster.annotation(n)["step"] == "done" and not cluster.unschedulable(n)


def test_a_claim_on_a_node_another_run_took_meanwhile_is_refused_by_its_version(cluster):
    """Run A reads node-a to claim it; before A writes, run B (which listed after A) claims and finishes
    it. A's claim carries the version it read: 409, A reads again and finds the node done."""
    cluster.add_nodes(["node-a"])
    inventory = snapshot(names=["node-a"])
    other = {}

    def b_runs_now(name, answer):
        if not other:
            other["b"] = cluster.run(inventory=inventory)

    a = cluster.run(inventory=inventory, kube=Gate(cluster.client(), after_get=b_runs_now))
    assert outcomes(other["b"]) == {"node-a": "partitioned"}
    assert outcomes(a) == {"node-a": "skipped"} and "finished this node meanwhile" in a.nodes[0]["reason"]
    assert cluster.transport.seen == ["node-a"]
    conflicts = [r for r in cluster.api.requests if r.method == "PATCH" and r.status == 409]
    assert conflicts and conflicts[0].body["metadata"]["resourceVersion"]  # the claim carried its version


def test_every_progress_write_carries_the_version_and_a_change_by_the_node_is_retried(cluster):
    """The node's own label patch during the apply moves the resourceVersion: the next record write gets
    409, reads again, finds the record still this run's, and writes again."""
    cluster.add_nodes(["node-a"])
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    assert outcomes(result) == {"node-a": "partitioned"}
    patches = [r for r in cluster.api.requests if r.method == "PATCH"]
    assert all(r.body["metadata"].get("resourceVersion") for r in patches)
    statuses = [r.status for r in patches]
    assert 409 in statuses and statuses[-1] == 200
    assert cluster.api.nodes["node-a"]["metadata"]["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == NEW


def test_a_run_whose_lease_ran_out_leaves_the_node_to_the_run_that_took_it_over(cluster):
    """Run A waits on a PodDisruptionBudget past its own lease; run B takes node-a over and finishes it.
    A's next record write meets B's version: A leaves the node, nothing is applied twice."""
    cluster.add_nodes(["node-a"])
    api = cluster.api
    api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    inventory = snapshot(names=["node-a"])
    seen = {}

    def a_is_stuck(n):
        if n == 1:
            cluster.on_sleep = None
            cluster.now[0] = cluster.annotation("node-a")["expires"] + 1  # A's lease has run out
            api.add_pod("team", "infer-1", "node-c", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
            seen["b"] = cluster.run(inventory=inventory)

    cluster.on_sleep = a_is_stuck
    a = cluster.run(inventory=inventory)
    assert outcomes(seen["b"]) == {"node-a": "partitioned"}
    assert outcomes(a) == {"node-a": "deferred"} and "took this node over" in a.nodes[0]["reason"]
    assert cluster.transport.seen == ["node-a"] and cluster.annotation("node-a")["step"] == "done"
    assert not cluster.unschedulable("node-a")


def test_progress_runs_to_the_total_when_a_node_is_found_done_at_its_claim(cluster):
    """The command line's done/total counts every node that gets a result: one another run finished between
    this run's plan and its claim ends skipped, and still counts (progress stopped at 1980/2000 before)."""
    from functions.base.logs import JsonLogger
    from functions.base.settings import load_settings
    from functions.cloud.cluster import InventoryLookup
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from tests.rollout.conftest import TIMER

    cluster.add_nodes(["node-a"])
    inventory = snapshot(names=["node-a"])
    other, seen = {}, []

    def b_runs_now(name, answer):
        if not other:
            other["b"] = cluster.run(inventory=inventory)

    settings = load_settings(dict(cluster.settings_env))
    result = run_event(TIMER, settings, inventory=InventoryLookup.from_dict(inventory),
                       executor=DeliveryExecutor.from_settings(settings, transport=cluster.transport),
                       logger=JsonLogger("OFF"), kube=Gate(cluster.client(), after_get=b_runs_now),
                       progress=lambda node, total: seen.append((node["outcome"], total)))
    assert outcomes(result) == {"node-a": "skipped"} and seen == [("skipped", 1)]


def _record(cluster, name, expires):
    """node ``name`` held by another invocation at step cordoned until ``expires`` (its clock)."""
    from functions.decision import waves as rp

    held = rp.Progress("sequence=" + NEW, rp.CORDONED, owner="someone-else", expires=expires)
    cluster.api.nodes[name]["metadata"].setdefault("annotations", {})[rp.PROGRESS_ANNOTATION] = held.to_annotation()


def test_a_hold_beyond_one_run_lease_is_not_a_live_runs_and_the_node_is_taken_over(cluster):
    """No invocation holds a node past its start plus one run lease: a record that names a later time (forged,
    or a clock far ahead; before 2100, so it reads) is taken over as a killed run's would be, where it used to
    leave the node alone until that time. A hold within one run lease is still left to its owner."""
    from functions.base.settings import longest_run_s, load_settings

    lease = longest_run_s(load_settings({}))
    cluster.add_nodes(["node-a", "node-b"])
    _record(cluster, "node-a", 4102444799.0)  # 2099-12-31
    _record(cluster, "node-b", cluster.now[0] + lease)  # a live run's, as it writes it
    result = cluster.run(inventory=snapshot(names=["node-a", "node-b"]), ACK_MIG_MAX_UNAVAILABLE="2")
    assert outcomes(result) == {"node-a": "partitioned", "node-b": "deferred"}, result.nodes
    assert cluster.transport.seen == ["node-a"] and cluster.annotation("node-a")["step"] == "done"
    assert cluster.annotation("node-b")["owner"] == "someone-else"
