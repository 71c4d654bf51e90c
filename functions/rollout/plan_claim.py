"""An auto pool's planning claim on the pool's Lease (``functions.decision.claim_rules`` says why and what
the annotations hold): taken before the tick reads the pool, given back when its rollout has ended, with the
GPUs it changed marked in the same write.

Every write is a PUT with the ``resourceVersion`` just read (409 Conflict from kube-apiserver otherwise),
on the Lease the disruption budget uses (``functions.rollout.pool_lease``: it keeps the annotations it did
not write, as this module keeps its slots). Times are the API server's (``KubeApi.server_time``).
"""

import json
import logging
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from node_bootstrap.kube import KubeError

from functions.decision import claim_rules as pc
from functions.decision.budget import lease_name
from functions.decision.layout.dwell import Dwell
from functions.decision.claim_rules import waited_s
from functions.kube import leases
from functions.kube.nodes import EVENT_NAMESPACE
from functions.rollout.pool_lease import CAS_ATTEMPTS, PoolBudget
from functions.base.textsafe import one_line

log = logging.getLogger(__name__)

# The two reasons a tick leaves a pool to another invocation (the skip's text), and what pod_event.py waits on.
BEING_PLANNED = "is being planned by invocation"
CHANGED_SINCE_LIST = "changed after this tick read the pending pods"


def planned_elsewhere(reason: str) -> bool:
    """Whether a tick's skip says another invocation plans the pool now (or just changed it): planning it
    again once that one is done plans the pods that waited meanwhile."""
    return BEING_PLANNED in reason or CHANGED_SINCE_LIST in reason


class Taken(NamedTuple):
    """What taking (or reading) a pool's claim found: ``why`` is "" when this invocation plans the pool,
    else one line saying why not; ``changed`` when each GPU last changed and ``now``, both on the API
    server's clock (the dwell's inputs)."""

    why: str
    changed: Dict[pc.Gpu, float]
    now: float
    pool_changed: float = 0.0  # when any node of the pool last changed (fresh nodes included), 0.0: unknown
    holder: str = ""  # the invocation whose claim keeps the pool, and when that claim ends at the latest
    until: float = 0.0  # (bounded: ``claim_rules.bound_claim``); set by :meth:`PlanClaims.peek`

    def changed_since(self, listed: float) -> bool:
        """Whether the pool changed at or after ``listed`` (a list of the pending pods, on the same clock)."""
        return any(at >= listed - STALE_MARGIN_S for at in list(self.changed.values()) + [self.pool_changed]
                   if at)


def _told(pool_id: str) -> Callable[[str], None]:
    """The reader rule's one line for a pool Lease annotation that is not ours, as a WARNING naming the pool."""
    return lambda line: log.warning("pool %s: %s", pool_id, line)


def _marks(notes: Mapping[str, str], now: float, pool_id: str) -> Tuple[Dict[pc.Gpu, float], float]:
    """The pool Lease's change marks: per GPU (the dwell's), and when any node of the pool last changed."""
    return (pc.read_changed(notes.get(pc.CHANGED_ANNOTATION), now, _told(pool_id)),
            pc.read_pool_changed(notes.get(pc.POOL_CHANGED_ANNOTATION), now, _told(pool_id)))


