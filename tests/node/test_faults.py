"""The fault matrix: every injected fault ends in a defined outcome, exit code and state label; a run
killed after any mutating call is repaired by the next run; two applies at once serialise."""

import base64
import os
import json
import signal

import pytest

from tests.node.nodecli import Node

SEQ = "1g.5gb-2g.10gb-3g.20gb"


def _kube(node, kube_api, tmp_path, name="node-a"):
    kube_api.add_node(name)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node=name))
    return lambda: kube_api.nodes[name]["metadata"]


@pytest.mark.kube
@pytest.mark.parametrize("fault, extra, rc, outcome, code, state", [
    ("processes", [], 4, "failed", "gpu-busy", "failed"),
    ("reset-fails", [], 5, "reboot-required", "reboot-required", "rebooting"),
    ("passthrough", [], 5, "reboot-required", "reboot-required", "rebooting"),
    ("reset-fails", ["--no-reset"], 5, "reboot-required", "reboot-required", "rebooting"),
    ("insufficient-resources", [], 1, "failed", "insufficient-resources", "failed"),
    ("not-mig-capable", [], 3, "failed", "not-mig-capable", "failed"),
    # --force gets past the unreadable process list to the mutating calls, which answer NO_PERMISSION
    ("no-permission", ["--force"], 1, "failed", "no-permission", "failed"),
    ("no-permission", [], 4, "failed", "gpu-busy", "failed"),
    ("processes-unreadable", [], 4, "failed", "gpu-busy", "failed"),
    # a GPU off the bus, found when the handle is asked for or on the first call after it: never read as a
    # GPU that is not MIG-capable (that is a verdict on the model, this one is the hardware)
    ("gpu-lost:1", [], 1, "failed", "gpu-lost", "failed"),
    ("gpu-lost-late:1", [], 1, "failed", "gpu-lost", "failed"),
])
def test_fault_ends_in_a_defined_outcome_and_state_label(tmp_path, kube_api, fault, extra, rc, outcome, code, state):
    node = Node(tmp_path)
    meta = _kube(node, kube_api, tmp_path)
    args = ["apply", "--sequence", SEQ] + extra + (["--sim-fault", fault] if fault else [])
    res = node.run(*args)
    assert res.rc == rc, res.stderr
    assert res.json["outcome"] == outcome
    assert res.json["error"]["code"] == code
    assert "\n" not in res.json["error"]["message"] and "Traceback" not in res.stderr
    labels, annotations = meta()["labels"], meta()["annotations"]
    assert labels["nvidia.com/mig.config.state"] == state
    assert "aliyun.accelerator/nvidia_mig_sequence" not in labels
    assert annotations["ack-mig-hook/mig-config-reason"] == res.json["error"]["message"]
    assert isinstance(res.json.get("gpus"), list) or code in ("not-mig-capable", "gpu-lost")
    if code == "gpu-lost":
        assert res.json["error"]["message"].startswith("GPU 1 is lost") and "reboot the node" in res.json["error"]["message"]
        assert res.json["changes"] == 0
    # the next run without the fault converges and clears the reason
    healed = node.run("apply", "--sequence", SEQ)
    assert healed.rc == 0 and healed.json["outcome"] == "success"
    assert meta()["labels"]["nvidia.com/mig.config.state"] == "success"
    assert "ack-mig-hook/mig-config-reason" not in meta()["annotations"]


def test_busy_gpu_is_refused_with_pids_and_nothing_changes(tmp_path):
    node = Node(tmp_path)
    assert node.run("status").rc == 0
    before = open(node.state).read()
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "processes")
    assert res.rc == 4 and res.json["changes"] == 0
    assert "4242" in res.json["error"]["message"] and "--force" in res.json["error"]["message"]
    assert open(node.state).read() == before


def test_force_kills_the_processes_and_applies(tmp_path):
    node = Node(tmp_path)
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "processes", "--force")
    assert res.rc == 0, res.stderr
    assert "killing compute process 4242 on GPU 0" in res.stderr
    assert node.layout(0) == [(9, 0, 1), (14, 4, 1), (19, 6, 1)]


@pytest.mark.parametrize("fault", ["processes-unreadable", "no-permission"])
def test_an_unreadable_process_list_is_no_proof_of_an_idle_gpu(tmp_path, fault):
    node = Node(tmp_path)
    assert node.run("status").rc == 0
    before = open(node.state).read()
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", fault)
    assert res.rc == 4 and res.json["error"]["code"] == "gpu-busy" and res.json["changes"] == 0
    message = res.json["error"]["message"]
    assert "GPU 0 may be in use: its process list is unreadable (compute processes: Insufficient Permissions" in message
    assert "GPU 1 may be in use" in message and "--force" in message
    assert open(node.state).read() == before


