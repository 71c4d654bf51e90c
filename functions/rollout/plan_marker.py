"""An auto pool's plan marker on the cluster: who plans the pool now and how many events asked since
(``functions.decision.coalesce`` decides; this module reads and writes).

One ``coordination.k8s.io/v1`` Lease per auto pool, ``ack-mig-hook-plan-<pool id>`` in the namespace the
function writes its Events and budget Leases to (the same Role grants get, create and update there). The
marker is the annotation ``ack-mig-hook/plan``; ``spec.holderIdentity`` and ``spec.renewTime`` repeat the
holder for ``kubectl get lease``. Every write is a PUT with the ``resourceVersion`` just read (409 Conflict
otherwise, then read again), the budget Lease's pattern (``functions.rollout.pool_lease``); a separate Lease
so that a burst of events never makes a rollout's slot writes conflict.

Time is the API server's (the ``Date`` of its answers), as for the budget.
"""

import copy
import logging
import random
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

from node_bootstrap.kube import KubeError

from functions.decision import coalesce as co
from functions.decision.budget import lease_name
from functions.kube import leases
from functions.kube.nodes import EVENT_NAMESPACE
from functions.base.textsafe import one_line

log = logging.getLogger(__name__)

# A renewal's one API call, retries included, ends within this (KubeApi.bounded), well under RENEW_S, so that
# Renewal.stop can wait out a call in flight: none outlives the invocation (FC freezes the instance, and the
# thread wakes in a later one), where a late renewal would hold a pool whose let-go failed for one more hold.
RENEW_CALL_S = 1.5
CAS_ATTEMPTS = 24  # each 409 means another writer's write landed: a burst of events drains in as many tries


class MarkerBusy(Exception):
    """The marker changed under every attempt: the caller goes on without it (planning is always safe)."""


def marker_lease(pool_id: str) -> str:
    return lease_name(pool_id, co.LEASE_PREFIX)


