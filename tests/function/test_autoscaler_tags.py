"""The autoscaler tag decision (functions/decision/autoscaler_tags.py), pure: what a pool should carry, the diff
against what it has (set, remove, foreign tags kept), the limits, and the modes."""

import pytest

from functions.decision.autoscaler_tags import (ESS_KEY_LENGTH, MAX_KEY_LENGTH, MAX_TAGS, OURS, autoscaler_tags, diff,
                                       limits_problem, plan_pool, template_status, wanted)
from functions.cloud.cluster import InventoryLookup, nodepool_from_api
from functions.base.errors import BadInventory
from functions.base.model import NodePool
from functions.decision.waves import expected_capacity

SEQ = "ack.aliyun.com/gpu-partition-sequence"
SIZE = "ack.aliyun.com/gpu-partition-size"
K3G = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-3g.20gb"
K1G = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-1g.5gb"
HUGEPAGES = "k8s.io/cluster-autoscaler/node-template/resource/hugepages-1Gi"  # ACK FAQ's own example: not ours


def pool(labels=None, tags=None, auto=True, types=("ecs.ebmgn7.26xlarge",), name="gpu"):
    return NodePool(nodepool_id="np-%s" % name, name=name,
                    labels=labels if labels is not None else {SEQ: "3g.20gb-3g.20gb"},
                    instance_types=list(types), auto_scaling=auto, tags=dict(tags or {}))


def test_the_issue_example_key_lengths():
    # 49 characters of prefix: every MIG key passes the node pool's 128 and fails ESS's 64.
    assert K3G == OURS + "3g.20gb" and len(K3G) == 71
    assert ESS_KEY_LENGTH < len(OURS) + len("1g.5gb") < MAX_KEY_LENGTH
    assert autoscaler_tags({"nvidia.com/mig-3g.20gb": 16, "nvidia.com/mig-1g.5gb": 0}) == {K3G: "16"}


def test_a_new_autoscaling_pool_gets_its_tags_after_the_foreign_ones():
    decided = plan_pool(pool(tags={"team": "ml", HUGEPAGES: "2Gi"}), "auto")
    assert not decided.in_sync and decided.set == {K3G: "16"} and decided.remove == []
    assert decided.write == [("team", "ml"), (HUGEPAGES, "2Gi"), (K3G, "16")]
    assert "a new node advertises nvidia.com/mig-3g.20gb=16" in decided.reason


def test_the_counts_agree_with_what_the_rollout_waits_for():
    """Two computations of one node's MIG resources: the template's and the rollout's capacity wait."""
    for value in ("3g.20gb-3g.20gb", "1g.5gb.me-1g.5gb-2g.10gb-3g.20gb", "1g.10gb-1g.10gb-2g.10gb"):
        decided = plan_pool(pool(labels={SEQ: value}), "on")
        names = [p.replace(".me", "+me") for p in value.split("-")]
        expected, exact = expected_capacity(names, 8)
        assert exact and {k[len(OURS) - len("nvidia.com/mig-"):]: int(v) for k, v in decided.set.items()} == expected


def test_a_label_change_sets_the_new_key_removes_the_stale_one_and_keeps_every_other_tag():
    before = {"team": "ml", K3G: "16", "cost-center": "42", HUGEPAGES: "2Gi"}
    decided = plan_pool(pool(labels={SIZE: "1g.5gb"}, tags=before), "auto")
    assert decided.set == {K1G: "56"} and decided.remove == [K3G]
    # the stale key is written as 0 (stops advertising whether the API replaces or merges the list)
    assert decided.write == [("team", "ml"), ("cost-center", "42"), (HUGEPAGES, "2Gi"), (K1G, "56"), (K3G, "0")]


def test_a_changed_count_is_a_set_and_an_equal_one_is_in_sync():
    assert plan_pool(pool(tags={K3G: "8"}), "auto").set == {K3G: "16"}
    same = plan_pool(pool(tags={"team": "ml", K3G: "16"}), "auto")
    assert same.in_sync and same.write is None and same.set == {} and same.remove == []


def test_label_removed_our_tags_go_and_foreign_ones_stay():
    decided = plan_pool(pool(labels={}, tags={"team": "ml", K3G: "16"}), "auto")
    assert decided.remove == [K3G] and decided.set == {} and decided.write == [("team", "ml"), (K3G, "0")]
    # once it reads 0 the pool is none of ours any more: no entry, nothing written
    assert plan_pool(pool(labels={}, tags=dict(decided.write)), "auto") is None


