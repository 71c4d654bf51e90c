"""An auto pool's planning claim is held for a short hold past its holder's last write and renewed while the
holder works (``functions.rollout.plan_claim``: ``PlanClaims.renew``, ``ClaimRenewal``), on the test API server
(tests/support/kubeapi.py: the Lease's compare-and-swap, its Date the cluster's clock).

A holder FC ends (its Timeout, a crashed instance) stops renewing without giving the claim back: the pool is
free one hold later, not at the end of the holder's whole invocation (hours with a long Timeout), and never
while a live holder renews. A renewal whose PUT lands after the holder gave the claim back writes nothing: the
give-back bumped the Lease's resourceVersion, so the late write is a 409 and the renewal reads the claim gone."""

import copy
import json
import threading

from functions.decision import claim_rules as pc
from functions.decision.budget import lease_name
from functions.rollout.plan_claim import CLAIM_HOLD_S, CLAIM_RENEW_S, PlanClaims
from functions.rollout.pool_lease import PoolBudget

POOL = "np0a1b2c3d4e5f60718293a4b5c6d7e8f9"
HORIZON = 4 * 3600.0  # a long invocation: a dead holder's claim once held the pool this long
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/default/leases/" + lease_name(POOL)


def claims(cluster, me):
    return PlanClaims(cluster.client(), me, cluster.clock, HORIZON, 300.0)


def take(claims_, cluster):
    return claims_.take(POOL, "auto", cluster.clock() + HORIZON)


def stored(cluster):
    lease = cluster.api.leases[("default", lease_name(POOL))]
    return pc.read_claim((lease["metadata"].get("annotations") or {}).get(pc.PLANNING_ANNOTATION))


def test_a_dead_holders_claim_frees_the_pool_after_one_short_hold_and_never_while_it_renews(cluster):
    holder, second = claims(cluster, "tick-1"), claims(cluster, "tick-2")
    assert take(holder, cluster).why == ""
    for _ in range(int(3 * CLAIM_HOLD_S / CLAIM_RENEW_S)):  # three holds' worth of work, renewed all along
        cluster.now[0] += CLAIM_RENEW_S
        assert holder.renew(POOL)
        assert holder.holds(POOL)
        assert "being planned by invocation tick-1" in take(second, cluster).why
    # FC ends the holder: nothing renews the claim, nothing gives it back
    cluster.now[0] += CLAIM_HOLD_S - 2
    assert not holder.holds(POOL)  # a live holder this late would start nothing more on the pool
    assert "being planned by invocation tick-1" in take(second, cluster).why
    cluster.now[0] += 3
    assert take(second, cluster).why == ""  # one hold after the last renewal, not HORIZON
    assert stored(cluster).owner == "tick-2" and stored(cluster).expires <= cluster.clock() + CLAIM_HOLD_S
    # a holder that was only slow finds at its next renewal that the pool is another's: it writes nothing
    assert not holder.renew(POOL)
    assert "tick-2" in holder.lost[POOL] and "tick-2" in holder.lapsed()
    assert stored(cluster).owner == "tick-2"


def test_a_renewal_that_lands_after_the_claim_is_given_back_is_refused_and_resurrects_nothing(cluster):
    holder = claims(cluster, "tick-1")
    assert take(holder, cluster).why == ""
    # the renewal thread's own client (ClaimRenewal's), reading the claim before the give-back
    renewer = copy.copy(holder)
    renewer.kube = cluster.client()
    renewer.lease = PoolBudget(renewer.kube, "tick-1", cluster.clock, HORIZON)
    held = cluster.api.hold_next("PUT", LEASE_PATH)  # the server has its PUT; the answer is slow
    renewed = []
    thread = threading.Thread(target=lambda: renewed.append(renewer.renew(POOL)))
    thread.start()
    try:
        assert held.arrived.wait(10)
        holder.release(POOL)  # given back meanwhile: a new resourceVersion
        assert stored(cluster) is None
    finally:
        held.release()
        thread.join(10)
    assert renewed == [False]  # its PUT met 409, and the read after it found no claim of its own
    assert stored(cluster) is None
    assert "ran out" in renewer.lost[POOL]
    assert take(claims(cluster, "tick-2"), cluster).why == ""


def test_a_claim_held_to_the_invocations_end_needs_no_renewal_and_holds_to_that_end(cluster):
    """An invocation with less than one hold left writes its end as the claim's, as before: it holds to it."""
    short = PlanClaims(cluster.client(), "tick-1", cluster.clock, HORIZON, 300.0)
    assert short.take(POOL, "auto", cluster.clock() + CLAIM_HOLD_S / 2).why == ""
    cluster.now[0] += CLAIM_HOLD_S / 2 - 5
    assert short.holds(POOL)
    assert "tick-1" in take(claims(cluster, "tick-2"), cluster).why


