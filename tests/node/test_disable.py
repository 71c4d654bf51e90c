"""disable and uninstall-boot-unit end to end: real pynvml over the simulated driver, as a real process,
labels and events against the local HTTPS API server with the kubelet's own certificate."""

import json
import os
import threading
import time

import pytest

from tests.node.nodecli import Node, lay_out

STATE = "nvidia.com/mig.config.state"
SEQUENCE = "aliyun.accelerator/nvidia_mig_sequence"
REASON = "ack-mig-hook/mig-config-reason"


def _partitioned(tmp_path, gpu="A100-SXM4-40GB", count=2, sequence="1g.5gb-2g.10gb-3g.20gb"):
    node = Node(tmp_path, gpu=gpu, count=count)
    root = tmp_path / "root"
    res = node.run("apply", "--sequence", sequence, "--boot-unit", "--boot-unit-root", str(root))
    assert res.rc == 0 and res.json["boot_unit"]["installed"] is True, res.stderr
    return node, root


def _unit_files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _off(node):
    return [(g["mig_current"], g["mig_pending"], g["gis"]) for g in node.sim()["gpus"]]


def test_disable_destroys_every_instance_turns_mig_off_and_removes_the_boot_unit(tmp_path):
    node, root = _partitioned(tmp_path)
    assert _unit_files(root) == ["etc/ack-mig-hook/request.json", "etc/systemd/system/ack-mig-hook.service"]
    res = node.run("disable", "--root", str(root))
    assert res.rc == 0, res.stderr
    assert res.json["outcome"] == "success" and res.json["command"] == "disable"
    # per GPU: 3 compute instances, 3 GPU instances, the mode: 7 NVML calls that change something
    assert res.json["changes"] == 2 * 7
    assert _off(node) == [(0, 0, []), (0, 0, [])]
    assert [g["mig_mode"] for g in res.json["gpus"]] == [{"current": "disabled", "pending": "disabled"}] * 2
    assert _unit_files(root) == []
    assert res.json["boot_unit"]["removed"] is True
    assert res.json["boot_unit"]["commands"] == [["systemctl", "--root", str(root), "disable",
                                                  "ack-mig-hook.service"]]
    assert node.run("status").json["gpus"][0]["instances"] == []


def test_a_second_disable_changes_nothing(tmp_path):
    node, root = _partitioned(tmp_path, count=1)
    assert node.run("disable", "--root", str(root)).rc == 0
    before = open(node.state).read()
    mtime = os.stat(node.state).st_mtime_ns
    again = node.run("disable", "--root", str(root))
    assert again.rc == 0 and again.json["outcome"] == "success"
    assert again.json["changes"] == 0
    assert again.json["boot_unit"]["removed"] is False and again.json["boot_unit"]["commands"] == []
    assert open(node.state).read() == before and os.stat(node.state).st_mtime_ns == mtime


def test_disable_kills_nothing_and_changes_nothing_while_a_gpu_runs_work(tmp_path):
    node, root = _partitioned(tmp_path, count=1)
    before = open(node.state).read()
    res = node.run("disable", "--root", str(root), "--sim-fault", "processes")
    assert res.rc == 4 and res.json["error"]["code"] == "gpu-busy"
    assert "4242" in res.json["error"]["message"] and "--force" in res.json["error"]["message"]
    assert open(node.state).read() == before
    assert len(_unit_files(root)) == 2  # refused before anything changed: the boot unit stays too
    forced = node.run("disable", "--root", str(root), "--sim-fault", "processes", "--force")
    assert forced.rc == 0, forced.stderr
    assert _off(node) == [(0, 0, [])]


def test_hopper_turns_mig_off_at_once(tmp_path):
    node, root = _partitioned(tmp_path, gpu="H200", count=1, sequence="3g.71gb-3g.71gb")
    res = node.run("disable", "--root", str(root))
    assert res.rc == 0, res.stderr
    assert res.json["changes"] == 2 + 2 + 1
    assert _off(node) == [(0, 0, [])]


