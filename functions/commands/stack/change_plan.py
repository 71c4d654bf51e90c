"""``deploy --dry-run``'s plan, from ROS itself: the resources the stack would add, modify or remove and the
parameters that would change.

* A new stack: ``PreviewStack`` (every resource ROS would create, with ``Action`` ``Add``).
* An existing stack: ``CreateChangeSet`` (type ``UPDATE``, the same template, parameters and
  ``UsePreviousParameters`` the update would send), ``GetChangeSet`` until it is computed, then
  ``DeleteChangeSet``, whatever happened: the stack keeps no trace of the plan. A dry run killed in between
  (nothing runs its cleanup) leaves its change set: the next plan deletes every ``ack-mig-hook-plan-*`` change
  set of the stack first (``ListChangeSets``), so they do not pile up to ROS's 20 a stack, past which every
  dry run is refused (tests/function/test_deploy_kills.py). A change set's ``Changes``
  follow ROS's "Data structures" of change sets: ``{"Type": "Resource", "ResourceChange": {"Action":
  "Add|Modify|Remove", "LogicalResourceId", "PhysicalResourceId", "ResourceType", "Replacement":
  "True|False|Conditional", "Scope": [...], "Details": [{"Target": {"Attribute", "Name",
  "RequiresRecreation"}, "ChangeSource", "CausingEntity"}]}}``.

The parameter diff compares the stack's current values (``GetStack``) with those the plan would give it;
ROS's pseudo parameters (``ALIYUN::...``) are left out and ``NoEcho`` values are never shown.
"""

import uuid
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from functions.base.textsafe import clip
from functions.commands.stack.ros import StackError, Stacks

NO_ECHO = "****"
PLAN_PREFIX = "ack-mig-hook-plan-"  # the name of every change set a plan makes
SYMBOL = {"Add": "+", "Modify": "~", "Remove": "-"}


class Plan(NamedTuple):
    operation: str  # create or update
    stack_name: str
    stack_id: Optional[str]
    source: str  # "PreviewStack" or "change set <name>"
    resources: List[Dict[str, Any]]  # logical_id, type, action, replacement, scope, properties, causes
    parameters: List[Dict[str, Optional[str]]]  # key, old (a new stack: the template's default, else None), new

    def to_json(self) -> Dict[str, Any]:
        return self._asdict()

    def changes_nothing(self) -> bool:
        return self.operation == "update" and not self.resources and not self.parameters


def _user_parameters(items: Any, declared: Dict[str, dict]) -> Dict[str, str]:
    out = {}
    for item in items or []:
        key = str(item.get("ParameterKey") or "")
        if key and "::" not in key:  # ALIYUN::StackId, ALIYUN::Region ...: ROS's own, not the template's
            value = item.get("ParameterValue")
            out[key] = NO_ECHO if (declared.get(key) or {}).get("NoEcho") else ("" if value is None else str(value))
    return out


def parameter_diff(old: Dict[str, str], new: Dict[str, str]) -> List[Dict[str, Optional[str]]]:
    """Pure: every parameter whose value differs from ``old`` (None where ``old`` has no value)."""
    return [{"key": k, "old": old.get(k), "new": new.get(k)} for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k) and not (old.get(k) == NO_ECHO and new.get(k) == NO_ECHO)]


def defaults(declared: Dict[str, dict]) -> Dict[str, str]:
    """The template's defaults, what a new stack's parameters are compared with (NoEcho ones masked)."""
    return {k: NO_ECHO if spec.get("NoEcho") else str(spec["Default"]) for k, spec in declared.items()
            if "Default" in (spec or {})}


def _resource(change: Dict[str, Any]) -> Dict[str, Any]:
    details = change.get("Details") or []
    properties = sorted({str((d.get("Target") or {}).get("Name") or "") for d in details} - {""})
    causes = sorted({str(d.get("CausingEntity") or "") for d in details} - {""})
    return {"logical_id": change.get("LogicalResourceId"), "type": change.get("ResourceType"),
            "action": change.get("Action"), "replacement": change.get("Replacement"),
            "scope": list(change.get("Scope") or []), "properties": properties, "causes": causes}


def from_preview(name: str, stack: Dict[str, Any], declared: Dict[str, dict]) -> Plan:
    resources = [{"logical_id": r.get("LogicalResourceId"), "type": r.get("ResourceType"),
                  "action": r.get("Action") or "Add", "replacement": None, "scope": [], "properties": [],
                  "causes": []} for r in stack.get("Resources") or []]
    return Plan("create", name, None, "PreviewStack", resources,
                parameter_diff(defaults(declared), _user_parameters(stack.get("Parameters"), declared)))


def from_change_set(name: str, stack: Dict[str, Any], change_set: Dict[str, Any],
                    declared: Dict[str, dict]) -> Plan:
    resources = [_resource(c.get("ResourceChange") or {}) for c in change_set.get("Changes") or []
                 if (c.get("Type") or "Resource") == "Resource"]
    return Plan("update", name, stack.get("StackId"), "change set %s" % change_set.get("ChangeSetName"), resources,
                parameter_diff(_user_parameters(stack.get("Parameters"), declared),
                               _user_parameters(change_set.get("Parameters"), declared)))


