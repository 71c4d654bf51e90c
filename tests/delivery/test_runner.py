"""The node runner, run for real: bundle install from parts, the hash check, the cache, the deadline."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from functions.delivery.node_script import node_args, render
from functions.delivery.local import LocalTransport
from functions.delivery.outcome import parse_output
from tests.delivery.conftest import node_dirs, targets
from tests.node.conftest import holders  # noqa: F401  (fixture)
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)


def run(maker, extra=(), instance="i-1", names=None, grace_s=15, args=None, env=None, timeout=60):
    args = args or node_args({"kind": "size", "value": "1g.5gb"}, extra)
    script = render(maker.bundle.digest, args, maker.deadline_s, instance, names or {}, maker.root, maker.python,
                    grace_s)
    proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, timeout=timeout, env=env)
    return proc.returncode, parse_output(proc.stdout.decode())


def gone(pid):
    """The process no longer runs (exited, or a zombie waiting for its reaper)."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.fixture
def strays():
    """Pids a test's node started; killed afterwards whatever happened (never left running)."""
    pids = []
    yield pids
    for pid in pids:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


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


def test_the_deadline_stops_the_whole_process_group(maker, tmp_path, strays):
    """node_bootstrap's own children (a tool it started) go with it: SIGTERM reaches the whole group."""
    put_parts(maker)
    maker.deadline_s = 1
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    code, doc = run(maker, ["--fake-sleep", "30", "--fake-child", str(pidfile)], grace_s=30)
    strays.append(int(pidfile.read_text()))
    assert code == 124 and doc["error"]["code"] == "node-timeout"
    assert "stopped by SIGTERM" in doc["error"]["message"]
    # SIGTERM was enough: no wait for the 30 s grace period (1 s deadline plus any load stays well under 20 s)
    assert time.monotonic() - started < 20
    deadline = time.monotonic() + 5
    while not gone(strays[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(strays[0]), "the child node_bootstrap started outlived the deadline"


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(maker, tmp_path, strays):
    put_parts(maker)
    maker.deadline_s = 1
    pidfile, own = tmp_path / "child.pid", tmp_path / "node.pid"
    started = time.monotonic()
    code, doc = run(maker, ["--fake-sleep", "30", "--fake-ignore-term", "1", "--fake-child", str(pidfile),
                            "--fake-pid", str(own)], grace_s=2)
    elapsed = time.monotonic() - started
    strays.extend([int(pidfile.read_text()), int(own.read_text())])
    assert code == 124 and "killed (SIGKILL) 2 s after SIGTERM" in doc["error"]["message"]
    assert 3 <= elapsed < 20
    # the node process itself, which ignored SIGTERM, is gone too: only SIGKILL could end it
    assert gone(strays[0]) and gone(strays[1]), "a node process outlived its deadline and grace"


def test_pipes_held_by_a_grandchild_that_left_the_group_do_not_hold_the_runner(maker, tmp_path, strays):
    """A grandchild in a session of its own keeps the output pipe open for a minute: the runner reads for a
    bounded time, then reports, instead of waiting for it."""
    put_parts(maker)
    maker.deadline_s = 1
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    try:
        code, doc = run(maker, ["--fake-sleep", "30", "--fake-child", str(pidfile), "--fake-escape", "1"],
                        grace_s=1, timeout=40)
    finally:
        if pidfile.exists():
            strays.append(int(pidfile.read_text()))
    assert code == 124 and doc["error"]["code"] == "node-timeout"
    assert time.monotonic() - started < 25  # deadline 1 + grace 1 + drain 5 (+ start-up), not the child's 60


def test_sigterm_at_the_deadline_runs_applys_cleanup_on_the_simulator(tmp_path, kube_api, holders):
    """End to end through the runner with the real bundle: apply stops the device plugin (its static pod
    manifest moved away) and then blocks waiting for a stuck GPU client; the runner's SIGTERM at the
    deadline makes apply put the plugin back and label the node failed (interrupted), and the runner
    reports node-timeout with the node's own reason."""
    import threading

    from functions.delivery import bundle as bundle_mod
    from functions.delivery.transport import ScriptMaker
    from tests.node.nodecli import Holder, Node, fake_devices

    kube_api.add_node("node-a")
    manifest = tmp_path / "manifests" / "nvidia-device-plugin.yml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    node = Node(tmp_path, clients="manifest:%s" % manifest)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a"))
    pattern, gpus = fake_devices(tmp_path)
    holders.append(Holder(tmp_path, "stuck-client", gpus))  # apply waits for it after stopping the plugin
    deadline_s = 5  # apply reaches the client wait in about 2 s on 2 cores four times oversubscribed
    maker = ScriptMaker(bundle_mod.build(), deadline_s, str(tmp_path / "node-root"), sys.executable)
    put_parts(maker)
    args = ["--json"] + node.args("apply", "--sequence", "3g.20gb-3g.20gb", "--gpu-device-glob", pattern,
                                  "--client-stop-timeout", "120")
    started, stopped = time.monotonic(), []

    def watch():  # when apply took the plugin away: proof that SIGTERM found it inside the client wait
        while manifest.exists() and time.monotonic() - started < 60:
            time.sleep(0.02)
        stopped.append(time.monotonic() - started)

    threading.Thread(target=watch, daemon=True).start()
    code, doc = run(maker, args=args, grace_s=20, env=node.env(), timeout=60)
    meta = kube_api.nodes["node-a"]["metadata"]
    assert stopped and stopped[0] < deadline_s, "apply did not reach the client wait before the deadline"
    assert code == 124 and doc["error"]["code"] == "node-timeout", doc
    assert "stopped by SIGTERM" in doc["error"]["message"]
    assert "interrupted by SIGTERM" in doc["error"]["message"]  # the node's own reason travels along
    assert doc["node"]["labels"]["states"] == ["pending", "failed"]
    assert manifest.read_text() == "kind: Pod\n"  # the device plugin is back
    assert meta["labels"]["nvidia.com/mig.config.state"] == "failed"
    assert meta["annotations"]["ack-mig-hook/mig-config-reason"] == "interrupted by SIGTERM"
    assert json.loads((tmp_path / "var" / "stopped-clients.json").read_text()) == []


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


