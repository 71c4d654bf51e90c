"""The function's view of the Kubernetes API for rollouts and ``status``: one interface, two backends.

* :class:`LiveKube`: the cluster's API server with the cluster credential the function already uses for
  the startup taint (a short-lived kubeconfig from ACK's ``DescribeClusterUserKubeconfig``, private
  endpoint, TLS verified against the cluster CA; see ``functions/delivery/taint.py``), through the
  project's stdlib client ``node_bootstrap.kube``. Calls: nodes list/get/patch, pods list by node,
  ``pods/eviction`` create (policy/v1), events create. These are exactly the RBAC rules in
  ``deploy/rbac.yaml``.
* :class:`MemoryKube`: the snapshot's ``kube_nodes`` (and, for the demo, pods and PodDisruptionBudgets)
  held in memory, with the same eviction rule as the API server. Dry runs and ``--inventory`` runs use it.

Errors are ``node_bootstrap.kube.KubeError`` with the HTTP status (None: no answer) for both.
"""

import copy
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple
from urllib.parse import quote

from node_bootstrap.kube.client import KubeClient, KubeError

from functions.errors import BadInventory
from functions.rollout.waves import KubeNode

EVENT_NAMESPACE = "default"  # Node events live in "default", as the kubelet's own do


class KubeNodes(Protocol):
    def list_nodes(self) -> List[dict]:
        ...

    def get_node(self, name: str) -> dict:
        ...

    def patch_node(self, name: str, patch: dict) -> dict:
        ...

    def list_pods(self, node_name: str) -> List[dict]:
        ...

    def evict(self, namespace: str, name: str) -> None:
        ...

    def create_event(self, event: dict) -> None:
        ...


