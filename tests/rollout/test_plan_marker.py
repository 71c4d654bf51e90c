"""The auto pool's plan marker (issue 37): the pure coalescing rules (functions/decision/coalesce.py) and their
compare-and-swap on a Lease of the local TLS API server (functions/rollout/plan_marker.py)."""

import json
import threading

import pytest

from functions.decision import coalesce as co
from functions.kube.client import KubeApi
from functions.rollout.plan_marker import PlanMarker, marker_lease
from node_bootstrap.kube import load_kubeconfig
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.module_time import module_time

POOL = "np0a1b2c3d4e5f60718293a4b5c6d7e8f9"
HOLD = 600.0


def test_an_event_without_a_live_holder_plans_and_one_with_a_live_holder_is_coalesced():
    marker, role = co.arrive(co.Marker(), "a", 1000.0, HOLD, "llm/p0", "e0")
    assert role == co.PLAN and marker.holder == "a" and marker.asked == 1 and marker.until == 1000.0 + HOLD
    marker, role = co.arrive(marker, "b", 1001.0, HOLD, "llm/p1", "e1")
    assert role == co.COALESCED and marker.holder == "a" and marker.asked == 2
    assert marker.last == {"at": 1001.0, "pod": "llm/p1", "event": "e1"}


def test_a_holder_plans_again_when_an_event_asked_during_its_round_and_lets_go_otherwise():
    marker, _ = co.arrive(co.Marker(), "a", 1000.0, HOLD, "llm/p0", "e0")
    marker = co.begin_round(marker, "a", 1000.0, HOLD)
    planned = marker.asked
    marker, _ = co.arrive(marker, "b", 1000.5, HOLD, "llm/p1", "e1")  # during the round
    again_marker, again = co.end_round(marker, "a", planned, more=True)
    assert again and again_marker.holder == "a"
    released, again = co.end_round(marker, "a", marker.asked, more=True)  # nothing asked since
    assert not again and released.holder == "" and released.until == 0.0
    # No time for another round: it lets go, and the next event finds no holder and plans.
    released, again = co.end_round(marker, "a", planned, more=False)
    assert not again and released.holder == ""
    assert co.arrive(released, "c", 1001.0, HOLD, "llm/p2", "e2")[1] == co.PLAN


def test_a_holder_without_time_for_another_round_takes_no_ask_and_is_taken_over():
    marker, _ = co.arrive(co.Marker(), "a", 1000.0, HOLD, "llm/p0", "e0")
    marker = co.begin_round(marker, "a", 1000.0, HOLD, is_open=False)
    taken, role = co.arrive(marker, "b", 1000.5, HOLD, "llm/p1", "e1")
    assert role == co.PLAN and taken.holder == "b" and taken.open  # b plans (after a's planning claim)
    assert co.end_round(taken, "a", marker.asked, more=False) == (None, False)  # a leaves b's marker alone
    assert co.read_marker(co.write_marker(marker), 1000.0, HOLD).open is False
    assert co.read_marker('{"holder": "a", "until": 1100}', 1000.0, HOLD).open  # written before the field
    assert co.read_marker('{"holder": "a", "until": 1100, "open": "no"}', 1000.0, HOLD).open  # not ours: as before


def test_a_renewal_keeps_only_this_invocations_hold_never_a_let_go_or_another_holders():
    """A holder's renewal (plan_marker.Renewal) moves its ``until`` one hold on; a marker let go, or taken over
    by another event after the hold lapsed (the renewals failed, or the holder was slow), is left as it is."""
    from functions.kube.nodes import MemoryKube

    clock = [1000.0]
    kube = MemoryKube()
    a, b = (PlanMarker(kube, me, co.HOLD_S, clock=lambda: clock[0], sleep=lambda s: None) for me in ("a", "b"))
    assert a.arrive(POOL, "llm/p0", "e0")[0] == co.PLAN
    clock[0] += co.HOLD_S - 1
    assert a.renew(POOL)
    assert a.change(POOL, lambda m, now: (None, m)).until == clock[0] + co.HOLD_S
    clock[0] += co.HOLD_S + 1  # lapsed: the next event takes over
    assert b.arrive(POOL, "llm/p1", "e1")[0] == co.PLAN
    assert not a.renew(POOL)
    assert a.change(POOL, lambda m, now: (None, m)).holder == "b"
    b.end_round(POOL, 2, more=False)  # let go
    assert not b.renew(POOL) and a.change(POOL, lambda m, now: (None, m)).holder == ""