def test_a_pending_mode_off_that_no_reset_applies_asks_for_a_reboot_that_does_not_bring_the_layout_back(tmp_path):
    node, root = _partitioned(tmp_path, count=1)
    # a client apply does not stop holds the GPU: the mode change stays pending on Ampere (activation
    # IN_USE) and nvidia-smi -r fails
    res = node.run("disable", "--root", str(root), "--sim-fault", "reset-fails")
    assert res.rc == 5 and res.json["outcome"] == "reboot-required", res.stderr
    assert "reboot" in res.json["error"]["message"]
    assert _unit_files(root) == []  # removed before the change: the reboot will not re-apply the layout
    assert node.run("sim-reboot").rc == 0
    again = node.run("disable", "--root", str(root))
    assert again.rc == 0 and again.json["changes"] == 0
    assert _off(node) == [(0, 0, [])]


@pytest.mark.parametrize("gpu", ["A100-SXM4-40GB", "H200"])
def test_disable_sets_a_gpu_back_whose_mode_is_pending_enable(tmp_path, gpu):
    """Current disabled, pending enabled (a mode set while a client held the GPU, never activated): MIG is
    not off, since the next reset or (Ampere) reboot would turn it on. disable sets it back to disabled;
    GPU 1 is off in both and is left alone (issue 20, item 8)."""
    node = Node(tmp_path, gpu=gpu, count=2)
    lay_out(node, [[], []], pending=[1, None])
    assert node.run("status").json["gpus"][0]["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    res = node.run("disable")
    assert res.rc == 0 and res.json["outcome"] == "success", res.stderr
    assert res.json["changes"] == 1  # one nvmlDeviceSetMigMode, on GPU 0 only
    assert _off(node) == [(0, 0, [])] * 2
    assert [g["mig_mode"] for g in res.json["gpus"]] == [{"current": "disabled", "pending": "disabled"}] * 2
    assert node.run("sim-reboot").rc == 0 and _off(node) == [(0, 0, [])] * 2  # nothing turns MIG on after a boot
    assert node.run("disable").json["changes"] == 0


def test_a_gpu_that_is_not_mig_capable_is_already_off(tmp_path):
    node = Node(tmp_path, count=1)
    res = node.run("disable", "--root", str(tmp_path / "root"), "--sim-fault", "not-mig-capable")
    assert res.rc == 0 and res.json["changes"] == 0, res.stderr


def test_uninstall_boot_unit_alone_keeps_the_layout_and_is_idempotent(tmp_path):
    node, root = _partitioned(tmp_path, count=1)
    layout = node.layout()
    res = node.run("uninstall-boot-unit", "--root", str(root))
    assert res.rc == 0 and res.json["removed"] is True, res.stderr
    assert res.json["commands"] == [["systemctl", "--root", str(root), "disable", "ack-mig-hook.service"]]
    assert _unit_files(root) == [] and not (root / "etc" / "ack-mig-hook").exists()
    assert node.layout() == layout  # the GPUs keep their instances until the next reboot
    again = node.run("uninstall-boot-unit", "--root", str(root))
    assert again.rc == 0 and again.json["removed"] is False and again.json["commands"] == []


def test_uninstall_boot_unit_leaves_files_it_did_not_write(tmp_path):
    node, root = _partitioned(tmp_path, count=1)
    (root / "etc" / "ack-mig-hook" / "notes.txt").write_text("mine")
    assert node.run("uninstall-boot-unit", "--root", str(root)).rc == 0
    assert (root / "etc" / "ack-mig-hook" / "notes.txt").read_text() == "mine"


@pytest.mark.kube
def test_disable_clears_the_labels_and_tells_the_node_in_an_event(tmp_path, kube_api):
    name = "cn-beijing.192.168.0.9"
    kube_api.add_node(name, labels={"kubernetes.io/hostname": "host-9"},
                      capacity={"nvidia.com/mig-3g.20gb": "2"})
    node = Node(tmp_path, count=1)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node=name))
    assert node.run("apply", "--sequence", "9-9").rc == 0
    assert kube_api.nodes[name]["metadata"]["labels"][SEQUENCE] == "3g.20gb-3g.20gb"
    seen = []
    kube_api.on_node_patch = lambda n, obj: seen.append(obj["metadata"]["labels"].get(STATE))

    def plugin():  # plays the device plugin restarted with MIG off: the MIG resource goes away
        while not seen:
            time.sleep(0.05)
        time.sleep(0.3)
        kube_api.set_capacity(name, {"nvidia.com/gpu": "1"})

    threading.Thread(target=plugin, daemon=True).start()
    # the wait ends when the stand-in plugin thread has set the capacity, however late a loaded machine runs it
    res = node.run("disable", "--root", str(tmp_path / "root"), "--capacity-timeout", "3600",
                   "--capacity-interval", "0.1")
    assert res.rc == 0, res.stderr
    assert res.json["resources"] == {"mig_resources_left": {}, "ready": True}
    meta = kube_api.nodes[name]["metadata"]
    assert seen == ["pending", None]
    assert STATE not in meta["labels"] and SEQUENCE not in meta["labels"] and REASON not in meta["annotations"]
    assert meta["labels"]["kubernetes.io/hostname"] == "host-9"
    events = [e for e in kube_api.events.values() if e["involvedObject"]["name"] == name]
    assert [(e["reason"], e["type"]) for e in sorted(events, key=lambda e: e["metadata"]["name"])] == [
        ("MigPartitioned", "Normal"), ("MigDisabled", "Normal")]
    assert res.json["event"] == {"reason": "MigDisabled", "written": True}


