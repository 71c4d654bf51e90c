"""How ROS reads a template for a stack, as far as the ROS emulator needs it to answer ``PreviewStack`` and
``GetChangeSet`` the way ROS computes them: parameters with their defaults, conditions, and each resource's
properties with the intrinsic functions resolved.

Rules, from the ROS user guide ("Template structure", "Functions", "Pseudo parameters"):

* a parameter left out takes its ``Default``; ``ALIYUN::Region``, ``ALIYUN::StackName``, ``ALIYUN::StackId``,
  ``ALIYUN::AccountId``, ``ALIYUN::TenantId`` and ``ALIYUN::NoValue`` are pseudo parameters (``NoValue``
  removes the property it is the value of);
* ``Conditions`` are evaluated from parameter values with ``Fn::Equals``, ``Fn::Not``, ``Fn::And``,
  ``Fn::Or`` and ``Condition``; a resource whose ``Condition`` is false is not part of the stack, and
  ``Fn::If`` picks its branch by the condition;
* ``Ref`` of a parameter is its value, ``Fn::Sub`` substitutes ``${Name}``; ``Ref`` of a resource and
  ``Fn::GetAtt`` are only known once the resource exists: they stand for themselves here (a placeholder that
  changes when the resource they name is replaced, which this model does not decide).

What this does not model: per resource type, which property changes force a replacement (ROS's
``RequiresRecreation``); the emulator answers ``Replacement: "False"`` for every modification (unconfirmed
per type; ``deploy`` only shows the value).
"""

import copy
import functools
import re
from typing import Any, Dict, List, Optional, Set, Tuple

import yaml

PSEUDO = ("ALIYUN::Region", "ALIYUN::StackName", "ALIYUN::StackId", "ALIYUN::AccountId", "ALIYUN::TenantId")
NO_VALUE = "ALIYUN::NoValue"
_GONE = object()
_SUB = re.compile(r"\$\{([A-Za-z0-9:._]+)\}")


def parse(text: str) -> Any:
    """``yaml.safe_load(text)``, each text parsed once (a YAMLError each time): the emulator reads a stack's
    template on most calls, and PyYAML's parser took most of a deploy test's time. A copy, so that no reader
    changes what another one gets."""
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=16)
def _parsed(text: str) -> Any:
    return yaml.safe_load(text)


def load(text: str) -> Dict[str, Any]:
    doc = parse(text)
    if not isinstance(doc, dict) or "ROSTemplateFormatVersion" not in doc:
        raise ValueError("the template has no ROSTemplateFormatVersion")
    return doc


def values(doc: Dict[str, Any], given: Dict[str, str]) -> Dict[str, str]:
    """Every declared parameter's value: the given one, else the template's default."""
    out = {}
    for name, spec in (doc.get("Parameters") or {}).items():
        if name in given:
            out[name] = given[name]
        elif "Default" in (spec or {}):
            out[name] = str(spec["Default"])
    return out


class Context:
    def __init__(self, doc: Dict[str, Any], params: Dict[str, str], pseudo: Dict[str, str]) -> None:
        self.doc, self.params, self.pseudo = doc, params, pseudo
        self.conditions: Dict[str, bool] = {}
        for name in doc.get("Conditions") or {}:
            self.condition(name)

    def condition(self, name: str) -> bool:
        if name not in self.conditions:
            self.conditions[name] = bool(self._truth((self.doc.get("Conditions") or {}).get(name)))
        return self.conditions[name]

    def _truth(self, node: Any) -> Any:
        if isinstance(node, dict) and len(node) == 1:
            (fn, arg), = node.items()
            if fn == "Fn::Equals":
                a, b = (self.resolve(x) for x in arg)
                return str(a) == str(b)
            if fn == "Fn::Not":
                return not self._truth(arg[0] if isinstance(arg, list) else arg)
            if fn == "Fn::And":
                return all(self._truth(x) for x in arg)
            if fn == "Fn::Or":
                return any(self._truth(x) for x in arg)
            if fn == "Condition":
                return self.condition(arg)
        return self.resolve(node)

    def resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self.resolve(x) for x in node) if v is not _GONE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (fn, arg), = node.items()
            if fn == "Ref":
                if arg == NO_VALUE:
                    return _GONE
                if arg in self.params:
                    return self.params[arg]
                if arg in self.pseudo:
                    return self.pseudo[arg]
                return "<Ref %s>" % arg  # a resource: known once it exists
            if fn == "Fn::Sub":
                text = arg if isinstance(arg, str) else arg[0]
                return _SUB.sub(lambda m: str(self.params.get(m.group(1), self.pseudo.get(m.group(1), m.group(0)))),
                                text)
            if fn == "Fn::GetAtt":
                return "<GetAtt %s>" % ".".join(map(str, arg))
            if fn == "Fn::If":
                chosen = arg[1] if self.condition(arg[0]) else arg[2]
                return self.resolve(chosen)
            if fn.startswith("Fn::"):
                return {fn: self.resolve(arg)}
        out = {}
        for key, value in node.items():
            resolved = self.resolve(value)
            if resolved is not _GONE:
                out[key] = resolved
        return out