# ---- what the runner prints stays within Cloud Assistant's 24 KB of output ----

CLOUD_ASSISTANT_OUTPUT = 24 * 1024  # DescribeInvocationResults drops Output past it (/shared/reference/facts.md)


def _printed(maker, args, env=None):
    script = render(maker.bundle.digest, args, maker.deadline_s, "i-1", {}, maker.root, maker.python, 15)
    proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, timeout=120, env=env)
    return proc.returncode, proc.stdout


def _most():
    """The most the runner prints: its ``# `` lines and node_bootstrap's bounded result line."""
    from functions.delivery import node_runner as r

    return r.STDERR_LINES * (len("# \n") + r.STDERR_CHARS) + r.RESULT_BYTES + len("\n")


def test_the_printed_output_is_bounded_below_cloud_assistants_limit_by_construction():
    assert _most() <= CLOUD_ASSISTANT_OUTPUT * 0.8  # a fifth of Cloud Assistant's 24 KB to spare


@pytest.mark.parametrize("gpu, count, one", [
    ("B300", 8, "1g.34gb"),  # the catalogue's widest: 8 GPUs a node (every MIG family of the ECS table), 7 x 1g
    ("B200", 16, "1g.23gb"),  # a family the table does not know (the node decides), at the simulator's most GPUs
])
def test_the_worst_case_node_output_fits_cloud_assistant(tmp_path, gpu, count, one):
    """A node with 7 instances on each GPU, its boot unit installed, through the real runner and bundle on the
    simulator: the output stays within the runner's bound, under Cloud Assistant's 24 KB (past it the output is
    dropped and the node ends no-result though it was partitioned), and reads as partitioned. Before the bound,
    16 GPUs printed 31.1 KB; the catalogue's worst case (16.2 KB) is still printed whole."""
    from functions.delivery import bundle as bundle_mod
    from functions.delivery.outcome import NodeResult, outcome
    from functions.delivery.transport import ScriptMaker
    from tests.node.nodecli import Node

    node = Node(tmp_path, gpu=gpu, count=count)
    maker = ScriptMaker(bundle_mod.build(), 120, str(tmp_path / "node-root"), sys.executable)
    put_parts(maker)
    code, out = _printed(maker, ["--json"] + node.args("apply", "--sequence", "-".join([one] * 7), "--boot-unit"),
                         env=node.env())
    assert code == 0 and len(out) <= CLOUD_ASSISTANT_OUTPUT * 0.8, len(out)
    assert len(out) <= _most()
    doc = parse_output(out.decode())
    got = outcome(NodeResult("i-1", "cloud-assistant", code, doc))
    # each GPU: MIG mode on, 7 GPU instances, 7 compute instances
    assert (got.outcome, got.changes, got.sequence) == ("partitioned", count * 15, "-".join([one] * 7))
    assert ("compacted" in doc) == (count > 8)
    assert [g.get("profiles") or {one: len(g["instances"])} for g in got.gpus] == [{one: 7}] * count


