"""Which node failures the ``node-failed`` notification already told (``functions.kube.alerted`` reads and writes
the marks; ``functions.pipeline.notify`` asks them).

An event that ends ``retry`` is run again by Function Compute, and its nodes fail again the same way: without a
mark, each attempt told the same failure again. A mark says "this failure of this node was told": the key is a
digest of the run (the event's id, which FC's retries of one event keep; the invocation's request id for an
event without one), the instance id and the failure (its code, or the first words of its reason: the rest may
name a process id or a time that differs between attempts). Another event failing the same node has another
key, so it is told again.

A claim the API server refuses for a cause of the node's own (code :data:`STICKY_CODES`, ``claim-refused``:
``functions.rollout.executor``) fails again at every run, since the claim leaves nothing on the node: keyed by
the event, it was told at every timer run. Its key names no run: the node, the code and the cause (the node's
``cause``, the API server's answer, else its reason whole). It is told once per node and cause; its mark is
"sticky": kept past :data:`KEEP_S` while the refusal lasts, and removed once the node gets past its claim
(:func:`passed`), so a later refusal is told again, as is another cause (another key); a node that never does
(deleted while refused) loses it after :data:`STICKY_KEEP_S` (a refusal that lasts is told again then). Each run's result still
shows the node failed.

A stop record (a node that ended ``drain-timeout`` or ``failed``: the pool's rollout waits for a person) is told as
``rollout-stopped`` by the run that wrote it, and by any later run that reads it (its pool halted by it or not)
while no mark shows it told (that run may have been killed between the record and its line): level-triggered. Its mark,
:func:`stop_id` of the node -> :func:`stop_key`, names the node and the run that wrote the record (the record's
owner; a run writes one stop per node), so the same record is told once and a new one, even of the same node, is
news. It is sticky while the record lasts (a stop waits days for a person), at most :data:`STICKY_KEEP_S` (a stop
that waits longer is told again, once a month), removed once the node gets past its claim again (:func:`passed`). A stop an older version told left no mark: it is told once more after the upgrade.

One JSON document in the annotation :data:`MARK_ANNOTATION` of the Lease :data:`MARK_LEASE`, in the namespace
the run record lives in (a node under a lifecycle hook is not a Kubernetes Node yet: there is no Node to mark):
``{"version": 1, "nodes": {instance id: {"key": digest, "at": epoch seconds[, "sticky": true]}}}``, one mark per
node (its last failure told), kept :data:`KEEP_S` (a sticky one until its node passes, at most
:data:`STICKY_KEEP_S`: :func:`kept`) and at most :data:`MAX_NODES` of them, the newest.

Pure: no I/O. What is read back passes the reader rule (node_bootstrap/outside.py): bounded and checked. A
document that is not ours reads as no marks, an entry that is not ours as no mark for that node: "not told",
so the failure is told (again) and the document replaced. A mark may only ever cost a repeated alert, never a
lost one; but a sticky mark whose removal failed (the API server did not answer) keeps the node's next refusal
for the same cause untold, which the run's result and the node's Event still show.
"""

import hashlib
from typing import Any, Dict, Iterable, Mapping, Optional, Set

from node_bootstrap.outside import OutsideDataError, loads

from functions.decision.claim_rules import MAX_CLOCK_AHEAD_S
from functions.decision.waves import MAX_EPOCH  # 2100-01-01, the rollout record's bound
from functions.base.textsafe import one_line

MARK_LEASE = "ack-mig-hook-alerts"
MARK_ANNOTATION = "ack-mig-hook/alerted"
VERSION = 1
# FC gives up on an asynchronous event after at most a day (its maximum event age): a mark older than two is
# no retry's any more.
KEEP_S = 2 * 86400.0
# A sticky mark goes when its node passes its claim; one whose node never does (deleted while refused) went only
# when 512 newer marks pushed it out. Thirty days: a refusal that lasts longer is told again, once a month.
STICKY_KEEP_S = 30 * 86400.0
MAX_NODES = 512  # about 100 bytes each: well under the 256 KiB Kubernetes allows an object's annotations
MAX_TEXT = 128 * 1024
MAX_ID = 64  # an ECS instance id is 22 characters
# The codes of failures that every run meets again until their cause goes (module docstring): the executor's
# CLAIM_REFUSED (not imported: this pure module stays below functions.rollout).
STICKY_CODES = ("claim-refused",)
Marks = Dict[str, Dict[str, Any]]


def failure_of(node: Mapping[str, Any]) -> str:
    """What failed, as ``node-failed`` groups it: the node's code, else the first words of its reason."""
    return str(node.get("code") or str(node.get("reason") or "").split(":", 1)[0][:40] or "failed")


def sticky(node: Mapping[str, Any]) -> bool:
    """Whether the node's failure is told once per cause, whichever run meets it (module docstring)."""
    return str(node.get("code") or "") in STICKY_CODES


