"""Carrying out the waves of a rollout (:class:`RolloutExecutor`), or saying what it would do
(:class:`DryRunRolloutExecutor`). ``functions.rollout.run`` plans; this module acts.

Each wave node: claim, cordon, drain, apply (the delivery executor), wait for the new capacity, uncordon,
every step recorded in the node annotation ``ack-mig-hook/rollout`` before the next begins, so a
function killed at any point continues on the next invocation without repeating a finished node. A node
that only gains instances (``drain`` False) skips the cordon and the drain, and its apply asks the node
to destroy nothing: a node whose real placements need a destroy refuses (``destroy-required``), which is
recorded so the next plan drains it.

After a wave, the next one is planned from the nodes as they are then (``Rollout.replan``) and started
while the invocation has time for its worst case; each wave's records carry a lease of their own. A pool
whose last wave moved no node (each one deferred at its claim) waits for the next invocation.

**The lease is a compare-and-swap.** Every write of the record (the claim, each step, the end) is a
merge patch that carries the Node's ``metadata.resourceVersion`` as this run last read or wrote it; the
API server applies it only to that version (409 Conflict otherwise). The claim re-reads the node rather
than trust the event's first listing: a node another live invocation now holds is deferred, one it
finished meanwhile is skipped, one whose holder's lease ran out is taken over at its recorded step. A 409
on a later write re-reads the node: while the record is still this run's (the node's own labels or
status changed), the write is tried again on the new version; once it names another invocation, this run
leaves the node to it. Two invocations that list the same nodes at once thus apply each node once.

Transient API errors are retried by the client (``functions.kube.client``); a capacity read that still fails
is polled again until the capacity deadline, a pod list until the drain deadline. What still fails is counted
against a node only when it is the node's own (:func:`nodes_own`): a claim the API server fails, or RBAC refuses,
defers the node with nothing written (``NOT_CLAIMED``; RBAC's permission named once, no further node tried); a
failure after the claim leaves each node at its recorded step (``API_FAILED``, no stopped rollout); either
way the event ends retry (``Rollout.held_up``).
"""

import hashlib
import logging
import re
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from node_bootstrap.kube import KubeError

from functions.base.model import ACTION_DEFER, Decision
from functions.rollout import drain as dr
from functions.rollout.pool_lease import PoolBudget
from functions.rollout.record_end import end_or_remove, removal
from functions.decision import waves as rp
from functions.base.settings import longest_run_s as run_lease
from functions.base.textsafe import one_line

log = logging.getLogger(__name__)

DEFERRED, DRAIN_TIMEOUT, FAILED, SKIPPED = "deferred", "drain-timeout", "failed", "skipped"
DRAIN_REFUSED = "drain-refused"  # the API server refuses an eviction for good (a pod under several budgets)
GONE = "gone"  # the Node was deleted (the autoscaler, a spot reclaim, a person) while the wave worked on it
DESTROY_REQUIRED = rp.DESTROY_REQUIRED  # the node refused a destroy-nothing apply; the next plan drains it
# The code of a failed node whose claim the API server refused (NodeRefused): nothing recorded, so the pool's
# rollout is not stopped by it (functions.pipeline.notify tells it as a failed node, not a stopped rollout).
CLAIM_REFUSED = "claim-refused"
# The code of a node whose record the API server refused after its claim (its annotations grew to the size limit
# meanwhile, a webhook): the record was removed, so nothing stops the pool's rollout (``_unrecorded``).
RECORD_REFUSED = "record-refused"
# The code of a node the API server failed after its claim (a 5xx, no answer, a write that kept meeting newer
# versions): its record stays at the step it reached, which the next invocation resumes, so the pool's rollout is
# not stopped by it (functions.pipeline.notify tells the node, left mid-way, as failed) and the event ends retry.
API_FAILED = "api-failed"
# The first words of the reason of a node whose claim the API server refused for a cause of its own: it never got
# past its claim, so the sticky alert mark of an earlier refusal stays (functions.pipeline.notify._passed).
CLAIM_FAILED = "cannot claim or cordon"
# The first words of the reason of a node whose claim failed for a cause that is not the node's: the API server
# did not answer (a 5xx or 429 after the client's retries, no answer, 401) or the function's Role refused the
# call (RBAC's 403). Nothing was written on the node and nothing is counted against it: it is deferred, not
# failed (no node-failed line, no stopped rollout), and the event says why (``Rollout.held_up``).
NOT_CLAIMED = "not claimed"
POLL_S = 2.0
CAS_ATTEMPTS = 5  # writes in a row that may meet a newer version of the node before the step gives up


class LeaseLost(Exception):
    """Another invocation's record replaced this run's: the node is left to it."""

    def __init__(self, node: str, progress: Optional[rp.Progress]) -> None:
        super().__init__(node)
        self.progress = progress

    def why(self) -> str:
        p = self.progress
        return ("another invocation (%s) took this node over at step %s; it is left to that run"
                % (p.owner or "-", p.step) if p is not None else "its rollout record was removed meanwhile; the "
                "node is left as it is (the next invocation plans it again)")


class NodeGone(Exception):
    """The Node object is no longer there (404): the node ends ``gone`` and the wave goes on."""


class NodeRefused(KubeError):
    """The API server refused the claim's write for a cause of the node's own, which no retry and no later run
    changes: a 4xx other than 401 (the credentials: every node's), 404 (gone), 409 (a newer version) and 429
    (throttling), e.g. a 422 for annotations another party filled to the size limit, a webhook's 403. Not
    RBAC's 403 (``nodes "x" is forbidden: User "u" cannot patch resource "nodes"``): the function's Role is
    every node's cause, and failing each node of the pool at once for it would send an alert per node per run."""


# kube-apiserver's authorizer words every RBAC refusal so (k8s.io/apiserver endpoints/handlers/responsewriters
# ForbiddenStatusError: "<resource> \"<name>\" is forbidden: User \"<user>\" cannot <verb> resource ...");
# an admission webhook's or policy's 403 names the webhook or policy after "is forbidden: " instead. Only the
# words up to the user are read: an error keeps 300 characters of the message (functions.kube.client), and a
# long node or user name (253 characters each) cuts it before "cannot", never before "User" (at most 282 in).
_RBAC_FORBIDDEN = re.compile(r'is forbidden: User "')


# kube-apiserver's words for the permission RBAC refused: ``cannot <verb> resource "<resource>"`` (a subresource
# as ``pods/eviction``), and the call the client names first in every error (functions.kube.client: ``<METHOD>
# <path>: HTTP <status> ...``), from which the permission is read when the message was cut before those words.
_RBAC_DENIED = re.compile(r'cannot ([a-z]+) resource "([a-z0-9./-]+)"')
_CALL = re.compile(r"^([A-Z]+) (/[^\s:?]*)")
_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def rbac_forbidden(exc: KubeError) -> bool:
    """Whether the API server refused the call by RBAC (the function's Role, so every node's), not for a
    cause of one object's (a webhook's or a policy's 403)."""
    return exc.status == 403 and bool(_RBAC_FORBIDDEN.search(str(exc)))


