"""A loopback emulator of Resource Orchestration Service (ROS, RPC API 2019-09-10) for the real
``alibabacloud-ros20190910`` SDK, so ``ack-mig-hook deploy`` and ``undeploy`` run their own SDK calls,
signing included, against 127.0.0.1 (point them here with ``ACK_MIG_ROS_ENDPOINT``).

The SDK sends RPC actions as ``POST /`` with the parameters in the query string (lists flattened as
``Parameters.1.ParameterKey``) and ``TemplateBody`` in a form body, signed ACS3-HMAC-SHA256; the
signature and the headers are checked by :class:`CsEmulator`'s verifier, which this class extends.

Semantics kept from the ROS API reference, inconvenient ones included:

* ``CreateStack`` answers at once with ``StackId``; the stack is ``CREATE_IN_PROGRESS`` for
  ``steps`` ``GetStack`` calls, then ``CREATE_COMPLETE``. When ``fail_with`` is set the operation fails
  with that ``StatusReason`` and, as ROS does by default (``DisableRollback`` false), is rolled back:
  a create ends ``CREATE_ROLLBACK_COMPLETE``, an update ``ROLLBACK_COMPLETE``; with ``DisableRollback``
  true they end ``CREATE_FAILED`` / ``UPDATE_FAILED``. A failed create keeps the stack (and its name). A second stack of the same name is ``StackExists``. A parameter the template does not declare,
  or a declared one without default left out, is ``StackValidationFailed``.
* ``UpdateStack`` on a stack whose template and parameters are unchanged is refused with
  ``NotSupported`` ("Update the completely same stack ... is not supported"); during ``*_IN_PROGRESS`` it
  is ``StackOperationConflict``... (the code names vary by doc version; callers must treat any refusal as
  such, and the "same stack" case by its code).
* ``ListStacks`` pages (``PageSize`` 1..50) and leaves out deleted stacks; ``GetStack`` of a deleted or
  unknown stack is a 404 ``StackNotFound``.
* ``DeleteStack`` starts ``DELETE_IN_PROGRESS``; after ``steps`` polls the stack is gone.
* ``UpdateStack`` with ``UsePreviousParameters=true`` keeps the stack's earlier value of every declared
  parameter the request leaves out; without it, a left-out parameter takes the template's default.
  ``AllowedValues``, ``AllowedPattern`` and a Number's ``MinValue``/``MaxValue`` are enforced.
* ``ValidateTemplate`` parses the body and lists its parameters (read-only: ``deploy --dry-run`` uses it).
* ``ClientToken`` on ``CreateStack`` / ``UpdateStack``: "Ensures request idempotency. Must be client-generated
  and globally unique. Maximum length: 64 characters. Can contain letters, digits, hyphens (-) and
  underscores (_)" (ros20190910 SDK model, ``CreateStackRequest.client_token``; "How to ensure idempotence",
  help.aliyun.com/document_detail/134212). A request that repeats a token already answered gets that first
  answer again (the same ``StackId``) and changes nothing; a malformed token is refused (HTTP status and code
  of that refusal: unconfirmed, 400 ``InvalidParameter`` here). ``answer_late_next(action, seconds)`` serves
  a request and then answers it late, as a lost answer looks to a client that times out and retries.
  ``hold_processing_next(action)``: the request is still being processed, its answer not decided, until a
  request with the same token has come meanwhile (at most 10 s); that one is answered 400 ``LastTokenProcessing``
  "The last token request is processing." (ROS "Common error codes": "the last token request is being
  processed. Try again later.").
* ``GetStack`` lists every parameter the stack has, the template's defaults included, and ROS's pseudo
  parameters (``ALIYUN::Region``, ``ALIYUN::StackId`` ...), as the GetStack reference's sample answer does;
  a ``NoEcho`` parameter's value is ``****``.
* Events: an operation records one event per resource it touches (``CREATE_IN_PROGRESS`` /
  ``CREATE_COMPLETE`` of each resource of a create, the modified, added and removed ones of an update,
  every resource of a delete) besides the stack's own, so a client that lists the whole history sees the
  earlier operations' events too (ListStackEvents: newest first, a page of at most 50).
* ``PreviewStack`` (a new stack, by ``StackName``): the parameters as for CreateStack (unknown, missing and
  out-of-constraint ones refused the same way) and ``Stack.Resources``: every resource the template would
  create (a resource whose ``Condition`` is false is left out), ``Action: Add``, with its resolved
  ``Properties`` (ros20190910 ``PreviewStackResponseBodyStackResources``). Nothing is created.
* Change sets (CreateChangeSet reference; "Data structures" of change sets): ``CreateChangeSet`` of type
  ``UPDATE`` needs a ``StackId`` of a stack in a state that can be updated (the states the ROS console's
  "Update a stack" lists: CREATE_COMPLETE, UPDATE_COMPLETE, UPDATE_FAILED, ROLLBACK_COMPLETE,
  ROLLBACK_FAILED, ...; a stack in progress is refused with ``StackOperationConflict``, another with
  ``StackValidationFailed``: the codes are unconfirmed); its name must be unique among the stack's change sets
  (1..255 letters, digits, ``-``, ``_``, starting with a letter or digit); "A stack can contain up to 20
  change sets" (refused past that, code unconfirmed); ``UsePreviousParameters`` as for UpdateStack. It is
  ``CREATE_IN_PROGRESS`` for ``steps`` GetChangeSet calls, then ``CREATE_COMPLETE`` with ``ExecutionStatus``
  ``AVAILABLE`` and its ``Changes`` computed from the two templates and parameter sets
  (tests/support/ros_template.py): ``Add`` / ``Remove`` / ``Modify`` per resource, ``Details`` naming each
  changed property and the parameter that caused it (``ParameterReference``) or ``DirectModification``. A
  change set with nothing to change completes with ``Changes: []`` (unconfirmed: ROS might fail it instead).
  Nothing of the stack changes. ``DeleteChangeSet`` removes it; while it is still being created it is refused
  (``ChangeSetOperationConflict``, unconfirmed), and an unknown id is ``ChangeSetNotFound`` (404).
  ``ListChangeSets`` (ros20190910 ``ListChangeSetsRequest``: ``RegionId`` and ``StackId`` required,
  ``ChangeSetName.N`` "You can use the wildcard character asterisk (*) for fuzzy match", ``PageSize`` 1..50,
  default 10) lists the stack's change sets with the fields of ``ListChangeSetsResponseBodyChangeSets``, no
  ``Changes``; the order (oldest first here) and the code for an unknown stack (``StackNotFound``) are
  unconfirmed.
* Function Compute's code check, as the stack's ``ALIYUN::FC3::Function`` applies it: with ``Code.Checksum``
  set, "Function Compute checks whether the checksum of the code package is the same as that provided" (FC
  API 2023-03-30, ``InputCodeLocation.checksum``, the CRC-64 OSS reports). When ``code_store(bucket, key)``
  is given (the OSS emulator's objects), a create or update whose package in OSS has another CRC-64 fails
  and is rolled back like any resource failure (FC's error text: unconfirmed).
"""

