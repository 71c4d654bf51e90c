"""The pure rule that picks a running node's path (functions/decision/waves.py change_path, plan_pool): a
label change that keeps every instance the node holds and only adds instances goes without cordon or drain
and takes no slot of max-unavailable; everything else keeps today's drained waves. Over several GPU models,
with the layouts the solver places (node_bootstrap/mig)."""

import json

import pytest

from functions.decision import waves as rp
from node_bootstrap.mig import PartitionSpec

A100, A30, H200 = "NVIDIA A100-SXM4-40GB", "NVIDIA A30", "NVIDIA H200"


def node(applied, state="success", progress=None, gpu_label=None):
    labels = {rp.STATE_LABEL: state, rp.APPLIED_LABEL: applied}
    if gpu_label:
        labels[rp.GPU_NAME_LABEL] = gpu_label
    annotations = {rp.PROGRESS_ANNOTATION: progress.to_annotation()} if progress else {}
    return rp.KubeNode("n", labels=labels, annotations=annotations)


def seq(value):
    return PartitionSpec("sequence", value)


@pytest.mark.parametrize("gpu, applied, new, drain, why", [
    # only new instances, in free slots beside the kept ones: no cordon, no drain
    (A100, "3g.20gb", "3g.20gb-2g.10gb-1g.5gb", False, "only adds 2g.10gb, 1g.5gb beside the kept 3g.20gb at 0"),
    (A100, "2g.10gb-2g.10gb-2g.10gb", "2g.10gb-2g.10gb-2g.10gb-1g.5gb", False, "only adds "),
    (A100, "3g.20gb", "3g.20gb-3g.20gb", False, "only adds "),
    (A30, "2g.12gb", "2g.12gb-1g.6gb-1g.6gb", False, "only adds "),
    (A30, "1g.6gb", "1g.6gb-2g.12gb", False, "only adds "),  # 2g.12gb at 2, beside 1g.6gb at 0
    (H200, "3g.71gb", "3g.71gb-2g.35gb-1g.18gb", False, "only adds "),
    (H200, "4g.71gb", "4g.71gb-3g.71gb", False, "only adds "),
    # destroys, merges or moves: drained as today
    (A100, "3g.20gb-3g.20gb", "7g.40gb", True, "it removes 3g.20gb x2"),
    (A100, "1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb", "3g.20gb-3g.20gb", True, "it removes 1g.5gb x7"),
    (A30, "4g.24gb", "2g.12gb-2g.12gb", True, "it removes 4g.24gb"),
    (H200, "1g.18gb-1g.18gb-1g.18gb-1g.18gb-1g.18gb-1g.18gb-1g.18gb", "7g.141gb", True, "it removes 1g.18gb x7"),
    # a change that only removes instances is destructive
    (A100, "3g.20gb-2g.10gb-1g.5gb", "3g.20gb", True, "it removes 2g.10gb, 1g.5gb"),
    (H200, "3g.71gb-3g.71gb", "3g.71gb", True, "it removes 3g.71gb"),
    # a superset whose new instance needs the slot the kept one sits in (4g.20gb starts only at 0)
    (A100, "1g.5gb", "4g.20gb-1g.5gb", True, "4g.20gb cannot be placed beside the kept 1g.5gb at 0"),
    (A30, "1g.6gb", "4g.24gb", True, "it removes 1g.6gb"),
])
def test_only_adding_instances_goes_without_drain(gpu, applied, new, drain, why):
    got, text = rp.change_path(seq(new), node(applied), gpu)
    assert (got, why in text) == (drain, True), text
    assert ("%s -> sequence=%s" % (applied, new)) in text


def test_the_nodes_gpu_label_names_the_model_when_the_plan_does_not():
    # 2g.10gb exists on the A100 40GB only: read from the node's ACK GPU label
    assert rp.change_path(seq("3g.20gb-2g.10gb-1g.5gb"), node("3g.20gb", gpu_label="NVIDIA-A100-SXM4-40GB"),
                          None)[0] is False
    # a size label fills the GPU: from one 1g.18gb to seven, on an H200 known only by its label
    drain, why = rp.change_path(PartitionSpec("size", "1g.18gb"), node("1g.18gb", gpu_label="NVIDIA-H200"), None)
    assert drain is False and H200 in why


