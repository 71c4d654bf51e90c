"""Which waiting pods an auto pool could take, and what they ask for. Pure: Pod objects (the API's JSON) in.

The scheduler's own rules, in the common forms, each from its upstream source (kubernetes/kubernetes):

* a pod waits for capacity when it is Pending and its ``PodScheduled`` condition is ``False`` with reason
  ``Unschedulable`` (``pkg/apis/core/types.go`` PodReasonUnschedulable); a pod not yet tried, or bound
  (``spec.nodeName``), is not demand;
* ``spec.nodeSelector``: every pair must be a label of the node;
* required node affinity (``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``): the
  terms are ORed, a term's ``matchExpressions`` ANDed; an empty term matches nothing; ``In``, ``NotIn``
  (true when the key is absent), ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt``
  (``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go``,
  ``apimachinery/pkg/labels/selector.go`` Requirement.Matches). A term with ``matchFields`` names single
  nodes by name: never a pool's demand (reported);
* taints with effect ``NoSchedule`` or ``NoExecute`` must be tolerated (``PreferNoSchedule`` never blocks):
  a toleration with an empty key and ``Exists`` tolerates everything; otherwise keys equal, an empty
  effect matches every effect, ``Exists`` any value, ``Equal`` (the default) the same value
  (``staging/src/k8s.io/api/core/v1/toleration.go`` ToleratesTaint; plugin ``TaintToleration``).

What a pod asks for: ``nvidia.com/mig-<profile>`` and ``nvidia.com/gpu`` from its containers' limits (an
extended resource's request must equal its limit, and a limit alone sets the request: ``ValidatePodSpec``)
or requests; init containers run one at a time, so the pod needs the larger of their largest and the sum of
the others (``k8s.io/component-helpers/resource`` PodRequests).
"""

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .vocabulary import WHOLE_GPU, PodDemand

MIG_PREFIX = "nvidia.com/mig-"
GPU_RESOURCE = "nvidia.com/gpu"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
# The device plugin writes "+me" (".me.all", ".gfx") as a dot in the resource name (node_bootstrap/mig/resources.py).
_SUFFIXES = (".me.all", ".me", ".gfx")


def profile_of_resource(name: str) -> Optional[str]:
    """``nvidia.com/mig-1g.10gb.me`` -> ``1g.10gb+me``; ``nvidia.com/gpu`` -> ``gpu``; anything else None."""
    if name == GPU_RESOURCE:
        return WHOLE_GPU
    if not name.startswith(MIG_PREFIX):
        return None
    profile = name[len(MIG_PREFIX):]
    for suffix in _SUFFIXES:
        if profile.endswith(suffix):
            return profile[:-len(suffix)] + "+" + suffix[1:]
    return profile


# The most instances (or GPUs) one pod may ask for of one resource: far beyond any node (8 GPUs x 7
# instances), so a count above it is a mistake, refused for that pod with the reason (never ``[pod] * n``).
MAX_COUNT = 10000
_WHOLE = re.compile(r"[0-9]{1,5}\Z")


def _count(value: Any) -> Optional[int]:
    """An extended resource's quantity as a whole count (``"2"``, or the number 2), None when it is none:
    the API server only admits whole numbers for them (``ValidatePodSpec``: "must be an integer")."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value <= MAX_COUNT else None
    text = value if isinstance(value, str) else ""
    return int(text) if _WHOLE.match(text) and int(text) <= MAX_COUNT else None


def _container_asks(container: Mapping[str, Any], bad: List[str]) -> Dict[str, int]:
    resources = container.get("resources") or {}
    asked = dict(resources.get("requests") or {})
    asked.update(resources.get("limits") or {})  # a limit alone sets the request; both must be equal
    out = {}  # type: Dict[str, int]
    for name, value in asked.items():
        profile = profile_of_resource(name)
        if profile is None:
            continue
        count = _count(value)
        if count is None:
            bad.append("%s=%s" % (name, str(value)[:40]))
        elif count:
            out[profile] = count
    return out


def _asks(pod: Mapping[str, Any]) -> Tuple[Dict[str, int], str]:
    spec = pod.get("spec") or {}
    total = {}  # type: Dict[str, int]
    bad = []  # type: List[str]
    for container in spec.get("containers") or ():
        for profile, n in _container_asks(container, bad).items():
            total[profile] = total.get(profile, 0) + n
    for container in spec.get("initContainers") or ():
        for profile, n in _container_asks(container, bad).items():
            total[profile] = max(total.get(profile, 0), n)
    bad += ["%d x %s in all" % (n, p) for p, n in sorted(total.items()) if n > MAX_COUNT]
    return dict(sorted(total.items())), "; ".join(bad)


def pod_asks(pod: Mapping[str, Any]) -> Dict[str, int]:
    """The MIG profiles (and ``gpu``) a pod asks for, with counts; {} for a pod whose ask cannot be counted
    (:func:`ask_problem` says why)."""
    total, bad = _asks(pod)
    return {} if bad else total


def ask_problem(pod: Mapping[str, Any]) -> str:
    """Why the pod's MIG or GPU request cannot be counted ("" when it can): a count that is no whole number,
    or beyond :data:`MAX_COUNT`. Such a pod is refused with this reason, never planned for."""
    bad = _asks(pod)[1]
    return "asks for %s; a pod may ask for a whole count of 0..%d of each" % (bad, MAX_COUNT) if bad else ""


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace") or "default", meta.get("name") or "")


def owner_of(pod: Mapping[str, Any]) -> str:
    """Who made the pod, for the reasons: a ReplicaSet named ``<deployment>-<pod-template-hash>`` is its
    Deployment's (the Deployment controller's naming, ``pkg/controller/deployment/sync.go``)."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    for ref in meta.get("ownerReferences") or ():
        if not ref.get("controller"):
            continue
        kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        template_hash = (meta.get("labels") or {}).get("pod-template-hash")
        if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
            return "deployment %s/%s" % (namespace, name[:-len(template_hash) - 1])
        return "%s %s/%s" % (kind.lower(), namespace, name)
    return "pod %s" % pod_key(pod)


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending, not bound, and the scheduler said Unschedulable."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in status.get("conditions") or ())


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(v) for v in expression.get("values") or ()]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False  # an operator the API server would have refused


