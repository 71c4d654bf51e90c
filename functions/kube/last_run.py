"""The run record on the cluster (``functions.decision.run_record`` says what it holds): written by the function at the
end of an invocation, read by ``status`` and ``doctor``.

One ``coordination.k8s.io/v1`` Lease, ``ack-mig-hook-last-run``, in the namespace the function already writes its
Events and budget Leases to: the same Role grants get, create and update there, so the record needs no new RBAC.
``spec.holderIdentity`` and ``spec.renewTime`` repeat the last request id and time for ``kubectl get lease``.

Every write is a PUT with the ``resourceVersion`` just read (409 Conflict otherwise: read again and merge), the
budget Lease's pattern (``functions.rollout.pool_lease``). Last-writer-wins would be enough for ``last``, but not for
the per-trigger entries: two invocations of different triggers ending together would drop one trigger's entry, and
``status`` would then call a working timer late. Time is the API server's (the ``Date`` of the Lease's answer), so
the age ``status`` shows does not depend on the function's or the operator's clock.
"""

import time
from typing import Any, Dict, Optional, Tuple

from node_bootstrap.kube import KubeError
from node_bootstrap.outside import OutsideDataError, as_object

from functions.decision import run_record as lr
from functions.kube import leases
from functions.kube.nodes import EVENT_NAMESPACE
from functions.base.textsafe import one_line

CAS_ATTEMPTS = 4
WRITE_DEADLINE_S = 20.0  # the record is written after the event's work: it never holds the invocation longer


def _now(kube: Any) -> Tuple[float, str]:
    server = kube.server_time() if hasattr(kube, "server_time") else None
    return (time.time(), "local") if server is None else (server, "server")


def _lease(kube: Any, namespace: str) -> dict:
    return leases.read_or_create(kube, namespace, lr.RECORD_LEASE, {})


def record_client(backend: Any, deadline_s: float = WRITE_DEADLINE_S) -> Any:
    """The client the record is written with: a short-deadline sibling of the event's own (functions.kube.client
    ``KubeApi.sibling``), or the backend itself where it has none (a snapshot's MemoryKube, a test double)."""
    if hasattr(backend, "sibling"):
        return backend.sibling(deadline_s)
    return backend


def write(kube: Any, result: Any, request_id: str, duration_ms: float,
          namespace: str = EVENT_NAMESPACE, redact: Any = None) -> Dict[str, Any]:
    """Merge this invocation's entry into the record and write it; the entry written. KubeError when the Lease
    cannot be read or written (the caller logs it: a record never changes how the event ended). ``redact``:
    the log lines' cleaning (the credentials, secrets read at run time), applied to the reason: whoever may
    read Leases in the namespace reads the record."""
    for _ in range(CAS_ATTEMPTS):
        lease = _lease(kube, namespace)
        meta = dict(lease.get("metadata") or {})
        annotations = dict(meta.get("annotations") or {})
        at, clock = _now(kube)
        try:
            stored = lr.read_text(annotations.get(lr.RECORD_ANNOTATION), at)
        except OutsideDataError:
            stored = None  # not ours, or from a future version we cannot read: replaced by ours
        new = lr.entry(result, at, clock, request_id, duration_ms)
        if redact is not None:  # before the cut: a secret the cut splits would no longer be found whole
            new["reason"] = lr.short_reason(redact(one_line(result.reason or "")))
        annotations[lr.RECORD_ANNOTATION] = lr.write_text(lr.merge(stored, new))
        meta["annotations"] = annotations  # (carries the resourceVersion read: the precondition)
        spec = dict(lease.get("spec") or {}, holderIdentity=new["request_id"] or "ack-mig-hook",
                    renewTime=leases.micro_time(at))
        try:
            kube.replace_lease(namespace, dict(lease, metadata=meta, spec=spec))
            return new
        except KubeError as exc:
            if exc.status != 409:
                raise
    raise KubeError("the run record kept changing under %d writes" % CAS_ATTEMPTS, 409)


def read(kube: Any, namespace: str = EVENT_NAMESPACE) -> Dict[str, Any]:
    """What ``status`` and ``doctor`` show: ``{"record", "now", "error"}``. ``record`` None with ``error`` None: no
    run recorded yet; ``error``: why it could not be read (no Lease API on this backend, 403, unreadable)."""
    if not hasattr(kube, "get_lease"):
        return {"record": None, "now": time.time(), "error": "no Kubernetes API to read it from"}
    try:
        lease = kube.get_lease(namespace, lr.RECORD_LEASE)
    except KubeError as exc:
        now = _now(kube)[0]
        if exc.status == 404:
            return {"record": None, "now": now, "error": None}
        return {"record": None, "now": now, "error": one_line(exc, 200)}
    now = _now(kube)[0]
    notes = as_object(as_object(lease).get("metadata")).get("annotations")
    if notes is not None and not isinstance(notes, dict):
        return {"record": None, "now": now, "error": "the run record Lease's annotations are not a map"}
    text = as_object(notes).get(lr.RECORD_ANNOTATION)
    if text is not None and not isinstance(text, str):
        return {"record": None, "now": now, "error": "the run record (%s) is not text" % lr.RECORD_ANNOTATION}
    try:
        return {"record": lr.read_text(text, now), "now": now, "error": None}
    except OutsideDataError as exc:
        return {"record": None, "now": now, "error": str(exc)[:200]}


def freshness(info: Dict[str, Any]) -> Optional[float]:
    """Seconds since the last recorded run, or None."""
    record = info.get("record")
    return None if record is None else max(0.0, info["now"] - record["last"]["at"])
