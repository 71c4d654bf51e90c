"""A small Kubernetes API client: standard library only, Python 3.6 and later.

Used on the node with the kubelet's own credentials (labels of its own Node) and by the function side
with a cluster credential (taint removal). What it does:

* :func:`load_kubeconfig` reads a kubeconfig (YAML or JSON): the current context (or a named one), the
  cluster's ``server`` and CA (``certificate-authority`` path or ``certificate-authority-data``), the
  user's client certificate and key (paths or ``*-data``) and/or bearer ``token`` / ``tokenFile``.
  Relative paths are relative to the kubeconfig's directory, as kubectl does.
* :class:`KubeClient` talks HTTPS with TLS verified against that CA (never unverified), authenticating
  with the client certificate and/or the bearer token. ``get_node``, ``patch_node`` (merge patch or JSON
  patch), ``list_pods``, ``delete_pod`` and ``create_event``; ``request`` for anything else.
* Errors are :class:`KubeError` with the HTTP status (None for transport errors) and the API server's
  message. Credentials never appear in messages, logs or return values.

Example (function side, removing a taint with a cluster credential)::

    client = KubeClient(load_kubeconfig("/tmp/admin.conf"))
    node = client.get_node("cn-beijing.192.168.0.1")
    taints = node["spec"].get("taints", [])
    index = [t["key"] for t in taints].index("ack-mig-hook/pending")
    client.json_patch_node(node["metadata"]["name"], [
        {"op": "test", "path": "/spec/taints/%d/key" % index, "value": "ack-mig-hook/pending"},
        {"op": "remove", "path": "/spec/taints/%d" % index}])
"""

import base64
import http.client
import json
import math
import os
import shutil
import socket
import ssl
import tempfile
import threading
import typing
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import quote, urlencode, urlsplit

from ..hostlookup import create_connection
from ..localfile import read_file
from ..outside import OutsideDataError, delay_seconds, json_type, list_items, loads
from . import kubeyaml

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_PATCH_TYPES = {"merge": MERGE_PATCH, "json": JSON_PATCH, "strategic": STRATEGIC_MERGE_PATCH}

# The reader rule for API answers (node_bootstrap/outside.py): a list page of 500 pods with long affinities is
# a few MB; a core object nests about 12 levels (a pod's affinity terms inside a list), managedFields as deep.
MAX_ANSWER_BYTES = 64 << 20
MAX_ANSWER_DEPTH = 64
_READ_PIECE = 1 << 20  # what one read of an answer's body asks for (_read_at_most)
DEFAULT_KUBELET_KUBECONFIG = "/etc/kubernetes/kubelet.conf"


# Answers of an API server under load or restarting (API Priority and Fairness' 429, an apiserver or load
# balancer's 5xx): the same call may well go through a moment later.
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)


class KubeError(Exception):
    """A failed API call or an unusable kubeconfig. ``status`` is the HTTP status, None when no answer.
    ``transient``: a quick failure the same call may get past on a second try (TRANSIENT_STATUSES, a
    connection refused, reset, closed unanswered or mid-answer); never a call that got no answer in time.
    ``retry_after``: the seconds a transient answer's ``Retry-After`` asks for (outside.delay_seconds, uncapped:
    the caller's deadline caps it), None when it asks for none."""

    def __init__(self, message, status=None, transient=False, retry_after=None):
        # type: (str, Optional[int], bool, Optional[float]) -> None
        super(KubeError, self).__init__(message)
        self.status = status
        self.transient = transient
        self.retry_after = retry_after


def retry_delay(exc, backoff):
    # type: (BaseException, float) -> float
    """The wait before the next try of a call that failed with ``exc``: ``backoff``, or the Retry-After the API
    server asked for (KubeError.retry_after: APF's 429, a 503) when that is longer. ``retry_delay(exc, 0)`` is
    the server's ask alone. The one rule of every node-side retry: never asked again sooner than it says."""
    asked = getattr(exc, "retry_after", None)
    return max(backoff, asked or 0.0)


