"""An auto pool's planning claim and the times its GPUs last changed, as the pool's Lease holds them. Pure:
the annotations' text comes in, values and text go out; ``functions.rollout.plan_claim`` reads and writes
them with the Lease's compare-and-swap.

Why a claim (issue 35 item 4): FC starts a tick while the previous one still applies (the template sets no
concurrency limit), and a node being changed says ``pending``: a second planner that reads the pool then
sees that node busy and the same pods still waiting, and changes a second node for them. So one invocation
at a time plans a pool: it writes ``ack-mig-hook/planning`` = ``{"owner": <invocation>, "expires": <t>}``
on the pool's Lease (``ack-mig-hook-pool-<pool id>``, the one the disruption budget uses) before it reads
the pool's nodes, with the ``resourceVersion`` it read (of two writers, the second is refused and reads the
first one's claim), and removes it when its rollout has ended. ``expires`` is one short hold past the
holder's last write of it (renewed while it works, never past the end of its invocation's time: FC ends it
then; ``functions.rollout.plan_claim``), on the API server's clock: a crashed tick's claim frees the pool
one hold after its last renewal. A claim
read with a later expiry (a clock ahead, or a forged time), or one that does not read at all (another
version's, a forger's: reading it as none would let a plan run beside the one it may stand for), counts as
running out one invocation's time from now, as the budget's slots do (``functions.decision.budget.bound``).

Why the change times live there too: the dwell (``functions.decision.layout.dwell``) needs, per GPU, when
the hook last changed it, on one clock and out of reach of the nodes (a kubelet may edit its own Node's
annotations, not the hook's Lease). The invocation that changed GPUs writes them in the same write that
gives the claim back: ``ack-mig-hook/changed`` = ``{"<node>/<gpu index>": <t>}``; entries older than the
dwell drop out of every write.
"""

import calendar
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from node_bootstrap.outside import OutsideDataError, json_type, loads, number

from functions.decision.waves import MAX_EPOCH

PLANNING_ANNOTATION = "ack-mig-hook/planning"
CHANGED_ANNOTATION = "ack-mig-hook/changed"
# When an invocation last changed any node of the pool (per-GPU layouts, or MIG turned on for a fresh node,
# which the dwell does not hold back and so has no mark above): a tick that listed the pending pods before
# that skips the pool, as those pods may have bound since.
POOL_CHANGED_ANNOTATION = "ack-mig-hook/pool-changed"
# How far ahead of this invocation's clock a writer's clock may run. A pool-change time further ahead is not a
# skewed clock but a forged or broken mark: read as absent, or it would hold every tick off the pool until
# that date (a release rewrites the mark only when something changed).
MAX_CLOCK_AHEAD_S = 300.0
# A claim is about 60 characters, a change mark about 40 (a node name is at most 253): texts longer than
# these are not ours (anyone with lease update rights in the namespace can write them) and read as none.
MAX_CLAIM_TEXT = 1024
MAX_CHANGED_TEXT = 96 * 1024  # 2,000 GPUs changed within one dwell; the budget's slots take 64 KiB more
MAX_OWNER = 64

Gpu = Tuple[str, int]  # (node name, GPU index)


@dataclass(frozen=True)
class Claim:
    """Who plans the pool and until when (the API server's clock)."""

    owner: str
    expires: float


def _time(value: object, what: str) -> Optional[float]:
    """An epoch time this hook could have written (0 to 2100-01-01), else None."""
    try:
        return number(value, what, 0.0, MAX_EPOCH)
    except OutsideDataError:
        return None


# The owner a claim that does not read counts as: no invocation id (12 hex digits) looks like it.
UNREADABLE_OWNER = "unreadable-claim"
CLAIM_FORM = '{"owner": <invocation id, 1 to %d characters>, "expires": <epoch seconds up to 2100>}' % MAX_OWNER


def read_claim(text: Optional[str], note: Optional[Callable[[str], None]] = None) -> Optional[Claim]:
    """The claim as stored; None for none. A claim that does not read (not JSON, another shape, an expiry past
    2100: a forger's, or another version's) holds the pool as a forged expiry does: it counts as
    ``UNREADABLE_OWNER``'s, ending one invocation's time from now (:func:`bound_claim`), since reading it as
    none would let a plan run beside the one it may stand for. ``note`` is told the one line saying why."""
    if text is None or text == "":
        return None
    claim, problem = _parse_claim(text)
    if claim is not None:
        return claim
    if note is not None:
        note("annotation %s is not ours (%s; the form is %s): it holds the pool one invocation's time at most"
             % (PLANNING_ANNOTATION, problem, CLAIM_FORM))
    return Claim(UNREADABLE_OWNER, math.inf)


def _parse_claim(text: str) -> Tuple[Optional[Claim], str]:
    """The claim, or None and why it does not read (the reader rule's words: a JSON type, a clipped value)."""
    try:
        data = loads(text, "it", max_bytes=MAX_CLAIM_TEXT, max_depth=1)
        if not isinstance(data, dict):
            return None, "it is %s" % json_type(data)
        owner = data.get("owner")
        if not isinstance(owner, str):
            return None, "its owner is %s" % json_type(owner)
        if not 0 < len(owner) <= MAX_OWNER:
            return None, "its owner has %d characters" % len(owner)
        return Claim(owner, number(data.get("expires"), "its expires", 0.0, MAX_EPOCH)), ""
    except OutsideDataError as exc:
        return None, str(exc)


