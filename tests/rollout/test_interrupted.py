"""The function killed at any point of a rollout: the next invocation continues from the node annotation,
never repeats a finished node, and leaves no node cordoned or half-done. Every mutating call (node patch,
eviction, event, the apply on the node) is a kill point in turn."""

import json

import pytest

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from tests.rollout.conftest import NEW


class Killed(BaseException):
    """What FC's timeout or an OOM kill looks like to the code: nothing catches it, nothing cleans up."""


class Killer:
    """Counts mutating calls through the Kubernetes view and the transport; raises Killed after call k. A
    killed process writes nothing more: a write after the kill (a ``finally`` giving a claim back) raises
    Killed before it reaches the API server, as SIGKILL or FC's timeout would have it. Every kind of write the
    function makes is counted: node patches (merge and JSON patch), evictions, Events, Lease creates and
    writes (the pool's, the plan marker's, and the run record's through its ``sibling`` client), the node
    pool tags (``lookup``'s ``set_nodepool_tags``, ModifyClusterNodePool) and the apply on the node."""

    def __init__(self, kube, transport, k, calls=None):
        self.kube, self.transport, self.k = kube, transport, k
        self.calls = [] if calls is None else calls  # shared with a sibling client
        self.name = transport.name

    def _alive(self, what):
        if len(self.calls) >= self.k:
            raise Killed("after the kill: %s" % what)

    def _count(self, what):
        self.calls.append(what)
        if len(self.calls) == self.k:
            raise Killed(what)

    def __getattr__(self, name):  # reads go straight through
        return getattr(self.kube, name)

    def patch_node(self, name, patch):
        self._alive("patch %s" % name)
        out = self.kube.patch_node(name, patch)
        self._count("patch %s %s" % (name, sorted(patch.get("spec", {}).items())))
        return out

    def json_patch_node(self, name, operations):  # the startup taint's removal
        self._alive("json patch %s" % name)
        out = self.kube.json_patch_node(name, operations)
        self._count("json patch %s" % name)
        return out

    def sibling(self, *args, **kwargs):  # the run record's short-deadline client: its writes count too
        return Killer(self.kube.sibling(*args, **kwargs), self.transport, self.k, self.calls)

    def lookup(self, lookup):
        """``lookup`` (a cluster lookup) with its node pool tag writes counted."""
        killer = self

        class Counted:
            def __getattr__(self, name):
                return getattr(lookup, name)

            def set_nodepool_tags(self, cluster_id, nodepool_id, tags):
                killer._alive("tags %s" % nodepool_id)
                lookup.set_nodepool_tags(cluster_id, nodepool_id, tags)
                killer._count("tags %s" % nodepool_id)
        return Counted()

    def evict(self, namespace, name):
        self._alive("evict %s" % name)
        self.kube.evict(namespace, name)
        self._count("evict %s" % name)

    def create_lease(self, namespace, lease):  # the pool's Lease, made by its first reader
        self._alive("create lease")
        out = self.kube.create_lease(namespace, lease)
        self._count("create lease %s" % lease["metadata"]["name"])
        return out

    def replace_lease(self, namespace, lease):  # a slot of the pool's budget taken or given back
        self._alive("lease")
        out = self.kube.replace_lease(namespace, lease)
        notes = lease["metadata"].get("annotations") or {}
        self._count("lease %s" % notes.get("ack-mig-hook/slots") if "ack-mig-hook/slots" in notes
                    else "lease %s" % lease["metadata"]["name"])
        return out

    def create_event(self, event):
        self._alive("event %s" % event["reason"])
        self.kube.create_event(event)
        self._count("event %s" % event["reason"])

    def run(self, targets):
        self._alive("apply")
        out = self.transport.run(targets)
        self._count("apply %s" % ",".join(t.node_name for t in targets))
        return out


class MemoryApi:
    """The same cluster held by functions.kube.nodes.MemoryKube (the snapshot/demo backend), shaped like
    the TLS server for PlayedNodes: the kill matrix runs ~40 invocations, at ~45 ms per TLS request on this
    machine that alone would take half a minute. The TLS server covers the key kill points below."""

    def __init__(self, kube):
        import threading

        self.kube, self.nodes, self.pods, self.lock = kube, kube.nodes, kube.pods, threading.Lock()

    def _update(self, name, change):  # another party's write: a new resourceVersion, as the server's
        import copy

        node = copy.deepcopy(self.nodes[name])
        change(node)
        self.nodes[name] = self.kube._stamp(node)

    def set_capacity(self, name, cap):
        self._update(name, lambda node: node.setdefault("status", {}).__setitem__("allocatable", dict(cap)))

    def label_node(self, name, labels):
        def change(node):
            target = node["metadata"].setdefault("labels", {})
            for key, value in labels.items():
                target.pop(key, None) if value is None else target.__setitem__(key, value)
        self._update(name, change)


