"""The real cs20151215 SDK against the loopback CS emulator: paths, query names, paging, signature,
retries on throttling and 5xx, errors that must not be retried, slow answers."""

import json

import pytest

from functions.cloud.cs_lookup import CsLookup
from functions.base.errors import ConfigurationError, Refused, RetryLater
from functions.handler import RetryInvocation, handler
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from tests.function.conftest import AK, ONE_KUBE_TRY, SECRET, TOKEN, cloud_env, event_bytes
from tests.support.cs_emulator import CsEmulator

pytestmark = pytest.mark.timeout(60)


def lookup(emu, **extra):
    return CsLookup(load_settings(cloud_env(emu, **extra)), sleep=lambda s: None)


def test_nodepools_and_nodes_through_the_sdk(emulator):
    cs = lookup(emulator)
    pools = cs.nodepools(emulator.cluster_id)
    assert [p.name for p in pools] == ["gpu-mig-a100", "gpu-passthrough", "cpu-general", "gpu-mig-typo"]
    mig = pools[0]
    assert mig.labels == {"ack.aliyun.com/gpu-partition-sequence": "3g.20gb-3g.20gb"}
    assert mig.scaling_group_id == "asg-2ze4x7c1mig8a100q9wz" and mig.instance_types == ["ecs.ebmgn7.26xlarge"]
    assert mig.taints[0].key == "ack-mig-hook/partition-pending"
    nodes = cs.nodes(emulator.cluster_id, nodepool_id=mig.nodepool_id)
    assert [n.ip_address for n in nodes] == ["192.168.12.31", "192.168.12.47", "192.168.12.52"]
    assert emulator.rejected == []  # every request carried a valid ACS3 signature and the STS token
    paths = [(r.action, r.path) for r in emulator.requests]
    assert paths == [("DescribeClusterNodePools", "/clusters/%s/nodepools" % emulator.cluster_id),
                     ("DescribeClusterNodes", "/clusters/%s/nodes" % emulator.cluster_id)]
    assert emulator.requests[1].query == {"nodepool_id": mig.nodepool_id, "pageNumber": "1", "pageSize": "100"}


def test_paging_and_instance_id_chunks(emulator):
    template = emulator.nodes[0]
    emulator.nodes = [dict(template, instance_id="i-page%04d" % i, node_name="n%d" % i) for i in range(250)]
    cs = lookup(emulator)
    all_nodes = cs.nodes(emulator.cluster_id)
    assert len(all_nodes) == 250 and len({n.instance_id for n in all_nodes}) == 250
    pages = [r.query["pageNumber"] for r in emulator.requests if r.action == "DescribeClusterNodes"]
    assert pages == ["1", "2", "3", "1", "2"]  # the pages before the last read again: 2P - 1 calls
    emulator.requests.clear()
    wanted = ["i-page%04d" % i for i in range(0, 250, 2)]  # 125 ids: two calls of <= 100
    found = cs.nodes(emulator.cluster_id, instance_ids=wanted)
    assert sorted(n.instance_id for n in found) == sorted(wanted)
    sent = [r.query["instanceIds"].split(",") for r in emulator.requests]
    assert [len(s) for s in sent] == [100, 25]


def test_a_node_removed_between_two_pages_leaves_no_other_node_out(emulator):
    """DescribeClusterNodes pages by number over the list as it is at each call: a node removed after the
    first page shifts the later ones, so the first node of page 2 would be skipped (a pool member an auto
    pool then takes for a node that labels itself into the pool) while the removed one is still listed. A
    listing whose total_count changes between its pages is read again."""
    template = emulator.nodes[0]
    emulator.nodes = [dict(template, instance_id="i-page%04d" % i, node_name="n%d" % i) for i in range(250)]

    def scale_in(action, n):  # the autoscaler releases a node while page 1 is being read
        if action == "DescribeClusterNodes" and n == 2:
            del emulator.nodes[10]
    emulator.on_request = scale_in
    found = [n.instance_id for n in lookup(emulator).nodes(emulator.cluster_id)]
    assert sorted(found) == sorted(n["instance_id"] for n in emulator.nodes) and len(found) == 249
    pages = [r.query["pageNumber"] for r in emulator.requests if r.action == "DescribeClusterNodes"]
    assert pages == ["1", "2", "1", "2", "3", "1", "2"]


