"""The one path every event takes: intake -> lookup -> decide -> execute -> result.

The FC handler, ``ack-mig-hook invoke`` and the demo all call :func:`run_event`; nothing about an event is
decided anywhere else. Each event ends in exactly one outcome (done, skip, error, retry), logged as one
summary line plus one line per decision.

The cloud SDKs are imported only once an event needs the cluster (``functions.cloud.cs_lookup``) or a node
(the delivery executor), so an irrelevant event costs no more than pydantic.
"""

import os
import time
import uuid
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from functions.pipeline.envelope import read_envelope
from functions.base.errors import BadInventory, ConfigurationError, EventOutcome, SkipEvent
from functions.base.logs import JsonLogger, decision_level, node_code, node_level, stdlib_logs_into
from functions.base.event_result import HandlerResult, Trigger
from functions.base.settings import Settings, SettingsError, load_settings
from functions.base.textsafe import one_line

if TYPE_CHECKING:  # the pydantic side loads only for events that pass stage 1 (see run_event)
    from functions.cloud.cluster import ClusterLookup
    from functions.pipeline.point_of_change import Executor
    from functions.cloud.membership import Membership
    from functions.base.model import Decision, Node, NodePool, Request

Target = Tuple[str, Optional["Node"], Optional["NodePool"]]
TargetOrDecision = Union[Target, "Decision"]
InventoryArg = Union[None, str, "os.PathLike[str]", "ClusterLookup"]


def make_logger(settings: Settings, context: Any = None, **fields: Any) -> JsonLogger:
    request_id = getattr(context, "request_id", None) or fields.pop("request_id", None) or uuid.uuid4().hex
    return JsonLogger(settings.log_level, secrets=settings.secrets(), request_id=request_id,
                      function=settings.function_name or None, **fields)


def _lookup(inventory: InventoryArg, settings: Settings) -> "ClusterLookup":
    from functions.cloud.cluster import InventoryLookup

    if inventory is None:
        from functions.cloud.cs_lookup import CsLookup  # the SDK loads here, only for events that reach the cluster

        return CsLookup(settings)
    if isinstance(inventory, (str, os.PathLike)):
        return InventoryLookup.from_file(os.fspath(inventory))
    return inventory


def _cluster_id(request: "Request", settings: Settings, lookup: "ClusterLookup") -> str:
    snapshot = getattr(lookup, "cluster_id", None)
    if request.cluster_id and settings.cluster_id and request.cluster_id != settings.cluster_id:
        # ActionTrail sees every cluster of the account; the function serves the one it is deployed for
        # (its RAM policy covers only that one), so another cluster's operation is not an error.
        raise SkipEvent("the event is about cluster %s; this function serves %s (ACK_MIG_CLUSTER_ID)"
                        % (request.cluster_id, settings.cluster_id), request.trigger.value, request.event_type)
    cluster = request.cluster_id or settings.cluster_id or snapshot
    if not cluster:
        raise ConfigurationError("no cluster id: the event names none; set ACK_MIG_CLUSTER_ID",
                                 request.trigger.value, request.event_type)
    if snapshot and cluster != snapshot:
        raise ConfigurationError("the event is about cluster %s but the inventory is a snapshot of %s"
                                 % (cluster, snapshot), request.trigger.value, request.event_type)
    return cluster


def _membership(lookup: "ClusterLookup", settings: Settings) -> "Membership":
    """Who answers "is this instance / hook of that scaling group": the snapshot when the lookup is one
    (it knows Auto Scaling's facts too), else Auto Scaling itself."""
    if hasattr(lookup, "scaling_members") and hasattr(lookup, "lifecycle_hook_group"):
        return lookup  # type: ignore[return-value]
    from functions.cloud.membership import EssMembership

    return EssMembership.from_settings(settings)


