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
  ``apimachinery/pkg/labels/selector.go`` Requirement.Matches; ``Gt``/``Lt`` read integers as Go's
  ``strconv.ParseInt`` does). A term with ``matchFields`` names single nodes by name: it takes no place of a
  pool's (a pod whose terms are all such is reported), another term still may;
* taints with effect ``NoSchedule`` or ``NoExecute`` must be tolerated (``PreferNoSchedule`` never blocks):
  a toleration with an empty key and ``Exists`` tolerates everything; otherwise keys equal, an empty
  effect matches every effect, ``Exists`` any value, ``Equal`` (the default) the same value
  (``staging/src/k8s.io/api/core/v1/toleration.go`` ToleratesTaint; plugin ``TaintToleration``).

What a pod asks for: ``nvidia.com/mig-<profile>`` and ``nvidia.com/gpu`` from its containers' limits (an
extended resource's request must equal its limit, and a limit alone sets the request: ``ValidatePodSpec``)
or requests; init containers run one at a time, so the pod needs the larger of their largest and the sum of
the others (``k8s.io/component-helpers/resource`` PodRequests). A count is a quantity (``"2"``, ``"1k"``): read
as a whole number and capped at :data:`MAX_COUNT` before anything counts it, so no pod's number is ever
expanded as it was written (no node holds more than 16 GPUs x 7 instances).

