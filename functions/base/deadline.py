"""A whole-call deadline for a blocking socket: when it passes, the socket is shut down, whatever it is doing.

A socket timeout (``timeout=`` of urllib, http.client, requests, paramiko) bounds each ``recv`` alone and
restarts at every byte received: a peer that sends one byte a second holds such a call for as long as it
likes. :class:`Guard` adds the bound that matters, the whole call: a timer that, at the deadline, shuts the
socket down in both directions (``shutdown(2)``: a ``recv`` blocked in another thread returns at once with
end of file or an error), so the call ends in the library's own "connection closed" error and the caller
reports it as a timeout with :attr:`Guard.fired`.

One watchdog thread serves every Guard (:class:`_Watchdog`): an event may make thousands of calls (10,000
nodes), and a thread per call cost as much as the calls' own work in the kill-matrix tests. A call's entry
is cancelled when its ``with`` ends, so a watchdog asleep while Function Compute freezes the process between
invocations finds only cancelled entries when it wakes and cuts nothing.

``socket.socket.shutdown`` is called on the plain socket even for a TLS one: ``SSLSocket.shutdown`` would
first try to unwrap TLS, which the peer we are cutting off may never answer.

Watch the socket a connection ends up with, after ``connect()``: wrapping a socket in TLS makes a NEW socket
object and detaches the old one (``SSLContext.wrap_socket``), so a socket watched before the wrap can no
longer be shut down. The TLS handshake inside ``connect()`` is bounded by Python's own handshake timeout
(the socket timeout, for the whole handshake: ``_ssl.c`` "The handshake operation timed out").

Before ``connect()`` has a socket, the name lookup: urllib3 asks ``socket.getaddrinfo``, which no timeout and
no Guard reaches (it waits in the C library for as long as resolv.conf's timeouts add up to, with a name server
that does not answer). :func:`urllib3_guarded` bounds it too, by the connect timeout and the Guard's time left
(node_bootstrap/hostlookup.py).

A time bound is no size bound: the SDKs read a whole answer into memory (requests' ``Response.content``,
which darabonba's ``DaraCore.do_action`` and aliyunsdkcore's ``HttpResponse`` take), so an endpoint that
sends hundreds of MB quickly exhausts the function's memory within the deadline. :func:`urllib3_guarded`
also counts each answer's body as urllib3 hands it to its reader, and past the calling thread's
``Guard.max_bytes`` (default :data:`MAX_ANSWER_BYTES`) closes the connection and raises
:class:`AnswerTooLarge`, naming the endpoint.
"""

import heapq
import itertools
import os
import socket
import threading
import time
from typing import Any, List, Optional

from functions.base.textsafe import one_line

# The most an SDK answer may carry. The largest answer we read is ECS DescribeInvocationResults with 100
# results of up to 24 KB output each (under 4 MB, functions/cloud/rpc.py); a 100-node page of ACK's
# DescribeClusterNodes is about 100 KB (a node item is under 1 KB). Four times the largest, well below the
# function's memory: an answer past it is no answer of the API.
MAX_ANSWER_BYTES = 16 << 20

_current = threading.local()  # the Guard of the call this thread is making (see :func:`urllib3_guarded`)
_patched: set = set()
_patch_lock = threading.Lock()


class AnswerTooLarge(Exception):
    """An answer whose body went past the calling Guard's ``max_bytes``: cut off there, its connection closed,
    nothing of it read. Not an OSError: the SDKs take those for a broken connection and try again, and the
    endpoint would send the same body again."""

    def __init__(self, endpoint: str, limit: int, coding: str = "") -> None:
        super().__init__(("the answer from %s is larger than %d MiB, more than any answer of the API; it was cut "
                          "off and nothing of it is read" % (endpoint, limit >> 20)) if not coding else (
                          "the answer from %s is compressed in layers (Content-Encoding: %s), as no answer of the API "
                          "is: it may inflate past %d MiB unseen; it was cut off and nothing of it is read"
                          % (endpoint, coding, limit >> 20)))
        self.endpoint, self.limit = endpoint, limit