def _target_problem(instance_id: str, node: Optional["Node"]) -> Optional[str]:
    """Why a target cannot go into a node command, checked by the command's own rules (a node name or
    instance id from the API that fails them would otherwise fail the whole batch), or None."""
    from functions.delivery.node_script import CommandError, encode_names

    try:
        # A node that has not joined yet has no name: a stand-in that passes, so its id alone is checked.
        encode_names({instance_id: node.node_name if node is not None and node.node_name else "x"})
    except CommandError as exc:
        return "%s; this target is left out, the others go on" % exc
    return None


class AutoPoolNamed(Exception):
    """The event names an auto pool (its pool id or scaling group): its step plans it (functions/pipeline/auto_pool.py)."""

    def __init__(self, pool_id: str) -> None:
        super().__init__(pool_id)
        self.pool_id = pool_id


def resolve_targets(request: "Request", lookup: "ClusterLookup", cluster: str,
                    membership: Optional[Callable[[], "Membership"]] = None, *,
                    refused: Dict[str, str]) -> List[TargetOrDecision]:
    """Which instances the event concerns, each with its node (None until it is one) and its pool, in the
    order the event named them; a target already decided here (it failed validation, or Auto Scaling does
    not confirm it) comes as its Decision. ``membership`` gives the Auto Scaling check (built on first use).
    ``refused`` gets one line per labelled pool whose node list ACK refused for good (that pool has no
    target; the others do: ``functions.cloud.cluster.pool_nodes``)."""
    from functions.cloud.cluster import pool_nodes
    from functions.decision.decide import has_partition_label
    from functions.decision.layout import LAYOUT_LABEL
    from functions.base.model import ACTION_ERROR, ACTION_SKIP, Decision

    ask = membership or (lambda: _membership(lookup, load_settings()))
    invalid: List[TargetOrDecision] = [Decision(instance_id=t.target, action=ACTION_ERROR, reason=t.reason)
                                       for t in request.invalid_targets]
    nodes_by_id = {}
    if request.instance_ids:
        nodes_by_id = {n.instance_id: n for n in lookup.nodes(cluster, instance_ids=request.instance_ids)}
        if not nodes_by_id and not (request.nodepool_id or request.scaling_group_id or request.lifecycle
                                    or invalid):
            # e.g. any ECS instance of the account reaching Running: one API call, then done with it.
            raise SkipEvent("%s %s not a node of cluster %s" % (", ".join(request.instance_ids),
                                                               "is" if len(request.instance_ids) == 1 else "are",
                                                               cluster), request.trigger.value, request.event_type)
    pools = lookup.nodepools(cluster)
    by_id = {p.nodepool_id: p for p in pools}
    by_group = {p.scaling_group_id: p for p in pools if p.scaling_group_id}
    named = by_id.get(request.nodepool_id or "") or by_group.get(request.scaling_group_id or "")
    if (request.nodepool_id or request.scaling_group_id) and named is None:
        what = ("node pool %s" % request.nodepool_id if request.nodepool_id
                else "scaling group %s" % request.scaling_group_id)
        # A lifecycle hook of a group that is not one of our pools belongs to someone else (the rule matches
        # every scaling group of the account): answering it would release their instances early.
        raise SkipEvent("%s is not a node pool of cluster %s%s" % (
            what, cluster, "; its lifecycle hook is left for its owner" if request.lifecycle else ""),
            request.trigger.value, request.event_type)
    if named is not None and request.lifecycle is None and LAYOUT_LABEL in named.labels:
        # A node pool operation, a manual run or a scale-out of an auto pool: its step, not the labelled
        # pipeline (an auto pool has no partition label by design). A lifecycle hook is installed for
        # labelled pools only, and is left below as any unlabelled pool's.
        raise AutoPoolNamed(named.nodepool_id)
    if request.lifecycle is not None and (named is None or not has_partition_label(named)):
        raise SkipEvent("lifecycle hook %s is not for a node pool with a partition label; left for its owner"
                        % request.lifecycle.lifecycle_hook_id, request.trigger.value, request.event_type)
    if request.lifecycle is not None and named is not None:
        # The event's hook id and group travel side by side with nothing tying them: Auto Scaling must say
        # the hook is this group's, or answering it could continue or abandon someone else's instances.
        hook = request.lifecycle.lifecycle_hook_id
        group = named.scaling_group_id or ""
        owner = ask().lifecycle_hook_group(hook, group) if group else None
        if not group or owner != group:
            raise SkipEvent("lifecycle hook %s is not a hook of scaling group %s (Auto Scaling %s); left "
                            "unanswered" % (hook, group or "(none: pool %s has none)" % named.nodepool_id,
                                            "knows no such hook" if owner is None else "says it is %s's" % owner),
                            request.trigger.value, request.event_type)

    if request.instance_ids or invalid:  # the event named its targets (even if all of them are invalid)
        # Only Auto Scaling names instances that are not nodes yet (its own new instances, of the pool's
        # scaling group), and only once Auto Scaling confirms that. Any other source must name nodes of this
        # cluster: a manual payload naming some other instance next to a pool id must not get a root command.
        from_scaling_group = request.trigger in (Trigger.SCALE_OUT, Trigger.LIFECYCLE_HOOK)
        unknown = [i for i in request.instance_ids if i not in nodes_by_id]
        group = named.scaling_group_id if named is not None else None
        # A pool without a partition label skips its instances anyway: Auto Scaling need not be asked then.
        check = from_scaling_group and named is not None and has_partition_label(named)
        confirmed = ask().scaling_members(group, unknown) if check and unknown and group else set()
        targets: List[TargetOrDecision] = []
        for instance_id in request.instance_ids:
            node = nodes_by_id.get(instance_id)
            if node is not None:
                # A node's pool is its own: one in no pool (a dedicated cluster's master, an old worker) is
                # skipped, whatever pool or scaling group the event names.
                pool = by_id.get(node.nodepool_id) if node.nodepool_id else None
            elif check and named is not None and instance_id not in confirmed:
                targets.append(Decision(instance_id=instance_id, nodepool_id=named.nodepool_id, action=ACTION_SKIP,
                                        reason="instance is not a node of cluster %s and Auto Scaling does not list "
                                               "it in scaling group %s%s" % (
                                                   cluster, group or "(none)", "" if group else
                                                   " (node pool %s has no scaling group)" % named.nodepool_id)))
                continue
            else:
                pool = named if from_scaling_group else None
            targets.append((instance_id, node, pool))
        return targets + invalid

    if named is not None:
        if not has_partition_label(named):
            # Most scale-outs in a cluster are of pools without MIG: end them without listing nodes.
            raise SkipEvent("node pool %s has no partition label" % named.nodepool_id, request.trigger.value,
                            request.event_type)
        chosen = [named]
    else:
        chosen = [p for p in pools if has_partition_label(p)]  # timer, manual without a pool
        if not chosen:
            raise SkipEvent("no node pool of cluster %s carries a partition label" % cluster,
                            request.trigger.value, request.event_type)
    targets = []
    for pool in chosen:
        targets.extend((n.instance_id, n, pool) for n in pool_nodes(lookup, cluster, pool.nodepool_id, refused))
    return targets + invalid


