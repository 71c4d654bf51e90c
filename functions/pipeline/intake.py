"""Event intake: raw FC event bytes -> envelope -> typed source model -> one normalized ``Request``.

Stage 1 (``functions.pipeline.envelope``, standard library only) recognises the envelope: an EventBridge
CloudEvent (a list of one is unwrapped), the ESS lifecycle hook notification in its MNS form, an FC timer
event, or the manual payload, and skips what is clearly not ours. Stage 2, here, validates the source's
own payload (pydantic) and normalizes it. Anything irrelevant raises ``SkipEvent`` with the
reason; anything malformed raises ``BadEvent`` naming the field. Nothing else escapes.

What public documentation confirms and what it does not (README.md, "Triggers and their events", has the detail): the CloudEvents
envelope and the event type names are documented; the field names inside ESS ``data`` are not, so every
ESS field is accepted in camelCase (ESS's notifications), PascalCase and snake_case, at the top of
``data`` or inside a ``content`` object (the MNS/CloudMonitor layout), and instance ids may be a list, a
comma-separated string or a JSON string. When no instance ids come, the pool's nodes are used.
"""

import re
from typing import Annotated, Any, Dict, List, Mapping, Optional

from pydantic import (AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError,
                      field_validator, model_validator)

from functions.pipeline.envelope import (ACTIONTRAIL_TYPES, CONTROL, ECS_STATE_CHANGE, FAILED_SCHEDULING,
                       HANDLED_TYPES, KIND_CLOUDEVENT, KIND_MNS, KIND_TIMER, LIFECYCLE_SCALE_OUT, LIFECYCLE_TEST,
                       MANUAL_FIELDS, MAX_INSTANCE_IDS, MAX_TEXT, POD_EVENT, SCALE_OUT_TYPES, Envelope,
                       read_envelope, shown as _shown)
from functions.base.errors import BadEvent, SkipEvent
from functions.base.model import InvalidTarget, LifecycleHook, PodRef, Request, Trigger
from node_bootstrap.outside import OutsideDataError, json_type, loads

__all__ = ["HANDLED_TYPES", "LIFECYCLE_TEST", "NODEPOOL_OPERATIONS", "parse_envelope", "parse_event"]

# ACK operations (ActionTrail eventName) after which a pool may hold new nodes or a new label.
NODEPOOL_OPERATIONS = (
    "CreateClusterNodePool",
    "ScaleClusterNodePool",
    "ModifyClusterNodePool",
    "AttachInstancesToNodePool",
    "AttachInstances",
)

_INSTANCE_ID = re.compile(r"^i-[A-Za-z0-9]{1,62}\Z")
_RESOURCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")


def _aliases(*names: str) -> AliasChoices:
    return AliasChoices(*names)




def _text_problem(value: str) -> Optional[str]:
    """Why a string field's value is refused, or None. Longer than MAX_TEXT: event ids, types and trigger names
    are copied into every log line and the result, so one huge field would cost its size many times over. A
    control character: a line break or a terminal escape would go into those lines and the run record as is."""
    if len(value) > MAX_TEXT:
        return "text of %d characters; event fields are at most %d" % (len(value), MAX_TEXT)
    control = CONTROL.search(value)
    if control:
        return ("text holding a control character (U+%04X); event fields are printable text"
                % ord(control.group()))
    return None


def _bounded(value: Any) -> Any:
    """A string field's value, refused (ValueError) for what ``_text_problem`` says."""
    problem = _text_problem(value) if isinstance(value, str) else None
    if problem:
        raise ValueError(problem)
    return value


# A string field of an event, at most MAX_TEXT characters (longer: BadEvent naming the field).
Text = Annotated[str, BeforeValidator(_bounded)]


def _check_id(value: Any, what: str, example: str) -> Optional[str]:
    if value is None or value == "":
        return None
    if not isinstance(value, str):  # named, not quoted: '12345' would read as the letters and digits it asks for
        raise ValueError("%s: expected text, got %s; an id is letters, digits, '-', '_' or '.', e.g. %s"
                         % (what, json_type(value), example))
    if not _RESOURCE_ID.match(value):
        raise ValueError("%s %s is not an id; expected letters, digits, '-', '_' or '.', e.g. %s"
                         % (what, _shown(value), example))
    return value


