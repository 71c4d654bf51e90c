"""An auto pool's per-GPU changes, carried by the rollout (issue 27 item 5).

The auto pool step (``functions.pipeline.auto_pool``) plans per-GPU target layouts; this module turns each
changed node into a wave node of the same :class:`~functions.rollout.executor.RolloutExecutor` a labelled
pool's rollout uses, so the change gets what a rollout gets: the claim on the node's record (two ticks, or a
tick and a pool event, never change one node twice), a slot of the pool's budget (the Lease of
``functions.rollout.pool_lease``, shared with every other actor; ``max-unavailable`` of the pool), the pause
read again just before the slot, Events on the Node, the record ``status`` reads, and the wait for the new
capacity. What it does not get is the cordon and the drain: the node destroys only instances nothing uses
(it checks each one itself) and leaves a GPU that turned busy as it is.

Why a slot although nothing is drained: the node's device plugin re-registers its resources after the change,
and the pool's budget is the one place where every actor (other invocations, a labelled rollout, NotReady
nodes) sees what is in flux. A node already counted takes no second slot.

A wave's nodes all try their claim; those beyond the budget wait (deferred, the reason names the budget), and
the next wave of the same invocation offers them again with the plan unchanged, while the invocation has time.
"""

import dataclasses
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from functions.base.model import Decision
from functions.base.settings import invocation_s
from functions.decision import waves as rp
from functions.rollout import run
from functions.rollout.run import PoolRollout, Rollout, WaveNode
from functions.base.textsafe import one_line


