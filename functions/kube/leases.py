"""The hook's ``coordination.k8s.io/v1`` Leases: read one, creating it when missing, and write it back onto
the version read. The pool budget's slots and planning claim (``functions.rollout.pool_lease``,
``functions.rollout.plan_claim``) and the pod events' plan marker (``functions.rollout.plan_marker``) each
keep their annotations on such a Lease; their rules stay theirs, the Lease plumbing is here.

Every write is a PUT carrying the ``resourceVersion`` just read: kube-apiserver applies it only to that
version (409 Conflict otherwise), so a writer that lost the race reads again.
"""

import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Optional

from node_bootstrap.kube import KubeError


def cluster_now(kube: Any, clock: Callable[[], float] = time.time) -> float:
    """The cluster's time: the API server's, as its last answer said (``KubeApi.server_time``), or ``clock``
    where the backend has no server clock (a snapshot's MemoryKube, a test double). Leases are timed on it,
    so invocations whose own clocks differ agree on when a slot, a claim or a marker runs out."""
    server = kube.server_time() if hasattr(kube, "server_time") else None
    return clock() if server is None else server


def micro_time(epoch: float) -> str:
    """metav1.MicroTime as the API server serializes it (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_or_create(kube: Any, namespace: str, name: str, annotations: Mapping[str, str]) -> dict:
    """The Lease ``namespace/name``, created with ``annotations`` when there is none (another invocation
    creating it first is fine: theirs is read)."""
    try:
        return kube.get_lease(namespace, name)
    except KubeError as exc:
        if exc.status != 404:
            raise
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "ack-mig-hook"},
                         "annotations": dict(annotations)},
            "spec": {}}
    try:
        return kube.create_lease(namespace, body)
    except KubeError as exc:
        if exc.status != 409:  # another invocation created it first: read theirs
            raise
    return kube.get_lease(namespace, name)


def write(kube: Any, namespace: str, lease: Mapping[str, Any], annotations: Mapping[str, Optional[str]],
          holder: Optional[str] = None, now: float = 0.0, duration_s: float = 0.0) -> None:
    """PUT ``lease`` (as read: its resourceVersion is the precondition) with ``annotations`` set (None removes
    one), the others kept. ``holder``: a holder to name in the spec as Kubernetes' own leases do (``kubectl
    get lease`` shows it), renewed at ``now`` for ``duration_s``; "" to clear it; None to leave the spec."""
    lease = dict(lease)
    meta = dict(lease.get("metadata") or {})
    merged = dict(meta.get("annotations") or {})
    for key, value in annotations.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    meta["annotations"] = merged
    lease["metadata"] = meta
    spec = dict(lease.get("spec") or {})
    if holder:
        spec.update(holderIdentity=holder, renewTime=micro_time(now), leaseDurationSeconds=max(1, int(duration_s)))
        spec.setdefault("acquireTime", micro_time(now))
    elif holder == "":
        spec.pop("holderIdentity", None)
    lease["spec"] = spec
    kube.replace_lease(namespace, lease)
