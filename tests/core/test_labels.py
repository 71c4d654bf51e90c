"""Label parsing: the guide's table and sequences, and every refusal rule in labels.py's docstring."""

import pytest

from node_bootstrap.mig import (GPUS, LabelError, PartitionSpec, find_gpu, parse, plan, spec_from_args,
                                spec_from_labels, SIZE_LABEL, SEQUENCE_LABEL)

A100 = find_gpu("NVIDIA A100-SXM4-40GB")

# The guide's table: specification, id, maximum number of instances.
GUIDE_TABLE = [("1g.5gb", 19, 7), ("2g.10gb", 14, 3), ("3g.20gb", 9, 2), ("4g.20gb", 5, 1), ("7g.40gb", 0, 1)]

# The guide's four sequences ACK accepts, by id and by name.
GUIDE_SEQUENCES = [
    ("19-19-19-19-19-19-19", "1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb"),
    ("14-14-14-19", "2g.10gb-2g.10gb-2g.10gb-1g.5gb"),
    ("9-9", "3g.20gb-3g.20gb"),
    ("5-19-19-19", "4g.20gb-1g.5gb-1g.5gb-1g.5gb"),
]


@pytest.mark.parametrize("name,pid,count", GUIDE_TABLE)
def test_size_fills_as_the_guide_says(name, pid, count):
    by_name = plan(PartitionSpec("size", name), A100)
    by_id = plan(PartitionSpec("size", str(pid)), A100)
    assert len(by_name.instances) == count
    assert by_name == by_id
    assert {i.profile.name for i in by_name.instances} == {name}
    assert {i.profile.id for i in by_name.instances} == {pid}


@pytest.mark.parametrize("ids,names", GUIDE_SEQUENCES)
def test_guide_sequences_by_name_and_id(ids, names):
    by_id = plan(PartitionSpec("sequence", ids), A100)
    by_name = plan(PartitionSpec("sequence", names), A100)
    assert by_id == by_name
    assert sorted(i.profile.name for i in by_id.instances) == sorted(names.split("-"))


def test_comma_is_refused_with_the_hyphen_form():
    with pytest.raises(LabelError) as err:
        parse(PartitionSpec("sequence", "1g.5gb,2g.10gb,3g.20gb"), A100)
    msg = str(err.value)
    assert "commas are not accepted" in msg
    assert "1g.5gb-2g.10gb-3g.20gb" in msg
    assert "\n" not in msg


def test_case_and_spaces_are_normalized():
    a = plan(PartitionSpec("sequence", "  3G.20GB - 2g.10GB-1g.5gb "), A100)
    b = plan(PartitionSpec("sequence", "1g.5gb-2g.10gb-3g.20gb"), A100)
    assert a == b


@pytest.mark.parametrize("value,position", [("1g.5gb--2g.10gb", 2), ("-1g.5gb", 1), ("1g.5gb-", 2),
                                            ("9- -9", 2)])
def test_empty_items_are_refused_with_their_position(value, position):
    with pytest.raises(LabelError, match="empty item at position %d" % position):
        parse(PartitionSpec("sequence", value), A100)


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_value_is_refused(value):
    with pytest.raises(LabelError, match="is empty"):
        parse(PartitionSpec("size", value), A100)


def test_unknown_profile_lists_the_valid_ones_for_that_gpu():
    with pytest.raises(LabelError) as err:
        parse(PartitionSpec("size", "1g.18gb"), A100)  # an H200 profile
    msg = str(err.value)
    assert "unknown profile '1g.18gb' for A100-SXM4-40GB" in msg
    for p in A100.profiles:
        assert "%s (%d)" % (p.name, p.id) in msg


def test_unknown_id_and_non_ascii_digits_are_refused():
    with pytest.raises(LabelError, match="unknown profile '42'"):
        parse(PartitionSpec("size", "42"), A100)
    with pytest.raises(LabelError, match="unknown profile"):
        parse(PartitionSpec("size", "\u0661\u0669"), A100)  # Arabic-Indic "19"


def test_me_profile_by_name_and_id():
    by_name = plan(PartitionSpec("sequence", "1g.5gb+me-1g.5gb"), A100)
    by_id = plan(PartitionSpec("sequence", "20-19"), A100)
    assert by_name == by_id
    assert sorted(i.profile.id for i in by_id.instances) == [19, 20]
    assert len(plan(PartitionSpec("size", "20"), A100).instances) == 1  # at most one +me


