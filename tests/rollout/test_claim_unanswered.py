"""A wave node whose claim fails for a cause that is not the node's (the API server, or the function's own
Role) is not counted against the node (docs/operations.md, "Claims the API server does not answer").

The claim is the first write of the node's record (with the cordon). When it met a 5xx after the client's
retries, or RBAC's 403, the node ended ``failed`` with nothing recorded on it: the webhook heard a
``node-failed`` line and a ``rollout-stopped`` line for a pool that was not stopped (no record to remove, the
next run went on), and an alert fired for the node, although the API server or the Role was at fault. Now
the node is deferred with a reason saying what failed and that nothing was written; a 5xx ends the event
``retry`` (FC runs it again); RBAC's 403 names the missing permission (verb, resource) once, in the event's
reason, and no further node is claimed with the same Role.

The same rule along the rest of the claim and record path: the API server failing after the claim (no stopped
rollout), the pool's budget and an auto pool's planning claim on their Lease, a node's end, the next wave's plan
and a stranded auto record's end: what fails there is the API server's or the Role's, never the node's, and the
event (or tick) ends retry.

Through ``run_event`` against the test Kubernetes API server, with the played nodes of
tests/rollout/conftest.py."""

import pytest

from tests.rollout.conftest import NAMES, snapshot
from tests.rollout.test_interrupted import LABELLED_LEASE, lease_slots

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

RBAC = ('nodes "node-a" is forbidden: User "system:serviceaccount:kube-system:ack-mig-hook" cannot patch '
        'resource "nodes" in API group "" at the cluster scope')


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def reasons(result):
    return {n["node_name"]: n["reason"] for n in result.nodes}


def kinds(lines):
    return [line["kind"] for line in lines]


def test_a_5xx_at_the_claim_defers_the_node_and_ends_the_event_in_retry(cluster):
    from tests.support.webhook import Webhook

    cluster.add_nodes()
    # every attempt of the client's (5, ACK_MIG_KUBE_MAX_ATTEMPTS) meets a 503
    cluster.api.break_next(times=5, status=503, method="PATCH", path="/api/v1/nodes/node-a",
                           message="the server is currently unable to handle the request")
    with Webhook() as hook:
        result = cluster.run(ACK_MIG_NOTIFY_URL=hook.url())
        lines = hook.lines()
    why = reasons(result)["node-a"]
    assert outcomes(result)["node-a"] == "deferred", why
    assert "503" in why and "nothing was written on the node" in why, why
    assert result.outcome == "retry" and "503" in result.reason, result.reason
    assert kinds(lines) == [], [line["text"] for line in lines]  # neither node-failed nor rollout-stopped
    assert [r.status for r in cluster.api.requests if r.method == "PATCH"] == [503] * 5
    assert cluster.annotation("node-a") is None and not cluster.unschedulable("node-a")
    assert not any("node-a" in str(lease.get("spec")) for lease in cluster.api.leases.values())  # slot back
    # the next run (FC's retry, or the timer) takes node-a as if nothing had happened
    again = cluster.run()
    assert outcomes(again)["node-a"] == "partitioned" and again.outcome == "done", reasons(again)


def test_rbacs_403_at_the_claim_names_the_missing_permission_once_and_stops_no_node(cluster):
    from tests.support.webhook import Webhook

    cluster.add_nodes()
    cluster.api.break_next(times=200, status=403, method="PATCH", path="/api/v1/nodes/", message=RBAC)
    with Webhook() as hook:
        result = cluster.run(ACK_MIG_NOTIFY_URL=hook.url(), ACK_MIG_MAX_UNAVAILABLE="3")
        lines = hook.lines()
    assert set(outcomes(result).values()) == {"deferred"}, reasons(result)
    assert kinds(lines) == [], [line["text"] for line in lines]
    # one line names the permission (verb, resource), once in the event's reason
    assert result.reason.count("may not patch nodes") == 1, result.reason
    assert "deploy/rbac.yaml" in result.reason
    assert all("may not patch nodes" in reasons(result)[n] for n in NAMES), reasons(result)
    # one refused write, not one per node: the Role refuses every node alike
    refused = [r for r in cluster.api.requests if r.method == "PATCH" and r.status == 403]
    assert len(refused) == 1, [r.path for r in refused]
    assert not cluster.events("MigRolloutFailed")
    assert not any(cluster.annotation(n) or cluster.unschedulable(n) for n in NAMES)
    assert not any("node-" in str(lease.get("spec")) for lease in cluster.api.leases.values())


