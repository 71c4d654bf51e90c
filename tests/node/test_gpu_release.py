"""Clients really gone before the first mutating call: apply waits until no other process holds a GPU
device file (real processes holding real files), and fails naming them when they do not let go."""

import os

import pytest

from tests.node.nodecli import Holder, Node, fake_devices, gi_id, lay_out

SEQ = "3g.20gb-3g.20gb"


def _manifest(tmp_path):
    manifest = tmp_path / "manifests" / "nvidia-device-plugin.yml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    return manifest


def test_apply_waits_for_the_stopped_plugin_to_let_go_before_changing_anything(tmp_path, holders):
    manifest = _manifest(tmp_path)
    node = Node(tmp_path, clients="manifest:%s" % manifest)
    assert node.run("status").rc == 0
    pattern, gpus = fake_devices(tmp_path)
    dev = os.path.dirname(gpus[0])
    plugin = Holder(tmp_path, "fake-plugin", gpus + [os.path.join(dev, "nvidiactl")], node=node,
                    manifest=str(manifest), lag=1.0)
    holders.append(plugin)
    # held for the node's lifetime and not a client: /dev/nvidiactl alone, and nvidia-persistenced
    holders.append(Holder(tmp_path, "nvml-monitor", [os.path.join(dev, "nvidiactl")]))
    holders.append(Holder(tmp_path, "nvidia-persistenced", gpus))
    res = node.run("apply", "--sequence", SEQ, "--gpu-device-glob", pattern, "--client-stop-timeout", "30")
    assert res.rc == 0, res.stderr
    # while the plugin still held the GPUs, nothing had been changed on them
    assert [(g["mig_pending"], g["gis"]) for g in plugin.seen()] == [(0, [])] * 2
    assert "waiting up to 30s for the GPUs to be released: pid %d (fake-plugin) holds %s" % (
        plugin.pid, ", ".join(gpus)) in res.stderr
    assert "nvml-monitor" not in res.stderr and "nvidia-persiste" not in res.stderr
    assert node.layout(0) == node.layout(1) == [(9, 0, 1), (9, 4, 1)]
    assert manifest.read_text() == "kind: Pod\n"


def test_a_holder_that_never_lets_go_is_named_and_nothing_changes(tmp_path, holders):
    manifest = _manifest(tmp_path)
    node = Node(tmp_path, clients="manifest:%s" % manifest)
    assert node.run("status").rc == 0
    before = open(node.state).read()
    pattern, gpus = fake_devices(tmp_path)
    dcgm = Holder(tmp_path, "nv-hostengine", gpus[1:])
    holders.append(dcgm)
    res = node.run("apply", "--sequence", SEQ, "--gpu-device-glob", pattern, "--client-stop-timeout", "1")
    assert res.rc == 4, res.stderr
    error = res.json["error"]
    assert error["code"] == "gpu-busy" and res.json["changes"] == 0
    assert "still held 1s after stopping their clients: pid %d (nv-hostengine) holds %s;" % (
        dcgm.pid, gpus[1]) in error["message"]
    assert "--clients" in error["message"] and "\n" not in error["message"]
    assert open(node.state).read() == before
    assert manifest.read_text() == "kind: Pod\n"  # the stopped client is back
    # 0 turns the check off (the holder is still there)
    assert node.run("apply", "--sequence", SEQ, "--gpu-device-glob", pattern, "--client-stop-timeout", "0").rc == 0


def test_a_simulated_node_ignores_this_machines_device_files_unless_asked(tmp_path, holders):
    """Without --gpu-device-glob a sim node must not look at /dev here; asked, it checks the given files
    (both runs change the MIG mode, the change a holder of the GPU's file is in the way of)."""
    pattern, gpus = fake_devices(tmp_path, count=1)
    holders.append(Holder(tmp_path, "someone", gpus))
    assert Node(tmp_path / "a", count=1).run("apply", "--sequence", SEQ, "--client-stop-timeout", "0.5").rc == 0
    assert Node(tmp_path / "b", count=1).run("apply", "--sequence", SEQ, "--gpu-device-glob", pattern,
                                             "--client-stop-timeout", "0.5").rc == 4


@pytest.mark.parametrize("fault, said", [
    # a client apply does not know still holds the GPU: nvmlDeviceSetMigMode answers IN_USE
    ("reset-fails", "(activation: In use by another client, NVML error 19) and GPU reset is disabled"),
    # passthrough: no reset exposed, the driver answers RESET_REQUIRED
    ("passthrough", "(activation: GPU requires restart, NVML error 16) and the GPUs are passed through to a VM"),
])
def test_a_mode_left_pending_says_what_the_driver_answered(tmp_path, fault, said):
    node = Node(tmp_path)
    res = node.run("apply", "--sequence", SEQ, "--no-reset", "--sim-fault", fault)
    assert res.rc == 5
    assert "MIG mode is pending on GPU 0, 1 " + said in res.json["error"]["message"]


