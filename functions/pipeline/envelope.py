"""Stage 1 of event intake: raw FC event -> ``Envelope``, with the standard library alone.

It decodes the bytes, unwraps a list of one, recognises which envelope the event came in (an EventBridge
CloudEvent, the ESS lifecycle hook notification in its MNS form, an FC timer event, or the manual
payload; an MNS message may come Base64-encoded and inside the FC MNS trigger's JSON wrapper) and ends what
is clearly not ours as a ``SkipEvent`` right here: an ESS lifecycle *test*
notification, a CloudEvent type we do not handle, an unrecognised shape. Only events that may mean work go
on to stage 2 (``functions.pipeline.intake``: pydantic models of each source's payload), so an irrelevant event
never loads pydantic, the cloud SDKs or paramiko: an FC cold start on it costs a bare interpreter.
"""

import json
import re
from typing import Any, Dict, NamedTuple

from functions.base.errors import BadEvent, SkipEvent
from node_bootstrap.outside import OutsideDataError, json_type, loads

# ---- event types, by what they mean for us ----
SCALE_OUT_TYPES = (
    "ess:ScalingActivity:ScaleOutSuccess",
    "ess:ScalingActivity:ScaleOutPartialSuccess",
    "ess:CloudMonitor:AUTOSCALING[SCALEOUTSUCCESS]",
    "ess:CloudMonitor:AUTOSCALING[SCALEOUTWARN]",  # CloudMonitor's name for a partial success
)
LIFECYCLE_SCALE_OUT = "ess:LifecycleHook:ScaleOut"
LIFECYCLE_TEST = "ess:LifecycleHook:Test"
ACTIONTRAIL_TYPES = ("cs:ActionTrail:ApiCall", "cs:ActionTrail:ConsoleOperation")
ECS_STATE_CHANGE = "ecs:Instance:StateChange"
# Kubernetes events of pods, as ACK's kube-eventer (ack-node-problem-detector, EventBridge sink) publishes them:
# type cs:k8s:<involvedObject.kind>RelatedEvent, data the v1 Event (AliyunContainerService/kube-eventer,
# sinks/eventbridge/driver.go). Only FailedScheduling matters (functions/pipeline/pod_event.py).
POD_EVENT = "cs:k8s:PodRelatedEvent"
FAILED_SCHEDULING = "FailedScheduling"
HANDLED_TYPES = (SCALE_OUT_TYPES + (LIFECYCLE_SCALE_OUT, LIFECYCLE_TEST) + ACTIONTRAIL_TYPES + (ECS_STATE_CHANGE,)
                 + (POD_EVENT,))

# The manual payload's fields (functions.pipeline.intake.ManualPayload checks the same names and their types).
MANUAL_FIELDS = ("cluster_id", "nodepool_id", "instance_ids", "dry_run", "auto_pools")

MAX_EVENT_BYTES = 256 * 1024  # FC's async payload limit is 128 KB; anything far beyond is not an event
# Auto Scaling adds or removes at most 1,000 ECS or ECI instances in one scaling activity (Auto Scaling,
# "Limits", quota table: https://www.alibabacloud.com/help/en/auto-scaling/product-overview/limits; the
# zh-tw page of Jun 30, 2024 gives the row's value, 1000). No event of ours is about more instances than
# one activity: functions.pipeline.intake refuses an event naming more, whole, before any API call.
MAX_INSTANCE_IDS = 1000
# Any string field of an event that the function keeps (ids, types, trigger names, tokens, regions) is at
# most this long; functions.pipeline.intake refuses a longer one. These values enter every log line of the event.
MAX_TEXT = 512

KIND_CLOUDEVENT = "cloudevent"
KIND_MNS = "mns"
KIND_TIMER = "timer"
KIND_MANUAL = "manual"

# The control characters CloudEvents 1.0 disallows in a String ("Type System": U+0000-U+001F, U+007F-U+009F);
# functions.pipeline.intake refuses them in every text field it keeps.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

# Trigger values used in skip results decided here (functions.base.model.Trigger holds the same values).
_TRIGGER_TEST = "test"
_TRIGGER_UNKNOWN = "unknown"
_TRIGGER_POD = "pod-unschedulable"


class Envelope(NamedTuple):
    """A decoded event and the envelope it came in; ``body`` is the decoded JSON object."""

    kind: str
    body: Dict[str, Any]