def decide_targets(targets: Sequence[TargetOrDecision], cluster: str) -> List["Decision"]:
    """A Decision for each target: the ones resolve_targets already decided as they are; every other one
    checked against the node command's rules (alone: one bad name never fails the batch), then decided."""
    from functions.decision.decide import decide_instance
    from functions.base.model import ACTION_ERROR, Decision

    out = []
    for target in targets:
        if isinstance(target, Decision):
            out.append(target)
            continue
        instance_id, node, pool = target
        problem = _target_problem(instance_id, node)
        if problem is not None:
            pool_id = (node.nodepool_id if node else None) or (pool.nodepool_id if pool else None)
            out.append(Decision(instance_id=instance_id, node_name=node.node_name if node else None,
                                nodepool_id=pool_id, action=ACTION_ERROR, reason=problem))
            continue
        out.append(decide_instance(instance_id, node, pool, cluster))
    return out


def _autoscaler_tags(request: "Request", lookup: "ClusterLookup", cluster: str, settings: Settings, dry_run: bool,
                     log: JsonLogger) -> Optional[List[dict]]:
    """The node pool tags ACK's cluster-autoscaler reads, brought in line with each pool's layout before the
    nodes are decided (a pool whose label was removed has no targets, but its tags must still go)."""
    from functions.pipeline.autoscaler_sync import sync_pool_tags

    return sync_pool_tags(request, lookup, cluster, settings, dry_run, log)


