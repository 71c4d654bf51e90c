"""Rolling repartition of running nodes: from the decisions to a plan.

:func:`prepare` takes the pipeline's decisions, whatever the event (the timer, a node pool modification,
a manual run, but also an Auto Scaling scale-out or lifecycle hook, an ECS state change or an MNS message
that names instances), and asks the Kubernetes side (:class:`functions.kube.nodes.NodeView`) which
path each ``partition`` target takes (``functions.decision.waves.entry_path``):

* a node NVIDIA's mig-manager runs: ``skip`` with the reason ``conflict`` (never cordoned, drained,
  partitioned or disabled);
* a node that has just joined (no state label, ``pending``, the startup taint) or is not a Kubernetes
  node yet: partitioned directly, as a scale-out does, the reason saying so;
* a running node this hook partitioned: through the rollout of its pool, planned from every node of the
  pool (``functions.decision.waves`` decides, purely): ``skip`` (already right: nothing is sent), a wave
  node (kept ``partition``) or ``defer`` (beyond ``max-unavailable``, held by another invocation, or the
  pool's rollout stopped), with reasons that name the rollout and the wave.

A running node that only gains instances (``waves.change_path``) goes without cordon or drain and takes
no slot of ``max-unavailable``: every such node of the pool is in the first wave. A pool labelled
``ack-mig-hook/paused=true`` starts nothing new.

The returned :class:`Rollout` swaps the executor, as a dry run swaps it (``functions.pipeline.point_of_change``):
``functions.rollout.executor`` carries the waves out (a real run) or says what it would do (a dry run).
A real run starts further waves while the invocation has time for one (:meth:`Rollout.replan` plans each
from the nodes as they are then, and the pool's labels as the ACK API gives them then).

Without a Kubernetes view (a snapshot without ``kube_nodes``) nothing changes: every node counts as
never partitioned and is applied as before. Without an answer from the API server, every target that
is a node is deferred: it cannot be told from a running one.
"""

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from node_bootstrap.kube import KubeError
from node_bootstrap.mig import MigInputError, PartitionSpec, label_items, resource_name
from node_bootstrap.outside import digits

from functions.base.event_result import Trigger
from functions.base.model import ACTION_DEFER, ACTION_ERROR, ACTION_PARTITION, ACTION_SKIP, Decision, PartitionLabel
from functions.decision import waves as rp
from functions.kube import leases
from functions.base.settings import WAVE_MARGIN_S, invocation_s, longest_run_s, wave_s

log = logging.getLogger(__name__)

# The events that reconcile whole pools: they also look for MIG nodes in pools whose label was removed.
ROLLOUT_TRIGGERS = (Trigger.TIMER, Trigger.NODEPOOL_OPERATION, Trigger.MANUAL)
# The invocation's wall clock and the wait between polls; module attributes so a test can run the rollout on its
# own time. The rollout itself runs on cluster_clock (below), which falls back to this one.
clock: Callable[[], float] = time.time
sleep: Callable[[float], None] = time.sleep


def cluster_clock(kube: Any) -> Callable[[], float]:
    """The rollout's clock: the API server's (``KubeApi.server_time``, the Date of its last answer), or the
    invocation's own (:data:`clock`) where the backend has none (a snapshot's MemoryKube, a test double).

    Why the server's: a node's record (``owner``, ``expires``, ``since``) is written by one invocation and
    judged by every other (``waves.Progress.held_by_another``: the plan, the claim, a stopped run's takeover,
    ``auto_waves.finish_stranded``), as the pool budget's slots are (``functions.rollout.pool_lease``). On
    each invocation's own clock, one whose clock was off by more than ``waves.CLOCK_MARGIN_S`` (an
    operator's laptop running ``invoke --kubeconfig``, a host whose NTP broke) read a live run's record as
    run out (ahead) or as forged (behind) and took the node over while that run still drained or applied it,
    and wrote records that outlived or undercut its lease on everyone else's clock. Every invocation asks
    the same API server, so they all read one clock. Records written before are epoch seconds too (FC's
    clock, NTP-kept): read as they are. The drain and capacity timeouts run on it too, so a record's
    ``since`` and the drain timeout agree; the invocation's own deadline does not (:meth:`Rollout.time_for`)."""
    return lambda: leases.cluster_now(kube, clock)  # (``clock`` looked up at each call: tests replace it)


