"""A pod event's holder (functions/pipeline/pod_event.py) on the in-memory API server, its clock the test's:
how its rounds end (a failed round lets the pool go, no round past the invocation's time), how a wait for
another invocation's claim ends, that it lets go only of its own marker, and the one result of its rounds."""

import dataclasses
import time

import pytest

from functions.base.event_result import HandlerResult
from functions.base.settings import load_settings, longest_run_s
from functions.decision import coalesce as co
from functions.kube.nodes import MemoryKube
from functions.pipeline import pod_event
from functions.rollout.plan_claim import BEING_PLANNED
from functions.rollout.plan_marker import PlanMarker, marker_lease
from tests.support.module_time import module_time

POOL = "np0a1b2c3d4e5f60718293a4b5c6d7e8f9"


class Log:
    def __init__(self):
        self.warnings = []

    def info(self, *args, **kwargs):
        pass

    def warning(self, event, **fields):
        self.warnings.append(fields.get("reason", ""))


def settings_of(function_timeout_s):
    return dataclasses.replace(load_settings({"ACK_MIG_CLUSTER_ID": "c1"}), function_timeout_s=function_timeout_s)


def stored(kube):
    lease = kube.leases[("default", marker_lease(POOL))]
    return co.read_marker(lease["metadata"]["annotations"][co.MARKER_ANNOTATION], time.time(), 2220.0)


def stopped_clock(monkeypatch):
    """pod_event's monotonic clock held at 1000 s, moved only by the test: [its time], to move it. Its sleeps go
    to :func:`sleep_on` when a test sets them. Only pod_event reads these (tests/support/module_time.py): a
    clock or sleep set on the process's one ``time`` module was every thread's, the test servers' and threads
    an earlier test left running, whose sleeps then moved this clock."""
    clock = [1000.0]
    monkeypatch.setattr(pod_event, "time", module_time(monotonic=lambda: clock[0]))
    return clock


def sleep_on(monkeypatch, sleep):
    """pod_event's own sleeps (its clock's, :func:`stopped_clock`, kept) go to ``sleep``."""
    monkeypatch.setattr(pod_event, "time", module_time(monotonic=pod_event.time.monotonic, sleep=sleep))


def holding():
    """Two invocations' plan markers on one store, the first holding the pool's planning claim (its event
    arrived first): (the store, the holder, the other)."""
    kube = MemoryKube()
    holder, other = (PlanMarker(kube, me, 2220.0, sleep=lambda s: None) for me in ("holder", "event2"))
    assert holder.arrive(POOL, "llm/first", "e1")[0] == co.PLAN
    return kube, holder, other


def result(outcome, reason="planned", decisions=()):
    return HandlerResult(trigger="pod-unschedulable", outcome=outcome, reason=reason, decisions=list(decisions))


def test_a_round_that_ends_in_retry_lets_the_pool_go_and_is_the_last():
    """Events of the pool are answered "coalesced" while the marker names a holder: one that returned after a
    failed round must not stay the holder for its lease (run_lease_s), or their pods wait for the timer."""
    settings = settings_of(14400)
    kube, holder, other = holding()
    rounds = []

    def tick(reserve_s=0.0):
        other.arrive(POOL, "llm/second", "e2")  # asked during the round: another round would plan it
        return result("retry", "the Kubernetes API could not be read (HTTP 503)")

    pod_event._rounds(holder, POOL, tick, rounds, time.monotonic(), settings, Log())
    assert [r.outcome for r in rounds] == ["retry"]
    assert stored(kube).holder == ""
    assert other.arrive(POOL, "llm/third", "e3")[0] == co.PLAN  # the next event plans


def test_a_round_whose_beginning_cannot_be_marked_lets_the_pool_go_before_it_plans(monkeypatch):
    """The round's mark cannot be written (a burst's writes conflict 24 times in a row: MarkerBusy; or no
    answer): the round still plans, unmarked, and is the last. The marker still named this invocation, so
    every later event of the pool was answered "coalesced" into an invocation that had returned, for a run
    lease (37 minutes), their pods left for the timer, and those during the round were never planned either.
    It lets go before that round: an event during it or after finds no holder and plans itself."""
    from functions.rollout.plan_marker import MarkerBusy

    settings = settings_of(14400)
    kube, holder, other = holding()

    def busy(pool_id, is_open=True):
        raise MarkerBusy("the plan marker of pool %s changed under 24 writes in a row" % pool_id)

    monkeypatch.setattr(holder, "begin_round", busy)
    roles, rounds = [], []

    def tick(reserve_s=0.0):
        roles.append(other.arrive(POOL, "llm/second", "e2")[0])  # an event during the round
        return result("done")

    log = Log()
    pod_event._rounds(holder, POOL, tick, rounds, time.monotonic(), settings, log)
    assert [r.outcome for r in rounds] == ["done"]
    assert roles == [co.PLAN], roles  # it planned itself (after this round's planning claim)
    assert stored(kube).holder == "event2"
    assert any("round not marked" in w for w in log.warnings), log.warnings


