"""The node pool tags that tell ACK's cluster-autoscaler what MIG resources a new node of a pool will have,
and the diff against the tags a pool carries. Pure: no I/O (functions/pipeline/autoscaler_sync.py writes them).

Why: the autoscaler builds its template node from the instance type (cpu, memory, ``nvidia.com/gpu`` = the
GPU count) and knows nothing of MIG, so a pending pod asking for ``nvidia.com/mig-1g.10gb`` never scales a
pool out. ACK's node autoscaling FAQ documents extra resources of the template node as ECS tags on the node
pool, ``k8s.io/cluster-autoscaler/node-template/resource/<resource>: <amount>`` (singular ``resource/``);
the pool's ECS tags are ``scaling_group.tags`` of the CS API. docs/operations.md "Autoscaling MIG pools"
has the sources and what is not confirmed.

Ours: every key under ``.../node-template/resource/nvidia.com/mig-``. Every other tag belongs to someone else
and is written back exactly as it was, in its place (ModifyClusterNodePool takes the pool's whole list).
``nvidia.com/gpu`` is not written (docs/operations.md says why).

Removing: a stale key of ours is written with the value ``0``, not left out of the list. Whether
ModifyClusterNodePool replaces a pool's tag list or merges into it is not documented (docs/operations.md):
a key left out would vanish under "replace" and stay, still advertising, under "merge". A ``0`` stops it
advertising under either, and a key of ours whose value is ``0`` counts as absent, so the next diff finds
the pool in sync and nothing is written again (no loop with the ActionTrail event of our own write). A
key already at ``0`` that is not wanted is left out of the next list written (gone under "replace",
still ``0`` under "merge": either way it advertises nothing). This also never sends an empty list, which
the API cannot tell from "no change" (the cs20151215 SDK sends ``scaling_group.tags: []`` with every
scaling group change).

Limits checked before writing: at most :data:`MAX_TAGS` tags in all (an ESS scaling configuration's limit,
where the autoscaler reads them) and keys of at most :data:`MAX_KEY_LENGTH` characters (the node pool API).
ESS's own key limit, :data:`ESS_KEY_LENGTH`, is shorter than every MIG key; whether ACK applies it is not
known, so it is not checked here: a refusal from the API is reported for that pool (autoscaler_sync).
"""

import typing
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from node_bootstrap.mig import (PARTITION_LABELS, RESOURCE_PREFIX, MigInputError, find_gpu, layout_resources,
                                node_resources, spec_from_labels)
from node_bootstrap.mig.solver import Instance as SolverInstance, Layout, check_budget, try_place
from node_bootstrap.outside import digits

from functions.decision.families import capability

if TYPE_CHECKING:  # annotations only: ``plan --instance-type`` needs no pydantic
    from functions.base.model import NodePool

TEMPLATE_RESOURCE = "k8s.io/cluster-autoscaler/node-template/resource/"
OURS = TEMPLATE_RESOURCE + RESOURCE_PREFIX
MAX_TAGS = 20  # ess20220222 ModifyScalingConfiguration: Tags, at most 20
MAX_KEY_LENGTH = 128  # cs20151215 ModifyClusterNodePoolRequestScalingGroup.tags: keys up to 128 characters
ESS_KEY_LENGTH = 64  # ess20220222 scaling configuration tag keys; not checked (see the module docstring)
MAX_VALUE_LENGTH = 128  # ess20220222 tag values
RESERVED_PREFIXES = ("aliyun", "acs:")  # cs20151215: keys and values may not start with these
ZERO = "0"

MODE_AUTO, MODE_ON, MODE_OFF = "auto", "on", "off"  # ACK_MIG_AUTOSCALER_TAGS (functions/base/settings.py)



def _ascii_digits(text: str) -> bool:
    """``str.isdigit`` admits superscripts and other scripts' digits that ``int`` refuses or reads: a tag
    value is a count only in ASCII digits, and of at most 18 (the reader rule's bound: ``int`` of 5,000 digits
    raises ValueError); anything else is shown as it is."""
    return digits(text) is not None

def tag_key(resource: str) -> str:
    """The node pool tag that gives the template node ``resource``."""
    return TEMPLATE_RESOURCE + resource


def autoscaler_tags(resources: Mapping[str, int]) -> Dict[str, str]:
    """Tags for a node's resources: one per resource, the amount as text, sorted by key."""
    return {tag_key(name): str(count) for name, count in sorted(resources.items()) if count > 0}