def test_a_tick_whose_claim_lapsed_mid_rollout_starts_no_further_wave_beside_the_next_planner(cluster):
    """The holder stalls in its first wave past one hold (no renewal lands: a partition, a paused instance):
    another invocation takes the pool then, and the stalled one starts no second wave beside it."""
    from tests.rollout.conftest import POOL as AUTO
    from tests.rollout.test_auto_rollout import NAMES, PerGpuNodes, add_auto_nodes, tick, waiting

    api, taken = cluster.api, []

    def on_apply(name):
        if not taken:
            cluster.now[0] += CLAIM_HOLD_S + 1
            other = PlanClaims(cluster.client(), "tick-2", cluster.clock, HORIZON, 300.0)
            taken.append(other.take(AUTO, "auto", cluster.clock() + HORIZON))

    add_auto_nodes(api)
    waiting(api, 6)  # every node changes, one a wave (max-unavailable 1)
    transport = PerGpuNodes(api, on_apply)
    result = tick(cluster, transport, ACK_MIG_MAX_UNAVAILABLE="1")
    assert taken and taken[0].why == "", taken  # the pool was free one hold after the holder's last write
    assert [name for name, _ in transport.requests] == NAMES[:1], transport.requests
    others = [n for n in result.nodes if n["node_name"] != NAMES[0]]
    assert others and all("its planning claim" in n["reason"] for n in others), result.nodes


def test_the_renewal_thread_renews_each_claim_held_and_writes_nothing_once_stopped(cluster):
    from functions.rollout.plan_claim import ClaimRenewal

    holder = claims(cluster, "tick-1")
    assert take(holder, cluster).why == ""
    first = stored(cluster).expires
    cluster.now[0] += CLAIM_RENEW_S
    renewal = ClaimRenewal(holder, every_s=0.01).start()
    try:
        for _ in range(500):  # a condition, not a duration: the thread's first renewal lands
            if stored(cluster).expires > first:
                break
            threading.Event().wait(0.01)
    finally:
        renewal.stop()
    assert stored(cluster).expires == first + CLAIM_RENEW_S, (first, stored(cluster))
    assert not renewal._thread.is_alive()
    rv = cluster.api.leases[("default", lease_name(POOL))]["metadata"]["resourceVersion"]
    cluster.now[0] += CLAIM_RENEW_S
    holder.release_all()  # gives the claim back; nothing renews it after
    assert stored(cluster) is None
    assert cluster.api.leases[("default", lease_name(POOL))]["metadata"]["resourceVersion"] != rv


def test_a_tick_whose_claim_lapsed_before_its_first_wave_sends_nothing_and_ends_retry(cluster):
    """The holder stalls between its claim and its first wave past one hold (here: in its wait to list the
    Pending pods again) and another invocation takes the pool meanwhile: it sends no node, ends retry naming
    the pool, and leaves the other's claim as it is."""
    from tests.rollout.conftest import POOL as AUTO
    from tests.rollout.test_auto_overlap import planning, put_lease
    from tests.rollout.test_auto_rollout import NAMES, PerGpuNodes, add_auto_nodes, inventory, tick, waiting

    api, taken = cluster.api, []

    def stalled(_):
        cluster.now[0] += CLAIM_HOLD_S
        other = PlanClaims(cluster.client(), "tick-2", cluster.clock, HORIZON, 300.0)
        taken.append(other.take(AUTO, "auto", cluster.clock() + HORIZON))

    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    put_lease(api, {"ack-mig-hook/changed": json.dumps({"auto-z/0": cluster.now[0]})})  # lists again, after 2 s
    cluster.on_sleep = stalled
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=inventory(names=NAMES[:1]))
    assert taken and taken[0].why == "", taken
    assert transport.requests == [], transport.requests
    assert result.outcome == "retry" and AUTO in result.reason and "planning claim" in result.reason, result.reason
    assert planning(api)["owner"] == "tick-2"


def test_a_claim_whose_write_went_unanswered_stops_no_other_pools_rollout(cluster):
    """A claim write the API server failed (no verdict: it may have landed) keeps the pool in the claims to give
    back, but the invocation never took it: only pools it took can lapse, so the others' rollout goes on."""
    from node_bootstrap.kube import KubeError

    holder = claims(cluster, "tick-1")
    other = "np" + "f" * 32
    assert holder.take(other, "other", cluster.clock() + HORIZON).why == ""
    cluster.api.break_next(status=None, method="PUT", path=LEASE_PATH, times=10)
    try:
        take(holder, cluster)
    except KubeError:
        pass
    assert POOL in holder.held and holder.lapsed() == "", holder.lapsed()
    assert holder.holds(other) and not holder.holds(POOL)
