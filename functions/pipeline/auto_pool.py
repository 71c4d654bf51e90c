"""One auto pool's advice: its demand, supply and plan, from what the Kubernetes API holds. Changes nothing.

``advise`` (the CLI), the timer tick and ``invoke --dry-run`` read the same :func:`advise` answer, so they
show the same decisions. The inputs are plain API objects so a snapshot (``--inventory``) and the live API
give the same answer: the pool (labels, taints), its Node objects, the pods bound to them, and the cluster's
Pending pods.
"""

from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence

from functions.decision.layout import WHOLE_GPU, Plan, PodDemand, bounds_from_labels, plan
from functions.decision.layout.matching import Place, demand_of, pod_key, split_pending
from functions.kube.supply import holds_gpus, pool_supply

POOL_LABEL = "alibabacloud.com/nodepool-id"  # ACK labels every node of a pool with its id (functions/decision/waves.py)


class NotAutoPool(ValueError):
    """The pool does not carry ``ack-mig-hook/layout=auto``: one line saying how to turn it on."""


def places_of(pool_labels: Mapping[str, str], pool_taints: Sequence[Mapping[str, Any]], pool_id: str,
              nodes: Sequence[Mapping[str, Any]]) -> List[Place]:
    """Where a pod of the pool could land: each node as it is, and a new node from the pool's template."""
    places = [Place((n.get("metadata") or {}).get("labels") or {}, (n.get("spec") or {}).get("taints") or ())
              for n in nodes]
    places.append(Place(dict(pool_labels, **{POOL_LABEL: pool_id}), pool_taints))
    return places


def _counts(demand: Sequence[PodDemand]) -> Dict[str, int]:
    total = Counter()  # type: Counter
    for d in demand:
        total[d.profile] += d.count
    return dict(sorted(total.items()))


def advise(pool_id: str, pool_labels: Mapping[str, str], pool_taints: Sequence[Mapping[str, Any]],
           nodes: Sequence[Mapping[str, Any]], pods_by_node: Mapping[str, Sequence[Mapping[str, Any]]],
           pending: Sequence[Mapping[str, Any]], previous: Optional[Plan] = None) -> Dict[str, Any]:
    """The advice for one pool as a JSON-ready dict; raises NotAutoPool or bounds.LayoutLabelError."""
    bounds = bounds_from_labels(pool_labels)
    if bounds is None:
        raise NotAutoPool("pool %s is not an auto pool; label it ack-mig-hook/layout=auto to let the hook choose "
                          "its layouts from the pods that wait" % pool_id)
    pending = sorted(pending, key=pod_key)  # the same advice whatever order the list came in
    by_pool, not_counted = split_pending(pending, {pool_id: places_of(pool_labels, pool_taints, pool_id, nodes)})
    waiting = by_pool[pool_id]
    running = [d for name, pods in sorted(pods_by_node.items()) for pod in pods if holds_gpus(pod)
               for d in demand_of(pod, pending=False, node=name)]
    supply, notes = pool_supply(nodes, pods_by_node)
    result = plan(supply, waiting + running, bounds, previous)
    gpus = []
    by_gpu = {(t.node, t.index): t for t in result.targets}
    for g in supply:
        target = by_gpu.get((g.node, g.index))
        gpus.append({"node": g.node, "gpu": g.index, "model": g.model, "mig": g.mig, "busy": g.busy,
                     "instances": [{"profile": i.profile, "start": i.start, "in_use": i.in_use} for i in g.instances],
                     "change": target.change if target else "none",
                     "target": [list(x) for x in target.layout] if target else [],
                     "create": [list(x) for x in target.create] if target else [],
                     "destroy": [list(x) for x in target.destroy] if target else []})
    return {
        "pool": pool_id,
        "bounds": {"profiles": sorted(bounds.profiles) if bounds.profiles is not None else None,
                   "headroom": dict(bounds.headroom)},
        "demand": {"pending": _counts(waiting), "in_use": _counts(running),
                   "pods": [{"pod": d.key, "owner": d.owner, "profile": d.profile, "count": d.count}
                            for d in waiting],
                   "not_counted": [{"pod": key, "why": why} for key, why in not_counted]},
        "gpus": gpus,
        "plan": {"changes": len(result.changes), "unserved": dict(result.unserved),
                 "new_node": [list(x) for x in result.new_node], "reasons": list(result.reasons),
                 "unplaced": list(result.unplaced) + notes},
        "whole_gpu_pending": _counts(waiting).get(WHOLE_GPU, 0),
    }