def bound_claim(claim: Optional[Claim], now: float, horizon_s: float) -> Optional[Claim]:
    """The claim as it counts at ``now``: None once expired; an expiry past ``now + horizon_s`` (one
    invocation's longest time) clamped to it."""
    if claim is None or claim.expires <= now:
        return None
    return claim if claim.expires <= now + horizon_s else Claim(claim.owner, now + horizon_s)


def held_by_another(claim: Optional[Claim], me: str, now: float, horizon_s: float) -> str:
    """The owner of a live claim that is not ``me`` ("" when the pool is free to plan, or mine)."""
    live = bound_claim(claim, now, horizon_s)
    return live.owner if live is not None and live.owner != me else ""


def write_claim(claim: Claim) -> str:
    return json.dumps({"owner": claim.owner, "expires": round(claim.expires, 3)}, sort_keys=True)


Note = Optional[Callable[[str], None]]
CHANGED_FORM = '{"<node>/<GPU index>": <epoch seconds up to 2100>}'


def _not_ours(note: Note, what: str, problem: str, form: str) -> None:
    """The reader rule's one line for a change mark that is not ours: read as none, which lets one more change
    through the dwell at most (safe: the dwell keeps layouts stable, the claim keeps plans apart)."""
    if note is not None:
        note("annotation %s is not ours (%s; the form is %s): read as no change" % (what, problem[:300], form))


def read_changed(text: Optional[str], now: float, note: Note = None) -> Dict[Gpu, float]:
    """When each GPU last changed, as stored; {} for none or a table that is not ours. A time after
    ``now`` reads as ``now`` (a clock ahead, or a forged time, holds a GPU one dwell at most); a key that is
    not ``<node>/<index>`` or a time that is not one this hook could have written is left out. ``note`` is
    told the one line of what was left out."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        data = loads(text, "it", max_bytes=MAX_CHANGED_TEXT, max_depth=1)
    except OutsideDataError as exc:
        _not_ours(note, CHANGED_ANNOTATION, str(exc), CHANGED_FORM)
        return {}
    if not isinstance(data, dict):
        _not_ours(note, CHANGED_ANNOTATION, "it is %s" % json_type(data), CHANGED_FORM)
        return {}
    out = {}  # type: Dict[Gpu, float]
    odd = []  # type: List[str]
    for key, value in data.items():
        node, _, index = str(key).rpartition("/")
        at = _time(value, "time")
        if node and index.isascii() and index.isdigit() and len(index) <= 2 and at is not None:
            out[(node, int(index))] = min(at, now)
        else:
            odd.append("%s: %s" % (json.dumps(key[:80]), "no <node>/<GPU index> key" if at is not None else
                                   "%s, no time up to 2100" % (json_type(value) if isinstance(value, (dict, list))
                                                              else json.dumps(value)[:40])))
    if odd:
        _not_ours(note, CHANGED_ANNOTATION, "entries left out: %d, the first %s" % (len(odd), odd[0]), CHANGED_FORM)
    return out


def read_pool_changed(text: Optional[str], now: float, note: Note = None) -> float:
    """When the pool last changed, as stored (a plain number); 0.0 for none or a text that is not ours. A
    time after ``now`` reads as ``now``; one more than ``MAX_CLOCK_AHEAD_S`` after it as none. ``note``: told
    the one line of a text that is not ours."""
    if text is None or text == "":
        return 0.0
    value = None  # type: Any
    if isinstance(text, str) and len(text) <= 32:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
    at = _time(value, "time") if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if at is None or at > now + MAX_CLOCK_AHEAD_S:
        _not_ours(note, POOL_CHANGED_ANNOTATION, "%s, %s" % (
            json.dumps(str(text)[:40]), "more than %d s ahead of the API server's clock" % MAX_CLOCK_AHEAD_S
            if at is not None else "not an epoch time up to 2100"), "<epoch seconds>")
        return 0.0
    return min(at, now)


def write_changed(changed: Mapping[Gpu, float], now: float, keep_s: float, gpus: Iterable[Gpu] = ()) -> str:
    """The table with ``gpus`` marked as changed at ``now``, entries older than ``keep_s`` (the dwell) left
    out, the newest first kept when the text would pass its limit."""
    table = {g: min(at, now) for g, at in changed.items() if now - at < keep_s}
    for gpu in gpus:
        table[gpu] = now
    items, size = [], 2
    for (node, index), at in sorted(table.items(), key=lambda kv: (-kv[1], kv[0])):
        entry = "%s/%d" % (node, index)
        size += len(json.dumps(entry)) + len(json.dumps(round(at, 3))) + 4
        if size > MAX_CHANGED_TEXT:
            break
        items.append((entry, round(at, 3)))
    return json.dumps(dict(sorted(items)), sort_keys=True)


# ---- a waiting pod's wait, for the dwell's bound (functions/decision/layout/dwell.py) ----

def _epoch(text: Any) -> Optional[float]:
    """An RFC 3339 time as the API server writes it (``2026-12-04T00:00:00Z``, UTC) as epoch seconds."""
    if not isinstance(text, str) or len(text) < 19 or len(text) > 40:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def waited_s(pod: Mapping[str, Any], now: float) -> float:
    """How long the pod has waited for room: since its ``PodScheduled=False`` condition's
    ``lastTransitionTime`` (the scheduler's), never since before its ``creationTimestamp`` (the API
    server's, which nobody else writes: a forged condition cannot make a pod older than it is). 0 when
    neither can be read."""
    created = _epoch((pod.get("metadata") or {}).get("creationTimestamp"))
    since = None
    for c in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "False":
            since = _epoch(c.get("lastTransitionTime"))
    start = max(t for t in (created, since) if t is not None) if (created, since) != (None, None) else None
    return max(0.0, now - start) if start is not None else 0.0
