"""The stdlib Kubernetes client against a real local HTTPS API server with client-certificate auth."""

import base64

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from node_bootstrap.kube import kubeyaml
from node_bootstrap.kube.client import KubeClient, KubeError, load_kubeconfig, node_name_from_certificate


@pytest.mark.kube
@pytest.mark.parametrize("inline", [False, True])
def test_node_credential_reads_and_labels_its_own_node(kube_api, tmp_path, inline):
    kube_api.add_node("node-a", labels={"keep": "me"})
    path = kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a", inline=inline)
    client = KubeClient(load_kubeconfig(path))
    assert client.get_node("node-a")["metadata"]["labels"] == {"keep": "me"}
    client.merge_patch_node("node-a", {"metadata": {"labels": {"x": "1"}, "annotations": {"r": "why"}}})
    node = kube_api.nodes["node-a"]
    assert node["metadata"]["labels"] == {"keep": "me", "x": "1"}
    assert node["metadata"]["annotations"] == {"r": "why"}
    patch = kube_api.requests[-1]
    assert (patch.method, patch.content_type, patch.user) == (
        "PATCH", "application/merge-patch+json", "system:node:node-a")
    client.merge_patch_node("node-a", {"metadata": {"labels": {"x": None}}})
    assert kube_api.nodes["node-a"]["metadata"]["labels"] == {"keep": "me"}


@pytest.mark.kube
def test_node_credential_cannot_touch_taints_or_other_nodes(kube_api, tmp_path):
    kube_api.add_node("node-a", taints=[{"key": "t", "effect": "NoSchedule"}])
    kube_api.add_node("node-b")
    client = KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "k.conf", node="node-a")))
    with pytest.raises(KubeError) as err:
        client.json_patch_node("node-a", [{"op": "remove", "path": "/spec/taints/0"}])
    assert err.value.status == 403 and "not allowed to modify taints" in str(err.value)
    with pytest.raises(KubeError) as err:
        client.merge_patch_node("node-b", {"metadata": {"labels": {"x": "y"}}})
    assert err.value.status == 403


@pytest.mark.kube
def test_cluster_token_removes_a_taint_with_a_guarded_json_patch(kube_api, tmp_path):
    kube_api.add_node("node-a", taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}])
    client = KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "admin.conf",
                                                                  token="cluster-admin-token")))
    client.json_patch_node("node-a", [{"op": "test", "path": "/spec/taints/1/key", "value": "b"},
                                      {"op": "remove", "path": "/spec/taints/1"}])
    assert kube_api.nodes["node-a"]["spec"]["taints"] == [{"key": "a", "effect": "NoSchedule"}]
    assert kube_api.requests[-1].user == "token:admin"
    with pytest.raises(KubeError) as err:  # the guard fails: nothing removed
        client.json_patch_node("node-a", [{"op": "test", "path": "/spec/taints/0/key", "value": "b"},
                                          {"op": "remove", "path": "/spec/taints/0"}])
    assert err.value.status == 422
    assert len(kube_api.nodes["node-a"]["spec"]["taints"]) == 1


@pytest.mark.kube
def test_wrong_token_and_unknown_node_are_errors_with_status(kube_api, tmp_path):
    kube_api.add_node("node-a")
    bad = KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "bad.conf", token="nope")))
    with pytest.raises(KubeError) as err:
        bad.get_node("node-a")
    assert err.value.status == 401
    assert "nope" not in str(err.value)
    good = KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "k.conf", node="node-a")))
    with pytest.raises(KubeError) as err:
        good.get_node("missing")
    assert err.value.status in (403, 404)


