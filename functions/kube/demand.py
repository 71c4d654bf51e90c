"""The pods an auto pool serves, read from the Kubernetes API: cheap first, the rest only when it matters.

* :func:`pending_pods`: ONE paged list of the cluster's Pending pods (``fieldSelector=status.phase=Pending``,
  a field the pod registry indexes: ``pkg/registry/core/pod/strategy.go`` ToSelectableFields), each page
  reduced to the fields the matcher reads as it arrives. This is all a timer tick costs when nothing waits.
* :func:`pods_on`: the pods bound to the pool's nodes (``fieldSelector=spec.nodeName=<node>``, one call per
  node, from the watch cache), for what is in use; asked only when a plan is to be made.
"""

from typing import Any, Dict, List, Sequence

from .client import KubeApi

PENDING = {"fieldSelector": "status.phase=Pending"}
MIRROR = "kubernetes.io/config.mirror"  # node_bootstrap/kube/allocations.py MIRROR_ANNOTATION


def slim(pod: Dict[str, Any]) -> Dict[str, Any]:
    """What the matcher and supply readers use of a Pod (``functions/decision/layout/matching.py``)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return {
        # uid, and a static pod's mirror annotation (the UID kubelet knows it by): what the node's holders
        # report names (functions/kube/supply.py)
        # (creationTimestamp and the conditions' lastTransitionTime: how long a pod has waited, for the dwell's
        # bound, functions/decision/claim_rules.py waited_s)
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "ownerReferences",
                                          "creationTimestamp") if k in meta}
        | ({"annotations": {MIRROR: meta["annotations"][MIRROR]}} if MIRROR in (meta.get("annotations") or {}) else {}),
        "spec": {k: spec[k] for k in ("nodeName", "nodeSelector", "affinity", "tolerations") if k in spec}
        | {k: [{"resources": c.get("resources") or {}} for c in spec.get(k) or ()]
           for k in ("containers", "initContainers")},
        "status": {"phase": status.get("phase"),
                   "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "lastTransitionTime")}
                                  for c in status.get("conditions") or ()]},
    }


def pending_pods(api: KubeApi) -> List[Dict[str, Any]]:
    return api.list_all("/api/v1/pods", dict(PENDING), reduce=slim)


def pods_on(api: KubeApi, node_names: Sequence[str]) -> Dict[str, List[Dict[str, Any]]]:
    return {name: [slim(p) for p in api.list_pods(node_name=name)] for name in sorted(set(node_names))}
