"""The function's run record: when it last ran and what it did, per trigger (``functions.kube.last_run`` reads and
writes it; ``status`` and ``doctor`` show it).

One JSON document in the annotation :data:`RECORD_ANNOTATION` of the Lease :data:`RECORD_LEASE`, in the namespace
the function writes its Events and budget Leases to. It holds the last invocation (``last``) and the last one of
each trigger (``by_trigger``: ``timer:reconcile``, ``timer:auto-pools``, ``scale-out``, ...), so a timer that stopped
firing shows even while other events keep the function busy. Each entry: ``at`` (epoch seconds on the API server's
clock), ``trigger``, ``event_type``, ``outcome``, ``reason`` (cut), ``dry_run``, ``request_id`` (to find its log
lines), ``duration_ms``, and counts: ``decisions`` by action and ``nodes`` by outcome.

Pure: no I/O. What is read back passes the reader rule (node_bootstrap/outside.py): bounded, and every field checked;
a record that fails is "unreadable", never half-used.
"""

from typing import Any, Dict, List, Optional, Tuple

from node_bootstrap.outside import OutsideDataError, loads, number, whole

from functions.base.textsafe import one_line
from functions.decision.claim_rules import MAX_CLOCK_AHEAD_S
from functions.decision.waves import MAX_EPOCH  # 2100-01-01, the rollout record's bound

RECORD_LEASE = "ack-mig-hook-last-run"
RECORD_ANNOTATION = "ack-mig-hook/last-run"
VERSION = 1
MAX_TEXT = 16384  # ours is under 3 KB: a dozen triggers, a few counts each
MAX_REASON = 300
MAX_KEYS = 32  # triggers, actions or outcomes in one record: more is not ours
MAX_COUNT = 10 ** 7
_TEXT_FIELDS = ("trigger", "event_type", "outcome", "reason", "request_id", "clock")


def trigger_key(trigger: str, event_type: Optional[str]) -> str:
    """How a trigger is keyed: the timers by their name (``timer:reconcile``, ``timer:auto-pools``: two timers, one
    trigger), every other trigger by itself."""
    if trigger == "timer" and event_type and event_type.startswith("timer:"):
        return event_type[:64]
    return trigger[:64]


