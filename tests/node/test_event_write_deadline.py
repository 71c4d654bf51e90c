"""The node's Event (node_bootstrap/kube/events.py) is best effort: an API server that drips its answer one
byte at a time never holds the node's run past the client's timeout (every wait has a deadline; a socket
timeout alone restarts at every byte)."""

import time

from node_bootstrap.kube.client import KubeClient, KubeConfig, KubeError
from node_bootstrap.kube.events import node_event
from tests.support.drip import Drip, loopback_tls


def test_writing_the_event_ends_at_the_clients_timeout_whatever_the_peer_drips(tmp_path):
    ca_pem, context = loopback_tls(tmp_path, "node-event-drip-ca")
    with Drip(life_s=15, interval_s=0.25, tls=context) as drip:
        client = KubeClient(KubeConfig("https://127.0.0.1:%d" % drip.port, ca_pem, None, None, "t0ken", None),
                            timeout=1.0)
        try:
            client.create_event("default", node_event("node-a", "MigFailed", "gpu-busy", True, time.time()))
            raise AssertionError("a dripped answer was taken as an answer")
        except KubeError as exc:
            # The client's own cutoff (2 x its timeout) ended the call, not the drip's end (15 s): this line is
            # said only where that timer shut the socket. No clock read ("< 5 s" failed a loaded machine).
            assert "gave no complete answer within 2s" in str(exc), exc
        assert drip.sent >= 1
