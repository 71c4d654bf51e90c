"""The pool budget's slots on the API server's clock (issue 36), on the double and on the real kube-apiserver
(``world`` fixture): two invocations whose own clocks are a day apart, either way, count each other's slots,
and a slot forged to last for ever holds the pool one run lease at most. The servers' clocks cannot be moved
from here, so the run lease is a few seconds and the test waits it out (with a deadline)."""

import time

from functions.decision import budget as pb
from functions.decision.waves import POOL_LABEL
from functions.rollout.pool_lease import PoolBudget

LEASE_S = 2.0  # the run lease of these invocations
DAY = 86400.0


def _slots(kube, pool):
    return pb.read_slots(kube.get_lease("default", pb.lease_name(pool))["metadata"]["annotations"][pb.SLOTS_ANNOTATION])


def _take(budget, pool, node):
    return budget.take(pool, pool, node, 1, budget.clock() + LEASE_S)


def _until_taken(budget, pool, node):
    """Take ``node``'s slot as soon as the pool frees one; AssertionError past one run lease and the Date's
    whole second (and a margin for a slow machine)."""
    deadline = time.monotonic() + LEASE_S + 5
    while True:
        why = _take(budget, pool, node)
        if not why:
            return
        assert time.monotonic() < deadline, why
        time.sleep(0.2)


def test_invocations_a_day_apart_share_the_budget_on_the_servers_clock(world):
    pool = world.unique("np")
    names = sorted(world.unique("gpu") for _ in range(3))
    for name in names:
        world.add_node(name, labels={POOL_LABEL: pool})
    behind = PoolBudget(world.client(), "run-behind", lambda: time.time() - DAY, LEASE_S)
    ahead = PoolBudget(world.client(), "run-ahead", lambda: time.time() + DAY, LEASE_S)
    reader = world.client()

    assert _take(behind, pool, names[0]) == ""
    said = behind.kube.server_time()  # the Date of the write's answer
    stored = _slots(reader, pool)
    assert list(stored) == [names[0]] and stored[names[0]].owner == "run-behind"
    assert said - 1 <= stored[names[0]].expires <= said + LEASE_S + 1  # the server's clock, not a day off
    # The invocation a day ahead counts it (on its own clock the slot ran out a day ago) ...
    why = _take(ahead, pool, names[1])
    assert "max-unavailable 1 (%s: held by invocation run-behind)" % names[0] in why, why
    # ... until it runs out, one run lease after it was taken (run-behind never gives it back: killed).
    _until_taken(ahead, pool, names[1])
    assert set(_slots(reader, pool)) == {names[1]}
    # And the other way round: the one behind counts the one ahead's slot.
    assert "held by invocation run-ahead" in _take(behind, pool, names[2])
    ahead.release(pool, names[1])
    assert _slots(reader, pool) == {}


def test_a_slot_forged_to_last_for_ever_holds_the_pool_one_run_lease_at_most(world):
    """Anyone with update on Leases can write ``expires: 1e15``: the first invocation that reads it counts
    the node until one run lease from then and writes that back; after it the pool is free. A value that
    is not a finite number is a slot held by an unknown run for one run lease (never fewer slots counted
    than are held), written back so; nothing raises."""
    pool = world.unique("np")
    names = sorted(world.unique("gpu") for _ in range(3))
    for name in names:
        world.add_node(name, labels={POOL_LABEL: pool})
    run = PoolBudget(world.client(), "run-1", time.time, LEASE_S)
    assert _take(run, pool, names[0]) == ""  # (the Lease made)
    run.release(pool, names[0])
    forger = world.client()
    lease = forger.get_lease("default", pb.lease_name(pool))
    lease["metadata"]["annotations"][pb.SLOTS_ANNOTATION] = (
        '{"%s": {"owner": "forger", "expires": 1e15}, "%s": {"owner": "forger", "expires": Infinity}}'
        % (names[1], names[2]))
    forger.replace_lease("default", lease)

    why = _take(run, pool, names[0])
    assert "max-unavailable 1 (%s: held by invocation forger, %s: held by invocation -)" % (names[1], names[2]) \
        in why, why
    said = run.kube.server_time()
    clamped = _slots(forger, pool)
    assert sorted(clamped) == [names[1], names[2]] and clamped[names[2]].owner == ""  # written back, clamped
    assert all(slot.expires <= said + LEASE_S + 1 for slot in clamped.values())
    _until_taken(run, pool, names[0])
    assert set(_slots(forger, pool)) == {names[0]}