class KubeConfig(typing.NamedTuple):
    """The resolved connection settings of one kubeconfig context. PEM material is held as bytes."""

    server: str
    ca_pem: Optional[bytes]
    cert_pem: Optional[bytes]
    key_pem: Optional[bytes]
    token: Optional[str]
    cert_file: Optional[str]  # where the client certificate came from, when a file (node name lookup)

    def __repr__(self):
        # Never print key material or tokens, even by accident in a traceback or a debug line.
        return "KubeConfig(server=%r, ca=%s, client_cert=%s, token=%s)" % (
            self.server, self.ca_pem is not None, self.cert_pem is not None, self.token is not None)


# Bounds on what a kubeconfig may make this reader hold: real ones are a few KB (kubelet.conf, ACK's with the
# CA and a client certificate inline); anything near these is a wrong file (a log, /dev/zero), refused in a line.
MAX_KUBECONFIG_BYTES = 4 << 20
MAX_REFERENCED_BYTES = 1 << 20  # a tokenFile, a certificate or key file the kubeconfig names
_FORMS = {"contexts": "{name, context: {cluster, user}}", "clusters": "{name, cluster: {server, ...}}",
          "users": "{name, user: {token, tokenFile, client-certificate-data, ...}}"}


def _shape(where, field, expected, value):
    # type: (str, str, str, Any) -> KubeError
    """The one-line error of a field of the wrong shape: the file, the field's path, the accepted form."""
    return KubeError("kubeconfig %s: %s: expected %s, got %s" % (where, field, expected, json_type(value)))


def _read(path, limit, what):
    # type: (str, int, str) -> bytes
    """At most ``limit`` bytes of a file the kubeconfig needs; more is refused, never read whole. Only a regular
    file (localfile.read_file): open() of a FIFO there waited for a writer for good, before the node lock, the
    labels or any deadline of the run (the boot unit's apply then hung until systemd gave up on it)."""
    data = read_file(path, limit)
    if len(data) > limit:
        raise KubeError("%s %s is larger than %d KiB: not a %s" % (what, path, limit >> 10, what))
    return data


def _entries(doc, key, where):
    # type: (dict, str, str) -> List[dict]
    """``clusters``/``contexts``/``users``: a list of ``{name, <kind>: {...}}``, each checked for its shape."""
    items = doc.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise _shape(where, key, "a list of %s" % _FORMS[key], items)
    body = key[:-1]
    for index, item in enumerate(items):
        field = "%s[%d]" % (key, index)
        if not isinstance(item, dict):
            raise _shape(where, field, "an object %s" % _FORMS[key], item)
        if not isinstance(item.get("name"), str):
            raise _shape(where, field + ".name", "text", item.get("name"))
        if item.get(body) is not None and not isinstance(item.get(body), dict):
            raise _shape(where, "%s.%s" % (field, body), "an object", item.get(body))
    return items


def _named(items, name, key, where):
    # type: (List[dict], str, str, str) -> Tuple[str, dict]
    """The entry of ``key`` named ``name``: its field path (for messages) and its body."""
    for index, item in enumerate(items):
        if item.get("name") == name:
            return "%s[%d].%s" % (key, index, key[:-1]), item.get(key[:-1]) or {}
    raise KubeError("kubeconfig %s has no %s named %r" % (where, key[:-1], name))


def _text(section, key, field, where, form="text"):
    # type: (dict, str, str, str, str) -> Optional[str]
    """A string field (None when absent); anything else is refused naming ``field.key``."""
    value = section.get(key)
    name = "%s.%s" % (field, key) if field else key
    if isinstance(value, str) and form == "a file path" and "\0" in value:  # open() would raise ValueError
        raise KubeError("kubeconfig %s: %s: expected a file path, got text with a NUL byte" % (where, name))
    if value is None or isinstance(value, str):
        return value
    raise _shape(where, name, form, value)


