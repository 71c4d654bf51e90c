"""``ack-mig-hook status``: per pool the label, node count, in layout, pending, failed (with reasons),
deferred and allocatable MIG resources; from a snapshot with kube_nodes and from the TLS API server."""

import json

import pytest

from functions.commands.main import main
from functions.cloud.cluster import InventoryLookup
from functions.base.settings import load_settings
from functions.commands.status import collect
from tests.rollout.conftest import NEW, OLD, capacity, node_labels, snapshot
from tests.function.conftest import emulator as cs_emulator, inventory_dict, no_proxy  # noqa: F401  (fixtures)
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.loopback import refused_port
from tests.support.cli_errors import error_text


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
    assert main(["status", "--inventory", str(path)]) == 0
    out = capsys.readouterr().out
    assert "pool np-mig (gpu): sequence=%s" % NEW in out
    # node-b: this wave; node-d: not a Kubernetes node yet (new, applied as before); node-c: failed
    assert "nodes 4: in layout 1, pending 2, failed 1, deferred 0" in out
    assert "failed node-c: gpu-busy: GPU 3 is used by pid 77" in out  # no rollout record: no age to tell
    assert "allocatable: nvidia.com/mig-1g.5gb=112, nvidia.com/mig-3g.20gb=16\n" in out  # not nvidia.com/gpu
    assert main(["status", "--inventory", str(path), "--nodes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("    node-c  failed  applied -  state failed")
    assert lines[at + 1] == "      gpu-busy: GPU 3 is used by pid 77"
    assert "    node-b  pending  applied 7x1g.5gb  state success" in lines  # the 7-instance layout, counted
    assert main(["status", "--inventory", str(path), "--json"]) == 0
    (pool,) = json.loads(capsys.readouterr().out)["pools"]
    assert (pool["nodes"], pool["in_layout"], pool["pending"], pool["deferred"]) == (4, 1, 2, 0)
    assert pool["failed"] == [{"node": "node-c", "reason": "gpu-busy: GPU 3 is used by pid 77", "since": None}]
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
    assert error_text(capsys.readouterr().err) == (
        "ack-mig-hook: error: %s: kube_nodes must be an object "
        '{"<node name>": {"labels": {...}, "annotations": {...}, "unschedulable": false}}' % path)


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
        err = error_text(capsys.readouterr().err)
        assert err.startswith("ack-mig-hook: error: argument --kubeconfig: ") and "missing.conf is not a file" in err
        garbage = tmp_path / "garbage.conf"
        garbage.write_text("clusters: [\n")
        assert main(argv + ["--kubeconfig", str(garbage)]) == 2
        err = error_text(capsys.readouterr().err)
        assert err.startswith("ack-mig-hook: error: --kubeconfig: kubeconfig ") and "garbage.conf does not parse" in err


# ---- issue 19 point 5: status you can act on ----

ROOT = __import__("os").path.dirname(__import__("os").path.dirname(__import__("os").path.dirname(
    __import__("os").path.abspath(__file__))))
EXAMPLES = __import__("os").path.join(ROOT, "examples")


def test_every_labelled_pool_shows_its_own_label_whatever_its_nodes_decided(capsys):
    """The passthrough pool of the example is labelled sequence=3g.20gb-3g.20gb; its nodes are skipped (no
    decision carries a partition), but the label is the pool's: doctor counts it labelled, so does status."""
    from functions.decision.decide import has_partition_label

    inventory = __import__("os").path.join(EXAMPLES, "inventory.json")
    assert main(["status", "--inventory", inventory]) == 0
    out = capsys.readouterr().out
    assert "pool np1a7e4c9b2d5f8a0c3e6b9d2f5a8c1e47 (gpu-passthrough): sequence=3g.20gb-3g.20gb" in out
    assert "no partition label" not in out
    assert "skipped 1: ecs.gn7-c13g1.13xlarge is a GPU passthrough instance type" in out  # why it does nothing
    assert main(["status", "--inventory", inventory, "--json"]) == 0
    shown = {p["nodepool_id"]: p["label"] for p in json.loads(capsys.readouterr().out)["pools"]}
    lookup = InventoryLookup.from_file(inventory)
    labelled = {p.nodepool_id: p.labels["ack.aliyun.com/gpu-partition-sequence"]
                for p in lookup.nodepools(lookup.cluster_id) if has_partition_label(p)}
    assert labelled and {k: v for k, v in shown.items() if k in labelled} == {
        k: "sequence=%s" % v for k, v in labelled.items()}


def test_long_layouts_are_written_as_counted_runs_only_in_text():
    from functions.commands.status import abbreviate, abbreviate_layout

    assert abbreviate_layout(OLD) == "7x1g.5gb"
    assert abbreviate_layout("1g.5gb-1g.5gb-2g.10gb-1g.5gb") == "2x1g.5gb-2g.10gb-1g.5gb"  # order kept
    assert abbreviate("applied layout %s differs from sequence=%s" % (OLD, NEW)) == \
        "applied layout 7x1g.5gb differs from sequence=%s" % NEW  # a short layout stays as written
    mixed = "1g.10gb+me-1g.10gb+me-1g.10gb+me-4g.40gb"
    assert abbreviate("x=%s;" % mixed) == "x=3x1g.10gb+me-4g.40gb;"
    odd = "1g.24gb-me-1g.24gb-me-1g.24gb-me-1g.24gb-me"  # a profile with a hyphen: ambiguous, left alone
    assert abbreviate(odd) == odd


LONG_NAMES = ["gpu-node-%s.cn-beijing.compute.internal.example-cluster-with-a-long-name" % c for c in "abc"]


def long_layout_snapshot():
    """A pool asking for seven 1g.5gb instances per GPU, with a long name, nodes with 70-character names, one
    that stopped the rollout (drain-timeout) and one failed on the node with a long reason."""
    a, b, c = LONG_NAMES
    nodes = {n: {"labels": node_labels(NEW), "annotations": {}, "allocatable": capacity(NEW)} for n in LONG_NAMES}
    nodes[a]["annotations"]["ack-mig-hook/rollout"] = json.dumps({
        "target": "sequence=%s" % OLD, "step": "drain-timeout", "cordoned": False, "since": 1000.0,
        "reason": "drain-timeout after 900s, node back on its old layout and uncordoned: team/infer-0: Cannot "
                  "evict pod as it would violate the pod's disruption budget.", "owner": "x", "expires": 3000.0})
    nodes[c]["labels"] = node_labels(NEW, "failed")
    nodes[c]["annotations"]["ack-mig-hook/mig-config-reason"] = "gpu-busy: " + ", ".join(
        "GPU %d is used by pid %d (/usr/bin/python3 -m vllm.entrypoints.openai.api_server)" % (i, 4000 + i)
        for i in range(4))
    data = snapshot(OLD, names=LONG_NAMES, kube_nodes=nodes, ids=lambda name: "i-2zelong%s" % name[9])
    data["nodepools"][0]["nodepool_info"]["name"] = "gpu-a100-inference-pool-for-the-platform-team-" + "x" * 30
    return data


@pytest.mark.parametrize("source", ["inventory.json", "inventory-rollout.json", "inventory-autoscaling.json",
                                    "long-layout"])
@pytest.mark.parametrize("nodes", [False, True])
def test_every_line_of_the_text_output_fits_100_columns(source, nodes, tmp_path, capsys):
    if source == "long-layout":
        path = tmp_path / "long.json"
        path.write_text(json.dumps(long_layout_snapshot()))
    else:
        path = __import__("os").path.join(EXAMPLES, source)
    main(["status", "--inventory", str(path)] + (["--nodes"] if nodes else []))
    out = capsys.readouterr().out
    too_long = [line for line in out.splitlines() if len(line) > 100]
    assert out.strip() and too_long == []
    if source == "long-layout":
        assert "sequence=7x1g.5gb" in out and "1g.5gb-1g.5gb-1g.5gb" not in out
        # wrapped between words: the reason is all there, each word whole
        words = " ".join(line.strip() for line in out.splitlines())
        assert "(/usr/bin/python3 -m vllm.entrypoints.openai.api_server)" in words


def test_each_failure_and_deferral_says_how_long_ago(capsys):
    """The rollout record's ``since``: when the stopped node's rollout began; the deferred nodes wait on
    that stop since then. A node that failed on its own (state label) carries no time: none is shown."""
    from functions.commands.status import render

    lookup = InventoryLookup.from_dict(long_layout_snapshot())
    a, b, c = LONG_NAMES
    status = collect(load_settings({}), lookup, now=1000.0 + 2 * 3600 + 5 * 60)
    (pool,) = status["pools"]
    failed = {f["node"]: f for f in pool["failed"]}
    assert failed[a]["since"] == 1000.0 and failed[c]["since"] is None
    nodes = {n["node"]: n for n in pool["node_list"]}
    assert nodes[b]["status"] == "deferred" and nodes[b]["since"] == 1000.0  # the stop it waits on
    text = " ".join(render(status, nodes=False).split())  # as read, whatever the wrapping
    assert "failed %s 2h 5m ago: drain-timeout: drain-timeout after 900s" % a in text
    assert "failed %s: gpu-busy: GPU 0" % c in text
    assert "deferred 1; rollout since 2h 5m ago" in text
    text = " ".join(render(status, nodes=True).split())
    assert "%s deferred 2h 5m ago applied 3g.20gb-3g.20gb" % b in text
    assert json.loads(json.dumps(status))["now"] == status["now"]  # JSON carries the time the ages count to


def test_strict_exits_3_when_a_node_failed(tmp_path, capsys):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(snapshot(kube_nodes=kube_nodes())))
    assert main(["status", "--inventory", str(path)]) == 0  # a failed node is news, not an error of status
    assert main(["status", "--inventory", str(path), "--strict"]) == 3
    healthy = {n: {"labels": node_labels(NEW), "allocatable": capacity(NEW)} for n in ("node-a", "node-b", "node-c")}
    path.write_text(json.dumps(snapshot(kube_nodes=healthy)))
    assert main(["status", "--inventory", str(path), "--strict"]) == 0
    capsys.readouterr()


def test_an_unreachable_kubernetes_api_is_said_and_exits_non_zero(kube_api, tmp_path, capsys, monkeypatch):  # noqa: F811
    """The API server does not answer (a closed port): status says so on its first line, counts nothing as
    deferred quietly, exits 1 (3 with --strict), and the reconcile it ran ends ``retry``."""
    # Refused for the whole run: a port bound and closed at once went back to the kernel, and any server started
    # meanwhile (this worker's, another pytest worker's) could be given it, answering instead of refusing.
    dead = refused_port()
    config = kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert())
    text = open(config).read().replace("127.0.0.1:%d" % kube_api.port, "127.0.0.1:%d" % dead)
    open(config, "w").write(text)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(snapshot()))
    monkeypatch.setenv("ACK_MIG_KUBE_MAX_ATTEMPTS", "1")
    assert main(["status", "--inventory", str(inventory), "--kubeconfig", config]) == 1
    out = capsys.readouterr().out
    first, text = out.splitlines()[0], " ".join(out.split())
    assert first.startswith("cluster c-rollout: the Kubernetes API cannot be used (")
    assert "running nodes wait until it answers" in text and "no Kubernetes view" not in text
    assert "nodes 3: in layout 0, pending 0, failed 0, deferred 0, unknown 3 (not checked: the Kubernetes API" in text
    assert max(len(line) for line in out.splitlines()) <= 100
    assert main(["status", "--inventory", str(inventory), "--kubeconfig", config, "--strict"]) == 3
    capsys.readouterr()
    assert main(["status", "--inventory", str(inventory), "--kubeconfig", config, "--json"]) == 1
    status = json.loads(capsys.readouterr().out)
    assert status["kubernetes"] is False and status["kubernetes_error"] and status["outcome"] == "retry"
    assert "deferred because the Kubernetes API cannot be used" in status["reason"]


