"""Which pods a repartition must move off a node, which it must not, and one eviction pass over them.

Like ``kubectl drain`` (``k8s.io/kubectl/pkg/drain/filters.go``), for the GPUs only: the MIG change
needs the node's GPUs free, nothing else.

* **Moved** (evicted through the Eviction API, policy/v1, so PodDisruptionBudgets are respected): pods that
  use the node's GPUs, i.e. a container or init container that asks (limits or requests) for an
  ``nvidia.com/*`` resource (whole GPUs, MIG instances) or an ``aliyun.com/gpu*`` one (ACK GPU sharing:
  ``aliyun.com/gpu-mem``, ``aliyun.com/gpu-core.percentage``), and pods with resource claims
  (``spec.resourceClaims``: Dynamic Resource Allocation, whose devices the pod spec does not name).
* **Left**, as ``kubectl drain`` leaves them: DaemonSet pods, known by their controller reference (an
  owner reference with ``controller: true`` and kind DaemonSet; the controller would put them straight
  back, and the node side stops the GPU clients it knows), mirror pods (static pods, annotation
  ``kubernetes.io/config.mirror``: the API cannot delete them), finished pods (Succeeded/Failed hold no GPU)
  and pods that use no GPU.
* **Refused** (the node is deferred, the pods named, nothing evicted), unless a setting allows them:
  a pod without a controller (``ACK_MIG_DRAIN_FORCE=true``, as ``kubectl drain --force``: nothing would
  recreate it, it is gone for good), and a pod with emptyDir data (``ACK_MIG_DRAIN_EMPTYDIR``). The default
  ``memory`` evicts a pod whose emptyDir volumes are all ``medium: Memory``: GPU pods mount ``/dev/shm``
  that way for NCCL and data loaders, the content is the processes' scratch and lives exactly as long as
  the pod, so refusing it (kubectl's default) would stop nearly every GPU rollout and protect nothing. A
  disk-backed emptyDir may hold what its owner expects to find after a container restart (checkpoints,
  caches), so it refuses by default; ``any`` evicts it (``--delete-emptydir-data``), ``none`` refuses memory
  ones too.

A PodDisruptionBudget's 429 is tried again on the next pass, until the drain deadline; an API server that
throttles (429 without the budget cause, after the client's own retries) likewise, reported as throttling.
A pod already terminating (``deletionTimestamp``) is waited for, not evicted again: the node is drained
only when a list no longer shows any GPU pod, never on an eviction's answer; but one terminating for longer
than ``ACK_MIG_DRAIN_SKIP_WAIT_S`` is left, as ``kubectl drain --skip-wait-for-delete-timeout`` leaves it
(``k8s.io/kubectl/pkg/drain/filters.go`` ``skipDeletedFilter``: a pod whose kubelet is gone never finishes).
An eviction answered 500 because several PodDisruptionBudgets select the pod (``eviction.go``: "This pod has
more than one PodDisruptionBudget, which the eviction subresource does not support.") is final: kubectl
drain stops on it with the API server's message, and so does the rollout (``Pass.refused_by_api``).
"""

import calendar
import time
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from node_bootstrap.kube.client import KubeError
from node_bootstrap.outside import OutsideDataError, as_object, json_type, objects

GPU_RESOURCE_PREFIXES = ("nvidia.com/", "aliyun.com/gpu")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
EVICT, WAIT, LEAVE, REFUSE = "evict", "wait", "leave", "refuse"


MULTI_BUDGET = "more than one PodDisruptionBudget"  # eviction.go's 500 message


class Rules(NamedTuple):
    """The settings ``ACK_MIG_DRAIN_FORCE``, ``ACK_MIG_DRAIN_EMPTYDIR`` and ``ACK_MIG_DRAIN_SKIP_WAIT_S``."""

    force: bool = False
    emptydir: str = "memory"  # memory, any, none
    skip_wait_s: int = 0  # 0: wait for every terminating pod (kubectl's default; the setting's is 300)

    @classmethod
    def from_settings(cls, rollout: Any) -> "Rules":
        return cls(bool(getattr(rollout, "drain_force", False)), str(getattr(rollout, "drain_emptydir", "memory")),
                   int(getattr(rollout, "drain_skip_wait_s", 0) or 0))