@dataclass
class WaveNode:
    decision: Decision
    target: str
    resume: str
    expected: Dict[str, int]
    exact: bool
    progress: Optional[rp.Progress] = None
    cordoned: bool = False  # spec.unschedulable when the wave was planned (someone else's cordon, or ours)
    spec: Optional[PartitionSpec] = None  # the layout asked for (None: MIG off)
    gpu_model: Optional[str] = None
    rv: str = ""  # the Node's resourceVersion as last read or written: the next write's precondition
    result: Optional[dict] = None  # the node's final result (set once it ends, this invocation)
    applied: Optional[dict] = None  # the delivery executor's answer when it applied this invocation
    drain: bool = True  # False: no cordon, no drain, the node told to destroy nothing (waves.change_path)
    pool_id: str = ""
    pool_name: str = ""  # how reasons name the pool: "np-1 (gpu)"
    limit: int = 1  # the pool's max-unavailable when planned: the budget its slot is taken under
    daemon_pods: Optional[List[Tuple[str, str]]] = None  # GPU DaemonSet pods found before the apply
    # An auto pool's per-GPU change (functions/rollout/auto_waves.py): every GPU's target layout. Without drain,
    # but through the pool's budget (``budgeted``): the node's device plugin re-registers its resources.
    layouts: Optional[rp.GpuLayouts] = None
    created: Optional[Dict[int, Tuple[str, ...]]] = None  # per GPU, the profiles the plan creates there
    budgeted: bool = False
    started: float = 0.0  # when this invocation's wave took the node (the executor's clock): its duration_ms


def _spec(d: Decision) -> Optional[PartitionSpec]:
    return PartitionSpec(d.partition.kind, d.partition.value) if d.partition is not None else None


def _gpus(d: Decision, kube: Optional[rp.KubeNode]) -> Optional[int]:
    if d.plan is not None and d.plan.gpus:
        return d.plan.gpus
    text = (kube.labels.get(rp.GPU_COUNT_LABEL) if kube is not None else "") or ""
    count = digits(text)  # (int of a 5,000-digit label raises ValueError: it would end the event)
    return count if count else None


def _expected(d: Decision, kube: Optional[rp.KubeNode]) -> Tuple[Dict[str, int], bool]:
    if d.disable:  # MIG off: no nvidia.com/mig-* resource left
        return {}, True
    if d.plan is None:  # the GPU model is the node's to say: any of the label's profiles showing will do
        try:
            items = [] if d.partition is None else label_items(d.partition.kind, d.partition.value)
        except MigInputError:
            items = []
        return {resource_name(i.lower()): 1 for i in items if not (i.isascii() and i.isdigit())}, False
    return rp.expected_capacity([i.profile for i in d.plan.instances], _gpus(d, kube))


def run_lease_s(settings: Any) -> float:
    """How long a record holds its node: the longest one invocation can run (functions.base.settings), so a
    record whose lease has run out belongs to a run FC has ended."""
    return longest_run_s(settings)


@dataclass
class PoolRollout:
    """What planning one pool's rollout again needs: its members (this event's running nodes of it, as
    decided before the rollout), the pool as the event saw it, and why each member took the rollout."""

    pool_id: str
    members: List[Decision]
    pool: Any
    paths: Dict[str, str]