@pytest.mark.contract_exempt("answers page.total_count off the model on purpose")
@pytest.mark.parametrize("total", [True, 0, -5, 1.5, "250"], ids=repr)
def test_a_total_count_that_is_no_count_of_the_list_does_not_end_the_pages(emulator, total):
    """The reader rule on ``page.total_count``: a bool is an int to Python, so ``true`` (and 0 or a negative
    number) ended the paging after the first full page, and every node past it was silently no pool member. A
    total that is no whole number from 0 up reads as none, and the pages are followed until one comes short."""
    template = emulator.nodes[0]
    emulator.nodes = [dict(template, instance_id="i-page%04d" % i, node_name="n%d" % i) for i in range(250)]
    for _ in range(9):
        emulator.tamper_next("DescribeClusterNodes", lambda payload: dict(payload, page=dict(
            payload["page"], total_count=total)))
    found = [n.instance_id for n in lookup(emulator).nodes(emulator.cluster_id)]
    assert sorted(found) == sorted(n["instance_id"] for n in emulator.nodes) and len(found) == 250


@pytest.mark.parametrize("at", [None, 0], ids=["added-last", "added-first"])
def test_a_node_removed_and_one_added_between_two_pages_leaves_no_node_out(emulator, at):
    """A removal and an addition between the same two pages (a scale-in and a scale-out, or a node replaced)
    keep total_count as it was, so the pages agree on it while the later ones are shifted: a node is skipped
    (added last: the first node of page 2; added first, newest first: the new node). After the last page the
    pages before it are read again and must list the same nodes; a listing whose pages moved is read again,
    and what comes back is the node list as it is."""
    template = emulator.nodes[0]
    emulator.nodes = [dict(template, instance_id="i-page%04d" % i, node_name="n%d" % i) for i in range(250)]

    def replace(action, n):  # a node released and a new one joins while page 1 is being read
        if action == "DescribeClusterNodes" and n == 2:
            emulator.change_nodes(remove=("i-page0010",), add=(dict(template, instance_id="i-new0001",
                                                                     node_name="new"),), at=at)
    emulator.on_request = replace
    found = [n.instance_id for n in lookup(emulator).nodes(emulator.cluster_id)]
    assert sorted(found) == sorted(n["instance_id"] for n in emulator.nodes) and len(found) == 250
    assert "i-new0001" in found and "i-page0010" not in found and "i-page0100" in found


def test_a_node_list_that_keeps_changing_while_it_is_paged_is_retried_later(emulator):
    template = emulator.nodes[0]
    emulator.nodes = [dict(template, instance_id="i-page%04d" % i, node_name="n%d" % i) for i in range(250)]
    added = iter(range(1000))

    def scale_out(action, n):  # a node more at every call: no two pages of a listing agree
        if action == "DescribeClusterNodes":
            emulator.nodes.append(dict(template, instance_id="i-new%04d" % next(added), node_name="new"))
    emulator.on_request = scale_out
    with pytest.raises(RetryLater, match="changed while it was read page by page"):
        lookup(emulator).nodes(emulator.cluster_id)


@pytest.mark.parametrize("status, code, retry_after", [
    (429, "Throttling.User", None), (503, "ServiceUnavailable", None), (500, "InternalError", None),
    (400, "Throttling", 1),
])
def test_transient_errors_are_retried(emulator, status, code, retry_after):
    emulator.fail_next("DescribeClusterNodePools", status, code, times=2, retry_after=retry_after)
    cs = lookup(emulator, ACK_MIG_API_MAX_ATTEMPTS="3")
    assert len(cs.nodepools(emulator.cluster_id)) == 4
    assert emulator.calls("DescribeClusterNodePools") == 3


