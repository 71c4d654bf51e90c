"""A pod the scheduler found no room for, as a trigger: the step of the auto pool it could land on, now
(issue 37; docs/auto-pools.md "Pod events").

The event only names the pod. Everything is read again from the API server: the pod (one list of its
namespace by ``metadata.name``: the Role's ``pods list``, no new grant), whether it still waits and asks for
``nvidia.com/mig-*`` or ``nvidia.com/gpu``, and which auto pool's nodes or template could take it (the
matcher of the plan itself, ``functions.decision.layout.matching``). So a late event of a pod that has been
scheduled since, or deleted, ends as a skip; a forged one costs two reads. ACK is asked which nodes are a
pool's (``DescribeClusterNodes``, one call a pool) only where the answer depends on it: the pools' Nodes read
without that proof leave more than one pool that may count the pod (:func:`_could_count`), or none, and then
only the pools that decide (:func:`_choose`). A burst coalesced into a running plan costs one ACK call an
event, the list of the node pools, and so does the steady stream of events of a pod no auto pool counts
where a pool's template takes it, or none takes it. Such a pod's event is a skip saying why: no plan would
count the pod, so none runs for it.

Then the pool's plan marker (``functions.rollout.plan_marker``, decided by ``functions.decision.coalesce``)
says whether a plan of that pool runs now: if so the event is answered ``coalesced`` (that plan plans
again at its end, with a fresh list of the Pending pods that holds this pod, or, where it gives up on
another invocation's planning claim or FC ends it, the auto pool timer does); if not, this invocation plans
the pool (``functions.pipeline.auto_pool.run_tick``, the timer's step for that one pool), and again while
events asked during its round. A dry run plans once and writes no marker.
"""

import dataclasses
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from functions.base.event_result import HandlerResult
from functions.base.textsafe import one_line


def _find_pod(api: Any, namespace: str, name: str) -> Optional[dict]:
    from functions.kube.demand import slim

    path = "/api/v1/namespaces/%s/pods" % namespace  # both checked as DNS names at intake
    found = api.list_all(path, {"fieldSelector": "metadata.name=" + name}, reduce=slim)
    return found[0] if found else None