class PlanClaims:
    """The planning claims of one invocation (``owner``). ``clock``: the invocation's wall-clock seconds;
    ``horizon_s``: the longest one invocation runs (a claim never holds longer); ``dwell_s``: how long a
    change mark is kept."""

    def __init__(self, kube: Any, owner: str, clock: Callable[[], float], horizon_s: float, dwell_s: float,
                 namespace: str = EVENT_NAMESPACE) -> None:
        self.lease = PoolBudget(kube, owner, clock, horizon_s, namespace)  # its Lease reads and clocks
        self.kube, self.owner, self.horizon_s, self.dwell_s = kube, owner, horizon_s, dwell_s
        self.namespace = namespace
        self.held: List[str] = []
        self.until = clock() + horizon_s  # this invocation's end, on its own clock
        self.marks: Dict[str, List[pc.Gpu]] = {}  # per pool, the GPUs this invocation changed
        # per pool, the line of a claim the API server failed or RBAC refused: the pool is left unplanned and the
        # tick ends retry (its pods wait for that, not for the next timer)
        self.failed: Dict[str, str] = {}
        self.touched: set = set()  # the pools of which this invocation changed a node (fresh ones included)

    def _write(self, lease: dict, annotations: Dict[str, Optional[str]]) -> None:
        leases.write(self.kube, self.namespace, lease, annotations)  # the spec stays the budget's

    def take(self, pool_id: str, pool: str, until: float) -> Taken:
        """Claim ``pool_id`` until ``until`` (the invocation's clock); ``pool``: its name in the line. KubeError:
        the Lease cannot be used (the caller leaves the pool unplanned)."""
        for _ in range(CAS_ATTEMPTS):
            lease = self.lease._lease(pool_id)
            local, now = self.lease._now()
            notes = (lease.get("metadata") or {}).get("annotations") or {}
            stored = pc.read_claim(notes.get(pc.PLANNING_ANNOTATION), _told(pool_id))
            changed, touched = _marks(notes, now, pool_id)
            other = pc.held_by_another(stored, self.owner, now, self.horizon_s)
            if other:
                bounded = pc.bound_claim(stored, now, self.horizon_s)
                if bounded != stored:  # written back clamped: a forged expiry runs out within one invocation
                    try:
                        self._write(lease, {pc.PLANNING_ANNOTATION: pc.write_claim(bounded)})
                    except KubeError as exc:  # the next reader writes it; this tick skips the pool either way
                        log.info("clamped claim of pool %s not written back: %s", pool_id, exc)
                return Taken("pool %s %s %s" % (pool, BEING_PLANNED, other), changed, now, touched)
            mine = pc.Claim(self.owner, now + max(0.0, min(until - local, self.horizon_s)))
            try:
                self._write(lease, {pc.PLANNING_ANNOTATION: pc.write_claim(mine)})
            except KubeError as exc:
                if exc.status != 409:
                    # No answer is no verdict: the server may have written the claim. Given back with the
                    # others (release removes only a claim of ours), or it holds the pool for a whole horizon.
                    self.held.append(pool_id)
                    raise
                continue
            self.held.append(pool_id)
            return Taken("", changed, now, touched)
        return Taken("pool %s: its planning claim changed under %d writes in a row (other invocations); the next "
                     "tick plans it" % (pool, CAS_ATTEMPTS), {}, 0.0)

    def peek(self, pool_id: str, pool: str) -> Taken:
        """What :meth:`take` would find, written nowhere (a dry run): no Lease is no claim."""
        try:
            lease = self.kube.get_lease(self.namespace, lease_name(pool_id))
        except KubeError as exc:
            if exc.status != 404:
                raise
            lease = {}
        now = self.lease._now()[1]
        notes = (lease.get("metadata") or {}).get("annotations") or {}
        changed, touched = _marks(notes, now, pool_id)
        stored = pc.read_claim(notes.get(pc.PLANNING_ANNOTATION), _told(pool_id))
        other = pc.held_by_another(stored, self.owner, now, self.horizon_s)
        if not other:
            return Taken("", changed, now, touched)
        bounded = pc.bound_claim(stored, now, self.horizon_s)
        return Taken("pool %s %s %s" % (pool, BEING_PLANNED, other), changed, now, touched, other,
                     bounded.expires if bounded is not None else now)

    def release(self, pool_id: str, gpus: Iterable[pc.Gpu] = (), touched: bool = False) -> None:
        """Give the claim back and mark ``gpus`` changed now, and the pool when ``touched`` (or ``gpus``). A
        failure is logged, not raised: the claim runs out with this invocation's time; a mark not written lets
        one more change through the dwell, and a tick whose list came before this change plan from it."""
        marks = sorted(set(gpus))
        try:
            for _ in range(CAS_ATTEMPTS):
                lease = self.lease._lease(pool_id)
                now = self.lease._now()[1]
                notes = (lease.get("metadata") or {}).get("annotations") or {}
                stored = pc.read_claim(notes.get(pc.PLANNING_ANNOTATION))
                update: Dict[str, Optional[str]] = {}
                if stored is not None and stored.owner == self.owner:
                    update[pc.PLANNING_ANNOTATION] = None
                if marks or pc.CHANGED_ANNOTATION in notes:
                    update[pc.CHANGED_ANNOTATION] = pc.write_changed(
                        pc.read_changed(notes.get(pc.CHANGED_ANNOTATION), now), now, self.dwell_s, marks)
                if marks or touched:
                    update[pc.POOL_CHANGED_ANNOTATION] = json.dumps(round(now, 3))
                if not update or all(notes.get(k) == v for k, v in update.items()):
                    return
                try:
                    self._write(lease, update)
                    return
                except KubeError as exc:
                    if exc.status != 409:
                        raise
            log.warning("planning claim of pool %s not given back: the lease kept changing", pool_id)
        except KubeError as exc:
            log.warning("planning claim of pool %s not given back: %s", pool_id, exc)
        finally:
            if pool_id in self.held:
                self.held.remove(pool_id)


    def mark(self, changes: Sequence[Tuple[Any, Any, Sequence[Any]]], results: Optional[Sequence[Mapping[str, Any]]],
             fresh: Sequence[Any] = ()) -> None:
        """Remember the GPUs whose node was sent its change (``changes``: the auto tick's (pool, decision,
        GpuTargets); ``results``: the rollout's node results): a node that took it, or failed on the way
        (it may have changed some GPUs), marks each GPU its plan changed; one deferred, skipped or left
        unchanged marks nothing. ``fresh``: the decisions of fresh nodes (MIG turned on, not held back by the
        dwell): one that took its layout marks its pool changed, not its GPUs."""
        outcome = {str(r.get("node_name") or ""): r.get("outcome") for r in results or ()}
        # the GPUs the node left as they were (busy, held): not changed, so not held back by the dwell either
        left = {str(r.get("node_name") or ""): {g.get("gpu") for g in r.get("left") or () if isinstance(g, dict)}
                for r in results or ()}
        for pool, decision, targets in changes:
            if outcome.get(decision.node_name) in CHANGED_OUTCOMES:
                self.marks.setdefault(pool.nodepool_id, []).extend(
                    (t.node, t.index) for t in targets
                    if t.change != "none" and t.index not in left.get(decision.node_name or "", ()))
                self.touched.add(pool.nodepool_id)
        for decision in fresh:
            if outcome.get(decision.node_name) in CHANGED_OUTCOMES:
                self.touched.add(decision.nodepool_id)

    def release_all(self) -> None:
        for pool_id in list(self.held):
            self.release(pool_id, self.marks.get(pool_id, ()), pool_id in self.touched)


