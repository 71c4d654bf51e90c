"""A real local Kubernetes API server for tests: HTTPS on 127.0.0.1 with client-certificate auth, and the
semantics of the real kube-apiserver wherever the hook depends on them.

Not a mock of our client: it speaks HTTP/1.1 over TLS on a real socket (keep-alive included), with
certificates made here (a CA, a server certificate for 127.0.0.1, client certificates), requires a client
certificate signed by that CA (or, when ``tokens`` are given, accepts a bearer token instead), holds
Node, Pod, PodDisruptionBudget and Event objects in memory and records every request. A double kinder than
the real server hides bugs, so each rule below names its upstream source (kubernetes/kubernetes unless
said otherwise); the selector and budget arithmetic lives in ``tests/support/kubeselect.py``.

Objects and concurrency
  * Every object carries ``metadata.resourceVersion``, one cluster-wide counter bumped by every write, as
    etcd's revision is (``staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go``; clients must treat it
    as opaque). A list carries the counter at the time it was built.
  * ``PATCH`` (merge, strategic-merge treated as merge: only maps are patched here, JSON patch) and ``PUT``
    of a Node are optimistic: when the object the patch or body produces carries a ``resourceVersion``
    other than the current one, the answer is 409 Conflict ``Operation cannot be fulfilled on nodes "X":
    the object has been modified; please apply your changes to the latest version and try again``; without
    one a merge patch always applies and a Node update is unconditional
    (``registry/generic/registry/store.go`` Update, ``AllowUnconditionalUpdate`` of the node strategy).
    A ``resourceVersion`` of "0" is no precondition; one that is not an unsigned number is 500 from its
    parse (etcd3 ``APIObjectVersioner.ParseResourceVersion``).
  * A patch body that does not decode as its type (a merge patch that is no object, a JSON patch that is no
    list of operations) is 400 ``error decoding patch: ...``; a JSON patch that does not apply, whatever the
    cause (a failed ``test``, a missing path, an unknown op), is 422 Invalid ``the server rejected our
    request due to an error in our request`` (``endpoints/handlers/patch.go``).
  * Annotations (Nodes and Leases) are validated as ``ValidateAnnotations`` does: qualified-name keys, and
    keys and values together at most 262,144 bytes of UTF-8, else 422 Invalid ``<Kind> "X" is invalid:
    metadata.annotations: Too long: may not be more than 262144 bytes`` with the cause FieldValueTooLong.
Lists (``GET /api/v1/nodes``, ``/api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``)
  * ``labelSelector`` in the full set-based syntax; ``fieldSelector`` on the fields the resource indexes
    (anything else: 400 ``field label not supported``).
  * ``limit`` and ``continue``: a page holds at most ``limit`` items, and ``metadata.continue`` names the
    rest of the same consistent snapshot. :meth:`KubeApiServer.compact` plays etcd's compaction: every
    outstanding token then answers 410 Gone, reason ``Expired``, with a token for an inconsistent
    remainder in ``metadata.continue`` (etcd3 ``store.go`` ``compactedContinue``). Only the 64 newest
    snapshots are kept; older tokens expire the same way. ``resourceVersion=0`` is served from the watch
    cache, which may lag (API Concepts: "Any" resource version): the current state, or after
    :meth:`KubeApiServer.watch_cache_lags` the nodes and pods as they were then; a list without
    ``resourceVersion`` is a consistent read and always shows the current state.
Eviction (``POST .../pods/{name}/eviction``, ``pkg/registry/core/pod/storage/eviction.go``)
  * A Pending, Succeeded, Failed or terminating pod is deleted without looking at budgets.
  * Budgets of the pod's namespace whose selector selects it (``{}`` selects every pod, as policy/v1 has it;
    a missing or invalid selector none):
    several -> 500 ``This pod has more than one PodDisruptionBudget, which the eviction subresource does not
    support.``; one that the controller has not processed yet (``add_pdb(..., processed=False)``) -> 429
    with the cause ``DisruptionBudget`` and ``Retry-After: 10``; one that allows no disruption -> 429 with
    the cause ``DisruptionBudget`` (``The disruption budget X needs N healthy pods and has M currently``)
    and no Retry-After; otherwise the pod is deleted and the answer is 201 Created with a Status.
  * The budget's status is the disruption controller's (``disruption_controller_step``: disruption.go
    ``trySync``), stored on the object and served by ``GET /apis/policy/v1/.../poddisruptionbudgets``; an
    eviction reads it, spends one disruption and records the pod in ``status.disruptedPods`` (eviction.go
    ``checkAndDecrement``; more than 2,000 entries: 403). The next sync drops entries of pods gone or older
    than 2 minutes and counts the rest as not healthy. ``disruption_controller_auto`` (default) syncs before
    each eviction; off, evictions between two syncs see only the decrements.
  * ``minAvailable``/``maxUnavailable``, integers or percentages, as the disruption controller counts
    (``kubeselect.disruptions_allowed``: a scaled budget counts controllers' replicas, so pods without a
    controller allow nothing, and one over a DaemonSet's pods never computes: 429 'still being processed'),
    and the refusal's message as the eviction picks it.
  * A pod that is not Ready is deleted without spending the budget while the budget is met
    (currentHealthy >= desiredHealthy > 0), or always with ``unhealthyPodEvictionPolicy: AlwaysAllow``.
  * With ``graceful_evictions`` an evicted pod stays, terminating (``deletionTimestamp``), until
    :meth:`KubeApiServer.finish_termination` (its kubelet stopped it).
Throttling and outages
  * :meth:`KubeApiServer.throttle` makes the next matching requests answer as API Priority and Fairness
    (and max-in-flight) do: 429, ``Retry-After`` header, a ``text/plain`` body ``Too many requests, please
    try again later.`` (``staging/src/k8s.io/apiserver/pkg/server/filters/maxinflight.go``
    ``tooManyRequests``). :meth:`KubeApiServer.break_next` fails the next matching requests with a 5xx or
    a dropped connection; ``fail`` (``{"PATCH": 503}``) answers every request of a method with that status.
A node's own credential (``system:node:<name>``), as the Node authorizer and NodeRestriction limit it
  (``plugin/pkg/auth/authorizer/node/node_authorizer.go``, ``plugin/pkg/admission/noderestriction``):
  * its own Node only: get, patch and update it (never its taints); list nodes only with
    ``fieldSelector=metadata.name=<itself>`` (AuthorizeNodeWithSelectors);
  * pods: list only with ``fieldSelector=spec.nodeName=<itself>``; get, delete and evict only pods bound
    to it;
  * events: create, never read.
The function's credential (:meth:`KubeApiServer.function_kubeconfig`, user ``FUNCTION_USER``) under RBAC
  (``plugin/pkg/auth/authorizer/rbac``): only what the roles of deploy/rbac.yaml grant, the ClusterRole's
  rules everywhere and the Role's in its namespace; anything else 403 as :func:`_authorize` words it. Other
  users (the admin certificate, kubelets) are not held to RBAC here.
Leases (``coordination.k8s.io/v1``): see ``_lease``; a name that is no DNS subdomain is 422, a body naming
  another namespace than the URL 400, ``spec.renewTime``/``acquireTime`` decode as metav1.MicroTime (six
  fraction digits exactly, else 400; an offset is stored as UTC).
Events (``POST``/``GET`` ``.../events``): the legacy validation (an event without ``eventTime`` about a
cluster-scoped object lives in ``default``; one with ``eventTime`` needs ``action``, ``reportingComponent``
and ``reportingInstance``: :func:`_new_style_event_errors`), a name checked as a path segment only (``.``,
``..``, ``/``, ``%``: 422; no length limit for core v1), a name taken is 409.

Use it through :func:`kube_api_server` (a context manager) or the ``kube_api`` pytest fixture::

    from tests.support.kubeapi import kube_api  # noqa: F401  (in a conftest.py)

    def test_x(kube_api):
        kube_api.add_node("node-a", labels={"a": "b"})
        path = kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a")
        ...
        assert kube_api.nodes["node-a"]["metadata"]["labels"]["x"] == "y"
        assert kube_api.requests[-1].method == "PATCH"
"""

import base64
import calendar
import copy
import datetime
import itertools
import json
import os
import re
import socket
import ssl
import sys
import tempfile
import threading
import time
import typing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple, Union
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support import kubeselect
from tests.support.stop_now import shutdown_now

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
SNAPSHOTS_KEPT = 64
# apimachinery's validation of label keys and values (pkg/util/validation/validation.go: qualifiedNameFmt,
# labelValueFmt, DNS-1123 subdomain for a key's prefix)
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
NODE_FIELDS = ("metadata.name", "spec.unschedulable")  # pkg/registry/core/node/strategy.go NodeToSelectableFields
POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
              "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
              "status.nominatedNodeName")  # pkg/registry/core/pod/strategy.go ToSelectableFields
