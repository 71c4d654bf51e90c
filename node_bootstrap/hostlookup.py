"""A host name's lookup under a deadline, and a TCP connection made through it: for every client of ours that
connects to a host by name (the node's and the function's Kubernetes clients, the webhook, the command
line's reachability check, the cloud SDKs' urllib3: functions/base/deadline.py). Standard library only,
Python 3.6 and later.

Why: ``socket.create_connection(..., timeout=)`` bounds the connect, not the name lookup before it.
``getaddrinfo`` waits in the C library for as long as resolv.conf's timeouts, attempts and search domains add
up to (tens of seconds with a name server that does not answer), and nothing in Python can interrupt it.
So the lookup runs in a daemon thread that the caller waits for at most the time it has; a lookup that does
not end in time is left to end on its own (its thread holds nothing of the caller's) and the caller gets
:class:`LookupTimeout`. The connection then goes to the addresses found, so no second, unbounded lookup
follows; TLS is given the host name by its caller (``server_hostname``), not the address, so SNI and the
certificate check are unchanged.

An IP address written out is not looked up at all (no thread): the node's Kubernetes client opens a
connection per call, and an ACK kubeconfig names its API server by address.
"""

import socket
import threading
import time
from typing import Any, Dict, List, Optional, Tuple


class LookupTimeout(socket.timeout):
    """The lookup of ``host`` did not end within ``seconds``. A ``socket.timeout`` (an OSError): callers
    that treat no answer as transient treat this one so too."""

    def __init__(self, host, seconds):
        # type: (str, float) -> None
        super(LookupTimeout, self).__init__("the name lookup of %s took over %gs" % (host, seconds))
        self.host, self.seconds = host, seconds


def lookup(host, port, timeout):
    # type: (str, int, float) -> List[Tuple[Any, ...]]
    """``getaddrinfo(host, port, 0, SOCK_STREAM)``, given up after ``timeout`` seconds (LookupTimeout); its
    own error (``socket.gaierror``) when it fails in time. An IP address is answered at once, in this thread."""
    found = _literal(host, port)
    if found is not None:
        return found
    answer = {}  # type: Dict[str, Any]

    def ask():
        # type: () -> None
        try:
            answer["found"] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except Exception as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
            answer["error"] = exc

    worker = threading.Thread(target=ask, name="lookup")
    worker.daemon = True  # a lookup given up on never keeps the process from ending
    worker.start()
    worker.join(max(0.0, timeout))
    if worker.is_alive():
        raise LookupTimeout(host, timeout)
    if "error" in answer:
        raise answer["error"]
    return answer["found"]


def _literal(host, port):
    # type: (Any, int) -> Optional[List[Tuple[Any, ...]]]
    """``getaddrinfo``'s answer for an IPv4 or IPv6 address written out, which asks no name server
    (``AI_NUMERICHOST``); None for anything else (a name, a scoped IPv6 address: the bounded lookup)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError, TypeError):
            continue
        return socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    return None


def create_connection(address, timeout, source_address=None):
    # type: (Tuple[str, int], float, Optional[Tuple[str, int]]) -> socket.socket
    """``socket.create_connection`` whose lookup is bounded too: lookup and connect end within ``timeout``
    seconds together (each address found is tried with the time left); the socket keeps ``timeout`` for its
    reads and writes. Fits ``http.client.HTTPConnection._create_connection``."""
    host, port = address[0], address[1]
    end = time.monotonic() + timeout
    error = None  # type: Optional[OSError]
    for family, kind, proto, _, where in lookup(host, port, timeout):
        left = end - time.monotonic()
        if left <= 0:
            break
        sock = None
        try:
            sock = socket.socket(family, kind, proto)
            sock.settimeout(left)
            if source_address:
                sock.bind(source_address)
            sock.connect(where)
            sock.settimeout(timeout)
            return sock
        except OSError as exc:
            error = exc
            if sock is not None:
                sock.close()
    if error is not None:
        raise error
    raise socket.timeout("timed out")  # the lookup took the whole time: no address was tried
