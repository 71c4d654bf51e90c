"""A loopback emulator of the ACK (CS) ROA API, for the real ``alibabacloud-cs20151215`` SDK to talk to
over HTTP on 127.0.0.1 (point it here with ``ACK_MIG_CS_ENDPOINT=<emulator.endpoint>``).

Endpoints, with the paths and query names the SDK sends (alibabacloud_cs20151215/client.py):

* ``GET /clusters/{cluster_id}`` (DescribeClusterDetail) -> the cluster's detail in the fields of the SDK's
  ``DescribeClusterDetailResponseBody``: ``cluster_id``, ``name``, ``region_id``, ``state``, ``cluster_type``,
  ``profile``, ``vpc_id``, ``vswitch_ids`` (the control plane's vSwitches), the deprecated ``vswitch_id``,
  ``security_group_id`` and ``master_url``, a JSON text with ``api_server_endpoint`` and
  ``intranet_api_server_endpoint`` (the API reference's example; terraform-provider-alicloud parses the same
  keys). Set ``emulator.detail`` to change any of them (``detail["master_url"]`` is built from
  ``intranet_endpoint`` / ``public_endpoint`` unless given).
* ``GET /clusters/{cluster_id}/nodepools`` (DescribeClusterNodePools; ``NodepoolName`` filter)
  -> ``{"nodepools": [...]}``
* ``GET /clusters/{cluster_id}/nodes`` (DescribeClusterNodes; ``nodepool_id``, ``instanceIds`` comma-joined,
  ``pageNumber``, ``pageSize`` <= 100, ``state``) -> ``{"nodes": [...], "page": {"page_number",
  "page_size", "total_count"}}`` (the SDK's model names the paging object ``page``). Each page is cut by
  number from the list as it is at that call, as the API's pageNumber/pageSize paging has it (no snapshot
  token): a node removed or added between two pages (``on_request``, :meth:`CsEmulator.change_nodes`) shifts
  the later ones. Source: ACK's API reference for DescribeClusterNodes ("Query nodes in a cluster",
  ``GET /clusters/{ClusterId}/nodes?instanceIds&nodepool_id&state&pageSize&pageNumber``): paging by
  ``pageNumber``/``pageSize`` with ``page.total_count``, no snapshot or continuation token, and no order of
  the nodes stated, so where a new node enters the list is the test's choice (``change_nodes(at=...)``)
* ``GET /k8s/{cluster_id}/user_config`` (DescribeClusterUserKubeconfig; ``PrivateIpAddress``,
  ``TemporaryDurationMinutes``) -> ``{"config": <kubeconfig yaml>}``; set ``emulator.kubeconfig``. The
  default is shaped as ACK's (:func:`ack_kubeconfig`: the cluster CA, a client certificate) and points at a
  loopback port where nothing listens; ``INSECURE_KUBECONFIG`` is the one the client refuses unread.
* ``GET /clusters/{cluster_id}/nodepools/{nodepool_id}`` (DescribeClusterNodePoolDetail) -> the pool, in
  the shape of a DescribeClusterNodePools item.
* ``PUT /clusters/{cluster_id}/nodepools/{nodepool_id}`` (ModifyClusterNodePool) -> ``{"task_id": "T-..."}``;
  only ``scaling_group.tags`` and ``kubernetes_config.labels`` are modelled (see
  :meth:`CsEmulator._ModifyClusterNodePool` for their rules and the sources); a body that asks to change
  anything else is refused, so a test never relies on a change the emulator does not make. ``modified``
  records each accepted body.

Every request is checked as the service would: ``x-acs-action`` names the route's action,
``x-acs-version`` is 2015-12-15, the ``x-acs-signature-nonce`` never repeats, ``x-acs-content-sha256``
is the body's hash, the STS token is the one issued, and the ACS3-HMAC-SHA256 ``Authorization`` is
recomputed here from the request (canonical request: method, path, sorted encoded query, the signed
headers, payload hash) with the test's secret, written independently of the SDK. A mismatch is a 400
``SignatureDoesNotMatch``; anything wrong is recorded in ``rejected``.

Faults: ``fail_next(action, status, code, times, retry_after)`` queues error answers (429 Throttling,
503 ServiceUnavailable, 500 InternalError ...), ``latency_s`` delays every answer, ``slow_next(action,
seconds)`` one, ``answer_with(action, body)`` answers every call of an action with a body of any shape. ``refuse_pool(nodepool_id, status, code)`` answers every DescribeClusterNodes call about that
one pool with the refusal, for good (the pool-scoped actions answer a pool the emulator does not hold with
404 ``ErrorNodePoolNotFound``; what ACK answers DescribeClusterNodes for such a ``nodepool_id`` is not
documented, so by default the emulator lists no node for it, and a test plays the refusal with this). ``requests`` records every request (action, method, path, query, status); ``exchanges``
every answer, which tests/support/contract_plugin.py checks against the SDK's response models
(``alibabacloud_cs20151215/models/_describe_cluster_nodes_response_body.py`` ...) after each test: an
answer field the SDK model does not have would be dropped by its ``from_map`` on the real path.

Runs as its own ``ThreadingHTTPServer`` on an ephemeral port, so the ECS/ESS RPC emulator
(tests/support/rpc_emulator.py) runs beside it in the same test: two servers, two endpoints, one set of
test credentials (use the same access key, secret and token in both).
"""

