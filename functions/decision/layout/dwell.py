"""The auto pool's dwell (issue 35 item 5): a GPU the hook changed is not repartitioned again until its
dwell has passed, unless a pod has waited longer than the bound. Pure: times come in as values.

Why: demand that alternates (one pod asking 7g.80gb, then, replaced, 3g.40gb, each tick) made every tick
repartition the same GPU, and each repartition stops the node's device plugin and DCGM. The planner never
changes a GPU without a waiting pod to serve, but each tick did have one; what stops the flapping is time.

The rule, per GPU changed less than ``dwell_s`` ago (``changed``: when, on the API server's clock, from the
pool's Lease, ``functions.decision.claim_rules``):

* its instances stay: idle ones still serve the pods that wait (the scheduler binds them there), instances
  may be added beside them, but none is destroyed (``planner.plan``'s ``keep``);
* unless a pod that waits has waited longer than ``max_wait_s`` (from its ``PodScheduled=False``
  condition's ``lastTransitionTime``, never before its ``creationTimestamp``: ``claim_rules.waited_s``) and
  the plan that keeps the GPUs leaves instances of that pod's profile unserved while the plan without the
  dwell serves more of them: then the plan without the dwell is taken, for this tick.

What the dwell holds back is not sent to the autoscaler: the new-node layout and ``unserved`` are the
plan's without the dwell (a pod served here within ``max_wait_s`` needs no new node); the reasons say
which GPUs hold it back and until when.

Bounded: under any demand a GPU is repartitioned at most once per ``dwell_s`` unless pods wait longer than
``max_wait_s``; a replaced pod starts its wait again, so alternating pods never reach the bound.
"""

from dataclasses import replace
from typing import Any, Dict, FrozenSet, Mapping, NamedTuple, Optional, Sequence, Tuple

from .planner import new_node_for
from .vocabulary import Bounds, GpuSupply, Plan, PodDemand

Gpu = Tuple[str, int]


class Dwell(NamedTuple):
    """The dwell's inputs for one pool: ``changed`` (node, GPU index) -> when it last changed, and ``now``,
    both on the API server's clock; ``waited`` pod key -> seconds it has waited; the two settings."""

    changed: Mapping[Gpu, float]
    now: float
    dwell_s: float
    max_wait_s: float
    waited: Mapping[str, float]


def held(dwell: Optional[Dwell]) -> Dict[Gpu, float]:
    """The GPUs within their dwell, each with when it ends."""
    if dwell is None or dwell.dwell_s <= 0:
        return {}
    return {g: at + dwell.dwell_s for g, at in dwell.changed.items() if dwell.now - at < dwell.dwell_s}


def _short(result: Plan, profiles: FrozenSet[str]) -> int:
    return sum(n for name, n in result.unserved if name in profiles)


def plan_steady(planner: Any, supply: Sequence[GpuSupply], demand: Sequence[PodDemand], bounds: Bounds,
                dwell: Optional[Dwell], previous: Optional[Plan] = None) -> Plan:
    """``planner`` (``planner.plan``) under the dwell (module text). At most two plans: with the GPUs kept,
    and, when that one leaves something unserved, without."""
    hold = held(dwell)
    present = {(s.node, s.index) for s in supply}
    keep = frozenset(g for g in hold if g in present)
    if not keep:
        return planner(supply, demand, bounds, previous)
    kept = planner(supply, demand, bounds, previous, keep=keep)
    if not kept.unserved:
        return kept
    free = planner(supply, demand, bounds, previous)
    short_kept, short_free = dict(kept.unserved), dict(free.unserved)
    # A pod the planner does not count (no node of the pool can hold it) waits forever: its wait must not
    # lift the dwell for its profile, or one such pod would let every younger pod of that profile flap GPUs.
    ignored = {key for key, _ in kept.not_counted}
    old = frozenset(d.profile for d in demand if d.pending and d.key not in ignored
                    and dwell.waited.get(d.key, 0.0) > dwell.max_wait_s)
    if any(short_free.get(p, 0) < short_kept.get(p, 0) for p in old):
        return replace(free, reasons=free.reasons + (
            "a pod waited longer than %ds (ACK_MIG_AUTO_MAX_WAIT_S): GPUs within their dwell may change"
            % dwell.max_wait_s,))
    if short_free == short_kept:
        return kept
    # What only the dwell holds back waits for these GPUs, not for a new node: per profile, the autoscaler sees
    # what both plans leave short. Not the plan without the dwell's own shortfall: the two searches may leave
    # different profiles short, and the kept plan (the one applied) may serve what that one does not.
    both = tuple((name, min(n, short_free.get(name, 0))) for name, n in kept.unserved if short_free.get(name, 0))
    if both == free.unserved:
        new_node, shape = free.new_node, free.new_node_shape
    else:  # less what no new node holds (Plan.no_new_node): a node asked for it serves nothing
        beyond = dict(free.no_new_node)
        new_node, shape = new_node_for(tuple((name, n - beyond.get(name, 0)) for name, n in both
                                             if n > beyond.get(name, 0)), bounds, supply)
    waiting = ", ".join("%dx %s" % (n - short_free.get(name, 0), name) for name, n in kept.unserved
                        if n > short_free.get(name, 0))
    gpus = sorted(keep, key=lambda g: (hold[g], g))
    line = ("%s instance(s) wait for GPUs changed within the last %ds (ACK_MIG_AUTO_DWELL_S): %s%s, or until a "
            "pod has waited %ds (ACK_MIG_AUTO_MAX_WAIT_S)"
            % (waiting, int(dwell.dwell_s),
               ", ".join("%s GPU %d for %ds more" % (g[0], g[1], max(0, int(hold[g] - dwell.now))) for g in gpus[:3]),
               " and %d more" % (len(gpus) - 3) if len(gpus) > 3 else "", int(dwell.max_wait_s)))
    changed = {t.reason for t in free.changes}
    # the other plan's notes, less those about a profile the applied plan serves
    served = [name for name in short_free if name not in dict(both)]
    notes = tuple(r for r in free.reasons if r not in changed
                  and not any(" pending %s instance" % name in r for name in served))
    own = tuple(t.reason for t in kept.changes if t.reason)
    return replace(kept, unserved=both, new_node=new_node, new_node_shape=shape, reasons=own + notes + (line,))
