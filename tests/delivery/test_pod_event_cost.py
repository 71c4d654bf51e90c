"""What a pod event costs on the ACK API (issue 37 item 1): the pools and nodes the CS emulator (real SDK)
serves, the pods on the local TLS Kubernetes API server, the pool's node gpu-a simulated behind the local
transport. A burst of ``FailedScheduling`` events during a plan is answered ``coalesced`` but for one, and
each of those read the cluster's node pools and every auto pool's nodes from ACK first (1 + pools calls an
event, against ACK's API rate limit) to learn what the widest reading of the pool's Nodes already told."""

import json
import threading

import pytest

from functions import handler as fc
from functions.pipeline import point_of_change
from tests.delivery.test_auto_pool_e2e import INSTANCE, POOL, snapshot, waiting
from tests.delivery.test_pod_events import SAMPLE, Gate, pod_event, profiles, stored_marker, through_the_handler
from tests.delivery.test_pod_events import cluster, run, timer_holds_the_claim  # noqa: F401  (cluster: fixture)
from tests.function.conftest import emulator, inventory_dict, no_proxy  # noqa: F401  (fixtures)
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]

LATER = "np9f8e7d6c5b4a39281706f5e4d3c2b1a0"  # an auto pool whose id sorts after POOL's: 3g.40gb only


def two_auto_pools(emulator, kube_api, tmp_path, monkeypatch):  # noqa: F811
    """POOL (gpu-a, one idle 7g.80gb) and LATER, an auto pool that allows only 3g.40gb, with a node of its
    own: a pod asking 1g.10gb is POOL's whichever way the pools' nodes are read. Returns the folder of the
    simulated nodes' states."""
    inventory = snapshot()
    inventory["nodepools"].append({
        "nodepool_info": {"nodepool_id": LATER, "name": "llm-auto-big"},
        "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"},
                                         {"key": "ack-mig-hook/layout-profiles", "value": "3g.40gb"}]},
        "auto_scaling": {"enable": True},
        "scaling_group": {"scaling_group_id": "asg-big", "instance_types": ["ecs.ebmgn7e.32xlarge"]}})
    inventory["nodes"].append({"instance_id": "i-2zeauto0a100x80g09", "node_name": "gpu-big", "nodepool_id": LATER,
                               "state": "running", "instance_type": "ecs.ebmgn7e.32xlarge",
                               "ip_address": ["127.0.0.1"]})
    _, nodes = through_the_handler(emulator, kube_api, tmp_path, monkeypatch, inventory)
    kube_api.add_node("gpu-big", labels={"alibabacloud.com/nodepool-id": LATER,
                                         "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                                         "aliyun.accelerator/nvidia_count": "1",
                                         "nvidia.com/mig.config.state": "success",
                                         "aliyun.accelerator/nvidia_mig_sequence": "3g.40gb-3g.40gb"})
    return nodes


def ack_calls(emulator):  # noqa: F811
    return {action: emulator.calls(action) for action in ("DescribeClusterNodePools", "DescribeClusterNodes")}


def test_a_burst_coalesced_into_a_running_plan_reads_the_pools_once_an_event_and_no_pools_nodes(
        emulator, kube_api, tmp_path, monkeypatch):  # noqa: F811
    """The sample's pod's plan of POOL is applying; five more pods wait and their events come. Each is
    answered coalesced after one DescribeClusterNodePools (which pools are auto, and their labels) and no
    DescribeClusterNodes: only POOL may count a 1g.10gb pod however its Nodes are read, so ACK's proof of
    each pool's members cannot change which plan answers for it. The holder's second round still plans the
    five pods together: nothing the coalescing swallowed is lost."""
    nodes = two_auto_pools(emulator, kube_api, tmp_path, monkeypatch)
    gate = Gate(point_of_change.make_executor(None, False))
    monkeypatch.setattr(point_of_change, "make_executor", lambda s, dry: gate)
    waiting(kube_api, "llm-7b-5d8f7c9b6d-q4x2m", "1g.10gb")
    holder = {}
    thread = threading.Thread(target=lambda: holder.setdefault("out", fc.handler(open(SAMPLE, "rb").read(), None)))
    thread.start()
    try:
        assert gate.entered.wait(60)  # the first plan is applying now
        before = ack_calls(emulator)
        answers = []
        for i in range(5):
            waiting(kube_api, "burst-%d" % i, "1g.10gb")
            answers.append(json.loads(fc.handler(pod_event("llm", "burst-%d" % i), None)))
        spent = {action: n - before[action] for action, n in ack_calls(emulator).items()}
    finally:
        gate.open.set()
        thread.join(120)
    assert all(a["outcome"] == "skip" and a["reason"].startswith("coalesced: a plan of auto pool %s" % POOL)
               for a in answers), answers
    assert spent == {"DescribeClusterNodePools": 5, "DescribeClusterNodes": 0}, spent
    out = json.loads(holder["out"])
    assert out["outcome"] == "done" and out["reason"].startswith("2 rounds"), out["reason"]
    assert profiles(nodes / ("%s.json" % INSTANCE)).count("1g.10gb") == 6  # every pod of the burst is served
    marker = stored_marker(kube_api)
    assert marker["holder"] == "" and marker["asked"] == 6