def test_exhausted_retries_end_as_retry_and_the_handler_raises(emulator, monkeypatch, capsys):
    emulator.fail_next("DescribeClusterNodePools", 503, "ServiceUnavailable", times=10)
    cs = lookup(emulator, ACK_MIG_API_MAX_ATTEMPTS="2")
    with pytest.raises(RetryLater, match="failed 2 times"):
        cs.nodepools(emulator.cluster_id)
    for k, v in cloud_env(emulator, ACK_MIG_API_MAX_ATTEMPTS="1").items():
        monkeypatch.setenv(k, v)
    with pytest.raises(RetryInvocation):
        handler(event_bytes("fc_timer.json"), None)
    # the event's last line (a timer run then records itself in the cluster: a line of its own may follow)
    last = [doc for doc in map(json.loads, capsys.readouterr().out.splitlines()) if "outcome" in doc][-1]
    assert last["outcome"] == "retry" and last["level"] == "WARNING"


def test_client_errors_are_not_retried(emulator):
    emulator.fail_next("DescribeClusterNodePools", 403, "Forbidden.RAM")
    with pytest.raises(ConfigurationError, match="Forbidden.RAM"):
        lookup(emulator).nodepools(emulator.cluster_id)
    assert emulator.calls("DescribeClusterNodePools") == 1
    with pytest.raises(ConfigurationError, match="ErrorClusterNotFound"):
        lookup(emulator).nodepools("c-nosuchcluster")


def test_wrong_secret_is_refused_by_signature_check(emulator):
    cs = lookup(emulator, ALIBABA_CLOUD_ACCESS_KEY_SECRET="not-the-secret")
    with pytest.raises(ConfigurationError, match="SignatureDoesNotMatch"):
        cs.nodepools(emulator.cluster_id)
    assert emulator.rejected and "SignatureDoesNotMatch" in emulator.rejected[0]


def test_slow_answer_times_out_and_is_retried(emulator):
    emulator.slow_next("DescribeClusterNodePools", 2.5)
    cs = lookup(emulator, ACK_MIG_API_TIMEOUT_S="1", ACK_MIG_API_MAX_ATTEMPTS="2")
    assert len(cs.nodepools(emulator.cluster_id)) == 4
    assert emulator.calls("DescribeClusterNodePools") == 2


def test_full_event_through_the_api(emulator):
    from functions.kube.nodes import MemoryKube

    # The Kubernetes side knows neither instance as a Node yet (new nodes: partitioned directly; a running
    # node would go through the rollout, tests/rollout).
    result = run_event(event_bytes("ess_scale_out_success.json"), load_settings(cloud_env(emulator)),
                       dry_run=True, logger=JsonLogger("OFF"), kube=MemoryKube())
    assert result.outcome == "done" and [d.action for d in result.decisions] == ["partition", "partition"]
    first = emulator.requests[0]  # the nodes first: an instance outside the cluster ends there
    assert first.action == "DescribeClusterNodes"
    assert first.query["instanceIds"] == "i-2zeb7c1mig0a100x1k4d,i-2zeb7c1mig0a100x2m8f"