@pytest.mark.parametrize("function_timeout_s, second", [(14400, co.COALESCED), (2220, co.PLAN)])
def test_an_ask_during_a_round_is_coalesced_only_into_a_holder_that_will_plan_it(function_timeout_s, second):
    """2220 s is one wave's worst case with the defaults (template.yml's Timeout when InvocationTimeoutS is
    below it): the holder has no time for a second round, so the event that comes during its round must not be
    answered "coalesced" (its pod would wait for the timer); it becomes the holder and plans itself."""
    import dataclasses
    import time

    from functions.base.event_result import HandlerResult
    from functions.base.settings import load_settings, longest_run_s
    from functions.kube.nodes import MemoryKube
    from functions.pipeline import pod_event

    settings = dataclasses.replace(load_settings({"ACK_MIG_CLUSTER_ID": "c1"}), function_timeout_s=function_timeout_s)
    assert longest_run_s(settings) == 2220
    kube = MemoryKube()
    holder, other = (PlanMarker(kube, me, 2220.0, sleep=lambda s: None) for me in ("holder", "event2"))
    assert holder.arrive(POOL, "llm/first", "e1")[0] == co.PLAN
    roles, rounds = [], []

    def tick(reserve_s=0.0):
        if not roles:  # an event of the pool comes while the first round applies
            roles.append(other.arrive(POOL, "llm/second", "e2")[0])
        return HandlerResult(trigger="pod-unschedulable", outcome="done", reason="planned")

    class Log:
        def info(self, *a, **k):
            pass
        warning = info

    pod_event._rounds(holder, POOL, tick, rounds, time.monotonic(), settings, Log())
    assert roles == [second]
    stored = co.read_marker(kube.leases[("default", marker_lease(POOL))]["metadata"]["annotations"][
        co.MARKER_ANNOTATION], time.time(), 2220.0)
    if second == co.COALESCED:  # the holder planned it in a second round, then let go
        assert len(rounds) == 2 and stored.holder == ""
    else:  # the holder planned once; the marker is the second event's, left for it to plan
        assert len(rounds) == 1 and stored.holder == "event2"


def test_an_open_round_keeps_time_for_the_round_that_plans_its_asks(monkeypatch):
    """An open holder's round may run as long as its rollout's waves and a claim wait allow, which the
    invocation alone does not bound to one worst-case round: 4440 s, two rounds' worth, and a round of two
    per-GPU waves (1150 s each, each started with more than a wave left) ended with 1990 s, under a round,
    and the ask it took as "coalesced" was planned by nobody. Now the round is given the invocation less a
    round, uses all of it, and the second round plans the ask."""
    import dataclasses
    import time

    from functions.base.event_result import HandlerResult
    from functions.base.settings import load_settings, longest_run_s
    from functions.kube.nodes import MemoryKube
    from functions.pipeline import pod_event

    settings = dataclasses.replace(load_settings({"ACK_MIG_CLUSTER_ID": "c1"}), function_timeout_s=4440)
    clock = [1000.0]
    monkeypatch.setattr(pod_event, "time", module_time(monotonic=lambda: clock[0]))  # its clock, no other thread's
    kube = MemoryKube()
    holder, other = (PlanMarker(kube, me, 2220.0, sleep=lambda s: None) for me in ("holder", "event2"))
    assert holder.arrive(POOL, "llm/first", "e1")[0] == co.PLAN
    roles, given, rounds = [], [], []

    def tick(reserve_s=0.0):
        left = pod_event._left_s(1000.0, settings) - reserve_s  # what run_tick's claim and rollout end by
        given.append(left)
        if not roles:
            roles.append(other.arrive(POOL, "llm/second", "e2")[0])
        clock[0] += left  # the round takes every second it was given
        return HandlerResult(trigger="pod-unschedulable", outcome="done", reason="planned")

    class Log:
        def info(self, *a, **k):
            pass
        warning = info

    pod_event._rounds(holder, POOL, tick, rounds, 1000.0, settings, Log())
    assert roles == [co.COALESCED] and given[0] == 4440 - longest_run_s(settings)
    assert len(rounds) == 2  # the ask taken during the first round was planned by the second
    stored = co.read_marker(kube.leases[("default", marker_lease(POOL))]["metadata"]["annotations"][
        co.MARKER_ANNOTATION], time.time(), 2220.0)
    assert stored.holder == "" and stored.asked == 2


