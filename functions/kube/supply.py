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
* what is in use: which instance holds which pod, as the node reports it from kubelet's device allocations
  in the annotation ``ack-mig-hook/gpu-holders`` (node_bootstrap/commands/holdings.py; written at every
  apply and by ``report-holders`` while pods come and go). Kubernetes itself does not say which instance
  the device plugin gave a pod, so where the report does not tell, nothing is guessed: every instance a pod
  could hold counts as in use (:func:`_in_use`). The planner never destroys an instance in use, and the node
  checks kubelet's allocations again itself before it destroys one (docs/node.md).

A node whose layout is being changed (state ``pending``/``rebooting``) is ``busy``: the plan leaves it. So is
a ``failed`` node, whose GPUs are no capacity for anything (:func:`node_supply` says why). A node with no
applied layout (no state) has MIG off as far as the hook knows: never repartitioned, its GPUs whole GPUs.
"""

import re
from collections import Counter
from typing import Any, Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from functions.decision.layout import GpuSupply, Instance
from functions.decision.layout.matching import pod_asks
from node_bootstrap.mig.annotations import LAYOUTS_ANNOTATION, MAX_GPU_INDEX, MAX_START, read_layouts
from node_bootstrap.mig import MigInputError
from node_bootstrap.mig.catalogue import find_gpu_or_none
from node_bootstrap.mig.labels import PartitionSpec
from node_bootstrap.mig.solver import plan as place_label
from node_bootstrap.outside import OutsideDataError, as_object, digits, loads, objects, whole

GPU_NAME_LABEL = "aliyun.accelerator/nvidia_name"  # ACK's GPU node labels (facts.md)
GPU_COUNT_LABEL = "aliyun.accelerator/nvidia_count"
STATE_LABEL = "nvidia.com/mig.config.state"  # node_bootstrap/kube/nodelabels.py
SEQUENCE_LABEL = "aliyun.accelerator/nvidia_mig_sequence"
HOLDERS_ANNOTATION = "ack-mig-hook/gpu-holders"  # node_bootstrap/kube/nodelabels.py
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # a static pod's mirror: the UID kubelet knows it by
MAX_HOLDERS_CHARS = 64 * 1024  # the node writes at most 32 KiB (node_bootstrap/commands/holdings.py)
# A pod UID as the node writes it: kubelet's checkpoint PodUID, which the node reads up to 256 characters
# (node_bootstrap/kube/allocations.py MAX_TEXT); a static pod keeps the uid its manifest sets, UUID or not.
MAX_UID_CHARS = 256
_INDEX = re.compile(r"^[0-9]{1,2}\Z")
IN_FLIGHT = ("pending", "rebooting")
FAILED = "failed"  # node_bootstrap/commands/apply.py STATE_BY_OUTCOME
FINISHED = ("Succeeded", "Failed")


def _strings(value: Any) -> Dict[str, str]:
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(value, dict) else {}


def node_object(item: Any) -> Optional[Dict[str, Any]]:
    """A listed Node with the parts the pool's readers use (``places_of``, ``proven_members``,
    :func:`pool_supply`, ``waves.KubeNode``) in the API's own shape, whatever the answer held (the reader
    rule, node_bootstrap/outside.py): the name a string ("" otherwise), labels, annotations and allocatable
    maps of strings, taints and conditions objects of string fields, ``providerID`` a string; a part of
    another shape reads as absent, the rest of the object is kept as it came. None for an item that is no
    object (left out of the list). Without it one Node whose ``metadata`` was a list, or a taint that was a
    string, ended a tick or a pod event for every pool in an internal error."""
    if not isinstance(item, dict):
        return None
    meta, spec, status = (as_object(item.get(k)) for k in ("metadata", "spec", "status"))
    name = meta.get("name")
    fields = ("key", "value", "effect", "type", "status", "reason", "message", "timeAdded", "lastTransitionTime",
              "lastHeartbeatTime")
    out_spec = dict(spec, taints=[{k: t[k] for k in fields if isinstance(t.get(k), str)}
                                  for t in objects(spec.get("taints"))])
    if not isinstance(spec.get("providerID"), str):
        out_spec.pop("providerID", None)
    if not isinstance(spec.get("unschedulable"), bool):
        out_spec.pop("unschedulable", None)
    return dict(item, metadata=dict(meta, name=name if isinstance(name, str) else "",
                                    labels=_strings(meta.get("labels")), annotations=_strings(meta.get("annotations")),
                                    resourceVersion=str(meta.get("resourceVersion") or "")[:64]),
                spec=out_spec,
                status=dict(status, allocatable=_strings(status.get("allocatable")),
                            conditions=[{k: c[k] for k in fields if isinstance(c.get(k), str)}
                                        for c in objects(status.get("conditions"))]))


def list_pool_nodes(api: Any, selector: str) -> List[Dict[str, Any]]:
    """The Nodes ``selector`` lists, each read by :func:`node_object` (an item that is no object left out)."""
    return [n for n in (node_object(item) for item in api.list_nodes(selector)) if n is not None]


def holds_gpus(pod: Mapping[str, Any]) -> bool:
    """A pod bound to its node that has not finished: its MIG instances are in use."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in FINISHED