def _material(section, key, base, field, where):
    # type: (dict, str, str, str, str) -> Optional[bytes]
    """``<key>-data`` (base64) wins over ``<key>`` (a path, relative to the kubeconfig's directory)."""
    data = _text(section, key + "-data", field, where, "base64 text")
    path = _text(section, key, field, where, "a file path")
    if data:
        try:
            return base64.b64decode(data)
        except (ValueError, TypeError):
            raise KubeError("kubeconfig %s: %s.%s-data is not valid base64" % (where, field, key))
    if path:
        path = os.path.join(base, os.path.expanduser(path))
        try:
            return _read(path, MAX_REFERENCED_BYTES, key)
        except (IOError, OSError) as exc:
            raise KubeError("cannot read %s %s: %s" % (key, path, exc.strerror or exc))
    return None


def _server(cluster, field, where):
    # type: (dict, str, str) -> str
    server = _text(cluster, "server", field, where, "an https:// URL")
    if not server or not server.startswith("https://"):
        raise KubeError("kubeconfig %s: %s.server must be an https:// URL" % (where, field))
    try:
        parts = urlsplit(server)
        parts.port  # raises ValueError for a port that is no number or out of range
    except ValueError as exc:
        raise KubeError("kubeconfig %s: %s.server %r is not a URL (%s); expected https://HOST[:PORT]"
                        % (where, field, server[:80], exc))
    if not parts.hostname:
        raise KubeError("kubeconfig %s: %s.server %r names no host; expected https://HOST[:PORT]"
                        % (where, field, server[:80]))
    return server.rstrip("/")


def load_kubeconfig(path, context=None):
    # type: (str, Optional[str]) -> KubeConfig
    """Resolve a kubeconfig file's (current or named) context into connection settings.

    Every field on the way is checked for its shape before it is used: a wrong one is a KubeError naming the
    field's path (``contexts[0].context.user``) and the accepted form, never a TypeError."""
    try:
        raw = _read(path, MAX_KUBECONFIG_BYTES, "kubeconfig")
    except (IOError, OSError) as exc:
        raise KubeError("cannot read kubeconfig %s: %s" % (path, exc.strerror or exc))
    try:
        doc = kubeyaml.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise KubeError("kubeconfig %s is not UTF-8 text" % path)
    except ValueError as exc:
        raise KubeError("kubeconfig %s does not parse: %s" % (path, exc))
    if not isinstance(doc, dict):
        raise _shape(path, "the document", "an object {clusters, contexts, users, current-context}", doc)
    base = os.path.dirname(os.path.abspath(path))
    contexts = _entries(doc, "contexts", path)
    clusters = _entries(doc, "clusters", path)
    users = _entries(doc, "users", path)
    name = context or _text(doc, "current-context", "", path)
    if not name:
        if len(contexts) != 1:
            raise KubeError("kubeconfig %s has no current-context" % path)
        name = contexts[0]["name"]
    field, ctx = _named(contexts, name, "contexts", path)
    cluster_name = _text(ctx, "cluster", field, path)
    user_name = _text(ctx, "user", field, path)
    cluster_field, cluster = _named(clusters, cluster_name, "clusters", path)
    user_field, user = _named(users, user_name, "users", path) if user_name else ("", {})
    server = _server(cluster, cluster_field, path)
    skip = cluster.get("insecure-skip-tls-verify")
    if skip is not None and not isinstance(skip, bool):
        raise _shape(path, cluster_field + ".insecure-skip-tls-verify", "true or false", skip)
    if skip:
        raise KubeError("kubeconfig %s asks to skip TLS verification (%s.insecure-skip-tls-verify: true), which is "
                        "never done; give the cluster's certificate-authority-data instead (the ACK console's "
                        "kubeconfig has it)" % (path, cluster_field))
    token = _text(user, "token", user_field, path)
    token_file = _text(user, "tokenFile", user_field, path, "a file path")
    if not token and token_file:
        token_path = os.path.join(base, token_file)
        try:
            token = _read(token_path, MAX_REFERENCED_BYTES, "tokenFile").decode("utf-8").strip()
        except UnicodeDecodeError:
            raise KubeError("tokenFile %s is not UTF-8 text" % token_path)
        except (IOError, OSError) as exc:
            raise KubeError("cannot read tokenFile %s: %s" % (token_path, exc.strerror or exc))
    cert_file = None
    cert_path = _text(user, "client-certificate", user_field, path, "a file path")
    if cert_path and not user.get("client-certificate-data"):
        cert_file = os.path.join(base, cert_path)
    return KubeConfig(
        server=server,
        ca_pem=_material(cluster, "certificate-authority", base, cluster_field, path),
        cert_pem=_material(user, "client-certificate", base, user_field, path),
        key_pem=_material(user, "client-key", base, user_field, path),
        token=token or None,
        cert_file=cert_file,
    )