def _instance_ids(value: Any) -> List[str]:
    """A list, a comma-separated string or a JSON list string of ECS instance ids (i-...). An item that is
    not an id is kept as it is shown in messages (quoted, cut short; never an id): ``_split_ids`` makes it
    a target of its own that fails alone, so one bad item does not cost the others."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = loads(text, "instance ids", max_depth=1)
            except OutsideDataError as exc:
                if exc.syntax:
                    raise ValueError("instance ids %s are not a JSON list" % _shown(text)) from None
                raise ValueError("%s; expected a flat list of i-... ids" % exc) from None
        else:
            value = [v.strip() for v in text.split(",") if v.strip()]
    if not isinstance(value, list):
        raise ValueError("instance ids: expected a list of i-... ids, got %s" % json_type(value))
    if len(value) > MAX_INSTANCE_IDS:
        raise ValueError("%d instance ids; an event names at most %d (the most instances Auto Scaling adds in "
                         "one scaling activity): send them in several events" % (len(value), MAX_INSTANCE_IDS))
    out: Dict[str, None] = {}  # insertion-ordered: de-duplication in one pass, first occurrence kept
    for item in value:
        text = item.strip() if isinstance(item, str) and _INSTANCE_ID.match(item.strip()) else _shown(item)
        out.setdefault(text, None)
    return list(out)


def _split_ids(ids: List[str]) -> Dict[str, Any]:
    """Request fields: the valid ids, and each invalid one as an InvalidTarget with the accepted form."""
    return {"instance_ids": [i for i in ids if _INSTANCE_ID.match(i)],
            "invalid_targets": [InvalidTarget(target=i, reason="%s is not an ECS instance id; expected i- followed "
                                              "by letters and digits" % i) for i in ids if not _INSTANCE_ID.match(i)]}


# ---- stage 1 models: the envelopes functions.pipeline.envelope recognised ----


class CloudEvent(BaseModel):
    """EventBridge's CloudEvents 1.0 envelope with Alibaba Cloud's extension attributes."""

    model_config = ConfigDict(extra="allow")
    id: Text
    source: Text
    type: Text
    specversion: Text
    subject: Optional[Text] = None
    time: Optional[Text] = None
    aliyunregionid: Optional[Text] = None
    aliyunaccountid: Optional[Text] = None
    data: Any = None


class TimerEvent(BaseModel):
    """FC time trigger: the trigger message is passed as ``payload`` (a string). FC documents ``payload``;
    ``triggerTime``/``triggerName`` are the names FC's runtime is known to send, not confirmed here, so
    either one is enough to recognise the event."""

    model_config = ConfigDict(extra="allow")
    triggerTime: Optional[Text] = None
    triggerName: Text = "timer"
    payload: Optional[str] = None  # the manual payload as text: its own fields are checked (bounded) in turn


class ManualPayload(BaseModel):
    """What a person sends: every field optional, nothing else accepted (a typo is an error, not ignored)."""

    model_config = ConfigDict(extra="forbid")
    cluster_id: Optional[str] = None
    nodepool_id: Optional[str] = None
    instance_ids: List[str] = Field(default_factory=list)
    dry_run: bool = False
    auto_pools: bool = False  # the auto pool timer: re-plan the auto pools only (functions/pipeline/auto_pool.py)

    _ids = field_validator("instance_ids", mode="before")(lambda cls, v: _instance_ids(v))

    @field_validator("cluster_id", "nodepool_id", mode="before")
    @classmethod
    def _resource(cls, v: Any, info: Any) -> Optional[str]:
        return _check_id(v, info.field_name, "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b / np1f6779297c4444a3a1cdd29be8e5a0b5")

    @field_validator("dry_run", "auto_pools", mode="before")
    @classmethod
    def _strict_bool(cls, v: Any, info: Any) -> Any:
        if not isinstance(v, bool):
            raise ValueError("%s: expected true or false, got %s" % (info.field_name, "text %s" % _shown(v)
                                                                       if isinstance(v, str) else json_type(v)))
        return v


assert MANUAL_FIELDS == tuple(ManualPayload.model_fields), "envelope.MANUAL_FIELDS must name the same fields"

# ---- stage 2: source payloads ----


class EssPayload(BaseModel):
    """ESS fields under any of the names ESS might use (camelCase, PascalCase, snake_case)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    scaling_group_id: Optional[str] = Field(None, validation_alias=_aliases(
        "scalingGroupId", "ScalingGroupId", "scaling_group_id"))
    scaling_activity_id: Optional[str] = Field(None, validation_alias=_aliases(
        "scalingActivityId", "ScalingActivityId", "scaling_activity_id"))
    instance_ids: List[str] = Field(default_factory=list, validation_alias=_aliases(
        "instanceIds", "InstanceIds", "instance_ids", "instanceIdList", "InstanceIdList"))
    lifecycle_hook_id: Optional[str] = Field(None, validation_alias=_aliases(
        "lifecycleHookId", "LifecycleHookId", "lifecycle_hook_id"))
    lifecycle_action_token: Optional[str] = Field(None, validation_alias=_aliases(
        "lifecycleActionToken", "LifecycleActionToken", "lifecycle_action_token"))
    lifecycle_transition: Optional[str] = Field(None, validation_alias=_aliases(
        "lifecycleTransition", "LifecycleTransition", "lifecycle_transition"))
    default_result: Optional[str] = Field(None, validation_alias=_aliases(
        "defaultResult", "DefaultResult", "default_result"))
    resource_arn: Optional[str] = Field(None, validation_alias=_aliases(
        "resourceArn", "ResourceArn", "resourceId", "ResourceId"))

    _ids = field_validator("instance_ids", mode="before")(lambda cls, v: _instance_ids(v))
    _group: Optional[str] = PrivateAttr(default=None)

    @field_validator("scaling_group_id", "scaling_activity_id", "lifecycle_hook_id", mode="before")
    @classmethod
    def _resource(cls, v: Any, info: Any) -> Optional[str]:
        return _check_id(v, info.field_name, "asg-...")

    @field_validator("lifecycle_action_token", "lifecycle_transition", "default_result", "resource_arn",
                     mode="before")
    @classmethod
    def _text(cls, v: Any, info: Any) -> Optional[str]:
        if v is None:
            return None
        if not isinstance(v, str):
            raise ValueError("%s must be text of at most %d characters" % (info.field_name, MAX_TEXT))
        return _bounded(v)

    @model_validator(mode="after")
    def _arn_group(self) -> "EssPayload":
        # Checked here, in validation, so a bad one is a BadEvent naming it (raised from group(), after it, a
        # ValueError left parse_event and the event ended as an internal error of the function).
        self._group = self.scaling_group_id or None
        if not self._group and self.resource_arn and "scalinggroup/" in self.resource_arn:
            self._group = _check_id(self.resource_arn.rsplit("/", 1)[1], "scaling group in resourceArn", "asg-...")
        return self

    def group(self) -> Optional[str]:
        """The scaling group id, or the one an ARN (acs:ess:...:scalinggroup/asg-...) names."""
        return self._group