def is_ours(key: str) -> bool:
    return key.startswith(OURS)


def advertised(tags: Mapping[str, str]) -> Dict[str, str]:
    """The keys of ours that advertise something: a ``0`` is the same as no tag."""
    return {k: v for k, v in tags.items() if is_ours(k) and v.strip() != ZERO}


class Wanted(typing.NamedTuple):
    """Our tags a pool should carry: ``tags`` None when they cannot be told (``reason`` says why)."""

    tags: Optional[Dict[str, str]]
    reason: str


def _labelled(pool: "NodePool") -> bool:
    return any(k in pool.labels for k in PARTITION_LABELS)


def pool_resources(pool: "NodePool") -> Tuple[Optional[Dict[str, int]], str]:
    """The MIG resources one new node of a labelled pool advertises, and a one-line why (or why not).

    Every instance type the pool may buy is resolved through the family table (GPU model and count): the
    autoscaler cannot know which one a scale-out gets, so a pool whose types differ advertises, for each
    resource, the least any of them gives (never more than a new node has)."""
    try:
        spec = spec_from_labels(pool.labels)
    except MigInputError as exc:
        return None, "the label cannot be read: %s" % exc
    if spec is None:
        return {}, "no partition label"
    label = "%s=%s" % (spec.kind, spec.value[:80])
    if not pool.instance_types:
        return None, "the pool lists no instance type, so the GPUs of a new node are not known"
    each: List[Dict[str, int]] = []
    for instance_type in pool.instance_types:
        cap = capability(instance_type)
        if cap.mig is not True:
            return None, cap.reason
        if not cap.gpus or not cap.gpu_model:
            return None, ("the family table does not know how many GPUs %s has, so the MIG resources of a new "
                          "node are not known" % instance_type)
        try:
            each.append(node_resources(find_gpu(cap.gpu_model), cap.gpus, spec))
        except MigInputError as exc:
            return None, "%s does not fit %s: %s" % (label, instance_type, exc)
    common = {name: min(r.get(name, 0) for r in each) for name in sorted(set().union(*each))}
    common = {name: n for name, n in common.items() if n > 0}
    types = ", ".join(pool.instance_types)
    differ = "; the instance types differ, each resource is the least of them" if len(
        {tuple(sorted(r.items())) for r in each}) > 1 else ""
    shown = ", ".join("%s=%d" % kv for kv in common.items()) or "no MIG resource"
    return common, "%s on %s: a new node advertises %s%s" % (label, types, shown, differ)


AUTO_LAYOUT_LABEL = "ack-mig-hook/layout"  # functions/decision/layout/bounds.py LAYOUT_LABEL


def pool_template(pool: "NodePool") -> Tuple[str, int]:
    """(the GPU model, the GPU count) of a new node of ``pool``, from its instance types through the family
    table: the first type whose GPUs the table knows gives the model, the fewest GPUs of those of that model
    the count; ("", 0) when none is known. The planner names a new node's layout from it, so a pool with no
    node yet still scales out (functions.decision.layout ``Bounds.model``, ``Bounds.node_gpus``)."""
    model, gpus = "", 0
    for instance_type in pool.instance_types:
        cap = capability(instance_type)
        if cap.mig is not True or not cap.gpus or not cap.gpu_model:
            continue
        if not model:
            model = cap.gpu_model
        if cap.gpu_model == model:
            gpus = min(gpus or cap.gpus, cap.gpus)
    return model, gpus  # the table's product name (find_gpu and the planner's lookup read it)


def node_layouts(new_node, gpus: int) -> List[Tuple[Tuple[str, int], ...]]:
    """A new node's GPU layouts, GPU by GPU, from the planner's answer: a per-GPU layout (every GPU gets it:
    ``Plan.new_node``) or a node shape, (layout, GPUs) groups, the first the one most GPUs get
    (``Plan.new_node_shape``). A node with fewer GPUs than the shape drops its last groups' GPUs; one with
    more gives the first layout to the rest."""
    if not new_node:
        return []
    if isinstance(new_node[0][0], str):
        return [tuple(tuple(x) for x in new_node)] * gpus
    out = [tuple(tuple(x) for x in layout) for layout, n in new_node for _ in range(int(n))]
    return (out + [out[0]] * gpus)[:gpus]


