"""The alert marks on the cluster (``functions.decision.alert_marks`` says what they hold and why): read before a
``node-failed`` line, or a ``rollout-stopped`` line for an earlier run's stop record, is sent, written once the
webhook took it.

One ``coordination.k8s.io/v1`` Lease, ``ack-mig-hook-alerts``, in the namespace the run record lives in: the
Role that lets the function keep its run record there (get, create, update) covers it, no new RBAC.

The write is a PUT with the ``resourceVersion`` just read (409 Conflict: read again and merge), as the run
record's (``functions.kube.last_run``): two events whose nodes failed at once must not drop each other's marks.
Each call gets a client of its own with a short deadline (``last_run.record_client``): the marks never hold an
invocation long, and an API server that does not answer costs a repeated alert at worst.
"""

from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Set

from node_bootstrap.kube import KubeError
from node_bootstrap.outside import OutsideDataError, as_object

from functions.decision import alert_marks as am
from functions.kube import last_run, leases
from functions.kube.nodes import EVENT_NAMESPACE

CAS_ATTEMPTS = 4
DEADLINE_S = 10.0  # per call: read before the webhook, write after it


def client(backend: Any) -> Any:
    """A short-deadline client for one call on the marks (the run record's kind), or the backend itself where it
    has none (a snapshot's MemoryKube)."""
    return last_run.record_client(getattr(backend, "backend", backend), DEADLINE_S)  # a NodeView: its backend


def _marks(lease: Mapping[str, Any], note: Optional[Callable[[str], None]] = None) -> am.Marks:
    """``note``: told the one line of a document that is not ours."""
    notes = as_object(as_object(lease).get("metadata")).get("annotations")
    text = notes.get(am.MARK_ANNOTATION) if isinstance(notes, dict) else None
    try:
        return am.read_text(text if isinstance(text, str) else None)
    except OutsideDataError as exc:
        if note is not None:
            note(str(exc))
        return {}  # not ours, or from a version we cannot read: nothing told, and the next write replaces it


def get(kube: Any, namespace: str = EVENT_NAMESPACE) -> Optional[Dict[str, Any]]:
    """The marks' Lease as it is (None when there is none): one GET, which one event's checks share
    (``functions.pipeline.notify``). KubeError when it cannot be read (the caller tells everything: a repeat,
    never a loss)."""
    try:
        return kube.get_lease(namespace, am.MARK_LEASE)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


def kept(kube: Any, lease: Optional[Mapping[str, Any]], note: Optional[Callable[[str], None]] = None) -> am.Marks:
    """The marks of ``lease`` (as :func:`get` read it) that still count as told: an expired one tells it again.
    ``note``: as :func:`_marks`'s."""
    return am.kept(_marks(lease, note), leases.cluster_now(kube)) if lease is not None else {}


def read(kube: Any, namespace: str = EVENT_NAMESPACE) -> am.Marks:
    """The marks that still count as told ({} when there is no Lease). KubeError as :func:`get`."""
    return kept(kube, get(kube, namespace))


def told(kube: Any, keys: Mapping[str, str], namespace: str = EVENT_NAMESPACE) -> Set[str]:
    """The instance ids of ``keys`` (instance id -> failure key) whose failure is marked told. KubeError when the
    Lease cannot be read (the caller tells every failure: a repeat, never a loss)."""
    if not keys:
        return set()
    return am.told(read(kube, namespace), keys)


def mark(kube: Any, keys: Dict[str, str], namespace: str = EVENT_NAMESPACE, sticky: Iterable[str] = ()) -> None:
    """Mark ``keys`` told (merged into the marks stored; ``sticky``: the ids whose mark is sticky). KubeError when
    the Lease cannot be written; the alert went out, so the worst is that a retry of the event tells it again."""
    if not keys:
        return
    for _ in range(CAS_ATTEMPTS):
        lease = leases.read_or_create(kube, namespace, am.MARK_LEASE, {})
        text = am.write_text(am.merge(_marks(lease), keys, leases.cluster_now(kube), sticky))
        try:
            leases.write(kube, namespace, lease, {am.MARK_ANNOTATION: text})
            return
        except KubeError as exc:
            if exc.status != 409:
                raise
    raise KubeError("the alert marks kept changing under %d writes" % CAS_ATTEMPTS, 409)


def passed(kube: Any, ids: Iterable[str], namespace: str = EVENT_NAMESPACE,
           read: Optional[Callable[[], Optional[Dict[str, Any]]]] = None) -> None:
    """Remove the sticky marks of ``ids`` (nodes that got past their claim: ``am.passed``); no write when none of
    them has one. KubeError when the Lease cannot be read or written: the mark stays, and the node's next refusal
    for the same cause goes untold while the run's result still shows it (the caller logs a warning)."""
    wanted = sorted(set(ids))
    if not wanted:
        return
    for attempt in range(CAS_ATTEMPTS):
        # the first try on the Lease as the event read it (``read``, :func:`get`'s answer), a conflict's afresh
        lease = read() if read is not None and attempt == 0 else get(kube, namespace)
        if lease is None:
            return
        marks = _marks(lease)
        kept = am.passed(marks, wanted)
        if kept == marks:
            return
        try:
            leases.write(kube, namespace, lease, {am.MARK_ANNOTATION: am.write_text(kept)})
            return
        except KubeError as exc:
            if exc.status != 409:
                raise
    raise KubeError("the alert marks kept changing under %d writes" % CAS_ATTEMPTS, 409)
