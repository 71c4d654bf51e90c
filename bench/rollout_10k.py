"""A timer event over 10,000 nodes: the function's peak memory and its Kubernetes requests.

Three processes, so each number is one process's own:

* the **API server**: the test API server (``tests/support/kubeapi.py``: TLS, paging, resourceVersions,
  evictions) in its own process, holding 10,000 realistic Nodes of ~17 KB each on the wire (managedFields,
  50 images, conditions, addresses, nodeInfo, ~30 labels), in 10 pools of 1,000. It plays the device
  plugin too: a node whose labels say ``success`` publishes the layout's ``nvidia.com/mig-*`` resources.
* the **function**: ``functions.pipeline.event.run_event`` on the FC timer event, the ACK side from a snapshot
  (``--inventory``: 10 pools, 10,000 nodes), the Kubernetes side through a kubeconfig
  (``ACK_MIG_KUBECONFIG``, what ``--kubeconfig`` sets) to that server. Nine pools are in layout; one pool's
  label changed, so its first node is cordoned, drained (one GPU pod evicted), applied (a transport that
  labels the node over the API, as node_bootstrap does), waits for its capacity and is uncordoned; its
  other 999 nodes are deferred. Reported: ``rollout_10k_rss_mb`` (peak RSS, ``VmHWM``; FC gives the
  function 512 MB, target <= 192) and ``rollout_10k_kube_requests``.
* ``ack-mig-hook status --inventory ... --kubeconfig ...`` over the same cluster:
  ``rollout_10k_status_rss_mb`` (target <= 256).

    python bench/rollout_10k.py [NODES]
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import _path  # noqa: F401

from tests.support.peak_rss import peak_rss_mb  # noqa: E402  (the child's own peak, not its parent's)

CLUSTER = "c0be4c10000000000000000000000000a"  # ACK's form: c and 32 hex digits (the CLI checks it)
POOLS = 10
NEW, OLD = "3g.20gb-3g.20gb", "1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb"
TYPE = "ecs.ebmgn7.26xlarge"


def _pool(n: int) -> str:
    return "np-bench%02d" % n


def _name(i: int) -> str:
    return "cn-beijing.10.%d.%d.%d" % (i // 62500, i // 250 % 250, i % 250 + 1)


def _capacity(sequence: str) -> dict:
    out = {"cpu": "104", "memory": "789982364Ki", "pods": "64", "ephemeral-storage": "3091234324Ki",
           "hugepages-1Gi": "0", "hugepages-2Mi": "0", "nvidia.com/gpu": "0"}
    for profile in sequence.split("-"):
        key = "nvidia.com/mig-%s" % profile
        out[key] = str(int(out.get(key, "0")) + 8)
    return out


def _shared_parts() -> dict:
    """What every node repeats (the server keeps one object of each; the wire carries it per node)."""
    images = [{"names": ["registry-cn-beijing-vpc.ack.aliyuncs.com/acs/image-%02d@sha256:%064x" % (n, n * 7919),
                         "registry-cn-beijing-vpc.ack.aliyuncs.com/acs/image-%02d:v1.%d.%d-aliyun" % (n, n, n % 7)],
               "sizeBytes": 10_000_000 + n * 1_234_567} for n in range(50)]
    fields = {"f:metadata": {"f:annotations": {".": {}, "f:csi.alibabacloud.com/nodeid": {},
                                               "f:node.alpha.kubernetes.io/ttl": {}},
                             "f:labels": {".": {}, **{"f:label-%02d" % n: {} for n in range(20)}}},
              "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, 'v:"172.20.0.0/26"': {}}, "f:providerID": {}},
              "f:status": {"f:conditions": {'k:{"type":"%s"}' % t: {".": {}, "f:lastHeartbeatTime": {},
                                                                     "f:lastTransitionTime": {}, "f:message": {},
                                                                     "f:reason": {}, "f:status": {}, "f:type": {}}
                                            for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")}}}
    managed = [{"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-11-29T01:31:42Z",
                "fieldsType": "FieldsV1", "fieldsV1": fields} for manager in ("kubelet", "kube-controller-manager",
                                                                                "node-problem-detector")]
    conditions = [{"type": t, "status": "False", "lastHeartbeatTime": "2026-11-29T01:31:42Z",
                   "lastTransitionTime": "2026-11-20T08:00:00Z", "reason": "Kubelet" + t.replace(" ", ""),
                   "message": "kubelet has no %s" % t.lower()} for t in ("MemoryPressure", "DiskPressure",
                                                                        "PIDPressure")]
    conditions.append({"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-29T01:31:42Z",
                       "lastTransitionTime": "2026-11-20T08:00:00Z", "reason": "KubeletReady",
                       "message": "kubelet is posting ready status"})
    return {"images": images, "managedFields": managed, "conditions": conditions}


def _node(i: int, pool: int, shared: dict) -> dict:
    name = _name(i)
    sequence = OLD if pool == 0 else NEW
    labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
              "beta.kubernetes.io/instance-type": TYPE, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
              "kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": TYPE,
              "topology.kubernetes.io/region": "cn-beijing", "topology.kubernetes.io/zone": "cn-beijing-i",
              "failure-domain.beta.kubernetes.io/region": "cn-beijing",
              "failure-domain.beta.kubernetes.io/zone": "cn-beijing-i", "ack.aliyun.com": CLUSTER,
              "alibabacloud.com/nodepool-id": _pool(pool), "node.csi.alibabacloud.com/disktype.cloud_essd": "available",
              "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB", "aliyun.accelerator/nvidia_count": "8",
              "aliyun.accelerator/nvidia_mem": "40960MiB", "aliyun.accelerator/nvidia_driver": "550.127.08",
              "nvidia.com/mig.config.state": "success", "aliyun.accelerator/nvidia_mig_sequence": sequence,
              "alibabacloud.com/instance-id": "i-bench%05d" % i, "node.kubernetes.io/exclude-from-external-load-"
              "balancers": "true"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "6f1c%028x" % i, "creationTimestamp": "2026-11-20T08:00:00Z",
                         "labels": labels, "managedFields": shared["managedFields"],
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                         "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                                         "csi.alibabacloud.com/nodeid": json.dumps({"diskplugin.csi.alibabacloud"
                                                                                     ".com": "i-bench%05d" % i})}},
            "spec": {"podCIDR": "172.20.%d.0/26" % (i % 250), "podCIDRs": ["172.20.%d.0/26" % (i % 250)],
                     "providerID": "cn-beijing.i-bench%05d" % i},
            "status": {"capacity": _capacity(sequence), "allocatable": _capacity(sequence),
                       "conditions": shared["conditions"], "images": shared["images"],
                       "addresses": [{"type": "InternalIP", "address": "10.%d.%d.%d" % (i // 62500, i // 250 % 250,
                                                                                        i % 250 + 1)},
                                     {"type": "Hostname", "address": name}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                       "nodeInfo": {"machineID": "%032x" % i, "systemUUID": "%032x" % (i * 31), "bootID": "%032x" % i,
                                    "kernelVersion": "5.10.134-16.3.al8.x86_64", "osImage": "Alibaba Cloud Linux 3",
                                    "containerRuntimeVersion": "containerd://1.6.28",
                                    "kubeletVersion": "v1.30.1-aliyun",
                                    "kubeProxyVersion": "v1.30.1-aliyun", "operatingSystem": "linux",
                                    "architecture": "amd64"}}}


def inventory(nodes: int) -> dict:
    per = nodes // POOLS
    labels = [{"key": "ack.aliyun.com/gpu-partition-sequence", "value": NEW}]
    return {"cluster_id": CLUSTER,
            "nodepools": [{"nodepool_info": {"nodepool_id": _pool(p), "name": "gpu-%d" % p},
                           "kubernetes_config": {"labels": labels},
                           "scaling_group": {"scaling_group_id": "asg-bench%02d" % p, "instance_types": [TYPE]}}
                          for p in range(POOLS)],
            "nodes": [{"instance_id": "i-bench%05d" % i, "node_name": _name(i), "instance_type": TYPE,
                       "nodepool_id": _pool(i // per), "state": "running", "node_status": "Ready",
                       "ip_address": ["10.%d.%d.%d" % (i // 62500, i // 250 % 250, i % 250 + 1)]}
                      for i in range(nodes)]}


def _serve(workdir: str, nodes: int) -> None:
    """The API server process: builds the cluster, writes the kubeconfig, serves until stdin closes."""
    from tests.support.kubeapi import kube_api_server

    shared = _shared_parts()
    per = nodes // POOLS
    with kube_api_server(workdir=workdir) as api:
        for i in range(nodes):
            api.put_node(_node(i, i // per, shared))
        api.add_pod("team", "train-0", _name(0), gpus=1, owner_kind="ReplicaSet")

        def device_plugin(name, node):  # the node's labels say its new layout is in: publish it
            labels = node["metadata"].get("labels") or {}
            sequence = labels.get("aliyun.accelerator/nvidia_mig_sequence")
            if labels.get("nvidia.com/mig.config.state") == "success" and sequence and \
                    node["status"]["allocatable"] != _capacity(sequence):
                api.set_capacity(name, _capacity(sequence))

        api.on_node_patch = device_plugin
        config = api.write_kubeconfig(os.path.join(workdir, "admin.conf"), cert=api.admin_cert(), user="admin")
        size = len(json.dumps(api.nodes[_name(1)]))
        print(json.dumps({"kubeconfig": config, "node_bytes": size}), flush=True)
        sys.stdin.read()  # until the parent closes it


class _LabellingTransport:
    """Plays node_bootstrap on each target: writes the node's labels over the API, as the node does."""

    name = "bench"

    def __init__(self, kubeconfig: str) -> None:
        from functions.kube.client import KubeApi

        self.kube = KubeApi.from_file(kubeconfig)
        self.kube.bench_node = True  # the node's own requests: not counted as the function's

    def run(self, targets):
        from functions.delivery.outcome import NodeResult

        out = []
        for t in targets:
            self.kube.patch_node(t.node_name, {"metadata": {"labels": {"nvidia.com/mig.config.state": "success",
                                                                       "aliyun.accelerator/nvidia_mig_sequence": NEW}}})
            out.append(NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 16,
                                                                "sequence": NEW, "gpus": []}))
        return out


