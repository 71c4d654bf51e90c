"""The function's one way to the Kubernetes API server: every call of the rollout, the startup-taint
removal, ``status`` and ``doctor`` goes through :class:`KubeApi`.

* **TLS and credentials** from a kubeconfig (``node_bootstrap.kube.load_kubeconfig``: the cluster CA, a
  client certificate and/or a bearer token), never unverified. A kubeconfig's text (ACK's
  ``DescribeClusterUserKubeconfig`` answer) sits in a private temp file only while it is read.
* **Keep-alive**: one HTTPS connection per thread, reused for every call; a connection the server closed
  is reopened on the next call.
* **Retries**: no answer (connection refused or reset, timeout), 429 and 5xx are tried again, at most
  ``attempts`` times in all, with exponential backoff and jitter, waiting at least what ``Retry-After``
  asks, and never past the deadline this client was given (the invocation's). The API server's answers
  that are not transient are never retried: an eviction refused by a PodDisruptionBudget (429 whose
  Status names the cause ``DisruptionBudget``: ``registry/core/pod/storage/eviction.go``), an eviction's
  500 (the documented answer for a pod under several budgets), 4xx.
* **Lists page** with ``limit`` and ``continue``; each page is read item by item, each item reduced
  (``reduce``; None drops it) as soon as it is decoded, so a page's objects never sit in memory whole: what a
  page costs is its text and one item. A list of large objects asks for small pages (``page``); an expired
  continue token (410 ``Expired``, etcd compacted the
  list's revision) starts the list over; a continue token the list already followed (a server that never
  advances) ends it with an ApiError at once, not after MAX_PAGES repeats of one page. Pod lists of a node ask ``resourceVersion=0`` (served from the
  API server's watch cache: one node's pods, not a read through etcd of every pod in the cluster), except
  where a stale list is unsafe (``consistent``: the drain's verdict that a node holds no GPU pod).

Errors are :class:`ApiError` (a ``node_bootstrap.kube.KubeError``) with the HTTP status (None: no answer),
the Status ``reason`` and ``details.causes``. Messages never hold credentials.
"""

import datetime
import email.utils
import http.client
import json
import os
import random
import re
import shutil
import socket
import ssl
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union
from urllib.parse import quote, urlencode, urlsplit

from functions.base.deadline import Guard
from functions.base.textsafe import one_line
from node_bootstrap.hostlookup import LookupTimeout, create_connection
from node_bootstrap.kube import KubeConfig, KubeError, load_kubeconfig
from node_bootstrap.kube.client import MAX_ANSWER_BYTES, MAX_ANSWER_DEPTH
from node_bootstrap.outside import MAX_EPOCH, OutsideDataError, delay_seconds, depth, json_type, list_items, loads
# The reader rule's number and constant checks (node_bootstrap/outside.py), for a page read item by item.
from node_bootstrap.outside import _float as _rule_float, _int as _rule_int, _refuse_constant

PAGE = 500  # items per list page: a 17 KB Node makes a page ~9 MB on the wire
MAX_PAGES = 1000
LIST_RESTARTS = 3  # a list whose continue token expires this often in a row gives up
# A list that may grow its pages (list_all's ``grow``) keeps a grown page's text within this: the function's
# memory holds a page's text and its decoded form at once, and FC gives the function 512 MB. A page of twice as
# many items grows only while it would stay within it (small pods: 500 of them are under 2 MiB); one that comes
# back past four times it (what a fixed page of 16 of the largest pods may hold) is read again at the fixed size
# before it is decoded. Growing up to a quarter of MAX_ANSWER_BYTES took a page of 32 pods of 1 MB (the hostile
# benchmark's peak 130 to 230 MiB).
GROWN_PAGE_BYTES = 4 * 1024 * 1024
RETRY_AFTER_MAX_S = 30.0
BACKOFF_S, BACKOFF_MAX_S = 0.25, 8.0
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"  # policy/v1 DisruptionBudgetCause
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class _TooLarge(Exception):
    """An answer larger than this client reads, where the caller reads it again in pages (list_pods)."""


