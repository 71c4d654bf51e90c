"""One plan of an auto pool at a time, and the pod events that arrive meanwhile folded into it (issue 37).

Pure: the marker comes in as the text of an annotation and goes out as text; ``functions.rollout.plan_marker``
reads and writes it on the pool's plan Lease with a compare-and-swap (``resourceVersion``), so of two
invocations that read the same marker only one write lands and the other reads again.

The marker (annotation ``ack-mig-hook/plan`` of the Lease ``ack-mig-hook-plan-<pool id>``)::

    {"holder": "<invocation>", "until": <epoch s>, "round": <epoch s>, "asked": <n>, "open": <bool>,
     "last": {...}, "waited": {"owner": "<invocation>", "until": <epoch s>}}

* ``asked`` counts the events that asked for a plan of the pool; every arriving event adds one.
* ``holder`` is the invocation planning the pool now, live until ``until`` (:data:`HOLD_S` after it last
  renewed it: every :data:`RENEW_S` while it works, and as each round begins). An event that finds a live holder that is ``open`` only adds its ask and is
  answered ``coalesced``; an event that finds none, or one that is not open, becomes the holder and plans
  (after the planning claim of the round that runs, ``functions.rollout.plan_claim``).
* ``open``: the holder has time for another round after this one (its invocation's time left, when the round
  began, holds two worst-case rounds): only then may it take asks it would have to plan for. A holder near
  the end of its invocation closes, and the events that come meanwhile plan in their own invocations.
* A holder notes ``asked`` when its round begins (written before it lists the pods). After the round it
  reads the marker again: when ``asked`` grew, an event arrived during the round, and it plans once more;
  otherwise it clears ``holder`` and ends.
* ``round``: when the last round began; rounds of one pool begin at least :data:`SPACING_S` apart.
* ``last``: the last event seen (when, which pod, the event id), which ``doctor`` shows.
* ``waited``: another invocation's planning claim that a holder waited out (``pod_event.CLAIM_WAIT_S``) and
  gave up on, as it let go: its owner and its end then. While that same claim holds (the pool's Lease names
  the same owner and its end as read then has not come: its owner renews it while it works), an event that
  finds no open holder adds its ask and ends at once (:data:`WAITED_OUT`) rather than waiting its own 5
  minutes for it: a long rollout keeps its claim for its whole length, and every event would bill that wait
  again. The claim is read at each such event, so a note that names a claim given back, run out or taken by
  another (or a forged one) is dropped and the event plans.

Why a coalesced event never loses its pod: the event's invocation read the pod as ``Unschedulable``
(``functions.pipeline.pod_event``) before it writes its ask. Writes to the marker are ordered by the API
server (each applies only to the version read). Either the ask landed before the holder's end-of-round
read, and the holder plans again with a list of Pending pods taken after it, which holds the pod (unless it
was scheduled meanwhile); or it landed after the holder cleared the marker, and then the event found no
holder and planned itself. A holder that dies (FC ends it) stops renewing, so it stops coalescing within
:data:`HOLD_S`, and the pods of the events it swallowed are planned by the next event of the pool (whose
plan lists every Pending pod) or by the auto pool timer, which never coalesces. A holder coalesces only while it is ``open``, so one that ends its last round with asks left has
run longer than a worst-case round (it says so in its log); the timer plans those pods.

All times are the API server's (``functions.kube.client.KubeApi.server_time``): one clock for every
invocation. A marker that cannot be read (not ours, too long, not JSON, numbers out of range) reads as
empty, so a broken or forged marker costs at most one extra plan and never stops one; an ``until`` further
than one hold ahead is read as one hold ahead, so a forged ``until: 1e15`` coalesces events for one hold at
most (a live holder renews its own).
"""

import json
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from functions.decision.waves import MAX_EPOCH  # 2100-01-01: a later time is not one this hook wrote
from node_bootstrap.outside import OutsideDataError, json_type, loads, number, whole

MARKER_ANNOTATION = "ack-mig-hook/plan"
LEASE_PREFIX = "ack-mig-hook-plan-"
# Rounds of one pool begin at least this far apart: a burst of events is planned in few rounds, and the
# first event of a quiet pool (its last round long past) is planned at once.
SPACING_S = 2.0
# How long a holder's marker holds the pool, renewed every RENEW_S while the holder works (its rounds, claim
# waits, applies and capacity waits): a holder FC ends stops renewing, and its pool is free for the next
# event within HOLD_S rather than one run lease (37 minutes with the defaults), during which every event was
# answered coalesced into a plan that never came. Several renewals may fail or be slow (a renewal is one
# client call with its retries) before a live holder's hold lapses, and a lapsed hold costs one extra plan
# only: the pool's planning claim, not the marker, keeps two plans of a pool apart.
HOLD_S = 30.0
RENEW_S = 5.0
MAX_MARKER_TEXT = 4096  # ours is under 400 characters
MAX_ASKS = 10 ** 15  # a counter past this starts again from 0 (one ask per event: never in practice)
MAX_TEXT = 253  # the longest holder, pod or event id kept (a pod's namespace/name fits)

