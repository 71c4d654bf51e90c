"""One plan at a time per auto pool (issue 35 item 4): a tick that starts while another one applies never
plans for the same pods or GPUs. The pool's planning claim (functions/rollout/plan_claim.py) is taken on the
pool's Lease before its nodes are read and held until the tick's rollout ends; a second tick finds it held
and skips the pool, naming the invocation that plans it.

The overlap is played as FC runs it without an instance concurrency limit: the second tick starts from inside
the first one's transport, after the node wrote ``nvidia.com/mig.config.state=pending`` (node_bootstrap
apply writes it before anything changes, node_bootstrap/kube/nodelabels.py), so the node being changed is
``busy`` to any planner that reads it then."""

import json

import pytest

from tests.rollout.conftest import POOL
from tests.rollout.test_auto_rollout import NAMES, PerGpuNodes, add_auto_nodes, inventory, slots, tick, waiting

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

LEASE = ("default", "ack-mig-hook-pool-%s" % POOL)
PLANNING = "ack-mig-hook/planning"


class Overlapping(PerGpuNodes):
    """The first tick's nodes: each one first says ``pending`` (as node_bootstrap apply does), then, once,
    a second tick runs to its end while this one applies."""

    def __init__(self, api, second):
        super().__init__(api)
        self.second, self.seen = second, []

    def run(self, targets):
        for t in targets:
            self.api.label_node(t.node_name, {"nvidia.com/mig.config.state": "pending"})
        if self.second is not None:
            second, self.second = self.second, None
            self.seen.append(second())
        return super().run(targets)


def put_lease(api, annotations):
    """The pool's Lease as another invocation (or a forger) left it."""
    api.leases[LEASE] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": LEASE[1], "namespace": "default", "resourceVersion": "7", "uid": "u-1",
                                      "annotations": dict(annotations)}, "spec": {}}


def planning(api):
    lease = api.leases.get(LEASE)
    text = ((lease or {}).get("metadata") or {}).get("annotations", {}).get(PLANNING)
    return json.loads(text) if text else None


def test_a_tick_that_starts_while_another_applies_plans_nothing_for_the_same_pods(cluster):
    api = cluster.api
    add_auto_nodes(api, NAMES[:2])  # two idle GPUs: either could serve the two pods
    waiting(api, 2)
    lookup = inventory(names=NAMES[:2])
    inner = PerGpuNodes(api)
    held_during = []

    def second():
        held_during.append(planning(api))
        return tick(cluster, inner, lookup=lookup, ACK_MIG_MAX_UNAVAILABLE="2")

    outer = Overlapping(api, second)
    # A budget of two: the budget alone would let the second tick change auto-b (it did before the claim)
    first = tick(cluster, outer, lookup=lookup, ACK_MIG_MAX_UNAVAILABLE="2")
    assert first.outcome == "done", first.reason
    (changed,) = [n for n, _ in outer.requests]  # one of the two (which one is the planner's tie-break)
    (other,) = set(NAMES[:2]) - {changed}
    assert first.nodes[0]["outcome"] == "partitioned"
    (overlapped,) = outer.seen
    assert inner.requests == [], inner.requests  # the second node is not repartitioned for the same pods
    owner = held_during[0]["owner"]
    assert overlapped.outcome == "skip", overlapped.reason
    assert overlapped.reason == "pool %s is being planned by invocation %s" % (POOL, owner), overlapped.reason
    assert json.loads(api.nodes[other]["metadata"]["annotations"]["ack-mig-hook/gpu-layouts"]) == {
        "0": [["7g.40gb", 0]]}
    assert cluster.annotation(other) is None  # not even claimed
    assert cluster.annotation(changed)["owner"] == owner  # the claim's owner is the records' invocation
    assert planning(api) is None and slots(api) == {}  # given back at the end


def test_the_next_tick_after_the_rollout_plans_again_and_finds_the_pods_served(cluster):
    api = cluster.api
    add_auto_nodes(api, NAMES[:2])
    waiting(api, 2)
    lookup = inventory(names=NAMES[:2])
    first = tick(cluster, PerGpuNodes(api), lookup=lookup)
    assert len(first.nodes) == 1  # one of the two GPUs serves both pods
    again = PerGpuNodes(api)
    cluster.now[0] += 60  # the timer's next tick (a tick whose pending list predates the change skips the pool)
    result = tick(cluster, again, lookup=lookup)  # the claim was given back: this tick plans
    assert result.outcome == "done" and "no GPU of the auto pools changes" in result.reason, result.reason
    assert again.requests == []  # the pods wait for the new idle instances: nothing to change


def test_a_crashed_ticks_claim_expires_and_a_forged_one_holds_one_invocation_at_most(cluster):
    """A claim past the invocation's longest time (a clock ahead, or forged before 2100) is written back
    clamped and runs out with it; one past 2100 is not ours (the reader rule) and holds nothing."""
    from functions.base.settings import invocation_s, load_settings

    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    lookup = inventory(names=NAMES[:1])
    longest = invocation_s(load_settings(cluster.settings_env))
    put_lease(api, {PLANNING: json.dumps({"owner": "forger", "expires": 4.0e9})})
    blocked = tick(cluster, PerGpuNodes(api), lookup=lookup)
    assert blocked.outcome == "skip" and "planned by invocation forger" in blocked.reason
    stored = planning(api)
    assert stored["owner"] == "forger" and stored["expires"] <= cluster.now[0] + longest  # written back clamped
    cluster.now[0] += longest + 1  # the forged claim ran out within one invocation's time, as a crashed one does
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=lookup)
    assert result.outcome == "done" and [n for n, _ in transport.requests] == ["auto-a"], result.reason


