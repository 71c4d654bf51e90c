"""One labelled pool that ACK refuses to list fails alone (docs/function.md "Fault containment").

The labelled pipeline reads each pool's nodes from ACK (DescribeClusterNodes with the pool's id), as does
the step that finds MIG nodes in a pool whose partition label was removed. A refusal of that call that no
retry changes (the pool deleted while the cluster still lists it, a 404 or 400 about that pool's id) ended
the whole reconcile in ``error`` with no decision, for every pool, at every timer tick. Now that pool gets
one line in the result's reason and one WARNING log line, and the other pools are decided and rolled out; a
run about that pool alone ends ``error`` with the line, and a transient failure (throttling, 5xx, no
answer) still ends the run in ``retry``, as the auto pool tick does (tests/rollout/test_auto_pool_refused.py).

Through ``run_event`` with the real ACK SDK against the CS emulator (``refuse_pool``), the test Kubernetes
API server, and the played nodes of tests/rollout/conftest.py."""

import io
import json

import pytest

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.delivery.node_executor import DeliveryExecutor
from functions.pipeline.event import run_event
from tests.function.conftest import AK, SECRET, TOKEN, no_proxy  # noqa: F401  (fixture)
from tests.rollout.conftest import CLUSTER, NEW, OLD, POOL, TIMER, capacity, node_labels

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

TWO = "np-two"
OFF = "np-off"  # a pool whose partition label was removed, its node still with MIG
SEQUENCE = [{"key": "ack.aliyun.com/gpu-partition-sequence", "value": NEW}]
NODES = (("node-a", POOL), ("node-b", POOL), ("two-a", TWO), ("off-a", OFF))
REFUSED = "pool %s: ACK refused the list of its nodes (DescribeClusterNodes: 404 ErrorNodePoolNotFound)"


@pytest.fixture
def ack(no_proxy):  # noqa: F811  (the fixture above)
    """The CS emulator holding two labelled pools, the test pool (node-a, node-b) and ``np-two`` (two-a), and
    ``np-off`` (off-a), whose label was removed."""
    with emulator(CLUSTER) as emu:
        yield emu


def emulator(cluster_id):
    from tests.support.cs_emulator import CsEmulator

    pools = [{"nodepool_info": {"nodepool_id": pool, "name": pool}, "kubernetes_config": {"labels": labels},
              "scaling_group": {"scaling_group_id": "asg-" + pool, "instance_types": ["ecs.ebmgn7.26xlarge"]}}
             for pool, labels in ((POOL, SEQUENCE), (TWO, SEQUENCE), (OFF, []))]
    nodes = [{"instance_id": "i-" + n, "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge", "nodepool_id": p,
              "state": "running", "ip_address": ["10.0.1.%d" % i]} for i, (n, p) in enumerate(NODES, 1)]
    return CsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN).load_inventory(
        {"cluster_id": cluster_id, "nodepools": pools, "nodes": nodes})


def run(cluster, ack, event=TIMER, logs=None, **extra):
    settings = load_settings(dict(cluster.settings_env, ACK_MIG_CS_ENDPOINT=ack.endpoint, ACK_MIG_REGION="cn-beijing",
                                  ALIBABA_CLOUD_ACCESS_KEY_ID=AK, ALIBABA_CLOUD_ACCESS_KEY_SECRET=SECRET,
                                  ALIBABA_CLOUD_SECURITY_TOKEN=TOKEN, ACK_MIG_CLUSTER_ID=CLUSTER,
                                  ACK_MIG_API_TIMEOUT_S="2", ACK_MIG_API_MAX_ATTEMPTS="1", **extra))
    return run_event(event, settings, executor=DeliveryExecutor.from_settings(settings, transport=cluster.transport),
                     logger=JsonLogger("INFO", stream=logs) if logs is not None else JsonLogger("OFF"),
                     kube=cluster.kube)


def add_nodes(api):
    for name, pool in NODES:  # every node on the old layout
        api.add_node(name, labels=node_labels(OLD, pool=pool), capacity=capacity(OLD))


def pool_event(pool):
    return json.dumps({"cluster_id": CLUSTER, "nodepool_id": pool})  # e.g. after ModifyClusterNodePool


