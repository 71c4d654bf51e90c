"""``ack-mig-hook status``: per pool the label, node count, in layout, pending, failed (with reasons),
deferred and allocatable MIG resources; from a snapshot with kube_nodes and from the TLS API server."""

import json

from functions.commands.main import main
from functions.cluster import InventoryLookup
from functions.settings import load_settings
from functions.commands.status import collect
from tests.rollout.conftest import NEW, OLD, capacity, node_labels, snapshot


def kube_nodes():
    nodes = {n: {"labels": node_labels(OLD), "annotations": {}, "unschedulable": False,
                 "allocatable": capacity(OLD)} for n in ("node-a", "node-b", "node-c")}
    nodes["node-a"] = {"labels": node_labels(NEW), "allocatable": capacity(NEW)}
    nodes["node-c"]["labels"] = node_labels(None, "failed")
    nodes["node-c"]["annotations"] = {"ack-mig-hook/mig-config-reason": "gpu-busy: GPU 3 is used by pid 77"}
    return nodes


def test_status_from_a_snapshot_text_and_json(tmp_path, capsys):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(snapshot(kube_nodes=kube_nodes(), names=["node-a", "node-b", "node-c", "node-d"])))
    assert main(["status", "--inventory", str(path), "--nodes"]) == 0
    out = capsys.readouterr().out
    assert "pool np-mig (gpu): sequence=%s" % NEW in out
    # node-b: this wave; node-d: not a Kubernetes node yet (new, applied as before); node-c: failed
    assert "nodes 4: in layout 1, pending 2, failed 1, deferred 0" in out
    assert "failed node-c: gpu-busy: GPU 3 is used by pid 77" in out
    assert "allocatable: nvidia.com/mig-1g.5gb=112, nvidia.com/mig-3g.20gb=16\n" in out  # not nvidia.com/gpu
    assert main(["status", "--inventory", str(path), "--json"]) == 0
    (pool,) = json.loads(capsys.readouterr().out)["pools"]
    assert (pool["nodes"], pool["in_layout"], pool["pending"], pool["deferred"]) == (4, 1, 2, 0)
    assert pool["failed"] == [{"node": "node-c", "reason": "gpu-busy: GPU 3 is used by pid 77"}]
    assert "node_list" not in pool


def test_status_counts_deferred_nodes_and_a_stopped_rollout_from_the_api_server(cluster):
    cluster.add_nodes()
    settings = load_settings({})
    status = collect(settings, InventoryLookup.from_dict(snapshot()), kube=cluster.kube)
    (pool,) = status["pools"]
    assert (pool["nodes"], pool["in_layout"], pool["pending"], pool["deferred"], pool["failed"]) == (3, 0, 1, 2, [])
    assert pool["allocatable"] == {"nvidia.com/mig-1g.5gb": 168}
    cluster.api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    cluster.api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    cluster.run(ACK_MIG_DRAIN_TIMEOUT_S="5")
    (pool,) = collect(settings, InventoryLookup.from_dict(snapshot()), kube=cluster.kube)["pools"]
    assert pool["failed"][0]["node"] == "node-a" and pool["failed"][0]["reason"].startswith("drain-timeout: ")
    assert pool["deferred"] == 2 and pool["pending"] == 0
    nodes = {n["node"]: n for n in pool["node_list"]}
    assert nodes["node-b"]["status"] == "deferred" and "stopped: node node-a ended drain-timeout" in \
        nodes["node-b"]["reason"]


def test_status_bad_inventory_is_one_line(tmp_path, capsys):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(dict(snapshot(), kube_nodes=[])))
    assert main(["status", "--inventory", str(path)]) == 2
    assert capsys.readouterr().err.strip() == ("ack-mig-hook: error: %s: kube_nodes must be an object "
                                               '{"<node name>": {"labels": {...}, "annotations": {...}, '
                                               '"unschedulable": false}}' % path)


def test_status_and_invoke_use_the_operators_kubeconfig_for_the_kubernetes_side(cluster, tmp_path, capsys):
    """--inventory for the ACK side, --kubeconfig for the Kubernetes side: the snapshot's kube_nodes (here
    none) give way to the live API server, through the operator's own credential."""
    cluster.add_nodes()
    cluster.api.label_node("node-a", {"aliyun.accelerator/nvidia_mig_sequence": NEW})
    cluster.api.set_capacity("node-a", capacity(NEW))
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(snapshot()))
    kubeconfig = cluster.api.write_kubeconfig(tmp_path / "mine.conf", cert=cluster.api.admin_cert(), user="me")
    assert main(["status", "--inventory", str(inventory), "--kubeconfig", kubeconfig, "--json"]) == 0
    (pool,) = json.loads(capsys.readouterr().out)["pools"]
    assert (pool["in_layout"], pool["pending"], pool["deferred"]) == (1, 1, 1)
    assert pool["allocatable"] == {"nvidia.com/mig-3g.20gb": 16, "nvidia.com/mig-1g.5gb": 112}
    assert {r.user for r in cluster.api.requests} == {"kubernetes-admin"}
    event = tmp_path / "reconcile.json"
    event.write_text(json.dumps({"cluster_id": "c-rollout", "dry_run": True}))
    before = len(cluster.api.requests)
    assert main(["invoke", "--event", str(event), "--inventory", str(inventory), "--kubeconfig", kubeconfig,
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    actions = {d["node_name"]: d["action"] for d in result["decisions"]}
    assert actions == {"node-a": "skip", "node-b": "partition", "node-c": "defer"}
    assert len(cluster.api.requests) > before  # asked the API server, not a snapshot


def test_a_kubeconfig_that_cannot_be_read_is_one_line(tmp_path, capsys):
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(snapshot()))
    for argv in (["status", "--inventory", str(inventory)], ["invoke", "--event", str(inventory), "--inventory",
                                                               str(inventory)]):
        assert main(argv + ["--kubeconfig", str(tmp_path / "missing.conf")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ack-mig-hook: error: argument --kubeconfig: ") \
            and "missing.conf is not a file" in err[0]
        garbage = tmp_path / "garbage.conf"
        garbage.write_text("clusters: [\n")
        assert main(argv + ["--kubeconfig", str(garbage)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ack-mig-hook: error: --kubeconfig: kubeconfig ") \
            and "garbage.conf does not parse" in err[0]
