"""Which auto pool a waiting pod is the demand of, without planning: the timer's rule, which a pod event's
choice and a tick that plans one pool both read (docs/auto-pools.md "Pod events", "How often").

The pools are taken by id; each counts, of the pods the earlier ones left, those its nodes or template take
(:func:`places_of`, the plan's matcher) and its plan would count (``planner.countable`` under
:func:`pool_bounds`). A pod is judged alone but for one rule: an idle instance of a profile the pool no
longer allows keeps one pod that asks it counted, in pod order, so there the pods that wait decide
(:func:`spare_decides` says when). The plan itself (``auto_pool``) starts from the same readings.
"""

from dataclasses import replace
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from functions.decision.layout import Bounds, PodDemand, bounds_from_labels
from functions.decision.layout.matching import Place, pod_key, refusals, split_pending
from functions.decision.layout.planner import countable
from functions.decision.waves import POOL_LABEL, paused
from functions.kube.supply import pool_supply


def places_of(pool_labels: Mapping[str, str], pool_taints: Sequence[Mapping[str, Any]], pool_id: str,
              nodes: Sequence[Mapping[str, Any]], lifted: str = "") -> List[Place]:
    """Where a pod of the pool could land: each node as it is, and a new node from the pool's template.
    ``lifted``: ``key:Effect`` of the hook's startup taint (``rollout.run.startup_taint``), left out of every
    place: the pool puts it on each new node and the hook lifts it once the node is partitioned (the
    TaintRemover's rule: key and effect), so it keeps no pod off the node for longer than that."""
    def kept(taints: Any) -> List[Any]:
        return [t for t in taints if not (isinstance(t, Mapping)
                                          and "%s:%s" % (t.get("key"), t.get("effect")) == lifted)]

    places = [Place((n.get("metadata") or {}).get("labels") or {}, kept((n.get("spec") or {}).get("taints") or ()))
              for n in nodes]
    places.append(Place(dict(pool_labels, **{POOL_LABEL: pool_id}), kept(pool_taints)))
    return places


def pool_bounds(pool_labels: Mapping[str, str], template: Tuple[str, int]) -> Optional[Bounds]:
    """An auto pool's bounds as its plan uses them (None: not an auto pool; LayoutLabelError: a label that
    does not read). A new node is what the pool's instance type brings (``template``: model, GPUs), so a
    pool with no node yet can still name one."""
    bounds = bounds_from_labels(pool_labels)
    if bounds is None:
        return None
    return replace(bounds, model=template[0] or bounds.model, node_gpus=template[1] or bounds.node_gpus)


def pool_waiting(pool_id: str, pool_labels: Mapping[str, str], pool_taints: Sequence[Mapping[str, Any]],
                 nodes: Sequence[Mapping[str, Any]], pending: Sequence[Mapping[str, Any]], lifted: str = "",
                 bounds: Optional[Bounds] = None
                 ) -> Tuple[List[PodDemand], List[Tuple[str, str]], List[Mapping[str, Any]], List[str]]:
    """The demand of the ``pending`` pods the pool's nodes or template take (the plan's matcher), in pod order
    whatever order the list came in (the same advice from any list), and (pod key, why) for the others: what
    the plan and every reading of the pods a pool counts start from. Then the ``nodes`` the plan may count and
    change: those every pod of that demand could land on (``matching.refusals``: the planner places a pod on
    any GPU it is given), and one line for each node left out. With ``bounds`` (the pool's), a pod its plan
    cannot count even on every node, each instance idle (:func:`not_counted`: fewer nodes count no more), is
    never planned for, so it leaves no node out."""
    places = places_of(pool_labels, pool_taints, pool_id, nodes, lifted)
    by_pool, unmatched = split_pending(sorted(pending, key=pod_key), {pool_id: places})
    keys = {d.key for d in by_pool[pool_id]}
    if bounds is not None:
        keys -= {key for key, _ in not_counted(bounds, nodes, by_pool[pool_id])}
    refused = refusals([p for p in pending if pod_key(p) in keys], places[:-1])  # the last place: the template
    planned = [n for n, why in zip(nodes, refused) if not why]
    notes = ["node %s: a pod the plan counts cannot land on it, %s: neither counted nor changed for these pods"
             % (str((n.get("metadata") or {}).get("name") or "")[:253], why[:300])
             for n, why in zip(nodes, refused) if why]
    return by_pool[pool_id], unmatched, planned, notes


