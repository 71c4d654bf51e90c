"""``ack-mig-hook advise`` on an auto pool (issue 27): the live Kubernetes API (the TLS test server) and a
snapshot give the same advice; it reads one paged list of Pending pods, never writes; bad labels are one line."""

import json

import pytest

from functions.commands.main import main

POOL_ID = "np0a1b2c3d4e5f60718293a4b5c6d7e8f9"
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
A100_80 = "NVIDIA-A100-SXM4-80GB"  # as a label value holds it: no space (kube-apiserver refuses one)
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def pool(labels=None):
    labels = {"ack-mig-hook/layout": "auto", **(labels or {})}
    return {"nodepool_info": {"nodepool_id": POOL_ID, "name": "llm-auto"},
            "kubernetes_config": {"labels": [{"key": k, "value": v} for k, v in labels.items()],
                                  "taints": [{"key": "nvidia.com/gpu", "value": "mig", "effect": "NoSchedule"}]},
            "scaling_group": {"scaling_group_id": "asg-auto", "instance_types": ["ecs.ebmgn7e.32xlarge"]}}


def member(name):
    """A node as ACK lists it in the pool (DescribeClusterNodes): only these count as the pool's supply."""
    return {"instance_id": "i-2ze%s0auto0pool" % name, "node_name": name, "nodepool_id": POOL_ID,
            "instance_type": "ecs.ebmgn7e.32xlarge", "state": "running"}


def inventory(tmp_path, labels=None, kubernetes=None, members=tuple("n%d" % i for i in range(10))):
    data = {"cluster_id": CLUSTER, "nodepools": [pool(labels)], "nodes": [member(n) for n in members]}
    if kubernetes is not None:
        data["kubernetes"] = kubernetes
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(data))
    return str(path)


def gpu_node(api, name, sequence, annotations=None):
    api.add_node(name, labels={"alibabacloud.com/nodepool-id": POOL_ID, "aliyun.accelerator/nvidia_name": A100_80,
                               "aliyun.accelerator/nvidia_count": "1", "nvidia.com/mig.config.state": "success",
                               "aliyun.accelerator/nvidia_mig_sequence": sequence},
                 taints=[{"key": "nvidia.com/gpu", "value": "mig", "effect": "NoSchedule"}], annotations=annotations)


def waiting(api, name, profile, count=1, owner="serve", tolerations=TOLERATE):
    """A pod the scheduler marked Unschedulable (status as kube-scheduler writes it)."""
    pod = api.add_pod("llm", name, "", phase="Pending", owner_kind="ReplicaSet",
                      labels={"pod-template-hash": "7d9f"}, resources={"nvidia.com/mig-" + profile: str(count)})
    with api.lock:
        pod["metadata"]["ownerReferences"][0]["name"] = owner + "-7d9f"
        pod["spec"]["tolerations"] = list(tolerations)
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/mig-" + profile}]


@pytest.fixture
def auto_pool(kube_api):
    # n1: one idle 7g.80gb; n2: 2g.20gb (in use) + 2g.20gb + 3g.40gb
    gpu_node(kube_api, "n1", "7g.80gb")
    # what n2 reported from kubelet's allocations: the running pod holds the 2g.20gb at 0
    holders = {"at": "2026-12-06T10:00:00Z", "pods": ["pod-uid-running"],
               "gpus": {"0": [["2g.20gb", 0, "pod-uid-running"], ["2g.20gb", 2, None], ["3g.40gb", 4, None]]}}
    gpu_node(kube_api, "n2", "2g.20gb-2g.20gb-3g.40gb", {"ack-mig-hook/gpu-holders": json.dumps(holders)})
    kube_api.add_pod("llm", "running", "n2", resources={"nvidia.com/mig-2g.20gb": "1"})
    for i in range(3):
        waiting(kube_api, "small-%d" % i, "1g.10gb")
    waiting(kube_api, "mid", "2g.20gb", owner="mid")
    waiting(kube_api, "stray", "1g.10gb", owner="stray", tolerations=[])  # the pool's taint keeps it out
    return kube_api