import json
import re
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl

import yaml

from tests.support import ros_template
from tests.support.cs_emulator import CsEmulator

Answer = Tuple[int, Dict[str, Any], Dict[str, str]]
ACTIONS = ("CreateStack", "UpdateStack", "DeleteStack", "GetStack", "ListStacks", "ListStackEvents",
           "ValidateTemplate", "ListStackResources", "PreviewStack", "CreateChangeSet", "GetChangeSet",
           "DeleteChangeSet", "ListChangeSets")
UPDATABLE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED",
             "IMPORT_CREATE_COMPLETE", "IMPORT_UPDATE_COMPLETE", "IMPORT_UPDATE_FAILED",
             "IMPORT_UPDATE_ROLLBACK_COMPLETE", "IMPORT_UPDATE_ROLLBACK_FAILED", "CHECK_FAILED", "CHECK_COMPLETE")
CHANGE_SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,254}")
MAX_CHANGE_SETS = 20
ACCOUNT = "1357924680135792"


def _flat_list(query: Dict[str, str], name: str) -> List[Dict[str, str]]:
    """``Parameters.1.ParameterKey=a&Parameters.1.ParameterValue=b`` -> [{"ParameterKey": "a", ...}]."""
    items: Dict[int, Dict[str, str]] = {}
    for key, value in query.items():
        parts = key.split(".")
        if parts[0] == name and len(parts) == 3 and parts[1].isdigit():
            items.setdefault(int(parts[1]), {})[parts[2]] = value
    return [items[i] for i in sorted(items)]