class Rollout:
    """The rollout part of one event: the wave nodes and the Kubernetes backend (None when the API server
    did not answer: nothing is written). ``pools``: each rolled pool, for :meth:`replan`; ``pools_now``:
    the cluster's node pools as the ACK API gives them now (a pause or a label change between waves);
    ``deadline``: when the invocation's time is up (its start plus ``functions.base.settings.invocation_s``), on
    the invocation's own clock (:data:`clock`), not the rollout's."""

    def __init__(self, kube: Any, waves: Dict[str, WaveNode], settings: Any, owner: str = "",
                 expires: float = 0.0, pools: Optional[Dict[str, PoolRollout]] = None,
                 pools_now: Optional[Callable[[], Sequence[Any]]] = None, deadline: float = 0.0) -> None:
        self.kube, self.waves, self.settings = kube, waves, settings
        self.owner, self.expires = owner, expires  # expires: on the rollout's clock (cluster_clock)
        self.clock = cluster_clock(kube)
        self.pools = pools or {}
        self.pools_now = pools_now
        self.deadline = deadline
        self.decided: Dict[str, Decision] = {}  # decisions made again by replan, by instance id
        self.drains: Dict[str, Optional[bool]] = {}  # each member's path as last planned (Decision.drain)
        # The stop records that halted a pool at any planning of this invocation (``_plan_pool``): an earlier run
        # may have been killed before telling them (functions.pipeline.notify tells those not marked told).
        self.stops: List[Dict[str, Any]] = []
        # Why nodes were held up for a cause that is not theirs, one line per kind: their claim failed
        # (``executor.NOT_CLAIMED``; "unanswered": the API server, "forbidden": RBAC) or the API server failed
        # after it ("mid-wave", ``executor.API_FAILED``): the event ends retry and says each once.
        self.held_up: Dict[str, str] = {}

    def executor(self, inner: Any, dry_run: bool, on_result: Optional[Callable[[dict], None]] = None) -> Any:
        from functions.rollout.executor import DryRunRolloutExecutor, RolloutExecutor

        if dry_run:
            return DryRunRolloutExecutor(inner, self)
        return RolloutExecutor(inner, self, self.clock, sleep, on_result)

    def final(self, decisions: Sequence[Decision]) -> List[Decision]:
        """The event's decisions with those a later wave of this invocation made again (the result shows
        what was done, not only the first plan)."""
        return [self.decided.get(d.instance_id, d) for d in decisions]

    def time_for(self, drain: bool) -> Tuple[bool, str]:
        """Whether a further wave fits in what is left of the invocation: the wave's worst case by the
        settings (no drain time for a wave that drains nothing) plus the margin. ``(fits, why not)``.
        On the invocation's own clock, as ``deadline`` is: FC ends the invocation on its time, and the API
        server's clock (the rollout's) may be set back mid-run (an NTP step), which read as that much more
        time: an invocation whose time is one wave's started another, which FC then cut mid-drain."""
        needed = wave_s(self.settings, drain) + WAVE_MARGIN_S
        left = self.deadline - clock()
        if left > needed:  # (an invocation whose Timeout is one wave's, template.yml's default, runs one wave)
            return True, ""
        return False, ("this invocation has %d s left, less than a wave may take (%d s: node, %scapacity timeouts "
                       "and %d s); the next invocation goes on" % (max(0, int(left)), needed,
                                                                  "drain, " if drain else "", WAVE_MARGIN_S))

    def replan(self, pool_ids: Sequence[str], finished: Sequence[str], unwritable: Sequence[str] = ()
               ) -> Tuple[Dict[str, Decision], Dict[str, WaveNode]]:
        """The next wave of these pools, planned from the nodes as the API server has them now: new
        decisions for the members not ``finished`` in this invocation, and the wave nodes among them.
        The pool's labels are read again (``pools_now``): a pause stops new nodes; a changed partition
        label ends this invocation's waves of the pool (the event of that change rolls to it).
        ``unwritable``: members whose claim the API server refused in this invocation (finished too): planned
        as bystanders, not candidates, or with no record to show for the refusal they would take the wave's
        place again; a record one holds (a killed run's) still takes its slot or stops the pool."""
        from functions.kube.nodes import NodeView

        fresh = {p.nodepool_id: p for p in self.pools_now()} if self.pools_now is not None else None
        owner, now = self.owner, self.clock()
        changed: Dict[str, Decision] = {}
        waves: Dict[str, WaveNode] = {}
        view = NodeView(self.kube)
        done, refused = set(finished) | set(unwritable), set(unwritable)
        for pool_id in sorted(pool_ids):
            plan = self.pools[pool_id]
            pool = plan.pool if fresh is None else fresh.get(pool_id)
            if _partition_labels(pool) != _partition_labels(plan.pool):
                why = ("the pool's partition labels changed during this invocation (now %s); this invocation "
                       "starts no further node of it, the event of that change rolls to the new layout"
                       % (", ".join("%s=%s" % kv for kv in _partition_labels(pool)) or "none"))
                for d in plan.members:
                    changed[d.instance_id] = d.model_copy(update=dict(action=ACTION_DEFER, reason=why))
                continue
            labelled = view.pool_nodes([pool_id]).get(pool_id, [])
            known = view.named([d.node_name or "" for d in plan.members])
            members = []
            for d in plan.members:
                if d.instance_id in refused:
                    continue  # a bystander now: a record it has (a killed run's) still counts, as any other's
                if known.get(d.node_name or "") is None:
                    changed[d.instance_id] = d.model_copy(update=dict(
                        action=ACTION_DEFER, reason="the node is no longer a Kubernetes node; nothing is sent"))
                else:
                    members.append(d)
            if not members:
                continue
            # Every member is planned, also those this invocation finished: their records (a stop) count.
            _plan_pool(pool_id, members, pool, known, labelled, plan.paths, self.settings, owner, now,
                       changed, waves, mine={d.node_name for d in plan.members if d.instance_id not in refused},
                       stops=self.stops)
        changed = {iid: d for iid, d in changed.items() if iid not in done}
        waves = {iid: w for iid, w in waves.items() if iid not in done}
        self.decided.update(changed)
        self.drains.update({iid: d.drain for iid, d in changed.items()})
        return changed, waves

    def paused_now(self, pool_id: str) -> str:
        """Why the pool is paused as the ACK API has it now ("" when it is not, or cannot be read again:
        the planned pool's labels then stand)."""
        pool = self.pools[pool_id].pool if pool_id in self.pools else None
        if self.pools_now is not None:
            try:
                pool = {p.nodepool_id: p for p in self.pools_now()}.get(pool_id, pool)
            except Exception as exc:  # noqa: BLE001 - the ACK API: the plan's view of the pause stands
                log.warning("pool %s not read again before its slot: %s", pool_id, exc)
        if pool is not None and rp.paused(pool.labels):
            return ("paused: pool %s was paused (%s=true) after this invocation planned; this node was not "
                    "started; remove the label (ack-mig-hook rollout resume) to go on"
                    % (pool_name(pool, pool_id), rp.PAUSED_LABEL))
        return ""

    def needs_drain(self, pool_id: str, pending: Sequence[str]) -> bool:
        """Whether the pool's next wave would drain, as far as the last plan knows: a waiting member planned
        without drain needs only that much time (a node that refused is drained next)."""
        waiting = [d.instance_id for d in self.pools[pool_id].members if d.instance_id in pending]
        return not any(self.drains.get(iid) is False for iid in waiting)


