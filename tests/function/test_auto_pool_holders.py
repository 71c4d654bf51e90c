"""Which instance each running pod holds, as the node reports it (issue 35, item 1): the auto pool's supply
uses the holders the node read from kubelet's allocations (annotation ``ack-mig-hook/gpu-holders``,
node_bootstrap/commands/holdings.py); where the node has not said, it marks every instance a pod could hold,
so the plan is safe under every assignment. A running pod's instance is never in a destroy list."""

import json

from functions.decision.layout import Bounds, PodDemand, plan
from functions.kube.supply import node_supply

A, B, C = "uid-a", "uid-b", "uid-c"
LAYOUTS = {"0": [["3g.20gb", 0], ["3g.20gb", 4]], "1": [["1g.5gb", 0], ["1g.5gb", 1], ["1g.5gb", 2]]}


def node(holders=None, layouts=LAYOUTS, name="n1"):
    annotations = {"ack-mig-hook/gpu-layouts": json.dumps(layouts)}
    if holders is not None:
        annotations["ack-mig-hook/gpu-holders"] = holders if isinstance(holders, str) else json.dumps(holders)
    return {"metadata": {"name": name, "annotations": annotations, "labels": {
        "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-40GB", "aliyun.accelerator/nvidia_count": "2",
        "nvidia.com/mig.config.state": "success"}}}


def running(uid, profile, count=1, name=None, node_name="n1", phase="Running"):
    return {"metadata": {"name": name or uid, "namespace": "llm", "uid": uid},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/mig-" + profile: str(count)}}}]},
            "status": {"phase": phase}}


def report(pods, gpu0=(None, None), gpu1=(None, None, None)):
    return {"at": "2026-12-06T10:00:00Z", "pods": list(pods),
            "gpus": {"0": [["3g.20gb", 0, gpu0[0]], ["3g.20gb", 4, gpu0[1]]],
                     "1": [["1g.5gb", s, h] for s, h in zip((0, 1, 2), gpu1)]}}


def marks(n, pods):
    gpus, _ = node_supply(n, pods)
    return [[(i.profile, i.start) for i in g.instances if i.in_use] for g in gpus]


def test_reported_holders_are_used_not_the_first_instances():
    # A holds the 3g.20gb at 4 (the old guess marked the one at 0), B the 1g.5gb at 2
    pods = [running(A, "3g.20gb"), running(B, "1g.5gb")]
    assert marks(node(report([A, B], (None, A), (None, None, B))), pods) == [[("3g.20gb", 4)], [("1g.5gb", 2)]]


def test_without_a_report_every_instance_a_pod_could_hold_is_in_use():
    pods = [running(A, "3g.20gb"), running(B, "1g.5gb")]
    everything = [[("3g.20gb", 0), ("3g.20gb", 4)], [("1g.5gb", 0), ("1g.5gb", 1), ("1g.5gb", 2)]]
    assert marks(node(), pods) == everything
    for unreadable in ('{"at": "x", "unknown": "kubelet checkpoint unreadable"}', "{not json", '{"pods": 7}',
                       '{"at": "x", "pods": [], "gpus": {"0": [["3g.20gb", 0, NaN]]}}', "x" * 70000):
        assert marks(node(unreadable), pods) == everything
    # a GPU the node could not read is said nothing about; the other GPU's report stands
    half = report([A, B], (None, A))
    half["gpus"]["1"] = None
    assert marks(node(half), pods) == [[("3g.20gb", 4)], everything[1]]


def test_a_pod_bound_after_the_report_may_hold_any_instance_of_its_profile_that_was_free():
    pods = [running(A, "3g.20gb"), running(C, "1g.5gb")]  # C is not among the pods the report covers
    n = node(report([A, B], (None, A), (None, None, B)))
    # B is gone: its 1g.5gb at 2 is free unless someone newer has it; C may have any of the three
    assert marks(n, pods) == [[("3g.20gb", 4)], [("1g.5gb", 0), ("1g.5gb", 1), ("1g.5gb", 2)]]
    # without C, B's instance is free again and nothing else is held on GPU 1
    assert marks(n, pods[:1]) == [[("3g.20gb", 4)], []]
    # a finished pod holds nothing
    assert marks(n, [running(A, "3g.20gb", phase="Succeeded")]) == [[], []]