def node_name_from_certificate(config):
    # type: (KubeConfig) -> Optional[str]
    """The node name in a kubelet client certificate's subject (CN ``system:node:<name>``), if readable.

    ACK names nodes ``<region>.<ip>``, not after the hostname, so this is the reliable source on a node.
    Uses CPython's certificate decoder (present since 3.4); None if it is unavailable.
    """
    if config.cert_pem is None:
        return None
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    tmpdir = tempfile.mkdtemp(prefix="kube-cert-")
    try:
        path = os.path.join(tmpdir, "cert.pem")
        with open(path, "wb") as fh:
            fh.write(_first_certificate(config.cert_pem))
        try:
            info = decode(path)
        except (ssl.SSLError, ValueError, OSError):
            return None
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    for rdn in info.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value.startswith("system:node:"):
                return value[len("system:node:"):]
    return None


def _first_certificate(pem):
    # type: (bytes) -> bytes
    end = b"-----END CERTIFICATE-----"
    pos = pem.find(end)
    return pem[:pos + len(end)] + b"\n" if pos >= 0 else pem


def _read_at_most(response, limit):
    # type: (http.client.HTTPResponse, int) -> bytes
    """The body, ``limit`` bytes at most, read a piece at a time: before 3.10 http.client's ``read(amt)``
    allocates and zeroes ``amt`` bytes up front (a bytearray it reads into) whatever the Content-Length, so one
    read of the largest answer cost a node's 3.6 64 MiB for every call. Like one ``read(amt)``, it returns a
    body cut short as if whole (the Content-Length still owed tells, below)."""
    pieces = []  # type: List[bytes]
    got = 0
    while got < limit:
        piece = response.read(min(limit - got, _READ_PIECE))
        if not piece:
            break
        pieces.append(piece)
        got += len(piece)
    return b"".join(pieces)


def _closed_without_close_notify(exc):
    # type: (ssl.SSLError) -> bool
    """A TLS peer that closed its connection without close_notify, raised rather than read as the end.

    Python reads that as an end of data (suppress_ragged_eofs), which http.client then finds short of its
    Content-Length. Under OpenSSL 3 it is an error of its own (UNEXPECTED_EOF_WHILE_READING), which Python
    maps back to that end only from 3.10: before (3.6-3.9 linked to OpenSSL 3) it comes as a plain SSLError
    whose reason, looked up in Python's older table, is another name (3.6: KRB5_S_TKT_NYV); OpenSSL's own
    text in the message is right."""
    return isinstance(exc, ssl.SSLEOFError) or "unexpected eof while reading" in str(exc).lower()