def test_a_labelled_pool_ack_refuses_fails_alone_and_the_others_are_rolled_out(cluster, ack):
    add_nodes(cluster.api)
    ack.refuse_pool(POOL, 503, "ServiceUnavailable")  # transient: the whole run is retried, as before
    result = run(cluster, ack)
    assert result.outcome == "retry" and "DescribeClusterNodes" in result.reason, result.reason
    assert cluster.transport.seen == []
    ack.refuse_pool(POOL)  # for good: that pool alone
    logs = io.StringIO()
    result = run(cluster, ack, logs=logs)
    assert result.outcome == "done", result.reason
    assert [(d.node_name, d.action) for d in result.decisions if d.nodepool_id != OFF] == [("two-a", "partition")]
    assert cluster.transport.seen == ["two-a"] and cluster.annotation("two-a")["step"] == "done"
    assert cluster.annotation("node-a") is None and cluster.annotation("node-b") is None
    assert result.reason.endswith("; " + REFUSED % POOL), result.reason
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    assert [(x["level"], x["message"], x.get("nodepool_id")) for x in lines if x.get("reason") == REFUSED % POOL] \
        == [("WARNING", "node pool refused", POOL)]


def test_an_event_of_the_refused_pool_alone_ends_in_error_naming_it(cluster, ack):
    """A pool operation (or a manual run naming it) decides nothing: an error naming the pool and ACK's
    answer, never retried (FC would meet the same refusal), never a quiet ``done``."""
    add_nodes(cluster.api)
    ack.refuse_pool(POOL)
    result = run(cluster, ack, event=pool_event(POOL))
    assert result.outcome == "error" and result.reason == REFUSED % POOL, result.reason
    assert result.decisions == [] and cluster.transport.seen == []


def test_a_refusal_of_every_pool_ends_in_error_naming_each(cluster, ack):
    """A role without cs:DescribeClusterNodes is refused for each pool alike: nothing is decided, and the run
    ends ``error`` (the alert), as it did before, now naming each pool."""
    add_nodes(cluster.api)
    for pool in (POOL, TWO, OFF):
        ack.refuse_pool(pool, 403, "Forbidden.RAM")
    result = run(cluster, ack)
    assert result.outcome == "error" and cluster.transport.seen == [], result.reason
    assert result.reason == "; ".join("pool %s: ACK refused the list of its nodes (DescribeClusterNodes: 403 "
                                      "Forbidden.RAM)" % pool for pool in (POOL, TWO, OFF))


def test_a_refused_pool_whose_label_was_removed_fails_alone_too(cluster, ack):
    """The pools without a partition label are listed for their MIG nodes (to turn MIG off with
    ACK_MIG_ON_LABEL_REMOVAL=disable): one ACK refuses fails alone there too, and alone it is an error."""
    add_nodes(cluster.api)
    ack.refuse_pool(OFF)
    result = run(cluster, ack, ACK_MIG_ON_LABEL_REMOVAL="disable")
    assert result.outcome == "done" and result.reason.endswith("; " + REFUSED % OFF), result.reason
    assert cluster.transport.seen == ["node-a", "two-a"]  # one per pool: the budget of 1
    alone = run(cluster, ack, event=pool_event(OFF), ACK_MIG_ON_LABEL_REMOVAL="disable")
    assert alone.outcome == "error" and alone.reason == REFUSED % OFF, alone.reason
    assert cluster.transport.seen == ["node-a", "two-a"]


# ---- the result names the refused pools in a field of their own (refused_pools), not only in its reason ----

def test_the_result_names_the_refused_pool_in_refused_pools(cluster, ack):
    """A refused pool has no decision and the run is ``done``: only its reason named it, so a reader of the
    result had to parse text. ``refused_pools`` (pool id -> the line) names it, in the JSON too; a run with
    no refused pool has no such key."""
    add_nodes(cluster.api)
    assert "refused_pools" not in run(cluster, ack).to_json()
    ack.refuse_pool(POOL)
    result = run(cluster, ack)
    assert result.outcome == "done" and result.refused_pools == {POOL: REFUSED % POOL}, result
    assert result.to_json()["refused_pools"] == {POOL: REFUSED % POOL}


