"""An auto pool's per-GPU changes go through the rollout (issue 27 item 5): the claim on the node's record,
a slot of the pool's budget (the Lease every actor shares), the pause read again before the slot, Events, the
record ``status`` reads and the capacity wait; never a cordon or a drain. The auto pool timer's event runs
through ``run_event`` against the local TLS API server; the nodes are played (tests/rollout/conftest.py's
idea, for the per-GPU request: the node's own label and annotation writes and the device plugin's capacity)."""

import json

import pytest

from functions.cloud.cluster import InventoryLookup
from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.outcome import NodeResult
from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.pipeline.event import run_event
from tests.rollout.conftest import CLUSTER, POOL

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

NAMES = ["auto-a", "auto-b", "auto-c"]
TICK = json.dumps({"triggerTime": "2026-12-04T00:00:00Z", "triggerName": "auto-pools",
                   "payload": '{"auto_pools": true}'})
LEASE = ("default", "ack-mig-hook-pool-%s" % POOL)
SEVEN = json.dumps({"0": [["7g.40gb", 0]]})  # what the node said its one GPU holds: an idle 7g.40gb


def inventory(pool_labels=None, names=NAMES):
    labels = [{"key": "ack-mig-hook/layout", "value": "auto"}]
    labels += [{"key": k, "value": v} for k, v in (pool_labels or {}).items()]
    return InventoryLookup.from_dict({
        "cluster_id": CLUSTER,
        "nodepools": [{"nodepool_info": {"nodepool_id": POOL, "name": "auto"}, "kubernetes_config": {"labels": labels},
                       "scaling_group": {"scaling_group_id": "asg-1", "instance_types": ["ecs.ebmgn7.26xlarge"]}}],
        "nodes": [{"instance_id": "i-%s" % n, "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge",
                   "nodepool_id": POOL, "state": "running", "ip_address": ["10.0.1.%d" % i]}
                  for i, n in enumerate(names, 1)]})


class PerGpuNodes:
    """The Transport for version 2 (per-GPU) requests: the node's label and layouts annotation write and the
    device plugin's capacity, as node_bootstrap apply and the plugin do on a real node. ``on_apply`` sees the
    API server's state at the moment each node changes (the budget invariant is checked there)."""

    name = "played"

    def __init__(self, api, on_apply=None):
        self.api, self.on_apply, self.requests = api, on_apply, []

    def run(self, targets):
        out = []
        for t in targets:
            request = json.loads(__import__("base64").b64decode(t.args[-1]))
            self.requests.append((t.node_name, request))
            if self.on_apply is not None:
                self.on_apply(t.node_name)
            layouts = {str(g["index"]): [[i["profile"], i["start"]] for i in g["layout"]] for g in request["gpus"]}

            def change(node, layouts=layouts):
                node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
                node["metadata"]["labels"].pop("aliyun.accelerator/nvidia_mig_sequence", None)
                node["metadata"].setdefault("annotations", {})["ack-mig-hook/gpu-layouts"] = json.dumps(layouts)
                counts = {}
                for gpu in layouts.values():
                    for profile, _ in gpu:
                        counts["nvidia.com/mig-" + profile] = counts.get("nvidia.com/mig-" + profile, 0) + 1
                node["status"]["allocatable"] = {k: str(v) for k, v in counts.items()}
            self.api.update_node(t.node_name, change)
            out.append(NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 3, "gpus": []}))
        return out


def add_auto_nodes(api, names=NAMES):
    for n in names:
        api.add_node(n, labels={"alibabacloud.com/nodepool-id": POOL, "nvidia.com/mig.config.state": "success",
                                "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB",
                                "aliyun.accelerator/nvidia_count": "1"},
                     annotations={"ack-mig-hook/gpu-layouts": SEVEN}, capacity={"nvidia.com/mig-7g.40gb": "1"})


def waiting(api, count, profile="3g.20gb"):
    for i in range(count):
        pod = api.add_pod("llm", "serve-%d" % i, "", phase="Pending", owner_kind="ReplicaSet",
                          resources={"nvidia.com/mig-" + profile: "1"})
        with api.lock:
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]


def tick(cluster, transport, lookup=None, dry_run=False, **env):
    settings = load_settings(dict(cluster.settings_env, **env))
    executor = DeliveryExecutor.from_settings(settings, transport=transport)
    return run_event(TICK, settings, inventory=lookup or inventory(), executor=executor, dry_run=dry_run,
                     logger=JsonLogger("OFF"), kube=cluster.kube)


