"""The auto pool's plan, in further rounds on the state the first leaves while a pod asks several instances.

The planner (``planner.plan``) gives a pod asking several instances (of one profile or of several) room
on one node before its search repartitions idle GPUs for the other pods: a repartition the search then
makes can leave a node with the room that pod needed, which the first plan did not see, and a pod asking
several profiles can find all of its asks among the instances the plan made for others (and take them, in
the scheduler's pod order). The next tick found it and changed GPUs again on the same demand. So where the
first plan changes GPUs while such a pod waits, the planner runs again on the state each plan leaves (its
instances made, idle) until a round changes nothing, and the plan is the one that ends there: each GPU's
layout the last round's, its instances to create and destroy counted from what the GPU holds now (a GPU
no round changes is left as the planner left it). An applied plan re-planned on the same demand then
changes nothing, whether or not a later round serves more: the next tick would make its changes anyway.
Where the rounds find no such state within ``ROUNDS``, the plan is the first round, or the first two where
the second serves more. In-use instances are never destroyed by any round, so never by all of them.

Pure, as the planner: the same supply, demand and bounds give the same plan.
"""

from collections import Counter
from typing import FrozenSet, List, Optional, Sequence, Tuple

from .exact import EXACT_GPUS
from .planner import UNCHECKED, plan as plan_once
from .vocabulary import CHANGE_ADD, CHANGE_NONE, CHANGE_REPARTITION, WHOLE_GPU, Bounds, GpuSupply, GpuTarget, \
    Instance, Plan, PodDemand


# Each further round adds a whole plan's work where it runs. On a pool larger than the exact form takes (its
# bound, exact.EXACT_GPUS) they run only while its GPUs times the instances the waiting pods ask stay within
# ROUND_WORK; past it the next tick finds what they would (2,000 pods asking several instances on 1,000 GPUs
# planned twice took the tick from 1.4 s of CPU to 2.7 s). There the yield passes (planner.YIELD_PASSES) stay
# off, so a tick is ROUNDS plans at most. scripts/plan_cost.py (2-core machine shared with other work): on
# 1,000 GPUs with 57 to 127 instances asked, 40 to 50 ms of CPU a plan, so 6 plans stay near the ~300 ms the
# bench gives 1,000 GPUs (docs/performance.md); with 225 to 250 instances a tick of 4 plans took 200 to 330
# ms, past it. On 400 GPUs with 75 to 247 instances, 3 or 4 plans, 60 to 180 ms. A count, not a clock: the
# plan stays pure.
SECOND_ROUND_GPUS = EXACT_GPUS
ROUND_WORK = 100_000
# Rounds in all, the first included (at least 2); each is a whole plan's work, paid only where the rounds
# have not rested, and each is a planner.plan, itself up to planner.YIELD_PASSES plans: ROUNDS x YIELD_PASSES
# = 24 plans in one tick at most, on pools of at most EXACT_GPUS GPUs (the exact solve runs in none of them:
# the planner leaves it out while a pod asks several instances). scripts/plan_cost.py on 96 GPUs: 24 plans
# reached with 600 to 700 instances waiting (under 0.5 s of CPU); the slowest, 1.6 s, 12 plans of 0.13 s for
# 5,000 instances waiting: 24 such plans would be about 3 s. 8,000 random small pools (tests/layout/ticks.py,
# seeds 0 to 7,999: more pods asking several profiles than the earlier review's 4,000, which needed at most 4)
# needed at most 6 to reach a state no round changes (15 of them 5 or 6, 95 four); with 4, those 15 changed
# GPUs again on the next ticks.
ROUNDS = 6


def plan(supply: Sequence[GpuSupply], demand: Sequence[PodDemand], bounds: Bounds,
         previous: Optional[Plan] = None, keep: FrozenSet[Tuple[str, int]] = frozenset()) -> Plan:
    """``planner.plan``, with the further rounds the module text describes."""
    first = plan_once(supply, demand, bounds, previous, keep)
    if not first.changes or not _asks_several(demand) or not _rounds_pay(supply, demand):
        return first
    # The caller's keep only (the dwell's): what the first round made is counted from what the GPUs hold now
    # either way, and keeping the GPUs it changed also kept their surplus idle instances, so the second round
    # could not use them and advertised a node for what the next tick served in the pool. Taken whether or not
    # the first round leaves a pod short: one that serves every pod still left a pod asking several profiles
    # the instances it made for another, and the next tick changed a GPU for the one that lost them.
    state, result, second = _applied(supply, first), first, None
    for _ in range(ROUNDS - 1):
        after = plan_once(state, demand, bounds, None, keep)
        if not after.changes:
            # the state the rounds leave is one no tick changes again. Its pods short and the new node for them
            # are the resting round's, counted on that state: the round before counts them on the state before
            # its changes, where a pod asking several profiles that binds first in pod order has not yet taken
            # the instances made for others (the plan would ask a node for it, and the next tick one for them)
            return _composed(supply, result, after)
        second = second or after
        result, state = _composed(supply, result, after), _applied(state, after)
    # No state where the rounds rest within the bound: the second round, kept only when it serves more.
    if _short(second) >= _short(first):
        return first
    return _composed(supply, first, second)


