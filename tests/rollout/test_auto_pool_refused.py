"""One auto pool that ACK refuses to prove fails alone (docs/auto-pools.md "Only members").

A pool's nodes count only when ACK lists them in it (DescribeClusterNodes with the pool's id). A refusal of
that call that no retry changes (the pool deleted while the cluster still lists it, a 404 or 400 about that
pool's id only) ended every auto tick in ``error``, for every pool, at every tick: in the plan, in the reads
of an earlier pool's pods, in the idle tick's stranded records and in a pod event's choice. Now that pool is
skipped with one line naming it and the other pools are planned; its pods count for nobody this tick (no
later pool plans a pod it may count); a transient failure (throttling, 5xx, no answer) still ends the tick in
``retry``, as before, and a refusal of every pool read (a RAM policy without cs:DescribeClusterNodes) still
ends it in ``error``.

Through the tick's entry (``run_event``) with the real ACK SDK against the CS emulator
(tests/support/cs_emulator.py, ``refuse_pool``) and the test Kubernetes API server."""

import json

import pytest

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.delivery.node_executor import DeliveryExecutor
from functions.pipeline.event import run_event
from tests.function.conftest import AK, SECRET, TOKEN, no_proxy  # noqa: F401  (fixture)
from tests.rollout.conftest import CLUSTER, POOL
from tests.rollout.test_auto_overlap import add_two_a
from tests.rollout.test_auto_rollout import TICK, PerGpuNodes, add_auto_nodes, waiting

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

TWO = "np-two"


@pytest.fixture
def ack(no_proxy):  # noqa: F811  (the fixture above)
    """The CS emulator holding two auto pools, the test pool (``auto-a``) and ``np-two`` (``two-a``)."""
    from tests.support.cs_emulator import CsEmulator

    labels = [{"key": "ack-mig-hook/layout", "value": "auto"}]
    pools = [{"nodepool_info": {"nodepool_id": pool, "name": pool}, "kubernetes_config": {"labels": labels},
              "scaling_group": {"scaling_group_id": "asg-" + pool, "instance_types": ["ecs.ebmgn7.26xlarge"]}}
             for pool in (POOL, TWO)]
    nodes = [{"instance_id": "i-" + n, "node_name": n, "instance_type": "ecs.ebmgn7.26xlarge", "nodepool_id": p,
              "state": "running", "ip_address": ["10.0.1.%d" % i]}
             for i, (n, p) in enumerate((("auto-a", POOL), ("two-a", TWO)), 1)]
    with CsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN).load_inventory(
            {"cluster_id": CLUSTER, "nodepools": pools, "nodes": nodes}) as emu:
        yield emu


def env(cluster, ack, **extra):
    return dict(cluster.settings_env, ACK_MIG_CS_ENDPOINT=ack.endpoint, ACK_MIG_REGION="cn-beijing",
                ALIBABA_CLOUD_ACCESS_KEY_ID=AK, ALIBABA_CLOUD_ACCESS_KEY_SECRET=SECRET,
                ALIBABA_CLOUD_SECURITY_TOKEN=TOKEN, ACK_MIG_CLUSTER_ID=CLUSTER, ACK_MIG_API_TIMEOUT_S="2",
                ACK_MIG_API_MAX_ATTEMPTS="1", **extra)


def run(cluster, ack, transport, event=TICK, logs=None):
    settings = load_settings(env(cluster, ack))
    return run_event(event, settings, executor=DeliveryExecutor.from_settings(settings, transport=transport),
                     logger=JsonLogger("INFO", stream=logs) if logs is not None else JsonLogger("OFF"),
                     kube=cluster.kube)


def two_nodes(api):
    add_auto_nodes(api, ["auto-a"])  # the test pool: an idle 7g.40gb
    add_two_a(api, TWO)


def select(api, pool, names=("serve-0", "serve-1")):
    with api.lock:
        for name in names:
            api.pods[("llm", name)]["spec"]["nodeSelector"] = {"alibabacloud.com/nodepool-id": pool}


REFUSED = ("pool %s: ACK refused the list of its nodes (DescribeClusterNodes: 404 ErrorNodePoolNotFound): not "
           "planned, and the pods it may count wait" % POOL)


def test_a_pool_ack_refuses_is_skipped_and_the_others_are_planned(cluster, ack):
    api = cluster.api
    two_nodes(api)
    waiting(api, 2)
    select(api, TWO)  # np-two's demand alone
    ack.refuse_pool(POOL)
    transport = PerGpuNodes(api)
    import io

    logs = io.StringIO()
    result = run(cluster, ack, transport, logs=logs)
    assert result.outcome == "done", result.reason
    assert [n for n, _ in transport.requests] == ["two-a"], (result.reason, transport.requests)
    assert result.reason.endswith("; " + REFUSED), result.reason
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    assert [(x["level"], x.get("nodepool_id")) for x in lines if x.get("reason") == REFUSED] == [("WARNING", POOL)]


