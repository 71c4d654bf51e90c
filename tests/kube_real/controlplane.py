"""The real control plane of tests/controlplane (etcd, kube-apiserver, the disruption controller) as a
test resource: start it, talk to it, stop it.

The Go program writes ``state.json`` in its directory when everything is ready (its server URL, CA file,
tokens, the helper's URL); :func:`start` waits for that file. Everything here speaks plain HTTPS on
127.0.0.1 with the standard library, so these tests depend on nothing in ``functions/`` but what they test.

Objects are created as a cluster without kubelets needs them:

* a Node is created through the API, then given the status a kubelet would report (Ready, capacity) and
  the taints the test asked for: the TaintNodesByCondition admission plugin taints every new Node
  ``node.kubernetes.io/not-ready`` and no node lifecycle controller runs here to lift it once the node is
  Ready, so :meth:`ControlPlane.node` does;
* a Pod is bound at creation (``spec.nodeName``) and given a Running, Ready status: the disruption
  controller counts only Ready pods as healthy, and the Eviction API evicts a Pending pod without looking
  at budgets;
* an evicted pod on a node stays terminating (``deletionTimestamp``) as no kubelet stops it;
  :meth:`ControlPlane.finish` deletes it with grace period 0, what the kubelet's final delete does.
"""

import base64
import http.client
import json
import os
import signal
import ssl
import subprocess
import time
import typing
import uuid
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import quote, urlencode, urlsplit

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GO_MODULE = os.path.join(ROOT, "tests", "controlplane")
RBAC_YAML = os.path.join(ROOT, "deploy", "rbac.yaml")
START_TIMEOUT_S = 90.0
MERGE_PATCH = "application/merge-patch+json"


def kubernetes_version() -> str:
    """The k8s.io/kubernetes version tests/controlplane/go.mod requires (the binary's cache key)."""
    with open(os.path.join(GO_MODULE, "go.mod")) as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 2 and parts[0] == "k8s.io/kubernetes":
                return parts[1]
    raise RuntimeError("tests/controlplane/go.mod requires no k8s.io/kubernetes")


def binary_path() -> str:
    """Where ``make controlplane`` puts the binary: .cache/controlplane/<kubernetes version>/controlplane
    (ACK_MIG_CONTROLPLANE overrides)."""
    return os.environ.get("ACK_MIG_CONTROLPLANE") or os.path.join(
        ROOT, ".cache", "controlplane", kubernetes_version(), "controlplane")


class Answer(typing.NamedTuple):
    status: int
    body: Any  # decoded JSON, or the text when it is not JSON
    headers: Any


class ApiFailure(AssertionError):
    def __init__(self, method: str, path: str, answer: Answer) -> None:
        super().__init__("%s %s: HTTP %d %s" % (method, path, answer.status, answer.body))
        self.answer = answer


class Rest:
    """Plain HTTPS calls with one bearer token, the server's CA verified; a new connection per call."""

    def __init__(self, server: str, ca_file: str, token: str) -> None:
        parts = urlsplit(server)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 443
        self.context = ssl.create_default_context(cafile=ca_file)
        self.token = token

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
             query: Optional[Dict[str, str]] = None, headers: Optional[Dict[str, str]] = None) -> Answer:
        url = path + ("?" + urlencode(query) if query else "")
        sent = {"Accept": "application/json", "Authorization": "Bearer " + self.token}
        sent.update(headers or {})
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            sent["Content-Type"] = content_type
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
        try:
            conn.request(method, url, body=payload, headers=sent)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        try:
            decoded = json.loads(data.decode()) if data else None
        except ValueError:
            decoded = data.decode(errors="replace")
        return Answer(response.status, decoded, response.headers)

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """The call's JSON answer; ApiFailure unless it succeeded."""
        answer = self.call(method, path, body, **kwargs)
        if answer.status >= 300:
            raise ApiFailure(method, path, answer)
        return answer.body

    def get(self, path: str, **query: str) -> Any:
        return self.ok("GET", path, query=query or None)