def test_a_5xx_at_an_auto_nodes_claim_ends_the_tick_in_retry_and_marks_no_gpu_changed(cluster):
    """An auto pool's node whose claim met a 5xx ended failed: its GPUs were marked changed on the pool's
    Lease (the dwell then held them back, although nothing changed) and the tick ended done. Now the node is
    deferred, no GPU is marked, and the tick ends retry."""
    from tests.rollout.test_auto_rollout import LEASE, PerGpuNodes, add_auto_nodes, tick, waiting

    add_auto_nodes(cluster.api, ["auto-a"])
    waiting(cluster.api, 2)
    cluster.api.break_next(times=5, status=503, method="PATCH", path="/api/v1/nodes/auto-a")
    result = tick(cluster, PerGpuNodes(cluster.api))
    (node,) = result.nodes
    assert node["outcome"] == "deferred" and node["reason"].startswith("not claimed: "), node
    assert result.outcome == "retry" and "503" in result.reason, result.reason
    notes = cluster.api.leases[LEASE]["metadata"].get("annotations") or {}
    assert "auto-a" not in notes.get("ack-mig-hook/changed", ""), notes
    assert cluster.annotation("auto-a") is None


def test_the_api_server_failing_mid_wave_is_no_stopped_rollout_and_ends_the_event_in_retry(cluster):
    """After node-a's claim, the API server refuses every change (503): its record stays at step cordoned and the
    next invocation resumes it (rollout/test_waves.py). The webhook was told the pool's rollout stopped, for a pool
    nothing had stopped (no stop record, nothing to remove), and the event ended done. Now the
    node's failure carries the code ``api-failed`` (the node left cordoned mid-way is told, once), no
    ``rollout-stopped`` line is sent, and the event ends retry."""
    from tests.rollout.conftest import snapshot
    from tests.support.webhook import Webhook

    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "train", "node-a", gpus=1, owner_kind="ReplicaSet")

    def outage(n):
        cluster.api.fail = {"PATCH": 503} if n == 1 else {}

    cluster.on_sleep = outage  # after the first eviction pass
    with Webhook() as hook:
        result = cluster.run(inventory=snapshot(names=["node-a"]), ACK_MIG_NOTIFY_URL=hook.url())
        lines = hook.lines()
    (node,) = result.nodes
    assert node["outcome"] == "failed" and node.get("code") == "api-failed", node
    assert "the Kubernetes API failed after step cordoned" in node["reason"] and "HTTP 503" in node["reason"]
    assert result.outcome == "retry" and "HTTP 503" in result.reason, result.reason
    assert kinds(lines) == ["node-failed"], [line["text"] for line in lines]
    assert cluster.annotation("node-a")["step"] == "cordoned"  # the next invocation resumes it from there


LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases/"


@pytest.mark.parametrize("status, message, words", [
    (503, "the server is currently unable to handle the request", "HTTP 503"),
    (403, 'leases.coordination.k8s.io "ack-mig-hook-pool-np-mig" is forbidden: User "ack-mig-hook" cannot update '
          'resource "leases" in API group "coordination.k8s.io" in the namespace "default"', "may not update leases"),
], ids=["5xx", "rbac"])
def test_an_auto_pools_planning_claim_the_api_server_fails_ends_the_tick_in_retry(cluster, status, message, words):
    """The tick's planning claim on the pool's Lease met a 503 (after the client's retries): the pool was left
    unplanned and the tick ended skip ("nothing to do": no retry, the pods waited for the next timer), its line
    blaming RBAC whatever the answer. Now the tick ends retry; the line blames RBAC only for RBAC's 403, naming
    the permission."""
    from tests.rollout.test_auto_rollout import PerGpuNodes, add_auto_nodes, tick, waiting

    add_auto_nodes(cluster.api, ["auto-a"])
    waiting(cluster.api, 2)
    cluster.api.break_next(times=5, status=status, method="PUT", path=LEASES + "ack-mig-hook-pool-np-mig",
                           message=message)
    transport = PerGpuNodes(cluster.api)
    result = tick(cluster, transport)
    assert result.outcome == "retry" and "its planning claim" in result.reason, result.reason
    assert words in result.reason, result.reason
    assert ("RBAC" in result.reason) == (status == 403), result.reason
    assert transport.requests == []