def test_a_dead_holder_coalesces_only_until_its_lease_runs_out_and_then_is_taken_over():
    marker, _ = co.arrive(co.Marker(), "a", 1000.0, HOLD, "llm/p0", "e0")
    assert co.arrive(marker, "b", 1000.0 + HOLD - 1, HOLD, "llm/p1", "e1")[1] == co.COALESCED
    taken, role = co.arrive(marker, "b", 1000.0 + HOLD + 1, HOLD, "llm/p1", "e1")
    assert role == co.PLAN and taken.holder == "b"
    # The old holder, finishing late, finds the marker is not its own: it writes nothing, plans no more.
    assert co.end_round(taken, "a", 1, more=True) == (None, False)
    assert co.begin_round(taken, "a", 2000.0, HOLD) is None


def test_rounds_of_one_pool_begin_at_least_the_spacing_apart():
    marker = co.Marker(round=1000.0)
    assert co.wait_before_round(marker, 1000.5) == pytest.approx(co.SPACING_S - 0.5)
    assert co.wait_before_round(marker, 1000.0 + co.SPACING_S + 1) == 0.0
    assert co.wait_before_round(co.Marker(round=5e11), 1000.0) == co.SPACING_S  # never more than the spacing


@pytest.mark.parametrize("text", [
    None, "", "not json", "[1, 2]", '{"until": "soon"}', '{"asked": -1}', '{"asked": 1.5}', '{"until": NaN}',
    '{"round": 1e400}', "{" * 100 + "}" * 100, json.dumps({"holder": "x" * 10000}),
    # past 2100 (waves.MAX_EPOCH, the bound of every time the hook reads): not one it wrote
    json.dumps({"holder": "mallory", "until": 1e11, "asked": 3}),
])
def test_a_marker_that_is_not_ours_reads_as_empty_and_never_stops_a_plan(text):
    marker = co.read_marker(text, 1000.0, HOLD)
    assert marker.holder == "" and not marker.live(1000.0)
    assert co.arrive(marker, "a", 1000.0, HOLD, "llm/p", "e")[1] == co.PLAN


@pytest.mark.parametrize("text,why", [
    ("[1, 2]", "the plan marker is a list"), ('{"until": "soon"}', "until is text, not a number"),
    ('{"holder": ["mallory"], "until": 1e9}', "holder is a list"), ('{"holder": "a", "open": "no"}', "open is text"),
    ('{"holder": "a", "last": [], "waited": 5}', "last is a list; waited is a number"),
    ('{"waited": {"owner": "x", "until": "later"}}', "waited is no claim of a holder")])
def test_a_marker_not_ours_in_whole_or_part_is_named_in_one_warning_line(api, caplog, text, why):
    """A plan marker (or a part of it) that does not read read as absent with nothing said: an event then
    planned beside a holder it could not see (the planning claim keeps the plans apart: absent is safe), or
    waited its own time for a claim an earlier event waited out, and nobody saw why. One WARNING line names
    the pool, what does not read and the accepted form; the event still plans."""
    server, client = api
    server.leases[("default", marker_lease(POOL))] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {},
        "metadata": {"name": marker_lease(POOL), "namespace": "default", "resourceVersion": "3", "uid": "u-3",
                     "annotations": {co.MARKER_ANNOTATION: text}}}
    caplog.set_level("WARNING", logger="functions.rollout.plan_marker")
    role, seen = PlanMarker(client, "inv-a", HOLD, sleep=lambda s: None).arrive(POOL, "llm/p0", "e0")
    assert role == co.PLAN and seen.holder == "inv-a"
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and why in lines[0] and POOL in lines[0] and '"holder": <text>' in lines[0], lines
    assert len(lines[0]) < 600, lines


def test_a_forged_until_coalesces_for_one_run_lease_at_most():
    text = json.dumps({"holder": "mallory", "until": 4.1e9, "asked": 3})  # 2099: a time this hook could write
    marker = co.read_marker(text, 1000.0, HOLD)
    assert marker.until == 1000.0 + HOLD and marker.asked == 3
    assert co.read_marker(co.write_marker(marker), 1000.0 + HOLD + 1, HOLD).live(1000.0 + HOLD + 1) is False


@pytest.fixture
def api(kube_api, tmp_path):  # noqa: F811
    client = KubeApi(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert())))
    yield kube_api, client
    client.close()


