"""Per-instance decisions and the family table."""

import pytest

from functions.decision.decide import decide_instance
from functions.decision.families import capability, family_of
from functions.base.model import Node, NodePool
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
    ("ecs.ebmgn7e.32xlarge", "ebmgn7e", True),  # 8 x 80GB bare metal, MIG per the ECS docs
    ("ecs.ebmgn8v.48xlarge", "ebmgn8v", True),  # 8 x 96GB bare metal (believed H20)
    ("ecs.ebmgn7ex.32xlarge", "ebmgn7ex", None),  # GPU memory not known: the node decides
    ("ecs.gn7s-c16g1.4xlarge", "gn7s", False),  # A30 has MIG, but passthrough
    ("ecs.gn8v.6xlarge", "gn8v", False),
    ("ecs.gn8is.2xlarge", "gn8is", False),  # L20: no MIG
    ("ecs.ebmgn7ix.32xlarge", "ebmgn7ix", False),  # A10: no MIG
    ("ecs.ebmgn9x.48xlarge", "ebmgn9x", None),  # not in the table: the node decides
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


def test_a_generation_of_5000_digits_is_no_nvidia_family():
    """The family pattern read a generation of any length with ``int``: 5,000 digits raised ValueError
    (Python's limit on ``int`` of a string) out of the decision, the event ending in an internal error for every
    node of the pool (``plan --instance-type`` too). A generation is one to four digits; a longer one is no
    NVIDIA family, and the node is skipped saying so."""
    itype = "ecs.ebmgn%s.48xlarge" % ("9" * 5000)
    cap = capability(itype)
    assert cap.gpu is False and "is not an NVIDIA GPU instance type" in cap.reason
    d = decide_instance("i-abc", node(itype), pool({SEQUENCE_LABEL: "3g.40gb-3g.40gb"}))
    assert d.action == "skip" and "is not an NVIDIA GPU instance type" in d.reason


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
    d = decide_instance("i-abc", node("ecs.ebmgn9x.48xlarge"), pool({SEQUENCE_LABEL: "3g.71gb-4g.71gb"}))
    assert d.action == "partition" and d.plan is None and d.partition.value == "3g.71gb-4g.71gb"
    assert "NVML" in d.reason
    bad = decide_instance("i-abc", node("ecs.ebmgn9x.48xlarge"), pool({SEQUENCE_LABEL: "3g.71gb--4g.71gb"}))
    assert bad.action == "error" and "empty item" in bad.reason
    assert bad.reason.startswith("pool np-a (gpu) asks for sequence=3g.71gb--4g.71gb: ")
    unknown = decide_instance("i-abc", node("ecs.ebmgn9x.48xlarge"), pool({SEQUENCE_LABEL: "5g.99gb"}))
    assert unknown.action == "error" and "np-a (gpu)" in unknown.reason


# Every family of facts.md's "ECS GPU families", with its GPU, count, MIG verdict and confirmed/believed.
FAMILY_TABLE = [
    ("ecs.ebmgn7.26xlarge", "NVIDIA A100-SXM4-40GB", 8, True, "confirmed"),
    ("ecs.ebmgn7e.32xlarge", "NVIDIA A100-SXM4-80GB", 8, True, "believed"),
    ("ecs.gn7e-c16g1.4xlarge", "NVIDIA A100-SXM4-80GB", None, False, "believed"),
    ("ecs.gn7-c13g1.13xlarge", "NVIDIA A100-SXM4-40GB", None, False, "confirmed"),
    ("ecs.gn7s-c8g1.2xlarge", "NVIDIA A30", None, False, "confirmed"),
    ("ecs.gn7i-c8g1.2xlarge", "NVIDIA A10", None, False, "confirmed"),
    ("ecs.ebmgn7i.32xlarge", "NVIDIA A10", None, False, "confirmed"),
    ("ecs.ebmgn7ix.32xlarge", "NVIDIA A10", None, False, "confirmed"),
    ("ecs.gn8is.2xlarge", "NVIDIA L20", None, False, "confirmed"),
    ("ecs.ebmgn8is.32xlarge", "NVIDIA L20", None, False, "confirmed"),
    ("ecs.ebmgn8ia.32xlarge", "NVIDIA L20", None, False, "confirmed"),
    ("ecs.gn8v.6xlarge", "NVIDIA H20", None, False, "believed"),
    ("ecs.ebmgn8v.48xlarge", "NVIDIA H20", 8, True, "believed"),
    ("ecs.ebmgn7ex.32xlarge", None, None, None, "believed"),
]