def test_when_nothing_else_would_remain_the_stale_keys_are_written_as_zero_and_then_count_as_absent():
    decided = plan_pool(pool(labels={}, tags={K3G: "16"}), "auto")
    assert decided.remove == [K3G] and decided.write == [(K3G, "0")] and "written as 0" in decided.reason
    assert plan_pool(pool(labels={}, tags=dict(decided.write)), "auto") is None  # a 0 advertises nothing
    # a zero tag of ours is dropped (not kept as a foreign tag) once something else is written
    again = plan_pool(pool(labels={SEQ: "3g.20gb-3g.20gb"}, tags={K1G: "0"}), "auto")
    assert again.write == [(K3G, "16")] and again.remove == []


def test_a_pool_that_is_none_of_ours_has_no_entry():
    assert plan_pool(pool(labels={"workload": "web"}, tags={"team": "web"}), "on") is None
    assert plan_pool(pool(), "off") is None


def test_modes():
    manual = pool(auto=False)
    assert plan_pool(manual, "auto").in_sync and "auto scaling is off" in plan_pool(manual, "auto").reason
    assert plan_pool(manual, "on").set == {K3G: "16"}
    # auto: a pool whose auto scaling was switched off loses our tags
    assert plan_pool(pool(auto=False, tags={K3G: "16", "team": "ml"}), "auto").write == [("team", "ml"), (K3G, "0")]
    assert wanted(pool(), "off") is None


def test_the_20_tag_budget_refuses_before_writing():
    others = {"tag-%02d" % i: "v" for i in range(MAX_TAGS - 2)}
    fits = plan_pool(pool(labels={SEQ: "1g.5gb-3g.20gb"}, tags=others), "auto")
    assert fits.write is not None and len(fits.write) == MAX_TAGS
    over = plan_pool(pool(labels={SEQ: "1g.5gb-2g.10gb-3g.20gb"}, tags=others), "auto")
    assert over.write is None and not over.in_sync and over.set  # what it would set is still shown
    assert "21 tags (18 of its own and 3 MIG resources); ESS takes at most 20" in over.reason


def test_the_key_length_limit_of_the_node_pool_api():
    long_key = OURS + "x" * (MAX_KEY_LENGTH - len(OURS) + 1)
    assert "characters long; node pool tag keys take at most 128" in limits_problem([(long_key, "1")])
    assert limits_problem([(long_key[:-1], "1")]) is None
    # foreign keys are the API's business, not ours: they were accepted once
    assert limits_problem([("k" * 200, "v"), (K3G, "16")]) is None


def test_a_pool_whose_gpus_are_not_known_gets_a_reason_and_keeps_its_tags():
    unknown = plan_pool(pool(types=("ecs.ebmgn7.32xlarge",), tags={K3G: "16"}), "auto")
    assert not unknown.in_sync and unknown.write is None and unknown.remove == []
    assert "does not know how many GPUs ecs.ebmgn7.32xlarge has" in unknown.reason
    passthrough = plan_pool(pool(types=("ecs.gn7-c13g1.13xlarge",)), "on")
    assert passthrough.write is None and "passthrough" in passthrough.reason
    typo = plan_pool(pool(labels={SEQ: "1g.5gb,2g.10gb"}), "auto")
    assert typo.write is None and "commas are not accepted" in typo.reason


def test_an_auto_pools_new_node_layout_is_checked_on_every_instance_type_not_only_by_profile_name():
    # 7x 1g.10gb per GPU: an A100 80GB GPU holds them, an A100 40GB GPU holds 4; a pool with both types
    # advertised 56 (8 x 7 on either) and the autoscaler could buy a node that holds 32
    seven = ((tuple(("1g.10gb", i) for i in range(7)), 8),)
    labels = {"ack-mig-hook/layout": "auto"}
    both = plan_pool(pool(labels=labels, types=("ecs.ebmgn7e.32xlarge", "ecs.ebmgn7.26xlarge")), "auto", seven)
    assert both.write is None and "does not fit ecs.ebmgn7.26xlarge (A100-SXM4-40GB)" in both.reason
    assert "7 x 1g.10gb requested, but A100-SXM4-40GB holds at most 4" in both.reason
    one = plan_pool(pool(labels=labels, types=("ecs.ebmgn7e.32xlarge",)), "auto", seven)
    assert one.set == {OURS + "1g.10gb": "56"}


