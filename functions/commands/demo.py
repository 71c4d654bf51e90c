"""``ack-mig-hook demo [--json]``: the bundled example, end to end, on simulated nodes.

The example scale-out event (``examples/event.json``) and cluster snapshot (``examples/inventory.json``)
go through the real handler path (``functions.pipeline.event.run_event``: intake, lookup, decisions) into the
delivery executor with the local transport: the node bundle is built, unpacked into a temporary node
directory by the same runner Cloud Assistant and SSH use, and ``node_bootstrap`` partitions simulated
8-GPU nodes (the simulated NVML driver, one state file per node). Then the same event runs again, as a
duplicate delivery would, and every node comes back ``unchanged`` with nothing sent twice. Last, a
dry-run reconcile of every labelled pool shows the other decisions: a passthrough pool skipped with the
guide's reason and a pool whose label is refused with the parser's message.

Then a label change rolled across a running pool (``examples/inventory-rollout.json``: three A100 nodes
partitioned 7 x 1g.5gb, the pool's label now 3g.20gb-3g.20gb): the Kubernetes side is held in memory
(``functions.kube.nodes.MemoryKube``, the same eviction rule as the API server), the nodes are the same
simulated ones, and a stand-in for the device plugin publishes each node's new ``nvidia.com/mig-*``
capacity from the node's own result. The invocation has two hours (``ACK_MIG_INVOCATION_TIMEOUT_S``): its
first wave takes one node (max-unavailable 1) and skips the one already right, its drain waits on a
PodDisruptionBudget until the workload's replacement runs elsewhere, and the next wave of the same
invocation takes the other node; a second invocation finds all done.

Then a label change that only adds instances (``examples/inventory-additive.json``: three A100 nodes
partitioned 3g.20gb, now 3g.20gb-2g.10gb-1g.5gb): one invocation repartitions all three at once, without
cordon or drain, each node told to destroy nothing, while their GPU pods keep running behind a
PodDisruptionBudget that would refuse any eviction. (The simulated nodes are first partitioned 3g.20gb by
the same node tool.)

Last, an autoscaling pool at zero nodes (``examples/inventory-autoscaling.json``) gets the node pool tags
that tell ACK's cluster-autoscaler its MIG resources: an ACK node pool operation
(``examples/event-nodepool-modified.json``) writes them, the ActionTrail event of that very write finds the
pool in sync and writes nothing, and a dry-run reconcile does nothing either. The snapshot stands in for
the ACK API here; its ``set_nodepool_tags`` replaces the pool's whole tag list, as ModifyClusterNodePool
does (the CS emulator of the tests models the same).
"""

import json
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import replace

from functions.base.textsafe import clip  # a line cut short ends in "...", what it opened closed
from functions.commands.shipped import EXAMPLES  # examples/, shipped with the package: the demo runs anywhere

SIM_BACKEND = "sim:A100-SXM4-40GB:8"  # ecs.ebmgn7.26xlarge: 8 x A100 SXM4 40GB


def configure(parser, command):
    parser.add_argument("--json", action="store_true",
                        help='print {"nodes": [{"instance_id", "outcome", "reason", "gpus"}]}')
    parser.add_argument("--event", default=os.path.join(EXAMPLES, "event.json"), help=argparse_suppress())
    parser.add_argument("--inventory", default=os.path.join(EXAMPLES, "inventory.json"), help=argparse_suppress())


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


def _settings(tmp):
    """Local transport, simulated 8-GPU nodes, and everything the node would touch kept inside ``tmp``:
    no node labels (no cluster), no device plugin or GPU clients to stop, its own lock and state."""
    from functions.base.settings import load_settings

    node_args = ("--backend %s --no-label --clients= --device-plugin-restart none --lock-file %s "
                 "--state-dir %s" % (SIM_BACKEND, os.path.join(tmp, "node.lock"), os.path.join(tmp, "state")))
    env = {"ACK_MIG_TRANSPORT": "local", "ACK_MIG_NODE_ARGS": node_args, "ACK_MIG_NODE_TIMEOUT_S": "120",
           "ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_LOG_LEVEL": "ERROR"}
    return load_settings(env)


