"""The demo's autoscaler part: an autoscaling pool at zero nodes gets its tags once, then stays in sync."""

import os

from functions.commands import demo

K3G = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-3g.20gb"


def test_the_demo_writes_the_tags_once_and_then_finds_the_pool_in_sync(tmp_path):
    with open(os.path.join(demo.EXAMPLES, "event-reconcile.json"), "rb") as fh:
        runs, writes = demo._autoscaler(demo._settings(str(tmp_path)), fh.read())
    (first,), (echo,), (reconcile,) = (r.pool_tags for _, r in runs)
    assert first["written"] and first["set"] == {K3G: "16"}
    assert echo["in_sync"] and not echo["written"] and reconcile["in_sync"] and not reconcile["written"]
    assert [r.dry_run for _, r in runs] == [False, False, True]
    assert writes == [{"nodepool_id": "np3e7b0c4f1a8d5e2b9c6f3a0d7e4b1c85",
                       "tags": [["team", "ml-platform"], [K3G, "16"]]}]