def compute(stacks: Stacks, existing: Optional[Dict[str, Any]], name: str, template: str, values: Dict[str, str],
            declared: Dict[str, dict], timeout_min: int, poll_s: float, deadline_s: float = 300.0,
            progress: Callable[[str], None] = lambda line: None) -> Plan:
    """Ask ROS what the deploy would do; changes nothing (a change set made here is deleted here, and one an
    earlier plan left behind too)."""
    if existing is None:
        return from_preview(name, stacks.preview(name, template, values, timeout_min), declared)
    stack_id = existing["StackId"]
    stack = stacks.get(stack_id) or existing
    for left in _sweep(stacks, stack_id, name, deadline_s, poll_s):
        progress("warning: %s" % left)
    change_set_name = PLAN_PREFIX + uuid.uuid4().hex[:12]
    change_set_id = stacks.create_change_set(stack_id, change_set_name, template, values, timeout_min)
    try:
        found = stacks.wait_change_set(change_set_id, deadline_s, poll_s)
    except StackError as exc:
        left = _discard(stacks, change_set_id, change_set_name, name, deadline_s, poll_s)
        raise StackError("%s%s" % (exc, "; " + left if left else ""), exc.code) from None
    left = _discard(stacks, change_set_id, change_set_name, name, deadline_s, poll_s)
    if left:
        raise StackError(left)
    if found.get("Status") != "CREATE_COMPLETE":
        raise StackError("ROS could not compute the change set for stack %s: %s %s" % (
            name, found.get("Status"), clip(found.get("StatusReason") or "", 300)))
    return from_change_set(name, stack, found, declared)


def _sweep(stacks: Stacks, stack_id: str, stack_name: str, deadline_s: float, poll_s: float) -> List[str]:
    """Delete the plans' change sets an earlier dry run left on the stack (it was killed before its own
    ``_discard``); what could not be deleted, one line each. Only this module's names: a change set a person
    made for the stack is theirs."""
    left = []
    for found in stacks.change_sets(stack_id, PLAN_PREFIX + "*"):
        name = str(found.get("ChangeSetName") or "")
        change_set_id = found.get("ChangeSetId")
        if name.startswith(PLAN_PREFIX) and isinstance(change_set_id, str) and change_set_id:
            problem = _discard(stacks, change_set_id, name, stack_name, deadline_s, poll_s)
            if problem:
                left.append(problem)
    return left


def _discard(stacks: Stacks, change_set_id: str, change_set_name: str, stack_name: str, deadline_s: float,
             poll_s: float) -> str:
    """Delete the plan's change set; "" when gone, else what is left behind and how to remove it. A change
    set still being computed may refuse deletion: it is waited for once, then deleted again."""
    problem = None
    for attempt in range(2):
        try:
            stacks.delete_change_set(change_set_id)
            return ""
        except StackError as exc:
            problem = exc
        if attempt == 0:
            try:
                stacks.wait_change_set(change_set_id, deadline_s, poll_s)
            except StackError:
                pass
    return ("the plan's change set %s was left on stack %s (%s): delete it in the ROS console (the stack's Change "
            "Sets)" % (change_set_name, stack_name, problem))


def render(plan: Plan, region: str) -> List[str]:
    """The plan as text lines (the caller escapes them for the terminal)."""
    where = "stack %s%s in %s" % (plan.stack_name, " (%s)" % plan.stack_id if plan.stack_id else "", region)
    if plan.changes_nothing():
        return ["plan: no change to %s (ROS %s found none)" % (where, plan.source)]
    lines = ["plan: %s %s, from ROS %s:" % (plan.operation, where, plan.source)]
    if plan.resources:
        lines.append("  resources:")
    width = max([len(str(r["logical_id"])) for r in plan.resources] + [1])
    for r in plan.resources:
        extra = []
        if r["properties"]:
            extra.append(", ".join(r["properties"]))
        if r["causes"]:
            extra.append("by %s" % ", ".join(r["causes"]))
        if r["action"] == "Modify" and r["replacement"]:
            extra.append("replacement %s" % r["replacement"])
        lines.append("    %s %-6s %-*s %s%s" % (SYMBOL.get(r["action"], "?"), r["action"], width, r["logical_id"],
                                               r["type"], "  (%s)" % "; ".join(extra) if extra else ""))
    if plan.parameters:
        lines.append("  parameters:")
        width = max(len(str(p["key"])) for p in plan.parameters)
        for p in plan.parameters:
            if plan.operation == "create":  # compared with the template's defaults
                text = "%s%s" % (p["new"] or "''", "" if p["old"] is None else " (default %s)" % (p["old"] or "''"))
            else:
                text = "%s -> %s" % ("''" if p["old"] in (None, "") else p["old"],
                                     "''" if p["new"] in (None, "") else p["new"])
            lines.append("    %-*s %s" % (width, p["key"], text))
    return lines
