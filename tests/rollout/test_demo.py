"""The demo shows a label change rolled across a pool: a wave, a deferred node, a drain that waits on a
PodDisruptionBudget, and a last invocation that finds every node done."""

import json

from functions.commands.main import main


def test_demo_rolls_the_example_pool(capsys):
    assert main(["demo", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    first, second, third = ({n["node_name"]: n["outcome"] for n in run} for run in out["rollout"])
    assert first["cn-beijing.192.168.12.31"] == "partitioned" and first["cn-beijing.192.168.12.47"] == "deferred"
    assert first["cn-beijing.192.168.12.58"] == "skipped"  # already in the requested layout
    assert second["cn-beijing.192.168.12.47"] == "partitioned" and second["cn-beijing.192.168.12.31"] == "skipped"
    assert set(third.values()) == {"skipped"}
    assert "new capacity shows (nvidia.com/mig-3g.20gb=16)" in out["rollout"][0][0]["reason"]
    drains = [e["message"] for e in out["events"] if e["reason"] == "MigRolloutDrain"]
    assert drains[0].startswith("waiting on PodDisruptionBudget: team/infer-0") and "evicted team/infer-0" in drains
    # the DaemonSet's GPU pod stayed: only the workload was evicted
    assert not any("dcgm-exporter" in m for m in drains)