def _gpu_lines(gpus):
    """Slot diagrams: GPUs with the same layout share one diagram (the node titles each "GPU <n> ...")."""
    groups = []
    for gpu in gpus or []:
        lines = (gpu.get("diagram") or "").splitlines() or ["GPU %s: no diagram" % gpu.get("index")]
        title, body = lines[0], lines[1:]
        prefix = "GPU %s " % gpu.get("index")
        title = title[len(prefix):] if title.startswith(prefix) else title
        for group in groups:
            if group[1] == title and group[2] == body:
                group[0].append(str(gpu.get("index")))
                break
        else:
            groups.append(([str(gpu.get("index"))], title, body))
    out = []
    for indexes, title, body in groups:
        which = "%s-%s" % (indexes[0], indexes[-1]) if len(indexes) > 2 else ",".join(indexes)
        out.append("  GPU %s %s" % (which, title))
        out.extend("  " + line for line in body)
    return out


def _run_once(raw, settings, inventory, executor, kube=None):
    from functions.base.logs import JsonLogger
    from functions.pipeline.event import run_event

    quiet = JsonLogger("OFF", stream=sys.stderr)
    return run_event(raw, settings, inventory=inventory, executor=executor, logger=quiet, kube=kube)


class _DevicePlugin:
    """Wraps the transport: once a node reports success, does what node_bootstrap's labeller and the
    device plugin do on a real node (the demo's node runs with --no-label): the node's labels and its
    allocatable nvidia.com/mig-<profile> resources, from the node's own result."""

    name = "local"

    def __init__(self, inner, kube, names):
        self.inner, self.kube, self.names = inner, kube, names

    def run(self, targets):
        results = self.inner.run(targets)
        for res in results:
            doc = res.result or {}
            name = self.names.get(res.instance_id)
            if doc.get("outcome") != "success" or name not in self.kube.nodes:
                continue
            allocatable = {}
            for gpu in doc.get("gpus") or []:
                for inst in gpu.get("instances") or []:
                    key = "nvidia.com/mig-%s" % inst.get("profile")
                    allocatable[key] = str(int(allocatable.get(key, "0")) + 1)
            for key in self.kube.nodes[name].get("status", {}).get("allocatable", {}):
                if key.startswith("nvidia.com/mig-") and key not in allocatable:
                    allocatable[key] = None  # the old layout's resources are gone (merge patch: null deletes)
            self.kube.patch_node(name, {"metadata": {"labels": {
                "nvidia.com/mig.config.state": "success",
                "aliyun.accelerator/nvidia_mig_sequence": str(doc.get("sequence") or "").replace("+", ".")}},
                "status": {"allocatable": allocatable}})
        return results


INVOCATION_S = "7200"  # the rollout's invocation time in the demo: several waves fit (docs/operations.md)


def _rollout(settings, tmp, transport):
    """Two invocations of a reconcile over the rollout example; returns their results."""
    from functions.rollout import run as rollout
    from functions.cloud.cluster import InventoryLookup
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.kube.nodes import MemoryKube

    lookup = InventoryLookup.from_file(os.path.join(EXAMPLES, "inventory-rollout.json"))
    kube = MemoryKube.from_snapshot(lookup.kube_nodes or {})
    first, second, right = sorted(kube.nodes)[:3]
    kube.add_pod("team", "infer-0", first, labels={"app": "infer"}, gpus=1, owner="ReplicaSet")
    kube.add_pod("kube-system", "dcgm-exporter-x1", first, gpus=1, owner="DaemonSet")  # stays
    kube.add_pdb("team", "infer", {"app": "infer"}, min_available=1)

    def replacement(namespace, name):  # the ReplicaSet's new replica starts on a schedulable node
        if ("team", "infer-1") not in kube.pods:
            kube.add_pod("team", "infer-1", right, labels={"app": "infer"}, gpus=1, owner="ReplicaSet")

    kube.on_evict_refused = replacement
    names = {n.instance_id: n.node_name for n in lookup.nodes(lookup.cluster_id)}
    executor = DeliveryExecutor.from_settings(settings, transport=_DevicePlugin(transport, kube, names))
    timed = replace(settings, rollout=replace(settings.rollout, invocation_timeout_s=int(INVOCATION_S)))
    with _fake_time():
        event = json.dumps({"cluster_id": lookup.cluster_id})
        runs = [_run_once(event, timed, lookup, executor, kube) for _ in range(2)]
    return runs, kube