@pytest.mark.kube
def test_tls_is_verified_against_the_kubeconfig_ca(kube_api, tmp_path):
    kube_api.add_node("node-a")
    from tests.support.kubeapi import CertificateAuthority

    path = kube_api.write_kubeconfig(tmp_path / "k.conf", node="node-a", inline=True)
    text = open(path).read()
    other = base64.b64encode(CertificateAuthority("someone-else").pem).decode()
    real = base64.b64encode(kube_api.ca.pem).decode()
    open(path, "w").write(text.replace(real, other))
    with pytest.raises(KubeError) as err:
        KubeClient(load_kubeconfig(path)).get_node("node-a")
    assert err.value.status is None and "TLS" in str(err.value)


@pytest.mark.kube
def test_pods_on_a_node_are_listed_by_selector_and_deleted(kube_api, tmp_path):
    kube_api.add_node("node-a")
    kube_api.add_pod("kube-system", "dp-1", "node-a", {"app": "nvidia-device-plugin"})
    kube_api.add_pod("kube-system", "dp-2", "node-b", {"app": "nvidia-device-plugin"})
    kube_api.add_pod("kube-system", "other", "node-a", {"app": "x"})
    client = KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "k.conf", token="cluster-admin-token")))
    pods = client.list_pods(node_name="node-a", label_selector="app=nvidia-device-plugin")
    assert [p["metadata"]["name"] for p in pods] == ["dp-1"]
    client.delete_pod("kube-system", "dp-1")
    assert ("kube-system", "dp-1") not in kube_api.pods


def test_node_name_comes_from_the_kubelet_certificate(kube_api, tmp_path):
    path = kube_api.write_kubeconfig(tmp_path / "k.conf", node="cn-beijing.192.168.0.7")
    assert node_name_from_certificate(load_kubeconfig(path)) == "cn-beijing.192.168.0.7"
    admin = kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert(), user="admin")
    assert node_name_from_certificate(load_kubeconfig(admin)) is None


def test_kubeconfig_problems_are_one_line_errors(tmp_path):
    cases = {
        "missing": None,
        "http": "clusters:\n- name: c\n  cluster:\n    server: http://x\ncontexts:\n- name: x\n  context:\n"
                "    cluster: c\ncurrent-context: x\n",
        "insecure": "clusters:\n- name: c\n  cluster:\n    server: https://x\n    insecure-skip-tls-verify: true\n"
                    "contexts:\n- name: x\n  context:\n    cluster: c\ncurrent-context: x\n",
        "tabs": "clusters:\n\t- name: c\n",
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(KubeError) as err:
            load_kubeconfig(str(path))
        assert "\n" not in str(err.value), name
        if name == "insecure":  # the way out, not only "refusing"
            assert "insecure-skip-tls-verify: true" in str(err.value) and "certificate-authority-data" in str(err.value)


def test_repr_of_a_kubeconfig_hides_secrets(kube_api, tmp_path):
    cfg = load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "k.conf", node="n", token="s3cret-token"))
    assert "s3cret" not in repr(cfg) and "PRIVATE" not in repr(cfg)


# Runs of digits as text too: PyYAML quotes those that YAML reads as numbers (010) and writes the rest
# plain (08), which a reader must then keep as text.
_text = st.one_of(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
                  st.from_regex(r"\A[-+]?[0-9]{1,4}\Z"))
_scalar = st.one_of(_text, st.integers(-5, 10 ** 6), st.booleans(), st.none())
_key = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz-_./0123456789"), min_size=1, max_size=12)
# Kubeconfig-shaped documents: mappings of scalars, mappings, and lists of mappings (or of scalars).
_doc = st.recursive(_scalar, lambda inner: st.one_of(st.lists(st.dictionaries(_key, inner, min_size=1, max_size=3),
                                                              max_size=3),
                                                     st.lists(_scalar, max_size=3),
                                                     st.dictionaries(_key, inner, max_size=3)), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_key, _doc, min_size=1, max_size=4))
@example({"0": "08"})  # PyYAML writes "'0': 08": 08 is no int in YAML 1.1, so it is the text "08"
def test_kubeyaml_reads_what_pyyaml_writes(doc):
    text = yaml.safe_dump(doc, default_flow_style=False, indent=2)
    assert kubeyaml.loads(text) == yaml.safe_load(text)


