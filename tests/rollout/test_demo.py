"""The demo shows a label change rolled across a pool (one invocation, wave after wave: a drain that waits
on a PodDisruptionBudget, then the next node; a second invocation finds every node done) and a label change
that only adds instances rolled without cordon or drain."""

import json

import pytest

from tests.support.demo_run import demo_json


@pytest.fixture(scope="module")
def out():
    """One run of the demo for the tests here (it runs the node tool some thirty times): the process's one."""
    return json.loads(demo_json())


def test_demo_rolls_the_example_pools(out):
    first, second = ({n["node_name"]: (n["outcome"], n["wave"]) for n in run} for run in out["rollout"])
    assert first["cn-beijing.192.168.12.31"] == ("partitioned", 1)
    assert first["cn-beijing.192.168.12.47"] == ("partitioned", 2)  # the next wave of the same invocation
    assert first["cn-beijing.192.168.12.58"][0] == "skipped"  # already in the requested layout
    assert {o for o, _ in second.values()} == {"skipped"}
    assert "new capacity shows (nvidia.com/mig-3g.20gb=16)" in out["rollout"][0][0]["reason"]
    drains = [e["message"] for e in out["events"] if e["reason"] == "MigRolloutDrain"]
    assert drains[0].startswith("waiting on PodDisruptionBudget: team/infer-0") and "evicted team/infer-0" in drains
    # the DaemonSet's GPU pod stayed: only the workload was evicted
    assert not any("dcgm-exporter" in m for m in drains)


def test_demo_adds_instances_without_cordon_or_drain(out):
    grown = out["additive"]
    assert [(n["outcome"], n["wave"]) for n in grown["nodes"]] == [("partitioned", 1)] * 3
    assert [d["drain"] for d in grown["decisions"]] == [False] * 3
    assert grown["cordoned"] == [] and grown["pods"] == ["team/infer-0", "team/infer-1", "team/infer-2"]
    assert {e["reason"] for e in grown["events"]} == {"MigRolloutNoDrain", "MigRolloutDone"}
    assert all(n["reason"].startswith("32 changes; new capacity shows (nvidia.com/mig-1g.5gb=8, "
                                      "nvidia.com/mig-2g.10gb=8, nvidia.com/mig-3g.20gb=8)") for n in grown["nodes"])