@pytest.mark.parametrize("itype,gpu,count,mig,status", FAMILY_TABLE)
def test_every_family_of_the_facts_has_its_gpu_and_count(itype, gpu, count, mig, status):
    cap = capability(itype)
    assert (cap.gpu_model, cap.gpus, cap.mig, cap.status) == (gpu, count, mig, status)
    if status == "believed":
        assert "believed" in cap.reason


@pytest.mark.parametrize("itype", ["ecs.gn7i-c8g1.2xlarge", "ecs.ebmgn7ix.32xlarge", "ecs.gn8is.2xlarge",
                                   "ecs.ebmgn8ia.32xlarge", "ecs.gn6i-c4g1.xlarge", "ecs.gn6v-c8g1.2xlarge"])
def test_a_family_whose_gpu_has_no_mig_is_a_skip_that_says_so(itype):
    d = decide_instance("i-abc", node(itype), pool({SEQUENCE_LABEL: "9-9"}, types=(itype,)))
    assert d.action == "skip" and "has no MIG" in d.reason and d.plan is None


def test_a_40gb_label_on_an_ebmgn7e_pool_is_an_error_before_any_node_is_touched():
    labels = {SEQUENCE_LABEL: "1g.5gb-2g.10gb"}
    d = decide_instance("i-new", None, pool(labels, types=("ecs.ebmgn7e.32xlarge",)))
    assert d.action == "error" and d.plan is None and d.partition.value == "1g.5gb-2g.10gb"
    assert d.reason.startswith("pool np-a (gpu) asks for sequence=1g.5gb-2g.10gb on NVIDIA A100-SXM4-80GB GPUs "
                               "(the GPU model is believed from the instance family ebmgn7e): unknown profile "
                               "'1g.5gb' for NVIDIA A100-SXM4-80GB")
    ok = decide_instance("i-new", None, pool({SEQUENCE_LABEL: "1g.10gb-2g.20gb"}, types=("ecs.ebmgn7e.32xlarge",)))
    assert ok.action == "partition" and ok.plan.gpu == "NVIDIA A100-SXM4-80GB" and ok.plan.gpus == 8


def test_an_ebmgn8v_pool_plans_on_the_96gb_profiles():
    d = decide_instance("i-abc", node("ecs.ebmgn8v.48xlarge"), pool({SIZE_LABEL: "3g.48gb"}))
    assert d.action == "partition" and d.plan.gpu == "NVIDIA H20" and d.plan.gpus == 8
    assert d.plan.sequence == "3g.48gb-3g.48gb"
    bad = decide_instance("i-abc", node("ecs.ebmgn8v.48xlarge"), pool({SIZE_LABEL: "3g.71gb"}))
    assert bad.action == "error" and "NVIDIA H20 GPUs" in bad.reason


def test_every_error_decision_names_its_pool():
    cases = [{SEQUENCE_LABEL: "1g.5gb,2g.10gb"}, {SEQUENCE_LABEL: "3g.20gb-3g.20gb-3g.20gb"},
             {SIZE_LABEL: "1g.5gb", SEQUENCE_LABEL: "9-9"}, {SEQUENCE_LABEL: "1g.18gb"}]
    for labels in cases:
        d = decide_instance("i-abc", node(), pool(labels, name="train pool"))
        assert d.action == "error" and d.reason.startswith("pool np-a ('train pool')")


def test_instance_not_yet_a_node_is_decided_from_the_pool():
    d = decide_instance("i-new", None, pool({SEQUENCE_LABEL: "9-9"}))
    assert d.action == "partition" and d.plan.gpu == "NVIDIA A100-SXM4-40GB"
    assert d.node_name is None and d.nodepool_id == "np-a"
    mixed = decide_instance("i-new", None, pool({SEQUENCE_LABEL: "9-9"},
                                                types=("ecs.ebmgn7.26xlarge", "ecs.ebmgn9x.48xlarge")))
    assert mixed.action == "partition" and mixed.plan is None  # the node decides
    skipped = decide_instance("i-new", None, pool({SEQUENCE_LABEL: "9-9"}, types=("ecs.gn7-c13g1.13xlarge",)))
    assert skipped.action == "skip"


def test_gone_and_poolless_instances_are_skipped():
    assert decide_instance("i-abc", node(state="removing"), pool({SEQUENCE_LABEL: "9-9"})).action == "skip"
    d = decide_instance("i-abc", None, None, "c-1")
    assert d.action == "skip" and "c-1" in d.reason