def test_force_changes_a_gpu_whose_process_list_is_unreadable(tmp_path):
    node = Node(tmp_path, count=1)
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "processes-unreadable", "--force")
    assert res.rc == 0, res.stderr
    assert "GPU 0: process list unreadable" in res.stderr
    assert node.layout(0) == [(9, 0, 1), (14, 4, 1), (19, 6, 1)]
    # a GPU already right needs no process list: nothing to refuse
    again = node.run("apply", "--sequence", SEQ, "--sim-fault", "processes-unreadable")
    assert again.rc == 0 and again.json["changes"] == 0


def test_real_reset_path_runs_nvidia_smi_and_a_failure_means_reboot(tmp_path):
    """With the real backend the reset is `nvidia-smi -r`; here the simulator's answer stands in, and the
    GPU indices it is given are those still pending."""
    node = Node(tmp_path)
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "reset-fails")
    assert res.rc == 5
    assert "GPU 0, 1" in res.json["error"]["message"] and "reboot" in res.json["error"]["message"]
    # mode pending, instances untouched: a reboot applies it, then apply finishes the job
    gpus = node.run("status").json["gpus"]
    assert [g["mig_mode"] for g in gpus] == [{"current": "disabled", "pending": "enabled"}] * 2
    assert node.run("sim-reboot").rc == 0
    after = node.run("apply", "--sequence", SEQ)
    assert after.rc == 0 and after.json["changes"] == 12  # mode survived the reboot (Ampere): no reset


def test_old_driver_reads_but_apply_is_refused_before_anything_changes(tmp_path):
    # without the R470 placement calls nothing can be created where the plan says: refused up front,
    # not after MIG mode was enabled (tests/node/test_refuse_early.py has the rest)
    node = Node(tmp_path, count=1)
    status = node.run("status", "--sim-fault", "old-driver").json["gpus"][0]
    assert status["profiles_source"] == "nvml"
    assert any("placements" in n for n in status["notes"])  # placements came from the catalogue
    before = open(node.state).read()
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "old-driver")
    assert res.rc == 1 and res.json["error"]["code"] == "driver-too-old" and res.json["changes"] == 0
    assert open(node.state).read() == before


@pytest.mark.parametrize("argv, fragment", [
    (["--sequence", "1g.5gb,2g.10gb"], "1g.5gb-2g.10gb"),
    (["--sequence", "3g.20gb-3g.20gb-3g.20gb"], "at most 2"),
    (["--size", "1g.18gb"], "valid profiles"),
    (["--sequence", "9", "--size", "9"], "exactly one"),
    ([], "exactly one"),
    (["--request-b64", "not base64!"], "base64"),
    (["--request-b64", base64.b64encode(b'{"version": 2, "partition": {"kind": "size", "value": "9"}}').decode()],
     "version"),
    (["--request-b64", base64.b64encode(b'{"version": 1, "partition": {"kind": "sizes", "value": "9"}}').decode()],
     "kind"),
    (["--sequence", "9", "--sim-fault", "meteor"], "known:"),
    (["--sequence", "9", "--bogus"], "unrecognized"),
])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(tmp_path, argv, fragment):
    node = Node(tmp_path)
    assert node.run("status").rc == 0
    before = open(node.state).read()
    res = node.run("apply", *argv)
    assert res.rc == 2, res.stderr
    assert res.json["outcome"] == "failed" and res.json["error"]["code"] == "bad-input"
    assert fragment in res.json["error"]["message"]
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert open(node.state).read() == before


def test_bad_backend_is_bad_input(tmp_path):
    node = Node(tmp_path)
    res = node.run("status", "--backend", "sim:Z80:2", raw=True)
    assert res.rc == 2 and "unknown GPU" in res.json["error"]["message"]
    res = node.run("status", "--backend", "fpga", raw=True)
    assert res.rc == 2 and "sim:<GPU>:<count>" in res.json["error"]["message"]


def test_request_file_and_b64_carry_the_label_as_data(tmp_path):
    node = Node(tmp_path, count=1)
    doc = {"version": 1, "partition": {"kind": "sequence", "value": "9-9"}, "extra": "ignored"}
    (tmp_path / "req.json").write_text(json.dumps(doc))
    res = node.run("plan", "--request-file", str(tmp_path / "req.json"))
    assert res.rc == 0 and res.json["sequence"] == "3g.20gb-3g.20gb"
    b64 = base64.b64encode(json.dumps(doc).encode()).decode()
    res = node.run("apply", "--request-b64", b64)
    assert res.rc == 0 and node.layout() == [(9, 0, 1), (9, 4, 1)]


def _reference_changes(tmp_path):
    ref = Node(tmp_path / "ref", count=2, clients="")
    res = ref.run("apply", "--sequence", SEQ)
    assert res.rc == 0
    return res.json["changes"], ref.sim()["gpus"]