def test_an_event_whose_marker_write_is_refused_lists_the_pending_pods_once(emulator, kube_api, tmp_path,
                                                                            monkeypatch):  # noqa: F811
    """The sample's pod's pool depends on the pods that wait (an idle instance of a profile the earlier pool
    no longer allows), so the choice lists the cluster's Pending pods. The marker write is refused (RBAC's
    403: nothing written, so no other event's ask is this plan's): the plan answers for this pod alone, which
    waited when that list was read, and plans on it. It listed every Pending pod of the cluster again."""
    from functions.decision import coalesce as co
    from functions.kube.client import ApiError, KubeApi
    from tests.delivery.test_pod_events import pending_lists, spare_instance_world

    _, nodes, _, _ = spare_instance_world(emulator, kube_api, tmp_path, monkeypatch)
    replace = KubeApi.replace_lease

    def refused(self, namespace, lease):
        if co.MARKER_ANNOTATION in ((lease.get("metadata") or {}).get("annotations") or {}):
            raise ApiError("leases is forbidden", 403, "Forbidden")
        return replace(self, namespace, lease)

    monkeypatch.setattr(KubeApi, "replace_lease", refused)
    before = pending_lists(kube_api)
    out = json.loads(fc.handler(open(SAMPLE, "rb").read(), None))
    assert out["outcome"] == "done", out["reason"]
    assert [(n["node_name"], n["outcome"]) for n in out.get("nodes") or []] == [("gpu-a", "partitioned")], out
    assert "1g.10gb" in profiles(nodes / ("%s.json" % INSTANCE))
    assert pending_lists(kube_api) - before == 1


def test_events_of_pods_no_pool_or_two_pools_may_count_read_only_the_pools_nodes_that_decide(
        emulator, kube_api, tmp_path, monkeypatch):  # noqa: F811
    """While POOL's plan applies, pods wait that no auto pool counts (1g.5gb: no profile of an A100 80GB; the
    scheduler sends their FailedScheduling again and again, with its backoff), pods no auto pool takes (they
    select another pool's nodes) and pods both may count (3g.40gb). Each event read every auto pool's nodes
    from ACK (1 + pools calls an event). Now a pod no pool counts is named with the first pool it matches
    where that pool's template takes it (no member read: a pool with no node yet still scales out for it),
    one no Node or template takes is skipped on the Nodes, and a pod two pools may count reads the first
    one's members, which count it: ACK is asked for no pool the answer does not depend on."""
    two_auto_pools(emulator, kube_api, tmp_path, monkeypatch)
    gate = Gate(point_of_change.make_executor(None, False))
    monkeypatch.setattr(point_of_change, "make_executor", lambda s, dry: gate)
    waiting(kube_api, "llm-7b-5d8f7c9b6d-q4x2m", "1g.10gb")
    holder = {}
    thread = threading.Thread(target=lambda: holder.setdefault("out", fc.handler(open(SAMPLE, "rb").read(), None)))
    thread.start()
    spent, answers = {}, {}
    try:
        assert gate.entered.wait(60)  # the first plan is applying now
        for kind, profile in (("uncounted", "1g.5gb"), ("elsewhere", "1g.10gb"), ("two", "3g.40gb")):
            before = ack_calls(emulator)
            for i in range(3):
                waiting(kube_api, "%s-%d" % (kind, i), profile)
                if kind == "elsewhere":
                    with kube_api.lock:
                        kube_api.pods[("llm", "%s-%d" % (kind, i))]["spec"]["nodeSelector"] = {"pool": "other"}
                answers.setdefault(kind, []).append(json.loads(fc.handler(pod_event("llm", "%s-%d" % (kind, i)),
                                                                          None)))
            spent[kind] = {action: n - before[action] for action, n in ack_calls(emulator).items()}
    finally:
        gate.open.set()
        thread.join(120)
    assert all(a["outcome"] == "skip" and a["reason"].startswith("coalesced: a plan of auto pool %s" % POOL)
               for a in answers["two"]), answers["two"]
    assert all(a["outcome"] == "skip" and "waits for auto pool %s, whose plan does not count it" % POOL in a["reason"]
               for a in answers["uncounted"]), answers["uncounted"]
    assert all(a["outcome"] == "skip" and a["reason"].startswith("no auto pool can take pod llm/elsewhere-")
               for a in answers["elsewhere"]), answers["elsewhere"]
    assert spent == {"uncounted": {"DescribeClusterNodePools": 3, "DescribeClusterNodes": 0},
                     "elsewhere": {"DescribeClusterNodePools": 3, "DescribeClusterNodes": 0},
                     "two": {"DescribeClusterNodePools": 3, "DescribeClusterNodes": 3}}, spent
    assert json.loads(holder["out"])["outcome"] == "done"