@pytest.mark.kube
def test_disables_resource_wait_asks_a_throttling_api_server_again_no_sooner_than_its_retry_after(tmp_path, kube_api):
    """The wait until the MIG resources are gone read the Node every interval whatever a 429's Retry-After
    asked (APF, maxinflight.go tooManyRequests), and an ask past its timeout was polled until the timeout and
    said as resources left, "(node unreadable: ...)=1". It waits the ask, as apply's capacity wait does, and an
    ask past the timeout ends it at once, the failure naming the server's answer."""
    name = "node-1"
    kube_api.add_node(name, capacity={"nvidia.com/gpu": "1"})  # the plugin has dropped the MIG resources
    node = Node(tmp_path, count=1)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node=name))
    assert node.run("apply", "--sequence", "9-9").rc == 0
    path = "/api/v1/nodes/" + name
    start = len(kube_api.requests)
    # the first read is the mig-manager check's (one try, then it goes on), the second the resource wait's
    kube_api.throttle(times=2, retry_after=1, method="GET", path=path)
    res = node.run("disable", "--root", str(tmp_path / "root"), "--capacity-timeout", "20",
                   "--capacity-interval", "0.1")
    assert res.rc == 0 and res.json["resources"]["ready"] is True, res.stderr
    reads = [r for r in kube_api.requests[start:] if r.method == "GET" and r.path == path]
    assert [r.status for r in reads] == [429, 429, 200]
    assert reads[2].at - reads[1].at >= 1.0, [r.at for r in reads]
    assert node.run("apply", "--sequence", "9-9").rc == 0
    start = len(kube_api.requests)
    kube_api.throttle(times=1000, retry_after=3600, method="GET", path=path)
    res = node.run("disable", "--root", str(tmp_path / "root"), "--capacity-timeout", "5",
                   "--capacity-interval", "0.1")
    assert res.rc == 1 and res.json["error"]["code"] == "capacity-timeout", (res.json, res.stderr)
    assert "HTTP 429" in res.json["error"]["message"] and "retry after 3600s" in res.json["error"]["message"]
    assert len([r for r in kube_api.requests[start:] if r.method == "GET" and r.path == path]) == 2