CHANGED_OUTCOMES = ("partitioned", "failed", "reboot-required")
STALE_MARGIN_S = 1.0  # the API server's Date has whole seconds: a mark this close to the list counts as after it


def horizon_s(settings: Any) -> float:
    """The longest one invocation works (FC ends it then): a claim never holds longer."""
    from functions.base.settings import invocation_s
    from functions.rollout.run import run_lease_s

    return float(max(invocation_s(settings), run_lease_s(settings)))


def tick_claims(kube: Any, settings: Any, left_s: Optional[float] = None) -> PlanClaims:
    """The claims of one auto pool tick, under a new invocation id (the rollout's records carry the same).
    ``left_s``: the time the invocation has left, when less than a whole one (a pod event's later round): a
    claim never outlives the invocation that takes it."""
    from functions.rollout import run

    claims = PlanClaims(kube, uuid.uuid4().hex[:12], run.clock, horizon_s(settings), settings.auto_dwell_s)
    if left_s is not None:
        claims.until = min(claims.until, run.clock() + max(0.0, left_s))
    return claims


def claim_pool(claims: PlanClaims, pool: Any, dry_run: bool, listed: Optional[float],
               pending: Sequence[Mapping[str, Any]], settings: Any,
               relist: Optional[Callable[[], Tuple[Sequence[Mapping[str, Any]], Optional[float]]]] = None
               ) -> Tuple[Optional[Dwell], str]:
    """Before the tick reads ``pool``: its claim (a dry run only reads it) and the dwell's inputs; or "" and
    one line saying why the pool is not planned now: another invocation plans it, or changed it after
    ``listed`` (when this tick read the pending pods: they may have bound since) and ``relist`` (the pending
    pods read again, and when) is not given or still names a time before that change, or the Lease cannot
    be used (fail closed: a pool planned without its claim could be planned twice)."""
    pool_id = pool.nodepool_id
    try:
        taken = claims.peek(pool_id, pool_id) if dry_run else claims.take(pool_id, pool_id, claims.until)
    except KubeError as exc:
        claims.failed[pool_id] = _unusable(pool_id, exc)
        return None, claims.failed[pool_id]
    if taken.why:
        return None, taken.why
    if listed is not None and taken.changed_since(listed) and relist is not None:
        # The claim is this tick's now, so nothing changes the pool before the pods are read again: the pool
        # is planned on that list, not left to the next tick (a pod whose event was lost waited two timers).
        pending, listed = relist()
    if listed is not None and taken.changed_since(listed):
        return None, ("pool %s %s (another invocation's rollout ended): the next tick plans it"
                      % (pool_id, CHANGED_SINCE_LIST))
    return _dwell(taken, pending, settings), ""