def test_a_node_whose_model_is_unknown_goes_without_drain_only_if_every_candidate_model_agrees():
    # no plan and no GPU label: every catalogue model on which both labels read must only add instances
    drain, why = rp.change_path(seq("3g.20gb-2g.10gb-1g.5gb"), node("3g.20gb"), None)
    assert drain is False and A100 in why
    assert rp.change_path(seq("7g.40gb"), node("3g.20gb-3g.20gb"), None)[0] is True
    assert rp.change_path(seq("3g.20gb-2g.10gb"), node("bogus.1gb"), None) == (
        True, "the applied layout bogus.1gb does not read on the node's GPU")


def test_anything_not_known_for_sure_is_drained():
    assert rp.change_path(None, node("3g.20gb"), A100) == (True, "MIG off destroys every instance")
    assert rp.change_path(seq("3g.20gb-3g.20gb"), None, A100)[0] is True
    drain, why = rp.change_path(seq("3g.20gb-3g.20gb"), node("3g.20gb", state="failed"), A100)
    assert drain is True and "nvidia.com/mig.config.state is failed" in why
    assert rp.change_path(seq("3g.20gb-3g.20gb"), node(None), A100) == (True, "no applied layout known")
    # the same layout adds nothing (work_needed sends such a node only when its state is not success)
    assert rp.change_path(seq("3g.20gb"), node("3g.20gb"), A100) == (
        True, "3g.20gb -> sequence=3g.20gb is not only new instances on %s: it adds no instance" % A100)


def test_a_node_that_refused_to_only_add_instances_is_drained_for_that_target_only():
    refused = rp.Progress("sequence=3g.20gb-3g.20gb", rp.DESTROY_REQUIRED, reason="destroy-required: GPU 0 needs "
                          "destroying GPU instance 3", drain=True)
    drain, why = rp.change_path(seq("3g.20gb-3g.20gb"), node("3g.20gb", progress=refused), A100)
    assert drain is True and "refused to only add instances (destroy-required: GPU 0" in why
    # a later label change is judged afresh
    assert rp.change_path(seq("3g.20gb-2g.10gb"), node("3g.20gb", progress=refused), A100)[0] is False


def test_the_record_keeps_the_path_and_an_old_record_was_drained():
    p = rp.Progress("sequence=3g.20gb", rp.APPLYING, drain=False, owner="me", expires=5.0)
    assert json.loads(p.to_annotation())["drain"] is False
    assert rp.Progress.from_annotation(p.to_annotation()) == p
    old = json.dumps({"target": "sequence=3g.20gb", "step": "cordoned", "cordoned": True})
    assert rp.Progress.from_annotation(old).drain is True


def cand(name, drain, progress=None, why="applied layout differs"):
    kube = rp.KubeNode(name, annotations={rp.PROGRESS_ANNOTATION: progress.to_annotation()} if progress else {})
    return rp.Candidate("i-" + name, name, kube, why, drain, "only adds" if not drain else "destroys")


TARGET = "sequence=3g.20gb-2g.10gb-1g.5gb"
LEASE = 840.0  # a run lease (functions/rollout/run.py run_lease_s): every caller passes its own


def plan_pool(*args, **kwargs):
    return rp.plan_pool(*args, **dict({"horizon_s": LEASE}, **kwargs))


def test_nodes_without_drain_take_no_slot_and_all_go_at_once():
    nodes = [cand("a", True), cand("b", True), cand("c", False), cand("d", False), cand("e", False)]
    steps = plan_pool("np (gpu)", TARGET, nodes, 1)
    assert {k: (s.action, s.drain) for k, s in steps.items()} == {
        "i-a": ("wave", True), "i-b": ("defer", True), "i-c": ("wave", False), "i-d": ("wave", False),
        "i-e": ("wave", False)}
    assert "wave a (max-unavailable 1); without cordon or drain: c, d, e" in steps["i-b"].reason
    assert "apply without cordon or drain (the node is told to destroy nothing)" in steps["i-c"].reason
    assert "applied layout differs; destroys: cordon, drain GPU pods, apply" in steps["i-a"].reason  # why drained


