"""The pool's disruption budget across invocations: a slot taken on the pool's Lease before a node is cordoned,
given back when the node ends (``functions.decision.budget`` counts; this module reads and writes).

One ``coordination.k8s.io/v1`` Lease per pool, in the namespace the function writes its Events to, holds the
slot table in the annotation ``ack-mig-hook/slots``; ``spec.holderIdentity`` and ``spec.renewTime`` name the
last invocation that took a slot and when, as Kubernetes' own leases do (``kubectl get lease`` shows them).
Every write is a PUT with the ``resourceVersion`` just read, which kube-apiserver applies only to that
version (409 Conflict otherwise): of two invocations that count the pool at once, the second one's write is
refused, and it counts again with the first one's slot in the table.

The pause (``ack-mig-hook/paused=true``) is read again just before a slot is written: a pause set after this
invocation planned stops the node before its cordon.

Time is the API server's (the ``Date`` of the Lease's answer, ``KubeApi.server_time``), not the invocation's:
every invocation compares slots on one clock, so one whose clock runs ahead by more than a run lease still
counts another's live slot (issue 36). A slot is written as the server's now plus what is left of this run's
lease, never more than one run lease; one read with a later expiry is clamped to one run lease from now
(``functions.decision.budget.bound``) and, when it keeps a node waiting, written back clamped, so a forged
``expires: 1e15`` runs out within one run lease. A slot table that does not read at all
(``functions.decision.budget.UnreadableSlots``) takes no slot and is not written over. A backend with no
server clock (the snapshot's MemoryKube) uses the invocation's clock.
"""

import logging
from typing import Any, Callable, Optional, Tuple

from node_bootstrap.kube import KubeError

from functions.decision import budget as pb
from functions.decision.waves import POOL_LABEL, KubeNode
from functions.kube import leases
from functions.kube.nodes import EVENT_NAMESPACE

log = logging.getLogger(__name__)

CAS_ATTEMPTS = 8  # lease writes in a row that may meet another writer's newer version