THROTTLED_TEXT = "Too many requests, please try again later.\n"
# apimachinery ValidateAnnotations (TotalAnnotationSizeLimitB): keys and values summed, in bytes
ANNOTATIONS_LIMIT = 256 * 1024
TOO_LONG = "Too long: may not be more than %d bytes" % ANNOTATIONS_LIMIT
# What the patch handler answers for any JSON patch that does not apply (apiserver endpoints/handlers/patch.go
# wraps evanphx/json-patch's error in a bare Invalid): no path, no reason of its own.
PATCH_REJECTED = "the server rejected our request due to an error in our request"
# metav1.MicroTime's wire form (RFC3339Micro): exactly six fraction digits; json decoding fails otherwise (400)
_MICRO_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})(Z|[+-]\d{2}:\d{2})\Z")
DELETION_TIMEOUT_S = 120  # pkg/controller/disruption/disruption.go DeletionTimeout
FUNCTION_USER = "ack-mig-hook-function-ram-role-id"  # the subject deploy/rbac.yaml's bindings name
MAX_DISRUPTED_PODS = 2000  # pkg/registry/core/pod/storage/eviction.go MaxDisruptedPodSize


class Recorded(typing.NamedTuple):
    method: str
    path: str
    query: str
    content_type: str
    body: Optional[object]  # parsed JSON, or None
    user: str  # the authenticated user: a certificate CN or "token:<name>"
    status: int
    connection: int = 0  # which TLS connection carried it (the same number: a kept-alive connection)
    at: float = 0.0  # time.monotonic() when it arrived: how long a client waited between two of its calls


class Hold(object):
    """One request kept waiting (:meth:`KubeApiServer.hold_next`): ``arrived`` is set when it comes in."""

    def __init__(self, method, path, timeout):
        # type: (str, str, float) -> None
        self.method, self.path, self.timeout = method, path, timeout
        self.arrived = threading.Event()
        self._released = threading.Event()

    def wait(self):
        # type: () -> None
        self.arrived.set()
        self._released.wait(self.timeout)

    def release(self):
        # type: () -> None
        self._released.set()


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
        parts = _pointer(op.get("path", ""))
        kind = op.get("op")
        try:
            parent = doc
            for part in parts[:-1]:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            if not parts or not isinstance(parent, (list, dict)):
                raise PatchError("nothing to apply %s to at %s" % (kind, op.get("path")))
            last = parts[-1]
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
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise PatchError("cannot apply %s at %s: %s" % (kind, op.get("path"), exc))
    return doc



class Refused(Exception):
    """An answer other than success: status, message, Status reason, details, extra headers."""

    def __init__(self, status, message, reason=None, details=None, headers=None, meta=None):
        super(Refused, self).__init__(message)
        self.status, self.message, self.details, self.headers = status, message, details, headers or {}
        self.meta = meta or {}
        self.reason = reason if reason is not None else {
            400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
            409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
            429: "TooManyRequests", 503: "ServiceUnavailable"}.get(status, "InternalError")


