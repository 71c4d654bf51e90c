"""Rolling repartition of running nodes: which node needs work, which ones this wave takes, which wait.

Pure: the Kubernetes side of each node comes in as :class:`KubeNode` (labels, annotations, cordon,
allocatable), nothing is looked up here. The rollout executor (``functions.rollout.run``) carries the plan
out and records each node's progress in the node annotation :data:`PROGRESS_ANNOTATION`, which is also
what the next invocation plans from: the function holds no state of its own.

Which path a target takes (:func:`entry_path`), whatever event named it: a node that carries this hook's
applied state (its :data:`STATE_LABEL` or :data:`APPLIED_LABEL`, or a rollout record) is a running node
and changes only through the rollout; a node that has just joined (no state label, ``pending``, or still
carrying the startup taint) is partitioned directly; a node NVIDIA's mig-manager runs
(:data:`MIG_MANAGER_LABEL`) is never touched.

A running node needs work when its applied layout (node label :data:`APPLIED_LABEL`, compared as a
multiset of profiles with the core's own label parser) differs from the pool's label, or its
:data:`STATE_LABEL` is not ``success``. Which way it changes (:func:`change_path`): a change that keeps
every instance the node holds and only adds instances (the applied layout placed as the solver places it,
completed to the new one around it) goes without cordon or drain, and the node is told to destroy nothing;
anything else is drained. Per pool at most ``max-unavailable`` nodes are disrupted (drained) at once: nodes
already in progress keep their slot (also those of the pool that this event does not act on: the
``bystanders``), the free slots go to the waiting nodes in name order, the rest are deferred. Nodes that
change without drain lose no capacity: they take no slot and all go at once. A node that ended
``drain-timeout`` or ``failed`` for the current target stops the pool's rollout until someone looks (the
reason says how to resume); a pool labelled :data:`PAUSED_LABEL` ``=true`` starts nothing new.
"""

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from functions.decision.layout.matching import whole_quantity
from node_bootstrap.mig import (GPUS, GpuModel, Layout, MigInputError, PartitionSpec, find_gpu_or_none, parse,
                                plan, resource_name)
from node_bootstrap.mig.annotations import LAYOUTS_ANNOTATION, read_layouts  # what each GPU holds
from node_bootstrap.mig.solver import complete
from node_bootstrap.outside import MAX_EPOCH, OutsideDataError, as_object, json_type, loads, number, objects

APPLIED_LABEL = "aliyun.accelerator/nvidia_mig_sequence"  # written by node_bootstrap (nodelabels.py)
STATE_LABEL = "nvidia.com/mig.config.state"
REASON_ANNOTATION = "ack-mig-hook/mig-config-reason"
GPU_NAME_LABEL = "aliyun.accelerator/nvidia_name"  # ACK GPU node label (facts.md: writer U)
GPU_COUNT_LABEL = "aliyun.accelerator/nvidia_count"
MAX_UNAVAILABLE_LABEL = "ack-mig-hook/max-unavailable"  # pool label: a count (label values cannot hold %)
PAUSED_LABEL = "ack-mig-hook/paused"  # pool label: "true" starts no new node (ack-mig-hook rollout pause)
PROGRESS_ANNOTATION = "ack-mig-hook/rollout"
MIG_MANAGER_LABEL = "nvidia.com/mig.config"  # NVIDIA GPU Operator's mig-manager is in charge of this node
POOL_LABEL = "alibabacloud.com/nodepool-id"  # ACK labels every node of a pool with the pool's id (ACK docs)
# What the function reads of a Node; the rest (managedFields, images, conditions, ...) is dropped as the
# list arrives, so 10,000 Nodes fit the function's memory.
KEPT_LABELS = ("nvidia.com/", "aliyun.accelerator/", "ack-mig-hook/", POOL_LABEL)
# The cluster-autoscaler's own opt-out (cluster-autoscaler FAQ, "How can I prevent Cluster Autoscaler from scaling
# down a particular node?"; ACK documents the same key): set on a node while the hook works on it.
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
KEPT_ANNOTATIONS = ("ack-mig-hook/", SCALE_DOWN_DISABLED)
KEPT_RESOURCES = ("nvidia.com/", "aliyun.com/")
TARGET_OFF = "mig=off"  # the target of a roll to MIG off (ACK_MIG_ON_LABEL_REMOVAL=disable)