def test_the_marker_lives_on_its_own_lease_written_with_the_version_read(api):
    server, client = api
    marker = PlanMarker(client, "inv-a", HOLD, sleep=lambda s: None)
    role, seen = marker.arrive(POOL, "llm/p0", "e0")
    assert role == co.PLAN and seen.holder == "inv-a"
    lease = server.leases[("default", marker_lease(POOL))]
    assert marker_lease(POOL) == "ack-mig-hook-plan-" + POOL
    assert lease["spec"]["holderIdentity"] == "inv-a"
    assert json.loads(lease["metadata"]["annotations"][co.MARKER_ANNOTATION])["last"]["pod"] == "llm/p0"
    assert ("default", "ack-mig-hook-pool-" + POOL) not in server.leases  # not the budget's Lease
    puts = [r for r in server.requests if r.method == "PUT"]
    assert puts and all(r.body["metadata"].get("resourceVersion") for r in puts)  # the CAS precondition
    planned = marker.begin_round(POOL)
    assert planned == 1
    assert marker.end_round(POOL, planned, more=True) is False
    assert "holderIdentity" not in server.leases[("default", marker_lease(POOL))]["spec"]


def test_concurrent_events_each_land_their_ask_and_exactly_one_plans(api):
    """Eight invocations arrive at once: every write is CAS'd, so every ask is counted and one holder wins."""
    server, client = api
    roles, errors = [], []

    def one(i):
        try:
            roles.append(PlanMarker(client, "inv-%d" % i, HOLD).arrive(POOL, "llm/p%d" % i, "e%d" % i)[0])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert sorted(roles) == [co.COALESCED] * 7 + [co.PLAN]
    stored = json.loads(server.leases[("default", marker_lease(POOL))]["metadata"]["annotations"][co.MARKER_ANNOTATION])
    assert stored["asked"] == 8


def test_a_later_round_claims_and_rolls_out_only_within_what_is_left_of_its_invocation():
    """A pod event's holder plans round after round in one invocation; each round began with a whole
    invocation ahead of it on paper, so its planning claim and its rollout deadline could outlive the
    invocation FC ends (a crashed round's claim then held the pool past the end the docs promise)."""
    import dataclasses

    from functions.base.settings import invocation_s, load_settings
    from functions.kube.nodes import MemoryKube
    from functions.rollout import run
    from functions.rollout.auto_waves import prepare_auto
    from functions.rollout.plan_claim import tick_claims

    settings = dataclasses.replace(load_settings({"ACK_MIG_CLUSTER_ID": "c1"}), function_timeout_s=14400)
    assert invocation_s(settings) == 14400
    before = run.clock()
    whole, late = tick_claims(MemoryKube(), settings), tick_claims(MemoryKube(), settings, left_s=300.0)
    assert whole.until >= before + 14400 and before + 300 <= late.until <= run.clock() + 300
    assert tick_claims(MemoryKube(), settings, left_s=-5.0).until <= run.clock()  # none left: expired at once
    _, rollout = prepare_auto([], {}, MemoryKube(), settings, left_s=300.0)
    assert rollout.deadline <= run.clock() + 300
    _, rollout = prepare_auto([], {}, MemoryKube(), settings)
    assert rollout.deadline >= before + 14400



def test_a_waited_out_claim_ends_events_at_once_only_while_that_same_claim_holds():
    """The note a holder leaves as it gives up on another invocation's planning claim (coalesce.let_go): an
    event that finds it ends at once (``waited-out``) only while the claim read now has the same owner and
    its end as read now has not come (renewed past the end noted: still the same claim); a claim given back,
    run out, taken by another or unread, and a note that does not read (forged), leave the event to plan,
    dropping the note. A live open holder still coalesces."""
    held = co.let_go(co.arrive(co.Marker(), "a", 1000.0, HOLD, "llm/p0", "e0")[0], "a", ("dead-run", 5000.0))
    noted = co.read_marker(co.write_marker(held), 1001.0, HOLD)
    assert noted.holder == "" and noted.waited == {"owner": "dead-run", "until": 5000.0}
    marker, role = co.arrive(noted, "b", 1001.0, HOLD, "llm/p1", "e1", ("dead-run", 5000.0))
    assert role == co.WAITED_OUT and marker.holder == "" and marker.asked == noted.asked + 1 and marker.waited
    # past the end noted, the same owner's claim renewed since (it renews a short hold while it works): the
    # same claim, so the event still ends at once rather than waiting its own 5 minutes for it again
    assert co.arrive(noted, "b", 6000.0, HOLD, "llm/p1", "e1", ("dead-run", 6100.0))[1] == co.WAITED_OUT
    for claim, now in ((("dead-run", 5000.0), 5000.0), (("dead-run", 1500.0), 1600.0), (("timer", 9000.0), 1001.0),
                       (("", 0.0), 1001.0), (None, 1001.0)):
        marker, role = co.arrive(noted, "b", now, HOLD, "llm/p1", "e1", claim)
        assert role == co.PLAN and marker.holder == "b" and marker.waited == {}, (claim, now)
    live = co.arrive(noted, "c", 1001.0, HOLD, "llm/p2", "e2")[0]  # another event plans (the claim given back)
    assert co.arrive(live, "d", 1002.0, HOLD, "llm/p3", "e3", ("dead-run", 5000.0))[1] == co.COALESCED
    for forged in ('{"waited": {"owner": "", "until": 5000}}', '{"waited": {"owner": "x", "until": 1e15}}',
                   '{"waited": {"owner": "x", "until": true}}', '{"waited": ["x", 5000]}'):
        assert co.read_marker(forged, 1001.0, HOLD).waited == {}, forged
    assert co.let_go(noted._replace(holder="other"), "a", ("dead-run", 5000.0)) is None  # not this one's