@pytest.mark.parametrize("fails", ["once", "always"])
def test_a_round_whose_end_cannot_be_marked_plans_once_more_for_the_asks_it_took(monkeypatch, fails):
    """The round's end cannot be read or written (a burst: its writes conflict 24 times in a row). The events
    that asked during the round were answered "coalesced", told this holder plans again with their pods; it
    let go instead, and their pods waited for the timer. It cannot tell whether an ask came, so it plans once
    more while a whole round fits (a round of a pool with nothing new changes nothing); once an invocation,
    so a marker whose ends always fail does not have it plan round after round until its time runs out."""
    from functions.rollout.plan_marker import MarkerBusy

    settings = settings_of(14400)
    kube, holder, other = holding()
    end_round, failed = holder.end_round, []

    def busy_once(pool_id, planned, more):
        if not failed or fails == "always":
            failed.append(pool_id)
            raise MarkerBusy("the plan marker of pool %s changed under 24 writes in a row" % pool_id)
        return end_round(pool_id, planned, more)

    monkeypatch.setattr(holder, "end_round", busy_once)
    roles, rounds = [], []

    def tick(reserve_s=0.0):
        if not roles:
            roles.append(other.arrive(POOL, "llm/second", "e2")[0])  # an event during the first round
        return result("done")

    log = Log()
    pod_event._rounds(holder, POOL, tick, rounds, time.monotonic(), settings, log)
    assert roles == [co.COALESCED] and failed
    assert len(rounds) == 2, rounds  # the second round's list holds llm/second
    assert stored(kube).holder == ""
    assert any("round end not marked" in w for w in log.warnings), log.warnings


def test_no_round_starts_once_less_than_a_whole_round_is_left(monkeypatch):
    """An ask taken during an open round is planned by this invocation only while a whole round still fits;
    a round that overran leaves the rest to the next event or the timer, and says so."""
    settings = settings_of(4440)
    clock = stopped_clock(monkeypatch)
    kube, holder, other = holding()
    roles, rounds = [], []

    def tick(reserve_s=0.0):
        roles.append(other.arrive(POOL, "llm/second", "e2")[0])
        clock[0] += pod_event._left_s(1000.0, settings) - reserve_s + 1  # one second past what it was given
        return result("done")

    log = Log()
    pod_event._rounds(holder, POOL, tick, rounds, 1000.0, settings, log)
    assert pod_event._left_s(1000.0, settings) < longest_run_s(settings)
    assert roles == [co.COALESCED] and len(rounds) == 1
    assert stored(kube).holder == ""
    assert any("no time is left for another" in w for w in log.warnings), log.warnings


def test_a_wait_for_another_invocations_claim_ends_while_a_round_still_fits(monkeypatch):
    """The wait is bounded by the invocation too: FC ends an invocation at its Timeout, mid-round (the wait's
    own bound set past it here)."""
    settings = settings_of(4440)
    clock = stopped_clock(monkeypatch)
    monkeypatch.setattr(pod_event, "CLAIM_WAIT_S", 10.0 ** 6)
    ticks = []

    def tick(reserve_s=0.0):
        ticks.append(clock[0])
        return result("skip", "auto pool %s %s x1 until its rollout ends" % (POOL, BEING_PLANNED))

    def sleep(seconds):
        assert clock[0] < 1000.0 + 4440, "waited past the invocation's end"
        clock[0] += seconds

    log = Log()
    last = pod_event._after_claims(tick, 1000.0, settings, log, POOL, sleep=sleep, free=lambda: True)
    assert last.outcome == "skip" and BEING_PLANNED in last.reason
    assert pod_event._left_s(1000.0, settings) >= longest_run_s(settings)  # a whole round still fits
    assert pod_event._left_s(1000.0, settings) < longest_run_s(settings) + pod_event.CLAIM_POLL_S
    assert len(ticks) > 1 and any("no time is left to wait" in w for w in log.warnings)