def resources(doc: Dict[str, Any], ctx: Context) -> Dict[str, Dict[str, Any]]:
    """Logical id -> {"Type", "Properties" (resolved), "Raw" (as written)} for every resource the stack has."""
    out = {}
    for name, spec in (doc.get("Resources") or {}).items():
        spec = spec or {}
        if spec.get("Condition") and not ctx.condition(spec["Condition"]):
            continue
        out[name] = {"Type": spec.get("Type"), "Properties": ctx.resolve(spec.get("Properties") or {}),
                     "Raw": spec.get("Properties") or {}, "Description": spec.get("Description", "")}
    return out


def referenced(node: Any) -> Set[str]:
    """The parameter and resource names a property refers to (Ref, Fn::Sub ${...}, Fn::If's condition)."""
    found: Set[str] = set()
    if isinstance(node, list):
        for x in node:
            found |= referenced(x)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                found.add(value)
            elif key == "Fn::Sub":
                found.update(_SUB.findall(value if isinstance(value, str) else value[0]))
            else:
                found |= referenced(value)
    return found


def changes(old: Dict[str, Dict[str, Any]], new: Dict[str, Dict[str, Any]], old_params: Dict[str, str],
            new_params: Dict[str, str], conditions: Tuple[Dict[str, bool], Dict[str, bool]],
            doc_conditions: Dict[str, Any], physical: Dict[str, str]) -> List[Dict[str, Any]]:
    """The ``Changes`` of a change set (ROS "Data structures": Change / ResourceChange / ResourceChangeDetail)."""
    changed_params = {k for k in set(old_params) | set(new_params) if old_params.get(k) != new_params.get(k)}
    changed_params |= {c for c in set(conditions[0]) | set(conditions[1])
                       if conditions[0].get(c) != conditions[1].get(c)}
    out: List[Dict[str, Any]] = []
    for name in sorted(set(old) | set(new)):
        if name not in old:
            out.append(_change("Add", name, new[name]["Type"], None, []))
        elif name not in new:
            out.append(_change("Remove", name, old[name]["Type"], physical.get(name), []))
        elif old[name]["Properties"] != new[name]["Properties"] or old[name]["Type"] != new[name]["Type"]:
            details = []
            a, b = old[name]["Properties"], new[name]["Properties"]
            for prop in sorted(set(a) | set(b)):
                if a.get(prop) == b.get(prop):
                    continue
                raw_same = old[name]["Raw"].get(prop) == new[name]["Raw"].get(prop)
                causes = sorted(referenced(new[name]["Raw"].get(prop)) & changed_params) if raw_same else []
                for cause in causes or [None]:
                    detail = {"Target": {"Attribute": "Properties", "Name": prop, "RequiresRecreation": "Never"},
                              "Evaluation": "Static",
                              "ChangeSource": "ParameterReference" if cause else "DirectModification"}
                    if cause:
                        detail["CausingEntity"] = cause
                    details.append(detail)
            replaced = old[name]["Type"] != new[name]["Type"]
            out.append(_change("Modify", name, new[name]["Type"], physical.get(name), details,
                               "True" if replaced else "False"))
    return out


def _change(action: str, name: str, kind: Optional[str], physical: Optional[str], details: List[Dict[str, Any]],
            replacement: Optional[str] = None) -> Dict[str, Any]:
    change: Dict[str, Any] = {"Action": action, "LogicalResourceId": name, "ResourceType": kind}
    if physical and action in ("Modify", "Remove"):
        change["PhysicalResourceId"] = physical
    if action == "Modify":
        change.update(Replacement=replacement, Scope=["Properties"], Details=details)
    return {"Type": "Resource", "ResourceChange": change}