@contextmanager
def _fake_time():
    """The rollout on a clock of its own: polls and waits cost no real time."""
    from functions.rollout import run as rollout

    now = [0.0]
    saved = rollout.clock, rollout.sleep
    rollout.clock, rollout.sleep = (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s))
    try:
        yield
    finally:
        rollout.clock, rollout.sleep = saved


def _additive(settings, transport):
    """One invocation over the additive example (its simulated nodes first partitioned 3g.20gb by the node
    tool); returns the result, the Kubernetes side and the pods that served throughout."""
    from functions.cloud.cluster import InventoryLookup
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.delivery.node_script import node_args
    from functions.delivery.outcome import NodeTarget
    from functions.kube.nodes import MemoryKube

    lookup = InventoryLookup.from_file(os.path.join(EXAMPLES, "inventory-additive.json"))
    nodes = lookup.nodes(lookup.cluster_id)
    extra = tuple(settings.delivery.node_args.split())
    before = [NodeTarget(n.instance_id, n.node_name, "", tuple(node_args({"kind": "sequence", "value": "3g.20gb"},
                                                                         extra))) for n in nodes]
    assert all((r.result or {}).get("outcome") == "success" for r in transport.run(before))
    kube = MemoryKube.from_snapshot(lookup.kube_nodes or {})
    for i, n in enumerate(sorted(kube.nodes)):
        kube.add_pod("team", "infer-%d" % i, n, labels={"app": "infer"}, gpus=1, owner="ReplicaSet")
    kube.add_pdb("team", "infer", {"app": "infer"}, min_available=3)  # no eviction would be allowed
    names = {n.instance_id: n.node_name for n in nodes}
    executor = DeliveryExecutor.from_settings(settings, transport=_DevicePlugin(transport, kube, names))
    with _fake_time():
        result = _run_once(json.dumps({"cluster_id": lookup.cluster_id}), settings, lookup, executor, kube)
    return result, kube


def _print_rollout(runs, kube):
    print()
    print("label change rolled across a pool (examples/inventory-rollout.json):")
    print("  pool gpu-mig-a100, 1g.5gb x 7 -> 3g.20gb-3g.20gb, max-unavailable 1, invocation time %s s"
          % INVOCATION_S)
    for number, result in enumerate(runs, 1):
        print("  invocation %d: %s" % (number, result.reason))
        for n in result.nodes or []:
            if n.get("outcome") == "skipped":
                continue
            print("    %-26s %-12s %s%s" % (n.get("node_name") or n["instance_id"], n["outcome"],
                                           "wave %d: " % n["wave"] if n.get("wave") else "", clip(n["reason"], 140)))
    drains = [e["message"] for e in kube.events if e["reason"] == "MigRolloutDrain"]
    print("  Node events: %s" % "; ".join(sorted({e["reason"] for e in kube.events})))
    for message in drains:
        print("    MigRolloutDrain: %s" % clip(message, 140))