@pytest.mark.parametrize("plain", ["0", "-0", "+7", "42", "-13", "08", "09", "0189", "-08", "010", "-010", "00",
                                   "007"])
def test_kubeyaml_reads_plain_numbers_as_yaml_does(plain):
    """Written by hand, unquoted: an int only where YAML 1.1 makes one (decimal, or octal with a leading
    zero), text otherwise, as PyYAML reads it."""
    text = "a: %s\nb:\n- %s\n" % (plain, plain)
    assert kubeyaml.loads(text) == yaml.safe_load(text)


@pytest.mark.kube
def test_a_token_written_as_digits_authenticates_as_text(kube_api, tmp_path):
    """A bearer token of digits with a leading zero, written unquoted the way PyYAML writes it: the node
    sends it exactly as written (not as a number, nor a crash) and the API server accepts it."""
    kube_api.tokens["0800123"] = "admin"
    path = kube_api.write_kubeconfig(tmp_path / "k.conf", token="0800123")
    assert "token: 0800123\n" in open(path).read()
    kube_api.add_node("node-a")
    assert KubeClient(load_kubeconfig(path)).get_node("node-a")["metadata"]["name"] == "node-a"
    assert kube_api.requests[-1].user == "token:admin"


def test_kubeyaml_reads_kubectl_style_sequences_at_key_indent():
    text = ("apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: QUJD # ca\n"
            "    server: 'https://1.2.3.4:6443'\n  name: \"k\"\ncontexts: []\npreferences: {}\n")
    assert kubeyaml.loads(text) == yaml.safe_load(text)


@pytest.mark.kube
def test_node_credential_writes_an_event_about_its_node_that_describe_node_finds(kube_api, tmp_path):
    from node_bootstrap.kube.events import node_event

    kube_api.add_node("node-a")
    node = KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "k.conf", node="node-a")))
    event = node_event("node-a", "MigPartitioned", "MIG layout 3g.20gb-3g.20gb is in place", False, 1700000000.5)
    created = node.create_event("default", event)
    assert created["metadata"]["namespace"] == "default"
    assert kube_api.requests[-1].user == "system:node:node-a" and kube_api.requests[-1].status == 201
    with pytest.raises(KubeError) as err:  # the same name again: AlreadyExists
        node.create_event("default", event)
    assert err.value.status == 409
    with pytest.raises(KubeError) as err:  # a Node's event outside "default" fails the API's validation
        node.create_event("kube-system", dict(event, metadata={"name": "x.1"}))
    assert err.value.status == 422 and "does not match event.namespace" in str(err.value)
    with pytest.raises(KubeError) as err:  # system:node may write events, never read them
        node.request("GET", "/api/v1/events")
    assert err.value.status == 403
    # what `kubectl describe node` asks for: kind, name, namespace "" and the kubelet's uid (the name)
    admin = KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "a.conf", token="cluster-admin-token")))
    found = admin.request("GET", "/api/v1/events", query={
        "fieldSelector": "involvedObject.kind=Node,involvedObject.name=node-a,involvedObject.namespace=,"
                         "involvedObject.uid=node-a"})["items"]
    assert [(e["reason"], e["type"], e["source"]["component"]) for e in found] == [
        ("MigPartitioned", "Normal", "ack-mig-hook")]
    assert found[0]["firstTimestamp"] == "2023-11-14T22:13:20Z" and found[0]["count"] == 1


