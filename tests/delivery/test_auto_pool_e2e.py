"""An auto pool end to end (issue 27): the auto pool timer's event into ``run_event``, pods on the local TLS
Kubernetes API server, the real node bundle run by the local transport on a simulated A100 80GB. Pending
pods for three profiles on an idle GPU get their instances without an eviction; demand beyond the pool
sets the node-template tags to the new-node layout; a tick with nothing pending lists pods once and ends."""

import json
import os
import sys

import pytest

from functions.base.settings import load_settings
from functions.cloud.cluster import InventoryLookup
from functions.delivery.node_executor import DeliveryExecutor, make_transport
from functions.kube.client import KubeApi
from functions.pipeline.event import run_event
from node_bootstrap.driver.nvml import FULL_CI_INDEX
from node_bootstrap.driver.sim import driver
from node_bootstrap.kube import load_kubeconfig
from node_bootstrap.mig import find_gpu
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

POOL = "np0a1b2c3d4e5f60718293a4b5c6d7e8f9"
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
INSTANCE = "i-2zeauto0a100x80g01"
MODEL = find_gpu("A100-SXM4-80GB")
TICK = json.dumps({"triggerTime": "2026-12-04T00:00:00Z", "triggerName": "auto-pools",
                   "payload": '{"auto_pools": true}'})


FRESH = "i-2zeauto0a100x80g02"


def lookup(fresh=False):
    return InventoryLookup.from_dict(snapshot(fresh))


def snapshot(fresh=False):
    """The cluster as the ACK API lists it (the --inventory format; the CS emulator serves the same)."""
    extra = [{"instance_id": FRESH, "node_name": "gpu-new", "nodepool_id": POOL, "state": "running",
              "instance_type": "ecs.ebmgn7e.32xlarge", "ip_address": ["127.0.0.1"]}] if fresh else []
    return {
        "cluster_id": CLUSTER,
        "nodepools": [{"nodepool_info": {"nodepool_id": POOL, "name": "llm-auto"},
                       "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}]},
                       "auto_scaling": {"enable": True},
                       "scaling_group": {"scaling_group_id": "asg-auto", "instance_types": ["ecs.ebmgn7e.32xlarge"]}}],
        "nodes": [{"instance_id": INSTANCE, "node_name": "gpu-a", "nodepool_id": POOL, "state": "running",
                   "instance_type": "ecs.ebmgn7e.32xlarge", "ip_address": ["127.0.0.1"]}] + extra}


def waiting(api, name, profile):
    pod = api.add_pod("llm", name, "", phase="Pending", owner_kind="ReplicaSet",
                      resources={"nvidia.com/mig-" + profile: "1"})
    with api.lock:
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]


def add_node(server):
    """The pool's one node, gpu-a, as the hook left it: MIG on, one 7g.80gb."""
    server.add_node("gpu-a", labels={"alibabacloud.com/nodepool-id": POOL,
                                     "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                                     "aliyun.accelerator/nvidia_count": "1", "nvidia.com/mig.config.state": "success",
                                     "aliyun.accelerator/nvidia_mig_sequence": "7g.80gb"})


def seven_gb_node(tmp_path):
    """The simulated node's state folder: gpu-a's one A100 80GB holding an idle 7g.80gb."""
    nodes = tmp_path / "nodes"
    nodes.mkdir(exist_ok=True)
    state = driver.new_state(MODEL.key, 1)  # the node as the hook left it: one idle 7g.80gb
    driver.set_mig_mode(state, 0, 1, [])
    seven = MODEL.profile_by_name("7g.80gb")
    gi = driver.create_gpu_instance(state, 0, seven.id, 0, seven.memory_slices)
    driver.create_compute_instance(state, 0, gi, FULL_CI_INDEX[seven.compute_slices])
    (nodes / ("%s.json" % INSTANCE)).write_text(json.dumps(state))
    return nodes


def node_args(tmp_path):
    """The node command's arguments for the local transport on that simulated node."""
    return ("--backend sim:A100-80GB:1 --no-label --clients= --device-plugin-restart none --lock-file %s "
            "--state-dir %s" % (tmp_path / "node.lock", tmp_path / "state"))