@pytest.mark.slow
def test_a_crash_after_every_mutating_call_is_repaired_by_the_next_run(tmp_path, kube_api):
    total, reference = _reference_changes(tmp_path)
    assert total == 14
    for step in range(1, total + 1):
        node = Node(tmp_path / ("crash%d" % step), clients="manifest:%s" % (tmp_path / ("m%d" % step) / "dp.yml"))
        manifest = tmp_path / ("m%d" % step) / "dp.yml"
        manifest.parent.mkdir()
        manifest.write_text("kind: Pod\n")
        meta = _kube(node, kube_api, tmp_path / ("crash%d" % step), name="node-%d" % step)
        crashed = node.run("apply", "--sequence", SEQ, "--sim-fault", "crash-after:%d" % step)
        assert crashed.rc == -signal.SIGKILL, (step, crashed.stderr)
        assert meta()["labels"]["nvidia.com/mig.config.state"] == "pending"  # killed: no final word
        assert not manifest.exists()  # the device plugin was stopped when it died
        healed = node.run("apply", "--sequence", SEQ)
        assert healed.rc == 0, (step, healed.stderr)
        assert healed.json["changes"] <= total - step + 2, step  # only what was left (+ a repeated mode set)
        assert node.sim()["gpus"] == reference, step
        assert manifest.read_text() == "kind: Pod\n"  # restored by the repairing run
        assert meta()["labels"]["nvidia.com/mig.config.state"] == "success"
        assert node.run("apply", "--sequence", SEQ).json["changes"] == 0


@pytest.mark.slow
def test_two_concurrent_applies_serialise_on_the_node_lock(tmp_path):
    node = Node(tmp_path)
    procs = [node.popen("apply", "--sequence", SEQ) for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["changes"] for r in results) == [0, 14]
    assert all(r["outcome"] == "success" for r in results)
    assert node.layout(0) == node.layout(1) == [(9, 0, 1), (14, 4, 1), (19, 6, 1)]


