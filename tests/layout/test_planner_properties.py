"""Properties of every plan, on random pools (several GPU models, random existing layouts, random use),
random demand and random bounds: placeable on the real GPU model, every used instance kept, nothing
created outside the allowed profiles, nothing changed when the demand has not changed. Derandomized
(tests/conftest.py's ``ci`` profile)."""

from collections import Counter

from hypothesis import example, given, settings
from hypothesis import strategies as st

from functions.decision.layout import (CHANGE_NONE, WHOLE_GPU, Bounds, GpuSupply, Instance, PodDemand, plan)
from node_bootstrap.mig.catalogue import find_gpu
from node_bootstrap.mig.solver import Instance as SolverInstance
from node_bootstrap.mig.solver import complete

MODELS = ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A30", "NVIDIA H200"]
NAMES = sorted({p.name for m in MODELS for p in find_gpu(m).profiles})


@st.composite
def gpu_supply(draw, node, index):
    name = draw(st.sampled_from(MODELS))
    model = find_gpu(name)
    placed = []
    for profile in draw(st.lists(st.sampled_from(model.profiles), max_size=7)):
        layout = complete(model, placed, [profile])  # the project's solver places it beside the others
        if layout is not None:
            placed = list(layout.instances)
    instances = tuple(Instance(i.profile.name, i.start, draw(st.booleans())) for i in placed)
    return GpuSupply(node, index, name, instances, mig=draw(st.integers(0, 9)) != 0, busy=draw(st.integers(0, 9)) == 0)


@st.composite
def pools(draw):
    gpus = []
    for n in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(1, 4))):
            gpus.append(draw(gpu_supply("node-%d" % n, i)))
    return gpus


demands = st.lists(st.builds(PodDemand, key=st.sampled_from(["ns/p%d" % i for i in range(12)]),
                             owner=st.sampled_from(["deployment a/x", "job b/y"]),
                             profile=st.sampled_from(NAMES + [WHOLE_GPU]), count=st.integers(1, 2)),
                   max_size=12, unique_by=lambda d: d.key)
bounds = st.builds(Bounds, profiles=st.one_of(st.none(), st.frozensets(st.sampled_from(NAMES), min_size=1)),
                   headroom=st.dictionaries(st.sampled_from(NAMES), st.integers(0, 2), max_size=2))


def applied(supply, result):
    """The pool after the plan is carried out: created instances exist, idle; destroyed ones are gone."""
    out = []
    for s, t in zip(supply, result.targets):
        held = {(i.profile, i.start): i for i in s.instances}
        for key in t.destroy:
            held.pop(key)
        for name, start in t.create:
            held[(name, start)] = Instance(name, start, False)
        out.append(GpuSupply(s.node, s.index, s.model, tuple(held[k] for k in sorted(held, key=lambda x: x[1])),
                             s.mig, s.busy))
    return out


@settings(max_examples=60)
@given(pools(), demands, bounds)
def test_every_plan_is_placeable_keeps_used_instances_and_stays_in_bounds(supply, demand, limits):
    result = plan(supply, demand, limits)
    assert [(t.node, t.index) for t in result.targets] == sorted((s.node, s.index) for s in supply)
    for s, t in zip(sorted(supply, key=lambda g: (g.node, g.index)), result.targets):
        if t.change == CHANGE_NONE:
            assert t.create == () and t.destroy == () and not t.reason
            continue
        assert not s.busy and s.mig
        model = find_gpu(s.model)
        # placeable on the real model: each start one of the profile's placements, the solver's rules hold
        instances = [SolverInstance(model.profile_by_name(n), start) for n, start in t.layout]
        assert all(any(p.start == i.start for p in i.profile.placements) for i in instances)
        assert complete(model, instances, []) is not None
        # every used instance stays where it is; only idle ones are destroyed
        used = {(i.profile, i.start) for i in s.instances if i.in_use}
        assert used <= set(t.layout)
        assert not used & set(t.destroy)
        # the layout is what was there, less destroyed, plus created
        assert sorted(t.layout) == sorted(({(i.profile, i.start) for i in s.instances} - set(t.destroy))
                                          | set(t.create))
        assert all(limits.allows(n) for n, _ in t.create)
        assert "\n" not in t.reason and t.reason.startswith("node %s GPU %d: " % (s.node, s.index))
    assert list(result.reasons[:len(result.changes)]) == [t.reason for t in result.changes]  # then unserved notes


@settings(max_examples=60)
@given(pools(), demands, bounds)
# found by the wide profile: a carried target on a GPU nothing uses yet must count as such GPUs do; a pod
# asking for several instances must not take those made for single-instance pods beside running ones
@example(supply=[GpuSupply("node-2", 0, "NVIDIA A100-SXM4-40GB", ()),
                 GpuSupply("node-2", 1, "NVIDIA A100-SXM4-40GB", (Instance("1g.5gb", 0, False), Instance("1g.5gb", 1, False),
                                                                  Instance("1g.10gb", 2, False)))],
         demand=[PodDemand("ns/p0", "deployment a/x", "1g.10gb"), PodDemand("ns/p1", "deployment a/x", "1g.10gb", 2)],
         limits=Bounds())