def memory_cluster(tmp_path, monkeypatch):
    from functions.rollout import run as rollout
    from functions.kube.nodes import MemoryKube
    from tests.rollout.conftest import NAMES, OLD, Cluster, PlayedNodes, capacity, node_labels

    kube = MemoryKube({n: {"metadata": {"name": n, "labels": node_labels(), "annotations": {}}, "spec": {},
                           "status": {"allocatable": capacity(OLD)}} for n in NAMES})
    kube.add_pod("team", "train-0", "node-a", gpus=1, owner="ReplicaSet")
    c = Cluster.__new__(Cluster)
    c.api, c.kube = MemoryApi(kube), kube
    c.transport = PlayedNodes(c.api)
    c.now, c.sleeps, c.on_sleep, c.settings_env = [1000.0], [], None, {"ACK_MIG_STARTUP_TAINT": "none"}
    monkeypatch.setattr(rollout, "clock", c.clock)
    monkeypatch.setattr(rollout, "sleep", c.sleep)
    return c


def run_killed(c, k):
    played = c.transport
    killer = Killer(c.kube, played, k)
    c.transport = killer
    try:
        c.run(kube=killer)
    except Killed:
        return killer.calls[-1], played
    finally:
        c.transport = played
    return None, played


def check_resumed(c, where, played):
    record = c.annotation("node-a")
    if record is not None and record["step"] in ("cordoned", "drained", "applying", "applied"):
        # The killed run's record holds the node until that run's deadline (FC could still be running it,
        # or a second invocation overlap it): another invocation before then leaves node-a alone...
        sent = played.seen.count("node-a")
        early = c.run()
        a = next(n for n in early.nodes if n["node_name"] == "node-a")
        assert a["outcome"] == "deferred" and "left to that run" in a["reason"], (where, a)
        assert played.seen.count("node-a") == sent and c.annotation("node-a") == record, where
        assert "node-b" not in played.seen, where  # node-a still takes the pool's one slot
        # ...and once the deadline has passed (FC ends a run at its timeout), the next one resumes it.
        c.now[0] = record["expires"] + 1
    again = c.run()
    a = next(n for n in again.nodes if n["node_name"] == "node-a")
    # (the slot goes back before the node's last record, the record before its Event: a kill after the record
    # leaves a finished node, one after the slot's release a node the next run resumes at `applied`)
    finished = where in ("patch node-a [('unschedulable', None)]", "event MigRolloutDone")
    assert a["outcome"] == ("skipped" if finished else "partitioned"), (where, a)
    assert c.annotation("node-a")["step"] == "done", where
    assert not c.unschedulable("node-a"), where
    # no slot is left in the pool's Lease: node-a's went back before its last record, or the run that took the
    # node over gave back the killed run's (checked before node-b's slot would drop a run-out one)
    leases = getattr(c.api, "leases", None)
    table = lease_slots(c.api if leases is not None else c.kube, LABELLED_LEASE)
    assert table == {}, (where, table)
    # the autoscaler's opt-out, set with the cordon, goes with the uncordon whichever run finishes the node
    notes = c.api.nodes["node-a"]["metadata"]["annotations"]
    assert "cluster-autoscaler.kubernetes.io/scale-down-disabled" not in notes, where
    assert c.api.nodes["node-a"]["metadata"]["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == NEW
    assert ("team", "train-0") not in c.api.pods
    # the apply is sent again only when the kill fell between sending it and recording it
    applies = played.seen.count("node-a")
    assert applies == (2 if where.startswith("apply") else 1), (where, played.seen)
    assert "node-c" not in played.seen, where
    # a finished node is never taken again: the next wave is node-b
    if not finished:
        assert "node-b" not in played.seen, where
        c.run()
    assert played.seen.count("node-a") == applies and played.seen[-1] == "node-b", where


def test_killed_after_every_mutating_call_the_next_run_finishes_the_node_once(tmp_path, monkeypatch):
    points = []
    for k in range(1, 100):
        c = memory_cluster(tmp_path, monkeypatch)
        where, played = run_killed(c, k)
        if where is None:  # the whole first wave ran: every call has been a kill point
            break
        points.append(where)
        check_resumed(c, where, played)
    steps = " | ".join(points)
    for expected in ('lease {"node-a"', "lease {}", "[('unschedulable', True)]", "event MigRolloutCordon",
                     "evict train-0", "event MigRolloutDrain", "apply node-a", "[('unschedulable', None)]",
                     "event MigRolloutDone"):
        assert expected in steps, (expected, steps)
    assert len(points) >= 10  # cordon, its event, eviction, its event, drained, applying, apply, applied, done, event


@pytest.mark.parametrize("where", ["[('unschedulable', True)]", "evict train-0", "apply node-a"])
def test_killed_against_the_tls_api_server(cluster, where):
    from tests.rollout.kills import cleared

    cluster.add_nodes()
    cluster.api.add_pod("team", "train-0", "node-a", gpus=1, owner_kind="ReplicaSet")
    probe = Killer(cluster.kube, cluster.transport, 10 ** 6)
    cluster.transport = probe
    cluster.run(kube=probe)
    k = next(i for i, call in enumerate(probe.calls, 1) if where in call)
    cluster.transport = probe.transport
    cleared(cluster)  # the probe's world gone, its clock back: the killed run replays it call for call
    cluster.add_nodes()
    cluster.api.add_pod("team", "train-0", "node-a", gpus=1, owner_kind="ReplicaSet")
    killed_at, played = run_killed(cluster, k)
    assert where in killed_at
    check_resumed(cluster, killed_at, played)


def strand(api, names, slots=False):
    """What a run that stopped mid-change leaves on each of ``names`` (its lease long over): the record at
    ``applying`` of a change without drain, and the autoscaler's opt-out it set; with ``slots``, its slot of
    the pool's budget on each, run out, in the pool's Lease."""
    from functions.decision import budget as pb, waves as rp
    from tests.rollout.test_auto_rollout import LEASE

    record = json.dumps({"target": "per-gpu=3g.20gb-3g.20gb", "step": "applying", "owner": "x", "expires": 1.0,
                         "drain": False, "autoscaler": True})
    for name in names:
        api.nodes[name]["metadata"]["annotations"].update({rp.PROGRESS_ANNOTATION: record,
                                                           rp.SCALE_DOWN_DISABLED: "true"})
    if slots:
        table = pb.write_slots({n: pb.Slot("x", 1.0) for n in names}, 1.0, 1.0)
        with api.lock:
            api.leases[LEASE] = api._stamp({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                            "metadata": {"name": LEASE[1], "namespace": LEASE[0], "uid": "lease-x",
                                                         "annotations": {pb.SLOTS_ANNOTATION: table}},
                                            "spec": {}})


def _killed_auto_tick(cluster, kill_at):
    """One auto node, two pods waiting, a tick killed at its ``kill_at``-th write (see Killer)."""
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from tests.rollout.test_auto_rollout import NAMES, TICK, PerGpuNodes, add_auto_nodes, inventory, waiting

    add_auto_nodes(cluster.api, NAMES[:1])
    waiting(cluster.api, 2)
    killer = Killer(cluster.kube, PerGpuNodes(cluster.api), kill_at)
    settings = load_settings(dict(cluster.settings_env))
    with pytest.raises(Killed):
        run_event(TICK, settings, inventory=inventory(), logger=JsonLogger("OFF"), kube=killer,
                  executor=DeliveryExecutor.from_settings(settings, transport=killer))
    return killer, NAMES[0]


@pytest.mark.parametrize("kill_at,pods_left", [(6, False), (6, True), (7, False)])
def test_an_auto_change_killed_after_its_apply_ends_recorded_and_scalable(cluster, kill_at, pods_left):
    """A tick killed right after the node's apply left the record `applying` and the autoscaler's opt-out
    on the node: no later plan names a node that already holds what the pods want, so nothing ended them,
    `status` said pending for good and the autoscaler could never remove the node. Once the killed run's
    lease is over, the next tick ends the record (pods waiting or not) and lifts the opt-out it set. The
    killed run's slot of the pool's budget, run out by then, goes back with the record: it counted for
    nothing, but the pool's Lease showed the dead run holding the node until another node took a slot."""
    from functions.decision import waves as rp
    from tests.rollout.test_auto_rollout import PerGpuNodes, tick

    killer, name = _killed_auto_tick(cluster, kill_at)
    assert killer.calls[5] == "apply %s" % name  # the 6th write is the apply, the 7th the record 'applied'
    assert cluster.annotation(name)["step"] == (rp.APPLYING, rp.APPLIED)[kill_at - 6]
    assert cluster.api.nodes[name]["metadata"]["annotations"].get(rp.SCALE_DOWN_DISABLED) == "true"
    killed_run = cluster.annotation(name)["owner"]
    assert {n: s.owner for n, s in lease_slots(cluster.api).items()} == {name: killed_run}
    if not pods_left:
        cluster.api.pods.clear()  # they bound to the instances the apply made
    tick(cluster, PerGpuNodes(cluster.api))  # within the killed run's lease: still its own
    assert cluster.annotation(name)["step"] == (rp.APPLYING, rp.APPLIED)[kill_at - 6]
    assert set(lease_slots(cluster.api)) == {name}  # live: that run may still be at work
    cluster.now[0] += 2 * 3600
    result = tick(cluster, PerGpuNodes(cluster.api))
    record = cluster.annotation(name)
    assert record["step"] == rp.DONE and "stopped" in record["reason"], (record, result.reason)
    assert rp.SCALE_DOWN_DISABLED not in cluster.api.nodes[name]["metadata"]["annotations"]
    assert lease_slots(cluster.api) == {}, lease_slots(cluster.api)


LABELLED_LEASE = ("default", "ack-mig-hook-pool-np-mig")


def lease_slots(api, key=None):
    """The pool Lease's slot table as stored, expired slots included (the auto pool's Lease by default)."""
    from functions.decision import budget as pb
    from tests.rollout.test_auto_rollout import LEASE

    lease = api.leases.get(key or LEASE)
    return pb.read_slots((lease["metadata"].get("annotations") or {}).get(pb.SLOTS_ANNOTATION)) if lease else {}


def test_a_stranded_auto_record_on_a_node_ack_does_not_list_in_the_pool_is_left_alone(cluster):
    """The function writes only to nodes it has proven are the pool's: a node that labels itself into the
    pool with a forged stale record keeps it (and an opt-out it says this hook set)."""
    from functions.decision import waves as rp
    from tests.rollout.test_auto_rollout import NAMES, PerGpuNodes, add_auto_nodes, inventory, tick

    add_auto_nodes(cluster.api, NAMES[:2])
    strand(cluster.api, NAMES[:2])
    tick(cluster, PerGpuNodes(cluster.api), lookup=inventory(names=NAMES[:1]))
    assert cluster.annotation(NAMES[0])["step"] == rp.DONE
    assert cluster.annotation(NAMES[1])["step"] == rp.APPLYING
    assert cluster.api.nodes[NAMES[1]]["metadata"]["annotations"][rp.SCALE_DOWN_DISABLED] == "true"


@pytest.mark.parametrize("pods", [0, 2], ids=["idle", "planning"])
def test_a_stranded_auto_record_of_a_paused_pool_waits_until_it_resumes(cluster, pods):
    """docs/operations.md: a paused pool's stranded records wait until it resumes (a pause starts nothing, and
    ending a record lifts the node's scale-down opt-out); the first tick after the pause ends them."""
    from functions.decision import waves as rp
    from tests.rollout.test_auto_rollout import NAMES, PerGpuNodes, add_auto_nodes, inventory, tick, waiting

    add_auto_nodes(cluster.api, NAMES[:1])
    waiting(cluster.api, pods)
    strand(cluster.api, NAMES[:1])
    tick(cluster, PerGpuNodes(cluster.api), lookup=inventory(pool_labels={"ack-mig-hook/paused": "true"},
                                                             names=NAMES[:1]))
    assert cluster.annotation(NAMES[0])["step"] == rp.APPLYING
    assert cluster.api.nodes[NAMES[0]]["metadata"]["annotations"][rp.SCALE_DOWN_DISABLED] == "true"
    cluster.now[0] += 60
    tick(cluster, PerGpuNodes(cluster.api), lookup=inventory(names=NAMES[:1]))
    assert cluster.annotation(NAMES[0])["step"] == rp.DONE
    assert rp.SCALE_DOWN_DISABLED not in cluster.api.nodes[NAMES[0]]["metadata"]["annotations"]


@pytest.mark.parametrize("pods", [0, 2], ids=["idle", "planning"])
def test_a_dry_run_tick_says_it_would_end_a_stranded_record_and_writes_nothing(cluster, pods):
    """A dry run writes nothing, so its log must not say a stranded record was ended: it said "a later tick
    ended the record" while the node still read `applying` (and `status` pending)."""
    import io

    from functions.decision import waves as rp
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from tests.rollout.test_auto_rollout import NAMES, TICK, PerGpuNodes, add_auto_nodes, inventory, tick, waiting

    add_auto_nodes(cluster.api, NAMES[:1])
    waiting(cluster.api, pods)
    strand(cluster.api, NAMES[:1], slots=True)
    settings, out = load_settings(dict(cluster.settings_env)), io.StringIO()
    run_event(TICK, settings, inventory=inventory(), dry_run=True, logger=JsonLogger("INFO", stream=out),
              kube=cluster.kube,
              executor=DeliveryExecutor.from_settings(settings, transport=PerGpuNodes(cluster.api)))
    said = [json.loads(line)["reason"] for line in out.getvalue().splitlines() if "invocation x stopped" in line]
    assert len(said) == 1 and said[0].startswith("node %s: dry run: would end the record" % NAMES[0]), said
    assert "would end the record" in said[0] and "give back the budget slot of invocation x" in said[0], said
    assert cluster.annotation(NAMES[0])["step"] == rp.APPLYING
    assert cluster.api.nodes[NAMES[0]]["metadata"]["annotations"][rp.SCALE_DOWN_DISABLED] == "true"
    assert set(lease_slots(cluster.api)) == {NAMES[0]}
    tick(cluster, PerGpuNodes(cluster.api))  # the same tick, not a dry run: the record ends, the slot goes back
    assert cluster.annotation(NAMES[0])["step"] == rp.DONE and lease_slots(cluster.api) == {}


# ---- the auto pool's kill matrix: a tick that changes one running node and turns on a fresh one ----

AUTO_FINAL = ("done", "failed", "destroy-required")


def _auto_world(cluster):
    """The same TLS API server, emptied and laid out again: auto-a (a running node, an idle 7g.40gb), auto-b
    (fresh: the autoscaler just brought it, no MIG yet), auto-x (the pool's label, but ACK does not list it:
    a forged stale record and the opt-out it says the hook set), four 3g.20gb pods waiting: auto-a serves
    two, a fresh node the other two. Returns the lookup (pool tags writable) and auto-x as it was."""
    import copy

    from tests.rollout.conftest import CLUSTER, POOL
    from tests.rollout.test_auto_overlap import Writable
    from tests.rollout.kills import cleared
    from tests.rollout.test_auto_rollout import add_auto_nodes, waiting
    from functions.decision import waves as rp

    api = cluster.api
    cleared(cluster, seen=False)  # (the matrix's node transport is its own: FreshAndPerGpu, made per point)
    add_auto_nodes(api, ["auto-a"])
    api.add_node("auto-b", labels={"alibabacloud.com/nodepool-id": POOL,
                                   "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB",
                                   "aliyun.accelerator/nvidia_count": "1"}, capacity={"nvidia.com/gpu": "1"})
    stale = json.dumps({"target": "per-gpu=3g.20gb-3g.20gb", "step": "applying", "owner": "x", "expires": 1.0,
                        "drain": False, "autoscaler": True})
    api.add_node("auto-x", labels={"alibabacloud.com/nodepool-id": POOL},
                 annotations={rp.PROGRESS_ANNOTATION: stale, rp.SCALE_DOWN_DISABLED: "true"})
    waiting(api, 4)
    lookup = Writable.from_dict({
        "cluster_id": CLUSTER,
        "nodepools": [{"nodepool_info": {"nodepool_id": POOL, "name": "auto"},
                       "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}]},
                       "auto_scaling": {"enable": True},
                       "scaling_group": {"scaling_group_id": "asg-1", "instance_types": ["ecs.ebmgn7.26xlarge"]}}],
        "nodes": [{"instance_id": "i-%s" % n, "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge",
                   "nodepool_id": POOL, "state": "running", "ip_address": ["10.0.1.%d" % i]}
                  for i, n in enumerate(["auto-a", "auto-b"], 1)]})
    return lookup, copy.deepcopy(api.nodes["auto-x"])


def _auto_tick(cluster, lookup, transport, k=10 ** 6, event=None):
    """One auto pool tick (or ``event``) as FC runs it (the run record written at its end), every write
    through a Killer."""
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from tests.rollout.test_auto_rollout import TICK

    killer = Killer(cluster.kube, transport, k)
    settings = load_settings(dict(cluster.settings_env, ACK_MIG_AUTOSCALER_TAGS="on"))
    try:
        run_event(event or TICK, settings, inventory=killer.lookup(lookup), logger=JsonLogger("OFF"), kube=killer,
                  executor=DeliveryExecutor.from_settings(settings, transport=killer), record=True)
    except Killed:
        return killer.calls, True
    return killer.calls, False


def _end_state(cluster, lookup):
    from tests.rollout.conftest import CLUSTER

    nodes = {n: (o["metadata"].get("annotations", {}).get("ack-mig-hook/gpu-layouts"),
                 o["metadata"]["labels"].get("nvidia.com/mig.config.state"), o["status"].get("allocatable"))
             for n, o in cluster.api.nodes.items()}
    (pool,) = lookup.nodepools(CLUSTER)
    return nodes, dict(pool.tags)


def check_auto_converged(cluster, lookup, transport, stranger, where):
    """The one invariant of an auto pool after any kill and the ticks that follow it until quiet."""
    from functions.decision import budget as pb, claim_rules as pc, coalesce as co, waves as rp
    from tests.rollout.test_auto_rollout import LEASE

    api, now = cluster.api, cluster.now[0]
    for name in ("auto-a", "auto-b"):
        record = cluster.annotation(name)
        assert record is None or record["step"] in AUTO_FINAL, (where, name, record)
        # no run holds a node now: no scale-down opt-out of the hook's is left on one
        assert rp.SCALE_DOWN_DISABLED not in api.nodes[name]["metadata"].get("annotations", {}), (where, name)
    for (namespace, lease_name), lease in api.leases.items():
        notes = lease["metadata"].get("annotations") or {}
        # every record is final: no slot is left, live or run out (one run out counted for nothing, but the
        # Lease showed the dead run holding the node until another node took a slot)
        left = pb.read_slots(notes.get(pb.SLOTS_ANNOTATION))
        assert not left, (where, lease_name, "slots left", left)
        claim = pc.read_claim(notes.get(pc.PLANNING_ANNOTATION))
        assert claim is None or claim.expires <= now, (where, lease_name, "planning claim", claim)
        marker = co.read_marker(notes.get(co.MARKER_ANNOTATION), now, 10 ** 6)
        assert not marker.holder or marker.until <= now, (where, lease_name, "plan marker", marker)
    assert LEASE in api.leases, where
    # the plan's end state: each waiting pod's instance exists (two 3g.20gb on each node)
    total = sum(int((api.nodes[n]["status"].get("allocatable") or {}).get("nvidia.com/mig-3g.20gb", 0))
                for n in ("auto-a", "auto-b"))
    assert total >= 4, (where, {n: api.nodes[n]["status"].get("allocatable") for n in api.nodes})
    # no node applied more than needed: each once, whichever run sent it
    sent = [n for n, _ in transport.requests]
    assert sorted(sent) == ["auto-a", "auto-b"], (where, sent)
    # nothing written to a node ACK does not list in the pool
    assert api.nodes["auto-x"] == stranger, where


def _same(call):  # a write's label without the invocation's id
    import re

    return re.sub(r'"owner": "[0-9a-f]+"', '"owner": ...', call)


def _until_quiet(cluster, lookup, transport, where, ticks=4):
    """Ticks a minute apart until one changes nothing (a rerun on nodes that are already right): no node
    written, applied or given an Event, no tag, no slot; its planning claim and the run record only. At most
    ``ticks``."""
    import copy

    from functions.decision import budget as pb
    from tests.rollout.test_auto_rollout import LEASE

    def state():
        lease = cluster.api.leases.get(LEASE) or {"metadata": {}}
        return (copy.deepcopy(cluster.api.nodes), len(cluster.api.events),
                (lease["metadata"].get("annotations") or {}).get(pb.SLOTS_ANNOTATION))

    for _ in range(ticks):
        before = state()
        calls = _auto_tick(cluster, lookup, transport)[0]
        writes = [c for c in calls if c.startswith(("apply", "tags", "patch", "json patch", "event"))]
        cluster.now[0] += 60
        if not writes and state() == before:
            return
    raise AssertionError((where, "no quiet tick", calls))


def _marker_held(cluster):
    """The pool's plan marker, when an invocation is still named its holder (None when it was let go)."""
    from functions.decision import coalesce as co

    for lease in cluster.api.leases.values():
        marker = co.read_marker(((lease["metadata"].get("annotations") or {}).get(co.MARKER_ANNOTATION)),
                                cluster.now[0], 10 ** 6)
        if marker.holder:
            return marker
    return None


def _claimed_elsewhere(cluster):
    """:func:`_auto_world` with another run's planning claim on the pool, ending at 1300 s (five minutes on)."""
    from functions.decision import claim_rules as pc
    from tests.rollout.test_auto_rollout import LEASE

    world = _auto_world(cluster)
    api = cluster.api
    with api.lock:
        api.leases[LEASE] = api._stamp({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE[1], "namespace": LEASE[0], "uid": "lease-dead-run",
                         "annotations": {pc.PLANNING_ANNOTATION: pc.write_claim(pc.Claim("dead-run", 1300.0))}},
            "spec": {}})
    return world


