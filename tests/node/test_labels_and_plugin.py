"""Node labels, the device plugin restart and the capacity wait, against the local HTTPS API server
with the kubelet's client certificate; GPU clients through recording systemctl stand-ins."""

import threading
import time

import pytest

from tests.node.nodecli import Node

pytestmark = pytest.mark.kube
SEQ = "3g.20gb-3g.20gb"
STATE = "nvidia.com/mig.config.state"
SEQUENCE = "aliyun.accelerator/nvidia_mig_sequence"


def _setup(tmp_path, kube_api, name="cn-beijing.192.168.0.9", **node_kw):
    kube_api.add_node(name, labels={"kubernetes.io/hostname": "host-9"},
                      taints=[{"key": "ack-mig-hook/pending", "effect": "NoSchedule"}])
    node = Node(tmp_path, **node_kw)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node=name))  # node name from the cert
    return node, name


def test_pending_then_success_with_the_sequence_label_and_no_taint_change(tmp_path, kube_api):
    node, name = _setup(tmp_path, kube_api)
    seen = []
    kube_api.on_node_patch = lambda n, obj: seen.append(obj["metadata"]["labels"].get(STATE))
    res = node.run("apply", "--sequence", SEQ)
    assert res.rc == 0, res.stderr
    assert seen == ["pending", "success"]
    labels = kube_api.nodes[name]["metadata"]["labels"]
    assert labels[STATE] == "success" and labels[SEQUENCE] == "3g.20gb-3g.20gb"
    assert labels["kubernetes.io/hostname"] == "host-9"
    assert kube_api.nodes[name]["spec"]["taints"] == [{"key": "ack-mig-hook/pending", "effect": "NoSchedule"}]
    patches = [r for r in kube_api.requests if r.method == "PATCH"]
    assert all(r.user == "system:node:%s" % name and r.content_type == "application/merge-patch+json"
               and "spec" not in r.body for r in patches)
    assert res.json["labels"] == {"node": name, "enabled": True, "states": ["pending", "success"]}
    # already right: no pending flap, just the final word again
    again = node.run("apply", "--sequence", SEQ)
    assert again.json["changes"] == 0 and again.json["labels"]["states"] == ["success"]


def test_plus_me_sequence_gets_a_valid_label_value(tmp_path, kube_api):
    node, name = _setup(tmp_path, kube_api, count=1)
    assert node.run("apply", "--sequence", "20-19").rc == 0
    assert kube_api.nodes[name]["metadata"]["labels"][SEQUENCE] == "1g.5gb-1g.5gb.me"  # start order; "+" is not allowed


def test_unreachable_api_server_does_not_block_the_gpus(tmp_path, kube_api):
    node, name = _setup(tmp_path, kube_api, count=1)
    kube_api.fail["PATCH"] = 503
    res = node.run("apply", "--sequence", SEQ)
    assert res.rc == 0 and res.json["outcome"] == "success"
    assert "503" in res.json["labels"]["error"]
    assert node.layout() == [(9, 0, 1), (9, 4, 1)]


def test_no_label_makes_no_api_call(tmp_path, kube_api):
    node, name = _setup(tmp_path, kube_api, count=1)
    node.kube_args = ["--no-label", "--kubeconfig", str(tmp_path / "kubelet.conf")]
    assert node.run("apply", "--sequence", SEQ).rc == 0
    assert kube_api.requests == []


def test_capacity_wait_reports_the_device_plugins_resources(tmp_path, kube_api):
    node, name = _setup(tmp_path, kube_api)

    def plugin():  # plays the device plugin coming back a moment after the change
        time.sleep(0.5)
        kube_api.set_capacity(name, {"cpu": "96", "nvidia.com/mig-3g.20gb": "4"})

    threading.Thread(target=plugin, daemon=True).start()
    # the wait ends when the stand-in plugin thread has set the capacity, however late a loaded machine runs it
    res = node.run("apply", "--sequence", SEQ, "--capacity-timeout", "3600", "--capacity-interval", "0.1")
    assert res.rc == 0, res.stderr
    assert res.json["capacity"] == {"expected": {"nvidia.com/mig-3g.20gb": 4},
                                    "reported": {"nvidia.com/mig-3g.20gb": 4}, "ready": True}


def test_capacity_timeout_is_a_failure_with_the_reason_on_the_node(tmp_path, kube_api):
    node, name = _setup(tmp_path, kube_api, count=1)
    kube_api.set_capacity(name, {"nvidia.com/mig-1g.5gb": "7"})  # stale resources from an old layout
    res = node.run("apply", "--sequence", SEQ, "--capacity-timeout", "0.5", "--capacity-interval", "0.1")
    assert res.rc == 1 and res.json["error"]["code"] == "capacity-timeout"
    assert "nvidia.com/mig-3g.20gb=2" in res.json["error"]["message"]
    meta = kube_api.nodes[name]["metadata"]
    assert meta["labels"][STATE] == "failed"
    assert "device plugin" in meta["annotations"]["ack-mig-hook/mig-config-reason"]


def _node_reads(kube_api, name):
    return [r for r in kube_api.requests if r.method == "GET" and r.path == "/api/v1/nodes/" + name]


