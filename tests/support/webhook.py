"""A real webhook receiver on loopback for the notification tests: HTTP/1.1 (``http.server``) on a socket of
its own, optionally behind TLS with a certificate for 127.0.0.1 from a throwaway CA
(``tests.support.kubeapi.CertificateAuthority``), recording every request it gets.

It is not a model of one chat service; it plays what any HTTP receiver can do to a sender, each case the
test asks for by name: accept (200), refuse (a 4xx), be unwell (503 with ``Retry-After``, as RFC 9110
section 10.2.3 lets a server ask for a later retry), redirect (302 with ``Location``, RFC 9110 section
15.4.3), accept the connection and never answer (``stall_s``: the sender's read timeout must end it), or
answer its status and break the connection off mid-body (``cut_body``: a reset, as a proxy that fails then
does).
"""

import json
import os
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, NamedTuple, Optional

from tests.support.stop_now import shutdown_now


class Received(NamedTuple):
    method: str
    path: str  # with the query
    headers: Dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body.decode("utf-8"))


class Webhook:
    """``answers``: statuses for the next requests, in order (then ``default``); ``headers``: sent with
    every non-2xx answer (``Retry-After``, ``Location``); ``stall_s``: seconds to hold each request
    unanswered (the connection stays open)."""

    def __init__(self, tls_dir: Optional[str] = None, default: int = 200) -> None:
        self.received: List[Received] = []
        self.answers: List[int] = []
        self.default = default
        self.headers: Dict[str, str] = {}
        self.stall_s = 0.0
        self.cut_body = False
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.ca_file = ""
        if tls_dir is not None:
            from tests.support.kubeapi import CertificateAuthority

            ca = CertificateAuthority("webhook-test-ca")
            cert = ca.issue("127.0.0.1", server_ip="127.0.0.1")
            paths = {name: os.path.join(tls_dir, name) for name in ("ca.crt", "server.crt", "server.key")}
            for name, data in (("ca.crt", ca.pem), ("server.crt", cert.cert_pem), ("server.key", cert.key_pem)):
                with open(paths[name], "wb") as fh:
                    fh.write(data)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(paths["server.crt"], paths["server.key"])
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.ca_file = paths["ca.crt"]
        self.port = self.httpd.server_address[1]
        scheme = "https" if tls_dir is not None else "http"
        self.base = "%s://127.0.0.1:%d" % (scheme, self.port)
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def url(self, path: str = "/hooks/T0KEN-abc123-secret-part") -> str:
        return self.base + path

    def lines(self) -> List[dict]:
        with self.lock:
            return [r.json() for r in self.received if r.method == "POST"]

    def __enter__(self) -> "Webhook":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stall_s = 0.0
        shutdown_now(self.httpd)
        self.httpd.server_close()
        self._thread.join(5)


def _handler(hook: Webhook):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # keep test output clean
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with hook.lock:
                hook.received.append(Received("POST", self.path, dict(self.headers.items()), body))
                status = hook.answers.pop(0) if hook.answers else hook.default
            deadline = time.monotonic() + hook.stall_s
            while time.monotonic() < deadline and hook.stall_s:
                time.sleep(0.05)
            reply = b"ok" if 200 <= status < 300 else b"no"
            self.send_response(status)
            if not 200 <= status < 300:
                for key, value in hook.headers.items():
                    self.send_header(key, value)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(reply) + (100 if hook.cut_body else 0)))
            self.end_headers()
            if hook.cut_body:  # the status and part of the body, then a reset (SO_LINGER 0: RST, not FIN)
                import socket
                import struct

                self.wfile.write(reply)
                self.wfile.flush()
                time.sleep(0.1)
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()
                return
            try:
                self.wfile.write(reply)
            except OSError:  # the sender gave up (its timeout) before the answer
                pass

        do_GET = do_POST

    return Handler
