"""The local API server's client-certificate mode (the kubelet's credential): a certificate issued by the
cluster's CA is accepted and names the user; one issued by another CA is refused at the TLS layer, as a
real kube-apiserver with --client-ca-file refuses it, whether or not bearer tokens are also allowed."""

import pytest

from node_bootstrap.kube.client import KubeClient, KubeError, load_kubeconfig
from tests.support.kubeapi import CertificateAuthority, kube_api_server

pytestmark = pytest.mark.kube


@pytest.mark.parametrize("tokens", [None, {"cluster-admin-token": "admin"}], ids=["certs-only", "certs-and-tokens"])
def test_a_certificate_from_another_ca_is_refused(tmp_path, tokens):
    with kube_api_server(tokens=tokens, workdir=str(tmp_path)) as api:
        api.add_node("node-a", labels={"keep": "me"})
        good = KubeClient(load_kubeconfig(api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a")))
        assert good.get_node("node-a")["metadata"]["labels"] == {"keep": "me"}
        assert api.requests[-1].user == "system:node:node-a"  # the name comes from the certificate
        seen = len(api.requests)

        # The same subject (system:node:node-a, O=system:nodes), but signed by a CA the server does not trust.
        forged = CertificateAuthority("not-the-cluster-ca").issue("system:node:node-a", org="system:nodes")
        bad = KubeClient(load_kubeconfig(api.write_kubeconfig(tmp_path / "forged.conf", cert=forged)))
        with pytest.raises(KubeError) as err:
            bad.get_node("node-a")
        assert err.value.status is None  # refused in the TLS handshake: no HTTP answer at all
        assert len(api.requests) == seen  # and no request reached the handler
        assert api.nodes["node-a"]["metadata"]["labels"] == {"keep": "me"}


def test_without_tokens_a_client_certificate_is_required(tmp_path):
    with kube_api_server(tokens=None, workdir=str(tmp_path)) as api:
        api.add_node("node-a")
        anonymous = KubeClient(load_kubeconfig(api.write_kubeconfig(tmp_path / "anon.conf", token="no-such-mode")))
        with pytest.raises(KubeError) as err:
            anonymous.get_node("node-a")
        assert err.value.status is None and api.requests == []