def slots(api):
    lease = api.leases.get(LEASE)
    return json.loads(lease["metadata"]["annotations"].get("ack-mig-hook/slots") or "{}") if lease else {}


def one_node(cluster, transport=None, before=None, **kwargs):
    """One auto node with an idle 7g.40gb, two 3g.20gb pods waiting, one tick: (transport, the node's result).
    ``before(api)``: a change to the cluster before the tick."""
    add_auto_nodes(cluster.api, NAMES[:1])
    if before is not None:
        before(cluster.api)
    waiting(cluster.api, 2)
    transport = transport or PerGpuNodes(cluster.api)
    (node,) = tick(cluster, transport, **kwargs).nodes
    return transport, node


def test_each_changed_node_takes_the_pools_one_slot_in_turn_and_ends_recorded(cluster):
    api = cluster.api
    add_auto_nodes(api)
    waiting(api, 6)  # two 3g.20gb per A100 40GB: all three idle GPUs are repartitioned
    seen = []

    def on_apply(name):  # at the moment a node changes: who holds the pool's slots, who is mid-change
        with api.lock:
            records = [json.loads(n["metadata"]["annotations"].get("ack-mig-hook/rollout") or "null")
                       for n in api.nodes.values()]
        seen.append((name, sorted(slots(api)), sorted(r["step"] for r in records if r and r["step"] == "applying")))

    transport = PerGpuNodes(api, on_apply)
    result = tick(cluster, transport, ACK_MIG_MAX_UNAVAILABLE="1")
    assert result.outcome == "done", result.reason
    assert sorted(n["outcome"] for n in result.nodes) == ["partitioned"] * 3, result.nodes
    assert sorted(n["wave"] for n in result.nodes) == [1, 2, 3]  # one slot: one node per wave
    assert [s for _, s, _ in seen] == [[name] for name, _, _ in seen]  # the node applied holds the only slot
    assert all(len(a) == 1 for _, _, a in seen)
    assert slots(api) == {}  # every slot given back
    for n in NAMES:
        record = cluster.annotation(n)
        assert record["step"] == "done" and record["drain"] is False and record["target"] == "per-gpu=3g.20gb-3g.20gb"
        assert not cluster.unschedulable(n)
    assert len(cluster.events("MigRolloutNoDrain")) == 3 and len(cluster.events("MigRolloutDone")) == 3
    assert not cluster.events("MigRolloutCordon") and not any("eviction" in r.path for r in api.requests)
    assert all(req["version"] == 2 and "destroy" not in req for _, req in transport.requests)


def test_a_notready_node_holds_the_budget_and_no_gpu_changes(cluster):
    api = cluster.api
    add_auto_nodes(api)
    api.add_node("auto-sick", labels={"alibabacloud.com/nodepool-id": POOL})

    def not_ready(node):
        node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    api.update_node("auto-sick", not_ready)
    waiting(api, 2)
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, ACK_MIG_MAX_UNAVAILABLE="1")
    assert result.outcome == "done"
    (node,) = result.nodes  # the fewest GPUs: one node's GPU serves both pods
    assert node["outcome"] == "deferred" and "auto-sick: NotReady" in node["reason"], node
    assert transport.requests == [] and slots(api) == {}
    assert cluster.annotation(node["node_name"]) is None  # nothing written on the node either


def test_a_pause_set_after_planning_stops_the_change_before_its_slot(cluster):
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    transport = PerGpuNodes(api)
    lookup = inventory(names=NAMES[:1])
    first = lookup.nodepools
    calls = []

    def nodepools(cluster_id):  # the tick reads the pool unpaused; the slot's re-read finds the pause
        calls.append(1)
        pools = first(cluster_id)
        if len(calls) > 1:
            return [p.model_copy(update={"labels": dict(p.labels, **{"ack-mig-hook/paused": "true"})}) for p in pools]
        return pools
    lookup.nodepools = nodepools
    result = tick(cluster, transport, lookup=lookup)
    (node,) = result.nodes
    assert node["outcome"] == "deferred" and "paused" in node["reason"], node
    assert transport.requests == [] and slots(api) == {}


