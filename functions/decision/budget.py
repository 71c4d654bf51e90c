"""A pool's disruption budget, counted from the cluster: which nodes of the pool are unavailable now, and
whether one more may be disrupted. Pure: the Lease's slot table and the pool's nodes come in as values;
``functions.rollout.pool_lease`` reads and writes them with a compare-and-swap.

Why a table of slots and not only the nodes: between the moment an invocation decides to take a node and
the moment its cordon reaches the API server, the node looks untouched, so two invocations counting nodes
alone would both see a free slot (issue 25: three events at once cordoned three nodes under
``max-unavailable`` 1). The slot is written first, on one object per pool (a ``coordination.k8s.io/v1``
Lease), by a write that the API server applies only to the version read; whoever writes second reads again
and counts the first one's slot. The node-level signs stay counted too, so a slot lost with a crashed run
(it expires with that run's lease) never hides a node that is still cordoned.

Disrupted, whoever caused it (Kured, Karpenter and the cluster-autoscaler count the same way):

* a live slot of the table (not expired, its expiry taken as at most one run lease from now: see
  :func:`bound`), unless its holder has visibly ended the node (a release that did
  not land: the node's record, written by the same holder, is no longer in progress and the node is
  schedulable), and unless the node is gone from the pool;
* a node in a drained rollout step (this hook's record, whatever invocation wrote it);
* a cordoned node (``spec.unschedulable``: ours or anyone's);
* a node whose kubelet is not Ready (Ready ``False`` or ``Unknown``).

A node already counted may be taken without taking another slot: it is unavailable either way.

Whose clock: ``now`` is the API server's (``functions.rollout.pool_lease`` reads it from the answers' ``Date``),
one clock for every invocation, so an invocation whose own clock runs ahead still sees another's slot live.
A slot never holds longer than one run lease from the moment it is read: its expiry is clamped to
``now + lease_s`` when read (:func:`bound`) and when written (:func:`write_slots`), so a slot written
against a clock that ran ahead counts as live until then, and a forged ``expires`` (``1e15``, ``Infinity``,
a string) blocks the pool for one run lease at most once a reader has written the clamp back.

A table that cannot be read whole must never let more runs in than the budget: anyone with lease update
rights can write the annotation, and reading it as empty (or leaving a slot out) dropped the other runs'
slots, which the next slot taken then wrote away. So a slot that does not read (not an object, an owner that
is no text, an ``expires`` that is no finite number, 5,000 digits among them) is held by an unknown run for
one run lease (its expiry reads as past any clock, and :func:`bound` clamps it), and a table that does not
read at all (not a JSON object, too long, nested too deeply) is :class:`UnreadableSlots`: no slot is taken
and nothing is written until someone removes it.
"""

import json
import math
import re
from dataclasses import dataclass
from typing import Dict, Iterable, Mapping, Optional, Tuple

from functions.decision.waves import ACTIVE_STEPS, KubeNode

SLOTS_ANNOTATION = "ack-mig-hook/slots"
LEASE_PREFIX = "ack-mig-hook-pool-"
# A slot is about 60 characters; a table longer than this is not ours (anyone with lease update rights in
# the namespace can write the annotation) and is refused (UnreadableSlots).
MAX_SLOTS_TEXT = 65536
UNKNOWN_OWNER = ""  # the holder of a slot that does not read: never this run, shown as "-"
_NAME_CHARS = re.compile(r"[^a-z0-9.-]+")


@dataclass(frozen=True)
class Slot:
    """One node's slot: the invocation that holds it and when that invocation's lease runs out."""

    owner: str
    expires: float


def lease_name(pool_id: str, prefix: str = LEASE_PREFIX) -> str:
    """The pool's Lease: a DNS subdomain name (lower case, ``[a-z0-9.-]``, at most 253 characters).
    ACK pool ids are ``np`` and hexadecimal digits, so the mapping is one to one for them. ``prefix``: the
    budget's Lease by default; the plan marker's is ``ack-mig-hook-plan-`` (functions/decision/coalesce.py)."""
    text = _NAME_CHARS.sub("-", pool_id.lower()).strip("-.") or "none"
    return (prefix + text)[:253].rstrip("-.")


class UnreadableSlots(ValueError):
    """The slot table as a whole does not read; the message is one line and says why."""