@pytest.mark.parametrize("status, message, words", [
    (503, "the server is currently unable to handle the request", "HTTP 503"),
    (403, 'leases.coordination.k8s.io "ack-mig-hook-pool-np-mig" is forbidden: User "ack-mig-hook" cannot update '
          'resource "leases" in API group "coordination.k8s.io" in the namespace "default"', "may not update leases"),
], ids=["5xx", "rbac"])
def test_a_pool_budget_the_api_server_fails_defers_the_node_and_ends_the_event_in_retry(cluster, status, message,
                                                                                        words):
    """The slot of the pool's budget (its Lease) met a 503 after the client's retries: the node was deferred
    untouched, as it should be, but the event ended done (no retry: the pool waited for the next timer) and the
    reason blamed RBAC whatever the answer. Now the event ends retry; RBAC is named only for its 403, with the
    permission, and then no further node of the wave is tried."""
    cluster.add_nodes()
    cluster.api.break_next(times=15 if status == 503 else 100, status=status, method="PUT",  # 5 tries a node
                           path=LEASES + "ack-mig-hook-pool-np-mig", message=message)
    result = cluster.run(ACK_MIG_MAX_UNAVAILABLE="3")
    assert set(outcomes(result).values()) == {"deferred"}, reasons(result)
    assert result.outcome == "retry" and words in result.reason, result.reason
    assert ("RBAC" in result.reason) == (status == 403), result.reason
    assert cluster.transport.seen == [] and not any(cluster.unschedulable(n) for n in NAMES)
    if status == 403:  # the Role refuses every node's slot alike: one refused write
        assert len([r for r in cluster.api.requests if r.method == "PUT" and r.status == 403]) == 1


def test_an_end_the_api_server_fails_to_record_ends_the_event_in_retry(cluster):
    """node-a was applied and its capacity showed, but the write of its end (the record done, the uncordon) met a
    503 on every try of the client's: the node stays cordoned at step applied until the next invocation resumes
    it, yet the event ended done. Now it ends retry, saying so."""
    import json

    from tests.rollout.conftest import snapshot

    cluster.add_nodes(["node-a"])

    def after_patch(name, node):  # once the record says applied, every try of the next write fails
        record = json.loads((node["metadata"].get("annotations") or {}).get("ack-mig-hook/rollout") or "{}")
        if record.get("step") == "applied":
            cluster.api.break_next(times=5, status=503, method="PATCH", path="/api/v1/nodes/node-a")

    cluster.api.on_node_patch = after_patch
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    (node,) = result.nodes
    assert node["outcome"] == "partitioned" and "could not be uncordoned or recorded" in node["reason"], node
    assert "HTTP 503" in node["reason"] and cluster.annotation("node-a")["step"] == "applied"
    assert result.outcome == "retry" and "HTTP 503" in result.reason, result.reason


