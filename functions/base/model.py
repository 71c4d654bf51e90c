"""The function's typed vocabulary (pydantic v2): the one normalized request every event source becomes,
the cluster as the lookup sees it, one decision per instance, and the handler's result.

Shared with delivery (functions/delivery) and the demo: they read ``Request`` (lifecycle hook, dry run)
and ``Decision`` (what to do on which node, with the plan and the node's address).
"""

from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from functions.base.event_result import HandlerResult, Trigger  # noqa: F401  re-exported: the whole vocabulary is read from here


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LifecycleHook(_Model):
    """The hook an ESS lifecycle event holds instances for: delivery answers it (CompleteLifecycleAction)."""

    lifecycle_hook_id: str
    lifecycle_action_token: str
    scaling_group_id: Optional[str] = None
    lifecycle_transition: Optional[str] = None  # SCALE_OUT
    default_result: Optional[str] = None  # CONTINUE | ABANDON, what ESS does on timeout


class InvalidTarget(_Model):
    """A target the event named that failed validation (e.g. not an ECS instance id): it gets its own
    ``error`` decision while the rest of the event goes on. ``target`` is the value as shown (quoted, cut)."""

    target: str
    reason: str


class PodRef(_Model):
    """The pod a Kubernetes ``FailedScheduling`` event is about (its ``involvedObject``): only a trigger,
    the pod itself is read from the API server (functions/pipeline/pod_event.py)."""

    namespace: str
    name: str
    uid: Optional[str] = None


class Request(_Model):
    """One normalized request, whatever the source. Empty ``instance_ids`` means: every node of the pool(s)
    (``nodepool_id`` / ``scaling_group_id``), or with neither, every pool that carries a partition label,
    unless ``invalid_targets`` holds what the event named instead."""

    trigger: Trigger
    event_type: str  # the source's own type, e.g. ess:ScalingActivity:ScaleOutSuccess
    event_id: Optional[str] = None
    cluster_id: Optional[str] = None
    region: Optional[str] = None
    nodepool_id: Optional[str] = None
    scaling_group_id: Optional[str] = None
    instance_ids: List[str] = Field(default_factory=list)
    invalid_targets: List[InvalidTarget] = Field(default_factory=list)
    lifecycle: Optional[LifecycleHook] = None
    dry_run: bool = False
    # The auto pool timer (template.yml AutoPoolTimer, payload {"auto_pools": true}): re-plan every pool labelled
    # ack-mig-hook/layout=auto (functions/pipeline/auto_pool.py) and nothing else.
    auto_pools: bool = False
    # A pod the scheduler could not place (cs:k8s:PodRelatedEvent, reason FailedScheduling): the step of the
    # auto pool it could land on runs (functions/pipeline/pod_event.py) and nothing else.
    pod: Optional[PodRef] = None


# ---- the cluster as the lookup sees it (converted from the CS API's own shapes) ----


class Taint(_Model):
    key: str
    value: Optional[str] = None
    effect: Optional[str] = None


class NodePool(_Model):
    nodepool_id: str
    name: Optional[str] = None
    labels: Dict[str, str] = Field(default_factory=dict)
    taints: List[Taint] = Field(default_factory=list)
    instance_types: List[str] = Field(default_factory=list)
    scaling_group_id: Optional[str] = None
    # ``auto_scaling.enable``: the cluster-autoscaler may grow the pool (functions/decision/autoscaler_tags.py).
    auto_scaling: bool = False
    # ``scaling_group.tags``, in the API's order: the ECS tags of the pool's instances, where ACK's autoscaler
    # reads node-template resources (docs/operations.md "Autoscaling MIG pools").
    tags: Dict[str, str] = Field(default_factory=dict)


class Node(_Model):
    """An ECS instance ACK knows in the cluster. ``node_name`` is empty until it joins Kubernetes."""

    instance_id: str
    node_name: Optional[str] = None
    instance_type: Optional[str] = None
    nodepool_id: Optional[str] = None
    state: Optional[str] = None  # ACK's node state: initial, running, removing, failed...
    node_status: Optional[str] = None  # Kubernetes readiness: Ready, NotReady, Unknown
    ip_address: Optional[str] = None  # first private IP


# ---- decisions ----

ACTION_PARTITION = "partition"
ACTION_SKIP = "skip"
ACTION_ERROR = "error"
ACTION_DEFER = "defer"  # a running node that waits for a later wave of its pool's rollout (functions/rollout/run.py)
Action = Literal["partition", "skip", "error", "defer"]


class PartitionLabel(_Model):
    kind: Literal["size", "sequence"]
    value: str


class PlannedInstance(_Model):
    profile: str
    id: int
    start: int
    size: int


class Plan(_Model):
    """The layout every GPU of the node gets (all GPUs of an instance type are the same model)."""

    gpu: str  # catalogue product name, e.g. NVIDIA A100-SXM4-40GB
    gpus: Optional[int] = None  # GPUs per instance when the family table knows it
    partition: PartitionLabel
    sequence: str  # normalized: profile names in start order, the node label value
    instances: List[PlannedInstance]


class Decision(_Model):
    """What happens to one instance, and why. ``plan`` is None for ``partition`` when the GPU model is not
    known up front (the node's NVML check decides); ``partition`` is always set for ``partition``."""

    instance_id: str
    node_name: Optional[str] = None
    nodepool_id: Optional[str] = None
    action: Action
    reason: str
    plan: Optional[Plan] = None
    partition: Optional[PartitionLabel] = None
    instance_type: Optional[str] = None
    ip_address: Optional[str] = None
    # ``partition`` that turns MIG off (``node_bootstrap disable``): a pool whose label was removed, with
    # ACK_MIG_ON_LABEL_REMOVAL=disable (functions/rollout/run.py); ``partition`` and ``plan`` are None then.
    disable: bool = False
    # A running node's path through the rollout (functions/decision/waves.py change_path): True cordoned and
    # drained first; False repartitioned without either, the node told to destroy nothing (the new layout
    # keeps its instances and only adds some). None for every other decision.
    drain: Optional[bool] = None
    # An auto pool's per-GPU targets for this node (functions/pipeline/auto_pool.py): the node request's
    # version 2 partition, {"kind": "per-gpu", "gpus": [{"index", "layout": [{"profile", "start"}]}]}; ``partition``
    # and ``plan`` are None then. Nothing in use is destroyed on that path, so it needs no drain.
    gpu_layouts: Optional[Dict[str, Any]] = None

    def to_json(self) -> Dict[str, Any]:
        return self.model_dump(mode="json")
