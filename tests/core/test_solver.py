"""The placement solver against an independent brute force, plus property tests."""

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from node_bootstrap.mig import (GPUS, KIND_SEQUENCE, Instance, Placement, PlacementError, PartitionSpec, Profile,
                                find_gpu, place, plan, try_place)
from node_bootstrap.mig.solver import complete

A100 = find_gpu("NVIDIA A100-SXM4-40GB")
A30 = find_gpu("NVIDIA A30")


def brute_force_layouts(gpu, profiles):
    """Every set of (profile, start) that obeys the hardware rules, found by plain enumeration.

    Written independently of solver.py: no ordering tricks, no pruning beyond the rules themselves. Each rule
    can only break as a set grows (slots overlap, compute slices add up, instances and media extensions are
    counted), so a set that breaks one is not grown further: every set it would grow into breaks it too. The
    same sets as trying every combination of the candidates, without trying the millions that cannot hold."""
    cands = [(p, pl.start, pl.size) for p in profiles for pl in p.placements]
    found = []

    def valid(chosen):
        slots = [0] * gpu.memory_slots
        for p, start, size in chosen:
            for s in range(start, start + size):
                slots[s] += 1
        if any(n > 1 for n in slots):
            return False
        if sum(p.compute_slices for p, _, _ in chosen) > gpu.compute_slices:
            return False
        counts = Counter(p for p, _, _ in chosen)
        if gpu.key == "A30" and sum(n for p, n in counts.items() if p.name.endswith("+me")) > 1:
            return False  # one JPEG decoder and one OFA on the whole A30 (MIG user guide's A30 table)
        return all(counts[p] <= p.max_instances for p in counts)

    def grow(chosen, first):  # ``chosen`` holds; every set that adds later candidates to it, in index order
        found.append(tuple(chosen))
        for i in range(first, len(cands)):
            chosen.append(cands[i])
            if valid(chosen):
                grow(chosen, i + 1)
            chosen.pop()

    grow([], 0)
    return found


def feasible_multisets(gpu):
    return {tuple(sorted(Counter(p.name for p, _, _ in layout).items()))
            for layout in brute_force_layouts(gpu, gpu.profiles)}


def all_multisets(gpu):
    ranges = [range(p.max_instances + 1) for p in gpu.profiles]
    for counts in itertools.product(*ranges):
        if 0 < sum(counts):
            yield [p for p, n in zip(gpu.profiles, counts) for _ in range(n)]


@pytest.mark.parametrize("gpu", [g for g in GPUS if g.key in ("A100-SXM4-40GB", "A30", "H200", "B200")],
                         ids=lambda g: g.key)
def test_solver_agrees_with_brute_force(gpu):
    feasible = feasible_multisets(gpu)
    accepted = 0
    for profiles in all_multisets(gpu):
        key = tuple(sorted(Counter(p.name for p in profiles).items()))
        layout = try_place(gpu, profiles)
        assert (layout is not None) == (key in feasible), key
        if layout is None:
            with pytest.raises(PlacementError):
                place(gpu, profiles)
        else:
            accepted += 1
    assert accepted == len(feasible) - 1  # the empty layout is feasible but not a request


def test_a100_has_nineteen_maximal_layouts_and_all_are_accepted():
    base = [p for p in A100.profiles if p.id in (19, 14, 9, 5, 0)]  # NVIDIA's table: no +me, no 1g.10gb
    layouts = [frozenset((p.name, s) for p, s, _ in lay) for lay in brute_force_layouts(A100, base)]
    as_sets = set(layouts)
    maximal = [lay for lay in as_sets
               if not any(lay < other for other in as_sets)]
    assert len(maximal) == 19
    by_name = {p.name: p for p in base}
    for lay in maximal:
        profiles = [by_name[name] for name, _ in lay]
        for order in (profiles, list(reversed(profiles))):
            assert try_place(A100, order) is not None


def test_four_g_plus_three_g_is_accepted():
    layout = place(A100, [A100.profile_by_name("3g.20gb"), A100.profile_by_name("4g.20gb")])
    assert [(i.profile.name, i.start) for i in layout.instances] == [("4g.20gb", 0), ("3g.20gb", 4)]


