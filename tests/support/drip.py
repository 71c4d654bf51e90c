"""A slow peer on loopback: accepts TCP connections and answers one byte a second, for as long as it lives.

What any peer on the network can do to a client whose timeouts are per read (a socket timeout restarts at
every byte received): it never stalls long enough to trip a read timeout, yet never finishes. Every client
of the function must end such a call at its own whole-call deadline (issue 30 item 3). The answer it drips
is ``payload`` (by default the start of an HTTP/1.1 200 answer whose body never completes; an SSH test
gives an SSH identification line instead).

Headers at once, body dripped: ``head`` is sent whole as soon as the request is read, then ``payload``
drips (:data:`HTTP_HEAD`, :data:`JSON_BODY`): the client has its answer's status and headers, as from a
server that stalls mid-body, and only a deadline that covers reading the body ends the call (issue 36 item 4).
The loopback emulators drip a body of their own real answers the same way (:func:`trickle`, through
``tests.support.loopback.LoopbackServer.drip``), for a call that only comes after others answered.

Bounded life: every connection is closed after ``life_s`` seconds and :meth:`stop` (or leaving ``with``)
closes the listener and every connection, so a client that does not enforce its deadline still ends and a
failing test does not hang the suite.
"""

import select
import socket
import threading
import time
from typing import Callable, List

HTTP_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json;charset=utf-8\r\nContent-Length: 100000\r\n\r\n"
JSON_BODY = b"{" + b" " * 99999  # a JSON document that never completes within its Content-Length
HTTP_PAYLOAD = HTTP_HEAD + JSON_BODY

# How long a test lets a call against a Drip (of the usual 15 s life) run: a hang guard, never a speed check.
# A CI runner has 2 cores for 3 test workers, so a call cut at a 1 s deadline may take seconds to unwind;
# what proves the cut is the client's own words ("no complete answer within 1s": its Guard fired), and a
# client that waited the peer out would take the Drip's whole life, past this guard.
HANG_S = 10.0


def trickle(send: Callable[[bytes], object], data: bytes, interval_s: float, stop: threading.Event,
            end: float, sent: Callable[[], None] = lambda: None) -> None:
    """Send ``data`` one byte every ``interval_s`` until it is all sent, ``stop`` is set or the monotonic
    time ``end`` passes; OSError (the client went away) ends it too, raised."""
    for byte in data:
        if stop.is_set() or time.monotonic() >= end:
            return
        send(bytes([byte]))
        sent()
        stop.wait(interval_s)


class Drip:
    def __init__(self, payload: bytes = HTTP_PAYLOAD, interval_s: float = 1.0, life_s: float = 20.0,
                 read_first: bool = True, tls=None, head: bytes = b"", close_notify: bool = False) -> None:
        """``tls``: an ``ssl.SSLContext`` for the server side: the handshake completes at full speed, then
        the answer drips inside TLS (an HTTPS client's handshake has a bound of its own). ``head``: sent at
        once before ``payload`` drips (``Drip(head=HTTP_HEAD, payload=JSON_BODY)``: the body alone drips).
        ``close_notify``: with TLS, the end of the payload is announced (``SSLSocket.unwrap``: TLS's
        close_notify alert, RFC 8446 section 6.1) before the connection closes; without, it just closes."""
        self.payload, self.interval_s, self.life_s, self.read_first = payload, interval_s, life_s, read_first
        self.tls, self.head, self.close_notify = tls, head, close_notify
        self._accepted = 0
        self.sent = 0  # bytes dripped, all connections together
        self._stop = threading.Event()
        self._conns: List[socket.socket] = []
        self._lock = threading.Lock()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self._taking = threading.Lock()

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    @property
    def accepted(self) -> int:
        """The connections made so far: those the kernel has completed into the listen queue are taken (and
        served) first, so a count read right after a client's call includes its connection even where the
        accepting thread was scheduled late (a loaded machine)."""
        self._take()
        with self._lock:
            return self._accepted

    def _take(self) -> None:
        """Accept every connection waiting in the listen queue, each served by a thread of its own."""
        with self._taking:
            while not self._stop.is_set():
                try:
                    conn, _ = self.listener.accept()
                except OSError:  # none waiting (BlockingIOError), or the listener closed
                    return
                with self._lock:
                    self._accepted += 1
                    self._conns.append(conn)
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                select.select([self.listener], [], [], 0.1)
            except (OSError, ValueError):  # closed by stop()
                return
            self._take()

    def _serve(self, conn: socket.socket) -> None:
        end = time.monotonic() + self.life_s
        try:
            if self.tls is not None:
                conn.settimeout(5.0)
                conn = self.tls.wrap_socket(conn, server_side=True)
            if self.read_first:  # the request (or the client's banner): whatever comes first
                conn.settimeout(min(self.life_s, 5.0))
                try:
                    conn.recv(65536)
                except socket.timeout:
                    pass
            if self.head:
                conn.sendall(self.head)
            trickle(conn.sendall, self.payload, self.interval_s, self._stop, end, self._count)
            if self.tls is not None and self.close_notify:
                conn.settimeout(2.0)  # unwrap waits for the client's own close_notify, which may never come
                try:
                    conn.unwrap()
                except (OSError, ValueError):
                    pass  # sent ours; the client's did not come back in time
        except OSError:
            pass  # the client gave up: what the test wants
        finally:
            conn.close()

    def _count(self) -> None:
        with self._lock:
            self.sent += 1

    def start(self) -> "Drip":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.listener.close()
        with self._lock:
            for conn in self._conns:
                try:
                    conn.close()
                except OSError:
                    pass

    def __enter__(self) -> "Drip":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def loopback_tls(folder, name):
    """(CA PEM, server SSLContext) for a dripping peer on 127.0.0.1 (tests.support.kubeapi.CertificateAuthority),
    its key and certificate written under ``folder``."""
    import ssl

    from tests.support.kubeapi import CertificateAuthority

    ca = CertificateAuthority(name)
    cert = ca.issue("127.0.0.1", server_ip="127.0.0.1")
    (folder / "server.crt").write_bytes(cert.cert_pem)
    (folder / "server.key").write_bytes(cert.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(folder / "server.crt"), str(folder / "server.key"))
    return ca.pem, context
