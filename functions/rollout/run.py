"""Rolling repartition of running nodes: from the decisions to a plan, and the executors that carry it out.

:func:`prepare` takes the pipeline's decisions and, for the events that reconcile running nodes (the
timer, a node pool modification, a manual run), asks the Kubernetes side (``functions.rollout.kube``) what
each running node has applied. It turns each ``partition`` decision of such a node into ``skip`` (already
right: nothing is sent), a wave node (kept ``partition``) or ``defer`` (beyond ``max-unavailable``), with
reasons that name the rollout and the wave (``functions.rollout.waves`` decides, purely).

The returned :class:`Rollout` swaps the executor, as a dry run swaps it (``functions.point_of_change``): a real
run gets :class:`RolloutExecutor` (cordon, drain, apply through the delivery executor, wait for capacity,
uncordon, every step recorded in the node annotation before the next begins, so a function killed at
any point continues on the next invocation without repeating a finished node), a dry run gets
:class:`DryRunRolloutExecutor` (reads only, says what each wave node would go through).

Without a Kubernetes view (a snapshot without ``kube_nodes``) nothing changes: every running node counts
as never partitioned and is applied as before.
"""

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from functions.settings import longest_run_s
from node_bootstrap.kube.client import KubeError
from node_bootstrap.mig import MigInputError, PartitionSpec, label_items, resource_name

from functions.rollout import waves as rp
from functions.rollout.drain import evict_pass, gpu_pods
from functions.model import ACTION_DEFER, ACTION_ERROR, ACTION_PARTITION, ACTION_SKIP, Decision
from functions.event_result import Trigger

log = logging.getLogger(__name__)

ROLLOUT_TRIGGERS = (Trigger.TIMER, Trigger.NODEPOOL_OPERATION, Trigger.MANUAL)
DEFERRED, DRAIN_TIMEOUT, FAILED = "deferred", "drain-timeout", "failed"
POLL_S = 2.0
# Wall clock (the drain deadline is stored in the node annotation and spans invocations) and the wait
# between polls; module attributes so a test can run the rollout on its own time.
clock: Callable[[], float] = time.time
sleep: Callable[[float], None] = time.sleep


@dataclass
class WaveNode:
    decision: Decision
    target: str
    resume: str
    expected: Dict[str, int]
    exact: bool
    progress: Optional[rp.Progress] = None
    cordoned: bool = False  # spec.unschedulable when the wave was planned (someone else's cordon, or ours)
    result: Optional[dict] = None  # the node's final result (set once it ends, this invocation)
    applied: Optional[dict] = None  # the delivery executor's answer when it applied this invocation


def _spec(d: Decision) -> Optional[PartitionSpec]:
    return PartitionSpec(d.partition.kind, d.partition.value) if d.partition is not None else None


def _gpus(d: Decision, kube: Optional[rp.KubeNode]) -> Optional[int]:
    if d.plan is not None and d.plan.gpus:
        return d.plan.gpus
    text = (kube.labels.get(rp.GPU_COUNT_LABEL) if kube is not None else "") or ""
    return int(text) if text.isdigit() and int(text) > 0 else None


def _expected(d: Decision, kube: Optional[rp.KubeNode]) -> Tuple[Dict[str, int], bool]:
    if d.disable:  # MIG off: no nvidia.com/mig-* resource left
        return {}, True
    if d.plan is None:  # the GPU model is the node's to say: any of the label's profiles showing will do
        try:
            items = [] if d.partition is None else label_items(d.partition.kind, d.partition.value)
        except MigInputError:
            items = []
        return {resource_name(i.lower()): 1 for i in items if not i.isdigit()}, False
    return rp.expected_capacity([i.profile for i in d.plan.instances], _gpus(d, kube))


def run_lease_s(settings: Any) -> float:
    """How long a record holds its node: the longest one invocation can run (functions.settings), so a
    record whose lease has run out belongs to a run FC has ended."""
    return longest_run_s(settings)


