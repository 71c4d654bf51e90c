"""Hostile but valid demand (issue 35): what an auto pool tick costs when the pods that wait are built to
make it slow or big. Three workloads, each the cluster of a test API server in its own process
(``tests/support/kubeapi.py``: TLS, paging, field selectors), and the function's side in a child process,
so each peak is that process's own (``VmHWM``; FC gives the function 512 MB, target <= 256 MB) and each time
is one tick (target < 5 s):

* ``multi``: 2,000 Pending pods each asking 2 to 16 instances of one A100 80GB profile (seeded), on an auto
  pool of 125 nodes x 8 GPUs (1,000 GPUs, MIG on, no instance yet: everything is to plan);
* ``affinity``: 40 Pending MIG pods with about 1 MB of required node affinity each (half one ``In`` over
  32,000 host names, half 8,000 terms), on an auto pool of 16 nodes x 8 GPUs (the pods fit none of them:
  every node is tried);
* ``cpu``: 60 Pending pods that ask for no GPU, with the same 1 MB affinity, beside one waiting MIG pod, on
  an 8-GPU auto pool.

The tick is the auto pool timer's event through ``run_event`` (a dry run: nothing is written to a node; the
Kubernetes side is read through a kubeconfig, as the function reads it).

    python bench/demand_hostile.py [multi|affinity|cpu ...]
"""

import json
import os
import random
import subprocess
import sys
import tempfile
import time

import _path  # noqa: F401

from tests.support.peak_rss import peak_rss_mb  # noqa: E402  (the child's own peak, not its parent's)

CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
POOL = "np0a1b2c3d4e5f60718293a4b5c6d7e8f9"
TYPE = "ecs.ebmgn7e.32xlarge"
PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
WORKLOADS = ("multi", "affinity", "cpu")
TAINT = {"key": "nvidia.com/gpu", "value": "mig", "effect": "NoSchedule"}
TICK = json.dumps({"triggerTime": "2026-12-04T00:00:00Z", "triggerName": "auto-pools",
                   "payload": '{"auto_pools": true}'})


def _nodes(workload: str) -> int:
    return {"multi": 125, "affinity": 16}.get(workload, 1)


def _name(i: int) -> str:
    return "gpu-%03d" % i


def inventory(workload: str) -> dict:
    return {"cluster_id": CLUSTER,
            "nodepools": [{"nodepool_info": {"nodepool_id": POOL, "name": "llm-auto"},
                           "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}],
                                                 "taints": [TAINT]},
                           "scaling_group": {"scaling_group_id": "asg-auto", "instance_types": [TYPE]}}],
            "nodes": [{"instance_id": "i-hostile%05d" % i, "node_name": _name(i), "nodepool_id": POOL,
                       "state": "running", "instance_type": TYPE, "ip_address": ["127.0.0.1"]}
                      for i in range(_nodes(workload))]}


def _affinity(terms: bool = False) -> dict:
    """About 1 MB of required node affinity: one ``In`` over 32,000 host names, or (``terms``) 8,000 terms
    of one expression each."""
    if terms:
        listed = [{"matchExpressions": [{"key": "example.com/rack", "operator": "In",
                                         "values": ["rack-%06d" % i, "row-%06d" % i]}]} for i in range(8_000)]
    else:
        listed = [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                         "values": ["host-%06d.example.internal" % i for i in range(32_000)]}]}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": listed}}}


