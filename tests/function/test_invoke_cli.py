"""`ack-mig-hook invoke` as a user runs it (a fresh process), and the handler sharing its path."""

import json
import os
import subprocess
import sys

import pytest

from functions.handler import handler
from tests.function.conftest import EVENTS, INVENTORY, ROOT
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.cli_errors import error_text, is_one_error
from tests.support.loopback import refused_port

CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"


def cli(*args, env=None, stdin=None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "functions.commands.main", "invoke", *args], cwd=ROOT, env=full_env,
                          input=stdin, capture_output=True, text=True, timeout=60)


def test_json_output_from_a_snapshot():
    proc = cli("--event", os.path.join(ROOT, "examples", "event.json"), "--inventory", INVENTORY, "--dry-run",
               "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["trigger"] == "scale-out" and out["dry_run"] is True
    assert [d["action"] for d in out["decisions"]] == ["partition", "partition"]
    for d in out["decisions"]:
        assert set(["instance_id", "node_name", "nodepool_id", "action", "reason", "plan"]) <= set(d)
    assert proc.stderr == ""  # logs only with ACK_MIG_LOG_LEVEL=DEBUG


def test_text_output_shows_every_decision():
    proc = cli("--event", os.path.join(EVENTS, "fc_timer.json"), "--inventory", INVENTORY, "--dry-run",
               env={"ACK_MIG_CLUSTER_ID": CLUSTER})
    assert proc.returncode == 0, proc.stderr
    # One line per decision, except that decisions sharing a reason share one line ("3 instances: ...")
    # followed by the reason, printed once.
    counts = {}
    for line in proc.stdout.splitlines()[1:]:
        words = line.split()
        if line.startswith("  node ") or words[1:2] == ["nodes"] or not words or line.startswith("     "):
            continue
        counts[words[0]] = counts.get(words[0], 0) + (int(words[1]) if words[2:3] == ["instances:"] else 1)
    assert counts == {"error": 1, "partition": 3, "skip": 2}
    assert proc.stdout.count("asks for sequence=3g.20gb-3g.20gb: 8 x") == 1
    assert "commas are not accepted" in proc.stdout


def test_handler_and_cli_give_the_same_decisions(monkeypatch, capsys):
    """One code path: the FC handler's JSON equals the CLI's for the same event and snapshot."""
    import functions.pipeline.event as pipeline

    original = pipeline.run_event
    monkeypatch.setattr("functions.handler.run_event",
                        lambda raw, settings, context=None, record=False: original(
                            raw, settings, inventory=INVENTORY, context=context, dry_run=True, record=record))
    with open(os.path.join(EVENTS, "fc_timer.json"), "rb") as handle:
        from_handler = json.loads(handler(handle.read(), None))
    capsys.readouterr()
    proc = cli("--event", os.path.join(EVENTS, "fc_timer.json"), "--inventory", INVENTORY, "--dry-run", "--json")
    from_cli = json.loads(proc.stdout)
    assert from_handler["decisions"] == from_cli["decisions"]
    assert from_handler["nodes"] == from_cli["nodes"]


def assert_one_error_line(proc, fragment):
    """Bad input: exit 2, one line on stderr naming the problem, never a traceback."""
    assert proc.returncode == 2
    assert fragment in error_text(proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("content, fragment", [
    ("{not json", "event is not JSON"),
    ('{"cluster_id": "c-1", "nodepool": "np-1"}', "event field payload.nodepool"),
    ("", "event is empty"),
])
def test_bad_event_exits_2_with_one_line(tmp_path, content, fragment):
    path = tmp_path / "event.json"
    path.write_text(content)
    assert_one_error_line(cli("--event", str(path), "--inventory", INVENTORY), fragment)


@pytest.mark.parametrize("content, fragment", [
    ("[]", "must be a JSON object"),
    ('{"nodepools": []}', "cluster_id is missing"),
    ('{"cluster_id": "c-1", "nodepools": [{"kubernetes_config": {}}]}', "nodepools[0] has no nodepool_info.nodepool_id"),
    ('{"cluster_id": "c-1", "nodes": "x"}', "nodes must be a list"),
    ("garbage", "is not JSON"),
])
def test_bad_inventory_exits_2_with_one_line(tmp_path, content, fragment):
    path = tmp_path / "inventory.json"
    path.write_text(content)
    assert_one_error_line(cli("--event", os.path.join(EVENTS, "fc_timer.json"), "--inventory", str(path)), fragment)


def test_missing_files_and_stdin(tmp_path):
    proc = cli("--event", str(tmp_path / "nope.json"), "--inventory", INVENTORY)
    assert proc.returncode == 2 and "cannot read event file" in proc.stderr
    proc = cli("--event", os.path.join(EVENTS, "manual.json"), "--inventory", str(tmp_path / "nope.json"))
    assert proc.returncode == 2 and "cannot read inventory" in proc.stderr
    with open(os.path.join(EVENTS, "manual.json")) as handle:
        proc = cli("--event", "-", "--inventory", INVENTORY, "--json", stdin=handle.read())
    assert proc.returncode == 0 and json.loads(proc.stdout)["trigger"] == "manual"


def test_bad_setting_exits_2():
    proc = cli("--event", os.path.join(EVENTS, "manual.json"), "--inventory", INVENTORY,
               env={"ACK_MIG_API_MAX_ATTEMPTS": "many"})
    assert proc.returncode == 2 and "ACK_MIG_API_MAX_ATTEMPTS" in proc.stderr
    assert is_one_error(proc.stderr)


def test_skip_exits_0():
    proc = cli("--event", os.path.join(EVENTS, "ess_lifecycle_test.json"), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["outcome"] == "skip"


# ---- issue 19 point 2: a Kubernetes side that cannot be used is an error you see ----

TAINT = {"key": "ack-mig-hook/partition-pending", "value": "true", "effect": "NoSchedule"}
A100_NODES = ("cn-beijing.192.168.12.31", "cn-beijing.192.168.12.47")  # examples/event.json's two instances


def sim_env(tmp_path):
    """The local transport on simulated A100 nodes, everything the node touches inside ``tmp_path``."""
    args = ("--backend sim:A100-SXM4-40GB:8 --sim-state %s --no-label --clients= --device-plugin-restart none "
            "--lock-file %s --state-dir %s" % (tmp_path / "gpus.json", tmp_path / "node.lock", tmp_path / "state"))
    return {"ACK_MIG_TRANSPORT": "local", "ACK_MIG_NODE_ARGS": args, "ACK_MIG_NODE_TIMEOUT_S": "120",
            "ACK_MIG_NODE_ROOT": str(tmp_path / "node-root")}


@pytest.mark.kube
def test_a_live_invoke_whose_startup_taint_is_refused_fails_the_nodes(kube_api, tmp_path):  # noqa: F811
    """The scale-out partitions both nodes, then the API server refuses to lift the taint (403, a ClusterRole
    without patch): each node ends failed (taint-not-removed), exit 1, and --strict exits 3 (it was
    ``partitioned (... startup taint not removed ...)`` and exit 0)."""
    for name in A100_NODES:
        kube_api.add_node(name, taints=[TAINT])
    kube_api.fail["PATCH"] = 403
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert())
    argv = ("--event", os.path.join(ROOT, "examples", "event.json"), "--inventory", INVENTORY,
            "--kubeconfig", kubeconfig)
    proc = cli(*argv, "--json", env=sim_env(tmp_path))
    assert proc.returncode == 1, proc.stderr
    nodes = json.loads(proc.stdout)["nodes"]
    assert [(n["outcome"], n["code"]) for n in nodes] == [("failed", "taint-not-removed")] * 2
    # the GPUs were partitioned all the same (the two share one simulated machine: whichever comes second
    # finds it done)
    assert sum(n["changes"] for n in nodes) > 0 and all(n["sequence"] == "3g.20gb-3g.20gb" for n in nodes)
    proc = cli(*argv, "--strict", env=sim_env(tmp_path))  # the nodes are right now; the taint still stays
    assert proc.returncode == 3, proc.stderr
    assert "failed (taint-not-removed: the startup taint could not be lifted" in proc.stdout
    assert all(kube_api.nodes[name]["spec"]["taints"] == [TAINT] for name in A100_NODES)


@pytest.mark.kube
def test_an_unreachable_kubernetes_api_is_named_before_anything_is_decided(kube_api, tmp_path):  # noqa: F811
    """invoke connects to --kubeconfig's API server before it decides (fail before acting): a closed port is
    one line naming host and port at once, exit 2, nothing on stdout but --json's error object."""
    import time

    dead = refused_port()  # a loopback port nobody listens on
    path = kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert())
    with open(path) as fh:
        text = fh.read().replace("127.0.0.1:%d" % kube_api.port, "127.0.0.1:%d" % dead)
    with open(path, "w") as fh:
        fh.write(text)
    argv = ("--event", os.path.join(ROOT, "examples", "event.json"), "--inventory", INVENTORY, "--kubeconfig", path,
            "--dry-run")
    started = time.monotonic()
    proc = cli(*argv)
    # at once: the refusal is not retried (the words below); 40 s is a hang guard for a process that starts
    # slowly on a loaded CI runner, short of the minute the client's retries took
    assert proc.returncode == 2 and proc.stdout == "" and time.monotonic() - started < 40, proc.stderr
    assert "cannot connect to the API server at 127.0.0.1:%d (Connection refused)" % dead in error_text(proc.stderr)
    proc = cli(*argv, "--json")
    assert proc.returncode == 2 and "127.0.0.1:%d" % dead in json.loads(proc.stdout)["error"]
    # status as well (it was silent for over a minute of the client's retries)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "functions.commands.main", "status", "--inventory", INVENTORY,
                           "--kubeconfig", path], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))})
    # the ACK side is still shown; the Kubernetes side says at once why it is missing
    assert proc.returncode == 1 and time.monotonic() - started < 40, proc.stderr
    assert "cannot connect to the API server at 127.0.0.1:%d" % dead in " ".join(proc.stdout.split())
    # advise the same way as invoke: it said "cannot reach https://...: [Errno 111] ..." (found by the docs audit)
    proc = subprocess.run([sys.executable, "-m", "functions.commands.main", "advise", "--pool", "llm-auto",
                           "--inventory", os.path.join(ROOT, "examples", "inventory-auto.json"), "--kubeconfig", path],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))})
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert "cannot connect to the API server at 127.0.0.1:%d (Connection refused)" % dead in error_text(proc.stderr)


