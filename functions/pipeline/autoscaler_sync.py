"""The pipeline's autoscaler step: bring the node pool tags ACK's cluster-autoscaler reads in line with each
pool's layout (functions/decision/autoscaler_tags.py decides, purely; this module asks and writes).

Runs for the events that may change what a pool should advertise or that reconcile everything: the timer,
a manual run, and ACK node pool operations (a label changed, auto scaling switched on, a pool created).
Each pool of the event gets one entry in the result's ``pool_tags``; nothing is written for a pool already
in sync, so the ActionTrail event our own ModifyClusterNodePool causes finds every pool in sync and ends
there. A pool whose tags cannot be written (limits, the API refuses, the API keeps failing) gets its
reason in its entry and a warning line; the event and its nodes go on.
"""

from typing import Any, Dict, List, Mapping, Optional

from functions.decision.autoscaler_tags import MODE_OFF, plan_pool
from functions.base.errors import EventOutcome
from functions.base.event_result import Trigger

# A pod event plans an auto pool as the timer does, so it sets that pool's tags too: a pool with no room (or
# no node) is asked to scale out within seconds, not at the next timer tick. An auto pool no step planned
# is left as it is (autoscaler_tags.wanted), whatever the trigger.
TAG_TRIGGERS = (Trigger.TIMER, Trigger.MANUAL, Trigger.NODEPOOL_OPERATION, Trigger.POD_UNSCHEDULABLE)


def sync_pool_tags(request: Any, lookup: Any, cluster: str, settings: Any, dry_run: bool,
                   log: Any, new_nodes: Optional[Mapping[str, Any]] = None,
                   scope: str = "") -> Optional[List[Dict[str, Any]]]:
    """One entry per pool of the event that is labelled or carries tags of ours; None for an event this
    step does not concern. Raises only what listing the pools raises (the event cannot go on without
    them either). ``new_nodes``: per auto pool id, the planner's new-node layout (``Plan.new_node``):
    such a pool's tags name it (functions/decision/autoscaler_tags.py auto_pool_resources). ``scope``: the
    one pool to sync (a pod event's pool: the others are the timer's), else the request's. The pools are
    listed here, after the caller's claims: an earlier list may predate tags another invocation wrote."""
    if request.trigger not in TAG_TRIGGERS:
        return None
    mode = settings.autoscaler_tags
    if mode == MODE_OFF:
        return []
    pools = list(lookup.nodepools(cluster))
    if scope:
        pools = [p for p in pools if p.nodepool_id == scope]
    elif request.nodepool_id or request.scaling_group_id:
        pools = [p for p in pools if p.nodepool_id == request.nodepool_id
                 or (request.scaling_group_id and p.scaling_group_id == request.scaling_group_id)]
    writer = getattr(lookup, "set_nodepool_tags", None)  # a snapshot (--inventory) cannot be written
    out: List[Dict[str, Any]] = []
    for pool in pools:
        decided = plan_pool(pool, mode, (new_nodes or {}).get(pool.nodepool_id))
        if decided is None:
            continue
        written, reason = False, decided.reason
        if decided.write is not None:
            if dry_run:
                reason += "; dry run: not written"
            elif writer is None:
                reason += "; a cluster snapshot: not written"
            else:
                try:
                    done = _checked(lookup, cluster, pool, mode, (new_nodes or {}).get(pool.nodepool_id), writer)
                    written = done.written
                    reason += ("; written (ModifyClusterNodePool)" if written
                               else "; in sync when read again (someone else wrote them meanwhile): not written")
                except EventOutcome as exc:  # refused (ConfigurationError) or kept failing (RetryLater)
                    reason = ("the autoscaler tags were not written: %s; the next event or reconcile tries again, "
                              "partitioning goes on" % exc.reason)
        entry = decided.to_json(written=written, reason=reason)
        trouble = not decided.in_sync and not written and not dry_run and writer is not None
        (log.warning if trouble else log.info)("pool tags", nodepool_id=pool.nodepool_id, in_sync=decided.in_sync,
                                               written=written, set=entry["set"], remove=entry["remove"],
                                               reason=reason)
        out.append(entry)
    return out


def _checked(lookup: Any, cluster: str, pool: Any, mode: str, new_node: Any, writer: Any) -> Any:
    """The pool's tags written as functions/cloud/checked_write.py writes a list: read again before the write
    (a tag the console sets meanwhile is kept: the list is computed again from it) and read back after."""
    from functions.base.errors import ConfigurationError
    from functions.cloud.checked_write import checked_write

    def read() -> Any:
        fresh = next((p for p in lookup.nodepools(cluster) if p.nodepool_id == pool.nodepool_id), None)
        if fresh is None:
            raise ConfigurationError("node pool %s is gone from the cluster" % pool.nodepool_id)
        return fresh

    def change(current: Any) -> Any:
        decided = plan_pool(current, mode, new_node)
        return None if decided is None else decided.write

    return checked_write("the autoscaler tags of node pool %s" % pool.nodepool_id, read, change,
                         lambda tags: writer(cluster, pool.nodepool_id, tags),
                         key=lambda current: list(current.tags.items()))