def test_an_instance_the_report_does_not_name_counts_as_unknown():
    rep = report([A], (None, A))
    rep["gpus"]["0"] = [["3g.20gb", 4, A]]  # the 3g.20gb at 0 is not in the report (written before it existed)
    pods = [running(A, "3g.20gb"), running(B, "3g.20gb", node_name="n1")]
    assert marks(node(rep), pods)[0] == [("3g.20gb", 0), ("3g.20gb", 4)]


def test_a_running_pods_instance_is_never_in_a_destroy_list():
    """The filed case: two 2g.10gb wait; GPU 0's pod holds the 3g.20gb at 4. The old guess (the first
    instance of the profile) called the one at 4 idle and destroyed it for the 2g.10gb; with the report the
    planner frees the one at 0, and without a report it frees neither."""
    pods = [running(A, "3g.20gb")]
    waiting = [PodDemand("llm/w%d" % i, "deployment llm/w", "2g.10gb") for i in range(2)]
    layouts = {"0": [["3g.20gb", 0], ["3g.20gb", 4]], "1": [["7g.40gb", 0]]}
    busy1 = running(B, "7g.40gb")
    reported = node({"at": "t", "pods": [A, B], "gpus": {"0": [["3g.20gb", 0, None], ["3g.20gb", 4, A]],
                                                         "1": [["7g.40gb", 0, B]]}}, layouts=layouts)
    supply, _ = node_supply(reported, pods + [busy1])
    result = plan(supply, waiting, Bounds())
    destroyed = [(t.index, d) for t in result.targets for d in t.destroy]
    assert destroyed == [(0, ("3g.20gb", 0))] and not result.unserved
    assert ("3g.20gb", 4) in dict((t.index, t.layout) for t in result.targets)[0]
    supply, _ = node_supply(node(layouts=layouts), pods + [busy1])  # no report: both 3g.20gb may be A's
    result = plan(supply, waiting, Bounds())
    assert all(not t.destroy for t in result.targets)


def test_a_static_pod_is_known_by_the_uid_kubelet_gives_it():
    mirror = running("api-server-assigned-uid", "3g.20gb")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "config-hash"}
    assert marks(node(report(["config-hash"], (None, "config-hash"))), [mirror]) == [[("3g.20gb", 4)], []]


def test_a_static_pod_whose_manifest_sets_a_long_uid_is_read_as_the_node_writes_it():
    """kubelet keeps the metadata.uid a static pod's manifest sets (kubernetes pkg/kubelet/config/common.go
    applyDefaults hashes only an empty one) and its checkpoint carries it; the node takes PodUIDs of up to 256
    characters (node_bootstrap/kube/allocations.py MAX_TEXT) and writes them in its report. The planner read
    only 128, so one such pod made the node's whole report unreadable: every instance of every profile asked
    counted as in use (the 3g.20gb at 0 here), and the pool grew for nothing."""
    from functions.kube.supply import MAX_UID_CHARS
    from node_bootstrap.kube.allocations import MAX_TEXT

    assert MAX_UID_CHARS == MAX_TEXT
    uid = "static-gpu-exporter-".ljust(MAX_TEXT, "x")
    mirror = running("api-server-assigned-uid", "3g.20gb")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": uid}
    assert marks(node(report([uid], (None, uid))), [mirror]) == [[("3g.20gb", 4)], []]
    too_long = uid + "x"  # what the node never writes: the report is refused, every instance counts
    assert marks(node(report([too_long], (None, too_long))), [mirror]) == [[("3g.20gb", 0), ("3g.20gb", 4)], []]