class LiveKube:
    """The API server. ``client`` is a KubeClient or a provider of one (connected on first use)."""

    def __init__(self, client: Any) -> None:
        self._client = client if isinstance(client, KubeClient) else None
        self._provider: Optional[Callable[[], KubeClient]] = None if self._client else client

    @classmethod
    def from_settings(cls, settings: Any, cluster_id: str) -> "LiveKube":
        from functions.delivery.taint import client_from_kubeconfig_text, cs_kubeconfig
        from functions.settings import longest_run_s

        # One client serves the whole invocation (a drain alone may take ACK_MIG_DRAIN_TIMEOUT_S): the
        # credential must outlive the longest run, not ACK's 15-minute default.
        minutes = min(4320, max(15, -(-longest_run_s(settings) // 60) + 5))
        fetch = cs_kubeconfig(settings, cluster_id, minutes)
        return cls(lambda: client_from_kubeconfig_text(fetch()))

    def client(self) -> KubeClient:
        if self._client is None:
            assert self._provider is not None
            self._client = self._provider()
        return self._client

    def list_nodes(self) -> List[dict]:
        items: List[dict] = []
        query: Dict[str, str] = {"limit": "500"}
        while True:  # the list API pages with limit/continue
            answer = self.client().request("GET", "/api/v1/nodes", query=query) or {}
            items.extend(answer.get("items") or [])
            token = (answer.get("metadata") or {}).get("continue")
            if not token:
                return items
            query = {"limit": "500", "continue": token}

    def get_node(self, name: str) -> dict:
        return self.client().get_node(name)

    def patch_node(self, name: str, patch: dict) -> dict:
        return self.client().merge_patch_node(name, patch)

    def list_pods(self, node_name: str) -> List[dict]:
        return self.client().list_pods(node_name=node_name)

    def evict(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}}
        self.client().request("POST", "/api/v1/namespaces/%s/pods/%s/eviction"
                              % (quote(namespace, safe=""), quote(name, safe="")), body)

    def create_event(self, event: dict) -> None:
        namespace = event.get("metadata", {}).get("namespace") or EVENT_NAMESPACE
        self.client().request("POST", "/api/v1/namespaces/%s/events" % quote(namespace, safe=""), event)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (None deletes)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    wanted = selector.get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


class MemoryKube:
    """Nodes, pods and PDBs in memory. Eviction follows the API server's rule: a pod covered by a PDB is
    evicted only while the PDB allows a disruption (healthy matching pods above ``minAvailable``), else
    429; a pod covered by more than one PDB is refused with 500 (policy/v1 eviction semantics)."""

    def __init__(self, nodes: Optional[Dict[str, dict]] = None) -> None:
        self.nodes: Dict[str, dict] = nodes or {}
        self.pods: Dict[Tuple[str, str], dict] = {}
        self.pdbs: List[dict] = []
        self.events: List[dict] = []
        self.on_evict_refused: Optional[Callable[[str, str], None]] = None

    @classmethod
    def from_snapshot(cls, kube_nodes: Mapping[str, Any]) -> "MemoryKube":
        nodes = {}
        for name, entry in kube_nodes.items():
            nodes[name] = {"metadata": {"name": name, "labels": dict(entry.get("labels") or {}),
                                        "annotations": dict(entry.get("annotations") or {})},
                           "spec": {"unschedulable": True} if entry.get("unschedulable") else {},
                           "status": {"allocatable": dict(entry.get("allocatable") or {})}}
        return cls(nodes)

    def list_nodes(self) -> List[dict]:
        return [copy.deepcopy(n) for _, n in sorted(self.nodes.items())]

    def get_node(self, name: str) -> dict:
        if name not in self.nodes:
            raise KubeError('nodes "%s" not found' % name, 404)
        return copy.deepcopy(self.nodes[name])

    def patch_node(self, name: str, patch: dict) -> dict:
        self.nodes[name] = _merge(self.get_node(name), patch)
        return copy.deepcopy(self.nodes[name])

    def add_pod(self, namespace: str, name: str, node_name: str, labels: Optional[dict] = None,
                gpus: int = 1, owner: Optional[str] = None) -> None:
        meta: Dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if owner:
            meta["ownerReferences"] = [{"kind": owner, "name": name + "-owner", "controller": True}]
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        self.pods[(namespace, name)] = {"metadata": meta, "spec": {"nodeName": node_name, "containers": [
            {"name": "main", "resources": resources}]}, "status": {"phase": "Running"}}

    def add_pdb(self, namespace: str, name: str, match_labels: dict, min_available: int) -> None:
        self.pdbs.append({"metadata": {"name": name, "namespace": namespace},
                          "spec": {"selector": {"matchLabels": dict(match_labels)}, "minAvailable": min_available}})

    def list_pods(self, node_name: str) -> List[dict]:
        return [copy.deepcopy(p) for _, p in sorted(self.pods.items()) if p["spec"].get("nodeName") == node_name]

    def evict(self, namespace: str, name: str) -> None:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise KubeError('pods "%s" not found' % name, 404)
        labels = pod["metadata"].get("labels") or {}
        covering = [b for b in self.pdbs if b["metadata"]["namespace"] == namespace
                    and _selector_matches(b["spec"]["selector"], labels)]
        if len(covering) > 1:
            raise KubeError("This pod has more than one PodDisruptionBudget, which the eviction subresource "
                            "does not support.", 500)
        if covering:
            pdb = covering[0]
            healthy = sum(1 for (ns, _), p in self.pods.items() if ns == namespace
                          and _selector_matches(pdb["spec"]["selector"], p["metadata"].get("labels") or {}))
            if healthy - int(pdb["spec"]["minAvailable"]) < 1:
                if self.on_evict_refused is not None:
                    self.on_evict_refused(namespace, name)
                raise KubeError("Cannot evict pod as it would violate the pod's disruption budget.", 429)
        del self.pods[(namespace, name)]

    def create_event(self, event: dict) -> None:
        if any(e["metadata"]["name"] == event["metadata"]["name"] for e in self.events):
            raise KubeError("events %r already exists" % event["metadata"]["name"], 409)
        self.events.append(copy.deepcopy(event))


def snapshot_kube_nodes(data: Any, where: str = "inventory") -> Optional[Dict[str, dict]]:
    """Check the snapshot's ``kube_nodes``: ``{"<node name>": {"labels": {...}, "annotations": {...},
    "unschedulable": false}}`` (``allocatable`` optional). None when the snapshot has none."""
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
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (str, int))
                                                      for k, v in value.items()):
                raise BadInventory("%s: kube_nodes[%r].%s must map text to text" % (where, name[:60], key))
        if not isinstance(entry.get("unschedulable", False), bool):
            raise BadInventory("%s: kube_nodes[%r].unschedulable must be true or false" % (where, name[:60]))
    return data


def kube_nodes_by_name(kube: KubeNodes) -> Dict[str, KubeNode]:
    return {n.name: n for n in (KubeNode.from_object(o) for o in kube.list_nodes()) if n.name}