def test_lock_timeout_is_a_defined_failure(tmp_path):
    import fcntl
    import os

    node = Node(tmp_path)
    fd = os.open(str(tmp_path / "apply.lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        res = node.run("apply", "--sequence", SEQ, "--lock-timeout", "0.5")
    finally:
        os.close(fd)
    assert res.rc == 1 and res.json["error"]["code"] == "locked"
    # the holder may be a holders report or a disable, not only an apply: the line says so and names the file
    message = res.json["error"]["message"]
    assert "holders report" in message and str(tmp_path / "apply.lock") in message, message
    assert node.sim()["gpus"][0]["mig_pending"] == 0


def test_an_apply_that_gives_up_on_the_lock_leaves_the_holders_stopped_clients_alone(tmp_path, holders):
    """Apply A holds the lock, has stopped the device plugin and waits for a GPU holder to let go. Apply B
    gives up waiting for the lock: it started A's stopped plugin again (its failure path read A's
    stopped-clients file), under A, which was about to change the GPUs (found by a review of the node side)."""
    import time

    from tests.node.nodecli import Holder, fake_devices

    manifest = tmp_path / "manifests" / "nvidia-device-plugin.yml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    node = Node(tmp_path, count=1, clients="manifest:%s" % manifest)
    pattern, gpus = fake_devices(tmp_path, count=1)
    holders.append(Holder(tmp_path, "nv-hostengine", gpus))
    # A's wait for the holder is the longest there is: only the kill below ends A, however long B takes to start
    # (with 20 s a loaded machine could end A's wait first: A failed gpu-busy and started its own plugin again)
    a = node.popen("apply", "--sequence", "3g.20gb-3g.20gb", "--gpu-device-glob", pattern,
                   "--client-stop-timeout", "3600")
    try:
        while manifest.exists():  # A has stopped the plugin (moved its manifest away); a hang: pytest's timeout
            assert a.poll() is None, a.communicate()
            time.sleep(0.05)
        b = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--lock-timeout", "0.5")
        assert b.rc == 1 and b.json["error"]["code"] == "locked"
        assert a.poll() is None  # A still holds the lock, before its first change
        assert not manifest.exists(), "the run that never held the lock started the holder's stopped plugin"
    finally:
        a.kill()
        a.communicate(timeout=60)


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA driver")
def test_real_backend_without_a_driver_is_a_one_line_failure(tmp_path):
    node = Node(tmp_path)
    for command in (["status"], ["apply", "--sequence", "9", "--no-label", "--lock-file", str(tmp_path / "l"),
                                  "--state-dir", str(tmp_path / "s"), "--clients="]):
        res = node.run(*command, raw=True)
        assert res.rc == 1 and res.json["error"]["code"] == "nvml-unavailable", res.stderr
        assert "Traceback" not in res.stderr


@pytest.mark.parametrize("kind", ["a symbolic link", "a FIFO", "a directory"])
def test_a_lock_file_of_the_wrong_type_is_refused_naming_it_and_a_link_is_never_written_through(tmp_path, kind):
    """The lock file was opened through a symbolic link and truncated to the PID: whatever file the link named
    (run as root, any file on the node). A FIFO was an internal error that named no file (`Invalid argument`),
    a directory an internal error. Now each is one line naming the file, before any change and any label."""
    node = Node(tmp_path)
    lock = tmp_path / "apply.lock"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    {"a symbolic link": lambda: os.symlink(str(victim), str(lock)), "a FIFO": lambda: os.mkfifo(str(lock)),
     "a directory": lock.mkdir}[kind]()
    res = node.run("apply", "--sequence", SEQ)
    assert res.rc == 1 and res.json["error"] == {"code": "lock-unusable", "message": (
        "cannot use the lock file %s: %s, not a regular file; remove it or pass --lock-file" % (lock, kind))}
    assert victim.read_text() == "precious\n" and res.json["changes"] == 0
    assert node.sim()["gpus"][0]["mig_pending"] == 0


def test_a_lock_files_directory_the_lock_makes_is_writable_by_root_alone_whatever_the_umask(tmp_path):
    """--lock-file in a directory not there yet: os.makedirs made it (and its parents) 0777 under umask 0, and a
    local user who removes the lock file while one apply holds it lets a second apply lock a new file and change
    the same GPUs at once. It is made 0755 at most, whatever the umask."""
    from node_bootstrap.host.lock import NodeLock

    path = tmp_path / "run" / "ack" / "apply.lock"
    old = os.umask(0)
    try:
        with NodeLock(str(path), timeout=0):
            pass
    finally:
        os.umask(old)
    for directory in (path.parent, path.parent.parent):
        assert os.stat(str(directory)).st_mode & 0o777 == 0o755, directory


@pytest.mark.parametrize("fault", ["gpu-lost:1", "gpu-lost-late:1"])
def test_a_lost_gpu_leaves_the_healthy_ones_reported_and_itself_marked_lost(tmp_path, fault):
    """A GPU off the bus made the failure's read-back fail as a whole: the result had no `gpus` and the layouts
    annotation kept the last success's layouts, the lost GPU's old one included (found by a review). Now the
    healthy GPUs are read back one by one, in the result and the annotation, and the lost one is named lost,
    never empty and never its old layout."""
    node = Node(tmp_path)
    node.kube_args = []  # labels and annotations go to the simulated node's stand-in
    assert node.run("apply", "--sequence", SEQ).rc == 0
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--sim-fault", fault)
    assert res.rc == 1 and res.json["error"]["code"] == "gpu-lost" and res.json["changes"] == 0
    healthy, lost = res.json["gpus"]
    assert [i["profile"] for i in healthy["instances"]] == ["3g.20gb", "2g.10gb", "1g.5gb"]
    assert lost == {"index": 1, "unreadable": {"code": "gpu-lost", "message": res.json["error"]["message"]}}
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        meta = json.load(fh)
    assert meta["labels"]["nvidia.com/mig.config.state"] == "failed"
    assert meta["annotations"]["ack-mig-hook/mig-config-reason"] == res.json["error"]["message"]
    assert json.loads(meta["annotations"]["ack-mig-hook/gpu-layouts"]) == {
        "0": [["3g.20gb", 0], ["2g.10gb", 4], ["1g.5gb", 6]], "1": None}
    holders = json.loads(meta["annotations"]["ack-mig-hook/gpu-holders"])["gpus"]
    assert holders == {"0": [["3g.20gb", 0, None], ["2g.10gb", 4, None], ["1g.5gb", 6, None]], "1": None}


@pytest.mark.parametrize("fault", ["gpu-lost:1", "gpu-lost-late:1"])
def test_report_holders_reports_the_healthy_gpus_and_a_lost_one_as_null(tmp_path, fault):
    """report-holders read the GPUs as a whole and stopped at a lost one (found by a review): the holders unit
    could never refresh the node's report again until a reboot, while pods came and went on the healthy GPUs.
    It reads them one by one as a failed apply does, and writes the healthy ones and null for the lost one."""
    node = Node(tmp_path)
    node.kube_args = []  # the annotation goes to the simulated node's stand-in
    assert node.run("apply", "--sequence", SEQ).rc == 0
    res = node.run("--sim-fault", fault, "report-holders")  # (a fault is an option before the command here)
    assert res.rc == 0 and res.json["outcome"] == "success", res.stderr
    rows = [["3g.20gb", 0, None], ["2g.10gb", 4, None], ["1g.5gb", 6, None]]
    assert res.json["holders"]["gpus"] == {"0": rows, "1": None} and res.json["written"]
    assert "GPU 1 is lost" in res.stderr
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        meta = json.load(fh)
    assert json.loads(meta["annotations"]["ack-mig-hook/gpu-holders"])["gpus"] == {"0": rows, "1": None}
    # the GPU back (after a reboot): the next round says what it holds again
    assert node.run("sim-reboot").rc == 0
    again = node.run("report-holders")
    assert again.rc == 0 and again.json["written"] and again.json["holders"]["gpus"] == {"0": [], "1": []}


@pytest.mark.parametrize("fault, said", [
    ("gpu-error:1:nvmlDeviceGetHandleByIndex:999", "GPU 1: NVML answered Unknown Error (NVML error 999)"),
    ("gpu-error:1:nvmlDeviceGetMigMode:999", "GPU 1: NVML answered Unknown Error (NVML error 999)"),
    ("gpu-error:1:nvmlDeviceGetGpuInstances:10", "GPU 1: listing GPU instances of profile"),
    ("gpu-error:1:nvmlComputeInstanceGetInfo:10", "GPU 1: compute instance info failed"),
])
def test_report_holders_reports_a_gpu_nvml_cannot_read_as_null_and_the_others_as_they_are(tmp_path, fault, said):
    """Another NVML answer than GPU_IS_LOST on one GPU: its handle's lookup answering UNKNOWN failed the round
    for every GPU (exit 1, no report), and a MIG mode that could not be read reported the GPU as holding
    nothing ([], its three instances unseen). Now that GPU is null, as a lost one, and the others are reported."""
    node = Node(tmp_path)
    node.kube_args = []  # the annotation goes to the simulated node's stand-in
    assert node.run("apply", "--sequence", SEQ).rc == 0
    res = node.run("--sim-fault", fault, "report-holders")
    assert res.rc == 0 and res.json["outcome"] == "success" and res.json["written"], res.stderr
    rows = [["3g.20gb", 0, None], ["2g.10gb", 4, None], ["1g.5gb", 6, None]]
    assert res.json["holders"]["gpus"] == {"0": rows, "1": None}
    assert said in " ".join(res.stderr.split()), res.stderr


def test_the_gpu_error_fault_is_refused_in_one_line_naming_its_form():
    from node_bootstrap.driver.sim.faults import FaultError, parse_faults

    assert parse_faults(["gpu-error:1:nvmlDeviceGetGpuInstances:999"]).gpu_error == (
        (1, "nvmlDeviceGetGpuInstances", 999),)
    for bad in ("gpu-error:1:GetGpuInstances:999", "gpu-error:1:nvmlDeviceGetGpuInstances:0", "gpu-error:x"):
        with pytest.raises(FaultError, match="gpu-error takes a GPU index, an NVML entry point and an NVML error "
                                             "code"):
            parse_faults([bad])


@pytest.mark.parametrize("after", [6, 8])
def test_a_gpu_lost_after_the_run_changed_another_reports_the_change_and_the_rerun_converges(tmp_path, after):
    """No test had a GPU lost after the run already changed another (found by a review). Going from SEQ to
    two 3g.20gb takes 6 mutating calls a GPU (GPU 0 first): GPU 1 falls off the bus once GPU 0 is done (6) or
    in the middle of its own change (8). The failure reports GPU 0's new layout, in the result and the
    annotation, never the last success's; GPU 1 unknown; the label failed with the reason. Once the GPU is
    back (a reboot: GPU_IS_LOST lasts until then) the rerun converges."""
    node = Node(tmp_path)
    node.kube_args = []  # labels and annotations go to the simulated node's stand-in
    assert node.run("apply", "--sequence", SEQ).rc == 0
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--sim-fault", "gpu-lost-after:1:%d" % after)
    assert res.rc == 1 and res.json["error"]["code"] == "gpu-lost", res.stderr
    assert res.json["error"]["message"].startswith("GPU 1") and res.json["changes"] == after
    changed, lost = res.json["gpus"]
    assert [(i["profile"], i["start"]) for i in changed["instances"]] == [("3g.20gb", 0), ("3g.20gb", 4)]
    assert lost["index"] == 1 and lost["unreadable"]["code"] == "gpu-lost"
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        meta = json.load(fh)
    assert meta["labels"]["nvidia.com/mig.config.state"] == "failed"
    assert meta["annotations"]["ack-mig-hook/mig-config-reason"] == res.json["error"]["message"]
    assert json.loads(meta["annotations"]["ack-mig-hook/gpu-layouts"]) == {
        "0": [["3g.20gb", 0], ["3g.20gb", 4]], "1": None}
    assert json.loads(meta["annotations"]["ack-mig-hook/gpu-holders"])["gpus"] == {
        "0": [["3g.20gb", 0, None], ["3g.20gb", 4, None]], "1": None}
    assert node.run("sim-reboot").rc == 0
    healed = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert healed.rc == 0 and healed.json["outcome"] == "success", healed.stderr
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        meta = json.load(fh)
    assert meta["labels"]["nvidia.com/mig.config.state"] == "success"
    assert "ack-mig-hook/mig-config-reason" not in meta["annotations"]
    assert json.loads(meta["annotations"]["ack-mig-hook/gpu-layouts"]) == {
        "0": [["3g.20gb", 0], ["3g.20gb", 4]], "1": [["3g.20gb", 0], ["3g.20gb", 4]]}
    assert node.run("apply", "--sequence", "3g.20gb-3g.20gb").json["changes"] == 0


@pytest.mark.parametrize("call", [
    "nvmlDeviceGetGpuInstanceProfileInfo", "nvmlDeviceGetGpuInstances", "nvmlGpuInstanceGetInfo",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo", "nvmlGpuInstanceGetComputeInstances",
    "nvmlComputeInstanceGetInfo", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMaxMigDeviceCount",
])
def test_gpu_is_lost_from_any_read_of_a_gpu_fails_it_as_lost(tmp_path, call):
    """nvml.h: GPU_IS_LOST from any call on a device means it "has fallen off the bus or is otherwise
    inaccessible". Answered by a read past the handle and the name (the GPU instance list, a profile, a compute
    instance, the process list), the GPU was failed as `nvml-unreadable`, which no caller takes for the node's
    verdict, or as `gpu-busy` ("may be in use: its process list is unreadable"), or, from the MIG device walk,
    not at all: the run said success. It is failed as lost, naming the GPU and the reboot that recovers it."""
    node = Node(tmp_path)
    assert node.run("apply", "--sequence", SEQ).rc == 0
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--sim-fault", "gpu-error:1:%s:15" % call)
    assert res.rc == 1 and res.json["error"]["code"] == "gpu-lost", (res.json, res.stderr)
    assert res.json["error"]["message"].startswith("GPU 1 is lost") and "reboot the node" in res.json["error"]["message"]
    assert res.json["gpus"][1] == {"index": 1, "unreadable": {"code": "gpu-lost", "message": res.json["error"]["message"]}}


def _killed_after_its_last_change(tmp_path, kube_api):
    """A node whose GPUs are right and whose label says `pending`: a run killed after its last GPU change (its
    last word the label's `pending`), which the rerun finds nothing to change on and labels."""
    node = Node(tmp_path)
    meta = _kube(node, kube_api, tmp_path)
    assert node.run("apply", "--sequence", SEQ).rc == 0
    kube_api.label_node("node-a", {"nvidia.com/mig.config.state": "pending"})
    return node, meta


@pytest.mark.kube
@pytest.mark.parametrize("status", [503, 500, 429, None])
def test_a_final_label_the_api_server_fails_once_is_written_again(tmp_path, kube_api, status):
    """A run killed after its last GPU change leaves `pending`; the rerun finds the GPUs right and writes only
    `success`. One 503 or 429 of an API server under load, or a connection it dropped, left the label `pending`
    for good: an auto pool's planner takes a pending node for one being changed and leaves it out, so no later
    apply comes to fix it. A merge patch is idempotent: it is tried again, three times at most, and the node
    ends `success`. (A call that got no answer in time is not tried again: a SIGTERM's grace must hold it.)"""
    node, meta = _killed_after_its_last_change(tmp_path, kube_api)
    kube_api.break_next(times=1, status=status, method="PATCH")
    res = node.run("apply", "--sequence", SEQ)
    assert res.rc == 0 and res.json["changes"] == 0, res.stderr
    assert meta()["labels"]["nvidia.com/mig.config.state"] == "success", res.json["labels"]
    assert res.json["labels"]["states"] == ["success"] and "error" not in res.json["labels"]


@pytest.mark.kube
def test_a_final_label_the_api_server_still_fails_at_the_third_try_is_said(tmp_path, kube_api):
    """The labeler the node runs, its patch failing all three tries: it waits the two back-offs (0.5 s, then
    1.5 s), the failure is said (``labels.error`` in the run's result: the Retry-After test below sees it
    there) and the label stays as the killed run left it. Called here with its sleep recorded, against the
    test API server: through the node command the back-offs cost 2 s of real waiting, and no option of the
    command may shorten a production retry."""
    from node_bootstrap.kube.client import KubeClient, load_kubeconfig
    from node_bootstrap.kube.nodelabels import RETRY_DELAYS, NodeLabeler
    kube_api.add_node("node-a", labels={"nvidia.com/mig.config.state": "pending"})
    client = KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a")))
    kube_api.break_next(times=3, status=503, method="PATCH")
    sleeps, said = [], []  # type: ignore[var-annotated]
    labeler = NodeLabeler(client, "node-a", said.append, sleep=sleeps.append)
    assert labeler.set("success", "3g.20gb-3g.20gb") is False
    assert sleeps == list(RETRY_DELAYS) == [0.5, 1.5] and len(said) == 3, said
    assert [r.status for r in kube_api.requests if r.method == "PATCH"] == [503, 503, 503]
    assert "HTTP 503" in labeler.summary()["error"] and labeler.summary()["states"] == []
    assert kube_api.nodes["node-a"]["metadata"]["labels"]["nvidia.com/mig.config.state"] == "pending"


@pytest.mark.kube
def test_a_final_label_the_api_server_throttles_waits_the_retry_after_it_asks_for(tmp_path, kube_api):
    """APF's 429 says when to come back (Retry-After, maxinflight.go tooManyRequests): the second try waited the
    labeler's own half second and met the same throttle. It waits what the server asks (the back-off when that
    is longer), within the labeler's bound on its waits."""
    node, meta = _killed_after_its_last_change(tmp_path, kube_api)
    kube_api.throttle(times=1, retry_after=1, method="PATCH")  # 1 s: past the first back-off, the least to wait
    res = node.run("apply", "--sequence", SEQ)
    assert res.rc == 0 and meta()["labels"]["nvidia.com/mig.config.state"] == "success", res.stderr
    assert "trying again in 1s" in res.stderr and "trying again in 0.5s" not in res.stderr, res.stderr
    patches = [r for r in kube_api.requests if r.method == "PATCH"][-2:]
    assert [r.status for r in patches] == [429, 200] and patches[1].at - patches[0].at >= 1.0


@pytest.mark.kube
def test_a_retry_after_past_the_labelers_bound_ends_its_tries_at_once_and_is_said(tmp_path, kube_api):
    """A Retry-After longer than the labeler waits in all (an hour) is not cut short to a try the server
    refused ahead: the tries end, and the failure is said in the result, naming the server's ask."""
    node, meta = _killed_after_its_last_change(tmp_path, kube_api)
    kube_api.throttle(times=3, retry_after=3600, method="PATCH")
    res = node.run("apply", "--sequence", SEQ)
    assert res.rc == 0 and "HTTP 429" in res.json["labels"]["error"], res.json["labels"]
    assert "retry after 3600s" in res.json["labels"]["error"] and "trying again" not in res.stderr, res.stderr
    assert meta()["labels"]["nvidia.com/mig.config.state"] == "pending"


@pytest.mark.parametrize("code, said", [(999, "Unknown Error (NVML error 999)"), (10, "Timeout (NVML error 10)")])
def test_a_mig_mode_nvml_cannot_read_is_no_verdict_that_the_gpu_is_not_mig_capable(tmp_path, code, said):
    """nvml.h: nvmlDeviceGetMigMode answers NOT_SUPPORTED for a device without MIG. An UNKNOWN or TIMEOUT answer
    on an A100 made apply say the GPU is not MIG-capable (exit 3), a verdict on the model for which the
    function may give up on the instance. It is an NVML error on that GPU now, named, and nothing changes."""
    node = Node(tmp_path)
    assert node.run("apply", "--sequence", SEQ).rc == 0
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--sim-fault", "gpu-error:1:nvmlDeviceGetMigMode:%d" % code)
    assert res.rc == 1 and res.json["error"]["code"] == "nvml-error", (res.json, res.stderr)
    assert res.json["error"]["message"].startswith("GPU 1: NVML answered %s for its MIG mode" % said)
    assert res.json["changes"] == 0
    not_supported = node.run("apply", "--sequence", SEQ, "--sim-fault", "gpu-error:1:nvmlDeviceGetMigMode:3")
    assert not_supported.rc == 3 and not_supported.json["error"]["code"] == "not-mig-capable"


@pytest.mark.parametrize("command", [("apply", "--sequence", "3g.20gb-3g.20gb"), ("disable",)])
def test_a_gpu_handle_nvml_refuses_fails_the_run_naming_the_gpu(tmp_path, command):
    """NVML answering UNKNOWN for one GPU's handle failed apply and disable with "NVML: Unknown Error (error 999)",
    naming no GPU, on a node of eight. The reason names the GPU and NVML's answer, as report-holders does."""
    node = Node(tmp_path)
    assert node.run("apply", "--sequence", SEQ).rc == 0
    res = node.run(*(command + ("--sim-fault", "gpu-error:1:nvmlDeviceGetHandleByIndex:999")))
    assert res.rc == 1 and res.json["error"]["code"] == "nvml-error", (res.json, res.stderr)
    assert res.json["error"]["message"].startswith("GPU 1: NVML answered Unknown Error (NVML error 999)")
    assert res.json["changes"] == 0


@pytest.mark.parametrize("call, gone", [
    ("nvmlGpuInstanceGetComputeInstanceProfileInfo", "compute instance profile"),
    ("nvmlDeviceGetGpuInstanceProfileInfo", "GPU instance profile"),
])
def test_a_gpu_whose_instances_nvml_cannot_list_fails_as_unreadable_not_busy_or_short(tmp_path, call, gone):
    """nvml.h: NOT_SUPPORTED from a profile query means the device lacks that profile, which the reader skips.
    Answered for every profile of a GPU with MIG on, its instances went unseen: with no compute instance
    profile the GPU-instance destroy answered IN_USE and the run said `gpu-busy` (exit 4), which the planner
    takes for a busy GPU; with no GPU instance profile the creates met the unseen instances and the run said
    `insufficient-resources`, a layout problem. A MIG GPU offers at least one of each (the full compute
    instance at least), so none readable fails the GPU as `nvml-unreadable`, naming it and the call."""
    node = Node(tmp_path)
    assert node.run("apply", "--sequence", "3g.20gb-3g.20gb").rc == 0
    res = node.run("apply", "--sequence", SEQ, "--sim-fault", "gpu-error:1:%s:3" % call)
    assert res.rc == 1 and res.json["error"]["code"] == "nvml-unreadable", (res.json, res.stderr)
    message = res.json["error"]["message"]
    assert message.startswith("GPU 1: ") and gone in message and "cannot be seen" in message, message
    assert "Not Supported (NVML error 3)" in message, message
    assert res.json["changes"] == 0
    assert [(i["profile"], i["start"]) for i in node.run("status").json["gpus"][1]["instances"]] == [
        ("3g.20gb", 0), ("3g.20gb", 4)]


@pytest.mark.parametrize("command", [("status",), ("plan", "--sequence", SEQ)])
def test_status_and_plan_read_an_unknown_mig_mode_as_unknown_not_as_no_mig(tmp_path, command):
    """nvml.h: nvmlDeviceGetMigMode answers NOT_SUPPORTED for a device without MIG; apply and disable take only
    that for "no MIG". status read an UNKNOWN answer as no MIG (mig_capable false, no instances, with a note)
    on a GPU holding three, and plan called it not MIG-capable (exit 3, a verdict on the model). Both fail
    now as apply does, naming the GPU and NVML's answer; NOT_SUPPORTED still reads as no MIG."""
    node = Node(tmp_path)
    assert node.run("apply", "--sequence", SEQ).rc == 0
    res = node.run(*(command + ("--sim-fault", "gpu-error:1:nvmlDeviceGetMigMode:999")))
    assert res.rc == 1 and res.json["error"]["code"] == "nvml-error", (res.json, res.stderr)
    assert res.json["error"]["message"].startswith("GPU 1: NVML answered Unknown Error (NVML error 999) for its "
                                                   "MIG mode")
    status = node.run("status", "--sim-fault", "gpu-error:1:nvmlDeviceGetMigMode:3")
    assert status.rc == 0 and status.json["gpus"][1]["mig_capable"] is False
    assert status.json["gpus"][1]["notes"] == ["MIG mode: Not Supported (NVML error 3)"]


def _troubleshooting_faults():
    """docs/troubleshooting.md's table of the verdicts a simulated node can be made to give: (code, the
    arguments the row gives apply beside the request)."""
    import re

    page = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "docs", "troubleshooting.md")
    text = open(page, encoding="utf-8").read()
    start = text.index("| verdict | what `apply` is given beside the request |")
    rows = re.findall(r"^\| `([a-z-]+)` \| `(--sim-fault [^`]+)`", text[start:text.index("```", start)], re.M)
    return [(code, args.split()) for code, args in rows]


@pytest.mark.parametrize("code, args", _troubleshooting_faults())
def test_every_verdict_troubleshooting_says_a_simulated_node_gives_is_the_one_it_gives(tmp_path, code, args):
    """The page's command (`apply --sequence 3g.20gb-3g.20gb` on two A100s) with the row's arguments ends in
    the row's verdict: the code of a failure, or the outcome itself (reboot-required), and nothing else."""
    assert len(_troubleshooting_faults()) >= 8
    res = Node(tmp_path).run("apply", "--sequence", "3g.20gb-3g.20gb", *args)
    assert res.rc != 0 and "Traceback" not in res.stderr, res.stderr
    assert (res.json["error"] or {}).get("code") == code, res.json
    assert res.json["outcome"] == ("reboot-required" if code == "reboot-required" else "failed")