class ActionTrailPayload(BaseModel):
    """An ActionTrail record of an ACK API call or console operation."""

    model_config = ConfigDict(extra="ignore")
    eventName: Text
    eventType: Optional[Text] = None
    serviceName: Optional[Text] = None
    acsRegion: Optional[Text] = None
    errorCode: Optional[Text] = None
    requestParameters: Dict[str, Any] = Field(default_factory=dict)
    responseElements: Any = None

    @field_validator("requestParameters", mode="before")
    @classmethod
    def _params(cls, v: Any) -> Any:
        return {} if v is None else _maybe_json(v)


class EcsStatePayload(BaseModel):
    model_config = ConfigDict(extra="ignore")
    resourceId: Text
    state: Text
    resourceType: Optional[Text] = None

    @field_validator("resourceId")
    @classmethod
    def _instance(cls, v: str) -> str:
        return _instance_ids([v])[0]


# Kubernetes object names (apimachinery validation): a namespace is a DNS label, a pod name a DNS subdomain.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
_UID = re.compile(r"^[A-Za-z0-9-]{1,64}\Z")
# kube-eventer's subject: acs:cs:<region>:<account>:<cluster id>/apis/<version>/namespaces/<ns>/<resource>/<name>
_SUBJECT_CLUSTER = re.compile(r"^acs:cs:[^:/]*:[^:/]*:([A-Za-z0-9][A-Za-z0-9_.\-]{0,127})/apis/")
# An ACK resource's ARN as a CloudEvent subject names it: acs:cs:<region>:<account>:cluster/<cluster id>[/...]
# (the form of the ActionTrail samples here; not confirmed by a public capture, so it is only read when the
# record itself names no cluster, never needed).
_SUBJECT_ARN_CLUSTER = re.compile(r"^acs:cs:[^:/]*:[^:/]*:cluster/([A-Za-z0-9][A-Za-z0-9_.\-]{0,127})(/|\Z)")