def _summary(decisions: Sequence[Any]) -> str:
    counts = {}
    for d in decisions:
        counts[d.action] = counts.get(d.action, 0) + 1
    return ", ".join("%d %s" % (n, a) for a, n in sorted(counts.items())) or "no instances"


def _without_kubernetes(decisions: Sequence[Any], rollout: Any) -> Tuple[str, str]:
    """(outcome, reason) of an event that ran: ``done``, or ``retry`` when the Kubernetes API could not be
    used (``functions.rollout.run.prepare`` then gives a Rollout without a backend and defers every node
    it could not tell apart), or failed or refused (RBAC) a node's claim or failed after it
    (``Rollout.held_up``, each cause said once): the event did not do its work, FC retries it, and
    ``invoke``/``status`` exit non-zero instead of reporting a quiet run with deferred nodes."""
    summary = _summary(decisions)
    held_up = getattr(rollout, "held_up", None) or {}
    if rollout is not None and held_up:  # nodes held up for a cause that is not theirs: told once
        return "retry", "%s; %s" % (summary, "; ".join(held_up[k] for k in sorted(held_up)))
    if rollout is None or rollout.kube is not None:
        return "done", summary
    held = [d for d in decisions if d.action == "defer"]
    if not held:
        return "done", summary
    return "retry", "%s; %d node%s deferred because %s" % (summary, len(held), "" if len(held) == 1 else "s",
                                                          held[0].reason)


def _with_refused(outcome: str, reason: str, decisions: Sequence[Any], refused: Dict[str, str]) -> Tuple[str, str]:
    """(outcome, reason) once the pools ACK refused to list for good are counted (``refused``: pool id -> line),
    by the auto pool tick's rule. A run that decided nothing and was refused a pool it was to decide ends
    ``error`` with those lines (that pool's own event, or every pool refused alike: a role without
    cs:DescribeClusterNodes): ``done`` with nothing decided reads as "nothing to do", and no alert on ``event
    error`` would fire for as long as ACK refuses. A run that decided other nodes keeps their outcome with the
    lines added (``done``; ``retry`` when the Kubernetes API could not be used, and a retry lists every pool
    again): ``error`` would say the event was not carried out when those nodes were, and hide the retry the
    others need; the refused pool is named in the reason and in its WARNING log line."""
    if not refused:
        return outcome, reason
    lines = "; ".join(refused.values())
    if not decisions:
        return "error", lines
    return outcome, "%s; %s" % (reason, lines)


def _node_line(log: JsonLogger, n: dict, pools: dict) -> None:
    """One ``node result`` line: the node, its pool, the outcome and its code, how long this invocation spent on
    it (``duration_ms``: 0 for a node it did not run) and the reason, at the outcome's level
    (functions.base.logs.node_level: a failure is ERROR, so an alert on ERROR sees it)."""
    iid = n.get("instance_id")
    log.log(node_level(n.get("outcome")), "node result", instance_id=iid, node_name=n.get("node_name") or None,
            nodepool_id=pools.get(iid), outcome=n.get("outcome"), code=node_code(n),
            duration_ms=n.get("duration_ms") or 0, wave=n.get("wave"), reason=n.get("reason"))


