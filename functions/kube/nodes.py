"""The rollout's view of the Kubernetes nodes, over one of two backends with the same calls.

* ``functions.kube.client.KubeApi``: the cluster's API server (the only function-side module that talks to
  it): nodes list/get/patch, pods list by node, ``pods/eviction`` create (policy/v1), events create, the
  RBAC rules in ``deploy/rbac.yaml``.
* :class:`MemoryKube`: the snapshot's ``kube_nodes`` (and, for the demo, pods and PodDisruptionBudgets)
  held in memory, with the API server's rules for what the rollout relies on: ``resourceVersion`` and 409
  on a stale one, the eviction rules of ``registry/core/pod/storage/eviction.go`` (Pending and terminating
  pods without a budget check, the empty selector selects every pod of the namespace and a missing one none,
several budgets 500, a refusal 429
  with the ``DisruptionBudget`` cause). Dry runs and ``--inventory`` runs use it.

:class:`NodeView` is what one event sees: the nodes listed once (paged and reduced to
``functions.decision.waves.KubeNode`` as they arrive), by the pool label where that narrows the list,
and any node the listing did not show read by name. Errors are ``node_bootstrap.kube.KubeError`` (the
live client raises its subclass ``functions.kube.client.ApiError``) with the HTTP status, None for no answer.
"""

import copy
import math
import re
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from node_bootstrap.kube import KubeError

from functions.kube.client import ApiError, selectors_in
from functions.decision.waves import POOL_LABEL, KubeNode

EVENT_NAMESPACE = "default"  # Node events live in "default", as the kubelet's own do
SELECTOR_POOLS = 50  # pool ids per labelSelector (the URL stays short)


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


def _label_terms(selector: str) -> List[Callable[[Mapping[str, str]], bool]]:
    """The selector forms this package sends: ``k=v``, ``k in (a,b)`` (labels.Parse syntax)."""
    out: List[Callable[[Mapping[str, str]], bool]] = []
    for term in re.findall(r"[^,(]+(?:\([^)]*\))?", selector or ""):
        term = term.strip()
        m = re.match(r"^(\S+)\s+in\s+\((.*)\)\Z", term)
        if m:
            values = {v.strip() for v in m.group(2).split(",")}
            out.append(lambda labels, k=m.group(1), vs=values: labels.get(k) in vs)
        elif "=" in term:
            key, _, value = term.partition("=")
            out.append(lambda labels, k=key.strip(), v=value.strip().lstrip("="): k in labels and labels[k] == v)
        elif term:
            raise ValueError("selector term %r is not one MemoryKube reads" % term)
    return out