PLAN = "plan"
COALESCED = "coalesced"
WAITED_OUT = "waited-out"  # the pool's planning claim is one a holder waited out: the event ends at once


class Marker(NamedTuple):
    holder: str = ""
    until: float = 0.0
    round: float = 0.0
    asked: int = 0
    last: Dict[str, Any] = {}
    open: bool = True  # a marker written before the field existed: as it behaved then
    waited: Dict[str, Any] = {}  # the planning claim a holder waited out: {"owner", "until"}, {} for none

    def live(self, now: float) -> bool:
        """A holder is planning the pool now (as far as its lease says)."""
        return bool(self.holder) and self.until > now


def _text(value: Any) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""


MARKER_FORM = ('{"holder": <text>, "until": <epoch seconds>, "round": <epoch seconds>, "asked": <count>, '
               '"open": true/false, "last": {"at", "pod", "event"}, "waited": {"owner", "until"}}')


def read_marker(text: Optional[str], now: float, hold_s: float,
                note: Optional[Callable[[str], None]] = None) -> Marker:
    """The marker as stored, bounded: ``until`` at most ``hold_s`` after ``now``; an empty marker for none or
    for one that is not ours (the reader rule, node_bootstrap/outside.py). A part that is not ours reads as
    absent: no holder (this event plans: the planning claim, not the marker, keeps two plans apart), no last
    ask, open (as a marker written before the field), no waited-out claim (the event waits its own time).
    ``note`` is told the one line saying what did not read."""
    if not text:
        return Marker()
    try:
        value = loads(text, "the plan marker", MAX_MARKER_TEXT, 4)
        if not isinstance(value, dict):
            raise OutsideDataError("the plan marker is %s" % json_type(value))
        until = number(value.get("until"), "until", 0, MAX_EPOCH, default=0.0)
        started = number(value.get("round"), "round", 0, MAX_EPOCH, default=0.0)
        asked = whole(value.get("asked"), "asked", 0, MAX_ASKS, default=0)
    except OutsideDataError as exc:
        _say(note, str(exc), "read as none: this event plans the pool")
        return Marker()
    odd = ["%s is %s" % (key, json_type(value[key])) for key, kind in
           (("holder", str), ("last", dict), ("open", bool), ("waited", dict))
           if value.get(key) is not None and not isinstance(value[key], kind)]
    last = value.get("last") if isinstance(value.get("last"), dict) else {}
    at = last.get("at")
    last = {"at": float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) and 0 <= at <= MAX_EPOCH
            else 0.0, "pod": _text(last.get("pod")), "event": _text(last.get("event"))}
    is_open = value.get("open")
    waited = _waited(value.get("waited"))
    if isinstance(value.get("waited"), dict) and not waited and value["waited"]:
        odd.append("waited is no claim of a holder (owner, until)")
    if odd:
        _say(note, "; ".join(odd), "those parts read as absent")
    return Marker(_text(value.get("holder")), min(until, now + hold_s), started, asked, last,
                  is_open if isinstance(is_open, bool) else True, waited)


def _say(note: Optional[Callable[[str], None]], what: str, so: str) -> None:
    """The reader rule's one line for a marker that is not ours, clipped."""
    if note is not None:
        note("the plan marker is not ours (%s; the form is %s): %s" % (what[:300], MARKER_FORM, so))


def _waited(value: Any) -> Dict[str, Any]:
    """The waited-out claim as stored, or {} for none or one that does not read (the reader rule's number)."""
    return _read_waited(value)[0]


def _read_waited(value: Any) -> Tuple[Dict[str, Any], str]:
    """(the waited-out claim as stored or {}, why a note that is there does not read: "" when it reads or
    there is none)."""
    if value is None:
        return {}, ""
    if not isinstance(value, dict):
        return {}, "waited is %s, not an object {owner, until}" % json_type(value)
    if not isinstance(value.get("owner"), str):
        return {}, "waited.owner is %s, not text" % json_type(value.get("owner"))
    if not value["owner"]:
        return {}, "waited.owner is empty"
    try:
        end = number(value.get("until"), "waited.until", 0, MAX_EPOCH)
    except OutsideDataError as exc:
        return {}, str(exc)
    if end <= 0:
        return {}, "waited.until is 0, no time"
    return {"owner": _text(value["owner"]), "until": end}, ""


def waited_problem(text: Optional[str]) -> str:
    """Why a stored marker's note of a waited-out claim does not read (and so counts as none), or why the
    marker itself does not; "" when it reads or there is none: what ``doctor`` names rather than drops."""
    if not text:
        return ""
    try:
        value = loads(text, "the plan marker", MAX_MARKER_TEXT, 4)
    except OutsideDataError as exc:
        return str(exc)
    return _read_waited(value.get("waited"))[1] if isinstance(value, dict) else \
        "the plan marker is %s, not an object" % json_type(value)