# Steps, in order. ACTIVE: the node is disrupted (cordoned by this rollout, or on its way back).
CORDONED, DRAINED, APPLYING, APPLIED, DONE = "cordoned", "drained", "applying", "applied", "done"
DRAIN_TIMEOUT, FAILED = "drain-timeout", "failed"
# The node refused a "destroy nothing" apply (node_bootstrap's destroy-required, exit 7): nothing changed,
# and the next plan takes the node the drained way. Neither active nor a stop.
DESTROY_REQUIRED = "destroy-required"
ACTIVE_STEPS = (CORDONED, DRAINED, APPLYING, APPLIED)
STOP_STEPS = (DRAIN_TIMEOUT, FAILED)

_COUNT = re.compile(r"^[0-9]{1,4}\Z")
# A rollout record is a flat object of about 200 characters: anything much longer is not ours, and is not
# parsed at all (a node annotation can hold up to 256 KiB that anyone with node patch rights writes).
MAX_PROGRESS_TEXT = 4096
# The most of a record's reason its text holds (JSON, escapes included): the rest of a record is about 250 bytes,
# its target at most about 1 KB (16 GPUs of 7 instances), so a record this hook writes stays within
# MAX_PROGRESS_TEXT. Unbounded, a drain's reason naming many pods a budget kept wrote a stop record of 12 KB that
# every later run read as none: the stop was lost and the node drained again. The node's result keeps it all.
MAX_RECORD_REASON = 1536
# How far past one run lease from ``now`` a hold may name and still count. Records are written and judged on
# the API server's clock (functions.rollout.run.cluster_clock), so the writer's ``now`` and the reader's
# differ only by how each read it (the whole-second Date of an answer, the time since) and, for a record an
# older version wrote on FC's NTP-kept clock, by seconds; beyond one run lease and this, a hold is not one a
# live run wrote.
CLOCK_MARGIN_S = 60.0
_PERCENT = re.compile(r"^([0-9]{1,3})%\Z")


class RolloutInputError(ValueError):
    """A max-unavailable value that cannot be used. One line naming the value and the accepted form."""

    exit_code = 2