def _noted(cluster):
    """The planning claim the pool's plan marker notes as waited out ({} for none)."""
    from functions.decision import coalesce as co

    for lease in cluster.api.leases.values():
        text = (lease["metadata"].get("annotations") or {}).get(co.MARKER_ANNOTATION)
        if text:
            return co.read_marker(text, cluster.now[0], 10 ** 6).waited
    return {}


@pytest.mark.parametrize("trigger", ["tick", "pod event", "pod event, round not begun", "pod event, end not marked",
                                     "pod event, renewed", "pod event, claim waited out"])
def test_an_auto_tick_or_pod_event_killed_after_every_write_converges(cluster, trigger, monkeypatch):
    """etcd's robustness idea for the auto pool's tick and a pod event's round: a failpoint after every write
    (the plan marker, the planning claim, the pool tags, the fresh node's MIG turn-on, the node's record, its
    Events, the budget slot, the apply, the claim's release with the change marks, the marker's round end,
    the run record); a killed run writes nothing more. After the killed run's leases, ticks run until one
    changes nothing, and one checker holds: records final, no opt-out, slot, claim or marker left held, the
    pods' instances made, each node applied once, the stranger untouched, and the end state (layouts, pool
    tags) that of a run never killed. The pod event's marker failures (a round's beginning or end the marker
    would not take: 24 conflicts under a burst) are run the same way: their letting go and their round once
    more are kill points too, and a run never killed leaves no holder named in the marker. So are the holder's
    renewal (a thread in the function, held by tests/conftest.py: here one renewal as the holder starts them)
    and the note of a planning claim waited out (another run's claim on the pool, ended five minutes on: the
    event gives up on it at once, lets go noting it, and the timers after plan the pods)."""
    from node_bootstrap.kube import KubeError

    from functions.rollout.plan_marker import PlanMarker
    from tests.delivery.test_pod_events import pod_event
    from tests.rollout.conftest import CLUSTER, POOL
    from tests.rollout.test_auto_overlap import FreshAndPerGpu

    def conflicts(*args, **kwargs):
        raise KubeError("the plan marker kept changing under 24 writes", 409)

    if trigger.endswith("round not begun"):
        monkeypatch.setattr(PlanMarker, "begin_round", conflicts)
    if trigger.endswith("end not marked"):
        monkeypatch.setattr(PlanMarker, "end_round", conflicts)
    if trigger.endswith("renewed"):
        from functions.rollout.plan_marker import Renewal

        start = Renewal.start

        def renewed_once(self):  # one renewal, where its write falls in the matrix's order every run
            self.marker.renew(self.pool_id)
            return start(self)
        monkeypatch.setattr(Renewal, "start", renewed_once)
    if trigger.endswith("waited out"):
        from functions.pipeline import pod_event as pod_event_module

        monkeypatch.setattr(pod_event_module, "CLAIM_WAIT_S", 0.0)  # gives up at its first look
    event = pod_event("llm", "serve-0", cluster=CLUSTER) if trigger.startswith("pod event") else None
    world = (lambda: _claimed_elsewhere(cluster)) if trigger.endswith("waited out") else (lambda: _auto_world(cluster))
    lookup, stranger = world()
    transport = FreshAndPerGpu(cluster.api)
    del cluster.api.requests[:]
    calls, killed = _auto_tick(cluster, lookup, transport, event=event)
    assert not killed
    if trigger.endswith("waited out"):
        assert _noted(cluster) == {"owner": "dead-run", "until": 1300.0}, calls
        assert calls == ["create lease ack-mig-hook-plan-%s" % POOL] + ["lease ack-mig-hook-plan-%s" % POOL] * 3 + [
            "create lease ack-mig-hook-last-run", "lease ack-mig-hook-last-run"], calls
    if trigger.endswith("renewed"):
        assert sum(1 for c in calls if c == "lease ack-mig-hook-plan-%s" % POOL) == 4, calls  # ask, renewal, round, end
    assert _marker_held(cluster) is None, (trigger, _marker_held(cluster))  # let go at once, not at its lease's end
    # every write the API server took was a kill point: none went round the Killer (a 409 changed nothing)
    sent = ["%s %s" % (r.method, r.path) for r in cluster.api.requests if r.method != "GET" and r.status < 400]
    assert len(sent) == len([c for c in calls if not c.startswith(("apply", "tags"))]), (sent, calls)
    cluster.now[0] += 600
    _until_quiet(cluster, lookup, transport, "never killed")
    check_auto_converged(cluster, lookup, transport, stranger, "never killed")
    reference = _end_state(cluster, lookup)
    kinds = " | ".join(calls)
    for kind in ("create lease ack-mig-hook-pool-", "tags ", "apply auto-b", "apply auto-a", "patch auto-a",
                 "event MigRolloutNoDrain", "event MigRolloutDone", "lease ack-mig-hook-last-run"):
        # (the event that gives up changes no node: its writes are listed above)
        assert kind in kinds or trigger.endswith("waited out"), (kind, calls)
    points = []
    for k in range(1, len(calls) + 1):
        lookup, stranger = world()
        transport = FreshAndPerGpu(cluster.api)
        done, killed = _auto_tick(cluster, lookup, transport, k, event)
        assert killed and _same(done[-1]) == _same(calls[k - 1]), (k, done, calls)
        where = "killed after write %d (%s)" % (k, done[-1])
        points.append(where)
        cluster.now[0] += 600  # the next timer, within the killed run's leases: it must not change a node twice
        _auto_tick(cluster, lookup, transport)
        assert sorted(n for n, _ in transport.requests) in (["auto-a", "auto-b"], ["auto-b"], []), where
        cluster.now[0] += 2 * 3600  # past the killed run's leases: FC has ended it
        _until_quiet(cluster, lookup, transport, where)
        check_auto_converged(cluster, lookup, transport, stranger, where)
        assert _end_state(cluster, lookup) == reference, where
    assert len(points) >= (6 if trigger.endswith("waited out") else 12), points


