"""Issue 36 item 7: one deadline per command on the Kubernetes side. An API server that accepts connections
and never answers costs a command one call's timeout (15 s), not one per call and retry (status took 78 s):
the command stops asking it, says so once naming host and port, and finishes the rest of its report with
"not checked" where it needed the server. The bounds below are the deadline's (a wall-clock bound of the
rule, not a speed goal); the function itself keeps retrying until its invocation's end."""

import os
import socket
import subprocess
import sys
import time

import pytest

from functions.kube.client import ApiError, KubeApi
from node_bootstrap.kube import KubeConfig
from tests.function.test_doctor import cloud, doctor_run  # noqa: F401  (fixture)
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(ROOT, "examples", "inventory-auto.json")


class SilentServer:
    """A loopback listener that accepts every connection and never sends a byte (a hung API server, or a
    load balancer whose backend is gone). Counts the connections it accepted."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.held = []

    @property
    def accepted(self):
        """The connections made so far. The kernel completes each one into the listen queue as the client
        connects, and it waits there until taken here: a thread accepting them could lag behind a client's
        whole call on a loaded machine, and the count read after the call missed it."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return len(self.held)
            self.held.append(conn)

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


def _config(port):
    return KubeConfig(server="https://127.0.0.1:%d" % port, ca_pem=None, cert_pem=None, key_pem=None, token="t",
                      cert_file=None)


def test_a_commands_client_stops_asking_a_silent_server_after_one_timeout(silent):
    api = KubeApi(_config(silent.port), timeout=0.5, attempts=5, sleep=lambda s: None, stop_when_silent=True)
    with pytest.raises(ApiError) as first:
        api.list_nodes()
    assert str(first.value) == "the API server 127.0.0.1:%d did not answer within 0.5s; not asked again" % silent.port
    assert silent.accepted == 1 and api.requests == 1  # not retried
    for call in (api.list_nodes, lambda: api.get_node("n"), lambda: api.list_pods(node_name="n")):
        with pytest.raises(ApiError) as later:
            call()
        assert str(later.value) == str(first.value) and later.value.final
    assert silent.accepted == 1 and api.requests == 1  # no later call opened a connection


def test_the_functions_client_keeps_retrying_a_silent_server_within_its_attempts(silent):
    """Off by default: the deployed function retries until its invocation's deadline, as before."""
    api = KubeApi(_config(silent.port), timeout=0.3, attempts=2, sleep=lambda s: None)
    with pytest.raises(ApiError, match="no complete answer from https://127.0.0.1:%d within 0.3s" % silent.port):
        api.list_nodes()
    assert api.requests == 2 and api.silent is None


def _kubeconfig_at(kube_api, tmp_path, port):  # noqa: F811
    path = kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert())
    with open(path) as fh:
        text = fh.read().replace("127.0.0.1:%d" % kube_api.port, "127.0.0.1:%d" % port)
    with open(path, "w") as fh:
        fh.write(text)
    return str(path)


def _status_started(kube_api, tmp_path, silent):  # noqa: F811
    """``status --kubeconfig`` against ``silent``, started (a real process) and left running: (process, start)."""
    path = _kubeconfig_at(kube_api, tmp_path, silent.port)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))}
    env["PYTHONPATH"] = ROOT
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "functions.commands.main", "status", "--inventory", INVENTORY,
                             "--kubeconfig", path], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    return proc, started


def _status_checked(proc, started, silent):
    """status: the connection is accepted, no answer comes. The command ends in one deadline (15 s; 40 is a hang
    guard, as a loaded CI runner starts and unwinds slowly: ``silent.accepted`` says no call was tried again),
    names host:port once, lists the auto pool with "not checked", exits 1 (a partial report: the Kubernetes
    API cannot be used)."""
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    took = time.monotonic() - started
    out = " ".join(stdout.split())
    assert proc.returncode == 1 and took < 40, (took, stdout, stderr)
    assert out.count("127.0.0.1:%d" % silent.port) == 1, out
    assert "the API server 127.0.0.1:%d did not answer within 15s; not asked again" % silent.port in out
    assert "pool np0a1b2c3d4e5f60718293a4b5c6d7e8f9 (llm-auto)" in out and "nodes: not checked:" in out
    assert silent.accepted == 2  # the connect check, then one call: nothing after it asked again


def _doctor_checked(cloud, capsys, tmp_path, silent):  # noqa: F811
    """doctor: every cloud check runs; the Kubernetes checks stop after one deadline, one PROBLEM names
    host:port, and each area it could not check says so; exit 1 (a PROBLEM)."""
    emulator, ecs, ros, kube, _ = cloud
    path = _kubeconfig_at(kube, tmp_path / "doctor", silent.port)
    started = time.monotonic()
    code, out, err = doctor_run(capsys, emulator, path)
    took = time.monotonic() - started
    assert code == 1 and took < 40, (took, out, err)
    assert out.count("127.0.0.1:%d" % silent.port) == 1, out
    lines = out.splitlines()
    assert any(line.startswith("PROBLEM  kubernetes") and "the API server 127.0.0.1:%d did not answer within 15s"
               % silent.port in line for line in lines), out
    for area in ("rbac", "device plugin", "mig-manager"):
        assert any(line.split(None, 1)[0] == "warn" and " %s " % area in line and "not checked" in line
                   for line in lines), (area, out)
    assert any(line.startswith("ok       stack") for line in lines)  # the rest of the report is there
    assert silent.accepted == 1


@pytest.mark.kube
@pytest.mark.slow
def test_status_and_doctor_against_a_silent_api_server_each_end_within_one_deadline(cloud, capsys, tmp_path):  # noqa: F811
    """status (a real process) and doctor (in this one), each against its own silent API server. Each waits
    out the real 15 s deadline; they wait at the same time, so the test costs one deadline, not two."""
    emulator, ecs, ros, kube, _ = cloud
    (tmp_path / "status").mkdir()
    (tmp_path / "doctor").mkdir()
    for_status, for_doctor = SilentServer(), SilentServer()
    try:
        proc, started = _status_started(kube, tmp_path / "status", for_status)
        try:
            _doctor_checked(cloud, capsys, tmp_path, for_doctor)
        except BaseException:  # doctor's failure is the one to see: status is not waited for
            proc.kill()
            proc.communicate()
            raise
        _status_checked(proc, started, for_status)
    finally:
        for_status.close()
        for_doctor.close()
