"""The point of change: the one place where decisions turn into work on nodes.

Everything before it (intake, lookup, decisions) is the same for a real run and a dry run; a dry run is
simply a different executor, chosen once here, never an ``if dry_run`` further down.

``Executor.execute(request, decisions)`` returns one result per node, each at least
``{"instance_id", "outcome", "reason", "gpus"}``. It is called for every request that ends ``done``, even
when no decision says ``partition``: a lifecycle hook must be answered whatever the decisions are.
"""

import importlib
from typing import Any, Dict, List, Optional, Protocol, Sequence

from functions.base.model import ACTION_PARTITION, Decision, Request
from functions.base.settings import Settings

NodeResult = Dict[str, Any]


class Executor(Protocol):
    def execute(self, request: Request, decisions: Sequence[Decision]) -> List[NodeResult]:
        ...


class DryRunExecutor:
    """Touches nothing. Reports, for each ``partition`` decision, outcome ``dry-run`` and what would have
    happened, so a dry run shows the same per-node list a real run would (skips and errors have no node
    result: nothing would have been done to them either). A lifecycle hook is left unanswered: ESS applies
    its default result when the heartbeat times out."""

    def execute(self, request: Request, decisions: Sequence[Decision]) -> List[NodeResult]:
        results = []
        for d in decisions:
            if d.action != ACTION_PARTITION:
                continue
            if d.gpu_layouts:  # an auto pool's per-GPU targets (functions/pipeline/auto_pool.py)
                results.append({"instance_id": d.instance_id, "outcome": "dry-run", "gpus": None,
                                "reason": "dry run: would give %s" % "; ".join(
                                    "GPU %d %s" % (g["index"], "-".join(i["profile"] for i in g["layout"]))
                                    for g in d.gpu_layouts["gpus"])})
                continue
            if d.plan is not None:
                what, gpus = d.plan.sequence, d.plan.gpus
            else:  # GPU model known only on the node: report the label as written
                what, gpus = "%s=%s" % (d.partition.kind, d.partition.value) if d.partition else "?", None
            results.append({"instance_id": d.instance_id, "outcome": "dry-run",
                            "reason": "dry run: would partition each GPU as %s" % what, "gpus": gpus})
        return results


class UnavailableExecutor:
    """Stands in when the delivery module cannot be imported: every node fails, visibly, with the reason."""

    def __init__(self, reason: str = "delivery not available") -> None:
        self.reason = reason

    def execute(self, request: Request, decisions: Sequence[Decision]) -> List[NodeResult]:
        return [{"instance_id": d.instance_id, "outcome": "failed", "reason": self.reason, "gpus": None}
                for d in decisions if d.action == ACTION_PARTITION]


DELIVERY_MODULE = "functions.delivery.node_executor"


def make_executor(settings: Settings, dry_run: bool) -> Executor:
    """DryRunExecutor for a dry run, else the delivery executor, imported only now: the cloud SDKs and
    paramiko it needs are never loaded for an event that ends before execution."""
    if dry_run:
        return DryRunExecutor()
    try:
        module = importlib.import_module(DELIVERY_MODULE)
    except ModuleNotFoundError as exc:
        # Only the delivery module itself missing means "not available"; a missing dependency inside it is
        # a broken install and must surface as such.
        if exc.name not in (DELIVERY_MODULE, "functions.delivery"):
            raise
        return UnavailableExecutor()
    delivery_executor: Optional[Any] = getattr(module, "DeliveryExecutor", None)
    if delivery_executor is None:
        return UnavailableExecutor("delivery not available: %s has no DeliveryExecutor" % DELIVERY_MODULE)
    return delivery_executor.from_settings(settings)