@pytest.mark.parametrize("pods", [0, 2], ids=["idle", "planning"])
def test_a_stranded_record_whose_node_refuses_the_write_fails_alone(cluster, pods):
    """One node whose patch the API server refuses for good (a 422: its kubelet filled the node's annotations to
    the 256 KiB limit, or an admission webhook denies it) keeps its record, said in one line; the pool's other
    stranded records still end and the tick goes on. It ended every tick of every auto pool in `retry`, before
    any other record ended and before the pool tags were synced."""
    from functions.decision import waves as rp
    from tests.rollout.test_auto_rollout import NAMES, PerGpuNodes, add_auto_nodes, inventory, tick, waiting

    add_auto_nodes(cluster.api, NAMES[:2])
    waiting(cluster.api, pods)
    strand(cluster.api, NAMES[:2])
    cluster.api.break_next(times=50, status=422, method="PATCH", path="/api/v1/nodes/%s" % NAMES[0])
    result = tick(cluster, PerGpuNodes(cluster.api), lookup=inventory(names=NAMES[:2]))
    assert result.outcome != "retry", result.reason
    assert cluster.annotation(NAMES[0])["step"] == rp.APPLYING
    assert cluster.annotation(NAMES[1])["step"] == rp.DONE
    assert rp.SCALE_DOWN_DISABLED not in cluster.api.nodes[NAMES[1]]["metadata"]["annotations"]


