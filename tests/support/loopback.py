"""The HTTP plumbing every loopback emulator shares: a threaded server on 127.0.0.1 at an ephemeral
port, started and stopped by the test (or ``with``), never listening anywhere else.

A subclass answers each request in :meth:`LoopbackServer.respond` with ``(status, body bytes,
headers)``; :func:`json_answer` builds that from a JSON document. What a product's API does (paths,
signatures, errors) stays in its own emulator module.
"""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

from tests.support.drip import trickle
from tests.support.stop_now import shutdown_now

Answer = Tuple[int, bytes, Dict[str, str]]


def refused_port() -> int:
    """A loopback port that refuses every connection at once for as long as this test process runs: a socket
    bound there and never listening (a SYN to it is answered with a reset), held, so that no server can take
    the port (this test's, another test's, another pytest-xdist worker's). A port bound and closed at once
    went back to the kernel: any ``bind(("127.0.0.1", 0))`` in the meantime could be given it, and a test that
    expected "Connection refused" then reached someone else's server. One port serves every caller."""
    if not _REFUSING:
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.bind(("127.0.0.1", 0))
        _REFUSING.append(held)
    return _REFUSING[0].getsockname()[1]


_REFUSING: List[socket.socket] = []


def json_answer(status: int, payload: Any, headers: Optional[Dict[str, str]] = None) -> Answer:
    data = json.dumps(payload).encode("utf-8")
    return status, data, dict({"content-type": "application/json;charset=utf-8"}, **(headers or {}))


def _gzip_twice(spaces: int, data: bytes) -> bytes:
    """``spaces`` bytes of white space then ``data``, gzip-compressed, then compressed again (built 1 MiB at a
    time: the inflated text is never held)."""
    import zlib

    inner = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece, parts = b" " * (1 << 20), []
    while spaces > 0:
        parts.append(inner.compress(piece[:spaces]))
        spaces -= min(spaces, len(piece))
    parts.append(inner.compress(data) + inner.flush())
    outer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return outer.compress(b"".join(parts)) + outer.flush()


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: a sixth client connecting at once has its SYN dropped and
    # retransmits after a second.
    request_queue_size = 128


class LoopbackServer:
    _server: Optional[ThreadingHTTPServer] = None
    # A peer that stalls mid-body (tests/support/drip.py): the answers for which ``drip(method, path)`` is
    # true go out with their headers at once and their body one byte every ``drip_interval_s``, for
    # ``drip_life_s`` at most.
    drip: Optional[Callable[[str, str], bool]] = None
    drip_interval_s = 1.0
    drip_life_s = 20.0
    dripped = 0  # body bytes dripped so far
    # An endpoint that answers with a huge body (a hostile or broken one at an ``ACK_MIG_*_ENDPOINT``): the
    # answers for which ``pad(method, path)`` gives n > 0 go out with n bytes of white space before the body,
    # written 1 MiB at a time (hundreds of MB cost the server no memory). The answer stays valid JSON (RFC
    # 8259, section 2: white space may come before a value), so only a bound on its size stops a client
    # reading it whole. ``padded`` counts the white space that went out before the client stopped reading.
    # ``pad_chunked``: the padded answer goes out in HTTP/1.1 chunks of 1 MiB (RFC 9112, section 7.1), with no
    # Content-Length, as a gateway streaming an answer does; otherwise with its Content-Length.
    pad: Optional[Callable[[str, str], int]] = None
    pad_chunked = False
    padded = 0
    # A compression bomb: the answers for which ``bomb(method, path)`` gives n > 0 go out as n bytes of white
    # space before the body, gzip-compressed twice and labelled ``Content-Encoding: gzip, gzip`` (RFC 9110,
    # section 8.4: the codings in the order applied; urllib3 decodes such a chain, ``MultiDecoder``). A few KB
    # on the wire inflate to n bytes in the client: 1032:1 per gzip layer (deflate's best), so two layers
    # reach far past any bound in one piece of the body, before a count of what was read could see it.
    bomb: Optional[Callable[[str, str], int]] = None

    def respond(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> Answer:
        """One request: ``headers`` with lower-case names, ``path`` with its query string."""
        raise NotImplementedError

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() the emulator first"
        return "http://127.0.0.1:%d" % self._server.server_address[1]

    def start(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                BaseHTTPRequestHandler.setup(self)
                # Headers and body are two writes: without TCP_NODELAY, Nagle holds the body until the
                # client's delayed ACK, 40 ms on each answer of a kept-alive connection (Go's servers, and
                # so Alibaba Cloud's gateways as seen from a client, set it by default).
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass  # keep test output clean

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, data, extra = owner.respond(self.command, self.path, headers, body)
                padding = owner.pad(self.command, self.path) if owner.pad is not None else 0
                inflated = owner.bomb(self.command, self.path) if owner.bomb is not None else 0
                if inflated:
                    data, extra = _gzip_twice(inflated, data), dict(extra, **{"content-encoding": "gzip, gzip"})
                try:
                    self.send_response(status)
                    for name, value in extra.items():
                        self.send_header(name, value)
                    chunked = bool(padding) and owner.pad_chunked
                    if chunked:
                        self.send_header("transfer-encoding", "chunked")
                    else:
                        self.send_header("content-length", str(padding + len(data)))
                    self.end_headers()
                    if self.command == "HEAD":
                        return
                    if padding:
                        self.close_connection = True
                        piece = b" " * (1 << 20)
                        while padding > 0:
                            part = piece[:padding]
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                            owner.padded += len(part)
                            padding -= len(part)
                        if chunked:
                            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data) if data else b"0\r\n\r\n")
                            return
                    if owner.drip is not None and owner.drip(self.command, self.path):
                        self.wfile.flush()
                        trickle(self.connection.sendall, data, owner.drip_interval_s, owner._stopped,
                                time.monotonic() + owner.drip_life_s, owner._dripped)
                        self.close_connection = True
                    else:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to answer

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _serve

        self._stopped = threading.Event()
        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll: stop() (every test's teardown) otherwise waits up to 0.5 s for the loop to notice.
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def _dripped(self) -> None:
        self.dripped += 1

    def stop(self) -> None:
        getattr(self, "_stopped", threading.Event()).set()  # a body still dripping ends
        if self._server is not None:
            shutdown_now(self._server)
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