def _serve(workdir: str, workload: str) -> None:
    """The API server process: builds the cluster, writes the kubeconfig, serves until stdin closes."""
    from tests.support.kubeapi import kube_api_server

    with kube_api_server(workdir=workdir) as api:
        labels = {"alibabacloud.com/nodepool-id": POOL, "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                  "aliyun.accelerator/nvidia_count": "8", "nvidia.com/mig.config.state": "success"}
        empty = {"ack-mig-hook/gpu-layouts": json.dumps({str(g): [] for g in range(8)})}  # what the node writes
        for i in range(_nodes(workload)):
            if workload == "multi":
                api.add_node(_name(i), labels=labels, annotations=empty, taints=[TAINT])
            else:
                api.add_node(_name(i), labels=dict(labels, **{"aliyun.accelerator/nvidia_mig_sequence": "7g.80gb"}),
                             taints=[TAINT])
        rng = random.Random(35)
        shapes = [_affinity(), _affinity(terms=True)] if workload != "multi" else None
        if workload == "multi":
            pods = [("llm", "multi-%04d" % k, {"nvidia.com/mig-" + rng.choice(PROFILES): str(rng.randint(2, 16))})
                    for k in range(2000)]
        elif workload == "affinity":
            pods = [("llm", "wide-%02d" % k, {"nvidia.com/mig-1g.10gb": "1"}) for k in range(40)]
        else:
            pods = [("batch", "cpu-%02d" % k, {"cpu": "1"}) for k in range(60)]
            pods.append(("llm", "one", {"nvidia.com/mig-1g.10gb": "1"}))
        for k, (namespace, name, resources) in enumerate(pods):
            pod = api.add_pod(namespace, name, "", phase="Pending", resources=resources)
            pod["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
            if shapes is not None and name != "one":
                pod["spec"]["affinity"] = shapes[k % 2]  # shared objects: the server writes each out per pod
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        config = api.write_kubeconfig(os.path.join(workdir, "admin.conf"), cert=api.admin_cert(), user="admin")
        size = len(json.dumps(api.pods[pods[0][:2]]))
        print(json.dumps({"kubeconfig": config, "pod_bytes": size, "pods": len(pods)}), flush=True)
        sys.stdin.read()  # until the parent closes it


def _function(inventory_path: str, kubeconfig: str) -> dict:
    """The function's side, in its own process: one auto pool tick, a dry run."""
    from functions.base.logs import JsonLogger
    from functions.base.settings import load_settings
    from functions.cloud.cluster import InventoryLookup
    from functions.pipeline.event import run_event

    settings = load_settings({"ACK_MIG_CLUSTER_ID": CLUSTER, "ACK_MIG_KUBECONFIG": kubeconfig,
                              "ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_LOG_LEVEL": "ERROR"})
    lookup = InventoryLookup.from_file(inventory_path)
    before = peak_rss_mb()
    started, cpu = time.perf_counter(), time.process_time()
    result = run_event(TICK, settings, inventory=lookup, dry_run=True, logger=JsonLogger("OFF"))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "outcome": result.outcome, "reason": result.reason[:200],
            "nodes_changed": len(result.decisions), "rss_mb": peak_rss_mb(), "rss_before_mb": before}


def _child(kind: str, *args: str) -> dict:
    return _path.run_child(__file__, kind, *args)


def one(workload: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        inventory_path = os.path.join(tmp, "inventory.json")
        with open(inventory_path, "w") as fh:
            json.dump(inventory(workload), fh)
        server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", tmp, workload],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            ready = json.loads(server.stdout.readline())
            run = _child("--function", inventory_path, ready["kubeconfig"])
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            return {"error": str(exc)[:300]}
        finally:
            server.stdin.close()
            server.wait(60)
    # tick_s: the tick's wall time (the test API server writing the pages out, in its own process, included);
    # tick_cpu_s: the function's own CPU time in it
    return {"tick_s": round(run["wall_s"], 2), "tick_cpu_s": round(run["cpu_s"], 2), "rss_mb": run["rss_mb"],
            "rss_before_tick_mb": run["rss_before_mb"],
            "outcome": run["outcome"], "reason": run["reason"], "nodes_changed": run["nodes_changed"],
            "pods": ready["pods"], "pod_bytes": ready["pod_bytes"]}


def measure(workloads=WORKLOADS) -> dict:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)  # loopback only
    runs = {w: one(w) for w in workloads}
    out = {"demand_hostile_runs": runs}
    ok = [r for r in runs.values() if "error" not in r]
    if ok and len(ok) == len(runs):
        out["demand_hostile_tick_s_max"] = max(r["tick_s"] for r in ok)
        out["demand_hostile_rss_mb_max"] = max(r["rss_mb"] for r in ok)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--function"]:
        print(json.dumps(_function(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(measure(tuple(sys.argv[1:]) or WORKLOADS), indent=2))