class InvolvedObject(BaseModel):
    model_config = ConfigDict(extra="ignore")
    kind: Text
    namespace: Text
    name: Text
    uid: Optional[Text] = None


class PodEventPayload(BaseModel):
    """The Kubernetes v1 Event (core/v1, camelCase JSON) kube-eventer puts in ``data``: only what names the pod
    and why is read; its times and message are the scheduler's and are not needed (the pod is read again)."""

    model_config = ConfigDict(extra="ignore")
    involvedObject: InvolvedObject
    reason: Text


# ---- helpers ----


def _maybe_json(value: Any, where: str = "") -> Any:
    """A JSON object or list sent as text, decoded; any other text as it is. Text nested deeper than the
    decoder can follow is bad input (BadEvent naming ``where``; a ValueError inside a model validator)."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return loads(value, "JSON text", unique_keys=True)
        except OutsideDataError as exc:
            if exc.syntax:
                return value
            message = "%s; send it flat, with finite numbers, each field once" % exc
            if where:
                raise BadEvent("event field %s: %s" % (where, message)) from None
            raise ValueError(message) from None
    return value


def _flatten_content(data: Any, where: str = "data") -> Dict[str, Any]:
    """``data`` with a nested ``content`` object (MNS and CloudMonitor layout) merged over it. Absent (null) is
    empty; any other value that is no object (a number, a list, JSON encoded twice) is a BadEvent naming it: read
    as empty, it was blamed on a field it never lacked. The same holds for the MNS form's ``content`` (the ESS
    notification itself); a ``content`` inside ``data`` that is no object is left out, as before (CloudMonitor's
    layout is not confirmed, and ``data`` may name the group without it)."""
    data = _maybe_json(data, where)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadEvent("event field %s: expected an object, got %s" % (where, json_type(data)))
    merged = dict(data)
    inner = where + ".content" if where != "content" else "content"
    content = _maybe_json(data.get("content"), inner)
    if isinstance(content, dict):
        merged.update(content)
    elif content is not None and where == "content":  # the MNS form: content is the notification itself
        raise BadEvent("event field %s: expected an object, got %s" % (inner, json_type(content)))
    return merged


# pydantic's error types of a value of the wrong type (pydantic_core's ErrorType), by the type expected.
_TYPE_WORDS = {"string_type": "text", "dict_type": "an object", "model_type": "an object", "model_attributes_type":
               "an object", "list_type": "a list", "bool_type": "true/false", "int_type": "a number",
               "float_type": "a number"}


def _field_error(exc: ValidationError, where: str, hint: str = "") -> BadEvent:
    err = exc.errors()[0]
    # a location is the sender's field names: each shown bounded and quoted when it is not a plain name
    loc = ".".join(str(p) if re.match(r"^[A-Za-z0-9_]{1,64}\Z", str(p)) else _shown(p)
                   for p in err.get("loc", ()) if p != "__root__")
    field = "%s.%s" % (where, loc) if loc else where
    msg = str(err.get("msg", "invalid")).replace("Value error, ", "")
    if err.get("type") in _TYPE_WORDS:  # pydantic's words name Python's types and our classes: json_type's instead
        msg = "expected %s, got %s" % (_TYPE_WORDS[err["type"]], json_type(err.get("input")))
    if err.get("type") == "extra_forbidden" and loc:
        # A typo in a hand-written payload: name the field as the user wrote it, and the nearest accepted one.
        import difflib

        written = str(err["loc"][-1])[:64]
        close = difflib.get_close_matches(written, re.findall(r"[a-z_]+", hint), n=1)
        msg = "unknown field%s" % (" (did you mean %r?)" % close[0] if close else "")
    return BadEvent("event field %s: %s%s" % (field, msg, ("; " + hint) if hint else ""))


def _validate(model: Any, data: Any, where: str, hint: str = "") -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _field_error(exc, where, hint) from None


def _pick(mapping: Mapping[str, Any], *names: str, where: str = "") -> Optional[str]:
    """The first of ``names`` that holds text; text longer than MAX_TEXT is a BadEvent naming ``where``."""
    for name in names:
        value = mapping.get(name)
        if isinstance(value, str) and value:
            problem = _text_problem(value)
            if problem:
                raise BadEvent("event field %s%s: %s" % (where + "." if where else "", name, problem))
            return value
    return None


# ---- the entry point ----


def parse_event(raw: Any) -> Request:
    """Raw event (bytes, str or an already-decoded object) -> one normalized Request, or SkipEvent /
    BadEvent. Cluster and region left None here are filled from configuration by the pipeline."""
    return parse_envelope(read_envelope(raw))


def parse_envelope(envelope: Envelope) -> Request:
    """Stage 2: validate the source's payload of an envelope stage 1 let through."""
    body = envelope.body
    if envelope.kind == KIND_CLOUDEVENT:
        return _from_cloudevent(_validate(CloudEvent, body, "envelope", "a CloudEvent needs id, source, type "
                                                                        "and specversion"))
    if envelope.kind == KIND_MNS:
        return _from_mns(body)
    if envelope.kind == KIND_TIMER:
        return _from_timer(_validate(TimerEvent, body, "timer"))
    return _from_manual(body, Trigger.MANUAL, "manual")


