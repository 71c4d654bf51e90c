"""A real local Kubernetes API server for tests: HTTPS on 127.0.0.1 with client-certificate auth.

Not a mock of our client: it speaks HTTP over TLS on a real socket, with certificates made here (a CA, a
server certificate for 127.0.0.1, client certificates), requires a client certificate signed by that CA
(or, when ``tokens`` are given, accepts a bearer token instead), and enforces the part of NodeRestriction
that matters to us: a node credential (``system:node:<name>``) may change only its own Node, and never
its taints. It holds Node and Pod objects in memory and records every request.

Served:

* ``GET /api/v1/nodes`` (``labelSelector``) and ``GET /api/v1/nodes/{name}``
* ``PATCH /api/v1/nodes/{name}`` with ``application/merge-patch+json``, ``application/json-patch+json``
  or ``application/strategic-merge-patch+json`` (treated as a merge patch)
* ``GET /api/v1/pods`` and ``GET /api/v1/namespaces/{ns}/pods`` with ``fieldSelector=spec.nodeName=X``
  and ``labelSelector=k=v[,k=v]``; ``DELETE /api/v1/namespaces/{ns}/pods/{name}``
* ``POST /api/v1/namespaces/{ns}/pods/{name}/eviction`` (policy/v1 Eviction) with the API server's
  rules (https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/): 200 and the pod is
  deleted; 429 "Cannot evict pod as it would violate the pod's disruption budget." while the one
  PodDisruptionBudget selecting the pod allows no disruption (healthy selected pods - ``minAvailable``
  < 1, healthy = Running and not terminating, as the disruption controller counts); 500 when more than
  one budget selects the pod; 404 for a pod that is not there. With ``graceful_evictions`` the pod stays,
  terminating (``deletionTimestamp``), until :meth:`KubeApiServer.finish_termination`.
  Cordon is ``spec.unschedulable`` through the node PATCH above.
* ``POST /api/v1/namespaces/{ns}/events`` (core v1 Events, with the API server's legacy validation: an
  event about a cluster-scoped object such as a Node lives in ``default``; a name taken is 409) and
  ``GET /api/v1/events`` / ``GET /api/v1/namespaces/{ns}/events`` with ``fieldSelector`` on
  ``involvedObject.*`` and ``reason``. A node credential may create events (the ``system:node`` rules
  allow events create/update/patch and NodeRestriction does not look at events) but not read them.

Use it through :func:`kube_api_server` (a context manager) or the ``kube_api`` pytest fixture that
``tests/support/fixtures`` style conftests can re-export::

    from tests.support.kubeapi import kube_api  # noqa: F401  (in a conftest.py)

    def test_x(kube_api):
        kube_api.add_node("node-a", labels={"a": "b"})
        path = kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a")
        ...
        assert kube_api.nodes["node-a"]["metadata"]["labels"]["x"] == "y"
        assert kube_api.requests[-1].method == "PATCH"
"""

import base64
import copy
import datetime
import json
import os
import ssl
import tempfile
import threading
import typing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class Recorded(typing.NamedTuple):
    method: str
    path: str
    query: str
    content_type: str
    body: Optional[object]  # parsed JSON, or None
    user: str  # the authenticated user: a certificate CN or "token:<name>"
    status: int


class Cert(typing.NamedTuple):
    cert_pem: bytes
    key_pem: bytes


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn, org=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