class ApiError(KubeError):
    """A failed call: ``status`` (None when no answer came), the Status ``reason`` and cause types, and
    the ``Retry-After`` the server asked for (seconds, None when none)."""

    def __init__(self, message: str, status: Optional[int] = None, reason: str = "",
                 causes: Sequence[str] = (), retry_after: Optional[float] = None, final: bool = False) -> None:
        super().__init__(message, status)
        self.reason, self.causes, self.retry_after = reason, tuple(causes), retry_after
        self.final = final  # no answer that another attempt cannot change (TLS does not verify)

    @property
    def budget(self) -> bool:
        """An eviction refused by a PodDisruptionBudget (or one the controller has not processed yet)."""
        return self.status == 429 and DISRUPTION_BUDGET_CAUSE in self.causes

    @property
    def throttled(self) -> bool:
        """API Priority and Fairness (or max-in-flight) turned the call away: try later."""
        return self.status == 429 and not self.budget


def config_from_text(text: str) -> KubeConfig:
    """A kubeconfig's text (ACK's, with the cluster CA) read through a private temp file."""
    fd, path = tempfile.mkstemp(prefix="ack-mig-kubeconfig-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return load_kubeconfig(path)
    except KubeError as exc:  # the temporary file's name means nothing to a reader (and differs per run)
        raise KubeError(str(exc).replace(path, "(the cluster kubeconfig)"), exc.status) from None
    finally:
        os.unlink(path)


def _tls(config: KubeConfig) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cadata=config.ca_pem.decode("ascii") if config.ca_pem else None)
    except (ssl.SSLError, ValueError, UnicodeDecodeError) as exc:
        raise KubeError("the cluster CA certificate does not load: %s" % exc) from None
    if config.cert_pem is not None:
        if config.key_pem is None:
            raise KubeError("kubeconfig has a client certificate but no client key")
        # load_cert_chain reads files only: a private directory, removed at once.
        folder = tempfile.mkdtemp(prefix="ack-mig-client-")
        try:
            paths = []
            for name, data in (("client.crt", config.cert_pem), ("client.key", config.key_pem)):
                path = os.path.join(folder, name)
                with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
                    fh.write(data)
                paths.append(path)
            context.load_cert_chain(paths[0], paths[1])
        except ssl.SSLError as exc:
            raise KubeError("the client certificate or key does not load: %s" % exc.reason) from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return context


def _http_date(text: Optional[str]) -> Optional[float]:
    """An HTTP-date (RFC 9110 5.6.7, ``Sun, 06 Nov 1994 08:49:37 GMT``) as epoch seconds; None for none, any
    other text, or a time no record of ours may name (the reader rule's 1970 to 2100): timed on it, a claim or a
    record would read back as not ours, and another invocation would take what it holds."""
    if not text or len(text) > 64:
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC as RFC 5322 spells an unknown zone
        when = when.replace(tzinfo=datetime.timezone.utc)
    try:
        at = when.timestamp()
    except (OverflowError, ValueError, OSError):
        return None
    return at if 0 <= at <= MAX_EPOCH else None


def _retry_after(headers: Any) -> Optional[float]:
    """``Retry-After`` by the one rule (``outside.delay_seconds``), at most RETRY_AFTER_MAX_S; a wait past the
    deadline ends the retries (:meth:`KubeApi.request`)."""
    return delay_seconds(headers.get("Retry-After") if headers is not None else None, RETRY_AFTER_MAX_S)


class ClusterCredential:
    """Where the function's cluster credential comes from: the operator's kubeconfig file (``--kubeconfig``)
    or the text of a short-lived one from ACK (``text()``, fetched on first use). Calling it gives the
    kubeconfig's text; :meth:`config` the resolved settings (a file's relative paths resolved against its
    folder, as kubectl does). ``attempts``/``deadline_s``: what a client built from it retries within."""

    def __init__(self, text: Optional[Callable[[], str]] = None, path: str = "", attempts: int = 5,
                 deadline_s: Optional[float] = None) -> None:
        self.text, self.path, self.attempts, self.deadline_s = text, path, attempts, deadline_s

    def __call__(self) -> str:
        if self.path:
            with open(self.path, encoding="utf-8") as fh:
                return fh.read()
        assert self.text is not None
        return self.text()

    def config(self) -> KubeConfig:
        return load_kubeconfig(self.path) if self.path else config_from_text(self())

    def client(self, **options: Any) -> "KubeApi":
        options.setdefault("attempts", self.attempts)
        options.setdefault("deadline_s", self.deadline_s)
        return KubeApi(self.config, **options)


