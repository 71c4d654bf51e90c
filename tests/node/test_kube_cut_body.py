"""An API server answer cut short mid-body (the peer closed or reset the connection before its Content-Length
was sent) is no answer: the node's client bounds its read with ``read(amt)``, which http.client returns short
without a word (``read()`` raised IncompleteRead), so the part that came must not be taken as the whole."""

from node_bootstrap.kube.client import KubeClient, KubeConfig, KubeError
from tests.support.drip import HTTP_HEAD, Drip, loopback_tls

# A whole JSON Node: what came parses, and only the Content-Length (100000) still owed says it is not all.
PART = b'{"kind": "Node", "metadata": {"name": "node-a", "labels": {}}}'


def test_an_answer_closed_before_its_content_length_is_a_transient_failure_not_a_node(tmp_path):
    ca_pem, context = loopback_tls(tmp_path, "node-cut-body-ca")
    # No interval: the part goes out at once, then the server closes the connection, 99,9xx bytes owed.
    with Drip(head=HTTP_HEAD, payload=PART, interval_s=0.0, life_s=10, tls=context) as peer:
        client = KubeClient(KubeConfig("https://127.0.0.1:%d" % peer.port, ca_pem, None, None, "t0ken", None),
                            timeout=2.0)
        try:
            node = client.get_node("node-a")
            raise AssertionError("an answer cut short was taken whole: %r" % (node,))
        except KubeError as exc:
            assert "cut short" in str(exc), exc
            assert "within" not in str(exc), exc  # not the client's own deadline
            # A peer closing mid-answer is a reset's kin: the same call may well get through (nodelabels retries)
            assert exc.transient, exc
            assert exc.status is None
        assert peer.sent == len(PART)