class CertificateAuthority:
    """A throwaway CA that issues the server's and clients' certificates."""

    def __init__(self, cn="kubeapi-test-ca"):
        self.key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self):
        # type: () -> bytes
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, cn, org=None, server_ip=None):
        # type: (str, Optional[str], Optional[str]) -> Cert
        import ipaddress

        key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder().subject_name(_name(cn, org)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server_ip:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(server_ip)),
                                             x509.DNSName("localhost")]), critical=False)
            usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        else:
            usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Cert(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def _merge(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


class PatchError(Exception):
    pass


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError("bad JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _json_patch(doc, ops):
    """RFC 6902 JSON patch (add, remove, replace, test): enough for taints and labels."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = _pointer(op["path"])
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        kind = op["op"]
        try:
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, op["value"])
                elif kind == "remove":
                    del parent[index]
                elif kind == "replace":
                    parent[index] = op["value"]
                elif kind == "test":
                    if parent[index] != op["value"]:
                        raise PatchError("test failed at %s" % op["path"])
                else:
                    raise PatchError("unsupported op %r" % kind)
            else:
                if kind == "add" or kind == "replace":
                    if kind == "replace" and last not in parent:
                        raise PatchError("replace of missing %s" % op["path"])
                    parent[last] = op["value"]
                elif kind == "remove":
                    del parent[last]
                elif kind == "test":
                    if parent.get(last) != op["value"]:
                        raise PatchError("test failed at %s" % op["path"])
                else:
                    raise PatchError("unsupported op %r" % kind)
        except (KeyError, IndexError, ValueError) as exc:
            raise PatchError("cannot apply %s at %s: %s" % (kind, op["path"], exc))
    return doc


class KubeApiServer:
    """The server's state and its HTTPS listener. Create with :func:`kube_api_server`."""

    def __init__(self, workdir, tokens=None):
        # type: (str, Optional[Dict[str, str]]) -> None
        self.workdir = workdir
        self.ca = CertificateAuthority()
        self.tokens = dict(tokens or {})  # token -> user name
        self.nodes = {}  # type: Dict[str, dict]
        self.pods = {}  # type: Dict[typing.Tuple[str, str], dict]
        self.pdbs = {}  # type: Dict[typing.Tuple[str, str], dict]
        self.graceful_evictions = False
        self.events = {}  # type: Dict[typing.Tuple[str, str], dict]
        # Other objects served as they are on GET (path -> object), e.g. a ClusterRole or a list of bindings.
        self.read_only = {}  # type: Dict[str, dict]
        self.requests = []  # type: List[Recorded]
        self.lock = threading.Lock()
        # Called after every successful PATCH of a node (name, new object): lets a test play the
        # device plugin, e.g. publish capacity once the labels say success.
        self.on_node_patch = None  # type: Optional[Callable[[str, dict], None]]
        # Status to answer with instead of serving, e.g. {"GET": 503}: outage tests.
        self.fail = {}  # type: Dict[str, int]
        self._server_cert = self.ca.issue("127.0.0.1", server_ip="127.0.0.1")
        self.ca_file = self._write("ca.crt", self.ca.pem)
        cert_file = self._write("server.crt", self._server_cert.cert_pem)
        key_file = self._write("server.key", self._server_cert.key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        context.load_verify_locations(self.ca_file)
        # Certificates are optional at the TLS layer only when bearer tokens are allowed; the handler
        # then insists on one of the two.
        context.verify_mode = ssl.CERT_OPTIONAL if self.tokens else ssl.CERT_REQUIRED
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = "https://127.0.0.1:%d" % self.port
        # A short poll: stop() (every test's teardown) otherwise waits up to 0.5 s for the loop to notice.
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def _write(self, name, data):
        # type: (str, bytes) -> str
        path = os.path.join(self.workdir, name)
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, 0o600)
        return path

    def start(self):
        self._thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- objects --------------------------------------------------------------------------------

    def add_node(self, name, labels=None, annotations=None, taints=None, capacity=None):
        # type: (str, Optional[dict], Optional[dict], Optional[list], Optional[dict]) -> dict
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {}),
                         "resourceVersion": "1"},
            "spec": {"taints": list(taints)} if taints else {},
            "status": {"capacity": dict(capacity or {}), "allocatable": dict(capacity or {})},
        }
        with self.lock:
            self.nodes[name] = node
        return node

    def set_capacity(self, name, capacity):
        # type: (str, dict) -> None
        with self.lock:
            status = self.nodes[name].setdefault("status", {})
            status["capacity"] = dict(capacity)
            status["allocatable"] = dict(capacity)

    def add_pod(self, namespace, name, node_name, labels=None, gpus=0, owner_kind=None, annotations=None,
                phase="Running"):
        # type: (str, str, str, Optional[dict], int, Optional[str], Optional[dict], str) -> dict
        """``gpus``: the container's ``nvidia.com/gpu`` limit; ``owner_kind``: e.g. DaemonSet, ReplicaSet."""
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
               "spec": {"nodeName": node_name}}
        if gpus or owner_kind or annotations or phase != "Running":
            pod["spec"]["containers"] = [{"name": "main", "resources": {
                "limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}]
            pod["status"] = {"phase": phase}
            if owner_kind:
                pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind,
                                                       "name": name + "-owner", "controller": True}]
            if annotations:
                pod["metadata"]["annotations"] = dict(annotations)
        with self.lock:
            self.pods[(namespace, name)] = pod
        return pod

    def add_pdb(self, namespace, name, match_labels, min_available):
        # type: (str, str, dict, int) -> dict
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"selector": {"matchLabels": dict(match_labels)}, "minAvailable": min_available}}
        with self.lock:
            self.pdbs[(namespace, name)] = pdb
        return pdb

    def finish_termination(self, namespace, name):
        # type: (str, str) -> None
        """The kubelet has stopped a terminating pod: it leaves the API."""
        with self.lock:
            self.pods.pop((namespace, name), None)

    def _disruptions_allowed(self, pdb):
        # type: (dict) -> int
        selector = pdb["spec"]["selector"].get("matchLabels") or {}
        healthy = sum(1 for (ns, _), p in self.pods.items()
                      if ns == pdb["metadata"]["namespace"]
                      and all(p["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
                      and (p.get("status") or {}).get("phase", "Running") == "Running"
                      and not p["metadata"].get("deletionTimestamp"))
        return healthy - int(pdb["spec"]["minAvailable"])

    # --- credentials ----------------------------------------------------------------------------

    def node_cert(self, node):
        # type: (str) -> Cert
        """A kubelet's client certificate: CN system:node:<node>, O system:nodes."""
        return self.ca.issue("system:node:%s" % node, org="system:nodes")

    def admin_cert(self):
        # type: () -> Cert
        return self.ca.issue("kubernetes-admin", org="system:masters")

    def write_kubeconfig(self, path, node=None, cert=None, token=None, inline=False, user="user"):
        # type: (typing.Any, Optional[str], Optional[Cert], Optional[str], bool, str) -> str
        """A kubeconfig (YAML, the kubelet.conf layout) for this server.

        ``node`` issues a kubelet certificate for that node; ``cert`` uses a given one; ``token`` adds a
        bearer token. ``inline`` puts everything in ``*-data`` fields instead of files beside it.
        """
        path = str(path)
        base = os.path.dirname(path) or "."
        if node is not None and cert is None:
            cert = self.node_cert(node)
        user_entry = {}  # type: Dict[str, str]
        cluster = {"server": self.url}
        if inline:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca.pem).decode()
        else:
            cluster["certificate-authority"] = self.ca_file
        if cert is not None:
            if inline:
                user_entry["client-certificate-data"] = base64.b64encode(cert.cert_pem).decode()
                user_entry["client-key-data"] = base64.b64encode(cert.key_pem).decode()
            else:
                stem = os.path.join(base, os.path.basename(path) + ".%s" % user)
                with open(stem + ".crt", "wb") as fh:
                    fh.write(cert.cert_pem)
                with open(stem + ".key", "wb") as fh:
                    fh.write(cert.key_pem)
                os.chmod(stem + ".key", 0o600)
                user_entry["client-certificate"] = stem + ".crt"
                user_entry["client-key"] = stem + ".key"
        if token is not None:
            user_entry["token"] = token
        lines = [
            "apiVersion: v1",
            "kind: Config",
            "clusters:",
            "- cluster:",
        ]
        for key, value in cluster.items():
            lines.append("    %s: %s" % (key, value))
        lines += ["  name: test", "contexts:", "- context:", "    cluster: test", "    user: %s" % user,
                  "  name: %s@test" % user, "current-context: %s@test" % user, "preferences: {}",
                  "users:", "- name: %s" % user, "  user:"]
        for key, value in user_entry.items():
            lines.append("    %s: %s" % (key, value))
        with open(path, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        return path


def _cn(peercert):
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


def _selector_match(labels, selector):
    if not selector:
        return True
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def _field(obj, path):
    """The value a field selector such as ``involvedObject.name`` compares with ("" when absent)."""
    for part in path.strip().split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return "" if obj is None else str(obj)


def _handler_for(api):
    # type: (KubeApiServer) -> type

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # keep test output clean
            pass

        def _user(self):
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Bearer "):
                name = api.tokens.get(auth[len("Bearer "):])
                return "token:%s" % name if name else None
            return _cn(self.connection.getpeercert())

        def _reply(self, status, obj, record):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with api.lock:
                api.requests.append(record._replace(status=status))

        def _status(self, code, message, record):
            reason = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                      405: "MethodNotAllowed", 409: "AlreadyExists", 415: "UnsupportedMediaType",
                      422: "Invalid", 429: "TooManyRequests"}.get(code, "InternalError")
            self._reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                               "reason": reason, "code": code}, record)

        def _handle(self, method):
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            body = None
            if raw:
                try:
                    body = json.loads(raw.decode())
                except ValueError:
                    body = None
            user = self._user()
            record = Recorded(method, unquote(parts.path), parts.query, ctype, body, user or "", 0)
            if user is None:
                return self._status(401, "Unauthorized", record)
            if method in api.fail:
                return self._status(api.fail[method], "injected failure", record)
            segs = [unquote(s) for s in parts.path.strip("/").split("/")]
            query = parse_qs(parts.query)
            if segs[:3] == ["api", "v1", "nodes"] and len(segs) == 3 and method == "GET":
                labels = (query.get("labelSelector") or [""])[0]
                with api.lock:
                    items = [copy.deepcopy(n) for _, n in sorted(api.nodes.items())
                             if _selector_match(n["metadata"].get("labels", {}), labels)]
                return self._reply(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                                         "items": items}, record)
            if (segs[:3] == ["api", "v1", "namespaces"] and len(segs) == 7 and segs[4] == "pods"
                    and segs[6] == "eviction" and method == "POST"):
                return self._evict(segs[3], segs[5], record)
            if segs[:3] == ["api", "v1", "nodes"] and len(segs) == 4:
                return self._node(method, segs[3], ctype, body, raw, user, record)
            if segs[:2] == ["api", "v1"] and method == "GET" and (
                    segs[2:] == ["pods"] or (len(segs) == 5 and segs[2] == "namespaces" and segs[4] == "pods")):
                namespace = segs[3] if len(segs) == 5 else None
                return self._list_pods(namespace, query, record)
            if (segs[:3] == ["api", "v1", "namespaces"] and len(segs) == 6 and segs[4] == "pods"
                    and method == "DELETE"):
                with api.lock:
                    pod = api.pods.pop((segs[3], segs[5]), None)
                if pod is None:
                    return self._status(404, 'pods "%s" not found' % segs[5], record)
                return self._reply(200, pod, record)
            if segs[:2] == ["api", "v1"] and (segs[2:] == ["events"] or (
                    len(segs) == 5 and segs[2] == "namespaces" and segs[4] == "events")):
                return self._events(method, segs[3] if len(segs) == 5 else None, query, body, user, record)
            if method == "GET" and "/" + "/".join(segs) in api.read_only:  # e.g. RBAC objects for doctor
                with api.lock:
                    obj = copy.deepcopy(api.read_only["/" + "/".join(segs)])
                return self._reply(200, obj, record)
            return self._status(404, "the server could not find the requested resource", record)

        def _events(self, method, namespace, query, body, user, record):
            if method == "GET":
                if user.startswith("system:node:"):  # system:node may write events, never read them
                    return self._status(403, 'events is forbidden: User "%s" cannot list resource "events"'
                                        % user, record)
                terms = [t.partition("=") for t in (query.get("fieldSelector") or [""])[0].split(",") if t]
                with api.lock:
                    items = [copy.deepcopy(e) for (ns, _), e in sorted(api.events.items())
                             if (namespace is None or ns == namespace)
                             and all(_field(e, k) == v for k, _, v in terms)]
                return self._reply(200, {"kind": "EventList", "apiVersion": "v1", "items": items}, record)
            if method != "POST" or namespace is None:
                return self._status(405, "method not allowed", record)
            if not isinstance(body, dict):
                return self._status(400, "body is not a JSON object", record)
            meta = body.get("metadata") or {}
            if meta.get("namespace") not in (None, "", namespace):
                return self._status(400, "the namespace of the provided object does not match the namespace "
                                         "sent on the request", record)
            name = meta.get("name")
            if not name:
                return self._status(422, "metadata.name: Required value: name or generateName is required", record)
            involved = body.get("involvedObject") or {}
            # legacyValidateEvent (pkg/apis/core/validation/events.go): an event without eventTime about a
            # cluster-scoped object must live in "default"; otherwise in the object's own namespace.
            if not body.get("eventTime") and (involved.get("namespace") or "default") != namespace:
                return self._status(422, "involvedObject.namespace: Invalid value: %r: does not match "
                                         "event.namespace" % (involved.get("namespace") or ""), record)
            event = copy.deepcopy(body)
            with api.lock:  # (replies take the lock too: answer outside it)
                taken = (namespace, name) in api.events
                if not taken:
                    event.setdefault("metadata", {}).update(namespace=namespace, resourceVersion="1",
                                                            uid="event-%d" % (len(api.events) + 1))
                    api.events[(namespace, name)] = event
            if taken:
                return self._status(409, 'events "%s" already exists' % name, record)
            return self._reply(201, event, record)

        def _evict(self, namespace, name, record):
            with api.lock:
                pod = api.pods.get((namespace, name))
                if pod is None:
                    return self._status(404, 'pods "%s" not found' % name, record)
                labels = pod["metadata"].get("labels", {})
                budgets = [b for (ns, _), b in sorted(api.pdbs.items()) if ns == namespace and all(
                    labels.get(k) == v for k, v in (b["spec"]["selector"].get("matchLabels") or {}).items())]
                if len(budgets) > 1:
                    refused = (500, "This pod has more than one PodDisruptionBudget, which the eviction "
                                    "subresource does not support.")
                elif budgets and api._disruptions_allowed(budgets[0]) < 1:
                    refused = (429, "Cannot evict pod as it would violate the pod's disruption budget.")
                else:
                    refused = None
                    if api.graceful_evictions:
                        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                    else:
                        del api.pods[(namespace, name)]
            if refused is not None:
                return self._status(refused[0], refused[1], record)
            return self._reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200},
                               record)

        def _list_pods(self, namespace, query, record):
            field = (query.get("fieldSelector") or [""])[0]
            labels = (query.get("labelSelector") or [""])[0]
            node = field[len("spec.nodeName="):] if field.startswith("spec.nodeName=") else None
            with api.lock:
                items = [copy.deepcopy(p) for (ns, _), p in sorted(api.pods.items())
                         if (namespace is None or ns == namespace)
                         and (node is None or p["spec"].get("nodeName") == node)
                         and _selector_match(p["metadata"].get("labels", {}), labels)]
            return self._reply(200, {"kind": "PodList", "apiVersion": "v1", "items": items}, record)

        def _node(self, method, name, ctype, body, raw, user, record):
            node_user = user.startswith("system:node:")
            if node_user and user != "system:node:%s" % name:
                return self._status(403, 'nodes "%s" is forbidden: User "%s" cannot %s node' %
                                    (name, user, method.lower()), record)
            with api.lock:
                current = api.nodes.get(name)
            if current is None:
                return self._status(404, 'nodes "%s" not found' % name, record)
            if method == "GET":
                return self._reply(200, current, record)
            if method != "PATCH":
                return self._status(405, "method not allowed", record)
            if body is None and raw:
                return self._status(400, "body is not JSON", record)
            try:
                if ctype in (MERGE_PATCH, STRATEGIC_PATCH):
                    if not isinstance(body, dict):
                        raise PatchError("merge patch must be an object")
                    updated = _merge(current, body)
                elif ctype == JSON_PATCH:
                    if not isinstance(body, list):
                        raise PatchError("JSON patch must be a list")
                    updated = _json_patch(current, body)
                else:
                    return self._status(415, "unsupported media type %r" % ctype, record)
            except PatchError as exc:
                return self._status(422, str(exc), record)
            if node_user and updated.get("spec", {}).get("taints") != current.get("spec", {}).get("taints"):
                # NodeRestriction: the kubelet may label its own node but never touch its taints.
                return self._status(403, 'node "%s" is not allowed to modify taints' % name, record)
            updated["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
            with api.lock:
                api.nodes[name] = updated
            if api.on_node_patch is not None:
                api.on_node_patch(name, updated)
            return self._reply(200, updated, record)

        def do_GET(self):
            self._handle("GET")

        def do_PATCH(self):
            self._handle("PATCH")

        def do_DELETE(self):
            self._handle("DELETE")

        def do_PUT(self):
            self._handle("PUT")

        def do_POST(self):
            self._handle("POST")

    return Handler


class kube_api_server:
    """Context manager: a started :class:`KubeApiServer` in a temporary directory, stopped on exit."""

    def __init__(self, tokens=None, workdir=None):
        # type: (Optional[Dict[str, str]], Optional[str]) -> None
        self._tokens = tokens
        self._workdir = workdir
        self._tmp = None  # type: Optional[tempfile.TemporaryDirectory]
        self.server = None  # type: Optional[KubeApiServer]

    def __enter__(self):
        # type: () -> KubeApiServer
        if self._workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kubeapi-")
            self._workdir = self._tmp.name
        self.server = KubeApiServer(self._workdir, self._tokens)
        self.server.start()
        return self.server

    def __exit__(self, *exc):
        assert self.server is not None
        self.server.stop()
        if self._tmp is not None:
            self._tmp.cleanup()


@pytest.fixture
def kube_api(tmp_path):
    """A running local API server; bearer token ``cluster-admin-token`` is accepted as user ``admin``."""
    with kube_api_server(tokens={"cluster-admin-token": "admin"}, workdir=str(tmp_path)) as server:
        yield server