def why_not(pod: Mapping[str, Any], labels: Mapping[str, str], taints: Sequence[Mapping[str, Any]]) -> str:
    """Empty when a node with these labels and taints could take the pod; else one line why not."""
    spec = pod.get("spec") or {}
    for key, value in sorted((spec.get("nodeSelector") or {}).items()):
        if labels.get(key) != value:
            return "nodeSelector %s=%s" % (key, value)
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        if any(term.get("matchFields") for term in terms):
            return "node affinity names nodes by field (matchFields)"
        if not any(term.get("matchExpressions") and all(_expression_matches(e, labels) for e in term["matchExpressions"])
                   for term in terms):
            return "required node affinity"
    tolerations = spec.get("tolerations") or ()
    for taint in taints:
        if taint.get("effect") in BLOCKING_EFFECTS and not any(_tolerates(t, taint) for t in tolerations):
            return "taint %s=%s:%s not tolerated" % (taint.get("key"), taint.get("value") or "", taint.get("effect"))
    return ""


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return operator == "Exists"
    if toleration.get("key") != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def demand_of(pod: Mapping[str, Any], pending: bool = True, node: str = "") -> List[PodDemand]:
    """One PodDemand per profile the pod asks for (none for a pod without MIG or GPU requests)."""
    key, owner = pod_key(pod), owner_of(pod)
    return [PodDemand(key=key, owner=owner, profile=profile, count=n, pending=pending, node=node)
            for profile, n in pod_asks(pod).items()]


class Place:
    """Somewhere a pod could land: a pool's label set and taints (one node's, or the pool template's)."""

    def __init__(self, labels: Mapping[str, str], taints: Sequence[Mapping[str, Any]]):
        self.labels, self.taints = dict(labels), [dict(t) for t in taints]


def split_pending(pods: Sequence[Mapping[str, Any]], pools: Mapping[str, Sequence[Place]]
                  ) -> Tuple[Dict[str, List[PodDemand]], List[Tuple[str, str]]]:
    """The unschedulable pods asking for MIG or GPUs, by the first pool (in name order) one of whose places
    takes them; the rest as (pod key, one line why no pool can take it): reported, never counted."""
    by_pool = {name: [] for name in pools}  # type: Dict[str, List[PodDemand]]
    unmatched = []  # type: List[Tuple[str, str]]
    for pod in pods:
        if not is_unschedulable(pod):
            continue
        wrong = ask_problem(pod)
        if wrong:  # a count no node could serve (10^29): this pod's refusal, the others go on
            unmatched.append((pod_key(pod), wrong))
            continue
        if not pod_asks(pod):
            continue
        reasons = []
        for name in sorted(pools):
            first = ""
            for place in pools[name]:  # stops at the first place that takes it: most pods fit the first node
                miss = why_not(pod, place.labels, place.taints)
                if not miss:
                    break
                first = first or miss
            else:
                reasons.append("%s: %s" % (name, first or "no nodes"))
                continue
            by_pool[name].extend(demand_of(pod))
            break
        else:
            unmatched.append((pod_key(pod), "; ".join(reasons) or "no auto pool"))
    return by_pool, unmatched