def test_a_long_refusal_is_said_whole_inside_the_first_lines_parentheses(kube_api, tmp_path, capsys, monkeypatch):  # noqa: F811
    """The API server's refusal can be long (RBAC's 403 names the user, the verb, the resource and each role it
    tried, with parentheses of its own): the first line's "cannot be used (%s)" cut it at a raw 300
    characters, mid-word and mid-parenthesis; it is cut whole now (textsafe.clip)."""
    message = ('nodes is forbidden: User "system:serviceaccount:kube-system:ack-mig-hook-function-ram-role-id" '
               'cannot list resource "nodes" in API group "" at the cluster scope: RBAC: [clusterrole.rbac.'
               'authorization.k8s.io "ack-mig-hook" not found (deleted by hand after the last deploy, or never '
               'applied from deploy/rbac.yaml in this cluster), clusterrole.rbac.authorization.k8s.io "view" not '
               'found]')
    kube_api.break_next(times=20, status=403, method="GET", message=message)
    config = kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert())
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(snapshot()))
    monkeypatch.setenv("ACK_MIG_KUBE_MAX_ATTEMPTS", "1")
    assert main(["status", "--inventory", str(inventory), "--kubeconfig", config, "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["kubernetes_error"]
    assert "nodes is forbidden" in error and error.endswith("...") and error.count("(") == error.count(")"), error


def test_a_cluster_credential_ack_refuses_is_said_like_an_unreachable_api(cs_emulator, capsys):  # noqa: F811
    """No --inventory: the ACK API gives the pools, and ACK's DescribeClusterUserKubeconfig the credential;
    RAM refuses the latter (403 Forbidden.RAM, the CS emulator's answer): the first line says so, exit 1."""
    from functions.commands.status import exit_code, render
    from tests.function.conftest import cloud_env

    cs_emulator.fail_next("DescribeClusterUserKubeconfig", 403, "Forbidden.RAM", times=10)
    status = collect(load_settings(dict(cloud_env(cs_emulator), ACK_MIG_API_MAX_ATTEMPTS="1")))
    assert "no cluster credential from ACK" in status["kubernetes_error"] and "Forbidden.RAM" in \
        status["kubernetes_error"]
    assert " ".join(render(status, nodes=False).split()).startswith(
        "cluster %s: the Kubernetes API cannot be used (no cluster credential from ACK" % cs_emulator.cluster_id)
    assert exit_code(status, strict=False) == 1 and exit_code(status, strict=True) == 3


def test_the_command_line_asks_ack_for_the_public_endpoint_and_the_function_for_the_private_one(
        cs_emulator, capsys, monkeypatch):  # noqa: F811
    """An operator's machine is outside the cluster's VPC: ``status`` (and ``invoke``) ask ACK for a
    kubeconfig of the public endpoint, as doctor and undeploy do; the deployed function keeps the private
    one it reaches from the VPC (DescribeClusterUserKubeconfig ``PrivateIpAddress``)."""
    from tests.function.conftest import cloud_env

    for name, value in dict(cloud_env(cs_emulator), ACK_MIG_API_MAX_ATTEMPTS="1", ACK_MIG_KUBE_MAX_ATTEMPTS="1",
                            ALIBABA_CLOUD_ECS_METADATA_DISABLED="true").items():
        monkeypatch.setenv(name, value)
    main(["status", "--cluster-id", cs_emulator.cluster_id, "--region", "cn-beijing"])
    capsys.readouterr()
    assert [q.get("PrivateIpAddress", "").lower() for q in cs_emulator.kubeconfig_requests] == ["false"]
    collect(load_settings(dict(cloud_env(cs_emulator), ACK_MIG_API_MAX_ATTEMPTS="1", ACK_MIG_KUBE_MAX_ATTEMPTS="1")))
    assert [q.get("PrivateIpAddress", "").lower() for q in cs_emulator.kubeconfig_requests] == ["false", "true"]


def test_status_nodes_show_what_each_gpu_holds(tmp_path, capsys):
    """The node's per-GPU layouts annotation (written on every success, and the only record after an auto
    pool's per-GPU apply) is shown per GPU under the node; an unreadable one is left out, never a traceback."""
    nodes = kube_nodes()
    nodes["node-a"]["annotations"] = {"ack-mig-hook/gpu-layouts": '{"1":[["2g.10gb",0]],"0":[["3g.20gb",0],'
                                                                  '["1g.5gb",4]]}'}
    nodes["node-b"]["annotations"] = {"ack-mig-hook/gpu-layouts": "{not json"}
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(snapshot(kube_nodes=nodes, names=["node-a", "node-b", "node-c", "node-d"])))
    assert main(["status", "--inventory", str(path), "--nodes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, text in enumerate(lines) if text.startswith("    node-a  "))
    assert lines[at + 2:at + 4] == ["      GPU 0: 3g.20gb@0 1g.5gb@4", "      GPU 1: 2g.10gb@0"]
    assert main(["status", "--inventory", str(path), "--json", "--nodes"]) == 0
    (pool,) = json.loads(capsys.readouterr().out)["pools"]
    by_node = {n["node"]: n["gpus"] for n in pool["node_list"]}
    assert by_node["node-a"] == {"0": "3g.20gb@0 1g.5gb@4", "1": "2g.10gb@0"} and by_node["node-b"] is None


ALLOCATABLE = "text or a whole number, and a GPU resource (nvidia.com/*, aliyun.com/*) to a whole number or its digits"


@pytest.mark.parametrize("key, value", [("labels", 8), ("annotations", 7), ("labels", True), ("allocatable", True),
                                        ("allocatable", 1.5), ("allocatable", -1)])
def test_a_snapshot_label_that_is_no_text_is_one_line_not_read_as_absent(tmp_path, capsys, key, value):
    """kube_nodes was checked to "map text to text" but took any integer (a bool too): a label written as a
    number (``"aliyun.accelerator/nvidia_count": 8``) passed the check and then read as absent, so the node
    was read with no GPU count, no state or no layout, with nothing said about the file. Labels and
    annotations are text; an allocatable count is a whole number that is no bool, or its digits."""
    nodes = kube_nodes()
    nodes["node-b"][key] = dict(nodes["node-b"].get(key) or {}, **{"aliyun.accelerator/nvidia_count": value})
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(snapshot(kube_nodes=nodes, names=["node-a", "node-b", "node-c"])))
    assert main(["status", "--inventory", str(path)]) == 2
    assert error_text(capsys.readouterr().err) == (
        "ack-mig-hook: error: %s: kube_nodes['node-b'].%s must map text to %s" % (
            path, key, ALLOCATABLE if key == "allocatable" else "text"))


@pytest.mark.parametrize("value", ["seven", "-1", "\u0667", "1_0", " 7", "1.5"])
def test_a_snapshot_count_in_text_that_is_no_count_is_one_line_not_read_as_absent(tmp_path, capsys, value):
    """The check took any text for an allocatable count, while the capacity readers read it with ``int``: "seven"
    passed and read as absent (no MIG capacity shown, nothing said about the file), and "-1", an Arabic-Indic
    "7" or "1_0" read as counts Kubernetes never writes. An allocatable count is a whole number or its ASCII
    digits (the API server's canonical form of a count), read by one reader (``outside.digits``) in both."""
    nodes = kube_nodes()
    nodes["node-b"]["allocatable"] = dict(nodes["node-b"]["allocatable"], **{"nvidia.com/mig-1g.5gb": value})
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(snapshot(kube_nodes=nodes, names=["node-a", "node-b", "node-c"])))
    assert main(["status", "--inventory", str(path)]) == 2
    assert error_text(capsys.readouterr().err) == (
        "ack-mig-hook: error: %s: kube_nodes['node-b'].allocatable must map text to %s" % (path, ALLOCATABLE))
    nodes["node-b"]["allocatable"] = dict(nodes["node-b"]["allocatable"], **{"nvidia.com/mig-1g.5gb": "7",
                                                                              "memory": "512Gi", "cpu": 96})
    path.write_text(json.dumps(snapshot(kube_nodes=nodes, names=["node-a", "node-b", "node-c"])))
    assert main(["status", "--inventory", str(path)]) == 0  # what the hook does not read, as the API has it


def test_a_nodes_mig_capacity_reads_counts_as_the_snapshot_check_does():
    """The capacity a node shows (the rollout's capacity wait, ``status``) reads a count as the snapshot check
    takes one: ASCII digits or a whole number; a count of another form, which no API server writes, is absent
    rather than a negative count or a digit of another script taken at its value."""
    from functions.decision.waves import KubeNode

    allocatable = {"nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-2g.10gb": 3, "nvidia.com/mig-3g.20gb": "-1",
                   "nvidia.com/mig-4g.20gb": "\u0667", "nvidia.com/mig-7g.40gb": "1_0",
                   "nvidia.com/mig-1g.10gb": -2, "nvidia.com/mig-2g.20gb": True}
    node = KubeNode.from_object({"metadata": {"name": "n"}, "status": {"allocatable": allocatable}})
    assert node.mig_allocatable() == {"nvidia.com/mig-1g.5gb": 7, "nvidia.com/mig-2g.10gb": 3}


def test_a_long_kubeconfig_path_that_is_no_file_is_said_marked_as_cut(tmp_path, capsys):
    """Cut at 200 characters with no mark, the line named another path than the one given ("... (staging is not
    a file"), mid-word with its parenthesis open."""
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(snapshot()))
    missing = tmp_path / " ".join(["the kubeconfigs of cluster (staging)"] * 8) / "config"
    assert main(["status", "--inventory", str(inventory), "--kubeconfig", str(missing)]) == 2
    err = error_text(capsys.readouterr().err)
    assert err.startswith("ack-mig-hook: error: argument --kubeconfig: %s" % tmp_path), err
    assert "... is not a file; " in err and err.count("(") == err.count(")"), err