@pytest.mark.parametrize("where", ["[('unschedulable', True)]", "evict train-0", "apply node-a"])
def test_a_resumed_node_takes_the_stopped_runs_slot_out_of_the_lease(cluster, where):
    """A labelled pool whose only changed node was taken over from a killed run: the run that resumes it
    drains and applies under the record (which counts the node), takes no slot of its own, and the killed
    run's slot, run out, stayed in the pool's Lease for good (no other node of the pool took a slot after it).
    The run that takes the node over gives that run's run-out slot back."""
    from tests.rollout.conftest import snapshot
    from tests.rollout.kills import cleared

    one = snapshot(names=["node-a"])
    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "train-0", "node-a", gpus=1, owner_kind="ReplicaSet")
    played = cluster.transport
    cluster.transport = probe = Killer(cluster.kube, played, 10 ** 6)
    cluster.run(inventory=one, kube=probe)
    k = next(i for i, call in enumerate(probe.calls, 1) if where in call)
    cluster.transport = played
    cleared(cluster)
    cluster.add_nodes(["node-a"])
    cluster.api.add_pod("team", "train-0", "node-a", gpus=1, owner_kind="ReplicaSet")
    cluster.transport = killer = Killer(cluster.kube, played, k)
    with pytest.raises(Killed):
        cluster.run(inventory=one, kube=killer)
    assert killer.calls[-1] == probe.calls[k - 1], (killer.calls, probe.calls)  # killed where it was meant to be
    cluster.transport = played
    killed_run = cluster.annotation("node-a")["owner"]
    assert {n: s.owner for n, s in lease_slots(cluster.api, LABELLED_LEASE).items()} == {"node-a": killed_run}
    cluster.now[0] = cluster.annotation("node-a")["expires"] + 1
    result = cluster.run(inventory=one)
    assert [n["outcome"] for n in result.nodes] == ["partitioned"], result.nodes
    assert lease_slots(cluster.api, LABELLED_LEASE) == {}, lease_slots(cluster.api, LABELLED_LEASE)