Bounded work: Kubernetes bounds a pod only by its object size (about 1.5 MiB), so a valid pod can carry a
megabyte of node affinity. The matcher reads at most :data:`MAX_RULES` selector pairs and affinity
expressions in all, :data:`MAX_VALUES` values in all, :data:`MAX_TOLERATIONS` tolerations, strings of
at most :data:`MAX_TEXT` characters and :data:`MAX_ASKED` MIG or GPU resources; a pod beyond any of these is *not counted* ("larger than the hook
reads"), never matched on a part of what it says. :func:`waiting_pod` keeps of a Pending pod only those
parts, as each item of the list arrives (``functions/kube/demand.py``), and nothing of a pod that asks for
no MIG instance or GPU or is not waiting.
"""

import re
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

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


MAX_COUNT = 16 * 7 + 1  # more than any node holds (16 GPUs, 7 instances each): every larger count reads as this
MAX_RULES = 64  # nodeSelector pairs and required node affinity expressions, in all
MAX_TERMS = 64  # required node affinity terms
MAX_VALUES = 1024  # values of those expressions, in all (a list of a pool's host names fits)
MAX_TOLERATIONS = 64
MAX_TEXT = 1024  # characters of one key or value (a label key is at most 317, a label value 63)
# Distinct MIG and GPU resources one pod asks (node_bootstrap/mig/catalogue.py: no GPU has more than 11
# profiles, and a pod's asks must all be on one node): any name under nvidia.com/ is a valid extended resource,
# so a pod may ask 40,000 of them, and a waiting pod's reduced form kept every one.
MAX_ASKED = 16

# A quantity as k8s.io/apimachinery/pkg/api/resource/quantity.go reads one: a signed number (digits, with an
# optional fraction: "1", "1.5", "1.", ".5"), then a decimal SI suffix (m for milli, k ... E), a binary SI
# suffix (Ki ... Ei) or a decimal exponent ("e3", "E-1"). Whole or not is decided on the exact value, as
# ValidatePodSpec decides it for an extended resource (MilliValue a multiple of 1000): "1000m", "1.0" and
# "10e-1" are 1, "1.5" and "1500m" are no whole quantity. The API server writes the canonical form ("1",
# "1k", "1e3", "1Ki"); a hand-written snapshot may hold any of them.
_SUFFIX = {"": (10, 0), "m": (10, -3), "k": (10, 3), "M": (10, 6), "G": (10, 9), "T": (10, 12), "P": (10, 15),
           "E": (10, 18), "Ki": (2, 10), "Mi": (2, 20), "Gi": (2, 30), "Ti": (2, 40), "Pi": (2, 50), "Ei": (2, 60)}
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)|[eE]([+-]?[0-9]+))?\Z")
MAX_QUANTITY_TEXT = 48  # longer text is no count of ours: the work stays bounded whatever a pod says


def _count(value: Any) -> Optional[int]:
    """An extended resource's quantity as a whole number, capped at MAX_COUNT (a larger one is no more
    servable, and ``[pod] * count`` never sees it): ``"2"``, ``2``, ``2.0``, ``"1k"`` (1000), ``"1e3"``,
    ``"1000m"`` (1), a 30-digit ``"1000..."``. The API server admits only whole quantities for extended resources
    (``ValidatePodSpec``: "must be an integer"); None for anything else (a fraction, a negative number, a bool,
    not a quantity, more than MAX_QUANTITY_TEXT characters): that pod's ask cannot be counted
    (:func:`ask_problem`)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, int):  # (str of an int of 5,000 digits raises ValueError)
        return min(value, MAX_COUNT) if value >= 0 else None
    text = value if isinstance(value, str) else repr(value)
    match = _QUANTITY.match(text) if len(text) <= MAX_QUANTITY_TEXT else None
    if match is None:
        return None
    sign, whole_part, fraction, suffix, exponent = match.groups()
    fraction = fraction or ""
    if not whole_part and not fraction:
        return None  # no digit at all (".", "+", "e3")
    mantissa = int(whole_part + fraction or "0")  # the value is mantissa * 10**-len(fraction) * scale
    if mantissa == 0:
        return 0
    if sign == "-":
        return None
    if exponent is not None:  # suffix.go interpret: strconv.ParseInt(.., 10, 64), then int32(parsed)
        power = int(exponent)
        if not -2 ** 63 <= power < 2 ** 63:
            return None  # ParseInt fails: no quantity
        base, power = 10, (power + 2 ** 31) % 2 ** 32 - 2 ** 31
    else:
        base, power = _SUFFIX[suffix or ""]
    numerator, denominator = mantissa, 10 ** len(fraction)
    if power >= 0:
        if base == 10 and power > 60:  # 10**61 and more: far past any count, whatever the fraction
            return MAX_COUNT
        numerator *= base ** power
    elif power < -60:
        return None  # below 10**-60: a fraction of at most 48 digits is never whole there
    else:
        denominator *= base ** -power
    if numerator % denominator:
        return None
    return min(numerator // denominator, MAX_COUNT)


whole_quantity = _count  # the same reader for a count the API server publishes (a Node's allocatable)


def _resource_asks(container: Any, bad: Optional[List[str]] = None) -> Dict[str, int]:
    """One container's MIG and GPU resources (resource name -> count); the ones that are no whole quantity
    go to ``bad`` as ``name=value``."""
    resources = (container.get("resources") if isinstance(container, Mapping) else None) or {}
    asked = {}  # type: Dict[str, Any]
    # A limit alone sets the request (the API's defaulting) and the two must be equal (ValidatePodSpec); where a
    # hand-written snapshot has them differ, the request is what kube-scheduler counts (PodRequests): read last.
    for part in ("limits", "requests"):
        values = resources.get(part) if isinstance(resources, Mapping) else None
        if isinstance(values, Mapping):
            asked.update(values)
    out = {}  # type: Dict[str, int]
    for name, value in asked.items():
        if not isinstance(name, str) or profile_of_resource(name) is None:
            continue
        count = _count(value)
        if count is None:
            if bad is not None:
                text = str(value)
                bad.append("%s=%s" % (name, text[:40] + ("..." if len(text) > 40 else "")))
        elif count:
            out[name] = count
    return out


def _containers(spec: Mapping[str, Any], part: str) -> List[Mapping[str, Any]]:
    items = spec.get(part) or ()
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []


def _totals(spec: Mapping[str, Any], bad: Optional[List[str]]) -> Tuple[Dict[str, int], Dict[str, int]]:
    """What the containers ask together, and the most an init step asks, as kube-scheduler counts a pod
    (k8s.io/component-helpers/resource/helpers.go PodRequests): the containers add up; an init container
    with ``restartPolicy: Always`` (a sidecar, Kubernetes 1.29+) keeps running, so it adds to them and to
    every later init step; any other init container runs alone beside the sidecars started before it. The
    pod needs the larger of the two, per resource."""
    def add(into: Dict[str, int], asks: Mapping[str, int]) -> Dict[str, int]:
        for name, n in asks.items():
            into[name] = min(into.get(name, 0) + n, MAX_COUNT)
        return into

    sums, sidecars, inits = {}, {}, {}  # type: Dict[str, int], Dict[str, int], Dict[str, int]
    for container in _containers(spec, "containers"):
        add(sums, _resource_asks(container, bad))
    for container in _containers(spec, "initContainers"):
        if len(set(sums) | set(inits)) > MAX_ASKED:
            # Past MAX_ASKED names every reader counts the pod beyond what it reads, so no more is read: each
            # init step copies the sidecars' asks, and 16,000 sidecars asking a name each took ~50 s to sum.
            break
        asks = _resource_asks(container, bad)
        if container.get("restartPolicy") == "Always":
            add(sums, asks)
            step = dict(add(sidecars, asks))
        else:
            step = add(dict(sidecars), asks)
        for name, n in step.items():
            inits[name] = max(inits.get(name, 0), n)
    return sums, inits


def _asks_by_resource(pod: Mapping[str, Any], bad: Optional[List[str]] = None) -> Dict[str, int]:
    spec = pod.get("spec") or {}
    sums, inits = _totals(spec if isinstance(spec, Mapping) else {}, bad)
    return {name: max(sums.get(name, 0), inits.get(name, 0)) for name in set(sums) | set(inits)}


def pod_asks(pod: Mapping[str, Any]) -> Dict[str, int]:
    """The MIG profiles (and ``gpu``) a pod asks for, with counts (each at most MAX_COUNT); {} for a pod
    whose ask cannot be counted (:func:`ask_problem` says why)."""
    bad = []  # type: List[str]
    total = {}  # type: Dict[str, int]
    for name, n in _asks_by_resource(pod, bad).items():
        profile = profile_of_resource(name)
        total[profile] = min(total.get(profile, 0) + n, MAX_COUNT)
    return {} if bad else dict(sorted(total.items()))


def ask_problem(pod: Mapping[str, Any]) -> str:
    """Why the pod's MIG or GPU request cannot be counted ("" when it can): a value that is no whole
    quantity. Such a pod is not counted, with this reason, never planned for (a count beyond what a node
    holds is the planner's "not counted", with the node's size)."""
    bad = []  # type: List[str]
    _asks_by_resource(pod, bad)
    return ("asks for %s; a pod may ask for a whole quantity of each (2, 1k)" % "; ".join(bad[:4])) if bad else ""


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace") or "default", meta.get("name") or "")


def owner_of(pod: Mapping[str, Any]) -> str:
    """Who made the pod, for the reasons: a ReplicaSet named ``<deployment>-<pod-template-hash>`` is its
    Deployment's (the Deployment controller's naming, ``pkg/controller/deployment/sync.go``)."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    # a list of objects and a map, as the API serves them; of another shape (a pod as a proxy or a file has
    # it) they name no owner, rather than ending the plan of every pool in an AttributeError
    refs = meta.get("ownerReferences")
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    for ref in refs if isinstance(refs, list) else ():
        if not isinstance(ref, Mapping) or not ref.get("controller"):
            continue
        kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        template_hash = labels.get("pod-template-hash")
        template_hash = template_hash if isinstance(template_hash, str) else ""
        if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
            return "deployment %s/%s" % (namespace, name[:-len(template_hash) - 1])
        return "%s %s/%s" % (kind.lower(), namespace, name)
    return "pod %s" % pod_key(pod)


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending, not bound, not being deleted, and the scheduler said Unschedulable. A pod being deleted keeps
    the condition it had, but the scheduler never tries it again (``pkg/scheduler/schedule_one.go``
    skipPodSchedule): it is gone before anything made for it could serve it."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName") \
            or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in status.get("conditions") or ())


class _Rules:
    """A pod's node constraints, read once and bounded (values as sets), to test against many places.
    ``beyond``: why the pod is larger than the hook reads (then it matches nowhere); ``key``: the same for
    pods that say the same (a Deployment's replicas are tested once)."""

    __slots__ = ("selector", "terms", "fields", "tolerations", "beyond", "key")

    def __init__(self, pod: Mapping[str, Any]):
        self.selector, self.terms, self.fields, self.tolerations = (), (), False, ()  # type: Any, Any, bool, Any
        self.beyond = ""
        try:
            self._read(pod.get("spec") or {})
        except _Beyond as exc:
            self.selector, self.terms, self.fields, self.tolerations = (), (), False, ()
            self.beyond = "larger than the hook reads: %s" % exc
        self.key = (self.selector, self.terms, self.fields, self.tolerations, self.beyond)

    def _read(self, spec: Mapping[str, Any]) -> None:
        if len(_asked_names(spec)) > MAX_ASKED:
            raise _Beyond("asks more than %d MIG or GPU resources (no GPU has more than 11 profiles)" % MAX_ASKED)
        selector = spec.get("nodeSelector") or {}
        if not isinstance(selector, Mapping):
            raise _Beyond("nodeSelector is not a map")
        if len(selector) > MAX_RULES:
            raise _Beyond("nodeSelector has more than %d pairs" % MAX_RULES)
        self.selector = tuple(sorted((_text(k, "a nodeSelector key"), _text(v, "a nodeSelector value"))
                                     for k, v in selector.items()))
        affinity = spec.get("affinity") or {}
        node_affinity = affinity.get("nodeAffinity") or {} if isinstance(affinity, Mapping) else None
        if not isinstance(node_affinity, Mapping):
            raise _Beyond("affinity or its nodeAffinity is not a map")
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        rules, values = len(self.selector), 0
        if required is not None:
            if not isinstance(required, Mapping):  # read as no terms, _terms_back raised AttributeError
                raise _Beyond("required node affinity is not a map")
            terms = required.get("nodeSelectorTerms") or []
            if not isinstance(terms, list):
                raise _Beyond("nodeSelectorTerms is not a list")
            if len(terms) > MAX_TERMS:
                raise _Beyond("node affinity has more than %d terms" % MAX_TERMS)
            compiled = []
            for term in terms:
                term = term if isinstance(term, Mapping) else {}
                if term.get("matchFields"):
                    self.fields = True
                expressions = term.get("matchExpressions") or []
                if not isinstance(expressions, list):
                    raise _Beyond("matchExpressions is not a list")
                rules += len(expressions)
                if rules > MAX_RULES:
                    raise _Beyond("nodeSelector and node affinity have more than %d rules" % MAX_RULES)
                one = []
                for e in expressions:
                    e = e if isinstance(e, Mapping) else {}
                    listed = e.get("values") or []
                    if not isinstance(listed, list):
                        raise _Beyond("node affinity values are not a list")
                    values += len(listed)
                    if values > MAX_VALUES:
                        raise _Beyond("node affinity has more than %d values" % MAX_VALUES)
                    one.append((_text(e.get("key") or "", "a node affinity key"), str(e.get("operator") or "")[:16],
                                frozenset(_text(v, "a node affinity value", True) for v in listed)))
                if term.get("matchFields"):  # ANDed with the rest of its term: it names nodes, never a pool's
                    one.append(_BY_FIELD)
                compiled.append(tuple(one))
            self.terms = (tuple(compiled),)  # one tuple: "required" given (an empty list matches nothing)
        tolerations = spec.get("tolerations") or []
        if not isinstance(tolerations, list) or len(tolerations) > MAX_TOLERATIONS:
            raise _Beyond("more than %d tolerations" % MAX_TOLERATIONS)
        self.tolerations = tuple(
            tuple(_text((t if isinstance(t, Mapping) else {}).get(k) or "", "a toleration's " + k)
                  for k in ("key", "operator", "value", "effect")) for t in tolerations)

    def why_not(self, labels: Mapping[str, str], taints: Sequence[Mapping[str, Any]]) -> str:
        if self.beyond:
            return self.beyond
        for key, value in self.selector:
            if labels.get(key) != value:
                return "nodeSelector %s=%s" % (key, value)
        if self.terms:
            # terms are ORed: one without matchFields that the labels meet lets the pod land here
            if not any(term and all(_expression_matches(e, labels) for e in term) for term in self.terms[0]):
                return "node affinity names nodes by field (matchFields)" if self.fields else "required node affinity"
        for taint in taints:
            if taint.get("effect") in BLOCKING_EFFECTS and not any(_tolerates(t, taint) for t in self.tolerations):
                return "taint %s=%s:%s not tolerated" % (taint.get("key"), taint.get("value") or "",
                                                         taint.get("effect"))
        return ""


def _asked_names(spec: Mapping[str, Any]) -> set:
    """The MIG and GPU resource names the pod's containers and init containers ask (requests or limits), read
    until there are more than MAX_ASKED."""
    names = set()  # type: set
    for part in ("containers", "initContainers"):
        for container in _containers(spec, part):
            resources = container.get("resources")
            for section in ("requests", "limits"):
                values = resources.get(section) if isinstance(resources, Mapping) else None
                for name in values if isinstance(values, Mapping) else ():
                    if isinstance(name, str) and profile_of_resource(name) is not None:
                        names.add(name)
                        if len(names) > MAX_ASKED:
                            return names
    return names


class _Beyond(Exception):
    """A part of a pod larger than the hook reads (the message says which)."""


def _text(value: Any, what: str, number: bool = False) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int) if number else str):
        raise _Beyond("%s is not a string" % what)
    text = str(value)
    if len(text) > MAX_TEXT:
        raise _Beyond("%s is longer than %d characters" % (what, MAX_TEXT))
    return text