class ControlPlane:
    """One running control plane (the Go program) and what a test needs of it."""

    def __init__(self, workdir: str, process: subprocess.Popen, state: dict) -> None:
        self.workdir, self.process, self.state = workdir, process, state
        self.server, self.ca_file = state["server"], state["ca_file"]
        self.admin = Rest(self.server, self.ca_file, state["admin_token"])
        self.hook = Rest(self.server, self.ca_file, state["hook_token"])
        self.hook_user = state["hook_user"]
        # a kubelet's credential (system:node:<node_name>, group system:nodes): Node authorizer, NodeRestriction
        self.kubelet = Rest(self.server, self.ca_file, state["node_token"])
        self.kubelet_node = state["node_name"]
        self._spare = sorted(state["spare_tokens"].items())
        self._names = 0

    # ---- credentials ----

    def kubeconfig(self, path: str, token: str, inline: bool = False) -> str:
        """A kubeconfig for this server with a bearer token (the layout ACK's kubeconfigs have)."""
        cluster = ("    certificate-authority-data: %s" % base64.b64encode(open(self.ca_file, "rb").read()).decode()
                   if inline else "    certificate-authority: %s" % self.ca_file)
        text = "\n".join([
            "apiVersion: v1", "kind: Config", "clusters:", "- cluster:", cluster,
            "    server: %s" % self.server, "  name: test", "contexts:", "- context:", "    cluster: test",
            "    user: test", "  name: test", "current-context: test", "users:", "- name: test", "  user:",
            "    token: %s" % token, ""])
        with open(path, "w") as fh:
            fh.write(text)
        return path

    def spare_user(self) -> typing.Tuple[str, Rest]:
        """A user of the token file bound to nothing yet (a test binds it as it needs): name, client.
        Each call hands out another; there are 16 per control plane."""
        if not self._spare:
            raise RuntimeError("no spare users left in this control plane (tests/controlplane spareUsers)")
        name, token = self._spare.pop(0)
        return name, Rest(self.server, self.ca_file, token)

    def token_of(self, rest: Rest) -> str:
        return rest.token

    # ---- the helper program ----

    def compact(self) -> int:
        """Compact etcd at its current revision, as kube-apiserver's compactor does: every continue token
        and resourceVersion handed out before expires (410 Gone)."""
        parts = urlsplit(self.state["helper"])
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            conn.request("POST", "/compact")
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError("compact: HTTP %d %s" % (response.status, data))
        return int(json.loads(data)["revision"])

    # ---- objects ----

    def unique(self, prefix: str) -> str:
        """A name no other test of this control plane uses (objects outlive tests here)."""
        self._names += 1
        return "%s-%d-%s" % (prefix, self._names, uuid.uuid4().hex[:6])

    def namespace(self, prefix: str = "t") -> str:
        name = self.unique(prefix)
        self.admin.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": name}})
        return name

    def node(self, name: str, labels: Optional[dict] = None, annotations: Optional[dict] = None,
             taints: Optional[list] = None, unschedulable: bool = False,
             capacity: Optional[dict] = None) -> dict:
        """A Ready Node with exactly the taints given (see the module docstring)."""
        spec: Dict[str, Any] = {}
        if unschedulable:
            spec["unschedulable"] = True
        self.admin.ok("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node", "spec": spec,
            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})}})
        resources = dict({"cpu": "64", "memory": "512Gi", "pods": "110"}, **(capacity or {}))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.admin.ok("PATCH", "/api/v1/nodes/%s/status" % name, {"status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}]}}, content_type=MERGE_PATCH)
        return self.admin.ok("PATCH", "/api/v1/nodes/" + name, {"spec": {"taints": list(taints or []) or None}},
                             content_type=MERGE_PATCH)

    def pod(self, namespace: str, name: str, node: Optional[str] = None, labels: Optional[dict] = None,
            gpus: int = 0, owner: Optional[dict] = None, annotations: Optional[dict] = None,
            phase: str = "Running", ready: bool = True, volumes: Optional[list] = None,
            resources: Optional[dict] = None, init_resources: Optional[dict] = None,
            grace_period: Optional[int] = None) -> dict:
        """A pod bound to ``node`` with the given status. ``owner``: an ownerReference (a dict with
        apiVersion, kind, name, uid, controller)."""
        limits = dict(resources or {})
        if gpus:
            limits["nvidia.com/gpu"] = str(gpus)
        container: Dict[str, Any] = {"name": "main", "image": "registry.invalid/test:1"}
        if limits:
            container["resources"] = {"limits": limits}
        spec: Dict[str, Any] = {"containers": [container]}
        if node:
            spec["nodeName"] = node
        if init_resources:
            spec["initContainers"] = [{"name": "init", "image": "registry.invalid/test:1",
                                       "resources": {"limits": dict(init_resources)}}]
        if volumes:
            spec["volumes"] = list(volumes)
        if grace_period is not None:
            spec["terminationGracePeriodSeconds"] = grace_period
        meta: Dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if annotations:
            meta["annotations"] = dict(annotations)
        if owner:
            meta["ownerReferences"] = [owner]
        created = self.admin.ok("POST", "/api/v1/namespaces/%s/pods" % namespace,
                                {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        if phase == "Pending" and not ready:
            return created
        return self.set_pod_status(namespace, name, phase, ready)

    def set_pod_status(self, namespace: str, name: str, phase: str = "Running", ready: bool = True) -> dict:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                                  "lastTransitionTime": now}]}
        return self.admin.ok("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (namespace, name),
                             {"status": status}, content_type=MERGE_PATCH)

    def replica_set(self, namespace: str, name: str, replicas: int, labels: dict) -> dict:
        """A ReplicaSet object (no controller runs: it creates no pods) whose scale the disruption
        controller reads for percentage and maxUnavailable budgets."""
        return self.admin.ok("POST", "/apis/apps/v1/namespaces/%s/replicasets" % namespace, {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/test:1"}]}}}})

    @staticmethod
    def owner(obj: dict, controller: bool = True) -> dict:
        """An ownerReference to ``obj`` (a ReplicaSet, a DaemonSet...)."""
        return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
                "uid": obj["metadata"]["uid"], "controller": controller}

    def pdb(self, namespace: str, name: str, match_labels: Optional[dict] = None, min_available: Any = None,
            max_unavailable: Any = None, selector: Optional[dict] = None) -> dict:
        spec: Dict[str, Any] = {"selector": selector if selector is not None else {"matchLabels": match_labels}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        return self.admin.ok("POST", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % namespace, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec})

    def wait_pdb(self, namespace: str, name: str, until: Callable[[dict], bool] = lambda status: True,
                 timeout: float = 20.0) -> dict:
        """The budget once the disruption controller has processed its current generation and ``until``
        holds for its status."""
        deadline = time.monotonic() + timeout
        while True:
            pdb = self.admin.get("/apis/policy/v1/namespaces/%s/poddisruptionbudgets/%s" % (namespace, name))
            status = pdb.get("status") or {}
            if status.get("observedGeneration") == pdb["metadata"]["generation"] and until(status):
                return pdb
            if time.monotonic() > deadline:
                raise AssertionError("PodDisruptionBudget %s/%s: status %s after %.0fs" % (
                    namespace, name, json.dumps(status), timeout))
            time.sleep(0.05)

    def evict(self, rest: Rest, namespace: str, name: str) -> Answer:
        return rest.call("POST", "/api/v1/namespaces/%s/pods/%s/eviction" % (namespace, quote(name)), {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}})

    def finish(self, namespace: str, name: str) -> None:
        """What the kubelet does once a terminating pod's containers stopped: delete it for good."""
        answer = self.admin.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (namespace, name),
                                 {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        if answer.status not in (200, 404):
            raise ApiFailure("DELETE", name, answer)

    def pods(self, namespace: str) -> List[dict]:
        return self.admin.get("/api/v1/namespaces/%s/pods" % namespace)["items"]

    def apply_rbac(self, docs: List[dict], rest: Optional[Rest] = None) -> None:
        """Create (or replace) RBAC objects: ClusterRole, ClusterRoleBinding, Role, RoleBinding."""
        rest = rest or self.admin
        for doc in docs:
            kind, meta = doc["kind"], doc["metadata"]
            plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
                      "Role": "roles", "RoleBinding": "rolebindings"}[kind]
            base = "/apis/rbac.authorization.k8s.io/v1"
            path = ("%s/namespaces/%s/%s" % (base, meta["namespace"], plural) if meta.get("namespace")
                    else "%s/%s" % (base, plural))
            answer = rest.call("POST", path, doc)
            if answer.status == 409:
                current = rest.get("%s/%s" % (path, meta["name"]))
                doc = dict(doc, metadata=dict(meta, resourceVersion=current["metadata"]["resourceVersion"]))
                rest.ok("PUT", "%s/%s" % (path, meta["name"]), doc)
            elif answer.status >= 300:
                raise ApiFailure("POST", path, answer)


def rbac_documents() -> List[dict]:
    with open(RBAC_YAML) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def start(binary: str, workdir: str, timeout: float = START_TIMEOUT_S) -> ControlPlane:
    """Start the control plane in ``workdir`` and wait until it is ready (its state.json)."""
    os.makedirs(workdir, exist_ok=True)
    state_file = os.path.join(workdir, "state.json")
    log = open(os.path.join(workdir, "controlplane.log"), "wb")
    # stdin is a pipe that only this process holds: when the test process ends, however it ends, the
    # program sees it close and stops (no control plane outlives its tests).
    process = subprocess.Popen([binary, "-dir", workdir], stdin=subprocess.PIPE, stdout=log,
                               stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
    log.close()
    deadline = time.monotonic() + timeout
    while not os.path.exists(state_file):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process(process)
            raise RuntimeError("the control plane did not start (exit %s); the end of its log:\n%s"
                               % (process.returncode, log_tail(workdir)))
        time.sleep(0.05)
    with open(state_file) as fh:
        state = json.load(fh)
    return ControlPlane(workdir, process, state)


def log_tail(workdir: str, lines: int = 40) -> str:
    try:
        with open(os.path.join(workdir, "controlplane.log"), errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_process(process: subprocess.Popen, timeout: float = 20.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdin is not None:
        process.stdin.close()