def _tick_logged(cluster, transport, lookup):
    """:func:`tick`, its WARNING lines written (as JSON lines, to stdout)."""
    from functions.base.logs import JsonLogger
    from tests.rollout import test_auto_rollout as auto

    settings = auto.load_settings(cluster.settings_env)
    executor = auto.DeliveryExecutor.from_settings(settings, transport=transport)
    return auto.run_event(auto.TICK, settings, inventory=lookup, executor=executor, dry_run=False,
                          logger=JsonLogger("WARNING"), kube=cluster.kube)


@pytest.mark.parametrize("text,why", [
    (json.dumps({"owner": "forger", "expires": 1e15}), "its expires 1000000000000000.0 is outside 0 to"),
    ("{", "it is not JSON"), (json.dumps({"owner": "x" * 65, "expires": 2000}), "its owner has 65 characters"),
    ("[]", "it is a list"), (json.dumps({"owner": 5, "expires": 2000}), "its owner is a number"),
    (json.dumps({"owner": ["run-1"], "expires": 2000}), "nested too deeply"),
    (json.dumps({"owner": "run-1", "expires": "2099-01-01T00:00:00Z"}), "its expires is text, not a number")])
def test_a_claim_that_does_not_read_holds_one_invocation_at_most_and_is_named(cluster, capsys, text, why):
    """A planning claim that does not read (another version's form, a forger's) read as none, with nothing
    said: a tick planned the pool beside the invocation it may stand for. It holds the pool as a forged expiry
    does, written back clamped to one invocation's time, and one WARNING line names it and the accepted form."""
    from functions.base.settings import invocation_s, load_settings

    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    lookup = inventory(names=NAMES[:1])
    longest = invocation_s(load_settings(cluster.settings_env))
    put_lease(api, {PLANNING: text})
    dry = tick(cluster, PerGpuNodes(api), lookup=lookup, dry_run=True)
    assert dry.outcome == "skip" and "planned by invocation unreadable-claim" in dry.reason, dry.reason
    assert api.leases[LEASE]["metadata"]["annotations"][PLANNING] == text  # a dry run writes nothing
    capsys.readouterr()
    blocked = _tick_logged(cluster, PerGpuNodes(api), lookup)
    assert blocked.outcome == "skip" and "planned by invocation unreadable-claim" in blocked.reason, blocked.reason
    lines = [line["message"] for line in map(json.loads, capsys.readouterr().out.splitlines())
             if "is not ours" in line["message"] and line["level"] == "WARNING"]
    assert len(lines) == 1 and why in lines[0] and '"owner": <invocation id' in lines[0], lines
    assert "pool %s" % POOL in lines[0] and len(lines[0]) < 400, lines
    stored = planning(api)  # written back readable and clamped: it ends as a crashed tick's claim does
    assert stored["owner"] == "unreadable-claim" and stored["expires"] <= cluster.now[0] + longest, stored
    cluster.now[0] += longest + 1
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=lookup)
    assert result.outcome == "done" and [n for n, _ in transport.requests] == ["auto-a"], result.reason


def test_change_marks_that_are_not_ours_read_as_none_and_are_named_in_one_warning_line_each(cluster, capsys):
    """The pool Lease's change marks (the dwell's per GPU, and when the pool last changed) that do not read
    were dropped with nothing said. As none they let one more change through the dwell at most (the safe
    side: the claim keeps plans apart), so the tick plans, and a WARNING line names each, with the form."""
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    put_lease(api, {"ack-mig-hook/changed": json.dumps({"auto-a/0": "soon", "auto-a": 5}),
                    "ack-mig-hook/pool-changed": '"yesterday"'})
    capsys.readouterr()
    transport = PerGpuNodes(api)
    result = _tick_logged(cluster, transport, inventory(names=NAMES[:1]))
    assert result.outcome == "done" and [n for n, _ in transport.requests] == ["auto-a"], result.reason
    lines = [line["message"] for line in map(json.loads, capsys.readouterr().out.splitlines())
             if "is not ours" in line["message"] and line["level"] == "WARNING"]
    assert len(lines) == 2, lines
    assert "ack-mig-hook/changed" in lines[0] and "entries left out: 2" in lines[0] and '"auto-a/0": "soon"' \
        in lines[0] and '{"<node>/<GPU index>": <epoch seconds up to 2100>}' in lines[0], lines
    assert "ack-mig-hook/pool-changed" in lines[1] and "not an epoch time" in lines[1], lines


def test_a_dry_run_reads_the_claim_and_writes_nothing(cluster):
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    lookup = inventory(names=NAMES[:1])
    put_lease(api, {PLANNING: json.dumps({"owner": "busy-run", "expires": cluster.now[0] + 60})})
    result = tick(cluster, PerGpuNodes(api), lookup=lookup, dry_run=True)
    assert result.outcome == "skip" and "planned by invocation busy-run" in result.reason
    assert not any(r.method in ("PATCH", "PUT", "POST") for r in api.requests)


