"""How one event ended, and what kind of event it was: the handler's output.

Plain standard library on purpose: an event that stage 1 (``functions.pipeline.envelope``) already skips gets its
result from here without loading pydantic. The result is built by our own code, never parsed from input,
so it needs no validation; decisions inside it are pydantic models and dump themselves.
"""

import json
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

OUTCOMES = ("done", "skip", "error", "retry")
# A node's outcome, in the result's ``nodes`` and on its ``node result`` line (docs/troubleshooting.md, "Node
# outcomes"): what delivery makes of the node's answer (functions.delivery.outcome.OUTCOMES), what a rollout wave
# ends a node with (functions.rollout.executor) and a dry run's. With OUTCOMES, every ``outcome`` a log line holds:
# ``ack-mig-hook logs --outcome`` accepts these and no other (tests/function/test_remote_and_logs.py pins the
# producers to this list).
NODE_OUTCOMES = ("partitioned", "unchanged", "skipped", "failed", "reboot-required", "conflict", "destroy-required",
                 "dry-run", "deferred", "drain-timeout", "drain-refused", "gone")

# The result as the handler returns it (compact JSON) is at most this many bytes: FC keeps it with the
# async invocation record and the caller reads it whole. A result that would be larger (a pool of
# thousands of nodes, each with its GPUs) is grouped instead, see HandlerResult.to_json.
MAX_RESULT_BYTES = 128 * 1024
MAX_GROUP_REASON = 1000  # characters of one reason (or of the event's reason) in a grouped result


class Trigger(str, Enum):
    """What kind of thing happened. Each source maps onto exactly one of these."""

    SCALE_OUT = "scale-out"  # ESS scaling activity (EventBridge or CloudMonitor): instances were added
    LIFECYCLE_HOOK = "lifecycle-hook"  # ESS lifecycle hook: instances wait in Pending:Wait for our answer
    NODEPOOL_OPERATION = "nodepool-operation"  # ActionTrail: a node pool was created or scaled
    INSTANCE_RUNNING = "instance-running"  # ECS: an instance reached Running
    TIMER = "timer"  # periodic reconcile of every labelled pool
    MANUAL = "manual"  # someone invoked the function with the manual payload
    POD_UNSCHEDULABLE = "pod-unschedulable"  # ACK (kube-eventer): the scheduler found no room for a pod
    TEST = "test"  # ESS lifecycle hook test notification: acknowledged, nothing to do
    UNKNOWN = "unknown"  # not recognised (only ever in a skip or error result)


@dataclass(frozen=True)
class HandlerResult:
    """How one event ended: exactly one of done (decided, and executed unless nothing to do), skip (not
    ours or nothing to do, with the reason), error (the event or configuration is wrong: retrying will not
    help) or retry (a transient cloud failure: the handler raises so FC retries the async invocation)."""

    trigger: str
    outcome: str
    reason: str = ""
    event_type: Optional[str] = None
    event_id: Optional[str] = None
    cluster_id: Optional[str] = None
    dry_run: bool = False
    decisions: List[Any] = field(default_factory=list)  # functions.base.model.Decision
    nodes: Optional[List[Dict[str, Any]]] = None  # executor results, one per node; None when not executed
    # The autoscaler tags per pool (functions/pipeline/autoscaler_sync.py); None when the event does not concern them.
    pool_tags: Optional[List[Dict[str, Any]]] = None
    # Pool id -> its one line, for each pool whose nodes ACK (or the API server) refused to list for good: that
    # pool failed alone, with no decision, so neither ``decisions`` nor ``outcome`` shows it. Kept apart from
    # ``reason`` so a reader (``invoke --strict``, an alert on the result) never parses text, and so it
    # survives an outcome raised later in the run, whose reason replaces the one that named the pool.
    refused_pools: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError("outcome %r is not one of %s" % (self.outcome, ", ".join(OUTCOMES)))

    def with_refused(self, refused: Mapping[str, str]) -> "HandlerResult":
        """This result with the pools of ``refused`` (pool id -> line) among its ``refused_pools``: a step that
        read the pools before the one that made this result (a pod event's choice, an earlier round). Where
        both name a pool, this result's line stands: it was written later and says what came of it."""
        if not refused:
            return self
        return replace(self, refused_pools={**refused, **self.refused_pools})

    def to_json(self) -> Dict[str, Any]:
        """Every decision and node result in full when that fits in MAX_RESULT_BYTES; otherwise the
        grouped form: ``decision_groups`` (action, reason, count, instance_ids) and ``node_groups``
        (outcome, reason, count, instance_ids), one entry per distinct reason in first-seen order, plans
        and GPU details left out (each decision and node result has its own log line), ``refused_pools`` kept
        (each line cut to MAX_GROUP_REASON) and ``grouped`` saying what was left out. Either way the JSON text
        is at most MAX_RESULT_BYTES."""
        head: Dict[str, Any] = {
            "trigger": self.trigger, "event_type": self.event_type, "event_id": self.event_id,
            "outcome": self.outcome, "reason": self.reason, "cluster_id": self.cluster_id,
            "dry_run": self.dry_run,
        }
        if self.pool_tags is not None:  # one entry per pool: small, and kept in the grouped form too
            head["pool_tags"] = self.pool_tags
        if self.refused_pools:  # only when a pool was refused: most results never have one
            head["refused_pools"] = dict(self.refused_pools)
        out = dict(head, decisions=[d.model_dump(mode="json") for d in self.decisions])
        if self.nodes is not None:
            out["nodes"] = self.nodes
        full = _size(out)
        if full <= MAX_RESULT_BYTES:
            return out
        return _grouped(head, self.decisions, self.nodes, full)