def _rounds_pay(supply: Sequence[GpuSupply], demand: Sequence[PodDemand]) -> bool:
    """Whether the further rounds run on this pool (ROUND_WORK says why)."""
    if len(supply) <= SECOND_ROUND_GPUS:
        return True
    asked = sum(max(int(d.count), 0) for d in demand if d.pending and d.profile != WHOLE_GPU)
    return len(supply) * asked <= ROUND_WORK


def _short(result: Plan) -> int:
    return sum(n for name, n in result.unserved if name != WHOLE_GPU)


def _asks_several(demand: Sequence[PodDemand]) -> bool:
    """Whether a waiting pod asks for several MIG instances (of one profile, or of several), or for whole GPUs
    beside one: such a pod binds only to what it finds on one node, and may find it among what a round made."""
    asks = Counter(d.key for d in demand if d.pending)
    return any(d.pending and d.profile != WHOLE_GPU and (d.count > 1 or asks[d.key] > 1) for d in demand)


def _applied(supply: Sequence[GpuSupply], result: Plan) -> List[GpuSupply]:
    """The supply once ``result`` is applied: each GPU's target layout, its instances in use as they were, the
    ones made idle (the pods they are for have not bound yet)."""
    targets = {(t.node, t.index): t for t in result.targets}
    out = []
    for s in supply:
        target = targets.get((s.node, s.index))
        if target is None or target.change == CHANGE_NONE:
            out.append(s)
            continue
        held = {(i.profile, i.start) for i in s.instances if i.in_use}
        out.append(GpuSupply(s.node, s.index, s.model,
                             tuple(Instance(p, start, (p, start) in held) for p, start in target.layout),
                             s.mig, s.busy))
    return out


def _composed(supply: Sequence[GpuSupply], first: Plan, second: Plan) -> Plan:
    """One plan from two (the rounds so far, then the next): the second's layouts and what it leaves unserved;
    each GPU's change counted from what the GPU holds now, its reason the rounds' reasons."""
    now = {}  # type: dict
    for s in supply:  # the first copy of a GPU listed twice, as the planner reads it (it leaves such a GPU)
        now.setdefault((s.node, s.index), s)
    firsts = {(t.node, t.index): t for t in first.targets}
    targets, reasons = [], []
    for t in second.targets:
        before = firsts.get((t.node, t.index))
        if t.change == CHANGE_NONE and (before is None or before.change == CHANGE_NONE):
            targets.append(before or t)  # neither round changes it: as the planner left it
            continue
        s = now.get((t.node, t.index))
        # by start, as the planner's own targets list them (planner._target): not in the order the node's
        # report listed them, or the same pool listed otherwise gives another plan
        had = sorted(((i.profile, i.start) for i in s.instances), key=lambda x: (x[1], x[0])) \
            if s is not None else list(t.layout)
        create = tuple(x for x in t.layout if x not in had)
        destroy = tuple(x for x in had if x not in t.layout)
        change = CHANGE_NONE if not (create or destroy) else CHANGE_ADD if not destroy else CHANGE_REPARTITION
        why = " ".join("; ".join(r for r in (before.reason if before else "", t.reason) if r).split())[:400]
        targets.append(GpuTarget(t.node, t.index, t.layout, change, why if change != CHANGE_NONE else "",
                                 create, destroy))
        if change != CHANGE_NONE and why:
            reasons.append(why)
    # The notes after the second's one line per change are about the pods it leaves short, but for the first's
    # on the changes it made unchecked, which the composed plan keeps
    notes = second.reasons[sum(1 for t in second.targets if t.reason):]
    notes = tuple(n for n in first.reasons if UNCHECKED in n and n not in notes) + tuple(notes)
    return Plan(tuple(targets), second.unserved, second.new_node, tuple(reasons) + tuple(notes),
                first.unplaced, first.not_counted, second.new_node_shape, second.no_new_node)