def _function(inventory_path: str, kubeconfig: str) -> dict:
    """The function's side, in its own process: one timer event."""
    from functions.kube import client as kubeapi
    from functions.cloud.cluster import InventoryLookup
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.base.logs import JsonLogger
    from functions.pipeline.event import run_event
    from functions.base.settings import load_settings

    counted = {"requests": 0}
    once = kubeapi.KubeApi._once

    def counting(self, *args, **kwargs):  # every HTTP request the function's client sends
        if not getattr(self, "bench_node", False):
            counted["requests"] += 1
        return once(self, *args, **kwargs)

    kubeapi.KubeApi._once = counting
    settings = load_settings({"ACK_MIG_CLUSTER_ID": CLUSTER, "ACK_MIG_KUBECONFIG": kubeconfig,
                              "ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_LOG_LEVEL": "ERROR"})
    executor = DeliveryExecutor.from_settings(settings, transport=_LabellingTransport(kubeconfig))
    with open(os.path.join(_path.ROOT, "tests", "events", "fc_timer.json"), "rb") as fh:
        event = fh.read()
    started = time.perf_counter()
    result = run_event(event, settings, inventory=InventoryLookup.from_file(inventory_path), executor=executor,
                       logger=JsonLogger("OFF"))
    counts: dict = {}
    for d in result.decisions:
        counts[d.action] = counts.get(d.action, 0) + 1
    return {"wall_s": time.perf_counter() - started, "outcome": result.outcome, "decisions": counts,
            "nodes": {o: sum(1 for n in result.nodes if n.get("outcome") == o)
                      for o in sorted({n.get("outcome") for n in result.nodes})},
            "requests": counted["requests"], "rss_mb": peak_rss_mb()}


