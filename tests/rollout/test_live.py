"""No snapshot: the pools and nodes from the ACK API (the CS emulator, real SDK), the Kubernetes side
through the kubeconfig ACK hands out (DescribeClusterUserKubeconfig) to the local TLS API server."""

import json

from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from functions.commands.status import collect
from tests.function.conftest import cloud_env, emulator, inventory_dict, no_proxy  # noqa: F401  (fixtures)
from tests.rollout.conftest import capacity, node_labels
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

OLD = "-".join(["1g.5gb"] * 7)
A, B = "cn-beijing.192.168.12.31", "cn-beijing.192.168.12.47"


def test_live_reconcile_and_status_through_the_cluster_credential(emulator, kube_api, tmp_path):  # noqa: F811
    kube_api.add_node(A, labels=node_labels(OLD), capacity=capacity(OLD))
    kube_api.add_node(B, labels=node_labels("3g.20gb-3g.20gb"), capacity=capacity("3g.20gb-3g.20gb"))
    path = kube_api.write_kubeconfig(tmp_path / "ack.conf", cert=kube_api.admin_cert(), inline=True)
    emulator.kubeconfig = open(path).read()
    settings = load_settings(cloud_env(emulator))
    result = run_event(json.dumps({"cluster_id": emulator.cluster_id}), settings, dry_run=True,
                       logger=JsonLogger("OFF"))
    by = {d.node_name: d for d in result.decisions}
    assert by[A].action == "partition" and "rollout of pool" in by[A].reason
    assert by[B].action == "skip" and "already in the requested layout" in by[B].reason
    assert emulator.kubeconfig_requests and emulator.kubeconfig_requests[0]["PrivateIpAddress"].lower() == "true"
    # One client serves the whole invocation: the credential must outlive the longest run (600 + 900 + 300
    # + 420 s by default = 37 minutes), not ACK's 15-minute default.
    assert int(emulator.kubeconfig_requests[0]["TemporaryDurationMinutes"]) >= 37
    assert [r.path for r in kube_api.requests][:1] == ["/api/v1/nodes"]
    assert not [r for r in kube_api.requests if r.method != "GET"]  # a dry run reads only
    status = collect(settings)
    pool = next(p for p in status["pools"] if p["name"] == "gpu-mig-a100")
    assert (pool["in_layout"], pool["pending"]) == (1, 2)  # the third instance is not a node yet
    assert pool["allocatable"] == {"nvidia.com/mig-1g.5gb": 56, "nvidia.com/mig-3g.20gb": 16}


def test_an_api_server_that_does_not_answer_defers_running_nodes_with_the_reason(emulator):  # noqa: F811
    settings = load_settings(cloud_env(emulator))  # the emulator's default kubeconfig names a closed port
    result = run_event(json.dumps({"cluster_id": emulator.cluster_id}), settings, dry_run=True,
                       logger=JsonLogger("OFF"))
    running = [d for d in result.decisions if d.node_name and d.nodepool_id and d.action != "skip"
               and d.action != "error"]
    assert running and all(d.action == "defer" and "the Kubernetes API cannot be used" in d.reason
                           for d in running)
    # Not a quiet run with deferred nodes: the event did not do its work, so it ends retry (FC retries it,
    # invoke and status exit non-zero), the reason saying why.
    assert result.outcome == "retry" and "deferred because the Kubernetes API cannot be used" in result.reason
    # ACK's kubeconfig was read and used: the server was not reached, not the credential refused unread
    assert "cannot reach https://127.0.0.1:" in result.reason and "skip TLS" not in result.reason, result.reason