def _expiry(value: object) -> Optional[float]:
    """A slot's ``expires``: a finite JSON number (missing: 0, long over); None for anything else (a string,
    a bool, NaN, Infinity, an integer too large for a float)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of 400 digits
        return None
    return number if math.isfinite(number) else None


def _number(text: str) -> object:
    # An integer JSON text as json reads it, except that one of more than 18 digits is a float (infinite
    # past 308 digits), not ValueError: Python's int refuses 4,300 digits and more, which failed the table.
    return int(text) if len(text.lstrip("-")) <= 18 else float(text)


def read_slots(text: Optional[str]) -> Dict[str, Slot]:
    """The table from the Lease annotation, as stored; {} for none. A slot that does not read is held by
    :data:`UNKNOWN_OWNER` until past any clock (:func:`bound` clamps it to one run lease); UnreadableSlots
    for a table that does not read at all (module docstring)."""
    if not text:
        return {}
    if len(text) > MAX_SLOTS_TEXT:
        raise UnreadableSlots("the slot table is longer than %d characters" % MAX_SLOTS_TEXT)
    try:
        data = json.loads(text, parse_int=_number)
    except RecursionError:
        raise UnreadableSlots("the slot table is nested too deeply") from None
    except ValueError as exc:
        raise UnreadableSlots("the slot table is not JSON (%s)" % str(exc)[:80]) from None
    if not isinstance(data, dict):
        raise UnreadableSlots("the slot table is no JSON object")
    out = {}
    for name, slot in data.items():
        expires = _expiry(slot.get("expires")) if isinstance(slot, dict) else None
        if expires is not None and isinstance(slot.get("owner"), str):
            out[name] = Slot(slot["owner"], expires)
        else:  # who holds it and until when cannot be read: held, for one run lease once bounded
            out[name] = Slot(UNKNOWN_OWNER, math.inf)
    return out


def bound(slots: Mapping[str, Slot], now: float, lease_s: float) -> Dict[str, Slot]:
    """Each slot's expiry clamped to ``now + lease_s``: no invocation holds a node longer than one run lease,
    so an expiry past that was written against a clock ahead of ``now`` (it counts as live until then) or by
    someone else (written back clamped, it runs out within one run lease)."""
    horizon = now + lease_s
    return {n: s if s.expires <= horizon else Slot(s.owner, horizon) for n, s in slots.items()}


def write_slots(slots: Mapping[str, Slot], now: float, lease_s: float) -> str:
    """The annotation's text, every expiry clamped as :func:`bound` does."""
    return json.dumps({n: {"owner": s.owner, "expires": round(s.expires, 3)}
                       for n, s in sorted(bound(slots, now, lease_s).items())}, sort_keys=True)


def _ended_by_holder(node: KubeNode, slot: Slot) -> bool:
    p = node.progress
    return p is not None and p.owner == slot.owner and p.step not in ACTIVE_STEPS and not node.unschedulable


def live_slots(nodes: Iterable[KubeNode], slots: Mapping[str, Slot], now: float) -> Dict[str, Slot]:
    """The slots that still count (module docstring): not expired, on a node of the pool its holder has not
    visibly ended. What a slot table is written back as: expired, released and gone ones drop out."""
    by_name = {n.name: n for n in nodes}
    return {name: slot for name, slot in slots.items()
            if slot.expires > now and name in by_name and not _ended_by_holder(by_name[name], slot)}


def disrupted(nodes: Iterable[KubeNode], slots: Mapping[str, Slot], now: float) -> Dict[str, str]:
    """The pool's unavailable nodes, by name, each with why (module docstring). ``nodes``: every node of
    the pool as the API server has it now."""
    by_name = {n.name: n for n in nodes}
    out = {name: "held by invocation %s" % (slot.owner or "-")
           for name, slot in sorted(live_slots(by_name.values(), slots, now).items())}
    for name, node in sorted(by_name.items()):
        if name in out:
            continue
        p = node.progress
        if p is not None and p.step in ACTIVE_STEPS and p.drain:
            out[name] = "rollout step %s" % p.step
        elif node.unschedulable:
            out[name] = "cordoned"
        elif node.ready is False:
            out[name] = "NotReady"
    return out


def admit(name: str, counted: Mapping[str, str], limit: int, pool: str) -> Tuple[bool, str]:
    """Whether node ``name`` may be disrupted now under ``max-unavailable`` ``limit``: ``(yes, why not)``."""
    if name in counted:
        return True, ""
    if len(counted) < limit:
        return True, ""
    shown = sorted(counted.items())[:5]
    more = len(counted) - len(shown)
    return False, ("the disruption budget of pool %s is taken: %d node(s) unavailable, max-unavailable %d (%s%s); "
                   "this node waits for a slot" % (pool, len(counted), limit,
                                                   ", ".join("%s: %s" % kv for kv in shown),
                                                   ", and %d more" % more if more else ""))