def _node_counts(nodes: Optional[Sequence[dict]]) -> dict:
    counts: dict = {}
    for n in nodes or []:
        counts[str(n.get("outcome"))] = counts.get(str(n.get("outcome")), 0) + 1
    return dict(sorted(counts.items()))


def _record(result: HandlerResult, kube: Any, log: JsonLogger, started: float) -> None:
    """The run record (functions/kube/last_run.py) at the end of an invocation: for a timer always (it is the
    heartbeat ``status`` and ``doctor`` judge the trigger by), for any other event only once it has used the API
    server (an event that never needed the cluster, most scale-outs of pools without MIG, costs no credential).
    A record that cannot be written is a WARNING line; the event's outcome stands."""
    from functions.kube.last_run import record_client, write

    backend = getattr(kube, "backend", kube)
    if result.trigger != Trigger.TIMER.value and not getattr(backend, "connected", True):
        return
    try:
        write(record_client(backend), result, str(log.context.get("request_id") or ""),
              (time.monotonic() - started) * 1000, redact=log.redact)
    except Exception as exc:  # noqa: BLE001 - a record never changes how the event ended
        log.warning("run record not written", reason="%s: %s" % (type(exc).__name__, one_line(exc, 200)))


class _Read:
    """What an auto pool's step read for the alerts: the stop records on its pools' nodes (no rollout owner: its
    own waves' stops are told by the next tick that reads them)."""

    def __init__(self) -> None:
        self.stops: List[Dict[str, Any]] = []
        self.owner = ""


class _Finished(Exception):
    """A step that ends the event with its own result (the auto pool timer), carried out of the try."""

    def __init__(self, result: HandlerResult) -> None:
        super().__init__("finished")
        self.result = result


