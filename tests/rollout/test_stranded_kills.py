"""Kill matrices for the writes that end what a stopped run left behind (tests/rollout/test_interrupted.py
kills the first run only, so these writes were never a kill point): an auto tick ending stranded records
and giving their run-out slots back, and a labelled run taking a stopped run's node over and giving that
run's slot back. Each run is killed after each of its writes in turn (the Killer counts every write kind);
the runs after it, past the killed run's lease, must leave every record final and no slot, opt-out or cordon
behind."""

import pytest

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from tests.rollout.kills import cleared
from tests.rollout.test_interrupted import LABELLED_LEASE, Killed, Killer, lease_slots, strand

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

FINAL = ("done", "failed", "destroy-required")


def _stranded_world(cluster, pods):
    """Two auto nodes a stopped run left `applying` (its opt-out on each, its run-out slot on each in the
    pool's Lease), ``pods`` pods waiting."""
    from tests.rollout.test_auto_rollout import NAMES, add_auto_nodes, waiting

    api = cluster.api
    cleared(cluster, seen=False)
    add_auto_nodes(api, NAMES[:2])
    waiting(api, pods)
    strand(api, NAMES[:2], slots=True)


def _tick(cluster, k=10 ** 6):
    """One auto tick, every write through a Killer that kills after the ``k``-th: (its writes, killed)."""
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from tests.rollout.test_auto_rollout import NAMES, TICK, PerGpuNodes, inventory

    killer = Killer(cluster.kube, PerGpuNodes(cluster.api), k)
    settings = load_settings(dict(cluster.settings_env))
    try:
        run_event(TICK, settings, inventory=killer.lookup(inventory(names=NAMES[:2])), logger=JsonLogger("OFF"),
                  kube=killer, executor=DeliveryExecutor.from_settings(settings, transport=killer))
    except Killed:
        return killer.calls, True
    return killer.calls, False


def _check_auto(cluster, where):
    from functions.decision import waves as rp
    from tests.rollout.test_auto_rollout import NAMES

    for name in NAMES[:2]:
        record = cluster.annotation(name)
        assert record is not None and record["step"] in FINAL, (where, name, record)
        assert rp.SCALE_DOWN_DISABLED not in cluster.api.nodes[name]["metadata"]["annotations"], (where, name)
    # every record is final: no slot is left, run out or not (the Lease would show a dead run holding a node
    # whose record says done, and for a pool whose nodes all rest, for good)
    assert lease_slots(cluster.api) == {}, (where, lease_slots(cluster.api))


@pytest.mark.parametrize("pods", [0, 2], ids=["idle", "planning"])
def test_a_tick_killed_while_it_ends_stranded_records_converges(cluster, pods):
    _stranded_world(cluster, pods)
    calls, killed = _tick(cluster)
    assert not killed
    _check_auto(cluster, "never killed")
    steps = " | ".join(calls)
    assert "patch auto-a" in steps and "lease {" in steps, calls  # the record's end and the slot's release
    for k in range(1, len(calls) + 1):
        _stranded_world(cluster, pods)
        done, killed = _tick(cluster, k)
        assert killed, (k, calls)
        where = "killed after write %d (%s)" % (k, done[-1])
        cluster.now[0] += 2 * 3600  # past the killed run's lease
        for _ in range(3):
            _tick(cluster)
            cluster.now[0] += 60
        _check_auto(cluster, where)


def _labelled_world(cluster):
    """A labelled pool whose one node (its last: no other node takes a slot after it) holds a pod to evict."""
    api = cluster.api
    cleared(cluster, seen=False)
    cluster.add_nodes(["node-a"])
    api.add_pod("team", "train-0", "node-a", gpus=1, owner_kind="ReplicaSet")


def _labelled_run(cluster, played, k=10 ** 6):
    """One run of the one-node pool with every write through a Killer: (its writes, killed)."""
    from tests.rollout.conftest import snapshot

    cluster.transport = killer = Killer(cluster.kube, played, k)
    try:
        cluster.run(inventory=snapshot(names=["node-a"]), kube=killer)
    except Killed:
        return killer.calls, True
    finally:
        cluster.transport = played
    return killer.calls, False


def _past_the_record(cluster):
    record = cluster.annotation("node-a")
    if record is not None and record["step"] not in FINAL:
        cluster.now[0] = max(cluster.now[0], record["expires"]) + 1


