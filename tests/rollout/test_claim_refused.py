"""A wave node whose claim the API server refuses for a reason of its own fails alone (docs/operations.md,
"Each node of the wave").

Another party filled node-a's annotations to within 200 bytes of the API server's 262,144-byte limit, so every
write of the rollout's record on it is a 422 Invalid ``metadata.annotations: Too long`` (an admission webhook
that denies the node's patches answers 403 the same way). The claim cannot leave a record on such a node, so
every plan sees it fresh and puts it first; it failed at its claim and used up the wave's place, and with one
wave per invocation (the template's default) node-b and node-c were deferred by every timer run for good. Now
the refused node fails at once and the wave takes the next node in the same invocation.

Through ``run_event`` (the timer's manual payload) against the test Kubernetes API server, with the played
nodes of tests/rollout/conftest.py."""

import pytest

from tests.rollout.conftest import NAMES, NEW, OLD, capacity, node_labels, snapshot
from tests.support.kubeapi import ANNOTATIONS_LIMIT

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

BIG = "example.com/inventory"  # another party's annotation, e.g. an agent's inventory dump


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def reasons(result):
    return {n["node_name"]: n["reason"] for n in result.nodes}


def add_nodes(cluster, full="node-a"):
    for n in NAMES:
        # within 200 bytes of the limit: the rollout's record (a few hundred bytes) no longer fits
        annotations = {BIG: "x" * (ANNOTATIONS_LIMIT - 200 - len(BIG))} if n == full else {}
        cluster.api.add_node(n, labels=node_labels(OLD), annotations=annotations, capacity=capacity(OLD))


def test_a_node_that_refuses_its_claim_fails_alone_and_the_others_are_rolled_out(cluster):
    add_nodes(cluster)
    seen = []
    for _ in range(3):  # one wave per invocation (the default): node-b, then node-c
        result = cluster.run()
        seen.append(outcomes(result))
        why = reasons(result)["node-a"]
        assert outcomes(result)["node-a"] == "failed", why
        assert why.startswith("cannot claim or cordon: ") and "422" in why and "Too long" in why, why
        assert "\n" not in why
        if all(cluster.annotation(n) and cluster.annotation(n)["step"] == "done" for n in ("node-b", "node-c")):
            break
    assert [s["node-b"] for s in seen[:2]] == ["partitioned", "skipped"], seen
    assert [s["node-c"] for s in seen[:2]] == ["deferred", "partitioned"], seen
    assert cluster.transport.seen == ["node-b", "node-c"]
    assert not any(cluster.unschedulable(n) for n in NAMES)
    assert cluster.annotation("node-a") is None  # nothing written on it, its labels untouched
    assert cluster.api.nodes["node-a"]["metadata"]["labels"] == node_labels(OLD)
    # the pool's budget was given back by the refused node: no slot of node-a is left in the Lease
    assert not any("node-a" in str(lease.get("spec")) for lease in cluster.api.leases.values())
    # an invocation with time for several waves rolls both in one run, node-a refused once
    cluster.api.nodes.clear()
    cluster.api.leases.clear()
    cluster.transport.seen.clear()
    add_nodes(cluster)
    result = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    assert outcomes(result) == {"node-a": "failed", "node-b": "partitioned", "node-c": "partitioned"}
    assert cluster.transport.seen == ["node-b", "node-c"]
    assert [n.get("wave") for n in sorted(result.nodes, key=lambda n: n["node_name"])] == [1, 1, 2]
    assert NEW in str(cluster.annotation("node-c"))


def test_a_webhook_that_denies_one_nodes_claim_leaves_the_wave_to_the_next_node(cluster):
    """A 403 from an admission webhook on node-b's writes: node-b fails with the denial, node-a and node-c are
    rolled in the same invocation (wave 2 planned without node-b, which with no record came first again)."""
    add_nodes(cluster, full=None)
    cluster.api.break_next(times=50, status=403, method="PATCH", path="/api/v1/nodes/node-b")
    result = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    assert outcomes(result) == {"node-a": "partitioned", "node-b": "failed", "node-c": "partitioned"}, reasons(result)
    assert reasons(result)["node-b"].startswith("cannot claim or cordon: ") and "403" in reasons(result)["node-b"]
    assert cluster.transport.seen == ["node-a", "node-c"]
    assert [e["involvedObject"]["name"] for e in cluster.events("MigRolloutFailed")] == ["node-b"]


