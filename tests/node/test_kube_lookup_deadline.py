"""The node's Kubernetes client bounds the API server's name lookup too (node_bootstrap/hostlookup.py): a
kubeconfig naming its server by a name that a silent name server never resolves costs one call the client's
timeout, and the call fails with the line for a server it cannot reach, naming the host and the lookup."""

import pytest

from node_bootstrap.kube.client import KubeClient, KubeConfig, KubeError
from tests.support.slow_dns import SlowDns

SLOW = "apiserver.slow-dns.example"


def test_a_lookup_that_does_not_answer_ends_at_the_clients_timeout(monkeypatch):
    dns = SlowDns(slow=[SLOW]).install(monkeypatch)
    client = KubeClient(KubeConfig("https://%s:6443" % SLOW, None, None, None, "t0ken", None), timeout=1.0)
    try:
        with pytest.raises(KubeError) as caught:
            client.get_node("node-a")
        # The call ended while its lookup was still held: it did not wait for the name server (no clock read,
        # "< 2 s" failed a loaded machine; HOLD_S is only what ends a lookup nobody gave up on)
        assert dns.asked == [SLOW] and dns.answered == 0
    finally:
        dns.release.set()
    assert str(caught.value) == "cannot reach https://%s:6443: the name lookup of %s took over 1s" % (SLOW, SLOW)


def test_an_ip_address_is_connected_to_without_a_lookup_thread(monkeypatch):
    """A server written as an IP address (an ACK kubeconfig's usual ``https://192.168.0.1:6443``) has nothing
    to look up: connecting to it started a lookup thread each time all the same, one per API call of the
    node's client (which opens a connection per call). Now only a name is looked up in a thread; a name
    server that does not answer still costs a name its timeout (the test above)."""
    import socket
    import threading

    from node_bootstrap.hostlookup import create_connection, lookup

    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self, *a, **k: started.append(self.name) or start(self, *a, **k))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        for _ in range(3):
            create_connection(("127.0.0.1", server.getsockname()[1]), 1.0).close()
    assert [where[4][0] for where in lookup("127.0.0.1", 443, 1.0)] == ["127.0.0.1"]
    assert {where[4][0] for where in lookup("::1", 443, 1.0)} == {"::1"}
    assert started == [], started  # a thread per connection and per lookup: 5