def missing_permission(exc: KubeError) -> str:
    """``<verb> <resource>`` of the permission an RBAC 403 refused ("" when neither the message nor the call
    says it): the message's words, else the call's method and path (``GET /api/v1/pods`` is ``list pods``)."""
    text = one_line(exc)
    words = _RBAC_DENIED.search(text)
    if words:
        return "%s %s" % words.groups()
    call = _CALL.match(text)
    if not call:
        return ""
    segs = [s for s in call.group(2).split("/") if s]
    segs = segs[2:] if segs[:1] == ["api"] else segs[3:] if segs[:1] == ["apis"] else []
    if len(segs) > 2 and segs[0] == "namespaces":
        segs = segs[2:]
    if not segs:
        return ""
    verb = _VERBS.get(call.group(1), "get" if len(segs) > 1 else "list")
    return "%s %s" % (verb, "/".join([segs[0]] + segs[2:3]))


def nodes_own(exc: KubeError) -> bool:
    """Whether the API server refused a write of the node's for a cause of the node's own (:class:`NodeRefused`):
    a 4xx other than 401, 404, 409, 429 and RBAC's 403. A 5xx, no answer, a 429 after the retries, a 401 or RBAC's
    403 is the API server's or the function's, every node's alike."""
    return exc.status is not None and 400 <= exc.status < 500 and exc.status not in (401, 404, 409, 429) and \
        not rbac_forbidden(exc)


def _refusal(exc: KubeError) -> KubeError:
    if nodes_own(exc):
        return NodeRefused(one_line(exc), exc.status)  # one line: it becomes the node's reason
    return exc


def event(kube: Any, node: str, reason: str, message: str, warning: bool = False) -> None:
    """A core v1 Event on the Node, so ``kubectl describe node`` tells the story. The name is derived
    from the content: the same event again (a rerun, a defer every 30 minutes) is a 409, not a pile."""
    if kube is None:
        return
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    digest = hashlib.sha256(("%s\n%s\n%s" % (node, reason, message)).encode("utf-8")).hexdigest()[:16]
    body = {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "%s.%s" % (node, digest), "namespace": "default"},
            # the node's name as its uid, as the kubelet's own Node events (kubectl describe node finds both)
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
            "source": {"component": "ack-mig-hook"}, "reportingComponent": "ack-mig-hook",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1}
    try:
        kube.create_event(body)
    except KubeError as exc:  # events are a courtesy: never fail a rollout step for one
        if exc.status != 409:
            log.warning("event %s on %s not written: %s", reason, node, exc)


def _uncordoned(w: Any) -> str:
    """What the end of a drain that stopped does to the cordon: this run's is lifted, someone else's stays."""
    cordoned = bool(getattr(getattr(w, "progress", None), "cordoned", False))
    return "uncordoned" if cordoned else "still cordoned (someone else's cordon, left as it was)"


def _opt_out(node: rp.KubeNode, previous: Optional[rp.Progress]) -> tuple:
    """Whether this rollout holds the autoscaler's scale-down opt-out on the node, and the annotation to
    write: set when missing (a cordoned, drained node is empty, just what scale-down looks for); one already
    there is someone else's unless this hook's earlier record says it set it."""
    if rp.SCALE_DOWN_DISABLED in node.annotations:
        return bool(previous and previous.autoscaler), None
    return True, {rp.SCALE_DOWN_DISABLED: "true"}


def _deferred(d: Decision) -> dict:
    return {"instance_id": d.instance_id, "node_name": d.node_name, "outcome": DEFERRED, "reason": d.reason,
            "gpus": None}


def created_capacity(created: Any, left: Any) -> Dict[str, int]:
    """An auto pool node's capacity to wait for after its per-GPU apply: at least one of each profile the
    plan created on a GPU the node did not leave as it was (``left``: the node's list of such GPUs). Never
    exact: the instances kept were there before and a busy GPU keeps what it had."""
    skipped = {g.get("gpu") for g in left or () if isinstance(g, dict)}
    names = {profile for index, profiles in (created or {}).items() if index not in skipped for profile in profiles}
    return {rp.resource_name(p): 1 for p in sorted(names)}