# A ServiceAccount's user name may be 253 characters long: the message then passes the 300 characters an
# error keeps of it (functions.kube.client), cut before "cannot patch resource".
LONG_USER = "system:serviceaccount:kube-system:" + "ack-mig-hook-" * 17 + "sa"


@pytest.mark.parametrize("user", ["ack-mig-hook", LONG_USER], ids=["user", "long-user"])
def test_rbacs_403_is_not_a_refusal_of_the_nodes_own_and_fails_no_node(cluster, user):
    """A Role without patch on Nodes is every node's cause, not one node's: kube-apiserver words it
    ``nodes "x" is forbidden: User "u" cannot patch resource "nodes" ...``. Taken for the node's own refusal,
    each node of the pool failed in the same run (one alert each, every run); then the wave's first node failed
    with it (an alert, a stopped rollout told). Now no node fails: each is deferred with the permission named
    (verb, resource: read from the call where the message was cut before those words), one write is refused,
    and the event ends retry."""
    add_nodes(cluster, full=None)
    cluster.api.break_next(times=200, status=403, method="PATCH", path="/api/v1/nodes/",
                           message='nodes "node-a" is forbidden: User "%s" cannot patch resource "nodes" '
                                   'in API group "" at the cluster scope' % user)
    result = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    assert set(outcomes(result).values()) == {"deferred"}, outcomes(result)
    assert "may not patch nodes" in reasons(result)["node-a"], reasons(result)
    assert result.outcome == "retry" and result.reason.count("may not patch nodes") == 1, result.reason
    assert cluster.transport.seen == []
    assert len([r for r in cluster.api.requests if r.method == "PATCH"]) == 1
    assert not cluster.events("MigRolloutFailed")


def test_a_refused_takeover_of_a_node_a_killed_run_left_cordoned_lifts_its_cordon(cluster):
    """node-a, left cordoned and drained by a killed run, refuses the takeover's write (its record no longer
    fits). It stayed so for good: cordoned under a record no run could take over or end, holding the pool's only
    slot (max-unavailable 1), node-b and node-c deferred by every run. Now the takeover removes the stopped run's
    record with its cordon (a write that only shrinks the annotations), node-a fails claim-refused, and the pool's
    other nodes are rolled."""
    from functions.decision.waves import PROGRESS_ANNOTATION, Progress

    add_nodes(cluster, full=None)
    record = Progress("sequence=%s" % NEW, "drained", True, 900.0, "", "killed-run", 950.0).to_annotation()
    room = ANNOTATIONS_LIMIT - 20 - len(BIG) - len(PROGRESS_ANNOTATION) - len(record)  # the takeover does not fit
    cluster.api.update_node("node-a", lambda node: (node["metadata"]["annotations"].update(
        {BIG: "x" * room, PROGRESS_ANNOTATION: record}), node["spec"].update(unschedulable=True)))
    result = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    why = reasons(result)["node-a"]
    assert outcomes(result) == {"node-a": "failed", "node-b": "partitioned", "node-c": "partitioned"}, why
    assert "Too long" in why and "the record a stopped run left (step drained) was removed and its cordon lifted" \
        in why, why
    assert cluster.annotation("node-a") is None and not any(cluster.unschedulable(n) for n in NAMES)
    assert cluster.transport.seen == ["node-b", "node-c"]
    assert not any("node-a" in str(lease.get("spec")) for lease in cluster.api.leases.values())


def test_the_refusal_is_a_failed_node_not_a_stopped_rollout(cluster):
    """The webhook hears node-a's failure (`node-failed`, its code `claim-refused`), never that the pool's
    rollout stopped: nothing was recorded on node-a, there is no annotation to remove, and the pool goes on."""
    from tests.support.webhook import Webhook

    add_nodes(cluster)
    with Webhook() as hook:
        runs = [cluster.run(ACK_MIG_NOTIFY_URL=hook.url()) for _ in range(2)]
        lines = hook.lines()
    assert [outcomes(r)["node-c"] for r in runs] == ["deferred", "partitioned"]
    assert "rollout-stopped" not in [line["kind"] for line in lines], [line["text"] for line in lines]
    failed = [line for line in lines if line["kind"] == "node-failed"]
    assert failed and failed[0]["nodes"][0]["node_name"] == "node-a"
    assert failed[0]["nodes"][0]["code"] == "claim-refused" and "1 claim-refused" in failed[0]["text"]