def _print_additive(result, kube):
    print()
    print("label change that only adds instances (examples/inventory-additive.json):")
    print("  pool gpu-mig-a100-grow, 3g.20gb -> 3g.20gb-2g.10gb-1g.5gb, max-unavailable 1, no cordon, no drain")
    print("  invocation: %s" % result.reason)
    shows = set()
    for d, n in zip(result.decisions, result.nodes or []):
        first, _, rest = n["reason"].partition("; ")
        shows.add(rest)
        print("    %-26s %-12s wave %s, drain=%s, %s" % (n.get("node_name"), n["outcome"], n.get("wave"),
                                                          str(d.drain).lower(), first))
    for text in sorted(shows):
        print("    each: %s" % text)
    cordoned = sorted(n for n, node in kube.nodes.items() if (node.get("spec") or {}).get("unschedulable"))
    print("  cordoned: %s; GPU pods still running: %s" % (", ".join(cordoned) or "none", ", ".join(
        "%s/%s" % key for key in sorted(kube.pods))))
    print("  Node events: %s" % "; ".join(sorted({e["reason"] for e in kube.events})))


def _autoscaler(settings, reconcile_raw):
    """The autoscaler tags of an autoscaling pool: written once, then in sync (see the module docstring)."""
    from functions.cloud.cluster import InventoryLookup

    class WritableSnapshot(InventoryLookup):
        def set_nodepool_tags(self, cluster_id, nodepool_id, tags):
            self.writes.append({"nodepool_id": nodepool_id, "tags": [list(t) for t in tags]})
            self._pools = [p.model_copy(update={"tags": dict(tags)}) if p.nodepool_id == nodepool_id else p
                           for p in self._pools]

    lookup = WritableSnapshot.from_file(os.path.join(EXAMPLES, "inventory-autoscaling.json"))
    lookup.writes = []
    with open(os.path.join(EXAMPLES, "event-nodepool-modified.json"), "rb") as fh:
        modified = fh.read()
    runs = [("node pool operation (ModifyClusterNodePool)", _run_once(modified, settings, lookup, None)),
            ("the ActionTrail event of that write", _run_once(modified, settings, lookup, None)),
            ("dry-run reconcile", _run_once(reconcile_raw, settings, lookup, None))]
    return runs, lookup.writes


def _print_autoscaler(runs, writes):
    print()
    print("autoscaling pool at zero nodes (examples/inventory-autoscaling.json): the node pool tags ACK's "
          "cluster-autoscaler reads")
    for title, result in runs:
        for e in result.pool_tags or []:
            what = ", ".join("set %s=%s" % kv for kv in e["set"].items()) or "nothing to change"
            print("  %s: %s %s; %s" % (title, e["name"], "in sync" if e["in_sync"] else "not in sync", what))
            print("    %s" % clip(e["reason"], 170))
    print("  ModifyClusterNodePool writes: %d, %s" % (len(writes), "; ".join(
        "%s: %s" % (w["nodepool_id"], ", ".join("%s=%s" % tuple(t) for t in w["tags"])) for w in writes)))


def _private_base() -> str:
    """Where the simulated nodes' directories may live: the node runner refuses a node directory below one
    that others can write to (its StrictModes rule), so /tmp will not do. The temporary directory when its
    whole path passes that rule (TMPDIR), else the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``, its
    ``ack-mig-hook`` folder made 0700) when that does; else a usage error saying how to give one (a HOME
    under /tmp, as some CI containers set, failed deep inside the first node run)."""
    from functions.base.settings import environment
    from functions.commands.common import UsageError
    from functions.delivery.node_runner import unsafe

    def trusted(path: str) -> bool:
        real = os.path.realpath(path)
        parts = [p for p in real.split("/") if p]
        return all(not unsafe("/" + "/".join(parts[:i]), os.geteuid()) for i in range(len(parts) + 1))

    if trusted(tempfile.gettempdir()):
        return tempfile.gettempdir()
    cache = environment().get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    base = os.path.join(cache, "ack-mig-hook")
    there = base  # the deepest folder of it that exists: what is missing is made here, by this user
    while not os.path.lexists(there) and os.path.dirname(there) != there:
        there = os.path.dirname(there)
    if trusted(there):
        try:
            os.makedirs(base, mode=0o700, exist_ok=True)
        except OSError:  # a home that is not there nor can be made (Debian's nobody: /nonexistent)
            pass
        else:
            if trusted(base):  # (a umask that lets the group write the folders it made fails here)
                return base
    raise UsageError("the demo's simulated nodes need a directory no other user can write to, nor any folder "
                     "above it; the temporary directory (%s) and the cache (%s) are not: set TMPDIR to one"
                     % (clip(tempfile.gettempdir(), 120), clip(cache, 120)))


