"""A node this hook cordoned whose record can no longer be written: another party fills its annotations to
the API server's 262,144-byte limit while the node is in its wave (an agent's inventory that grows), so the
write that ends the record and lifts the cordon is a 422 ``metadata.annotations: Too long``.

That write used to be logged and forgotten: the node stayed cordoned under a record in progress, the next run's
takeover of it was refused in turn (``claim-refused``), and nothing ever uncordoned it. Now the node ends in a
state a person sees (its record without the reason, or no record, and its cordon lifted either way), with the
reason in its result and Event; the wave's other nodes are not failed by it.

Through ``run_event`` against the test Kubernetes API server (tests/support/kubeapi.py enforces the limit as
apimachinery's ValidateAnnotations does), with the played nodes of tests/rollout/conftest.py."""

import json

import pytest

from functions.decision.waves import PROGRESS_ANNOTATION
from tests.rollout.conftest import NAMES, NEW, OLD, capacity, node_labels
from tests.support.kubeapi import ANNOTATIONS_LIMIT

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]

BIG = "example.com/inventory"


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def reasons(result):
    return {n["node_name"]: n["reason"] for n in result.nodes}


def used(node):
    return sum(len(k.encode()) + len(str(v).encode()) for k, v in node["metadata"].get("annotations", {}).items())


def fill(api, name, spare=0):
    """Another party's annotation grown until the node's annotations are ``spare`` bytes under the limit."""
    def change(node):
        notes = node["metadata"].setdefault("annotations", {})
        notes[BIG] = ""
        notes[BIG] = "x" * (ANNOTATIONS_LIMIT - spare - used(node))
    api.update_node(name, change)


class FillsWhenApplied:
    """The transport, with ``name``'s annotations filled as its apply runs (the node is cordoned, its record
    at step applying)."""

    def __init__(self, played, name, spare):
        self.played, self.name, self.spare, self.seen = played, name, spare, played.seen
        self.requests = played.requests

    def run(self, targets):
        if any(t.node_name == self.name for t in targets):
            fill(self.played.api, self.name, self.spare)
        return self.played.run(targets)

    def __getattr__(self, attr):
        return getattr(self.played, attr)


OPT_OUT = "cluster-autoscaler.kubernetes.io/scale-down-disabled"


def test_a_node_whose_end_record_is_refused_is_uncordoned_and_the_others_go_on(cluster):
    """node-a carries a person's scale-down opt-out (so the end removes nothing of ours) and fills as it applies:
    its end record, with the reason, no longer fits. It ends recorded done without the reason, uncordoned."""
    for n in NAMES:
        cluster.api.add_node(n, labels=node_labels(OLD), capacity=capacity(OLD),
                             annotations={OPT_OUT: "true"} if n == "node-a" else None)
    cluster.transport = FillsWhenApplied(cluster.transport, "node-a", 0)
    result = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    why = reasons(result)["node-a"]
    assert outcomes(result) == {"node-a": "partitioned", "node-b": "partitioned", "node-c": "partitioned"}, why
    assert "its record keeps no reason" in why and "Too long" in why and "\n" not in why, why
    assert not any(cluster.unschedulable(n) for n in NAMES), why
    assert cluster.annotation("node-a")["step"] == "done" and cluster.annotation("node-a")["reason"] == ""
    assert cluster.api.nodes["node-a"]["metadata"]["annotations"][OPT_OUT] == "true"  # the person's, kept
    assert any(e["involvedObject"]["name"] == "node-a" and "Too long" in e["message"] for e in cluster.events())
    cluster.now[0] += 7200
    again = cluster.run()
    assert outcomes(again)["node-a"] == "skipped", reasons(again)
    assert not cluster.unschedulable("node-a")