def stamp(seconds):
    """An RFC 3339 time on the test cluster's clock (epoch seconds), as the API server writes one."""
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def test_the_dwell_keeps_a_changed_gpu_until_a_pod_has_waited_past_the_bound(cluster):
    """Item 5 on the API server: the tick that changes a GPU marks it on the pool's Lease; the next ticks do
    not repartition it back for a new pod of another profile, until that pod has waited longer than
    ACK_MIG_AUTO_MAX_WAIT_S (its PodScheduled=False condition's lastTransitionTime, as the scheduler writes
    it), within ACK_MIG_AUTO_DWELL_S."""
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)  # two 3g.20gb: the idle 7g.40gb is repartitioned
    lookup = inventory(names=NAMES[:1])
    first = PerGpuNodes(api)
    assert tick(cluster, first, lookup=lookup).nodes[0]["outcome"] == "partitioned"
    lease = api.leases[LEASE]["metadata"]["annotations"]
    assert list(json.loads(lease["ack-mig-hook/changed"])) == ["auto-a/0"] and PLANNING not in lease
    with api.lock:  # the adversary's pods go before they bind; one asking the whole GPU comes instead
        for i in range(2):
            del api.pods[("llm", "serve-%d" % i)]
    born = cluster.now[0] + 30
    big = api.add_pod("llm", "big", "", phase="Pending", owner_kind="ReplicaSet",
                      resources={"nvidia.com/mig-7g.40gb": "1"})
    with api.lock:
        big["metadata"]["creationTimestamp"] = stamp(born)
        big["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "lastTransitionTime": stamp(born)}]
    env = {"ACK_MIG_AUTO_DWELL_S": "600", "ACK_MIG_AUTO_MAX_WAIT_S": "300"}
    for minutes in (1, 2, 3, 4, 5):  # the pod has waited 30 s .. 270 s: the GPU stays
        cluster.now[0] = born - 30 + 60 * minutes
        held = PerGpuNodes(api)
        result = tick(cluster, held, lookup=lookup, **env)
        assert held.requests == [] and "no GPU of the auto pools changes" in result.reason, (minutes, result.reason)
    cluster.now[0] = born + 301  # past the bound, still within the dwell: the pod gets its GPU
    late = PerGpuNodes(api)
    result = tick(cluster, late, lookup=lookup, **env)
    assert [n for n, _ in late.requests] == ["auto-a"], result.reason
    assert late.requests[0][1]["gpus"][0]["layout"] == [{"profile": "7g.40gb", "start": 0}]


def test_without_the_dwell_the_same_demand_repartitions_at_once(cluster):
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    lookup = inventory(names=NAMES[:1])
    tick(cluster, PerGpuNodes(api), lookup=lookup)
    with api.lock:
        for i in range(2):
            del api.pods[("llm", "serve-%d" % i)]
    waiting(api, 1, "7g.40gb")
    cluster.now[0] += 60
    again = PerGpuNodes(api)
    tick(cluster, again, lookup=lookup, ACK_MIG_AUTO_DWELL_S="0")
    assert [n for n, _ in again.requests] == ["auto-a"]  # the thrash the dwell stops


def add_two_a(api, pool="np-two"):
    """``two-a``, the second auto pool's node: one A100 as one idle 7g.40gb."""
    api.add_node("two-a", labels={"alibabacloud.com/nodepool-id": pool, "nvidia.com/mig.config.state": "success",
                                  "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB",
                                  "aliyun.accelerator/nvidia_count": "1"},
                 annotations={"ack-mig-hook/gpu-layouts": json.dumps({"0": [["7g.40gb", 0]]})},
                 capacity={"nvidia.com/mig-7g.40gb": "1"})


def two_pools():
    """The test pool and a second auto pool ``np-two`` with one node of its own."""
    from functions.cloud.cluster import InventoryLookup

    labels = [{"key": "ack-mig-hook/layout", "value": "auto"}]
    pools = [{"nodepool_info": {"nodepool_id": pool, "name": pool}, "kubernetes_config": {"labels": labels},
              "scaling_group": {"scaling_group_id": "asg-" + pool, "instance_types": ["ecs.ebmgn7.26xlarge"]}}
             for pool in (POOL, "np-two")]
    nodes = [{"instance_id": "i-" + n, "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge", "nodepool_id": p,
              "state": "running", "ip_address": ["10.0.1.%d" % i]}
             for i, (n, p) in enumerate((("auto-a", POOL), ("two-a", "np-two")), 1)]
    return InventoryLookup.from_dict({"cluster_id": "c-rollout", "nodepools": pools, "nodes": nodes})


def test_another_pool_is_planned_while_one_is_claimed(cluster):
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    add_two_a(api)
    waiting(api, 2)
    with api.lock:  # they select the second pool: its demand (pods either pool could take are the first's)
        for i in range(2):
            api.pods[("llm", "serve-%d" % i)]["spec"]["nodeSelector"] = {"alibabacloud.com/nodepool-id": "np-two"}
    put_lease(api, {PLANNING: json.dumps({"owner": "busy-run", "expires": cluster.now[0] + 60})})
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=two_pools())
    assert result.outcome == "done", result.reason
    assert result.reason.endswith("; pool %s is being planned by invocation busy-run" % POOL), result.reason
    assert [n for n, _ in transport.requests] == ["two-a"]
    assert planning(api)["owner"] == "busy-run"  # another invocation's claim is never given back by this one


def test_a_pool_changed_after_the_pending_list_is_planned_on_the_pods_read_again(cluster):
    """The pods were listed before another invocation's rollout of the pool ended (its marks are newer
    than the list): they may have bound since, so the tick, holding the pool's claim now, reads them again
    (once the API server's whole-second clock has passed the change) and plans on that list. It left the
    pool to the next tick: a pod whose event was lost waited two timers, not one."""
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    put_lease(api, {"ack-mig-hook/changed": json.dumps({"auto-z/0": cluster.now[0]})})
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=inventory(names=NAMES[:1]))
    assert result.outcome == "done", result.reason
    assert [name for name, _ in transport.requests] == [NAMES[0]]
    assert [r for r in api.requests if r[1] == "/api/v1/pods"][:2] and cluster.sleeps == [2.0]
    assert planning(api) is None  # its claim given back as the tick ends