def run(args):
    from functions.delivery.node_executor import DeliveryExecutor, make_transport

    with open(args.event, "rb") as fh:
        raw = fh.read()
    with tempfile.TemporaryDirectory(prefix="ack-mig-demo-", dir=_private_base()) as tmp:
        settings = _settings(tmp)
        transport = make_transport(settings, sim_state_dir=os.path.join(tmp, "nodes"),
                                   root=os.path.join(tmp, "node-root"), python=sys.executable)
        os.makedirs(os.path.join(tmp, "nodes"))
        executor = DeliveryExecutor.from_settings(settings, transport=transport)
        first = _run_once(raw, settings, args.inventory, executor)
        again = _run_once(raw, settings, args.inventory, executor)
        with open(os.path.join(EXAMPLES, "event-reconcile.json"), "rb") as fh:
            reconcile_raw = fh.read()
        reconcile = _run_once(reconcile_raw, settings, args.inventory, executor)  # the event asks for a dry run
        runs, kube = _rollout(settings, tmp, transport)
        grown, grown_kube = _additive(settings, transport)
        tag_runs, tag_writes = _autoscaler(settings, reconcile_raw)
    nodes = first.nodes or []
    rolled = [[{"node_name": n.get("node_name"), "outcome": n["outcome"], "reason": n["reason"], "wave": n.get("wave")}
               for n in r.nodes or []] for r in runs]
    if args.json:
        print(json.dumps({"nodes": [{"instance_id": n["instance_id"], "outcome": n["outcome"],
                                     "reason": n["reason"], "gpus": n.get("gpus") or []} for n in nodes],
                          "rollout": rolled,
                          "events": [{"node": e["involvedObject"]["name"], "reason": e["reason"],
                                      "message": e["message"]} for e in kube.events],
                          "additive": {"nodes": [{"node_name": n.get("node_name"), "outcome": n["outcome"],
                                                  "reason": n["reason"], "wave": n.get("wave")}
                                                 for n in grown.nodes or []],
                                       "decisions": [d.to_json() for d in grown.decisions],
                                       "cordoned": sorted(n for n, node in grown_kube.nodes.items()
                                                          if (node.get("spec") or {}).get("unschedulable")),
                                       "pods": ["%s/%s" % key for key in sorted(grown_kube.pods)],
                                       "events": [{"node": e["involvedObject"]["name"], "reason": e["reason"]}
                                                  for e in grown_kube.events]},
                          "autoscaler": {"runs": [{"run": title, "pool_tags": r.pool_tags} for title, r in tag_runs],
                                         "writes": tag_writes}}, indent=2))
        return 0 if first.outcome == "done" else 1
    print("event %s (%s): %s, %s" % (first.event_type, first.trigger, first.outcome, first.reason))
    for d in first.decisions:
        print("  decision %-22s %-9s %s" % (d.instance_id, d.action, d.reason))
    print()
    for n in nodes:
        print("%s %s: %s (%s)" % (n["instance_id"], n.get("node_name") or "", n["outcome"], n["reason"]))
        for line in _gpu_lines(n.get("gpus")):
            print(line)
    rerun = ", ".join("%s %s" % (n["instance_id"], n["outcome"]) for n in again.nodes or [])
    print()
    print("same event again (a duplicate delivery): %s" % (rerun or again.reason))
    print()
    print("dry-run reconcile of every labelled pool (examples/event-reconcile.json): %s, %s"
          % (reconcile.outcome, reconcile.reason))
    for d in reconcile.decisions:
        print("  decision %-22s %-9s %s" % (d.instance_id, d.action, d.reason))
    _print_rollout(runs, kube)
    _print_additive(grown, grown_kube)
    _print_autoscaler(tag_runs, tag_writes)
    return 0 if first.outcome == "done" and all(n["outcome"] != "failed" for n in nodes) else 1