def _from_manual(raw: Mapping[str, Any], trigger: Trigger, event_type: str, event_id: Optional[str] = None
                 ) -> Request:
    payload = _validate(ManualPayload, raw, "payload", "accepted: {%s}" % ", ".join(MANUAL_FIELDS))
    return Request(trigger=trigger, event_type=event_type, event_id=event_id, cluster_id=payload.cluster_id,
                   nodepool_id=payload.nodepool_id, dry_run=payload.dry_run, auto_pools=payload.auto_pools,
                   **_split_ids(payload.instance_ids))


def _from_timer(timer: TimerEvent) -> Request:
    # The trigger message may carry the manual payload (cluster, pool, dry run); empty means every
    # labelled pool of the configured cluster.
    payload: Any = {}
    if timer.payload and timer.payload.strip():
        payload = _maybe_json(timer.payload, "timer.payload")
        if not isinstance(payload, dict):
            raise BadEvent("event field timer.payload: the trigger message must be empty or a JSON object "
                           "{%s}" % ", ".join(MANUAL_FIELDS))
    return _from_manual(payload, Trigger.TIMER, "timer:" + timer.triggerName)


def _lifecycle(ess: EssPayload, event_type: str, where: str) -> LifecycleHook:
    if not ess.lifecycle_hook_id or not ess.lifecycle_action_token:
        missing = "lifecycleHookId" if not ess.lifecycle_hook_id else "lifecycleActionToken"
        raise BadEvent("event field %s.%s: missing; %s needs lifecycleHookId and lifecycleActionToken"
                       % (where, missing, event_type))
    return LifecycleHook(lifecycle_hook_id=ess.lifecycle_hook_id,
                         lifecycle_action_token=ess.lifecycle_action_token, scaling_group_id=ess.group(),
                         lifecycle_transition=ess.lifecycle_transition, default_result=ess.default_result)