def test_instance_types_that_differ_advertise_the_least_of_each():
    # 8 x A100 40GB and 8 x A100 80GB: 1g.10gb exists on both with a different count (40GB: 4, 80GB: 7)
    mixed = plan_pool(pool(labels={SIZE: "1g.10gb"}, types=("ecs.ebmgn7.26xlarge", "ecs.ebmgn7e.32xlarge")), "on")
    assert mixed.set == {OURS + "1g.10gb": "32"} and "the least of them" in mixed.reason


def test_status_view_of_a_pool():
    view = template_status(pool(tags={K3G: "16"}), "auto")
    assert view == {"auto_scaling": True, "managed": True, "advertises": True,
                    "expected": {"nvidia.com/mig-3g.20gb": 16}, "advertised": {"nvidia.com/mig-3g.20gb": 16},
                    "reason": view["reason"]}
    stale = template_status(pool(labels={SIZE: "1g.5gb"}, tags={K3G: "16"}, auto=False), "auto")
    assert not stale["advertises"] and not stale["managed"] and stale["expected"] == {"nvidia.com/mig-1g.5gb": 56}


def test_the_api_shapes_are_read_as_the_sdk_names_them():
    """DescribeClusterNodePools items: ``auto_scaling.enable`` and ``scaling_group.tags`` [{key, value}]
    (alibabacloud_cs20151215 DescribeClusterNodePoolsResponseBodyNodepools / ...ScalingGroup / Tag)."""
    item = {"nodepool_info": {"nodepool_id": "np-1"}, "auto_scaling": {"enable": True, "max_instances": 4},
            "scaling_group": {"tags": [{"key": "b", "value": "2"}, {"key": "a", "value": None}]}}
    got = nodepool_from_api(item)
    assert got.auto_scaling is True and list(got.tags.items()) == [("b", "2"), ("a", "")]
    assert nodepool_from_api({"nodepool_info": {"nodepool_id": "np-2"}}).auto_scaling is False
    with pytest.raises(BadInventory, match=r"nodepools\[0\]: scaling_group.tags items must be"):
        InventoryLookup.from_dict({"cluster_id": "c-1", "nodepools": [
            {"nodepool_info": {"nodepool_id": "np-1"}, "scaling_group": {"tags": ["team=ml"]}}]})


def test_diff_alone():
    d = diff({"a": "1", K1G: "56"}, {K3G: "16"})
    # the stale key is written as 0, not left out: it stops advertising whether the API replaces or merges
    assert d.set == {K3G: "16"} and d.remove == [K1G] and d.write == [("a", "1"), (K1G, "0"), (K3G, "16")]
    # written back, a 0 is absent: in sync, and the next write (if any) leaves it out
    again = diff(dict(d.write), {K3G: "16"})
    assert again.in_sync and again.write == [("a", "1"), (K3G, "16")]


def test_an_auto_pools_tags_are_left_to_its_own_step():
    """An auto pool's tags follow its plan (functions/pipeline/auto_pool.py): an event that does not plan it (the
    reconcile timer, a pool operation) leaves them, never zeroes them as a pool without partition label."""
    key = OURS + "3g.20gb"
    auto = pool(labels={"ack-mig-hook/layout": "auto"}, tags={key: "16"})
    assert plan_pool(auto, "on") is None
    planned = plan_pool(auto, "on", (("3g.20gb", 0), ("3g.20gb", 4)))
    assert planned.in_sync and planned.set == {}  # 8 A100 40GB x two 3g.20gb: as tagged
    emptied = plan_pool(auto, "on", ())
    assert emptied.remove == [key] and emptied.write == [(key, "0")]


def test_a_tag_value_in_other_digits_is_shown_as_it_is_never_read_as_a_count():
    # "²".isdigit() is True and int("²") raises; "٣".isdigit() is True and int("٣") is 3: neither is a count
    for odd in ("²", "1²", "٣"):
        view = template_status(pool(tags={K3G: odd}), "auto")
        assert view["advertised"] == {"nvidia.com/mig-3g.20gb": odd} and not view["advertises"]