def advise(capsys, *argv):
    code = main(["advise", "--pool", "llm-auto", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def live_advice(api, tmp_path, capsys):
    """``advise --json`` on the live test API server (the default inventory), which must succeed."""
    kubeconfig = api.write_kubeconfig(tmp_path / "k.conf", cert=api.admin_cert())
    code, out, err = advise(capsys, "--inventory", inventory(tmp_path), "--kubeconfig", kubeconfig, "--json")
    assert code == 0, err
    return json.loads(out)


def dry_tick(capsys, tmp_path, inventory_path, kubeconfig):
    """The timer's tick over the pool, as a dry run (``invoke --dry-run --json``): its exit code and result."""
    event = tmp_path / "tick.json"
    event.write_text(json.dumps({"auto_pools": True}))
    code = main(["invoke", "--event", str(event), "--inventory", inventory_path, "--kubeconfig", kubeconfig,
                 "--dry-run", "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_live_advice_serves_the_waiting_pods_without_touching_anything_in_use(auto_pool, tmp_path, capsys):
    advice = live_advice(auto_pool, tmp_path, capsys)
    assert advice["demand"]["pending"] == {"1g.10gb": 3, "2g.20gb": 1}
    assert advice["demand"]["in_use"] == {"2g.20gb": 1}
    assert advice["demand"]["not_counted"][0]["pod"] == "llm/stray"
    assert {p["owner"] for p in advice["demand"]["pods"]} == {"deployment llm/serve", "deployment llm/mid"}
    # The idle 2g.20gb on n2 serves "mid" as it is; the 1g pods need new instances: every in-use one stays.
    created = sum(len(g["create"]) for g in advice["gpus"])
    assert created >= 1 and advice["plan"]["changes"] == len(advice["plan"]["reasons"]) - len(advice["plan"]["unserved"])
    for g in advice["gpus"]:
        kept = {(i["profile"], i["start"]) for i in g["instances"] if i["in_use"]}
        assert kept <= {tuple(x) for x in g["target"]} or g["change"] == "none"
    assert any("llm/serve" in r for r in advice["plan"]["reasons"])
    assert advice["plan"]["unserved"] == {}
    # Reads only, and the pending pods in one list (a page at most, status.phase=Pending).
    assert {r.method for r in auto_pool.requests} == {"GET"}
    pod_lists = sorted(r.query for r in auto_pool.requests if r.path == "/api/v1/pods")
    assert [q for q in pod_lists if "status.phase%3DPending" in q] == ["fieldSelector=status.phase%3DPending&limit=16"]
    assert len([q for q in pod_lists if "spec.nodeName" in q]) == 2  # one per node of the pool


def test_snapshot_gives_the_same_advice_as_the_live_api(auto_pool, tmp_path, capsys):
    kubeconfig = auto_pool.write_kubeconfig(tmp_path / "k.conf", cert=auto_pool.admin_cert())
    live = json.loads(advise(capsys, "--inventory", inventory(tmp_path), "--kubeconfig", kubeconfig, "--json")[1])
    items = [dict(n, kind="Node") for n in auto_pool.nodes.values()] + [dict(p, kind="Pod")
                                                                          for p in auto_pool.pods.values()]
    code, out, err = advise(capsys, "--inventory", inventory(tmp_path, kubernetes={"kind": "List", "items": items}),
                            "--json")
    assert code == 0, err
    assert json.loads(out) == live
    code, text, _ = advise(capsys, "--inventory", inventory(tmp_path, kubernetes={"kind": "List", "items": items}))
    assert "pending 1g.10gb x3, 2g.20gb x1" in text and "not counted: llm/stray" in text
    assert "nothing was changed" in text


def test_demand_beyond_the_pool_names_a_new_node_layout(auto_pool, tmp_path, capsys):
    for i in range(6):
        waiting(auto_pool, "big-%d" % i, "3g.40gb", owner="train")
    kubeconfig = auto_pool.write_kubeconfig(tmp_path / "k.conf", cert=auto_pool.admin_cert())
    advice = json.loads(advise(capsys, "--inventory", inventory(tmp_path), "--kubeconfig", kubeconfig, "--json")[1])
    # n1's idle 7g.80gb can become two 3g.40gb, n2's idle 3g.40gb serves one (its 2g.20gb in use stays): 3 left
    assert advice["plan"]["unserved"]["3g.40gb"] == 3
    # a new node (ecs.ebmgn7e.32xlarge: 8 A100 80GB) brings every profile left unserved (the 1g.10gb pods lost
    # n1 to the larger demand), GPU by GPU: most GPUs get the layout the first GPU got
    shape = advice["plan"]["new_node_shape"]
    assert sum(g["gpus"] for g in shape) == 8
    assert {p for g in shape for p, _ in g["layout"]} == set(advice["plan"]["unserved"]) == {"1g.10gb", "3g.40gb"}
    assert advice["plan"]["new_node"] == shape[0]["layout"]
    # ... and the pool's node-template tags advertise that whole node
    tags = advice["autoscaler_tags"]
    per_node = {p: sum(g["gpus"] for g in shape for q, _ in g["layout"] if q == p) for p in ("1g.10gb", "3g.40gb")}
    assert tags["set"] == {"k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-%s" % p: str(n)
                           for p, n in per_node.items()}
    assert not tags["in_sync"]


def test_when_the_pool_serves_everything_no_mig_resource_is_advertised(auto_pool, tmp_path, capsys):
    kubeconfig = auto_pool.write_kubeconfig(tmp_path / "k.conf", cert=auto_pool.admin_cert())
    advice = json.loads(advise(capsys, "--inventory", inventory(tmp_path), "--kubeconfig", kubeconfig, "--json")[1])
    assert advice["plan"]["new_node"] == [] and advice["autoscaler_tags"]["set"] == {}
    assert "no new node is needed" in advice["autoscaler_tags"]["reason"]


@pytest.mark.parametrize("labels, message", [
    ({"ack-mig-hook/layout": "yes"}, "ack-mig-hook/layout='yes' is not accepted"),
    ({"ack-mig-hook/layout-headroom": "1g.10gb-x"}, "ack-mig-hook/layout-headroom"),
])
def test_bad_labels_are_one_line_and_exit_2(tmp_path, capsys, labels, message):
    code, out, err = advise(capsys, "--inventory", inventory(tmp_path, labels, {"items": []}))
    lines = err.strip().splitlines()  # one error line of at most 160 characters, the accepted form as a hint
    assert code == 2 and out == "" and message in lines[0] and len(lines[0]) <= 160
    assert all(line.startswith("  ") for line in lines[1:]) and len(lines) <= 3


def test_a_pool_that_is_not_auto_says_how_to_turn_it_on(tmp_path, capsys):
    path = inventory(tmp_path, None, {"items": []})
    data = json.loads(open(path).read())
    data["nodepools"][0]["kubernetes_config"]["labels"] = []
    open(path, "w").write(json.dumps(data))
    code, _, err = advise(capsys, "--inventory", path)
    assert code == 2 and "label it ack-mig-hook/layout=auto" in err


def test_no_kubernetes_source_is_one_line(tmp_path, capsys):
    code, _, err = advise(capsys, "--inventory", inventory(tmp_path))
    assert code == 2 and "give --kubeconfig FILE" in err


def test_invoke_dry_run_shows_the_same_decisions_as_advise(auto_pool, tmp_path, capsys):
    kubeconfig = auto_pool.write_kubeconfig(tmp_path / "k.conf", cert=auto_pool.admin_cert())
    path = inventory(tmp_path)
    data = json.loads(open(path).read())
    data["nodes"] = [{"instance_id": "i-2zeauto000000000n%d" % i, "node_name": "n%d" % i, "nodepool_id": POOL_ID,
                      "state": "running", "ip_address": ["127.0.0.1"]} for i in (1, 2)]
    open(path, "w").write(json.dumps(data))
    advice = json.loads(advise(capsys, "--inventory", path, "--kubeconfig", kubeconfig, "--json")[1])
    code, result = dry_tick(capsys, tmp_path, path, kubeconfig)
    assert code == 0 and result["outcome"] == "done" and result["dry_run"]
    assert [d["reason"] for d in result["decisions"]] == advice["plan"]["reasons"][:advice["plan"]["changes"]]
    assert all(n["outcome"] == "dry-run" for n in result["nodes"])
    assert {r.method for r in auto_pool.requests} == {"GET"}


def test_a_node_ack_does_not_list_in_the_pool_is_left_out_with_a_note(auto_pool, tmp_path, capsys):
    """Issue 35 item 6: "rogue" labels itself into the pool and claims idle 1g.10gb instances that would hide
    the three waiting 1g.10gb pods; ACK does not list it, so the advice is the one without it, plus a note."""
    kubeconfig = auto_pool.write_kubeconfig(tmp_path / "k.conf", cert=auto_pool.admin_cert())
    before = json.loads(advise(capsys, "--inventory", inventory(tmp_path), "--kubeconfig", kubeconfig, "--json")[1])
    gpu_node(auto_pool, "rogue", "1g.10gb-1g.10gb-1g.10gb-1g.10gb-1g.10gb-1g.10gb-1g.10gb")
    after = json.loads(advise(capsys, "--inventory", inventory(tmp_path), "--kubeconfig", kubeconfig, "--json")[1])
    assert {g["node"] for g in after["gpus"]} == {"n1", "n2"}
    notes = [u for u in after["plan"]["unplaced"] if u.startswith("node rogue")]
    assert len(notes) == 1 and "ACK does not list it in the pool" in notes[0]
    after["plan"]["unplaced"].remove(notes[0])
    assert after == before


def test_a_pool_with_no_node_scales_out_for_a_waiting_pod(kube_api, tmp_path, capsys):
    """Issue 37: a pool with no nodes could never scale out, and advise said both "unserved: 1g.10gb x1; a new
    node's GPUs would get (empty)" and "every waiting MIG pod fits the pool's GPUs, no new node is needed". The
    pool's instance type (ecs.ebmgn7e.32xlarge: 8 A100 80GB) now names the new node; advise and the tick agree."""
    waiting(kube_api, "first", "1g.10gb")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert())
    path = inventory(tmp_path, members=())
    data = json.loads(open(path).read())
    data["nodepools"][0]["auto_scaling"] = {"enable": True}  # the tick's tags follow pools the autoscaler grows
    open(path, "w").write(json.dumps(data))
    advice = json.loads(advise(capsys, "--inventory", path, "--kubeconfig", kubeconfig, "--json")[1])
    assert advice["gpus"] == [] and advice["plan"]["unserved"] == {"1g.10gb": 1}
    shape = advice["plan"]["new_node_shape"]
    assert sum(g["gpus"] for g in shape) == 8 and {p for g in shape for p, _ in g["layout"]} == {"1g.10gb"}
    key = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-1g.10gb"
    assert advice["autoscaler_tags"]["set"] == {key: "56"}  # 7 per GPU, 8 GPUs
    assert "no new node is needed" not in advice["autoscaler_tags"]["reason"]
    code, text, _ = advise(capsys, "--inventory", path, "--kubeconfig", kubeconfig)
    assert code == 0 and "(empty)" not in text and "no new node is needed" not in text
    assert "a new node's GPUs would get 8x 1g.10gb@0" in text
    # the tick (dry run) sets the same tags and changes no node (there is none)
    code, result = dry_tick(capsys, tmp_path, path, kubeconfig)
    assert code == 0 and result["decisions"] == []
    assert [t["set"] for t in result["pool_tags"]] == [{key: "56"}]
    assert {r.method for r in kube_api.requests} == {"GET"}


def _changed_lease(api, gpus, at):
    """The pool's Lease as a tick left it after changing ``gpus`` at ``at`` (plan_claim.release)."""
    from functions.decision import claim_rules

    api.leases[("default", "ack-mig-hook-pool-%s" % POOL_ID)] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "ack-mig-hook-pool-%s" % POOL_ID, "namespace": "default", "resourceVersion": "7",
                     "uid": "u-1", "annotations": {claim_rules.CHANGED_ANNOTATION:
                                                   claim_rules.write_changed({}, at, 600, gpus)}},
        "spec": {}}


def test_live_advice_keeps_the_gpus_the_tick_would_keep_within_their_dwell(auto_pool, tmp_path, capsys, monkeypatch):
    """advise shows the tick's plan: a GPU the hook changed within ACK_MIG_AUTO_DWELL_S is not repartitioned
    (read from the pool's Lease, never written), and the reasons say until when."""
    import time

    kubeconfig = auto_pool.write_kubeconfig(tmp_path / "k.conf", cert=auto_pool.admin_cert())
    argv = ("--inventory", inventory(tmp_path), "--kubeconfig", kubeconfig, "--json")
    free = json.loads(advise(capsys, *argv)[1])
    first = [(g["node"], g["gpu"]) for g in free["gpus"] if g["destroy"]]
    assert first and free["plan"]["unserved"] == {}, free["gpus"]  # an idle instance makes room for the 1g pods
    _changed_lease(auto_pool, first, time.time() - 60)
    moved = json.loads(advise(capsys, *argv)[1])  # that GPU is kept: the pods are served on another one
    assert all(not g["destroy"] for g in moved["gpus"] if (g["node"], g["gpu"]) in first), moved["gpus"]
    second = [(g["node"], g["gpu"]) for g in moved["gpus"] if g["destroy"]]
    assert second and moved["plan"]["unserved"] == {}
    _changed_lease(auto_pool, first + second, time.time() - 60)
    held = json.loads(advise(capsys, *argv)[1])  # both kept: the 1g pods wait, and the reasons say until when
    assert all(not g["destroy"] for g in held["gpus"]), held["gpus"]
    assert any("ACK_MIG_AUTO_DWELL_S" in r for r in held["plan"]["reasons"]), held["plan"]["reasons"]
    assert {r.method for r in auto_pool.requests} == {"GET"}  # the Lease read, nothing written
    # a dwell of 0 (the function's setting, read from the environment as the tick does) keeps nothing
    monkeypatch.setenv("ACK_MIG_AUTO_DWELL_S", "0")
    assert json.loads(advise(capsys, *argv)[1])["gpus"] == free["gpus"]


def test_live_advice_without_lease_rights_says_the_dwell_is_left_out(auto_pool, tmp_path, capsys, monkeypatch):
    from node_bootstrap.kube import KubeError
    from functions.kube.client import KubeApi

    def refused(self, namespace, name):
        raise KubeError("leases.coordination.k8s.io is forbidden", status=403)
    monkeypatch.setattr(KubeApi, "get_lease", refused)
    kubeconfig = auto_pool.write_kubeconfig(tmp_path / "k.conf", cert=auto_pool.admin_cert())
    code, out, err = advise(capsys, "--inventory", inventory(tmp_path), "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert ("note: the dwell is left out: the pool's Lease ack-mig-hook-pool-%s cannot be read" % POOL_ID) in out


def test_live_advice_says_when_another_invocation_is_planning_the_pool(auto_pool, tmp_path, capsys):
    import time

    from functions.decision import claim_rules

    _changed_lease(auto_pool, [], time.time())
    notes = auto_pool.leases[("default", "ack-mig-hook-pool-%s" % POOL_ID)]["metadata"]["annotations"]
    notes[claim_rules.PLANNING_ANNOTATION] = claim_rules.write_claim(claim_rules.Claim("tick-7f3a", time.time() + 120))
    kubeconfig = auto_pool.write_kubeconfig(tmp_path / "k.conf", cert=auto_pool.admin_cert())
    code, out, err = advise(capsys, "--inventory", inventory(tmp_path), "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert ("note: pool %s is being planned by invocation tick-7f3a" % POOL_ID) in out
    assert "what it applies may differ from this advice" in out
    assert auto_pool.leases[("default", "ack-mig-hook-pool-%s" % POOL_ID)]["metadata"]["annotations"] == notes


STARTUP = {"key": "ack-mig-hook/partition-pending", "value": "true", "effect": "NoSchedule"}


def test_the_startup_taint_on_the_pool_keeps_no_pod_from_its_new_nodes(kube_api, tmp_path, capsys):
    """The pool carries the hook's startup taint (docs/first-deployment.md), and every new node with it until
    the hook has partitioned it and lifts it: a pod that does not tolerate it can land on the node all the
    same. It was read as a taint of the new node for good: the waiting pod was "not counted" (taint
    ack-mig-hook/partition-pending=true:NoSchedule not tolerated), so a pool with no node never scaled out."""
    waiting(kube_api, "first", "1g.10gb")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert())
    path = inventory(tmp_path, members=())
    data = json.loads(open(path).read())
    data["nodepools"][0]["kubernetes_config"]["taints"].append(STARTUP)
    data["nodepools"][0]["auto_scaling"] = {"enable": True}
    open(path, "w").write(json.dumps(data))
    advice = json.loads(advise(capsys, "--inventory", path, "--kubeconfig", kubeconfig, "--json")[1])
    assert advice["demand"]["not_counted"] == [] and advice["plan"]["unserved"] == {"1g.10gb": 1}
    code, result = dry_tick(capsys, tmp_path, path, kubeconfig)
    key = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-1g.10gb"
    assert code == 0 and [t["set"] for t in result["pool_tags"]] == [{key: "56"}]


def test_a_terminating_pod_is_no_demand(auto_pool, tmp_path, capsys):
    """kube-scheduler never tries a pod being deleted (pkg/scheduler/schedule_one.go skipPodSchedule), so it
    keeps the Unschedulable condition it had until it is gone: planning for it repartitioned GPUs for a pod
    that was never to run."""
    with auto_pool.lock:
        auto_pool.pods[("llm", "mid")]["metadata"]["deletionTimestamp"] = "2026-12-06T10:00:00Z"
    advice = live_advice(auto_pool, tmp_path, capsys)
    assert advice["demand"]["pending"] == {"1g.10gb": 3}
    assert "llm/mid" not in {p["pod"] for p in advice["demand"]["pods"]}


def two_zones(kube_api):
    """n1 in zone a with an idle 7g.80gb, n2 in zone b whose 7g.80gb a running pod holds."""
    gpu_node(kube_api, "n1", "7g.80gb")
    gpu_node(kube_api, "n2", "7g.80gb")
    kube_api.add_pod("llm", "running", "n2", resources={"nvidia.com/mig-7g.80gb": "1"})
    for name, zone in (("n1", "cn-beijing-a"), ("n2", "cn-beijing-b")):
        kube_api.label_node(name, {"topology.kubernetes.io/zone": zone})


def test_a_pod_that_can_land_on_some_nodes_only_is_not_planned_on_the_others(kube_api, tmp_path, capsys):
    """A pool over two zones (ACK pools span vSwitches): the pod asks for zone b. The planner places a pod on
    any GPU it is given, so it repartitioned the idle 7g.80gb on n1, in zone a, where the scheduler never
    binds the pod, called the pod served and asked for no node. The nodes a counted pod cannot land on are
    left out of the plan now (with a note): the pod is unserved and the autoscaler is asked for a node."""
    two_zones(kube_api)
    waiting(kube_api, "zonal", "1g.10gb")
    with kube_api.lock:
        kube_api.pods[("llm", "zonal")]["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "cn-beijing-b"}
    advice = live_advice(kube_api, tmp_path, capsys)
    assert advice["demand"]["pending"] == {"1g.10gb": 1}
    assert [g["node"] for g in advice["gpus"]] == ["n2"] and advice["plan"]["changes"] == 0
    assert advice["plan"]["unserved"] == {"1g.10gb": 1}
    assert [u for u in advice["plan"]["unplaced"] if u.startswith("node n1: ")] == [
        "node n1: a pod the plan counts cannot land on it, llm/zonal (nodeSelector topology.kubernetes.io/zone="
        "cn-beijing-b): neither counted nor changed for these pods"]
    # the tick decides the same: no node changes
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert())
    code, result = dry_tick(capsys, tmp_path, inventory(tmp_path), kubeconfig)
    assert code == 0 and result["decisions"] == [], result
    # with the pod able to land in either zone, n1's idle GPU serves it again
    with kube_api.lock:
        del kube_api.pods[("llm", "zonal")]["spec"]["nodeSelector"]
    advice = live_advice(kube_api, tmp_path, capsys)
    assert [g["node"] for g in advice["gpus"] if g["change"] != "none"] == ["n1"]
    assert advice["plan"]["unserved"] == {}


def test_the_tick_logs_the_nodes_it_left_out_of_a_plan_in_one_bounded_line(kube_api, tmp_path, capsys):
    """``advise`` names the nodes a plan leaves out (a pod it counts cannot land there); the tick, which acts
    on that plan, logged none of them: an operator reading why an idle GPU was not used found nothing in the
    function's logs. One line a pool now, bounded however many nodes are left out and however long their
    names (a DNS subdomain: up to 253 characters each)."""
    two_zones(kube_api)
    long_names = [".".join(["z" * 63] * 3) + ".n%03d" % i for i in range(40)]  # 194 characters each, zone a
    for name in long_names:
        gpu_node(kube_api, name, "7g.80gb")
        kube_api.label_node(name, {"topology.kubernetes.io/zone": "cn-beijing-a"})
    waiting(kube_api, "zonal", "1g.10gb")
    with kube_api.lock:
        kube_api.pods[("llm", "zonal")]["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "cn-beijing-b"}
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert())
    event = tmp_path / "tick.json"
    event.write_text(json.dumps({"auto_pools": True}))
    code = main(["invoke", "--event", str(event), "--inventory", inventory(tmp_path, members=["n1", "n2"] + long_names),
                 "--kubeconfig", kubeconfig, "--dry-run", "--json", "-v"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["decisions"] == [], out
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    (said,) = [line["reason"] for line in lines if "left out of the plan" in line.get("reason", "")]
    assert said.startswith("nodes left out of the plan, or read in part: node "), said
    assert ("node n1: a pod the plan counts cannot land on it, llm/zonal (nodeSelector topology.kubernetes.io/zone="
            "cn-beijing-b): neither counted nor changed for these pods") in said
    assert ("node %s: a pod the plan counts cannot land on it" % long_names[0]) in said and len(said) < 2500, said
    assert said.endswith(" more (ack-mig-hook advise lists them)"), said[-200:]


def test_a_pod_the_plan_does_not_count_leaves_no_node_out_of_it(kube_api, tmp_path, capsys):
    """A waiting pod the pool can never serve (60 instances: more than a node of 8 GPUs holds) is not counted, so it
    restricts nothing: its zone selector must not leave the other zone's nodes out of the plan of the pods that
    are counted (it called them "a pod the plan counts cannot land on it", repartitioned nothing there, and
    asked the autoscaler for a node the idle GPU of n1 would have saved)."""
    two_zones(kube_api)
    waiting(kube_api, "small", "1g.10gb")
    waiting(kube_api, "huge", "1g.10gb", count=60, owner="huge")
    with kube_api.lock:
        kube_api.pods[("llm", "huge")]["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "cn-beijing-b"}
    advice = live_advice(kube_api, tmp_path, capsys)
    assert [p["pod"] for p in advice["demand"]["not_counted"]] == ["llm/huge"]
    assert not [u for u in advice["plan"]["unplaced"] if u.startswith("node n1: ")], advice["plan"]["unplaced"]
    assert [g["node"] for g in advice["gpus"] if g["change"] != "none"] == ["n1"]
    assert advice["plan"]["unserved"] == {}


def _whole_and_mig(api, name):
    """A pod the scheduler marked Unschedulable asking a whole GPU and a 1g.10gb together."""
    pod = api.add_pod("llm", name, "", phase="Pending", gpus=1, resources={"nvidia.com/mig-1g.10gb": "1"})
    with api.lock:
        pod["spec"]["tolerations"] = list(TOLERATE)
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu"}]


def test_a_pod_asking_a_whole_gpu_and_a_mig_instance_is_short_unless_one_node_holds_both(kube_api, tmp_path,
                                                                                           capsys):
    """n1 holds an idle 1g.10gb, n3 (never partitioned, MIG off) a free GPU; the pod asks both. Counted resource
    by resource it was served (advise: nothing unserved, nothing to change) and waited for good: the scheduler
    needs both on one node. It is short now, with a line saying why, and no MIG resource is advertised for it (a
    new node's GPUs all get MIG or all stay whole: none holds it). The tick partitions a fresh node for a MIG
    pod that waits beside it: before, the pod's nvidia.com/gpu ask kept that node whole, for nothing."""
    gpu_node(kube_api, "n1", "1g.10gb")
    kube_api.add_node("n3", labels={"alibabacloud.com/nodepool-id": POOL_ID, "aliyun.accelerator/nvidia_name": A100_80,
                                    "aliyun.accelerator/nvidia_count": "1"},
                      taints=[{"key": "nvidia.com/gpu", "value": "mig", "effect": "NoSchedule"}])
    _whole_and_mig(kube_api, "both")
    advice = live_advice(kube_api, tmp_path, capsys)
    assert advice["demand"]["pending"] == {"1g.10gb": 1, "gpu": 1} and advice["demand"]["not_counted"] == []
    assert advice["plan"]["unserved"] == {"1g.10gb": 1, "gpu": 1} and advice["plan"]["changes"] == 0
    assert advice["plan"]["new_node_shape"] == [] and advice["autoscaler_tags"]["set"] == {}
    assert any("whole GPUs and MIG instances together" in r for r in advice["plan"]["reasons"])
    # The tick: two 7g.80gb pods beside it, n1's idle GPU holds one, and n3, which the hook never partitioned (a
    # node the autoscaler brought), gets the new node's layout for the other. The pod's nvidia.com/gpu ask kept
    # n3 whole before, for a pod no whole node can hold, and the 7g.80gb pod waited beside a GPU it fits.
    waiting(kube_api, "big-0", "7g.80gb", owner="big")
    waiting(kube_api, "big-1", "7g.80gb", owner="big")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert())
    code, result = dry_tick(capsys, tmp_path, inventory(tmp_path), kubeconfig)
    assert code == 0, result
    assert [(d["node_name"], d["partition"]) for d in result["decisions"] if d["node_name"] == "n3"] == [
        ("n3", {"kind": "sequence", "value": "7g.80gb"})], result["decisions"]


@pytest.mark.parametrize("owners, labels", [("serve-7d9f", ["x"]), (7, None), (["serve-7d9f"], {"pod-template-hash": 5}),
                                            ([{"kind": "ReplicaSet", "name": "serve-7d9f", "controller": True}],
                                             ["pod-template-hash"])])
def test_a_running_pod_whose_owners_or_labels_are_of_another_shape_is_read_alone(auto_pool, tmp_path, capsys,
                                                                               owners, labels):
    """A pod on a pool's node whose ``ownerReferences`` was no list of objects, or whose labels were no map
    beside a controller reference, ended ``advise`` and the tick of every pool in a TypeError or
    AttributeError (``matching.owner_of``, reached through ``kube.demand.slim``), where a Node of such a shape
    is read alone (``supply.node_object``). The pod reads as made by no controller now, and what it holds
    still counts: the plan is the one it would be with the pod's owner as the API serves it."""
    with auto_pool.lock:
        meta = auto_pool.pods[("llm", "running")]["metadata"]
        meta["ownerReferences"] = owners
        if labels is not None:
            meta["labels"] = labels
    advice = live_advice(auto_pool, tmp_path, capsys)
    assert advice["demand"]["in_use"] == {"2g.20gb": 1}
    assert advice["demand"]["pending"] == {"1g.10gb": 3, "2g.20gb": 1}
    assert all(g["change"] == "none" or ["2g.20gb", 0] in g["target"] for g in advice["gpus"] if g["node"] == "n2")


def test_an_unknown_pool_lists_the_known_ones_cut_where_they_read_whole():
    """A cluster with many pools: the "no pool 'x'; give a pool id or a unique name: np-.. (name), ..." line cut
    the list at a raw 300 characters, inside a pool's "(name" with the parenthesis left open; it now ends on
    whole entries and "..." (textsafe.clip)."""
    from types import SimpleNamespace

    from functions.commands.advise import AdviseError, _pool

    pools = [SimpleNamespace(nodepool_id="np%030d" % n, name="gpu-mig-pool-%02d" % n) for n in range(20)]
    with pytest.raises(AdviseError) as caught:
        _pool(pools, "gpu-mig-typo")
    text = str(caught.value)
    assert text.startswith("no pool 'gpu-mig-typo'; give a pool id or a unique name: np"), text
    assert text.endswith("...") and text.count("(") == text.count(")"), text


def test_advise_clips_the_long_names_in_its_not_counted_reasons_as_the_tick_does(auto_pool, tmp_path, capsys,
                                                                                  monkeypatch):
    """A hand-written snapshot (or a pod anyone writes) may ask for a MIG resource of any name: the reason a pod is
    not counted names it ("asks <profile>, which no GPU of the pool has", "asks for <name>=<value>"). The tick's
    log line cut those reasons; advise printed them whole, a word of any length on a line of its own. Now each
    is cut where it reads whole (textsafe.clip), at the tick's bounds. COLUMNS keeps each entry on one line."""
    monkeypatch.setenv("COLUMNS", "99999")
    waiting(auto_pool, "odd", "1g.10gb", owner="odd")
    waiting(auto_pool, "frac", "1g.10gb", owner="frac")
    name = "nvidia.com/mig-" + "x" * 5000
    with auto_pool.lock:
        auto_pool.pods[("llm", "odd")]["spec"]["containers"][0]["resources"]["limits"] = {name: "1"}
        auto_pool.pods[("llm", "frac")]["spec"]["containers"][0]["resources"]["limits"] = {name + "y": "1.5"}
    items = [dict(n, kind="Node") for n in auto_pool.nodes.values()] + [dict(p, kind="Pod")
                                                                          for p in auto_pool.pods.values()]
    code, text, err = advise(capsys, "--inventory", inventory(tmp_path, kubernetes={"kind": "List", "items": items}))
    assert code == 0, err
    lines = {line.split(" (", 1)[0]: line for line in text.splitlines() if line.startswith("  not counted: ")}
    assert set(lines) == {"  not counted: llm/odd", "  not counted: llm/frac", "  not counted: llm/stray"}, lines
    for line in lines.values():
        assert len(line) < 400 and line.endswith(")"), line
    assert lines["  not counted: llm/odd"].startswith("  not counted: llm/odd (asks xxxxxxxx"), lines
    assert lines["  not counted: llm/frac"].startswith("  not counted: llm/frac (asks for nvidia.com/mig-xxx"), lines