def test_another_invocations_node_is_left_to_it(cluster):
    record = {"target": "per-gpu=3g.20gb-3g.20gb", "step": "applying", "owner": "other-run",
              "expires": cluster.now[0] + 600, "drain": False}

    def held(node):
        node["metadata"]["annotations"]["ack-mig-hook/rollout"] = json.dumps(record)
    transport, node = one_node(cluster, before=lambda api: api.update_node(NAMES[0], held))
    assert node["outcome"] == "deferred" and "other-run" in node["reason"], node
    assert transport.requests == []


def test_a_node_already_holding_the_plan_is_skipped_at_its_claim(cluster, monkeypatch):
    """Another run finished the same change between this tick's listing and its claim."""
    from functions.rollout import executor as ex

    original = ex.RolloutExecutor._claim

    def claim(self, w):  # just before the claim: the node now holds the plan (another run applied it)
        request = {"version": 2, "kind": "per-gpu",
                   "gpus": [{"index": 0, "layout": [{"profile": p, "start": s} for p, s in w.layouts[0]]}]}
        target = type("T", (), {"args": ("--json", __import__("base64").b64encode(json.dumps(request).encode())
                                         .decode()), "node_name": w.decision.node_name,
                                "instance_id": w.decision.instance_id})()
        PerGpuNodes(cluster.api).run([target])
        return original(self, w)

    monkeypatch.setattr(ex.RolloutExecutor, "_claim", claim)
    transport, node = one_node(cluster)
    assert node["outcome"] == "skipped" and "already in the requested layout" in node["reason"], node
    assert transport.requests == []


def test_a_bad_max_unavailable_label_is_one_error_for_the_pool(cluster):
    api = cluster.api
    add_auto_nodes(api)
    waiting(api, 6)
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=inventory({"ack-mig-hook/max-unavailable": "lots"}))
    by_name = {d.node_name: d for d in result.decisions}
    errors = [d for d in by_name.values() if d.action == "error"]
    assert len(errors) == 1 and "max-unavailable" in errors[0].reason and errors[0].node_name == "auto-a"
    assert all(d.action == "skip" and "reported once on node auto-a" in d.reason
               for n, d in by_name.items() if n != "auto-a")
    assert transport.requests == []


def test_the_dry_run_names_the_budget_and_the_layouts_and_writes_nothing(cluster):
    api = cluster.api
    _, node = one_node(cluster, dry_run=True)
    assert node["outcome"] == "dry-run", node
    assert "slot of pool %s (auto)'s budget" % POOL in node["reason"] and "GPU 0 3g.20gb-3g.20gb" in node["reason"]
    assert "wait for nvidia.com/mig-3g.20gb" in node["reason"]
    assert not any(r.method in ("PATCH", "PUT", "POST") for r in api.requests), [r.path for r in api.requests]


def test_a_gpu_the_node_left_busy_is_not_waited_for(cluster):
    """The GPU turned busy between the plan and the apply: the node leaves it as it was (docs/node.md); the
    rollout ends the node with that reason at once instead of waiting out the capacity timeout."""
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)

    class LeftBusy(PerGpuNodes):
        def run(self, targets):
            self.requests.extend((t.node_name, None) for t in targets)
            return [NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 0, "gpus": [],
                                                            "left": [{"gpu": 0, "why": "in use by pid 4242"}]})
                    for t in targets]

    transport = LeftBusy(api)
    result = tick(cluster, transport)
    (node,) = result.nodes
    assert node["outcome"] == "unchanged" and "left as they were: GPU 0 (in use by pid 4242)" in node["reason"], node
    assert "no new instance to wait for" in node["reason"] and cluster.sleeps == []
    assert cluster.annotation(NAMES[0])["step"] == "done" and slots(api) == {}
    # The GPU is idle again and the pods still wait: the next plan asks the same layouts, and its node's record
    # says done for that target. The GPU does not hold them, so the node is sent its change (it was skipped as
    # "finished meanwhile" on every tick after, and the pods waited for good).
    assert _marks(api) == {}  # the node left as it was is not held back by the dwell
    cluster.now[0] += 3600
    again = PerGpuNodes(api)
    (node,) = tick(cluster, again).nodes
    assert node["outcome"] == "partitioned" and [n for n, _ in again.requests] == [NAMES[0]], node
    layouts = json.loads(api.nodes[NAMES[0]]["metadata"]["annotations"]["ack-mig-hook/gpu-layouts"])
    assert [p for p, _ in layouts["0"]].count("3g.20gb") == 2, layouts


def _marks(api):
    lease = api.leases.get(LEASE)
    return json.loads((lease["metadata"].get("annotations") or {}).get("ack-mig-hook/changed") or "{}") if lease \
        else {}