def test_pods_that_bound_before_the_second_list_are_not_planned_for(cluster):
    """The same, but the pods bound while the tick waited to read them again: nothing is planned for them."""
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    put_lease(api, {"ack-mig-hook/changed": json.dumps({"auto-z/0": cluster.now[0]})})
    cluster.on_sleep = lambda n: api.pods.clear()
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=inventory(names=NAMES[:1]))
    assert transport.requests == [] and cluster.sleeps == [2.0], result.reason
    assert planning(api) is None


class FreshAndPerGpu(PerGpuNodes):
    """Plays a fresh node's request (a sequence: MIG turned on, one GPU here) as well as per-GPU ones."""

    def run(self, targets):
        from functions.delivery.outcome import NodeResult

        out = []
        for t in targets:
            request = json.loads(__import__("base64").b64decode(t.args[-1]))
            if "partition" not in request:
                out.extend(super().run([t]))
                continue
            self.requests.append((t.node_name, request))
            seq = request["partition"]["value"]
            names = seq.split("-")

            def change(node, names=names, seq=seq):
                node["metadata"]["labels"].update({"nvidia.com/mig.config.state": "success",
                                                   "aliyun.accelerator/nvidia_mig_sequence": seq})
                node["metadata"].setdefault("annotations", {})["ack-mig-hook/gpu-layouts"] = json.dumps(
                    {"0": [[n, s] for n, s in zip(names, (0, 4))]})
                node["status"]["allocatable"] = {"nvidia.com/mig-" + names[0]: str(len(names))}
            self.api.update_node(t.node_name, change)
            out.append(NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 2, "sequence": seq,
                                                               "gpus": []}))
        return out


def test_a_fresh_node_turned_on_after_the_pending_list_makes_the_tick_read_the_pods_again(cluster, monkeypatch):
    """A fresh node's first layout is not held back by the dwell, so it has no GPU mark; the pool is still
    marked changed. Between this tick's list of the pending pods and its claim another invocation turns MIG
    on for the fresh node and the two pods bind there: this tick must not plan from its list (it counted them
    waiting beside their own instances, advertised a new node for pods that run, and could repartition an
    idle GPU for them)."""
    from functions.kube import demand

    api = cluster.api
    api.add_node("auto-a", labels={"alibabacloud.com/nodepool-id": POOL,
                                   "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB",
                                   "aliyun.accelerator/nvidia_count": "1"}, capacity={"nvidia.com/gpu": "1"})
    waiting(api, 2)
    lookup = inventory(names=["auto-a"])
    original, other, nested = demand.pending_pods, [], []

    def pending_pods(a, *rest):
        listed = original(a, *rest)
        if not nested:
            nested.append(True)  # the other invocation's own list is the plain one
            other.append(tick(cluster, FreshAndPerGpu(api), lookup=lookup))
            for i in range(2):  # the scheduler binds both pods to the fresh node's instances
                api.pods.pop(("llm", "serve-%d" % i))
                api.add_pod("llm", "serve-%d" % i, "auto-a", owner_kind="ReplicaSet",
                            resources={"nvidia.com/mig-3g.20gb": "1"})
        return listed

    monkeypatch.setattr(demand, "pending_pods", pending_pods)
    transport = FreshAndPerGpu(api)
    stale = tick(cluster, transport, lookup=lookup)
    (fresh,) = other[0].decisions
    assert fresh.node_name == "auto-a" and fresh.partition.value == "3g.20gb-3g.20gb", other[0].decisions
    assert cluster.sleeps == [2.0], stale.reason  # the pods read again, once the change is behind the list
    assert transport.requests == [] and not any((t.get("set") or {}) for t in stale.pool_tags or [])
    lease = api.leases[LEASE]["metadata"]["annotations"]
    assert "ack-mig-hook/changed" not in lease or json.loads(lease["ack-mig-hook/changed"]) == {}  # no dwell
    assert float(lease["ack-mig-hook/pool-changed"]) > 0


@pytest.mark.parametrize("text", [None, "", "soon", "[1]", "true", "1e400", "-5", "9" * 40, "5e9"])
def test_a_pool_change_time_that_is_not_ours_reads_as_none(text):
    from functions.decision.claim_rules import read_pool_changed

    assert read_pool_changed(text, 1000.0) == 0.0
    assert read_pool_changed("900.5", 1000.0) == 900.5 and read_pool_changed("1300", 1000.0) == 1000.0
    # further ahead than a clock runs: forged or broken, and read as such it would hold the pool off for good
    assert read_pool_changed("1300.5", 1000.0) == 0.0 and read_pool_changed("4000000000", 1000.0) == 0.0


def test_a_pool_change_time_far_in_the_future_holds_the_pool_off_one_tick_at_most(cluster):
    # Found by a review: "4000000000" (2096) skipped every tick of the pool as "changed after this tick read
    # the pending pods", for good.
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    put_lease(api, {"ack-mig-hook/pool-changed": "4000000000"})
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=inventory(names=NAMES[:1]))
    assert transport.requests and result.outcome == "done", result.reason