@pytest.mark.parametrize("gold", [False, True], ids=["any", "node-label"])
def test_the_pods_a_refused_earlier_pool_may_count_are_planned_by_no_later_pool(cluster, ack, gold):
    """Which pods an earlier pool counts is read from the nodes ACK lists in it; without that list a later
    pool cannot tell which pods are its own. Its pods (read from every Node carrying its label, the widest
    reading) wait: planning them in the later pool would repartition a GPU for pods the earlier pool's idle
    instances serve once ACK answers again. ``node-label``: the pods select a label only the nodes carry (not
    the pools' templates): read from the pool's template alone, the later pool planned them."""
    api = cluster.api
    two_nodes(api)
    waiting(api, 2)  # either pool's GPU serves both, the first pool's by id
    if gold:
        with api.lock:
            for name in ("auto-a", "two-a"):
                api.nodes[name]["metadata"]["labels"]["tier"] = "gold"
            for i in range(2):
                api.pods[("llm", "serve-%d" % i)]["spec"]["nodeSelector"] = {"tier": "gold"}
    assert POOL < TWO
    ack.refuse_pool(POOL)
    transport = PerGpuNodes(api)
    result = run(cluster, ack, transport)
    assert transport.requests == [], (result.reason, transport.requests)
    assert result.outcome == "done" and REFUSED in result.reason, result.reason
    # a tick of np-two alone (a pool operation, a manual run naming it) reads the first pool the same way
    cluster.now[0] += 60
    result = run(cluster, ack, transport, event=json.dumps({"cluster_id": CLUSTER, "nodepool_id": TWO}))
    assert transport.requests == [] and REFUSED in result.reason, (result.reason, transport.requests)


def test_a_pod_event_is_planned_in_its_pool_while_an_earlier_pool_is_refused(cluster, ack):
    from tests.delivery.test_pod_events import pod_event

    api = cluster.api
    two_nodes(api)
    waiting(api, 1)
    select(api, TWO, ["serve-0"])
    ack.refuse_pool(POOL)
    transport = PerGpuNodes(api)
    result = run(cluster, ack, transport, event=pod_event("llm", "serve-0", cluster=CLUSTER))
    assert [n for n, _ in transport.requests] == ["two-a"], (result.reason, transport.requests)
    assert result.outcome == "done", result.reason


def test_a_stranded_record_of_another_pool_ends_while_one_pool_is_refused(cluster, ack):
    """The idle tick (no MIG pod waits) ends the records a stopped run left, pool by pool: one pool ACK
    refuses keeps its own, said in one line, and the other pool's ends."""
    from functions.decision import waves as rp
    from tests.rollout.test_interrupted import strand

    api = cluster.api
    two_nodes(api)
    strand(api, ["auto-a", "two-a"])
    ack.refuse_pool(POOL)
    result = run(cluster, ack, PerGpuNodes(api))
    assert result.outcome == "skip" and REFUSED.split(": not planned")[0] in result.reason, result.reason
    assert cluster.annotation("two-a")["step"] == rp.DONE
    assert cluster.annotation("auto-a")["step"] == rp.APPLYING


def test_a_transient_failure_of_one_pools_list_still_ends_the_tick_in_retry(cluster, ack):
    api = cluster.api
    two_nodes(api)
    waiting(api, 2)
    select(api, TWO)
    ack.refuse_pool(POOL, 503, "ServiceUnavailable")
    transport = PerGpuNodes(api)
    result = run(cluster, ack, transport)
    assert result.outcome == "retry" and "DescribeClusterNodes" in result.reason, result.reason
    assert transport.requests == []


def test_a_refusal_of_every_pool_still_ends_the_tick_in_error(cluster, ack):
    """A role without cs:DescribeClusterNodes is refused for each pool alike: nothing is planned, and the tick
    ends ``error`` naming the refusal (an alert), not a quiet ``skip``."""
    api = cluster.api
    two_nodes(api)
    waiting(api, 2)
    ack.refuse_pool(POOL, 403, "Forbidden.RAM")
    ack.refuse_pool(TWO, 403, "Forbidden.RAM")
    transport = PerGpuNodes(api)
    result = run(cluster, ack, transport)
    assert result.outcome == "error" and "Forbidden.RAM" in result.reason, result.reason
    assert transport.requests == []