@pytest.mark.kube
def test_disable_fails_when_the_node_keeps_offering_mig_resources(tmp_path, kube_api):
    name = "node-1"
    kube_api.add_node(name, capacity={"nvidia.com/mig-3g.20gb": "2"})
    node = Node(tmp_path, count=1)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node=name))
    assert node.run("apply", "--sequence", "9-9").rc == 0
    res = node.run("disable", "--root", str(tmp_path / "root"), "--capacity-timeout", "0.5",
                   "--capacity-interval", "0.1")
    assert res.rc == 1 and res.json["error"]["code"] == "capacity-timeout"
    assert "nvidia.com/mig-3g.20gb=2" in res.json["error"]["message"]
    assert kube_api.nodes[name]["metadata"]["labels"][STATE] == "failed"
    assert _off(node) == [(0, 0, [])]  # the GPUs are off; only the plugin is behind
    reasons = sorted((e["metadata"]["name"], e["reason"], e["message"]) for e in kube_api.events.values())
    assert reasons[-1][1] == "MigDisableFailed" and "nvidia.com/mig-3g.20gb=2" in reasons[-1][2]


@pytest.mark.kube
def test_a_node_run_by_nvidia_mig_manager_is_refused_before_any_change(tmp_path, kube_api):
    name = "node-2"
    kube_api.add_node(name, labels={"nvidia.com/mig.config": "all-1g.5gb", STATE: "success"})
    node = Node(tmp_path, count=1)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node=name))
    for command in (["apply", "--sequence", "9-9"], ["apply", "--sequence", "not-a-profile"],
                    ["disable", "--root", str(tmp_path / "root")]):
        res = node.run(*command)
        assert res.rc == 6 and res.json["outcome"] == "conflict", (command, res.stderr)
        assert res.json["error"]["code"] == "conflict"
        assert "nvidia.com/mig.config=all-1g.5gb" in res.json["error"]["message"]
        assert "mig-manager" in res.json["error"]["message"]
        assert res.json["changes"] == 0
    assert not os.path.exists(node.state) or all(g["gis"] == [] for g in node.sim()["gpus"])
    assert [r.method for r in kube_api.requests if r.method == "PATCH"] == []  # mig-manager's labels untouched
    assert kube_api.nodes[name]["metadata"]["labels"][STATE] == "success"
    events = list(kube_api.events.values())
    assert len(events) == 3 and all(e["reason"] == "MigConflict" and e["type"] == "Warning" for e in events)


@pytest.mark.kube
@pytest.mark.parametrize("fault, reason, state", [
    ([], "MigPartitioned", "success"),
    (["--sim-fault", "insufficient-resources"], "MigFailed", "failed"),
    (["--no-reset", "--sim-fault", "passthrough"], "MigRebootRequired", "rebooting"),
])
def test_apply_writes_one_event_for_its_final_state(tmp_path, kube_api, fault, reason, state):
    name = "node-3"
    kube_api.add_node(name)
    node = Node(tmp_path, count=1)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node=name))
    res = node.run("apply", "--sequence", "9-9", *fault)
    assert kube_api.nodes[name]["metadata"]["labels"][STATE] == state, res.stderr
    (event,) = kube_api.events.values()
    assert event["reason"] == reason and event["involvedObject"] == {
        "kind": "Node", "name": name, "uid": name, "apiVersion": "v1"}
    assert event["metadata"]["namespace"] == "default" and event["source"]["component"] == "ack-mig-hook"
    if state == "success":
        assert event["type"] == "Normal" and "3g.20gb-3g.20gb" in event["message"]
    else:
        assert event["type"] == "Warning" and event["message"] == res.json["error"]["message"]
    posted = [r for r in kube_api.requests if r.method == "POST"]
    assert [(r.path, r.user, r.status) for r in posted] == [
        ("/api/v1/namespaces/default/events", "system:node:%s" % name, 201)]


@pytest.mark.kube
def test_an_event_the_api_server_refuses_does_not_change_the_verdict(tmp_path, kube_api):
    name = "node-4"
    kube_api.add_node(name)
    node = Node(tmp_path, count=1)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node=name))
    kube_api.fail["POST"] = 503
    res = node.run("apply", "--sequence", "9-9")
    assert res.rc == 0 and res.json["outcome"] == "success"
    assert res.json["event"]["written"] is False and "503" in res.json["event"]["error"]
    assert kube_api.nodes[name]["metadata"]["labels"][STATE] == "success"