def _pdb_selects(selector: Optional[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """A budget's selector as policy/v1 applies it: a missing one selects nothing, the empty one ``{}`` every
    pod of the namespace (the PodDisruptionBudget API reference; checked on the real server by
    tests/kube_real/test_double_agrees.py for the test double)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if (op == "In" and not (present and labels[key] in values)) or \
                (op == "NotIn" and present and labels[key] in values) or \
                (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def _scaled(value: Any, total: int) -> int:
    text = str(value)
    return int(math.ceil(int(text[:-1]) * total / 100.0)) if text.endswith("%") else int(text)


class MemoryKube:
    """Nodes, pods and PDBs in memory, with the API server's rules the rollout relies on (module doc)."""

    def __init__(self, nodes: Optional[Dict[str, dict]] = None) -> None:
        self.nodes: Dict[str, dict] = {}
        self.pods: Dict[Tuple[str, str], dict] = {}
        self.pdbs: List[dict] = []
        self.events: List[dict] = []
        self.leases: Dict[Tuple[str, str], dict] = {}
        self.on_evict_refused: Optional[Callable[[str, str], None]] = None
        self.rv = 0
        for name, node in (nodes or {}).items():
            self.nodes[name] = self._stamp(copy.deepcopy(node))

    def _stamp(self, obj: dict) -> dict:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    @classmethod
    def from_snapshot(cls, kube_nodes: Mapping[str, Any]) -> "MemoryKube":
        nodes = {}
        for name, entry in kube_nodes.items():
            nodes[name] = {"metadata": {"name": name, "labels": dict(entry.get("labels") or {}),
                                        "annotations": dict(entry.get("annotations") or {})},
                           "spec": {"unschedulable": True} if entry.get("unschedulable") else {},
                           "status": {"allocatable": dict(entry.get("allocatable") or {})}}
        return cls(nodes)

    def list_nodes(self, label_selector: Optional[str] = None,
                   reduce: Callable[[dict], Any] = lambda item: item) -> List[Any]:
        terms = _label_terms(label_selector or "")
        return [reduce(copy.deepcopy(n)) for _, n in sorted(self.nodes.items())
                if all(t(n["metadata"].get("labels") or {}) for t in terms)]

    def get_node(self, name: str) -> dict:
        if name not in self.nodes:
            raise ApiError('nodes "%s" not found' % name, 404, "NotFound")
        return copy.deepcopy(self.nodes[name])

    def patch_node(self, name: str, patch: dict) -> dict:
        current = self.get_node(name)
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"].get("resourceVersion"):
            raise ApiError('Operation cannot be fulfilled on nodes "%s": the object has been modified; please '
                           "apply your changes to the latest version and try again" % name, 409, "Conflict")
        self.nodes[name] = self._stamp(_merge(current, patch))
        return copy.deepcopy(self.nodes[name])

    def add_pod(self, namespace: str, name: str, node_name: str, labels: Optional[dict] = None,
                gpus: int = 1, owner: Optional[str] = None) -> None:
        meta: Dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if owner:
            meta["ownerReferences"] = [{"kind": owner, "name": name + "-owner", "controller": True}]
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        self.pods[(namespace, name)] = {"metadata": meta, "spec": {"nodeName": node_name, "containers": [
            {"name": "main", "resources": resources}]}, "status": {"phase": "Running"}}

    def add_pdb(self, namespace: str, name: str, match_labels: dict, min_available: Any = None,
                max_unavailable: Any = None) -> None:
        spec: Dict[str, Any] = {"selector": {"matchLabels": dict(match_labels)}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        self.pdbs.append({"metadata": {"name": name, "namespace": namespace}, "spec": spec})

    def list_pods(self, node_name: str, consistent: bool = False,
                  reduce: Callable[[dict], Any] = lambda item: item) -> List[Any]:  # always current here
        """The node's pods, each reduced (None: left out), as KubeApi.list_pods reads them."""
        reduced = (reduce(copy.deepcopy(p)) for _, p in sorted(self.pods.items())
                   if p["spec"].get("nodeName") == node_name)
        return [p for p in reduced if p is not None]

    def _allows(self, pdb: dict, namespace: str) -> Tuple[int, int]:
        """(desired healthy, currently healthy), as the disruption controller counts."""
        selected = [p for (ns, _), p in self.pods.items() if ns == namespace
                    and _pdb_selects(pdb["spec"].get("selector"), p["metadata"].get("labels") or {})]
        healthy = sum(1 for p in selected if not p["metadata"].get("deletionTimestamp")
                      and p.get("status", {}).get("phase", "Running") == "Running")
        spec = pdb["spec"]
        if spec.get("maxUnavailable") is not None:
            desired = max(0, len(selected) - _scaled(spec["maxUnavailable"], len(selected)))
        else:
            desired = _scaled(spec.get("minAvailable") or 0, len(selected))
        return desired, healthy

    def evict(self, namespace: str, name: str) -> None:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise ApiError('pods "%s" not found' % name, 404, "NotFound")
        phase = pod.get("status", {}).get("phase", "Running")
        if phase == "Running" and not pod["metadata"].get("deletionTimestamp"):
            labels = pod["metadata"].get("labels") or {}
            covering = [b for b in self.pdbs if b["metadata"]["namespace"] == namespace
                        and _pdb_selects(b["spec"].get("selector"), labels)]
            if len(covering) > 1:
                raise ApiError("This pod has more than one PodDisruptionBudget, which the eviction subresource "
                               "does not support.", 500)
            if covering:
                desired, healthy = self._allows(covering[0], namespace)
                if healthy - desired < 1:
                    if self.on_evict_refused is not None:
                        self.on_evict_refused(namespace, name)
                    raise ApiError("Cannot evict pod as it would violate the pod's disruption budget.", 429,
                                   "TooManyRequests", ("DisruptionBudget",))
        del self.pods[(namespace, name)]

    def create_event(self, event: dict) -> None:
        if any(e["metadata"]["name"] == event["metadata"]["name"] for e in self.events):
            raise ApiError("events %r already exists" % event["metadata"]["name"], 409, "AlreadyExists")
        self.events.append(copy.deepcopy(event))


    def server_time(self) -> Optional[float]:
        """No server of its own to read a clock from: the caller's clock is the cluster's."""
        return None

    # Leases as kube-apiserver's generic registry stores them: create refuses a name that exists (409
    # AlreadyExists), an update carrying a resourceVersion other than the stored one is refused (409 Conflict).
    def get_lease(self, namespace: str, name: str) -> dict:
        if (namespace, name) not in self.leases:
            raise ApiError('leases.coordination.k8s.io "%s" not found' % name, 404, "NotFound")
        return copy.deepcopy(self.leases[(namespace, name)])

    def create_lease(self, namespace: str, lease: dict) -> dict:
        name = lease["metadata"]["name"]
        if (namespace, name) in self.leases:
            raise ApiError('leases.coordination.k8s.io "%s" already exists' % name, 409, "AlreadyExists")
        stored = self._stamp(copy.deepcopy(lease))
        stored["metadata"]["namespace"] = namespace
        self.leases[(namespace, name)] = stored
        return copy.deepcopy(stored)

    def replace_lease(self, namespace: str, lease: dict) -> dict:
        current = self.get_lease(namespace, lease["metadata"]["name"])
        wanted = lease["metadata"].get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise ApiError('Operation cannot be fulfilled on leases.coordination.k8s.io "%s": the object has been '
                           "modified; please apply your changes to the latest version and try again"
                           % lease["metadata"]["name"], 409, "Conflict")
        stored = self._stamp(copy.deepcopy(lease))
        self.leases[(namespace, lease["metadata"]["name"])] = stored
        return copy.deepcopy(stored)


class NodeView:
    """One event's Kubernetes nodes: listed once per pool (``alibabacloud.com/nodepool-id in (...)``,
    paged, each Node reduced to a :class:`KubeNode` as its page arrives), a node the listings did not show
    read by name (404: not a Kubernetes node yet). ``backend``: KubeApi or MemoryKube."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self._nodes: Dict[str, Optional[KubeNode]] = {}
        self._listed: Set[str] = set()
        self.by_pool: Dict[str, List[str]] = {}

    def pool_nodes(self, pool_ids: Iterable[str]) -> Dict[str, List[KubeNode]]:
        """The nodes labelled with each pool id."""
        wanted = sorted({p for p in pool_ids if p})
        missing = [p for p in wanted if p not in self._listed]
        for start in range(0, len(missing), SELECTOR_POOLS):
            chunk = missing[start:start + SELECTOR_POOLS]
            selector = ("%s=%s" % (POOL_LABEL, chunk[0]) if len(chunk) == 1 else selectors_in(POOL_LABEL, chunk))
            for node in self.backend.list_nodes(selector, reduce=KubeNode.from_object):
                self._nodes[node.name] = node
                self.by_pool.setdefault(node.labels.get(POOL_LABEL, ""), []).append(node.name)
            self._listed.update(chunk)
        return {p: [n for n in (self._nodes.get(name) for name in self.by_pool.get(p, [])) if n is not None]
                for p in wanted}

    def named(self, names: Iterable[str]) -> Dict[str, Optional[KubeNode]]:
        """Each node by name (None: Kubernetes does not know it)."""
        out: Dict[str, Optional[KubeNode]] = {}
        for name in names:
            if name not in self._nodes:
                try:
                    self._nodes[name] = KubeNode.from_object(self.backend.get_node(name))
                except KubeError as exc:
                    if exc.status != 404:
                        raise
                    self._nodes[name] = None
            out[name] = self._nodes[name]
        return out

    def known(self) -> Dict[str, KubeNode]:
        """Every node seen so far (``status`` reads these after its dry run)."""
        return {name: node for name, node in self._nodes.items() if node is not None}