def test_capacity_wait_asks_a_throttling_api_server_again_no_sooner_than_its_retry_after(tmp_path, kube_api):
    """APF's 429 says when to come back (Retry-After, maxinflight.go tooManyRequests). The capacity wait read
    the Node again after its own interval (0.1 s here, 3 s by default) whatever the server asked, and met the
    same throttle; it waits what the server asks when that is longer, as the labels' writes do."""
    node, name = _setup(tmp_path, kube_api, count=1)
    kube_api.set_capacity(name, {"nvidia.com/mig-3g.20gb": "2"})  # the plugin has published already
    # the first read is the mig-manager check's (one try, then it goes on), the second the capacity wait's
    kube_api.throttle(times=2, retry_after=1, method="GET", path="/api/v1/nodes/" + name)
    res = node.run("apply", "--sequence", SEQ, "--capacity-timeout", "20", "--capacity-interval", "0.1")
    assert res.rc == 0 and res.json["capacity"]["ready"] is True, res.stderr
    reads = _node_reads(kube_api, name)
    assert [r.status for r in reads] == [429, 429, 200]
    assert reads[2].at - reads[1].at >= 1.0, [r.at for r in reads]


def test_a_capacity_wait_the_api_server_asks_past_its_timeout_ends_at_once_and_says_so(tmp_path, kube_api):
    """A Retry-After longer than the capacity wait has left (an hour, against 5 s) is not cut short to a read
    the server refused ahead: it was read every 0.1 s until the timeout, and the failure blamed the device
    plugin. The wait ends at once with its one read, and the failure names the server's answer and its ask."""
    node, name = _setup(tmp_path, kube_api, count=1)
    kube_api.throttle(times=1000, retry_after=3600, method="GET", path="/api/v1/nodes/" + name)
    res = node.run("apply", "--sequence", SEQ, "--capacity-timeout", "5", "--capacity-interval", "0.1")
    assert res.rc == 1 and res.json["error"]["code"] == "capacity-timeout", (res.json, res.stderr)
    message = res.json["error"]["message"]
    assert "HTTP 429" in message and "retry after 3600s" in message, message
    assert len(_node_reads(kube_api, name)) == 2  # the mig-manager check's and the capacity wait's one read
    assert kube_api.nodes[name]["metadata"]["labels"][STATE] == "failed"


def test_pod_delete_restarts_the_daemonset_plugin_on_this_node_only(tmp_path, kube_api):
    node, name = _setup(tmp_path, kube_api, count=1)
    selector = {"app.kubernetes.io/name": "nvidia-device-plugin"}
    kube_api.add_pod("kube-system", "nvdp-here", name, selector)
    kube_api.add_pod("kube-system", "nvdp-elsewhere", "other-node", selector)
    res = node.run("apply", "--sequence", SEQ, "--device-plugin-restart", "pod-delete")
    assert res.rc == 0, res.stderr
    assert ("kube-system", "nvdp-here") not in kube_api.pods
    assert ("kube-system", "nvdp-elsewhere") in kube_api.pods
    # nothing changed on the second run: the plugin is left alone
    kube_api.add_pod("kube-system", "nvdp-here-2", name, selector)
    assert node.run("apply", "--sequence", SEQ, "--device-plugin-restart", "pod-delete").json["changes"] == 0
    assert ("kube-system", "nvdp-here-2") in kube_api.pods


def test_clients_are_stopped_around_a_change_and_only_then(tmp_path):
    manifest = tmp_path / "manifests" / "nvidia-device-plugin.yml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    node = Node(tmp_path, count=1,
                clients="systemd:dcgm-exporter,systemd:nvidia-dcgm,manifest:%s" % manifest)
    node.set_unit("dcgm-exporter")  # active; nvidia-dcgm is not
    res = node.run("apply", "--sequence", SEQ)
    assert res.rc == 0, res.stderr
    assert node.commands() == []  # a simulated node's units are its own: the host's systemctl never runs
    assert node.systemctl() == [
        "systemctl is-active --quiet dcgm-exporter", "systemctl stop dcgm-exporter",
        "systemctl is-active --quiet nvidia-dcgm",
        "systemctl start dcgm-exporter",
    ]
    assert manifest.read_text() == "kind: Pod\n"
    assert "stopped manifest:%s" % manifest in res.stderr and "started manifest:%s" % manifest in res.stderr
    assert node.unit_active("dcgm-exporter")
    node.clear_calls()
    assert node.run("apply", "--sequence", SEQ).json["changes"] == 0
    assert node.systemctl() == [] and node.commands() == []  # already right: nobody is disturbed


def test_clients_come_back_even_when_apply_fails(tmp_path):
    node = Node(tmp_path, count=1, clients="systemd:dcgm-exporter")
    node.set_unit("dcgm-exporter")
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "insufficient-resources")
    assert res.rc == 1
    assert node.systemctl()[-1] == "systemctl start dcgm-exporter" and node.unit_active("dcgm-exporter")


def test_bad_client_spec_is_bad_input(tmp_path):
    node = Node(tmp_path, count=1, clients="systemd:x;rm -rf /")
    res = node.run("apply", "--sequence", SEQ)
    assert res.rc == 2 and "systemd:UNIT" in res.json["error"]["message"]
