"""The result line node_bootstrap prints for the node runner, bounded (``ACK_MIG_RESULT_BYTES``).

Cloud Assistant keeps 24 KB of a command's output (DescribeInvocationResults' ``Dropped`` counts what it cut
off; which end it keeps is not documented): a result line past it is lost, and the node ends ``no-result``
though it partitioned its GPUs. The runner (functions/delivery/node_runner.py) therefore asks for a line of at
most ``ACK_MIG_RESULT_BYTES`` bytes, and :func:`bounded` keeps it so whatever the result holds. A B300 x 8
node with 7 instances per GPU and its boot unit writes 15.8 KB, kept whole; 16 GPUs, 30.5 KB, are compacted.
The same rule as functions/base/event_result.py's ``to_json`` (what the reader needs first, the rest grouped
or left off, a field saying so); node code cannot import ``functions``, hence its own.
"""

import json
import os
from typing import Any, Dict, List, Optional

RESULT_BYTES_ENV = "ACK_MIG_RESULT_BYTES"
# The fields the function reads from a result (functions/delivery/outcome.py), kept in a compacted result,
# each cut to a length far past what the function uses of it: (key, bytes of its JSON text).
HEAD = (("outcome", 64), ("changes", 64), ("bundle", 64), ("sequence", 4096), ("node_name", 253),
        ("command", 64), ("backend", 64))
# Then these, whole (a list: entry by entry) while they fit; after them the rest, by name. ``left`` and
# ``boot_unit`` the function reads too; ``gpus`` are grouped per profile first (see _grouped_gpu).
# ``error``'s message: the function keeps its first 300 characters, which take up to 1 800 bytes escaped.
MESSAGE_BYTES = 2000
FILL_ORDER = ("boot_unit", "left", "gpus", "labels", "node")
NOTE_ROOM = 1024  # bytes kept for ``compacted`` itself
MIN_BYTES = 10240  # the least a limit may be: HEAD and ``error`` at their longest (7 KB) and the note fit


def result_line(result):
    # type: (Dict[str, Any]) -> str
    """The JSON line for ``result``: bounded when the runner asked for it, whole otherwise (a person's
    ``--json``)."""
    limit = _limit(os.environ.get(RESULT_BYTES_ENV))
    return json.dumps(result, sort_keys=True) if limit is None else bounded(result, limit)


def _limit(text):
    # type: (Optional[str]) -> Optional[int]
    try:
        return max(MIN_BYTES, int(text)) if text else None
    except ValueError:
        return None


def _size(value):
    # type: (Any) -> int
    return len(json.dumps(value, sort_keys=True))  # ASCII (ensure_ascii): characters are bytes


def _short(value, chars):
    # type: (Any, int) -> Any
    """A head field as the function reads it, cut: numbers, booleans and null as they are, anything else
    as text whose JSON form (escapes counted: a non-ASCII character takes 6 bytes) is at most ``chars``
    bytes between its quotes."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if _size(text) <= chars + 2:
        return text
    kept = []  # type: List[str]
    used = 3  # the "..." that says it was cut
    for ch in text:
        used += _size(ch) - 2
        if used > chars:
            break
        kept.append(ch)
    return "".join(kept) + "..."


def _grouped_gpu(gpu):
    # type: (Any) -> Any
    """One GPU of the result without its per-instance detail and diagram: how many instances of each profile."""
    if not isinstance(gpu, dict):
        return gpu
    profiles = {}  # type: Dict[str, int]
    for inst in gpu.get("instances") if isinstance(gpu.get("instances"), list) else ():
        name = _short(inst.get("profile") if isinstance(inst, dict) else None, 64)
        name = name if isinstance(name, str) else str(name)
        profiles[name] = profiles.get(name, 0) + 1
    out = dict((k, gpu[k]) for k in ("index", "name", "mig_mode") if k in gpu)
    out["profiles"] = profiles
    return out


def bounded(result, limit):
    # type: (Dict[str, Any], int) -> str
    """``result`` as one JSON line of at most ``limit`` bytes. Whole when it fits (every real node so far);
    otherwise compacted: the fields the function reads first (HEAD, ``error``'s code and message, cut), then
    FILL_ORDER's and the other fields, each whole or, for a list, entry by entry while they fit, ``gpus``
    grouped per profile (per-instance detail and diagrams left out), and ``compacted`` naming what was
    grouped or left off. Bounded whatever the node wrote: every addition is measured against the room left."""
    text = json.dumps(result, sort_keys=True)
    if len(text) <= limit:
        return text
    out = {}  # type: Dict[str, Any]
    for key, chars in HEAD:
        if key in result:
            out[key] = _short(result[key], chars)
    if "error" in result:
        error = result["error"]
        out["error"] = _short(error, MESSAGE_BYTES) if not isinstance(error, dict) else {
            "code": _short(error.get("code"), 64), "message": _short(error.get("message"), MESSAGE_BYTES)}
    left_off = []  # type: List[str]
    note = {"full_bytes": len(text), "limit_bytes": limit, "left_off": left_off}  # type: Dict[str, Any]
    room = limit - NOTE_ROOM - _size(dict(out, compacted={}))
    rest = sorted(k for k in result if k not in out and k != "error")
    for key in [k for k in FILL_ORDER if k in rest] + [k for k in rest if k not in FILL_ORDER]:
        value = result[key]
        if key == "gpus" and isinstance(value, list):
            value = [_grouped_gpu(g) for g in value]
            note["gpus"] = "grouped: instances counted per profile; per-instance detail and diagrams left out"
        cost = _size({key: value})  # its braces stand for the ", " before it
        if cost <= room:
            out[key], room = value, room - cost
            continue
        if not isinstance(value, list) or _size({key: []}) > room:
            left_off.append(_short(key, 40))
            continue
        kept = []  # type: List[Any]
        room -= _size({key: []})
        for entry in value:
            if _size(entry) + 2 > room:
                break
            kept.append(entry)
            room -= _size(entry) + 2
        out[key] = kept
        left_off.append("%s[%d:]" % (_short(key, 40), len(kept)))
    more = 0  # names that did not fit NOTE_ROOM themselves (only a node writing hundreds of odd keys)
    while _size(note) > NOTE_ROOM - 40:
        left_off.pop()
        more += 1
    if more:
        note["left_off_more"] = more
    out["compacted"] = note
    return json.dumps(out, sort_keys=True)
