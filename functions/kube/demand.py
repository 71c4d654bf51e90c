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

from typing import Any, Dict, List, Optional, Sequence

from functions.decision.layout.matching import waiting_pod
from node_bootstrap.outside import as_object, objects

from .client import KubeApi

PENDING = {"fieldSelector": "status.phase=Pending"}
MIRROR = "kubernetes.io/config.mirror"  # node_bootstrap/kube/allocations.py MIRROR_ANNOTATION
PENDING_PAGE = 16


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
    return api.list_all("/api/v1/pods", dict(PENDING), reduce=reduce, page=PENDING_PAGE)


def pods_on(api: KubeApi, node_names: Sequence[str]) -> Dict[str, List[Dict[str, Any]]]:
    return {name: [slim(p) for p in api.list_pods(node_name=name)] for name in sorted(set(node_names))}
