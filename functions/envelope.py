"""Stage 1 of event intake: raw FC event -> ``Envelope``, with the standard library alone.

It decodes the bytes, unwraps a list of one, recognises which envelope the event came in (an EventBridge
CloudEvent, the ESS lifecycle hook notification in its MNS form, an FC timer event, or the manual
payload) and ends what is clearly not ours as a ``SkipEvent`` right here: an ESS lifecycle *test*
notification, a CloudEvent type we do not handle, an unrecognised shape. Only events that may mean work go
on to stage 2 (``functions.intake``: pydantic models of each source's payload), so an irrelevant event
never loads pydantic, the cloud SDKs or paramiko: an FC cold start on it costs a bare interpreter.
"""

import json
from typing import Any, Dict, NamedTuple

from .errors import BadEvent, SkipEvent

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
HANDLED_TYPES = SCALE_OUT_TYPES + (LIFECYCLE_SCALE_OUT, LIFECYCLE_TEST) + ACTIONTRAIL_TYPES + (ECS_STATE_CHANGE,)

# The manual payload's fields (functions.intake.ManualPayload checks the same names and their types).
MANUAL_FIELDS = ("cluster_id", "nodepool_id", "instance_ids", "dry_run")

MAX_EVENT_BYTES = 256 * 1024  # FC's async payload limit is 128 KB; anything far beyond is not an event

KIND_CLOUDEVENT = "cloudevent"
KIND_MNS = "mns"
KIND_TIMER = "timer"
KIND_MANUAL = "manual"

# Trigger values used in skip results decided here (functions.model.Trigger holds the same values).
_TRIGGER_TEST = "test"
_TRIGGER_UNKNOWN = "unknown"


class Envelope(NamedTuple):
    """A decoded event and the envelope it came in; ``body`` is the decoded JSON object."""

    kind: str
    body: Dict[str, Any]


def shown(value: Any) -> str:
    """User text quoted for a one-line message, cut to 40 characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def _decode(raw: Any) -> Dict[str, Any]:
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_EVENT_BYTES:
            raise BadEvent("event is %d bytes; events are at most %d" % (len(raw), MAX_EVENT_BYTES))
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadEvent("event is not UTF-8 text; send a JSON object") from None
    if isinstance(raw, str):
        if not raw.strip():
            raise BadEvent("event is empty; send a JSON object, e.g. {\"cluster_id\": \"c-...\"}")
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            msg = getattr(exc, "msg", "invalid JSON")
            where = " at line %d column %d" % (exc.lineno, exc.colno) if hasattr(exc, "lineno") else ""
            raise BadEvent("event is not JSON (%s%s); send a JSON object" % (msg, where)) from None
        except RecursionError:
            raise BadEvent("event is nested too deeply to be JSON we accept; send a JSON object") from None
    if isinstance(raw, list):
        if len(raw) != 1:
            raise BadEvent("event is a list of %d events; set the trigger's batch size to 1 so that each "
                           "invocation carries one event" % len(raw))
        raw = raw[0]
    if not isinstance(raw, dict):
        raise BadEvent("event is a JSON %s; send a JSON object" % type(raw).__name__)
    return raw


def read_envelope(raw: Any) -> Envelope:
    """Raw event (bytes, str or decoded JSON) -> Envelope, or SkipEvent / BadEvent."""
    body = _decode(raw)
    if "specversion" in body or ("type" in body and "source" in body and "data" in body):
        etype = body.get("type")
        if not isinstance(etype, str):
            raise BadEvent("event field envelope.type: missing or not text; a CloudEvent needs id, source, "
                           "type and specversion")
        if etype == LIFECYCLE_TEST:
            raise SkipEvent("lifecycle hook test notification acknowledged; nothing to do", _TRIGGER_TEST,
                            etype)
        if etype not in HANDLED_TYPES:
            raise SkipEvent("event type %s is not handled; handled: %s" % (shown(etype), ", ".join(HANDLED_TYPES)),
                            _TRIGGER_UNKNOWN, etype[:200])
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
