"""The rollout end to end (functions.pipeline.event.run_event) against a world of tests/kube_real/worlds.py:
a pool of running A100 nodes of its own (its own pool id and node names: the real server is shared by the
tests of a worker), a transport that plays each node's apply (the node's own label patch and the device
plugin's new capacity, as tests/rollout/conftest.py's PlayedNodes does), and the rollout's clock and sleep
on test time. Each sleep of the rollout (its drain and capacity polls) lets the world's other parties act:
the kubelets end the evicted pods and each ReplicaSet replaces them on a node outside the pool
(:meth:`Harness.between_polls`), which is what lets a budget allow the next eviction."""

import base64
import json
from typing import Any, Callable, Dict, List, Optional

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.cloud.cluster import InventoryLookup
from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.outcome import NodeResult
from functions.pipeline.event import run_event
from tests.rollout.conftest import NEW, OLD, capacity

STATE, SEQUENCE = "nvidia.com/mig.config.state", "aliyun.accelerator/nvidia_mig_sequence"
POOL_LABEL = "alibabacloud.com/nodepool-id"
START = 1000.0  # the harness's test time when it starts (functions.rollout.run.clock)


def node_labels(pool: str, sequence: str = OLD) -> Dict[str, str]:
    return {"aliyun.accelerator/nvidia_count": "8", POOL_LABEL: pool, STATE: "success", SEQUENCE: sequence}


def instance_id(name: str) -> str:
    """An ECS-shaped instance id for a node name (i- and letters and digits): events may name it."""
    return "i-" + name.replace("-", "")


def snapshot(cluster: str, pool: str, names: List[str], value: str = NEW, pool_labels: Optional[dict] = None) -> dict:
    labels = [{"key": "ack.aliyun.com/gpu-partition-sequence", "value": value}]
    labels += [{"key": k, "value": v} for k, v in (pool_labels or {}).items()]
    return {"cluster_id": cluster,
            "nodepools": [{"nodepool_info": {"nodepool_id": pool, "name": "gpu"},
                           "kubernetes_config": {"labels": labels},
                           "scaling_group": {"scaling_group_id": "asg-" + pool,
                                             "instance_types": ["ecs.ebmgn7.26xlarge"]}}],
            "nodes": [{"instance_id": instance_id(n), "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge",
                       "nodepool_id": pool, "state": "running", "ip_address": ["10.0.%d.%d" % (i // 250, i % 250 + 1)]}
                      for i, n in enumerate(names)]}


class PlayedNodes:
    """The Transport: each node 'applies' by writing its own MIG labels and the device plugin's capacity."""

    name = "played"

    def __init__(self, world: Any) -> None:
        self.world, self.seen = world, []  # type: Any, List[str]
        self.gone = set()  # nodes whose Node object was deleted (their instance still runs)
        self.on_apply = None  # type: Optional[Callable[[str], None]]

    def run(self, targets: List[Any]) -> List[NodeResult]:
        out = []
        for t in targets:
            self.seen.append(t.node_name)
            if self.on_apply is not None:
                self.on_apply(t.node_name)
            sequence = json.loads(base64.b64decode(t.args[-1]))["partition"]["value"]
            if t.node_name in self.gone:  # the GPUs are partitioned; there is no Node object to label
                out.append(NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 16,
                                                                   "sequence": sequence, "gpus": []}))
                continue
            self.world.label_node(t.node_name, {STATE: "success", SEQUENCE: sequence})
            self.world.set_capacity(t.node_name, capacity(sequence))
            out.append(NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 16,
                                                               "sequence": sequence, "gpus": []}))
        return out


class OnTestTime:
    """A client of the world's API server whose clock (``server_time``, the rollout's: functions.rollout.run
    .cluster_clock) runs on with the harness's sleeps. The real kube-apiserver's Date is real time, which the
    harness's sleeps do not move: without this a rollout's drain and capacity waits and its records' times
    ran on the few real seconds a test takes (a wave of many polls took no time at all). The invocation's own
    deadline is on functions.rollout.run.clock, which the harness drives itself. Everything else is the
    client's own."""

    def __init__(self, kube: Any, harness: "Harness") -> None:
        self.kube, self.harness = kube, harness

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)

    def server_time(self) -> Optional[float]:
        real = self.kube.server_time()
        return None if real is None else real + self.harness.slept()