def shown(value: Any) -> str:
    """User text quoted for a one-line message, cut to 40 characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


# The FC MNS topic trigger with notifyContentFormat JSON wraps each message in these fields (the message
# body in "Message"); with STREAM the event is the body itself. Publishers, ESS among them, may send the
# body Base64-encoded (MNS SDKs encode by default), so a body is JSON text or Base64 of JSON text.
MNS_WRAPPER_FIELDS = ("TopicOwner", "TopicName", "SubscriptionName", "MessageId", "MessageMD5", "PublishTime")


def _json_object_or_base64(text: str, what: str) -> Dict[str, Any]:
    """``text`` as a JSON object, or as Base64 of one (one level of encoding, no more)."""
    try:
        value = loads(text, what, MAX_EVENT_BYTES, unique_keys=True)
    except OutsideDataError as exc:
        if not exc.syntax:
            raise BadEvent("%s; send a JSON object" % exc) from None
        import base64
        import binascii

        try:
            decoded = base64.b64decode("".join(text.split()), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise BadEvent("%s is neither JSON nor Base64-encoded JSON; send a JSON object" % what) from None
        try:
            value = loads(decoded, what, MAX_EVENT_BYTES, unique_keys=True)
        except OutsideDataError as again:
            if again.syntax:
                raise BadEvent("%s is neither JSON nor Base64-encoded JSON; send a JSON object" % what) from None
            raise BadEvent("%s; send a JSON object" % again) from None
    if not isinstance(value, dict):
        raise BadEvent("%s is %s; send a JSON object" % (what, json_type(value)))
    return value


def _unwrap_mns(body: Dict[str, Any]) -> Dict[str, Any]:
    """The message inside an FC MNS trigger's JSON wrapper; any other event unchanged."""
    if "Message" not in body or not any(k in body for k in MNS_WRAPPER_FIELDS):
        return body
    message = body["Message"]
    if isinstance(message, dict):
        return message
    if not isinstance(message, str) or not message.strip():
        raise BadEvent("event field Message (MNS trigger) is empty or not text; expected the message body")
    return _json_object_or_base64(message, "event field Message (MNS trigger)")


def _decode(raw: Any) -> Dict[str, Any]:
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_EVENT_BYTES:
            raise BadEvent("event is %d bytes; events are at most %d" % (len(raw), MAX_EVENT_BYTES))
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadEvent("event is not UTF-8 text; send a JSON object") from None
    if isinstance(raw, str):
        if len(raw) > MAX_EVENT_BYTES:  # checked before anything is parsed, as for bytes
            raise BadEvent("event is %d characters; events are at most %d bytes" % (len(raw), MAX_EVENT_BYTES))
        if not raw.strip():
            raise BadEvent("event is empty; send a JSON object, e.g. {\"cluster_id\": \"c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b\"}")
        try:
            raw = loads(raw, "event", MAX_EVENT_BYTES, unique_keys=True)  # the reader rule (outside.py)
        except OutsideDataError as exc:
            stripped = raw.strip()
            if not exc.syntax or stripped[:1] in ("{", "[", '"') or not _looks_base64(stripped):
                raise BadEvent("%s; send a JSON object" % exc) from None
            # An MNS trigger in STREAM format hands over the message body as it was published: Base64.
            raw = _json_object_or_base64(stripped, "event")
    if isinstance(raw, list):
        if len(raw) != 1:
            raise BadEvent("event is a list of %d events; one invocation is one event: run the EventBridge "
                           "trigger with runOptions.mode event-driven, as the template does" % len(raw))
        raw = raw[0]
    if not isinstance(raw, dict):
        raise BadEvent("event is %s; send a JSON object" % json_type(raw))
    return raw


def _looks_base64(text: str) -> bool:
    return len(text) >= 8 and re.fullmatch(r"[A-Za-z0-9+/\s]+={0,2}", text) is not None


def read_envelope(raw: Any) -> Envelope:
    """Raw event (bytes, str or decoded JSON) -> Envelope, or SkipEvent / BadEvent."""
    body = _unwrap_mns(_decode(raw))
    if "specversion" in body or ("type" in body and "source" in body and "data" in body):
        etype = body.get("type")
        if not isinstance(etype, str):
            raise BadEvent("event field envelope.type: %s; a CloudEvent needs id, source, type and specversion"
                           % ("expected text, got %s" % json_type(etype) if "type" in body else "missing"))
        control = CONTROL.search(etype)
        if control:  # read here, before any model: it would be a skip's event_type on every line, as it is
            raise BadEvent("event field envelope.type: text holding a control character (U+%04X); event fields "
                           "are printable text" % ord(control.group()))
        if etype == LIFECYCLE_TEST:
            raise SkipEvent("lifecycle hook test notification acknowledged; nothing to do", _TRIGGER_TEST,
                            etype)
        if etype not in HANDLED_TYPES:
            raise SkipEvent("event type %s is not handled; handled: %s" % (shown(etype), ", ".join(HANDLED_TYPES)),
                            _TRIGGER_UNKNOWN, etype[:200])
        data = body.get("data")
        if etype == POD_EVENT and isinstance(data, dict) and data.get("reason") != FAILED_SCHEDULING:
            # The rule lets only FailedScheduling through; anything else sent by hand ends here, before pydantic.
            raise SkipEvent("pod event %s is not handled; only %s" % (shown(data.get("reason")), FAILED_SCHEDULING),
                            _TRIGGER_POD, etype)
        return Envelope(KIND_CLOUDEVENT, body)
    if "content" in body and ("resourceArn" in body or "userId" in body):
        return Envelope(KIND_MNS, body)
    if "triggerTime" in body or ("triggerName" in body and "payload" in body):
        return Envelope(KIND_TIMER, body)
    if set(body) & set(MANUAL_FIELDS) or not body:
        return Envelope(KIND_MANUAL, body)
    raise SkipEvent("unrecognised event with fields %s: not a CloudEvent, an ESS lifecycle notification, a "
                    "timer event or the manual payload {%s}" % (", ".join(shown(k) for k in sorted(body)[:8]),
                                                               ", ".join(MANUAL_FIELDS)))