def test_a_node_in_progress_without_drain_holds_no_slot_a_drained_one_does():
    undrained = rp.Progress(TARGET, rp.APPLIED, owner="gone", expires=1.0, drain=False)
    drained = rp.Progress(TARGET, rp.CORDONED, cordoned=True, owner="gone", expires=1.0)
    steps = plan_pool("np", TARGET, [cand("a", True), cand("b", False, undrained), cand("c", True)], 1, now=5.0)
    assert (steps["i-a"].action, steps["i-b"].action, steps["i-b"].resume, steps["i-b"].drain) == \
        ("wave", "wave", rp.APPLIED, False)
    assert steps["i-c"].action == "defer"
    # a bystander drained in progress takes the slot; one without drain does not
    other = rp.KubeNode("z", annotations={rp.PROGRESS_ANNOTATION: drained.to_annotation()})
    steps = plan_pool("np", TARGET, [cand("a", True), cand("b", False)], 1, now=5.0, bystanders=[other])
    assert (steps["i-a"].action, steps["i-b"].action) == ("defer", "wave")
    other = rp.KubeNode("z", annotations={rp.PROGRESS_ANNOTATION: undrained.to_annotation()})
    steps = plan_pool("np", TARGET, [cand("a", True)], 1, now=5.0, bystanders=[other])
    assert steps["i-a"].action == "wave"


def test_a_stopped_or_paused_pool_starts_no_node_either_way_and_in_progress_nodes_finish():
    failed = rp.Progress(TARGET, rp.FAILED, reason="apply: gpu-busy")
    steps = plan_pool("np", TARGET, [cand("a", True, failed), cand("b", False)], 1)
    assert steps["i-b"].action == "defer" and "stopped: node a ended failed" in steps["i-b"].reason
    busy = rp.Progress(TARGET, rp.DRAINED, cordoned=True, owner="gone", expires=1.0)
    steps = plan_pool("np", TARGET, [cand("a", True, busy), cand("b", True), cand("c", False)], 2, now=5.0,
                         paused=True)
    assert (steps["i-a"].action, steps["i-a"].resume) == ("wave", rp.DRAINED)
    for key in ("i-b", "i-c"):
        assert steps[key].action == "defer" and steps[key].reason.startswith("paused: rollout of pool np")
        assert "%s=true" % rp.PAUSED_LABEL in steps[key].reason and "rollout resume" in steps[key].reason
    assert (steps["i-b"].drain, steps["i-c"].drain) == (True, False)


def test_a_node_in_progress_for_an_older_target_starts_over_on_the_new_path():
    old = rp.Progress("sequence=3g.20gb-3g.20gb", rp.APPLYING, owner="gone", expires=1.0, drain=False)
    steps = plan_pool("np", TARGET, [cand("a", False, old)], 1, now=5.0)
    assert (steps["i-a"].resume, steps["i-a"].drain) == (rp.APPLYING, False)
    steps = plan_pool("np", TARGET, [cand("a", True, old)], 1, now=5.0)
    assert (steps["i-a"].resume, steps["i-a"].drain) == (rp.CORDONED, True)


def test_the_pause_label():
    assert rp.paused({rp.PAUSED_LABEL: "true"}) and rp.paused({rp.PAUSED_LABEL: " True "})
    assert not rp.paused({rp.PAUSED_LABEL: "false"}) and not rp.paused({})


def test_a_hold_longer_than_one_run_lease_from_now_holds_nothing():
    # a run writes expires = its clock + its run lease; another's clock may be up to CLOCK_MARGIN_S ahead
    lease, now = LEASE, 5.0
    near = rp.Progress(TARGET, rp.CORDONED, cordoned=True, owner="other", expires=now + lease + rp.CLOCK_MARGIN_S)
    far = rp.Progress(TARGET, rp.CORDONED, cordoned=True, owner="other", expires=now + lease + rp.CLOCK_MARGIN_S + 1)
    steps = plan_pool("np", TARGET, [cand("a", True, far), cand("b", True, near)], 2, now=now, horizon_s=lease)
    assert (steps["i-a"].action, steps["i-a"].resume) == ("wave", rp.CORDONED)
    assert steps["i-b"].action == "defer" and "invocation other" in steps["i-b"].reason
    # a longer lease holds both: the horizon is the caller's run lease, not a constant of the rule
    steps = plan_pool("np", TARGET, [cand("a", True, far), cand("b", True, near)], 2, now=now, horizon_s=lease + 1)
    assert steps["i-a"].action == steps["i-b"].action == "defer"
    with pytest.raises(TypeError):  # no caller can forget it: a rule without it let a forged hold stand to 2100
        rp.plan_pool("np", TARGET, [cand("a", True, far)], 1, now=now)