def test_a_renewal_in_flight_when_the_holder_stops_it_writes_nothing_after():
    """FC freezes the instance once the invocation returns, and a thread it left running wakes in a later one.
    A renewal whose read was still in flight when the holder stopped the renewals (``Renewal.stop`` waits one
    second for it) went on and wrote, with the stopped invocation's state, whenever it woke: where the let-go
    had failed (the API server slow), the hold of an invocation that had returned was renewed, and the pool's
    events were answered coalesced into it for one more hold. A renewal writes only until it is stopped: what
    it had read is dropped."""
    from functions.kube.nodes import MemoryKube
    from functions.rollout.plan_marker import Renewal

    store = MemoryKube()
    entered, release = threading.Event(), threading.Event()

    class Slow:  # the API server, answering the renewal's read only when the test says
        def __getattr__(self, name):
            return getattr(store, name)

        def get_lease(self, namespace, name):
            if threading.current_thread().name == "plan-marker-renewal":
                entered.set()
                assert release.wait(60)
            return store.get_lease(namespace, name)

    clock = [1000.0]
    holder = PlanMarker(Slow(), "a", co.HOLD_S, clock=lambda: clock[0], sleep=lambda s: None)
    assert holder.arrive(POOL, "llm/p0", "e0")[0] == co.PLAN
    before = holder.change(POOL, lambda m, now: (None, m))

    class Log:
        def warning(self, *args, **kwargs):
            pass

    renewal = Renewal(holder, POOL, Log(), every_s=0.001).start()
    assert entered.wait(60)
    renewal.stop()  # the let-go failed: the marker still names "a"
    clock[0] += 60.0  # the next invocation, a minute on
    release.set()
    renewal._thread.join(60)
    assert not renewal._thread.is_alive()
    assert holder.change(POOL, lambda m, now: (None, m)) == before


def test_a_renewal_that_fails_tries_again_at_the_next_and_one_reading_a_foreign_marker_stops():
    """The renewal thread has no caller to tell: a 5xx, no answer, or a marker that changed under every write
    (24 conflicts) is one warning, and the next renewal tries again and lands; a marker that does not read
    (forged, or not ours) names no holder, so the thread stops without writing, and nothing escapes it."""
    from functions.kube.client import ApiError
    from functions.kube.nodes import MemoryKube
    from functions.rollout.plan_marker import CAS_ATTEMPTS, Renewal

    store = MemoryKube()
    failures = [ApiError("HTTP 503 Service Unavailable", 503), ApiError("no complete answer within 15s")] + \
        [ApiError("the object has been modified", 409, "Conflict")] * CAS_ATTEMPTS
    landed = threading.Event()

    class Failing:  # the API server, failing the renewals' writes as listed, then taking them
        def __getattr__(self, name):
            return getattr(store, name)

        def replace_lease(self, namespace, lease):
            if threading.current_thread().name == "plan-marker-renewal":
                if failures:
                    raise failures.pop(0)
                out = store.replace_lease(namespace, lease)
                landed.set()
                return out
            return store.replace_lease(namespace, lease)

    class Log:
        def __init__(self):
            self.warnings = []

        def warning(self, event, **fields):
            self.warnings.append(fields["reason"])

    clock = [1000.0]
    holder = PlanMarker(Failing(), "a", co.HOLD_S, clock=lambda: clock[0], sleep=lambda s: None)
    assert holder.arrive(POOL, "llm/p0", "e0")[0] == co.PLAN
    clock[0] += 20.0
    log = Log()
    renewal = Renewal(holder, POOL, log, every_s=0.001).start()
    assert landed.wait(60)
    renewal.stop()
    assert holder.change(POOL, lambda m, now: (None, m)).until == 1020.0 + co.HOLD_S
    assert len(log.warnings) == 3 and all("hold not renewed" in w for w in log.warnings), log.warnings
    assert "503" in log.warnings[0] and "no complete answer" in log.warnings[1] and "changed under" in log.warnings[2]

    lease = store.leases[("default", marker_lease(POOL))]
    lease["metadata"]["annotations"][co.MARKER_ANNOTATION] = '{"holder": "a", "until": "forever"}'
    before = json.dumps(lease, sort_keys=True)
    renewal = Renewal(holder, POOL, log, every_s=0.001).start()
    renewal._thread.join(60)
    assert not renewal._thread.is_alive() and len(log.warnings) == 3
    assert json.dumps(store.leases[("default", marker_lease(POOL))], sort_keys=True) == before


