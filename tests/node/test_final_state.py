"""Every way out of apply ends in a final state: SIGTERM (systemd stop, the boot unit's start timeout)
and SIGINT, a bad request, a client that cannot be started again. Real processes, real signals, the
local HTTPS API server."""

import json
import os
import signal
import time

import pytest

from tests.node.nodecli import Holder, Node, fake_devices, parse

pytestmark = pytest.mark.kube
SEQ = "3g.20gb-3g.20gb"
STATE = "nvidia.com/mig.config.state"
REASON = "ack-mig-hook/mig-config-reason"


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


@pytest.mark.parametrize("signum, message", [(signal.SIGTERM, "interrupted by SIGTERM"),
                                             (signal.SIGINT, "interrupted (SIGINT)")])
def test_a_signal_mid_apply_starts_the_clients_again_and_labels_the_node(tmp_path, kube_api, holders, signum,
                                                                          message):
    manifest = _manifest(tmp_path)
    node, meta = _node(tmp_path, kube_api, clients="systemd:dcgm-exporter,manifest:%s" % manifest)
    node.set_unit("dcgm-exporter")  # active
    pattern, gpus = fake_devices(tmp_path)
    holders.append(Holder(tmp_path, "stuck-client", gpus))  # apply waits for it after stopping clients
    # The wait is the longest there is (3600 s): only the signal can have ended it within this test's run, so
    # no clock is read to prove that (a "sent < 10 s" check failed a loaded CI machine, not the code).
    proc = node.popen("apply", "--sequence", SEQ, "--gpu-device-glob", pattern, "--client-stop-timeout", "3600")
    # The signal goes once apply says it waits (its log line, read as it comes: no clock): it lands in the wait,
    # not before it (where the clients and the label were seen stopped and pending a moment before the wait).
    before = []
    waiting = "waiting up to 3600s for the GPUs to be released: pid %d (stuck-client)" % holders[-1].pid
    while not before or waiting not in before[-1]:
        line = proc.stderr.readline()  # pytest's timeout (pyproject.toml) guards a run that never gets there
        assert line, "apply ended before the client wait: %s" % "".join(before)
        before.append(line)
    assert not manifest.exists() and meta()["labels"].get(STATE) == "pending"
    assert not node.unit_active("dcgm-exporter")  # stopped: now blocked in the wait
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=200)  # a hang guard, far below the wait: not a speed check
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    err = "".join(before) + err
    res = parse(proc.returncode, out, err)
    assert res.rc == 1, err
    assert "gpu-busy" not in out and "still held" not in out  # the wait did not end by itself
    assert res.json["outcome"] == "failed" and res.json["error"] == {"code": "interrupted", "message": message}
    assert "Traceback" not in err
    assert manifest.read_text() == "kind: Pod\n" and node.unit_active("dcgm-exporter")
    assert node.systemctl()[-1] == "systemctl start dcgm-exporter"
    assert json.loads((tmp_path / "var" / "stopped-clients.json").read_text()) == []
    assert meta()["labels"][STATE] == "failed" and meta()["annotations"][REASON] == message
    assert res.json["labels"]["states"] == ["pending", "failed"]
    assert node.sim()["gpus"][0]["mig_pending"] == 0  # interrupted before any change


def _holds_open(pid, path):
    fds = "/proc/%d/fd" % pid
    try:
        return any(os.readlink(os.path.join(fds, fd)) == path for fd in os.listdir(fds))
    except OSError:
        return False


def test_sigterm_while_waiting_for_the_lock_is_a_final_result_and_leaves_the_label_to_the_holder(tmp_path,
                                                                                                   kube_api):
    import fcntl

    node, meta = _node(tmp_path, kube_api)
    fd = os.open(str(tmp_path / "apply.lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another apply is running
    proc = node.popen("apply", "--sequence", SEQ)
    try:
        # SIGTERM once the apply waits on the lock (it holds the lock file open then; its handler is set
        # before): a fixed sleep raced a slow start on a loaded machine and killed it before its handler.
        # No deadline of its own (pytest's timeout guards a hang): a 30 s one sent SIGTERM to a node interpreter
        # a loaded machine had not yet brought to its handler, which killed it without a result.
        lock = os.path.realpath(str(tmp_path / "apply.lock"))
        while proc.poll() is None and not _holds_open(proc.pid, lock):
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=200)  # a hang guard: only the signal ends the 900 s lock wait
    finally:
        os.close(fd)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    res = parse(proc.returncode, out, err)
    assert res.rc == 1 and res.json["error"]["code"] == "interrupted"
    assert STATE not in meta().get("labels", {})  # the apply holding the lock owns the node's labels
    assert node.sim()["gpus"][0]["mig_pending"] == 0


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


@pytest.mark.parametrize("fault, rc", [("insufficient-resources", 1), (None, 0)])
def test_a_unit_whose_start_failed_is_started_again_by_the_next_run(tmp_path, fault, rc):
    """systemctl start exited non-zero: the unit stays in the stopped-clients record, so the next run starts it
    again (it was dropped: a dcgm-exporter the hook stopped stayed down for good once one start failed). Tried
    once per run, however many ways out the run takes."""
    node = Node(tmp_path, clients="systemd:dcgm-exporter")
    node.set_unit("dcgm-exporter")  # active
    node.fail_systemctl("start", "Job for dcgm-exporter.service failed.")
    extra = ["--sim-fault", fault] if fault else []
    res = node.run("apply", "--sequence", SEQ, *extra)
    assert res.rc == rc, res.stderr
    assert res.json["client_problems"] == ["could not start systemd:dcgm-exporter: Job for dcgm-exporter.service "
                                           "failed."], res.json
    assert node.systemctl().count("systemctl start dcgm-exporter") == 1, node.systemctl()
    record = tmp_path / "var" / "stopped-clients.json"
    assert json.loads(record.read_text()) == [["systemd", "dcgm-exporter"]]
    systemd = node._sim_systemd()
    state = systemd.load()
    state["failing"] = {}
    systemd.save(state)
    healed = node.run("apply", "--sequence", SEQ)
    assert healed.rc == 0 and "client_problems" not in healed.json, healed.json
    assert node.unit_active("dcgm-exporter") and json.loads(record.read_text()) == []