class RolloutExecutor:
    """Carries out the wave: claim and cordon, drain, apply (the inner executor), capacity, uncordon."""

    def __init__(self, inner: Any, rollout: Any, clock: Callable[[], float], sleep: Callable[[float], None],
                 on_result: Optional[Callable[[dict], None]] = None) -> None:
        # ``clock``: the rollout's (``functions.rollout.run.cluster_clock``, the API server's): every record's
        # ``since`` and ``expires`` and every hold judged here are on the one clock all invocations share.
        self.inner, self.rollout, self.kube = inner, rollout, rollout.kube
        self.clock, self.sleep = clock, sleep
        self.on_result = on_result or (lambda result: None)
        self.settings = rollout.settings.rollout
        self.rules = dr.Rules.from_settings(self.settings)
        self.refused: Dict[str, str] = {}  # nodes that refused a destroy-nothing apply in this invocation: why
        self.budget = PoolBudget(self.kube, rollout.owner, clock, run_lease(rollout.settings))
        self.slots: Dict[str, str] = {}  # node name -> pool id: the pool slots this run holds
        # Nodes whose claim the API server refused (NodeRefused) in this invocation: no later plan of it takes
        # them, since with no record written they would come first again.
        self.unwritable: set = set()
        # The node and the words of the permission RBAC refused at a claim (None when none): the Role refuses
        # every node alike, so no further node is claimed in this invocation and the line is told once.
        self.forbidden: Optional[Tuple[str, str]] = None

    def execute(self, request: Any, decisions: Sequence[Decision]) -> List[dict]:
        waves = self.rollout.waves
        results: Dict[str, dict] = {}
        others = [d for d in decisions if d.instance_id not in waves and d.action != ACTION_DEFER]
        for r in self.inner.execute(request, others):
            results[r["instance_id"]] = r
        for d in decisions:
            if d.action == ACTION_DEFER:
                # No Event per waiting node: the wait is the pool's (a later wave, a stopped rollout, another
                # invocation's node), told once in the result and by `status`; 10,000 nodes would otherwise
                # mean 10,000 Events per invocation. A node deferred for a cause of its own gets one below.
                results[d.instance_id] = _deferred(d)
        wave = [waves[d.instance_id] for d in decisions if d.instance_id in waves]
        number = 0
        while wave:
            number += 1
            self._run_wave(request, wave, results)
            for w in wave:
                iid = w.decision.instance_id
                result = dict(w.result or {}, wave=number)  # which wave of this invocation took the node
                if result.get("outcome") == DESTROY_REQUIRED:
                    self.refused[iid] = result.get("reason") or DESTROY_REQUIRED
                elif iid in self.refused:  # the drained way, after the node refused to only add instances
                    result["reason"] = "%s; before that: %s" % (result.get("reason"), self.refused.pop(iid))
                results[iid] = result
            wave = self._next_wave(wave, results)
        return [results[d.instance_id] for d in decisions if d.instance_id in results]

    def _next_wave(self, last: List[Any], results: Dict[str, dict]) -> List[Any]:
        """The next wave, planned now, when the invocation has time for it; the results of the nodes it
        does not take are updated (deferred with the new reason, or skipped). [] when there is none."""
        rollout = self.rollout
        if self.forbidden:  # the Role refuses every node alike: no further wave in this invocation
            return []
        moved = {w.pool_id for w in last if (w.result or {}).get("outcome") != DEFERRED}
        pending = {iid for iid, r in results.items() if r.get("outcome") in (DEFERRED, DESTROY_REQUIRED)}
        refused = set(self.refused)
        # Planned again only where the next wave could fit: its worst case as the last plan knows it (a pool
        # whose waiting nodes all drain needs the drain time too), so no listing is spent on a wave that
        # cannot start; the waiting nodes of the others are told why.
        pools = []
        for p in sorted(moved):
            waiting = [d.instance_id for d in rollout.pools[p].members if d.instance_id in pending] \
                if p in rollout.pools else []
            if not waiting:
                continue
            fits, why = rollout.time_for(rollout.needs_drain(p, pending - refused))
            if fits:
                pools.append(p)
                continue
            for iid in waiting:
                results[iid] = dict(results[iid], reason="%s; %s" % (why, results[iid].get("reason")))
        if not pools:
            return []
        finished = [iid for iid, r in results.items() if iid not in pending]
        try:
            decided, waves = rollout.replan(pools, finished, sorted(self.unwritable))
        except Exception as exc:  # noqa: BLE001 - the ACK or Kubernetes API: this invocation stops here
            log.warning("no further wave in this invocation: %s", exc)
            # The invocation had time for the waiting nodes: not done, so the event ends retry (FC runs it again).
            rollout.held_up.setdefault("next-wave", (
                "no further wave in this invocation: planning it failed (%s); the waiting nodes are taken by the "
                "event's retry or the next invocation" % one_line(exc, 300)))
            return []
        wave = [waves[iid] for iid in sorted(waves, key=lambda i: decided[i].node_name or i)]
        fits, why = rollout.time_for(any(w.drain for w in wave)) if wave else (True, "")
        for iid, d in decided.items():
            if iid in waves and fits:
                continue  # its result comes from the wave
            reason = d.reason
            if iid in waves:  # planned but not started: the next invocation plans it again
                reason = "%s; %s" % (why, d.reason)
                rollout.decided[iid] = d.model_copy(update=dict(action=ACTION_DEFER, reason=reason))
            self._tell(results, iid, d, reason)
        if not fits:
            return []
        rollout.expires = self.clock() + run_lease(rollout.settings)  # each wave's records: a lease of their own
        return wave

    def _tell(self, results: Dict[str, dict], iid: str, d: Decision, reason: str) -> None:
        """The result of a member a new plan does not start: skipped, or waiting with the plan's reason."""
        if d.action == "skip":
            results[iid] = {"instance_id": iid, "node_name": d.node_name, "outcome": SKIPPED,
                            "reason": d.reason, "gpus": None}
        elif iid in self.refused:  # the refusal stays the node's outcome, with what comes next
            results[iid] = dict(results[iid], reason="%s; next: %s" % (self.refused[iid], reason))
        else:
            results[iid] = dict(_deferred(d), reason=reason)

    def _instead(self, pools: set, wave: List[Any], results: Dict[str, dict]) -> List[Any]:
        """The nodes that take the places of the wave's nodes that refused their claim: ``pools`` planned
        again from the nodes as they are now, without those nodes and without the wave's others."""
        taken = {w.decision.instance_id for w in wave}
        finished = taken | {iid for iid, r in results.items() if r.get("outcome") not in (DEFERRED, DESTROY_REQUIRED)}
        try:
            decided, waves = self.rollout.replan(sorted(p for p in pools if p in self.rollout.pools),
                                                 sorted(finished), sorted(self.unwritable))
        except Exception as exc:  # noqa: BLE001 - the ACK or Kubernetes API: the wave goes on as it is
            log.warning("no node takes the place of one that refused its claim: %s", exc)
            # The pool still wants the refused node's place taken, and this invocation could not: not done, so the
            # event ends retry (FC runs it again) and says why, as a next wave that fails to plan does.
            self.rollout.held_up.setdefault("instead", (
                "no node takes the place of one that refused its claim: planning it failed (%s); the pool's waiting "
                "nodes are taken by the event's retry or the next invocation" % one_line(exc, 300)))
            return []
        for iid, d in decided.items():
            if iid not in waves:
                self._tell(results, iid, d, d.reason)
        return [waves[iid] for iid in sorted(waves, key=lambda i: decided[i].node_name or i)]

    # ---- results ----

    def _give_back(self, w: Any) -> None:
        """The pool's slot this run holds for the node, given back (once: it is forgotten here)."""
        if w.decision.node_name in self.slots:
            self.budget.release(self.slots.pop(w.decision.node_name), w.decision.node_name)

    def _end(self, w: Any, outcome: str, reason: str, base: Optional[dict] = None) -> None:
        self._give_back(w)  # the pool's slot goes back as soon as the node ends
        w.result = dict(base or {}, instance_id=w.decision.instance_id, node_name=w.decision.node_name,
                        outcome=outcome, reason=reason)
        if getattr(w, "started", 0.0):  # the whole time this invocation spent on the node: claim to end
            w.result["duration_ms"] = round(max(0.0, self.clock() - w.started) * 1000, 1)
        w.result.setdefault("gpus", None)
        if outcome not in (DEFERRED, DESTROY_REQUIRED):  # a later wave of this invocation may still take it:
            self.on_result(w.result)  # the caller reports those with the final results

    def _leave(self, w: Any, lost: LeaseLost) -> None:
        self._end(w, DEFERRED, lost.why())

    def _gone(self, w: Any) -> None:
        step = w.progress.step if w.progress is not None else "claim"
        why = ("gone: the node was deleted during the rollout (at step %s); nothing more is done on it, its slot "
               "is free and the wave goes on" % step)
        event(self.kube, w.decision.node_name, "MigRolloutNodeGone", why, warning=True)
        self._end(w, GONE, why)

    # ---- reads and compare-and-swap writes ----

    def _on_node(self, w: Any, call: Callable[..., Any], *args: Any) -> Any:
        """``call(node name, *args)`` on the wave node's Node object; its 404 is :class:`NodeGone`."""
        try:
            return call(w.decision.node_name, *args)
        except KubeError as exc:
            if exc.status == 404:
                raise NodeGone(w.decision.node_name) from exc
            raise

    def _read(self, w: Any) -> rp.KubeNode:
        node = rp.KubeNode.from_object(self._on_node(w, self.kube.get_node))
        w.rv = node.resource_version
        return node

    def _patch(self, w: Any, progress: Optional[rp.Progress], spec: Optional[dict],
               notes: Optional[Dict[str, Optional[str]]] = None, compact: bool = False) -> None:
        """One write of the record on the version last seen (409 propagates); ``notes``: other annotations
        set (None removes) in the same write. ``progress`` None removes the record; ``compact``: a final record
        written short (``rp.Progress.to_annotation``)."""
        patch: Dict[str, Any] = {"metadata": {"resourceVersion": w.rv, "annotations": dict(
            notes or {}, **{rp.PROGRESS_ANNOTATION: progress.to_annotation(compact) if progress else None})}}
        if spec:
            patch["spec"] = spec
        answer = self._on_node(w, self.kube.patch_node, patch)  # one merge patch: the step and the cordon
        w.rv = str(((answer or {}).get("metadata") or {}).get("resourceVersion") or "")
        w.progress = progress  # only once the API server has it

    def _write(self, w: Any, progress: Optional[rp.Progress], spec: Optional[dict] = None,
               notes: Optional[Dict[str, Optional[str]]] = None, compact: bool = False) -> None:
        for _ in range(CAS_ATTEMPTS):
            try:
                return self._patch(w, progress, spec, notes, compact)
            except KubeError as exc:
                if exc.status != 409:
                    raise _refusal(exc)  # NodeRefused: the node's own cause, which no retry changes
            current = self._read(w).progress  # a newer version: is the record still this run's?
            if current is None or current.owner != self.rollout.owner:
                raise LeaseLost(w.decision.node_name, current)
        raise KubeError("node %s changed under %d writes in a row; the next invocation resumes it"
                        % (w.decision.node_name, CAS_ATTEMPTS), 409)

    def _record(self, w: Any, step: str, reason: str = "", uncordon: bool = False,
                drain: Optional[bool] = None, compact: bool = False) -> None:
        old = w.progress
        keep = old is not None and old.target == w.target
        ours = bool(old and old.autoscaler)
        progress = rp.Progress(w.target, step, old.cordoned if old else False, old.since if keep else self.clock(),
                               reason, self.rollout.owner, self.rollout.expires,
                               (old.drain if keep else w.drain) if drain is None else drain,
                               autoscaler=ours and not uncordon)
        # A node someone else cordoned stays cordoned; the autoscaler's opt-out goes when the node ends, when
        # this hook set it (someone else's stays).
        self._write(w, progress, {"unschedulable": None} if uncordon and progress.cordoned else None,
                    {rp.SCALE_DOWN_DISABLED: None} if uncordon and ours else None, compact)

    def _finish(self, w: Any, outcome: str, step: str, reason: str, base: Optional[dict] = None) -> None:
        # The slot goes back before the record's end, not after: a run stopped between the two would leave a slot
        # that nothing ever gives back (the record no longer in progress, no run resumes or ends it again), and
        # the Lease would show a dead run holding a finished node. In this order a stop there leaves the record in
        # progress, which the next run resumes (drained) or ends (an auto change), while the node still counts: a
        # drained one by its record's step and its cordon; a change without drain has shown its capacity already.
        self._give_back(w)
        try:
            try:
                self._record(w, step, reason, uncordon=True)
            except NodeRefused as exc:
                reason, dropped = self._unrecorded(w, step, reason, exc)
                if dropped:
                    base = dict(base or {}, code=RECORD_REFUSED)
        except LeaseLost as lost:
            return self._leave(w, lost)
        except NodeGone:
            return self._gone(w)
        except KubeError as exc:
            # The API server's failure: the record stays at the step before, which the next invocation resumes
            # (the node cordoned until then, if it was), so this event did not do its work: it ends retry.
            reason = "%s; the node could not be uncordoned or recorded: %s" % (reason, exc)
            self.rollout.held_up.setdefault("unrecorded", (
                "the Kubernetes API failed to record a node's end (%s): the node stays at the step before, which "
                "the next invocation resumes" % one_line(exc, 300)))
        name = w.decision.node_name
        if outcome not in ("partitioned", "unchanged"):
            event(self.kube, name, "MigRollout%s" % ("DrainTimeout" if step == rp.DRAIN_TIMEOUT else "Failed"),
                  reason, warning=True)
        else:
            event(self.kube, name, "MigRolloutDone", reason)
        self._end(w, outcome, reason, base)

    def _unrecorded(self, w: Any, step: str, reason: str, exc: KubeError) -> tuple:
        """The end of a node whose record the API server refuses for a cause of the node's own (another party
        filled its annotations to the 262,144-byte limit meanwhile, a webhook): (the reason, saying what was
        done, whether the record was removed). Left so, the node stayed cordoned under a record in progress
        whose takeover every later run was refused in turn. First the end without its reason (``record_end``:
        not always shorter); else the end written short (``compact``: shorter than any record in progress, so a
        size limit the record in progress met lets it through, and a stop still stops the pool); else the record
        removed, which only shrinks the annotations, with the cordon and the opt-out this run set (the next run
        plans the node afresh: a node in its layout is skipped, one still to do is refused at its claim,
        ``claim-refused``, and the pool goes on); else the node is left as it is, said so. Removed where the
        short end fitted, a stop whose claim still fits was claimed, drained and stopped again by every run, its
        pool's other nodes waiting."""
        told = one_line(exc, 300)
        p = w.progress
        spec, notes = removal(p)
        failed: List[KubeError] = []

        def remove() -> None:
            try:
                self._write(w, None, spec, notes)
            except KubeError as again:
                failed.append(again)

        kept: List[str] = []

        def end() -> None:
            try:
                self._record(w, step, "", uncordon=True)
                kept.append("no reason")
            except NodeRefused:  # the short end next; refused too, the record is removed
                self._record(w, step, "", uncordon=True, compact=True)
                kept.append("only its step")

        if not end_or_remove(end, remove, lambda e: isinstance(e, NodeRefused)):
            return "%s; its record keeps %s, the API server refused it with one: %s" % (reason, kept[0], told), False
        if failed:
            return ("%s; the API server refused the node's record (%s) and its removal (%s): the node is left as it "
                    "is%s; free its annotations, then run `kubectl uncordon %s` and remove its annotation %s"
                    % (reason, told, one_line(failed[0], 200), ", cordoned" if p and p.cordoned else "",
                       w.decision.node_name, rp.PROGRESS_ANNOTATION)), False
        return ("%s; the API server refused the node's record (%s): the record was removed%s, and the next run plans "
                "the node afresh" % (reason, told, " and the node uncordoned" if p and p.cordoned else "")), True

    def _refused(self, w: Any, exc: KubeError) -> None:
        """A write of the record refused (NodeRefused) before the node's end: it ends failed here (``_finish``
        lifts the cordon), and the wave's other nodes go on."""
        self._finish(w, FAILED, rp.FAILED, "the API server refused the node's record at step %s: %s"
                     % (w.progress.step if w.progress else "-", one_line(exc, 300)))

    # ---- the claim ----

    def _claim(self, w: Any) -> None:
        """Re-read the node and take it (module docstring), or end it deferred/skipped with the reason."""
        name, me = w.decision.node_name, self.rollout.owner
        checked_pods = False
        for attempt in range(CAS_ATTEMPTS):
            node = self._read(w)
            p, why = rp.Progress.parse(node.annotations.get(rp.PROGRESS_ANNOTATION))
            if why and not attempt:  # the reader rule's one line: the record is not ours, and the node starts over
                log.warning("node %s: its rollout record (%s) does not read (%s; the form is this hook's JSON "
                            "object of target, step, cordoned, since, owner, expires): it starts over", name,
                            rp.PROGRESS_ANNOTATION, why)
            stopped = ""  # a run whose record this claim takes over, when this run takes no slot of its own
            if p is not None and p.step in rp.ACTIVE_STEPS and p.held_by_another(me, self.clock(),
                                                                                 run_lease(self.rollout.settings)):
                return self._end(w, DEFERRED, "invocation %s took this node (step %s) after this run planned it; "
                                              "it is left to that run" % (p.owner, p.step))
            if p is not None and p.target == w.target and p.step in rp.STOP_STEPS:
                return self._end(w, DEFERRED, "the rollout stopped meanwhile: this node ended %s (%s)"
                                 % (p.step, p.reason or "no reason recorded"))
            # A per-GPU target recorded done may still be owed: the node left a busy GPU as it was (the result's
            # `left`), and a later plan asking the same layouts must reach it, or its pods wait for good.
            if p is not None and p.target == w.target and p.step == rp.DONE and (
                    w.layouts is None or not rp.layouts_needed(w.layouts, node)):
                return self._end(w, SKIPPED, "another invocation finished this node meanwhile")
            if not w.drain and p is not None and p.target == w.target and p.step == rp.DESTROY_REQUIRED:
                return self._end(w, DEFERRED, "the node refused to only add instances meanwhile (%s); the next plan "
                                              "takes it the drained way" % (p.reason or p.step))
            if p is not None and p.step in rp.ACTIVE_STEPS:
                same = p.target == w.target
                # Taken over from an invocation that ended without finishing (its lease ran out, so its drain
                # deadline is long past): this run records itself as the owner and drains with its own deadline;
                # a node disrupted for an older target starts over on the new target's path (drained again:
                # new pods may have come), cordoned first when its old path had not cordoned it.
                step = p.step if same else (rp.CORDONED if w.drain else rp.APPLYING)
                # Past its apply: the stopped run may have changed the instances without restarting the GPU
                # DaemonSet pods that held them (``_restart``), and a re-apply that finds nothing to change, or
                # the capacity wait alone, would never restart them: this run does.
                w.resumed_apply = same and p.drain and p.step in (rp.APPLYING, rp.APPLIED)
                if same and p.drain and step in (rp.DRAINED, rp.APPLYING) and not node.unschedulable:
                    # drained once, but no longer cordoned (someone else's cordon ended, or an operator lifted
                    # it): new pods may have come, so it is cordoned and drained again before the apply
                    step = rp.CORDONED
                # A per-GPU change counts only through its slot (its record says no drain); so does a node whose
                # disruption starts only now, cordoned on the drained path after a record without a drain: the
                # Lease did not count it, and the slot's check is where a pause set since stops it.
                if w.budgeted or (step == rp.CORDONED and not p.drain):
                    why = self._take_slot(w)
                    if why:
                        return self._end(w, DEFERRED, why)
                # The stopped run's slot: a slot this run takes replaces it; otherwise (the record counts the
                # node) nothing would remove it before another node of the pool takes a slot, for a pool's last
                # node never, and the Lease would show a dead run holding the node.
                stopped = p.owner if p.owner and p.owner != me and name not in self.slots else ""
                cordon = step == rp.CORDONED and not node.unschedulable
                ours, notes = _opt_out(node, p)
                progress = rp.Progress(w.target, step, p.cordoned or cordon, self.clock(),
                                       "resumed from invocation %s" % (p.owner or "-") if same
                                       else "target changed to %s" % w.target, me, self.rollout.expires,
                                       p.drain if same else w.drain, autoscaler=ours)
                spec = {"unschedulable": True} if cordon else None
            elif not w.drain:  # only new instances: no cordon, no drain; the apply tells the node to destroy nothing
                if not (rp.work_needed(w.spec, node, w.gpu_model) if w.layouts is None
                        else rp.layouts_needed(w.layouts, node)):
                    return self._end(w, SKIPPED, "already in the requested layout (%s) when claimed" % w.target)
                if w.budgeted:  # an auto pool's per-GPU change: one of the pool's slots, as a drained node takes
                    why = self._take_slot(w)
                    if why:
                        return self._end(w, DEFERRED, why)
                ours, notes = _opt_out(node, p)
                progress = rp.Progress(w.target, rp.APPLYING, False, self.clock(), "", me, self.rollout.expires,
                                       drain=False, autoscaler=ours)
                try:
                    self._patch(w, progress, None, notes)
                except KubeError as exc:
                    if exc.status != 409:
                        raise _refusal(exc)
                    continue
                event(self.kube, name, "MigRolloutNoDrain", (
                    "not cordoned or drained, per-GPU layouts of an auto pool (only idle instances are destroyed, a "
                    "GPU in use is left as it is): %s" if w.layouts is not None else
                    "not cordoned or drained, the node only gains instances (told to destroy nothing): %s")
                    % w.decision.reason)
                return None
            else:
                if not rp.work_needed(w.spec, node, w.gpu_model):
                    return self._end(w, SKIPPED, "already in the requested layout (%s) when claimed" % w.target)
                if not checked_pods:  # before any cordon: a pod the rules keep defers the node untouched
                    kept = dr.refused(dr.node_pods(self.kube, name), self.rules)
                    if kept:
                        why = ("not drained: %s; the node is left uncordoned and the pool's rollout waits on it"
                               % dr.refusal_text(kept))
                        event(self.kube, name, "MigRolloutDeferred", why, warning=True)
                        return self._end(w, DEFERRED, why)
                    checked_pods = True
                why = self._take_slot(w)
                if why:
                    return self._end(w, DEFERRED, why)
                ours, notes = _opt_out(node, p)
                progress = rp.Progress(w.target, rp.CORDONED, not node.unschedulable, self.clock(), "", me,
                                       self.rollout.expires, autoscaler=ours)
                spec = {"unschedulable": True}
            # That run's slot goes before the record names this run, once it has run out (it counts for nothing
            # then, so a claim that loses its write below gives back nothing that counts): given back after,
            # a stop between the two would leave it for good, since the next takeover gives back the slot of the
            # run its record names, this one, which holds none.
            if stopped and w.pool_id:
                self.budget.release(w.pool_id, name, holder=stopped)
            try:
                self._patch(w, progress, spec, notes)
            except KubeError as exc:
                if exc.status != 409:
                    raise self._stale(w, p, _refusal(exc))
                continue  # another writer came first: read again and decide again
            if spec:
                event(self.kube, name, "MigRolloutCordon", "%s: %s" % (
                    "already cordoned by someone else; it stays cordoned" if node.unschedulable else "cordoned",
                    w.decision.reason))
            return None
        return self._end(w, DEFERRED, "the node kept changing while this run claimed it; the next invocation "
                                      "tries again")

    def _stale(self, w: Any, p: Optional[rp.Progress], exc: KubeError) -> KubeError:
        """A takeover refused for the node's own cause (NodeRefused): the stopped run's record removed, with its
        cordon and opt-out, in one write that only shrinks the annotations (the size limit lets it through).
        Left, the node stayed cordoned for good under a record no run could take over or end, holding the pool's
        slot. ``exc``, with ``note`` saying what was done (one try: a newer version leaves it to the next run)."""
        if not isinstance(exc, NodeRefused) or p is None or p.step not in rp.ACTIVE_STEPS:
            return exc
        restarted = ""
        if p.drain and p.step in (rp.APPLYING, rp.APPLIED):
            # Past its apply, the stopped run may have changed the instances without restarting the GPU DaemonSet
            # pods that held them (as a takeover does, ``resumed_apply``); once the record is gone the next plan
            # finds the node in its layout and skips it, so nothing would restart them: done here, before the
            # removal (a stop between the two leaves the record, and the next takeover restarts them again).
            w.daemon_pods, w.resumed_apply = self._daemon_pods(w), True
            restarted = self._restart(w, {"outcome": "unchanged", "reason": ""})
        try:
            self._patch(w, None, *removal(p))
        except KubeError as again:
            exc.note = "; the record a stopped run left (step %s) could not be removed either (%s)%s" % (
                p.step, one_line(again, 200), restarted)
            return exc
        exc.note = "; the record a stopped run left (step %s) was removed%s%s" % (
            p.step, " and its cordon lifted" if p.cordoned else "", restarted)
        return exc

    def _take_slot(self, w: Any) -> str:
        """A slot of the pool's budget for this node before its cordon ("" when taken, else why it waits)."""
        name = w.decision.node_name
        try:
            why = self.budget.take(w.pool_id, w.pool_name or w.pool_id, name, w.limit, self.rollout.expires,
                                   lambda: self.rollout.paused_now(w.pool_id))
        except KubeError as exc:
            # A write with no answer may have landed: the slot is given back when the node ends (release removes
            # only this run's), or it would hold the pool's budget for a run lease for a node nothing changes.
            self.slots[name] = w.pool_id
            what = "the pool's disruption budget (a coordination.k8s.io Lease in namespace %s) cannot be used" \
                % self.budget.namespace
            told = one_line(exc, 200)
            if rbac_forbidden(exc):  # the Role refuses every node's slot alike: said once, no further node tried
                permission = missing_permission(exc) or "use it"
                return self._forbidden(name, permission, (
                    "%s: the function's Kubernetes role may not %s (%s); the node is left untouched (RBAC: "
                    "deploy/rbac.yaml grants leases get, create, update)" % (what, permission, told)))
            # the API server's failure, not the node's: deferred, and the event ends retry
            line = "%s: %s; the node is left untouched and the event ends retry" % (what, told)
            self.rollout.held_up.setdefault("unanswered", line)
            return line
        if not why:
            self.slots[name] = w.pool_id
        return why

    # ---- the wave ----

    def _claim_wave(self, wave: List[Any], results: Dict[str, dict]) -> None:
        """Claim each node of the wave. A node that refuses its claim (:class:`NodeRefused`) fails at once and
        leaves its place to the next node of its pool, claimed in this wave: it has no record to show for the
        refusal, so every plan puts it first again, and with its place used up the pool's other nodes would wait
        for good. ``wave`` grows by the nodes taken instead; each refusal leaves one more node out of the plan, so
        there are at most as many rounds as the pool has nodes."""
        todo = list(wave)
        while todo:
            refused = set()
            for w in todo:
                if self.forbidden:  # the Role refuses every node alike: one refusal, told once, is enough
                    self._end(w, DEFERRED, "%s: %s (refused at node %s's claim); nothing was written on the node"
                              % ((NOT_CLAIMED,) + self.forbidden[::-1]))
                    continue
                w.started = self.clock()
                try:
                    self._claim(w)
                except NodeGone:
                    self._gone(w)
                except NodeRefused as exc:
                    self.unwritable.add(w.decision.instance_id)
                    refused.add(w.pool_id)
                    why = ("%s: %s%s; the API server refuses this node's record, so the node "
                           "is left without one and the next node of the pool takes its place; every run tries it "
                           "again (told once per cause)" % (CLAIM_FAILED, exc, getattr(exc, "note", "")))
                    event(self.kube, w.decision.node_name, "MigRolloutFailed", why, warning=True)
                    # ``cause``: the API server's answer alone, which the alert of the refusal is told once for
                    self._end(w, FAILED, why, base={"code": CLAIM_REFUSED, "cause": str(exc)})
                except KubeError as exc:
                    landed = self._landed(w, exc)
                    if landed is not True:
                        self._unclaimed(w, exc, landed is None)
            todo = self._instead(refused, wave, results) if refused else []
            wave.extend(todo)

    def _forbidden(self, name: str, permission: str, line: str) -> str:
        """RBAC refused ``permission`` (``<verb> <resource>``) for node ``name``: the Role refuses every node
        alike, so no further node is tried in this invocation, and ``line`` is told once (an ERROR line and the
        event's reason). ``line`` back."""
        if self.forbidden is None:
            self.forbidden = (name, "the function's Kubernetes role may not %s" % permission)
            log.error("kubernetes permission missing", extra={"fields": dict(
                node_name=name, code="rbac-forbidden", permission=permission, reason=line)})
        self.rollout.held_up.setdefault("forbidden", line)
        return line

    def _landed(self, w: Any, exc: KubeError) -> Optional[bool]:
        """Whether the claim's write landed although its answer says it failed (None: unknown). A write with no
        answer (a connection reset or a timeout after the server wrote it) or a 5xx (kube-apiserver's timeout
        filter answers 504 and lets the write go on) may have landed, and so may one that ends in a 429: the client
        tries again after no answer too (functions/kube/client.py) and ends with the last try's 429, an earlier
        unanswered try written or not; any other answer says nothing was written.
        Level-triggered: the node is read back (a GET with no resourceVersion, a consistent read), and this run's
        record on it for this target is the claim: the node goes on in the wave, keeping its slot. Taken for
        not claimed, its slot went back while it stayed cordoned under this run's record, deferred as "nothing
        was written", and no other run could take it before this run's lease ran out."""
        if exc.status is not None and exc.status < 500 and exc.status != 429:
            return False
        try:
            node = self._read(w)
        except NodeGone:
            return False
        except KubeError as again:
            log.warning("node %s not read back after its claim met %s: %s", w.decision.node_name, exc, again)
            return None
        p = node.progress
        if p is None or p.owner != self.rollout.owner or p.target != w.target or p.step not in rp.ACTIVE_STEPS:
            return False
        w.progress = p
        if p.step == rp.CORDONED and node.unschedulable:
            event(self.kube, w.decision.node_name, "MigRolloutCordon", "cordoned (the claim's answer was lost, the "
                  "node read back): %s" % w.decision.reason)
        return True

    def _unclaimed(self, w: Any, exc: KubeError, unknown: bool = False) -> None:
        """A claim that failed for a cause that is not the node's (``NOT_CLAIMED``): the node deferred, nothing
        written on it (the slot taken for it given back by ``_end``), and the cause kept for the event's reason:
        a 5xx or no answer ends the event ``retry``; RBAC's 403 names the permission, once. ``unknown``: the
        write may have landed and the node could not be read back (``_landed``): its slot is kept, not given
        back, until this run's lease ends (a record of this run's on the node counts no further), so the
        budget never lets another node in beside one this run may hold."""
        told = one_line(exc, 300)
        name = w.decision.node_name
        if unknown and name in self.slots:
            self.slots.pop(name)  # kept on the Lease: it runs out with this run's lease
            line = ("the Kubernetes API failed at a node's claim (%s) and the node could not be read back: the claim "
                    "may have landed, so its slot of the pool's budget is kept until this run's lease ends; the "
                    "event ends retry" % told)
            self.rollout.held_up.setdefault("unanswered", line)
            return self._end(w, DEFERRED, "%s: %s" % (NOT_CLAIMED, line))
        if rbac_forbidden(exc):
            permission = missing_permission(exc) or "make the call"
            line = self._forbidden(name, permission, (
                "the function's Kubernetes role may not %s (RBAC: %s); nothing was written on any node: grant it as "
                "deploy/rbac.yaml does (`kubectl apply -f deploy/rbac.yaml`, or ClusterRbac=true on the stack)"
                % (permission, told)))
            return self._end(w, DEFERRED, "%s: %s" % (NOT_CLAIMED, line))
        line = ("the Kubernetes API failed at a node's claim (%s): nothing was written on the node or counted "
                "against it; the event ends retry and the next invocation claims it again" % told)
        self.rollout.held_up.setdefault("unanswered", line)
        self._end(w, DEFERRED, "%s: %s" % (NOT_CLAIMED, line))

    def _run_wave(self, request: Any, wave: List[Any], results: Dict[str, dict]) -> None:
        self._claim_wave(wave, results)
        try:
            self._drain([w for w in wave if w.result is None and w.progress.step == rp.CORDONED])
            self._apply(request, [w for w in wave if w.result is None
                                  and w.progress.step in (rp.DRAINED, rp.APPLYING)])
            self._capacity([w for w in wave if w.result is None and w.progress.step == rp.APPLIED])
        except KubeError as exc:
            # The API server went away mid-wave: what is recorded stands (the node stays cordoned if it was),
            # and the next invocation resumes each node from its annotation.
            told = one_line(exc, 300)
            for w in wave:
                if w.result is None:
                    self._end(w, FAILED, "the Kubernetes API failed after step %s (%s); the next invocation "
                                         "resumes this node" % (w.progress.step if w.progress else "-", told),
                              base={"code": API_FAILED})
            self.rollout.held_up.setdefault("mid-wave", (
                "the Kubernetes API failed mid-wave (%s): each node stays at the step it reached, which the next "
                "invocation resumes" % told))

    def _drain(self, wave: List[Any]) -> None:
        told: Dict[str, str] = {}
        pending = list(wave)
        while pending:
            still = []
            for w in pending:
                name = w.decision.node_name
                try:
                    one: Optional[dr.Pass] = dr.evict_pass(self.kube, name, self.rules, now=self.clock())
                except KubeError as exc:
                    one, failure = None, "cannot list or evict pods: %s" % exc
                if one is not None and one.evicted:
                    event(self.kube, name, "MigRolloutDrain", "evicted %s" % ", ".join(one.evicted))
                try:
                    if one is not None and one.refused_by_api:
                        # kubectl drain stops on this answer: no later pass can change it (drain.py)
                        self._finish(w, DRAIN_REFUSED, rp.FAILED,
                                     "drain-refused, node back on its old layout and %s: %s"
                                     % (_uncordoned(w), "; ".join("%s: %s" % kv
                                                                  for kv in sorted(one.refused_by_api.items()))))
                        continue
                    if one is not None and one.remaining == 0:
                        self._record(w, rp.DRAINED)
                        continue
                    if one is not None:
                        failure = "; ".join(["%s: %s" % kv for kv in sorted({**one.budget, **one.errors}.items())]
                                            + ["%s: %s" % kv for kv in sorted(one.throttled.items())]
                                            + ([dr.refusal_text(one.kept)] if one.kept else [])) \
                            or "%d pod(s) still terminating" % one.remaining
                        if one.budget and told.get(name) != failure:
                            told[name] = failure
                            event(self.kube, name, "MigRolloutDrain", "waiting on PodDisruptionBudget: %s" % failure)
                    if self.clock() - w.progress.since >= self.settings.drain_timeout_s:
                        self._finish(w, DRAIN_TIMEOUT, rp.DRAIN_TIMEOUT,
                                     "drain-timeout after %ds, node back on its old layout and %s: %s"
                                     % (self.settings.drain_timeout_s, _uncordoned(w), failure))
                        continue
                except LeaseLost as lost:
                    self._leave(w, lost)
                    continue
                except NodeGone:
                    self._gone(w)
                    continue
                except NodeRefused as exc:
                    self._refused(w, exc)
                    continue
                still.append(w)
            pending = still
            if pending:
                self.sleep(POLL_S)

    def _apply(self, request: Any, wave: List[Any]) -> None:
        ready = []
        for w in wave:
            try:
                if not (w.progress.step == rp.APPLYING and w.progress.owner == self.rollout.owner):
                    self._record(w, rp.APPLYING)  # (a claim without drain recorded it already)
                ready.append(w)
            except LeaseLost as lost:
                self._leave(w, lost)
            except NodeGone:
                self._gone(w)
            except NodeRefused as exc:
                self._refused(w, exc)
        if not ready:
            return
        for w in ready:  # before the instances are destroyed: who holds them (drained nodes only)
            w.daemon_pods = self._daemon_pods(w) if w.drain and (w.progress is None or w.progress.drain) else []
        # A lifecycle hook holds new instances, never a running node, and the inner executor has answered it
        # already with the other nodes: the wave's apply must not answer it a second time.
        plain = request.model_copy(update={"lifecycle": None}) if getattr(request, "lifecycle", None) else request
        answers = {r["instance_id"]: r for r in self.inner.execute(plain, [w.decision for w in ready])}
        for w in ready:
            r = answers.get(w.decision.instance_id) or {"outcome": FAILED, "reason": "no result from delivery"}
            if w.layouts is not None:  # the capacity to wait for: what the GPUs the node changed now hold
                w.expected = created_capacity(w.created, r.get("left"))
            try:
                if r.get("outcome") in ("partitioned", "unchanged") and w.layouts is not None and not w.expected:
                    self._finish(w, r.get("outcome") or "partitioned", rp.DONE, "%s; no new instance to wait for"
                                 % r.get("reason"), base=r)
                elif r.get("outcome") in ("partitioned", "unchanged"):
                    self._record(w, rp.APPLIED)
                    w.applied = dict(r, reason=self._restart(w, r))
                elif r.get("outcome") == DESTROY_REQUIRED:
                    self._fall_back(w, r)
                else:
                    self._finish(w, FAILED, rp.FAILED, "apply: %s" % r.get("reason"), base=r)
            except LeaseLost as lost:
                self._leave(w, lost)
            except NodeGone:
                self._gone(w)
            except NodeRefused as exc:
                self._refused(w, exc)

    def _daemon_pods(self, w: Any) -> List[Any]:
        try:
            return dr.gpu_daemon_pods(dr.node_pods(self.kube, w.decision.node_name))
        except KubeError as exc:
            log.warning("GPU DaemonSet pods of %s not listed before the apply: %s", w.decision.node_name, exc)
            return []

    def _restart(self, w: Any, r: dict) -> str:
        """Evict the node's GPU DaemonSet pods after an apply that changed instances (their devices are gone;
        their DaemonSet recreates them on the new ones), or that found nothing to change on a node resumed past
        a stopped run's apply (which may have changed them, stopped before this): the apply's reason, with what
        was done."""
        reason = str(r.get("reason") or "")
        if not w.daemon_pods or r.get("outcome") != "partitioned" and not (
                r.get("outcome") == "unchanged" and getattr(w, "resumed_apply", False)):
            return reason
        done, failed = [], []
        for namespace, name in w.daemon_pods:
            try:
                self.kube.evict(namespace, name)
                done.append("%s/%s" % (namespace, name))
            except KubeError as exc:
                if exc.status == 404:  # gone already
                    done.append("%s/%s" % (namespace, name))
                else:
                    failed.append("%s/%s (%s)" % (namespace, name, str(exc)[:120]))
        if done:
            event(self.kube, w.decision.node_name, "MigRolloutRestartGpuDaemons",
                  "evicted after the apply so their DaemonSets recreate them on the new instances: %s" % ", ".join(done))
        return "%s; GPU DaemonSet pods restarted: %s%s" % (
            reason, ", ".join(done) or "none", "; NOT restarted (delete them by hand): %s" % ", ".join(failed)
            if failed else "")

    def _fall_back(self, w: Any, r: dict) -> None:
        """The node refused the destroy-nothing apply before any change: recorded so the next plan takes it
        the drained way (the record is neither in progress nor a stop: the pool goes on)."""
        why = ("%s; nothing was changed: the node goes the drained way (cordon, drain, apply) in a later wave"
               % (r.get("reason") or DESTROY_REQUIRED))
        self._record(w, rp.DESTROY_REQUIRED, (r.get("reason") or DESTROY_REQUIRED)[:300], uncordon=True, drain=True)
        event(self.kube, w.decision.node_name, "MigRolloutDestroyRequired", why)
        self._end(w, DESTROY_REQUIRED, why, base=r)

    def _capacity(self, wave: List[Any]) -> None:
        deadline = self.clock() + self.settings.capacity_timeout_s  # its own deadline, not the drain's
        for w in wave:
            if w.applied is None and getattr(w, "resumed_apply", False):  # (_claim)
                w.daemon_pods = self._daemon_pods(w)
                w.applied = {"outcome": "partitioned", "reason": self._restart(w, {
                    "outcome": "partitioned", "reason": "applied in an earlier invocation"})}
        pending = list(wave)
        while pending:
            still = []
            for w in pending:
                base = w.applied or {"outcome": "partitioned", "reason": "applied in an earlier invocation"}
                try:
                    node: Optional[rp.KubeNode] = self._read(w)
                    trouble = ""
                except NodeGone:
                    self._gone(w)
                    continue
                except KubeError as exc:  # one failed read is no verdict: read again on the next poll
                    node, trouble = None, "; the last read failed: %s" % exc
                if node is not None and rp.capacity_shows(node, w.expected, w.exact):
                    self._finish(w, base.get("outcome") or "partitioned", rp.DONE,
                                 "%s; new capacity shows (%s)" % (base.get("reason"), ", ".join(
                                     "%s=%s" % kv for kv in sorted(node.mig_allocatable().items())) or "none"),
                                 base=base)
                elif self.clock() >= deadline:
                    self._finish(w, FAILED, rp.FAILED, "capacity-timeout: after %ds the node shows %s, expected %s%s"
                                 % (self.settings.capacity_timeout_s,
                                    (node.mig_allocatable() if node else None) or "no MIG resources", w.expected,
                                    trouble), base=base)
                else:
                    still.append(w)
            pending = still
            if pending:
                self.sleep(POLL_S)