class Harness:
    def __init__(self, world: Any, monkeypatch: Any, count: int) -> None:
        from functions.rollout import run as rollout

        self.world = world
        self.cluster = world.unique("c")
        self.pool = world.unique("np")
        self.names = sorted(world.unique("gpu") for _ in range(count))
        self.ns = world.namespace()
        self.spare = world.unique("spare")  # outside the pool: where ReplicaSets put replacement pods
        world.add_node(self.spare, labels={"pool": "spare"}, capacity={"nvidia.com/gpu": "64"})
        for name in self.names:
            world.add_node(name, labels=node_labels(self.pool), capacity=capacity(OLD))
        self.transport = PlayedNodes(world)
        self.now = [START]
        self.sleeps = 0
        self.on_sleep = None  # type: Optional[Callable[[int], None]]
        self.before_kubelets = None  # type: Optional[Callable[[], None]]  (sees the pods still terminating)
        self.replaced = 0
        self.owners = {}  # type: Dict[str, str]  pod name -> its ReplicaSet (replacements inherit it)
        self.env = {"ACK_MIG_STARTUP_TAINT": "none"}
        monkeypatch.setattr(rollout, "clock", lambda: self.now[0])
        monkeypatch.setattr(rollout, "sleep", self._sleep)

    def add_pods(self, owner: str, per_node: int = 1, labels: Optional[dict] = None, gpus: int = 1,
                 nodes: Optional[List[str]] = None) -> List[str]:
        made = []
        for node in nodes or self.names:
            for i in range(per_node):
                name = "%s-%s-%d" % (owner, node, i)
                self.world.add_pod(self.ns, name, node, labels=labels or {"app": owner}, gpus=gpus, owner_name=owner)
                self.owners[name] = owner
                made.append(name)
        return made

    def slept(self) -> float:
        """The test time the rollout's sleeps have passed (its clock runs on by as much: OnTestTime)."""
        return self.now[0] - START

    def _sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now[0] += seconds
        if self.before_kubelets is not None:
            self.before_kubelets()
        self.between_polls()
        if self.on_sleep is not None:
            self.on_sleep(self.sleeps)

    def between_polls(self) -> None:
        """The kubelets end what was evicted; each pod's ReplicaSet starts a replacement on the spare node."""
        for ended in self.world.kubelets(self.ns):
            name = ended.split("/", 1)[1]
            owner = self.owners.get(name)
            if owner is None:
                continue
            self.replaced += 1
            new = "%s-new-%d" % (owner, self.replaced)
            self.world.add_pod(self.ns, new, self.spare, labels={"app": owner}, gpus=1, owner_name=owner,
                               replacement=True)
            self.owners[new] = owner
        self.world.settle()

    def run(self, kube: Any = None, pool_labels: Optional[dict] = None, names: Optional[List[str]] = None,
            **env: str) -> Any:
        """The timer's event (every node of the pool), or a manual run naming ``names``."""
        settings = load_settings(dict(self.env, **env))
        executor = DeliveryExecutor.from_settings(settings, transport=self.transport)
        lookup = InventoryLookup.from_dict(snapshot(self.cluster, self.pool, self.names, pool_labels=pool_labels))
        event = {"cluster_id": self.cluster}
        if names is not None:
            event.update(nodepool_id=self.pool, instance_ids=[instance_id(n) for n in names])
        return run_event(json.dumps(event), settings, inventory=lookup, executor=executor,
                         logger=JsonLogger("OFF"),
                         kube=OnTestTime(kube if kube is not None else self.world.client(), self))

    def annotation(self, name: str) -> Optional[dict]:
        text = (self.world.node(name)["metadata"].get("annotations") or {}).get("ack-mig-hook/rollout")
        return json.loads(text) if text else None

    def gpu_pods_on(self, name: str) -> List[str]:
        return sorted(n for n, p in self.world.pods(self.ns).items() if p["spec"].get("nodeName") == name)