def answer_too_large(exc: BaseException) -> Optional[AnswerTooLarge]:
    """The :class:`AnswerTooLarge` that ``exc`` is or wraps (darabonba's UnretryableException keeps it as
    ``inner_exception``; others as the cause or context), else None."""
    seen: List[int] = []
    todo: List[Any] = [exc]
    while todo and len(seen) < 16:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        if isinstance(item, AnswerTooLarge):
            return item
        seen.append(id(item))
        todo.extend((getattr(item, "inner_exception", None), item.__cause__, item.__context__))
    return None


def failure_code(exc: BaseException) -> str:
    """An SDK failure's code for a one-line error: ``AnswerTooLarge`` for a cut answer however the SDK wrapped it
    (darabonba names its UnretryableException otherwise), else the service's code or the exception's type."""
    if answer_too_large(exc) is not None:
        return "AnswerTooLarge"
    return one_line(getattr(exc, "code", "") or type(exc).__name__, 64)


def failure_message(exc: BaseException, limit: int = 300, fallback: Any = None) -> str:
    """An SDK failure's message on one line, at most ``limit`` characters: a cut answer's own words (the SDK's
    repr of the exception it wraps would say them inside ``UnretryableException: AnswerTooLarge('...')``).
    ``fallback``: what to say where the exception has no message (default: the exception's text)."""
    too_large = answer_too_large(exc)
    if too_large is not None:
        return str(too_large)
    text = getattr(exc, "message", "") or (exc if fallback is None else fallback)
    return one_line(text, limit)