def _unusable(pool_id: str, exc: KubeError) -> str:
    """The line of a pool whose planning claim cannot be used: RBAC's 403 names the permission the Role lacks;
    any other failure (a 5xx, no answer) is the API server's, and the tick ends retry."""
    from functions.rollout.executor import missing_permission, rbac_forbidden

    told = one_line(exc, 160)
    if rbac_forbidden(exc):
        return ("pool %s: its planning claim (Lease %s) cannot be used: the function's Kubernetes role may not %s "
                "(%s): not planned; RBAC: deploy/rbac.yaml grants leases get, create, update"
                % (pool_id, lease_name(pool_id), missing_permission(exc) or "use it", told))
    return ("pool %s: its planning claim (Lease %s) cannot be used (%s): not planned; the tick ends retry"
            % (pool_id, lease_name(pool_id), told))


def _dwell(taken: Taken, pending: Sequence[Mapping[str, Any]], settings: Any) -> Dwell:
    """The dwell's inputs from what the pool's Lease said (``taken``) and the pods that wait."""
    from functions.decision.layout.matching import pod_key

    waited = {pod_key(p): waited_s(p, taken.now) for p in pending}
    return Dwell(taken.changed, taken.now, settings.auto_dwell_s, settings.auto_max_wait_s, waited)


def claim_line(taken: Taken) -> str:
    """Whose planning claim :meth:`PlanClaims.peek` found and when it ends (the API server's clock), or that
    the pool is free now."""
    if not taken.holder:
        return "the pool's planning claim is free now"
    return "invocation %s holds the pool's planning claim until %s, %d s from now, unless it gives it back " \
           "first" % (taken.holder, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(taken.until)),
                      max(0, round(taken.until - taken.now)))


def peek_pool(kube: Any, pool_id: str, settings: Any, owner: str = "peek") -> Taken:
    """The pool's claim and change marks as :meth:`PlanClaims.peek` reads them, for an invocation that takes
    no claim itself (``advise``; a pod event waiting on another invocation's plan). KubeError: unreadable."""
    return PlanClaims(kube, owner, time.time, horizon_s(settings), settings.auto_dwell_s).peek(pool_id, pool_id)


def dwell_for_advice(kube: Any, pool_id: str, pending: Sequence[Mapping[str, Any]], settings: Any
                     ) -> Tuple[Optional[Dwell], str]:
    """What ``advise`` needs to show the tick's plan: the dwell's inputs from the pool's Lease, read only
    (:meth:`PlanClaims.peek`), and "" or one note: another invocation plans the pool now, or the Lease cannot
    be read (then the advice is the plan without the dwell, and says so)."""
    try:
        taken = peek_pool(kube, pool_id, settings, "advise")
    except KubeError as exc:
        return None, ("the dwell is left out: the pool's Lease %s cannot be read (%s); the tick keeps GPUs changed "
                      "in the last %d s as they are" % (lease_name(pool_id), one_line(exc, 160),
                                                         settings.auto_dwell_s))
    return _dwell(taken, pending, settings), ("%s: what it applies may differ from this advice" % taken.why
                                              if taken.why else "")
