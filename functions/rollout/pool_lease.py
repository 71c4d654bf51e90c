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
"""

import logging
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from node_bootstrap.kube import KubeError

from functions.decision import budget as pb
from functions.decision.waves import POOL_LABEL, KubeNode
from functions.kube.nodes import EVENT_NAMESPACE

log = logging.getLogger(__name__)

CAS_ATTEMPTS = 8  # lease writes in a row that may meet another writer's newer version


def _micro_time(epoch: float) -> str:
    """metav1.MicroTime as the API server serializes it (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PoolBudget:
    """Slots of the pools' budgets for one invocation (``owner``). ``clock``: wall-clock seconds."""

    def __init__(self, kube: Any, owner: str, clock: Callable[[], float], namespace: str = EVENT_NAMESPACE) -> None:
        self.kube, self.owner, self.clock, self.namespace = kube, owner, clock, namespace

    def _lease(self, pool_id: str) -> dict:
        name = pb.lease_name(pool_id)
        try:
            return self.kube.get_lease(self.namespace, name)
        except KubeError as exc:
            if exc.status != 404:
                raise
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "ack-mig-hook"},
                             "annotations": {pb.SLOTS_ANNOTATION: "{}", "ack-mig-hook/nodepool-id": pool_id}},
                "spec": {}}
        try:
            return self.kube.create_lease(self.namespace, body)
        except KubeError as exc:
            if exc.status != 409:  # another invocation created it first: read theirs
                raise
        return self.kube.get_lease(self.namespace, name)

    def _write(self, lease: dict, slots: dict, holder: str, expires: float) -> None:
        now = self.clock()
        lease = dict(lease)
        meta = dict(lease.get("metadata") or {})
        meta["annotations"] = dict(meta.get("annotations") or {}, **{pb.SLOTS_ANNOTATION: pb.write_slots(slots)})
        lease["metadata"] = meta  # (carries the resourceVersion read: the precondition)
        spec = dict(lease.get("spec") or {})
        if holder:
            spec.update(holderIdentity=holder, renewTime=_micro_time(now),
                        leaseDurationSeconds=max(1, int(expires - now)))
            spec.setdefault("acquireTime", _micro_time(now))
        lease["spec"] = spec
        self.kube.replace_lease(self.namespace, lease)

    def take(self, pool_id: str, pool: str, node: str, limit: int, expires: float,
             paused: Callable[[], str] = lambda: "") -> str:
        """Take a slot for ``node`` until ``expires``; "" when taken (or already this run's), else why not.
        ``paused``: why the pool is paused now ("" when it is not). KubeError: the Lease or the node list
        cannot be used (the caller defers the node, untouched)."""
        for _ in range(CAS_ATTEMPTS):
            lease = self._lease(pool_id)
            slots = pb.read_slots(((lease.get("metadata") or {}).get("annotations") or {}).get(pb.SLOTS_ANNOTATION))
            held = slots.get(node)
            now = self.clock()
            if held is not None and held.owner == self.owner and held.expires > now:
                return ""
            why = paused()
            if why:
                return why
            nodes = self.kube.list_nodes("%s=%s" % (POOL_LABEL, pool_id), reduce=KubeNode.from_object)
            counted = pb.disrupted(nodes, slots, now)
            ok, why = pb.admit(node, counted, limit, pool)
            if not ok:
                return why
            table = pb.live_slots(nodes, slots, now)
            table[node] = pb.Slot(self.owner, expires)
            try:
                self._write(lease, table, self.owner, expires)
                return ""
            except KubeError as exc:
                if exc.status != 409:
                    raise
        return ("the disruption budget of pool %s changed under %d writes in a row (other invocations took slots); "
                "this node waits for the next wave or invocation" % (pool, CAS_ATTEMPTS))

    def release(self, pool_id: str, node: str) -> None:
        """Give ``node``'s slot back, when it is this run's. A failure is logged, not raised: the slot expires
        with this run's lease, and a node its holder visibly ended no longer counts meanwhile."""
        try:
            for _ in range(CAS_ATTEMPTS):
                lease = self._lease(pool_id)
                notes = (lease.get("metadata") or {}).get("annotations") or {}
                slots = pb.read_slots(notes.get(pb.SLOTS_ANNOTATION))
                held: Optional[pb.Slot] = slots.get(node)
                if held is None or held.owner != self.owner:
                    return
                del slots[node]
                try:
                    return self._write(lease, slots, "", 0.0)
                except KubeError as exc:
                    if exc.status != 409:
                        raise
            log.warning("slot of node %s in pool %s not given back: the lease kept changing", node, pool_id)
        except KubeError as exc:
            log.warning("slot of node %s in pool %s not given back: %s", node, pool_id, exc)