def test_a_pool_whose_id_no_node_label_can_hold_is_skipped_and_the_others_are_planned(cluster, ack):
    """The API server refuses the label selector of a pool id that is no label value (400: more than 63
    characters): that refusal is about the pool alone and repeats at every tick. It ended every tick of every
    auto pool in ``retry``."""
    api = cluster.api
    long = "np-a" + "x" * 64
    assert long < TWO
    ack.nodepools.append({"nodepool_info": {"nodepool_id": long, "name": "long"},
                          "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}]},
                          "scaling_group": {"scaling_group_id": "asg-long", "instance_types": ["ecs.ebmgn7.26xlarge"]}})
    two_nodes(api)
    waiting(api, 2)
    select(api, TWO)
    transport = PerGpuNodes(api)
    result = run(cluster, ack, transport)
    assert result.outcome == "done", result.reason
    assert [n for n, _ in transport.requests] == ["two-a"], (result.reason, transport.requests)
    assert "; pool %s: the API server refused the list of its nodes (400: " % long in result.reason, result.reason


def test_a_tick_of_the_refused_pool_alone_ends_in_error_naming_it(cluster, ack):
    """A step of that one pool (a pool operation, a manual run naming it, its pod event) plans nothing: an
    error naming the pool and ACK's answer, never retried (FC would meet the same refusal)."""
    api = cluster.api
    two_nodes(api)
    waiting(api, 2)
    ack.refuse_pool(POOL)
    transport = PerGpuNodes(api)
    result = run(cluster, ack, transport, event=json.dumps({"cluster_id": CLUSTER, "nodepool_id": POOL}))
    assert result.outcome == "error" and result.reason == REFUSED, result.reason
    assert transport.requests == []


# ---- the result names the refused pools in a field of their own (refused_pools), not only in its reason ----

def test_the_tick_names_the_refused_pool_in_refused_pools(cluster, ack):
    """The tick that planned the other pool is ``done``: only its reason named the refused pool.
    ``refused_pools`` (pool id -> the line) names it, in the JSON too, and so does a pod event's result."""
    from tests.delivery.test_pod_events import pod_event

    api = cluster.api
    two_nodes(api)
    waiting(api, 2)
    select(api, TWO)
    ack.refuse_pool(POOL)
    result = run(cluster, ack, PerGpuNodes(api))
    assert result.outcome == "done" and result.refused_pools == {POOL: REFUSED}, result
    assert result.to_json()["refused_pools"] == {POOL: REFUSED}
    cluster.now[0] += 60
    result = run(cluster, ack, PerGpuNodes(api), event=pod_event("llm", "serve-0", cluster=CLUSTER))
    assert result.refused_pools == {POOL: REFUSED}, result  # the tick's line: it says what came of the pool


def test_the_idle_tick_names_the_pool_whose_stranded_records_stay_in_refused_pools(cluster, ack):
    from tests.rollout.test_interrupted import strand

    api = cluster.api
    two_nodes(api)
    strand(api, ["auto-a", "two-a"])
    ack.refuse_pool(POOL)
    result = run(cluster, ack, PerGpuNodes(api))
    line = REFUSED.split(": not planned")[0] + ": its stranded records stay"
    assert result.outcome == "skip" and result.refused_pools == {POOL: line}, result
    assert result.to_json()["refused_pools"] == {POOL: line}


# ---- one pool whose pods cannot be read (a 503, an answer of another shape) fails alone, then retry ----

UNREAD = "pool %s: the pods on its nodes could not be read" % POOL


@pytest.mark.parametrize("mine", [True, False], ids=["others-demand", "may-count"])
def test_a_pool_whose_pods_cannot_be_read_fails_alone_and_the_tick_ends_in_retry(cluster, ack, mine):
    """The pods on a pool's nodes (one list a node) that could not be read (a 503 after the client's tries, or
    an answer of another shape) ended the whole tick in retry before any pool was planned: one pool's
    failing list stopped every auto pool, at every tick while it lasted. Now that pool alone is not planned,
    the others are (``others-demand``: np-two's node changes for its pods), the pods it may count are held
    back from the later pools as a refused pool's are (``may-count``: np-two plans nothing for them), and the
    tick still ends in retry naming it: FC tries again, and that pool is planned once its pods read."""
    api = cluster.api
    two_nodes(api)
    waiting(api, 2)
    if mine:
        select(api, TWO)
    assert POOL < TWO
    cluster.api.break_next(times=50, status=503, method="GET", path="/api/v1/pods", query="spec.nodeName=auto-a")
    transport = PerGpuNodes(api)
    result = run(cluster, ack, transport)
    assert result.outcome == "retry" and UNREAD in result.reason, result.reason
    assert [n for n, _ in transport.requests] == (["two-a"] if mine else []), (result.reason, transport.requests)