@pytest.mark.parametrize("code, said", [(999, "Unknown Error (NVML error 999)"), (10, "Timeout (NVML error 10)")])
def test_a_virtualization_mode_nvml_cannot_read_is_never_taken_for_a_gpu_that_may_be_reset(tmp_path, code, said):
    """nvml.h: nvmlDeviceGetVirtualizationMode answers SUCCESS on every GPU since Kepler, else GPU_IS_LOST or
    UNKNOWN. Any error read as "not passed through to a VM", so a pending mode on a passthrough GPU whose answer
    was UNKNOWN or TIMEOUT got nvidia-smi -r, which such a GPU does not expose. Unknown, it gets no reset: the
    reboot that applies the mode is asked for, saying why; GPU_IS_LOST fails the GPU as lost."""
    node = Node(tmp_path, count=1)
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "passthrough",
                   "--sim-fault", "gpu-error:0:nvmlDeviceGetVirtualizationMode:%d" % code)
    assert res.rc == 5 and res.json["error"]["code"] == "reboot-required", (res.json, res.stderr)
    message = res.json["error"]["message"]
    assert "reset" not in message and "MIG mode is pending on GPU 0 (activation: GPU requires restart, NVML error " \
        "16) and whether the GPUs are passed through to a VM cannot be read (GPU 0: %s): reboot the node" % said \
        in message, message
    lost = Node(tmp_path / "lost", count=1).run("apply", "--sequence", SEQ, "--sim-fault", "passthrough",
                                                "--sim-fault", "gpu-error:0:nvmlDeviceGetVirtualizationMode:15")
    assert lost.rc == 1 and lost.json["error"]["code"] == "gpu-lost", (lost.json, lost.stderr)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_container_holding_its_own_device_node_for_the_gpu_counts(tmp_path, holders):
    """Inside a pod the plugin opens the container's /dev/nvidia0, another inode with the GPU's device
    number; its fd link shows the container's path. Here /dev/full's number stands in for a GPU's."""
    import stat

    full = os.stat("/dev/full").st_rdev
    for where in ("host", "ctr"):
        os.makedirs(str(tmp_path / where))
        os.mknod(str(tmp_path / where / "nvidia0"), stat.S_IFCHR | 0o600, full)
    holder = Holder(tmp_path, "in-a-pod", [str(tmp_path / "ctr" / "nvidia0")])
    holders.append(holder)
    node = Node(tmp_path, count=1)
    res = node.run("apply", "--sequence", SEQ, "--gpu-device-glob", str(tmp_path / "host" / "nvidia[0-9]*"),
                   "--client-stop-timeout", "0.5")
    assert res.rc == 4 and "pid %d (in-a-pod) holds %s" % (holder.pid, tmp_path / "ctr" / "nvidia0") in \
        res.json["error"]["message"]


# --- only what changes: the GPU whose mode changes, the instances to destroy ----------------------

def _caps(tmp_path, node, index, start):
    """Fake capability device files of the GPU instance at ``start`` (its access and its compute
    instance's), numbered as the simulated driver's mig-minors table numbers them (sim.driver.mig_minors)."""
    from node_bootstrap.driver.sim.driver import mig_minors

    gi = gi_id(node, index, start)
    table = dict(line.split() for line in mig_minors(node.count).splitlines())
    caps = tmp_path / "dev" / "nvidia-caps"
    caps.mkdir(exist_ok=True)
    paths = []
    for name in ("gpu%d/gi%d/access" % (index, gi), "gpu%d/gi%d/ci0/access" % (index, gi)):
        path = caps / ("nvidia-cap%s" % table[name])
        path.write_text("")
        paths.append(str(path))
    return paths


def test_a_user_of_a_gpu_that_only_gets_new_instances_is_not_waited_for(tmp_path, holders):
    """A workload (or a DaemonSet apply does not know) holds GPU 0, which keeps its instance and gets a new
    one: nothing of it is in the way. GPU 1 changes its MIG mode: its holder is."""
    node = Node(tmp_path, count=2)
    lay_out(node, [[("3g.20gb", 0)], []])
    pattern, gpus = fake_devices(tmp_path)
    worker = Holder(tmp_path, "inference", gpus[:1])
    holders.append(worker)
    res = node.run("apply", "--sequence", SEQ, "--gpu-device-glob", pattern, "--client-stop-timeout", "1")
    assert res.rc == 0, res.stderr
    assert "waiting" not in res.stderr and "inference" not in res.stderr
    node2 = Node(tmp_path / "other", count=2)
    lay_out(node2, [[("3g.20gb", 0)], []])
    monitor = Holder(tmp_path, "gpu-monitor", gpus[1:])
    holders.append(monitor)
    res = node2.run("apply", "--sequence", SEQ, "--gpu-device-glob", pattern, "--client-stop-timeout", "1")
    assert res.rc == 4 and res.json["error"]["code"] == "gpu-busy", res.stderr
    message = res.json["error"]["message"]
    assert "pid %d (gpu-monitor) holds %s" % (monitor.pid, gpus[1]) in message
    assert "inference" not in message  # GPU 0's file does not matter: GPU 0 keeps its mode
    assert node2.sim()["gpus"][1]["mig_pending"] == 0


def test_the_capability_files_of_an_instance_to_destroy_are_waited_for_and_a_kept_ones_are_not(tmp_path, holders):
    node = Node(tmp_path, count=1)
    lay_out(node, [[("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]])
    pattern, gpus = fake_devices(tmp_path, count=1)
    kept = _caps(tmp_path, node, 0, 0)
    doomed = _caps(tmp_path, node, 0, 4)
    holders.append(Holder(tmp_path, "on-kept", kept + gpus))  # its GPU's file too, as every CUDA process
    blocker = Holder(tmp_path, "on-doomed", doomed[1:])
    holders.append(blocker)
    before = open(node.state).read()
    res = node.run("apply", "--sequence", SEQ, "--gpu-device-glob", pattern, "--client-stop-timeout", "1")
    assert res.rc == 4, res.stderr
    message = res.json["error"]["message"]
    assert "pid %d (on-doomed) holds %s" % (blocker.pid, doomed[1]) in message and "on-kept" not in message
    assert open(node.state).read() == before
    blocker.stop()
    res = node.run("apply", "--sequence", SEQ, "--gpu-device-glob", pattern, "--client-stop-timeout", "1")
    assert res.rc == 0, res.stderr  # the one on the kept instance (and on the GPU's file) goes on
    assert node.layout(0) == [(9, 0, 1), (9, 4, 1)]
