"""One auto pool's advice: its demand, supply and plan, from what the Kubernetes API holds. Changes nothing.

``advise`` (the CLI), the timer tick and ``invoke --dry-run`` read the same :func:`advise` answer, so they
show the same decisions. The inputs are plain API objects so a snapshot (``--inventory``) and the live API
give the same answer: the pool (labels, taints), its Node objects, the pods bound to them, and the cluster's
Pending pods.
"""

from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from functions.decision.layout import WHOLE_GPU, Plan, PodDemand, plan
from functions.decision.layout.dwell import Dwell, plan_steady
from functions.decision.layout.matching import demand_of
from functions.decision.waves import paused  # the pool label ack-mig-hook/paused: nothing new starts
from functions.kube.supply import holds_gpus, list_pool_nodes, pool_supply
from functions.pipeline.pool_of import counted_pods, pool_bounds, pool_waiting
from functions.base.textsafe import clip, one_line

POOL_LABEL = "alibabacloud.com/nodepool-id"  # ACK labels every node of a pool with its id (functions/decision/waves.py)


class NotAutoPool(ValueError):
    """The pool does not carry ``ack-mig-hook/layout=auto``: one line saying how to turn it on."""


class PoolUnproven(Exception):
    """Which nodes are one pool's cannot be read, and no retry changes that: ACK refused the list of its
    nodes (DescribeClusterNodes with the pool's id: a 404 or 400 about that pool, the pool deleted while the
    cluster still lists it), or the API server refused the pool's label selector (400: an id that is no
    label value, so no Node can carry it). Transient failures are not this: they end the tick in retry.
    ``line``: one line naming the pool and the answer; ``listed``: every Node that carries the pool's label,
    unproven (read only to hold back the pods the pool may count, never planned or changed)."""

    def __init__(self, pool_id: str, line: str, listed: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(line)
        self.pool_id, self.line, self.listed = pool_id, line, list(listed)


def proven_members(nodes: Sequence[Mapping[str, Any]], members: Mapping[str, Any]) -> Tuple[List[Mapping[str, Any]], List[str]]:
    """The Node objects whose membership in the pool ACK proves, and one line for each other one.

    The pool label selects the Node objects, but a kubelet may write its own labels and annotations: a node
    that labels itself into an auto pool and claims idle instances would hide the pool's demand, and its
    GPUs would be planned. So a node counts (as supply, as a place a pod could land, as a target) only when
    ACK lists it in the pool (``members``: node name -> functions.base.model.Node, from DescribeClusterNodes
    with the pool's id) and, where the Node names its ECS instance (``spec.providerID``), it is the instance
    ACK lists under that name."""
    from functions.decision.waves import instance_of

    kept, left = [], []
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        member = members.get(name)
        claimed = instance_of((node.get("spec") or {}).get("providerID"))
        if member is None:
            left.append("node %s: carries the pool's label but ACK does not list it in the pool: left out" % name)
        elif claimed and claimed != member.instance_id:
            left.append("node %s: its providerID names %s, ACK lists %s under that name: left out"
                        % (name, claimed, member.instance_id))
        else:
            kept.append(node)
    return kept, left


def _counts(demand: Sequence[PodDemand]) -> Dict[str, int]:
    total = Counter()  # type: Counter
    for d in demand:
        total[d.profile] += d.count
    return dict(sorted(total.items()))


def _whole_only(demand: Sequence[PodDemand]) -> int:
    """The whole GPUs waiting pods ask that a node of whole GPUs could give: those of pods asking nothing else.
    A pod asking MIG instances beside them lands on no such node (its GPUs have no instances): a fresh node
    kept whole for it holds nothing it can use, while the MIG pods it was brought for wait."""
    others = {d.key for d in demand if d.profile != WHOLE_GPU and d.count > 0}
    return sum(d.count for d in demand if d.profile == WHOLE_GPU and d.key not in others)


def advise(pool_id: str, pool_labels: Mapping[str, str], pool_taints: Sequence[Mapping[str, Any]],
           nodes: Sequence[Mapping[str, Any]], pods_by_node: Mapping[str, Sequence[Mapping[str, Any]]],
           pending: Sequence[Mapping[str, Any]], previous: Optional[Plan] = None,
           template: Tuple[str, int] = ("", 0), dwell: Optional[Dwell] = None, lifted: str = "") -> Dict[str, Any]:
    """The advice for one pool as a JSON-ready dict; raises NotAutoPool or bounds.LayoutLabelError.
    ``template``: (GPU model, GPUs) of a new node of the pool (autoscaler_tags.pool_template); ``dwell``: the
    dwell's inputs as the tick reads them (plan_claim.dwell_for_advice), None: none; ``lifted``: the startup
    taint (pool_of.places_of)."""
    return _advise(pool_id, pool_labels, pool_taints, nodes, pods_by_node, pending, previous, dwell=dwell,
                   template=template, lifted=lifted)[0]


MAX_UNCOUNTED_KEY, MAX_UNCOUNTED_WHY = 320, 300  # one pod no pool counts, as the tick and advise name it


def uncounted_text(key: str, why: str) -> str:
    """``<pod> (<why no pool counts it>)``, each cut where it reads whole: a reason may name a resource anyone
    wrote (a MIG resource's name has no length a snapshot must keep to)."""
    return "%s (%s)" % (clip(key, MAX_UNCOUNTED_KEY), clip(why, MAX_UNCOUNTED_WHY))


MAX_LEFT_OUT_CHARS = 2000  # the tick's one line a pool naming its nodes left out: a pool may have hundreds


def left_out_line(notes: Sequence[str], limit: int = MAX_LEFT_OUT_CHARS) -> str:
    """The notes on a pool's nodes left out of its plan (or read in part), as one log line of at most about
    ``limit`` characters: as many whole notes as fit, then how many more there are (``advise`` shows all)."""
    shown: List[str] = []
    size = 0
    for note in notes:
        if shown and size + len(note) + 2 > limit:
            break
        shown.append(note[:limit])
        size += len(note[:limit]) + 2
    more = len(notes) - len(shown)
    return "; ".join(shown) + ("; and %d more (ack-mig-hook advise lists them)" % more if more else "")


def _advise(pool_id: str, pool_labels: Mapping[str, str], pool_taints: Sequence[Mapping[str, Any]],
            nodes: Sequence[Mapping[str, Any]], pods_by_node: Mapping[str, Sequence[Mapping[str, Any]]],
            pending: Sequence[Mapping[str, Any]], previous: Optional[Plan] = None,
            dwell: Optional[Dwell] = None, template: Tuple[str, int] = ("", 0),
            lifted: str = "") -> Tuple[Dict[str, Any], Plan, List[str]]:
    """The advice, the plan, and the notes on the nodes the plan left out or read in part (one line each)."""
    bounds = pool_bounds(pool_labels, template)
    if bounds is None:
        raise NotAutoPool("pool %s is not an auto pool; label it ack-mig-hook/layout=auto to let the hook choose "
                          "its layouts from the pods that wait" % pool_id)
    waiting, not_counted, planned, left_out = pool_waiting(pool_id, pool_labels, pool_taints, nodes, pending, lifted,
                                                           bounds)
    running = [d for name, pods in sorted(pods_by_node.items()) for pod in pods if holds_gpus(pod)
               for d in demand_of(pod, pending=False, node=name)]
    supply, notes = pool_supply(planned, pods_by_node)  # only nodes every counted pod could land on
    notes = left_out + notes
    result = plan_steady(plan, supply, waiting + running, bounds, dwell, previous)  # dwell.py; None: plan's own
    if result.not_counted:  # no node of the pool can hold them (the planner's word): reported, not demand
        left_out = {key for key, _ in result.not_counted}
        waiting = [d for d in waiting if d.key not in left_out]
        not_counted = list(not_counted) + list(result.not_counted)
    gpus = []
    by_gpu = {(t.node, t.index): t for t in result.targets}
    for g in supply:
        target = by_gpu.get((g.node, g.index))
        gpus.append({"node": g.node, "gpu": g.index, "model": g.model, "mig": g.mig, "busy": g.busy,
                     "instances": [{"profile": i.profile, "start": i.start, "in_use": i.in_use} for i in g.instances],
                     "change": target.change if target else "none",
                     "target": [list(x) for x in target.layout] if target else [],
                     "create": [list(x) for x in target.create] if target else [],
                     "destroy": [list(x) for x in target.destroy] if target else []})
    return {
        "pool": pool_id,
        "bounds": {"profiles": sorted(bounds.profiles) if bounds.profiles is not None else None,
                   "headroom": dict(bounds.headroom)},
        "demand": {"pending": _counts(waiting), "in_use": _counts(running),
                   "pods": [{"pod": d.key, "owner": d.owner, "profile": d.profile, "count": d.count}
                            for d in waiting],
                   "not_counted": [{"pod": key, "why": why} for key, why in not_counted]},
        "gpus": gpus,
        "plan": {"changes": len(result.changes), "unserved": dict(result.unserved),
                 "new_node": [list(x) for x in result.new_node],
                 "new_node_shape": [{"layout": [list(x) for x in layout], "gpus": n}
                                    for layout, n in result.new_node_shape],
                 "reasons": list(result.reasons),
                 "unplaced": list(result.unplaced) + notes},
        "whole_gpu_pending": _whole_only(waiting),
    }, result, notes


# ---- the auto pool timer (template.yml AutoPoolTimer) ----

STATE_LABEL = "nvidia.com/mig.config.state"  # node_bootstrap/kube/nodelabels.py


def _fresh_nodes(pool_id: str, nodes: Sequence[Mapping[str, Any]], members: Mapping[str, Any],
                 new_node: Sequence[Any], log: Any, whole_waiting: int = 0) -> List[Any]:
    """A node of the pool the hook never partitioned (no state label: the autoscaler just brought it for
    the tags' promise) gets the new-node layout on every GPU as an ordinary sequence request: it turns MIG on,
    which only a node with nothing running may (the node refuses with gpu-busy otherwise). Nothing unserved:
    it is left with whole GPUs. Nor while pods asking whole GPUs alone (``whole_waiting``) wait: the plan counted
    the GPUs with MIG off for them, and turning MIG on would take those GPUs away (the MIG pods it would have
    served are in the tags, for another node)."""
    from functions.base.model import Decision, PartitionLabel

    if not new_node:
        return []
    fresh = [name for name in ((n.get("metadata") or {}).get("name") or "" for n in nodes
                               if STATE_LABEL not in ((n.get("metadata") or {}).get("labels") or {}))
             if name in members]
    sequence = "-".join(profile for profile, _ in new_node)
    out = []
    for name in fresh:
        if whole_waiting > 0:
            log.info("auto pool", nodepool_id=pool_id, node_name=name, reason="a new node left with whole GPUs: "
                     "%d pod(s) asking nvidia.com/gpu wait for them" % whole_waiting)
            continue
        log.info("auto pool", nodepool_id=pool_id, node_name=name, reason="a new node: its GPUs get " + sequence)
        out.append(Decision(instance_id=members[name].instance_id, node_name=name, nodepool_id=pool_id,
                            action="partition", ip_address=members[name].ip_address,
                            partition=PartitionLabel(kind="sequence", value=sequence),
                            reason="new node of auto pool %s: each GPU gets %s for the pods the pool cannot serve"
                                   % (pool_id, sequence)))
    return out


def _finish_stranded(lookup: Any, cluster: str, api: Any, pool_id: str, settings: Any, dry_run: bool, log: Any,
                     owner: str, unproven: Dict[str, str], stops: Optional[List[Dict[str, Any]]] = None) -> None:
    """A tick with no pod waiting still ends the records a stopped invocation left on the pool's nodes
    (``auto_waves.finish_stranded``): the pool's Nodes are listed, and ACK's list of its members is read only
    when one holds such a record (the function writes only to nodes it has proven are the pool's). When the
    pool's members cannot be proven (PoolUnproven), its line goes in ``unproven`` (:func:`_unproven`): its
    records stay, the other pools' still end."""
    from functions.rollout.auto_waves import finish_stranded

    try:
        listed = labelled_nodes(api, pool_id)
    except PoolUnproven as exc:
        _unproven(log, exc, "its stranded records stay", unproven)
        return
    _read_stops(stops, pool_id, listed)  # told as a labelled pool's bystanders' are: the Nodes with its label
    if not finish_stranded(api, listed, settings, owner, pool_id, dry_run=True):
        return
    try:
        members = pool_members(api, lookup, cluster, pool_id, listed=listed)[0]
    except PoolUnproven as exc:
        _unproven(log, exc, "its stranded records stay", unproven)
        return
    for line in finish_stranded(api, members, settings, owner, pool_id, dry_run):
        log.warning("auto pool", nodepool_id=pool_id, reason=line)


def _read_stops(stops: Optional[List[Dict[str, Any]]], pool: Any, nodes: Sequence[Mapping[str, Any]]) -> None:
    """The stop records on ``nodes`` (the pool's, as just listed) added to ``stops`` (None: not collected)."""
    if stops is None:
        return
    from functions.decision import waves as rp
    from functions.rollout.run import read_stops

    pool_id = getattr(pool, "nodepool_id", pool)
    stops.extend(read_stops({pool_id: [rp.KubeNode.from_object(n) for n in nodes]},
                            {} if isinstance(pool, str) else {pool_id: pool}))


def _unproven(log: Any, exc: PoolUnproven, outcome: str, unproven: Dict[str, str]) -> None:
    """A pool whose members cannot be proven: its one line (with ``outcome``, what came of it) in ``unproven``
    (pool id -> line: the tick's reason and its result's ``refused_pools``) and its warning, once a tick."""
    if exc.pool_id in unproven:
        return
    unproven[exc.pool_id] = "%s: %s" % (exc.line, outcome)
    log.warning("auto pool", nodepool_id=exc.pool_id, reason=unproven[exc.pool_id])


def acked_members(lookup: Any, cluster: str, pool_id: str, acked: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The nodes ACK lists in the pool (DescribeClusterNodes), by name. ``acked``: pool id -> ACK's list, as
    read a moment ago (a pod event's choice, for its first round): a pool found there is not asked again, and
    one asked is kept there, so an invocation's round asks ACK once per pool."""
    from functions.base.errors import Refused
    from functions.cloud.cluster import pool_refusal

    listed = acked.get(pool_id) if acked is not None else None
    if listed is None:
        try:
            listed = lookup.nodes(cluster, pool_id)
        except Refused as exc:  # about this pool alone: it fails alone (RetryLater, transient, ends the tick)
            raise PoolUnproven(pool_id, pool_refusal(pool_id, exc)) from None
        if acked is not None:
            acked[pool_id] = listed
    return {n.node_name: n for n in listed if n.node_name}


def labelled_nodes(api: Any, pool_id: str) -> List[Dict[str, Any]]:
    """The Nodes that carry the pool's label (``list_pool_nodes``). PoolUnproven when the API server refuses
    the pool's selector (400: an id that is no label value); any other failure (no answer, throttling, 5xx,
    RBAC: every pool's alike) is raised as it is, and ends the tick in retry."""
    from node_bootstrap.kube import KubeError

    try:
        return list_pool_nodes(api, "%s=%s" % (POOL_LABEL, pool_id))
    except KubeError as exc:
        if exc.status != 400:
            raise
        raise PoolUnproven(pool_id, "pool %s: the API server refused the list of its nodes (400: %s)"
                           % (pool_id, one_line(exc, 120))) from None


def pool_members(api: Any, lookup: Any, cluster: str, pool_id: str, acked: Optional[Dict[str, Any]] = None,
                 listed: Optional[Sequence[Mapping[str, Any]]] = None) -> Tuple[List[Mapping[str, Any]], List[str]]:
    """The pool's Node objects that ACK lists in it (``proven_members``), and one line per Node that carries
    the pool's label without ACK listing it: what every reading of a pool's nodes plans from (the tick, the
    pods an earlier pool counts, a pod event's choice), so a node that labels itself into a pool changes none.
    ``acked``: as :func:`acked_members`; ``listed``: the pool's Nodes as listed a moment ago (listed here when
    not given). PoolUnproven when either list is refused for good (the Nodes carrying the label in it)."""
    if listed is None:
        listed = labelled_nodes(api, pool_id)
    try:
        members = acked_members(lookup, cluster, pool_id, acked)
    except PoolUnproven as exc:
        exc.listed = list(listed)
        raise
    return proven_members(listed, members)


def _api_of(kube: Any, lookup: Any, settings: Any, cluster: str) -> Any:
    """A Kubernetes client that lists pods (functions.kube.client.KubeApi): the one given, else the live API
    server through the cluster credential; None when there is none (a snapshot without --kubeconfig)."""
    if kube is not None:
        backend = getattr(kube, "backend", kube)
        return backend if hasattr(backend, "list_all") else None
    from functions.rollout.run import kube_view

    if hasattr(lookup, "kube_nodes") and not settings.rollout.kubeconfig:
        return None  # a snapshot (--inventory) without --kubeconfig: no pods to read
    view = kube_view(None, lookup, settings, cluster)
    backend = getattr(view, "backend", None)
    return backend if hasattr(backend, "list_all") else None


def run_tick(request: Any, lookup: Any, cluster: str, settings: Any, dry_run: bool, executor: Any, kube: Any,
             log: Any, only: str = "", left_s: Optional[float] = None, listed: Optional[List[Any]] = None,
             acked: Optional[Dict[str, Any]] = None, pending: Optional[Tuple[List[Any], float]] = None,
             stops: Optional[List[Dict[str, Any]]] = None) -> Any:
    """One tick: one paged list of Pending pods; when a MIG pod waits, each auto pool is planned (advise's
    answer), its changes delivered as per-GPU node requests (no drain: nothing in use is destroyed) and its
    node-template tags set to the new-node layout. Ends done (something planned) or skip (nothing to do).
    ``only``: the one pool an event named (event.py's AutoPoolNamed), else the request's pool or every one.
    ``left_s``: the time this invocation has left (a pod event's later round), else a whole invocation: its
    planning claims and its rollout end by then. ``listed``: the cluster's node pools as the caller (a pod event)
    listed them a moment ago; listed here when not given. ``acked``: the nodes ACK lists in each pool, as that
    caller read them (:func:`acked_members`); each pool not there is asked once. ``pending``: the cluster's
    Pending pods as the caller (a pod event's choice) listed them, and when the list's first page was read
    (the server's clock): the tick reads them as its own list, else it lists them. ``stops`` gets every stop
    record on the pools' nodes the tick lists (``functions.rollout.run.read_stops``: a node whose change ended
    ``failed`` is held for that layout until a person removes its record), for the caller to tell once."""
    from node_bootstrap.kube import KubeError

    from functions.base.event_result import HandlerResult
    from functions.decision.layout import LAYOUT_LABEL
    from functions.rollout.plan_claim import tick_claims

    # pool id -> its one line: ACK (or the API server) refused its members for good (_unproven). Made here, with
    # ``end``, and filled by _tick: every result of the tick names those pools, one ending it in retry too.
    unproven: Dict[str, str] = {}

    def end(outcome: str, reason: str, decisions=(), nodes=None, tags=None) -> HandlerResult:
        return HandlerResult(trigger=request.trigger.value, event_type=request.event_type, event_id=request.event_id,
                             outcome=outcome, reason=reason, cluster_id=cluster, dry_run=dry_run,
                             decisions=list(decisions), nodes=nodes, pool_tags=tags, refused_pools=dict(unproven))

    scope = only or request.nodepool_id
    listed = list(lookup.nodepools(cluster) if listed is None else listed)
    auto = [p for p in listed if LAYOUT_LABEL in p.labels]
    pools = [p for p in auto if not scope or p.nodepool_id == scope]
    if not pools:
        if scope and auto:  # the pool an event named, deleted or relabelled since: the others are not this step's
            return end("skip", "auto pool %s is gone or no longer carries %s=auto: not planned" % (scope, LAYOUT_LABEL))
        return end("skip", "no node pool carries %s=auto" % LAYOUT_LABEL)
    api = _api_of(kube, lookup, settings, cluster)
    if api is None:
        return end("skip", "auto pools need the Kubernetes API (pods are read there): none is configured")
    claims = tick_claims(api, settings, left_s)  # one plan at a time per pool (functions/rollout/plan_claim.py)
    unread: Dict[str, str] = {}  # pool id -> its line: the pods on its nodes could not be read (_tick's unread_pool)
    try:
        result = _tick(request, lookup, cluster, settings, dry_run, executor, api, pools, log, end, claims, unproven,
                       left_s, only, auto, {} if acked is None else acked, pending, unread, stops)
        if unread and result.outcome != "error":
            # The other pools were planned (and their changes delivered); this tick still did not do all its
            # work, so it ends in retry: FC runs it again, every write is idempotent, and the pool whose pods
            # could not be read is planned then (docs/auto-pools.md "A pool whose members cannot be proven").
            from dataclasses import replace

            result = replace(result, outcome="retry", reason="; ".join([result.reason] + list(unread.values())))
        if claims.failed and result.outcome not in ("error", "retry"):
            # A pool whose planning claim the API server failed (or RBAC refused) was left unplanned: not
            # "nothing to do", which FC does not run again while its pods wait (functions/rollout/plan_claim.py).
            from dataclasses import replace

            lines = [line for line in claims.failed.values() if line not in result.reason]
            result = replace(result, outcome="retry", reason="; ".join([result.reason] + lines))
        return result
    except KubeError as exc:  # the API server, not a node: nothing was changed; the next tick tries again
        return end("retry", "the Kubernetes API could not be read (%s); the next tick tries again"
                   % one_line(exc, 200))
    finally:  # each claim given back with the GPUs changed marked (else it runs out one hold after)
        claims.release_all()


def _tick(request: Any, lookup: Any, cluster: str, settings: Any, dry_run: bool, executor: Any, api: Any,
          pools: List[Any], log: Any, end: Any, claims: Any, unproven: Dict[str, str], left_s: Optional[float] = None,
          only: str = "", auto: Sequence[Any] = (), acked: Optional[Dict[str, Any]] = None,
          given: Optional[Tuple[List[Any], float]] = None, unread: Optional[Dict[str, str]] = None,
          stops: Optional[List[Dict[str, Any]]] = None) -> Any:
    from node_bootstrap.kube import KubeError

    from functions.base.model import Decision
    from functions.decision.autoscaler_tags import pool_template
    from functions.decision.layout import LayoutLabelError
    from functions.decision.layout.matching import is_unschedulable, pod_asks, pod_key
    from functions.delivery.node_script import per_gpu_partition
    from functions.kube.demand import pending_pods, pods_on
    from functions.pipeline.autoscaler_sync import sync_pool_tags
    from functions.pipeline.point_of_change import DryRunExecutor, make_executor
    from functions.rollout.auto_waves import finish_stranded, prepare_auto
    from functions.rollout import run
    from functions.rollout.plan_claim import STALE_MARGIN_S, claim_pool

    lifted = run.startup_taint(settings)  # keeps no pod off a new node for good (pool_of.places_of)
    at: List[Optional[float]] = []
    pending = list(given[0]) if given is not None else pending_pods(api, at)
    # When the pending pods were read, on the API server's clock: the list is a snapshot of its first page,
    # and a change marked after that may have bound pods the later pages still show waiting.
    listed = given[1] if given is not None else at[0] if at and at[0] is not None else api.server_time()
    if not any(is_unschedulable(p) and pod_asks(p) for p in pending):
        # nothing waits, so no new node is needed: the tags a scale-out left stop advertising one (a pool
        # already in sync writes nothing), or the next pod the pool could serve would bring a node first
        # (under the pool's planning claim: a plan running elsewhere may be setting them for a pod listed later)
        idle = {p.nodepool_id: () for p in pools if not paused(p.labels)
                and not claim_pool(claims, p, dry_run, listed, pending, settings)[1]}
        for pool_id in sorted(idle):
            _finish_stranded(lookup, cluster, api, pool_id, settings, dry_run, log, claims.owner, unproven, stops)
        tags = sync_pool_tags(request, lookup, cluster, settings, dry_run, log, new_nodes=idle, scope=only)
        return end("skip", "; ".join(["no MIG pod waits: the auto pools stay as they are"] + list(unproven.values())),
                   tags=tags)
    skipped: List[str] = []  # pools another invocation plans (or changed since that list), one line each
    decisions: List[Any] = []
    changes: List[Any] = []  # (pool, decision, GpuTargets) per node whose GPUs change: through the rollout
    sizes: Dict[str, int] = {}
    new_nodes: Dict[str, Any] = {}
    fresh_decisions: List[Any] = []  # fresh nodes: MIG turned on, the pool marked changed (not their GPUs)
    # A pod that several auto pools could take is the demand of the first that counts it (pools by id, as a
    # pod event picks), not of each: two pools repartitioned GPUs and advertised nodes for the same pods.
    # The rule holds whoever plans the earlier pool: a pool this tick does not plan (out of its scope, or
    # planned by another invocation now) still has its pods, which are its own planner's; a tick of one pool
    # planned them again there, and repartitioned a GPU for pods the first pool's idle instances serve.
    counted: set = set()
    uncounted_why: Dict[str, str] = {}  # pod key -> why the first planned pool does not count it
    relisted: List[bool] = []

    def relist(pool_id: str) -> Tuple[List[Any], float]:
        """The pending pods read again, once a tick, for a pool (``pool_id``) another invocation changed after
        the first list: two of the Date header's whole seconds later, so that a change just before the claim
        reads as before the list (``changed_since`` counts a mark within one second of it as after)."""
        nonlocal pending, listed
        relisted.append(True)
        run.sleep(2 * STALE_MARGIN_S)
        again: List[Optional[float]] = []
        pending = pending_pods(api, again)
        listed = again[0] if again and again[0] is not None else api.server_time()
        # A pod new in this list that an earlier pool counts is that pool's, as the first list's were: the
        # earlier pools were read on that list, and without this the pool planned it beside them.
        for earlier in sorted(auto or pools, key=lambda p: p.nodepool_id):
            if earlier.nodepool_id >= pool_id:
                break
            counted.update(earlier_pools_pods(earlier))
        return pending, listed

    def uncounted(pool: Any, nodes: Sequence[Mapping[str, Any]]) -> set:
        """The pods not counted yet that ``pool`` counts, read on ``nodes``."""
        try:
            return counted_pods(pool, nodes, [p for p in pending if pod_key(p) not in counted],
                                lambda n: pods_on(api, n), lifted)
        except KubeError as exc:
            return unread_pool(pool, nodes, exc)

    def unread_pool(pool: Any, nodes: Sequence[Mapping[str, Any]], exc: Exception) -> set:
        """A pool the pods on whose nodes could not be read (a 5xx, no answer, an answer of another shape): it
        fails alone, as a pool ACK refuses does (held_back), but the failure may pass, so the tick ends in
        retry (run_tick) once the other pools are planned. The pods it may count are read the widest way (every
        instance of its nodes idle: no pod list needed, and idle instances count the most) and held back from
        the later pools, which would otherwise repartition GPUs for pods this pool's instances serve."""
        if unread is not None and pool.nodepool_id not in unread:
            unread[pool.nodepool_id] = ("pool %s: the pods on its nodes could not be read (%s): not planned, and "
                                        "the pods it may count wait; the tick ends in retry"
                                        % (pool.nodepool_id, one_line(exc, 160)))
            log.warning("auto pool", nodepool_id=pool.nodepool_id, reason=unread[pool.nodepool_id])
        return counted_pods(pool, nodes, [p for p in pending if pod_key(p) not in counted], None, lifted)

    def earlier_pools_pods(pool: Any) -> set:
        """The pods not counted yet that ``pool``, planned elsewhere or not at all by this tick, counts."""
        try:
            nodes = pool_members(api, lookup, cluster, pool.nodepool_id, acked)[0]
        except PoolUnproven as exc:
            return held_back(pool, exc)
        return uncounted(pool, nodes)

    def held_back(pool: Any, exc: PoolUnproven) -> set:
        """The pods a pool whose members cannot be proven may count: they count for nobody this tick.
        Which pods an earlier pool counts decides which a later one may plan; without the pool's proven
        members that cannot be told, and a later pool that planned them would repartition its GPUs (and
        advertise new nodes) for pods the earlier pool's idle instances serve once ACK answers again (a
        refusal may be passing: a pool deleted mid-tick, a partial outage). So they are read from every
        Node carrying the pool's label, unproven (the widest reading: ACK's list only leaves nodes out,
        and fewer nodes count fewer pods), and held back from the later pools; a node that labels itself
        into such a pool can hold pods back this way, never have a GPU changed. The pool is named in the
        tick's reason and log, once."""
        _unproven(log, exc, "not planned, and the pods it may count wait", unproven)
        return uncounted(pool, exc.listed)

    scoped = {p.nodepool_id for p in pools}
    last = max(scoped)
    for pool in sorted(auto or pools, key=lambda p: p.nodepool_id):
        if pool.nodepool_id > last:
            break
        if pool.nodepool_id not in scoped:
            counted.update(earlier_pools_pods(pool))
            continue
        if paused(pool.labels):
            log.info("auto pool", nodepool_id=pool.nodepool_id, reason="paused: nothing new starts")
            continue
        dwell, why = claim_pool(claims, pool, dry_run, listed, pending, settings,
                                relist=None if relisted else lambda pool_id=pool.nodepool_id: relist(pool_id))
        if why:
            log.info("auto pool", nodepool_id=pool.nodepool_id, reason=why)
            skipped.append(why)
            counted.update(earlier_pools_pods(pool))
            continue
        try:
            nodes, strangers = pool_members(api, lookup, cluster, pool.nodepool_id, acked)
        except PoolUnproven as exc:  # this pool alone: skipped, its pods held back, the others planned
            counted.update(held_back(pool, exc))
            continue
        members = acked_members(lookup, cluster, pool.nodepool_id, acked)  # the list just read: ACK is not asked again
        for line in strangers:
            log.warning("auto pool", nodepool_id=pool.nodepool_id, reason=line)
        for line in finish_stranded(api, nodes, settings, claims.owner, pool.nodepool_id, dry_run):
            log.warning("auto pool", nodepool_id=pool.nodepool_id, reason=line)
        _read_stops(stops, pool, nodes)
        names = [(n.get("metadata") or {}).get("name") or "" for n in nodes]
        try:
            on_nodes = pods_on(api, names)
        except KubeError as exc:  # this pool alone: its pods held back, the others planned, then retry
            counted.update(unread_pool(pool, nodes, exc))
            continue
        try:
            advice, result, notes = _advise(pool.nodepool_id, pool.labels,
                                            [t.model_dump(exclude_none=True) for t in pool.taints], nodes,
                                            on_nodes, [p for p in pending if pod_key(p) not in counted],
                                            dwell=dwell, template=pool_template(pool), lifted=lifted)
        except (LayoutLabelError, NotAutoPool) as exc:
            log.warning("auto pool", nodepool_id=pool.nodepool_id, reason=str(exc))
            continue
        counted.update(d["pod"] for d in advice["demand"]["pods"])
        for one in advice["demand"]["not_counted"]:  # the first planned pool's reason (by id) is the one told
            uncounted_why.setdefault(one["pod"], one["why"])
        new_nodes[pool.nodepool_id] = result.new_node_shape or result.new_node  # the tags advertise the whole node
        sizes[pool.nodepool_id] = len(nodes)
        for line in result.reasons:
            log.info("auto pool plan", nodepool_id=pool.nodepool_id, reason=line)
        if notes:  # the nodes this plan neither counts nor changes (advise shows them too), one bounded line
            log.info("auto pool plan", nodepool_id=pool.nodepool_id, reason="nodes left out of the plan, or read in "
                     "part: %s" % left_out_line(notes))
        fresh = _fresh_nodes(pool.nodepool_id, nodes, members, result.new_node, log, advice["whole_gpu_pending"])
        decisions.extend(fresh)
        fresh_decisions.extend(fresh)
        for name in sorted({t.node for t in result.changes}):
            node = members.get(name)
            targets = [t for t in result.targets if t.node == name]  # every GPU: the boot unit re-applies it
            why = "; ".join(t.reason for t in targets if t.reason)
            if node is None:
                log.warning("auto pool", nodepool_id=pool.nodepool_id, node_name=name,
                            reason="ACK does not list node %s in the pool: not changed" % name)
                continue
            changes.append((pool, Decision(instance_id=node.instance_id, node_name=name, nodepool_id=pool.nodepool_id,
                                           action="partition", reason=why, ip_address=node.ip_address,
                                           gpu_layouts=per_gpu_partition(targets)), targets))
    # The waiting pods no pool counts (hostile ones among them: more than a node holds, a megabyte of affinity,
    # a profile no GPU has): each fails alone, and the tick names them in one bounded line (advise lists all).
    # Before, only advise named them: the function's log said nothing of a pod that waits for good.
    left = [uncounted_text(key, why) for key, why in uncounted_why.items() if key not in counted]
    if left:
        log.info("auto pool", reason="%d waiting pod(s) no auto pool counts, never planned for: %s"
                 % (len(left), left_out_line(left)))
    # The tags are compared with the pools as listed now, after the claims: the list this tick began with is
    # older than them, and the invocation that held a claim before may have written the tags meanwhile.
    tags = sync_pool_tags(request, lookup, cluster, settings, dry_run, log, new_nodes=new_nodes, scope=only)
    also = "".join("; " + line for line in skipped + list(unproven.values()))
    if not new_nodes and any(pool_id in scoped for pool_id in unproven):
        # no pool planned, and one this tick was to plan refused (each alike: a role without
        # cs:DescribeClusterNodes; or the one pool of a pod event): an error, not a quiet skip
        return end("error", also[2:], tags=tags)
    if skipped and not new_nodes:
        return end("skip", also[2:], tags=tags)
    if not decisions and not changes:
        return end("done", "MIG pods wait; no GPU of the auto pools changes (see the pool tags for a new node)"
                   + also, tags=tags)
    # New nodes go straight to the node (nothing runs there yet: MIG is turned on, as a scale-out does); changed
    # running nodes go through the rollout: claim, the pool's budget, pause, Events, record, capacity.
    lapsed = "" if dry_run else claims.lapsed()
    if lapsed:  # planned, but its claim may be another's now: nothing is sent (FC runs the tick again)
        return end("retry", lapsed + also, tags=tags)
    rolled, rollout = prepare_auto(changes, sizes, api, settings, pools_now=lambda: lookup.nodepools(cluster),
                                   owner=claims.owner, left_s=left_s)
    rollout.fence = claims.lapsed
    decisions.extend(rolled)
    inner = DryRunExecutor() if dry_run else (executor or make_executor(settings, False))
    nodes_done = rollout.executor(inner, dry_run).execute(request, decisions)
    claims.mark(changes, nodes_done, fresh_decisions)
    decisions = rollout.final(decisions)
    # A node held up for a cause that is not its own (the API server failed, RBAC refused): the tick ends retry
    # and says why once (functions.rollout.run.Rollout.held_up).
    held_up = "".join("; " + rollout.held_up[k] for k in sorted(getattr(rollout, "held_up", None) or {}))
    return end("retry" if held_up else "done", "%d node(s) of the auto pools get per-GPU layouts"
               % len(decisions) + held_up + also, decisions, nodes_done, tags)