def _scale_out_only(ess: "EssPayload", event_type: str) -> None:
    """A lifecycle hook's transition, when the message names one, must be a scale-out: the MNS form and the
    CloudEvent form alike (the CloudEvent's type says ScaleOut, but its data is what ESS sent). Case is folded in
    ASCII only: str.upper() maps U+017F (long s) to "S", so "\u017fCALE_OUT" would pass as a scale-out."""
    transition = ess.lifecycle_transition or ""
    if transition and not (transition.isascii() and transition.upper() == "SCALE_OUT"):
        raise SkipEvent("lifecycle transition %s is not handled; only SCALE_OUT" % _shown(transition),
                        Trigger.LIFECYCLE_HOOK.value, event_type)


def _from_mns(raw: Mapping[str, Any]) -> Request:
    ess = _validate(EssPayload, _flatten_content(raw, "content"), "content")
    event_type = "ess:LifecycleHook:MNS"
    _scale_out_only(ess, event_type)
    hook = _lifecycle(ess, event_type, "content")
    return Request(trigger=Trigger.LIFECYCLE_HOOK, event_type=event_type,
                   event_id=_pick(raw.get("content") if isinstance(raw.get("content"), dict) else {},
                                  "requestId", where="content"),
                   region=_pick(raw, "regionId"), scaling_group_id=ess.group(), lifecycle=hook,
                   **_split_ids(ess.instance_ids))


def _from_cloudevent(event: CloudEvent) -> Request:
    etype = event.type
    common = dict(event_type=etype, event_id=event.id, region=event.aliyunregionid)
    if etype in SCALE_OUT_TYPES or etype == LIFECYCLE_SCALE_OUT:
        ess = _validate(EssPayload, _flatten_content(event.data), "data")
        if etype == LIFECYCLE_SCALE_OUT:
            _scale_out_only(ess, etype)
            return Request(trigger=Trigger.LIFECYCLE_HOOK, scaling_group_id=ess.group(),
                           lifecycle=_lifecycle(ess, etype, "data"), **_split_ids(ess.instance_ids), **common)
        if not ess.group() and not ess.instance_ids:
            raise BadEvent("event field data.scalingGroupId: missing, and no instanceIds either; %s needs "
                           "one of them" % etype)
        return Request(trigger=Trigger.SCALE_OUT, scaling_group_id=ess.group(), **_split_ids(ess.instance_ids),
                       **common)
    if etype in ACTIONTRAIL_TYPES:
        return _from_actiontrail(event, common)
    if etype == POD_EVENT:
        return _from_pod_event(event, common)
    if etype == ECS_STATE_CHANGE:
        state = _validate(EcsStatePayload, _flatten_content(event.data), "data")
        if state.state.lower() != "running":
            raise SkipEvent("instance %s changed to %s; only Running matters" % (_shown(state.resourceId),
                                                                                  _shown(state.state)),
                            Trigger.INSTANCE_RUNNING.value, etype)
        return Request(trigger=Trigger.INSTANCE_RUNNING, **_split_ids([state.resourceId]), **common)
    # functions.pipeline.envelope lets only HANDLED_TYPES through (the test notification ends there): unreachable
    # unless the two lists drift apart, and then a skip is the safe end.
    raise SkipEvent("event type %s is not handled; handled: %s" % (_shown(etype), ", ".join(HANDLED_TYPES)),
                    Trigger.UNKNOWN.value, etype)