@pytest.fixture
def pool(kube_api, tmp_path):  # noqa: F811
    add_node(kube_api)
    nodes = seven_gb_node(tmp_path)
    args = node_args(tmp_path)
    settings = load_settings({"ACK_MIG_TRANSPORT": "local", "ACK_MIG_NODE_ARGS": args, "ACK_MIG_NODE_TIMEOUT_S": "60",
                              "ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_LOG_LEVEL": "ERROR",
                              "ACK_MIG_CLUSTER_ID": CLUSTER})
    transport = make_transport(settings, sim_state_dir=str(nodes), root=str(tmp_path / "node-root"),
                               python=sys.executable)
    executor = DevicePlugin(DeliveryExecutor.from_settings(settings, transport=transport), kube_api, nodes)
    api = KubeApi(load_kubeconfig(kube_api.function_kubeconfig(tmp_path / "a.conf")))  # held to deploy/rbac.yaml
    yield kube_api, api, settings, executor, nodes / ("%s.json" % INSTANCE)
    api.close()


class DevicePlugin:
    """What the NVIDIA device plugin (mixed strategy) does after an apply, which the simulated node cannot:
    publish one ``nvidia.com/mig-<profile>`` per MIG instance the node's GPUs now hold, in the Node's
    allocatable (the node runs with --no-label and no plugin restart here). Wraps the delivery executor."""

    def __init__(self, inner, server, nodes):
        self.inner, self.server, self.nodes = inner, server, nodes

    def execute(self, request, decisions):
        results = self.inner.execute(request, decisions)
        for d in decisions:
            state = self.nodes / ("%s.json" % d.instance_id)
            if d.node_name and state.exists():
                counts = {}
                for gpu in json.loads(state.read_text())["gpus"]:
                    for gi in gpu.get("gis") or ():
                        key = "nvidia.com/mig-" + MODEL.profile_by_id(gi["profile_id"]).name
                        counts[key] = counts.get(key, 0) + 1
                self.server.set_capacity(d.node_name, {k: str(v) for k, v in counts.items()})
        return results


def held(state_file):
    gis = json.loads(state_file.read_text())["gpus"][0]["gis"]
    return sorted((MODEL.profile_by_id(gi["profile_id"]).name, gi["start"]) for gi in gis)


def test_pending_pods_of_three_profiles_get_instances_without_an_eviction(pool):
    server, api, settings, executor, state_file = pool
    for name, profile in (("small-0", "1g.10gb"), ("small-1", "1g.10gb"), ("mid", "2g.20gb"), ("big", "3g.40gb")):
        waiting(server, name, profile)
    result = run_event(TICK, settings, inventory=lookup(), executor=executor, kube=api)
    assert result.outcome == "done", result.reason
    (node,) = result.nodes
    assert node["outcome"] == "partitioned", node
    have = held(state_file)
    assert [p for p, _ in have].count("1g.10gb") >= 2 and ("2g.20gb" in [p for p, _ in have]) \
        and ("3g.40gb" in [p for p, _ in have]), have
    assert result.decisions[0].gpu_layouts["gpus"][0]["index"] == 0
    assert not any("eviction" in r.path for r in server.requests)
    assert not any("eviction" in r.path or "unschedulable" in json.dumps(r.body) for r in server.requests)
    record = server.nodes["gpu-a"]["metadata"]["annotations"]["ack-mig-hook/rollout"]
    assert '"step": "done"' in record and '"drain": false' in record  # through the rollout: claimed, recorded
    assert "per-gpu=" in record and "new capacity shows" in node["reason"], node
    reasons = sorted(e["reason"] for e in server.events.values())
    assert reasons == ["MigRolloutDone", "MigRolloutNoDrain"], reasons
    lease = server.leases[("default", "ack-mig-hook-pool-%s" % POOL)]
    assert "gpu-a" not in lease["metadata"]["annotations"].get("ack-mig-hook/slots", "{}")  # slot given back
    assert result.pool_tags[0]["set"] == {}  # everything fits: no new node advertised


def test_demand_beyond_the_pool_sets_the_node_template_tags_and_a_dry_run_changes_nothing(pool):
    server, api, settings, executor, state_file = pool
    for i in range(4):
        waiting(server, "big-%d" % i, "3g.40gb")  # two fit the GPU; two need a new node
    before = state_file.read_text()
    result = run_event(TICK, settings, inventory=lookup(), executor=executor, kube=api, dry_run=True)
    assert result.outcome == "done" and state_file.read_text() == before
    (node,) = result.nodes
    assert node["outcome"] == "dry-run" and "GPU 0 3g.40gb-3g.40gb" in node["reason"]
    (tags,) = result.pool_tags
    key = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-3g.40gb"
    assert tags["set"] == {key: "16"} and "dry run: not written" in tags["reason"]  # 8 GPUs x two 3g.40gb