class PlanMarker:
    """The plan markers of one invocation (``me``). ``hold_s``: how long a write holds the pool
    (``coalesce.HOLD_S``; :class:`Renewal` renews it while the invocation works)."""

    def __init__(self, kube: Any, me: str, hold_s: float, namespace: str = EVENT_NAMESPACE,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.kube, self.me, self.hold_s, self.namespace = kube, me, hold_s, namespace
        self.clock, self.sleep = clock, sleep

    def now(self) -> float:
        return leases.cluster_now(self.kube, self.clock)

    def _lease(self, pool_id: str) -> dict:
        return leases.read_or_create(self.kube, self.namespace, marker_lease(pool_id),
                                     {"ack-mig-hook/nodepool-id": pool_id})

    def _write(self, lease: dict, marker: co.Marker, now: float) -> None:
        leases.write(self.kube, self.namespace, lease, {co.MARKER_ANNOTATION: co.write_marker(marker)},
                     marker.holder or "", now, marker.until - now)

    def change(self, pool_id: str, step: Callable[[co.Marker, float], Tuple[Optional[co.Marker], Any]],
               going: Callable[[], bool] = lambda: True, stopped: Any = None) -> Any:
        """Read the marker, ``step(marker, now) -> (marker to write or None, answer)``, write it only onto the
        version read; read again after a conflict. Returns the answer; MarkerBusy after CAS_ATTEMPTS
        conflicts; KubeError when the Lease cannot be used at all. ``going``: asked before each read; False
        returns ``stopped`` with nothing more asked of the API server."""
        for _ in range(CAS_ATTEMPTS):
            if not going():
                return stopped
            lease = self._lease(pool_id)
            now = self.now()
            text = ((lease.get("metadata") or {}).get("annotations") or {}).get(co.MARKER_ANNOTATION)
            new, answer = step(co.read_marker(text, now, self.hold_s,
                                              lambda line: log.warning("pool %s: %s", pool_id, line)), now)
            if new is None:
                return answer
            try:
                self._write(lease, new, now)
                return answer
            except KubeError as exc:
                if exc.status != 409:
                    raise
            self.sleep(random.uniform(0.0, 0.05))  # writers that met stop meeting
        raise MarkerBusy("the plan marker of pool %s changed under %d writes in a row" % (pool_id, CAS_ATTEMPTS))

    def arrive(self, pool_id: str, pod: str, event_id: str, before: Optional[list] = None,
               claim: Optional[Callable[[], Optional[co.Claim]]] = None) -> Tuple[str, co.Marker]:
        """(``plan``, ``coalesced`` or ``waited-out``, the marker as written). ``before``: gets the marker this
        write replaced (its ``last``: the ask before this one, which a pod event's first round reads).
        ``claim``: reads the pool's planning claim (owner, end; None: unread), only where the marker notes a
        waited-out claim and names no open holder, once an arrival."""
        read: List[Optional[co.Claim]] = []

        def step(marker: co.Marker, now: float) -> Tuple[co.Marker, Tuple[str, co.Marker]]:
            if claim is not None and marker.waited and not read and not (marker.live(now) and marker.open):
                read.append(claim())
            new, role = co.arrive(marker, self.me, now, self.hold_s, pod, event_id, read[0] if read else None)
            if before is not None:
                before[:] = [marker]  # the one read last: a write after a conflict replaced that one
            return new, (role, new)
        return self.change(pool_id, step)

    def begin_round(self, pool_id: str, is_open: bool = True) -> Optional[int]:
        """Wait out the pool's spacing, then mark the round begun (``is_open``: this invocation has time for
        another round after it): the ``asked`` count it plans for, or None when the marker is no longer this
        invocation's."""
        wait = self.change(pool_id, lambda marker, now: (None, co.wait_before_round(marker, now)))
        if wait > 0:
            self.sleep(wait)

        def step(marker: co.Marker, now: float) -> Tuple[Optional[co.Marker], Optional[int]]:
            new = co.begin_round(marker, self.me, now, self.hold_s, is_open)
            return new, (None if new is None else new.asked)
        return self.change(pool_id, step)

    def end_round(self, pool_id: str, planned: int, more: bool) -> bool:
        """Whether to plan again (an event asked during the round); otherwise the marker is let go."""
        return self.change(pool_id, lambda marker, now: co.end_round(marker, self.me, planned, more))

    def renew(self, pool_id: str, going: Callable[[], bool] = lambda: True) -> bool:
        """Renew this invocation's hold on the pool; False when the marker no longer names it (nothing written).
        ``going``: asked after each read, just before the write: False (the renewals were stopped) writes nothing."""
        def step(marker: co.Marker, now: float) -> Tuple[Optional[co.Marker], bool]:
            new = co.renew(marker, self.me, now, self.hold_s) if going() else None
            return new, new is not None
        return self.change(pool_id, step, going, False)


class Renewal:
    """A holder's hold on its pool, renewed every ``every_s`` (``coalesce.RENEW_S``) from a thread while the
    invocation works, between :meth:`start` and :meth:`stop`, until the marker no longer names it. The hold is
    short so that a holder FC ends frees its pool within it (coalesce.py); a renewal that fails is tried again
    at the next one (several may fail before the hold lapses, and a lapsed hold costs one extra plan only)."""

    def __init__(self, marker: PlanMarker, pool_id: str, log: Any, every_s: Optional[float] = None) -> None:
        self.marker, self.pool_id, self.log = marker, pool_id, log
        # its calls through a client that ends each within RENEW_CALL_S (where the backend has one: a real API
        # server's), so that stop() can wait out the one in flight
        kube = marker.kube.bounded(RENEW_CALL_S) if hasattr(marker.kube, "bounded") else marker.kube
        self.renewer = copy.copy(marker)  # the same marker (invocation, hold, clock), through that client
        self.renewer.kube = kube
        self.every_s = co.RENEW_S if every_s is None else every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plan-marker-renewal", daemon=True)

    def start(self) -> "Renewal":
        """Start the renewals; where no thread can start (the instance's limit), the holder works without them:
        its hold lapses after one hold, which costs one extra plan at most (the class docstring)."""
        try:
            self._thread.start()
        except RuntimeError as exc:
            self.log.warning("plan marker", nodepool_id=self.pool_id, reason="renewals not started (%s: %s): the "
                             "hold lapses within %d s, and an event after it plans beside this one"
                             % (type(exc).__name__, one_line(exc, 160), round(self.marker.hold_s)))
        return self

    def stop(self) -> None:
        """No renewal writes after this: one whose read is in flight drops what it read, and the call in flight
        is waited out (each ends within RENEW_CALL_S, retries included; a new connection's TCP connect and TLS
        handshake each within it too), so none outlives the invocation: FC freezes the instance once it returns,
        and a call left running would go on, or retry, whenever a later invocation woke it. A write the server
        took renews only a marker that names this invocation, onto the version it read, so never over a let-go
        or another holder's."""
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=2 * RENEW_CALL_S + 0.5)

    def _run(self) -> None:
        try:
            self._renew()
        finally:  # this thread's connection (a client keeps one per thread) goes with it
            getattr(self.renewer.kube, "close", lambda: None)()

    def _renew(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                if not self.renewer.renew(self.pool_id, lambda: not self._stop.is_set()):
                    return  # let go, or another invocation holds the pool now
            except Exception as exc:  # noqa: BLE001  (no caller to tell: the hold lapses, one extra plan at most)
                self.log.warning("plan marker", nodepool_id=self.pool_id, reason="hold not renewed (%s): it lapses "
                                 "unless a later renewal lands" % one_line(exc, 200))
