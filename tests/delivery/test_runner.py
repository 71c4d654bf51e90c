"""The node runner, run for real: bundle install from parts, the hash check, the cache, the deadline."""

import os
import subprocess
import sys

from functions.delivery.command import node_args, render
from functions.delivery.local import LocalTransport
from functions.delivery.result import parse_output
from tests.delivery.conftest import node_dirs, targets


def run(maker, extra=(), instance="i-1", names=None):
    args = node_args({"kind": "size", "value": "1g.5gb"}, extra)
    script = render(maker.bundle.digest, args, maker.deadline_s, instance, names or {}, maker.root, maker.python)
    proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, timeout=60)
    return proc.returncode, parse_output(proc.stdout.decode())


def put_parts(maker, corrupt=False):
    incoming = os.path.join(maker.root, "incoming")
    os.makedirs(incoming, exist_ok=True)
    for name, chunk in zip(maker.bundle.part_names(200), maker.bundle.chunks(200)):
        with open(os.path.join(incoming, name), "wb") as fh:
            fh.write(chunk[::-1] if corrupt else chunk)


def test_a_cold_node_says_bundle_missing_and_runs_nothing(maker):
    code, doc = run(maker)
    assert code == 10 and doc["bundle"] == "missing" and doc["error"]["code"] == "bundle-missing"
    assert node_dirs(maker.root) == []


def test_parts_are_assembled_checked_and_cached(maker):
    put_parts(maker)
    code, doc = run(maker, names={"i-1": "cn-x.10.0.0.1"})
    assert code == 0 and doc["outcome"] == "success" and doc["node_name"] == "cn-x.10.0.0.1"
    assert node_dirs(maker.root) == [maker.bundle.digest]
    assert os.listdir(os.path.join(maker.root, "incoming")) == []  # parts removed once installed
    code, doc = run(maker)  # warm: nothing sent, same answer
    assert code == 0 and doc["outcome"] == "success" and doc["node_name"] is None


def test_corrupt_parts_are_refused_and_removed(maker):
    put_parts(maker, corrupt=True)
    code, doc = run(maker)
    assert code == 10 and "corrupt" in doc["error"]["message"]
    assert node_dirs(maker.root) == [] and os.listdir(os.path.join(maker.root, "incoming")) == []


def test_parts_being_rewritten_by_a_duplicate_event_are_read_again_not_deleted(maker):
    """Two deliveries of one event may send the same parts at once; parts caught mid-write look corrupt
    for a moment. The runner reads them again after a pause instead of deleting the other upload."""
    import threading

    put_parts(maker, corrupt=True)  # what a half-written upload looks like
    rewrite = threading.Timer(0.5, put_parts, args=(maker,))  # the other upload finishes meanwhile
    rewrite.start()
    try:
        code, doc = run(maker)
    finally:
        rewrite.join()
    assert code == 0 and doc["outcome"] == "success"
    assert node_dirs(maker.root) == [maker.bundle.digest]


def test_the_node_deadline_stops_the_process(maker):
    put_parts(maker)
    maker.deadline_s = 1
    code, doc = run(maker, ["--fake-sleep", "20"])
    assert code == 124 and doc["error"]["code"] == "node-timeout"


def test_a_node_without_json_is_reported_with_its_stderr(maker):
    put_parts(maker)
    code, doc = run(maker, ["--fake-silent", "1"])
    assert code == 1 and doc["error"]["code"] == "no-result" and "fake node: working" in doc["error"]["message"]


def test_the_local_transport_pushes_once_then_never_again(maker, monkeypatch):
    transport = LocalTransport(maker)
    pushes = []
    real = transport._push
    monkeypatch.setattr(transport, "_push", lambda t: pushes.append(t.instance_id) or real(t))
    first = transport.run(targets(1))
    assert [r.result["outcome"] for r in first] == ["success"] and pushes == ["i-t0000"]
    second = transport.run(targets(3))
    assert all(r.result["outcome"] == "success" for r in second) and pushes == ["i-t0000"]
    assert all(r.attempts == 1 for r in second)


def test_the_runner_is_python36_syntax():
    # vermin runs in CI for node code; this keeps the runner (sent as text) honest too
    path = os.path.join(os.path.dirname(__file__), "..", "..", "functions", "delivery", "node_runner.py")
    vermin = os.path.join(os.path.dirname(sys.executable), "vermin")
    out = subprocess.run([vermin, "--no-tips", "--violations", "-t=3.6-", path], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