@pytest.mark.parametrize("first", ["[('unschedulable', True)]", "evict train-0", "apply node-a"])
def test_a_run_killed_while_it_takes_a_stopped_runs_node_over_converges(cluster, first):
    """A run that takes over the node a killed run left mid-drain (its record and its slot, run out) is itself
    killed after each of its writes: the claim that takes the record over, the stopped run's slot given back,
    the steps, the apply, the end. Runs after its deadline finish the node, and no slot is left in the pool's
    Lease, whichever run took it: this is the pool's last node, so no later slot drops a run-out one."""
    from tests.rollout.conftest import PlayedNodes

    played = PlayedNodes(cluster.api)
    _labelled_world(cluster)
    calls = _labelled_run(cluster, played)[0]
    k1 = next(i for i, call in enumerate(calls, 1) if first in call)

    def first_killed():
        _labelled_world(cluster)
        done, killed = _labelled_run(cluster, played, k1)
        assert killed and first in done[-1], done
        _past_the_record(cluster)

    first_killed()
    second = _labelled_run(cluster, played)[0]
    assert any(c.startswith("lease ") for c in second[:3]), second  # the stopped run's slot, given back
    for k in range(1, len(second) + 1):
        first_killed()
        done, killed = _labelled_run(cluster, played, k)
        where = "second run killed after write %d (%s)" % (k, done[-1])
        assert killed, where
        for _ in range(3):
            _past_the_record(cluster)
            _labelled_run(cluster, played)
        record = cluster.annotation("node-a")
        assert record is not None and record["step"] == "done", (where, record)
        assert not cluster.unschedulable("node-a"), where
        assert lease_slots(cluster.api, LABELLED_LEASE) == {}, (where, lease_slots(cluster.api, LABELLED_LEASE))


REFUSED = "np-aaa"  # sorted before the planned pool: its claim comes first, its pods are held back


def _with_a_refused_pool(names):
    """The auto pool's lookup with a second auto pool, ``REFUSED``, whose node list ACK refuses for good."""
    from functions.base.errors import Refused
    from functions.cloud.cluster import InventoryLookup
    from tests.rollout.conftest import CLUSTER, POOL

    class RefusingOne(InventoryLookup):
        def nodes(self, cluster_id, nodepool_id=None, instance_ids=()):
            if nodepool_id == REFUSED:
                raise Refused("the node pool is not found", call="DescribeClusterNodes", status="404",
                              code="ErrorNodePoolNotFound")
            return super().nodes(cluster_id, nodepool_id, instance_ids)

    auto = {"kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}]},
            "scaling_group": {"scaling_group_id": "asg-1", "instance_types": ["ecs.ebmgn7.26xlarge"]}}
    return RefusingOne.from_dict({
        "cluster_id": CLUSTER,
        "nodepools": [dict(auto, nodepool_info={"nodepool_id": pool, "name": pool}) for pool in (REFUSED, POOL)],
        "nodes": [{"instance_id": "i-%s" % n, "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge",
                   "nodepool_id": POOL, "state": "running", "ip_address": ["10.0.1.%d" % i]}
                  for i, n in enumerate(names, 1)]})


def _refused_tick(cluster, k=10 ** 6):
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.pipeline.event import run_event
    from tests.rollout.test_auto_rollout import NAMES, TICK, PerGpuNodes

    killer = Killer(cluster.kube, PerGpuNodes(cluster.api), k)
    settings = load_settings(dict(cluster.settings_env))
    try:
        result = run_event(TICK, settings, inventory=killer.lookup(_with_a_refused_pool(NAMES[:2])),
                           logger=JsonLogger("OFF"), kube=killer,
                           executor=DeliveryExecutor.from_settings(settings, transport=killer))
    except Killed:
        return killer.calls, None
    return killer.calls, result


@pytest.mark.parametrize("pods", [0, 2], ids=["idle", "planning"])
def test_a_tick_beside_a_refused_pool_killed_after_every_write_converges(cluster, pods):
    """A tick with an auto pool ACK refuses to list (it fails alone: its planning claim taken and given back,
    its pods held back) beside a pool with stranded records, killed after each write: the refused pool's claim
    included. After the killed run's leases, both pools' Leases hold no slot, claim or plan marker, and the
    planned pool's records are final."""
    from functions.decision import claim_rules as pc, coalesce as co

    _stranded_world(cluster, pods)
    calls, result = _refused_tick(cluster)
    # (idle, the refused pool carries no labelled node, so no stranded record of it is looked for: not named)
    assert REFUSED in result.refused_pools or not pods, result
    assert any("ack-mig-hook-pool-%s" % REFUSED in c for c in calls), calls  # its Lease made for its claim
    for k in range(1, len(calls) + 1):
        _stranded_world(cluster, pods)
        done, result = _refused_tick(cluster, k)
        assert result is None, (k, calls)
        where = "killed after write %d (%s)" % (k, done[-1])
        cluster.now[0] += 2 * 3600
        for _ in range(3):
            _refused_tick(cluster)
            cluster.now[0] += 60
        _check_auto(cluster, where)
        now = cluster.now[0]
        for (_, name), lease in cluster.api.leases.items():
            notes = lease["metadata"].get("annotations") or {}
            claim = pc.read_claim(notes.get(pc.PLANNING_ANNOTATION))
            assert claim is None or claim.expires <= now, (where, name, claim)
            marker = co.read_marker(notes.get(co.MARKER_ANNOTATION), now, 10 ** 6)
            assert not marker.holder or marker.until <= now, (where, name, marker)
            assert name.startswith("ack-mig-hook-last-run") or not lease_slots(cluster.api, ("default", name)), \
                (where, name)