def _deleted_at(meta: Mapping[str, Any]) -> Optional[float]:
    """``metadata.deletionTimestamp`` (RFC 3339, UTC, as the API server writes it) as epoch seconds."""
    text = str(meta.get("deletionTimestamp") or "")
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


# A pod's parts are read as the API serves them (objects, lists of objects); a part of another shape (a proxy's or
# a mangled answer's) reads as absent, the reader rule of node_bootstrap/outside.py: one such pod is judged alone,
# never an AttributeError that ends the rollout of every node. So an owner that cannot be read is no controller
# (the node is kept, the pod named), containers that cannot be read ask for no GPU.

def _asks_for_gpu(container: Mapping[str, Any]) -> bool:
    resources = as_object(container.get("resources"))
    return any(isinstance(name, str) and name.startswith(GPU_RESOURCE_PREFIXES)
               for section in ("limits", "requests") for name in as_object(resources.get(section)))


def uses_gpu(pod: Mapping[str, Any]) -> bool:
    spec = as_object(pod.get("spec"))
    containers = objects(spec.get("containers")) + objects(spec.get("initContainers"))
    return bool(spec.get("resourceClaims")) or any(_asks_for_gpu(c) for c in containers)


def _controller(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """metav1.GetControllerOf: the owner reference with ``controller: true``, or {}."""
    return next((ref for ref in objects(meta.get("ownerReferences")) if ref.get("controller") is True), {})


def _emptydir_problem(pod: Mapping[str, Any], rules: Rules) -> str:
    volumes = [v for v in objects(as_object(pod.get("spec")).get("volumes")) if isinstance(v.get("emptyDir"), dict)]
    if not volumes or rules.emptydir == "any":
        return ""
    disk = [v.get("name") for v in volumes if v["emptyDir"].get("medium") != "Memory"]
    if disk:
        return ("its emptyDir %s holds data on the node's disk (ACK_MIG_DRAIN_EMPTYDIR=any evicts it, as kubectl "
                "drain --delete-emptydir-data)" % ", ".join(str(n) for n in disk))
    if rules.emptydir == "none":
        return ("it has emptyDir %s (ACK_MIG_DRAIN_EMPTYDIR=memory or any evicts it)"
                % ", ".join(str(v.get("name")) for v in volumes))
    return ""


def verdict(pod: Mapping[str, Any], rules: Rules, now: Optional[float] = None) -> Tuple[str, str]:
    """What a drain does with one pod of the node: (EVICT | WAIT | LEAVE | REFUSE, why). ``now`` (epoch
    seconds) lets a pod terminating for longer than ``rules.skip_wait_s`` be left instead of waited for."""
    meta = as_object(pod.get("metadata"))
    if not uses_gpu(pod):
        return LEAVE, "uses no GPU"
    if as_object(pod.get("status")).get("phase") in ("Succeeded", "Failed"):
        return LEAVE, "finished"
    if MIRROR_ANNOTATION in as_object(meta.get("annotations")):
        return LEAVE, "a mirror (static) pod"
    controller = _controller(meta)
    if controller.get("kind") == "DaemonSet":
        return LEAVE, "a DaemonSet pod"
    if meta.get("deletionTimestamp"):
        since = _deleted_at(meta)
        if rules.skip_wait_s and now is not None and since is not None and now - since > rules.skip_wait_s:
            return LEAVE, "terminating for more than %ds: not waited for" % rules.skip_wait_s
        return WAIT, "terminating"
    if not controller and not rules.force:
        return REFUSE, "declares no controller (ACK_MIG_DRAIN_FORCE=true evicts it, as kubectl drain --force)"
    problem = _emptydir_problem(pod, rules)
    if problem:
        return REFUSE, problem
    return EVICT, "uses the GPUs"


def pod_name(pod: Mapping[str, Any]) -> str:
    meta = as_object(pod.get("metadata"))
    return "%s/%s" % (meta.get("namespace"), meta.get("name"))


def gpu_pods(pods: List[Mapping[str, Any]], rules: Rules = Rules()) -> List[Mapping[str, Any]]:
    """The pods a drain moves now (see the module docstring for what it leaves or refuses)."""
    return [p for p in objects(pods) if verdict(p, rules)[0] == EVICT]


def gpu_daemon_pods(pods: List[Mapping[str, Any]]) -> List[Tuple[str, str]]:
    """(namespace, name) of the DaemonSet pods that hold a GPU or MIG device: a drain leaves them (as kubectl
    does), but the apply destroys the instances they hold, so they are evicted after it and their DaemonSet
    recreates them on the new instances (NVIDIA's mig-manager stops every GPU client for the same reason).
    Terminating ones are on their way already."""
    out = []
    for pod in objects(pods):
        meta = as_object(pod.get("metadata"))
        if uses_gpu(pod) and _controller(meta).get("kind") == "DaemonSet" and not meta.get("deletionTimestamp"):
            out.append((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
    return sorted(out)


def refused(pods: List[Mapping[str, Any]], rules: Rules) -> Dict[str, str]:
    """The pods the rules keep from being evicted (pod -> why): such a node is not drained."""
    out = {}
    for pod in objects(pods):
        kind, why = verdict(pod, rules)
        if kind == REFUSE:
            out[pod_name(pod)] = why
    return out


def refusal_text(pods: Mapping[str, str]) -> str:
    return "; ".join("pod %s %s" % kv for kv in sorted(pods.items()))


class Pass(NamedTuple):
    """One eviction pass over a node: GPU pods left (listed at the start of the pass, still there or
    terminating, evicted now or not, or refused by the rules), evicted now, refused by a budget (429 with
    the DisruptionBudget cause, the API server's message), turned away by throttling, kept by the rules,
    and other errors (pod name -> message)."""

    remaining: int
    evicted: List[str]
    budget: Dict[str, str]
    throttled: Dict[str, str]
    kept: Dict[str, str]
    errors: Dict[str, str]
    refused_by_api: Dict[str, str] = {}  # evictions the API server refuses for good (several budgets: 500)


MAX_KEPT_VOLUMES = 8  # emptyDir volumes kept of each kind (disk, memory) per pod: the refusal names no more


def drain_pod(item: Any) -> Optional[Dict[str, Any]]:
    """What the drain reads of one listed pod (:func:`verdict`, :func:`gpu_daemon_pods`, the eviction), or None
    for a pod that uses no GPU (every drain rule leaves it). Anyone who may create pods may bind them to a node
    (``spec.nodeName``, no scheduler), up to 1.5 MiB each: the node's list is decoded pod by pod
    (:func:`node_pods`), and only this much of each GPU pod is kept, bounded whatever the pod holds. An item
    that is no object fails the list: a pod left out would let the drain count the node empty."""
    if not isinstance(item, dict):
        raise OutsideDataError("the API server's answer is no pod list (an object whose items are objects): an "
                               "item is %s" % json_type(item))
    if not uses_gpu(item):
        return None
    meta, spec, status = (as_object(item.get(k)) for k in ("metadata", "spec", "status"))
    out_meta: Dict[str, Any] = {k: meta[k][:253] for k in ("name", "namespace") if isinstance(meta.get(k), str)}
    if meta.get("deletionTimestamp"):
        out_meta["deletionTimestamp"] = str(meta["deletionTimestamp"])[:64]
    if MIRROR_ANNOTATION in as_object(meta.get("annotations")):
        out_meta["annotations"] = {MIRROR_ANNOTATION: ""}
    owner = _controller(meta)
    if owner:
        out_meta["ownerReferences"] = [{"kind": str(owner.get("kind"))[:63], "name": str(owner.get("name"))[:253],
                                        "controller": True}]
    gpus = sorted({name for c in objects(spec.get("containers")) + objects(spec.get("initContainers"))
                   for section in ("limits", "requests") for name in as_object(as_object(c.get("resources"))
                                                                               .get(section))
                   if isinstance(name, str) and name.startswith(GPU_RESOURCE_PREFIXES)})
    out_spec: Dict[str, Any] = {"containers": [{"resources": {"limits": {n[:317]: "1" for n in gpus[:4]}}}]}
    if spec.get("resourceClaims"):
        out_spec["resourceClaims"] = [{"name": "(claims)"}]
    volumes: List[Dict[str, Any]] = []
    for memory in (False, True):  # a disk one refuses, a memory one only under ACK_MIG_DRAIN_EMPTYDIR=none
        kind = [v for v in objects(spec.get("volumes")) if isinstance(v.get("emptyDir"), dict)
                and (v["emptyDir"].get("medium") == "Memory") == memory]
        empty = {"medium": "Memory"} if memory else {}
        volumes.extend({"name": str(v.get("name"))[:63], "emptyDir": empty} for v in kind[:MAX_KEPT_VOLUMES])
        if len(kind) > MAX_KEPT_VOLUMES:
            volumes.append({"name": "(%d more)" % (len(kind) - MAX_KEPT_VOLUMES), "emptyDir": empty})
    if volumes:
        out_spec["volumes"] = volumes
    out: Dict[str, Any] = {"metadata": out_meta, "spec": out_spec}
    if isinstance(status.get("phase"), str):
        out["status"] = {"phase": status["phase"][:32]}
    return out


def node_pods(kube: Any, node_name: str, consistent: bool = False) -> List[Dict[str, Any]]:
    """The node's GPU pods as :func:`drain_pod` keeps them: one list from the watch cache (``consistent``: a
    consistent read), decoded pod by pod; one larger than the client reads is read again in pages (the client's
    ``list_pods``, as the auto pool's supply reads a node's pods: ``functions/kube/demand.py`` pods_on)."""
    return kube.list_pods(node_name, consistent=consistent, reduce=drain_pod)


def evict_pass(kube: Any, node_name: str, rules: Rules = Rules(), now: Optional[float] = None) -> Pass:
    """One pod list of the node, then one eviction per pod to move. ``now``: see :func:`verdict`.

    The list comes from the API server's watch cache (cheap), which may lag: a pod bound a moment ago can be
    missing ("Any" resource version, API Concepts). When it shows no GPU pod left, the node is listed again
    with a consistent read before the pass says so: that verdict lets the GPUs be repartitioned."""
    listed = node_pods(kube, node_name)
    if all(verdict(pod, rules, now)[0] == LEAVE for pod in listed):
        listed = node_pods(kube, node_name, consistent=True)
    final: Dict[str, str] = {}
    evicted: List[str] = []
    budget: Dict[str, str] = {}
    throttled: Dict[str, str] = {}
    errors: Dict[str, str] = {}
    kept = refused(listed, rules)
    remaining, gone = 0, 0
    for pod in listed:
        kind, _ = verdict(pod, rules, now)
        if kind == LEAVE:
            continue
        remaining += 1
        if kind != EVICT:
            continue  # terminating: wait for it; refused: kept, named above
        meta = as_object(pod.get("metadata"))
        name = pod_name(pod)
        try:
            kube.evict(str(meta.get("namespace")), str(meta.get("name")))
            evicted.append(name)
        except KubeError as exc:
            if exc.status == 404:  # gone between the list and the eviction
                gone += 1
            elif exc.status == 429 and getattr(exc, "throttled", False):
                throttled[name] = "the API server is throttling (429 Too Many Requests); tried again next pass"
            elif exc.status == 429:
                budget[name] = str(exc)
            elif exc.status == 500 and MULTI_BUDGET in str(exc):
                final[name] = str(exc)
            else:
                errors[name] = str(exc)
    # An evicted pod terminates gracefully (terminationGracePeriodSeconds) and holds its GPU until it is
    # gone: the node is drained only when a list no longer shows it, never on the eviction's answer.
    return Pass(remaining - gone, evicted, budget, throttled, kept, errors, final)
