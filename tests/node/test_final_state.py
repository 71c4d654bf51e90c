"""Every way out of apply ends in a final state: a bad request, a client that cannot be started again.
Real processes and files, the local HTTPS API server."""

import json

import pytest

from tests.node.nodecli import Holder, Node, fake_devices, parse

pytestmark = pytest.mark.kube
SEQ = "3g.20gb-3g.20gb"
STATE = "nvidia.com/mig.config.state"
REASON = "ack-mig-hook/mig-config-reason"


@pytest.fixture
def holders():
    started = []
    yield started
    for holder in started:
        holder.stop()


def _node(tmp_path, kube_api, **kw):
    kube_api.add_node("node-a")
    node = Node(tmp_path, **kw)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a"))
    return node, lambda: kube_api.nodes["node-a"]["metadata"]


def _manifest(tmp_path):
    manifest = tmp_path / "manifests" / "nvidia-device-plugin.yml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    return manifest


@pytest.mark.parametrize("argv, fragment", [
    (["--request-file", "/nonexistent/request.json"], "cannot read --request-file /nonexistent/request.json"),
    (["--sequence", "1g.5gb,2g.10gb"], "1g.5gb-2g.10gb"),
])
def test_a_bad_request_is_labelled_failed_with_the_reason(tmp_path, kube_api, argv, fragment):
    node, meta = _node(tmp_path, kube_api)
    res = node.run("apply", *argv)
    assert res.rc == 2 and res.json["error"]["code"] == "bad-input"
    assert fragment in res.json["error"]["message"]
    assert meta()["labels"][STATE] == "failed"
    assert meta()["annotations"][REASON] == res.json["error"]["message"]
    assert res.json["labels"]["states"] == ["failed"]


@pytest.mark.parametrize("fault, rc, code, state", [
    ("insufficient-resources", 1, "insufficient-resources", "failed"),
    (None, 0, None, "success"),
])
def test_a_client_that_cannot_come_back_is_reported_and_the_node_still_labelled(tmp_path, kube_api, holders,
                                                                               fault, rc, code, state):
    manifest = _manifest(tmp_path)
    node, meta = _node(tmp_path, kube_api, clients="manifest:%s" % manifest)
    pattern, gpus = fake_devices(tmp_path)
    # the plugin lets go once its manifest is gone, and leaves a file where the manifest directory was
    holders.append(Holder(tmp_path, "fake-plugin", gpus, node=node, manifest=str(manifest), lag=0.1,
                          then=["block-manifest-dir"]))
    extra = ["--sim-fault", fault] if fault else []
    res = node.run("apply", "--sequence", SEQ, "--gpu-device-glob", pattern, "--client-stop-timeout", "30", *extra)
    assert res.rc == rc, res.stderr
    assert res.json.get("error", {}).get("code") == code  # the real failure, not the client problem
    assert any(p.startswith("could not start manifest:%s" % manifest) for p in res.json["client_problems"])
    assert meta()["labels"][STATE] == state
    # still recorded: the next run puts it back once it can
    assert json.loads((tmp_path / "var" / "stopped-clients.json").read_text()) == [["manifest", str(manifest)]]
    (tmp_path / "manifests").unlink()
    healed = node.run("apply", "--sequence", SEQ)
    assert healed.rc == 0 and manifest.read_text() == "kind: Pod\n" and "client_problems" not in healed.json