def test_the_runner_prints_few_short_ascii_lines_of_a_flooded_stderr(maker):
    """200 stderr lines of 5 000 non-ASCII characters: 8 lines of at most 300 ASCII characters are printed (a C
    locale's stdout takes nothing else), then the node's result."""
    from functions.delivery import node_runner as r

    put_parts(maker)
    code, out = _printed(maker, node_args({"kind": "size", "value": "1g.5gb"}, ["--fake-stderr-flood", "1"]))
    text = out.decode("ascii")
    said = [l for l in text.splitlines() if l.startswith("# ")]
    assert code == 0 and len(said) == r.STDERR_LINES and said[-1].startswith("# fake node: \\xe9tape 199 ")
    assert said[0].startswith("# fake node: \\xe9tape 192 ") and max(len(l) for l in said) == 2 + r.STDERR_CHARS
    assert parse_output(text)["outcome"] == "success"


def _huge(exit_code):
    """A result far past 24 KB: 64 GPUs of 7 instances, 300 odd keys, and a failure's 20 000 character reason."""
    doc = {"command": "apply", "outcome": "success" if exit_code == 0 else "failed", "changes": 448,
           "sequence": "1g.23gb", "left": [{"gpu": 3, "why": "held by a pod"}],
           "gpus": [{"index": i, "name": "NVIDIA B200", "diagram": "#" * 400, "mig_mode": {"current": "enabled"},
                     "instances": [{"profile": "1g.23gb", "start": j, "mig_devices": ["MIG-%036d" % j]}
                                   for j in range(7)]} for i in range(64)],
           "boot_unit": {"installed": True}}
    doc.update(("extra-%03d" % n, "\u00e9" * 300) for n in range(300))
    if exit_code:
        doc["error"] = {"code": "gpu-busy", "message": "GPU 0 has running processes: " + "\u00e9" * 20000}
    return doc


@pytest.mark.parametrize("exit_code, expected", [(0, ("partitioned", "")), (4, ("failed", "gpu-busy"))])
def test_an_over_budget_result_still_reads_as_the_nodes_outcome(exit_code, expected):
    """node_bootstrap's result line past the runner's RESULT_BYTES is compacted; the function reads the same
    outcome, changes, sequence, error code and left GPUs from it as from the whole line."""
    from functions.delivery.node_runner import RESULT_BYTES
    from functions.delivery.outcome import NodeResult, outcome
    from node_bootstrap.commands.resultline import bounded

    doc = _huge(exit_code)
    line = bounded(doc, RESULT_BYTES)
    assert len(line) <= RESULT_BYTES < len(json.dumps(doc, sort_keys=True))
    whole = outcome(NodeResult("i-1", "cloud-assistant", exit_code, doc))
    got = outcome(NodeResult("i-1", "cloud-assistant", exit_code, parse_output("# a line\n" + line + "\n")))
    assert (got.outcome, got.code) == expected
    assert (got.outcome, got.code, got.changes, got.sequence, got.left, got.reason) == \
        (whole.outcome, whole.code, whole.changes, whole.sequence, whole.left, whole.reason)
    compacted = json.loads(line)["compacted"]
    assert "gpus" in compacted and compacted["left_off"] and compacted["full_bytes"] > CLOUD_ASSISTANT_OUTPUT
    if exit_code == 0:
        assert "GPU 3 (held by a pod)" in got.reason
        assert [g["profiles"] for g in got.gpus] == [{"1g.23gb": 7}] * 64


def test_bounded_holds_whatever_the_node_wrote():
    from node_bootstrap.commands.resultline import MIN_BYTES, bounded

    odd = {"outcome": "\u00e9" * 50000, "changes": 3, "sequence": "\x00" * 50000,
           "error": {"code": "c" * 999, "message": ["\u2603"] * 9000}, "gpus": ["x" * 20000, {"instances": "no"}] * 50,
           "left": [{"gpu": 1}] * 9000, "boot_unit": {"error": "e" * 30000}}
    odd.update(("k%04d" % n + "\u00e9" * 200, n) for n in range(2000))
    odd.update((key, "\u00e9" * 50000) for key in ("bundle", "node_name", "command", "backend"))
    for limit in (MIN_BYTES, 16384):
        line = bounded(odd, limit)
        doc = json.loads(line)
        assert len(line) <= limit and doc["changes"] == 3 and doc["compacted"]["left_off_more"] > 0
    assert bounded({"outcome": "success", "changes": 1}, MIN_BYTES) == '{"changes": 1, "outcome": "success"}'
