"""A whole-call deadline for a blocking socket: when it passes, the socket is shut down, whatever it is doing.

A socket timeout (``timeout=`` of urllib, http.client, requests, paramiko) bounds each ``recv`` alone and
restarts at every byte received: a peer that sends one byte a second holds such a call for as long as it
likes. :class:`Guard` adds the bound that matters, the whole call: a timer that, at the deadline, shuts the
socket down in both directions (``shutdown(2)``: a ``recv`` blocked in another thread returns at once with
end of file or an error), so the call ends in the library's own "connection closed" error and the caller
reports it as a timeout with :attr:`Guard.fired`.

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
"""

import socket
import threading
import time
from typing import Any, List, Optional

_current = threading.local()  # the Guard of the call this thread is making (see :func:`urllib3_guarded`)
_patched: set = set()
_patch_lock = threading.Lock()


class Guard:
    """``with Guard(deadline_s) as guard: guard.watch(sock); ...``: every watched socket is shut down once
    ``deadline_s`` has passed since the guard started; ``guard.fired`` says whether it had to."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = max(0.0, float(deadline_s))
        self.end = time.monotonic() + self.deadline_s
        self.fired = False
        self._socks: List[Any] = []
        self._lock = threading.Lock()
        self._timer: Optional[threading.Timer] = None

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
        self._timer = threading.Timer(self.left(), self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        _current.guard = self._outer
        if self._timer is not None:
            self._timer.cancel()


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
        where = urllib3.util.connection  # urllib3.connection calls create_connection through this module
        where.create_connection = _bounded_lookup(where.create_connection)


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