def _counts(values: List[Any]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for value in values:
        key = str(value or "unknown")[:40]
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def short_reason(text: str) -> str:
    """A reason as the record keeps it: one line, at most MAX_REASON characters."""
    reason = one_line(text)
    return reason if len(reason) <= MAX_REASON else reason[:MAX_REASON - 3] + "..."


def entry(result: Any, at: float, clock: str, request_id: str, duration_ms: float) -> Dict[str, Any]:
    """One invocation's entry from its result (``functions.base.event_result.HandlerResult``). ``clock``:
    ``server`` when ``at`` is the API server's time, ``local`` when the backend gave none."""
    return {"at": round(at, 3), "clock": clock, "trigger": result.trigger, "event_type": result.event_type or "",
            "outcome": result.outcome, "reason": short_reason(str(result.reason or "")),
            "dry_run": bool(result.dry_run), "request_id": str(request_id or "")[:64],
            "duration_ms": round(max(0.0, float(duration_ms)), 1),
            "decisions": _counts([d.action for d in result.decisions or []]),
            "nodes": _counts([n.get("outcome") for n in result.nodes or []])}


# The timers template.yml declares (its TriggerName values): always kept. Any other timer name (a hand-made
# timer, or an event that says it is one) shares OTHER_TIMERS entries, the oldest going first: distinct
# names grew the record past what its reader takes, and the next write replaced it, the reconcile timer's
# entry (the heartbeat status and doctor judge) with it.
TEMPLATE_TIMERS = ("timer:reconcile", "timer:auto-pools")
OTHER_TIMERS = 4


def merge(stored: Optional[Dict[str, Any]], new: Dict[str, Any]) -> Dict[str, Any]:
    """The record with ``new`` as the last run and as its trigger's; the other triggers' entries are kept (of
    timers the template does not declare, the newest OTHER_TIMERS)."""
    new = dict(new, event_type=str(new.get("event_type") or "")[:64])
    by_trigger = dict((stored or {}).get("by_trigger") or {})
    by_trigger[trigger_key(new["trigger"], new.get("event_type"))] = new
    others = sorted((k for k in by_trigger if k.startswith("timer:") and k not in TEMPLATE_TIMERS),
                    key=lambda k: (by_trigger[k].get("at") or 0, k))
    for key in others[:max(0, len(others) - OTHER_TIMERS)]:
        del by_trigger[key]
    return {"version": VERSION, "last": new, "by_trigger": dict(sorted(by_trigger.items()))}


def write_text(record: Dict[str, Any]) -> str:
    import json

    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _entry_of(value: Any, what: str, latest: float) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise OutsideDataError("%s is not an object" % what)
    out: Dict[str, Any] = {"at": number(value.get("at"), what + ".at (epoch seconds, before 2100 and at most %d s "
                                        "past the clock the record is written on)" % MAX_CLOCK_AHEAD_S, 0.0, latest)}
    for key in _TEXT_FIELDS:
        text = value.get(key, "")
        if not isinstance(text, str):
            raise OutsideDataError("%s.%s is not text" % (what, key))
        out[key] = text[:MAX_REASON]
    if not isinstance(value.get("dry_run", False), bool):
        raise OutsideDataError("%s.dry_run is not true or false" % what)
    out["dry_run"] = value.get("dry_run", False)
    out["duration_ms"] = number(value.get("duration_ms"), what + ".duration_ms", 0.0, 1e9, default=0.0)
    for key in ("decisions", "nodes"):
        counts = value.get(key) or {}
        if not isinstance(counts, dict) or len(counts) > MAX_KEYS:
            raise OutsideDataError("%s.%s is not a small object of counts" % (what, key))
        out[key] = {str(k)[:40]: whole(v, "%s.%s.%s" % (what, key, str(k)[:40]), 0, MAX_COUNT)
                    for k, v in sorted(counts.items())}
    return out


def read_text(text: Optional[str], now: Optional[float] = None) -> Optional[Dict[str, Any]]:
    """The record from the annotation's text; None when there is none. OutsideDataError (one line) when it is not
    one this function wrote. ``now``: the clock the record is written on; an entry dated more than
    MAX_CLOCK_AHEAD_S after it is not ours (its age never grew: a stopped timer read as one that just ran)."""
    latest = MAX_EPOCH if now is None else min(MAX_EPOCH, now + MAX_CLOCK_AHEAD_S)
    if not text:
        return None
    doc = loads(text, "the run record (%s)" % RECORD_ANNOTATION, max_bytes=MAX_TEXT, max_depth=4)
    if not isinstance(doc, dict):
        raise OutsideDataError("the run record is not an object")
    by_trigger = doc.get("by_trigger") or {}
    if not isinstance(by_trigger, dict) or len(by_trigger) > MAX_KEYS:
        raise OutsideDataError("the run record's by_trigger is not a small object")
    return {"version": whole(doc.get("version"), "the run record's version", 1, 1000),
            "last": _entry_of(doc.get("last"), "last", latest),
            "by_trigger": {str(k)[:64]: _entry_of(v, "by_trigger.%s" % str(k)[:64], latest)
                           for k, v in sorted(by_trigger.items())}}


def summary(e: Dict[str, Any]) -> str:
    """One entry in words: ``done (2 partition, 10 skip; nodes: 2 partitioned), dry run``."""
    parts = ", ".join("%d %s" % (n, k) for k, n in e["decisions"].items())
    nodes = ", ".join("%d %s" % (n, k) for k, n in e["nodes"].items())
    counts = "; ".join(p for p in (parts, "nodes: " + nodes if nodes else "") if p)
    return "%s%s%s" % (e["outcome"], " (%s)" % counts if counts else "", ", dry run" if e["dry_run"] else "")


def late(record: Optional[Dict[str, Any]], key: str, now: float, interval_s: float) -> Tuple[bool, Optional[float]]:
    """Whether the trigger ``key`` has not run for more than twice ``interval_s`` (a timer that stopped firing),
    and how long ago it last ran (None: never recorded)."""
    e = ((record or {}).get("by_trigger") or {}).get(key)
    if e is None:
        return True, None
    ago = max(0.0, now - e["at"])
    return ago > 2 * interval_s, ago


def every_seconds(schedule: str) -> Optional[float]:
    """The interval of an FC timer expression ``@every 30m`` (``s``, ``m``, ``h``, combined as Go durations
    such as ``1h30m``); None for a cron expression or anything else."""
    import re

    text = (schedule or "").strip()
    m = re.match(r"^@every\s+((?:[0-9]+[hms])+)\Z", text)
    if not m:
        return None
    scale = {"h": 3600, "m": 60, "s": 1}
    total = sum(int(n) * scale[u] for n, u in re.findall(r"([0-9]+)([hms])", m.group(1)))
    return float(total) if total > 0 else None