def test_without_lease_rights_the_pool_is_not_planned(cluster):
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    # (only Leases are written with PUT) RBAC's words, as kube-apiserver's authorizer gives them
    api.break_next(times=100, status=403, method="PUT", message=(
        'leases.coordination.k8s.io "ack-mig-hook-pool-np-mig" is forbidden: User "ack-mig-hook" cannot update '
        'resource "leases" in API group "coordination.k8s.io" in the namespace "default"'))
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=inventory(names=NAMES[:1]))
    # not planned, and not "nothing to do": the tick ends retry, naming the permission
    assert result.outcome == "retry" and "deploy/rbac.yaml grants leases" in result.reason, result.reason
    assert "may not update leases" in result.reason, result.reason
    assert transport.requests == [] and cluster.annotation("auto-a") is None


def test_a_gpu_the_node_left_as_it_was_is_not_marked_changed():
    """The dwell holds back GPUs a plan changed; a GPU the node left as it was (busy, held: the result's
    `left`) did not change, so its mark would keep it from serving the pods that wait once it is idle."""
    from types import SimpleNamespace as NS

    from functions.rollout.plan_claim import PlanClaims

    claims = PlanClaims(None, "me", lambda: 0.0, 60.0, 600.0)
    targets = [NS(node="auto-a", index=i, change=c) for i, c in enumerate(("create", "reshape", "none"))]
    change = (NS(nodepool_id=POOL), NS(node_name="auto-a"), targets)
    claims.mark([change], [{"node_name": "auto-a", "outcome": "partitioned", "left": [{"gpu": 1, "why": "busy"}]}])
    assert claims.marks == {POOL: [("auto-a", 0)]}
    claims.marks.clear()
    claims.mark([change], [{"node_name": "auto-a", "outcome": "unchanged"}])  # nothing changed: nothing marked
    assert claims.marks == {}


# ---- the autoscaler tags are compared after the claim ----

from functions.base.event_result import Trigger  # noqa: E402
from functions.base.logs import JsonLogger  # noqa: E402
from functions.base.model import Request  # noqa: E402
from functions.base.settings import load_settings  # noqa: E402
from functions.cloud.cluster import InventoryLookup  # noqa: E402
from functions.pipeline.autoscaler_sync import sync_pool_tags  # noqa: E402
from functions.delivery.node_executor import DeliveryExecutor  # noqa: E402
from functions.pipeline.event import run_event  # noqa: E402
from tests.rollout.conftest import CLUSTER  # noqa: E402


class Writable(InventoryLookup):
    """A snapshot whose pool tags can be written, as ModifyClusterNodePool writes them (the whole list)."""

    def nodepools(self, cluster_id):
        return [p.model_copy(deep=True) for p in super().nodepools(cluster_id)]

    def set_nodepool_tags(self, cluster_id, nodepool_id, tags):
        for i, p in enumerate(self._pools):
            if p.nodepool_id == nodepool_id:
                self._pools[i] = p.model_copy(update={"tags": dict(tags)})


def _writable_lookup():
    return Writable.from_dict({
        "cluster_id": CLUSTER,
        "nodepools": [{"nodepool_info": {"nodepool_id": POOL, "name": "auto"},
                       "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}]},
                       "auto_scaling": {"enable": True},
                       "scaling_group": {"scaling_group_id": "asg-1", "instance_types": ["ecs.ebmgn7.26xlarge"]}}],
        "nodes": [{"instance_id": "i-auto-a", "node_name": "auto-a", "instance_type": "ecs.ebmgn7.26xlarge",
                   "nodepool_id": POOL, "state": "running", "ip_address": ["10.0.1.1"]}]})


def ours(w):
    (pool,) = w.nodepools(CLUSTER)
    return {k: v for k, v in pool.tags.items() if k.startswith("k8s.io/")}


def test_tags_another_invocation_wrote_before_this_ticks_claim_are_compared_as_they_are_now(cluster, monkeypatch):
    """Between a tick's list of the node pools and its claim, the invocation that held the claim (its pending
    list older than the pods) clears the pool's tags. Compared with the tick's first list they looked in sync,
    nothing was written, and the node the waiting pod needs was not asked for until the next timer tick.
    (Found by a review of the change that reused the event's list for the tags.)"""
    from functions.kube import demand

    api = cluster.api
    add_auto_nodes(api, ["auto-a"])  # one idle 7g.40gb
    waiting(api, 2, "7g.40gb")  # one fits it, the other needs a new node
    w = _writable_lookup()
    env = {"ACK_MIG_AUTOSCALER_TAGS": "on"}
    first = tick(cluster, PerGpuNodes(api), lookup=w, **env)
    wanted = ours(w)
    assert any(v != "0" for v in wanted.values())

    settings = load_settings(dict(cluster.settings_env, **env))
    original, done = demand.pending_pods, []

    def pending_pods(a, *rest):  # between this tick's list of the pools and its claim, another invocation
        listed = original(a, *rest)  # (holding the claim, its pending list older than the pods) clears the tags
        if not done:
            done.append(sync_pool_tags(Request(trigger=Trigger.TIMER, event_type="timer:auto", cluster_id=CLUSTER),
                                       w, CLUSTER, settings, False, JsonLogger("OFF"), new_nodes={POOL: ()}))
        return listed

    monkeypatch.setattr(demand, "pending_pods", pending_pods)
    cluster.now[0] += 600
    second = tick(cluster, PerGpuNodes(api), lookup=w, **env)
    assert done[0][0]["written"] and second.outcome in ("done", "skip"), second.reason
    assert ours(w) == wanted, ("the pod still waits for a new node, and the tags no longer advertise one",
                               second.pool_tags)