@example(supply=[GpuSupply("node-0", 0, "NVIDIA A100-SXM4-40GB", (Instance("1g.5gb", 0, True),)),
                 GpuSupply("node-1", 0, "NVIDIA A100-SXM4-80GB", (Instance("1g.10gb", 0, False),
                                                                  Instance("1g.10gb", 1, False)))],
         demand=[PodDemand("ns/p0", "deployment a/x", "1g.10gb"), PodDemand("ns/p1", "deployment a/x", "1g.10gb", 2)],
         limits=Bounds())
@example(supply=[GpuSupply("node-0", 0, "NVIDIA A100-SXM4-80GB", (Instance("3g.40gb", 0, False), Instance("1g.10gb", 4, True))),
                 GpuSupply("node-1", 0, "NVIDIA A100-SXM4-80GB", (Instance("1g.10gb", 0, False), Instance("1g.10gb", 1, False),
                                                                  Instance("1g.10gb", 2, True)))],
         demand=[PodDemand("ns/p0", "deployment a/x", "2g.20gb", 2)], limits=Bounds())
@example(supply=[GpuSupply("node-0", 0, "NVIDIA A100-SXM4-80GB", ()), GpuSupply("node-0", 1, "NVIDIA A100-SXM4-80GB", ()),
                 GpuSupply("node-1", 0, "NVIDIA A100-SXM4-80GB", (Instance("4g.40gb", 0, True),)),
                 GpuSupply("node-1", 1, "NVIDIA A100-SXM4-80GB", (Instance("3g.40gb", 0, False),
                                                                  Instance("3g.40gb", 4, False))),
                 GpuSupply("node-1", 2, "NVIDIA A100-SXM4-80GB", (Instance("3g.40gb", 0, False),
                                                                  Instance("1g.20gb", 4, False)))],
         demand=[PodDemand("ns/p%d" % k, "o", p) for k, p in enumerate(
             ("1g.20gb", "1g.20gb", "7g.80gb", "2g.20gb", "2g.20gb", "1g.10gb+me"))],
         limits=Bounds())  # the exact solve took the profiles in the pods' order: another order, another plan
def test_unchanged_demand_changes_nothing_once_applied_and_a_plan_is_deterministic(supply, demand, limits):
    result = plan(supply, demand, limits)
    assert plan(supply, demand, limits) == result
    # the pods and GPUs listed in another order (the API server's lists have none we rely on): the same plan
    assert plan(supply[::-1], demand[::-1], limits) == result
    assert plan(supply, demand[1:] + demand[:1], limits) == result
    # the same demand on the pool the plan made: nothing more to do
    assert plan(applied(supply, result), demand, limits).changes == ()
    # the same demand while the plan is still being applied: the same targets, nothing planned twice
    assert plan(supply, demand, limits, previous=result).targets == result.targets


@settings(max_examples=60)
@given(pools(), demands, bounds)
def test_every_pending_instance_gets_an_instance_or_is_reported(supply, demand, limits):
    result = plan(supply, demand, limits)
    after = applied(supply, result)
    idle = Counter(i.profile for s in after if s.mig and not s.busy for i in s.instances if not i.in_use)
    pending = Counter()
    left_out = {key for key, _ in result.not_counted}  # no node of the pool can hold them: reported so
    for d in demand:
        if d.key not in left_out:
            pending[d.profile] += d.count
    unserved = dict(result.unserved)
    for name, n in pending.items():
        if name == WHOLE_GPU:
            continue
        assert idle[name] + unserved.get(name, 0) >= n, name
    # changes only serve pending pods or headroom: with no demand and no headroom, none
    assert plan(supply, [], Bounds(profiles=limits.profiles)).changes == ()


@settings(max_examples=80)
@given(pools(), demands, bounds)
def test_the_rounds_end_where_no_round_changes_or_serve_more_than_one_round(supply, demand, limits):
    """compose.py: further rounds are taken only where the first changed GPUs while a pod asks several
    instances; the plan is the one that ends where a round changes nothing, else the first two rounds where the
    second serves more, else the first; its changes are counted from what the GPUs hold now."""
    from functions.decision.layout.planner import plan as one_round

    def short(result):
        return sum(n for name, n in result.unserved if name != WHOLE_GPU)

    once, result = one_round(supply, demand, limits), plan(supply, demand, limits)
    assert result == once or short(result) < short(once) or \
        one_round(applied(supply, result), demand, limits).changes == ()
    for s, t in zip(supply, result.targets):
        held = {(i.profile, i.start) for i in s.instances}
        assert set(t.layout) == (held - set(t.destroy)) | set(t.create) and not set(t.create) & held
        assert (t.change == CHANGE_NONE) == (not t.create and not t.destroy)