def test_layouts_needed_reads_the_nodes_annotation():
    from functions.decision import waves as rp

    node = rp.KubeNode("n", labels={"nvidia.com/mig.config.state": "success"},
                       annotations={"ack-mig-hook/gpu-layouts": json.dumps({"0": [["3g.20gb", 4], ["3g.20gb", 0]],
                                                                            "1": [["7g.40gb", 0]]})})
    assert rp.layouts_needed({0: (("3g.20gb", 0), ("3g.20gb", 4))}, node) == ""  # order of instances aside
    assert rp.layouts_needed({1: (("1g.5gb", 0),)}, node) == "GPU 1 holds another layout"
    pending = rp.KubeNode("n", labels={"nvidia.com/mig.config.state": "pending"}, annotations=node.annotations)
    assert "pending, not success" in rp.layouts_needed({0: (("3g.20gb", 0), ("3g.20gb", 4))}, pending)
    for text in (None, "{", "[1]", '{"0": 5}', "x" * 5000):
        broken = rp.KubeNode("n", annotations={} if text is None else {"ack-mig-hook/gpu-layouts": text})
        assert "no per-GPU layout recorded" in rp.layouts_needed({0: ()}, broken)
    assert rp.per_gpu_target({1: (), 0: (("3g.20gb", 0), ("2g.10gb", 4))}) == "per-gpu=3g.20gb-2g.10gb/off"


def scale_out(cluster, group, instance):
    """Auto Scaling's scale-out event (tests/events/ess_scale_out_success.json) for ``group`` naming ``instance``,
    through run_event, on one auto node with two pods waiting: (transport, result)."""
    from pathlib import Path

    add_auto_nodes(cluster.api, NAMES[:1])
    waiting(cluster.api, 2)
    doc = json.loads((Path(__file__).resolve().parents[1] / "events" / "ess_scale_out_success.json").read_text())
    doc["data"].update(scalingGroupId=group, instanceIds=[instance])
    transport = PerGpuNodes(cluster.api)
    settings = load_settings(dict(cluster.settings_env))
    result = run_event(json.dumps(doc), settings, inventory=inventory(names=NAMES[:1]),
                       executor=DeliveryExecutor.from_settings(settings, transport=transport),
                       logger=JsonLogger("OFF"), kube=cluster.kube)
    return transport, result


def test_a_scale_out_of_the_auto_pool_replans_it_at_once(cluster):
    """Item 6: the events the hook already receives re-plan an auto pool, not only its timer: Auto Scaling's
    scale-out of the pool's group (its new node is there now) runs the pool's step right away."""
    transport, result = scale_out(cluster, "asg-1", "i-auto-a")
    assert result.outcome == "done", result.reason
    assert [n for n, _ in transport.requests] == ["auto-a"] and result.nodes[0]["outcome"] == "partitioned"


def test_an_event_of_another_pool_does_not_run_the_auto_step(cluster):
    transport, result = scale_out(cluster, "asg-other", "i-x")
    assert result.outcome == "skip" and "not a node pool of cluster" in result.reason, result.reason
    assert transport.requests == []


def test_status_shows_each_auto_nodes_gpu_layouts_and_what_it_serves(cluster):
    """Item 7: status lists an auto pool's nodes (they carry no partition decision) from what the API holds:
    per-GPU layouts, the rollout step, and the MIG instances their pods use."""
    from functions.commands.status import collect, render

    api = cluster.api
    add_auto_nodes(api, NAMES[:2])
    waiting(api, 2)
    result = tick(cluster, PerGpuNodes(api))
    assert [n["outcome"] for n in result.nodes] == ["partitioned"]
    changed = result.nodes[0]["node_name"]
    api.add_pod("llm", "serve-running", changed, owner_kind="ReplicaSet", resources={"nvidia.com/mig-3g.20gb": "1"})
    lookup = inventory(names=NAMES[:2])
    status = collect(load_settings(dict(cluster.settings_env)), lookup, kube=cluster.kube)
    (pool,) = status["pools"]
    assert pool["label"] == "ack-mig-hook/layout=auto" and pool["nodes"] == 2 and pool["in_layout"] == 2
    by_node = {n["node"]: n for n in pool["node_list"]}
    assert by_node[changed]["gpus"] == {"0": "3g.20gb@0 3g.20gb@4"} or by_node[changed]["gpus"] == {
        "0": "3g.20gb@4 3g.20gb@0"}, by_node[changed]
    assert by_node[changed]["serves"] == {"3g.20gb": 1} and by_node[changed]["rollout_step"] == "done"
    other = (set(by_node) - {changed}).pop()
    assert by_node[other]["serves"] == {} and by_node[other]["gpus"] == {"0": "7g.40gb@0"}
    text = render(status, nodes=True)
    assert "pool %s (auto): ack-mig-hook/layout=auto" % POOL in text and "serves 3g.20gb x1" in text
    assert "GPU 0: 7g.40gb@0" in text and all(len(line) <= 100 for line in text.splitlines())