def test_a_change_made_while_the_pending_list_pages_in_makes_the_tick_read_the_pods_again(cluster, monkeypatch):
    """The pending list is a snapshot of its first page; the tick dated it by its last page. Another
    invocation that changed the pool while the later pages came (more than the second's margin before the
    last) was older than that date: the tick planned from pods that had bound since, and changed a second node
    for them. (Found by an audit of the docs' promises.)"""
    from functions.kube import demand
    from functions.kube.client import KubeApi

    api = cluster.api
    add_auto_nodes(api, NAMES[:2])  # two idle 7g.40gb GPUs
    waiting(api, 2)  # two 3g.20gb pods: one GPU serves both
    lookup = inventory(names=NAMES[:2])
    monkeypatch.setattr(demand, "PENDING_PAGE", 1)  # two pages
    request, other = KubeApi.request, []

    def request_and_meanwhile(self, method, path, *args, **kw):
        if path == "/api/v1/pods" and "continue" in (kw.get("query") or {}) and not other:
            other.append(None)  # before the second page: another invocation plans and applies the pool...
            other[0] = tick(cluster, PerGpuNodes(api), lookup=lookup)
            bound_to = other[0].nodes[0]["node_name"]
            for i in range(2):  # ...the scheduler binds both pods to what it made...
                api.pods.pop(("llm", "serve-%d" % i))
                api.add_pod("llm", "serve-%d" % i, bound_to, owner_kind="ReplicaSet",
                            resources={"nvidia.com/mig-3g.20gb": "1"})
            cluster.now[0] += 5  # ...and the page comes 5 s after the first
        return request(self, method, path, *args, **kw)

    monkeypatch.setattr(KubeApi, "request", request_and_meanwhile)
    transport = PerGpuNodes(api)
    stale = tick(cluster, transport, lookup=lookup)
    assert other[0].outcome == "done" and len(other[0].nodes) == 1, other[0].reason
    assert cluster.sleeps == [2.0], stale.reason  # the pods read again, once the change is behind the list
    assert transport.requests == []


def test_a_pod_two_auto_pools_could_take_is_planned_in_one(cluster):
    """Each pool's plan read every pending pod it matched, so two pools repartitioned a GPU (and would advertise
    nodes) for the same two pods. The first pool by id that counts a pod has it, as a pod event picks.
    (Found by an audit of the docs' promises.)"""
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])  # auto-a in the test pool: one idle 7g.40gb
    add_two_a(api)
    waiting(api, 2)  # two 3g.20gb pods without a selector: either pool's GPU serves both
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=two_pools())
    assert result.outcome == "done", result.reason
    first = min(POOL, "np-two")
    assert [n for n, _ in transport.requests] == ["auto-a" if first == POOL else "two-a"], transport.requests


def test_a_tick_of_one_pool_leaves_alone_the_pods_an_earlier_pool_counts(cluster):
    """A tick scoped to one pool (a pod event's, a scale-out's, a pool operation's, a manual run naming the
    pool) planned every pending pod it matched: the pods the first pool by id counts (and serves here with
    its idle instances) were planned again there, and a GPU of the second pool was repartitioned for them."""
    api = cluster.api
    three = json.dumps({"0": [["3g.20gb", 0], ["3g.20gb", 4]]})
    api.add_node("auto-a", labels={"alibabacloud.com/nodepool-id": POOL, "nvidia.com/mig.config.state": "success",
                                   "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB",
                                   "aliyun.accelerator/nvidia_count": "1"},
                 annotations={"ack-mig-hook/gpu-layouts": three}, capacity={"nvidia.com/mig-3g.20gb": "2"})
    add_two_a(api)
    waiting(api, 2)  # two 3g.20gb pods without a selector: the first pool's idle instances serve both
    assert POOL < "np-two"
    whole = PerGpuNodes(api)
    assert tick(cluster, whole, lookup=two_pools()).outcome == "done" and whole.requests == []
    settings = load_settings(dict(cluster.settings_env))
    transport = PerGpuNodes(api)
    cluster.now[0] += 60
    result = run_event(json.dumps({"cluster_id": "c-rollout", "nodepool_id": "np-two"}), settings,
                       inventory=two_pools(), executor=DeliveryExecutor.from_settings(settings, transport=transport),
                       logger=JsonLogger("OFF"), kube=cluster.kube)
    assert result.outcome in ("done", "skip"), result.reason
    assert transport.requests == [], (result.reason, transport.requests)
    # nor while another invocation plans the first pool: its pods are that plan's (it may serve them now)
    api.nodes["auto-a"]["metadata"]["annotations"]["ack-mig-hook/gpu-layouts"] = json.dumps({"0": [["7g.40gb", 0]]})
    cluster.now[0] += 60
    put_lease(api, {PLANNING: json.dumps({"owner": "busy-run", "expires": cluster.now[0] + 60})})
    busy = PerGpuNodes(api)
    result = tick(cluster, busy, lookup=two_pools())
    assert "being planned by invocation busy-run" in result.reason and busy.requests == [], (result.reason,
                                                                                           busy.requests)


