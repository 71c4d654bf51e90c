"""The pods an auto pool serves, read from the Kubernetes API: cheap first, the rest only when it matters.

* :func:`pending_pods`: ONE paged list of the cluster's Pending pods (``fieldSelector=status.phase=Pending``,
  a field the pod registry indexes: ``pkg/registry/core/pod/strategy.go`` ToSelectableFields). Each pod is
  reduced as it is decoded (``matching.waiting_pod``): only pods that wait and ask for MIG instances or
  GPUs are kept, and of those only bounded parts. Pages hold :data:`PENDING_PAGE` pods: a Pod is at most
  about 1.5 MiB in etcd (``--max-request-bytes``), up to about 3 MiB as JSON, so a page is at most ~48 MiB,
  under the client's 64 MiB answer limit, whatever the pods carry. This is all a timer tick costs when
  nothing waits.
* :func:`pods_on`: the pods bound to the pool's nodes (``fieldSelector=spec.nodeName=<node>``, one call per
  node, from the watch cache), for what is in use; asked only when a plan is to be made.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence

from functions.decision.layout.matching import waiting_pod
from node_bootstrap.outside import as_object, objects

from .client import KubeApi

PENDING = {"fieldSelector": "status.phase=Pending"}
MIRROR = "kubernetes.io/config.mirror"  # node_bootstrap/kube/allocations.py MIRROR_ANNOTATION
PENDING_PAGE = 16
# Pages of small pods ask for more, up to this (KubeApi.list_all's grow): a list stops after 1,000 pages, and
# 16,001 Pending pods (a batch queue, or anyone's pods asking nothing) in pages of 16 stopped every tick.
PENDING_PAGE_MAX = 500


def slim(pod: Dict[str, Any]) -> Dict[str, Any]:
    """What the matcher and supply readers use of a Pod (``functions/decision/layout/matching.py``)."""
    meta, spec, status = (as_object(pod.get(k)) for k in ("metadata", "spec", "status"))
    notes = as_object(meta.get("annotations"))
    return {
        # uid, and a static pod's mirror annotation (the UID kubelet knows it by): what the node's holders
        # report names (functions/kube/supply.py)
        # (creationTimestamp and the conditions' lastTransitionTime: how long a pod has waited, for the dwell's
        # bound, functions/decision/claim_rules.py waited_s)
        # (deletionTimestamp: a pod being deleted is never scheduled again, matching.is_unschedulable)
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "ownerReferences",
                                          "creationTimestamp", "deletionTimestamp") if k in meta}
        | ({"annotations": {MIRROR: notes[MIRROR]}} if MIRROR in notes else {}),
        "spec": {k: spec[k] for k in ("nodeName", "nodeSelector", "affinity", "tolerations") if k in spec}
        | {"containers": [{"resources": c.get("resources") or {}} for c in objects(spec.get("containers"))],
           # a sidecar (restartPolicy Always) counts beside the containers (matching._totals)
           "initContainers": [{"resources": c.get("resources") or {}}
                              | ({"restartPolicy": c["restartPolicy"]} if "restartPolicy" in c else {})
                              for c in objects(spec.get("initContainers"))]},
        "status": {"phase": status.get("phase"),
                   "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "lastTransitionTime")}
                                  for c in objects(status.get("conditions"))]},
    }


def pending_pods(api: KubeApi, first_page_at: Optional[List[Optional[float]]] = None) -> List[Dict[str, Any]]:
    """The pods that wait for MIG instances or GPUs, reduced (``waiting_pod``), in pages of PENDING_PAGE.
    ``first_page_at``: gets the API server's time of the list's first page (``server_time`` as its first item
    is read): the list is a snapshot taken then, however long the later pages take; nothing when the first
    page holds no pod (then the list is that one page)."""
    def reduce(item: Dict[str, Any]) -> Any:
        if first_page_at is not None and not first_page_at:
            first_page_at.append(api.server_time())
        return waiting_pod(item)
    return api.list_all("/api/v1/pods", dict(PENDING), reduce=reduce, page=PENDING_PAGE, grow=PENDING_PAGE_MAX)


def bound_pod(pod: Any) -> Optional[Dict[str, Any]]:
    """What the supply readers use of a pod bound to a node (``functions/kube/supply.py`` holds_gpus and
    _asks_on, the running demand, ``status``'s serves), or None for a pod that holds no MIG instance or GPU
    (finished, or asking none, or asking what no quantity reads: those read nothing of it). Bounded whatever
    the pod holds: anyone who may create pods may bind them to a node (``spec.nodeName``), with a megabyte
    of affinity or labels each; their asks are summed as :func:`waiting_pod` sums them."""
    from functions.decision.layout.matching import MAX_ASKED, _totals
    from functions.kube.supply import MAX_UID_CHARS, holds_gpus

    if not isinstance(pod, Mapping):
        return None
    small = slim(pod)
    if not holds_gpus(small):
        return None
    bad: List[str] = []
    sums, inits = _totals(small["spec"], bad)
    if bad or not (sums or inits) or len(set(sums) | set(inits)) > MAX_ASKED:  # the last: kubelet admits none
        return None
    meta = small["metadata"]
    out_meta: Dict[str, Any] = {"name": str(meta.get("name") or "")[:253],
                                "namespace": str(meta.get("namespace") or "")[:63]}
    for key in ("uid",):
        if isinstance(meta.get(key), str) and len(meta[key]) <= MAX_UID_CHARS:
            out_meta[key] = meta[key]
    mirror = (meta.get("annotations") or {}).get(MIRROR)
    if isinstance(mirror, str) and len(mirror) <= MAX_UID_CHARS:
        out_meta["annotations"] = {MIRROR: mirror}
    labels = as_object(meta.get("labels"))
    if isinstance(labels.get("pod-template-hash"), str) and len(labels["pod-template-hash"]) <= 63:
        out_meta["labels"] = {"pod-template-hash": labels["pod-template-hash"]}
    owner = next((r for r in objects(meta.get("ownerReferences")) if r.get("controller")), None)
    if owner is not None:
        out_meta["ownerReferences"] = [{"kind": str(owner.get("kind") or "")[:63],
                                        "name": str(owner.get("name") or "")[:253], "controller": True}]
    spec: Dict[str, Any] = {"nodeName": small["spec"]["nodeName"],
                            "containers": [{"resources": {"limits": {k: str(v) for k, v in sorted(sums.items())}}}]}
    if inits:
        spec["initContainers"] = [{"resources": {"limits": {k: str(v) for k, v in sorted(inits.items())}}}]
    return {"metadata": out_meta, "spec": spec, "status": {"phase": small["status"]["phase"]}}


def pods_on(api: KubeApi, node_names: Sequence[str]) -> Dict[str, List[Dict[str, Any]]]:
    """Per node, its pods that hold MIG instances or GPUs (:func:`bound_pod`): one list a node from the watch
    cache, decoded pod by pod; one larger than the client reads is read again in pages of PENDING_PAGE."""
    return {name: api.list_pods(node_name=name, reduce=bound_pod, page=PENDING_PAGE)
            for name in sorted(set(node_names))}
