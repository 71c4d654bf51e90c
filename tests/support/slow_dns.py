"""A name server that does not answer, for the tests of the lookup deadline: ``socket.getaddrinfo`` replaced
by a stand-in that holds every lookup of a name in ``slow`` until the test ends (or ``HOLD_S``, then the
C library's own "temporary failure" error, so a call with no deadline of its own fails its test by its
time, not by hanging it). ``mapped`` names resolve at once to the address given (a loopback one), so a test
can also see a connection made by name end at the right server with the name kept for TLS. Nothing here
reaches the host's resolver: every other name goes to the suite's loopback guard (tests/conftest.py)."""

import socket
import threading
from typing import Dict, Iterable, List

HOLD_S = 6.0


class SlowDns:
    def __init__(self, slow: Iterable[str] = (), mapped: Dict[str, str] = None) -> None:
        self.slow, self.mapped = set(slow), dict(mapped or {})
        self.release = threading.Event()
        self.asked: List[str] = []
        self.answered = 0  # slow lookups that have ended (released, or HOLD_S passed): a test's proof, not a clock

    def install(self, monkeypatch) -> "SlowDns":
        real = socket.getaddrinfo

        def getaddrinfo(host, port, *args, **kwargs):
            self.asked.append(host)
            if host in self.slow:
                self.release.wait(HOLD_S)
                self.answered += 1
                raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
            return real(self.mapped.get(host, host), port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        return self