def _stranded(node: Any, now: float, settings: Any) -> bool:
    """A node of a pool without a partition label whose rollout record is mid-way and held by no invocation
    (the one that wrote it stopped), with the layout it has said by its sequence label."""
    p = node.progress if node is not None else None
    return bool(p is not None and p.step in rp.ACTIVE_STEPS and not p.held_by_another("", now, run_lease_s(settings))
                and (node.labels or {}).get(rp.APPLIED_LABEL))


def _partition_labels(pool: Any) -> List[Tuple[str, str]]:
    from node_bootstrap.mig import PARTITION_LABELS

    labels = getattr(pool, "labels", None) or {}
    return sorted((k, v) for k, v in labels.items() if k in PARTITION_LABELS)


def _has_label(pool: Any) -> bool:
    from functions.decision.decide import has_partition_label

    return has_partition_label(pool)


def startup_taint(settings: Any) -> str:
    """``key:Effect`` of the startup taint ("" when taint removal is off)."""
    from functions.kube.taint import TaintError, parse_taint

    try:
        taint = parse_taint(settings.delivery.startup_taint) if settings.delivery.startup_taint else None
    except TaintError:
        return ""
    return "%s:%s" % (taint.key, taint.effect) if taint else ""


def pool_name(pool: Any, pool_id: str) -> str:
    return "%s (%s)" % (pool_id, pool.name) if pool is not None and pool.name else pool_id


