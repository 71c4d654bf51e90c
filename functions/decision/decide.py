"""Per-instance decisions: partition (with the plan), skip (with the reason) or error (with the parser's
message). Pure: the cluster facts come in as arguments, nothing is looked up here.

The order of the checks is the order a person would ask: is the instance still there, which pool is it
in, does the pool ask for MIG, is the label readable, can the instance type do MIG, does the layout fit.
The label is validated with the core's own parser and solver (node_bootstrap.mig), the same code the node
runs, so what is accepted here is what the node will apply.
"""

from typing import Iterable, List, Optional

from node_bootstrap.mig import (GPUS, PARTITION_LABELS, MigInputError, PartitionSpec, find_gpu, parse, plan,
                                spec_from_labels)

from functions.decision.families import BELIEVED, Capability, capability
from functions.base.model import (ACTION_ERROR, ACTION_PARTITION, ACTION_SKIP, Decision, Node, NodePool, PartitionLabel, Plan,
                    PlannedInstance)

# ACK node states after which partitioning makes no sense.
GONE_STATES = ("removing", "deleting", "deleted", "released")


def has_partition_label(pool: NodePool) -> bool:
    return any(label in pool.labels for label in PARTITION_LABELS)


def _text(value: str) -> str:
    """Cluster text (a label value, a pool name) as it goes into a one-line reason: as it is when it is
    plain, quoted with escapes (repr) when it holds whitespace or control characters, and cut short."""
    short = value if len(value) <= 80 else value[:80] + "..."
    if short.isprintable() and not any(c.isspace() for c in short):
        return short
    return repr(short)


def _pool_name(pool: NodePool) -> str:
    return "%s (%s)" % (pool.nodepool_id, _text(pool.name)) if pool.name else pool.nodepool_id


def _capability_for(node: Optional[Node], pool: NodePool) -> Optional[Capability]:
    """From the node's instance type, else the pool's configuration (an instance not yet a node). None
    when the pool allows several types that the table judges differently: the node decides then."""
    if node is not None and node.instance_type:
        return capability(node.instance_type)
    verdicts = [capability(t) for t in pool.instance_types]
    if not verdicts:
        return None
    first = verdicts[0]
    if all((v.gpu, v.mig, v.gpu_model) == (first.gpu, first.mig, first.gpu_model) for v in verdicts):
        return first
    return None


def _syntax_error(spec: PartitionSpec) -> Optional[str]:
    """For a GPU not known up front: the label must at least read on some catalogue GPU."""
    messages = []
    for gpu in GPUS:
        try:
            parse(spec, gpu)
            return None
        except MigInputError as exc:
            messages.append(str(exc))
    if len(set(messages)) == 1:
        return messages[0]
    return "no known GPU model has all of these profiles; for example: %s" % messages[0]


def decide_instance(instance_id: str, node: Optional[Node], pool: Optional[NodePool],
                    cluster_id: str = "") -> Decision:
    base = dict(instance_id=instance_id, node_name=node.node_name if node else None,
                nodepool_id=(node.nodepool_id if node and node.nodepool_id else pool.nodepool_id if pool else None),
                instance_type=node.instance_type if node else None, ip_address=node.ip_address if node else None)

    def skip(reason: str) -> Decision:
        return Decision(action=ACTION_SKIP, reason=reason, **base)

    def error(reason: str, spec: Optional[PartitionSpec] = None) -> Decision:
        partition = PartitionLabel(kind=spec.kind, value=spec.value) if spec else None
        return Decision(action=ACTION_ERROR, reason=reason, partition=partition, **base)

    if node is not None and (node.state or "").lower() in GONE_STATES:
        return skip("instance is %s" % node.state)
    if pool is None:
        return skip("instance is in no node pool of cluster %s" % cluster_id if node is not None
                    else "instance is neither a node of cluster %s nor in a node pool the event names" % cluster_id)
    try:
        spec = spec_from_labels(pool.labels)
    except MigInputError as exc:
        return error("pool %s: %s" % (_pool_name(pool), exc))
    if spec is None:
        return skip("node pool %s has no partition label (%s)" % (_pool_name(pool), " or ".join(PARTITION_LABELS)))
    partition = PartitionLabel(kind=spec.kind, value=spec.value)

    cap = _capability_for(node, pool)
    if cap is not None and not cap.gpu:
        return skip(cap.reason)
    if cap is not None and cap.mig is False:
        return skip(cap.reason)
    if cap is not None and cap.mig and cap.gpu_model:
        try:
            layout = plan(spec, find_gpu(cap.gpu_model))
        except MigInputError as exc:
            believed = (" (the GPU model is believed from the instance family %s)" % cap.family
                        if cap.status == BELIEVED else "")
            return error("pool %s asks for %s=%s on %s GPUs%s: %s"
                         % (_pool_name(pool), spec.kind, _text(spec.value), cap.gpu_model, believed, exc), spec)
        the_plan = Plan(gpu=layout.gpu.name, gpus=cap.gpus, partition=partition, sequence=layout.sequence,
                        instances=[PlannedInstance(**i.to_dict()) for i in layout.instances])
        count = "%d x " % cap.gpus if cap.gpus else "each "
        return Decision(action=ACTION_PARTITION, plan=the_plan, partition=partition,
                        reason="pool %s asks for %s=%s: %s%s gets %s" % (_pool_name(pool), spec.kind, _text(spec.value),
                                                                        count, layout.gpu.name, layout.sequence),
                        **base)
    # The GPU model is not known up front: check what can be checked, let the node's NVML answer decide.
    problem = _syntax_error(spec)
    if problem is not None:
        return error("pool %s asks for %s=%s: %s" % (_pool_name(pool), spec.kind, _text(spec.value), problem), spec)
    why = cap.reason if cap is not None else (
        "instance type not known yet (the pool allows %s); the node's NVML check decides"
        % (", ".join(pool.instance_types) or "any type"))
    return Decision(action=ACTION_PARTITION, plan=None, partition=partition,
                    reason="pool %s asks for %s=%s; %s" % (_pool_name(pool), spec.kind, _text(spec.value), why),
                    **base)


def decide_all(targets: Iterable[tuple], cluster_id: str) -> List[Decision]:
    """``targets``: (instance_id, node or None, pool or None) in the order the event named them."""
    return [decide_instance(instance_id, node, pool, cluster_id) for instance_id, node, pool in targets]
