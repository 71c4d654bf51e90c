"""Which pods a repartition must move off a node, and one eviction pass over them.

Only pods that use the node's GPUs are evicted (a container or init container asking for ``nvidia.com/gpu``
or ``nvidia.com/mig-*``): the MIG change needs the GPUs free, nothing else. Left alone, as ``kubectl drain``
leaves them: DaemonSet pods (their controller would put them straight back) and mirror pods (static pods,
annotation ``kubernetes.io/config.mirror``: the API cannot delete them), and pods already finished
(phase Succeeded/Failed hold no GPU).

Eviction goes through the Eviction API (``pods/eviction``, policy/v1), so PodDisruptionBudgets are
respected: the API server answers 429 while a budget allows no disruption; that pod is tried again on the
next pass, until the drain deadline. A pod already terminating (``deletionTimestamp``) is waited for, not
evicted again.
"""

from typing import Any, Dict, List, Mapping, NamedTuple

from node_bootstrap.kube.client import KubeError

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def _asks_for_gpu(container: Mapping[str, Any]) -> bool:
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        for name in (resources.get(section) or {}):
            if name.startswith(GPU_RESOURCE_PREFIXES):
                return True
    return False


def gpu_pods(pods: List[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    """The pods an eviction pass must move (see the module docstring for what is left)."""
    chosen = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            continue
        if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
            continue
        containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
        if any(_asks_for_gpu(c) for c in containers):
            chosen.append(pod)
    return chosen


class Pass(NamedTuple):
    """One eviction pass over a node: pods left (listed at the start of the pass, still there or
    terminating, evicted now or not), evicted now, refused by a budget (429, with the API server's
    message), and other errors (pod name -> message)."""

    remaining: int
    evicted: List[str]
    refused: Dict[str, str]
    errors: Dict[str, str]


def evict_pass(kube: Any, node_name: str) -> Pass:
    pods = gpu_pods(kube.list_pods(node_name))
    evicted, refused, errors, gone = [], {}, {}, 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue  # already going: wait for it
        name = "%s/%s" % (meta.get("namespace"), meta.get("name"))
        try:
            kube.evict(str(meta.get("namespace")), str(meta.get("name")))
            evicted.append(name)
        except KubeError as exc:
            if exc.status == 404:  # gone between the list and the eviction
                gone += 1
            elif exc.status == 429:
                refused[name] = str(exc)
            else:
                errors[name] = str(exc)
    # An evicted pod terminates gracefully (terminationGracePeriodSeconds) and holds its GPU until it is
    # gone: the node is drained only when a list no longer shows it, never on the eviction's answer.
    return Pass(len(pods) - gone, evicted, refused, errors)