def test_a_node_that_labels_itself_into_the_pool_is_neither_supply_nor_target(cluster):
    """Issue 35 item 6: a kubelet may write its own labels and annotations. ``impostor`` labels itself into the
    auto pool and claims an idle 3g.20gb x2 layout that would serve both waiting pods; ACK does not list it in
    the pool, so it is left out: the pool's own node is repartitioned for the pods, the impostor is never
    sent a request, and the tick says why it was left out."""
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    api.add_node("impostor", labels={"alibabacloud.com/nodepool-id": POOL, "nvidia.com/mig.config.state": "success",
                                     "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB",
                                     "aliyun.accelerator/nvidia_count": "1"},
                 annotations={"ack-mig-hook/gpu-layouts": json.dumps({"0": [["3g.20gb", 0], ["3g.20gb", 4]]})},
                 capacity={"nvidia.com/mig-3g.20gb": "2"})
    waiting(api, 2)
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=inventory(names=NAMES[:1]))
    assert result.outcome == "done", result.reason
    assert [name for name, _ in transport.requests] == [NAMES[0]]
    assert [n["node_name"] for n in result.nodes] == [NAMES[0]] and result.nodes[0]["outcome"] == "partitioned"


def test_proven_members_checks_the_name_and_the_instance_ack_lists():
    from functions.base.model import Node
    from functions.pipeline.auto_pool import proven_members

    members = {"a": Node(instance_id="i-a", node_name="a"), "b": Node(instance_id="i-b", node_name="b")}
    nodes = [{"metadata": {"name": "a"}, "spec": {"providerID": "cn-beijing.i-a"}},
             {"metadata": {"name": "b"}, "spec": {"providerID": "alicloud://cn-beijing.i-other"}},
             {"metadata": {"name": "c"}, "spec": {}}, {"metadata": {"name": "a2"}}]
    kept, left = proven_members(nodes, members)
    assert [n["metadata"]["name"] for n in kept] == ["a"]
    assert [line.split(":")[0] for line in left] == ["node b", "node c", "node a2"]
    assert "i-other" in left[0] and "ACK lists i-b" in left[0] and "does not list it" in left[1]


def test_a_left_gpu_named_by_a_list_in_one_nodes_result_does_not_end_the_tick(cluster):
    # Found by a review: the tick ended internal-error (unhashable type: 'list') and every node's result was lost.
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)

    class Hostile(PerGpuNodes):
        def run(self, targets):
            return [NodeResult(r.instance_id, r.transport, 0, dict(r.result, left=[{"gpu": [0], "why": "busy"}]))
                    for r in super().run(targets)]

    result = tick(cluster, Hostile(api))
    assert result.outcome == "done", result.reason
    (node,) = result.nodes
    assert node["node_name"] == NAMES[0] and node["outcome"] == "partitioned" and "left" not in node, node


@pytest.mark.parametrize("part,value", [("spec", [1]), ("status", "x"), ("metadata.annotations", ["x"])],
                         ids=["spec", "status", "annotations"])
def test_a_pool_node_of_another_shape_leaves_the_change_of_the_others(cluster, part, value):
    """A Node with the pool's label whose part is of another shape (what a proxy or webhook in front of the
    API server may answer) is read as lacking it by every reader of the pool's nodes, the budget's count and
    the rollout's view included: it ended the tick in an internal error (AttributeError) once a change was
    planned, though the plan had read it part by part (``supply.node_object``)."""
    api = cluster.api
    add_auto_nodes(api, NAMES[:2])
    waiting(api, 2)
    with api.lock:
        where = api.nodes[NAMES[1]]
        for key in part.split(".")[:-1]:
            where = where[key]
        where[part.split(".")[-1]] = value
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=inventory(names=NAMES[:1]))
    assert result.outcome == "done", result.reason
    assert [n for n, _ in transport.requests] == [NAMES[0]], result.reason