def test_a_refused_pool_is_still_named_when_a_later_pool_ends_the_run_in_retry(cluster, ack):
    """The pools are listed in order: the first refused for good, the next failing for now (503), which ends
    the whole run in ``retry`` with that failure's reason. The first pool's line was lost with the reason it
    was in (only its WARNING line was left); ``refused_pools`` still names it."""
    add_nodes(cluster.api)
    ack.refuse_pool(POOL)
    ack.refuse_pool(TWO, 503, "ServiceUnavailable")
    result = run(cluster, ack)
    assert result.outcome == "retry" and POOL not in result.reason, result.reason
    assert result.refused_pools == {POOL: REFUSED % POOL}, result.refused_pools
    assert result.to_json()["refused_pools"] == {POOL: REFUSED % POOL}


def test_invoke_strict_exits_3_when_a_pool_was_refused_and_the_others_were_decided(cluster, no_proxy,  # noqa: F811
                                                                                    monkeypatch, capsys, tmp_path):
    """``invoke --strict`` (the CI gate) exited 0: the refused pool has no decision, the other pools' are
    fine, and the event is ``done``. It exits 3 now; without --strict the run still exits 0."""
    from functions.commands import main as cli

    valid = "c" + "0123456789abcdef" * 2  # the command line takes an ACK cluster id only
    add_nodes(cluster.api)
    for name in ("ALIBABA_CLOUD_PROFILE", "ALIBABA_CLOUD_CREDENTIALS_FILE", "ALIBABA_CLOUD_ROLE_ARN",
                 "ALIBABA_CLOUD_OIDC_TOKEN_FILE", "ALIBABA_CLOUD_CREDENTIALS_URI"):
        monkeypatch.delenv(name, raising=False)
    for name, value in dict(cluster.settings_env, HOME=str(tmp_path), ALIBABA_CLOUD_ECS_METADATA_DISABLED="true",
                            ACK_MIG_REGION="cn-beijing", ACK_MIG_CLUSTER_ID=valid, ALIBABA_CLOUD_ACCESS_KEY_ID=AK,
                            ALIBABA_CLOUD_ACCESS_KEY_SECRET=SECRET, ALIBABA_CLOUD_SECURITY_TOKEN=TOKEN,
                            ACK_MIG_API_TIMEOUT_S="2", ACK_MIG_API_MAX_ATTEMPTS="1").items():
        monkeypatch.setenv(name, value)
    event = tmp_path / "timer.json"
    event.write_text(json.dumps({"cluster_id": valid}))
    argv = ["invoke", "--event", str(event), "--kubeconfig", str(tmp_path / "function.conf"), "--dry-run"]

    def invoke(*extra):
        code = cli.main(argv + list(extra))
        return (code,) + capsys.readouterr()

    with emulator(valid) as ack:
        monkeypatch.setenv("ACK_MIG_CS_ENDPOINT", ack.endpoint)
        code, out, err = invoke("--strict")
        assert code == 0, (out, err)  # nothing refused: the same run passes the gate
        ack.refuse_pool(POOL)
        code, out, err = invoke("--strict", "--json")
        assert code == 3, (out, err)
        result = json.loads(out)
        assert result["outcome"] == "done" and result["refused_pools"] == {POOL: REFUSED % POOL}, out
        assert [d["node_name"] for d in result["decisions"] if d["action"] == "partition"] == ["two-a"], out
        code, out, err = invoke()
        assert code == 0, err
        assert "  refused   " + REFUSED % POOL in out.splitlines(), out  # the plain text names it too


def test_a_refusal_whose_code_is_odd_text_is_one_bounded_line(cluster, ack):
    """ACK's error code is the answer's text (a proxy in front of ACK may write anything there): a code holding a
    line break or 5,000 characters still gives the pool one line of bounded length, in the result's reason and
    ``refused_pools`` and in the WARNING log line."""
    add_nodes(cluster.api)
    ack.refuse_pool(POOL, 404, "ErrorNodePool\nNotFound" + "x" * 5000)
    logs = io.StringIO()
    result = run(cluster, ack, logs=logs)
    assert result.outcome == "done", result.reason
    line = result.refused_pools[POOL]
    assert "\n" not in line and len(line) < 300 and line.startswith("pool %s: ACK refused" % POOL), line
    assert "\n" not in result.reason and len(result.reason) < 1000, result.reason