def _size(value: Any) -> int:
    return len(json.dumps(value, default=str))  # as the handler writes it (ASCII, no indentation)


def _cut(text: Any, limit: int = MAX_GROUP_REASON) -> str:
    text = str(text if text is not None else "")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _groups(rows: Iterable[Tuple[str, str, str]], kind: str) -> List[Dict[str, Any]]:
    """(kind value, reason, instance id) rows -> one group per (kind value, reason), first-seen order."""
    groups: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for value, reason, instance_id in rows:
        group = groups.setdefault((value, reason), {kind: value, "reason": reason, "count": 0, "instance_ids": []})
        group["count"] += 1
        group["instance_ids"].append(instance_id)
    return list(groups.values())


def _grouped(head: Dict[str, Any], decisions: List[Any], nodes: Optional[List[Dict[str, Any]]],
             full: int) -> Dict[str, Any]:
    """The grouped form within MAX_RESULT_BYTES: first every group without its ids (action or outcome,
    reason, count) while they fit, then the groups' instance ids in order while they fit. ``count``
    is always the real number; what did not fit is counted in ``grouped``."""
    refused = head.get("refused_pools") or {}
    out = dict(head, reason=_cut(head["reason"]))
    note = {"full_bytes": full, "limit_bytes": MAX_RESULT_BYTES, "decisions": len(decisions),
            "nodes": len(nodes) if nodes is not None else None, "groups_left_off": 0,
            "instance_ids_left_off": 0, "why": "the full result would exceed limit_bytes: repeated reasons are "
                                               "grouped, plans and GPU details are in the log lines"}
    parts = [("decision_groups", _groups(((d.action, _cut(d.reason), d.instance_id) for d in decisions), "action"))]
    if nodes is not None:
        parts.append(("node_groups", _groups(((_cut(n.get("outcome"), 64), _cut(n.get("reason")),
                                               _cut(n.get("instance_id"), 64)) for n in nodes), "outcome")))
    for key, _ in parts:
        out[key] = []
    if refused:
        out["refused_pools"] = {}
        note["refused_pools_left_off"] = 0
    out["grouped"] = note
    # Room for the counters to grow to their largest values: measured with them at their widest.
    widest = dict(note, groups_left_off=10 ** 9, instance_ids_left_off=10 ** 9,
                  **({"refused_pools_left_off": 10 ** 9} if refused else {}))
    budget = MAX_RESULT_BYTES - _size(dict(out, grouped=widest))
    # The refused pools before the groups: a reader of the result (an alert) learns which pools failed from
    # them alone; each line is cut as a reason is.
    for pool_id, line in refused.items():
        cost = _size({pool_id: _cut(line)})  # its braces stand for the ", " between entries
        if cost <= budget:
            out["refused_pools"][pool_id] = _cut(line)
            budget -= cost
        else:
            note["refused_pools_left_off"] += 1
    kept = []
    for key, groups in parts:
        for group in groups:
            bare = dict(group, instance_ids=[])
            cost = _size(bare) + 2  # ", " between list items
            if cost <= budget:
                out[key].append(bare)
                kept.append((bare, group["instance_ids"]))
                budget -= cost
            else:
                note["groups_left_off"] += 1
                note["instance_ids_left_off"] += group["count"]
    for bare, instance_ids in kept:
        for number, instance_id in enumerate(instance_ids):
            cost = _size(instance_id) + 2
            if cost > budget:
                note["instance_ids_left_off"] += len(instance_ids) - number
                break
            bare["instance_ids"].append(instance_id)
            budget -= cost
    return out
