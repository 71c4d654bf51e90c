"""The auto pool's plan, in a second round where the first leaves a pod asking several instances short.

The planner (``planner.plan``) gives a pod asking several instances (of one profile or of several) room
on one node before its search repartitions idle GPUs for the other pods: a repartition the search then
makes can leave a node with the room that pod needed, which the first plan did not see. The next tick
found it, but the first one had already advertised a new node for the pod, and the autoscaler may have
added one. So where the first plan changes GPUs and leaves such a pod short, the planner runs once more on
the state the first plan leaves (its instances made, idle), and the two plans are one when the second
serves more: each GPU's layout is the second plan's, its instances to create and destroy counted from what
the GPU holds now (a GPU neither round changes is left as the planner left it). In-use instances are
never destroyed by either plan, so never by both.

Pure, as the planner: the same supply, demand and bounds give the same plan.
"""

from collections import Counter
from typing import FrozenSet, List, Optional, Sequence, Tuple

from .exact import EXACT_GPUS
from .planner import plan as plan_once
from .vocabulary import CHANGE_ADD, CHANGE_NONE, CHANGE_REPARTITION, WHOLE_GPU, Bounds, GpuSupply, GpuTarget, \
    Instance, Plan, PodDemand


# The second round doubles the planner's work where it runs. On a pool larger than the exact form takes (its
# bound, exact.EXACT_GPUS) it is left out: there the next tick finds what it would (2,000 pods asking several
# instances on 1,000 GPUs planned twice took the tick from 1.4 s of CPU to 2.7 s).
SECOND_ROUND_GPUS = EXACT_GPUS


def plan(supply: Sequence[GpuSupply], demand: Sequence[PodDemand], bounds: Bounds,
         previous: Optional[Plan] = None, keep: FrozenSet[Tuple[str, int]] = frozenset()) -> Plan:
    """``planner.plan``, with the second round the module text describes."""
    first = plan_once(supply, demand, bounds, previous, keep)
    if not first.changes or not _short(first) or not _asks_several(demand) or len(supply) > SECOND_ROUND_GPUS:
        return first
    # The caller's keep only (the dwell's): what the first round made is counted from what the GPUs hold now
    # either way, and keeping the GPUs it changed also kept their surplus idle instances, so the second round
    # could not use them and advertised a node for what the next tick served in the pool.
    second = plan_once(_applied(supply, first), demand, bounds, None, keep)
    if not second.changes or _short(second) >= _short(first):
        return first
    return _composed(supply, first, second)


def _short(result: Plan) -> int:
    return sum(n for name, n in result.unserved if name != WHOLE_GPU)


def _asks_several(demand: Sequence[PodDemand]) -> bool:
    """Whether a waiting pod asks for several MIG instances (of one profile, or of several)."""
    profiles = Counter(d.key for d in demand if d.pending and d.profile != WHOLE_GPU)
    return any(d.pending and d.profile != WHOLE_GPU and (d.count > 1 or profiles[d.key] > 1) for d in demand)


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
    """One plan from the two: the second's layouts and what it leaves unserved; each GPU's change counted from
    what the GPU holds now, its reason the two rounds' reasons."""
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
    notes = second.reasons[sum(1 for t in second.targets if t.reason):]  # after its one line per change
    return Plan(tuple(targets), second.unserved, second.new_node, tuple(reasons) + tuple(notes),
                first.unplaced, first.not_counted, second.new_node_shape)
