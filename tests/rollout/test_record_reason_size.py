"""A rollout record the hook writes is one it reads back (functions/decision/waves.py, ``Progress``).

The reader refuses a record longer than ``MAX_PROGRESS_TEXT`` (4,096 bytes: anything longer is not ours, and a
node annotation can hold 256 KiB that anyone with node patch rights writes) and reads it as no record. The
writer did not bound the reason it put in: a drain that timed out on a node whose many GPU pods a
PodDisruptionBudget kept (one ``<pod>: <the API server's answer>`` each) wrote a stop record of 12 KB, which every
later run read as none: the pool's stop was lost, the node was cordoned and drained again at every run, and
its stop told again each time. Now the record's reason is cut to fit, and the stop holds.

Through ``run_event`` against the test Kubernetes API server, with the played nodes of
tests/rollout/conftest.py."""

import pytest

from functions.decision.waves import MAX_PROGRESS_TEXT, PROGRESS_ANNOTATION, Progress

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]


def test_a_drain_timeout_on_a_node_with_many_kept_pods_stops_the_pool_for_good(cluster):
    cluster.add_nodes()
    api = cluster.api
    for i in range(50):  # 50 GPU pods of one PodDisruptionBudget that allows no disruption
        api.add_pod("team", "infer-%02d-5d8f7c9b6-x2k4q" % i, "node-a", labels={"app": "infer"}, gpus=1,
                    owner_kind="ReplicaSet")
    api.add_pdb("team", "infer", {"app": "infer"}, max_unavailable=0)
    first = cluster.run(ACK_MIG_DRAIN_TIMEOUT_S="4")
    node = {n["node_name"]: n for n in first.nodes}["node-a"]
    assert node["outcome"] == "drain-timeout" and "infer-49" in node["reason"]  # the result keeps every pod
    text = api.nodes["node-a"]["metadata"]["annotations"][PROGRESS_ANNOTATION]
    assert len(text.encode("utf-8")) <= MAX_PROGRESS_TEXT, len(text)
    record = Progress.from_annotation(text)
    assert record is not None and record.step == "drain-timeout" and record.reason.startswith("drain-timeout after 4s")
    evictions = len([r for r in api.requests if r.path.endswith("/eviction")])
    again = cluster.run(ACK_MIG_DRAIN_TIMEOUT_S="4")
    outcomes = {n["node_name"]: n["outcome"] for n in again.nodes}
    assert outcomes == {"node-a": "deferred", "node-b": "deferred", "node-c": "deferred"}, again.nodes
    assert all("stopped" in n["reason"] for n in again.nodes), again.nodes
    assert len([r for r in api.requests if r.path.endswith("/eviction")]) == evictions  # node-a not drained again
    assert not cluster.unschedulable("node-a")


def test_a_reason_of_any_length_and_script_fits_the_record():
    for reason in ("x" * 100000, "\u00e9" * 5000, "\U0001f600" * 3000, "short"):
        text = Progress("sequence=1g.5gb", "failed", True, 1000.0, reason, "owner-1", 2000.0).to_annotation()
        assert len(text.encode("utf-8")) <= MAX_PROGRESS_TEXT, (reason[:10], len(text))
        back = Progress.from_annotation(text)
        assert back is not None and reason.startswith(back.reason.rstrip(".")) and back.reason
    assert Progress.from_annotation(Progress("t", "failed", True, 1.0, "short", "o", 2.0).to_annotation()).reason \
        == "short"