def test_a_next_wave_the_api_server_fails_to_plan_ends_the_event_in_retry(cluster):
    """node-a's wave ended done; planning the next wave (the pool's nodes listed again) met a 503 on every try of
    the client's. The invocation had time for node-b and node-c, which waited for the next timer, and the event
    ended done. Now it ends retry, saying why."""
    import json

    cluster.add_nodes()

    def after_patch(name, node):  # once node-a's record says done, the next listing fails on every try
        record = json.loads((node["metadata"].get("annotations") or {}).get("ack-mig-hook/rollout") or "{}")
        if name == "node-a" and record.get("step") == "done":
            cluster.api.break_next(times=5, status=503, method="GET", path="/api/v1/nodes")

    cluster.api.on_node_patch = after_patch
    result = cluster.run(ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    assert outcomes(result) == {"node-a": "partitioned", "node-b": "deferred", "node-c": "deferred"}, reasons(result)
    assert result.outcome == "retry" and "HTTP 503" in result.reason, result.reason


@pytest.mark.parametrize("status, message", [
    (503, "the server is currently unable to handle the request"),
    (403, 'nodes "auto-a" is forbidden: User "ack-mig-hook" cannot patch resource "nodes" in API group "" at the '
          'cluster scope'),
], ids=["5xx", "rbac"])
def test_a_stranded_auto_record_the_api_server_fails_to_end_is_left_as_it_was(cluster, status, message):
    """A tick ends the record a stopped run left mid-change on an auto node (auto_waves.finish_stranded). Its
    write met a 503 after the client's retries (or RBAC's 403): that was taken for the node's own refusal (a 422
    for annotations at the size limit), and the record was written again without its reason, or removed, on
    the API server's word. Now the record is left as it was and the tick ends retry; the next tick ends it
    with its reason."""
    from functions.decision import waves as rp
    from tests.rollout.test_auto_rollout import PerGpuNodes, add_auto_nodes, inventory, tick
    from tests.rollout.test_interrupted import strand

    add_auto_nodes(cluster.api, ["auto-a"])
    strand(cluster.api, ["auto-a"])
    tries = 5 if status == 503 else 1  # the client tries a 5xx 5 times, a 403 once
    cluster.api.break_next(times=tries, status=status, method="PATCH", path="/api/v1/nodes/auto-a", message=message)
    result = tick(cluster, PerGpuNodes(cluster.api), lookup=inventory(names=["auto-a"]))
    assert result.outcome == "retry", result.reason
    assert cluster.annotation("auto-a")["step"] == rp.APPLYING, cluster.annotation("auto-a")
    assert len([r for r in cluster.api.requests if r.method == "PATCH"]) == tries  # one write: nothing after it
    tick(cluster, PerGpuNodes(cluster.api), lookup=inventory(names=["auto-a"]))
    record = cluster.annotation("auto-a")
    assert record["step"] == rp.DONE and "stopped" in record["reason"], record


def test_a_claim_that_landed_with_its_answer_lost_is_read_back_and_the_node_goes_on(cluster):
    """node-a's claim (its record, with the cordon) was written, but no answer came back on any try of the
    client's (the connection reset after the server wrote; the tries after it met 409 on the version it moved,
    unanswered too). The node was deferred as "nothing was written" and its slot given back, yet it stayed
    cordoned under this run's record: FC's retry (another invocation) could not take it before this run's lease
    ran out, and the pool, its one slot counted on the cordon, waited with it. Now the node is read back after
    no answer; this run's record there is the claim, and the node goes on in the same run."""
    cluster.add_nodes(["node-a"])
    cluster.api.lose_answer_next(times=5, method="PATCH", path="/api/v1/nodes/node-a")
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    (node,) = result.nodes
    assert node["outcome"] == "partitioned" and result.outcome == "done", (node, result.reason)
    assert [r.status for r in cluster.api.requests if r.method == "PATCH"][:5] == [0] * 5
    assert cluster.transport.seen == ["node-a"] and not cluster.unschedulable("node-a")
    assert cluster.annotation("node-a")["step"] == "done"
    assert not lease_slots(cluster.api, LABELLED_LEASE)


@pytest.mark.parametrize("kind", [503, None, "lost", "lost-unread"])
def test_a_claim_without_an_answer_never_lets_the_pool_past_its_budget(cluster, kind):
    """node-a's claim met ``kind`` on every try of the client's: a 503 or a dropped connection (nothing
    written), or the write landed and the answer was lost ("lost"), the node then not read back either
    ("lost-unread": unknown whether the claim landed). FC's retry, another invocation, runs at once, then the
    timer until the pool is done. At every node write the pool (max-unavailable 1) has at most one node disrupted
    (cordoned, or under a record in progress); a record of the first run's left in progress on node-a keeps that
    run's slot on the Lease while it lasts (the budget counts a per-GPU change through its slot alone); every
    node ends done, applied once, no slot left."""
    from functions.decision.waves import Progress

    api = cluster.api
    cluster.add_nodes()
    peak = [0]

    def check(name, stored):  # with the server's lock held: the state right after this write
        busy = 0
        for node in api.nodes.values():
            record = Progress.from_annotation((node["metadata"].get("annotations") or {}).get(
                "ack-mig-hook/rollout"))
            busy += bool((node.get("spec") or {}).get("unschedulable")
                         or (record is not None and record.step in ("cordoned", "drained", "applying", "applied")))
        peak[0] = max(peak[0], busy)

    def unread(name, node):  # once the claim is written, node-a does not read back on any try either
        if name == "node-a" and kind == "lost-unread" and not unread.done:
            unread.done = True
            api.break_next(times=5, status=None, method="GET", path="/api/v1/nodes/node-a")
    unread.done = False

    api.on_node_stored = check
    api.on_node_patch = unread
    if kind in ("lost", "lost-unread"):
        api.lose_answer_next(times=5, method="PATCH", path="/api/v1/nodes/node-a")
    else:
        api.break_next(times=5, status=kind, method="PATCH", path="/api/v1/nodes/node-a")
    first = cluster.run(ACK_MIG_MAX_UNAVAILABLE="1")
    record = cluster.annotation("node-a")
    if record and record["step"] in ("cordoned", "drained", "applying", "applied"):
        # this run's record in progress on node-a: its slot stays on the Lease until the record is known absent
        slot = lease_slots(api, LABELLED_LEASE).get("node-a")
        assert slot is not None and slot.owner == record["owner"], (first.nodes, lease_slots(api, LABELLED_LEASE))
    assert first.outcome == ("done" if kind == "lost" else "retry"), first.reason
    for _ in range(8):  # FC's retry at once, then the timer, each run after the one before it has run out
        if all((cluster.annotation(n) or {}).get("step") == "done" for n in NAMES):
            break
        cluster.run(ACK_MIG_MAX_UNAVAILABLE="1")
        cluster.now[0] += 86400
    assert all(cluster.annotation(n)["step"] == "done" and not cluster.unschedulable(n) for n in NAMES)
    assert sorted(cluster.transport.seen) == NAMES  # each node applied once
    assert peak[0] <= 1, peak[0]
    assert not any(s.expires > cluster.now[0] for s in lease_slots(api, LABELLED_LEASE).values())


def test_a_claim_that_landed_unanswered_then_met_429s_is_read_back_and_the_node_goes_on(cluster):
    """node-a's claim landed with its answer lost; the client tried again (no answer is retried), and every later
    try was turned away by APF (429) until its tries ran out. The call ended with the last try's 429, which
    ``_landed`` took for an answer saying nothing was written: the node was deferred as "nothing was written" and
    its slot given back, while it stayed cordoned under this run's record (the case the read back exists for).
    A 429 at the end of the client's tries says nothing of an earlier, unanswered one (as the plan marker's
    arrival reads it, functions/pipeline/pod_event.py): the node is read back and goes on in the same run."""
    cluster.add_nodes(["node-a"])
    cluster.api.lose_answer_next(times=1, method="PATCH", path="/api/v1/nodes/node-a")
    cluster.api.throttle(times=4, retry_after=1, method="PATCH", path="/api/v1/nodes/node-a")
    result = cluster.run(inventory=snapshot(names=["node-a"]))
    (node,) = result.nodes
    assert [r.status for r in cluster.api.requests if r.method == "PATCH"][:5] == [0, 429, 429, 429, 429]
    assert node["outcome"] == "partitioned" and result.outcome == "done", (node, result.reason)
    assert cluster.annotation("node-a")["step"] == "done" and not cluster.unschedulable("node-a")
    assert not lease_slots(cluster.api, LABELLED_LEASE)


@pytest.mark.parametrize("kind", ["lost", "lost-unread"])
def test_an_auto_nodes_claim_with_its_answer_lost_goes_on_or_waits_within_the_pools_budget(cluster, kind):
    """An auto pool's per-GPU claim writes the node's record at ``applying`` with no cordon, and shares the read
    back of a claim whose answer was lost (``_landed``). auto-a's claim landed and no try of the client's got an
    answer ("lost": the node then reads back: this run's record is the claim and the node goes on in the same
    tick, keeping its slot), or the node did not read back either ("lost-unread": its slot stays on the Lease
    while the record it may hold counts, and the tick ends retry). The pool (max-unavailable 1, its budget
    counting a per-GPU change through its slot alone) never has two nodes mid-change, a node applies only
    holding the pool's one slot, each node is applied once and every slot is given back."""
    from functions.decision.waves import Progress
    from tests.rollout.test_auto_rollout import NAMES as AUTO, PerGpuNodes, add_auto_nodes, slots, tick, waiting

    api = cluster.api
    add_auto_nodes(api)
    waiting(api, 6)  # two 3g.20gb per A100 40GB: every node's idle 7g.40gb is repartitioned
    peak, held = [0], []

    def check(name, stored):  # with the server's lock held: the state right after this write
        busy = 0
        for node in api.nodes.values():
            record = Progress.from_annotation((node["metadata"].get("annotations") or {}).get(
                "ack-mig-hook/rollout"))
            busy += bool(record is not None and record.step in ("cordoned", "drained", "applying", "applied"))
            assert not (node.get("spec") or {}).get("unschedulable"), name  # a per-GPU change never cordons
        peak[0] = max(peak[0], busy)

    def unread(name, node):  # once auto-a's claim is written, it does not read back on any try either
        if name == "auto-a" and kind == "lost-unread" and not unread.done:
            unread.done = True
            api.break_next(times=5, status=None, method="GET", path="/api/v1/nodes/auto-a")
    unread.done = False

    def on_apply(name):  # the node applied holds the pool's one slot
        held.append((name, sorted(slots(api))))

    api.on_node_stored = check
    api.on_node_patch = unread
    api.lose_answer_next(times=5, method="PATCH", path="/api/v1/nodes/auto-a")
    transport = PerGpuNodes(api, on_apply)
    first = tick(cluster, transport, ACK_MIG_MAX_UNAVAILABLE="1")
    assert [r.status for r in api.requests if r.method == "PATCH" and r.path == "/api/v1/nodes/auto-a"][:5] \
        == [0] * 5, api.requests
    record = cluster.annotation("auto-a")
    assert record["step"] in ("applying", "done") and record["drain"] is False, record
    by = {n["node_name"]: n for n in first.nodes}
    if kind == "lost":  # read back: the claim is this run's, the node goes on in the same tick
        assert by["auto-a"]["outcome"] == "partitioned" and record["step"] == "done", (by, first.reason)
        assert first.outcome == "done", first.reason
    else:  # unknown whether it landed: deferred, its slot kept on the Lease under the record's owner
        assert by["auto-a"]["outcome"] == "deferred" and first.outcome == "retry", (by, first.reason)
        assert record["step"] == "applying"
        # the pool's one slot is auto-a's: the others wait on the budget, none changes beside a node it may hold
        assert all(by[n]["outcome"] == "deferred" and "disruption budget" in by[n]["reason"]
                   for n in ("auto-b", "auto-c")), by
        slot = lease_slots(api).get("auto-a")
        assert slot is not None and slot.owner == record["owner"], lease_slots(api)
    for _ in range(8):  # FC's retry at once, then the timer, each tick after the one before it has run out
        if all((cluster.annotation(n) or {}).get("step") == "done" for n in AUTO):
            break
        tick(cluster, transport, ACK_MIG_MAX_UNAVAILABLE="1")
        cluster.now[0] += 86400
    assert all(cluster.annotation(n)["step"] == "done" for n in AUTO), [cluster.annotation(n) for n in AUTO]
    assert sorted(n for n, _ in transport.requests) == AUTO  # each node applied once
    assert held and all(s == [n] for n, s in held), held
    assert peak[0] <= 1, peak[0]
    assert not any(s.expires > cluster.now[0] for s in lease_slots(api).values()), lease_slots(api)
