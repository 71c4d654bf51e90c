"""The auto pool's timer on the local TLS API server with running pods whose instances the nodes reported
(issue 35, item 1): the per-GPU request a node gets never frees an instance a running pod holds; a node that
reported nothing gets only changes that are safe under every assignment its pods could have."""

import json

import pytest

from tests.rollout.conftest import POOL
from tests.rollout.test_auto_rollout import PerGpuNodes, inventory, tick, waiting

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

LAYOUTS = json.dumps({"0": [["3g.20gb", 0], ["3g.20gb", 4]]})


def auto_node(api, name, holders=None):
    annotations = {"ack-mig-hook/gpu-layouts": LAYOUTS}
    if holders is not None:
        annotations["ack-mig-hook/gpu-holders"] = json.dumps(holders)
    api.add_node(name, labels={"alibabacloud.com/nodepool-id": POOL, "nvidia.com/mig.config.state": "success",
                               "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB",
                               "aliyun.accelerator/nvidia_count": "1"},
                 annotations=annotations, capacity={"nvidia.com/mig-3g.20gb": "2"})
    # its pod loads a model (no process yet); kubelet gave it the 3g.20gb at 4, the node said so
    api.add_pod("llm", "serve-%s" % name, name, owner_kind="ReplicaSet", resources={"nvidia.com/mig-3g.20gb": "1"})


def layouts_sent(transport):
    return dict((name, [(i["profile"], i["start"]) for i in req["gpus"][0]["layout"]])
                for name, req in transport.requests)


def test_reported_holders_keep_the_pods_instance_and_free_the_idle_one(cluster):
    api = cluster.api
    auto_node(api, "auto-a", {"at": "2026-12-06T10:00:00Z", "pods": ["pod-uid-serve-auto-a"],
                              "gpus": {"0": [["3g.20gb", 0, None], ["3g.20gb", 4, "pod-uid-serve-auto-a"]]}})
    waiting(api, 2, "2g.10gb")
    transport = PerGpuNodes(api)
    tick(cluster, transport, lookup=inventory(names=["auto-a"]))
    # the first-instance guess called the one at 4 idle and sent [3g.20gb@0, 2g.10gb@4]
    assert layouts_sent(transport) == {"auto-a": [("2g.10gb", 0), ("2g.10gb", 2), ("3g.20gb", 4)]}


def test_a_node_that_reported_nothing_loses_no_instance_a_pod_could_hold(cluster):
    api = cluster.api
    auto_node(api, "auto-a")
    waiting(api, 2, "2g.10gb")
    transport = PerGpuNodes(api)
    tick(cluster, transport, lookup=inventory(names=["auto-a"]))
    for layout in layouts_sent(transport).values():  # no change at all, or one that keeps both
        assert ("3g.20gb", 0) in layout and ("3g.20gb", 4) in layout
