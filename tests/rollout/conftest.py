"""A labelled pool of running A100 nodes, the local TLS Kubernetes API holding their Node objects and
pods, and a transport that plays each node: it answers like node_bootstrap apply and, as the node's
labeller and the device plugin would, writes the node's labels and publishes the new MIG capacity."""

import json

import pytest

from functions.cloud.cluster import InventoryLookup
from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.outcome import NodeResult
from functions.kube.client import KubeApi
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from node_bootstrap.kube import load_kubeconfig
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

CLUSTER = "c-rollout"
POOL = "np-mig"
OLD, NEW = "1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb", "3g.20gb-3g.20gb"
NAMES = ["node-a", "node-b", "node-c"]
TIMER = json.dumps({"cluster_id": CLUSTER})  # the manual payload: every labelled pool, as the timer does


def instance_id(name):
    return "i-%s" % name


def snapshot(value=NEW, pool_labels=None, names=NAMES, kube_nodes=None, ids=instance_id):
    labels = [{"key": "ack.aliyun.com/gpu-partition-sequence", "value": value}] if value is not None else []
    labels += [{"key": k, "value": v} for k, v in (pool_labels or {}).items()]
    data = {"cluster_id": CLUSTER,
            "nodepools": [{"nodepool_info": {"nodepool_id": POOL, "name": "gpu"},
                           "kubernetes_config": {"labels": labels},
                           "scaling_group": {"scaling_group_id": "asg-1", "instance_types": ["ecs.ebmgn7.26xlarge"]}}],
            "nodes": [{"instance_id": ids(n), "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge",
                       "nodepool_id": POOL, "state": "running", "ip_address": ["10.0.0.%d" % i]}
                      for i, n in enumerate(names, 1)]}
    if kube_nodes is not None:
        data["kube_nodes"] = kube_nodes
    return data


def capacity(sequence):
    out = {"nvidia.com/gpu": "0"}
    for name in sequence.split("-"):
        key = "nvidia.com/mig-%s" % name
        out[key] = str(int(out.get(key, "0")) + 8)
    return out


def node_labels(sequence=OLD, state="success", pool=POOL):
    labels = {"aliyun.accelerator/nvidia_count": "8", "alibabacloud.com/nodepool-id": pool}
    if state:
        labels["nvidia.com/mig.config.state"] = state
    if sequence:
        labels["aliyun.accelerator/nvidia_mig_sequence"] = sequence
    return labels


class PlayedNodes:
    """The Transport: each target 'applies' by labelling its Node and publishing capacity, like
    node_bootstrap and the device plugin on a real node. ``fail`` names nodes that answer gpu-busy."""

    name = "played"

    def __init__(self, api):
        self.api, self.seen, self.fail = api, [], set()
        self.requests = []  # (node name, the request document node_bootstrap apply got)

    def run(self, targets):
        out = []
        for t in targets:
            self.seen.append(t.node_name)
            if t.args[-1] != "disable":
                self.requests.append((t.node_name, json.loads(__import__("base64").b64decode(t.args[-1]))))
            if t.node_name in self.fail:
                out.append(NodeResult(t.instance_id, self.name, 4, {"outcome": "failed", "error": {
                    "code": "gpu-busy", "message": "GPU 0 is used by pid 4242"}}))
                continue
            if t.args[-1] == "disable":  # node_bootstrap disable: MIG off, its labels cleared, whole GPUs back
                self.api.label_node(t.node_name, {"nvidia.com/mig.config.state": None,
                                                  "aliyun.accelerator/nvidia_mig_sequence": None})
                self.api.set_capacity(t.node_name, {"nvidia.com/gpu": "8"})
                out.append(NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 9, "gpus": []}))
                continue
            request = json.loads(__import__("base64").b64decode(t.args[-1]))
            sequence = request["partition"]["value"]
            self.api.label_node(t.node_name, node_labels(sequence))  # the node's own label patch
            self.api.set_capacity(t.node_name, capacity(sequence))
            out.append(NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 16,
                                                               "sequence": sequence, "gpus": []}))
        return out


class Cluster:
    def __init__(self, api, tmp_path):
        self.api = api
        # The function's own identity, held to deploy/rbac.yaml as a real cluster holds it: a call the product
        # makes outside its RBAC is 403 here too.
        self.config = load_kubeconfig(api.function_kubeconfig(tmp_path / "function.conf"))
        self.retry_sleeps = []  # the client's own backoff, apart from the rollout's polling
        self.now = [1000.0]
        api.clock = self.clock  # the cluster's clock (its answers' Date) runs with the test's time
        # Pages of 2: every listing of the 3-node pool takes two pages (a list read only to its first page
        # would leave node-c out of every test here).
        self.kube = self.client()
        self.transport = PlayedNodes(api)
        self.sleeps = []
        self.on_sleep = None
        self.settings_env = {"ACK_MIG_STARTUP_TAINT": "none"}

    def client(self, **options):
        # The client's clock is the test's too: the rollout runs on the API server's time (its last answer's Date
        # plus the client's time since), which then moves only with the test's, to the second.
        options.setdefault("clock", self.clock)
        return KubeApi(self.config, page=2, sleep=self.retry_sleeps.append, **options)

    def add_nodes(self, names=NAMES, sequence=OLD, state="success", unschedulable=(), taints=None):
        for n in names:
            self.api.add_node(n, labels=node_labels(sequence, state), capacity=capacity(sequence) if sequence else {},
                              unschedulable=n in unschedulable, taints=taints)

    def clock(self):
        return self.now[0]

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now[0] += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))

    def run(self, inventory=None, dry_run=False, kube=None, event=None, lookup=None, request_id=None,
            log_level="OFF", **env):
        # ``request_id``: the invocation's, as FC gives each one (an event without an id, the timer's, is known by it)
        settings = load_settings(dict(self.settings_env, **env))
        executor = DeliveryExecutor.from_settings(settings, transport=self.transport)
        lookup = lookup or InventoryLookup.from_dict(inventory or snapshot())
        logger = JsonLogger(log_level, request_id=request_id) if request_id else JsonLogger(log_level)
        return run_event(event or TIMER, settings, inventory=lookup, executor=executor, dry_run=dry_run,
                         logger=logger, kube=kube or self.kube)

    def annotation(self, name):
        text = self.api.nodes[name]["metadata"].get("annotations", {}).get("ack-mig-hook/rollout")
        return json.loads(text) if text else None

    def unschedulable(self, name):
        return bool(self.api.nodes[name].get("spec", {}).get("unschedulable"))

    def events(self, reason=None):
        return [e for e in self.api.events.values() if reason is None or e["reason"] == reason]


@pytest.fixture
def cluster(kube_api, tmp_path, monkeypatch):  # noqa: F811
    from functions.rollout import run as rollout

    c = Cluster(kube_api, tmp_path)
    monkeypatch.setattr(rollout, "clock", c.clock)  # the rollout runs on the test's time
    monkeypatch.setattr(rollout, "sleep", c.sleep)
    return c