def test_a_real_run_on_a_snapshot_without_a_kubernetes_view_says_what_it_cannot_do(tmp_path, capsys, monkeypatch):
    """A snapshot without kube_nodes and no --kubeconfig cannot tell running nodes from new ones: a real run
    that applies nodes says on stderr that they were applied, not rolled; a dry run does not."""
    from functions.commands.main import main
    from functions.pipeline.point_of_change import DryRunExecutor

    # a real run, whose point of change is the dry-run executor: nothing leaves this machine
    monkeypatch.setattr("functions.pipeline.point_of_change.make_executor", lambda settings, dry_run: DryRunExecutor())
    monkeypatch.setenv("ACK_MIG_STARTUP_TAINT", "none")
    event = os.path.join(ROOT, "examples", "event.json")  # a scale-out naming two nodes of a labelled pool
    main(["invoke", "--event", event, "--inventory", INVENTORY])
    err = capsys.readouterr().err
    assert "warning: %s has no kube_nodes and no --kubeconfig was given, so 2 node(s) were applied directly" \
        % INVENTORY in err and "not rolled" in err
    main(["invoke", "--event", event, "--inventory", INVENTORY, "--dry-run"])
    assert "warning" not in capsys.readouterr().err


def test_a_large_event_is_a_few_lines_and_verbose_names_every_instance(tmp_path):
    """Forty passthrough instances that all skip for the same reason: one line naming five and counting the
    rest, not one line of forty ids; --verbose names them all; --json is complete either way."""
    with open(INVENTORY) as fh:
        data = json.load(fh)
    template = next(n for n in data["nodes"] if n["instance_id"] == "i-2ze5gn7pass00x1r7t3")
    data["nodes"] += [dict(template, instance_id="i-2ze5gn7pass%08d" % i, node_name="cn-beijing.10.0.9.%d" % i,
                           ip_address=["10.0.9.%d" % i]) for i in range(40)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data))
    event = os.path.join(ROOT, "examples", "event-reconcile.json")
    short = cli("--event", event, "--inventory", str(path), "--dry-run")
    assert short.returncode == 0, short.stderr
    line = next(x for x in short.stdout.splitlines() if "i-2ze5gn7pass00000000" in x)
    assert "and 36 more (--verbose lists them)" in line and "i-2ze5gn7pass00000039" not in short.stdout
    full = cli("--event", event, "--inventory", str(path), "--dry-run", "--verbose")
    assert all("i-2ze5gn7pass%08d" % i in full.stdout for i in range(40))
    listed = json.loads(cli("--event", event, "--inventory", str(path), "--dry-run", "--json").stdout)
    assert sum(1 for d in listed["decisions"] if d["instance_id"].startswith("i-2ze5gn7pass0000")) == 40