def test_reasons_are_precise():
    p = A100.profile_by_name
    with pytest.raises(PlacementError, match=r"3 x 3g.20gb requested, but A100-SXM4-40GB holds at most 2"):
        place(A100, [p("3g.20gb")] * 3)
    with pytest.raises(PlacementError, match="needs 8 compute slices"):
        place(A100, [p("4g.20gb"), p("3g.20gb"), p("1g.5gb")])
    with pytest.raises(PlacementError, match="needs 9 memory slots"):
        place(A100, [p("3g.20gb"), p("3g.20gb"), p("1g.5gb")])
    # On the catalogue's GPUs the counting rules alone decide; a made-up GPU whose profiles all start at
    # slot 0 reaches the overlap reason.
    toy = A100._replace(key="TOY", profiles=(
        Profile("1g.1gb", 1, 0, 1, 1, 1024, 1, (Placement(0, 1),)),
        Profile("2g.2gb", 2, 1, 2, 2, 2048, 1, (Placement(0, 2),)),
    ))
    with pytest.raises(PlacementError, match="cannot be placed on TOY without overlapping memory slots"):
        place(toy, list(toy.profiles))


def test_output_does_not_depend_on_input_order():
    p = A100.profile_by_name
    profiles = [p("1g.5gb"), p("2g.10gb"), p("3g.20gb"), p("1g.5gb")]
    results = {place(A100, list(order)) for order in itertools.permutations(profiles)}
    assert len(results) == 1


profile_lists = st.sampled_from(GPUS).flatmap(
    lambda gpu: st.tuples(st.just(gpu), st.lists(st.sampled_from(gpu.profiles), min_size=1, max_size=9)))


@settings(max_examples=400, deadline=None)
@given(profile_lists)
def test_every_returned_layout_obeys_the_hardware_rules(case):
    gpu, profiles = case
    layout = try_place(gpu, profiles)
    if layout is None:
        return
    assert sorted(i.profile.id for i in layout.instances) == sorted(p.id for p in profiles)
    used = 0
    for inst in layout.instances:
        assert (inst.start, inst.size) in [(pl.start, pl.size) for pl in inst.profile.placements]
        bits = ((1 << inst.size) - 1) << inst.start
        assert used & bits == 0
        used |= bits
    assert layout.compute_used <= gpu.compute_slices
    assert layout.memory_used <= gpu.memory_slots
    assert list(layout.instances) == sorted(layout.instances, key=lambda i: (i.start, i.profile.id))


def test_a30_holds_one_media_extension_instance_in_all():
    me1, me2, plain = A30.profile_by_name("1g.6gb+me"), A30.profile_by_name("2g.12gb+me"), A30.profile_by_name("1g.6gb")
    assert try_place(A30, [me1, plain, plain]) is not None and try_place(A30, [me2, plain]) is not None
    with pytest.raises(PlacementError) as err:
        place(A30, [me1, me2])
    assert str(err.value) == ("1g.6gb+me + 2g.12gb+me requested, but A30 holds at most 1 +me instance in all (they "
                              "share its one JPEG decoder and OFA)")
    # the one call the function's decisions and the node both make, ids as in a pool label
    with pytest.raises(PlacementError, match="at most 1 \\+me instance"):
        plan(PartitionSpec(KIND_SEQUENCE, "21-6"), A30)
    # other GPUs have one +me profile with a limit of one: nothing more to say there
    assert A100.media_instances == 0


def test_complete_keeps_fixed_instances_where_they_are():
    p = A100.profile_by_name
    # the solver alone puts 3g+2g+1g as 3g at 0, 2g at 4, 1g at 6; an existing 2g at 2 stays there
    fixed = [Instance(p("2g.10gb"), 2)]
    layout = complete(A100, fixed, [p("1g.5gb"), p("3g.20gb")])
    assert [(i.profile.name, i.start) for i in layout.instances] == [("1g.5gb", 0), ("2g.10gb", 2), ("3g.20gb", 4)]
    assert complete(A100, fixed, [p("3g.20gb"), p("3g.20gb")]) is None  # the 2g sits in the first 3g's slots
    assert complete(A100, [Instance(p("3g.20gb"), 0), Instance(p("2g.10gb"), 2)], []) is None  # overlapping
    assert complete(A100, [Instance(p("1g.5gb+me"), 3)], [p("1g.5gb+me")]) is None  # counts include the fixed
    assert complete(A30, [Instance(A30.profile_by_name("1g.6gb+me"), 3)],
                    [A30.profile_by_name("2g.12gb+me")]) is None  # and so does the A30's media rule
    assert complete(A100, [], [p("3g.20gb"), p("4g.20gb")]) == place(A100, [p("3g.20gb"), p("4g.20gb")])
