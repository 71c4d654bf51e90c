"""What the GPUs of an auto pool hold, read from what the hook applied and what Kubernetes reports.

Per node (a Node object of the API and the pods bound to it):

* the GPU model and count: ACK's labels ``aliyun.accelerator/nvidia_name`` / ``nvidia_count``;
* the layout every GPU holds: the node side writes ``aliyun.accelerator/nvidia_mig_sequence`` only when
  ``nvidia.com/mig.config.state=success`` (``node_bootstrap/kube/nodelabels.py``, docs/node.md), and it is
  never a layout some GPU lacks. The placements are the ones the node's own solver chooses for that sequence
  (``node_bootstrap.mig.solver.plan``, the one call the node uses);
* after a per-GPU apply (request version 2) the node writes what each GPU holds in the annotation
  ``ack-mig-hook/gpu-layouts`` (``{"<index>": [["1g.10gb", 0], ...]}``) and no sequence label when the GPUs
  differ: that annotation, when present, is read instead of placing the sequence;
* what is in use: the MIG resources the node's pods (bound, not finished) ask for. Kubernetes does not say
  which instance the device plugin gave a pod, so the first instances of that profile (GPU by GPU, slot by
  slot) are marked: the planner keeps them; the node checks every instance itself before it destroys one
  (docs/node.md "What apply will not touch"), so a wrong guess changes nothing that runs.

A node whose layout is being changed (state ``pending``/``rebooting``) is ``busy``: the plan leaves it. A node
with no applied layout (no state, or ``failed``) has MIG off as far as the hook knows: left alone too.
"""

from collections import Counter
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from functions.decision.layout import GpuSupply, Instance
from functions.decision.layout.matching import pod_asks
from node_bootstrap.mig.annotations import LAYOUTS_ANNOTATION, read_layouts
from node_bootstrap.mig import MigInputError
from node_bootstrap.mig.catalogue import find_gpu_or_none
from node_bootstrap.mig.labels import PartitionSpec
from node_bootstrap.mig.solver import plan as place_label
from node_bootstrap.outside import OutsideDataError

GPU_NAME_LABEL = "aliyun.accelerator/nvidia_name"  # ACK's GPU node labels (facts.md)
GPU_COUNT_LABEL = "aliyun.accelerator/nvidia_count"
STATE_LABEL = "nvidia.com/mig.config.state"  # node_bootstrap/kube/nodelabels.py
SEQUENCE_LABEL = "aliyun.accelerator/nvidia_mig_sequence"
IN_FLIGHT = ("pending", "rebooting")
FINISHED = ("Succeeded", "Failed")


def holds_gpus(pod: Mapping[str, Any]) -> bool:
    """A pod bound to its node that has not finished: its MIG instances are in use."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in FINISHED


def node_supply(node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> Tuple[List[GpuSupply], List[str]]:
    """The node's GPUs, and one line for each thing that could not be read (those GPUs are left out)."""
    meta = node.get("metadata") or {}
    name, labels = str(meta.get("name") or ""), meta.get("labels") or {}
    model = find_gpu_or_none(labels.get(GPU_NAME_LABEL)) if labels.get(GPU_NAME_LABEL) else None
    count_text = str(labels.get(GPU_COUNT_LABEL) or "")
    if model is None or not (count_text.isascii() and count_text.isdigit()) or not 0 < int(count_text) <= 16:
        return [], ["node %s: GPU model %r or count %r unknown (labels %s, %s): left out"
                    % (name, labels.get(GPU_NAME_LABEL), count_text, GPU_NAME_LABEL, GPU_COUNT_LABEL)]
    count, state, sequence = int(count_text), labels.get(STATE_LABEL), labels.get(SEQUENCE_LABEL)
    nvml_name = labels[GPU_NAME_LABEL]
    if state in IN_FLIGHT:
        return [GpuSupply(name, i, nvml_name, busy=True) for i in range(count)], []
    annotated = (meta.get("annotations") or {}).get(LAYOUTS_ANNOTATION)
    if state != "success" or not (sequence or annotated):
        return [GpuSupply(name, i, nvml_name, mig=False) for i in range(count)], []
    if annotated:
        per_gpu = _annotated(annotated, count)
        if per_gpu is None:
            return [], ["node %s: annotation %s cannot be read: left out" % (name, LAYOUTS_ANNOTATION)]
    else:
        try:
            layout = place_label(PartitionSpec("sequence", sequence), model)
        except MigInputError as exc:
            return [], ["node %s: %s=%s cannot be read on %s (%s): left out" % (name, SEQUENCE_LABEL, sequence,
                                                                              model.key, str(exc).splitlines()[0])]
        per_gpu = [[(i.profile.name, i.start) for i in layout.instances]] * count
    used = Counter()  # type: Counter
    whole = 0
    for pod in pods:
        if holds_gpus(pod) and (pod.get("spec") or {}).get("nodeName") == name:
            for profile, n in pod_asks(pod).items():
                if profile == "gpu":
                    whole += n
                else:
                    used[profile] += n
    notes = []
    gpus = []
    for index in range(count):
        instances = []
        for profile, start in per_gpu[index]:
            taken = used[profile] > 0
            if taken:
                used[profile] -= 1
            instances.append(Instance(profile, start, taken))
        gpus.append(GpuSupply(name, index, nvml_name, tuple(instances), busy=index < whole))
    for profile, left in sorted(used.items()):
        if left > 0:
            notes.append("node %s: pods use %d more %s than its GPUs hold" % (name, left, profile))
    return gpus, notes


def _annotated(text: str, count: int):
    """Per GPU index 0..count-1, the (profile, start) pairs of the layouts annotation; None when unreadable
    (the reader rule: node_bootstrap/kube/nodelabels.py read_layouts) or when a GPU is missing."""
    try:
        held = read_layouts(text)
    except OutsideDataError:
        return None
    if any(i not in held for i in range(count)):
        return None
    return [list(held[i]) for i in range(count)]


def pool_supply(nodes: Sequence[Mapping[str, Any]], pods_by_node: Mapping[str, Sequence[Mapping[str, Any]]]
                ) -> Tuple[List[GpuSupply], List[str]]:
    supply, notes = [], []  # type: List[GpuSupply], List[str]
    for node in sorted(nodes, key=lambda n: (n.get("metadata") or {}).get("name") or ""):
        name = (node.get("metadata") or {}).get("name") or ""
        gpus, lines = node_supply(node, pods_by_node.get(name, ()))
        supply.extend(gpus)
        notes.extend(lines)
    return supply, notes


def in_use_demand(pods_by_node: Mapping[str, Sequence[Mapping[str, Any]]]) -> Dict[str, int]:
    """Per profile, the instances the pool's running pods hold (for advise's demand table)."""
    total = Counter()  # type: Counter
    for pods in pods_by_node.values():
        for pod in pods:
            if holds_gpus(pod):
                total.update(pod_asks(pod))
    return dict(sorted(total.items()))