def failure_key(run: str, node: Mapping[str, Any]) -> str:
    """The mark of one failure of one node in one run, or of a sticky one in any run (module docstring)."""
    if sticky(node):
        text = "\n".join(("sticky", str(node.get("instance_id") or ""), failure_of(node),
                          one_line(node.get("cause") or node.get("reason") or "")))
    else:
        text = "\n".join((str(run or ""), str(node.get("instance_id") or ""), failure_of(node)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


STOP_PREFIX = "stop:"  # the marks of stop records, beside the nodes' failure marks (keyed by instance id)


def stop_id(node_name: str) -> str:
    """The mark id of a node's stop record: its name, or a digest of a name too long for an id."""
    name = str(node_name or "")
    if len(STOP_PREFIX) + len(name) <= MAX_ID:
        return STOP_PREFIX + name
    return STOP_PREFIX + hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]


def stop_key(node_name: str, owner: str) -> str:
    """The mark of one stop record: the node and the run that wrote it (the record's owner). Not its step: a
    ``drain-refused`` node's record says ``failed``."""
    text = "\n".join(("stop", str(node_name or ""), str(owner or "")))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def read_text(text: Optional[str]) -> Marks:
    """The marks in the annotation's text ({} when there is none). OutsideDataError (one line) when the document
    is not one this function wrote; an entry that is not ours is left out (that node reads as not told)."""
    if not text:
        return {}
    doc = loads(text, "the alert marks (%s)" % MARK_ANNOTATION, max_bytes=MAX_TEXT, max_depth=4)
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), dict) or doc.get("version") != VERSION:
        raise OutsideDataError("the alert marks (%s) are not a version %d document" % (MARK_ANNOTATION, VERSION))
    out: Marks = {}
    for iid, mark in doc["nodes"].items():
        if not isinstance(mark, dict) or not isinstance(iid, str) or not 0 < len(iid) <= MAX_ID:
            continue
        key, at = mark.get("key"), mark.get("at")
        if isinstance(key, str) and len(key) == 32 and isinstance(at, (int, float)) and not isinstance(at, bool) \
                and 0 <= at <= MAX_EPOCH:
            out[iid] = {"key": key, "at": float(at)}
            if mark.get("sticky") is True:
                out[iid]["sticky"] = True
        if len(out) >= MAX_NODES:
            break
    return out


def told(marks: Marks, keys: Mapping[str, str]) -> Set[str]:
    """The instance ids whose failure in ``keys`` (instance id -> :func:`failure_key`) is marked told."""
    return {iid for iid, key in keys.items() if (marks.get(iid) or {}).get("key") == key}


def kept(marks: Marks, now: float) -> Marks:
    """``marks`` without those past their time (KEEP_S, a sticky one STICKY_KEEP_S): what still counts as told. A
    mark dated more than MAX_CLOCK_AHEAD_S after ``now`` (the API server's clock, which every mark is written on)
    is not ours: an age counted from it never grew, and it kept its node's failure told until its date."""
    return {iid: mark for iid, mark in marks.items() if mark["at"] <= now + MAX_CLOCK_AHEAD_S
            and now - mark["at"] <= (STICKY_KEEP_S if mark.get("sticky") else KEEP_S)}


def merge(marks: Marks, keys: Mapping[str, str], now: float, sticky_ids: Iterable[str] = ()) -> Marks:
    """``marks`` with each of ``keys`` marked told at ``now`` (a node's older mark replaced; ``sticky_ids``: those
    whose mark is sticky), those older than KEEP_S dropped (a sticky one STICKY_KEEP_S), the newest MAX_NODES kept. A sticky
    mark is not replaced by another failure's: the node has not got past its claim, and its refusal, met again,
    stays told (the other failure stays unmarked: a retry of the event may tell it again, never lose it)."""
    out = {iid: dict(mark) for iid, mark in kept(marks, now).items()}
    held = set(sticky_ids)
    for iid, key in keys.items():
        if iid not in held and (out.get(str(iid)[:MAX_ID]) or {}).get("sticky"):
            continue  # another failure of a node whose refusal lasts (a 5xx at its claim): left unmarked, a repeat
        out[str(iid)[:MAX_ID]] = dict({"key": key, "at": round(now, 3)}, **({"sticky": True} if iid in held else {}))
    newest = sorted(out, key=lambda iid: (-out[iid]["at"], iid))[:MAX_NODES]
    return {iid: out[iid] for iid in sorted(newest)}


def passed(marks: Marks, ids: Iterable[str]) -> Marks:
    """``marks`` without the sticky marks of ``ids``: nodes that got past their claim, whose next refusal is news."""
    gone = {str(iid)[:MAX_ID] for iid in ids}
    return {iid: mark for iid, mark in marks.items() if not (iid in gone and mark.get("sticky"))}


def write_text(marks: Marks) -> str:
    import json

    return json.dumps({"version": VERSION, "nodes": marks}, sort_keys=True, separators=(",", ":"))