class DryRunRolloutExecutor:
    """Reads only: each wave node's result says what it would go through (pods it would evict, pods that
    would defer it, whether it stays cordoned); deferred nodes are reported with their reason; the rest
    goes to the inner dry run."""

    def __init__(self, inner: Any, rollout: Any) -> None:
        self.inner, self.rollout = inner, rollout
        self.rules = dr.Rules.from_settings(rollout.settings.rollout)

    def execute(self, request: Any, decisions: Sequence[Decision]) -> List[dict]:
        waves, kube = self.rollout.waves, self.rollout.kube
        results = {r["instance_id"]: r for r in self.inner.execute(
            request, [d for d in decisions if d.instance_id not in waves and d.action != ACTION_DEFER])}
        for d in decisions:
            if d.action == ACTION_DEFER:
                results[d.instance_id] = _deferred(d)
            elif d.instance_id in waves:
                results[d.instance_id] = self._one(d, waves[d.instance_id], kube)
        return [results[d.instance_id] for d in decisions if d.instance_id in results]

    def _one(self, d: Decision, w: Any, kube: Any) -> dict:
        base = {"instance_id": d.instance_id, "node_name": d.node_name, "gpus": d.plan.gpus if d.plan else None}
        if w.layouts is not None:  # an auto pool's per-GPU change (functions/rollout/auto_waves.py)
            created = created_capacity(w.created, ())
            return dict(base, outcome="dry-run", reason=(
                "dry run: would take a slot of pool %s's budget (max-unavailable %d), give %s without cordon or "
                "drain (only idle instances destroyed; a GPU in use is left as it is), wait for %s"
                % (w.pool_name or w.pool_id, w.limit, "; ".join(
                    "GPU %d %s" % (i, "-".join(p for p, _ in w.layouts[i]) or "MIG off") for i in sorted(w.layouts)),
                   ", ".join(sorted(created)) or "nothing new")))
        what = ("MIG off (node_bootstrap disable)" if d.disable else d.plan.sequence if d.plan
                else "%s=%s" % (d.partition.kind, d.partition.value))
        wait = ", ".join(sorted(w.expected)) or "no MIG resources"
        if not w.drain:  # no pod is evicted: nothing to list
            return dict(base, outcome="dry-run",
                        reason="dry run: would %sapply %s without cordon or drain (the node only gains instances and "
                               "is told to destroy nothing; if its real placements need a destroy it refuses and "
                               "goes the drained way in a later wave), wait for %s"
                               % ("resume after step %s, " % w.resume if w.resume else "", what, wait))
        kept: Dict[str, str] = {}
        what_after = ""
        try:
            pods = dr.node_pods(kube, d.node_name)
            names = [dr.pod_name(p) for p in dr.gpu_pods(pods, self.rules)]
            kept = dr.refused(pods, self.rules)
            evict = "evict %s" % (", ".join(names) if names else "no GPU pod")
            daemons = dr.gpu_daemon_pods(pods)
            if daemons:
                what_after = "; after the apply, restart the GPU DaemonSet pods %s" % ", ".join(
                    "%s/%s" % p for p in daemons)
        except KubeError as exc:
            evict = "evict the GPU pods (cannot list them now: %s)" % exc
        if kept and not w.resume:
            return dict(base, outcome=DEFERRED, reason="dry run: would defer, not drained: %s"
                                                       % dr.refusal_text(kept))
        # the node as the wave was planned from it (one listing per event, not one per wave node)
        cordon = ("resume after step %s" % w.resume if w.resume else
                  "leave the cordon someone else set" if w.cordoned else "cordon")
        return dict(base, outcome="dry-run",
                    reason="dry run: would %s, %s (PodDisruptionBudgets respected), apply %s, wait for %s, uncordon%s"
                           % (cordon, evict, what, wait, what_after))