def test_a_claim_written_whose_answer_never_came_is_given_back_with_the_tick(cluster, monkeypatch):
    """The API server committed the claim but no answer reached the tick (every attempt cut: an overloaded
    server answers after the client's timeout). The tick left the pool unplanned, as it should, but never gave
    the claim back: it was not among the claims held, and it kept every plan of the pool off for a whole
    invocation's time (hours: a pod event waited on it, each timer tick skipped the pool)."""
    from functions.kube.client import ApiError, KubeApi

    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    lookup = inventory(names=NAMES[:1])
    replace, cut = KubeApi.replace_lease, []

    def committed_unanswered(self, namespace, lease):
        answer = replace(self, namespace, lease)
        if PLANNING in ((lease.get("metadata") or {}).get("annotations") or {}) and not cut:
            cut.append(lease)
            raise ApiError("no complete answer from the API server within 15s")
        return answer

    monkeypatch.setattr(KubeApi, "replace_lease", committed_unanswered)
    first = PerGpuNodes(api)
    result = tick(cluster, first, lookup=lookup)
    assert cut and first.requests == [] and "cannot be used" in result.reason, result.reason
    assert planning(api) is None, planning(api)  # given back as the tick ended
    cluster.now[0] += 60
    again = PerGpuNodes(api)
    result = tick(cluster, again, lookup=lookup)
    assert [n for n, _ in again.requests] == ["auto-a"], result.reason


def test_a_slot_written_whose_answer_never_came_is_given_back_when_the_node_ends(cluster, monkeypatch):
    """The same for the pool's budget: the slot was committed, no answer came, the node was deferred untouched,
    and its slot stayed in the table for a run lease, holding the pool's max-unavailable for a node nothing
    changes (every other node of the pool waited behind it)."""
    from functions.kube.client import ApiError, KubeApi

    api = cluster.api
    add_auto_nodes(api, NAMES[:1])
    waiting(api, 2)
    replace, cut = KubeApi.replace_lease, []

    def committed_unanswered(self, namespace, lease):
        answer = replace(self, namespace, lease)
        mine = json.loads(((lease.get("metadata") or {}).get("annotations") or {}).get("ack-mig-hook/slots") or "{}")
        if mine and not cut:
            cut.append(lease)
            raise ApiError("no complete answer from the API server within 15s")
        return answer

    monkeypatch.setattr(KubeApi, "replace_lease", committed_unanswered)
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=inventory(names=NAMES[:1]))
    assert cut and transport.requests == [] and result.nodes[0]["outcome"] == "deferred", result.nodes
    assert slots(api) == {}, slots(api)


def _gold_pools():
    """The test pool (``auto-a``: an idle 7g.40gb) and ``np-two`` (``two-a``: an idle 7g.40gb), whose nodes
    carry ``tier=gold``; ``impostor`` labels itself into the test pool with ``tier=gold`` and ACK lists it in
    no pool. Two 3g.20gb pods wait selecting ``tier=gold``: only np-two's nodes may take them."""
    api_nodes = []
    labels = [{"key": "ack-mig-hook/layout", "value": "auto"}]
    pools = [{"nodepool_info": {"nodepool_id": pool, "name": pool},
              "kubernetes_config": {"labels": labels + extra},
              "scaling_group": {"scaling_group_id": "asg-" + pool, "instance_types": ["ecs.ebmgn7.26xlarge"]}}
             for pool, extra in ((POOL, []), ("np-two", [{"key": "tier", "value": "gold"}]))]
    nodes = [{"instance_id": "i-" + n, "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge", "nodepool_id": p,
              "state": "running", "ip_address": ["10.0.1.%d" % i]}
             for i, (n, p) in enumerate((("auto-a", POOL), ("two-a", "np-two")), 1)]
    for name, pool, extra in (("auto-a", POOL, {}), ("two-a", "np-two", {"tier": "gold"}),
                              ("impostor", POOL, {"tier": "gold"})):
        api_nodes.append((name, dict({"alibabacloud.com/nodepool-id": pool, "nvidia.com/mig.config.state": "success",
                                      "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB",
                                      "aliyun.accelerator/nvidia_count": "1"}, **extra)))
    return InventoryLookup.from_dict({"cluster_id": "c-rollout", "nodepools": pools, "nodes": nodes}), api_nodes


def _gold(api):
    lookup, api_nodes = _gold_pools()
    for name, labels in api_nodes:
        api.add_node(name, labels=labels, annotations={"ack-mig-hook/gpu-layouts": json.dumps({"0": [["7g.40gb", 0]]})},
                     capacity={"nvidia.com/mig-7g.40gb": "1"})
    waiting(api, 2)
    with api.lock:
        for i in range(2):
            api.pods[("llm", "serve-%d" % i)]["spec"]["nodeSelector"] = {"tier": "gold"}
    return lookup


def _serve_0_event_changes_two_a(cluster, lookup):
    """A pod event for ``serve-0`` plans np-two, whose node two-a is the one changed."""
    from tests.delivery.test_pod_events import pod_event

    settings = load_settings(dict(cluster.settings_env, ACK_MIG_CLUSTER_ID="c-rollout"))
    transport = PerGpuNodes(cluster.api)
    result = run_event(pod_event("llm", "serve-0", cluster="c-rollout"), settings, inventory=lookup,
                       executor=DeliveryExecutor.from_settings(settings, transport=transport),
                       logger=JsonLogger("OFF"), kube=cluster.kube)
    assert [name for name, _ in transport.requests] == ["two-a"], (result.reason, transport.requests)


