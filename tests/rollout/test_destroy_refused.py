"""The node enforces "destroy nothing" and the function falls back to the drained path (issue 18 point 3),
with the real node tool: the delivery executor's local transport runs the node script and
``node_bootstrap apply`` on simulated 8-GPU A100 nodes (one state file per node), against the local TLS
Kubernetes API.

The function guesses a node's placements from its applied label (where the solver puts them on an empty
GPU). node-a got its ``2g.10gb`` by keeping the 2g.10gb of an earlier ``3g.20gb-2g.10gb-1g.5gb``, so it sits
at slot 4, not 0: going to ``2g.10gb-2g.10gb-3g.20gb`` then needs a destroy there, while node-b (at 0) only
gains instances. Both are sent the destroy-nothing apply; node-a refuses (exit 7, ``destroy-required``,
nothing changed) and is taken the drained way in a later wave."""

import json
import subprocess
import sys

import pytest

from functions.delivery.node_executor import make_transport
from functions.base.settings import load_settings
from tests.rollout.conftest import capacity, instance_id, node_labels, snapshot

BACKEND = "sim:A100-SXM4-40GB:8"  # ecs.ebmgn7.26xlarge
GUESSED, TARGET = "2g.10gb", "2g.10gb-2g.10gb-3g.20gb"
NAMES = ["node-a", "node-b"]


class DevicePlugin:
    """Wraps the local transport: once a node reports success, does what node_bootstrap's labeller and
    the device plugin do on a real node (the node runs with --no-label here): the node's labels and its
    allocatable ``nvidia.com/mig-<profile>``, counted from the node's own result."""

    def __init__(self, inner, api):
        self.inner, self.api, self.name = inner, api, inner.name
        self.results = []

    def run(self, targets):
        results = self.inner.run(targets)
        for t, res in zip(targets, results):
            doc = res.result or {}
            self.results.append((t.node_name, res.exit_code, doc))
            if doc.get("outcome") != "success":
                continue
            allocatable = {"nvidia.com/gpu": "0"}
            for gpu in doc.get("gpus") or []:
                for inst in gpu.get("instances") or []:
                    key = "nvidia.com/mig-%s" % inst["profile"]
                    allocatable[key] = str(int(allocatable.get(key, "0")) + 1)
            self.api.label_node(t.node_name, node_labels(doc["sequence"]))
            self.api.set_capacity(t.node_name, allocatable)
        return results


@pytest.fixture
def nodes(cluster, tmp_path):
    state = tmp_path / "nodes"
    state.mkdir()
    args = ("--backend %s --no-label --clients= --device-plugin-restart none --lock-file %s --state-dir %s"
            % (BACKEND, tmp_path / "node.lock", tmp_path / "node-state"))
    cluster.settings_env.update({"ACK_MIG_TRANSPORT": "local", "ACK_MIG_NODE_ARGS": args,
                                 "ACK_MIG_NODE_TIMEOUT_S": "120"})

    def apply(name, sequence):  # the node's history, with the real tool
        cmd = [sys.executable, "-m", "node_bootstrap", "--json", "--sim-state", str(state / ("%s.json" % instance_id(
            name)))] + args.split() + ["apply", "--sequence", sequence]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert json.loads(done.stdout.splitlines()[-1])["outcome"] == "success", done.stderr

    apply("node-a", "3g.20gb-2g.10gb-1g.5gb")  # 2g.10gb at 4 ...
    apply("node-a", GUESSED)  # ... kept there: the label says 2g.10gb, the function guesses slot 0
    apply("node-b", GUESSED)  # 2g.10gb at 0, as guessed
    for name in NAMES:
        cluster.api.add_node(name, labels=node_labels(GUESSED), capacity=capacity(GUESSED))
    settings = load_settings(cluster.settings_env)
    local = make_transport(settings, sim_state_dir=str(state), root=str(tmp_path / "node-root"),
                           python=sys.executable)
    cluster.transport = DevicePlugin(local, cluster.api)
    return cluster


def patches(api, name):
    """The writes of a node's record, in order: (step, drain, cordon change or None)."""
    out = []
    for r in api.requests:
        if r.method == "PATCH" and r.path == "/api/v1/nodes/%s" % name and r.status == 200:
            record = json.loads(((r.body.get("metadata") or {}).get("annotations") or {}).get(
                "ack-mig-hook/rollout") or "null")
            if record:
                out.append((record["step"], record["drain"], (r.body.get("spec") or {}).get("unschedulable", "-")))
    return out


