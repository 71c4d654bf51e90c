"""How one event ended, and what kind of event it was: the handler's output.

Plain standard library on purpose: an event that stage 1 (``functions.envelope``) already skips gets its
result from here without loading pydantic. The result is built by our own code, never parsed from input,
so it needs no validation; decisions inside it are pydantic models and dump themselves.
"""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

OUTCOMES = ("done", "skip", "error", "retry")


class Trigger(str, Enum):
    """What kind of thing happened. Each source maps onto exactly one of these."""

    SCALE_OUT = "scale-out"  # ESS scaling activity (EventBridge or CloudMonitor): instances were added
    LIFECYCLE_HOOK = "lifecycle-hook"  # ESS lifecycle hook: instances wait in Pending:Wait for our answer
    NODEPOOL_OPERATION = "nodepool-operation"  # ActionTrail: a node pool was created or scaled
    INSTANCE_RUNNING = "instance-running"  # ECS: an instance reached Running
    TIMER = "timer"  # periodic reconcile of every labelled pool
    MANUAL = "manual"  # someone invoked the function with the manual payload
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
    decisions: List[Any] = field(default_factory=list)  # functions.model.Decision
    nodes: Optional[List[Dict[str, Any]]] = None  # executor results, one per node; None when not executed
    # The autoscaler tags per pool (functions/autoscaler_sync.py); None when the event does not concern them.
    pool_tags: Optional[List[Dict[str, Any]]] = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError("outcome %r is not one of %s" % (self.outcome, ", ".join(OUTCOMES)))

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "trigger": self.trigger, "event_type": self.event_type, "event_id": self.event_id,
            "outcome": self.outcome, "reason": self.reason, "cluster_id": self.cluster_id,
            "dry_run": self.dry_run, "decisions": [d.model_dump(mode="json") for d in self.decisions],
        }
        if self.nodes is not None:
            out["nodes"] = self.nodes
        if self.pool_tags is not None:
            out["pool_tags"] = self.pool_tags
        return out
