"""Pod events and timer ticks of one auto pool at once, under seeded schedules (etcd's robustness idea, as
tests/layout/ticks.py does for plans): the plan marker (``functions.rollout.plan_marker``), the holder's
renewals, the planning claim (``functions.rollout.plan_claim``) with its own renewals, and the waited-out
note, each a real compare-and-swap on one in-memory store (``functions.kube.nodes.MemoryKube``: kube-apiserver's
Lease rules), their steps interleaved by a seeded scheduler, the cluster's clock moved between steps (holds
lapse when no renewal comes), invocations killed at any step (FC ends them: their claim holds until its hold
runs out, as nothing renews it).

A pod event's invocation is modelled as ``functions.pipeline.pod_event`` runs it: its ask, then while it
holds the marker its rounds (the round begun, the claim taken, the Pending pods listed, the claim given back,
the round's end), a wait for another's claim given up after a few looks (the marker let go, the claim noted),
its renewals a step of their own until it stops them. A planner's claim renewals are a step of their own too,
from its claim until it gives it back, and it checks that it still holds the claim (``PlanClaims.holds``, its
own clock) before each step of its plan, giving up the plan where not. Checked over every schedule:

* never two plans of the pool at once (the claim): no planner acts on the pool while another's claim still
  holds by that one's own reckoning;
* every event ends ``skip`` or ``done`` (none loops, none is left running when the others are done);
* no event waits for nothing: an event answered ``coalesced`` names a holder that has not returned (a holder
  that returned and still named would have its pool's events answered into a plan that never comes), and its
  pod is in a list of the Pending pods taken after its ask, unless an invocation died or gave up meanwhile
  (then the auto pool timer plans it: docs/auto-pools.md "Pod events")."""

import random

import pytest

from functions.decision import coalesce as co
from functions.kube.nodes import MemoryKube
from functions.rollout.plan_claim import PlanClaims
from functions.rollout.plan_marker import PlanMarker

POOL = "np0a1b2c3d4e5f60718293a4b5c6d7e8f9"
HORIZON = 600.0  # the longest invocation: a claim never holds past it
CLAIM_HOLD = 60.0  # a claim's hold past its last renewal (shortened): a dead invocation's claim runs out soon
LOOKS = 3  # the looks at another's claim before a round gives up (CLAIM_WAIT_S / CLAIM_POLL_S, shortened)


class World:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.kube = MemoryKube()
        self.now = [1000.0]
        self.step = 0
        self.planning = set()  # invocations between their list and their claim given back
        self.claim_of = {}  # invocation -> its PlanClaims
        self.lapsed = set()  # planners that found their claim's hold lapsed and gave up their plan
        self.lists = []  # (step, pods listed)
        self.asked = {}  # pod -> step its ask landed
        self.pending = set()
        self.returned = set()  # invocations that returned normally
        self.dead = set()
        self.gave_up = set()
        self.troubles = []  # steps at which an invocation died or gave up on another's claim
        self.coalesced = []  # (pod, step, holder)
        self.outcomes = {}

    def clock(self):
        return self.now[0]

    def marker(self, me):
        return PlanMarker(self.kube, me, co.HOLD_S, clock=self.clock, sleep=lambda s: None)

    def claims(self, me):
        claims = PlanClaims(self.kube, me, self.clock, HORIZON, 0.0, hold_s=CLAIM_HOLD)
        self.claim_of.setdefault(me, claims)
        return claims


def event(world, me, pod):
    """A pod event's invocation, one store operation a step (``yield``)."""
    marker, claims = world.marker(me), world.claims(me)
    world.pending.add(pod)
    peeked = []

    def claim_now():
        peeked[:] = [world.claims("peek").peek(POOL, POOL)]
        return peeked[0].holder, peeked[0].until

    role, seen = marker.arrive(POOL, pod, "e-" + me, claim=claim_now)
    world.asked[pod] = world.step
    if role == co.COALESCED:
        world.coalesced.append((pod, world.step, seen.holder))
        assert seen.holder not in world.returned, ("coalesced into a holder that returned", pod, seen)
        world.outcomes[me] = "skip"
        return
    if role == co.WAITED_OUT:
        world.outcomes[me] = "skip"
        return
    yield "renewals", me  # the holder's renewals run beside it from here until it stops them
    while True:
        planned = marker.begin_round(POOL, True)
        yield
        if planned is None:  # taken over after its hold lapsed: that holder plans
            world.outcomes[me] = "skip"
            return
        looks = 0
        while True:
            taken = claims.take(POOL, POOL, world.clock() + HORIZON)
            yield ("claim-renewals", me) if not taken.why else None
            if not taken.why:
                break
            looks += 1
            if looks >= LOOKS:  # gives up: lets go, noting the claim it waited out
                other = world.claims("peek").peek(POOL, POOL)
                yield
                marker.change(POOL, lambda m, now: (co.let_go(
                    m, me, (other.holder, other.until) if other.holder else None), None))
                world.troubles.append(world.step)
                world.gave_up.add(me)
                world.outcomes[me] = "skip"
                return
        yield from planned_once(world, me, claims)
        yield
        again = marker.end_round(POOL, planned, True)
        yield
        if not again:
            world.outcomes[me] = "done"
            return