def test_a_node_that_would_need_a_destroy_refuses_and_is_drained_in_a_later_wave(nodes):
    api = nodes.api
    api.add_pod("team", "infer-a", "node-a", gpus=1, owner_kind="ReplicaSet")
    api.add_pod("team", "infer-b", "node-b", gpus=1, owner_kind="ReplicaSet")
    result = nodes.run(inventory=snapshot(TARGET, names=NAMES), ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    by = {n["node_name"]: n for n in result.nodes}
    # both were sent the destroy-nothing apply first; the node tool refused on node-a, changing nothing
    (a1, code_a, doc_a), (b1, code_b, doc_b) = sorted(nodes.transport.results[:2], key=lambda r: r[0])
    assert (a1, code_a, doc_a["outcome"], doc_a["error"]["code"]) == ("node-a", 7, "failed", "destroy-required")
    assert doc_a["changes"] == 0 and "GPU 0 needs destroying GPU instance" in doc_a["error"]["message"]
    assert (b1, code_b, doc_b["outcome"]) == ("node-b", 0, "success")
    # node-b: no cordon, no eviction; node-a: the drained way in the next wave of the same invocation
    assert patches(api, "node-b") == [("applying", False, "-"), ("applied", False, "-"), ("done", False, "-")]
    assert patches(api, "node-a") == [
        ("applying", False, "-"), ("destroy-required", True, "-"),
        ("cordoned", True, True), ("drained", True, "-"), ("applying", True, "-"), ("applied", True, "-"),
        ("done", True, None)]
    assert [r.path for r in api.requests if r.path.endswith("/eviction")] == [
        "/api/v1/namespaces/team/pods/infer-a/eviction"]
    assert by["node-b"]["outcome"] == "partitioned" and by["node-a"]["outcome"] == "partitioned"
    assert "before that: destroy-required: the layout cannot be reached by only adding instances" \
        in by["node-a"]["reason"]
    assert [n for n, _, doc in nodes.transport.results[2:]] == ["node-a"]  # its second apply, destroy allowed
    sequences = {n: api.nodes[n]["metadata"]["labels"]["aliyun.accelerator/nvidia_mig_sequence"] for n in NAMES}
    assert sequences == {"node-a": "2g.10gb-2g.10gb-3g.20gb", "node-b": "2g.10gb-2g.10gb-3g.20gb"}
    refusal = [e for e in nodes.events("MigRolloutDestroyRequired")]
    assert [e["involvedObject"]["name"] for e in refusal] == ["node-a"] and refusal[0]["type"] == "Normal"


def test_with_one_wave_of_time_the_refusal_is_the_outcome_and_the_next_invocation_drains(nodes):
    first = nodes.run(inventory=snapshot(TARGET, names=NAMES))  # one wave's time (no FC timeout here)
    by = {n["node_name"]: n for n in first.nodes}
    assert (by["node-a"]["outcome"], by["node-b"]["outcome"]) == ("destroy-required", "partitioned")
    assert "nothing was changed: the node goes the drained way (cordon, drain, apply) in a later wave" \
        in by["node-a"]["reason"]
    record = nodes.annotation("node-a")
    assert (record["step"], record["drain"]) == ("destroy-required", True) and not nodes.unschedulable("node-a")
    assert nodes.api.nodes["node-a"]["metadata"]["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == GUESSED
    plan = nodes.run(inventory=snapshot(TARGET, names=NAMES), dry_run=True)
    decision = {d.node_name: d for d in plan.decisions}["node-a"]
    assert decision.drain is True and "the node refused to only add instances (destroy-required" in decision.reason
    assert {n["node_name"]: n["reason"] for n in plan.nodes}["node-a"].startswith("dry run: would cordon")
    again = nodes.run(inventory=snapshot(TARGET, names=NAMES))
    assert {n["node_name"]: n["outcome"] for n in again.nodes} == {"node-a": "partitioned", "node-b": "skipped"}
    assert nodes.annotation("node-a")["step"] == "done" and not nodes.unschedulable("node-a")
    sent = [n for n, _, _ in nodes.transport.results]
    assert sorted(sent[:2]) == NAMES and sent[2:] == ["node-a"]
