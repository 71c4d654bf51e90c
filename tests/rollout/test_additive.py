"""A label change that only adds instances rolls without cordon or drain (issue 18 point 3), against the
local TLS Kubernetes API: every such node of the pool in the same run, none counted against
max-unavailable, the node told to destroy nothing, the capacity wait kept; destructive changes keep their
waves; the dry run and the decisions say which path each node takes."""

from tests.rollout.conftest import NAMES, POOL, capacity, node_labels, snapshot

SMALL, GROWN = "3g.20gb", "3g.20gb-2g.10gb-1g.5gb"
SEVEN = "-".join(["1g.5gb"] * 7)


def outcomes(result):
    return {n["node_name"]: n["outcome"] for n in result.nodes}


def spec_patches(api, name=None):
    """Node writes that touch the spec (cordon, uncordon)."""
    return [r for r in api.requests if r.method == "PATCH" and "/api/v1/nodes/" in r.path and "spec" in (r.body or {})
            and (name is None or r.path.endswith("/" + name))]


def evictions(api):
    return [r.path for r in api.requests if r.path.endswith("/eviction")]


def test_an_additive_label_change_rolls_every_node_at_once_without_cordon_or_drain(cluster):
    api = cluster.api
    cluster.add_nodes(sequence=SMALL)
    for n in NAMES:  # serving pods a drain would have to move, behind a budget that allows no eviction at all
        api.add_pod("team", "infer-%s" % n, n, labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    api.add_pdb("team", "infer", {"app": "infer"}, min_available=3)
    played = cluster.transport.run

    def apply_without_capacity(targets):  # the device plugin publishes the new resources a poll later
        out = played(targets)
        for t in targets:
            api.set_capacity(t.node_name, capacity(SMALL))
        return out

    cluster.transport.run = apply_without_capacity
    cluster.on_sleep = lambda n: [api.set_capacity(name, capacity(GROWN)) for name in NAMES] if n == 1 else None
    result = cluster.run(inventory=snapshot(GROWN))  # max-unavailable 1, one wave's time
    assert outcomes(result) == {n: "partitioned" for n in NAMES}
    assert sorted(cluster.transport.seen) == NAMES
    # no cordon, no eviction, not even a pod list: the pods kept serving
    assert spec_patches(api) == [] and evictions(api) == []
    assert [r for r in api.requests if r.path == "/api/v1/pods"] == []
    assert len(api.pods) == 3 and all(not cluster.unschedulable(n) for n in NAMES)
    # the node was told to destroy nothing
    assert [doc.get("destroy") for _, doc in cluster.transport.requests] == [False, False, False]
    # the capacity wait still applies
    assert cluster.sleeps == [2.0] and all("new capacity shows (nvidia.com/mig-1g.5gb=8, nvidia.com/mig-2g.10gb=8, "
                                           "nvidia.com/mig-3g.20gb=8)" in n["reason"] for n in result.nodes)
    for n in NAMES:
        record = cluster.annotation(n)
        assert (record["step"], record["drain"], record["cordoned"]) == ("done", False, False)
    # the decision JSON says which path
    decisions = result.to_json()["decisions"]
    assert [d["drain"] for d in decisions] == [False, False, False]
    assert all("only adds 2g.10gb, 1g.5gb beside the kept 3g.20gb at 0" in d["reason"] for d in decisions)
    assert len(cluster.events("MigRolloutNoDrain")) == 3 and cluster.events("MigRolloutCordon") == []


def test_destructive_nodes_keep_their_waves_beside_the_additive_ones(cluster):
    api = cluster.api
    cluster.add_nodes(["node-a"], sequence=SEVEN)  # 1g.5gb x7 -> 3g.20gb-2g.10gb-1g.5gb removes instances
    cluster.add_nodes(["node-b", "node-c", "node-d"], sequence=SMALL)
    cluster.add_nodes(["node-e"], sequence="3g.20gb-3g.20gb")  # the second 3g.20gb goes: destroyed
    for n in ("node-a", "node-b", "node-e"):
        api.add_pod("team", "train-%s" % n, n, gpus=1, owner_kind="ReplicaSet")
    names = ["node-a", "node-b", "node-c", "node-d", "node-e"]
    result = cluster.run(inventory=snapshot(GROWN, names=names))
    assert outcomes(result) == {"node-a": "partitioned", "node-b": "partitioned", "node-c": "partitioned",
                                "node-d": "partitioned", "node-e": "deferred"}
    drains = {d.node_name: d.drain for d in result.decisions}
    assert drains == {"node-a": True, "node-b": False, "node-c": False, "node-d": False, "node-e": True}
    assert [r.path for r in spec_patches(api)] == ["/api/v1/nodes/node-a"] * 2  # cordon and uncordon, node-a only
    assert evictions(api) == ["/api/v1/namespaces/team/pods/train-node-a/eviction"]
    by = {d.node_name: d.reason for d in result.decisions}
    assert "wave node-a (max-unavailable 1); without cordon or drain: node-b, node-c, node-d" in by["node-b"]
    assert "this node waits for a later wave (1 of 1 waiting)" in by["node-e"]
    # node-e would have the next wave, but one wave's time is all this invocation has
    node_e = {n["node_name"]: n["reason"] for n in result.nodes}["node-e"]
    assert node_e.startswith("this invocation has 2218 s left, less than a wave may take (2220 s")
    assert {n: doc.get("destroy", True) for n, doc in cluster.transport.requests} == {
        "node-a": True, "node-b": False, "node-c": False, "node-d": False}


def test_the_dry_run_says_which_path_each_node_takes(cluster):
    cluster.add_nodes(["node-a"], sequence=SEVEN)
    cluster.add_nodes(["node-b"], sequence=SMALL)
    cluster.api.add_pod("team", "train-0", "node-a", gpus=1, owner_kind="ReplicaSet")
    before = [r for r in cluster.api.requests if r.method != "GET"]
    result = cluster.run(inventory=snapshot(GROWN, names=["node-a", "node-b"]), dry_run=True)
    reasons = {n["node_name"]: n["reason"] for n in result.nodes}
    assert reasons["node-a"].startswith("dry run: would cordon, evict team/train-0")
    assert reasons["node-b"].startswith("dry run: would apply %s without cordon or drain" % GROWN)
    assert "refuses and goes the drained way" in reasons["node-b"]
    assert {d.node_name: d.drain for d in result.decisions} == {"node-a": True, "node-b": False}
    assert [r for r in cluster.api.requests if r.method != "GET"] == before and cluster.transport.seen == []


def test_a_stopped_rollout_holds_the_additive_nodes_too(cluster):
    cluster.add_nodes(["node-a", "node-b"], sequence=SEVEN)
    cluster.add_nodes(["node-c"], sequence=SMALL)
    cluster.transport.fail = {"node-a"}
    names = ["node-a", "node-b", "node-c"]
    first = cluster.run(inventory=snapshot(GROWN, names=names), ACK_MIG_INVOCATION_TIMEOUT_S="86400")
    # node-a and node-c went in the same wave; node-a's failure stops the pool before node-b's wave
    assert outcomes(first) == {"node-a": "failed", "node-b": "deferred", "node-c": "partitioned"}
    cluster.api.label_node("node-c", node_labels(SMALL))  # node-c back on the old layout (replaced, say)
    cluster.api.update_node("node-c", lambda node: node["metadata"]["annotations"].clear())
    again = cluster.run(inventory=snapshot(GROWN, names=names))
    assert outcomes(again)["node-c"] == "deferred" and cluster.transport.seen == ["node-a", "node-c"]
    by = {d.node_name: d for d in again.decisions}
    assert "stopped: node node-a ended failed" in by["node-c"].reason and by["node-c"].drain is False
    assert "stopped: node node-a ended failed" in by["node-b"].reason


def test_a_node_in_progress_without_drain_is_resumed_and_takes_no_slot(cluster):
    """A run killed after sending the destroy-nothing apply: the next one (its lease over) applies again,
    still without cordon, while the pool's drained wave goes on beside it."""
    import json

    from functions.decision.waves import PROGRESS_ANNOTATION, Progress

    cluster.add_nodes(["node-a"], sequence=SEVEN)
    cluster.add_nodes(["node-b"], sequence=SMALL)
    target = "sequence=%s" % GROWN
    record = Progress(target, "applying", False, 1.0, "", "killed-run", 2.0, drain=False)
    cluster.api.update_node("node-b", lambda node: node["metadata"].setdefault("annotations", {}).update(
        {PROGRESS_ANNOTATION: record.to_annotation()}))
    result = cluster.run(inventory=snapshot(GROWN, names=["node-a", "node-b"]))
    assert outcomes(result) == {"node-a": "partitioned", "node-b": "partitioned"}
    assert [r.path for r in spec_patches(cluster.api)] == ["/api/v1/nodes/node-a"] * 2
    assert json.loads(cluster.api.nodes["node-b"]["metadata"]["annotations"][PROGRESS_ANNOTATION])["drain"] is False
    assert dict(cluster.transport.requests)["node-b"].get("destroy") is False
    assert POOL in result.decisions[1].reason


def test_killed_after_every_mutating_call_the_next_run_finishes_every_node_once_and_never_cordons(tmp_path,
                                                                                                    monkeypatch):
    """The kill matrix of test_interrupted.py for the path without drain: whatever call the function dies
    after, the first run after its lease applies what is left (again only what was sent but not recorded),
    and no node is ever cordoned or has a pod evicted."""
    from functions.rollout import run as rollout
    from functions.kube.nodes import MemoryKube
    from tests.rollout.conftest import Cluster, PlayedNodes
    from tests.rollout.test_interrupted import Killed, Killer, MemoryApi

    points = []
    for k in range(1, 100):
        kube = MemoryKube({n: {"metadata": {"name": n, "labels": node_labels(SMALL), "annotations": {}}, "spec": {},
                               "status": {"allocatable": capacity(SMALL)}} for n in NAMES})
        for n in NAMES:
            kube.add_pod("team", "infer-%s" % n, n, gpus=1, owner="ReplicaSet")
        c = Cluster.__new__(Cluster)
        c.api, c.kube = MemoryApi(kube), kube
        c.transport = played = PlayedNodes(c.api)
        c.now, c.sleeps, c.on_sleep, c.settings_env = [1000.0], [], None, {"ACK_MIG_STARTUP_TAINT": "none"}
        monkeypatch.setattr(rollout, "clock", c.clock)
        monkeypatch.setattr(rollout, "sleep", c.sleep)
        killer = Killer(kube, played, k)
        c.transport = killer
        try:
            c.run(inventory=snapshot(GROWN), kube=killer)
            break  # the whole run went through: every call has been a kill point
        except Killed:
            where = killer.calls[-1]
        finally:
            c.transport = played
        points.append(where)
        # sent but not recorded as applied: the only nodes the next run sends the apply again
        resent = [n for n in NAMES if n in played.seen and (c.annotation(n) or {}).get("step") == "applying"]
        c.now[0] += 3 * 3600  # past the killed run's lease
        c.run(inventory=snapshot(GROWN))
        for n in NAMES:
            assert c.annotation(n)["step"] == "done" and not c.unschedulable(n), (where, n)
            assert c.api.nodes[n]["metadata"]["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == GROWN
        assert len(kube.pods) == 3, where  # nothing evicted
        assert sorted(played.seen) == sorted(NAMES + resent), (where, played.seen)
        assert not resent or any(call.startswith("apply") for call in killer.calls), (where, resent)
        assert all(doc.get("destroy") is False for _, doc in played.requests), where
        spec = [call for call in killer.calls if "unschedulable" in call]
        assert spec == [], (where, spec)
    steps = " | ".join(points)
    for expected in ("event MigRolloutNoDrain", "apply node-a,node-b,node-c", "event MigRolloutDone"):
        assert expected in steps, (expected, steps)
    assert not any("unschedulable" in p and "True" in p for p in points)
    assert len(points) == 16  # per node: claim, its event, applied, done, its event; and the one batch apply