def _asks_on(name: str, pods: Sequence[Mapping[str, Any]]) -> Tuple[Dict[str, Dict[str, int]], int]:
    """What the pods running on node ``name`` ask: MIG asks per pod UID (or a stand-in for a pod without one),
    and the whole GPUs they hold in all."""
    live = {}  # type: Dict[str, Dict[str, int]]
    whole = 0
    for n_pod, pod in enumerate(pods):
        if holds_gpus(pod) and (pod.get("spec") or {}).get("nodeName") == name:
            asks = pod_asks(pod)
            whole += asks.pop("gpu", 0)
            if asks:
                meta_pod = pod.get("metadata") or {}
                # kubelet knows a static pod by its config hash (the mirror annotation), not the mirror's UID
                uid = str((meta_pod.get("annotations") or {}).get(MIRROR_ANNOTATION) or meta_pod.get("uid") or "") \
                    or "(no uid %d)" % n_pod
                live[uid] = asks
    return live, whole


def node_supply(node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> Tuple[List[GpuSupply], List[str]]:
    """The node's GPUs, and one line for each thing that could not be read (those GPUs are left out)."""
    meta = node.get("metadata") or {}
    name, labels = str(meta.get("name") or ""), meta.get("labels") or {}
    model = find_gpu_or_none(labels.get(GPU_NAME_LABEL)) if labels.get(GPU_NAME_LABEL) else None
    count_text = str(labels.get(GPU_COUNT_LABEL) or "")
    count = digits(count_text)  # (int of a 5,000-digit label raises ValueError: every pool would fail)
    if model is None or not count or count > 16:
        return [], ["node %s: GPU model %r or count %r unknown (labels %s, %s): left out"
                    % (name, str(labels.get(GPU_NAME_LABEL))[:80], count_text[:24], GPU_NAME_LABEL, GPU_COUNT_LABEL)]
    state, sequence = labels.get(STATE_LABEL), labels.get(SEQUENCE_LABEL)
    nvml_name = labels[GPU_NAME_LABEL]
    if state in IN_FLIGHT or state == FAILED:
        # failed: what the GPUs hold is not known for sure. The apply may have changed some before it failed
        # (MIG on, instances half made), a GPU may be off the bus (null in the layouts annotation) or refused
        # (busy, no permission). Read as MIG off they were free whole GPUs, so nvidia.com/gpu pods were
        # thought served and no new node asked for, while the device plugin may offer no such GPU there. As
        # capacity they are the unsafe side (pods wait with nothing asked for them); left out, the worst is
        # a new node asked for early, until an apply succeeds and says what the GPUs hold.
        return [GpuSupply(name, i, nvml_name, busy=True) for i in range(count)], []
    annotated = (meta.get("annotations") or {}).get(LAYOUTS_ANNOTATION)
    live, whole = _asks_on(name, pods)
    if state != "success" or not (sequence or annotated):
        # MIG off (the hook never partitioned it): a GPU a whole-GPU pod runs on is no free GPU (read as one,
        # nvidia.com/gpu pods were thought served and a repartition was planned on a GPU in use)
        return [GpuSupply(name, i, nvml_name, mig=False, busy=i < whole) for i in range(count)], []
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
    report = _holders((meta.get("annotations") or {}).get(HOLDERS_ANNOTATION))
    in_use = _in_use(per_gpu, live, report)
    notes = []
    gpus = []
    for index in range(count):
        instances = tuple(Instance(profile, start, (index, profile, start) in in_use)
                          for profile, start in per_gpu[index])
        gpus.append(GpuSupply(name, index, nvml_name, instances, busy=index < whole))
    used = Counter()  # type: Counter
    for asks in live.values():
        used.update(asks)
    held = Counter(profile for index in range(count) for profile, _ in per_gpu[index])
    for profile, n in sorted(used.items()):
        if n > held[profile]:
            notes.append("node %s: pods use %d more %s than its GPUs hold" % (name, n - held[profile], profile))
    return gpus, notes


class Holders(NamedTuple):
    """The node's holders report: the pods it covers, and per GPU index {(profile, start): holder or None}
    (a GPU the node could not read is absent)."""

    at: str
    pods: FrozenSet[str]
    gpus: Dict[int, Dict[Tuple[str, int], Optional[str]]]


def _holders(text: Any) -> Optional[Holders]:
    """The report, or None when there is none, it says the node did not know, or it cannot be read."""
    if not isinstance(text, str):
        return None
    try:  # the reader rule (node_bootstrap/outside.py): bounded, shallow, finite, fields in range
        data = loads(text, "annotation %s" % HOLDERS_ANNOTATION, MAX_HOLDERS_CHARS, max_depth=4)
        if not isinstance(data, dict) or "unknown" in data:
            return None
        pods = frozenset(_uid(u) for u in data["pods"])
        gpus = {}  # type: Dict[int, Dict[Tuple[str, int], Optional[str]]]
        for key, rows in data["gpus"].items():
            if rows is None:
                continue  # the node could not read this GPU's MIG devices: nothing said about it
            index = whole(int(key) if _INDEX.match(key) else None, "GPU index", 0, MAX_GPU_INDEX)
            gpus[index] = {(str(p), whole(s, "start", 0, MAX_START)): (_uid(h) if h is not None else None)
                           for p, s, h in rows}
        return Holders(str(data.get("at") or ""), pods, gpus)
    except (ValueError, TypeError, KeyError, AttributeError):  # OutsideDataError is a ValueError
        return None


def _uid(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_UID_CHARS:
        raise ValueError("not a pod UID")
    return value


def _in_use(per_gpu: Sequence[Sequence[Tuple[str, int]]], live: Mapping[str, Mapping[str, int]],
            report: Optional[Holders]) -> FrozenSet[Tuple[int, str, int]]:
    """(GPU index, profile, start) of every instance a live pod holds or could hold; pure.

    * reported, holder a live pod: in use;
    * reported, free (or its holder gone): in use only if a live pod the report does not cover (bound after
      the report was written) asks for that profile: kubelet may have given it that one since;
    * not reported (no report, the node did not know, a GPU or an instance it left out): in use if any live
      pod asks for that profile. So the plan is safe under every assignment the pods could have.
    """
    covered = report.pods if report is not None else frozenset()
    uncovered = set(p for uid, asks in live.items() if uid not in covered for p in asks)
    asked = set(p for asks in live.values() for p in asks)
    out = set()
    for index, pairs in enumerate(per_gpu):
        known = report.gpus.get(index) if report is not None else None
        for profile, start in pairs:
            if known is not None and (profile, start) in known:
                holder = known[(profile, start)]
                taken = (holder is not None and holder in live) or profile in uncovered
            else:
                taken = profile in asked
            if taken:
                out.add((index, profile, start))
    return frozenset(out)


def _annotated(text: str, count: int):
    """Per GPU index 0..count-1, the (profile, start) pairs of the layouts annotation; None when unreadable
    (the reader rule: node_bootstrap/mig/annotations.py read_layouts) or when a GPU is missing or was not
    readable on the node (null): its state is unknown, so nothing is planned there."""
    try:
        held = read_layouts(text)
    except OutsideDataError:
        return None
    if any(held.get(i) is None for i in range(count)):
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