def test_a_node_labelling_itself_into_an_earlier_pool_changes_no_one_pool_step(cluster):
    """Which pods an earlier pool counts is read from the nodes ACK lists in it, as the tick's plan reads
    them: a node that labelled itself into the first pool with the pods' label made a step of the second pool
    leave them to the first, which cannot place them (the pods waited for the next full tick)."""
    api = cluster.api
    lookup = _gold(api)
    settings = load_settings(dict(cluster.settings_env))
    transport = PerGpuNodes(api)
    result = run_event(json.dumps({"cluster_id": "c-rollout", "nodepool_id": "np-two"}), settings,
                       inventory=lookup, executor=DeliveryExecutor.from_settings(settings, transport=transport),
                       logger=JsonLogger("OFF"), kube=cluster.kube)
    assert [name for name, _ in transport.requests] == ["two-a"], (result.reason, transport.requests)


def test_a_node_labelling_itself_into_a_pool_does_not_draw_a_pod_event_there(cluster):
    """A pod event chooses its pool from the nodes ACK lists in each, as the tick does: the impostor drew the
    event to the first pool, whose step could not place the pods."""
    api = cluster.api
    lookup = _gold(api)
    _serve_0_event_changes_two_a(cluster, lookup)


def test_a_pod_no_pool_counts_is_given_the_first_pool_its_ack_nodes_or_template_take(cluster, monkeypatch):
    """A pod selecting ``tier=gold`` asks 7g.80gb, which no A100 40GB pool counts: its event names the first
    pool it matches and why that one's plan does not count it, and plans none. The impostor alone puts it
    in the test pool, so the event reads that pool's members from ACK (none takes it) and names np-two,
    whose template takes it: its members are not read (nothing the scheduler says of this pod asks ACK for
    every pool's nodes)."""
    from functions.base.event_result import HandlerResult
    from functions.pipeline import pod_event as pod_event_module
    from tests.delivery.test_pod_events import pod_event

    api = cluster.api
    lookup = _gold(api)
    waiting(api, 1, "7g.80gb")
    with api.lock:
        api.pods[("llm", "serve-0")]["spec"]["nodeSelector"] = {"tier": "gold"}
    asked, planned, real = [], [], lookup.nodes

    def nodes(cluster_id, nodepool_id=None, instance_ids=()):
        asked.append(nodepool_id)
        return real(cluster_id, nodepool_id, instance_ids)

    lookup.nodes = nodes
    monkeypatch.setattr(pod_event_module, "_plan", lambda *args, **kw: planned.append(args[-2])
                        or HandlerResult(trigger="pod-unschedulable", outcome="skip", reason="planned"))
    settings = load_settings(dict(cluster.settings_env, ACK_MIG_CLUSTER_ID="c-rollout"))
    result = run_event(pod_event("llm", "serve-0", cluster="c-rollout"), settings, inventory=lookup,
                       logger=JsonLogger("OFF"), kube=cluster.kube)
    assert result.outcome == "skip" and result.reason.startswith(
        "pod llm/serve-0 waits for auto pool np-two, whose plan does not count it"), result.reason
    assert planned == [] and asked == [POOL], (planned, asked)


def test_a_pod_event_reads_each_auto_pools_ack_nodes_once(cluster):
    """docs/auto-pools.md: a pod event reads ACK's nodes (DescribeClusterNodes) once per auto pool. Its choice
    of pool read every pool's, then its first round read every earlier pool's and its own again: twice as
    many calls on the event's path, each a paged cloud call."""
    api = cluster.api
    lookup = _gold(api)
    asked = []
    real = lookup.nodes

    def nodes(cluster_id, nodepool_id=None, instance_ids=()):
        asked.append(nodepool_id)
        return real(cluster_id, nodepool_id, instance_ids)

    lookup.nodes = nodes
    _serve_0_event_changes_two_a(cluster, lookup)
    assert sorted(asked) == sorted([POOL, "np-two"]), asked


def test_pods_read_again_that_an_earlier_pool_counts_stay_its_demand(cluster):
    """A pod that first shows in the list read again (the later pool changed after the tick's first list) and
    that an earlier auto pool counts is that pool's demand, as every other pod an earlier pool counts: the
    later pool planned it, and repartitioned its GPU for a pod the earlier pool's own plan takes too."""
    api = cluster.api
    add_auto_nodes(api, NAMES[:1])  # np-mig, the earlier pool: auto-a, an idle 7g.40gb
    add_two_a(api)
    waiting(api, 1)
    with api.lock:  # serve-0 selects np-two: that pool's demand alone
        api.pods[("llm", "serve-0")]["spec"]["nodeSelector"] = {"alibabacloud.com/nodepool-id": "np-two"}
    api.leases[("default", "ack-mig-hook-pool-np-two")] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "ack-mig-hook-pool-np-two", "namespace": "default", "resourceVersion": "7", "uid": "u-2",
                     "annotations": {"ack-mig-hook/pool-changed": json.dumps(cluster.now[0])}},
        "spec": {}}

    def arrives(_):  # while the tick waits to read the pods again: a pod either pool could take (np-mig's)
        pod = api.add_pod("llm", "other-0", "", phase="Pending", owner_kind="ReplicaSet",
                          resources={"nvidia.com/mig-4g.20gb": "1"})
        with api.lock:
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    cluster.on_sleep = arrives
    transport = PerGpuNodes(api)
    result = tick(cluster, transport, lookup=two_pools())
    assert cluster.sleeps == [2.0], result.reason
    assert [n for n, _ in transport.requests] == ["two-a"], (result.reason, transport.requests)
    asked = json.dumps(transport.requests[0][1])
    assert "3g.20gb" in asked and "4g.20gb" not in asked, asked
