"""Cluster lookup: one interface, two implementations.

* :class:`InventoryLookup` reads a snapshot file in the CS API's own shapes, so everything up to delivery
  runs with no credentials::

      {"cluster_id": "c...",
       "nodepools": [<items of DescribeClusterNodePools body.nodepools>],
       "nodes": [<items of DescribeClusterNodes body.nodes>],
       "scaling_instances": {"<scaling group id>": ["<instance id>", ...]},
       "lifecycle_hooks": {"<lifecycle hook id>": "<scaling group id>"},
       "kube_nodes": {"<node name>": {"labels": {...}, "annotations": {...}, "unschedulable": false}}}

  ``scaling_instances`` and ``lifecycle_hooks`` are Auto Scaling's facts (functions.cloud.membership); a
  snapshot without them knows no scaling group members and no lifecycle hooks. ``kube_nodes`` is the
  Kubernetes side (``functions.kube.nodes.MemoryKube`` serves it to the rollout), checked here by
  :func:`snapshot_kube_nodes`. docs/function.md describes every key.

* ``functions.cloud.cs_lookup.CsLookup`` asks the ACK API through ``alibabacloud-cs20151215`` (imported only
  when an event needs it).

Both convert the API's snake_case maps (what the SDK's ``to_map()`` and the API return) with the same two
functions below, so a snapshot and a live answer are read identically.
"""

from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Set

from functions.base.errors import BadInventory, Refused
from functions.cloud.membership import SnapshotMembership
from functions.base.model import Node, NodePool, Taint
from node_bootstrap.outside import OutsideDataError, json_type, loads

# A snapshot's "kubernetes" part is what `kubectl get -o json` prints, which nests like an API answer
# (node_bootstrap/kube/client.py).
MAX_INVENTORY_DEPTH = 64


class ClusterLookup(Protocol):
    def nodepools(self, cluster_id: str) -> List[NodePool]:
        ...

    def nodes(self, cluster_id: str, nodepool_id: Optional[str] = None,
              instance_ids: Sequence[str] = ()) -> List[Node]:
        ...


def pool_refusal(pool_id: str, exc: Refused) -> str:
    """The one line naming a pool whose node list ACK refused for good (``exc``: DescribeClusterNodes with the
    pool's id answered with a refusal no retry changes: a 404 or 400 about that pool, a pool deleted while the
    cluster still lists it). Every reader of one pool's nodes that fails that pool alone (an auto tick, the
    labelled pools' targets, doctor) says it in these words, so one alert or search finds them all."""
    return "pool %s: ACK refused the list of its nodes (%s: %s)" % (
        pool_id, exc.call, " ".join(x for x in (exc.status, exc.code) if x))


def pool_nodes(lookup: ClusterLookup, cluster_id: str, pool_id: str, refused: Dict[str, str]) -> List[Node]:
    """The nodes ACK lists in the pool; none, and the pool's :func:`pool_refusal` line put in ``refused``
    (pool id -> line), when ACK refuses that list for good. One pool ACK will not list fails alone: the
    refusal is about that pool's id, and ending the event there would leave every other pool undecided at
    every invocation, for as long as ACK keeps the pool in the cluster's list. A transient failure
    (RetryLater: throttling, 5xx, no answer) is raised as it is: the whole event is retried."""
    try:
        return lookup.nodes(cluster_id, nodepool_id=pool_id)
    except Refused as exc:
        refused[pool_id] = pool_refusal(pool_id, exc)
        return []


def _text(value: Any) -> Optional[str]:
    if value is None or value == "":
        return None
    return str(value)


def _dict(item: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = item.get(key)
    return value if isinstance(value, dict) else {}


# What a snapshot's items hold where they hold it, as the ACK API answers them (cs20151215's models: objects
# and strings). The API's own answers are read leniently (a part of the wrong type reads as absent); a file a
# person wrote is held to the form, or a typo would silently drop a pool or a node, or turn a label's number
# into a profile id.
_POOL_PARTS = {"nodepool_info": dict, "kubernetes_config": dict, "scaling_group": dict, "auto_scaling": dict}
SNAPSHOT_SHAPES = {
    "nodepools": dict(_POOL_PARTS, **{"nodepool_info.nodepool_id": str, "nodepool_info.name": str,
                                      "scaling_group.scaling_group_id": str}),
    "nodes": {k: str for k in ("instance_id", "node_name", "instance_type", "nodepool_id", "state", "node_status")},
}


def _wrong_shape(item: Mapping[str, Any], shape: Mapping[str, type]) -> str:
    """The first part of ``item`` that is there but of another type than ``shape`` says, as "part: expected
    ..., got ..."; a label or tag value that is not a string likewise; "" when all fit."""
    for path, kind in shape.items():
        value: Any = item
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, kind):
            return "%s: expected %s, got %s" % (path, json_type(kind()), json_type(value))  # kind(): its empty value
    for outer, key in (("kubernetes_config", "labels"), ("kubernetes_config", "taints"), ("scaling_group", "tags")):
        listed = (item.get(outer) or {}).get(key) if isinstance(item.get(outer), dict) else None
        for n, tag in enumerate(listed if isinstance(listed, list) else []):
            value = tag.get("value") if isinstance(tag, dict) else None
            if value is not None and not isinstance(value, str):
                return "%s.%s[%d].value: expected text, got %s" % (outer, key, n, json_type(value))
    return ""