class KubeClient(object):
    """HTTPS calls to one API server. One connection per call: calls are few, and simplicity wins."""

    def __init__(self, config, timeout=15.0):
        # type: (KubeConfig, float) -> None
        self.config = config
        self.timeout = timeout
        parts = urlsplit(config.server)
        self._host = parts.hostname or ""
        self._port = parts.port or 443
        self._prefix = parts.path.rstrip("/")
        self._context = self._ssl_context()

    @classmethod
    def from_kubeconfig(cls, path, context=None, timeout=15.0):
        # type: (str, Optional[str], float) -> KubeClient
        return cls(load_kubeconfig(path, context), timeout)

    def _ssl_context(self):
        # type: () -> ssl.SSLContext
        cfg = self.config
        try:
            if cfg.ca_pem is not None:
                context = ssl.create_default_context(cadata=cfg.ca_pem.decode("ascii"))
            else:
                context = ssl.create_default_context()
        except (ssl.SSLError, ValueError, UnicodeDecodeError) as exc:
            raise KubeError("the cluster CA certificate does not load: %s" % exc)
        if cfg.cert_pem is not None:
            if cfg.key_pem is None:
                raise KubeError("kubeconfig has a client certificate but no client key")
            # load_cert_chain only takes files: write them to a private directory and remove it at once.
            tmpdir = tempfile.mkdtemp(prefix="kube-client-")
            try:
                cert_path = os.path.join(tmpdir, "client.crt")
                key_path = os.path.join(tmpdir, "client.key")
                for path, data in ((cert_path, cfg.cert_pem), (key_path, cfg.key_pem)):
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as fh:
                        fh.write(data)
                context.load_cert_chain(cert_path, key_path)
            except ssl.SSLError as exc:
                raise KubeError("the client certificate or key does not load: %s" % exc.reason)
            finally:
                shutil.rmtree(tmpdir, ignore_errors=True)
        return context

    def request(self, method, path, body=None, content_type="application/json", query=None):
        # type: (str, str, Any, str, Optional[Dict[str, str]]) -> Any
        """One API call; returns the decoded JSON answer or raises KubeError."""
        url = self._prefix + path
        if query:
            url += "?" + urlencode(sorted(query.items()))
        headers = {"Accept": "application/json", "User-Agent": "ack-mig-hook"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = content_type
        if self.config.token:
            headers["Authorization"] = "Bearer " + self.config.token
        conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout, context=self._context)
        # Its name lookup under the timeout too (hostlookup.py): the timer below cannot cut a lookup, which
        # has no socket yet, and a name server that does not answer would hold the call for its retries.
        conn._create_connection = create_connection
        # The socket timeout bounds each wait, not the call: a server sending a byte now and then holds it
        # for good. The whole call gets twice the timeout; then its socket is shut, and the read ends.
        limit = 2 * self.timeout
        cut = []  # type: List[bool]
        asked = False

        def cutoff():
            # type: () -> None
            cut.append(True)
            sock = conn.sock
            if sock is not None:
                try:
                    # The plain socket's shutdown, on the TLS socket's descriptor: SSLSocket.shutdown first sets
                    # its _sslobj to None, and a read or write this thread had just checked it for then fails
                    # with ValueError or AttributeError, which no except clause below reads as the cutoff.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass  # closed already (the call ended as the timer fired): nothing left to cut

        timer = threading.Timer(limit, cutoff)
        timer.daemon = True
        timer.start()
        try:
            conn.request(method, url, body=payload, headers=headers)
            asked = True  # connected, TLS handshake done, request sent
            response = conn.getresponse()
            data = _read_at_most(response, MAX_ANSWER_BYTES + 1)  # a byte more than an answer may be: refused below
            status = response.status
            retry_after = response.getheader("Retry-After")
            if response.length and len(data) <= MAX_ANSWER_BYTES:
                # read(amt) returns a body cut short (the timer's shutdown, a peer's close or reset) as if whole,
                # where read() raised: the Content-Length still owed says it was cut (chunked bodies raise)
                raise http.client.IncompleteRead(data, response.length)
        except ssl.SSLError as exc:
            if cut:
                raise KubeError("%s gave no complete answer within %gs" % (self.config.server, limit))
            if asked and _closed_without_close_notify(exc):  # closed mid-answer: as IncompleteRead below
                raise KubeError("%s %s: the API server's answer was cut short (its TLS connection closed "
                                "unannounced)" % (method, path), transient=True)
            raise KubeError("TLS with %s failed: %s" % (self.config.server, getattr(exc, "reason", None) or exc))
        except (socket.timeout, OSError, http.client.HTTPException) as exc:
            if cut:
                raise KubeError("%s gave no complete answer within %gs" % (self.config.server, limit))
            if isinstance(exc, http.client.IncompleteRead):  # closed mid-answer: a reset's kin, worth a retry
                raise KubeError("%s %s: the API server's answer was cut short (%d bytes, %d more owed)"
                                % (method, path, len(exc.partial), exc.expected), transient=True)
            raise KubeError("cannot reach %s: %s" % (self.config.server, exc),
                            transient=isinstance(exc, ConnectionError))  # refused, reset, closed unanswered
        finally:
            timer.cancel()
            conn.close()
        if cut:  # the read ended at the shut socket with part of an answer
            raise KubeError("%s gave no complete answer within %gs" % (self.config.server, limit))
        try:
            decoded = loads(data, "the API server's answer", MAX_ANSWER_BYTES, MAX_ANSWER_DEPTH) if data else None
        except OutsideDataError as exc:
            if status < 400:  # the reader rule (node_bootstrap/outside.py): this call fails, with the reason
                raise KubeError("%s %s: %s" % (method, path, exc), status)
            decoded = None
        if status >= 400:
            message = decoded.get("message") if isinstance(decoded, dict) else None
            transient = status in TRANSIENT_STATUSES  # APF's 429 and a 503 say when to come back: Retry-After
            asked = delay_seconds(retry_after, math.inf) if transient else None
            raise KubeError("%s %s: HTTP %d %s" % (method, path, status, message or "(no message)"), status,
                            transient=transient, retry_after=asked)
        return decoded

    # --- nodes ----------------------------------------------------------------------------------

    def get_node(self, name):
        # type: (str) -> dict
        """The Node; an answer that is no object (what a proxy in front of the server may send) is KubeError."""
        path = "/api/v1/nodes/" + quote(name, safe="")
        answer = self.request("GET", path)
        if not isinstance(answer, dict):
            raise KubeError("GET %s: the API server's answer is no Node object: it is %s" % (path, json_type(answer)))
        return answer

    def patch_node(self, name, patch, patch_type="merge"):
        # type: (str, Any, str) -> dict
        """PATCH a Node; ``patch_type`` is ``merge`` (RFC 7386), ``json`` (RFC 6902) or ``strategic``."""
        if patch_type not in _PATCH_TYPES:
            raise ValueError("patch_type must be one of %s" % ", ".join(sorted(_PATCH_TYPES)))
        return self.request("PATCH", "/api/v1/nodes/" + quote(name, safe=""), patch, _PATCH_TYPES[patch_type])

    def merge_patch_node(self, name, patch):
        # type: (str, dict) -> dict
        """Merge patch: ``{"metadata": {"labels": {"k": "v", "gone": None}}}`` (None deletes a key)."""
        return self.patch_node(name, patch, "merge")

    def json_patch_node(self, name, operations):
        # type: (str, List[dict]) -> dict
        """JSON patch: a list of ``{"op", "path", "value"}``; use a ``test`` op to guard list indexes."""
        return self.patch_node(name, operations, "json")

    # --- pods -----------------------------------------------------------------------------------

    def list_pods(self, namespace=None, node_name=None, label_selector=None):
        # type: (Optional[str], Optional[str], Optional[str]) -> List[dict]
        path = "/api/v1/pods" if namespace is None else "/api/v1/namespaces/%s/pods" % quote(namespace, safe="")
        query = {}  # type: Dict[str, str]
        if node_name:
            query["fieldSelector"] = "spec.nodeName=" + node_name
        if label_selector:
            query["labelSelector"] = label_selector
        answer = self.request("GET", path, query=query or None)
        try:  # a pod left out would read its kubelet allocation as free: none of the list is read
            return list_items(answer, "pod list")
        except OutsideDataError as exc:
            raise KubeError("GET %s: %s" % (path, exc))

    def delete_pod(self, namespace, name):
        # type: (str, str) -> Any
        return self.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (quote(namespace, safe=""),
                                                                          quote(name, safe="")))

    # --- events ---------------------------------------------------------------------------------

    def create_event(self, namespace, event):
        # type: (str, dict) -> dict
        """POST a core v1 Event (the kubelet's own ``system:node`` rules allow events create)."""
        return self.request("POST", "/api/v1/namespaces/%s/events" % quote(namespace, safe=""), event)