ConfigSource = Union[KubeConfig, Callable[[], KubeConfig]]


DATE_RESOLUTION_S = 1.0  # an HTTP Date is whole seconds, cut down (Go's http.TimeFormat of time.Now())


def server_offset(known: Optional[float], seen: float, took: float = 0.0) -> float:
    """The server's clock less ours, from one more answer: ``seen`` is its ``Date`` less our clock when it
    came, ``took`` our clock's time from sending the request to having the whole answer. The Date was stamped
    within that time and is cut to the whole second, so each answer says the offset is in
    ``[seen, seen + 1 + took)``: the largest ``seen`` so far is the tightest bound that is never ahead. Why
    not the last answer's alone: two answers in one second then read as the clock going back by up to a
    second (a run that had planned one wave found the whole wave's time left again, and started a second).
    A ``seen`` below the bound by more than its own answer allows (``1 + took``) cannot come from a steady
    clock: the server's was set back, and it is taken as it is. Why ``took`` counts: an answer stamped late
    in a second that takes a tenth of a second to arrive is more than a second below the bound with no step
    at all (a loaded machine), and read as one the clock went back by over a second all the same."""
    if known is None or seen > known or seen + DATE_RESOLUTION_S + max(0.0, took) < known:
        return seen
    return known


class KubeApi:
    """HTTPS calls to one API server, with the retries, keep-alive and paging above.

    ``config``: a KubeConfig, or a provider of one (called on the first call: an event that never needs
    the API server never fetches a credential). ``deadline_s``: seconds from now after which no retry is
    started (the invocation's end). ``sleep``/``clock``/``jitter``: injectable for tests."""

    def __init__(self, config: ConfigSource, timeout: float = 15.0, deadline_s: Optional[float] = None,
                 attempts: int = 5, page: int = PAGE, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, jitter: Callable[[], float] = random.random,
                 stop_when_silent: bool = False, call_s: Optional[float] = None) -> None:
        self._config: Optional[KubeConfig] = config if isinstance(config, KubeConfig) else None
        self._provider = None if self._config is not None else config
        self.timeout, self.attempts, self.page = timeout, max(1, attempts), page
        self.sleep, self.clock, self.jitter = sleep, clock, jitter
        self.deadline = clock() + deadline_s if deadline_s is not None else None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._offset: Optional[float] = None  # the server's clock less this one's (server_time), once answered
        self._context: Optional[ssl.SSLContext] = None
        self.requests = 0  # HTTP requests sent (the benchmarks read it)
        self.retried = 0  # of those, retries
        # A command's rule (docs/cli.md): once the server has not answered one attempt within ``timeout``, it
        # is not asked again: that call and every later one fail at once with the same error (``silent``),
        # so one silent server costs the command one timeout, not one per call and retry. The function keeps
        # retrying until its invocation's deadline (off by default).
        self.stop_when_silent = stop_when_silent
        self.silent: Optional[ApiError] = None
        # The bound of one whole call, its retries included (None: ``timeout`` an attempt, as many as
        # ``attempts``): each attempt gets what is left of it, and no retry starts past it.
        self.call_s = call_s

    @property
    def connected(self) -> bool:
        """Whether this client has its credential already (a first call was made): a later task can then use
        the API server at no extra cost (no new credential from ACK)."""
        return self._config is not None

    def sibling(self, deadline_s: float, attempts: int = 2, timeout: float = 10.0) -> "KubeApi":
        """A client for one short task after the event (the run record, functions/kube/last_run.py): the same
        credential (no new fetch once this one has it), its own deadline and fewer tries, and it stops once the
        server is silent, so an API server the event found unreachable costs the task one timeout at most."""
        with self._lock:
            config: ConfigSource = self._config if self._config is not None else self._provider  # type: ignore
        return KubeApi(config, timeout=timeout, deadline_s=deadline_s, attempts=attempts, sleep=self.sleep,
                       jitter=self.jitter, stop_when_silent=True)

    def bounded(self, call_s: float, attempts: int = 3) -> "KubeApi":
        """A client whose every call, retries included, ends within ``call_s`` (each socket operation and
        each attempt within what is left of it): for a thread whose calls its owner must be able to wait out
        (the plan marker's renewals, functions/rollout/plan_marker.py). The same credential, this client's
        deadline; it keeps asking a server that was silent once (the next call is a new one)."""
        with self._lock:
            config: ConfigSource = self._config if self._config is not None else self._provider  # type: ignore
        left = None if self.deadline is None else max(0.0, self.deadline - self.clock())
        return KubeApi(config, timeout=call_s, deadline_s=left, attempts=attempts, sleep=self.sleep,
                       clock=self.clock, jitter=self.jitter, call_s=call_s)

    @classmethod
    def from_file(cls, path: str, **options: Any) -> "KubeApi":
        return cls(load_kubeconfig(path), **options)

    @classmethod
    def from_text(cls, text: Callable[[], str], **options: Any) -> "KubeApi":
        """A client whose kubeconfig text comes from ``text()`` on the first call (ACK's, fetched late)."""
        return cls(lambda: config_from_text(text()), **options)

    # ---- one call ----

    def config(self) -> KubeConfig:
        with self._lock:
            if self._config is None:
                assert self._provider is not None
                self._config = self._provider()
            if self._context is None:
                self._context = _tls(self._config)
            return self._config

    def _connection(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            config = self.config()
            parts = urlsplit(config.server)
            conn = http.client.HTTPSConnection(parts.hostname or "", parts.port or 443, timeout=self.timeout,
                                               context=self._context)
            # Its name lookup within the timeout too: the guard below has no socket to cut while getaddrinfo
            # waits for a name server that does not answer (node_bootstrap/hostlookup.py).
            conn._create_connection = create_connection  # type: ignore[attr-defined]
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self._drop()

    def _once(self, method: str, path: str, payload: Optional[bytes], content_type: str,
              query: Optional[Dict[str, str]], timeout: Optional[float] = None) -> Tuple[int, Any, bytes]:
        timeout = self.timeout if timeout is None else timeout
        config = self.config()
        url = urlsplit(config.server).path.rstrip("/") + path
        if query:
            url += "?" + urlencode(sorted(query.items()))
        headers = {"Accept": "application/json", "User-Agent": "ack-mig-hook"}
        if payload is not None:
            headers["Content-Type"] = content_type
        if config.token:
            headers["Authorization"] = "Bearer " + config.token
        self.requests += 1
        # ``timeout`` bounds each socket operation and restarts at every byte; the guard bounds the whole
        # attempt (connect, TLS, send, the last byte of the answer), whatever the peer does (issue 30).
        guard = Guard(timeout)
        response = None
        try:
            with guard:
                conn = self._connection()
                if conn.sock is None:  # a new one: its TLS socket, once made (the handshake has its own bound:
                    conn.timeout = timeout  # each of its socket operations within what is left of the call)
                    conn.connect()
                guard.watch(conn.sock)
                sent = self.clock()  # the answer's Date is stamped after this (server_offset)
                conn.request(method, url, body=payload, headers=headers)
                response = conn.getresponse()
                # One byte more than an answer may be (the reader rule's bound, refused in ``request``), as the
                # node's client reads: read whole first, a proxy's hundreds of MB filled memory before the check.
                data = response.read(MAX_ANSWER_BYTES + 1)
                if response.length and len(data) <= MAX_ANSWER_BYTES:
                    # read(amt) returns a body cut short (the guard's shutdown, a reset) as if whole, where read()
                    # raised: the Content-Length still owed says it was cut (chunked bodies raise by themselves)
                    raise http.client.IncompleteRead(data, response.length)
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            if isinstance(exc, LookupTimeout):  # no address to ask yet: the name, not the server, did not answer
                parts = urlsplit(config.server)
                if self.stop_when_silent:
                    self.silent = ApiError("cannot reach the API server %s:%d: %s; not asked again"
                                           % (parts.hostname, parts.port or 443, exc), final=True)
                    raise self.silent from None
                raise ApiError("cannot reach %s: %s" % (config.server, exc)) from None
            timed_out = guard.fired or isinstance(exc, socket.timeout)
            if timed_out and response is None and self.stop_when_silent:  # not a status line within the bound
                parts = urlsplit(config.server)
                self.silent = ApiError("the API server %s:%d did not answer within %gs; not asked again"
                                       % (parts.hostname, parts.port or 443, self.timeout), final=True)
                raise self.silent from None
            if timed_out:  # cut at the deadline, or a read (the TLS handshake's too) that outwaited its timeout
                raise ApiError("no complete answer from %s within %gs" % (config.server, timeout)) from None
            raise self._unreached(config, exc) from None
        if response.will_close or len(data) > MAX_ANSWER_BYTES:  # past the bound: the rest is left unread
            self._drop()
        date = _http_date(response.headers.get("Date"))
        if date is not None:
            came = self.clock()
            with self._lock:
                self._offset = server_offset(self._offset, date - came, came - sent)
        return response.status, response.headers, data

    def server_time(self) -> Optional[float]:
        """The API server's wall clock (epoch seconds): this client's clock plus the offset its answers'
        ``Date`` headers give (:func:`server_offset`); never ahead of the server's own clock, less than a
        second (and its tightest answer's time on the way) behind it, and never going back while the server's
        does not. None before any answer with a Date. One clock for every invocation, whatever their own
        clocks say (the pool budget's slots, functions/rollout/pool_lease.py)."""
        offset = self._offset
        return None if offset is None else self.clock() + offset

    @staticmethod
    def _unreached(config: KubeConfig, exc: BaseException) -> "ApiError":
        """The ApiError for a call that got no complete answer (the connection is dropped already)."""
        if isinstance(exc, ssl.SSLCertVerificationError):
            return ApiError("TLS with %s failed: %s" % (config.server, exc.verify_message or exc.reason), final=True)
        if isinstance(exc, ssl.SSLError):  # e.g. the server dropped the connection mid-handshake: transient
            return ApiError("TLS with %s failed: %s" % (config.server, exc.reason or exc))
        # a half-read answer or a closed socket: the next attempt opens a new connection
        return ApiError("cannot reach %s: %s" % (config.server, exc.__class__.__name__ if not str(exc) else exc))

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: Optional[Dict[str, str]] = None, retry_500: bool = True,
                read: Optional[Callable[[bytes], Any]] = None) -> Any:
        """One API call, retried as the module docstring says; the decoded JSON answer or ApiError.
        ``read``: how a successful answer's bytes are decoded (default: the reader rule's ``loads``); it
        raises OutsideDataError for what it refuses."""
        if self.silent is not None:  # this command gave up on the server: no call waits for it again
            raise ApiError(str(self.silent), final=True)
        payload = json.dumps(body).encode("utf-8") if body is not None else None
        attempt = 0
        end = None if self.call_s is None else self.clock() + self.call_s
        while True:
            attempt += 1
            try:
                status, headers, data = self._once(method, path, payload, content_type, query,
                                                   None if end is None else max(0.0, end - self.clock()))
            except ApiError as exc:
                if exc.final:
                    raise  # a CA or certificate that does not match: retrying cannot help
                error = exc
            else:
                try:
                    if read is not None and status < 400:
                        decoded = read(data)
                    else:
                        decoded = loads(data, "the API server's answer", MAX_ANSWER_BYTES, MAX_ANSWER_DEPTH) \
                            if data else None
                except OutsideDataError as exc:
                    if status < 400:  # the reader rule (node_bootstrap/outside.py): this call fails, alone
                        raise ApiError("%s %s: %s" % (method, path, exc), status, final=True) from None
                    decoded = None  # e.g. the text/plain 429 of max-in-flight / APF
                if status < 400:
                    return decoded
                error = self._error(method, path, status, decoded, headers)
                if not self._transient(error, retry_500):
                    raise error
            delay = self._delay(attempt, error.retry_after)
            if attempt >= self.attempts or any(bound is not None and self.clock() + delay > bound
                                                for bound in (self.deadline, end)):
                raise error
            self.retried += 1
            self.sleep(delay)

    @staticmethod
    def _error(method: str, path: str, status: int, decoded: Any, headers: Any) -> ApiError:
        status_obj = decoded if isinstance(decoded, dict) and decoded.get("kind") == "Status" else {}
        message = one_line(status_obj.get("message") or ("Too many requests" if status == 429 else
                                                         "(no message)"), 300)
        details = status_obj.get("details")  # a proxy or webhook in front of the server may write anything
        listed = details.get("causes") if isinstance(details, dict) else None
        causes = [c for c in (listed if isinstance(listed, list) else [])[:16] if isinstance(c, dict)]
        said = "; ".join(one_line(c.get("message"), 200) for c in causes if c.get("message"))
        return ApiError("%s %s: HTTP %d %s%s" % (method, path, status, message, " (%s)" % said if said else ""),
                        status, str(status_obj.get("reason") or ""),
                        [str(c.get("type") or c.get("reason") or "") for c in causes], _retry_after(headers))

    @staticmethod
    def _transient(error: ApiError, retry_500: bool) -> bool:
        if error.status == 429:
            return not error.budget
        if error.status == 500:
            return retry_500
        return error.status in (502, 503, 504)

    def _delay(self, attempt: int, retry_after: Optional[float]) -> float:
        backoff = min(BACKOFF_MAX_S, BACKOFF_S * (2 ** (attempt - 1))) * (0.5 + self.jitter() / 2)
        return max(backoff, min(retry_after or 0.0, RETRY_AFTER_MAX_S))

    # ---- lists ----

    def list_all(self, path: str, query: Optional[Dict[str, str]] = None,
                 reduce: Callable[[dict], Any] = lambda item: item, page: Optional[int] = None,
                 grow: int = 0) -> List[Any]:
        """Every item of a list, page by page (``page`` items at most, default this client's), each item
        reduced as it is decoded; items reduced to None are left out. ``grow``: where ``page`` is chosen for
        the largest items (a Pod of 1.5 MiB), a page whose double stays within GROWN_PAGE_BYTES asks for twice
        as many items next (up to ``grow``), and one past four times that (or past what this client reads) is
        asked again at ``page`` (the same continue token): many small items take few pages, never more than
        MAX_PAGES, and no page of large ones grows past a fixed page's text."""
        size = page or self.page
        for _ in range(LIST_RESTARTS + 1):
            out: List[Any] = []
            limit = size
            params = dict(query or {}, limit=str(limit))
            followed: set = set()  # the continue tokens this listing was handed, each followed once
            try:
                for _page in range(MAX_PAGES):
                    read_bytes: List[int] = []

                    def read(data: bytes) -> Any:
                        if grow and limit > size and len(data) > min(MAX_ANSWER_BYTES, 4 * GROWN_PAGE_BYTES):
                            raise _TooLarge()
                        read_bytes.append(len(data))
                        return read_list_page(data, reduce, out)

                    try:
                        answer = self.request("GET", path, query=params, read=read) or {}
                    except _TooLarge:  # the same page again, at the size that always fits
                        limit = size
                        params = dict(params, limit=str(limit))
                        continue
                    if grow and read_bytes and read_bytes[0] * 2 <= GROWN_PAGE_BYTES:
                        limit = min(max(grow, size), limit * 2)
                    token = (answer.get("metadata") or {}).get("continue")
                    if token is None or token == "":  # the last page (the API leaves it out, or empty)
                        return out
                    if not isinstance(token, str):  # a set holds only what hashes: the API's is a string
                        raise ApiError("GET %s: the server's continue token is no text; stopped" % path)
                    if token in followed:  # the same page would come again, as long as it is followed
                        raise ApiError("GET %s: the server handed back a continue token this list had already "
                                       "followed; stopped" % path)
                    followed.add(token)
                    params = dict(query or {}, limit=str(limit), **{"continue": token})
                raise ApiError("GET %s: more than %d pages; stopped" % (path, MAX_PAGES))
            except ApiError as exc:
                if exc.status != 410:
                    raise
                last = exc  # the list's snapshot was compacted away: start over for a consistent one
        raise ApiError("GET %s: the list kept expiring (410) %d times; try again" % (path, LIST_RESTARTS + 1),
                       last.status)

    def list_nodes(self, label_selector: Optional[str] = None,
                   reduce: Callable[[dict], Any] = lambda item: item) -> List[Any]:
        return self.list_all("/api/v1/nodes", {"labelSelector": label_selector} if label_selector else None, reduce)

    def list_pods(self, node_name: Optional[str] = None, namespace: Optional[str] = None,
                  label_selector: Optional[str] = None, consistent: bool = False,
                  reduce: Optional[Callable[[dict], Any]] = None, page: int = 16) -> List[Any]:
        """The pods of one node (or namespace): one call, from the watch cache (``resourceVersion=0``), which
        may lag behind etcd (a pod bound a moment ago can be missing); ``consistent``: a consistent read (no
        resourceVersion), for a verdict that must see every pod bound so far. ``reduce``: each pod reduced as
        it is decoded (None: left out); an answer larger than this client reads (pods anyone may bind to a
        node, up to 1.5 MiB each) is then read again as a consistent list in pages of ``page``."""
        path = "/api/v1/pods" if namespace is None else "/api/v1/namespaces/%s/pods" % quote(namespace, safe="")
        query = {} if consistent else {"resourceVersion": "0"}
        if node_name:
            query["fieldSelector"] = "spec.nodeName=" + node_name
        if label_selector:
            query["labelSelector"] = label_selector
        if reduce is not None:
            kept: List[Any] = []

            def read(data: bytes) -> Any:
                if len(data) > MAX_ANSWER_BYTES:
                    raise _TooLarge()
                return read_list_page(data, reduce, kept)

            try:
                self.request("GET", path, query=query, read=read)
            except _TooLarge:
                query.pop("resourceVersion", None)  # pages come from one consistent snapshot (list_all)
                return self.list_all(path, query, reduce=reduce, page=page)
            return kept
        answer = self.request("GET", path, query=query)
        try:  # a pod left out would let a drain count a node empty that still runs it: none is read
            return list_items(answer, "pod list")
        except OutsideDataError as exc:
            raise ApiError("GET %s: %s" % (path, exc), final=True) from None

    # ---- nodes, pods, events ----

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def get_node(self, name: str) -> dict:
        return self.request("GET", "/api/v1/nodes/" + quote(name, safe=""))

    def patch_node(self, name: str, patch: dict) -> dict:
        """A merge patch (RFC 7386). With ``metadata.resourceVersion`` in it, the API server applies it only
        to that version of the Node (409 Conflict otherwise): the rollout's compare-and-swap."""
        return self.request("PATCH", "/api/v1/nodes/" + quote(name, safe=""), patch, MERGE_PATCH)

    def json_patch_node(self, name: str, operations: List[dict]) -> dict:
        return self.request("PATCH", "/api/v1/nodes/" + quote(name, safe=""), operations, JSON_PATCH)

    def evict(self, namespace: str, name: str) -> None:
        """policy/v1 Eviction; raises ApiError (``budget`` when a PodDisruptionBudget refuses)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        self.request("POST", "/api/v1/namespaces/%s/pods/%s/eviction" % (quote(namespace, safe=""),
                                                                         quote(name, safe="")), body, retry_500=False)

    def create_event(self, event: dict) -> None:
        namespace = (event.get("metadata") or {}).get("namespace") or "default"
        self.request("POST", "/api/v1/namespaces/%s/events" % quote(namespace, safe=""), event)

    # ---- leases (coordination.k8s.io/v1): a pool's disruption budget ----

    @staticmethod
    def _leases(namespace: str) -> str:
        return "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % quote(namespace, safe="")

    def get_lease(self, namespace: str, name: str) -> dict:
        return self.request("GET", "%s/%s" % (self._leases(namespace), quote(name, safe="")))

    def create_lease(self, namespace: str, lease: dict) -> dict:
        """409 AlreadyExists when another writer created it first."""
        return self.request("POST", self._leases(namespace), lease)

    def replace_lease(self, namespace: str, lease: dict) -> dict:
        """A PUT carrying ``metadata.resourceVersion``: applied only to that version (409 Conflict otherwise)."""
        name = quote(str((lease.get("metadata") or {}).get("name") or ""), safe="")
        return self.request("PUT", "%s/%s" % (self._leases(namespace), name), lease)


_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_rule_float, parse_int=_rule_int)
_WHAT = "the API server's answer"


def read_list_page(data: bytes, reduce: Callable[[dict], Any], into: List[Any]) -> Dict[str, Any]:
    """One page of a list under the reader rule (size and nesting bounded before anything is parsed, the
    same number rules), its ``items`` decoded one at a time and each reduced at once (None: left out) and
    appended to ``into``; the page's other fields are returned (``metadata`` holds ``continue``). A page
    that breaks the rule appends nothing and raises OutsideDataError."""
    if len(data) > MAX_ANSWER_BYTES:
        raise OutsideDataError("%s is larger than %d bytes" % (_WHAT, MAX_ANSWER_BYTES))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise OutsideDataError("%s is not UTF-8" % _WHAT) from None
    if depth(text, MAX_ANSWER_DEPTH) > MAX_ANSWER_DEPTH:
        raise OutsideDataError("%s is nested too deeply (more than %d levels)" % (_WHAT, MAX_ANSWER_DEPTH))
    kept: List[Any] = []
    fields: Dict[str, Any] = {}
    try:
        at = _SPACE.match(text, 0).end()
        if text[at:at + 1] != "{":
            raise ValueError("not an object")
        at = _SPACE.match(text, at + 1).end()
        while text[at:at + 1] != "}":
            key, at = json.decoder.scanstring(text, at + 1) if text[at:at + 1] == '"' else _fail("a key")
            at = _SPACE.match(text, at).end()
            if text[at:at + 1] != ":":
                raise ValueError("no ':'")
            at = _SPACE.match(text, at + 1).end()
            if key == "items" and text[at:at + 1] == "[":
                at = _SPACE.match(text, at + 1).end()
                while text[at:at + 1] != "]":
                    item, at = _DECODER.raw_decode(text, at)
                    reduced = reduce(item)
                    del item  # the item goes before the next one is decoded
                    if reduced is not None:
                        kept.append(reduced)
                    at = _SPACE.match(text, at).end()
                    if text[at:at + 1] == ",":
                        at = _SPACE.match(text, at + 1).end()
                    elif text[at:at + 1] != "]":
                        raise ValueError("no ',' or ']' after an item")
                at += 1
            else:
                fields[key], at = _DECODER.raw_decode(text, at)
                if key == "items" and fields[key] is not None:  # not read as none: its pods would go unseen
                    raise OutsideDataError("its items is %s, not a list" % json_type(fields[key]))
            at = _SPACE.match(text, at).end()
            if text[at:at + 1] == ",":
                at = _SPACE.match(text, at + 1).end()
            elif text[at:at + 1] != "}":
                raise ValueError("no ',' or '}' after a field")
        if text[_SPACE.match(text, at + 1).end():]:
            raise ValueError("text after the object")
    except OutsideDataError as exc:
        raise OutsideDataError("%s: %s" % (_WHAT, exc)) from None
    except RecursionError:  # the count above makes this unreachable
        raise OutsideDataError("%s is nested too deeply" % _WHAT) from None
    except (ValueError, IndexError) as exc:
        raise OutsideDataError("%s is not a JSON list (%s)" % (_WHAT, str(getattr(exc, "msg", exc))[:80]),
                               syntax=True) from None
    into.extend(kept)
    return fields


def _fail(what: str) -> Any:
    raise ValueError("%s expected" % what)


def selectors_in(key: str, values: Iterable[str]) -> str:
    """A set-based label selector ``key in (a,b)`` (labels.Parse syntax)."""
    return "%s in (%s)" % (key, ",".join(sorted(set(values))))