class Rollout:
    """The rollout part of one event: the wave nodes, the deferred ones, and the Kubernetes view."""

    def __init__(self, kube: Any, waves: Dict[str, WaveNode], settings: Any, owner: str = "",
                 expires: float = 0.0) -> None:
        self.kube, self.waves, self.settings = kube, waves, settings
        self.owner, self.expires = owner, expires

    def executor(self, inner: Any, dry_run: bool, on_result: Optional[Callable[[dict], None]] = None) -> Any:
        if dry_run:
            return DryRunRolloutExecutor(inner, self)
        return RolloutExecutor(inner, self, clock, sleep, on_result)


def _has_label(pool: Any) -> bool:
    from functions.decide import has_partition_label

    return has_partition_label(pool)


def _mig_on(node: Optional[rp.KubeNode]) -> bool:
    """The node shows MIG this hook set up (its labels), or a roll to MIG off is under way on it."""
    if node is None:
        return False
    progress = node.progress
    return bool(rp.work_needed(None, node, None)) or (
        progress is not None and progress.target == rp.TARGET_OFF and progress.step in rp.ACTIVE_STEPS)


def prepare(request: Any, targets: Sequence[Any], decisions: List[Decision], kube: Any,
            settings: Any) -> Tuple[List[Decision], Optional[Rollout]]:
    """The decisions with the rollout applied, and the Rollout (None when this event rolls nothing).

    A node of a pool without a partition label that still has MIG (the label was removed) keeps its
    layout (``skip``, the reason says how to turn MIG off) or, with ACK_MIG_ON_LABEL_REMOVAL=disable,
    is rolled to MIG off in waves like a repartition (``node_bootstrap disable``)."""
    if kube is None or request.trigger not in ROLLOUT_TRIGGERS:
        return decisions, None
    pools = {}
    for t in targets:
        if isinstance(t, tuple) and t[2] is not None:
            pools[t[0]] = t[2]
    running = [d for d in decisions if d.action == ACTION_PARTITION and d.node_name]
    unlabelled = [d for d in decisions if d.action == ACTION_SKIP and d.node_name and d.instance_id in pools
                  and not _has_label(pools[d.instance_id])]
    if not running and not unlabelled:
        return decisions, None
    try:
        known = rp_nodes(kube)
    except KubeError as exc:
        # Without the Kubernetes API a running node cannot be drained: it waits rather than fail gpu-busy.
        why = ("the Kubernetes API cannot be used (%s); running nodes are repartitioned only through it "
               "(RBAC: deploy/rbac.yaml)" % str(exc)[:160])
        return [d.model_copy(update=dict(action=ACTION_DEFER, reason=why)) if d in running else d
                for d in decisions], None
    changed: Dict[str, Decision] = {}
    by_pool: Dict[str, List[Decision]] = {}
    for d in running:
        if d.node_name in known:  # a node Kubernetes does not know yet is new: applied as before
            by_pool.setdefault(d.nodepool_id or "", []).append(d)
    for d in unlabelled:
        node = known.get(d.node_name or "")
        if not _mig_on(node):
            continue
        if settings.rollout.on_label_removal == "disable":
            off = d.model_copy(update=dict(action=ACTION_PARTITION, disable=True, partition=None, plan=None))
            by_pool.setdefault(d.nodepool_id or "", []).append(off)
        else:
            changed[d.instance_id] = d.model_copy(update=dict(reason=(
                "%s; this node keeps its MIG layout (%s). To turn MIG off: set ACK_MIG_ON_LABEL_REMOVAL=disable "
                "on the function (the pool's nodes then roll to MIG off like a repartition), or run "
                "`python3 -m node_bootstrap disable` on the node" % (
                    d.reason, node.labels.get(rp.APPLIED_LABEL) or node.labels.get(rp.STATE_LABEL) or "-"))))
    waves: Dict[str, WaveNode] = {}
    owner, now = uuid.uuid4().hex[:12], clock()
    for pool_id, members in sorted(by_pool.items()):
        pool = pools.get(members[0].instance_id)
        label = pool.labels.get(rp.MAX_UNAVAILABLE_LABEL) if pool is not None else None
        name = "%s (%s)" % (pool_id, pool.name) if pool is not None and pool.name else pool_id
        target = rp.TARGET_OFF if members[0].disable else rp.target_of(_spec(members[0]))
        try:
            limit = rp.max_unavailable(settings.rollout.max_unavailable, label, len(members))
        except rp.RolloutInputError as exc:
            for d in members:
                changed[d.instance_id] = d.model_copy(update=dict(action=ACTION_ERROR, reason=str(exc)))
            continue
        candidates = [rp.Candidate(d.instance_id, d.node_name or "", known[d.node_name],
                                   rp.work_needed(_spec(d), known[d.node_name], d.plan.gpu if d.plan else None))
                      for d in members]
        steps = rp.plan_pool(name, target, candidates, limit, me=owner, now=now)
        for d in members:
            step = steps[d.instance_id]
            if step.action == "skip":
                changed[d.instance_id] = d.model_copy(update=dict(action=ACTION_SKIP, reason=step.reason))
            elif step.action == "defer":
                changed[d.instance_id] = d.model_copy(update=dict(action=ACTION_DEFER, reason=step.reason))
            else:
                changed[d.instance_id] = d.model_copy(update=dict(reason=step.reason))
                expected, exact = _expected(d, known[d.node_name])
                waves[d.instance_id] = WaveNode(changed[d.instance_id], target, step.resume, expected, exact,
                                                known[d.node_name].progress, known[d.node_name].unschedulable)
    out = [changed.get(d.instance_id, d) for d in decisions]
    return out, Rollout(kube, waves, settings, owner, now + run_lease_s(settings))