class AutoRollout(Rollout):
    """A :class:`Rollout` whose next wave offers the nodes still waiting again, as first planned: the
    per-GPU plan was made for the demand of this tick, and the node re-checks every instance before it
    destroys one, so the plan needs no second reading of the pool within the invocation."""

    def __init__(self, *args: Any, planned: Optional[Dict[str, WaveNode]] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.planned = dict(planned or {})
        # "" while the tick's planning claims hold, else why not (plan_claim.PlanClaims.lapsed): no further wave
        self.fence: Callable[[], str] = lambda: ""

    def time_for(self, drain: bool) -> Tuple[bool, str]:
        lapsed = self.fence()
        return (False, lapsed) if lapsed else super().time_for(drain)

    def replan(self, pool_ids: Sequence[str], finished: Sequence[str], unwritable: Sequence[str] = ()
               ) -> Tuple[Dict[str, Decision], Dict[str, WaveNode]]:
        done, pools = set(finished) | set(unwritable), set(pool_ids)
        waves = {iid: dataclasses.replace(w, progress=None, rv="", result=None, applied=None, daemon_pods=None)
                 for iid, w in self.planned.items() if w.pool_id in pools and iid not in done}
        return {iid: w.decision for iid, w in waves.items()}, waves

    def needs_drain(self, pool_id: str, pending: Sequence[str]) -> bool:
        return False  # nothing of an auto pool's per-GPU change drains


def created_by_gpu(targets: Sequence[Any]) -> Dict[int, Tuple[str, ...]]:
    """Per GPU index, the profiles the plan creates (GpuTarget.create): what the capacity wait looks for."""
    return {t.index: tuple(p for p, _ in t.create) for t in targets}


def prepare_auto(changes: Sequence[Tuple[Any, Decision, Sequence[Any]]], pool_sizes: Dict[str, int], kube: Any,
                 settings: Any, pools_now: Optional[Callable[[], Sequence[Any]]] = None, owner: str = "",
                 left_s: Optional[float] = None) -> Tuple[List[Decision], AutoRollout]:
    """The per-GPU decisions as wave nodes: ``changes`` is ``(pool, decision, the node's GpuTargets)`` per
    changed node, ``pool_sizes`` each pool's node count (its ``max-unavailable`` percentage is of that).
    Returns the decisions (a pool whose ``max-unavailable`` label is wrong: one error on its first node, the
    others skipped, as a labelled pool) and the rollout that carries them. ``owner``: the invocation's id
    (the tick's planning claims carry it too); new when empty."""
    owner, now = owner or uuid.uuid4().hex[:12], run.cluster_clock(kube)()  # the API server's
    expires = now + run.run_lease_s(settings)
    waves: Dict[str, WaveNode] = {}
    out: List[Decision] = []
    pools: Dict[str, PoolRollout] = {}
    by_pool: Dict[str, List[Tuple[Any, Decision, Sequence[Any]]]] = {}
    for change in changes:
        by_pool.setdefault(change[0].nodepool_id, []).append(change)
    for pool_id, members in sorted(by_pool.items()):
        pool = members[0][0]
        name = run.pool_name(pool, pool_id)
        limit, refused = run.pool_limit(settings, pool, name, [d for _, d, _ in members],
                                        pool_sizes.get(pool_id) or len(members))
        if limit is None:  # the pool's setting, not its nodes: said once
            out.extend(refused[d.instance_id] for _, d, _ in members)
            continue
        pools[pool_id] = PoolRollout(pool_id, [d for _, d, _ in members], pool, {})
        for _, d, targets in members:
            layouts = {t.index: tuple(t.layout) for t in targets}
            d = d.model_copy(update=dict(drain=False))  # its reason stays advise's (the result names the budget)
            waves[d.instance_id] = WaveNode(d, rp.per_gpu_target(layouts), "", {}, False, drain=False,
                                            pool_id=pool_id, pool_name=name, limit=limit, layouts=layouts,
                                            created=created_by_gpu(targets), budgeted=True)
            out.append(d)
    # the invocation's end: a whole invocation from now, or what a pod event's later round has left of it (on
    # the invocation's own clock: Rollout.time_for)
    left = invocation_s(settings) if left_s is None else min(float(invocation_s(settings)), max(0.0, left_s))
    rollout = AutoRollout(kube, dict(waves), settings, owner, expires, pools, pools_now, run.clock() + left,
                          planned=waves)
    rollout.drains = {iid: False for iid in waves}
    return out, rollout


def finish_stranded(kube: Any, nodes: Sequence[Any], settings: Any, owner: str, pool_id: str,
                    dry_run: bool = False) -> List[str]:
    """End the records a stopped invocation left mid-change on an auto pool's ``nodes`` (proven members):
    one line per node finished, or whose write that node's answer refused (it fails alone). An auto change
    never cordons or drains, so such a node lost nothing, but its record said ``applying`` for good
    (``status``: pending) and the autoscaler's scale-down opt-out the change set kept it from ever being
    removed: no later plan names a node that already holds what the pods want, and only a plan's rollout
    rewrote the record. The record ends ``done`` with the reason, on the version read (a 409 or 404: another
    invocation took the node, or it went: left to that; a 5xx, no answer or RBAC's 403 is not the node's
    refusal: raised, the record left as it was and the tick ends retry); the layout is the node's own to say
    (its state label and layouts annotation), nothing is sent to it.

    The stopped run's slot of the pool's budget on the node (``pool_id``'s Lease) goes back with it, once it
    has run out: it counted for nothing, but ``kubectl get lease`` showed the dead run holding the node until
    another node of the pool took a slot, and the record no longer names that run (so nothing else ties the
    slot to an ended node)."""
    from node_bootstrap.kube import KubeError

    from functions.rollout.executor import nodes_own
    from functions.rollout.pool_lease import PoolBudget
    from functions.rollout.record_end import end_or_remove, removal

    # A record is judged on the cluster's clock it was written on (run.cluster_clock), not this tick's: a tick
    # whose clock ran ahead ended a live run's record under it, and the slot below is judged on it too.
    clock = run.cluster_clock(kube)
    budget = PoolBudget(kube, owner, clock, run.run_lease_s(settings))
    now, lines = clock(), []
    for obj in nodes:
        node = rp.KubeNode.from_object(obj)
        p = node.progress
        if p is None or p.step not in rp.ACTIVE_STEPS or p.drain or p.cordoned or p.owner == owner or \
                p.held_by_another(owner, now, run.run_lease_s(settings)):
            continue  # a drained record is the labelled rollout's to resume (it uncordons)
        reason = ("invocation %s stopped with this node at step %s; a later tick ended the record without a "
                  "change (what the node holds is its own state label's to say)" % (p.owner or "-", p.step))
        notes: Dict[str, Optional[str]] = dict(removal(p)[1] or {}, **{rp.PROGRESS_ANNOTATION: dataclasses.replace(
            p, step=rp.DONE, reason=reason, owner=owner, expires=now, autoscaler=False).to_annotation()})
        if dry_run:  # it wrote nothing: its line must not say the record ended (the node still reads pending)
            lines.append("node %s: dry run: would end the record (%s) and give back the budget slot of invocation "
                         "%s on it, if the pool's Lease still holds one that has run out" % (node.name, reason,
                                                                                             p.owner or "-"))
            continue
        # The slot goes back before the record ends, not after: a tick stopped between the two would leave a done
        # record (no later tick looks at it again) and the dead run's slot in the Lease, for good in a pool
        # where no node takes a slot again. Stopped here, the record is still stranded and the next tick ends it.
        # A slot given back for a record the write below cannot end had run out: it counted for nothing.
        given = bool(p.owner) and budget.release(pool_id, node.name, holder=p.owner)
        try:
            try:
                _patch(kube, node, notes)
            except KubeError as exc:
                if not nodes_own(exc):  # a 404, a 409, or the API server's or the Role's (a 5xx, RBAC's 403)
                    raise
                # This node's answer, e.g. a 422 when another party filled its annotations to the size limit:
                # with the reason, each tick tried again and the node read pending for good, the opt-out kept.
                # The end without its reason, which is not always shorter than the record it replaces (an empty
                # owner now named, a longer ``expires``); else the record goes, a write that only shrinks the
                # annotations, which the size limit lets through (``record_end``); the opt-out goes either way.
                why = one_line(exc, 200)
                end = dataclasses.replace(p, step=rp.DONE, reason="", owner=owner, expires=now, autoscaler=False)
                if end_or_remove(
                        lambda: _patch(kube, node, dict(notes, **{rp.PROGRESS_ANNOTATION: end.to_annotation()})),
                        lambda: _patch(kube, node, dict(notes, **{rp.PROGRESS_ANNOTATION: None})),
                        lambda e: isinstance(e, KubeError) and nodes_own(e)):
                    reason += "; the record was removed (the API server refused its end: %s)" % why
                else:
                    reason += "; recorded without this reason (the API server refused it: %s)" % why
        except KubeError as exc:
            if exc.status in (404, 409):  # another invocation took the node over, or it went: left to that
                continue
            if not nodes_own(exc):  # the API server's (no answer, a 5xx) or the Role's: the tick ends in retry
                raise
            # This node's answer again (a webhook's refusal): the node keeps its record (the slot given back above
            # had run out) and the others are still ended; raised, it would end every pool's tick, each time.
            lines.append("node %s: the record could not be ended (%s): the next tick tries again"
                         % (node.name, one_line(exc, 200)))
            continue
        if given:
            reason += "; its slot of the pool's budget, run out, was given back"
        lines.append("node %s: %s" % (node.name, reason))
    return lines


def _patch(kube: Any, node: Any, notes: Dict[str, Optional[str]]) -> None:
    """``notes`` set on the node's annotations, on the version read."""
    kube.patch_node(node.name, {"metadata": {"resourceVersion": node.resource_version, "annotations": notes}})
