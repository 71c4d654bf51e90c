"""Per-instance decisions and the family table."""

import pytest

from functions.decide import decide_instance
from functions.families import capability, family_of
from functions.model import Node, NodePool
from node_bootstrap.mig import SEQUENCE_LABEL, SIZE_LABEL, find_gpu, plan, PartitionSpec


def pool(labels=None, types=("ecs.ebmgn7.26xlarge",), pid="np-a", name="gpu"):
    return NodePool(nodepool_id=pid, name=name, labels=labels or {}, instance_types=list(types),
                    scaling_group_id="asg-a")


def node(itype="ecs.ebmgn7.26xlarge", state="running", pid="np-a"):
    return Node(instance_id="i-abc", node_name="cn-beijing.10.0.0.1", instance_type=itype, nodepool_id=pid,
                state=state, ip_address="10.0.0.1")


@pytest.mark.parametrize("itype, family, mig", [
    ("ecs.ebmgn7.26xlarge", "ebmgn7", True),
    ("ecs.gn7-c13g1.13xlarge", "gn7", False),
    ("ecs.gn7i-c32g1.8xlarge", "gn7i", False),
    ("ecs.gn7e-c16g1.4xlarge", "gn7e", False),  # every gn7* is passthrough (the guide's rule)
    ("ecs.gn6v-c8g1.2xlarge", "gn6v", False),  # Volta: no MIG
    ("ecs.ebmgn6e.24xlarge", "ebmgn6e", False),
    ("ecs.vgn7i-vws-m4.xlarge", "vgn7i", False),  # vGPU
    ("ecs.ebmgn7e.32xlarge", "ebmgn7e", None),  # not confirmed: the node decides
    ("ecs.ebmgn8v.48xlarge", "ebmgn8v", None),
    ("ecs.g7.2xlarge", "g7", False),
])
def test_family_table(itype, family, mig):
    cap = capability(itype)
    assert family_of(itype) == family
    assert cap.mig is mig
    assert cap.reason  # every verdict explains itself


def test_not_a_gpu_and_not_an_instance_type():
    assert capability("ecs.g7.2xlarge").gpu is False
    assert "not an NVIDIA GPU" in capability("ecs.g7.2xlarge").reason
    assert capability("banana").gpu is False and "not an ECS instance type" in capability("banana").reason


def test_passthrough_reason_is_the_guides():
    reason = capability("ecs.gn7-c13g1.13xlarge").reason
    assert "passthrough" in reason and "ecs.ebmgn7" in reason


def test_partition_with_plan_from_the_core_solver():
    d = decide_instance("i-abc", node(), pool({SEQUENCE_LABEL: "1g.5gb-2g.10gb-3g.20gb"}))
    expected = plan(PartitionSpec("sequence", "1g.5gb-2g.10gb-3g.20gb"), find_gpu("NVIDIA A100-SXM4-40GB"))
    assert d.action == "partition"
    assert d.plan.gpu == "NVIDIA A100-SXM4-40GB" and d.plan.gpus == 8
    assert d.plan.sequence == expected.sequence
    assert [i.model_dump() for i in d.plan.instances] == [i.to_dict() for i in expected.instances]
    assert d.partition.kind == "sequence" and d.ip_address == "10.0.0.1" and d.nodepool_id == "np-a"


def test_size_label_fills_the_gpu():
    d = decide_instance("i-abc", node(), pool({SIZE_LABEL: "19"}))
    assert d.action == "partition" and d.plan.sequence == "-".join(["1g.5gb"] * 7)


def test_no_label_is_a_skip():
    d = decide_instance("i-abc", node(), pool({"workload": "web"}))
    assert d.action == "skip" and "no partition label" in d.reason and d.plan is None


@pytest.mark.parametrize("labels, fragment", [
    ({SEQUENCE_LABEL: "1g.5gb,2g.10gb"}, "commas"),
    ({SEQUENCE_LABEL: "3g.20gb-3g.20gb-3g.20gb"}, "at most 2"),
    ({SIZE_LABEL: "1g.5gb", SEQUENCE_LABEL: "9-9"}, "both"),
    ({SEQUENCE_LABEL: "1g.18gb"}, "unknown profile"),  # an H200 profile on an A100
])
def test_bad_labels_are_errors_with_the_parsers_message(labels, fragment):
    d = decide_instance("i-abc", node(), pool(labels))
    assert d.action == "error" and fragment in d.reason and d.plan is None


def test_passthrough_instance_in_a_labelled_pool_is_skipped():
    d = decide_instance("i-abc", node("ecs.gn7-c13g1.13xlarge"), pool({SEQUENCE_LABEL: "9-9"}))
    assert d.action == "skip" and "passthrough" in d.reason


def test_unknown_gpu_family_goes_to_the_node_after_a_syntax_check():
    d = decide_instance("i-abc", node("ecs.ebmgn8v.48xlarge"), pool({SEQUENCE_LABEL: "3g.71gb-4g.71gb"}))
    assert d.action == "partition" and d.plan is None and d.partition.value == "3g.71gb-4g.71gb"
    assert "NVML" in d.reason
    bad = decide_instance("i-abc", node("ecs.ebmgn8v.48xlarge"), pool({SEQUENCE_LABEL: "3g.71gb--4g.71gb"}))
    assert bad.action == "error" and "empty item" in bad.reason
    unknown = decide_instance("i-abc", node("ecs.ebmgn8v.48xlarge"), pool({SEQUENCE_LABEL: "5g.99gb"}))
    assert unknown.action == "error"


def test_instance_not_yet_a_node_is_decided_from_the_pool():
    d = decide_instance("i-new", None, pool({SEQUENCE_LABEL: "9-9"}))
    assert d.action == "partition" and d.plan.gpu == "NVIDIA A100-SXM4-40GB"
    assert d.node_name is None and d.nodepool_id == "np-a"
    mixed = decide_instance("i-new", None, pool({SEQUENCE_LABEL: "9-9"},
                                                types=("ecs.ebmgn7.26xlarge", "ecs.ebmgn8v.48xlarge")))
    assert mixed.action == "partition" and mixed.plan is None  # the node decides
    skipped = decide_instance("i-new", None, pool({SEQUENCE_LABEL: "9-9"}, types=("ecs.gn7-c13g1.13xlarge",)))
    assert skipped.action == "skip"


def test_gone_and_poolless_instances_are_skipped():
    assert decide_instance("i-abc", node(state="removing"), pool({SEQUENCE_LABEL: "9-9"})).action == "skip"
    d = decide_instance("i-abc", None, None, "c-1")
    assert d.action == "skip" and "c-1" in d.reason