def renewals(world, me):
    marker = world.marker(me)
    while me not in world.returned and me not in world.dead:
        if not marker.renew(POOL, lambda: me not in world.returned and me not in world.dead):
            return
        yield


def claim_renewals(world, me):
    """A planner's claim renewals (``PlanClaims.renew``), one a step, until it gives the claim back or dies."""
    claims = world.claim_of[me]
    while me not in world.dead and POOL in claims.held:
        claims.renew(POOL, lambda: me not in world.dead and POOL in claims.held)
        yield


def timer(world, me):
    """The auto pool timer's tick: the claim, a list, the claim given back; it never coalesces."""
    claims = world.claims(me)
    taken = claims.take(POOL, POOL, world.clock() + HORIZON)
    yield ("claim-renewals", me) if not taken.why else None
    if taken.why:
        world.outcomes[me] = "skip"
        return
    yield from planned_once(world, me, claims)
    world.outcomes[me] = "done"


def acts(world, me, claims):
    """Whether ``me`` may take its plan's next step: its claim still holds by its own reckoning; then no
    other planner's does (the invariant). A planner whose claim lapsed gives up its plan (the tick's retry)."""
    if not claims.holds(POOL):
        world.lapsed.add(me)
        world.troubles.append(world.step)
        return False
    others = [o for o in world.planning if o != me and world.claim_of[o].holds(POOL)]
    assert not others, ("two plans of the pool at once", me, others)
    return True


def planned_once(world, me, claims):
    """One plan of the pool under its planning claim: the invariant's check (no other plan at once), the
    Pending list read, a step between, the plan's writes (the claim checked again first), the claim given
    back."""
    if acts(world, me, claims):
        world.planning.add(me)
        world.lists.append((world.step, set(world.pending)))
        yield
        acts(world, me, claims)
    world.planning.discard(me)
    claims.release(POOL)


def schedule(seed, events=6, kills=True):
    world = World(seed)
    rng = world.rng
    waiting = [("e%d" % i, "llm/p%d" % i) for i in range(events)]
    timers = ["t%d" % i for i in range(rng.randint(0, 2))]
    running = {}  # name -> generator
    owner = {}  # a renewal's name -> its holder
    for _ in range(10 ** 4):
        starts = [w for w in waiting[:1]] + [t for t in timers[:1]]
        if not running and not starts:
            break
        choices = list(running) + [s[0] if isinstance(s, tuple) else s for s in starts]
        name = rng.choice(choices)
        world.step += 1
        world.now[0] += rng.choice((0.0, 0.5, 2.0, 7.0, 20.0))
        if name not in running:
            if waiting and name == waiting[0][0]:
                me, pod = waiting.pop(0)
                running[me] = event(world, me, pod)
            else:
                timers.remove(name)
                running[name] = timer(world, name)
        if kills and rng.random() < 0.03 and not name.startswith(("r-", "c-")):
            holder = owner.get(name, name)
            world.dead.add(holder)
            world.troubles.append(world.step)
            for other in [n for n in running if n == holder or owner.get(n) == holder]:
                del running[other]
            world.planning.discard(holder)
            continue
        try:
            said = next(running[name])
        except StopIteration:
            del running[name]
            if name not in owner:
                world.returned.add(name)
            continue
        if isinstance(said, tuple) and said[0] == "renewals":
            owner["r-" + name] = name
            running["r-" + name] = renewals(world, name)
        if isinstance(said, tuple) and said[0] == "claim-renewals":
            owner["c-" + name] = name
            running["c-" + name] = claim_renewals(world, name)
    else:
        raise AssertionError(("the schedule never ended", seed, list(running)))
    return world


@pytest.mark.parametrize("seed", range(200))
def test_events_and_ticks_at_once_never_plan_twice_and_leave_no_event_waiting_for_nothing(seed):
    world = schedule(seed)
    for me in [n for n in world.outcomes]:
        assert world.outcomes[me] in ("skip", "done"), (seed, me, world.outcomes[me])
    started = {"e%d" % i for i in range(6)}
    assert started - world.dead <= set(world.outcomes), (seed, started - world.dead - set(world.outcomes))
    for pod, at, holder in world.coalesced:
        served = any(step > at and pod in pods for step, pods in world.lists)
        # (a holder that died, or gave up, answers events coalesced within its hold: the timer plans those pods)
        assert served or holder in world.dead | world.gave_up | world.lapsed or any(t >= at for t in world.troubles), \
            ("a coalesced pod never planned", seed, pod, holder)
    # the marker names no invocation that returned: the next event of the pool is not answered into it
    lease = world.kube.leases.get(("default", "ack-mig-hook-plan-" + POOL))
    if lease is not None:
        marker = co.read_marker(lease["metadata"]["annotations"].get(co.MARKER_ANNOTATION), world.clock(), co.HOLD_S)
        assert not (marker.live(world.clock()) and marker.holder in world.returned), (seed, marker)
