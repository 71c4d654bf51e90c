"""The whole path with every part real: an event into ``run_event``, the cluster from the CS emulator
(real Tea SDK), the real node bundle delivered by Cloud Assistant (real core SDK, RPC emulator) to shell
nodes that unpack and run node_bootstrap on the simulated driver, the startup taint lifted on a local
HTTPS Kubernetes API with the kubeconfig DescribeClusterUserKubeconfig returned, and the lifecycle hook
answered on the ESS emulator (which also holds Auto Scaling's records: the membership checks ask it).

Each shell node keeps its own simulated GPUs, state directory and lock between runs, under its own
directory, so a duplicate event meets nodes that really are partitioned already."""

import json
import os

import pytest

from functions.cloud import rpc as rpc_module
from functions.cloud.rpc import Backoff
from functions.delivery import cloud_assistant
from functions.delivery.cloud_assistant import CloudAssistantTransport
from functions.delivery.node_script import DEFAULT_ROOT
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from tests.delivery.conftest import SECRET, TOKEN
from tests.support.cs_emulator import CsEmulator
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.rpc_emulator import Emulator, ShellNode

pytestmark = [pytest.mark.cloud_assistant, pytest.mark.kube]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TAINT = {"key": "ack-mig-hook/partition-pending", "value": "true", "effect": "NoSchedule"}


class Polled(CloudAssistantTransport):
    """The handler's Cloud Assistant transport polling the emulator every 50 ms at first, at most every 200 ms
    (its production beat: 1 s, backing off to 10 s), as tests/delivery/test_taint_outcome.py builds its own: the
    emulator's nodes answer as soon as their run ends."""

    def __init__(self, ecs, maker, **options):
        options.setdefault("poll_s", 0.05)
        options.setdefault("poll_max_s", 0.2)
        super().__init__(ecs, maker, **options)


class Paced(Backoff):
    """The cloud API clients' backoff with its pauses counted (``paused``), not slept: every retry is still made."""

    paused = []

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("sleep", Paced.paused.append)
        super().__init__(*args, **kwargs)


@pytest.fixture
def cloud(tmp_path, kube_api, monkeypatch):  # noqa: F811
    """The emulators and the settings that reach them; the waits between polls and retries short (Polled,
    Paced)."""
    monkeypatch.setattr(cloud_assistant, "CloudAssistantTransport", Polled)
    monkeypatch.setattr(rpc_module, "Backoff", Paced)
    with open(os.path.join(ROOT, "examples", "inventory.json")) as fh:
        inventory = json.load(fh)
    # ACK's kubeconfig for the function's RAM role: held to deploy/rbac.yaml, as a real cluster holds it
    admin = kube_api.function_kubeconfig(tmp_path / "admin.conf", inline=True)
    for node in inventory["nodes"]:
        if node.get("node_name"):
            kube_api.add_node(node["node_name"], taints=[TAINT])
    with CsEmulator("LTAIe2e", SECRET, TOKEN) as cs, Emulator("LTAIe2e", SECRET, TOKEN, "cn-beijing") as rpc:
        cs.load_inventory(inventory)
        rpc.load_inventory(inventory)
        with open(admin) as fh:
            cs.kubeconfig = fh.read()
        for node in inventory["nodes"]:
            rpc.nodes[node["instance_id"]] = ShellNode(str(tmp_path / node["instance_id"]), DEFAULT_ROOT)
        # One script serves the whole batch, so the paths cannot name the node: they are relative to the
        # directory the runner starts node_bootstrap in (<node root>/bundles/<digest>), which a ShellNode
        # keeps under its own filesystem. The simulated GPUs thus persist per node, from one event to the next.
        node_args = "--backend sim:A100-SXM4-40GB:8 --sim-state ../../sim-gpus.json --no-label --clients= " \
                    "--device-plugin-restart none --lock-file ../../node.lock --state-dir ../../state"
        env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIe2e", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
               "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_REGION": "cn-beijing", "ACK_MIG_CLUSTER_ID": cs.cluster_id,
               "ACK_MIG_CS_ENDPOINT": cs.endpoint, "ACK_MIG_ECS_ENDPOINT": rpc.endpoint,
               "ACK_MIG_ESS_ENDPOINT": rpc.endpoint, "ACK_MIG_NODE_ARGS": node_args, "ACK_MIG_LOG_LEVEL": "ERROR"}
        yield cs, rpc, load_settings(env)


def event(name):
    path = os.path.join(ROOT, *name.split("/"))
    with open(path, "rb") as fh:
        return fh.read()


def test_a_scale_out_event_partitions_the_nodes_and_lifts_their_taints(cloud, kube_api, tmp_path):  # noqa: F811
    cs, rpc, settings = cloud
    result = run_event(event("examples/event.json"), settings)
    assert result.outcome == "done", result.reason
    nodes = {n["instance_id"]: n for n in result.nodes}
    assert {n["outcome"] for n in nodes.values()} == {"partitioned"}
    node = nodes["i-2zeb7c1mig0a100x1k4d"]
    assert len(node["gpus"]) == 8 and node["sequence"] == "3g.20gb-3g.20gb" and node["taint"] == "removed"
    assert kube_api.nodes["cn-beijing.192.168.12.31"]["spec"]["taints"] == []
    assert cs.kubeconfig_requests and cs.kubeconfig_requests[0].get("PrivateIpAddress") in ("true", "True")
    assert rpc.rejected == [] and cs.rejected == []
    assert rpc.calls["RunCommand"] == 2 and rpc.calls["SendFile"] >= 1  # cold nodes: run, send, run
    assert all(n["changes"] > 0 for n in nodes.values())
    for iid in nodes:  # each node's simulated GPUs live in its own directory
        assert (tmp_path / iid / DEFAULT_ROOT.lstrip("/") / "sim-gpus.json").is_file()
    sent = rpc.calls["SendFile"]
    again = run_event(event("examples/event.json"), settings)  # a duplicate: the nodes are right already
    assert again.outcome == "done", again.reason
    assert {n["instance_id"]: (n["outcome"], n["changes"]) for n in again.nodes} == {
        iid: ("unchanged", 0) for iid in nodes}
    assert rpc.calls["SendFile"] == sent and rpc.calls["RunCommand"] == 3  # warm bundle: one run, no send


def test_a_lifecycle_hook_event_is_answered_after_the_node_is_done(cloud):
    cs, rpc, settings = cloud
    result = run_event(event("tests/events/ess_lifecycle_scale_out.json"), settings)
    assert result.outcome == "done", result.reason
    (node,) = result.nodes
    assert node["outcome"] == "partitioned" and "not joined" in node["taint"]
    kind, params = rpc.lifecycle[-1]
    assert kind == "complete" and params["LifecycleActionResult"] == "CONTINUE"
    assert params["LifecycleHookId"] == "ash-2ze6hook0mig1a100w3e"