def prepare(request: Any, targets: Sequence[Any], decisions: List[Decision], view: Any,
            settings: Any, pools_now: Optional[Callable[[], Sequence[Any]]] = None
            ) -> Tuple[List[Decision], Optional[Rollout]]:
    """The decisions with each node's path applied, and the Rollout (None when nothing changed).
    ``pools_now``: the cluster's node pools from the ACK API, read again between waves.

    A node of a pool without a partition label that still has MIG (the label was removed) keeps its
    layout (``skip``, the reason says how to turn MIG off) or, with ACK_MIG_ON_LABEL_REMOVAL=disable,
    is rolled to MIG off in waves like a repartition (``node_bootstrap disable``)."""
    if view is None:
        return decisions, None
    pools = {t[0]: t[2] for t in targets if isinstance(t, tuple) and t[2] is not None}
    decisions = _named_by_instance(decisions, view)
    partitions = [d for d in decisions if d.action == ACTION_PARTITION and d.node_name]
    unlabelled = [d for d in decisions if d.action == ACTION_SKIP and d.node_name and d.instance_id in pools
                  and not _has_label(pools[d.instance_id])]
    if not partitions and not unlabelled:
        return decisions, None
    taint = startup_taint(settings)
    try:
        if request.instance_ids:  # a few named nodes: read each, list a pool only when it has a running one
            known = view.named([d.node_name for d in partitions + unlabelled])
            rolling = {d.nodepool_id for d in partitions
                       if rp.entry_path(known.get(d.node_name or ""), taint)[0] == rp.ROLLOUT}
            pool_nodes = view.pool_nodes(rolling)
        else:  # whole pools: one paged list of their nodes, by the pool label
            pool_nodes = view.pool_nodes({d.nodepool_id for d in partitions + unlabelled if d.nodepool_id})
            known = view.named([d.node_name for d in partitions + unlabelled])
    except KubeError as exc:
        # Without the Kubernetes API a running node cannot be told from a new one, nor drained: it waits.
        why = ("the Kubernetes API cannot be used (%s); a node is partitioned only once the API server says it "
               "is new, running nodes only through the rollout (RBAC: deploy/rbac.yaml)" % str(exc)[:160])
        out = [d.model_copy(update=dict(action=ACTION_DEFER, reason=why)) if d in partitions else d
               for d in decisions]
        return out, Rollout(None, {}, settings)
    now = cluster_clock(view.backend)()  # the records' clock, as the listing's answers said it
    changed: Dict[str, Decision] = {}
    paths: Dict[str, str] = {}
    by_pool: Dict[str, List[Decision]] = {}
    for d in partitions:
        path, why = rp.entry_path(known.get(d.node_name or ""), taint)
        if path == rp.CONFLICT:
            changed[d.instance_id] = d.model_copy(update=dict(action=ACTION_SKIP, reason=why))
        elif path == rp.NEW:
            changed[d.instance_id] = d.model_copy(update=dict(reason="%s; %s, so partitioned directly"
                                                                     % (d.reason, why)))
        else:
            paths[d.instance_id] = why
            by_pool.setdefault(d.nodepool_id or "", []).append(d)
    for d in unlabelled:
        node = known.get(d.node_name or "")
        if not rp.mig_on(node):
            continue
        path, why = rp.entry_path(node, taint)
        if path == rp.CONFLICT:  # never disabled, whatever the setting
            changed[d.instance_id] = d.model_copy(update=dict(reason="%s; %s" % (d.reason, why)))
        elif settings.rollout.on_label_removal == "disable":
            off = d.model_copy(update=dict(action=ACTION_PARTITION, disable=True, partition=None, plan=None))
            paths[d.instance_id] = "a node with MIG in a pool without a partition label"
            by_pool.setdefault(d.nodepool_id or "", []).append(off)
        elif _stranded(node, now, settings):
            # A run died mid-way through this node's rollout and the label went since: every later invocation
            # skipped it, cordoned (and kept from scale-down) for good. It is rolled to the layout it has, as
            # labelled (cordon kept, drained again, the apply changes nothing or undoes a partial one, uncordon).
            keep = d.model_copy(update=dict(action=ACTION_PARTITION, disable=False, plan=None, partition=PartitionLabel(
                kind="sequence", value=node.labels[rp.APPLIED_LABEL])))
            paths[d.instance_id] = ("a node a stopped invocation left mid-rollout (%s) in a pool without a partition "
                                    "label: finished on the layout it has" % node.progress.step)
            by_pool.setdefault(d.nodepool_id or "", []).append(keep)
        else:
            changed[d.instance_id] = d.model_copy(update=dict(reason=(
                "%s; this node keeps its MIG layout (%s). To turn MIG off: set ACK_MIG_ON_LABEL_REMOVAL=disable "
                "on the function (the pool's nodes then roll to MIG off like a repartition), or run "
                "`python3 -m node_bootstrap disable` on the node, from the bundle the function delivered there "
                "(docs/operations.md, Turning MIG off)" % (
                    d.reason, node.labels.get(rp.APPLIED_LABEL) or node.labels.get(rp.STATE_LABEL) or "-"))))
    waves: Dict[str, WaveNode] = {}
    owner = uuid.uuid4().hex[:12]
    rolled: Dict[str, PoolRollout] = {}
    stops: List[Dict[str, Any]] = []
    for pool_id, members in sorted(by_pool.items()):
        pool = pools.get(members[0].instance_id)
        rolled[pool_id] = PoolRollout(pool_id, members, pool, {d.instance_id: paths[d.instance_id] for d in members})
        _plan_pool(pool_id, members, pool, known, pool_nodes.get(pool_id, []), paths, settings, owner, now,
                   changed, waves, stops=stops)
    out = [changed.get(d.instance_id, d) for d in decisions]
    rollout = Rollout(view.backend, waves, settings, owner, now + run_lease_s(settings), rolled, pools_now,
                      clock() + invocation_s(settings))
    rollout.drains = {iid: d.drain for iid, d in changed.items()}
    # the halting ones first (planned), then any other read (a pool no run is held up in: told all the same)
    rollout.stops = stops + read_stops(pool_nodes, {p.nodepool_id: p for p in pools.values() if p is not None})
    return out, rollout