class Serialized(typing.NamedTuple):
    """An answer already written out as JSON (a list page, serialized under the lock)."""

    text: str


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text):
    # type: (str) -> float
    try:
        return calendar.timegm(time.strptime(str(text)[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return 0.0


def _list_key(obj):
    # type: (dict) -> str
    """Where a list goes on from: etcd3 lists keys in order and a continue token names the last key read
    (``staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go``: ``/registry/pods/<namespace>/<name>``,
    ``/registry/minions/<name>``), so a namespaced object's place is its namespace and name together."""
    meta = obj["metadata"]
    return "%s/%s" % (meta["namespace"], meta["name"]) if meta.get("namespace") else meta["name"]


def _token(snapshot, after):
    return base64.urlsafe_b64encode(json.dumps({"s": snapshot, "a": after}).encode()).decode().rstrip("=")


def _untoken(text):
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode())
        return int(data["s"]), str(data["a"])
    except (ValueError, KeyError, TypeError):
        raise Refused(400, "continue key is not valid: illegal base64 data")


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: a sixth client connecting at once (overlapping invocations) has its
    # SYN dropped and retransmits after a second. kube-apiserver (Go) listens with the system's somaxconn.
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A client that gave up (its deadline cut the connection, a test's lost answer) leaves the answer's write
        # failing: kube-apiserver logs nothing a client would see; socketserver prints a traceback to stderr.
        if isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError)):
            return
        super().handle_error(request, client_address)


class KubeApiServer:
    """The server's state and its HTTPS listener. Create with :func:`kube_api_server`."""

    def __init__(self, workdir, tokens=None):
        # type: (str, Optional[Dict[str, str]]) -> None
        self.workdir = workdir
        self.ca = CertificateAuthority()
        self.tokens = dict(tokens or {})  # token -> user name
        self.nodes = {}  # type: Dict[str, dict]
        self.pods = {}  # type: Dict[Tuple[str, str], dict]
        self.pdbs = {}  # type: Dict[Tuple[str, str], dict]
        self.graceful_evictions = False
        # The disruption controller (pkg/controller/disruption) writes each budget's status; an eviction reads
        # that stored status, spends one disruption and records the pod in status.disruptedPods
        # (eviction.go checkAndDecrement). True: the controller has caught up with every change when a request
        # arrives (a real one reacts within moments): its step runs before each eviction. False: it runs only
        # when a test calls disruption_controller_step(), to show the evictions between two of its syncs.
        self.disruption_controller_auto = True
        self._unprocessed = set()  # type: set  budgets the controller has not reached (add_pdb processed=False)
        self.events = {}  # type: Dict[Tuple[str, str], dict]
        self.leases = {}  # type: Dict[Tuple[str, str], dict]  coordination.k8s.io/v1
        # Other objects served as they are on GET (path -> object), e.g. a ClusterRole or a list of bindings.
        self.read_only = {}  # type: Dict[str, dict]
        self.requests = []  # type: List[Recorded]
        self.lock = threading.RLock()
        # The server's own wall clock, which it sends as every answer's Date header (Go's net/http writes one
        # on each response): a test plays a cluster whose clock is elsewhere than the invocations' by
        # setting it.
        self.clock = time.time  # type: Callable[[], float]
        self.rv = 1  # the cluster-wide resourceVersion counter
        # The watch cache a list with resourceVersion=0 is served from ("Any": API Concepts, Resource versions:
        # 'a "0" resource version request [may] return data at a much older resource version than the client
        # has previously observed ... due to partitions or stale caches'; cacher.go serves it without waiting).
        # None: the cache has caught up (such a list shows the current state); otherwise the view
        # (resourceVersion, nodes, pods) it lags at, from watch_cache_lags() until watch_cache_catches_up().
        # A list without resourceVersion is a consistent read and always shows the current state.
        self.watch_cache = None  # type: Optional[Tuple[str, Dict[str, dict], Dict[Tuple[str, str], dict]]]
        self._snapshots = {}  # type: Dict[int, Tuple[str, List[dict]]]  (list rv, items by name)
        self._snapshot_ids = itertools.count(1)
        self._connections = itertools.count(1)
        self._throttles = []  # type: List[list]  [remaining, retry_after, method or None, path prefix or None]
        self._holds = []  # type: List[Hold]  requests to keep waiting until a test releases them (hold_next)
        self._answers = []  # type: List[list]  [remaining, method, path, body text] (answer_next)
        # Called after every successful PATCH of a node (name, new object): lets a test play the
        # device plugin, e.g. publish capacity once the labels say success.
        self.on_node_patch = None  # type: Optional[Callable[[str, dict], None]]
        # Called with the server's lock held right after a PATCH of a node is stored (name, new object): a
        # test can check an invariant of all nodes at that exact instant, before any other write lands.
        self.on_node_stored = None  # type: Optional[Callable[[str, dict], None]]
        # Called after each list page is built (path, whether it continued a list): a test can compact.
        self.on_list_page = None  # type: Optional[Callable[[str, int], None]]
        # A server (or a proxy in front of one) that never advances a list: a continued page hands back the
        # very continue token it was asked with, so the same page comes again for as long as it is followed.
        self.repeat_continue = False
        # Status to answer with instead of serving, e.g. {"GET": 503}: outage tests.
        self.fail = {}  # type: Dict[str, int]
        # RBAC (enforce_rbac): user -> the rules bound to it, (namespace or None for cluster-wide, apiGroups,
        # resources, verbs, resourceNames). A user named here gets only those; one not named (the admin
        # certificate, a kubelet under the Node authorizer's rules) is not limited by them.
        self.rbac = {}  # type: Dict[str, List[Tuple[Optional[str], list, list, list, list]]]
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
        self.httpd = _Server(("127.0.0.1", 0), _handler_for(self))
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
        shutdown_now(self.httpd)
        self.httpd.server_close()

    # --- objects: every write stores a new dict with the next resourceVersion --------------------

    @staticmethod
    def label_problem(labels):
        # type: (Any) -> Optional[str]
        """What kube-apiserver's validation (apimachinery ValidateLabels) says of ``metadata.labels``, word for
        word, or None: a key is an optional DNS-1123 subdomain prefix and ``/`` and a name of at most 63
        characters; a value is empty or at most 63 characters, alphanumeric at both ends, ``-_.`` inside
        (no space: an NVML name such as "NVIDIA A100-SXM4-80GB" is no label value)."""
        for key, value in sorted((labels or {}).items()):
            prefix, _, name = key.rpartition("/")
            if not _LABEL_NAME.match(name) or len(name) > 63 or (prefix and (len(prefix) > 253 or
                                                                             not _DNS_SUBDOMAIN.match(prefix))):
                return ("metadata.labels: Invalid value: %s: name part must consist of alphanumeric characters, "
                        "'-', '_' or '.', and must start and end with an alphanumeric character"
                        % json.dumps(key))
            if not isinstance(value, str) or len(value) > 63:
                return "metadata.labels: Invalid value: %s: must be no more than 63 characters" % json.dumps(value)
            if not _LABEL_VALUE.match(value):
                return ("metadata.labels: Invalid value: %s: a valid label must be an empty string or consist of "
                        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                        "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')" % json.dumps(value))
        return None

    @staticmethod
    def annotation_problem(annotations):
        # type: (Any) -> Optional[Tuple[str, str]]
        """What apimachinery's ValidateAnnotations says of ``metadata.annotations``: (the cause's reason, its
        message) or None. A key is a qualified name (checked lower-cased, as upstream does); keys and values
        together may hold at most 262,144 bytes of UTF-8, a bound a Node reaches when its kubelet or another
        controller keeps large annotations on it."""
        total = 0
        for key, value in sorted((annotations or {}).items()):
            prefix, _, name = key.lower().rpartition("/")
            if not _LABEL_NAME.match(name) or len(name) > 63 or (prefix and (len(prefix) > 253 or
                                                                             not _DNS_SUBDOMAIN.match(prefix))):
                return ("FieldValueInvalid", "Invalid value: %s: name part must consist of alphanumeric characters, "
                        "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
                        "'my.name',  or '123-abc', regex used for validation is "
                        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')" % json.dumps(key))
            total += len(key.encode("utf-8")) + len(str(value).encode("utf-8"))
        if total > ANNOTATIONS_LIMIT:
            return "FieldValueTooLong", TOO_LONG
        return None

    def _stamp(self, obj):
        # type: (dict) -> dict
        with self.lock:
            self.rv += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    def put_node(self, node):
        # type: (dict) -> dict
        """Store a whole Node object as given (a new resourceVersion). Labels the real server would refuse
        are refused here too (a test cannot build a cluster that cannot exist)."""
        problem = self.label_problem((node.get("metadata") or {}).get("labels"))
        if problem:
            raise ValueError('Node "%s" is invalid: %s' % ((node.get("metadata") or {}).get("name"), problem))
        _refuse_annotations(node, "Node", None)
        node = self._stamp(copy.deepcopy(node))
        node["metadata"].setdefault("uid", "node-uid-%s" % node["metadata"]["name"])
        with self.lock:
            self.nodes[node["metadata"]["name"]] = node
        return node

    def add_node(self, name, labels=None, annotations=None, taints=None, capacity=None, unschedulable=False):
        # type: (str, Optional[dict], Optional[dict], Optional[list], Optional[dict], bool) -> dict
        spec = {}  # type: Dict[str, Any]
        if taints:
            spec["taints"] = list(taints)
        if unschedulable:
            spec["unschedulable"] = True
        return self.put_node({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {}),
                         "creationTimestamp": _now()},
            "spec": spec,
            "status": {"capacity": dict(capacity or {}), "allocatable": dict(capacity or {})}})

    def update_node(self, name, change):
        # type: (str, Callable[[dict], None]) -> dict
        """A write by another party (the node's kubelet, the device plugin, a person): ``change`` edits a
        copy, which is stored with the next resourceVersion."""
        with self.lock:
            node = copy.deepcopy(self.nodes[name])
            change(node)
            _refuse_annotations(node, "Node", None)  # the API refuses the other party's write too
            self.nodes[name] = self._stamp(node)
            return self.nodes[name]

    def label_node(self, name, labels):
        # type: (str, dict) -> dict
        """What the node's own label patch does (None deletes a label)."""
        return self._merge_metadata(name, "labels", labels)

    def annotate_node(self, name, annotations):
        # type: (str, dict) -> dict
        """A merge patch of the node's annotations (None deletes one), as a test's actor writes them."""
        return self._merge_metadata(name, "annotations", annotations)

    def _merge_metadata(self, name, part, values):
        # type: (str, str, dict) -> dict
        def change(node):
            target = node["metadata"].setdefault(part, {})
            for key, value in values.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
        return self.update_node(name, change)

    def set_capacity(self, name, capacity):
        # type: (str, dict) -> None
        def change(node):
            status = node.setdefault("status", {})
            status["capacity"] = dict(capacity)
            status["allocatable"] = dict(capacity)
        self.update_node(name, change)

    def add_pod(self, namespace, name, node_name, labels=None, gpus=0, owner_kind=None, annotations=None,
                phase="Running", resources=None, init_resources=None, volumes=None, resource_claims=None,
                controller=True):
        """``gpus``: the container's ``nvidia.com/gpu`` limit; ``resources``: other limits (e.g.
        ``{"aliyun.com/gpu-mem": "8"}``); ``init_resources``: an init container's; ``owner_kind``: e.g.
        DaemonSet, ReplicaSet (the controller reference unless ``controller=False``)."""
        limits = dict(resources or {})
        if gpus:
            limits["nvidia.com/gpu"] = str(gpus)
        container = {"name": "main", "resources": {"limits": limits} if limits else {}}
        spec = {"nodeName": node_name, "containers": [container]}  # type: Dict[str, Any]
        if init_resources:
            spec["initContainers"] = [{"name": "init", "resources": {"limits": dict(init_resources)}}]
        if volumes:
            spec["volumes"] = list(volumes)
        if resource_claims:
            spec["resourceClaims"] = list(resource_claims)
        meta = {"name": name, "namespace": namespace, "labels": dict(labels or {}), "uid": "pod-uid-%s" % name,
                "creationTimestamp": _now()}  # type: Dict[str, Any]
        if owner_kind:
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": name + "-owner",
                                        "uid": "owner-uid", "controller": controller}]
        if annotations:
            meta["annotations"] = dict(annotations)
        pod = self._stamp({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                           "status": {"phase": phase}})
        with self.lock:
            self.pods[(namespace, name)] = pod
        return pod

    def add_pdb(self, namespace, name, match_labels=None, min_available=None, max_unavailable=None,
                match_expressions=None, processed=True):
        # type: (str, str, Optional[dict], Any, Any, Optional[list], bool) -> dict
        """A PodDisruptionBudget; ``processed=False``: the disruption controller has not seen it yet."""
        selector = {}  # type: Dict[str, Any]
        if match_labels is not None:
            selector["matchLabels"] = dict(match_labels)
        if match_expressions is not None:
            selector["matchExpressions"] = list(match_expressions)
        spec = {"selector": selector}  # type: Dict[str, Any]
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        pdb = self._stamp({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                           "metadata": {"name": name, "namespace": namespace, "generation": 1}, "spec": spec,
                           "status": {"observedGeneration": 0, "disruptionsAllowed": 0, "currentHealthy": 0,
                                      "desiredHealthy": 0, "expectedPods": 0}})
        with self.lock:
            self.pdbs[(namespace, name)] = pdb
            if not processed:
                self._unprocessed.add((namespace, name))
        self.disruption_controller_step()
        return self.pdbs[(namespace, name)]

    def disruption_controller_step(self, now=None):
        # type: (Optional[float]) -> None
        """One sync of every budget, as pkg/controller/disruption/disruption.go ``trySync`` does:
        ``buildDisruptedPodMap`` keeps an entry of status.disruptedPods only for a pod still there, not
        terminating, and evicted less than ``DeletionTimeout`` (2 minutes) ago; ``countHealthyPods`` counts
        Ready pods that are neither terminating nor in that map; ``updatePdbStatus`` writes expectedPods,
        desiredHealthy, currentHealthy, disruptionsAllowed and observedGeneration. A budget whose sync fails
        (``failSafe``: a scaled budget over pods without a scale subresource) gets disruptionsAllowed 0 and the
        condition DisruptionAllowed=False, reason SyncFailed, and its observedGeneration is not advanced."""
        now = time.time() if now is None else now
        with self.lock:
            for key, pdb in list(self.pdbs.items()):
                if key in self._unprocessed:
                    continue
                namespace = key[0]
                selected = [p for (ns, _), p in sorted(self.pods.items())
                            if ns == namespace and kubeselect.pdb_selects(pdb, p["metadata"].get("labels") or {})]
                present = {p["metadata"]["name"]: p for p in selected}
                kept = {}
                for pod_name, when in ((pdb.get("status") or {}).get("disruptedPods") or {}).items():
                    pod = present.get(pod_name)
                    if pod is None or pod["metadata"].get("deletionTimestamp"):
                        continue
                    if _epoch(when) + DELETION_TIMEOUT_S < now:
                        continue  # the eviction never led to a deletion: the pod counts again
                    kept[pod_name] = when
                counted = kubeselect.disruptions_allowed(pdb, selected, kept)
                status = dict(pdb.get("status") or {})
                status.update(expectedPods=counted["expectedPods"], desiredHealthy=counted["desiredHealthy"],
                              currentHealthy=counted["currentHealthy"],
                              disruptionsAllowed=counted["disruptionsAllowed"])
                if kept:
                    status["disruptedPods"] = kept
                else:
                    status.pop("disruptedPods", None)
                if counted["syncFailed"]:
                    status["conditions"] = [{"type": "DisruptionAllowed", "status": "False", "reason": "SyncFailed",
                                             "message": counted["syncFailed"]}]
                else:
                    status["observedGeneration"] = pdb["metadata"].get("generation", 1)
                    status["conditions"] = [{"type": "DisruptionAllowed",
                                             "status": "True" if counted["disruptionsAllowed"] > 0 else "False",
                                             "reason": "SufficientPods" if counted["disruptionsAllowed"] > 0
                                             else "InsufficientPods"}]
                if status != pdb.get("status"):
                    updated = copy.deepcopy(pdb)
                    updated["status"] = status
                    self.pdbs[key] = self._stamp(updated)

    def finish_termination(self, namespace, name):
        # type: (str, str) -> None
        """The kubelet has stopped a terminating pod: it leaves the API."""
        with self.lock:
            self.pods.pop((namespace, name), None)
            self.rv += 1

    def budget_status(self, namespace, name):
        # type: (str, str) -> Dict[str, int]
        """What the disruption controller would write in the budget's status now."""
        with self.lock:
            pdb = self.pdbs[(namespace, name)]
            selected = [p for (ns, _), p in sorted(self.pods.items())
                        if ns == namespace and kubeselect.pdb_selects(pdb, p["metadata"].get("labels") or {})]
            return kubeselect.disruptions_allowed(pdb, selected)

    def watch_cache_lags(self):
        """From now on lists with ``resourceVersion=0`` show the nodes and pods as they are at this moment
        (the watch cache stopped following etcd, e.g. an API server behind on its watch), however they change."""
        with self.lock:
            self.watch_cache = (str(self.rv), copy.deepcopy(self.nodes), copy.deepcopy(self.pods))

    def watch_cache_catches_up(self):
        with self.lock:
            self.watch_cache = None

    def compact(self):
        """etcd compaction: every continue token handed out so far expires (410 Expired)."""
        with self.lock:
            self._snapshots.clear()

    def throttle(self, times=1, retry_after=1, method=None, path=None):
        # type: (int, int, Optional[str], Optional[str]) -> None
        """The next ``times`` requests (of ``method``, under ``path``) are turned away as APF does."""
        with self.lock:
            self._throttles.append([times, retry_after, method, path])

    def break_next(self, times=1, status=503, method=None, path=None, message="injected failure", query=None):
        # type: (int, Optional[int], Optional[str], Optional[str], str, Optional[str]) -> None
        """The next ``times`` matching requests fail: with ``status`` (a Status body, as an overloaded or
        restarting API server answers, its ``message`` as given: e.g. the words RBAC or a webhook refuses
        with), or, with ``status=None``, the connection is closed unanswered. ``query``: only requests whose
        decoded query string holds it (one node's pod list: ``spec.nodeName=<node>``)."""
        with self.lock:
            self._throttles.append([times, ("break", status, message), method, path, query])

    def lose_answer_next(self, times=1, method=None, path=None):
        # type: (int, Optional[str], Optional[str]) -> None
        """The next ``times`` matching requests are served (a write is stored, its checks applied) and then the
        connection is closed with no answer: a write that landed but whose answer was lost on the way (a
        connection reset after the server wrote, a client timeout while the server goes on: kube-apiserver's
        timeout filter, k8s.io/apiserver pkg/server/filters/timeout.go, answers 504 and leaves the handler
        running, so the write may still land). The client cannot tell it from a write that never landed."""
        with self.lock:
            self._throttles.append([times, ("lost",), method, path, None])

    def hold_next(self, method, path, timeout=20.0):
        # type: (str, str, float) -> Hold
        """The next ``method`` request of exactly ``path`` waits, before it is served, until the test calls
        ``release()`` on what this returns (or ``timeout`` passes: a failing test never hangs the server):
        a slow answer placed where a test needs it, to shape a race between two clients."""
        hold = Hold(method, path, timeout)
        with self.lock:
            self._holds.append(hold)
        return hold

    def answer_next(self, method, path, body, times=1):
        # type: (str, str, Union[str, bytes], int) -> None
        """The next ``times`` ``method`` requests of exactly ``path`` are answered 200 with ``body`` (JSON text,
        or its bytes, sent as it is) instead of being served: what an aggregated API, a proxy or a webhook in front of the
        server may answer (a JSON list, a number, an object of another shape), which this server never builds."""
        with self.lock:
            self._answers.append([times, method, path, body])

    def _answered(self, method, path):
        # type: (str, str) -> Optional[str]
        with self.lock:
            for entry in self._answers:
                if entry[0] > 0 and (entry[1], entry[2]) == (method, path):
                    entry[0] -= 1
                    return entry[3]
        return None

    def _held(self, method, path):
        # type: (str, str) -> Optional[Hold]
        with self.lock:
            for hold in self._holds:
                if (hold.method, hold.path) == (method, path):
                    self._holds.remove(hold)
                    return hold
        return None

    def _throttled(self, method, path, query=""):
        # type: (str, str, str) -> Any
        with self.lock:
            for entry in self._throttles:
                if entry[0] > 0 and entry[2] in (None, method) and (entry[3] is None or path.startswith(entry[3])) \
                        and (len(entry) < 5 or entry[4] is None or entry[4] in query):
                    entry[0] -= 1
                    return entry[1]
        return None


    # --- credentials ----------------------------------------------------------------------------

    def enforce_rbac(self, user, documents):
        # type: (str, List[dict]) -> None
        """Authorize ``user`` as the RBAC authorizer does (plugin/pkg/auth/authorizer/rbac/rbac.go,
        pkg/apis/rbac/v1/evaluation_helpers.go RuleAllows) with the roles of ``documents`` (e.g.
        deploy/rbac.yaml's) bound to it: a ClusterRole by a ClusterRoleBinding (every namespace and the
        cluster scope), a Role by a RoleBinding in its own namespace only. Every other request of that user
        is 403 Forbidden with the words of k8s.io/apiserver endpoints/handlers/responsewriters/errors.go
        ``forbiddenMessage`` wrapped by apimachinery's ``NewForbidden``."""
        rules = []  # type: List[Tuple[Optional[str], list, list, list, list]]
        for doc in documents:
            if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
                continue
            namespace = (doc.get("metadata") or {}).get("namespace") if doc["kind"] == "Role" else None
            for rule in doc.get("rules") or []:
                rules.append((namespace, rule.get("apiGroups") or [], rule.get("resources") or [],
                              rule.get("verbs") or [], rule.get("resourceNames") or []))
        with self.lock:
            self.rbac[user] = rules

    def function_cert(self, user=FUNCTION_USER):
        # type: (str) -> Cert
        """The function's credential as ACK issues it for its RAM role: a user with no group that
        grants anything (bind it with :meth:`enforce_rbac`)."""
        return self.ca.issue(user)

    def function_kubeconfig(self, path, inline=False):
        # type: (typing.Any, bool) -> str
        """A kubeconfig of the function's own identity, which this server then authorizes with exactly the
        RBAC the product deploys (deploy/rbac.yaml): a call outside it is 403, as on a real cluster."""
        self.enforce_rbac(FUNCTION_USER, deploy_rbac_documents())
        return self.write_kubeconfig(path, cert=self.function_cert(), inline=inline, user="function")

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