def _waits(pod: dict) -> str:
    """Why the pod is not one to plan for, or "" when it waits for MIG (or whole GPUs)."""
    from functions.decision.layout.matching import ask_problem, is_unschedulable, pod_asks

    if (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase") != "Pending":
        return "is scheduled already (%s)" % ((pod.get("spec") or {}).get("nodeName") or
                                              (pod.get("status") or {}).get("phase"))
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "is being deleted: the scheduler does not try it again"
    if not pod_asks(pod):
        return ask_problem(pod) or "asks for no nvidia.com/mig-* or nvidia.com/gpu resource"
    if not is_unschedulable(pod):
        return "is not marked Unschedulable (yet): the plan would not count it"
    return ""


def _pool_of(pod: dict, pools: List[Any], matched: List[Any], nodes: dict, api: Any,
             seen: Optional[List[Any]] = None, lifted: str = "") -> Any:
    """The auto pool whose plan counts ``pod``, as the timer's tick gives the cluster's waiting pods out
    (``pool_of.counting_pool``): the first by id, not paused, whose plan counts it among the pods the
    earlier pools left; None when none does. ``matched``: the pools (by id) whose nodes or template the pod
    may land on; ``nodes``: pool id -> its proven members.

    The pod alone decides, with no list, while each pool it matches either counts it or not whatever else
    waits. Idle instances of a profile a pool no longer allows are the exception (``pool_of.spare_decides``):
    the tick spends them one pod each, in pod order, so two pods that ask one such instance go to two pools.
    Only then are the cluster's Pending pods listed (the tick's one paged list), and the tick's rule runs
    over them: the pod gets the pool the timer gives it, and that pool's plan is the one run now. A pool the
    pods on whose nodes cannot be read fails alone, as in the tick (:func:`_pods_on_or_widest`): PoolPodsUnread
    only where the pod may be that pool's own. ``seen``: gets that list as read and when its first page was
    read (the server's clock), for the plan (``_plan``)."""
    from functions.decision.layout.matching import demand_of, pod_key
    from functions.kube.demand import pending_pods
    from functions.pipeline.pool_of import counting_pool, not_counted, planned_bounds, spare_decides

    demand = demand_of(pod)
    for pool in matched:
        bounds = planned_bounds(pool)[0]  # None: paused, or labels that do not read: its plan counts nothing
        if bounds is None:
            continue
        if spare_decides(bounds, nodes[pool.nodepool_id], demand):
            key = pod_key(pod)
            clock = getattr(api, "server_time", None)
            at: List[Optional[float]] = []
            pending = pending_pods(api, at if clock else None)
            listed = (at[0] if at and at[0] is not None else clock()) if clock else None
            if seen is not None and listed is not None:  # as the tick reads its own list (auto_pool._tick)
                seen.append((list(pending), listed))
            if key not in {pod_key(p) for p in pending}:  # bound or gone since it was read: judged as read
                pending.append(pod)  # (its pool's step finds it no longer waiting)
            unread: Dict[str, str] = {}  # pool id -> why the pods on its nodes could not be read
            counting = counting_pool(key, pools, nodes, pending, _pods_on_or_widest(api, nodes, unread), lifted)
            if counting is not None and counting.nodepool_id in unread:
                raise PoolPodsUnread("pod %s may be the demand of auto pool %s, the pods on whose nodes could not "
                                     "be read (%s): no other pool is planned for it; retried"
                                     % (key, counting.nodepool_id, unread[counting.nodepool_id]))
            return counting
        if not not_counted(bounds, nodes[pool.nodepool_id], demand):
            return pool
    return None


class PoolPodsUnread(Exception):
    """The pod may be the demand of an auto pool the pods on whose nodes could not be read: the event ends in
    retry naming that pool alone (its one line)."""


def _pods_on_or_widest(api: Any, nodes: Dict[str, List[Any]], unread: Dict[str, str]) -> Callable[[List[str]], Any]:
    """``pods_on`` for the choice's rule (``pool_of.counting_pool``), where one pool's failing list fails that
    pool alone, as the tick's ``unread_pool``: its nodes are read the widest way (every instance idle: no pods,
    as ``pool_of.not_counted`` reads without a list), so the pods it may count are held back from the later
    pools, and a pod counted there is this pool's or a later one's on no reading (``unread``: gets the pool's
    id and why). ``nodes``: pool id -> its proven members, to name the pool of a node."""
    from node_bootstrap.kube import KubeError

    from functions.kube.demand import pods_on

    owner = {(n.get("metadata") or {}).get("name") or "": pool_id for pool_id, members in nodes.items()
             for n in members}

    def read(names: List[str]) -> Any:
        try:
            return pods_on(api, names)
        except KubeError as exc:
            for pool_id in sorted({owner.get(name, "") for name in names} - {""}):
                unread.setdefault(pool_id, one_line(exc, 160))
            return {}
    return read


def _could_count(pod: dict, pools: List[Any], labelled: Dict[str, Optional[List[Any]]], lifted: str) -> List[Any]:
    """The auto pools (by id) whose plan may count ``pod``, read the widest way: not paused, labels that read,
    a place the pod may land on among every Node carrying the pool's label (``labelled``: pool id -> those
    Nodes, None: none can carry it) and the template, and counted with every instance idle
    (``pool_of.not_counted``). ACK's list of a pool's nodes only leaves Nodes out, fewer places take no more
    pods, and fewer nodes or instances in use count no more, so the pool the timer's rule gives the pod
    (:func:`_pool_of`, ``pool_of.counting_pool``) is one of these, or none counts it. One pool here is the
    pod's pool, or none's: told without reading ACK (docs/auto-pools.md "Pod events")."""
    from functions.decision.layout.matching import demand_of, split_pending
    from functions.pipeline.pool_of import not_counted, places_of, planned_bounds

    demand = demand_of(pod)
    could = []
    for pool in sorted(pools, key=lambda p: p.nodepool_id):
        bounds = planned_bounds(pool)[0]  # None: paused, or labels that do not read: its plan counts nothing
        if bounds is None:
            continue
        nodes = labelled[pool.nodepool_id] or []
        places = places_of(pool.labels, [t.model_dump(exclude_none=True) for t in pool.taints], pool.nodepool_id,
                           nodes, lifted)
        if split_pending([pod], {pool.nodepool_id: places})[0].get(pool.nodepool_id) \
                and not not_counted(bounds, nodes, demand):
            could.append(pool)
    return could


def _uncounted(pod: dict, pool: Any, labelled: Dict[str, Optional[List[Any]]]) -> str:
    """Why ``pool``'s plan does not count ``pod`` even on every Node carrying its label (``pool_of.not_counted``,
    every instance idle), or "" where its plan reads no bounds (labels that do not read: its step says so)."""
    from functions.decision.layout.matching import demand_of
    from functions.pipeline.pool_of import not_counted, planned_bounds

    bounds = planned_bounds(pool)[0]
    if bounds is None:
        return ""
    lines = not_counted(bounds, labelled[pool.nodepool_id] or [], demand_of(pod))
    return str(lines[0][1])[:300] if lines else ""


def _choose(pod: dict, key: str, pools: List[Any], labelled: Dict[str, Optional[List[Any]]], could: List[Any],
            lifted: str, api: Any, lookup: Any, cluster: str, log: Any, refused: Dict[str, str], acked: dict,
            choice: List[Any]) -> Any:
    """The pool the timer's plan gives ``pod`` (:func:`_pool_of`), read on each pool's proven members (ACK's
    list, one call a pool, kept in ``acked`` for the first round); else the first it matches, which says why
    (the event names it, or its step); else one line why none can take it. ACK is asked only for the pools
    that answer depends on: those of ``could`` (:func:`_could_count`, by id) until one counts the pod, every
    pool where the pods that wait decide (:func:`_choose_on_all`); where none counts it, the pools by id until
    one takes it, a pool whose template takes it read no further (no member changes that: docs/auto-pools.md
    "Pod events"). ``refused``: gets the pools ACK refuses for good; ``choice``: the cluster's Pending pods
    where the choice read them."""
    from functions.decision.layout.matching import demand_of, split_pending
    from functions.pipeline.pool_of import not_counted, places_of, planned_bounds, spare_decides

    nodes: Dict[str, List[Any]] = {}

    def proven(pool: Any) -> List[Any]:
        if pool.nodepool_id not in nodes:
            nodes[pool.nodepool_id] = _members(pool, labelled, api, lookup, cluster, log, refused, acked)
        return nodes[pool.nodepool_id]

    def takes(pool: Any, members: List[Any]) -> bool:  # one of ``members``, or a new node of the pool's template
        places = places_of(pool.labels, [t.model_dump(exclude_none=True) for t in pool.taints], pool.nodepool_id,
                           members, lifted)
        return bool(split_pending([pod], {pool.nodepool_id: places})[0].get(pool.nodepool_id))

    demand = demand_of(pod)
    for pool in could:  # by id; a pool left out counts the pod on no reading of its members
        if not takes(pool, proven(pool)):
            continue
        bounds = planned_bounds(pool)[0]
        if spare_decides(bounds, nodes[pool.nodepool_id], demand):  # then the pods that wait decide: every pool
            return _choose_on_all(pod, key, pools, labelled, lifted, api, lookup, cluster, log, refused, acked,
                                  choice, nodes)
        if not not_counted(bounds, nodes[pool.nodepool_id], demand):
            return pool
    for pool in sorted(pools, key=lambda p: p.nodepool_id):  # none counts it: the first it matches says why
        if takes(pool, []) or (takes(pool, labelled[pool.nodepool_id] or []) and takes(pool, proven(pool))):
            return pool
    # none matches even every Node carrying a pool's label: ACK's lists (fewer Nodes) change nothing
    places = {p.nodepool_id: places_of(p.labels, [t.model_dump(exclude_none=True) for t in p.taints],
                                       p.nodepool_id, labelled[p.nodepool_id] or [], lifted) for p in pools}
    unmatched = split_pending([pod], places)[1]
    return "no auto pool can take pod %s (%s)" % (key, unmatched[0][1] if unmatched else "none")


def _members(pool: Any, labelled: Dict[str, Optional[List[Any]]], api: Any, lookup: Any, cluster: str, log: Any,
             refused: Dict[str, str], acked: dict) -> List[Any]:
    """The pool's Nodes that ACK lists in it, as the tick reads them: a node labelling itself into a pool
    changes neither which pools the pod matches nor which can take it."""
    from functions.pipeline.auto_pool import PoolUnproven, pool_members

    try:
        return pool_members(api, lookup, cluster, pool.nodepool_id, acked, listed=labelled[pool.nodepool_id])[0]
    except PoolUnproven as exc:  # refused for good, this pool alone: read as the tick reads it, from every
        # Node carrying its label, so a pod it may count is its own here too (the tick holds such pods back
        # from the later pools; chosen, its step ends naming the refusal)
        log.warning("pod event", nodepool_id=pool.nodepool_id, reason=exc.line)
        refused[pool.nodepool_id] = exc.line
        return exc.listed


def _choose_on_all(pod: dict, key: str, pools: List[Any], labelled: Dict[str, Optional[List[Any]]], lifted: str,
                   api: Any, lookup: Any, cluster: str, log: Any, refused: Dict[str, str], acked: dict,
                   choice: List[Any], nodes: Dict[str, List[Any]]) -> Any:
    """:func:`_choose` on every pool's proven members (``nodes``: those read already), for a pod whose pool the
    pods that wait decide (``pool_of.spare_decides``): the timer's rule over them (:func:`_pool_of`)."""
    from functions.decision.layout.matching import split_pending
    from functions.pipeline.pool_of import places_of

    for p in pools:
        if p.nodepool_id not in nodes:
            nodes[p.nodepool_id] = _members(p, labelled, api, lookup, cluster, log, refused, acked)
    places = {p.nodepool_id: places_of(p.labels, [t.model_dump(exclude_none=True) for t in p.taints],
                                       p.nodepool_id, nodes[p.nodepool_id], lifted)
              for p in pools}
    _, unmatched = split_pending([pod], places)
    # every pool whose nodes or template the pod matches (split_pending gives a pod to the first only)
    matched = [p for p in sorted(pools, key=lambda p: p.nodepool_id)
               if split_pending([pod], {p.nodepool_id: places[p.nodepool_id]})[0].get(p.nodepool_id)]
    # The pool the timer's plan gives the pod; else the first the pod matches, whose step says why.
    chosen = _pool_of(pod, pools, matched, nodes, api, choice, lifted) or (matched[0] if matched else None)
    if chosen is None:
        return "no auto pool can take pod %s (%s)" % (key, unmatched[0][1] if unmatched else "none")
    return chosen


def run_pod_event(request: Any, lookup: Any, cluster: str, settings: Any, dry_run: bool, executor: Any, kube: Any,
                  log: Any, started: Optional[float] = None) -> HandlerResult:
    """``started``: when the invocation began (``time.monotonic``), so that its rounds count the lookups
    before them against its time; now when not given."""
    from node_bootstrap.kube import KubeError

    from functions.decision.layout import LAYOUT_LABEL
    from functions.decision.waves import paused
    from functions.pipeline.auto_pool import PoolUnproven, _api_of, labelled_nodes
    from functions.rollout.run import startup_taint

    pod_ref = request.pod
    key = "%s/%s" % (pod_ref.namespace, pod_ref.name)
    refused: Dict[str, str] = {}  # pool id -> its line: the pools the choice found ACK refusing for good

    def end(outcome: str, reason: str) -> HandlerResult:
        return HandlerResult(trigger=request.trigger.value, event_type=request.event_type, event_id=request.event_id,
                             outcome=outcome, reason=reason, cluster_id=cluster, dry_run=dry_run,
                             refused_pools=dict(refused))

    listed = lookup.nodepools(cluster)
    pools = [p for p in listed if LAYOUT_LABEL in p.labels]
    if not pools:
        return end("skip", "no node pool carries %s=auto: pod %s is not ours to plan for" % (LAYOUT_LABEL, key))
    api = _api_of(kube, lookup, settings, cluster)
    if api is None:
        return end("skip", "auto pools need the Kubernetes API (pods are read there): none is configured")
    try:
        pod = _find_pod(api, pod_ref.namespace, pod_ref.name)
        if pod is None:
            return end("skip", "pod %s is gone" % key)
        why = _waits(pod)
        if why:
            return end("skip", "pod %s %s" % (key, why))
        # Each pool's Nodes as the API server lists them (its label), unproven: the widest reading of the pod's
        # pool, from which one pool alone may already be its pool (_could_count), ACK not asked
        labelled: Dict[str, Optional[List[Any]]] = {}
        for p in pools:
            try:
                labelled[p.nodepool_id] = labelled_nodes(api, p.nodepool_id)
            except PoolUnproven:  # a label no Node can carry: its template alone here (pool_members says why)
                labelled[p.nodepool_id] = None
        lifted = startup_taint(settings)  # keeps no pod off a new node for good (pool_of.places_of)
        could = _could_count(pod, pools, labelled, lifted)
    except KubeError as exc:
        return end("retry", "the Kubernetes API could not be read (%s)" % one_line(exc, 200))
    acked: dict = {}  # ACK's nodes of each pool, read once: the first round plans from them too
    choice: List[Any] = []  # the cluster's Pending pods, where the choice read them, and when
    if len(could) == 1:  # the pod's pool, or none counts it: then this one's step says why
        chosen = could[0]
    else:
        try:
            chosen = _choose(pod, key, pools, labelled, could, lifted, api, lookup, cluster, log, refused, acked,
                             choice)
        except KubeError as exc:
            return end("retry", "the Kubernetes API could not be read (%s)" % one_line(exc, 200))
        except PoolPodsUnread as exc:  # that pool alone: the others never decided this pod
            log.warning("pod event", reason=str(exc))
            return end("retry", str(exc))
        if isinstance(chosen, str):
            return end("skip", chosen)
    if paused(chosen.labels):
        return end("skip", "pod %s waits for auto pool %s, which is paused: nothing new starts" % (key,
                                                                                                 chosen.nodepool_id))
    if not could:  # no auto pool's plan counts the pod, on any reading of their nodes: no plan is for it
        why = _uncounted(pod, chosen, labelled)
        if why:
            return end("skip", "pod %s waits for auto pool %s, whose plan does not count it (%s): nor does "
                               "another auto pool's, so none is planned for it" % (key, chosen.nodepool_id, why))
    log.info("pod event", nodepool_id=chosen.nodepool_id, reason="pod %s waits for auto pool %s"
             % (key, chosen.nodepool_id))
    result = _plan(request, lookup, cluster, settings, dry_run, executor, kube, api, log, chosen.nodepool_id, key,
                   started=started, listed=listed, acked=acked, pending=choice[0] if choice else None)
    # the chosen pool's step reads only that pool and the earlier ones: a later pool refused is named from here
    return result.with_refused(refused) if refused else result


def _plan(request: Any, lookup: Any, cluster: str, settings: Any, dry_run: bool, executor: Any, kube: Any, api: Any,
          log: Any, pool_id: str, key: str, started: Optional[float] = None,
          listed: Optional[List[Any]] = None, acked: Optional[dict] = None,
          pending: Optional[Tuple[List[Any], float]] = None) -> HandlerResult:
    """The pool's plan, coalesced with the plans other events run: see the module docstring. ``listed``: the
    node pools as this event listed them, for its first round (a later one, after a wait or another round,
    lists them again); ``acked``: the nodes ACK lists in each pool as this event read them, the same way;
    ``pending``: the cluster's Pending pods as the choice listed them and when (its first page, the server's
    clock), or None: the first round plans on it where that is as good as a new list (below)."""
    from node_bootstrap.kube import KubeError

    from functions.decision.coalesce import HOLD_S, WAITED_OUT, quiet_since
    from functions.pipeline.auto_pool import run_tick
    from functions.rollout.plan_claim import STALE_MARGIN_S, claim_line, peek_pool
    from functions.rollout.plan_marker import MarkerBusy, PlanMarker, Renewal

    started = time.monotonic() if started is None else started

    fresh = [(listed, acked)]  # the event's list of the pools and of their nodes, for the first round only
    # The choice's list of the Pending pods, once it is known to be as good as a new one for the first round:
    # then that round plans on it, and the cluster's Pending pods are listed once, not twice.
    usable: List[Any] = []

    # The pool's planning claim as last read (one read of its Lease), kept while nothing that came after may
    # have changed what it says: the arrival's read for its answer, a poll's for the line of the wait that
    # gives up right after it, and for the note of the claim waited out. A round reads (and may take) the
    # claim itself, so one clears it: the next line reads the Lease again.
    claim: List[Any] = []

    def peek() -> Any:
        claim.clear()  # a read that fails leaves none: nothing older stands for it
        claim.append(peek_pool(api, pool_id, settings))
        return claim[0]

    def tick(reserve_s: float = 0.0) -> HandlerResult:
        # a round has what is left of this invocation, less ``reserve_s`` kept for a round after it
        claim.clear()
        first, acked_then = fresh.pop() if fresh else (None, None)
        return run_tick(request, lookup, cluster, settings, dry_run, executor, kube, log, only=pool_id,
                        left_s=_left_s(started, settings) - reserve_s, listed=first, acked=acked_then,
                        pending=usable.pop() if usable else None)

    def begun(planned: Optional[int]) -> None:
        """The holder's round began with ``planned`` asks. The choice's list serves its first round when no
        event but this one asked since that list was read: the plan reads the list as a new one's (the
        planning claim compares the pool's change marks with the list's time, and lists again when a change
        came after it: pods may have bound since), and the pods of every ask the round answers for waited
        when it was read (coalesce.quiet_since). A new list would hold more only for pods no ask names, which
        the round never promised to plan (their events come, or the timer). An ask that came after the list
        (a pod that may not be in it, whose event was answered coalesced or whose holder this one took over
        from) gets a new list."""
        if fresh and pending is not None and prior and quiet_since(prior[0], seen, planned, pending[1],
                                                                    STALE_MARGIN_S):
            usable.append(pending)

    def free() -> bool:  # one read of the pool's Lease: a tick lists every Pending pod of the cluster first
        try:
            return not peek().why
        except KubeError:
            return True  # the tick reads it again and says why

    def held() -> str:  # whose claim a wait gave up on, and until when: the poll's read it gives up after, if
        # one came after the last round (nothing but the clock's check between them), else one read of the Lease
        try:
            return claim_line(claim[0] if claim else peek())
        except KubeError as exc:
            return "its planning claim cannot be read now: %s" % one_line(exc, 160)

    def waited() -> Optional[Tuple[str, float]]:  # that claim, noted in the marker as the pool is let go
        return (claim[0].holder, claim[0].until) if claim and claim[0].holder else None

    def claim_now() -> Optional[Tuple[str, float]]:  # the arrival's, where the marker notes a waited-out claim
        try:
            taken = peek()
        except KubeError:
            return None  # not known to be the one waited out: the event plans (and waits) itself
        return taken.holder, taken.until

    if dry_run:  # a dry run shows the plan and writes nothing, the marker included
        usable.extend([pending] if pending is not None else [])  # no ask is coalesced into it: any list will do
        return tick()
    marker = PlanMarker(api, uuid.uuid4().hex[:12], HOLD_S)
    prior: List[Any] = []  # the marker this event's ask was written over
    unknown = False  # the marker write got no answer nor a read back: whose it is, a round's beginning says
    try:
        role, seen = marker.arrive(pool_id, key, request.event_id or "", prior, claim=claim_now)
    except (KubeError, MarkerBusy) as exc:  # planning is always safe: only the coalescing is lost
        # No answer is no verdict: the server may have written this invocation in as the holder, and the
        # pool's events coalesce into it for its hold. One more read says whose the marker is (where that
        # read fails too, the read that marks its round begun does).
        # A refusal (409s only, or any other 4xx: RBAC, an invalid write) is an answer: nothing was written.
        # Not a 429: the client tries again after no answer too (functions/kube/client.py), and ends with the
        # last attempt's 429 where an earlier, unanswered one may have been written.
        refused = isinstance(exc, MarkerBusy) or (exc.status is not None and 400 <= exc.status < 500
                                                  and exc.status != 429)
        read = None if refused else _read_back(marker, pool_id)
        # (not ``held``: that name is the claim's reader, which a wait that gives up calls)
        mine = read if read is not None and read.holder == marker.me else None
        if refused or read is not None and mine is None:  # nothing written, or a read back that names another
            # holder or none (the verdict: this invocation is no holder): its plan answers for its pod alone
            log.warning("plan marker", nodepool_id=pool_id, reason="not usable (%s): planned without coalescing%s"
                        % (one_line(exc, 200), "" if read is None else "; read back, it names %s"
                           % ("invocation %s" % read.holder if read.holder else "no holder")))
            if pending is not None:  # which waited when the choice's list was read (begun, above)
                usable.append(pending)
            # a burst is when the marker is busy and when another invocation plans the pool: wait for it as a
            # holder does, or this pod waits for the timer (its ask was never written for anyone to see)
            try:
                return _after_claims(tick, started, settings, log, pool_id, free=free, held=held)
            finally:
                if not refused:  # an unanswered write still in flight when the marker was read may land after
                    _let_go(marker, pool_id, log)  # it (cleared only where it names this invocation)
        if mine is None:
            # Not read back: the marker may name this invocation, and then the pool's events are answered
            # coalesced into it during its round. So its rounds begin as a holder's do (marking a round begun
            # reads the marker again): this invocation's, it plans as the holder, again while events asked;
            # another's, it plans once without coalescing (below).
            log.warning("plan marker", nodepool_id=pool_id, reason="not read back (%s): planned as its holder "
                        "where the marker names this invocation" % one_line(exc, 200))
        role, seen, unknown = "plan", mine, mine is None  # (maybe) the holder: this invocation plans its rounds
        prior.clear()  # the ask before it is not known: its first round lists the pods again
    if role == "coalesced":
        # Not a promise the holder may not keep: a round that gives up on another invocation's planning claim
        # (CLAIM_WAIT_S), or a holder FC ends, plans no further round, and then the timer plans the pod.
        reason = ("coalesced: a plan of auto pool %s runs now (invocation %s, its round began %.1f s ago): it "
                  "plans the pool's pods, pod %s among them, in a round after this one, or the auto pool timer "
                  "does if it cannot (another invocation's planning claim outlasts its wait, or it ends first)" % (
                      pool_id, seen.holder, max(0.0, marker.now() - seen.round) if seen.round else 0.0, key))
        log.info("pod event", nodepool_id=pool_id, reason=reason)
        return HandlerResult(trigger=request.trigger.value, event_type=request.event_type,
                             event_id=request.event_id, outcome="skip", reason=reason, cluster_id=cluster)
    if role == WAITED_OUT:
        reason = ("another invocation plans auto pool %s and an earlier event waited %d s for it, the most a pod "
                  "event waits, and gave up (%s): not waited for again, pod %s waits for the auto pool timer, which "
                  "plans the pool once the claim is given back or ends" % (
                      pool_id, round(CLAIM_WAIT_S), claim_line(claim[0]), key))
        # INFO: the event that gave up warned once; one WARNING an event would repeat it while the claim holds
        log.info("plan marker", nodepool_id=pool_id, reason=reason)
        return HandlerResult(trigger=request.trigger.value, event_type=request.event_type,
                             event_id=request.event_id, outcome="skip", reason=reason, cluster_id=cluster)
    rounds: List[HandlerResult] = []
    # The hold is short and renewed while this invocation works: ended by FC, it frees the pool within one hold
    renewal = Renewal(marker, pool_id, log).start()
    try:
        _rounds(marker, pool_id, tick, rounds, started, settings, log, free, begun, held, waited)
        if unknown and not rounds:  # the marker names another: planned once without coalescing, then let go
            # where this invocation's unanswered write landed after all
            rounds.append(_after_claims(tick, started, settings, log, pool_id, free=free, held=held))
            _let_go(marker, pool_id, log)
    except BaseException:  # a bug: let the pool go now rather than after its hold
        _let_go(marker, pool_id, log)
        raise
    finally:
        renewal.stop()
    return _merge(request, cluster, pool_id, rounds)


def _rounds(marker: Any, pool_id: str, tick: Any, rounds: List[HandlerResult], started: float, settings: Any,
            log: Any, free: Optional[Callable[[], bool]] = None,
            begun: Optional[Callable[[Optional[int]], None]] = None, held: Optional[Callable[[], str]] = None,
            waited: Optional[Callable[[], Optional[Tuple[str, float]]]] = None) -> None:
    """The holder's rounds: plan, then again while events asked during the round (the module docstring).
    ``begun(planned)``: told the asks a round began with, once its beginning is marked; ``free``, ``held``:
    :func:`_after_claims`'s; ``waited``: the claim a round gave up waiting for (owner, end; as ``held`` read
    it), noted in the marker as the pool is let go (``coalesce.let_go``)."""
    from functions.rollout.plan_claim import planned_elsewhere

    from node_bootstrap.kube import KubeError

    from functions.base.settings import longest_run_s
    from functions.rollout.plan_marker import MarkerBusy

    unmarked_end: List[str] = []  # a round's end could not be marked: one more round was planned for it
    while True:
        # Open to asks only while this round and a worst-case next one both fit: an ask taken now must be
        # planned by this invocation (coalesce.py), and a round starts only when a whole one fits.
        is_open = _left_s(started, settings) >= 2 * longest_run_s(settings)
        try:
            planned = marker.begin_round(pool_id, is_open)
        except (KubeError, MarkerBusy) as exc:
            log.warning("plan marker", nodepool_id=pool_id, reason="round not marked (%s): this round is the "
                        "last, and the pool is let go before it" % str(exc)[:200])
            # Planning is always safe, but this round noted no asks, so it cannot tell which came during it: let
            # go first (the marker still names this invocation), and an event during the round or after finds
            # no holder and plans itself, after this round's planning claim. Kept, the pool's events would be
            # answered coalesced into an invocation that had returned, for its hold.
            _let_go(marker, pool_id, log)
            rounds.append(_after_claims(tick, started, settings, log, pool_id, free=free, held=held))
            break
        if planned is None:  # another invocation holds the pool now (this one's lease ran out): it plans
            break
        if begun is not None:
            begun(planned)
        # An open round keeps a worst-case round's time for the next: the asks it takes are planned then. Its
        # claim and its rollout end that much earlier (the rollout starts waves while more than a wave is left,
        # and a claim wait comes on top, so a round bounded by the invocation alone could leave no time).
        reserve = longest_run_s(settings) if is_open else 0.0
        bound: List[bool] = []  # whether its wait for another's claim ran CLAIM_WAIT_S
        rounds.append(_after_claims(tick, started, settings, log, pool_id, free=free, reserve_s=reserve,
                                    held=held, bound=bound))
        if rounds[-1].outcome in ("retry", "error") or rounds[-1].outcome == "skip" and \
                planned_elsewhere(rounds[-1].reason):
            # a failed round, or another invocation's claim that outlived the wait (another round would only
            # wait again, as long as events keep asking): let go, so later events are not answered coalesced
            # into an invocation that returned, for its hold; noting the claim waited out, so that they end at
            # once while it lasts rather than each waiting for it again (coalesce.py, ``waited``). Only a wait
            # that ran its bound: one this invocation's own time cut short says nothing of the claim (a live
            # tick's may end in seconds), and later events, with their whole invocation, wait for it themselves.
            gave_up = waited() if waited is not None and rounds[-1].outcome == "skip" and bound else None
            _let_go(marker, pool_id, log, gave_up)
            break
        # Another round only while a whole one still fits in this invocation (the timer catches the rest).
        more = _left_s(started, settings) >= longest_run_s(settings)
        try:
            again = marker.end_round(pool_id, planned, more)
        except (KubeError, MarkerBusy) as exc:
            # Whether an event asked during the round cannot be told, and one answered coalesced was told this
            # holder plans again with its pod (a burst is what makes 24 writes in a row conflict): plan once
            # more while a whole round fits (its beginning notes the asks again), once an invocation (a marker
            # that never takes an end would have it plan until its time ran out); else let go, or events
            # coalesce into an invocation that returned, for its lease.
            again = more and not unmarked_end
            unmarked_end.append(pool_id)
            log.warning("plan marker", nodepool_id=pool_id, reason="round end not marked (%s): %s" % (
                str(exc)[:200], "planned once more" if again else "let go"))
            if not again:
                _let_go(marker, pool_id, log)
        if not again:
            if not more and is_open:  # closed rounds took no ask: their events planned themselves
                log.warning("plan marker", nodepool_id=pool_id, reason="the round ran longer than a worst-case "
                            "round, and no time is left for another: pods that arrived meanwhile wait for the "
                            "next event or the auto pool timer")
            break


def _left_s(started: float, settings: Any) -> float:
    """What is left of this invocation's time (``started``: its ``time.monotonic()`` at the start)."""
    from functions.base.settings import invocation_s

    return invocation_s(settings) - (time.monotonic() - started)


CLAIM_POLL_S = 2.0  # how often a holder looks again at a pool another invocation (a timer tick) plans
# The longest a round waits for another invocation's planning claim. A live timer tick holds it while it plans
# (seconds) and while its rollout applies (a node's change, minutes, renewing it); a run FC ended holds it until
# one hold after its last renewal (plan_claim.CLAIM_HOLD_S, 2 minutes). Past 5 minutes, half the timer's
# default period (AutoPoolSchedule, @every 10m), the timer, which never coalesces, plans the pod once the claim
# is given back or ends: waiting longer gains less than one timer period. Not a setting: AutoPoolSchedule is
# the knob for how soon the timer comes.
CLAIM_WAIT_S = 300.0


def _after_claims(tick: Any, started: float, settings: Any, log: Any, pool_id: str,
                  sleep: Any = None, free: Optional[Callable[[], bool]] = None,
                  reserve_s: float = 0.0, held: Optional[Callable[[], str]] = None,
                  bound: Optional[List[bool]] = None) -> HandlerResult:
    """One round, waiting while another invocation (the timer's tick, or one whose marker ran out) holds the
    pool's planning claim: that tick listed the pending pods before this event's pod may have been waiting,
    so letting go now could leave the pod for the next timer tick, minutes away. Bounded by
    :data:`CLAIM_WAIT_S` and by this invocation's time (a whole round must still fit after the wait); past
    either, the round ends in the tick's skip, saying how long it waited and (``held``: one Lease read) whose
    claim it is and until when. ``free``: whether the claim is free now (one Lease read); the round runs
    again only then, not every poll (a round lists the cluster's Pending pods). ``reserve_s``: time kept for
    a round after this one (an open holder's), out of the round and its wait. ``bound``: gets True where the
    wait ended at :data:`CLAIM_WAIT_S` (not at the invocation's time)."""
    from functions.base.settings import longest_run_s
    from functions.rollout.plan_claim import planned_elsewhere

    result = tick(reserve_s)
    since = time.monotonic()
    while result.outcome == "skip" and planned_elsewhere(result.reason):
        waited = time.monotonic() - since
        if _left_s(started, settings) - reserve_s < CLAIM_POLL_S + longest_run_s(settings) \
                or waited + CLAIM_POLL_S > CLAIM_WAIT_S:
            why = "no time is left to wait for it" if waited + CLAIM_POLL_S <= CLAIM_WAIT_S else \
                "waited %d s for it, the most a pod event waits" % round(CLAIM_WAIT_S)
            line = "another invocation plans auto pool %s and %s%s: the pods wait for the next event or the " \
                   "auto pool timer, which plans the pool once the claim is given back or ends" % (
                       pool_id, why, "" if held is None else " (%s)" % held())
            log.warning("plan marker", nodepool_id=pool_id, reason=line)
            if bound is not None and waited + CLAIM_POLL_S > CLAIM_WAIT_S:
                bound.append(True)
            return dataclasses.replace(result, reason="%s; %s" % (line, result.reason))
        (sleep or time.sleep)(CLAIM_POLL_S)
        if free is None or free():
            result = tick(reserve_s)
    return result


def _read_back(marker: Any, pool_id: str) -> Any:
    """The marker as read now (after an arrival whose write got no answer: naming this invocation, that write
    landed); None when it cannot be read."""
    from node_bootstrap.kube import KubeError

    from functions.rollout.plan_marker import MarkerBusy

    try:
        return marker.change(pool_id, lambda m, now: (None, m))
    except (KubeError, MarkerBusy):
        return None


def _let_go(marker: Any, pool_id: str, log: Any, waited: Optional[Tuple[str, float]] = None) -> None:
    """Clear this invocation's hold, noting ``waited``: the claim it waited out (owner, end)."""
    from node_bootstrap.kube import KubeError

    from functions.decision.coalesce import let_go
    from functions.rollout.plan_marker import MarkerBusy

    try:
        marker.change(pool_id, lambda m, now: (let_go(m, marker.me, waited), None))
    except (KubeError, MarkerBusy) as exc:
        log.warning("plan marker", nodepool_id=pool_id, reason="not let go (%s): it runs out with its lease"
                    % str(exc)[:160])


def _merge(request: Any, cluster: str, pool_id: str, rounds: List[HandlerResult]) -> HandlerResult:
    """The rounds of one invocation as one result: every decision and node, the last round's outcome
    unless an earlier one changed something (done)."""
    if not rounds:
        return HandlerResult(trigger=request.trigger.value, event_type=request.event_type, event_id=request.event_id,
                             outcome="skip", reason="coalesced: another invocation took auto pool %s over" % pool_id,
                             cluster_id=cluster)
    last = rounds[-1]
    if len(rounds) == 1:
        return last
    decisions = [d for r in rounds for d in r.decisions]
    nodes = [n for r in rounds for n in (r.nodes or [])]
    outcome = last.outcome if last.outcome in ("retry", "error") else (
        "done" if any(r.outcome == "done" for r in rounds) else last.outcome)
    reason = "%d rounds (events arrived during the first): %s" % (len(rounds), "; ".join(
        "%d. %s" % (i + 1, r.reason) for i, r in enumerate(rounds)))
    return HandlerResult(trigger=request.trigger.value, event_type=request.event_type, event_id=request.event_id,
                         outcome=outcome, reason=reason, cluster_id=cluster, dry_run=last.dry_run,
                         decisions=decisions, nodes=nodes if any(r.nodes is not None for r in rounds) else None,
                         pool_tags=last.pool_tags,
                         refused_pools={pool: line for r in rounds for pool, line in r.refused_pools.items()})