def test_a_tick_with_nothing_pending_lists_pods_once_and_stops_advertising_a_new_node(pool):
    """Nothing waits: no node changes, the pods are listed once and the pool's Nodes once; the tags a scale-out left (16x 3g.40gb
    here) stop advertising a new node, or the next pod the pool's GPUs could serve would bring one first. The
    pool's planning claim is taken for that (a plan running elsewhere may be setting them)."""
    server, api, settings, executor, state_file = pool
    before = state_file.read_text()
    key = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-3g.40gb"
    inventory = snapshot()
    inventory["nodepools"][0]["scaling_group"]["tags"] = [{"key": key, "value": "16"}]
    result = run_event(TICK, settings, inventory=InventoryLookup.from_dict(inventory), executor=executor, kube=api)
    assert result.outcome == "skip" and "no MIG pod waits" in result.reason
    assert [r.path for r in server.requests if "/pods" in r.path] == ["/api/v1/pods"]
    # the pool's Nodes are read once (records a stopped run left are ended even when nothing waits), and
    # nothing is written to them
    assert [(r.method, r.path) for r in server.requests if "/nodes" in r.path] == [("GET", "/api/v1/nodes")]
    assert state_file.read_text() == before
    (tags,) = result.pool_tags
    assert tags["remove"] == [key] and tags["set"] == {}
    # in sync already: nothing to write
    result = run_event(TICK, settings, inventory=lookup(), executor=executor, kube=api)
    assert result.pool_tags[0]["remove"] == [] and result.pool_tags[0]["set"] == {}


def test_a_node_the_autoscaler_brought_gets_the_new_node_layout(pool):
    """The tags promised the autoscaler a node with the missing profiles: the node it brings (no state label,
    MIG off) gets that layout on the next tick, MIG turned on, while the pool's other node changes per GPU."""
    server, api, settings, executor, state_file = pool
    server.add_node("gpu-new", labels={"alibabacloud.com/nodepool-id": POOL,
                                       "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                                       "aliyun.accelerator/nvidia_count": "1"})
    fresh = state_file.parent / ("%s.json" % FRESH)
    fresh.write_text(json.dumps(driver.new_state(MODEL.key, 1)))  # MIG off, as a new node boots
    for i in range(4):
        waiting(server, "big-%d" % i, "3g.40gb")
    result = run_event(TICK, settings, inventory=lookup(fresh=True), executor=executor, kube=api)
    assert result.outcome == "done", result.reason
    assert sorted(n["outcome"] for n in result.nodes) == ["partitioned", "partitioned"], result.nodes
    assert held(state_file) == [("3g.40gb", 0), ("3g.40gb", 4)]
    assert json.loads(fresh.read_text())["gpus"][0]["mig_current"] == 1 and held(fresh) == [("3g.40gb", 0),
                                                                                           ("3g.40gb", 4)]
    assert not any("eviction" in r.path for r in server.requests)


def test_a_node_the_autoscaler_brought_stays_whole_while_pods_asking_whole_gpus_wait(pool):
    """The same fresh node, but a pod asking nvidia.com/gpu waits beside the MIG pods: the plan counts the
    fresh node's GPU (MIG off) for it, so turning MIG on there would take the GPU it counted away. The node is
    left whole; the MIG pods it cannot serve stay in the tags for another node."""
    server, api, settings, executor, state_file = pool
    server.add_node("gpu-new", labels={"alibabacloud.com/nodepool-id": POOL,
                                       "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                                       "aliyun.accelerator/nvidia_count": "1"})
    fresh = state_file.parent / ("%s.json" % FRESH)
    fresh.write_text(json.dumps(driver.new_state(MODEL.key, 1)))
    for i in range(4):
        waiting(server, "big-%d" % i, "3g.40gb")
    whole = server.add_pod("llm", "train", "", phase="Pending", owner_kind="Job", resources={"nvidia.com/gpu": "1"})
    with server.lock:
        whole["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    result = run_event(TICK, settings, inventory=lookup(fresh=True), executor=executor, kube=api)
    assert result.outcome == "done", result.reason
    assert json.loads(fresh.read_text())["gpus"][0]["mig_current"] == 0  # whole, for the train pod
    assert [n["node_name"] for n in result.nodes] == ["gpu-a"], result.nodes
    key = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-3g.40gb"
    assert key in result.pool_tags[0]["set"]  # the two 3g.40gb gpu-a cannot hold: a node, in the tags


def test_an_api_server_that_does_not_answer_ends_the_tick_for_a_retry(pool):
    server, api, settings, executor, state_file = pool
    waiting(server, "small-0", "1g.10gb")
    server.fail = {"GET": 403}
    before = state_file.read_text()
    result = run_event(TICK, settings, inventory=lookup(), executor=executor, kube=api)
    assert result.outcome == "retry" and "Kubernetes API could not be read" in result.reason
    assert state_file.read_text() == before
