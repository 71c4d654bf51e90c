"""One scenario, two API servers: the project's test double (tests/support/kubeapi.py) and the real
kube-apiserver of tests/controlplane, behind the same small surface, so a scenario written once runs
against both and any difference in what the project sees is a failing test.

A world holds the cluster's objects and plays the parties the scenario does not test: the kubelets (a
terminating pod is deleted when :meth:`World.kubelets` runs), the device plugin and node labeller
(:meth:`label_node`, :meth:`set_capacity`) and, on the real server, the ReplicaSet owners whose scale the
disruption controller reads. ``client()`` is the project's own KubeApi with the hook's credential: on the
real server the user deploy/rbac.yaml binds, on the double a bearer token held to the same roles.

The double evicts gracefully here (``graceful_evictions``), as the real server does for a bound pod.
"""

import json
import time
from typing import Any, Dict, List, Optional

from functions.kube.client import ClusterCredential, KubeApi
from tests.support import kubeapi as double
from tests.support import kubeselect

MERGE_PATCH = "application/merge-patch+json"


class World:
    name = ""

    def client(self, **options: Any) -> KubeApi:
        raise NotImplementedError

    def unique(self, prefix: str) -> str:
        raise NotImplementedError

    def namespace(self) -> str:
        raise NotImplementedError


class DoubleWorld(World):
    name = "double"
    HOOK_TOKEN = "hook-token"

    def __init__(self, tmp_path: Any) -> None:
        self._cm = double.kube_api_server(tokens={self.HOOK_TOKEN: "hook"}, workdir=str(tmp_path))
        self.api = self._cm.__enter__()
        self.api.graceful_evictions = True
        # the hook's token held to deploy/rbac.yaml, as the real control plane binds its hook user
        self.api.enforce_rbac("token:hook", double.deploy_rbac_documents())
        self.tmp_path = tmp_path
        self._names = 0

    def close(self) -> None:
        self._cm.__exit__(None, None, None)

    def client(self, **options: Any) -> KubeApi:
        path = self.api.write_kubeconfig(self.tmp_path / ("hook-%d.conf" % self._bump()), token=self.HOOK_TOKEN)
        options.setdefault("sleep", lambda s: None)
        return ClusterCredential(path=path, attempts=options.pop("attempts", 3)).client(**options)

    def _bump(self) -> int:
        self._names += 1
        return self._names

    def kubelet(self) -> tuple:
        """(node name, a client with that node's kubelet credential: system:node:<name>, group system:nodes)."""
        name = "kube-real-node"
        path = self.api.write_kubeconfig(self.tmp_path / ("node-%d.conf" % self._bump()), node=name)
        return name, ClusterCredential(path=path, attempts=1).client(sleep=lambda s: None)

    def unique(self, prefix: str) -> str:
        return "%s-%d" % (prefix, self._bump())

    def namespace(self) -> str:
        return self.unique("t")

    # -- objects --
    def add_node(self, name: str, labels: Optional[dict] = None, capacity: Optional[dict] = None,
                 taints: Optional[list] = None, unschedulable: bool = False) -> None:
        self.api.add_node(name, labels=labels, taints=taints, capacity=capacity, unschedulable=unschedulable)

    def delete_node(self, name: str) -> None:
        with self.api.lock:
            self.api.nodes.pop(name, None)
            self.api.rv += 1

    def label_node(self, name: str, labels: Dict[str, Optional[str]]) -> None:
        self.api.label_node(name, labels)

    def set_capacity(self, name: str, capacity: dict) -> None:
        self.api.set_capacity(name, capacity)

    def annotate_node(self, name: str, annotations: Dict[str, Optional[str]]) -> None:
        self.api.annotate_node(name, annotations)

    def node(self, name: str) -> dict:
        return json.loads(json.dumps(self.api.nodes[name]))

    def add_pod(self, ns: str, name: str, node: Optional[str], labels: Optional[dict] = None, gpus: int = 0,
                owner_kind: Optional[str] = "ReplicaSet", owner_name: str = "", phase: str = "Running",
                volumes: Optional[list] = None, annotations: Optional[dict] = None, ready: bool = True,
                replacement: bool = False) -> None:
        pod = self.api.add_pod(ns, name, node, labels=labels, gpus=gpus, owner_kind=owner_kind, phase=phase,
                               volumes=volumes, annotations=annotations)
        if not ready:
            pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]

    def add_pdb(self, ns: str, name: str, match_labels: Optional[dict] = None, min_available: Any = None,
                max_unavailable: Any = None, selector: Optional[dict] = None) -> None:
        pdb = self.api.add_pdb(ns, name, match_labels=match_labels, min_available=min_available,
                               max_unavailable=max_unavailable)
        if selector is not None:
            pdb["spec"]["selector"] = selector

    def settle(self) -> None:
        """Budgets are computed on each eviction: nothing to wait for."""

    def pods(self, ns: str) -> Dict[str, dict]:
        with self.api.lock:
            return {n: json.loads(json.dumps(p)) for (s, n), p in sorted(self.api.pods.items()) if s == ns}

    def kubelets(self, ns: str) -> List[str]:
        """Every terminating pod of namespace ``ns``: its kubelet stops it, the pod leaves the API. Returns
        their names."""
        with self.api.lock:
            ending = [key for key, p in self.api.pods.items() if p["metadata"].get("deletionTimestamp")
                      and key[0] == ns]
        for ns, name in ending:
            self.api.finish_termination(ns, name)
        return ["%s/%s" % key for key in sorted(ending)]

    def events(self, node: str) -> List[dict]:
        with self.api.lock:
            return [e for e in self.api.events.values() if (e.get("involvedObject") or {}).get("name") == node]

    def compact(self) -> None:
        self.api.compact()