def auto_pool_resources(pool: "NodePool", new_node) -> Tuple[Optional[Dict[str, int]], str]:
    """An auto pool (``ack-mig-hook/layout=auto``): a new node's GPUs get the layouts the planner chose for the
    demand the existing GPUs cannot serve (``new_node``: see :func:`node_layouts`); () when nothing waits:
    then no MIG resource is advertised (nothing to scale out for). The tags advertise the whole node, so the
    autoscaler adds, in one round, as many copies as the waiting pods need."""
    if not new_node:
        return {}, ("auto pool: no new node is needed (nothing waits that the pool's GPUs cannot serve and a new "
                    "node's layout would): no MIG resource advertised")
    if not pool.instance_types:
        return None, "the pool lists no instance type, so the GPUs of a new node are not known"
    each: List[Dict[str, int]] = []
    shown = ""
    for instance_type in pool.instance_types:
        cap = capability(instance_type)
        if cap.mig is not True or not cap.gpus or not cap.gpu_model:
            return None, cap.reason or "the family table does not know the GPUs of %s" % instance_type
        model = find_gpu(cap.gpu_model)
        total: Dict[str, int] = {}
        layouts = node_layouts(new_node, cap.gpus)
        groups: Dict[Tuple[Tuple[str, int], ...], int] = {}
        for layout in layouts:
            groups[layout] = groups.get(layout, 0) + 1
        shown = shown or " + ".join("%dx %s" % (n, "-".join(name for name, _ in layout))
                                    for layout, n in groups.items())
        for layout, n in groups.items():
            profiles = [model.profile_by_name(name) for name, _ in layout]
            # the profile names alone are not enough: 7x 1g.10gb fit an A100 80GB's GPU, an A100 40GB's holds 4
            if any(p is None for p in profiles) or try_place(model, profiles) is None:
                why = "" if any(p is None for p in profiles) else ": %s" % (
                    check_budget(model, profiles) or "no placement holds them together")
                return None, "the layout %s does not fit %s (%s)%s" % ("-".join(n for n, _ in layout), instance_type,
                                                                       model.key, why)
            solved = Layout(model, tuple(SolverInstance(p, start) for p, (_, start) in zip(profiles, layout)))
            for name, k in layout_resources(solved, n).items():
                total[name] = total.get(name, 0) + k
        each.append(total)
    common = {name: min(r.get(name, 0) for r in each) for name in sorted(set().union(*each))}
    common = {name: n for name, n in common.items() if n > 0}
    return common, "auto pool: a new node's GPUs would get %s for the demand the pool cannot serve: %s" % (
        shown, ", ".join("%s=%d" % kv for kv in common.items()))


def wanted(pool: "NodePool", mode: str, new_node: Optional[Tuple[Tuple[str, int], ...]] = None) -> Optional[Wanted]:
    """Our tags ``pool`` should carry under ``mode``; None when the pool is none of ours (no label, none of
    our tags) or the mode is off. ``new_node``: an auto pool's planned new-node layout (None: not planned)."""
    if mode == MODE_OFF:
        return None
    if AUTO_LAYOUT_LABEL in pool.labels and new_node is None:
        return None  # an auto pool's tags follow its plan: only the auto pool step (which plans) writes them
    if new_node is not None and pool.labels.get(AUTO_LAYOUT_LABEL):
        if mode == MODE_AUTO and not pool.auto_scaling:
            return Wanted({}, "auto scaling is off (ACK_MIG_AUTOSCALER_TAGS=auto tags only pools with auto scaling)")
        resources, why = auto_pool_resources(pool, new_node)
        return Wanted(autoscaler_tags(resources) if resources is not None else None, why)
    if not _labelled(pool):  # our tags go; ones already at 0 advertise nothing: none of ours left
        return Wanted({}, "no partition label: our tags go") if advertised(pool.tags) else None
    if mode == MODE_AUTO and not pool.auto_scaling:
        return Wanted({}, "auto scaling is off (ACK_MIG_AUTOSCALER_TAGS=auto tags only pools with auto scaling)")
    resources, why = pool_resources(pool)
    if resources is None:
        return Wanted(None, why)
    return Wanted(autoscaler_tags(resources), why)


class TagDiff(typing.NamedTuple):
    set: Dict[str, str]  # keys of ours to add or change, with their value
    remove: List[str]  # keys of ours that stop advertising (written as 0: see the module docstring)
    write: List[Tuple[str, str]]  # the pool's whole tag list after the change

    @property
    def in_sync(self) -> bool:
        return not self.set and not self.remove


