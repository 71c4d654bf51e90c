"""An auto pool's planning claim on the pool's Lease (``functions.decision.claim_rules`` says why and what
the annotations hold): taken before the tick reads the pool, given back when its rollout has ended, with the
GPUs it changed marked in the same write.

Every write is a PUT with the ``resourceVersion`` just read (409 Conflict from kube-apiserver otherwise),
on the Lease the disruption budget uses (``functions.rollout.pool_lease``: it keeps the annotations it did
not write, as this module keeps its slots). Times are the API server's (``KubeApi.server_time``).
"""

import copy
import json
import logging
import threading
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

# How long a planning claim holds the pool past its holder's last write of it (and never past the holder's end):
# the holder renews it every CLAIM_RENEW_S from a thread while it holds it (ClaimRenewal), so a holder FC ends
# (its Timeout, a crash) frees the pool within CLAIM_HOLD_S, not at the end of its whole invocation's time.
# A live holder counts its claim lost FENCE_MARGIN_S before the hold it last wrote runs out, on its own clock
# from before that write (PlanClaims.holds): it starts no plan and no wave after that, so a second planner that
# takes a lapsed claim never plans beside it (leader election's renew deadline under its lease duration).
CLAIM_HOLD_S = 120.0
CLAIM_RENEW_S = 15.0
FENCE_MARGIN_S = 10.0

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
                 namespace: str = EVENT_NAMESPACE, hold_s: float = CLAIM_HOLD_S) -> None:
        self.lease = PoolBudget(kube, owner, clock, horizon_s, namespace)  # its Lease reads and clocks
        self.kube, self.owner, self.horizon_s, self.dwell_s = kube, owner, horizon_s, dwell_s
        self.clock, self.namespace = clock, namespace
        self.hold_s = min(hold_s, horizon_s)  # a claim's hold past its last write (CLAIM_HOLD_S)
        self.held: List[str] = []
        # per pool held: the invocation's end on the API server's clock (no renewal writes past it), and when,
        # on this invocation's clock, it stops counting on the claim (holds(): the hold its last write set, from
        # before that write, less FENCE_MARGIN_S; none where that write held it to the invocation's end)
        self.ends: Dict[str, float] = {}
        self.fence: Dict[str, float] = {}
        self.lost: Dict[str, str] = {}  # per pool, why its claim is no longer this invocation's (a renewal read)
        self.renewal: Optional["ClaimRenewal"] = None
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
            end = now + max(0.0, min(until - local, self.horizon_s))
            mine = pc.Claim(self.owner, min(end, now + self.hold_s))
            try:
                self._write(lease, {pc.PLANNING_ANNOTATION: pc.write_claim(mine)})
            except KubeError as exc:
                if exc.status != 409:
                    # No answer is no verdict: the server may have written the claim. Given back with the
                    # others (release removes only a claim of ours), or it holds the pool for one hold.
                    self.held.append(pool_id)
                    raise
                continue
            self.held.append(pool_id)
            self.ends[pool_id] = end
            self._fenced(pool_id, local, now, end)
            self.lost.pop(pool_id, None)
            return Taken("", changed, now, touched)
        return Taken("pool %s: its planning claim changed under %d writes in a row (other invocations); the next "
                     "tick plans it" % (pool, CAS_ATTEMPTS), {}, 0.0)

    def renew(self, pool_id: str, going: Callable[[], bool] = lambda: True) -> bool:
        """Write this invocation's claim on ``pool_id`` again, holding one more ``hold_s`` (never past the
        invocation's end), onto the version just read; False when the Lease no longer holds it (given back,
        run out, another's: noted in ``lost``, nothing written) or ``going`` says no just before the write.
        KubeError: the Lease cannot be used (the next renewal tries again)."""
        for _ in range(CAS_ATTEMPTS):
            if not going():
                return False
            lease = self.lease._lease(pool_id)
            local, now = self.lease._now()
            notes = (lease.get("metadata") or {}).get("annotations") or {}
            stored = pc.bound_claim(pc.read_claim(notes.get(pc.PLANNING_ANNOTATION)), now, self.horizon_s)
            if stored is None or stored.owner != self.owner:
                self.lost[pool_id] = ("its planning claim is no longer this invocation's (%s)"
                                      % ("held by invocation %s" % stored.owner if stored else "it ran out"))
                return False
            end = self.ends.get(pool_id)  # None: given back meanwhile
            if not going() or end is None:
                return False
            try:
                self._write(lease, {pc.PLANNING_ANNOTATION: pc.write_claim(
                    pc.Claim(self.owner, min(end, now + self.hold_s)))})
            except KubeError as exc:
                if exc.status != 409:
                    raise
                continue
            self._fenced(pool_id, local, now, end)
            return True
        return False

    def _fenced(self, pool_id: str, local: float, now: float, end: float) -> None:
        """After a write of the claim at ``now`` (the API server's clock; ``local``: this invocation's, read
        before the write): until when this invocation counts on it."""
        self.fence[pool_id] = local + self.hold_s - FENCE_MARGIN_S if now + self.hold_s < end else float("inf")

    def holds(self, pool_id: str) -> bool:
        """Whether this invocation may still act on ``pool_id`` as its planner: it holds the claim and the hold
        it last wrote has more than FENCE_MARGIN_S left by its own clock (counted from before that write, so
        the API server's expiry is later still; a claim written to the invocation's end holds to it)."""
        return (pool_id in self.held and pool_id not in self.lost
                and self.clock() < self.fence.get(pool_id, float("-inf")))

    def lapsed(self) -> str:
        """"" while every claim this invocation holds still holds (:meth:`holds`), else one line naming the
        pools whose claim it may have lost: nothing more is started for them (another invocation may plan). Only
        claims it took count: one whose write went unanswered is in ``held`` to be given back, never planned."""
        gone = [pool_id for pool_id in self.held if pool_id in self.ends and not self.holds(pool_id)]
        if not gone:
            return ""
        return "; ".join("pool %s: %s: this invocation starts nothing more on it; another invocation plans it"
                         % (pool_id, self.lost.get(pool_id) or "its planning claim was not renewed within %d s"
                            % round(self.hold_s - FENCE_MARGIN_S)) for pool_id in gone)

    def start_renewals(self) -> None:
        """Renew the claims held every CLAIM_RENEW_S from a thread until :meth:`release_all` (once)."""
        if self.renewal is None and self.hold_s < self.horizon_s:
            self.renewal = ClaimRenewal(self).start()

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
        failure is logged, not raised: the claim runs out one hold after its last renewal; a mark not written lets
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
            self.ends.pop(pool_id, None)


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
        if self.renewal is not None:  # no renewal after this: a late one would only meet a 409 (release's write)
            self.renewal.stop()
        for pool_id in list(self.held):
            self.release(pool_id, self.marks.get(pool_id, ()), pool_id in self.touched)