@pytest.mark.parametrize("where", ["kubeconfig", "client-certificate", "tokenFile"])
def test_a_fifo_where_the_kubeconfig_or_a_file_it_names_should_be_is_refused_at_once(tmp_path, where):
    """open() of a FIFO waits for a writer: at the kubelet's kubeconfig (or a file it names) every node command
    hung before its lock, labels or any deadline, the boot unit's apply until systemd's start timeout. Now it is
    a one-line KubeError naming the file at once."""
    import os
    import signal

    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    config = tmp_path / "kubelet.conf"
    user = {"client-certificate": "client-certificate: %s\n    client-key: %s\n" % (fifo, fifo),
            "tokenFile": "tokenFile: %s\n" % fifo}.get(where)
    if user is None:
        config = fifo
    else:
        config.write_text("clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: x\n"
                          "  context:\n    cluster: c\n    user: u\ncurrent-context: x\nusers:\n- name: u\n  user:\n"
                          "    " + user)

    def blocked(signum, frame):
        raise AssertionError("load_kubeconfig waited on the FIFO at %s" % where)
    old = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(10)
    try:
        with pytest.raises(KubeError) as err:
            load_kubeconfig(str(config))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert str(err.value) == "cannot read %s %s: not a regular file but a FIFO" % (where, fifo)


def _source_line(func, text):
    import inspect

    lines, first = inspect.getsourcelines(func)
    found = [first + i for i, line in enumerate(lines) if text in line]
    assert found, "%s no longer has %r: the instant this test aims at moved" % (func.__qualname__, text)
    return found[0]


def _timer_fires_at(code, line=None):
    """A trace function (sys.settrace) that runs the call's own cutoff, the function KubeClient.request hands
    its whole-call timer, the first time this thread enters ``code`` (or reaches ``line`` in it): the timer
    firing at exactly that instant, between two bytecodes no sleep can aim at. Returns (trace, fired)."""
    fired = []

    def fire(frame):
        outer = frame
        while outer is not None and outer.f_code is not KubeClient.request.__code__:
            outer = outer.f_back
        if outer is not None:
            outer.f_locals["cutoff"]()
            fired.append(frame.f_code.co_name)

    def in_code(frame, event, arg):
        if event == "line" and frame.f_lineno == line and not fired:
            fire(frame)
        return in_code

    def trace(frame, event, arg):
        if event != "call" or frame.f_code is not code or fired:
            return None
        if line is None:
            fire(frame)
            return None
        return in_code

    return trace, fired


@pytest.mark.kube
@pytest.mark.parametrize("where", ["entering SSLSocket.read", "SSLSocket.read past its check",
                                   "SSLSocket.send past its check"])
def test_the_whole_call_cutoff_at_any_instant_of_a_tls_read_or_write_is_the_clients_timeout(kube_api, tmp_path,
                                                                                             where):
    """The whole-call timer shuts the socket from another thread. SSLSocket.shutdown set the socket's
    _sslobj to None first, so a timer firing between recv_into's check of it and read's ("Read on closed or
    unwrapped SSL socket", ValueError), or just after read's or send's own check ('NoneType' object has no
    attribute ..., AttributeError), ended the call in neither of the errors the client turns into its timeout:
    every node command reported an internal error. The plain socket's shutdown leaves the TLS object alone."""
    import ssl
    import sys

    code, line = {
        "entering SSLSocket.read": (ssl.SSLSocket.read.__code__, None),
        "SSLSocket.read past its check": (ssl.SSLSocket.read.__code__,
                                          _source_line(ssl.SSLSocket.read, "return self._sslobj.read(len, buffer)")),
        "SSLSocket.send past its check": (ssl.SSLSocket.send.__code__,
                                          _source_line(ssl.SSLSocket.send, "return self._sslobj.write(data)")),
    }[where]
    kube_api.add_node("node-a")
    client = KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "k.conf", node="node-a")))
    trace, fired = _timer_fires_at(code, line)
    before = sys.gettrace()
    sys.settrace(trace)
    try:
        with pytest.raises(KubeError, match="gave no complete answer within 30s"):
            client.get_node("node-a")
    finally:
        sys.settrace(before)
    assert fired  # the cutoff ran where this test aimed it
    assert client.get_node("node-a")["metadata"]["name"] == "node-a"  # the next call has its own connection