def diff(current: Mapping[str, str], want: Mapping[str, str]) -> TagDiff:
    """What turns a pool's tags ``current`` into ones whose keys of ours are exactly ``want``: every other
    tag kept, in its place and with its value."""
    have = advertised(current)
    to_set = {k: v for k, v in want.items() if current.get(k) != v}
    remove = sorted(k for k in have if k not in want)
    ours = dict(want, **{k: ZERO for k in remove})  # a stale key is zeroed, never just left out
    write = [(k, v) for k, v in current.items() if not is_ours(k)] + sorted(ours.items())
    return TagDiff(to_set, remove, write)


def limits_problem(write: List[Tuple[str, str]]) -> Optional[str]:
    """Why a tag list cannot be written (the limits known for certain), or None."""
    ours = [(k, v) for k, v in write if is_ours(k)]
    if len(write) > MAX_TAGS:
        return ("the pool would carry %d tags (%d of its own and %d MIG resources); ESS takes at most %d: remove "
                "%d of the pool's other tags, or use a layout with fewer profiles"
                % (len(write), len(write) - len(ours), len(ours), MAX_TAGS, len(write) - MAX_TAGS))
    for key, value in ours:
        if len(key) > MAX_KEY_LENGTH or len(value) > MAX_VALUE_LENGTH:
            return "tag %s is %d characters long; node pool tag keys take at most %d" % (
                key[:60] + "...", len(key), MAX_KEY_LENGTH)
        if key.lower().startswith(RESERVED_PREFIXES):
            return "tag %s starts with a reserved prefix" % key[:60]
    return None


class PoolTags(typing.NamedTuple):
    """One pool's tags, decided: in sync, to write (``write``), or why not (``reason``)."""

    nodepool_id: str
    name: Optional[str]
    in_sync: bool
    set: Dict[str, str]
    remove: List[str]
    write: Optional[List[Tuple[str, str]]]  # the whole list to send; None: nothing to write, or it cannot be
    reason: str

    def to_json(self, written: bool = False, reason: Optional[str] = None) -> Dict[str, Any]:
        return {"nodepool_id": self.nodepool_id, "name": self.name, "in_sync": self.in_sync, "set": dict(self.set),
                "remove": list(self.remove), "written": written, "reason": self.reason if reason is None else reason}


def plan_pool(pool: "NodePool", mode: str, new_node: Optional[Tuple[Tuple[str, int], ...]] = None
              ) -> Optional[PoolTags]:
    """The tags decision for one pool under ``mode``; None for a pool that is none of ours. ``new_node``: for
    an auto pool, the planner's new-node layout (see :func:`auto_pool_resources`)."""
    want = wanted(pool, mode, new_node)
    if want is None:
        return None

    def out(in_sync: bool, d: Optional[TagDiff], write: Optional[List[Tuple[str, str]]], reason: str) -> PoolTags:
        return PoolTags(pool.nodepool_id, pool.name, in_sync, d.set if d else {}, d.remove if d else [], write, reason)

    if want.tags is None:
        return out(False, None, None, "no autoscaler tags can be computed: %s; the pool's tags are left as they are"
                   % want.reason)
    d = diff(pool.tags, want.tags)
    if d.in_sync:
        return out(True, d, None, "%s; the tags say so" % want.reason if want.tags else
                   "%s; the pool carries none of our tags" % want.reason)
    problem = limits_problem(d.write)
    if problem is not None:
        return out(False, d, None, "the autoscaler tags cannot be written: %s" % problem)
    zero = "; %s written as 0 (stops advertising whether the API replaces or merges the list)" % (
        ", ".join(k[len(OURS):] for k in d.remove)) if d.remove else ""
    return out(False, d, d.write, "%s; the tags differ%s" % (want.reason, zero))


def template_status(pool: "NodePool", mode: str) -> Dict[str, Any]:
    """Whether the autoscaler's template of ``pool`` advertises the layout's MIG resources (``status``)."""
    want = wanted(pool, MODE_ON)  # what the template should say, whoever writes it
    expected = None if want is None or want.tags is None else {k[len(TEMPLATE_RESOURCE):]: int(v)
                                                                 for k, v in want.tags.items()}
    shown = {k[len(TEMPLATE_RESOURCE):]: int(v) if _ascii_digits(v.strip()) else v
             for k, v in advertised(pool.tags).items()}
    managed = mode == MODE_ON or (mode == MODE_AUTO and pool.auto_scaling)
    return {"auto_scaling": pool.auto_scaling, "managed": managed and _labelled(pool),
            "advertises": bool(expected) and shown == expected, "expected": expected, "advertised": shown,
            "reason": want.reason if want is not None else "no partition label"}