class ClaimRenewal:
    """The renewals of one invocation's planning claims (:meth:`PlanClaims.renew`), every ``every_s`` from a
    thread, through a client whose calls each end within RENEW_CALL_S (plan_marker.Renewal's reasons: stop()
    waits out the one in flight, so none outlives the invocation). A renewal that fails is tried at the next;
    the holder stops starting work once its hold may have run out (:meth:`PlanClaims.holds`)."""

    def __init__(self, claims: PlanClaims, every_s: Optional[float] = None) -> None:
        from functions.rollout.plan_marker import RENEW_CALL_S

        self.claims, self.call_s = claims, RENEW_CALL_S
        self.every_s = CLAIM_RENEW_S if every_s is None else every_s
        kube = claims.kube.bounded(RENEW_CALL_S) if hasattr(claims.kube, "bounded") else claims.kube
        self.renewer = copy.copy(claims)  # the same state (held, ends, fence, lost), through that client
        self.renewer.kube = kube
        self.renewer.lease = PoolBudget(kube, claims.owner, claims.clock, claims.horizon_s, claims.namespace)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plan-claim-renewal", daemon=True)

    def start(self) -> "ClaimRenewal":
        try:
            self._thread.start()
        except RuntimeError as exc:  # no thread: the claims lapse after one hold, and the holder stops then
            log.warning("planning claims not renewed (%s): they hold %d s", one_line(exc, 160),
                        round(self.claims.hold_s))
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=2 * self.call_s + 0.5)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.every_s):
                for pool_id in [p for p in self.claims.held if p not in self.claims.lost]:
                    try:
                        self.renewer.renew(pool_id, lambda: not self._stop.is_set())
                    except Exception as exc:  # noqa: BLE001  (no caller to tell: the holder stops once it lapses)
                        log.warning("planning claim of pool %s not renewed (%s): it lapses unless a later renewal "
                                    "lands", pool_id, one_line(exc, 200))
        finally:
            getattr(self.renewer.kube, "close", lambda: None)()


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
    if not dry_run:
        claims.start_renewals()  # held while this invocation works on the pool, lapsing soon after it ends
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
           "first or renews it while it works" % (taken.holder, time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                              time.gmtime(taken.until)),
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