import base64
import hashlib
import hmac
import socket
import threading
import time
import uuid
from collections import deque
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Tuple
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from tests.support import contract
from tests.support.loopback import Answer as LoopAnswer, LoopbackServer, json_answer

VERSION = "2015-12-15"
ALGORITHM = "ACS3-HMAC-SHA256"


def _unreachable_kubeconfig() -> str:
    """The emulator's default kubeconfig, made once per test process: ACK's shape, its server a loopback port
    that refuses every connection for as long as this process runs (bound, never listening: a SYN to it is
    answered with a reset; held, so no other server can take it)."""
    if not _UNREACHABLE:
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.bind(("127.0.0.1", 0))
        _UNREACHABLE.append((held, ack_kubeconfig("https://127.0.0.1:%d" % held.getsockname()[1])))
    return _UNREACHABLE[0][1]


_UNREACHABLE: List[Tuple[socket.socket, str]] = []


def ack_kubeconfig(server: str) -> str:
    """A kubeconfig shaped as ACK's DescribeClusterUserKubeconfig answer (its ``config``): the cluster named
    ``kubernetes`` with the API server's address and its CA inline (``certificate-authority-data``), the
    user's X.509 client certificate and key inline (``client-certificate-data``, ``client-key-data``), one
    context, current. Source: the DescribeClusterUserKubeconfig reference (cs 2015-12-15: ``config`` is
    "the content of the kubeconfig file", the one kubectl uses as is, which verifies the server against the
    cluster CA and never carries ``insecure-skip-tls-verify``); ACK credentials are per-user X.509 client
    certificates (they expire and are revoked as such). Unconfirmed against a captured answer: the names of
    the cluster, user and context. The CA is a real one the test machinery made, that no server here
    presents: a test that connects somewhere sets ``emulator.kubeconfig`` to its API server's own."""
    from tests.support.kubeapi import CertificateAuthority  # cryptography: loaded only by a test that needs it

    ca = CertificateAuthority("kubernetes")
    user = ca.issue("emulator-user", org="system:users")
    data = [base64.b64encode(pem).decode("ascii") for pem in (ca.pem, user.cert_pem, user.key_pem)]
    return ("apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: %s\n"
            "    certificate-authority-data: %s\n  name: kubernetes\ncontexts:\n- context:\n"
            "    cluster: kubernetes\n    user: emulator-user\n  name: emulator-user-kubernetes\n"
            "current-context: emulator-user-kubernetes\npreferences: {}\nusers:\n"
            "- name: emulator-user\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n"
            % (server, data[0], data[1], data[2]))


# A kubeconfig ACK never answers: it asks to skip TLS verification, which the client refuses before it
# connects. Only for the tests of that refusal (set ``emulator.kubeconfig = INSECURE_KUBECONFIG``).
INSECURE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: emulator-user
  name: emulator
current-context: emulator
users:
- name: emulator-user
  user:
    token: emulator-token