def test_a_gpu_the_node_could_not_read_is_never_planned_nor_taken_for_empty():
    """A failed apply with a GPU off the bus writes what it read back of the others and null for the lost
    one (node_bootstrap/commands/apply.py, tests/node/test_faults.py); every reader leaves the lost GPU alone."""
    from functions.commands.status import gpu_layouts
    from functions.decision.waves import KubeNode, layouts_needed
    from node_bootstrap.mig.annotations import read_layouts

    lost = dict(LAYOUTS, **{"1": None})
    assert read_layouts(json.dumps(lost)) == {0: (("3g.20gb", 0), ("3g.20gb", 4)), 1: None}
    # whatever its state label says, a node whose GPU is unknown gives the planner nothing to change
    for state in ("success", "failed"):
        n = node(layouts=lost)
        n["metadata"]["labels"]["nvidia.com/mig.config.state"] = state
        supply, _ = node_supply(n, [])
        result = plan(supply, [PodDemand("llm/p%d" % i, "pod llm/p%d" % i, "1g.5gb") for i in range(9)], Bounds())
        assert not result.changes, state
    # the claim's check: the lost GPU never matches a target, an empty one ("off") included
    kube = KubeNode("n1", labels={"nvidia.com/mig.config.state": "success"},
                    annotations={"ack-mig-hook/gpu-layouts": json.dumps(lost)})
    assert layouts_needed({0: (("3g.20gb", 0), ("3g.20gb", 4)), 1: ()}, kube) == "GPU 1 holds another layout"
    assert gpu_layouts(kube) == {"0": "3g.20gb@0 3g.20gb@4", "1": "(unreadable)"}


def test_a_failed_nodes_gpus_are_no_capacity_for_whole_gpu_pods_either():
    """A failed node's GPUs were read as MIG off and counted as free whole GPUs (found by a review): a lost
    GPU, or one the failed apply left half changed, was capacity for nvidia.com/gpu pods, which were then
    thought served and no new node was asked for. They are no capacity for anything; a node the hook never
    partitioned (no state label, MIG off) still offers its whole GPUs."""
    from functions.decision.layout.vocabulary import WHOLE_GPU

    whole = [PodDemand("llm/w%d" % i, "pod llm/w%d" % i, WHOLE_GPU) for i in range(2)]
    for layouts in (dict(LAYOUTS, **{"1": None}), LAYOUTS):  # a lost GPU, or every GPU read back
        failed = node(layouts=layouts)
        failed["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
        supply, _ = node_supply(failed, [])
        result = plan(supply, whole, Bounds())
        assert dict(result.unserved) == {WHOLE_GPU: 2} and not result.changes, layouts
    fresh = node(layouts=LAYOUTS)
    del fresh["metadata"]["labels"]["nvidia.com/mig.config.state"]
    del fresh["metadata"]["annotations"]["ack-mig-hook/gpu-layouts"]
    supply, _ = node_supply(fresh, [])
    assert not plan(supply, whole, Bounds()).unserved


def test_a_gpu_a_whole_gpu_pod_runs_on_is_no_free_gpu_on_a_node_never_partitioned():
    """A node the hook never partitioned (no state label, MIG off) offered every GPU as free whatever ran there
    (found by a review): a running nvidia.com/gpu pod's GPU counted as capacity, so waiting whole-GPU pods were
    thought served, and a MIG pod's repartition could be planned on that GPU."""
    from functions.decision.layout.vocabulary import WHOLE_GPU

    fresh = node(layouts=LAYOUTS)
    del fresh["metadata"]["labels"]["nvidia.com/mig.config.state"]
    del fresh["metadata"]["annotations"]["ack-mig-hook/gpu-layouts"]
    busy = running("u-w", "x", name="w")
    busy["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    supply, _ = node_supply(fresh, [busy])
    assert [g.busy for g in supply] == [True, False]
    waiting = [PodDemand("llm/w%d" % i, "pod llm/w%d" % i, WHOLE_GPU) for i in range(2)]
    assert dict(plan(supply, waiting, Bounds()).unserved) == {WHOLE_GPU: 1}