class RealWorld(World):
    name = "real"

    def __init__(self, cp: Any, tmp_path: Any) -> None:
        self.cp, self.tmp_path = cp, tmp_path
        self._owners: Dict[tuple, dict] = {}
        self._budgets: List[tuple] = []
        self._n = 0

    def close(self) -> None:
        pass

    def client(self, token: Optional[str] = None, **options: Any) -> KubeApi:
        self._n += 1
        path = self.cp.kubeconfig(str(self.tmp_path / ("hook-%d.conf" % self._n)), token or self.cp.hook.token)
        options.setdefault("sleep", lambda s: None)
        return ClusterCredential(path=path, attempts=options.pop("attempts", 3)).client(**options)

    def kubelet(self) -> tuple:
        """(node name, a client with the control plane's kubelet token: the Node authorizer and NodeRestriction
        judge it, as on a cluster)."""
        self._n += 1
        path = self.cp.kubeconfig(str(self.tmp_path / ("node-%d.conf" % self._n)), self.cp.kubelet.token)
        return self.cp.kubelet_node, ClusterCredential(path=path, attempts=1).client(sleep=lambda s: None)

    def unique(self, prefix: str) -> str:
        return self.cp.unique(prefix)

    def namespace(self) -> str:
        return self.cp.namespace()

    # -- objects --
    def add_node(self, name: str, labels: Optional[dict] = None, capacity: Optional[dict] = None,
                 taints: Optional[list] = None, unschedulable: bool = False) -> None:
        self.cp.node(name, labels=labels, capacity=capacity, taints=taints, unschedulable=unschedulable)

    def delete_node(self, name: str) -> None:
        self.cp.admin.ok("DELETE", "/api/v1/nodes/" + name)

    def label_node(self, name: str, labels: Dict[str, Optional[str]]) -> None:
        self.cp.admin.ok("PATCH", "/api/v1/nodes/" + name, {"metadata": {"labels": labels}}, content_type=MERGE_PATCH)

    def annotate_node(self, name: str, annotations: Dict[str, Optional[str]]) -> None:
        self.cp.admin.ok("PATCH", "/api/v1/nodes/" + name, {"metadata": {"annotations": annotations}},
                         content_type=MERGE_PATCH)

    def set_capacity(self, name: str, capacity: dict) -> None:
        """What the device plugin publishes: capacity and allocatable replaced by ``capacity`` (the node's
        cpu, memory and pods kept)."""
        status = self.cp.admin.get("/api/v1/nodes/" + name).get("status") or {}
        new = {k: v for k, v in (status.get("capacity") or {}).items() if k in ("cpu", "memory", "pods")}
        new.update(capacity)
        gone = {k: None for k in status.get("capacity") or {} if k not in new}
        self.cp.admin.ok("PATCH", "/api/v1/nodes/%s/status" % name,
                         {"status": {"capacity": dict(gone, **new), "allocatable": dict(gone, **new)}},
                         content_type=MERGE_PATCH)

    def node(self, name: str) -> dict:
        return self.cp.admin.get("/api/v1/nodes/" + name)

    def _owner(self, ns: str, kind: str, name: str, labels: dict) -> dict:
        key = (ns, kind, name)
        if key not in self._owners:
            if kind == "ReplicaSet":
                self._owners[key] = self.cp.replica_set(ns, name, 0, labels)
            elif kind == "DaemonSet":
                self._owners[key] = self.cp.admin.ok("POST", "/apis/apps/v1/namespaces/%s/daemonsets" % ns, {
                    "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
                    "spec": {"selector": {"matchLabels": labels}, "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}}})
            else:
                raise ValueError("owner kind %s: not played here" % kind)
        return self._owners[key]

    def add_pod(self, ns: str, name: str, node: Optional[str], labels: Optional[dict] = None, gpus: int = 0,
                owner_kind: Optional[str] = "ReplicaSet", owner_name: str = "", phase: str = "Running",
                volumes: Optional[list] = None, annotations: Optional[dict] = None, ready: bool = True,
                replacement: bool = False) -> None:
        """A pod; ``owner_kind`` ReplicaSet: one ReplicaSet per ``owner_name`` (default: the pod's own),
        whose replicas count its pods, as a real ReplicaSet's would; a ``replacement`` (the ReplicaSet
        recreating an evicted replica) leaves the replicas as they are."""
        labels = dict(labels or {})
        owner = None
        if owner_kind:
            owner_name = owner_name or name + "-owner"
            obj = self._owner(ns, owner_kind, owner_name, labels or {"owner": owner_name})
            owner = self.cp.owner(obj)
            if owner_kind == "ReplicaSet" and not replacement:
                replicas = (obj["spec"].get("replicas") or 0) + 1
                obj["spec"]["replicas"] = replicas
                self.cp.admin.ok("PATCH", "/apis/apps/v1/namespaces/%s/replicasets/%s" % (ns, owner_name),
                                 {"spec": {"replicas": replicas}}, content_type=MERGE_PATCH)
        self.cp.pod(ns, name, node=node, labels=labels, gpus=gpus, owner=owner, phase=phase,
                    ready=ready and phase == "Running", volumes=volumes, annotations=annotations)

    def add_pdb(self, ns: str, name: str, match_labels: Optional[dict] = None, min_available: Any = None,
                max_unavailable: Any = None, selector: Optional[dict] = None) -> None:
        self.cp.pdb(ns, name, match_labels, min_available=min_available, max_unavailable=max_unavailable,
                    selector=selector)
        self._budgets.append((ns, name))
        self.settle()

    def settle(self, timeout: float = 20.0) -> None:
        """Wait until the disruption controller has caught up with the pods: every budget's currentHealthy
        is the number of Running, Ready, not terminating pods it selects."""
        for ns, name in self._budgets:
            deadline = time.monotonic() + timeout
            while True:
                pdb = self.cp.admin.get("/apis/policy/v1/namespaces/%s/poddisruptionbudgets/%s" % (ns, name))
                status = pdb.get("status") or {}
                if any(c.get("reason") == "SyncFailed" for c in status.get("conditions") or []):
                    break  # it will not compute (a DaemonSet's pods under a scaled budget, say)
                want = sum(1 for p in self.cp.pods(ns) if kubeselect.pdb_selects(pdb, p["metadata"].get("labels") or {})
                           and kubeselect.pod_healthy(p))
                if status.get("observedGeneration") == pdb["metadata"]["generation"] and \
                        status.get("currentHealthy") == want:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError("budget %s/%s: status %s, %d pods healthy" % (ns, name, status, want))
                time.sleep(0.05)

    def pods(self, ns: str) -> Dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.cp.pods(ns)}

    def kubelets(self, ns: str) -> List[str]:
        ended = []
        for p in self.cp.pods(ns):
            if p["metadata"].get("deletionTimestamp"):
                self.cp.finish(p["metadata"]["namespace"], p["metadata"]["name"])
                ended.append("%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"]))
        if ended:
            self.settle()
        return sorted(ended)

    def events(self, node: str) -> List[dict]:
        return self.cp.admin.get("/api/v1/namespaces/default/events",
                                 fieldSelector="involvedObject.name=" + node)["items"]

    def compact(self) -> None:
        self.cp.compact()
