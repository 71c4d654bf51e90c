"""The shapes of the Node and Pod fields the hook reads, checked where such objects come from a file (``advise
--inventory``'s ``"kubernetes"``: what ``kubectl get nodes,pods -A -o json`` prints). The API server only
hands out objects of these shapes (its OpenAPI schema, ``k8s.io/api/core/v1/types.go``); a hand-edited
snapshot may hold anything, and a wrong type must be one line naming the field, not a TypeError deep in the
matcher. Only the fields the readers use are checked (functions/decision/layout/matching.py, supply.py);
the others are left as they are. Pure: no I/O.

A schema is ``str`` / ``bool`` (that JSON type), ``QUANTITY`` (a resource quantity: text or a number), a
dict (a mapping with those optional keys), ``[schema]`` (a list of it) or ``MapOf(schema)`` (text keys to
it). ``null`` is taken as absent for a field, as the readers do (``x.get(k) or {}``), never as a list's item.
"""

from typing import Any, List, Tuple

from node_bootstrap.outside import json_type


class MapOf:
    def __init__(self, value: Any) -> None:
        self.value = value


QUANTITY = "a quantity"
_TEXT_MAP = MapOf(str)
_REQUIREMENT = {"key": str, "operator": str, "values": [str]}
_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [_REQUIREMENT], "matchFields": [_REQUIREMENT]}]}}}
_CONTAINER = {"resources": {"requests": MapOf(QUANTITY), "limits": MapOf(QUANTITY)}}
_META = {"name": str, "namespace": str, "labels": _TEXT_MAP, "annotations": _TEXT_MAP,
         "ownerReferences": [{"kind": str, "name": str, "controller": bool}]}
OBJECT = {"kind": str, "metadata": _META,
          "spec": {"nodeName": str, "nodeSelector": _TEXT_MAP, "affinity": _AFFINITY,
                   "tolerations": [{"key": str, "operator": str, "value": str, "effect": str}],
                   "taints": [{"key": str, "value": str, "effect": str}],
                   "containers": [_CONTAINER], "initContainers": [_CONTAINER]},
          "status": {"phase": str, "conditions": [{"type": str, "status": str, "reason": str}]}}


def _expected(schema: Any) -> str:
    if schema is str:
        return "text"
    if schema is bool:
        return "true or false"
    if schema is QUANTITY:
        return "a quantity (text such as \"1\")"
    if isinstance(schema, list):
        return "a list"
    return "an object"  # json_type's words: "expected an object, got a list"


def _fits(value: Any, schema: Any) -> bool:
    if schema is str:
        return isinstance(value, str)
    if schema is bool:
        return isinstance(value, bool)
    if schema is QUANTITY:
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    return isinstance(value, list if isinstance(schema, list) else dict)


def problem(value: Any, schema: Any = OBJECT, where: str = "") -> str:
    """The first field of ``value`` whose type differs from ``schema``, as one line (``spec.containers[0]
    .resources.limits: expected an object, got a list``); "" when every field read has its shape. Walks the
    schema, so its depth (a handful of levels) bounds the work, whatever the value's nesting."""
    todo: List[Tuple[Any, Any, str, bool]] = [(value, schema, where, True)]
    while todo:
        item, shape, path, required = todo.pop()
        if item is None and not required:  # an absent field (or null): the readers skip it
            continue
        if not _fits(item, shape):
            return "%s: expected %s, got %s" % (path or "the object", _expected(shape), json_type(item))
        if isinstance(shape, list):
            todo.extend((x, shape[0], "%s[%d]" % (path, i), True) for i, x in reversed(list(enumerate(item))))
        elif isinstance(shape, MapOf):
            todo.extend((v, shape.value, "%s[%r]" % (path, k[:60]), False) for k, v in item.items())
        elif isinstance(shape, dict):
            todo.extend((item.get(k), s, "%s.%s" % (path, k) if path else k, False) for k, s in shape.items())
    return ""