def spare_decides(bounds: Bounds, nodes: Sequence[Mapping[str, Any]], demand: Sequence[PodDemand]) -> bool:
    """Whether idle instances of a profile the pool no longer allows decide which of ``demand`` its plan
    counts (``planner.countable`` keeps a pod that asks such a profile counted while one is left for it, one
    pod each). Then the answer depends on which instances pods hold and on the pods that wait before these;
    otherwise each pod is judged alone. Read without planning and without a pod: every instance of ``nodes``
    idle against every one held."""
    supply = pool_supply(nodes, {})[0]
    held = [replace(g, instances=tuple(replace(i, in_use=True) for i in g.instances)) for g in supply]
    return {k for k, _ in countable(supply, demand, bounds)[1]} != {k for k, _ in countable(held, demand, bounds)[1]}


def not_counted(bounds: Bounds, nodes: Sequence[Mapping[str, Any]], demand: Sequence[PodDemand],
                pods_on: Any = None) -> List[Tuple[str, str]]:
    """``planner.countable``'s (pod key, why) for the ``demand`` its plan would not count, without planning:
    read with every instance of ``nodes`` idle. Where idle instances of a profile the pool no longer allows
    decide (:func:`spare_decides`), the pods of the nodes holding such instances are read (``pods_on(names)``,
    a list call per node: only those nodes; None: not read), as the plan has them. One rule for a pod event's
    choice and a tick's pools."""
    supply = pool_supply(nodes, {})[0]  # every instance idle: the most a disallowed idle one keeps counted
    if pods_on is not None and spare_decides(bounds, nodes, demand):
        names = sorted({g.node for g in supply for i in g.instances if not bounds.allows(i.profile)})
        supply = pool_supply(nodes, pods_on(names))[0]
    return list(countable(supply, demand, bounds)[1])


def planned_bounds(pool: Any) -> Tuple[Optional[Bounds], str]:
    """``pool``'s bounds as the timer's plan sees it, or None and why it plans nothing now: paused, labels
    that do not read, not an auto pool."""
    from functions.decision.autoscaler_tags import pool_template
    from functions.decision.layout import LayoutLabelError

    if paused(pool.labels):
        return None, "paused"
    try:
        bounds = pool_bounds(pool.labels, pool_template(pool))
    except LayoutLabelError as exc:
        return None, str(exc)
    return bounds, "" if bounds is not None else "not an auto pool"


def counted_pods(pool: Any, nodes: Sequence[Mapping[str, Any]], pending: Sequence[Mapping[str, Any]],
                 pods_on: Any, lifted: str = "") -> set:
    """The keys of the ``pending`` pods that ``pool``'s plan would count as its demand, without planning it:
    those its nodes or template take (the plan's matcher) and its plan counts (:func:`not_counted`); none
    when it is paused or its labels do not read. ``nodes``: the Node objects with the pool's label;
    ``pods_on(names)``: the pods of those nodes; ``lifted``: the startup taint (:func:`places_of`)."""
    bounds = planned_bounds(pool)[0]
    if bounds is None:
        return set()
    taints = [t.model_dump(exclude_none=True) for t in pool.taints]
    waiting, _, planned, _ = pool_waiting(pool.nodepool_id, pool.labels, taints, nodes, pending, lifted, bounds)
    if not waiting:
        return set()
    return {d.key for d in waiting} - {key for key, _ in not_counted(bounds, planned, waiting, pods_on)}


def counting_pool(key: str, pools: Sequence[Any], nodes: Mapping[str, Sequence[Mapping[str, Any]]],
                  pending: Sequence[Mapping[str, Any]], pods_on: Any, lifted: str = "") -> Optional[Any]:
    """The pool whose plan counts pod ``key`` as its demand: of ``pools`` by id, each counting
    (:func:`counted_pods`) from the ``pending`` pods the earlier ones left, as a tick gives them out; None
    when none counts it. ``nodes``: pool id -> its proven members."""
    left = list(pending)
    for pool in sorted(pools, key=lambda p: p.nodepool_id):
        mine = counted_pods(pool, nodes[pool.nodepool_id], left, pods_on, lifted)
        if key in mine:
            return pool
        left = [p for p in left if pod_key(p) not in mine]
    return None