def test_a_lock_timeout_writes_no_event_and_no_label(tmp_path, kube_api):
    import fcntl

    name = "node-5"
    kube_api.add_node(name)
    node = Node(tmp_path, count=1)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node=name))
    with open(str(tmp_path / "apply.lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        res = node.run("disable", "--root", str(tmp_path / "root"), "--lock-timeout", "0.2")
    assert res.rc == 1 and res.json["error"]["code"] == "locked"
    assert kube_api.events == {} and STATE not in kube_api.nodes[name]["metadata"]["labels"]
    assert "event" not in res.json and json.loads(json.dumps(res.json["labels"]))["states"] == []


@pytest.mark.parametrize("command", ["disable", "uninstall-boot-unit"])
def test_on_a_simulated_node_with_defaults_nothing_reaches_this_machine(tmp_path, command):
    import subprocess
    import sys

    from tests.node.test_sim_host import _check, _harness

    node, env, audit = _harness(tmp_path)
    base = [sys.executable, "-m", "node_bootstrap", "--backend", "sim:A100-SXM4-40GB:1", "--sim-state",
            str(tmp_path / "n.json"), "--json"]
    for argv in (["apply", "--sequence", "9-9", "--boot-unit"], [command]):
        proc = subprocess.run(base + argv, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    unit = result["unit"] if command == "uninstall-boot-unit" else result["boot_unit"]["unit"]
    assert unit == str(tmp_path / "n.host" / "etc" / "systemd" / "system" / "ack-mig-hook.service")
    assert not os.path.exists(unit)
    _check(node, audit, tmp_path)


def test_a_mode_off_left_pending_by_a_client_is_applied_by_the_reset_and_succeeds(tmp_path):
    # A client holds the GPUs while the mode is set (pending, IN_USE) and lets go before the reset: the reset
    # turns MIG off, and disable reads back "off" for every GPU; success, not a reboot request.
    node, root = _partitioned(tmp_path)
    res = node.run("--sim-fault", "held-at-set", "disable", "--root", str(root))
    assert res.rc == 0 and res.json["outcome"] == "success", (res.stderr, res.json)
    assert _off(node) == [(0, 0, []), (0, 0, [])]
    assert res.json["changes"] == 2 * 7 + 1  # the instances and modes, and the one reset of both GPUs


def test_disable_forgets_an_earlier_reboot_request(tmp_path):
    # apply asked for a reboot (the record the reboot guard keeps); MIG is then turned off instead. A later
    # apply of that layout that needs a reboot must ask for one, not call it ineffective.
    from node_bootstrap.host.rebootguard import RECORD

    node, root = _partitioned(tmp_path, count=1)
    record = os.path.join(node.dir, "var", RECORD)
    os.makedirs(os.path.dirname(record), exist_ok=True)
    with open(record, "w") as fh:
        json.dump({"boot_id": "an-earlier-boot", "request": {"kind": "sequence", "value": "x"}}, fh)
    assert node.run("disable", "--root", str(root)).rc == 0
    assert not os.path.exists(record)


@pytest.mark.parametrize("code, said", [(999, "Unknown Error (NVML error 999)"), (10, "Timeout (NVML error 10)")])
def test_a_mig_mode_nvml_cannot_read_is_no_mig_off_and_disable_fails_naming_the_gpu(tmp_path, code, said):
    """nvml.h: nvmlDeviceGetMigMode answers NOT_SUPPORTED for a device without MIG; an UNKNOWN or TIMEOUT answer
    says nothing of the sort. disable read it as "no MIG" and reported MIG off on every GPU, removing the boot
    unit, while GPU 1 still had MIG on and its three instances. It fails now, naming the GPU and NVML's answer,
    and the boot unit stays."""
    node, root = _partitioned(tmp_path)
    res = node.run("disable", "--root", str(root), "--sim-fault", "gpu-error:1:nvmlDeviceGetMigMode:%d" % code)
    assert res.rc == 1 and res.json["error"]["code"] == "nvml-error", (res.json, res.stderr)
    assert res.json["error"]["message"].startswith("GPU 1: NVML answered %s for its MIG mode" % said)
    assert node.sim()["gpus"][1]["mig_current"] == 1 and len(node.sim()["gpus"][1]["gis"]) == 3
    assert "etc/systemd/system/ack-mig-hook.service" in _unit_files(root)
