"""The node's Kubernetes client bounds the API server's name lookup too (node_bootstrap/hostlookup.py): a
kubeconfig naming its server by a name that a silent name server never resolves costs one call the client's
timeout, and the call fails with the line for a server it cannot reach, naming the host and the lookup."""

import time

import pytest

from node_bootstrap.kube.client import KubeClient, KubeConfig, KubeError
from tests.support.slow_dns import HOLD_S, SlowDns

SLOW = "apiserver.slow-dns.example"


def test_a_lookup_that_does_not_answer_ends_at_the_clients_timeout(monkeypatch):
    dns = SlowDns(slow=[SLOW]).install(monkeypatch)
    client = KubeClient(KubeConfig("https://%s:6443" % SLOW, None, None, None, "t0ken", None), timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(KubeError) as caught:
            client.get_node("node-a")
    finally:
        dns.release.set()
    assert time.monotonic() - started < 2 < HOLD_S
    assert str(caught.value) == "cannot reach https://%s:6443: the name lookup of %s took over 1s" % (SLOW, SLOW)