def test_size_with_several_profiles_points_to_sequence():
    with pytest.raises(LabelError, match="use gpu-partition-sequence"):
        parse(PartitionSpec("size", "1g.5gb-2g.10gb"), A100)


def test_both_labels_on_one_pool_is_refused():
    with pytest.raises(LabelError, match="keep exactly one"):
        spec_from_labels({SIZE_LABEL: "19", SEQUENCE_LABEL: "9-9"})


def test_labels_without_partition_label_give_none():
    assert spec_from_labels({"foo": "bar"}) is None
    assert spec_from_labels({SIZE_LABEL: "19"}) == PartitionSpec("size", "19")


def test_args_need_exactly_one():
    with pytest.raises(LabelError):
        spec_from_args(None, None)
    with pytest.raises(LabelError):
        spec_from_args("19", "9-9")


def test_overlong_and_hostile_values_give_one_line_errors():
    for value in ["1g.5gb;rm -rf /", "$(reboot)", "19\n19", "a" * 10000, "\x00", "\u202e19"]:
        with pytest.raises(LabelError) as err:
            parse(PartitionSpec("sequence", value), A100)
        assert "\n" not in str(err.value)
        assert len(str(err.value)) < 1000


def test_ids_mean_the_same_profile_class_on_every_eight_slot_gpu():
    for gpu in GPUS:
        if gpu.memory_slots != 8:
            continue
        names = [resolved.name for resolved in parse(PartitionSpec("sequence", "19-14-9"), gpu).profiles]
        assert [n.split(".")[0] for n in names] == ["1g", "2g", "3g"]


RTX = find_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition")


@pytest.mark.parametrize("value,names", [
    ("1g.24gb-me", ["1g.24gb-me"]),
    ("1g.24gb-me-2g.48gb", ["1g.24gb-me", "2g.48gb"]),
    ("2g.48gb-ME-1g.24gb-me-1g.24gb", ["2g.48gb-me", "1g.24gb-me", "1g.24gb"]),
    ("1g.24gb.gfx-1g.24gb+gfx", ["1g.24gb+gfx", "1g.24gb+gfx"]),
    ("1g.24gb.me.all-1g.24gb-me", ["1g.24gb+me.all", "1g.24gb-me"]),
    ("2g.48gb.me.all-2g.48gb-me", ["2g.48gb+me.all", "2g.48gb-me"]),
    ("1g.24gb.me", ["1g.24gb+me"]),
    ("4g.96gb.GFX", ["4g.96gb+gfx"]),
])
def test_variant_names_in_their_label_safe_spelling(value, names):
    """Kubernetes label values hold no "+": "." stands for it, as in mig-parted's config names, and a
    "-me" suffix survives the hyphen split because no profile is called "me"."""
    assert [p.name for p in parse(PartitionSpec("sequence", value), RTX).profiles] == names


def test_a_lone_me_item_is_still_an_unknown_profile():
    with pytest.raises(LabelError, match="unknown profile 'me'"):
        parse(PartitionSpec("sequence", "me-19"), A100)
    with pytest.raises(LabelError, match="unknown profile '1g.5gb-me'"):  # no -me profile on an A100
        parse(PartitionSpec("sequence", "1g.5gb-me"), A100)


def test_dotted_plus_me_on_an_a100_is_the_plus_me_profile():
    assert plan(PartitionSpec("sequence", "1g.5gb.me-19"), A100) == plan(PartitionSpec("sequence", "20-19"), A100)


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.key)
def test_every_profile_reads_back_from_the_nodes_label_value(gpu):
    """The node writes aliyun.accelerator/nvidia_mig_sequence with "+" as "."; a pool label copied from it
    must mean the same profiles, on every GPU and for every variant suffix."""
    from node_bootstrap.kube.nodelabels import _VALUE, sequence_label_value

    for p in gpu.profiles:
        value = sequence_label_value(p.name)
        assert _VALUE.match(value), value
        assert parse(PartitionSpec("sequence", value), gpu).profiles == (p,)
        assert parse(PartitionSpec("sequence", "%s-%s" % (value, value)), gpu).profiles == (p, p)