# A term's matchFields, as one expression no label set meets (its operator is none of the label operators):
# it names single nodes (metadata.name), and a pool's demand is read by labels alone.
_BY_FIELD = ("", "matchFields", frozenset())  # type: Tuple[str, str, FrozenSet[str]]
# What Go's strconv.ParseInt(v, 10, 64) reads (labels.Requirement.Matches for Gt and Lt); Python's int() reads
# more ("1_0", " 7", other scripts' digits), and no bound.
_INT64 = re.compile(r"[+-]?[0-9]{1,64}\Z")  # any number of leading zeros, as Go reads them


def _int64(text: str) -> Optional[int]:
    if not _INT64.match(text):
        return None
    value = int(text)
    return value if -2 ** 63 <= value < 2 ** 63 else None


def _expression_matches(expression: Tuple[str, str, FrozenSet[str]], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression
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
        have, bound = _int64(labels[key]), _int64(next(iter(values)))
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False  # an operator the API server would have refused


def why_not(pod: Mapping[str, Any], labels: Mapping[str, str], taints: Sequence[Mapping[str, Any]]) -> str:
    """Empty when a node with these labels and taints could take the pod; else one line why not."""
    return _Rules(pod).why_not(labels, taints)


def _tolerates(toleration: Tuple[str, str, str, str], taint: Mapping[str, Any]) -> bool:
    key, operator, value, effect = toleration
    if effect and effect != taint.get("effect"):
        return False
    operator = operator or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and value == (taint.get("value") or "")


def waiting_pod(pod: Any) -> Optional[Dict[str, Any]]:
    """What the matcher and the planner read of one Pending pod of the list, or None when it is not demand
    (not waiting, or asking for no MIG instance or GPU): names, the controller, the asks summed (one
    container, one init container), and the node constraints when they are within the bounds above (else
    ``beyond``, the reason it is not counted). Bounded whatever the pod holds."""
    if not isinstance(pod, Mapping) or not isinstance(pod.get("spec") or {}, Mapping) \
            or not isinstance(pod.get("status") or {}, Mapping) or not isinstance(pod.get("metadata") or {}, Mapping):
        return None
    status = pod.get("status") or {}
    conditions = [c for c in status.get("conditions") or () if isinstance(c, Mapping)] \
        if isinstance(status.get("conditions") or (), list) else []
    if not is_unschedulable({"metadata": pod.get("metadata") or {}, "spec": pod.get("spec") or {},
                             "status": {"phase": status.get("phase"), "conditions": conditions}}):
        return None
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    bad = []  # type: List[str]
    sums, inits = _totals(spec, bad)  # reduced to one container and one init container that ask the same
    if not sums and not inits and not bad:
        return None
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    owner = next((r for r in meta.get("ownerReferences") or () if isinstance(r, Mapping) and r.get("controller")),
                 None) if isinstance(meta.get("ownerReferences") or (), list) else None
    out_meta = {"name": str(meta.get("name") or "")[:253], "namespace": str(meta.get("namespace") or "")[:63]}
    template_hash = labels.get("pod-template-hash")
    if isinstance(template_hash, str) and len(template_hash) <= 63:
        out_meta["labels"] = {"pod-template-hash": template_hash}
    if owner is not None:
        out_meta["ownerReferences"] = [{"kind": str(owner.get("kind") or "")[:63],
                                        "name": str(owner.get("name") or "")[:253], "controller": True}]
    rules = _Rules(pod)
    if len(set(sums) | set(inits)) > MAX_ASKED:  # beyond: a few kept, to name it (not counted, never planned)
        sums, inits = dict(sorted(sums.items())[:4]), {}
    out_spec = {"containers": [{"resources": {"limits": {k: str(v) for k, v in sorted(sums.items())}}}]}
    if bad:  # kept as written (cut short): ask_problem says it again of the reduced pod
        out_spec["containers"].append({"resources": {"limits": dict(b.split("=", 1) for b in bad[:4])}})
    if inits:
        out_spec["initContainers"] = [{"resources": {"limits": {k: str(v) for k, v in sorted(inits.items())}}}]
    # How long it has waited, for the dwell's bound (functions/decision/claim_rules.py waited_s): the API
    # server's creationTimestamp and the scheduler's lastTransitionTime, kept as short text.
    created = meta.get("creationTimestamp")
    if isinstance(created, str) and len(created) <= 40:
        out_meta["creationTimestamp"] = created
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    since = next((c.get("lastTransitionTime") for c in conditions if c.get("type") == "PodScheduled"), None)
    if isinstance(since, str) and len(since) <= 40:
        scheduled["lastTransitionTime"] = since
    out = {"metadata": out_meta, "spec": out_spec, "status": {"phase": "Pending", "conditions": [scheduled]}}
    if rules.beyond:
        out["beyond"] = rules.beyond
        return out
    if rules.selector:
        out_spec["nodeSelector"] = dict(rules.selector)
    if rules.terms:
        out_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": _terms_back(spec)}}}
    if rules.tolerations:
        out_spec["tolerations"] = [{k: v for k, v in zip(("key", "operator", "value", "effect"), t) if v}
                                   for t in rules.tolerations]
    return out


def _terms_back(spec: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The required node affinity terms as the API wrote them, with only the parts the matcher reads
    (called once the bounds above hold)."""
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    out = []
    for term in required.get("nodeSelectorTerms") or []:
        term = term if isinstance(term, Mapping) else {}
        one = {"matchExpressions": [
            {"key": e.get("key") or "", "operator": str(e.get("operator") or "")[:16],
             "values": [str(v) for v in e.get("values") or []]}
            for e in (x if isinstance(x, Mapping) else {} for x in term.get("matchExpressions") or [])]}
        if term.get("matchFields"):
            one["matchFields"] = [{"key": "metadata.name"}]  # only that there are some is read
        out.append(one)
    return out


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
    takes them; the rest as (pod key, one line why no pool can take it): reported, never counted. A pod's
    constraints are read once (and once for all pods that say the same), whatever the number of places."""
    by_pool = {name: [] for name in pools}  # type: Dict[str, List[PodDemand]]
    unmatched = []  # type: List[Tuple[str, str]]
    verdicts = {}  # type: Dict[Any, Tuple[str, str]]
    for pod in pods:
        if not is_unschedulable(pod):
            continue
        wrong = ask_problem(pod)
        if wrong:  # a value no quantity reads (-1, 1.5): this pod's refusal, the others go on
            unmatched.append((pod_key(pod), wrong))
            continue
        if not pod_asks(pod):
            continue
        rules = _Rules(pod)
        if pod.get("beyond") and not rules.beyond:  # reduced as it arrived (waiting_pod): the reason stays
            rules.beyond = str(pod["beyond"])
            rules.key = rules.key + (rules.beyond,)
        verdict = verdicts.get(rules.key)
        if verdict is None:
            verdict = verdicts[rules.key] = _which_pool(rules, pools)
        pool, why = verdict
        if pool:
            by_pool[pool].extend(demand_of(pod))
        else:
            unmatched.append((pod_key(pod), why))
    return by_pool, unmatched


def refusals(pods: Sequence[Mapping[str, Any]], places: Sequence[Place]) -> List[str]:
    """Per place, "" when every pod of ``pods`` could land there, else ``<pod key> (<why>)`` for the first (in
    pod order) that could not. The planner places a pod on any GPU of its supply (it knows no pod's nodes), so
    a place that refuses one of the pods it plans for is no place for the plan: an instance made there, or an
    idle one counted there, would serve a pod the scheduler never binds there. Pods that say the same are
    read once."""
    rules = {}  # type: Dict[Any, Tuple[str, _Rules]]
    for pod in sorted(pods, key=pod_key):
        one = _Rules(pod)
        rules.setdefault(one.key, (pod_key(pod), one))
    # Each pod's places as a bit set (_Accepts), and a place's line read only for the first pod that refuses it:
    # testing every pod against every place cost pods x places (2,000 pods with a toleration each of its own,
    # all fitting, on 1,000 nodes: 2 million tests, 3.2 s of CPU), and anyone who may create pods decides how
    # many differ.
    out = [""] * len(places)
    accepts = _Accepts(places)
    open_ = (1 << len(places)) - 1  # the places no pod has refused yet
    for key, one in rules.values():
        if not open_:
            break
        taken = accepts.of(one)
        refused, open_ = open_ & ~taken, open_ & taken
        while refused:
            low = refused & -refused
            index = low.bit_length() - 1
            place = places[index]
            out[index] = "%s (%s)" % (key, one.why_not(place.labels, place.taints))
            refused ^= low
    return out


class _Accepts:
    """The places a pod's rules let it land on, as a bit set (bit i: ``places[i]``), worked out with each label
    (key, value) and each set of blocking taints indexed once: the same answer as ``_Rules.why_not`` == "" on
    each place (``test_refusals_are_why_not_on_every_place``), in bit operations."""

    def __init__(self, places: Sequence[Place]):
        self.places, self.all = places, (1 << len(places)) - 1
        self.equal = {}  # type: Dict[Tuple[str, str], int]
        self.present = {}  # type: Dict[str, int]
        groups = {}  # type: Dict[Tuple[Tuple[Any, Any, Any], ...], int]
        for i, place in enumerate(places):
            bit = 1 << i
            for k, v in place.labels.items():
                self.present[k] = self.present.get(k, 0) | bit
                if isinstance(v, str):
                    self.equal[(k, v)] = self.equal.get((k, v), 0) | bit
            blocking = tuple((t.get("key"), t.get("value"), t.get("effect")) for t in place.taints
                             if t.get("effect") in BLOCKING_EFFECTS)
            groups[blocking] = groups.get(blocking, 0) | bit
        self.groups = [([{"key": k, "value": v, "effect": e} for k, v, e in blocking], bits)
                       for blocking, bits in groups.items()]
        self.ranges = {}  # type: Dict[Tuple[str, str, FrozenSet[str]], int]  (Gt, Lt: read place by place, once)

    def _expression(self, expression: Tuple[str, str, FrozenSet[str]]) -> int:
        key, operator, values = expression
        if operator in ("In", "NotIn"):
            hit = 0
            for value in values:
                hit |= self.equal.get((key, value), 0)
            return hit if operator == "In" else self.all & ~hit
        if operator == "Exists":
            return self.present.get(key, 0)
        if operator == "DoesNotExist":
            return self.all & ~self.present.get(key, 0)
        if operator in ("Gt", "Lt"):
            if expression not in self.ranges:
                self.ranges[expression] = sum(1 << i for i, place in enumerate(self.places)
                                              if _expression_matches(expression, place.labels))
            return self.ranges[expression]
        return 0  # matchFields, or an operator the API server would have refused

    def of(self, rules: "_Rules") -> int:
        if rules.beyond:
            return 0
        bits = self.all
        for key, value in rules.selector:
            bits &= self.equal.get((key, value), 0)
        if rules.terms:
            terms = 0
            for term in rules.terms[0]:
                if term:
                    one = self.all
                    for expression in term:
                        one &= self._expression(expression)
                    terms |= one
            bits &= terms
        for taints, group in self.groups:
            if bits & group and not all(any(_tolerates(t, taint) for t in rules.tolerations) for taint in taints):
                bits &= ~group
        return bits


def _which_pool(rules: _Rules, pools: Mapping[str, Sequence[Place]]) -> Tuple[str, str]:
    """(the first pool one of whose places takes the pod, "") or ("", the reasons no pool does)."""
    if rules.beyond:
        return "", rules.beyond
    reasons = []
    for name in sorted(pools):
        first = ""
        for place in pools[name]:  # stops at the first place that takes it: most pods fit the first node
            miss = rules.why_not(place.labels, place.taints)
            if not miss:
                return name, ""
            first = first or miss
        reasons.append("%s: %s" % (name, first or "no nodes"))
    return "", "; ".join(reasons) or "no auto pool"