def nodepool_from_api(item: Mapping[str, Any]) -> NodePool:
    """One item of DescribeClusterNodePools ``body.nodepools`` -> NodePool. KeyError/ValueError if unusable."""
    info = _dict(item, "nodepool_info")
    kube = _dict(item, "kubernetes_config")
    group = _dict(item, "scaling_group")
    pool_id = _text(info.get("nodepool_id")) or _text(item.get("nodepool_id"))
    if not pool_id:
        raise KeyError("nodepool_info.nodepool_id")
    labels: Dict[str, str] = {}
    for key in ("labels", "taints"):
        if not isinstance(kube.get(key) or [], list):
            raise ValueError("kubernetes_config.%s must be a list of {\"key\": ..., \"value\": ...}" % key)
    for tag in kube.get("labels") or []:
        if not isinstance(tag, dict) or not isinstance(tag.get("key"), str):
            raise ValueError("kubernetes_config.labels items must be {\"key\": ..., \"value\": ...}")
        labels[tag["key"]] = "" if tag.get("value") is None else str(tag["value"])
    taints = [Taint(key=str(t.get("key")), value=_text(t.get("value")), effect=_text(t.get("effect")))
              for t in kube.get("taints") or [] if isinstance(t, dict) and t.get("key")]
    types = group.get("instance_types") or []
    if not isinstance(types, list):
        raise ValueError("scaling_group.instance_types must be a list")
    return NodePool(nodepool_id=pool_id, name=_text(info.get("name")), labels=labels, taints=taints,
                    instance_types=[str(t) for t in types], scaling_group_id=_text(group.get("scaling_group_id")),
                    auto_scaling=_dict(item, "auto_scaling").get("enable") is True, tags=_tags(group))


def _tags(group: Mapping[str, Any]) -> Dict[str, str]:
    """``scaling_group.tags`` ([{"key", "value"}], cs20151215 ``Tag``) as a dict in the API's order."""
    tags: Dict[str, str] = {}
    if not isinstance(group.get("tags") or [], list):
        raise ValueError("scaling_group.tags must be a list of {\"key\": ..., \"value\": ...}")
    for tag in group.get("tags") or []:
        if not isinstance(tag, dict) or not isinstance(tag.get("key"), str):
            raise ValueError("scaling_group.tags items must be {\"key\": ..., \"value\": ...}")
        tags[tag["key"]] = "" if tag.get("value") is None else str(tag["value"])
    return tags


def node_from_api(item: Mapping[str, Any]) -> Node:
    """One item of DescribeClusterNodes ``body.nodes`` -> Node."""
    instance_id = _text(item.get("instance_id"))
    if not instance_id:
        raise KeyError("instance_id")
    ips = item.get("ip_address")
    ip = ips[0] if isinstance(ips, list) and ips else ips if isinstance(ips, str) and ips else None
    return Node(instance_id=instance_id, node_name=_text(item.get("node_name")),
                instance_type=_text(item.get("instance_type")), nodepool_id=_text(item.get("nodepool_id")),
                state=_text(item.get("state")), node_status=_text(item.get("node_status")),
                ip_address=_text(ip))


def snapshot_kube_nodes(data: Any, where: str = "inventory") -> Optional[Dict[str, dict]]:
    """Check the snapshot's ``kube_nodes``: ``{"<node name>": {"labels": {...}, "annotations": {...},
    "unschedulable": false}}`` (``allocatable`` optional). None when the snapshot has none."""
    from functions.decision.waves import KEPT_RESOURCES, allocatable_count  # what the capacity readers read

    if data is None:
        return None
    form = '{"<node name>": {"labels": {...}, "annotations": {...}, "unschedulable": false}}'
    if not isinstance(data, dict):
        raise BadInventory("%s: kube_nodes must be an object %s" % (where, form))
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise BadInventory("%s: kube_nodes[%r] must be an object %s" % (where, name[:60], form))
        for key in ("labels", "annotations", "allocatable"):
            value = entry.get(key, {})
            # labels and annotations are text, as the API serves them (a number there passed and then read as
            # absent: a node with no GPU count or state, nothing said); a GPU resource's count is what the
            # capacity readers read as one (a whole number or its digits), or it would read as absent too; the
            # other resources, which nothing reads ("memory": "512Gi"), text or a whole number
            counts = key == "allocatable"
            if not isinstance(value, dict) or not all(
                    isinstance(k, str) and (
                        allocatable_count(v) is not None if counts and k.startswith(KEPT_RESOURCES) else
                        isinstance(v, str) or counts and type(v) is int and v >= 0)
                    for k, v in value.items()):
                raise BadInventory("%s: kube_nodes[%r].%s must map text to %s" % (
                    where, name[:60], key, "text or a whole number, and a GPU resource (%s) to a whole number or "
                    "its digits" % ", ".join(p + "*" for p in KEPT_RESOURCES) if counts else "text"))
        if not isinstance(entry.get("unschedulable", False), bool):
            raise BadInventory("%s: kube_nodes[%r].unschedulable must be true or false" % (where, name[:60]))
    return data