class RosEmulator(CsEmulator):
    version = "2019-09-10"

    def __init__(self, steps: int = 2, **kw: Any) -> None:
        super().__init__(**kw)
        self.steps = steps  # GetStack polls a stack stays *_IN_PROGRESS
        self.stacks: Dict[str, Dict[str, Any]] = {}
        self.fail_with: Optional[str] = None  # next create/update ends *_FAILED with this reason
        self.bodies: List[Dict[str, str]] = []
        self.code_store: Optional[Callable[[str, str], Optional[bytes]]] = None  # (bucket, key) -> the object
        self.before_complete: Optional[Callable[[Dict[str, Any]], None]] = None  # runs as FC fetches the code
        self._tokens: Dict[Tuple[str, str], Answer] = {}
        self._late: Dict[str, List[float]] = {}
        self._holds: Dict[str, List[threading.Event]] = {}  # action -> held first requests (hold_processing_next)
        self._processing: Dict[Tuple[str, str], threading.Event] = {}  # (action, token) being served
        self.change_sets: Dict[str, Dict[str, Any]] = {}  # id -> change set (deleted ones are removed)

    def put_stack(self, stack_id: str, name: str, **parameters: str) -> Dict[str, Any]:
        """A finished stack made outside the emulator (another cluster's, one deploy never made), with
        ``parameters`` as its ParameterKey -> ParameterValue."""
        self.stacks[stack_id] = {"StackId": stack_id, "StackName": name, "Status": "CREATE_COMPLETE",
                                 "RegionId": "cn-beijing", "_events": [], "_template": "",
                                 "Parameters": [{"ParameterKey": k, "ParameterValue": v}
                                                for k, v in parameters.items()]}
        return self.stacks[stack_id]

    def answer_late_next(self, action: str, seconds: float) -> None:
        with self._lock:
            self._late.setdefault(action, []).append(seconds)

    def hold_processing_next(self, action: str) -> None:
        with self._lock:
            self._holds.setdefault(action, []).append(threading.Event())

    # The base class routes ROA paths; RPC has one path and names the action in a header.
    def handle(self, method: str, raw_path: str, headers: Dict[str, str], body: bytes) -> Answer:
        answer, action = self.handle_rpc(method, raw_path, headers, body, self._rpc)
        with self._lock:
            late = self._late[action].pop(0) if self._late.get(action) else 0.0
        if late:
            time.sleep(late)  # served already: the client may give up and retry meanwhile
        return answer

    def _rpc(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes,
             action: str) -> Answer:
        if method != "POST" or path != "/" or action not in ACTIONS:
            return self._error(404, "InvalidAction.NotFound", "no such API: %s %s %s" % (method, path, action))
        refused = self._refused(method, path, query, headers, body, action) or self._injected(action)
        if refused is not None:
            return refused
        with self._lock:
            if action in self._answers:  # answer_with (the CS emulator's): a body of any shape, as it is
                return 200, self._answers[action], {}
        form = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True)) if body else {}
        with self._lock:
            self.bodies.append(form)
            token = query.get("ClientToken") if action in ("CreateStack", "UpdateStack", "CreateChangeSet",
                                                           "PreviewStack") else None
            if token is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", token):
                return self._error(400, "InvalidParameter", "ClientToken %r is not 1..64 letters, digits, - or _"
                                   % token[:80])
            if token and (action, token) in self._processing:  # a retry while the first is being served
                self._processing[(action, token)].set()
                return self._error(400, "LastTokenProcessing", "The last token request is processing.")
            if token and (action, token) in self._tokens:  # a retry of a request already served
                return self._tokens[(action, token)]
            held = self._holds[action].pop(0) if token and self._holds.get(action) else None
            if held is not None:
                self._processing[(action, token)] = held
        if held is not None:
            held.wait(10)
        with self._lock:
            self._processing.pop((action, token), None)
            answer = getattr(self, "_" + action)(query, form)
            if token and answer[0] == 200:
                self._tokens[(action, token)] = answer
            return answer

    # ---- helpers ----

    @staticmethod
    def _template_parameters(text: str) -> Dict[str, Any]:
        doc = ros_template.parse(text)
        if not isinstance(doc, dict) or "ROSTemplateFormatVersion" not in doc:
            raise ValueError("the template has no ROSTemplateFormatVersion")
        return doc.get("Parameters") or {}

    def _with_previous(self, query: Dict[str, str], params: List[Dict[str, Any]], template: str,
                       stack: Dict[str, Any]) -> List[Dict[str, Any]]:
        """With ``UsePreviousParameters=true``, UpdateStack reference: a declared parameter left out keeps the
        value the stack was given before (else, as without it, the template's default)."""
        if query.get("UsePreviousParameters", "").lower() != "true":
            return params
        try:
            declared = self._template_parameters(template)
        except (ValueError, yaml.YAMLError):
            declared = {}
        named = {p.get("ParameterKey") for p in params}
        return params + [p for p in stack["Parameters"]
                         if p.get("ParameterKey") in declared and p.get("ParameterKey") not in named]

    def _check_parameters(self, template: str, given: List[Dict[str, str]]) -> Optional[Answer]:
        try:
            declared = self._template_parameters(template)
        except (ValueError, yaml.YAMLError) as exc:
            return self._error(400, "InvalidTemplate", str(exc).splitlines()[0])
        names = {p.get("ParameterKey") for p in given}
        unknown = sorted(n for n in names if n not in declared)
        if unknown:
            return self._error(400, "StackValidationFailed", "Parameters %s are not defined" % unknown)
        missing = sorted(n for n, spec in declared.items() if "Default" not in (spec or {}) and n not in names)
        if missing:
            return self._error(400, "StackValidationFailed", "Parameters %s must be given" % missing)
        for p in given:
            spec = declared[p["ParameterKey"]] or {}
            value = p.get("ParameterValue", "")
            allowed = spec.get("AllowedValues")
            if allowed and value not in [str(a) for a in allowed]:
                return self._error(400, "StackValidationFailed", "Parameter %s must be one of %s"
                                   % (p["ParameterKey"], allowed))
            # ROS template parameter constraints (ROS user guide, "Parameters"): AllowedPattern for a String,
            # MinValue/MaxValue for a Number.
            if spec.get("AllowedPattern") and not re.fullmatch(spec["AllowedPattern"], value):
                return self._error(400, "StackValidationFailed", "Parameter %s must match pattern %s"
                                   % (p["ParameterKey"], spec["AllowedPattern"]))
            if spec.get("Type") == "Number":
                try:
                    number = float(value)
                except ValueError:
                    return self._error(400, "StackValidationFailed", "Parameter %s must be a number"
                                       % p["ParameterKey"])
                if not spec.get("MinValue", number) <= number <= spec.get("MaxValue", number):
                    return self._error(400, "StackValidationFailed", "Parameter %s must be within %s..%s"
                                       % (p["ParameterKey"], spec.get("MinValue"), spec.get("MaxValue")))
        return None

    def _resources_of(self, stack: Dict[str, Any], template: Optional[str] = None,
                      given: Optional[List[Dict[str, str]]] = None) -> Tuple[Dict[str, Any], Dict[str, str], Any]:
        """(resources, parameter values, context) of the stack, or of ``template``/``given`` for it."""
        try:
            doc = ros_template.load(template if template is not None else stack["_template"])
        except (ValueError, yaml.YAMLError):
            return {}, {}, None
        values = ros_template.values(doc, {p["ParameterKey"]: p.get("ParameterValue", "")
                                           for p in (given if given is not None else stack["Parameters"])})
        ctx = ros_template.Context(doc, values, self._pseudo(stack))
        return ros_template.resources(doc, ctx), values, ctx

    def _pseudo(self, stack: Dict[str, Any]) -> Dict[str, str]:
        return {"ALIYUN::Region": stack.get("RegionId", ""), "ALIYUN::StackName": stack.get("StackName", ""),
                "ALIYUN::StackId": stack.get("StackId", ""), "ALIYUN::AccountId": ACCOUNT,
                "ALIYUN::TenantId": ACCOUNT}

    def _event(self, stack: Dict[str, Any], resource: str, status: str, reason: str = "",
               kind: Optional[str] = None) -> None:
        stack["_events"].append({"EventId": uuid.uuid4().hex, "LogicalResourceId": resource, "Status": status,
                                 "StatusReason": reason, "ResourceType": kind or "ALIYUN::ROS::Stack",
                                 "StackId": stack["StackId"], "StackName": stack["StackName"],
                                 "PhysicalResourceId": stack.get("_physical", {}).get(resource, "")})

    def _start(self, stack: Dict[str, Any], operation: str, query: Optional[Dict[str, str]] = None,
               touched: Optional[Dict[str, str]] = None) -> None:
        """``touched``: logical id -> type of the resources this operation works on (default: all of them)."""
        stack["Status"] = operation + "_IN_PROGRESS"
        stack["_polls"] = 0
        stack["_fail"] = self.fail_with
        self.fail_with = None
        stack["_no_rollback"] = (query or {}).get("DisableRollback", "false").lower() == "true"
        if touched is None:
            touched = {k: v["Type"] for k, v in self._resources_of(stack)[0].items()}
        stack["_touched"] = touched
        self._event(stack, stack["StackName"], stack["Status"], "%s started" % operation.lower())
        for name, kind in sorted(touched.items()):
            self._event(stack, name, operation + "_IN_PROGRESS", "", kind)

    def _advance(self, stack: Dict[str, Any]) -> None:
        status = stack["Status"]
        if not status.endswith("_IN_PROGRESS"):
            return
        stack["_polls"] += 1
        if stack["_polls"] < self.steps:
            return
        operation = status[: -len("_IN_PROGRESS")]
        if operation in ("CREATE", "UPDATE") and not stack["_fail"]:
            stack["_fail"] = self._code_check(stack)
        if not stack["_fail"]:
            for name, kind in sorted(stack.get("_touched", {}).items()):
                stack.setdefault("_physical", {}).setdefault(name, uuid.uuid4().hex[:20])
                self._event(stack, name, operation + "_COMPLETE", "state changed", kind)
        if operation == "DELETE":  # its own reason, not the last operation's ("Stack Create completed ...")
            stack["Status"], stack["StatusReason"] = "DELETE_COMPLETE", "Stack Delete completed successfully"
        elif stack["_fail"] and stack["_no_rollback"]:
            stack["Status"], stack["StatusReason"] = operation + "_FAILED", stack["_fail"]
        elif stack["_fail"]:
            self._event(stack, stack["StackName"], operation + "_FAILED", stack["_fail"])
            stack["Status"] = "CREATE_ROLLBACK_COMPLETE" if operation == "CREATE" else "ROLLBACK_COMPLETE"
            stack["StatusReason"] = stack["_fail"]
        else:
            stack["Status"], stack["StatusReason"] = operation + "_COMPLETE", "Stack %s completed successfully" \
                % operation.title()
        self._event(stack, stack["StackName"], stack["Status"], stack.get("StatusReason", ""))

    def _code_check(self, stack: Dict[str, Any]) -> Optional[str]:
        """FC's checksum check of the function's package (see the module's docstring); None when it passes."""
        if self.code_store is None:
            return None
        if self.before_complete is not None:
            self.before_complete(stack)
        try:
            resources = (ros_template.parse(stack["_template"]) or {}).get("Resources") or {}
        except yaml.YAMLError:
            return None
        functions = [r for r in resources.values() if (r or {}).get("Type") == "ALIYUN::FC3::Function"]
        values = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack["Parameters"]}
        checksum = values.get("CodeChecksum", "")
        if not functions or "Checksum" not in ((functions[0].get("Properties") or {}).get("Code") or {}) \
                or not checksum:
            return None
        from tests.support.oss_emulator import crc64_ecma

        data = self.code_store(values.get("CodeBucket", ""), values.get("CodeObject", ""))
        if data is None:
            return "Resource Function: the code package oss://%s/%s does not exist" % (
                values.get("CodeBucket"), values.get("CodeObject"))
        if str(crc64_ecma(data)) != checksum:
            return "Resource Function: the checksum of the code package (%d) is not %s" % (crc64_ecma(data), checksum)
        return None

    def _stack(self, query: Dict[str, str]) -> Optional[Dict[str, Any]]:
        stack = self.stacks.get(query.get("StackId", ""))
        return None if stack is None or stack["Status"] == "DELETE_COMPLETE" else stack

    @staticmethod
    def _public(stack: Dict[str, Any]) -> Dict[str, Any]:
        return {k: v for k, v in stack.items() if not k.startswith("_")}

    # ---- actions ----

    def _ValidateTemplate(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        try:
            declared = self._template_parameters(form.get("TemplateBody", ""))
        except (ValueError, yaml.YAMLError) as exc:
            return self._error(400, "InvalidTemplate", str(exc).splitlines()[0])
        return 200, {"RequestId": uuid.uuid4().hex, "Parameters": [
            {"ParameterKey": k, "Type": (v or {}).get("Type", "String")} for k, v in declared.items()]}, {}

    def _CreateStack(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        name = query.get("StackName", "")
        if any(s["StackName"] == name and s["Status"] != "DELETE_COMPLETE" for s in self.stacks.values()):
            return self._error(409, "StackExists", "The Stack (%s) already exists" % name)
        params = _flat_list(query, "Parameters")
        refused = self._check_parameters(form.get("TemplateBody", ""), params)
        if refused:
            return refused
        stack_id = str(uuid.uuid4())
        stack = {"StackId": stack_id, "StackName": name, "RegionId": query.get("RegionId", ""),
                 "Parameters": params, "TimeoutInMinutes": int(query.get("TimeoutInMinutes", "60")),
                 "Outputs": [{"OutputKey": "FunctionName", "OutputValue": next(
                     (p["ParameterValue"] for p in params if p["ParameterKey"] == "FunctionName"), "ack-mig-hook")}],
                 "_template": form.get("TemplateBody", ""), "_events": []}
        self.stacks[stack_id] = stack
        self._start(stack, "CREATE", query)
        return 200, {"RequestId": uuid.uuid4().hex, "StackId": stack_id}, {}

    def _UpdateStack(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        stack = self._stack(query)
        if stack is None:
            return self._error(404, "StackNotFound", "The Stack (%s) could not be found" % query.get("StackId"))
        if stack["Status"].endswith("_IN_PROGRESS"):
            return self._error(409, "StackOperationConflict", "stack is %s" % stack["Status"])
        params = _flat_list(query, "Parameters")
        template = form.get("TemplateBody", "")
        if query.get("UsePreviousParameters", "").lower() == "true":
            params = sorted(self._with_previous(query, params, template, stack), key=lambda p: p.get("ParameterKey", ""))
        refused = self._check_parameters(template, params)
        if refused:
            return refused
        if template == stack["_template"] and sorted(params, key=lambda p: p.get("ParameterKey", "")) == \
                sorted(stack["Parameters"], key=lambda p: p.get("ParameterKey", "")):
            return self._error(400, "NotSupported", "Update the completely same stack (%s) is not supported"
                               % stack["StackName"])
        touched = {c["ResourceChange"]["LogicalResourceId"]: c["ResourceChange"]["ResourceType"]
                   for c in self._changes(stack, template, params)}
        stack["Parameters"], stack["_template"] = params, template
        self._start(stack, "UPDATE", query, touched)
        return 200, {"RequestId": uuid.uuid4().hex, "StackId": stack["StackId"]}, {}

    def _DeleteStack(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        stack = self._stack(query)
        if stack is None:
            return self._error(404, "StackNotFound", "The Stack (%s) could not be found" % query.get("StackId"))
        self._start(stack, "DELETE")
        return 200, {"RequestId": uuid.uuid4().hex}, {}

    def _GetStack(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        stack = self._stack(query)
        if stack is not None:
            self._advance(stack)
        if stack is None or stack["Status"] == "DELETE_COMPLETE":
            return self._error(404, "StackNotFound", "The Stack (%s) could not be found" % query.get("StackId"))
        return 200, dict(self._public(stack), Parameters=self._listed_parameters(stack), RequestId=uuid.uuid4().hex), {}

    def _paging(self, query: Dict[str, str]) -> Tuple[int, int, Optional[Answer]]:
        """A list call's page (ListStacks and ListChangeSets page alike): ``PageSize`` 1..50 (10 unless given)
        and ``PageNumber`` from 1 (1 unless given), or the 400 either answers when one is out of range or not
        a number."""
        try:
            size, number = int(query.get("PageSize", "10")), int(query.get("PageNumber", "1"))
        except ValueError:
            return 0, 0, self._error(400, "InvalidParameter", "PageSize and PageNumber must be numbers")
        if not 1 <= size <= 50 or number < 1:
            return 0, 0, self._error(400, "InvalidParameter", "PageSize must be 1..50")
        return size, number, None

    def _ListStacks(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        names = [v for k, v in sorted(query.items()) if k.startswith("StackName.")]
        size, number, refused = self._paging(query)
        if refused is not None:
            return refused
        live = [s for s in self.stacks.values() if s["Status"] != "DELETE_COMPLETE"
                and (not names or s["StackName"] in names)]
        page = live[(number - 1) * size: number * size]
        return 200, {"RequestId": uuid.uuid4().hex, "TotalCount": len(live), "PageNumber": number,
                     "PageSize": size, "Stacks": [
                         {k: s[k] for k in ("StackId", "StackName", "Status", "RegionId")} for s in page]}, {}

    def _ListStackResources(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        stack = self._stack(query)
        if stack is None:
            return self._error(404, "StackNotFound", "The Stack (%s) could not be found" % query.get("StackId"))
        try:
            resources = (ros_template.parse(stack["_template"]) or {}).get("Resources") or {}
        except yaml.YAMLError:
            resources = {}
        status = stack["Status"]  # every resource follows its stack here
        return 200, {"RequestId": uuid.uuid4().hex, "Resources": [
            {"LogicalResourceId": name, "ResourceType": (spec or {}).get("Type"), "Status": status,
             "PhysicalResourceId": uuid.uuid4().hex[:12], "StatusReason": ""}
            for name, spec in sorted(resources.items())]}, {}

    def _ListStackEvents(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        stack = self.stacks.get(query.get("StackId", ""))
        if stack is None:
            return self._error(404, "StackNotFound", "The Stack (%s) could not be found" % query.get("StackId"))
        events = list(reversed(stack["_events"]))  # newest first, as the API lists them
        return 200, {"RequestId": uuid.uuid4().hex, "TotalCount": len(events), "Events": events[:50]}, {}


    # ---- plans: PreviewStack and change sets ----

    def _listed_parameters(self, stack: Dict[str, Any], given: Optional[List[Dict[str, str]]] = None,
                           template: Optional[str] = None) -> List[Dict[str, str]]:
        """Every parameter as GetStack lists it: declared ones with defaults, pseudo ones, NoEcho as ****."""
        try:
            doc = ros_template.load(template if template is not None else stack["_template"])
        except (ValueError, yaml.YAMLError):
            return list(given if given is not None else stack["Parameters"])
        declared = doc.get("Parameters") or {}
        values = ros_template.values(doc, {p["ParameterKey"]: p.get("ParameterValue", "")
                                           for p in (given if given is not None else stack["Parameters"])})
        listed = [{"ParameterKey": k, "ParameterValue": "****" if (declared.get(k) or {}).get("NoEcho") else v}
                  for k, v in sorted(values.items())]
        return listed + [{"ParameterKey": k, "ParameterValue": v} for k, v in sorted(self._pseudo(stack).items())]

    def _changes(self, stack: Dict[str, Any], template: str, params: List[Dict[str, str]]) -> List[Dict[str, Any]]:
        old, old_values, old_ctx = self._resources_of(stack)
        new, new_values, new_ctx = self._resources_of(stack, template, params)
        return ros_template.changes(old, new, old_values, new_values,
                                    (old_ctx.conditions if old_ctx else {}, new_ctx.conditions if new_ctx else {}),
                                    {}, stack.get("_physical", {}))

    def _PreviewStack(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        name = query.get("StackName", "")
        if not name or query.get("StackId"):  # "You must and can specify only one of StackName and StackId"
            return self._error(400, "InvalidParameter", "give StackName (and not StackId) to preview a new stack")
        params = _flat_list(query, "Parameters")
        template = form.get("TemplateBody", "")
        refused = self._check_parameters(template, params)
        if refused:
            return refused
        shell = {"StackName": name, "StackId": "", "RegionId": query.get("RegionId", ""), "Parameters": params,
                 "_template": template}
        resources, _values, _ctx = self._resources_of(shell)
        return 200, {"RequestId": uuid.uuid4().hex, "Stack": {
            "StackName": name, "RegionId": query.get("RegionId", ""), "DisableRollback": False,
            "TimeoutInMinutes": int(query.get("TimeoutInMinutes", "60")),
            "Parameters": self._listed_parameters(shell),
            "Resources": [{"LogicalResourceId": k, "ResourceType": v["Type"], "Action": "Add",
                           "Properties": v["Properties"], "Description": v["Description"], "RequiredBy": []}
                          for k, v in sorted(resources.items())]}}, {}

    def _CreateChangeSet(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        if query.get("ChangeSetType", "UPDATE") != "UPDATE":
            return self._error(400, "EmulatorNotModelled", "only ChangeSetType UPDATE is modelled")
        name = query.get("ChangeSetName", "")
        if not CHANGE_SET_NAME.fullmatch(name):
            return self._error(400, "InvalidParameter", "ChangeSetName %r is not 1..255 letters, digits, - or _, "
                               "starting with a letter or digit" % name[:80])
        stack = self._stack(query)
        if stack is None:
            return self._error(404, "StackNotFound", "The Stack (%s) could not be found" % query.get("StackId"))
        if stack["Status"].endswith("_IN_PROGRESS"):
            return self._error(409, "StackOperationConflict", "stack is %s" % stack["Status"])
        if stack["Status"] not in UPDATABLE:
            return self._error(400, "StackValidationFailed", "a change set cannot be created for a stack in %s"
                               % stack["Status"])
        mine = [c for c in self.change_sets.values() if c["StackId"] == stack["StackId"]]
        if any(c["ChangeSetName"] == name for c in mine):
            return self._error(409, "ChangeSetExists", "The change set (%s) already exists" % name)
        if len(mine) >= MAX_CHANGE_SETS:
            return self._error(400, "LimitExceeded", "a stack can contain up to %d change sets" % MAX_CHANGE_SETS)
        params = _flat_list(query, "Parameters")
        template = form.get("TemplateBody", "") or stack["_template"]
        params = self._with_previous(query, params, template, stack)  # as UpdateStack
        refused = self._check_parameters(template, params)
        if refused:
            return refused
        change_set_id = str(uuid.uuid4())
        self.change_sets[change_set_id] = {
            "ChangeSetId": change_set_id, "ChangeSetName": name, "ChangeSetType": "UPDATE",
            "StackId": stack["StackId"], "StackName": stack["StackName"], "RegionId": query.get("RegionId", ""),
            "Status": "CREATE_IN_PROGRESS", "ExecutionStatus": "UNAVAILABLE", "DisableRollback": False,
            "TimeoutInMinutes": int(query.get("TimeoutInMinutes", "60")), "CreateTime": "2026-01-01T00:00:00",
            "Parameters": self._listed_parameters(stack, params, template),
            "Changes": self._changes(stack, template, params), "_polls": 0}
        return 200, {"RequestId": uuid.uuid4().hex, "ChangeSetId": change_set_id, "StackId": stack["StackId"]}, {}

    def _GetChangeSet(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        found = self.change_sets.get(query.get("ChangeSetId", ""))
        if found is None:
            return self._error(404, "ChangeSetNotFound", "The ChangeSet (%s) could not be found"
                               % query.get("ChangeSetId"))
        if found["Status"] == "CREATE_IN_PROGRESS":
            found["_polls"] += 1
            if found["_polls"] >= self.steps:
                found["Status"], found["ExecutionStatus"] = "CREATE_COMPLETE", "AVAILABLE"
        answer = self._public(found)
        if found["Status"] != "CREATE_COMPLETE":
            answer.pop("Changes")  # computed once the change set is
        return 200, dict(answer, RequestId=uuid.uuid4().hex), {}

    def _ListChangeSets(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        stack = self._stack(query)
        if stack is None:
            return self._error(404, "StackNotFound", "The Stack (%s) could not be found" % query.get("StackId"))
        size, number, refused = self._paging(query)
        if refused is not None:
            return refused
        names = [v for k, v in sorted(query.items()) if k.startswith("ChangeSetName.")]
        patterns = [re.compile(".*".join(re.escape(part) for part in n.split("*"))) for n in names]
        mine = [c for c in self.change_sets.values() if c["StackId"] == stack["StackId"]
                and (not patterns or any(p.fullmatch(c["ChangeSetName"]) for p in patterns))]
        fields = ("ChangeSetId", "ChangeSetName", "ChangeSetType", "CreateTime", "ExecutionStatus", "RegionId",
                  "StackId", "StackName", "Status")
        page = mine[(number - 1) * size: number * size]
        return 200, {"RequestId": uuid.uuid4().hex, "TotalCount": len(mine), "PageNumber": number, "PageSize": size,
                     "ChangeSets": [{k: c[k] for k in fields} for c in page]}, {}

    def _DeleteChangeSet(self, query: Dict[str, str], form: Dict[str, str]) -> Answer:
        found = self.change_sets.get(query.get("ChangeSetId", ""))
        if found is None:
            return self._error(404, "ChangeSetNotFound", "The ChangeSet (%s) could not be found"
                               % query.get("ChangeSetId"))
        if found["Status"] in ("CREATE_PENDING", "CREATE_IN_PROGRESS"):
            return self._error(409, "ChangeSetOperationConflict", "the change set is %s" % found["Status"])
        del self.change_sets[found["ChangeSetId"]]
        return 200, {"RequestId": uuid.uuid4().hex}, {}


def dump(stack: Dict[str, Any]) -> str:
    return json.dumps(RosEmulator._public(stack), sort_keys=True)