@pytest.mark.parametrize("after", ["apply node-a", "record applied"])
def test_a_run_killed_before_it_restarts_the_gpu_daemonset_pods_leaves_them_to_the_next(cluster, after):
    """A GPU DaemonSet pod (dcgm-exporter) holds instances the apply destroys; the run restarts it after the
    apply, having recorded ``applied``. Killed after that record, before the eviction, the next run resumed the
    node at its capacity wait and never restarted the pod: it kept the destroyed instances for good. The run
    that resumes a node past its apply restarts them (killed after the apply itself, the re-apply does)."""
    from tests.rollout.conftest import snapshot
    from tests.rollout.kills import cleared

    one = snapshot(names=["node-a"])
    played = cluster.transport

    def world():
        cluster.transport = played
        cleared(cluster)
        cluster.add_nodes(["node-a"])
        cluster.api.add_pod("gpu-system", "dcgm-exporter-a", "node-a", gpus=1, owner_kind="DaemonSet")

    world()
    cluster.transport = probe = Killer(cluster.kube, played, 10 ** 6)
    cluster.run(inventory=one, kube=probe)
    calls = probe.calls
    at = calls.index("apply node-a") + (1 if after == "apply node-a" else 2)
    assert calls[at - 1].startswith("patch node-a") or after == "apply node-a", calls
    world()
    cluster.transport = killer = Killer(cluster.kube, played, at)
    with pytest.raises(Killed):
        cluster.run(inventory=one, kube=killer)
    assert killer.calls[-1] == calls[at - 1], (killer.calls, calls)  # killed where it was meant to be
    assert ("gpu-system", "dcgm-exporter-a") in cluster.api.pods
    cluster.transport = played
    cluster.now[0] = cluster.annotation("node-a")["expires"] + 1
    result = cluster.run(inventory=one)
    assert [n["outcome"] for n in result.nodes] in (["partitioned"], ["unchanged"]), result.nodes
    assert ("gpu-system", "dcgm-exporter-a") not in cluster.api.pods, result.nodes[0]["reason"]
    assert "GPU DaemonSet pods restarted: gpu-system/dcgm-exporter-a" in result.nodes[0]["reason"]
    assert not cluster.unschedulable("node-a")