def _from_actiontrail(event: CloudEvent, common: Dict[str, Any]) -> Request:
    trail = _validate(ActionTrailPayload, _maybe_json(event.data, "data"), "data")
    etype = event.type
    if trail.eventName not in NODEPOOL_OPERATIONS:
        raise SkipEvent("ACK operation %s does not add nodes or change a pool; handled: %s"
                        % (_shown(trail.eventName), ", ".join(NODEPOOL_OPERATIONS)),
                        Trigger.NODEPOOL_OPERATION.value, etype)
    if trail.errorCode:
        raise SkipEvent("ACK operation %s failed (%s); nothing changed" % (trail.eventName, _shown(trail.errorCode)),
                        Trigger.NODEPOOL_OPERATION.value, etype)
    params = trail.requestParameters
    response = _maybe_json(trail.responseElements, "data.responseElements")
    response = response if isinstance(response, dict) else {}
    # ROA path parameters and body fields are recorded under several spellings; none is documented.
    req, resp = "data.requestParameters", "data.responseElements"
    cluster = (_pick(params, "ClusterId", "clusterId", "cluster_id", where=req)
               or _pick(response, "cluster_id", "ClusterId", where=resp))
    pool = (_pick(params, "NodepoolId", "nodepoolId", "nodepool_id", "NodePoolId", where=req)
            or _pick(response, "nodepool_id", "NodepoolId", "nodepoolId", where=resp))
    try:
        cluster = _check_id(cluster, "cluster id", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b")
        pool = _check_id(pool, "node pool id", "np1f6779297c4444a3a1cdd29be8e5a0b5")
    except ValueError as exc:
        raise BadEvent("event field data.requestParameters: %s" % exc) from None
    # A record that names no cluster is about the subject's, when the subject names one (the record's own
    # word wins: the subject's form is not confirmed); then one of another cluster is skipped as such.
    named = _SUBJECT_ARN_CLUSTER.match(event.subject or "")
    cluster = cluster or (named.group(1) if named else None)
    return Request(trigger=Trigger.NODEPOOL_OPERATION, cluster_id=cluster, nodepool_id=pool,
                   **dict(common, region=common["region"] or trail.acsRegion))


def _from_pod_event(event: CloudEvent, common: Dict[str, Any]) -> Request:
    """A pod the scheduler found no room for. The subject names the cluster (kube-eventer writes
    ``acs:cs:<region>:<account>:<cluster id>/apis/v1/namespaces/<ns>/pods/<name>``); the pod is only named
    here, never trusted: the auto pool step reads it from the API server."""
    payload = _validate(PodEventPayload, _maybe_json(event.data, "data"), "data")
    etype, trigger = event.type, Trigger.POD_UNSCHEDULABLE.value
    if payload.reason != FAILED_SCHEDULING:
        raise SkipEvent("pod event %s is not handled; only %s" % (_shown(payload.reason), FAILED_SCHEDULING),
                        trigger, etype)
    obj = payload.involvedObject
    if obj.kind != "Pod":
        raise SkipEvent("event about a %s, not a Pod" % _shown(obj.kind), trigger, etype)
    if not _DNS_LABEL.match(obj.namespace):
        raise BadEvent("event field data.involvedObject.namespace: %s is not a namespace name; expected a DNS "
                       "label (a-z, 0-9, '-', at most 63 characters)" % _shown(obj.namespace))
    if not _DNS_SUBDOMAIN.match(obj.name):
        raise BadEvent("event field data.involvedObject.name: %s is not a pod name; expected a DNS subdomain "
                       "(a-z, 0-9, '-', '.', at most 253 characters)" % _shown(obj.name))
    if obj.uid and not _UID.match(obj.uid):
        raise BadEvent("event field data.involvedObject.uid: %s is not a uid; expected letters, digits and '-'"
                       % _shown(obj.uid))
    found = _SUBJECT_CLUSTER.match(event.subject or "")
    return Request(trigger=Trigger.POD_UNSCHEDULABLE, cluster_id=found.group(1) if found else None,
                   pod=PodRef(namespace=obj.namespace, name=obj.name, uid=obj.uid or None), **common)
