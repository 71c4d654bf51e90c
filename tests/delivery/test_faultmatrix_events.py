"""Fault matrix, whole-event rows: duplicate and concurrent events, a node killed mid-apply, a busy GPU and a
failed reset, each through ``run_event`` (snapshot, decisions, the real delivery executor) with the local
transport running the real bundle and runner on simulated A100 nodes (one state file per node)."""

import json
import os
import sys
import threading

import pytest

from functions.delivery import bundle
from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.local import LocalTransport
from functions.delivery.transport import ScriptMaker
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(ROOT, "examples", "inventory.json")
CLUSTER = json.load(open(INVENTORY))["cluster_id"]
SCALE_OUT = open(os.path.join(ROOT, "examples", "event.json"), "rb").read()  # the A100 pool's 2 new nodes
TIMER = open(os.path.join(ROOT, "tests", "events", "fc_timer.json"), "rb").read()  # every labelled pool
NODES = ("i-2zeb7c1mig0a100x1k4d", "i-2zeb7c1mig0a100x2m8f")


class Cluster:
    """Simulated nodes behind the local transport, and a way to run an event against them."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.nodes = tmp_path / "nodes"
        self.nodes.mkdir()
        self.transport = LocalTransport(ScriptMaker(bundle.build(), 120, str(tmp_path / "root"), sys.executable),
                                        sim_state_dir=str(self.nodes))
        self.settings = load_settings({"ACK_MIG_CLUSTER_ID": CLUSTER, "ACK_MIG_LOG_LEVEL": "ERROR"})

    def executor(self, *faults):
        extra = ["--backend", "sim:A100-SXM4-40GB:2", "--no-label", "--clients=", "--device-plugin-restart",
                 "none", "--lock-file", str(self.dir / "node.lock"), "--state-dir", str(self.dir / "state")]
        for fault in faults:
            extra += ["--sim-fault", fault]
        return DeliveryExecutor(self.transport, extra)  # no taints, no hook: the node outcomes alone

    def run(self, raw=SCALE_OUT, *faults):
        result = run_event(raw, self.settings, inventory=INVENTORY, executor=self.executor(*faults),
                           logger=JsonLogger("OFF"))
        assert result.outcome == "done", result.reason
        return {n["instance_id"]: n for n in result.nodes}

    def layout(self, iid):
        with open(str(self.nodes / ("%s.json" % iid))) as fh:
            state = json.load(fh)
        return [sorted((gi["profile_id"], gi["start"], len(gi["cis"])) for gi in gpu["gis"]) for gpu in state["gpus"]]

    def raw_state(self, iid):
        with open(str(self.nodes / ("%s.json" % iid))) as fh:
            return fh.read()


THREE_G_TWICE = [(9, 0, 1), (9, 4, 1)]  # 3g.20gb at starts 0 and 4, one compute instance each


@pytest.fixture
def cluster(tmp_path):
    return Cluster(tmp_path)


def test_a_duplicate_event_finds_every_node_done_and_changes_nothing(cluster):
    first = cluster.run()
    assert {iid: n["outcome"] for iid, n in first.items()} == {iid: "partitioned" for iid in NODES}
    before = {iid: cluster.raw_state(iid) for iid in NODES}
    again = cluster.run()
    assert {iid: (n["outcome"], n["changes"]) for iid, n in again.items()} == {iid: ("unchanged", 0) for iid in NODES}
    assert {iid: cluster.raw_state(iid) for iid in NODES} == before  # not one write to the simulated driver
    assert all(cluster.layout(iid) == [THREE_G_TWICE] * 2 for iid in NODES)


@pytest.mark.parametrize("second", [SCALE_OUT, TIMER], ids=["same-event-twice", "scale-out-and-timer"])
def test_concurrent_events_on_the_same_nodes_converge(cluster, second):
    runs, errors = [], []

    def deliver(raw):
        try:
            runs.append(cluster.run(raw))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(raw,)) for raw in (SCALE_OUT, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert errors == [] and len(runs) == 2
    for iid in NODES:  # the node lock lets one run partition, the other finds the node right
        assert sorted(run[iid]["outcome"] for run in runs) == ["partitioned", "unchanged"]
        assert cluster.layout(iid) == [THREE_G_TWICE] * 2


def test_a_node_killed_mid_apply_fails_visibly_and_the_next_event_repairs_it(cluster):
    killed = cluster.run(SCALE_OUT, "crash-after:3")  # SIGKILL right after the third mutating NVML call
    for iid in NODES:
        assert killed[iid]["outcome"] == "failed"
        assert "no-result" in killed[iid]["reason"] and "\n" not in killed[iid]["reason"]
        assert cluster.layout(iid) != [THREE_G_TWICE] * 2  # half done
    repaired = cluster.run()
    for iid in NODES:
        assert repaired[iid]["outcome"] == "partitioned"
        assert cluster.layout(iid) == [THREE_G_TWICE] * 2


def test_a_busy_gpu_fails_the_node_with_the_pids_and_changes_nothing(cluster):
    nodes = cluster.run(SCALE_OUT, "processes")
    for iid in NODES:
        assert nodes[iid]["outcome"] == "failed"
        assert "gpu-busy" in nodes[iid]["reason"] and "4242" in nodes[iid]["reason"]
        assert cluster.layout(iid) == [[], []]


def test_a_failed_gpu_reset_ends_reboot_required(cluster):
    nodes = cluster.run(SCALE_OUT, "reset-fails")
    for iid in NODES:
        assert nodes[iid]["outcome"] == "reboot-required", nodes[iid]["reason"]
        assert "reset" in nodes[iid]["reason"]