MAX_SNAPSHOT_BYTES = 512 << 20  # 10,000 Nodes as kubectl prints them are ~170 MB; more is not a snapshot
SNAPSHOT_FORM = '{"cluster_id", "nodepools", "nodes"}'


def read_snapshot(path: str, form: str = SNAPSHOT_FORM) -> Any:
    """The JSON of an ``--inventory`` file, every way it can be unreadable a BadInventory (exit 2) in one line:
    larger than MAX_SNAPSHOT_BYTES (refused before it is read whole), not UTF-8, not JSON, or nested deeper
    than the JSON decoder recurses (its C scanner stops with RecursionError at Python's recursion limit,
    before any Python frame is used: caught here, so no depth reaches the code that reads the objects)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError as exc:
        raise BadInventory("cannot read inventory %s: %s" % (path, exc.strerror or exc)) from None
    if len(raw) > MAX_SNAPSHOT_BYTES:
        raise BadInventory("inventory %s is larger than %d MiB; expected a snapshot %s" % (
            path, MAX_SNAPSHOT_BYTES >> 20, form))
    try:  # the reader rule (node_bootstrap/outside.py): nesting counted before parsing, finite numbers
        return loads(raw, "inventory %s" % path, MAX_SNAPSHOT_BYTES, MAX_INVENTORY_DEPTH)
    except OutsideDataError as exc:
        raise BadInventory("%s; expected %s" % (exc, form)) from None


class InventoryLookup:
    """A cluster snapshot (the ``--inventory`` file). Read once; answers like the APIs would: the ACK
    API (a ClusterLookup) and Auto Scaling (a functions.cloud.membership.Membership)."""

    def __init__(self, cluster_id: str, pools: List[NodePool], nodes: List[Node],
                 membership: Optional[SnapshotMembership] = None) -> None:
        self.cluster_id = cluster_id
        self._pools = pools
        self._nodes = nodes
        self._membership = membership or SnapshotMembership()
        # What the Kubernetes API would answer: {"<node name>": {"labels", "annotations", "unschedulable"}};
        # None when the snapshot has none (then no applied layout is known).
        self.kube_nodes: Optional[Dict[str, Any]] = None

    @classmethod
    def from_file(cls, path: str) -> "InventoryLookup":
        return cls.from_dict(read_snapshot(path), path)

    @classmethod
    def from_dict(cls, data: Any, where: str = "inventory") -> "InventoryLookup":
        if not isinstance(data, dict):
            raise BadInventory("%s must be a JSON object {\"cluster_id\", \"nodepools\", \"nodes\"}" % where)
        cluster_id = data.get("cluster_id")
        if not isinstance(cluster_id, str) or not cluster_id:
            raise BadInventory("%s: cluster_id is missing; expected {\"cluster_id\": \"c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b\", ...}" % where)
        pools, nodes = [], []
        for key, convert, out in (("nodepools", nodepool_from_api, pools), ("nodes", node_from_api, nodes)):
            items = data.get(key, [])
            if not isinstance(items, list):
                raise BadInventory("%s: %s must be a list of API items" % (where, key))
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    raise BadInventory("%s: %s[%d] must be an object" % (where, key, index))
                wrong = _wrong_shape(item, SNAPSHOT_SHAPES[key])
                if wrong:
                    raise BadInventory("%s: %s[%d].%s" % (where, key, index, wrong))
                try:
                    out.append(convert(item))
                except KeyError as exc:
                    raise BadInventory("%s: %s[%d] has no %s" % (where, key, index, exc.args[0])) from None
                except ValueError as exc:
                    raise BadInventory("%s: %s[%d]: %s" % (where, key, index, str(exc).splitlines()[0])) \
                        from None
        lookup = cls(cluster_id, pools, nodes, SnapshotMembership.from_dict(data, where))
        lookup.kube_nodes = snapshot_kube_nodes(data.get("kube_nodes"), where)
        return lookup

    def nodepools(self, cluster_id: str) -> List[NodePool]:
        return list(self._pools) if cluster_id == self.cluster_id else []

    def nodes(self, cluster_id: str, nodepool_id: Optional[str] = None,
              instance_ids: Sequence[str] = ()) -> List[Node]:
        if cluster_id != self.cluster_id:
            return []
        wanted = set(instance_ids)
        return [n for n in self._nodes
                if (nodepool_id is None or n.nodepool_id == nodepool_id)
                and (not wanted or n.instance_id in wanted)]

    def scaling_members(self, scaling_group_id: str, instance_ids: Sequence[str]) -> Set[str]:
        return self._membership.scaling_members(scaling_group_id, instance_ids)

    def lifecycle_hook_group(self, lifecycle_hook_id: str, scaling_group_id: str) -> Optional[str]:
        return self._membership.lifecycle_hook_group(lifecycle_hook_id, scaling_group_id)
