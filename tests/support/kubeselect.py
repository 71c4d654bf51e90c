"""The Kubernetes rules the test API server (``tests/support/kubeapi.py``) decides with, each as upstream
has it: label selectors in their string form and their object form, field selectors, and what a
PodDisruptionBudget allows. Pure functions; the server holds the objects.

Sources (kubernetes/kubernetes):

* ``staging/src/k8s.io/apimachinery/pkg/labels/selector.go`` (``Parse``): a selector string is terms
  joined by ``,`` (AND); a term is ``key``, ``!key``, ``key=value``, ``key==value``, ``key!=value``,
  ``key in (v1,v2)`` or ``key notin (v1,v2)``. ``!=`` and ``notin`` also match objects without the key.
  The empty string selects everything.
* ``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go`` (``LabelSelectorAsSelector``): the
  object form ``{"matchLabels": {...}, "matchExpressions": [{"key", "operator": In|NotIn|Exists|
  DoesNotExist, "values"}]}``; an unknown operator is an invalid selector. For a policy/v1
  PodDisruptionBudget the empty selector ``{}`` selects every pod of its namespace, a missing one
  (``LabelSelectorAsSelector(nil)``) none, and an invalid one matches no pod, for the eviction subresource
  (``pkg/registry/core/pod/storage/eviction.go`` ``getPodDisruptionBudgets``) and the disruption
  controller alike (checked against the real kube-apiserver: tests/kube_real).
* ``pkg/controller/disruption/disruption.go`` (``getExpectedPodCount``, ``countHealthyPods``,
  ``updatePdbStatus``): ``minAvailable`` as an integer is the desired healthy count over the selected pods;
  as a percentage, and ``maxUnavailable`` in either form, are scaled on the expected count (the owning
  controllers' replicas; here: each controller's selected pods, which is what they are when every replica
  exists; a pod without a controller adds none, a DaemonSet or Job has no scale and fails the sync),
  rounding up; ``disruptionsAllowed = max(0, currentHealthy - desiredHealthy)``, 0 when no pod is
  expected; healthy = Ready (a Running pod without conditions counts as Ready here) and not terminating.
"""

import math
import re
from typing import Any, Callable, Container, Dict, List, Mapping, Optional, Tuple

_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,252}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?\Z")


class SelectorError(ValueError):
    """An unparsable selector: the API server answers 400 BadRequest."""


Requirement = Callable[[Mapping[str, str]], bool]


def _split_terms(text: str) -> List[str]:
    terms, depth, start = [], 0, 0
    for pos, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:pos])
            start = pos + 1
    terms.append(text[start:])
    return [t.strip() for t in terms]


def _check_key(key: str, text: str) -> str:
    if not _KEY.match(key):
        raise SelectorError("unable to parse requirement: invalid label key %r in %r" % (key, text))
    return key


def _values(inner: str, key: str) -> Tuple[str, ...]:
    """The values of a requirement on ``key``, each checked as labels.NewRequirement does (its words: a pool
    id that is no label value is quoted to the user from this message)."""
    values = tuple(v.strip() for v in inner.split(",")) if inner.strip() else ()
    for i, v in enumerate(values):
        if len(v) > 63:
            why = "must be no more than 63 bytes"
        elif not _VALUE.match(v):
            why = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                   "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
        else:
            continue
        raise SelectorError('unable to parse requirement: values[%d][%s]: Invalid value: "%s": %s' % (i, key, v, why))
    return values


def parse_labels(text: str) -> List[Requirement]:
    """labels.Parse: the requirements of a selector string (all must hold)."""
    out: List[Requirement] = []
    if not text or not text.strip():
        return out
    for term in _split_terms(text):
        if not term:
            raise SelectorError("found '', expected: identifier in %r" % text)
        m = re.match(r"^(\S+?)\s+(in|notin)\s*\((.*)\)\Z", term)
        if m:
            key, op = _check_key(m.group(1), text), m.group(2)
            values = _values(m.group(3), key)
            if op == "in":
                if not values:
                    raise SelectorError("for 'in', 'notin' operators, values set can't be empty: %r" % text)
                out.append(lambda labels, k=key, vs=values: k in labels and labels[k] in vs)
            else:
                out.append(lambda labels, k=key, vs=values: k not in labels or labels[k] not in vs)
            continue
        m = re.match(r"^([^=!\s]+)\s*(==|=|!=)\s*(\S*)\Z", term)
        if m:
            key, op = _check_key(m.group(1), text), m.group(2)
            value = _values(m.group(3), key)
            value_text = value[0] if value else ""
            if op == "!=":
                out.append(lambda labels, k=key, v=value_text: labels.get(k) != v)
            else:
                out.append(lambda labels, k=key, v=value_text: k in labels and labels[k] == v)
            continue
        if term.startswith("!"):
            key = _check_key(term[1:].strip(), text)
            out.append(lambda labels, k=key: k not in labels)
            continue
        key = _check_key(term, text)
        out.append(lambda labels, k=key: k in labels)
    return out


def labels_match(text: str, labels: Mapping[str, str]) -> bool:
    return all(r(labels) for r in parse_labels(text))