def _status(inventory_path: str, kubeconfig: str) -> dict:
    import contextlib
    import io

    from functions.commands.main import main

    os.environ.update(ACK_MIG_CLUSTER_ID=CLUSTER, ACK_MIG_LOG_LEVEL="ERROR")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["status", "--inventory", inventory_path, "--kubeconfig", kubeconfig, "--json"])
    if not out.getvalue().strip():  # the command refused: say why rather than fail on empty JSON
        raise SystemExit("status exited %s: %s" % (code, err.getvalue().strip()[-300:]))
    pools = json.loads(out.getvalue())["pools"]
    return {"code": code, "in_layout": sum(p["in_layout"] for p in pools),
            "rss_mb": peak_rss_mb()}


def _child(kind: str, *args: str) -> dict:
    return _path.run_child(__file__, kind, *args)


def measure(nodes: int = 10_000) -> dict:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)  # loopback only
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
        inventory_path = os.path.join(tmp, "inventory.json")
        with open(inventory_path, "w") as fh:
            json.dump(inventory(nodes), fh)
        server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", tmp, str(nodes)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            ready = json.loads(server.stdout.readline())
            run = _child("--function", inventory_path, ready["kubeconfig"])
            status = _child("--status", inventory_path, ready["kubeconfig"])
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            return {"rollout_10k_rss_mb": None, "rollout_10k_error": str(exc)[:300]}
        finally:
            server.stdin.close()
            server.wait(60)
    return {
        "rollout_10k_rss_mb": round(run["rss_mb"], 1),
        "rollout_10k_kube_requests": run["requests"],
        "rollout_10k_status_rss_mb": round(status["rss_mb"], 1),
        "rollout_10k_wall_s": round(run["wall_s"], 2),
        "rollout_10k_run": {"outcome": run["outcome"], "decisions": run["decisions"], "nodes": run["nodes"]},
        "rollout_10k_settings": {"nodes": nodes, "pools": POOLS, "node_bytes_on_the_wire": ready["node_bytes"],
                                 "page": 500, "status_in_layout": status["in_layout"]},
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["--function"]:
        print(json.dumps(_function(sys.argv[2], sys.argv[3])))
    elif sys.argv[1:2] == ["--status"]:
        print(json.dumps(_status(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000), indent=2))