def test_a_wait_for_another_invocations_claim_is_bounded_and_lets_the_pool_go(monkeypatch):
    """Another invocation's planning claim outlives the wait: a run FC ended while it held the claim keeps it
    until its invocation's end (hours: a node's apply it started may still run). The holder looked again
    every 2 s for as long as its own invocation allowed, billed, and the events coalesced into it meanwhile
    kept it waiting round after round. It waits pod_event.CLAIM_WAIT_S at most, then ends in one skip naming
    the claim's holder and its end, and lets the marker go: the next event is not coalesced into a waiter
    that left."""
    settings = settings_of(14400)
    clock = stopped_clock(monkeypatch)
    kube, holder, other = holding()
    roles, rounds = [], []

    def tick(reserve_s=0.0):
        if not roles:
            roles.append(other.arrive(POOL, "llm/second", "e2")[0])  # an event during the wait
        return result("skip", "pool %s %s dead-run" % (POOL, BEING_PLANNED))

    def sleep(seconds):
        assert clock[0] - 1000.0 < pod_event.CLAIM_WAIT_S, "waited past the bound"
        clock[0] += seconds

    log = Log()
    sleep_on(monkeypatch, sleep)
    pod_event._rounds(holder, POOL, tick, rounds, 1000.0, settings, log, free=lambda: True,
                      held=lambda: "invocation dead-run holds it until 2026-12-07T23:00:00Z")
    assert roles == [co.COALESCED]
    assert [r.outcome for r in rounds] == ["skip"], rounds
    reason = rounds[0].reason
    assert "invocation dead-run holds it until 2026-12-07T23:00:00Z" in reason, reason
    assert "waited %d s" % pod_event.CLAIM_WAIT_S in reason and "auto pool timer" in reason, reason
    assert stored(kube).holder == ""
    assert other.arrive(POOL, "llm/third", "e3")[0] == co.PLAN  # the next event plans (waits) itself


def test_letting_go_leaves_another_holders_marker_alone():
    kube = MemoryKube()
    mine, theirs = (PlanMarker(kube, me, 2220.0, sleep=lambda s: None) for me in ("mine", "theirs"))
    assert theirs.arrive(POOL, "llm/p0", "e0")[0] == co.PLAN
    pod_event._let_go(mine, POOL, Log())
    assert stored(kube).holder == "theirs"
    pod_event._let_go(theirs, POOL, Log())
    assert stored(kube).holder == ""


def test_the_rounds_are_one_result_done_when_any_changed_and_a_last_retry_kept():
    class Request:
        class trigger:
            value = "pod-unschedulable"
        event_type, event_id = "cs:k8s:PodRelatedEvent", "e1"

    done, skip, retry = (result("done", "changed", ["d1"]), result("skip", "nothing to do"),
                         result("retry", "the Kubernetes API could not be read"))
    merged = pod_event._merge(Request, "c1", POOL, [done, skip])
    assert merged.outcome == "done" and merged.reason.startswith("2 rounds") and merged.decisions == ["d1"]
    assert "2. nothing to do" in merged.reason
    assert pod_event._merge(Request, "c1", POOL, [done, retry]).outcome == "retry"  # FC retries the invocation
    assert pod_event._merge(Request, "c1", POOL, [skip]) is skip
    assert pod_event._merge(Request, "c1", POOL, []).reason.startswith("coalesced: another invocation took")


def test_an_event_plans_only_for_a_pod_the_plan_would_count():
    """The plan counts a pod only when it waits, unbound, and the scheduler marked it Unschedulable: an event
    about any other pod is a skip saying why (a bound pod stays Pending while its images pull)."""
    def pod(node="", conditions=()):
        return {"metadata": {"namespace": "llm", "name": "p"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                    "limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
                "status": {"phase": "Pending", "conditions": list(conditions)}}

    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    assert pod_event._waits(pod(conditions=[unschedulable])) == ""
    assert pod_event._waits(pod()) == "is not marked Unschedulable (yet): the plan would not count it"
    assert pod_event._waits(pod(node="gpu-a", conditions=[{"type": "PodScheduled", "status": "True"}])) == \
        "is scheduled already (gpu-a)"


def test_a_wait_ended_by_the_invocations_time_notes_no_claim_as_waited_out(monkeypatch):
    """A holder late in its invocation (or one whose InvocationTimeoutS leaves no wait) gives up on another
    invocation's planning claim at once, for lack of its own time, not after pod_event.CLAIM_WAIT_S. It noted
    the claim as waited out all the same: every later event of the pool, with its whole invocation to wait in,
    ended at once saying an earlier event "waited 300 s for it", and its pod waited for the next timer tick
    while a live tick's claim ended seconds later. Only a wait that ran its bound notes the claim."""
    settings = settings_of(4440)
    clock = stopped_clock(monkeypatch)
    monkeypatch.setattr(pod_event, "CLAIM_WAIT_S", 10.0 ** 6)
    sleep_on(monkeypatch, lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    kube, holder, other = holding()
    rounds, end = [], time.time() + 3600  # the claim's end, on the store's clock (the wall clock)

    def tick(reserve_s=0.0):
        return result("skip", "pool %s %s timer-tick" % (POOL, BEING_PLANNED))

    log = Log()
    pod_event._rounds(holder, POOL, tick, rounds, 1000.0, settings, log, free=lambda: True,
                      held=lambda: "invocation timer-tick holds it until 2026-12-07T23:00:00Z",
                      waited=lambda: ("timer-tick", end))
    assert [r.outcome for r in rounds] == ["skip"] and "no time is left to wait" in rounds[0].reason, rounds
    assert stored(kube).holder == "" and stored(kube).waited == {}, stored(kube)
    # the next event, with time to wait, plans (and waits) itself
    assert other.arrive(POOL, "llm/third", "e3", claim=lambda: ("timer-tick", end))[0] == co.PLAN