def _named_by_instance(decisions: List[Decision], view: Any) -> List[Decision]:
    """A node ACK lists without a node name (it reports the name late) is matched to its Kubernetes Node by
    instance id (``spec.providerID``), so a running node never skips the rollout; one no Node claims is not a
    Kubernetes node yet, and its reason says so, as when the API server cannot be asked: most such targets
    are a scale-out's new instances, which an outage must not hold up."""
    unnamed = [d for d in decisions if d.action == ACTION_PARTITION and not d.node_name and d.nodepool_id]
    if not unnamed:
        return decisions
    try:
        listed = view.pool_nodes({d.nodepool_id for d in unnamed})
    except KubeError as exc:
        # Most unnamed targets are a scale-out's new instances, which no API outage should hold up (they were
        # partitioned directly before this check existed): they go on, and the reason reports the gap.
        why = ("ACK gives no node name and the Kubernetes API could not be asked for one by instance id (%s); "
               "treated as a new node" % str(exc)[:160])
        ids = {d.instance_id for d in unnamed}
        return [d.model_copy(update=dict(reason="%s; %s" % (d.reason, why))) if d.instance_id in ids
                and not d.node_name else d for d in decisions]
    by_instance = {n.instance_id: n.name for nodes in listed.values() for n in nodes if n.instance_id}
    ids = {d.instance_id for d in unnamed}
    out = []
    for d in decisions:
        if d.instance_id in ids and d.instance_id in by_instance and not d.node_name:
            d = d.model_copy(update=dict(node_name=by_instance[d.instance_id]))
        elif d.instance_id in ids and not d.node_name:
            d = d.model_copy(update=dict(reason="%s; ACK gives no node name and no Kubernetes node has this instance "
                                                "(spec.providerID): not a Kubernetes node yet" % d.reason))
        out.append(d)
    return out


def pool_limit(settings: Any, pool: Any, name: str, members: Sequence[Decision], size: int
               ) -> Tuple[Optional[int], Dict[str, Decision]]:
    """The pool's max-unavailable (its label, else the setting, of ``size`` nodes), or None and the members'
    decisions when the pool's setting is wrong: the error reported once (on its first node), the others
    untouched and pointing there, so a pool of 500 nodes is one error, not 500."""
    label = pool.labels.get(rp.MAX_UNAVAILABLE_LABEL) if pool is not None else None
    try:
        return rp.max_unavailable(settings.rollout.max_unavailable, label, size), {}
    except rp.RolloutInputError as exc:
        first = min(members, key=lambda d: (d.node_name or "", d.instance_id))
        return None, {d.instance_id: (
            d.model_copy(update=dict(action=ACTION_ERROR, reason="pool %s: %s" % (name, exc))) if d is first else
            d.model_copy(update=dict(action=ACTION_SKIP, reason="not rolled: pool %s has an invalid setting, "
                                                                 "reported once on node %s" % (name, first.node_name))))
            for d in members}