def write_marker(marker: Marker) -> str:
    value = {"holder": marker.holder, "until": round(marker.until, 3), "round": round(marker.round, 3),
             "asked": marker.asked, "open": marker.open, "last": marker.last}
    if marker.waited:
        value["waited"] = {"owner": marker.waited["owner"], "until": round(marker.waited["until"], 3)}
    return json.dumps(value, sort_keys=True)


Claim = Tuple[str, float]  # a pool's planning claim as read now: its owner and its end ("" for none)


def waited_out(marker: Marker, claim: Optional[Claim], now: float) -> bool:
    """Whether the pool's planning claim as read now (``claim``; None: not read) is the one the marker says a
    holder waited out: the same owner, and its end as read now has not come. Not its end as noted: the owner
    renews its claim while it works (``functions.rollout.plan_claim``, a short hold each time), so the noted
    end is one hold after the wait; an owner still renewing is the same claim, and an event waiting for it
    again would bill its own 5 minutes for nothing while a long rollout runs."""
    if not marker.waited or claim is None or not claim[0]:
        return False
    return claim[0] == marker.waited["owner"] and now < claim[1]


def arrive(marker: Marker, me: str, now: float, hold_s: float, pod: str, event_id: str,
           claim: Optional[Claim] = None) -> Tuple[Marker, str]:
    """An event of the pool arrives: its ask is added; it is ``coalesced`` into a live, open holder's next
    round, or it becomes the holder (``plan``): its round begins once the caller has written the marker. A
    holder that is not open is taken over: it plans no further round, so this event's must. With no such
    holder, ``claim`` (the pool's planning claim as read now) still the one a holder waited out
    (:func:`waited_out`): ``waited-out``, no holder taken; a claim that is another (or none) drops
    the note, and the event plans."""
    asked = marker.asked + 1 if marker.asked < MAX_ASKS else 1
    seen = marker._replace(asked=asked, last={"at": round(now, 3), "pod": _text(pod), "event": _text(event_id)})
    if marker.live(now) and marker.holder != me and marker.open:
        return seen, COALESCED
    if waited_out(marker, claim, now):  # a holder that is not open or not live is left as it is
        return seen, WAITED_OUT
    return seen._replace(holder=me, until=now + hold_s, open=True, waited={}), PLAN


def quiet_since(before: Marker, mine: Marker, planned: Optional[int], listed: float, margin_s: float) -> bool:
    """Whether no event but this one (``mine``: the marker its arrival wrote over ``before``) asked for the
    pool from ``listed`` (when a list of the Pending pods was read, on the markers' clock) until this
    holder's round began with ``planned`` asks: the ask before this one was noted at least ``margin_s``
    before the list (the clock's whole seconds: a note within ``margin_s`` may come after it), and none came
    between this one and the round. Then the pods of every ask this round answers for waited when the list
    was read: each event read its pod as waiting before it asked."""
    at = before.last.get("at") or 0.0
    return planned is not None and planned == mine.asked and at < listed - margin_s


def wait_before_round(marker: Marker, now: float) -> float:
    """Seconds to wait so that this round begins :data:`SPACING_S` after the pool's last one (0 to SPACING_S)."""
    return max(0.0, min(SPACING_S, marker.round + SPACING_S - now))


def begin_round(marker: Marker, me: str, now: float, hold_s: float, is_open: bool = True) -> Optional[Marker]:
    """The marker as the holder writes it before a round lists the pods (``round`` now, lease renewed,
    ``open``: whether it will have time for another round); None when the marker is no longer this
    invocation's (its lease ran out, or it was not open, and an event took over)."""
    if marker.holder != me:
        return None
    return marker._replace(round=now, until=now + hold_s, open=is_open)


def renew(marker: Marker, me: str, now: float, hold_s: float) -> Optional[Marker]:
    """The marker with this invocation's hold renewed (``until`` ``hold_s`` from now), or None when it no longer
    names this invocation (let go, or taken over after its hold lapsed: that holder plans now)."""
    if marker.holder != me:
        return None
    return marker._replace(until=now + hold_s)


def end_round(marker: Marker, me: str, planned: int, more: bool) -> Tuple[Optional[Marker], bool]:
    """After a round that began with ``asked == planned``: (the marker to write, whether to plan again).
    Again when an event asked since (and ``more``: the invocation has time for another round); otherwise
    the holder lets go. (None, False) when the marker is no longer this invocation's: nothing to write."""
    if marker.holder != me:
        return None, False
    if marker.asked != planned and more:
        return marker, True
    return marker._replace(holder="", until=0.0), False


def let_go(marker: Marker, me: str, waited: Optional[Claim] = None) -> Optional[Marker]:
    """The marker this invocation lets go of (None: it names another, nothing to write); ``waited``: the other
    invocation's planning claim it waited out and gave up on (owner, end), noted for the events after it."""
    if marker.holder != me:
        return None
    return marker._replace(holder="", until=0.0, waited={"owner": _text(waited[0]), "until": float(waited[1])}
                           if waited and waited[0] else marker.waited)