def test_kubeconfig_endpoint_for_delivery(no_proxy):
    """The emulator serves DescribeClusterUserKubeconfig to the real SDK (delivery removes taints with it)."""
    from alibabacloud_cs20151215 import models
    from alibabacloud_cs20151215.client import Client
    from alibabacloud_tea_openapi import utils_models

    with CsEmulator(AK, SECRET, TOKEN, cluster_id="c-kube") as emu:
        emu.kubeconfig = "apiVersion: v1\nkind: Config\n# test\n"
        host = emu.endpoint.split("://")[1]
        client = Client(utils_models.Config(access_key_id=AK, access_key_secret=SECRET, security_token=TOKEN,
                                            endpoint=host, protocol="http", region_id="cn-beijing"))
        body = client.describe_cluster_user_kubeconfig("c-kube", models.DescribeClusterUserKubeconfigRequest(
            private_ip_address=True, temporary_duration_minutes=15)).body
        assert body.config == emu.kubeconfig
        (query,) = emu.kubeconfig_requests
        assert query["PrivateIpAddress"].lower() == "true" and query["TemporaryDurationMinutes"] == "15"
        assert emu.requests[0].path == "/k8s/c-kube/user_config" and emu.rejected == []


def test_an_unreadable_api_item_is_left_out_not_fatal(emulator, capsys):
    """One odd node in the API's answer (no instance_id) must not fail the event for every other node, or
    FC's retries would meet it again and again: it is left out, with a warning in the event's log."""
    env = load_settings(cloud_env(emulator, **ONE_KUBE_TRY))
    before = run_event(event_bytes("fc_timer.json"), env, dry_run=True, logger=JsonLogger("OFF"))
    pool = before.decisions[0].nodepool_id
    emulator.nodes.append({"node_name": "cn-beijing.192.168.99.99", "nodepool_id": pool})
    capsys.readouterr()
    after = run_event(event_bytes("fc_timer.json"), env, dry_run=True)
    # The same outcome as without it (the emulator's kubeconfig cannot be used, so the running nodes wait and
    # both runs end retry for that reason alone), the same decisions.
    assert after.outcome == before.outcome != "error" and after.decisions == before.decisions
    warnings = [json.loads(line) for line in capsys.readouterr().out.splitlines()
                if "ACK API node left out" in line]
    assert len(warnings) == 1 and warnings[0]["level"] == "WARNING"
    assert "instance_id" in warnings[0]["message"] and warnings[0]["trigger"] == "timer"


@pytest.mark.contract_exempt("answers items of another shape than the SDK's models on purpose")
def test_an_answer_item_of_another_shape_is_left_out_and_the_others_are_read(emulator, capsys):
    """darabonba's ``DaraCore.from_map`` swallows any error reading an answer into the SDK's model and leaves
    the body None: one node that was a string, or a pool whose labels were an object, read as an answer with
    no node or pool at all, with nothing said. The timer then decided nothing for any pool. Each such item is
    left out with a warning now, as an item without an instance id is, and the others are read."""
    env = load_settings(cloud_env(emulator, **ONE_KUBE_TRY))
    before = run_event(event_bytes("fc_timer.json"), env, dry_run=True, logger=JsonLogger("OFF"))
    assert before.decisions
    emulator.nodes.append("cn-beijing.192.168.99.99")
    emulator.nodepools.append({"nodepool_info": {"nodepool_id": "np0dd", "name": "odd"},
                               "kubernetes_config": {"labels": {"key": "gpu", "value": "yes"}}})
    emulator.nodepools.append(7)
    capsys.readouterr()
    after = run_event(event_bytes("fc_timer.json"), env, dry_run=True)
    assert after.outcome == before.outcome and after.decisions == before.decisions
    warnings = [json.loads(line)["message"] for line in capsys.readouterr().out.splitlines()
                if "left out, unreadable" in line]
    assert sorted(set(warnings)) == [  # each list that holds them says so (the timer lists every pool's nodes)
        "ACK API node left out, unreadable: text, not an object",
        "ACK API node pool left out, unreadable: ValueError: kubernetes_config.labels must be a list of "
        "{\"key\": ..., \"value\": ...}",
        "ACK API node pool left out, unreadable: a number, not an object"]