def _plan_pool(pool_id: str, members: List[Decision], pool: Any, known: Dict[str, Any],
               labelled: List[rp.KubeNode], paths: Dict[str, str], settings: Any, owner: str, now: float,
               changed: Dict[str, Decision], waves: Dict[str, WaveNode], mine: Optional[set] = None,
               stops: Optional[List[Dict[str, Any]]] = None) -> None:
    """One pool's rollout: the members (this event's running nodes of it) planned with the pool's other
    nodes as bystanders (their records take slots and can stop the rollout). ``mine``: the names that are
    not bystanders (all the event's members, also those a later wave no longer plans). ``stops`` gets each
    stop record that halts the pool (:func:`stop_records`)."""
    name = pool_name(pool, pool_id)
    target = rp.TARGET_OFF if members[0].disable else rp.target_of(_spec(members[0]))
    mine = mine if mine is not None else {d.node_name for d in members}
    bystanders = [n for n in labelled if n.name not in mine]
    limit, refused = pool_limit(settings, pool, name, members, len(members) + len(bystanders))
    if limit is None:
        changed.update(refused)
        return
    candidates = []
    for d in members:
        node, gpu = known[d.node_name], d.plan.gpu if d.plan else None
        why = rp.work_needed(_spec(d), node, gpu)
        drain, path = rp.change_path(_spec(d), node, gpu) if why else (True, "")
        candidates.append(rp.Candidate(d.instance_id, d.node_name or "", node, why, drain, path))
    steps = rp.plan_pool(name, target, candidates, limit, me=owner, now=now, bystanders=bystanders,
                         paused=pool is not None and rp.paused(pool.labels), horizon_s=run_lease_s(settings))
    stop = rp.stopped_by(target, [known[d.node_name] for d in members] + bystanders)
    if stop is not None and stops is not None:
        stops.extend(stop_records(pool_id, name, target, [known[d.node_name] for d in members] + bystanders))
    if stop is not None:  # one line per stopped pool and invocation, for the "stopped rollouts" alert (template.yml)
        node, progress = stop
        log.error("rollout stopped", extra={"fields": dict(
            nodepool_id=pool_id, node_name=node, outcome=progress.step, code="rollout-stopped",
            reason="rollout of pool %s to %s stopped: node %s ended %s (%s); fix the cause, then remove its "
                   "annotation %s to resume" % (name, target, node, progress.step, progress.reason or "no reason "
                                                "recorded", rp.PROGRESS_ANNOTATION))})
    for d in members:
        step = steps[d.instance_id]
        node = known[d.node_name]
        if step.action == "skip":
            changed[d.instance_id] = d.model_copy(update=dict(action=ACTION_SKIP, reason=step.reason, drain=None))
            continue
        reason = "%s, so through the rollout: %s" % (paths[d.instance_id], step.reason)
        if step.action == "defer":
            changed[d.instance_id] = d.model_copy(update=dict(action=ACTION_DEFER, reason=reason, drain=step.drain))
            continue
        changed[d.instance_id] = d.model_copy(update=dict(action=ACTION_PARTITION, reason=reason, drain=step.drain))
        expected, exact = _expected(d, node)
        waves[d.instance_id] = WaveNode(changed[d.instance_id], target, step.resume, expected, exact, node.progress,
                                        node.unschedulable, _spec(d), d.plan.gpu if d.plan else None,
                                        node.resource_version, drain=step.drain, pool_id=pool_id,
                                        pool_name=name, limit=limit)


def stop_records(pool_id: str, name: str, target: Optional[str], nodes: Sequence[Optional[rp.KubeNode]]
                 ) -> List[Dict[str, Any]]:
    """The stop records of a halted pool (each node that ended ``drain-timeout`` or ``failed`` for ``target``; None:
    for any target, :func:`read_stops`), as ``functions.pipeline.notify`` tells them: the record's owner (the run
    that wrote it) names the stop, its target the rollout it stopped."""
    return [{"nodepool_id": pool_id, "pool_name": name, "target": n.progress.target, "node_name": n.name,
             "instance_id": n.instance_id, "step": n.progress.step, "owner": n.progress.owner,
             "reason": n.progress.reason}
            for n in sorted((n for n in nodes if n is not None), key=lambda n: n.name)
            if n.progress is not None and n.progress.step in rp.STOP_STEPS
            and (target is None or n.progress.target == target)]