"""


class Recorded(NamedTuple):
    action: str
    method: str
    path: str
    query: Dict[str, str]
    status: int


class Fault(NamedTuple):
    status: int
    code: str
    retry_after: Optional[int]


def canonical_request(method: str, path: str, query: Dict[str, str], headers: Dict[str, str], signed: List[str],
                      payload_hash: str) -> str:
    """The V3 canonical request: method, path, sorted percent-encoded query, the signed headers (lower-case
    name:trimmed value, one per line), their names joined by ';', and the payload's SHA-256 hex."""
    canonical_query = "&".join("%s=%s" % (quote(k, safe="~"), quote(query[k], safe="~")) for k in sorted(query))
    canonical_headers = "".join("%s:%s\n" % (name, headers.get(name, "").strip()) for name in signed)
    return "\n".join([method, path, canonical_query, canonical_headers, ";".join(signed), payload_hash])


def acs3_signature(method: str, path: str, query: Dict[str, str], headers: Dict[str, str], signed: List[str],
                   payload_hash: str, secret: str) -> str:
    """ACS3-HMAC-SHA256 as Alibaba Cloud documents the V3 signature."""
    canonical = canonical_request(method, path, query, headers, signed, payload_hash)
    to_sign = "%s\n%s" % (ALGORITHM, hashlib.sha256(canonical.encode("utf-8")).hexdigest())
    return hmac.new(secret.encode("utf-8"), to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def _odd(item: Any) -> bool:
    """An item a test put in the lists that is no object (a node that is a string): no filter can read it,
    so it is served in every list, as an API that answers such an item would."""
    return not isinstance(item, dict)


class CsEmulator(LoopbackServer):
    version = VERSION  # the x-acs-version every request must carry (a subclass serves another product)
    ROUTES = (("clusters", "nodepools", "DescribeClusterNodePools"),
              ("clusters", "nodes", "DescribeClusterNodes"),
              ("k8s", "user_config", "DescribeClusterUserKubeconfig"))
    # /clusters/{id}/nodepools/{nodepool id}, by method (the SDK's pathname and method for each action)
    POOL_ROUTES = {"GET": "DescribeClusterNodePoolDetail", "PUT": "ModifyClusterNodePool"}
    # ModifyClusterNodePoolRequest's top-level fields and the tag rules (alibabacloud_cs20151215
    # models/_modify_cluster_node_pool_request.py; the scaling group's 20-tag budget is ESS's,
    # ess20220222 ModifyScalingConfiguration, which the autoscaler reads: unconfirmed that ACK applies it).
    REQUEST_FIELDS = {"auto_scaling", "concurrency", "eflo_node_group", "kubernetes_config", "management",
                      "nodepool_info", "scaling_group", "tee_config", "update_nodes"}

    def __init__(self, access_key_id: str = "LTAItestkey", secret: str = "test-secret-value",
                 token: Optional[str] = "sts-token-value", cluster_id: str = "c-emulated") -> None:
        self.access_key_id, self.secret, self.token = access_key_id, secret, token
        self.cluster_id = cluster_id
        self.nodepools: List[Dict[str, Any]] = []
        self.nodes: List[Dict[str, Any]] = []
        # ACK's shape, pointing at a loopback port where nothing listens: the client loads it and is refused
        # at connect, as with an API server that is down or not reachable from here.
        self.kubeconfig = _unreachable_kubeconfig()
        self.latency_s = 0.0
        self.requests: List[Recorded] = []
        self.rejected: List[str] = []
        self.kubeconfig_requests: List[Dict[str, str]] = []
        self.modified: List[Dict[str, Any]] = []  # accepted ModifyClusterNodePool bodies, with the pool id
        self.detail: Dict[str, Any] = {
            "name": "gpu-cluster", "region_id": "cn-beijing", "state": "running",
            "cluster_type": "ManagedKubernetes", "profile": "Default", "vpc_id": "vpc-2ze0cluster0vpc0a1b2",
            "vswitch_ids": ["vsw-2ze0control0plane0c3d4"], "vswitch_id": "vsw-2ze0control0plane0c3d4",
            "security_group_id": "sg-2ze0cluster0nodes0e5f6"}
        self.intranet_endpoint = "https://192.168.0.251:6443"
        self.public_endpoint = ""
        self.tag_key_limit = 128  # the node pool API's; set 64 to answer as ESS would (unconfirmed for ACK)
        self.max_tags = 20
        # How a non-empty tag or label list is taken: "replace" (the list becomes the pool's whole list) or
        # "merge" (its keys are set, the others kept). Not documented either way (_ModifyClusterNodePool):
        # the product's writes must come out right under both, so tests run both.
        self.list_semantics = "replace"
        self._faults: Dict[str, Deque[Fault]] = {}
        self._tamper: Dict[str, List[Callable[[Any], Any]]] = {}
        self._refused_pools: Dict[str, Fault] = {}  # pool id -> the answer every DescribeClusterNodes of it gets
        self._slow: Dict[str, Deque[float]] = {}
        self._answers: Dict[str, Any] = {}  # action -> the body every call of it gets (answer_with)
        self._nonces: set = set()
        self._lock = threading.Lock()
        self.exchanges: List[contract.Exchange] = []
        # Called with (action, how many calls of it so far, this one included) as a call arrives, before it is
        # answered: another client (the console, Terraform) acting between this tool's calls.
        self.on_request: Optional[Callable[[str, int], None]] = None
        contract.register(self)

    # ---- set-up ----

    def load_inventory(self, inventory: Dict[str, Any]) -> "CsEmulator":
        """Serve a snapshot in the ``--inventory`` format (same API shapes)."""
        self.cluster_id = inventory["cluster_id"]
        self.nodepools = list(inventory.get("nodepools", []))
        self.nodes = list(inventory.get("nodes", []))
        return self

    def change_nodes(self, remove: Tuple[str, ...] = (), add: Tuple[Dict[str, Any], ...] = (),
                     at: Optional[int] = None) -> None:
        """Another client changes the cluster's node list: the nodes of the instance ids in ``remove`` leave it
        and ``add`` enter it at index ``at`` (None: the end). A removal and an addition at once keep
        ``total_count`` as it was, so a listing paged across them sees the same total on every page while
        its later pages are shifted. ACK's API reference for DescribeClusterNodes states no order of the
        nodes (see the module's docstring), so a test places the new ones at the end (oldest first) or at
        index 0 (newest first) and the reader must come out right under both."""
        with self._lock:
            gone = set(remove)
            self.nodes = [n for n in self.nodes if _odd(n) or n.get("instance_id") not in gone]
            index = len(self.nodes) if at is None else at
            self.nodes[index:index] = list(add)

    def tamper_next(self, action: str, change: Callable[[Any], Any]) -> None:
        """The next answer to ``action`` goes out as ``change(payload)``: a hostile or broken service (or what
        answers at the ``ACK_MIG_*_ENDPOINT`` in its place) whose JSON does not have the SDK model's shape, e.g. a
        list of numbers where ros20190910's ListStacksResponseBody has a list of objects (the contract check
        flags it: such a test is contract_exempt)."""
        with self._lock:
            self._tamper.setdefault(action, []).append(change)

    def fail_next(self, action: str, status: int, code: str, times: int = 1,
                  retry_after: Optional[int] = None) -> None:
        with self._lock:
            queue = self._faults.setdefault(action, deque())
            queue.extend([Fault(status, code, retry_after)] * times)

    def refuse_pool(self, nodepool_id: str, status: int = 404, code: str = "ErrorNodePoolNotFound") -> None:
        """Every DescribeClusterNodes call with ``nodepool_id`` (and only those) is refused with ``status``
        and ``code`` from now on: a refusal about one pool that no retry changes."""
        with self._lock:
            self._refused_pools[nodepool_id] = Fault(status, code, None)

    def answer_with(self, action: str, body: Any) -> None:
        """Every call of ``action`` from now on is answered 200 with ``body`` as it is, whatever its shape (a
        list, a node that is a string): an answer the SDK's model does not fit, for the readers of answers.
        The request is still checked (signature, version) first."""
        with self._lock:
            self._answers[action] = body

    def slow_next(self, action: str, seconds: float, times: int = 1) -> None:
        with self._lock:
            self._slow.setdefault(action, deque()).extend([seconds] * times)

    def calls(self, action: str) -> int:
        return sum(1 for r in self.requests if r.action == action)

    def respond(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> LoopAnswer:
        status, payload, extra = self.handle(method, path, headers, body)
        version = headers.get("x-acs-version", "")
        with self._lock:
            change = self._tamper[headers.get("x-acs-action", "")].pop(0) \
                if self._tamper.get(headers.get("x-acs-action", "")) else None
            if change is not None:
                payload = change(payload)
            self.exchanges.append(contract.Exchange(contract.BY_VERSION.get(version, "?"), version,
                                                    headers.get("x-acs-action", "?"), None, status, payload))
        return json_answer(status, payload, extra)

    # ---- requests ----

    def _error(self, status: int, code: str, message: str) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
        return status, {"code": code, "message": message, "requestId": str(uuid.uuid4()).upper()}, {}

    def _route(self, path: str, method: str = "GET") -> Tuple[Optional[str], Optional[str], Optional[str]]:
        """(action, cluster id, node pool id or None), or Nones for a path no action serves."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if len(parts) == 2 and parts[0] == "clusters" and method == "GET":
            return "DescribeClusterDetail", parts[1], None
        for prefix, leaf, action in self.ROUTES:
            if len(parts) == 3 and parts[0] == prefix and parts[2] == leaf and method == "GET":
                return action, parts[1], None
        if len(parts) == 4 and parts[0] == "clusters" and parts[2] == "nodepools" and method in self.POOL_ROUTES:
            return self.POOL_ROUTES[method], parts[1], parts[3]
        return None, None, None

    def handle(self, method: str, raw_path: str, headers: Dict[str, str], body: bytes
               ) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
        split = urlsplit(raw_path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        action, cluster, pool_id = self._route(split.path, method)
        with self._lock:  # recorded on arrival (status 0 until answered), so a slow answer counts at once
            index = len(self.requests)
            self.requests.append(Recorded(action or "?", method, split.path, query, 0))
        if self.on_request is not None:
            self.on_request(action or "?", self.calls(action or "?"))
        status, payload, extra = self._dispatch(method, split.path, query, headers, body, action, cluster, pool_id)
        with self._lock:
            self.requests[index] = self.requests[index]._replace(status=status)
        return status, payload, extra

    def handle_rpc(self, method: str, raw_path: str, headers: Dict[str, str], body: bytes,
                   answer: Callable[..., Tuple[int, Dict[str, Any], Dict[str, str]]]
                   ) -> Tuple[Tuple[int, Dict[str, Any], Dict[str, str]], str]:
        """An RPC-style request (one path, the action in ``x-acs-action``: ROS, STS), recorded on arrival as
        :meth:`handle` records a ROA one, answered by ``answer(method, path, query, headers, body, action)``."""
        split = urlsplit(raw_path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        action = headers.get("x-acs-action", "")
        with self._lock:
            index = len(self.requests)
            self.requests.append(Recorded(action or "?", method, split.path, query, 0))
        result = answer(method, split.path, query, headers, body, action)
        with self._lock:
            self.requests[index] = self.requests[index]._replace(status=result[0])
        return result, action

    def _refused(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes,
                 action: str) -> Optional[Tuple[int, Dict[str, Any], Dict[str, str]]]:
        """The 400 answer when the request fails :meth:`_verify` (the refusal recorded), else None."""
        problem = self._verify(method, path, query, headers, body, action)
        if problem is None:
            return None
        with self._lock:
            self.rejected.append("%s: %s" % (action, problem))
        return self._error(400, problem.split(":")[0], problem)

    def _injected(self, action: str) -> Optional[Tuple[int, Dict[str, Any], Dict[str, str]]]:
        """The next fault queued for ``action`` (:meth:`fail_next`) as its answer, else None."""
        with self._lock:
            fault = self._faults[action].popleft() if self._faults.get(action) else None
        return None if fault is None else self._error(fault.status, fault.code, "injected %s" % fault.code)

    def _dispatch(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes,
                  action: Optional[str], cluster: Optional[str], pool_id: Optional[str] = None
                  ) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
        if action is None:
            return self._error(404, "InvalidAction.NotFound", "no such API: %s %s" % (method, path))
        refused = self._refused(method, path, query, headers, body, action)
        if refused is not None:
            return refused
        with self._lock:
            delay = self.latency_s + (self._slow[action].popleft() if self._slow.get(action) else 0.0)
            fault = self._faults[action].popleft() if self._faults.get(action) else None
        if delay:
            time.sleep(delay)
        if fault is not None:
            status, payload, extra = self._error(fault.status, fault.code, "injected %s" % fault.code)
            if fault.retry_after:
                extra = {"x-acs-retry-after": str(fault.retry_after)}
            return status, payload, extra
        if cluster != self.cluster_id:
            return self._error(404, "ErrorClusterNotFound", "cluster %s not found" % cluster)
        if action in self._answers:
            return 200, self._answers[action], {}
        if pool_id is not None:
            return getattr(self, "_" + action)(pool_id, body)
        return getattr(self, "_" + action)(query)

    def _verify(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes,
                action: str) -> Optional[str]:
        if headers.get("x-acs-action") != action:
            return "InvalidAction: x-acs-action %r for %s" % (headers.get("x-acs-action"), action)
        if headers.get("x-acs-version") != self.version:
            return "InvalidVersion: x-acs-version %r" % headers.get("x-acs-version")
        nonce = headers.get("x-acs-signature-nonce")
        if not nonce:
            return "MissingSignatureNonce: no x-acs-signature-nonce"
        with self._lock:
            if nonce in self._nonces:
                return "SignatureNonceUsed: nonce %s repeated" % nonce
            self._nonces.add(nonce)
        if not headers.get("x-acs-date"):
            return "MissingDate: no x-acs-date"
        payload_hash = hashlib.sha256(body).hexdigest()
        if headers.get("x-acs-content-sha256") != payload_hash:
            return "InvalidContentSha256: x-acs-content-sha256 is not the body's hash"
        if self.token is not None and headers.get("x-acs-security-token") != self.token:
            return "InvalidSecurityToken: wrong or missing x-acs-security-token"
        auth = headers.get("authorization", "")
        if not auth.startswith(ALGORITHM + " "):
            return "MissingAuthorization: Authorization is not %s" % ALGORITHM
        fields = dict(part.strip().split("=", 1) for part in auth[len(ALGORITHM) + 1:].split(",") if "=" in part)
        if fields.get("Credential") != self.access_key_id:
            return "InvalidAccessKeyId.NotFound: unknown access key"
        signed = fields.get("SignedHeaders", "").split(";")
        for required in ("host", "x-acs-action", "x-acs-content-sha256", "x-acs-date",
                         "x-acs-signature-nonce", "x-acs-version"):
            if required not in signed:
                return "IncompleteSignature: %s is not signed" % required
        expected = acs3_signature(method, path, query, headers, signed, payload_hash, self.secret)
        if not hmac.compare_digest(expected, fields.get("Signature", "")):
            return "SignatureDoesNotMatch: the signature does not match"
        return None

    # ---- actions ----

    def _DescribeClusterDetail(self, query: Dict[str, str]) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
        import json as _json

        endpoints = {"api_server_endpoint": self.public_endpoint,
                     "intranet_api_server_endpoint": self.intranet_endpoint}
        body = dict({"cluster_id": self.cluster_id, "master_url": _json.dumps(endpoints)}, **self.detail)
        return 200, body, {}

    def _DescribeClusterNodePools(self, query: Dict[str, str]) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
        name = query.get("NodepoolName")
        pools = [p for p in self.nodepools if not name or _odd(p) or p.get("nodepool_info", {}).get("name") == name]
        return 200, {"nodepools": pools}, {}

    def _DescribeClusterNodes(self, query: Dict[str, str]) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
        try:
            page_number = int(query.get("pageNumber", "1"))
            page_size = int(query.get("pageSize", "10"))
        except ValueError:
            return self._error(400, "InvalidParameter", "pageNumber and pageSize must be numbers")
        if not 1 <= page_size <= 100 or page_number < 1:
            return self._error(400, "InvalidParameter", "pageSize must be 1..100, pageNumber >= 1")
        refused = self._refused_pools.get(query.get("nodepool_id") or "")
        if refused is not None:
            return self._error(refused.status, refused.code, "node pool %s: refused" % query["nodepool_id"])
        nodes = self.nodes
        if query.get("nodepool_id"):
            nodes = [n for n in nodes if _odd(n) or n.get("nodepool_id") == query["nodepool_id"]]
        if query.get("instanceIds"):
            wanted = set(query["instanceIds"].split(","))
            nodes = [n for n in nodes if _odd(n) or n.get("instance_id") in wanted]
        if query.get("state") and query["state"] != "all":
            nodes = [n for n in nodes if _odd(n) or n.get("state") == query["state"]]
        start = (page_number - 1) * page_size
        return 200, {"nodes": nodes[start:start + page_size],
                     "page": {"page_number": page_number, "page_size": page_size, "total_count": len(nodes)}}, {}

    def _DescribeClusterUserKubeconfig(self, query: Dict[str, str]) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
        with self._lock:
            self.kubeconfig_requests.append(dict(query))
        minutes = query.get("TemporaryDurationMinutes")
        if minutes is not None and (not minutes.isdigit() or not 15 <= int(minutes) <= 4320):
            return self._error(400, "InvalidParameter", "TemporaryDurationMinutes must be 15..4320")
        return 200, {"config": self.kubeconfig, "expiration": "2099-01-01T00:00:00Z"}, {}

    def pool(self, nodepool_id: str) -> Optional[Dict[str, Any]]:
        return next((p for p in self.nodepools if not _odd(p) and (p.get("nodepool_info") or {}).get("nodepool_id")
                     == nodepool_id),
                    None)

    def pool_tags(self, nodepool_id: str) -> List[Tuple[str, str]]:
        """A pool's ``scaling_group.tags`` as (key, value) pairs, in order."""
        pool = self.pool(nodepool_id) or {}
        return [(t.get("key"), t.get("value")) for t in (pool.get("scaling_group") or {}).get("tags") or []]

    def _DescribeClusterNodePoolDetail(self, nodepool_id: str, body: bytes
                                       ) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
        pool = self.pool(nodepool_id)
        if pool is None:
            return self._error(404, "ErrorNodePoolNotFound", "node pool %s not found" % nodepool_id)
        return 200, pool, {}

    max_labels = 20
    label_key_limit = 64
    label_value_limit = 128

    def _label_problem(self, labels: List[Any]) -> Optional[str]:
        """``kubernetes_config.labels`` as the cs20151215 SDK model documents them
        (``ModifyClusterNodePoolRequestKubernetesConfig.labels``): "You can set up to 20 labels"; "Label keys
        must be unique and can be up to 64 characters in length. Label values can be empty and can be up to
        128 characters in length. Label keys and label values cannot start with ``aliyun``, ``acs:``,
        ``https://``, or ``http://``". A refusal is 400 ``InvalidParameter`` (ACK's own code is not
        documented)."""
        keys = []
        for label in labels:
            if not isinstance(label, dict) or not isinstance(label.get("key"), str) or not label["key"]:
                return "a label has no key"
            key, value = label["key"], label.get("value")
            if value is not None and not isinstance(value, str):
                return "label %s has a value that is not text" % key[:40]
            if len(key) > self.label_key_limit:
                return "label key %s is longer than %d characters" % (key[:40], self.label_key_limit)
            if value is not None and len(value) > self.label_value_limit:
                return "the value of label %s is longer than %d characters" % (key[:40], self.label_value_limit)
            for text in (key, value or ""):
                if text.lower().startswith(("aliyun", "acs:", "https://", "http://")):
                    return "label %s starts with a reserved prefix" % key[:40]
            keys.append(key)
        if len(set(keys)) != len(keys):
            return "duplicate label keys"
        if len(labels) > self.max_labels:
            return "%d labels; at most %d" % (len(labels), self.max_labels)
        return None

    def _combined(self, current: List[Dict[str, Any]], sent: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The pool's list after a write of ``sent``, under :attr:`list_semantics`."""
        if self.list_semantics == "replace":
            return sent
        by_key = {item["key"]: item for item in sent}
        kept = [by_key.pop(item["key"], item) for item in current]  # set in place, the others kept
        return kept + [item for item in sent if item["key"] in by_key]

    def _ModifyClusterNodePool(self, nodepool_id: str, body: bytes) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
        """``scaling_group.tags`` and ``kubernetes_config.labels``, as this emulator models them (sources per
        rule; the labels' own checks in :meth:`_label_problem`):

        * ``kubernetes_config.labels`` follow the tags' model below: a non-empty list becomes the pool's
          whole label list (replace; ACK's Terraform provider sends the whole list on every label change,
          ``resource_alicloud_cs_kubernetes_node_pool.go`` ``setNodePoolLabels``; no API page saying merge or
          replace was found), an empty one leaves them as they are (the SDK's
          ``ModifyClusterNodePoolRequestKubernetesConfig.to_map`` writes ``"labels": []`` and ``"taints": []``
          into every Kubernetes part it sends, so the API cannot take an empty list as "remove all"). Only the
          pool's record changes: the running nodes' labels are the node pool's ``update_nodes`` business,
          not modelled (a body asking for it is refused).

        ``scaling_group.tags``:

        * a non-empty list becomes the pool's whole tag list (replace): keys left out are gone. ACK's own
          clients send the whole list on every change (the Terraform provider's node pool update, and the
          console edits the list as a whole); no API doc page that says "merge" or "replace" was found, so
          "replace" is the default model. ``list_semantics = "merge"`` models the other reading (keys sent
          are set, keys left out kept), and the product's writes come out the same under both: it sends
          every key it wants, writes a stale autoscaler key as ``0`` rather than leaving it out
          (functions/decision/autoscaler_tags.py), and resumes a pool with ``ack-mig-hook/paused=false``.
        * an empty list leaves the tags as they are: the SDK writes ``"tags": []`` into every scaling group
          it sends (``ModifyClusterNodePoolRequestScalingGroup.to_map``), so the API cannot take an empty
          list to mean "remove every tag" without every other scaling group change wiping them. The other
          lists the SDK always sends empty (``data_disks``, ``disk_init``, ``instance_patterns``,
          ``spot_price_limit``) are taken the same way.
        * keys: required, unique, at most ``tag_key_limit`` characters (128, the SDK model's doc); keys and
          values must not start with ``aliyun`` or ``acs:`` nor contain ``http://`` / ``https://`` (same doc).
        * at most ``max_tags`` (20: ESS's limit for a scaling configuration; unconfirmed for ACK).
        Refusals are 400 ``InvalidParameter`` (ACK's own error code for these is not documented).
        """
        import json as _json

        pool = self.pool(nodepool_id)
        if pool is None:
            return self._error(404, "ErrorNodePoolNotFound", "node pool %s not found" % nodepool_id)
        try:
            doc = _json.loads(body.decode("utf-8") or "{}")
        except ValueError:
            return self._error(400, "InvalidParameter", "the body is not JSON")
        unknown = set(doc) - self.REQUEST_FIELDS
        if not isinstance(doc, dict) or unknown:
            return self._error(400, "InvalidParameter", "unknown fields %s" % sorted(unknown))
        group = doc.get("scaling_group") or {}
        kube = doc.get("kubernetes_config") or {}
        asked = {k for k, v in doc.items()
                 if v not in (None, {}, []) and k not in ("scaling_group", "kubernetes_config")}
        asked |= {"scaling_group.%s" % k for k, v in group.items() if v not in (None, [], {}) and k != "tags"}
        asked |= {"kubernetes_config.%s" % k for k, v in kube.items() if v not in (None, [], {}) and k != "labels"}
        if asked:
            return self._error(400, "EmulatorNotModelled", "only scaling_group.tags and kubernetes_config.labels "
                               "are modelled, got %s" % sorted(asked))
        labels = kube.get("labels") or []
        refused = self._label_problem(labels)
        if refused:
            return self._error(400, "InvalidParameter", refused)
        tags = group.get("tags") or []
        keys = [t.get("key") for t in tags if isinstance(t, dict)]
        for tag in tags:
            key, value = tag.get("key") if isinstance(tag, dict) else None, (tag or {}).get("value") or ""
            if not isinstance(key, str) or not key:
                return self._error(400, "InvalidParameter", "a tag has no key")
            if len(key) > self.tag_key_limit:
                return self._error(400, "InvalidParameter", "tag key %s is longer than %d characters"
                                   % (key[:40], self.tag_key_limit))
            for text in (key, value):
                if text.lower().startswith(("aliyun", "acs:")) or "http://" in text or "https://" in text:
                    return self._error(400, "InvalidParameter", "tag %s uses a reserved prefix or a URL" % key[:40])
        if len(set(keys)) != len(keys):
            return self._error(400, "InvalidParameter", "duplicate tag keys")
        if len(tags) > self.max_tags:
            return self._error(400, "InvalidParameter", "%d tags; at most %d" % (len(tags), self.max_tags))
        with self._lock:
            if tags:
                sent = [{"key": t["key"], "value": t.get("value") or ""} for t in tags]
                group_now = pool.setdefault("scaling_group", {})
                group_now["tags"] = self._combined(group_now.get("tags") or [], sent)
            if labels:
                sent = [dict({"key": t["key"]}, **({"value": t["value"]} if t.get("value") is not None else {}))
                        for t in labels]
                kube_now = pool.setdefault("kubernetes_config", {})
                kube_now["labels"] = self._combined(kube_now.get("labels") or [], sent)
            self.modified.append({"nodepool_id": nodepool_id, "body": doc})
        return 200, {"task_id": "T-%s" % uuid.uuid4().hex[:18], "nodepool_id": nodepool_id}, {}