class Guard:
    """``with Guard(deadline_s) as guard: guard.watch(sock); ...``: every watched socket is shut down once
    ``deadline_s`` has passed since the guard started, unless the ``with`` has ended by then; ``guard.fired``
    says whether it had to. An answer body an SDK reads through urllib3 in the guard's thread past
    ``max_bytes`` (None: no bound) ends in :class:`AnswerTooLarge` (:func:`urllib3_guarded`)."""

    def __init__(self, deadline_s: float, max_bytes: Optional[int] = MAX_ANSWER_BYTES) -> None:
        self.max_bytes = max_bytes
        self.deadline_s = max(0.0, float(deadline_s))
        self.end = time.monotonic() + self.deadline_s
        self.fired = False
        self._socks: List[Any] = []
        self._lock = threading.Lock()
        self._entry: Optional[List[Any]] = None  # in the shared watchdog's heap while the guard is entered

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def watch(self, sock: Any) -> Any:
        """Shut ``sock`` down at the deadline (at once when it has passed); returns it."""
        with self._lock:
            self._socks.append(sock)
            late = self.fired or time.monotonic() >= self.end
        if late:
            self._fire()
        return sock

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            socks = list(self._socks)
        for sock in socks:
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except (OSError, TypeError, ValueError):
                pass  # closed already, or not a socket any more: nothing left to cut

    def __enter__(self) -> "Guard":
        self._outer = getattr(_current, "guard", None)
        _current.guard = self
        self._entry = _WATCHDOG.add(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _current.guard = self._outer
        if self._entry is not None:
            _WATCHDOG.cancel(self._entry)
            self._entry = None


class _Watchdog:
    """One daemon thread that fires each entered Guard at its end: a heap of ``[end, order, guard]`` entries and
    a condition the thread sleeps on until the earliest end (or a new earlier one). Cancelling an entry only
    blanks its guard (no heap removal, no wake-up): the thread drops it when its end comes. Firing happens
    under the lock, so once :meth:`cancel` returns the guard is never fired (a Timer could still fire a call
    that had just ended); ``_fire`` only calls ``shutdown(2)``, which does not block. The thread ends when
    the heap is empty, so it outlives the last call by that call's deadline at most; the next call starts
    a new one."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: List[List[Any]] = []
        self._order = itertools.count()  # ties on ``end`` never compare guards
        self._thread: Optional[threading.Thread] = None

    def add(self, guard: "Guard") -> List[Any]:
        entry = [guard.end, next(self._order), guard]
        with self._cond:
            heapq.heappush(self._heap, entry)
            if self._thread is None or not self._thread.is_alive():  # none yet, or ended
                self._thread = threading.Thread(target=self._run, name="deadline-watchdog", daemon=True)
                try:
                    self._thread.start()
                except BaseException:  # no thread (a Timer failed the same way): __exit__ never comes for it
                    entry[2] = None
                    raise
            elif self._heap[0] is entry:
                self._cond.notify()  # the thread sleeps until a later end: wake it for this one
        return entry

    def cancel(self, entry: List[Any]) -> None:
        with self._cond:
            entry[2] = None

    def _run(self) -> None:
        with self._cond:
            while self._heap:
                end, _, guard = self._heap[0]
                wait = end - time.monotonic()
                if guard is not None and wait > 0:
                    # woken early by an earlier entry, or at this end; at most an hour at a time, as wait()
                    # refuses a timeout past threading.TIMEOUT_MAX (a Guard of float("inf"))
                    self._cond.wait(min(wait, 3600.0))
                    continue
                heapq.heappop(self._heap)
                if guard is not None:
                    try:
                        guard._fire()
                    except Exception:  # never seen: _fire takes a socket's errors; the others' cuts still come
                        pass
            self._thread = None  # under the lock: an add() after this starts a new thread


_WATCHDOG = _Watchdog()
# A forked child has no watchdog thread, and the lock may have been held by it at the fork: a fresh one.
# (The parent's calls are not the child's: a Timer thread did not survive a fork either.)
os.register_at_fork(after_in_child=_WATCHDOG.__init__)


def urllib3_guarded(urllib3: Any) -> None:
    """Let a :class:`Guard` reach the sockets of an SDK that calls through ``urllib3`` (the cloud SDKs do,
    some through a vendored copy: pass that package). Once per package: a connection's socket is watched
    once ``connect()`` made it (TLS included: the socket it ends up with), and a kept one as the pool hands
    it out (``HTTPConnectionPool._get_conn``), by the guard of the calling thread, if any. Without a guard in
    the thread nothing changes."""
    with _patch_lock:
        if id(urllib3) in _patched:
            return
        _patched.add(id(urllib3))
        for cls in (urllib3.connection.HTTPConnection, urllib3.connection.HTTPSConnection):
            if "connect" not in vars(cls):
                continue  # inherits the wrapped one

            def wrap(connect: Any) -> Any:
                def guarded_connect(self: Any, *args: Any, **kwargs: Any) -> Any:
                    answer = connect(self, *args, **kwargs)
                    guard = getattr(_current, "guard", None)
                    if guard is not None and getattr(self, "sock", None) is not None:
                        guard.watch(self.sock)
                    return answer
                return guarded_connect

            cls.connect = wrap(vars(cls)["connect"])
        pool = urllib3.connectionpool.HTTPConnectionPool
        get_conn = pool._get_conn

        def _get_conn(self: Any, *args: Any, **kwargs: Any) -> Any:
            conn = get_conn(self, *args, **kwargs)
            guard = getattr(_current, "guard", None)
            if guard is not None and getattr(conn, "sock", None) is not None:
                guard.watch(conn.sock)
            return conn

        pool._get_conn = _get_conn
        response = urllib3.response.HTTPResponse
        for name in ("read", "read1"):  # independent of each other: neither calls the other
            if name in vars(response):
                setattr(response, name, _counted_read(vars(response)[name]))
        if "read_chunked" in vars(response):  # what stream() reads a chunked body with, instead of read()
            response.read_chunked = _counted_chunks(vars(response)["read_chunked"])
        where = urllib3.util.connection  # urllib3.connection calls create_connection through this module
        where.create_connection = _bounded_lookup(where.create_connection)


def _codings(response: Any) -> str:
    """The response's ``Content-Encoding`` where it names more than one coding, else "". urllib3 decodes such a
    chain (``MultiDecoder``) and, in the 1.x that aliyun-python-sdk-core vendors, decodes each piece read
    through every layer at once with no bound: 1032:1 per gzip layer (deflate's best), so a few KB of
    ``gzip, gzip`` inflate to GBs inside one read, before :func:`_count` sees them. The APIs send one coding
    at most."""
    headers = getattr(response, "headers", None)
    coding = headers.get("content-encoding", "") if headers is not None else ""
    coding = one_line(coding or "", 64)
    return coding if len([c for c in coding.split(",") if c.strip()]) > 1 else ""


def _refuse_stacked(response: Any) -> None:
    """Before a read under a Guard with ``max_bytes``: a stacked coding (:func:`_codings`) closes the response
    and raises AnswerTooLarge, nothing of it decoded."""
    guard = getattr(_current, "guard", None)
    if guard is None or guard.max_bytes is None:
        return
    coding = _codings(response)
    if coding:
        _cut_off(response, guard, coding)


def _endpoint(response: Any) -> str:
    pool = getattr(response, "_pool", None)
    return ("%s://%s:%s" % (pool.scheme, pool.host, pool.port) if pool is not None
            and getattr(pool, "host", None) else "an endpoint")


def _count(response: Any, data: Any) -> Any:
    """``data``, just read from ``response``'s body, counted against the calling thread's Guard's
    ``max_bytes``: past it the response is closed (its connection is not put back into the pool half read)
    and AnswerTooLarge raised. requests reads a body in pieces of 10 KiB (``iter_content``), so what is held
    when it is cut is the bound and one piece."""
    guard = getattr(_current, "guard", None)
    if guard is None or guard.max_bytes is None or not data:
        return data
    seen = getattr(response, "_guard_bytes", 0) + len(data)
    response._guard_bytes = seen
    if seen > guard.max_bytes:
        _cut_off(response, guard)
    return data


def _cut_off(response: Any, guard: "Guard", coding: str = "") -> None:
    """``response`` closed (its connection not put back into the pool half read) and AnswerTooLarge raised."""
    endpoint = _endpoint(response)
    try:
        response.close()
    except Exception:  # a close that fails leaves the same: nothing more is read from it
        pass
    raise AnswerTooLarge(endpoint, guard.max_bytes, coding)


def _counted_read(read: Any) -> Any:
    def counted_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_stacked(self)
        return _count(self, read(self, *args, **kwargs))
    return counted_read


def _counted_chunks(read_chunked: Any) -> Any:
    def counted_chunks(self: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_stacked(self)
        for chunk in read_chunked(self, *args, **kwargs):
            yield _count(self, chunk)
    return counted_chunks


def _is_address(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _bounded_lookup(create: Any) -> Any:
    """urllib3's ``create_connection`` whose name lookup ends within the connect timeout (and the calling
    thread's Guard, if any): node_bootstrap.hostlookup.lookup, whose :class:`LookupTimeout` is a
    ``socket.timeout``, so urllib3 reports it as its own ConnectTimeoutError (the lookup's words in its
    cause). The connection then goes to each address found, through urllib3's own function, so socket options
    and its errors are unchanged; TLS is still given the host name by urllib3, never the address. A lookup
    without a bound (no timeout, no Guard) or of an address is urllib3's own."""
    def create_connection(address: Any, timeout: Any = socket._GLOBAL_DEFAULT_TIMEOUT,  # type: ignore[attr-defined]
                          source_address: Any = None, socket_options: Any = None) -> Any:
        host, port = address[0], address[1]
        bare = host.strip("[]") if isinstance(host, str) else host
        limit = float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None
        guard = getattr(_current, "guard", None)
        if guard is not None:
            limit = guard.left() if limit is None else min(limit, guard.left())
        if limit is None or not isinstance(bare, str) or not bare or _is_address(bare):
            return create(address, timeout, source_address=source_address, socket_options=socket_options)
        from node_bootstrap.hostlookup import lookup

        error: Optional[OSError] = None
        for _, _, _, _, found in lookup(bare, port, limit):
            try:
                return create((found[0], port), timeout, source_address=source_address,
                              socket_options=socket_options)
            except OSError as exc:
                error = exc
        raise error or OSError("getaddrinfo returns an empty list")
    return create_connection