def selector_object(selector: Optional[Mapping[str, Any]]) -> Optional[List[Requirement]]:
    """LabelSelectorAsSelector; None for an invalid one. ``[]`` is the empty selector."""
    if not selector:
        return []
    out: List[Requirement] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        out.append(lambda labels, k=key, v=str(value): k in labels and labels[k] == v)
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), tuple(str(v) for v in expr.get("values") or ())
        if op == "In" and values:
            out.append(lambda labels, k=key, vs=values: k in labels and labels[k] in vs)
        elif op == "NotIn" and values:
            out.append(lambda labels, k=key, vs=values: k not in labels or labels[k] not in vs)
        elif op == "Exists" and not values:
            out.append(lambda labels, k=key: k in labels)
        elif op == "DoesNotExist" and not values:
            out.append(lambda labels, k=key: k not in labels)
        else:
            return None  # the API validation refuses it; the eviction path treats it as matching nothing
    return out


def pdb_selects(pdb: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A budget's selector, as the eviction subresource applies it: ``{}`` selects every pod (policy/v1),
    a missing or invalid one none."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return False
    requirements = selector_object(selector)
    if requirements is None:
        return False
    return all(r(labels) for r in requirements)


def parse_fields(text: str, supported: Tuple[str, ...]) -> List[Tuple[str, str, str]]:
    """fields.ParseSelector terms ``(field, op, value)`` with ``=``, ``==`` or ``!=``; a field the resource
    does not index is refused as the API server does: 400 'field label not supported'."""
    out = []
    for term in [t for t in (text or "").split(",") if t.strip()]:
        m = re.match(r"^([^=!]+)(==|=|!=)(.*)\Z", term.strip())
        if not m:
            raise SelectorError("invalid selector: %r; can't understand %r" % (text, term))
        field, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if field not in supported:
            raise SelectorError('field label not supported: %s' % field)
        out.append((field, "!=" if op == "!=" else "=", value))
    return out


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def fields_match(terms: List[Tuple[str, str, str]], obj: Mapping[str, Any]) -> bool:
    return all((_field_value(obj, f) == v) == (op == "=") for f, op, v in terms)


def _scaled(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true."""
    if isinstance(value, int):
        return value
    text = str(value)
    if not text.endswith("%") or not text[:-1].isdigit():
        raise ValueError("invalid value for IntOrString: invalid value %r" % text)
    return int(math.ceil(int(text[:-1]) * total / 100.0))


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """podutil.IsPodReady; a Running pod without conditions counts as Ready here."""
    status = pod.get("status") or {}
    conditions = status.get("conditions")
    if conditions is not None:
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return status.get("phase", "Running") == "Running"


def pod_healthy(pod: Mapping[str, Any]) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and pod_ready(pod)


# Controllers whose replicas the disruption controller reads (its finders, and the scale subresource).
SCALABLE = ("ReplicaSet", "ReplicationController", "StatefulSet", "Deployment")
NO_SCALE = {"DaemonSet": "daemonsets.apps", "Job": "jobs.batch", "CronJob": "cronjobs.batch"}


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((r for r in (pod.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller") is True),
                {})


def disruptions_allowed(pdb: Mapping[str, Any], selected: List[Mapping[str, Any]],
                        disrupted: Container[str] = ()) -> Dict[str, Any]:
    """The status the disruption controller writes: expectedPods, desiredHealthy, currentHealthy,
    disruptionsAllowed, and ``syncFailed`` (the SyncFailed condition's message, "" when it computed).

    An integer minAvailable counts the selected pods. maxUnavailable and a percentage minAvailable are
    scaled on the controllers' replicas (``getExpectedScale``), here each controller's selected pods: a pod
    without a controller adds nothing (an 'unmanaged pod'), a controller without a scale subresource (a
    DaemonSet, a Job) fails the sync, which allows nothing. No expected pod allows nothing either
    (``updatePdbStatus``). ``disrupted``: names of pods an eviction recorded in ``status.disruptedPods`` that the
    controller has not seen go yet: not healthy (``countHealthyPods``)."""
    spec = pdb.get("spec") or {}
    scaled = spec.get("maxUnavailable") is not None or str(spec.get("minAvailable", "")).endswith("%")
    expected = len(selected)
    if scaled:
        replicas = {}  # type: Dict[Any, int]
        for pod in selected:
            ref = _controller(pod)
            if not ref:
                continue
            kind = str(ref.get("kind") or "")
            if kind not in SCALABLE:
                failed = "%s does not implement the scale subresource" % NO_SCALE.get(kind, kind.lower() + "s")
                return {"expectedPods": 0, "desiredHealthy": 0, "currentHealthy": 0, "disruptionsAllowed": 0,
                        "syncFailed": failed}
            key = ref.get("uid") or (kind, ref.get("name"))
            replicas[key] = replicas.get(key, 0) + 1
        expected = sum(replicas.values())
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = 0  # neither set: getExpectedPodCount leaves desiredHealthy at zero
    healthy = sum(1 for p in selected if pod_healthy(p) and (p.get("metadata") or {}).get("name") not in disrupted)
    allowed = healthy - desired if expected > 0 else 0
    return {"expectedPods": expected, "desiredHealthy": desired, "currentHealthy": healthy,
            "disruptionsAllowed": max(0, allowed), "syncFailed": ""}