def run_event(raw: Any, settings: Optional[Settings] = None, inventory: InventoryArg = None,
              executor: Optional["Executor"] = None, context: Any = None, dry_run: bool = False,
              logger: Optional[JsonLogger] = None, kube: Any = None,
              progress: Optional[Callable[[dict, int], None]] = None, record: bool = False) -> HandlerResult:
    """Run one event end to end and return how it ended. Never raises for an outcome (skip, bad event,
    configuration, transient cloud failure are all results); raises only for ``BadInventory`` (a bad
    ``--inventory`` file, the caller's input). Anything unexpected (a bug, input deep enough to exhaust
    the recursion limit) ends the event as ``error`` with one line naming the stage: never a traceback.

    ``raw``: the FC event (bytes), or str / decoded JSON. ``inventory``: a snapshot path or any
    ClusterLookup; None asks the ACK API. ``executor``: overrides ``make_executor`` (a dry run always uses
    DryRunExecutor). ``dry_run``: force a dry run (also ACK_MIG_DRY_RUN or the event's ``dry_run``).
    ``record``: write the run record on the cluster at the end (the FC handler; functions/kube/last_run.py).
    """
    started = time.monotonic()
    if settings is None:
        try:
            settings = load_settings(context=context)
        except SettingsError as exc:
            # No settings, so no known secrets: the message names the variable, never a credential's value. The
            # cluster the deployment set, read on its own: the failed-events alert keeps to cluster_id.
            from functions.base.settings import CLUSTER_ID, env_text

            (logger or JsonLogger(request_id=getattr(context, "request_id", None))).bind(
                cluster_id=env_text(CLUSTER_ID) or None).error("event error", outcome="error", reason=str(exc))
            return HandlerResult(trigger=Trigger.UNKNOWN.value, outcome="error", reason=str(exc))
    log = logger or make_logger(settings, context)
    request: Optional["Request"] = None
    waves: set = set()  # this event's rollout waves (instance ids) and whether it reconciles whole pools
    whole_pools = False
    planned: Any = None  # this event's rollout: the stop records that halted its pools (told unless marked told)
    pool_tags: Optional[List[dict]] = None  # the autoscaler step's entries (functions/pipeline/autoscaler_sync.py)
    pools: dict = {}  # instance id -> its pool, for the node result lines
    # pool id -> its line: ACK refused the list of its nodes for good. Here, not where the pools are read, so a
    # result made after a later failure (an EventOutcome, an internal error) still names those pools.
    refused: Dict[str, str] = {}
    shared = None  # the invocation's Kubernetes side, once the cluster is known (the run record uses it too)
    marks: Any = None  # the Kubernetes side the node-failed alerts are marked on (functions/pipeline/notify.py)
    bridge = ExitStack()
    stage = "reading the event"
    try:
        envelope = read_envelope(raw)  # stage 1, stdlib: ends irrelevant events before pydantic loads
        from functions.pipeline.point_of_change import DryRunExecutor, make_executor
        from functions.pipeline.intake import parse_envelope
        from functions.delivery.outcome import settle

        request = parse_envelope(envelope)
        log = log.bind(trigger=request.trigger.value, event_type=request.event_type, event_id=request.event_id)
        # Every invocation that got past stage 1 says it started: with the summary line at its end, a run that FC
        # stopped at its timeout shows as a start without an end, and the "no run" alert counts these.
        log.info("event start")
        # From here on the lookup and delivery modules' own log lines (standard logging) carry this event's
        # context and go through the same redaction.
        stdlib_lines = bridge.enter_context(stdlib_logs_into(log))
        effective_dry_run = bool(dry_run or settings.dry_run or request.dry_run)
        stage = "looking up the cluster"
        lookup = _lookup(inventory, settings)
        cluster = _cluster_id(request, settings, lookup)
        request = request.model_copy(update={"cluster_id": cluster, "dry_run": effective_dry_run,
                                             "region": request.region or settings.region or None})
        log = log.bind(cluster_id=cluster)
        stdlib_lines.logger = log  # delivery's and the rollout's lines ("rollout stopped") name the cluster too
        if kube is None and inventory is None:
            # One client for the live cluster, whichever step needs it (connected on first use, so an event that
            # never needs the API server fetches no credential), and the run record after it.
            from functions.rollout.run import kube_view

            kube = kube_view(None, lookup, settings, cluster)
        shared = marks = kube
        if request.auto_pools:  # the auto pool timer: its own step, nothing else (functions/pipeline/auto_pool.py)
            from functions.pipeline.auto_pool import run_tick

            stage = "planning the auto pools"
            planned = _Read()  # the stop records its node lists show: told as a labelled pool's are
            raise _Finished(run_tick(request, lookup, cluster, settings, effective_dry_run, executor, kube, log,
                                     stops=planned.stops))
        if request.pod is not None:  # a pod the scheduler could not place: its auto pool's step, coalesced
            from functions.pipeline.pod_event import run_pod_event

            stage = "planning the auto pools"
            raise _Finished(run_pod_event(request, lookup, cluster, settings, effective_dry_run, executor, kube, log,
                                          started=started))
        stage = "syncing the autoscaler tags"
        pool_tags = _autoscaler_tags(request, lookup, cluster, settings, effective_dry_run, log)
        membership: List["Membership"] = []  # built on first use: most events never ask Auto Scaling

        def ask() -> "Membership":
            if not membership:
                membership.append(_membership(lookup, settings))
            return membership[0]

        stage = "deciding"
        # Running nodes change only through the rollout, whatever the event (functions/rollout/run.py);
        # ``kube`` overrides the Kubernetes side (tests, the demo, status: a backend or a NodeView), else the
        # operator's --kubeconfig, the snapshot's kube_nodes or the live API server.
        from functions.kube.nodes import NodeView
        from functions.rollout.run import ROLLOUT_TRIGGERS, kube_view, prepare, removal_targets

        if kube is None:
            view = kube_view(inventory, lookup, settings, cluster)
        else:
            view = kube if isinstance(kube, NodeView) else NodeView(kube)
        marks = view  # the alert marks of this event's node failures live there (functions/kube/alerted.py)
        # The stop records on the nodes of pools without a partition label, as removal_targets lists them: a pool
        # with no MIG node left has no target and no rollout lists it again, yet a stop there waits for a person.
        unlabelled = _Read()
        planned = unlabelled
        try:
            targets = resolve_targets(request, lookup, cluster, ask, refused=refused)
        except AutoPoolNamed as named:  # an event of an auto pool re-plans that pool now, as its timer would
            from functions.pipeline.auto_pool import run_tick

            stage = "planning the auto pools"
            planned = _Read()
            raise _Finished(run_tick(request, lookup, cluster, settings, effective_dry_run, executor, kube, log,
                                     only=named.pool_id, stops=planned.stops))
        except SkipEvent:
            # no labelled pool (left): a pool whose label was removed may still have nodes with MIG
            targets = removal_targets(request, lookup, cluster, view, (), refused, unlabelled.stops)
            if not targets and not refused:  # a pool refused is no quiet skip: _with_refused decides
                raise
        else:
            targets = targets + removal_targets(request, lookup, cluster, view,
                                                [t[0] for t in targets if isinstance(t, tuple)], refused,
                                                unlabelled.stops)
        for pool_id, line in refused.items():  # one line per pool that fails alone, for an alert on level
            log.warning("node pool refused", nodepool_id=pool_id, reason=line)
        decisions = decide_targets(targets, cluster)
        decisions, rollout = prepare(request, targets, decisions, view, settings,
                                     pools_now=lambda: lookup.nodepools(cluster))  # read again between waves
        if rollout is not None:  # a stop its lists show too is told once (notify keeps one per node and owner)
            rollout.stops = rollout.stops + unlabelled.stops
            planned = rollout
        for d in decisions:
            pools[d.instance_id] = d.nodepool_id
            log.log(decision_level(d.action), "decision", instance_id=d.instance_id, node_name=d.node_name,
                    nodepool_id=d.nodepool_id, action=d.action, reason=d.reason,
                    sequence=d.plan.sequence if d.plan else None)
        stage = "running the nodes"
        chosen = DryRunExecutor() if effective_dry_run else (executor or make_executor(settings, False))
        reported: set = set()
        # Progress counts the nodes that will have a result; each is reported once it has one, whatever it
        # is (a node found right when claimed ends skipped: it is done too, or progress would stop short).
        counted = {d.instance_id for d in decisions if d.action in ("partition", "defer")}
        total = len(counted)

        def finished(n: dict) -> None:
            """One JSON log line per node as it finishes (a rollout reports each one when it ends), and the
            caller's ``progress(node result, total)`` (the command line's done/total on stderr). A node's result
            is settled first (a startup taint not lifted ends it failed), in place, so every copy agrees."""
            settle(n)
            reported.add(n.get("instance_id"))
            _node_line(log, n, pools)
            if progress is not None and n.get("instance_id") in counted and n.get("outcome") != "dry-run":
                progress(n, total)

        if rollout is not None:  # the same swap as a dry run: the rollout wraps whichever executor it is
            chosen = rollout.executor(chosen, effective_dry_run, on_result=finished)
        nodes = chosen.execute(request, decisions)
        if rollout is not None:  # later waves of this invocation decided some nodes again
            decisions = rollout.final(decisions)
        stage = "reporting"
        for n in nodes:
            if n.get("instance_id") not in reported:
                finished(n)
        outcome, reason = _with_refused(*_without_kubernetes(decisions, rollout), decisions, refused)
        result = HandlerResult(trigger=request.trigger.value, event_type=request.event_type,
                               event_id=request.event_id, outcome=outcome, reason=reason,
                               cluster_id=cluster, dry_run=effective_dry_run, decisions=decisions, nodes=nodes,
                               pool_tags=pool_tags, refused_pools=refused)
        # The first wave's nodes and every later wave's of this invocation (the executor numbers each one's
        # result): a node that stops the pool in wave 3 is told as a stopped rollout as one in wave 1 is.
        waves = set(getattr(rollout, "waves", None) or ()) | {n.get("instance_id") for n in nodes if n.get("wave")}
        whole_pools = request.trigger in ROLLOUT_TRIGGERS and not request.instance_ids
    except _Finished as finished_early:
        result = finished_early.result.with_refused(refused)  # an auto pool's step: any pool refused before it
    except EventOutcome as exc:
        trigger = request.trigger.value if request is not None else exc.trigger
        event_type = request.event_type if request is not None else exc.event_type or None
        for n in exc.nodes or []:  # e.g. the hook could not be answered after the nodes ran
            _node_line(log, n, pools)
        result = HandlerResult(trigger=trigger, event_type=event_type,
                               event_id=request.event_id if request is not None else None,
                               outcome=exc.outcome, reason=exc.reason,  # type: ignore[arg-type]
                               cluster_id=request.cluster_id if request is not None else None,
                               dry_run=bool(request.dry_run) if request is not None else False,
                               nodes=exc.nodes, pool_tags=pool_tags, refused_pools=refused)
        log = log.bind(trigger=trigger)
    except BadInventory:
        raise  # the caller's --inventory file: the command line reports it (exit 2)
    except Exception as exc:  # noqa: BLE001 - a bug or hostile input must end as one error line, not a traceback
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        reason = "internal error while %s: %s%s; the event was not completed" % (
            stage, type(exc).__name__, ": " + first if first else "")
        frame = exc.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        where = "%s:%d" % (os.path.basename(frame.tb_frame.f_code.co_filename), frame.tb_lineno) if frame else None
        log.error("internal error", stage=stage, error=type(exc).__name__, where=where)
        result = HandlerResult(trigger=request.trigger.value if request is not None else Trigger.UNKNOWN.value,
                               event_type=request.event_type if request is not None else None,
                               event_id=request.event_id if request is not None else None, outcome="error",
                               reason=reason, cluster_id=request.cluster_id if request is not None else None,
                               dry_run=bool(request.dry_run) if request is not None else False, pool_tags=pool_tags,
                               refused_pools=refused)
    finally:
        bridge.close()
    stops = getattr(planned, "stops", None) or ()  # every stop record this event read: told unless marked told
    if request is not None and (result.nodes or stops):  # a webhook, when configured; never changes how it ended
        from functions.pipeline.notify import after_event

        after_event(result, settings, log, waves, whole_pools, kube=marks, stops=stops,
                    owner=str(getattr(planned, "owner", "") or ""))
    level = {"done": "INFO", "skip": "INFO", "error": "ERROR", "retry": "WARNING"}[result.outcome]
    counts = _node_counts(result.nodes)
    failed = sum(counts.get(o, 0) for o in ("failed", "drain-timeout", "drain-refused"))
    if level == "INFO" and failed:  # done, but some nodes failed: the event line says so at WARNING too
        level = "WARNING"
    if "cluster_id" not in log.context and (settings.cluster_id or result.cluster_id):
        # Ended before the cluster was looked up (an unreadable event, a lookup that kept failing): the line
        # names the function's own cluster all the same, as the failed-events alert keeps to cluster_id.
        log = log.bind(cluster_id=settings.cluster_id or result.cluster_id)
    log.log(level, "event %s" % result.outcome, outcome=result.outcome, reason=result.reason,
            nodes_failed=failed if result.nodes is not None else None,
            duration_ms=round((time.monotonic() - started) * 1000, 1))
    if record and shared is not None:
        _record(result, shared, log, started)
    return result