def read_stops(pool_nodes: Dict[str, Sequence[Optional[rp.KubeNode]]], pools: Dict[str, Any]
               ) -> List[Dict[str, Any]]:
    """Every stop record on the pools' nodes as already listed (pool id -> its nodes), whatever it stops now: a
    stop whose telling run was killed in a pool no later run is held up in (its label changed back, removed, an
    auto pool) waits for a person as much as one that halts a rollout. Told once each by the run that read it
    (``functions.pipeline.notify``, the alert marks); no further API call."""
    return [st for pool_id in sorted(pool_nodes)
            for st in stop_records(pool_id, pool_name(pools.get(pool_id), pool_id), None, pool_nodes[pool_id])]


AUTO_LAYOUT_LABEL = "ack-mig-hook/layout"  # an auto pool has no partition label by design (docs/auto-pools.md)


def removal_targets(request: Any, lookup: Any, cluster: str, view: Any, taken: Sequence[str],
                    refused: Dict[str, str], stops: Optional[List[Dict[str, Any]]] = None) -> List[tuple]:
    """Nodes with MIG in pools that no longer carry a partition label (the pipeline's targets skip such
    pools): ``(instance id, node, pool)`` for the timer, a manual run, or a modification of that pool.
    ``refused`` gets one line per such pool whose node list ACK refused for good (``pool_nodes``: that pool
    has no target, the others do). ``stops`` gets every stop record on those pools' nodes as listed here
    (:func:`read_stops`): a pool with no MIG node left has no target, so no later listing would show them."""
    from functions.cloud.cluster import pool_nodes

    if view is None or request.trigger not in ROLLOUT_TRIGGERS or request.instance_ids:
        return []
    pools = [p for p in lookup.nodepools(cluster) if not _has_label(p) and AUTO_LAYOUT_LABEL not in p.labels
             and (not request.nodepool_id or p.nodepool_id == request.nodepool_id)]
    if not pools:
        return []
    try:
        labelled = view.pool_nodes([p.nodepool_id for p in pools])
    except KubeError as exc:
        log.warning("pools without a partition label not checked for MIG nodes: %s", exc)
        return []
    if stops is not None:
        stops.extend(read_stops({p.nodepool_id: labelled.get(p.nodepool_id, []) for p in pools},
                                {p.nodepool_id: p for p in pools}))
    out = []
    for pool in pools:
        with_mig = {n.name for n in labelled.get(pool.nodepool_id, []) if rp.mig_on(n)}
        if not with_mig:
            continue
        for node in pool_nodes(lookup, cluster, pool.nodepool_id, refused):
            if node.node_name in with_mig and node.instance_id not in taken:
                out.append((node.instance_id, node, pool))
    return out


def kube_view(inventory: Any, lookup: Any, settings: Any, cluster_id: str) -> Any:
    """The Kubernetes side for an event, as a NodeView: the operator's kubeconfig (``--kubeconfig``,
    whatever gives the ACK side), else the snapshot's ``kube_nodes`` (None when it has none: nothing is
    rolled), else, when the ACK API is asked, the live API server through the cluster credential
    (connected only once the event has nodes to look at)."""
    from functions.kube.nodes import MemoryKube, NodeView

    if inventory is not None and not settings.rollout.kubeconfig:
        nodes = getattr(lookup, "kube_nodes", None)
        return None if nodes is None else NodeView(MemoryKube.from_snapshot(nodes))
    from functions.kube.taint import cs_kubeconfig

    # One client serves the whole invocation (a drain alone may take ACK_MIG_DRAIN_TIMEOUT_S, and a run may
    # start several waves): the credential must outlive the invocation, not ACK's 15-minute default, and
    # the client retries until the invocation's end.
    budget = invocation_s(settings)
    minutes = min(4320, max(15, -(-budget // 60) + 5))
    return NodeView(cs_kubeconfig(settings, cluster_id, minutes).client(deadline_s=float(budget)))