def removal_targets(request: Any, lookup: Any, cluster: str, kube: Any, taken: Sequence[str]) -> List[tuple]:
    """Nodes with MIG in pools that no longer carry a partition label (the pipeline's targets skip such
    pools): ``(instance id, node, pool)`` for the timer, a manual run, or a modification of that pool."""
    if kube is None or request.trigger not in ROLLOUT_TRIGGERS or request.instance_ids:
        return []
    try:
        known = rp_nodes(kube)
    except KubeError as exc:
        log.warning("pools without a partition label not checked for MIG nodes: %s", exc)
        return []
    with_mig = {name for name, node in known.items() if _mig_on(node)}
    if not with_mig:
        return []
    out = []
    for pool in lookup.nodepools(cluster):
        if _has_label(pool) or (request.nodepool_id and pool.nodepool_id != request.nodepool_id):
            continue
        for node in lookup.nodes(cluster, nodepool_id=pool.nodepool_id):
            if node.node_name in with_mig and node.instance_id not in taken:
                out.append((node.instance_id, node, pool))
    return out


def rp_nodes(kube: Any) -> Dict[str, rp.KubeNode]:
    from functions.rollout.kube import kube_nodes_by_name

    return kube_nodes_by_name(kube)


def _event(kube: Any, node: str, reason: str, message: str, warning: bool = False) -> None:
    """A core v1 Event on the Node, so ``kubectl describe node`` tells the story. The name is derived
    from the content: the same event again (a rerun, a defer every 30 minutes) is a 409, not a pile."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    digest = hashlib.sha256(("%s\n%s\n%s" % (node, reason, message)).encode("utf-8")).hexdigest()[:16]
    event = {"apiVersion": "v1", "kind": "Event",
             "metadata": {"name": "%s.%s" % (node, digest), "namespace": "default"},
             # the node's name as its uid, as the kubelet's own Node events (kubectl describe node finds both)
             "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
             "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
             "source": {"component": "ack-mig-hook"}, "reportingComponent": "ack-mig-hook",
             "firstTimestamp": now, "lastTimestamp": now, "count": 1}
    try:
        kube.create_event(event)
    except KubeError as exc:  # events are a courtesy: never fail a rollout step for one
        if exc.status != 409:
            log.warning("event %s on %s not written: %s", reason, node, exc)


class RolloutExecutor:
    """Carries out the wave: cordon, drain, apply (the inner executor), capacity, uncordon."""

    def __init__(self, inner: Any, rollout: Rollout, clock: Callable[[], float],
                 sleep: Callable[[float], None], on_result: Optional[Callable[[dict], None]] = None) -> None:
        self.inner, self.rollout, self.kube = inner, rollout, rollout.kube
        self.clock, self.sleep = clock, sleep
        self.on_result = on_result or (lambda result: None)
        self.settings = rollout.settings.rollout

    def execute(self, request: Any, decisions: Sequence[Decision]) -> List[dict]:
        waves = self.rollout.waves
        results: Dict[str, dict] = {}
        others = [d for d in decisions if d.instance_id not in waves and d.action != ACTION_DEFER]
        for r in self.inner.execute(request, others):
            results[r["instance_id"]] = r
        for d in decisions:
            if d.action == ACTION_DEFER:
                results[d.instance_id] = {"instance_id": d.instance_id, "node_name": d.node_name,
                                          "outcome": DEFERRED, "reason": d.reason, "gpus": None}
                if d.node_name:
                    _event(self.kube, d.node_name, "MigRolloutDeferred", d.reason)
        wave = [waves[d.instance_id] for d in decisions if d.instance_id in waves]
        if wave:
            self._run_wave(request, wave)
            for w in wave:
                results[w.decision.instance_id] = w.result or {}
        return [results[d.instance_id] for d in decisions if d.instance_id in results]

    # ---- steps; each one records itself in the node annotation before the next begins ----

    def _record(self, w: WaveNode, step: str, reason: str = "", uncordon: bool = False,
                cordon: bool = False, cordoned: Optional[bool] = None, fresh: bool = False) -> None:
        old = w.progress
        keep = old is not None and old.target == w.target and step != rp.CORDONED and not fresh
        since = old.since if keep else self.clock()
        progress = rp.Progress(w.target, step, old.cordoned if cordoned is None and old else bool(cordoned),
                               since, reason, self.rollout.owner, self.rollout.expires)
        patch: Dict[str, Any] = {"metadata": {"annotations": {rp.PROGRESS_ANNOTATION: progress.to_annotation()}}}
        if cordon:
            patch["spec"] = {"unschedulable": True}
        if uncordon and progress.cordoned:  # a node someone else cordoned stays cordoned
            patch["spec"] = {"unschedulable": None}
        self.kube.patch_node(w.decision.node_name, patch)  # one merge patch: the step and the cordon together
        w.progress = progress  # only once the API server has it

    def _finish(self, w: WaveNode, outcome: str, step: str, reason: str, base: Optional[dict] = None) -> None:
        try:
            self._record(w, step, reason, uncordon=True)
        except KubeError as exc:
            reason = "%s; the node could not be uncordoned or recorded: %s" % (reason, exc)
        w.result = dict(base or {}, instance_id=w.decision.instance_id, node_name=w.decision.node_name,
                        outcome=outcome, reason=reason)
        w.result.setdefault("gpus", None)
        if outcome != "partitioned" and outcome != "unchanged":
            _event(self.kube, w.decision.node_name, "MigRollout%s" % ("DrainTimeout" if step == rp.DRAIN_TIMEOUT
                                                                    else "Failed"), reason, warning=True)
        else:
            _event(self.kube, w.decision.node_name, "MigRolloutDone", reason)
        self.on_result(w.result)

    def _run_wave(self, request: Any, wave: List[WaveNode]) -> None:
        for w in wave:
            try:
                self._start(w)
            except KubeError as exc:
                w.result = {"instance_id": w.decision.instance_id, "node_name": w.decision.node_name,
                            "outcome": FAILED, "reason": "cannot cordon: %s" % exc, "gpus": None}
                self.on_result(w.result)
        try:
            self._drain([w for w in wave if w.result is None and w.progress.step == rp.CORDONED])
            self._apply(request, [w for w in wave if w.result is None
                                  and w.progress.step in (rp.DRAINED, rp.APPLYING)])
            self._capacity([w for w in wave if w.result is None and w.progress.step == rp.APPLIED])
        except KubeError as exc:
            # The API server went away mid-wave: what is recorded stands (the node stays cordoned if it was),
            # and the next invocation resumes each node from its annotation.
            for w in wave:
                if w.result is None:
                    w.result = {"instance_id": w.decision.instance_id, "node_name": w.decision.node_name,
                                "outcome": FAILED, "gpus": None,
                                "reason": "the Kubernetes API failed after step %s (%s); the next invocation "
                                          "resumes this node" % (w.progress.step if w.progress else "-", exc)}
                    self.on_result(w.result)

    def _start(self, w: WaveNode) -> None:
        name = w.decision.node_name
        if w.resume and w.progress is not None and w.progress.target == w.target:
            if w.progress.owner != self.rollout.owner:
                # Taken over from an invocation that ended without finishing (its lease ran out, so its drain
                # deadline is long past): this run records itself as the owner and drains with its own deadline.
                self._record(w, w.progress.step, "resumed from invocation %s" % (w.progress.owner or "-"),
                             fresh=True)
            return  # resuming: the annotation says where
        if w.progress is not None and w.progress.step in rp.ACTIVE_STEPS:
            # disrupted for an older target: drain again (new pods may have come) and apply the new one
            self._record(w, rp.CORDONED, "target changed to %s" % w.target, cordoned=w.progress.cordoned)
            return
        node = self.kube.get_node(name)
        already = bool((node.get("spec") or {}).get("unschedulable"))
        self._record(w, rp.CORDONED, cordon=True, cordoned=not already)
        _event(self.kube, name, "MigRolloutCordon", "%s: %s" % (
            "already cordoned by someone else; it stays cordoned" if already else "cordoned", w.decision.reason))

    def _drain(self, wave: List[WaveNode]) -> None:
        told: Dict[str, str] = {}
        pending = list(wave)
        while pending:
            still = []
            for w in pending:
                name = w.decision.node_name
                try:
                    one = evict_pass(self.kube, name)
                except KubeError as exc:
                    one = None
                    failure = "cannot list or evict pods: %s" % exc
                if one is not None and one.evicted:
                    _event(self.kube, name, "MigRolloutDrain", "evicted %s" % ", ".join(one.evicted))
                if one is not None and one.remaining == 0:
                    self._record(w, rp.DRAINED)
                    continue
                waited = self.clock() - w.progress.since
                if one is not None:
                    failure = "; ".join("%s: %s" % kv for kv in sorted({**one.refused, **one.errors}.items())) \
                        or "%d pod(s) still terminating" % one.remaining
                    if one.refused and told.get(name) != failure:
                        told[name] = failure
                        _event(self.kube, name, "MigRolloutDrain", "waiting on PodDisruptionBudget: %s" % failure)
                if waited >= self.settings.drain_timeout_s:
                    self._finish(w, DRAIN_TIMEOUT, rp.DRAIN_TIMEOUT,
                                 "drain-timeout after %ds, node back on its old layout and uncordoned: %s"
                                 % (self.settings.drain_timeout_s, failure))
                    continue
                still.append(w)
            pending = still
            if pending:
                self.sleep(POLL_S)

    def _apply(self, request: Any, wave: List[WaveNode]) -> None:
        if not wave:
            return
        for w in wave:
            self._record(w, rp.APPLYING)
        answers = {r["instance_id"]: r for r in self.inner.execute(request, [w.decision for w in wave])}
        for w in wave:
            r = answers.get(w.decision.instance_id) or {"outcome": FAILED, "reason": "no result from delivery"}
            if r.get("outcome") in ("partitioned", "unchanged"):
                self._record(w, rp.APPLIED)
                w.applied = r
            else:
                self._finish(w, FAILED, rp.FAILED, "apply: %s" % r.get("reason"), base=r)

    def _capacity(self, wave: List[WaveNode]) -> None:
        deadline = self.clock() + self.settings.capacity_timeout_s
        pending = list(wave)
        while pending:
            still = []
            for w in pending:
                node = rp.KubeNode.from_object(self.kube.get_node(w.decision.node_name))
                base = w.applied or {"outcome": "partitioned",
                                                        "reason": "applied in an earlier invocation"}
                if rp.capacity_shows(node, w.expected, w.exact):
                    self._finish(w, base.get("outcome") or "partitioned", rp.DONE,
                                 "%s; new capacity shows (%s)" % (base.get("reason"), ", ".join(
                                     "%s=%s" % kv for kv in sorted(node.mig_allocatable().items())) or "none"),
                                 base=base)
                elif self.clock() >= deadline:
                    self._finish(w, FAILED, rp.FAILED, "capacity-timeout: after %ds the node shows %s, expected %s"
                                 % (self.settings.capacity_timeout_s, node.mig_allocatable() or "no MIG resources",
                                    w.expected), base=base)
                else:
                    still.append(w)
            pending = still
            if pending:
                self.sleep(POLL_S)


class DryRunRolloutExecutor:
    """Reads only: each wave node's result says what it would go through (pods it would evict, whether
    it stays cordoned); deferred nodes are reported with their reason; the rest goes to the inner dry run."""

    def __init__(self, inner: Any, rollout: Rollout) -> None:
        self.inner, self.rollout = inner, rollout

    def execute(self, request: Any, decisions: Sequence[Decision]) -> List[dict]:
        waves, kube = self.rollout.waves, self.rollout.kube
        results = {r["instance_id"]: r for r in self.inner.execute(
            request, [d for d in decisions if d.instance_id not in waves])}
        for d in decisions:
            if d.action == ACTION_DEFER:
                results[d.instance_id] = {"instance_id": d.instance_id, "node_name": d.node_name,
                                          "outcome": DEFERRED, "reason": d.reason, "gpus": None}
            elif d.instance_id in waves:
                w = waves[d.instance_id]
                try:
                    pods = ["%s/%s" % (p["metadata"].get("namespace"), p["metadata"].get("name"))
                            for p in gpu_pods(kube.list_pods(d.node_name))]
                    evict = "evict %s" % (", ".join(pods) if pods else "no GPU pod")
                except KubeError as exc:
                    evict = "evict the GPU pods (cannot list them now: %s)" % exc
                # the node as the wave was planned from it (one listing per event, not one per wave node)
                cordon = ("resume after step %s" % w.resume if w.resume else
                          "leave the cordon someone else set" if w.cordoned else "cordon")
                what = ("MIG off (node_bootstrap disable)" if d.disable else d.plan.sequence if d.plan
                        else "%s=%s" % (d.partition.kind, d.partition.value))
                results[d.instance_id] = {
                    "instance_id": d.instance_id, "node_name": d.node_name, "outcome": "dry-run",
                    "reason": "dry run: would %s, %s (PodDisruptionBudgets respected), apply %s, wait for %s, "
                              "uncordon" % (cordon, evict, what, ", ".join(sorted(w.expected)) or "no MIG resources"),
                    "gpus": d.plan.gpus if d.plan else None}
        return [results[d.instance_id] for d in decisions if d.instance_id in results]


def kube_view(inventory: Any, lookup: Any, settings: Any, cluster_id: str) -> Any:
    """The Kubernetes side for an event: the snapshot's ``kube_nodes`` (None when it has none: nothing is
    rolled), or, when the ACK API is asked (no inventory), the live API server through the cluster
    credential (connected only if the event has running nodes to plan)."""
    if inventory is not None:
        nodes = getattr(lookup, "kube_nodes", None)
        if nodes is None:
            return None
        from functions.rollout.kube import MemoryKube

        return MemoryKube.from_snapshot(nodes)
    from functions.rollout.kube import LiveKube

    return LiveKube.from_settings(settings, cluster_id)