def test_a_renewal_read_before_the_let_go_and_written_after_it_lands_nothing():
    """The holder's work ends while a renewal is in flight: it read the marker naming the holder, and its write
    reaches the API server only after the holder let go. Written, it would name a holder that returned for one
    more hold, the pool's events answered coalesced into it. It carries the version it read, so the server
    refuses it (409), and read again the marker names no holder: nothing is written."""
    from functions.kube.nodes import MemoryKube
    from functions.rollout.plan_marker import Renewal

    store = MemoryKube()
    read, let_go, refused = threading.Event(), threading.Event(), []

    class Late:  # the API server, taking the renewal's first write only after the let-go
        def __getattr__(self, name):
            return getattr(store, name)

        def replace_lease(self, namespace, lease):
            if threading.current_thread().name == "plan-marker-renewal" and not let_go.is_set():
                read.set()
                assert let_go.wait(60)
                try:
                    return store.replace_lease(namespace, lease)
                except Exception as exc:
                    refused.append(getattr(exc, "status", None))
                    raise
            return store.replace_lease(namespace, lease)

    holder = PlanMarker(Late(), "a", co.HOLD_S, sleep=lambda s: None)
    assert holder.arrive(POOL, "llm/p0", "e0")[0] == co.PLAN
    renewal = Renewal(holder, POOL, type("Log", (), {"warning": lambda *a, **k: None})(), every_s=0.001).start()
    assert read.wait(60)  # a renewal is in flight, its write not yet taken
    assert holder.end_round(POOL, 1, more=False) is False  # the holder lets go
    let_go.set()
    renewal._thread.join(60)  # it ends on its own: the marker names no holder now
    assert not renewal._thread.is_alive() and refused == [409]
    assert holder.change(POOL, lambda m, now: (None, m)).holder == ""
    renewal.stop()


def test_a_renewal_write_in_flight_when_the_holder_stops_it_has_ended_once_stop_returns(api):
    """FC freezes the instance once the invocation returns, and a thread it left running wakes in a later one.
    A renewal's PUT the API server was slow to answer outlived ``Renewal.stop`` (it waited one second, the
    client 15 s an attempt and retried): where the let-go had failed too, that write, or the client's retry of
    it, could land in a later invocation and hold the pool for one more hold. Renewals call through a client
    whose whole call, retries included, ends within RENEW_CALL_S, which ``stop`` waits out: once it returns,
    no renewal is in flight."""
    from functions.rollout.plan_marker import RENEW_CALL_S, Renewal

    server, client = api
    holder = PlanMarker(client, "a", co.HOLD_S, sleep=lambda s: None)
    assert holder.arrive(POOL, "llm/p0", "e0")[0] == co.PLAN
    assert RENEW_CALL_S < co.RENEW_S / 2
    held = server.hold_next("PUT", "/apis/coordination.k8s.io/v1/namespaces/default/leases/" + marker_lease(POOL),
                            timeout=60)
    log = type("Log", (), {"warnings": [], "warning": lambda self, event, **f: self.warnings.append(f["reason"])})()
    renewal = Renewal(holder, POOL, log, every_s=0.001).start()
    try:
        assert held.arrived.wait(60)  # the renewal's write is sent, its answer late
        renewal.stop()  # the let-go failed: the marker still names "a"
        assert not renewal._thread.is_alive()  # its call ended (given up) within stop's wait
        assert len(log.warnings) == 1 and "no complete answer" in log.warnings[0], log.warnings
    finally:
        held.release()
        renewal._thread.join(60)