def test_a_refusal_is_told_once_per_node_and_cause_not_at_every_run(cluster):
    """Every timer run tries node-a again and it fails again the same way: the webhook heard it at every run (the
    marks were keyed by the event, and each timer run is another). Now it hears it once; a refusal for another
    cause is news, and so is the same refusal once node-a got past its claim in between. Each run's result still
    shows node-a failed."""
    from functions.decision import alert_marks as am
    from tests.support.webhook import Webhook

    def told(lines):
        return [n["node_name"] for line in lines if line["kind"] == "node-failed" for n in line["nodes"]]

    add_nodes(cluster)
    runs = []

    def notify():  # each timer run is an invocation of its own, with a request id of its own
        runs.append(len(runs))
        return dict(ACK_MIG_NOTIFY_URL=hook.url(), request_id="req-%d" % len(runs))

    with Webhook() as hook:
        results = [cluster.run(**notify()) for _ in range(3)]
        assert [outcomes(r)["node-a"] for r in results] == ["failed"] * 3
        assert told(hook.lines()) == ["node-a"], [line["text"] for line in hook.lines()]
        cluster.now[0] += am.KEEP_S + 3600  # a refusal that lasts is not told again when the marks' days run out
        cluster.run(**notify())
        assert told(hook.lines()) == ["node-a"]
        # another cause: a webhook now denies node-a's writes instead
        cluster.api.update_node("node-a", lambda node: node["metadata"]["annotations"].pop(BIG))
        deny = dict(times=1, status=403, method="PATCH", path="/api/v1/nodes/node-a",
                    message='admission webhook "inventory.example.com" denied the request: frozen')
        cluster.api.break_next(**deny)
        assert outcomes(cluster.run(**notify()))["node-a"] == "failed"
        assert told(hook.lines()) == ["node-a", "node-a"]
        # node-a gets past its claim, then is denied again, the same way, for a new target: news again
        assert outcomes(cluster.run(**notify()))["node-a"] == "partitioned"
        cluster.api.break_next(**deny)
        again = cluster.run(inventory=snapshot(OLD), **notify())
        assert outcomes(again)["node-a"] == "failed" and "denied the request" in reasons(again)["node-a"]
        assert told(hook.lines()) == ["node-a"] * 3


def test_a_replacement_the_ack_api_fails_to_plan_ends_the_event_in_retry(cluster):
    """node-a refused its claim (a webhook's 403); planning the node that takes its place read the pool again
    and the ACK API failed (DescribeClusterNodePools, after the lookup's retries). No node took the wave's place
    and node-b and node-c waited for the next timer, yet the event ended done, as if its work were done. Now it
    ends retry (FC runs it again), its reason saying why."""
    from functions.base.errors import RetryLater
    from functions.cloud.cluster import InventoryLookup

    class FailingAfterRefusal(InventoryLookup):
        failed = 0

        def nodepools(self, cluster_id):
            if any(r.method == "PATCH" and r.status == 403 for r in cluster.api.requests):
                type(self).failed += 1  # the plan read it; the replacement's read, after node-a's refusal, fails
                raise RetryLater("DescribeClusterNodePools failed 3 times, last: HTTP 503; transient, a later try "
                                 "may pass")
            return super().nodepools(cluster_id)

    add_nodes(cluster, full=None)
    cluster.api.break_next(times=1, status=403, method="PATCH", path="/api/v1/nodes/node-a")
    data = snapshot()
    lookup = FailingAfterRefusal.from_dict(data)
    result = cluster.run(lookup=lookup)
    assert outcomes(result) == {"node-a": "failed", "node-b": "deferred", "node-c": "deferred"}, reasons(result)
    assert FailingAfterRefusal.failed == 1
    assert result.outcome == "retry", result.reason
    assert "takes the place" in result.reason and "DescribeClusterNodePools" in result.reason, result.reason
    assert cluster.transport.seen == []