@pytest.mark.contract_exempt("answers bodies of another shape than the SDK's models on purpose")
@pytest.mark.parametrize("action, body, line", [
    ("DescribeClusterNodes", {"nodes": "i-2ze1,i-2ze2"},
     "DescribeClusterNodes answered nodes as text; expected a list of objects"),
    ("DescribeClusterNodes", [{"instance_id": "i-2ze1"}],
     "DescribeClusterNodes answered a list, not the API's JSON object; nothing of it is read"),
    ("DescribeClusterNodePools", {"nodepools": {"np1": {}}},
     "DescribeClusterNodePools answered nodepools as an object; expected a list of objects"),
    ("DescribeClusterUserKubeconfig", {"config": 5},
     "DescribeClusterUserKubeconfig answered a number as its config; expected the kubeconfig's text"),
    ("DescribeClusterUserKubeconfig", ["apiVersion: v1"],
     "DescribeClusterUserKubeconfig answered a list, not the API's JSON object; nothing of it is read"),
])
def test_an_answer_of_another_shape_is_one_refusal_naming_it(emulator, action, body, line):
    """Such an answer read as a cluster with no node or pool, silently (the event skipped every pool, or
    every node of a pool as gone), and a kubeconfig answer without its text ended the Kubernetes client in an
    AttributeError or TypeError. Each is a Refused naming the call and what it answered now: for one pool's
    nodes that pool alone fails (cluster.pool_nodes), anywhere else the event ends with this line."""
    emulator.answer_with(action, body)
    cs = lookup(emulator)
    call = {"DescribeClusterNodes": lambda: cs.nodes(emulator.cluster_id, nodepool_id="np1"),
            "DescribeClusterNodePools": lambda: cs.nodepools(emulator.cluster_id),
            "DescribeClusterUserKubeconfig": lambda: cs.user_kubeconfig(emulator.cluster_id)}[action]
    with pytest.raises(Refused) as caught:
        call()
    assert str(caught.value) == line and caught.value.call == action
    assert emulator.calls(action) == 1  # no retry: the API answers the same again


@pytest.mark.contract_exempt("answers a label of another shape than the SDK's model on purpose")
def test_pool_labels_with_one_unreadable_are_refused_not_written_back_without_it(emulator):
    """``rollout pause`` reads a pool's labels and writes the whole list back: a label of another shape was
    read as no pool at all ("cluster has no node pool"); read past, the write would drop it from the pool."""
    pool = emulator.nodepools[0]
    pool_id = pool["nodepool_info"]["nodepool_id"]
    pool["kubernetes_config"]["labels"].append({"key": 7, "value": "x"})
    with pytest.raises(Refused) as caught:
        lookup(emulator).nodepool_labels(emulator.cluster_id, pool_id)
    assert str(caught.value) == (
        "DescribeClusterNodePools answered label 1 of node pool %s as an object whose key is a number, not "
        "{\"key\": \"<text>\", \"value\": ...}; the labels are written back whole, so none is changed" % pool_id)


@pytest.mark.contract_exempt("answers a detail field of another shape than the SDK's model on purpose")
def test_deploys_cluster_detail_with_a_field_the_model_does_not_fit_is_still_read(emulator):
    """deploy's and doctor's DescribeClusterDetail read the body the same way: a field of another shape than
    the SDK's model (``maintenance_window`` a string where the model has an object) left the body None, and
    the cluster read with no VPC, no vSwitch and no endpoint, which deploy and doctor then reported as the
    cluster's own. The answer is read as the API sent it."""
    from functions.base.settings import Endpoint
    from functions.commands.stack.cluster_network import read
    from functions.commands.stack.credentials import Keys

    emulator.detail["maintenance_window"] = "weekly"
    network = read(Keys(AK, SECRET, TOKEN), "cn-beijing", emulator.cluster_id,
                   Endpoint(emulator.endpoint.split("://", 1)[1], "http"), timeout_s=5)
    assert network.vpc_id == "vpc-2ze0cluster0vpc0a1b2" and network.vswitch_ids == ("vsw-2ze0control0plane0c3d4",)
    assert network.intranet_endpoint == "https://192.168.0.251:6443"