def _invalid(kind, group, name, field, cause):
    """422 Invalid as the registry's validation answers it (apimachinery errors.NewInvalid): the message
    names the object and the field, the cause says why."""
    reason, message = cause
    details = {"name": name, "kind": kind, "causes": [{"reason": reason, "message": message, "field": field}]}
    if group:
        details["group"] = group
    return Refused(422, '%s "%s" is invalid: %s: %s' % (kind + ("." + group if group else ""), name, field, message),
                   reason="Invalid", details=details)


def _invalid_all(kind, name, errors):
    """422 Invalid naming every error, as errors.NewInvalid words more than one: ``[field: why, ...]``.
    ``errors``: (field, reason, message) each."""
    if len(errors) == 1:
        field, reason, message = errors[0]
        return _invalid(kind, "", name, field, (reason, message))
    text = "[%s]" % ", ".join("%s: %s" % (f, m) for f, _, m in errors)
    causes = [{"reason": r, "message": m, "field": f} for f, r, m in errors]
    return Refused(422, '%s "%s" is invalid: %s' % (kind, name, text), reason="Invalid",
                   details={"name": name, "kind": kind, "causes": causes})


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")


def _qualified_name_problems(value):
    """apimachinery validation.IsQualifiedName's messages (an optional DNS-subdomain prefix and ``/``)."""
    prefix, _, name = value.rpartition("/") if "/" in value else ("", "", value)
    out = []
    if "/" in value and not _DNS_SUBDOMAIN.match(prefix):
        out.append("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                   "'-' or '.', and must start and end with an alphanumeric character")
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME.match(name):
        out.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                   "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                   "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return out


def _new_style_event_errors(body, namespace):
    """legacyValidateEvent's rules for an Event carrying ``eventTime`` (pkg/apis/core/validation/events.go;
    core v1 names the controller field ``reportingComponent``): about a cluster-scoped object it lives in
    default or kube-system; reportingComponent is a qualified name, reportingInstance and action are required
    and at most 128 characters, reason too, the message at most 1024 (NoteLengthLimit)."""
    errors = []
    involved = body.get("involvedObject") or {}
    if not involved.get("namespace") and namespace not in ("default", "kube-system"):
        errors.append(("involvedObject.namespace", "FieldValueInvalid",
                       'Invalid value: "": does not match event.namespace'))
    component = str(body.get("reportingComponent") or "")
    if not component:
        errors.append(("reportingComponent", "FieldValueRequired", "Required value"))
    errors.extend(("reportingComponent", "FieldValueInvalid", "Invalid value: %s: %s" % (json.dumps(component), why))
                  for why in _qualified_name_problems(component))
    for field, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
        value = str(body.get(field) or "")
        if not value:
            errors.append((field, "FieldValueRequired", "Required value"))
        elif len(value) > limit:
            errors.append((field, "FieldValueInvalid", 'Invalid value: "": can have at most %d characters' % limit))
    if len(str(body.get("message") or "")) > 1024:
        errors.append(("message", "FieldValueInvalid", 'Invalid value: "": can have at most 1024 characters'))
    return errors


def _refuse_annotations(obj, kind, group):
    """Refused (422) for annotations the API server refuses; ValueError for a test's own setup (``group``
    None on a Node: put_node, update_node), so no test builds a Node that cannot exist."""
    meta = obj.get("metadata") or {}
    problem = KubeApiServer.annotation_problem(meta.get("annotations"))
    if problem is None:
        return
    refused = _invalid(kind, group, meta.get("name"), "metadata.annotations", problem)
    if group is None and kind == "Node":
        raise ValueError(refused.message)
    raise refused


def _precondition(version):
    # type: (Any) -> Optional[str]
    """The resourceVersion a write is conditional on, as storage parses it (etcd3 APIObjectVersioner
    ParseResourceVersion): none for "" or "0", a 500 for one that is not an unsigned number."""
    if version in (None, ""):
        return None
    text = str(version)
    if not text.isdigit():
        raise Refused(500, 'strconv.ParseUint: parsing %s: invalid syntax' % json.dumps(text), reason="")
    return None if int(text) == 0 else text


def _micro_time(value, field):
    # type: (Any, str) -> Any
    """metav1.MicroTime decoded as the API server does (RFC3339Micro, six fraction digits exactly), written
    back in UTC; 400 for anything else, before any validation."""
    if value is None:
        return None
    m = _MICRO_TIME.match(value) if isinstance(value, str) else None
    if m is None:
        raise Refused(400, 'Lease in version "v1" cannot be handled as a Lease: parsing time %s as '
                           '"2006-01-02T15:04:05.000000Z07:00": cannot parse %s (%s; which part failed is not '
                           'modelled)' % (json.dumps(str(value)), json.dumps(str(value)), field),
                      reason="BadRequest")
    zone = m.group(8)
    offset = 0 if zone == "Z" else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 60 + int(zone[4:6]))
    at = datetime.datetime(*(int(g) for g in m.groups()[:7])) - datetime.timedelta(minutes=offset)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_kind(value):
    # type: (Any) -> str
    """The JSON type Go's decoder names in an unmarshal error."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else "null"


def _conflict(kind, name):
    return Refused(409, 'Operation cannot be fulfilled on %s "%s": the object has been modified; please apply '
                        'your changes to the latest version and try again' % (kind, name),
                   details={"name": name, "kind": kind})


def _node_of(user):
    # type: (str) -> Optional[str]
    return user[len("system:node:"):] if user.startswith("system:node:") else None


def deploy_rbac_documents():
    # type: () -> List[dict]
    """The ClusterRole, Role and bindings of deploy/rbac.yaml (the stack's ClusterRbac holds the same rules:
    tests/function/test_template.py compares them)."""
    import yaml

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "deploy", "rbac.yaml")) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def _request_attributes(method, segs, query):
    # type: (str, List[str], Dict[str, List[str]]) -> Tuple[str, str, str, str, str]
    """(verb, apiGroup, resource[/subresource], namespace, name) of a resource request, as
    k8s.io/apiserver pkg/endpoints/request/requestinfo.go RequestInfoFactory derives them."""
    rest = segs[2:] if segs[:1] == ["api"] else segs[3:]
    group = "" if segs[:1] == ["api"] else (segs[1] if len(segs) > 1 else "")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    elif len(rest) == 2 and rest[0] == "namespaces":  # the Namespace object itself
        namespace = rest[1]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource += "/" + rest[2]
    if method == "GET":
        verb = "get" if name else ("watch" if (query.get("watch") or [""])[0] in ("1", "true") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}.get(method, method.lower())
    return verb, group, resource, namespace, name


def _authorize(rules, user, method, segs, query):
    """RBAC: allowed when one bound rule covers the verb, group, resource (and name, where the rule lists
    resourceNames) in the request's namespace (a Role's rules) or anywhere (a ClusterRole's); otherwise
    403 Forbidden (responsewriters.forbiddenMessage; apierrors.NewForbidden: '<resource>.<group> "<name>"
    is forbidden: ...', details name, group and kind = the resource)."""
    verb, group, resource, namespace, name = _request_attributes(method, segs, query)
    for scope, groups, resources, verbs, names in rules:
        if scope is not None and scope != namespace:
            continue
        if (("*" in groups or group in groups) and ("*" in resources or resource in resources)
                and ("*" in verbs or verb in verbs) and (not names or name in names)):
            return
    base = resource.split("/")[0]
    qualified = base + ("." + group if group else "")
    where = ("in the namespace %s" % json.dumps(namespace)) if namespace else "at the cluster scope"
    raise Refused(403, '%s%s is forbidden: User %s cannot %s resource %s in API group %s %s'
                  % (qualified, ' "%s"' % name if name else "", json.dumps(user), verb, json.dumps(resource),
                     json.dumps(group), where),
                  details={"name": name, "group": group, "kind": base} if name else {"group": group, "kind": base})


def _handler_for(api):
    # type: (KubeApiServer) -> type

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 60  # an idle kept-alive connection is closed after this long

        def setup(self):
            BaseHTTPRequestHandler.setup(self)
            # The headers and the body go out as two writes: without TCP_NODELAY, Nagle holds the body until
            # the client's delayed ACK of the headers, 40 ms on every answer (kube-apiserver, a Go server,
            # sets TCP_NODELAY on every connection, the Go net package's default).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connection_number = next(api._connections)

        def log_message(self, fmt, *args):  # keep test output clean
            pass

        def date_time_string(self, timestamp=None):  # the Date header: the server's clock
            return BaseHTTPRequestHandler.date_time_string(self, api.clock() if timestamp is None else timestamp)

        def _user(self):
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Bearer "):
                name = api.tokens.get(auth[len("Bearer "):])
                return "token:%s" % name if name else None
            return _cn(self.connection.getpeercert())

        def _send(self, status, body, content_type, record, headers=None):
            # Recorded before the answer goes out: a test that reads api.requests once its call returned
            # sees the call.
            with api.lock:
                api.requests.append(record._replace(status=status))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _reply(self, status, obj, record):
            text = obj.text if isinstance(obj, Serialized) else json.dumps(obj)
            self._send(status, text.encode(), "application/json", record)

        def _refuse(self, refused, record):
            status = {"kind": "Status", "apiVersion": "v1", "metadata": refused.meta, "status": "Failure",
                      "message": refused.message, "code": refused.status}
            if refused.reason:
                status["reason"] = refused.reason
            if refused.details is not None:
                status["details"] = refused.details
            self._send(refused.status, json.dumps(status).encode(), "application/json", record, refused.headers)

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
            record = Recorded(method, unquote(parts.path), parts.query, ctype, body, user or "", 0,
                              self.connection_number, time.monotonic())
            if user is None:
                return self._refuse(Refused(401, "Unauthorized"), record)
            hold = api._held(method, record.path)
            if hold is not None:
                hold.wait()
            injected = api._throttled(method, record.path, unquote(parts.query))
            if injected == ("lost",):  # served, then the connection drops: the write landed, its answer is lost
                try:
                    self._route(method, [unquote(s) for s in parts.path.strip("/").split("/")],
                                parse_qs(parts.query), ctype, body, raw, user)
                except (Refused, kubeselect.SelectorError):
                    pass  # refused: nothing landed, and the refusal is lost as well
                with api.lock:
                    api.requests.append(record._replace(status=0))
                self.close_connection = True
                return None
            if isinstance(injected, tuple) and injected[1] is None:  # the connection drops, no answer
                with api.lock:
                    api.requests.append(record._replace(status=0))
                self.close_connection = True
                return None
            if isinstance(injected, tuple):
                return self._refuse(Refused(injected[1], injected[2]), record)
            if injected is not None:
                return self._send(429, THROTTLED_TEXT.encode(), "text/plain; charset=utf-8", record,
                                  {"Retry-After": str(injected), "X-Content-Type-Options": "nosniff"})
            if method in api.fail:
                return self._refuse(Refused(api.fail[method], "injected failure"), record)
            answer = api._answered(method, record.path)
            if answer is not None:
                return self._send(200, answer if isinstance(answer, bytes) else answer.encode(), "application/json",
                                  record)
            try:
                status, obj = self._route(method, [unquote(s) for s in parts.path.strip("/").split("/")],
                                          parse_qs(parts.query), ctype, body, raw, user)
            except Refused as refused:
                return self._refuse(refused, record)
            except kubeselect.SelectorError as exc:
                return self._refuse(Refused(400, str(exc)), record)
            return self._reply(status, obj, record)

        def _route(self, method, segs, query, ctype, body, raw, user):
            if user in api.rbac:
                _authorize(api.rbac[user], user, method, segs, query)
            if segs[:3] == ["api", "v1", "nodes"] and len(segs) == 3 and method == "GET":
                return 200, self._list_nodes(query, user)
            if segs[:3] == ["api", "v1", "nodes"] and len(segs) == 4:
                return self._node(method, segs[3], ctype, body, raw, user)
            if (segs[:3] == ["api", "v1", "namespaces"] and len(segs) == 7 and segs[4] == "pods"
                    and segs[6] == "eviction" and method == "POST"):
                return self._evict(segs[3], segs[5], body, user)
            if segs[:2] == ["api", "v1"] and method == "GET" and (
                    segs[2:] == ["pods"] or (len(segs) == 5 and segs[2] == "namespaces" and segs[4] == "pods")):
                return 200, self._list_pods(segs[3] if len(segs) == 5 else None, query, user)
            if segs[:3] == ["api", "v1", "namespaces"] and len(segs) == 6 and segs[4] == "pods":
                return self._pod(method, segs[3], segs[5], user)
            if segs[:2] == ["api", "v1"] and (segs[2:] == ["events"] or (
                    len(segs) == 5 and segs[2] == "namespaces" and segs[4] == "events")):
                return self._events(method, segs[3] if len(segs) == 5 else None, query, body, user)
            if segs[:4] == ["apis", "policy", "v1", "namespaces"] and len(segs) in (6, 7) \
                    and segs[5] == "poddisruptionbudgets" and method == "GET":
                with api.lock:
                    if len(segs) == 7:
                        pdb = api.pdbs.get((segs[4], segs[6]))
                        if pdb is None:
                            raise Refused(404, 'poddisruptionbudgets.policy "%s" not found' % segs[6], reason="NotFound")
                        return 200, copy.deepcopy(pdb)
                    return 200, {"kind": "PodDisruptionBudgetList", "apiVersion": "policy/v1",
                                 "metadata": {"resourceVersion": str(api.rv)},
                                 "items": [copy.deepcopy(b) for (ns, _), b in sorted(api.pdbs.items()) if ns == segs[4]]}
            if segs[:5] == ["apis", "coordination.k8s.io", "v1", "namespaces", segs[4] if len(segs) > 4 else ""] \
                    and len(segs) in (6, 7) and segs[5] == "leases":
                return self._lease(method, segs[4], segs[6] if len(segs) == 7 else None, body, user)
            if method == "GET" and "/" + "/".join(segs) in api.read_only:  # e.g. RBAC objects for doctor
                with api.lock:
                    return 200, copy.deepcopy(api.read_only["/" + "/".join(segs)])
            raise Refused(404, "the server could not find the requested resource")

        # ---- lists ----

        def _page(self, kind, path, items, query, cache_rv=None):
            """One page of a list: a new consistent snapshot for a first page, the snapshot a continue
            token names for the next ones (410 Expired once compacted away). ``cache_rv``: the items are the
            lagging watch cache's, at that resourceVersion."""
            limit_text = (query.get("limit") or ["0"])[0]
            limit = int(limit_text) if limit_text.isdigit() else 0
            token = (query.get("continue") or [""])[0]
            with api.lock:
                if token:
                    snap_id, after = _untoken(token)
                    if snap_id not in api._snapshots:
                        fresh = next(api._snapshot_ids)
                        api._snapshots[fresh] = (str(api.rv), items)
                        raise _expired(_token(fresh, after))
                    list_rv, snapshot = api._snapshots[snap_id]
                else:
                    snap_id, after = next(api._snapshot_ids), ""
                    list_rv, snapshot = cache_rv or str(api.rv), items
                    api._snapshots[snap_id] = (list_rv, snapshot)
                    for old in sorted(api._snapshots)[:-SNAPSHOTS_KEPT]:
                        del api._snapshots[old]
                rest = [o for o in snapshot if _list_key(o) > after] if after else snapshot
                page = rest[:limit] if limit else rest
                meta = {"resourceVersion": list_rv}  # type: Dict[str, Any]
                if limit and len(rest) > limit:
                    meta["continue"] = token if token and api.repeat_continue else \
                        _token(snap_id, _list_key(page[-1]))
                    if not query.get("labelSelector") and not query.get("fieldSelector"):
                        meta["remainingItemCount"] = len(rest) - limit
                # Written out now, under the lock: the objects as they are at this moment (list items carry
                # no kind or apiVersion); 10,000 Nodes are not copied, only serialized page by page.
                text = json.dumps({"kind": kind, "apiVersion": "v1", "metadata": meta, "items": [
                    {k: v for k, v in item.items() if k not in ("apiVersion", "kind")} for item in page]})
            if api.on_list_page is not None:
                api.on_list_page(path, bool(token))
            return Serialized(text)

        def _list_nodes(self, query, user):
            fields = kubeselect.parse_fields((query.get("fieldSelector") or [""])[0], NODE_FIELDS)
            labels = kubeselect.parse_labels((query.get("labelSelector") or [""])[0])
            node = _node_of(user)
            if node is not None and ("metadata.name", "=", node) not in fields:
                raise Refused(403, 'nodes is forbidden: User "%s" cannot list resource "nodes" in API group "" '
                                   "at the cluster scope: node '%s' cannot read all nodes, only its own Node "
                                   "object" % (user, node))
            with api.lock:
                cached = self._cached(query)
                items = [n for _, n in sorted((cached[1] if cached else api.nodes).items())
                         if all(r(n["metadata"].get("labels") or {}) for r in labels)
                         and kubeselect.fields_match(fields, n)]
            return self._page("NodeList", "/api/v1/nodes", items, query, cached and cached[0])

        def _list_pods(self, namespace, query, user):
            fields = kubeselect.parse_fields((query.get("fieldSelector") or [""])[0], POD_FIELDS)
            labels = kubeselect.parse_labels((query.get("labelSelector") or [""])[0])
            node = _node_of(user)
            if node is not None and ("spec.nodeName", "=", node) not in fields:
                raise Refused(403, 'pods is forbidden: User "%s" cannot list resource "pods" in API group "" at '
                                   "the cluster scope: can only list/watch pods with spec.nodeName field "
                                   "selector" % user)
            with api.lock:
                cached = self._cached(query)
                pods = (cached[2] if cached else api.pods).items()
                items = [p for (ns, _), p in sorted(pods, key=lambda kv: "%s/%s" % kv[0])  # etcd's key order
                         if (namespace is None or ns == namespace)
                         and all(r(p["metadata"].get("labels") or {}) for r in labels)
                         and kubeselect.fields_match(fields, p)]
            return self._page("PodList", "/api/v1/pods", items, query, cached and cached[0])

        def _cached(self, query):
            """The lagging watch cache's view when the list asks ``resourceVersion=0`` (and has no continue
            token: a continued page is its own snapshot's), else None."""
            if api.watch_cache is None or query.get("continue") or (query.get("resourceVersion") or [""])[0] != "0":
                return None
            return api.watch_cache

        # ---- nodes ----

        def _node(self, method, name, ctype, body, raw, user):
            node_user = _node_of(user)
            if node_user is not None and node_user != name:
                raise Refused(403, 'nodes "%s" is forbidden: User "%s" cannot %s resource "nodes" in API group '
                                   '"" at the cluster scope: node \'%s\' cannot read \'%s\', only its own Node '
                                   "object" % (name, user, method.lower(), node_user, name))
            with api.lock:
                current = api.nodes.get(name)
            if current is None:
                raise Refused(404, 'nodes "%s" not found' % name, details={"name": name, "kind": "nodes"})
            if method == "GET":
                return 200, current
            if method not in ("PATCH", "PUT"):
                raise Refused(405, "method not allowed")
            if body is None and raw:
                raise Refused(400, "body is not JSON")
            # A body that does not decode as its type is 400 (the handler's decode, endpoints/handlers/patch.go);
            # a JSON patch that decodes but does not apply is 422 with one message for every cause.
            if method == "PUT":
                given = ((body if isinstance(body, dict) else {}).get("metadata") or {}).get("name")
                if given != name:
                    raise Refused(400, "the name of the object (%s) does not match the name on the URL (%s)"
                                  % (given, name))
                updated = copy.deepcopy(body)
            elif ctype in (MERGE_PATCH, STRATEGIC_PATCH):
                if not isinstance(body, dict):
                    raise Refused(400, "error decoding patch: json: cannot unmarshal %s into Go value of type "
                                       "map[string]interface {}" % _json_kind(body))
                updated = _merge(current, body)
            elif ctype == JSON_PATCH:
                odd = [op for op in body if not isinstance(op, dict)] if isinstance(body, list) else [body]
                if odd:  # the list itself, or an operation in it, of another JSON type
                    raise Refused(400, "error decoding patch: json: cannot unmarshal %s into Go value of type "
                                       "%shandlers.jsonPatchOp" % (_json_kind(odd[0]),
                                                                   "" if isinstance(body, list) else "[]"))
                try:
                    updated = _json_patch(current, body)
                except PatchError:
                    raise Refused(422, PATCH_REJECTED, details={})
            else:
                raise Refused(415, "the body of the request was in an unknown format - accepted media types "
                                   "include: application/json-patch+json, application/merge-patch+json, "
                                   "application/apply-patch+yaml")
            problem = api.label_problem((updated.get("metadata") or {}).get("labels"))
            if problem:
                raise Refused(422, 'Node "%s" is invalid: %s' % (name, problem))
            _refuse_annotations(updated, "Node", "")
            taints_before = (current.get("spec") or {}).get("taints")
            if node_user is not None and (updated.get("spec") or {}).get("taints") != taints_before:
                # NodeRestriction: the kubelet may label its own node but never touch its taints.
                raise Refused(403, 'node "%s" is not allowed to modify taints' % name)
            with api.lock:
                current = api.nodes.get(name)
                if current is None:
                    raise Refused(404, 'nodes "%s" not found' % name)
                wanted = _precondition((updated.get("metadata") or {}).get("resourceVersion"))
                if wanted and wanted != current["metadata"]["resourceVersion"]:
                    raise _conflict("nodes", name)
                api.nodes[name] = stored = api._stamp(updated)
                if api.on_node_stored is not None:
                    api.on_node_stored(name, stored)
            if api.on_node_patch is not None:
                api.on_node_patch(name, stored)
            return 200, stored

        # ---- pods and evictions ----

        def _pod(self, method, namespace, name, user):
            with api.lock:
                pod = api.pods.get((namespace, name))
            node_user = _node_of(user)
            if pod is None:
                raise Refused(404, 'pods "%s" not found' % name, details={"name": name, "kind": "pods"})
            if node_user is not None and pod["spec"].get("nodeName") != node_user:
                raise Refused(403, 'pods "%s" is forbidden: node "%s" can only %s pods with spec.nodeName set to '
                                   "itself" % (name, node_user, "delete" if method == "DELETE" else "get"))
            if method == "GET":
                return 200, pod
            if method != "DELETE":
                raise Refused(405, "method not allowed")
            with api.lock:
                api.pods.pop((namespace, name), None)
                api.rv += 1
            return 200, pod

        def _evict(self, namespace, name, body, user):
            if not isinstance(body, dict) or (body.get("metadata") or {}).get("name") != name:
                raise Refused(400, "name in URL does not match name in Eviction object")
            with api.lock:
                pod = api.pods.get((namespace, name))
                if pod is None:
                    raise Refused(404, 'pods "%s" not found' % name, details={"name": name, "kind": "pods"})
                node_user = _node_of(user)
                if node_user is not None and pod["spec"].get("nodeName") != node_user:
                    raise Refused(403, 'pods "%s" is forbidden: node "%s" can only evict pods with spec.nodeName '
                                       "set to itself" % (name, node_user))
                phase = (pod.get("status") or {}).get("phase", "Running")
                ignore = phase in ("Pending", "Succeeded", "Failed") or bool(pod["metadata"].get("deletionTimestamp"))
                if not ignore:
                    labels = pod["metadata"].get("labels") or {}
                    budgets = [b for (ns, _), b in sorted(api.pdbs.items())
                               if ns == namespace and kubeselect.pdb_selects(b, labels)]
                    if len(budgets) > 1:
                        raise Refused(500, "This pod has more than one PodDisruptionBudget, which the eviction "
                                           "subresource does not support.", reason="")
                    if budgets:
                        if api.disruption_controller_auto:
                            api.disruption_controller_step()
                        pdb = api.pdbs[(namespace, budgets[0]["metadata"]["name"])]
                        pdb_name = pdb["metadata"]["name"]
                        status = pdb.get("status") or {}  # as the controller last wrote it, never counted here
                        failed = any(c.get("reason") == "SyncFailed" for c in status.get("conditions") or [])
                        if not kubeselect.pod_ready(pod) and (
                                pdb["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
                                or status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0):
                            budgets = []  # an unready pod while the budget is met: deleted, nothing spent
                    if budgets:
                        # A budget whose sync fails (failSafe) never records an observedGeneration: taken here
                        # as one that never computed, the usual case (a DaemonSet's pods under a scaled budget).
                        if status.get("observedGeneration", 0) < pdb["metadata"].get("generation", 1) or failed:
                            raise Refused(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                                          details={"causes": [{"reason": "DisruptionBudget", "type": "DisruptionBudget",
                                                               "message": "The disruption budget %s is still being "
                                                                          "processed by the server." % pdb_name}],
                                                   "retryAfterSeconds": 10}, headers={"Retry-After": "10"})
                        if status.get("disruptionsAllowed", 0) < 1:
                            if status.get("currentHealthy", 0) <= status.get("desiredHealthy", 0):
                                why = "The disruption budget %s needs %d healthy pods and has %d currently" % (
                                    pdb_name, status.get("desiredHealthy", 0), status.get("currentHealthy", 0))
                            else:
                                why = "The disruption budget %s does not allow evicting pods currently" % pdb_name
                            raise Refused(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                                          details={"causes": [{"reason": "DisruptionBudget", "type": "DisruptionBudget",
                                                               "message": why}]})
                        disrupted = dict(status.get("disruptedPods") or {})
                        if len(disrupted) > MAX_DISRUPTED_PODS:
                            raise Refused(403, "DisruptedPods map too big - too many evictions not confirmed by PDB "
                                               "controller")
                        # checkAndDecrement: one disruption spent, the pod recorded, until the controller's next
                        # sync sees it go (the budget's own write: a new resourceVersion)
                        disrupted[name] = _now()
                        spent = copy.deepcopy(pdb)
                        spent["status"] = dict(status, disruptionsAllowed=status["disruptionsAllowed"] - 1,
                                               disruptedPods=disrupted)
                        api.pdbs[(namespace, pdb_name)] = api._stamp(spent)
                if api.graceful_evictions and phase not in ("Succeeded", "Failed"):
                    if not pod["metadata"].get("deletionTimestamp"):
                        terminating = copy.deepcopy(pod)
                        terminating["metadata"]["deletionTimestamp"] = _now()
                        api.pods[(namespace, name)] = api._stamp(terminating)
                else:
                    del api.pods[(namespace, name)]
                    api.rv += 1
            return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

        # ---- events ----

        def _events(self, method, namespace, query, body, user):
            if method == "GET":
                if _node_of(user) is not None:  # system:node may write events, never read them
                    raise Refused(403, 'events is forbidden: User "%s" cannot list resource "events"' % user)
                terms = [t.partition("=") for t in (query.get("fieldSelector") or [""])[0].split(",") if t]
                with api.lock:
                    items = [copy.deepcopy(e) for (ns, _), e in sorted(api.events.items())
                             if (namespace is None or ns == namespace)
                             and all(kubeselect._field_value(e, k.strip()) == v for k, _, v in terms)]
                return 200, {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": str(api.rv)},
                             "items": items}
            if method != "POST" or namespace is None:
                raise Refused(405, "method not allowed")
            if not isinstance(body, dict):
                raise Refused(400, "body is not a JSON object")
            meta = body.get("metadata") or {}
            if meta.get("namespace") not in (None, "", namespace):
                raise Refused(400, "the namespace of the provided object does not match the namespace sent on "
                                   "the request")
            name = meta.get("name")
            if not name:
                raise Refused(422, "metadata.name: Required value: name or generateName is required")
            # A core v1 Event's name is checked as a path segment only, with no length limit
            # (k8s.io/apiserver registry/rest/create.go BeforeCreate: content.IsPathSegmentName;
            # ValidateEventCreate applies NameIsDNSSubdomain to events.k8s.io/v1 alone): kubelet's
            # "<pod>.<hex ns>" of a 253-character pod name is 270 characters and is stored.
            wrong = ("may not be '%s'" % name if name in (".", "..") else
                     next(("may not contain '%s'" % c for c in "/%" if c in str(name)), None))
            if wrong:
                raise _invalid("Event", "", name, "metadata.name",
                               ("FieldValueInvalid", "Invalid value: %s: %s" % (json.dumps(name), wrong)))
            involved = body.get("involvedObject") or {}
            # legacyValidateEvent (pkg/apis/core/validation/events.go): an event without eventTime about a
            # cluster-scoped object must live in "default"; otherwise in the object's own namespace.
            if not body.get("eventTime") and (involved.get("namespace") or "default") != namespace:
                raise Refused(422, "involvedObject.namespace: Invalid value: %r: does not match event.namespace"
                              % (involved.get("namespace") or ""))
            problems = _new_style_event_errors(body, namespace) if body.get("eventTime") else []
            if problems:
                raise _invalid_all("Event", name, problems)
            event = copy.deepcopy(body)
            with api.lock:
                if (namespace, name) in api.events:
                    raise Refused(409, 'events "%s" already exists' % name, reason="AlreadyExists")
                event.setdefault("metadata", {}).update(namespace=namespace, uid="event-%d" % (len(api.events) + 1))
                api.events[(namespace, name)] = api._stamp(event)
            return 201, event

        def _lease(self, method, namespace, name, body, user):
            """coordination.k8s.io/v1 Leases as the generic registry (k8s.io/apiserver
            pkg/registry/generic/registry/store.go) serves them: create of an existing name is 409 AlreadyExists,
            a create carrying metadata.resourceVersion is 500 (rest.BeforeCreate's plain error); an update of a
            stored Lease must carry a resourceVersion (the lease strategy allows no unconditional update: 422
            Invalid) and one that is not the stored one is 409 Conflict; an update of a missing Lease creates it
            (the lease strategy's AllowCreateOnUpdate: 201, whatever resourceVersion it carries).
            The Node authorizer gives a kubelet its own Lease in kube-node-lease only (plugin/pkg/auth/
            authorizer/node/node_authorizer.go authorizeLease)."""
            if _node_of(user) is not None and namespace != "kube-node-lease":
                raise Refused(403, 'leases.coordination.k8s.io is forbidden: User "%s" cannot %s resource "leases" '
                                   'in API group "coordination.k8s.io" in the namespace "%s"'
                              % (user, method.lower(), namespace))
            key = (namespace, name)
            if method == "GET" and name is not None:
                with api.lock:
                    lease = api.leases.get(key)
                if lease is None:
                    raise Refused(404, 'leases.coordination.k8s.io "%s" not found' % name, reason="NotFound",
                                  details={"name": name, "group": "coordination.k8s.io", "kind": "leases"})
                return 200, copy.deepcopy(lease)
            if method not in ("POST", "PUT") or not isinstance(body, dict):
                raise Refused(405 if method not in ("POST", "PUT") else 400, "method not allowed or body not JSON")
            meta = body.get("metadata") or {}
            lease = copy.deepcopy(body)
            spec = lease.get("spec") if isinstance(lease.get("spec"), dict) else {}
            for field in ("acquireTime", "renewTime"):  # decoded first: a bad time is 400 before anything
                if spec.get(field) is not None:
                    spec[field] = _micro_time(spec[field], "spec." + field)
            if meta.get("namespace") not in (None, "", namespace):
                raise Refused(400, "the namespace of the provided object does not match the namespace sent on "
                                   "the request")
            if method == "PUT" and meta.get("name") != name:
                raise Refused(400, "the name of the object (%s) does not match the name on the URL (%s)"
                              % (meta.get("name"), name))
            key = (namespace, meta.get("name") or "")
            if not key[1]:
                raise Refused(422, "metadata.name: Required value: name or generateName is required")
            if len(key[1]) > 253 or not _DNS_SUBDOMAIN.match(key[1]):  # ValidateObjectMeta: NameIsDNSSubdomain
                raise _invalid("Lease", "coordination.k8s.io", key[1], "metadata.name", (
                    "FieldValueInvalid", "Invalid value: %s: a lowercase RFC 1123 subdomain must consist of lower "
                    "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'example.com', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')" % json.dumps(key[1])))
            _refuse_annotations(lease, "Lease", "coordination.k8s.io")
            duration = (body.get("spec") or {}).get("leaseDurationSeconds")
            if duration is not None and (not isinstance(duration, int) or duration <= 0):
                # pkg/apis/coordination/validation/validation.go ValidateLeaseSpec
                raise Refused(422, "spec.leaseDurationSeconds: Invalid value: %r: must be greater than 0" % duration)
            with api.lock:
                current = api.leases.get(key)
                wanted = meta.get("resourceVersion")
                if method == "PUT" and current is not None:
                    wanted = _precondition(wanted)
                creating = method == "POST" or current is None
                if method == "POST" and current is not None:
                    raise Refused(409, 'leases.coordination.k8s.io "%s" already exists' % key[1],
                                  reason="AlreadyExists")
                if method == "POST" and wanted:
                    raise Refused(500, "resourceVersion should not be set on objects to be created", reason="")
                if creating:
                    lease["metadata"]["uid"] = "lease-%d" % (len(api.leases) + 1)
                else:
                    if not wanted:
                        raise Refused(422, 'leases.coordination.k8s.io "%s" is invalid: metadata.resourceVersion: '
                                           "Invalid value: 0: must be specified for an update" % key[1],
                                      reason="Invalid")
                    if wanted != current["metadata"]["resourceVersion"]:
                        raise _conflict("leases.coordination.k8s.io", key[1])
                    lease["metadata"]["uid"] = current["metadata"]["uid"]
                lease["metadata"]["namespace"] = namespace
                api.leases[key] = api._stamp(lease)
                return (201 if creating else 200), copy.deepcopy(api.leases[key])

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


def _expired(token):
    return Refused(410, "The provided continue parameter is too old to display a consistent list result. You can "
                        "start a new list without the continue parameter, or use the continue token in this "
                        "response to retrieve the remainder of the results. Continuing with the provided token "
                        "results in an inconsistent list - objects that were created, modified, or deleted between "
                        "the time the first chunk was returned and now may show up in the list.",
                   reason="Expired", meta={"continue": token})


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