def record_reason(reason: str) -> str:
    """``reason`` as a record holds it: whole when its JSON text fits :data:`MAX_RECORD_REASON`, else cut to fit,
    with ``...``."""
    if len(json.dumps(reason)) <= MAX_RECORD_REASON:
        return reason
    cut = reason[:MAX_RECORD_REASON]
    while len(json.dumps(cut + "...")) > MAX_RECORD_REASON:  # an escaped character takes up to 12 bytes
        cut = cut[:-max(1, (len(json.dumps(cut + "...")) - MAX_RECORD_REASON) // 12)]
    return cut + "..."


UNKNOWN_OWNER = "unreadable-owner"  # a record's owner that is no text: no invocation id looks like it


@dataclass(frozen=True)
class Progress:
    """One node's rollout record (the JSON in :data:`PROGRESS_ANNOTATION`)."""

    target: str
    step: str
    cordoned: bool = False  # this rollout cordoned the node (so it uncordons it); False: someone else did
    since: float = 0.0  # when the drain started, on the API server's clock as every time here (epoch seconds)
    reason: str = ""
    # The invocation working on the node and the time (the API server's) by which it is over (its start plus the
    # longest a run can take): until then no other invocation touches the node, since FC may run the timer
    # and an event, or a retried event, at the same time; after it, the record is a killed run's to resume.
    owner: str = ""
    expires: float = 0.0
    # False: this node changes without cordon or drain (it only gains instances), so it takes no slot of
    # max-unavailable. A record written before the field existed was drained.
    drain: bool = True
    # This rollout set SCALE_DOWN_DISABLED (so it removes it when the node ends); False: someone else's, or none.
    autoscaler: bool = False

    def to_annotation(self, compact: bool = False) -> str:
        """The record's text. ``compact``: a final record without the fields only a record in progress needs
        (reason, expires, autoscaler: read back as none), shorter than any record in progress, so it fits where
        the one it ends fitted (functions.rollout.executor ``_unrecorded``). The owner stays: a slot whose
        release failed drops out once the record shows its holder ended the node (functions.decision.budget)."""
        if compact:
            return json.dumps({"target": self.target, "step": self.step, "cordoned": self.cordoned,
                               "since": round(self.since, 3), "owner": self.owner, "drain": self.drain},
                              sort_keys=True)
        return json.dumps({"target": self.target, "step": self.step, "cordoned": self.cordoned,
                           "since": round(self.since, 3), "reason": record_reason(self.reason), "owner": self.owner,
                           "expires": round(self.expires, 3), "drain": self.drain,
                           "autoscaler": self.autoscaler}, sort_keys=True)

    def held_by_another(self, me: str, now: float, horizon_s: float) -> bool:
        """Another live invocation works on the node. ``horizon_s``: the longest an invocation runs (its run
        lease). No invocation writes a hold beyond its start plus that, so a record that holds for longer from
        now (forged, corrupted, or written by a clock far ahead) holds nothing: this run takes the node over,
        as it would a killed run's, instead of leaving it alone until the named time (up to 2100)."""
        if not self.owner or self.owner == me or now >= self.expires:
            return False
        return self.expires <= now + horizon_s + CLOCK_MARGIN_S

    @classmethod
    def from_annotation(cls, text: Optional[str]) -> Optional["Progress"]:
        """None for no record or one that does not read (a hand-edited annotation starts over)."""
        return cls.parse(text)[0]

    @classmethod
    def parse(cls, text: Optional[str]) -> Tuple[Optional["Progress"], str]:
        """The record and "", or None and why it does not read ("" for none): the reader rule's one line."""
        if not text:
            return None, ""
        try:  # the reader rule (node_bootstrap/outside.py): bounded, finite, times within their range
            data = loads(text, "annotation %s" % PROGRESS_ANNOTATION, max_bytes=MAX_PROGRESS_TEXT, max_depth=2)
            if not isinstance(data, dict):
                raise OutsideDataError("it is %s, not an object" % json_type(data))
            cordoned = data.get("cordoned", False)
            if not isinstance(cordoned, bool):  # bool() read "false" or 1 as this hook's cordon, lifted at the end
                raise OutsideDataError("cordoned is %s, not true/false" % json_type(cordoned))
            for key in ("target", "step"):  # str() made a list or a number into a target or step none wrote
                if not isinstance(data[key], str):
                    raise OutsideDataError("%s is %s, not text" % (key, json_type(data[key])))
            owner, reason = data.get("owner"), data.get("reason")
            return cls(target=data["target"], step=data["step"], cordoned=cordoned,
                       since=number(data.get("since"), "since", 0.0, MAX_EPOCH, default=0.0),
                       # a reason is only shown: another type reads as none; an owner of another type is an
                       # unknown run's, which holds the node until the expiry (bounded: held_by_another), as
                       # a run's that is not this one: as none ({}, 0 read so) this run took the node at once
                       reason=reason if isinstance(reason, str) else "",
                       owner=owner if isinstance(owner, str) else UNKNOWN_OWNER if owner is not None else "",
                       expires=number(data.get("expires"), "expires", 0.0, MAX_EPOCH, default=0.0),
                       drain=data.get("drain") is not False, autoscaler=data.get("autoscaler") is True), ""
        except KeyError as exc:
            return None, "it has no %s" % exc
        except (ValueError, TypeError, AttributeError) as exc:  # OutsideDataError is a ValueError
            return None, str(exc)[:300]


_INSTANCE = re.compile(r"^i-[a-z0-9]{1,64}\Z")


def instance_of(provider_id: object) -> str:
    """The ECS instance id in a Node's ``spec.providerID``: ``<region>.<instance id>``, with or without the
    ``alicloud://`` scheme, as the Alibaba Cloud cloud-controller-manager writes and parses it
    (kubernetes/cloud-provider-alibaba-cloud ``NodeFromProviderID``). "" for any other form."""
    text = str(provider_id or "")[:256]
    if text.startswith("alicloud://"):
        text = text[len("alicloud://"):]
    parts = text.split(".")
    return parts[1] if len(parts) == 2 and _INSTANCE.match(parts[1]) else ""


def _ready(conditions: object) -> Optional[bool]:
    """The Ready condition as k8s.io/api core/v1 NodeCondition has it: status "True", "False" or "Unknown"
    (the node controller sets Unknown when the kubelet stops posting)."""
    if not isinstance(conditions, list):
        return None
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c.get("status") == "True"
    return None


def _kept(items: object, prefixes: Tuple[str, ...], texts: bool = True) -> Dict[str, str]:
    # Labels and annotations: text values only, as the API serves them; one of another type reads as absent (a
    # GPU name label that is an object would raise out of the decide step and fail every node of the event).
    # Allocatable (texts False): a snapshot's may give a count as a number, which mig_allocatable reads.
    return {k: v for k, v in as_object(items).items()
            if isinstance(k, str) and k.startswith(prefixes) and (isinstance(v, str) or not texts)}


def allocatable_count(value: object) -> Optional[int]:
    """An allocatable count as the API server writes one (a whole quantity) or a snapshot may give it (a whole
    number), read as a pod's ask is (``whole_quantity``: quantity.go's rules); None for anything else: not a
    negative count, nor another script's digit at its value, as ``int`` reads them. The snapshot check
    (``functions.cloud.cluster``) takes what this reads."""
    return whole_quantity(value)


def _cordoned(value: object) -> bool:
    """``spec.unschedulable``: the API serves a boolean, left out when false. A value of another type (a string,
    0, a list: a mangled Node) cannot be told cordoned or not, and is the one exception to the reader rule's
    "reads as absent": it reads as cordoned by someone else. The flag decides whether the rollout records a
    cordon as its own, and it lifts only its own; read as not cordoned, such a node's cordon, whoever set it,
    would be recorded as ours and lifted at the end. Read as cordoned, the worst is a node left cordoned with an
    event that says so, and one node fewer in the pool's budget."""
    return value is not None and value is not False


@dataclass(frozen=True)
class KubeNode:
    """What the Kubernetes API says about one node (or the snapshot's ``kube_nodes`` entry): only the
    labels, annotations and resources the function reads (:data:`KEPT_LABELS` ...), the cordon, the taints
    (``key:effect``) and the ``resourceVersion`` a compare-and-swap write carries."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    allocatable: Mapping[str, str] = field(default_factory=dict)
    taints: Tuple[str, ...] = ()
    resource_version: str = ""
    # The kubelet's Ready condition: False when it says False or Unknown (a node the hook must count as
    # unavailable), None when the object carries no conditions (a snapshot, a node not yet reporting).
    ready: Optional[bool] = None
    instance_id: str = ""  # the ECS instance behind the node, from spec.providerID ("" when it has none)
    # status or status.allocatable of another shape than an object: the resources cannot be told (read as
    # none, as the reader rule has it), so MIG off never shows done on it (capacity_shows)
    allocatable_unreadable: bool = False

    @classmethod
    def from_object(cls, obj: Mapping) -> "KubeNode":
        """From a v1 Node object as the API returns it; a part of another shape reads as absent (the reader
        rule, node_bootstrap/outside.py: one such Node of a pool ended the budget's count and the rollout's
        view of every node in an AttributeError)."""
        meta, spec, status = (as_object(as_object(obj).get(k)) for k in ("metadata", "spec", "status"))
        name = meta.get("name")
        raw_status = as_object(obj).get("status")
        unreadable = (raw_status is not None and not isinstance(raw_status, dict)) or \
            (status.get("allocatable") is not None and not isinstance(status.get("allocatable"), dict))
        return cls(name=name if isinstance(name, str) else "", labels=_kept(meta.get("labels"), KEPT_LABELS),
                   annotations=_kept(meta.get("annotations"), KEPT_ANNOTATIONS),
                   unschedulable=_cordoned(spec.get("unschedulable")),
                   allocatable=_kept(status.get("allocatable"), KEPT_RESOURCES, texts=False),
                   taints=tuple("%s:%s" % (t.get("key"), t.get("effect")) for t in objects(spec.get("taints"))),
                   resource_version=str(meta.get("resourceVersion") or ""),
                   ready=_ready(status.get("conditions")),
                   instance_id=instance_of(spec.get("providerID")), allocatable_unreadable=unreadable)

    @property
    def progress(self) -> Optional[Progress]:
        return Progress.from_annotation(self.annotations.get(PROGRESS_ANNOTATION))

    def mig_allocatable(self) -> Dict[str, int]:
        """The ``nvidia.com/mig-*`` resources the device plugin publishes (mixed strategy), by name. Each is a
        quantity, read as quantity.go reads one (``int`` would take "\u0661" as 1 and "7_0" as 70); a value no
        quantity reads is left out."""
        out = {}
        for key, value in self.allocatable.items():
            count = allocatable_count(value) if key.startswith("nvidia.com/mig-") else None
            if count is not None:
                out[key] = count
        return out


NEW, ROLLOUT, CONFLICT = "new", "rollout", "conflict"


def entry_path(node: Optional[KubeNode], startup_taint: str = "") -> Tuple[str, str]:
    """Which way a target goes, and why: :data:`CONFLICT` (mig-manager's node: never touched),
    :data:`NEW` (not a Kubernetes node yet, or just joined: partitioned directly) or :data:`ROLLOUT` (a
    running node this hook partitioned: only through the rollout). ``startup_taint``: ``key:Effect`` of
    the taint new nodes carry ("" when the pool uses none)."""
    if node is None:
        return NEW, "not a Kubernetes node yet"
    if MIG_MANAGER_LABEL in node.labels:
        return CONFLICT, ("conflict: the node carries %s=%s, NVIDIA mig-manager's; this hook never cordons, "
                          "drains or partitions it" % (MIG_MANAGER_LABEL, node.labels[MIG_MANAGER_LABEL] or '""'))
    if node.progress is not None:
        return ROLLOUT, "a running node with a rollout record (%s)" % PROGRESS_ANNOTATION
    if startup_taint and startup_taint in node.taints:
        return NEW, "a new node: it still carries the startup taint %s" % startup_taint
    state = node.labels.get(STATE_LABEL)
    if not state and not node.labels.get(APPLIED_LABEL):
        return NEW, "a new node: no %s yet" % STATE_LABEL
    if state == "pending":
        return NEW, "a new node: %s=pending (its first apply)" % STATE_LABEL
    return ROLLOUT, "a running node (%s=%s)" % (STATE_LABEL, state or "-")


def mig_on(node: Optional[KubeNode]) -> bool:
    """MIG this hook set up: its applied-layout label, or a roll to MIG off under way (never mig-manager's
    state label alone: that node is not ours to turn off)."""
    if node is None:
        return False
    progress = node.progress
    return bool(node.labels.get(APPLIED_LABEL)) or (
        progress is not None and progress.target == TARGET_OFF and progress.step in ACTIVE_STEPS)


def target_of(spec: Optional[PartitionSpec]) -> str:
    return "%s=%s" % (spec.kind, spec.value.strip()) if spec is not None else TARGET_OFF


def _gpu_candidates(gpu_model: Optional[str], node: KubeNode) -> List[GpuModel]:
    """The GPU model when known (instance type, else the node's ACK GPU label), else every catalogue GPU."""
    known = find_gpu_or_none(gpu_model) if gpu_model else None
    if known is None and node.labels.get(GPU_NAME_LABEL):
        known = find_gpu_or_none(node.labels[GPU_NAME_LABEL])
    return [known] if known is not None else list(GPUS)


def _applied_profiles(value: str, gpu: GpuModel) -> Counter:
    # The node label value is the normalized sequence with "+" written "." (label values cannot hold "+",
    # node_bootstrap/kube/nodelabels.py), or the ids form when the names do not fit 63 characters: the label
    # parser reads both, dotted variants included.
    request = parse(PartitionSpec("sequence", value), gpu)
    return Counter(p.id for p in request.profiles)


def layout_matches(spec: PartitionSpec, applied: str, gpu_model: Optional[str], node: KubeNode) -> bool:
    """Whether the applied label holds the layout the pool asks for, on some GPU model it can be."""
    for gpu in _gpu_candidates(gpu_model, node):
        try:
            wanted = Counter(i.profile.id for i in plan(spec, gpu).instances)
            if _applied_profiles(applied, gpu) == wanted:
                return True
        except MigInputError:
            continue
    return False


def work_needed(spec: Optional[PartitionSpec], node: Optional[KubeNode], gpu_model: Optional[str]) -> str:
    """Why the node needs work ("" when it is already right). ``spec`` None: the target is MIG off.
    A node Kubernetes does not know (or a snapshot without ``kube_nodes``) was never partitioned."""
    if node is None:
        return "no applied layout known (never partitioned)"
    state = node.labels.get(STATE_LABEL)
    applied = node.labels.get(APPLIED_LABEL)
    if spec is None:
        if applied:
            return "MIG is on (%s=%s); the pool asks for MIG off" % (APPLIED_LABEL, applied)
        return ""
    if not applied:
        return "no applied layout (%s %s)" % (STATE_LABEL, state or "not set")
    if not layout_matches(spec, applied, gpu_model, node):
        return "applied layout %s differs from %s" % (applied, target_of(spec))
    if state != "success":
        return "%s is %s, not success" % (STATE_LABEL, state or "not set")
    return ""


PER_GPU_TARGET = "per-gpu="

# An auto pool's per-GPU target: GPU index -> ((profile, start), ...), the whole layout of every GPU.
GpuLayouts = Mapping[int, Tuple[Tuple[str, int], ...]]


def per_gpu_target(layouts: GpuLayouts) -> str:
    """The record's target for an auto pool's per-GPU change: each GPU's profiles in index order, ``/``
    between GPUs (``per-gpu=3g.40gb-2g.20gb/7g.80gb``); "off" for a GPU left with MIG off. Equal layouts give
    equal targets, so a rerun finds a node another invocation finished."""
    return PER_GPU_TARGET + "/".join("-".join(p for p, _ in layouts[i]) or "off" for i in sorted(layouts))


def held_layouts(node: Optional[KubeNode]) -> Optional[Dict[int, Tuple[Tuple[str, int], ...]]]:
    """What the node said each GPU holds after its last per-GPU apply (None: no readable annotation)."""
    text = node.annotations.get(LAYOUTS_ANNOTATION) if node is not None else None
    if not text:
        return None
    try:
        return read_layouts(text)
    except OutsideDataError:
        return None


def layouts_needed(layouts: GpuLayouts, node: Optional[KubeNode]) -> str:
    """Why the node needs its per-GPU change ("" when every planned GPU already holds its layout and the
    last apply succeeded): the claim's check, so a node another run changed meanwhile is skipped."""
    held = held_layouts(node)
    if held is None:
        return "no per-GPU layout recorded (annotation %s)" % LAYOUTS_ANNOTATION
    # a GPU the annotation leaves out or names null (unreadable on the node) holds something unknown: never
    # taken for empty, so never for a GPU already at an empty target
    differ = [i for i in sorted(layouts)
              if held.get(i) is None or tuple(sorted(held[i] or ())) != tuple(sorted(layouts[i]))]
    if differ:
        return "GPU %s hold%s another layout" % (", ".join(map(str, differ)), "s" if len(differ) == 1 else "")
    state = node.labels.get(STATE_LABEL) if node is not None else None
    return "" if state == "success" else "%s is %s, not success" % (STATE_LABEL, state or "not set")


def _names(profiles: Counter) -> str:
    return ", ".join("%s x%d" % (p.name, n) if n > 1 else p.name
                     for p, n in sorted(profiles.items(), key=lambda pn: (-pn[0].memory_slices, pn[0].id)))


def _starts(layout: Layout) -> str:
    return ", ".join("%s at %d" % (i.profile.name, i.start) for i in layout.instances)


def _only_adds(gpu: GpuModel, applied: str, spec: PartitionSpec) -> Tuple[bool, str]:
    """Whether going from the applied layout to ``spec`` on this GPU model only adds instances, and what
    it adds (or why not).

    The node's instances are taken where the solver places the applied label on an empty GPU: where
    ``node_bootstrap`` creates them and what its label names. A node that reached that layout by keeping
    instances of an earlier one may hold them elsewhere; the node itself checks its real placements (it is
    told to destroy nothing) and refuses when they need a destroy. MigInputError: a label that does not read
    or place on this model."""
    kept = plan(PartitionSpec("sequence", applied), gpu)
    wanted = plan(spec, gpu)
    have = Counter(i.profile for i in kept.instances)
    want = Counter(i.profile for i in wanted.instances)
    gone = have - want
    if gone:
        return False, "it removes %s" % _names(gone)
    added = want - have
    if not added:
        return False, "it adds no instance"
    if complete(gpu, list(kept.instances), list(added.elements())) is None:
        return False, "%s cannot be placed beside the kept %s" % (_names(added), _starts(kept))
    return True, "adds %s beside the kept %s" % (_names(added), _starts(kept))


def change_path(spec: Optional[PartitionSpec], node: Optional[KubeNode], gpu_model: Optional[str]
                ) -> Tuple[bool, str]:
    """Which way a running node that needs work changes: ``(drain, why)``.

    ``drain`` False: the new layout keeps every instance the node holds and only adds instances, on every
    GPU model the node can be (its model when known), so it is repartitioned without cordon or drain and
    loses no capacity. Everything else is drained: MIG off, an unknown or unsettled applied layout (state
    not ``success``), a change that removes or moves an instance, and a node that refused a "destroy
    nothing" apply for this target (record step :data:`DESTROY_REQUIRED`)."""
    if spec is None:
        return True, "MIG off destroys every instance"
    if node is None:
        return True, "no applied layout known"
    progress = node.progress
    if progress is not None and progress.target == target_of(spec) and progress.step == DESTROY_REQUIRED:
        return True, "the node refused to only add instances (%s), so it is drained" % (
            progress.reason or DESTROY_REQUIRED)
    applied = node.labels.get(APPLIED_LABEL)
    state = node.labels.get(STATE_LABEL)
    if not applied:
        return True, "no applied layout known"
    if state != "success":
        return True, "%s is %s, so the node's instances are not known for sure" % (STATE_LABEL, state or "not set")
    verdicts = []
    for gpu in _gpu_candidates(gpu_model, node):
        try:
            verdicts.append((gpu,) + _only_adds(gpu, applied, spec))
        except MigInputError:
            continue
    if not verdicts:
        return True, "the applied layout %s does not read on the node's GPU" % applied
    refused = [(gpu, why) for gpu, ok, why in verdicts if not ok]
    if refused:
        gpu, why = refused[0]
        return True, "%s -> %s is not only new instances on %s: %s" % (applied, target_of(spec), gpu.name, why)
    return False, "%s -> %s only %s (%s)" % (applied, target_of(spec), verdicts[0][2],
                                          ", ".join(sorted({gpu.name for gpu, _, _ in verdicts})))


def paused(labels: Mapping[str, str]) -> bool:
    """Whether the pool label :data:`PAUSED_LABEL` stops new waves (``true``, any case)."""
    return (labels.get(PAUSED_LABEL) or "").strip().lower() == "true"


def max_unavailable(setting: str, pool_label: Optional[str], pool_size: int) -> int:
    """Nodes one wave may disrupt: the pool label (a count) wins over the setting (count or percentage
    of the pool's nodes, rounded down). At least 1, so a rollout always moves."""
    if pool_label is not None:
        text = pool_label.strip()
        if not _COUNT.match(text) or int(text) < 1:
            raise RolloutInputError("pool label %s=%r is not a count; use a whole number >= 1 (label values "
                                    "cannot hold %%; use the setting ACK_MIG_MAX_UNAVAILABLE for a percentage)"
                                    % (MAX_UNAVAILABLE_LABEL, pool_label[:20]))
        return int(text)
    text = setting.strip()
    m = _PERCENT.match(text)
    if m and 1 <= int(m.group(1)) <= 100:
        return max(1, pool_size * int(m.group(1)) // 100)
    if _COUNT.match(text) and int(text) >= 1:
        return int(text)
    raise RolloutInputError("ACK_MIG_MAX_UNAVAILABLE=%r is not accepted; use a count >= 1 (e.g. 2) or a "
                            "percentage 1%%..100%% (e.g. 25%%)" % text[:20])


@dataclass(frozen=True)
class Candidate:
    """One running node of a pool, as the planner sees it."""

    instance_id: str
    node_name: str
    kube: Optional[KubeNode]
    why: str  # work_needed(); "" when the node is right
    drain: bool = True  # change_path(): False when the node only gains instances (no cordon, no drain, no slot)
    path: str = ""  # why that path


@dataclass(frozen=True)
class Step:
    """The planner's word on one node: ``skip`` (right already), ``wave`` (disrupted now; ``resume`` is
    the step it continues from, "" for a fresh start) or ``defer`` (waits), with the reason; ``drain``:
    whether the node is (or will be) cordoned and drained."""

    action: str
    reason: str
    resume: str = ""
    drain: bool = True


def stopped_by(target: str, nodes: Iterable[Optional[KubeNode]]) -> Optional[Tuple[str, "Progress"]]:
    """The node whose record stops the pool's rollout to ``target`` (it ended ``drain-timeout`` or ``failed`` for
    that target), the first by name, with its record; None when the rollout is not stopped. What
    :func:`plan_pool` stops on, for the ``rollout stopped`` line and ``status``."""
    stops = sorted((n.name, n.progress) for n in nodes if n is not None and n.progress is not None
                   and n.progress.target == target and n.progress.step in STOP_STEPS)
    return stops[0] if stops else None


def plan_pool(pool: str, target: str, candidates: Iterable[Candidate], limit: int, *, horizon_s: float,
              me: str = "", now: float = 0.0, bystanders: Sequence[KubeNode] = (), paused: bool = False
              ) -> Dict[str, Step]:
    """Steps for every candidate of one pool, keyed by instance id. ``pool``: how reasons name the pool;
    ``me``/``now``: this invocation and the time, to leave alone a node another live invocation holds
    (``horizon_s``: the run lease, beyond which a hold counts for nothing, :meth:`Progress.held_by_another`).
    ``bystanders``: the pool's other nodes, which this event does not act on: one in progress still takes
    a slot, one that stopped the rollout still stops it. ``paused``: the pool label :data:`PAUSED_LABEL`
    is set: nodes in progress finish, nothing new starts."""
    nodes = sorted(candidates, key=lambda c: (c.node_name, c.instance_id))
    rollout = "rollout of pool %s to %s" % (pool, target)
    steps: Dict[str, Step] = {}
    in_progress, waiting, free, stopped = [], [], [], []
    others_busy, others_stopped = [], []
    for b in sorted(bystanders, key=lambda n: n.name):
        progress = b.progress
        if progress is not None and progress.step in ACTIVE_STEPS:
            if progress.drain:  # a node changing without drain loses no capacity: it takes no slot
                others_busy.append(b.name)
        elif progress is not None and progress.target == target and progress.step in STOP_STEPS:
            others_stopped.append((b.name, progress))
    for c in nodes:
        progress = c.kube.progress if c.kube is not None else None
        if progress is not None and progress.step in ACTIVE_STEPS:
            in_progress.append((c, progress))  # whatever its target: it is disrupted, bring it back first
        elif progress is not None and progress.target == target and progress.step in STOP_STEPS:
            stopped.append((c, progress))
        elif progress is not None and progress.target == target and progress.step == DONE:
            steps[c.instance_id] = Step("skip", "%s: this node is done%s" % (
                rollout, "" if not c.why else " (%s; the node's own report decides)" % c.why))
        elif c.why:
            (waiting if c.drain else free).append(c)
        else:
            steps[c.instance_id] = Step("skip", "already in the requested layout (%s)" % target)
    drained = [(c, p) for c, p in in_progress if p.drain]
    slots = max(0, limit - len(drained) - len(others_busy))
    halted = bool(stopped or others_stopped or paused)
    takes = [] if halted else waiting[:slots]
    takes_free = [] if halted else free
    wave = sorted([c.node_name for c, _ in drained] + others_busy) + [c.node_name for c in takes]
    undrained = sorted([c.node_name for c, p in in_progress if not p.drain] + [c.node_name for c in takes_free])
    wave_text = "%s (max-unavailable %d)%s" % (", ".join(wave) or "no node", limit, "; without cordon or drain: %s"
                                               % ", ".join(undrained) if undrained else "")
    for c, progress in in_progress:
        if progress.held_by_another(me, now, horizon_s):  # it keeps its slot; its own invocation finishes it
            steps[c.instance_id] = Step("defer", "%s, wave %s: invocation %s is at step %s on this node; it is "
                                                 "left to that run (resumed from here after %d s if that run "
                                                 "ends without finishing it)"
                                        % (rollout, wave_text, progress.owner, progress.step,
                                           max(0, int(progress.expires - now))), drain=progress.drain)
            continue
        same = progress.target == target
        # A node in progress for an older target starts over on the new one's path (drained: drained again).
        resume = progress.step if same else (CORDONED if c.drain else APPLYING)
        steps[c.instance_id] = Step("wave", "%s, wave %s: resuming after step %s" % (rollout, wave_text, resume),
                                    resume=resume, drain=progress.drain if same else c.drain)
    for c in takes:
        steps[c.instance_id] = Step("wave", "%s, wave %s: %s; %scordon, drain GPU pods, apply, wait for the new "
                                            "capacity, uncordon" % (rollout, wave_text, c.why,
                                                                   "%s: " % c.path if c.path else ""))
    for c in takes_free:
        steps[c.instance_id] = Step("wave", "%s, wave %s: %s; %s: apply without cordon or drain (the node is told "
                                            "to destroy nothing), wait for the new capacity"
                                    % (rollout, wave_text, c.why, c.path), drain=False)
    if stopped or others_stopped:
        first, progress = min([(c.node_name, p) for c, p in stopped] + others_stopped, key=lambda np: np[0])
        why = ("%s stopped: node %s ended %s (%s); fix the cause, then remove its annotation %s to resume"
               % (rollout, first, progress.step, progress.reason or "no reason recorded",
                  PROGRESS_ANNOTATION))
        for c, _ in stopped:
            steps[c.instance_id] = Step("defer", why, drain=c.drain)
        for c in waiting + free:
            steps[c.instance_id] = Step("defer", why, drain=c.drain)
        return steps
    if paused:
        why = ("paused: %s is paused by the pool label %s=true; nodes in progress finish, nothing new starts; "
               "remove the label (ack-mig-hook rollout resume) to go on" % (rollout, PAUSED_LABEL))
        for c in waiting + free:
            steps[c.instance_id] = Step("defer", "%s: %s" % (why, c.why), drain=c.drain)
        return steps
    rest = waiting[slots:]
    for position, c in enumerate(rest, 1):
        steps[c.instance_id] = Step("defer", "%s: wave %s; this node waits for a later wave (%d of %d waiting): %s"
                                    % (rollout, wave_text, position, len(rest), c.why))
    return steps


def expected_capacity(profile_names: Iterable[str], gpus: Optional[int]) -> Tuple[Dict[str, int], bool]:
    """The ``nvidia.com/mig-<profile>`` resources a layout should publish: counts when the GPU count is
    known (exact), else just the names with count 1 (at least one of each)."""
    per_gpu = Counter(profile_names)
    if gpus:
        return {resource_name(name): n * gpus for name, n in per_gpu.items()}, True
    return {resource_name(name): 1 for name in per_gpu}, False


def capacity_shows(node: KubeNode, expected: Mapping[str, int], exact: bool) -> bool:
    have = node.mig_allocatable()
    if not expected:  # MIG off: no MIG resource left, on a Node whose resources read (an allocatable of another
        # shape, or a MIG value that is no count, reads as none: it cannot show them gone)
        uncounted = [k for k, v in node.allocatable.items()
                     if k.startswith("nvidia.com/mig-") and allocatable_count(v) is None]
        return not node.allocatable_unreadable and not uncounted and not any(have.values())
    if exact:
        return all(have.get(k, 0) == v for k, v in expected.items()) and \
            not any(n for k, n in have.items() if k not in expected)
    return all(have.get(k, 0) >= 1 for k in expected)