def test_an_event_of_a_pod_no_auto_pool_counts_plans_nothing(emulator, kube_api, tmp_path, monkeypatch):  # noqa: F811
    """A pod asks 1g.5gb, a profile of no A100 80GB: neither auto pool's plan counts it, on any reading of their
    nodes. kube-scheduler sends its FailedScheduling again each time it retries the pod, and each event ran
    POOL's whole step (the Pending pods of the cluster listed, the marker and the planning claim written, ACK
    read three times) to end "done" with nothing changed. It is a skip now, saying why, on the pools' list
    alone: no plan counts the pod, so none is lost (docs/auto-pools.md "Pod events")."""
    from tests.delivery.test_pod_events import pending_lists, stored_marker

    nodes = two_auto_pools(emulator, kube_api, tmp_path, monkeypatch)
    before_state = (nodes / ("%s.json" % INSTANCE)).read_text()
    waiting(kube_api, "odd", "1g.5gb")
    for _ in range(2):  # the scheduler's event, and the same again after its backoff
        calls, lists = ack_calls(emulator), pending_lists(kube_api)
        out = json.loads(fc.handler(pod_event("llm", "odd"), None))
        assert out["outcome"] == "skip" and out["reason"].startswith(
            "pod llm/odd waits for auto pool %s, whose plan does not count it (" % POOL), out["reason"]
        assert {a: n - calls[a] for a, n in ack_calls(emulator).items()} == {"DescribeClusterNodePools": 1,
                                                                            "DescribeClusterNodes": 0}
        assert pending_lists(kube_api) == lists
    assert stored_marker(kube_api) is None and (nodes / ("%s.json" % INSTANCE)).read_text() == before_state


@pytest.mark.parametrize("polls", [1, 0])
def test_a_wait_that_gives_up_right_after_a_poll_names_the_claim_that_poll_read(cluster, monkeypatch,  # noqa: F811
                                                                                polls):
    """A timer tick holds the pool's planning claim; the event's round finds it held and waits, reading the
    pool's Lease at each poll, and gives up when CLAIM_WAIT_S is spent. Its line names whose claim it is and
    until when, and the marker notes that claim as the one waited out. After a poll nothing came between that
    poll's read and the give-up but the clock's check, so that read says it: the Lease was read once more for
    the line (3 reads, 2 now). Given up right after the round (no poll), the round's own read of the claim is
    not at hand: the line reads the Lease (2 reads, as before)."""
    from functions.decision.budget import lease_name
    from functions.pipeline import pod_event as pod_event_module

    server = cluster[0]
    monkeypatch.setattr(pod_event_module, "CLAIM_POLL_S", 0.2)
    # one poll: 0 + 0.2 <= 0.3 after the round, then 0.2 + 0.2 > 0.3; none: 0 + 0.2 > 0.1 at once
    monkeypatch.setattr(pod_event_module, "CLAIM_WAIT_S", 0.3 if polls else 0.1)
    timer_holds_the_claim(server)
    waiting(server, "late", "2g.20gb")
    before = len(server.requests)
    result = run(pod_event("llm", "late"), cluster)
    assert result.outcome == "skip", result.reason
    assert "invocation timer-tick holds the pool's planning claim until" in result.reason, result.reason
    assert stored_marker(server)["waited"]["owner"] == "timer-tick"  # the claim the line named, noted
    claim_reads = [r for r in server.requests[before:] if r.method == "GET"
                   and r.path.endswith("/namespaces/default/leases/%s" % lease_name(POOL))]
    # the round's, then the poll's (which the line reuses) or the line's own
    assert len(claim_reads) == 2, [r.path for r in claim_reads]