def test_a_stop_that_no_longer_fits_is_recorded_short_and_lifts_the_cordon(cluster):
    """node-a's drain waits on a PodDisruptionBudget and its annotations fill meanwhile: the drain-timeout record
    is longer than the record in progress even without its reason. It is written short (step, target, since,
    owner: shorter than any record in progress) with the cordon lifted. The record used to be removed (code
    record-refused, stopping nothing), and node-a's claim, shorter than the stop, fitted again: every run claimed,
    cordoned and drained it for the drain timeout and removed its record again, the pool's other nodes waiting
    for good. Now node-a is a stop as any drain-timeout: the next run leaves it, and the pool waits for a person."""
    from functions.rollout.executor import RECORD_REFUSED

    for n in NAMES:
        cluster.api.add_node(n, labels=node_labels(OLD), capacity=capacity(OLD),
                             annotations={OPT_OUT: "true"} if n == "node-a" else None)
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet", labels={"app": "train"})
    cluster.api.add_pdb("team", "train", {"app": "train"}, max_unavailable=0)
    cluster.on_sleep = lambda count: fill(cluster.api, "node-a") if count == 1 else None
    result = cluster.run(ACK_MIG_DRAIN_TIMEOUT_S="10")
    node = {n["node_name"]: n for n in result.nodes}["node-a"]
    assert node["outcome"] == "drain-timeout" and node.get("code") != RECORD_REFUSED, node
    assert "its record keeps only its step" in node["reason"] and "Too long" in node["reason"], node["reason"]
    record = cluster.annotation("node-a")
    assert record["step"] == "drain-timeout" and "expires" not in record and record["owner"], record
    assert not cluster.unschedulable("node-a")
    assert cluster.api.nodes["node-a"]["metadata"]["annotations"][OPT_OUT] == "true"
    assert ("team", "train") in cluster.api.pods and "node-a" not in cluster.transport.seen
    assert not any("node-a" in str(lease.get("spec")) for lease in cluster.api.leases.values())
    cluster.on_sleep = None
    cluster.now[0] += 7200
    cordons = len(cluster.events("MigRolloutCordon"))
    again = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")  # the stop holds: node-a is not claimed again
    assert outcomes(again)["node-a"] == "deferred" and "drain-timeout" in reasons(again)["node-a"], reasons(again)
    assert len(cluster.events("MigRolloutCordon")) == cordons and not cluster.unschedulable("node-a")


def fills_after(cluster, name, writes):
    """The rollout's client, with ``name``'s annotations filled to the limit once its record was written
    ``writes`` times (the claim, then each step)."""
    from functions.kube.client import KubeApi

    api, count = cluster.api, []

    class Filling(KubeApi):
        def patch_node(self, node, patch, *args, **kwargs):
            answer = super().patch_node(node, patch, *args, **kwargs)
            if node == name and PROGRESS_ANNOTATION in str(patch):
                count.append(node)
                if len(count) == writes:
                    fill(api, name)
            return answer

    return Filling(cluster.config, page=2, sleep=cluster.retry_sleeps.append, clock=cluster.clock)


def test_a_refused_step_fails_that_node_alone_uncordoned_and_the_wave_goes_on(cluster):
    """node-a's annotations fill once it is drained: its next step's record is one byte longer and refused.
    The error escaped the wave: node-b, in the same wave, failed with "the Kubernetes API failed" and stayed
    cordoned beside node-a. Now node-a ends failed, recorded without a reason and uncordoned; node-b is rolled."""
    for n in NAMES:
        cluster.api.add_node(n, labels=node_labels(OLD), capacity=capacity(OLD))
    result = cluster.run(kube=fills_after(cluster, "node-a", 2), ACK_MIG_MAX_UNAVAILABLE="2")
    why = reasons(result)
    assert outcomes(result)["node-a"] == "failed", why
    assert outcomes(result)["node-b"] == "partitioned", why
    assert "refused the node's record at step drained" in why["node-a"] and "Too long" in why["node-a"], why
    assert not any(cluster.unschedulable(n) for n in NAMES), why
    assert cluster.annotation("node-a")["step"] == "failed"  # a stop, as any failed node: a person looks
    assert "node-a" not in cluster.transport.seen
    assert not any("node-a" in str(lease.get("spec")) for lease in cluster.api.leases.values())


def test_a_node_whose_every_write_is_refused_says_it_stays_cordoned_and_what_to_do(cluster):
    """A webhook that denies each write of node-a once it is cordoned: not even the record's removal goes
    through. node-a cannot be uncordoned by this run: its result says so, with the commands; node-b goes on."""
    for n in NAMES:
        cluster.api.add_node(n, labels=node_labels(OLD), capacity=capacity(OLD))
    from functions.kube.client import KubeApi

    api, seen = cluster.api, []

    class Denying(KubeApi):
        def patch_node(self, node, patch, *args, **kwargs):
            answer = super().patch_node(node, patch, *args, **kwargs)
            if node == "node-a" and not seen:
                seen.append(node)
                api.break_next(times=50, status=403, method="PATCH", path="/api/v1/nodes/node-a",
                               message='admission webhook "inventory.example.com" denied the request: frozen')
            return answer

    kube = Denying(cluster.config, page=2, sleep=cluster.retry_sleeps.append, clock=cluster.clock)
    result = cluster.run(kube=kube, ACK_MIG_MAX_UNAVAILABLE="2")
    why = reasons(result)
    assert outcomes(result)["node-a"] == "failed" and outcomes(result)["node-b"] == "partitioned", why
    assert "denied the request" in why["node-a"] and "kubectl uncordon node-a" in why["node-a"], why
    assert cluster.unschedulable("node-a") and not cluster.unschedulable("node-b")