class PoolBudget:
    """Slots of the pools' budgets for one invocation (``owner``). ``clock``: the clock the caller's times
    (``take``'s ``expires``) are on: the invocation's wall clock, or the rollout's, which is the cluster's
    already (``functions.rollout.run.cluster_clock``); ``lease_s``: the run lease
    (``functions.rollout.run.run_lease_s``), the longest a slot holds."""

    def __init__(self, kube: Any, owner: str, clock: Callable[[], float], lease_s: float,
                 namespace: str = EVENT_NAMESPACE) -> None:
        self.kube, self.owner, self.clock, self.namespace = kube, owner, clock, namespace
        self.lease_s = lease_s

    def _now(self) -> Tuple[float, float]:
        """(the invocation's clock, the cluster's): the API server's as its last answer to this thread said,
        or the invocation's own where the backend has no server clock."""
        local = self.clock()
        server = self.kube.server_time()
        return local, local if server is None else server

    def _slots(self, lease: dict, now: float) -> Tuple[dict, bool]:
        """The Lease's slots bounded at ``now`` (budget.bound), and whether any was past one run lease."""
        stored = pb.read_slots(((lease.get("metadata") or {}).get("annotations") or {}).get(pb.SLOTS_ANNOTATION))
        slots = pb.bound(stored, now, self.lease_s)
        return slots, slots != stored

    def _lease(self, pool_id: str) -> dict:
        return leases.read_or_create(self.kube, self.namespace, pb.lease_name(pool_id),
                                     {pb.SLOTS_ANNOTATION: "{}", "ack-mig-hook/nodepool-id": pool_id})

    def _write(self, lease: dict, slots: dict, holder: str, expires: float, now: float) -> None:
        """``expires`` and ``now``: on the cluster's clock (``_now``). An empty ``holder`` leaves the spec."""
        leases.write(self.kube, self.namespace, lease, {pb.SLOTS_ANNOTATION: pb.write_slots(slots, now, self.lease_s)},
                     holder or None, now, min(expires - now, self.lease_s))

    def take(self, pool_id: str, pool: str, node: str, limit: int, expires: float,
             paused: Callable[[], str] = lambda: "") -> str:
        """Take a slot for ``node`` until ``expires``; "" when taken (or already this run's), else why not.
        ``paused``: why the pool is paused now ("" when it is not). KubeError: the Lease or the node list
        cannot be used (the caller defers the node, untouched)."""
        for _ in range(CAS_ATTEMPTS):
            lease = self._lease(pool_id)
            local, now = self._now()
            try:
                slots, clamped = self._slots(lease, now)
            except pb.UnreadableSlots as exc:  # it may hold any number of slots: none is taken, nothing written
                return ("the disruption budget of pool %s cannot be counted: %s, on Lease %s/%s; no node of the "
                        "pool is taken until it is removed (kubectl annotate lease -n %s %s %s-) once no rollout "
                        "runs there; this node waits" % (pool, exc, self.namespace, pb.lease_name(pool_id),
                                                         self.namespace, pb.lease_name(pool_id),
                                                         pb.SLOTS_ANNOTATION))
            held = slots.get(node)
            if held is not None and held.owner == self.owner and held.expires > now:
                return ""
            why = paused()
            if why:
                return why
            nodes = self.kube.list_nodes("%s=%s" % (POOL_LABEL, pool_id), reduce=KubeNode.from_object)
            counted = pb.disrupted(nodes, slots, now)
            ok, why = pb.admit(node, counted, limit, pool)
            table = pb.live_slots(nodes, slots, now)
            if not ok:
                if clamped:  # the clamp written back: a slot past one run lease runs out within one
                    try:
                        self._write(lease, table, "", 0.0, now)
                    except KubeError as exc:  # the next reader writes it; this node waits either way
                        log.info("clamped slots of pool %s not written back: %s", pool_id, exc)
                return why
            mine = now + max(0.0, min(expires - local, self.lease_s))  # this run's lease, on the cluster's clock
            table[node] = pb.Slot(self.owner, mine)
            try:
                self._write(lease, table, self.owner, mine, now)
                return ""
            except KubeError as exc:
                if exc.status != 409:
                    raise
        return ("the disruption budget of pool %s changed under %d writes in a row (other invocations took slots); "
                "this node waits for the next wave or invocation" % (pool, CAS_ATTEMPTS))

    def release(self, pool_id: str, node: str, holder: str = "") -> bool:
        """Give ``node``'s slot back: this run's, or with ``holder`` the slot of that run, which ended without
        giving it back (``functions.rollout.auto_waves.finish_stranded`` ends its record), and only once it has run
        out on the cluster's clock (the one the record ran out on): until then that run may still be alive and its
        slot counts. Another run's slot on the node (one that took the node over) stays. Whether a slot was given
        back. A failure is logged, not raised: this run's slot expires with its lease, a node its holder visibly
        ended no longer counts meanwhile, and an expired slot counts for nothing (the next slot taken in the pool
        drops it). A 409 reads the Lease again and judges the slot again, at most ``CAS_ATTEMPTS`` times: the Lease
        also carries the planning claim and the other nodes' slots, whose writes conflict without touching this one."""
        owner = holder or self.owner
        try:
            for _ in range(CAS_ATTEMPTS):
                try:  # read only: a Lease that is not there holds no slot, and is not made to say so
                    lease = self.kube.get_lease(self.namespace, pb.lease_name(pool_id))
                except KubeError as exc:
                    if exc.status == 404:
                        return False
                    raise
                now = self._now()[1]
                try:
                    slots = self._slots(lease, now)[0]
                except pb.UnreadableSlots as exc:  # nothing to give back that can be told apart: left as it is
                    log.warning("slot of node %s in pool %s not given back: %s", node, pool_id, exc)
                    return False
                held: Optional[pb.Slot] = slots.get(node)
                if held is None or held.owner != owner or (holder and held.expires > now):
                    return False
                del slots[node]
                try:
                    self._write(lease, slots, "", 0.0, now)
                    return True
                except KubeError as exc:
                    if exc.status != 409:
                        raise
            log.warning("slot of node %s in pool %s not given back: the lease kept changing", node, pool_id)
        except KubeError as exc:
            log.warning("slot of node %s in pool %s not given back: %s", node, pool_id, exc)
        return False