def converged(cluster, where):
    """After the runs that follow a kill or a failure: every node uncordoned and in its layout, node-a's record
    done or gone with the person's opt-out kept, node-b and node-c done without ours, no slot held."""
    from tests.rollout.test_interrupted import LABELLED_LEASE, lease_slots

    for name in NAMES:
        assert not cluster.unschedulable(name), (where, name)
        assert NEW in str(cluster.api.nodes[name]["metadata"]["labels"]), (where, name)
    for name in ("node-b", "node-c"):
        assert (cluster.annotation(name) or {}).get("step") == "done", (where, name, cluster.annotation(name))
        assert OPT_OUT not in cluster.api.nodes[name]["metadata"]["annotations"], (where, name)
    assert (cluster.annotation("node-a") or {}).get("step") in (None, "done"), (where, cluster.annotation("node-a"))
    assert cluster.api.nodes["node-a"]["metadata"]["annotations"][OPT_OUT] == "true", where
    assert lease_slots(cluster.api, LABELLED_LEASE) == {}, (where, lease_slots(cluster.api, LABELLED_LEASE))


def test_a_record_refused_run_killed_after_every_write_converges(cluster):
    """The first case under a kill after each write (tests/rollout/test_interrupted.py's Killer), then the runs
    after it, each past the killed run's leases: node-a ends uncordoned, its record done or gone (never in
    progress: no later run could end one that no longer fits), node-b and node-c done, no slot left in the
    pool's Lease, the person's opt-out on node-a kept and ours gone from the others."""
    from tests.rollout.kills import cleared, timer_run

    transport = FillsWhenApplied(cluster.transport, "node-a", 0)

    def world():
        cleared(cluster)
        for n in NAMES:
            cluster.api.add_node(n, labels=node_labels(OLD), capacity=capacity(OLD),
                                 annotations={OPT_OUT: "true"} if n == "node-a" else None)

    def run(k=10 ** 6):
        return timer_run(cluster, k, transport=transport)

    world()
    calls, killed = run()
    assert not killed
    converged(cluster, "never killed")
    points = []
    for k in range(1, len(calls) + 1):
        world()
        done, killed = run(k)
        assert killed, (k, done)
        where = "killed after write %d (%s)" % (k, done[-1])
        points.append(where)
        for _ in range(4):  # the next timer runs, each past the killed run's leases
            cluster.now[0] += 2 * 86400.0
            run()
            if all((cluster.annotation(n) or {}).get("step") == "done" for n in ("node-b", "node-c")) and \
                    not any(cluster.unschedulable(n) for n in NAMES):
                break
        converged(cluster, where)
    assert len(points) >= 10, points


def test_a_stranded_auto_record_whose_end_no_longer_fits_ends_without_its_reason(cluster):
    """An auto pool's records a stopped run left at applying, on nodes whose annotations another party filled to
    the limit since: the end with its reason does not fit, and each record said applying for good, the
    autoscaler's opt-out with it (status: pending; the node never scaled down), each tick's line saying it tries
    again. Now the end is written without its reason where that fits (a record as this hook writes it), else the
    record is removed (a shorter one, as an older version wrote it), the opt-out gone either way."""
    from functions.decision import waves as rp
    from tests.rollout.test_auto_rollout import NAMES as AUTO, PerGpuNodes, add_auto_nodes, inventory, tick, waiting
    from tests.rollout.test_interrupted import strand

    add_auto_nodes(cluster.api, AUTO[:3])
    waiting(cluster.api, 0)
    strand(cluster.api, AUTO[:3])
    full = rp.Progress("per-gpu=3g.20gb-3g.20gb", rp.APPLYING, False, 900.0, "", "a1b2c3d4e5f6", 950.0, drain=False,
                       autoscaler=True).to_annotation()
    cluster.api.update_node(AUTO[1], lambda node: node["metadata"]["annotations"].update({PROGRESS_ANNOTATION: full}))
    for name in AUTO[:2]:
        fill(cluster.api, name)
    result = tick(cluster, PerGpuNodes(cluster.api), lookup=inventory(names=AUTO[:3]))
    assert result.outcome != "retry", result.reason
    for name in AUTO[:3]:
        assert rp.SCALE_DOWN_DISABLED not in cluster.api.nodes[name]["metadata"]["annotations"], name
    assert cluster.annotation(AUTO[0]) is None
    assert cluster.annotation(AUTO[1])["step"] == rp.DONE and cluster.annotation(AUTO[1])["reason"] == ""
    assert cluster.annotation(AUTO[2])["step"] == rp.DONE and "stopped with this node" in \
        cluster.annotation(AUTO[2])["reason"]
