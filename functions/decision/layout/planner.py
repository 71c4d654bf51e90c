"""The auto pool's planner: per-GPU target layouts from what the GPUs hold and what the pods wait for.

Pure and deterministic (no I/O, no clock): the same supply, demand and bounds give the same plan, but for
one thing: on a small pool the step is also solved exactly (``exact.py``, HiGHS, step 4 below) within a time
limit, and a solve that runs out of time leaves the search's plan. The MIG
rules are the project's own (``node_bootstrap/mig``): placements and profiles from the catalogue, the
counting rules (instances per profile, compute slices, media engines) from ``solver.check_budget``; every
target layout is checked against both before it is returned.

How it decides, in order:

1. What is needed: per profile, the pending pods' instances plus the pool's headroom, less the idle
   instances that exist already (the scheduler will bind the pods to those: no change needed). An idle
   instance beyond pending + headroom is *surplus*: the only kind ever destroyed.
2. Who gives it, GPU by GPU, each time the choice that serves the most compute slices of what is needed
   (ties: the placement that leaves the most room), in this order, so the pool uses the fewest GPUs and
   drains nothing:
   a. GPUs with an instance in use, the node with the most compute in use first (scale-down removes only
      nodes without pods): add into free slots (``add``: every existing instance stays);
   b. the same GPUs: destroy surplus idle instances to make room (``repartition``; in-use ones stay);
   c. GPUs whose instances are all idle: add into free slots;
   d. empty GPUs: add (c and d first on nodes that run pods, then on nodes that run none);
   e. GPUs whose instances are all idle: repartition, on nodes equally busy the GPUs the scheduler binds
      to last first (the idle instances that stay then serve pods whole nodes at a time).
   Steps a and b count the idle instances of those GPUs only; the idle instances of GPUs nothing uses
   count before step c (a pod bound to one of those takes one more GPU into use, while room beside
   running pods may hold it). A GPU that is busy (a whole-GPU pod or non-MIG process), has MIG off, is
   listed twice, or whose model or instances the catalogue cannot read is left as it is.
3. What is left is ``unserved``; ``new_node_shape`` is one new node, GPU by GPU, whose fewest copies serve
   it (the autoscaler's template: ``_new_node``), ``new_node`` the layout most of its GPUs get.
4. When everything is served, no pod asks for several instances and the pool has at most
   ``exact.EXACT_GPUS`` usable GPUs, the step is solved exactly too; its answer replaces the search's when
   it leaves fewer GPUs holding pods once they bind, or as many with fewer instances changed.

Limits: a pod that asks for several instances gets them on one node when one node holds them, as idle
instances or added beside what its GPUs hold, or after idle instances of profiles nothing asks for are
destroyed there; one that no node can give them now is unserved (a new node's layout counts it), never
spread over nodes, where its instances would serve nothing. A pod asking for whole GPUs
(``nvidia.com/gpu``) is served only by free GPUs whose MIG is off: the planner never turns MIG on or off
(that takes a GPU reset); one asking whole GPUs beside instances only by one node holding both, and no new
node holds it (``_serve_joint``).

No flapping: nothing changes without a pod or headroom to serve, and ``previous`` (the last plan) keeps a
target that is still being applied as the GPU's state, so the pods it was made for are not planned twice.
``keep`` names GPUs whose instances stay (a GPU changed within its dwell, ``dwell.py``): they serve pods and
may gain instances, but none of theirs is destroyed, so demand that alternates cannot repartition them back.
"""

import dataclasses
import functools
from collections import Counter, OrderedDict
from typing import Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from node_bootstrap.mig.catalogue import GPUS, GpuModel, Profile, find_gpu_or_none
from node_bootstrap.mig.solver import check_budget

from .exact import (EXACT_GPUS, Step, after_binding, available as exact_available, gpus_after_binding,
                    solve as solve_exactly)
from .matching import MAX_COUNT
from .vocabulary import (CHANGE_ADD, CHANGE_NONE, CHANGE_REPARTITION, WHOLE_GPU, Bounds, GpuSupply, GpuTarget, Plan,
                         PodDemand)

# Where an instance of a GPU's working state comes from.
_ACTUAL = "actual"  # exists now
_NEW = "new"  # created by this plan
_KEPT = "kept"  # exists now on a GPU within its dwell (dwell.py): counts as idle supply, never destroyed
_JOINT = "joint"  # an idle instance kept for a waiting pod that asks several profiles (_serve_joint)


class _Inst:
    __slots__ = ("profile", "start", "in_use", "origin", "reserved")

    def __init__(self, profile: Profile, start: int, in_use: bool, origin: str):
        self.profile, self.start, self.in_use, self.origin = profile, start, in_use, origin
        # kept for a pending pod that needs several instances on one node: True (one profile, _serve_multi) or
        # _JOINT (several profiles, _serve_joint: the binding model of _prune sees it taken)
        self.reserved = False  # type: object

    @property
    def held(self) -> bool:
        """Not free to count as idle supply or to destroy: a pod holds it or one is planned onto it."""
        return self.in_use or self.reserved

    @property
    def mask(self) -> int:
        return _mask(self.start, self.profile.memory_slices)


class _Gpu:
    """One usable GPU while planning: what it holds now (``actual``) and what it should hold (``state``)."""

    def __init__(self, supply: GpuSupply, model: GpuModel, actual: List[_Inst]):
        self.supply, self.model = supply, model
        self.actual = actual
        self.state = list(actual)
        self.carried = ""  # the previous plan's reason when its target is still being applied

    @property
    def used(self) -> bool:
        return any(i.in_use for i in self.state)

    @property
    def compute_in_use(self) -> int:
        return sum(i.profile.compute_slices for i in self.state if i.in_use)

    @property
    def sort_key(self):
        return (self.supply.node, self.supply.index)


def _mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def _placeable(model: GpuModel, instances: Sequence[Tuple[Profile, int]]) -> bool:
    """The catalogue's placements, no overlap, and the solver's counting rules."""
    used = 0
    for profile, start in instances:
        if all(p.start != start for p in profile.placements):
            return False
        bits = _mask(start, profile.memory_slices)
        if used & bits:
            return False
        used |= bits
    return check_budget(model, [p for p, _ in instances]) is None


def _value(profile: Profile) -> int:
    # What serving one instance is worth: compute slices first (the scarce part: 7 per GPU), memory slots next.
    return profile.compute_slices * 16 + profile.memory_slices


def _leftover_score(model: GpuModel, free: int, profiles: Tuple[Profile, ...]) -> Tuple[int, int]:
    """How useful the free slots left are: the biggest instance that still fits, then how many placements do."""
    biggest, count = 0, 0
    for p in profiles:
        for pl in p.placements:
            if free & _mask(pl.start, pl.size) == _mask(pl.start, pl.size):
                count += 1
                biggest = max(biggest, p.memory_slices)
    return biggest, count


# The caches below are keyed by the model's key (hashing a whole GpuModel, profiles and placements, on every
# call costs more than the answer); every product of one key shares its profiles.
_MODELS = {g.key: g for g in GPUS}


@functools.lru_cache(maxsize=4096)
def _candidates(key: str, free: int, fixed: Tuple[Tuple[str, int], ...], wanted: Tuple[str, ...]
                ) -> Tuple[Tuple[Tuple[Tuple[str, int], ...], Tuple[Tuple[str, int], ...]], ...]:
    """Every multiset of ``wanted`` profiles that fits the ``free`` slots beside the ``fixed`` instances
    (profile counts), each with the placement that leaves the most useful room: ((name, count)...,
    (name, start)...). Cached: GPUs in the same state ask the same question (a pure function of its
    arguments, so the cache cannot change an answer)."""
    model = _MODELS[key]
    profiles = [model.profile_by_name(n) for n in wanted]
    fixed_profiles = [model.profile_by_name(n) for n, c in fixed for _ in range(c)]
    compute_left = model.compute_slices - sum(p.compute_slices for p in fixed_profiles)
    by_start = {}  # type: Dict[int, List[Profile]]
    for p in profiles:
        for pl in p.placements:
            by_start.setdefault(pl.start, []).append(p)
    all_profiles = tuple(model.profiles)
    best = {}  # type: Dict[Tuple[Tuple[str, int], ...], Tuple[Tuple[int, int], Tuple[Tuple[str, int], ...]]]
    chosen = []  # type: List[Tuple[Profile, int]]

    def visit(slot: int, used: int, compute: int) -> None:
        if slot >= model.memory_slots:
            if not chosen:
                return
            counts = tuple(sorted(Counter(p.name for p, _ in chosen).items()))
            score = _leftover_score(model, free & ~used, all_profiles)
            known = best.get(counts)
            if known is None or score > known[0]:
                best[counts] = (score, tuple(sorted((p.name, s) for p, s in chosen)))
            return
        visit(slot + 1, used, compute)
        for p in by_start.get(slot, ()):
            bits = _mask(slot, p.memory_slices)
            if free & bits == bits and not used & bits and p.compute_slices <= compute:
                chosen.append((p, slot))
                visit(slot + 1, used | bits, compute - p.compute_slices)
                chosen.pop()

    visit(0, 0, compute_left)
    out = []
    for counts, (_, placement) in sorted(best.items()):
        together = fixed_profiles + [model.profile_by_name(n) for n, c in counts for _ in range(c)]
        if check_budget(model, together) is None:
            out.append((counts, placement))
    return tuple(out)


def _best(model: GpuModel, state: Sequence[_Inst], need: Dict[str, int], bounds: Bounds
          ) -> Tuple[Tuple[str, int], ...]:
    """The instances to add beside ``state`` that serve the most of ``need``: (name, start) pairs."""
    wanted = tuple(sorted(n for n, c in need.items() if c > 0 and bounds.allows(n) and model.profile_by_name(n)))
    if not wanted:
        return ()
    used = 0
    for inst in state:
        used |= inst.mask
    free = ((1 << model.memory_slots) - 1) & ~used
    if not free:
        return ()
    fixed = tuple(sorted(Counter(i.profile.name for i in state).items()))
    capped = tuple(min(need[n], 16) for n in wanted)  # no GPU holds more than 16 instances of one profile
    return _choose(model.key, free, fixed, wanted, capped)


@functools.lru_cache(maxsize=16384)
def _choose(key: str, free: int, fixed: Tuple[Tuple[str, int], ...], wanted: Tuple[str, ...],
            capped: Tuple[int, ...]) -> Tuple[Tuple[str, int], ...]:
    model = _MODELS[key]
    cap = dict(zip(wanted, capped))
    best_key, best_placement = None, ()
    for counts, placement in _candidates(key, free, fixed, wanted):
        if any(c > cap[n] for n, c in counts):
            continue  # a smaller multiset serves the same and is a candidate too
        key = (sum(_value(model.profile_by_name(n)) * c for n, c in counts), -len(placement))
        if best_key is None or key > best_key:
            best_key, best_placement = key, placement
    return best_placement


def _describe(instances: Sequence[_Inst], marks: bool) -> str:
    if not instances:
        return "empty"
    parts = []  # type: List[str]
    groups = OrderedDict()  # type: Dict[Tuple[str, str], int]
    for i in sorted(instances, key=lambda x: (not x.in_use, -x.profile.memory_slices, x.profile.name, x.start)):
        tag = ("in use" if i.in_use else "idle") if marks else ""
        groups[(i.profile.name, tag)] = groups.get((i.profile.name, tag), 0) + 1
    for (name, tag), n in groups.items():
        parts.append(("%dx %s" % (n, name) if n > 1 else name) + (" " + tag if tag else ""))
    return " + ".join(parts)


class _Ledger:
    """Who each new instance is for: pending pods' instances first (by pod key), then headroom."""

    def __init__(self, demand: Sequence[PodDemand], idle: Counter):
        self.queue = {}  # type: Dict[str, List[PodDemand]]
        for pod in sorted((d for d in demand if d.pending and d.profile != WHOLE_GPU), key=lambda d: d.key):
            self.queue.setdefault(pod.profile, []).extend([pod] * max(int(pod.count), 0))
        for name, n in idle.items():  # existing idle instances take the first pods
            self.queue[name] = self.queue.get(name, [])[n:]

    def take(self, name: str, n: int) -> Tuple[List[PodDemand], int]:
        queue = self.queue.get(name, [])
        pods, self.queue[name] = queue[:n], queue[n:]
        return pods, n - len(pods)


MAX_REASON = 400


def _one_line(text: str) -> str:
    """A reason as one printable line of bounded length: names come from Kubernetes objects, and a reason
    is shown as it is (advise, Events): control characters are written escaped, never raw."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return out if len(out) <= MAX_REASON else out[:MAX_REASON - 3] + "..."


def _served_text(served: List[Tuple[str, List[PodDemand], int]]) -> str:
    owners = OrderedDict()  # type: Dict[str, set]
    headroom = OrderedDict()  # type: Dict[str, int]
    for name, pods, extra in served:
        for pod in pods:
            owners.setdefault(pod.owner or pod.key, set()).add(pod.key)
        if extra:
            headroom[name] = headroom.get(name, 0) + extra
    parts = []
    for i, (owner, keys) in enumerate(owners.items()):
        n = len(keys)
        parts.append(("%d pending pod%s of %s" if i == 0 else "%d of %s")
                     % ((n, "" if n == 1 else "s", owner) if i == 0 else (n, owner)))
    if headroom:
        parts.append("headroom " + ", ".join("%dx %s" % (n, name) for name, n in headroom.items()))
    # Kept although no pod binds to what it creates: without it a pod would wait or one more GPU would hold
    # pods once they bind (_prune keeps nothing else).
    return ", ".join(parts) if parts else "the waiting pods as they bind (without it a pod waits or one more GPU " \
        "holds pods)"


def _read(supply: GpuSupply) -> Tuple[Optional[_Gpu], str]:
    """A usable GPU, or None and why not (empty reason: left alone by rule, e.g. busy)."""
    if supply.busy:
        return None, ""
    if not supply.mig:
        return None, ""
    model = find_gpu_or_none(name=supply.model)
    if model is None:
        return None, "node %s GPU %d: GPU model %r is not in the catalogue; left as it is" % (
            supply.node, supply.index, supply.model[:80])
    actual = []
    # by start whatever order the node's report lists them in: which idle instance a pod is given, and so which
    # one a repartition destroys, follows this order, and the same pool must give the same plan
    for inst in sorted(supply.instances, key=lambda i: (i.start, i.profile)):
        profile = model.profile_by_name(inst.profile)
        if profile is None:
            return None, "node %s GPU %d: %s has no profile %r; left as it is" % (
                supply.node, supply.index, model.key, inst.profile[:40])
        actual.append(_Inst(profile, int(inst.start), bool(inst.in_use), _ACTUAL))
    if not _placeable(model, [(i.profile, i.start) for i in actual]):
        return None, "node %s GPU %d: its instances break %s's placement rules; left as it is" % (
            supply.node, supply.index, model.key)
    return _Gpu(supply, model, actual), ""


def _carry(gpu: _Gpu, target, asked) -> None:
    """Take a previous target that is still being applied as the GPU's state, when it still holds: every
    instance in use now is in it, at the same start, it is placeable, and what it creates is still asked
    for (pods deleted meanwhile leave nothing to serve: the target is dropped, not carried out)."""
    if target is None or target.change == CHANGE_NONE:
        return
    if not any(name in asked for name, _ in target.create):
        return
    wanted = {(n, s) for n, s in target.layout}
    now = {(i.profile.name, i.start): i for i in gpu.actual}
    if set(now) == wanted:
        return  # reached: the GPU is as the plan wanted
    if any(i.in_use and (i.profile.name, i.start) not in wanted for i in gpu.actual):
        return  # a pod took an instance the target destroys: plan afresh
    state = []
    for name, start in sorted(wanted, key=lambda x: x[1]):
        profile = gpu.model.profile_by_name(name)
        if profile is None:
            return
        kept = now.get((name, start))
        state.append(kept if kept is not None else _Inst(profile, start, False, _NEW))
    if _placeable(gpu.model, [(i.profile, i.start) for i in state]):
        gpu.state, gpu.carried = state, target.reason


def _on_used(members: List[_Gpu], inst: _Inst) -> int:
    """1 when the instance sits on a GPU that serves a pod, else 0."""
    return int(next(g.used for g in members if any(x is inst for x in g.state)))


def _in_the_way(model: GpuModel, kept: List[_Inst], spare: List[_Inst], new: Tuple[Tuple[str, int], ...]
                ) -> List[_Inst]:
    """Of the ``spare`` idle instances, those the ``new`` ones need the room of (the others stay)."""
    placed = [(model.profile_by_name(n), st) for n, st in new]
    taken = 0
    for p, st in placed:
        taken |= _mask(st, p.memory_slices)
    back = []  # type: List[_Inst]
    for inst in spare:
        trial = [(i.profile, i.start) for i in kept + back] + placed + [(inst.profile, inst.start)]
        if not inst.mask & taken and _placeable(model, trial):
            back.append(inst)
    return [i for i in spare if i not in back]


def _busiest_first(gpus: List[_Gpu]) -> Dict[str, List[_Gpu]]:
    """The GPUs by node, the nodes with the most compute in use first (then by name), each node's GPUs in
    index order: where a pod needing one node's instances is looked for first."""
    busy = Counter()  # type: Counter
    for g in gpus:
        busy[g.supply.node] += g.compute_in_use
    nodes = OrderedDict()  # type: Dict[str, List[_Gpu]]
    for g in sorted(gpus, key=lambda g: (-busy[g.supply.node], g.sort_key)):
        nodes.setdefault(g.supply.node, []).append(g)
    return nodes


def _serve_joint(gpus: List[_Gpu], demand: Sequence[PodDemand], whole: Counter, yielded: FrozenSet[str] = frozenset()
                 ) -> Tuple[set, Counter, int, Dict[str, int], Counter, int, Dict[str, tuple]]:
    """Pending pods that ask for several profiles, whole GPUs (``nvidia.com/gpu``) counted as one
    (matching.demand_of gives one PodDemand per profile, one key): the scheduler needs every resource of such
    a pod on one node, and the rest of the plan counts profile by profile (whole GPUs pool-wide), so it would
    count an idle 1g.10gb on one node and an idle 2g.20gb, or a free whole GPU, on another as serving a pod
    that asks for both. A node whose idle instances and free whole GPUs (``whole``: per node, GPUs with MIG
    off that nothing uses; taken from it) hold all of its asks keeps them for it (the busiest node first); a
    pod no node holds that way now is unserved and changes nothing here: planning the pool's GPUs for asks
    that must meet on one node is left to the new node. A new node cannot hold a pod asking whole GPUs beside
    instances: its GPUs all get MIG (a sequence request) or all stay whole (``_fresh_nodes``), and the
    planner never turns MIG off. So such a pod is short, and its instances go to no new node's layout (the
    autoscaler would add a node it cannot use, for as long as the pod waits). Returns (the keys handled, the
    instances left unserved per profile, the pods left so a new node can hold, per profile the most one of
    those asks: what one new node must hold, the instances of the pods no new node can hold, those pods, and
    per pod asking MIG instances alone that keeps instances, its asks and the instances kept: ``_behind``
    binds it in pod order). A pod in ``yielded`` keeps nothing: the pods ahead of it in pod order take what
    it would keep (``_behind``), and it is left for a new node as one no node holds now."""
    asks = OrderedDict()  # type: Dict[str, Counter]
    kinds = {}  # type: Dict[str, set]
    for d in demand:
        if d.pending and d.count > 0:
            kinds.setdefault(d.key, set()).add(d.profile)
    for d in sorted(demand, key=lambda d: d.key):
        if d.pending and d.count > 0 and len(kinds[d.key]) > 1:
            asks.setdefault(d.key, Counter())[d.profile] += int(d.count)
    unserved, beyond, floor = Counter(), Counter(), {}  # type: Counter, Counter, Dict[str, int]
    apart = mixed = 0
    kept = {}  # type: Dict[str, tuple]
    if not asks:
        return set(), unserved, apart, floor, beyond, mixed, kept
    nodes = _busiest_first(gpus)
    # Per node, its idle instances by profile, counted once and taken from as pods keep them: a node is
    # tested against a pod by counts, its instances walked only for the node that holds it. Walking every
    # node's instances for every pod cost pods x instances (10,000 pods asking two profiles each on 1,000
    # GPUs: 30 million reads, seconds of the tick), which anyone who may create pods decides.
    free = {node: Counter(i.profile.name for g in members for i in g.state if not i.held)
            for node, members in nodes.items()}
    for key, wanted in asks.items():
        gpus_asked = wanted.get(WHOLE_GPU, 0)
        instances = {name: n for name, n in wanted.items() if name != WHOLE_GPU}
        for node, members in nodes.items() if key not in yielded else ():
            if whole[node] < gpus_asked or any(free[node][name] < n for name, n in instances.items()):
                continue
            idle = {name: [i for g in members for i in g.state if not i.held and i.profile.name == name][:n]
                    for name, n in instances.items()}
            if all(len(idle[name]) == n for name, n in instances.items()):
                for found in idle.values():
                    for inst in found:
                        inst.reserved = _JOINT
                free[node].subtract(instances)
                whole[node] -= gpus_asked
                if not gpus_asked:
                    kept[key] = (tuple(sorted(instances.items())), [i for found in idle.values() for i in found])
                break
        else:
            unserved.update(wanted)
            if gpus_asked:
                beyond.update(instances)
                mixed += 1
                continue
            apart += 1
            for name, n in wanted.items():
                floor[name] = max(floor.get(name, 0), n)
    return set(asks), unserved, apart, floor, beyond, mixed, kept


def _serve_whole(demand: Sequence[PodDemand], whole: Counter) -> int:
    """Pods asking whole GPUs alone: the scheduler needs a pod's GPUs on one node, so a pod asking two is not
    served by one free GPU on each of two nodes (counted over the pool, it was, and waited with nothing said).
    The pods asking most first, each on the node it leaves with the fewest free (``whole``: per node, taken
    from it), so the larger ones find room where there is any. Returns the whole GPUs of the pods left short."""
    short = 0
    for pod in sorted((d for d in demand if d.pending and d.profile == WHOLE_GPU and d.count > 0),
                      key=lambda d: (-d.count, d.key)):
        fits = [node for node in sorted(whole) if whole[node] >= pod.count]
        if not fits:
            short += int(pod.count)
            continue
        whole[min(fits, key=lambda node: whole[node])] -= pod.count
    return short


def _serve_multi(gpus: List[_Gpu], demand: Sequence[PodDemand], bounds: Bounds):
    """Pending pods that ask for several instances: the scheduler needs them all on one node, so they are
    served node by node before the rest (which may spread over the pool): idle instances of one node if it
    has enough, else instances added on one node's GPUs beside what they hold, else the same after
    destroying idle instances beyond what every waiting pod and the headroom need. The instances they get
    are reserved: the rest of the plan neither counts nor destroys them. A pod none of these serves is not
    handled (the plan counts it unserved). Returns (the pods handled, the instances created per GPU with the
    pod they are for)."""
    handled, served = set(), {}  # type: set, Dict[Tuple[str, int], List[Tuple[str, List[PodDemand], int]]]
    # What may be destroyed for them: idle instances beyond every waiting pod's and the headroom (all of a
    # profile nothing asks for).
    surplus = Counter(i.profile.name for g in gpus for i in g.state if not i.held)  # type: Counter
    for d in demand:
        if d.pending:
            surplus[d.profile] -= max(int(d.count), 0)
    for name, k in bounds.headroom:
        surplus[name] -= k
    multi = sorted((d for d in demand if d.pending and d.count > 1 and d.profile != WHOLE_GPU),
                   key=lambda d: (-d.count, d.key))
    if not multi:
        return handled, served
    nodes = _busiest_first(gpus)
    # What a node was found unable to give, until it changes: (node, profile, destroy) -> (its version then,
    # the fewest instances it could not give). Many pods of one profile that no node holds cost a lookup per
    # node each, not a search of every GPU (2,000 such pods on 1,000 GPUs: issue 35).
    version = Counter()  # type: Counter
    failed = {}  # type: Dict[Tuple[str, str, bool], Tuple[int, int]]
    idle_counts = {}  # type: Dict[str, Tuple[int, Counter]]

    def idle_on(node: str) -> Counter:
        known = idle_counts.get(node)
        if known is None or known[0] != version[node]:
            known = idle_counts[node] = (version[node], Counter(i.profile.name for g in nodes[node] for i in g.state
                                                                if not i.held))
        return known[1]

    def cannot(node: str, profile: str, destroy: bool, count: int) -> bool:
        known = failed.get((node, profile, destroy))
        return known is not None and known[0] == version[node] and count >= known[1]

    for pod in multi:
        handled.add(pod.key)
        # Idle instances of GPUs nothing uses are taken first, and the node that needs fewest of the others:
        # the rest of the plan counts the idle instances beside running pods first, so taking those would
        # make it add more there, and again after each apply (a flap).
        free, fewest, where = None, None, ""
        for node, members in nodes.items():
            if idle_on(node)[pod.profile] < pod.count:
                continue
            idle = sorted((i for g in members for i in g.state if not i.held and i.profile.name == pod.profile),
                          key=lambda i, m=members: _on_used(m, i))[:pod.count]
            if len(idle) == pod.count:
                cost = sum(_on_used(members, i) for i in idle)
                if fewest is None or cost < fewest:
                    free, fewest, where = idle, cost, node
        if free is not None:
            for inst in free:
                inst.reserved = True
            version[where] += 1
            continue
        placed = None
        for destroy in (False, True):  # adding alone first; then destroying idle instances beyond the demand
            for node, members in nodes.items() if bounds.allows(pod.profile) and placed is None else ():
                if cannot(node, pod.profile, destroy, pod.count):
                    continue
                trial, left, budget = [], pod.count, Counter(surplus)
                for g in members:
                    if left <= 0:
                        break
                    idle = [i for i in g.state if not i.held and i.profile.name == pod.profile][:left]
                    left -= len(idle)
                    more, gone = (), []  # type: Tuple[Tuple[str, int], ...], List[_Inst]
                    if left > 0:
                        more = _best(g.model, g.state, {pod.profile: left}, bounds)
                        if destroy and len(more) < left:
                            spare = []  # type: List[_Inst]
                            for i in g.state:
                                if not i.held and i.origin == _ACTUAL and i not in idle and budget[i.profile.name] > 0:
                                    budget[i.profile.name] -= 1
                                    spare.append(i)
                            kept = [i for i in g.state if i not in spare]
                            wider = _best(g.model, kept, {pod.profile: left}, bounds)
                            if len(wider) > len(more):
                                more, gone = wider, _in_the_way(g.model, kept, spare, wider)
                            for i in spare:
                                if i not in gone:
                                    budget[i.profile.name] += 1
                        left -= len(more)
                    trial.append((g, idle, more, gone))
                if left <= 0:
                    placed, where = trial, node
                    surplus = budget
                    break
                known = failed.get((node, pod.profile, destroy))
                smallest = known[1] if known is not None and known[0] == version[node] else pod.count
                failed[(node, pod.profile, destroy)] = (version[node], min(smallest, pod.count))
        if placed is None:
            # No node holds them: the pod joins the rest of the demand (on one node or not: see the
            # module's limits).
            handled.discard(pod.key)
            continue
        version[where] += 1
        for g, idle, more, gone in placed:
            g.state = [i for i in g.state if i not in gone]
            for inst in idle:
                inst.reserved = True
            for name, start in more:
                inst = _Inst(g.model.profile_by_name(name), start, False, _NEW)
                inst.reserved = True
                g.state.append(inst)
            if more:
                served.setdefault(g.sort_key, []).append((pod.profile, [pod] * len(more), 0))
    return handled, served


# Plans made at most where pods asking several instances yield to the pods ahead of them (_behind), the
# first included: each is a whole plan's work, and only a pool short of a profile such a pod asks pays it.
# Only on pools of at most exact.EXACT_GPUS GPUs, as compose.py's further rounds: on 1,000 GPUs with 2,000
# pods asking several, the passes and their bindings took a plan from 1.2 s of CPU to 4.4 s. Each of those
# rounds is such a plan, so the two multiply: up to compose.ROUNDS x YIELD_PASSES = 24 plans in one tick
# (compose.ROUNDS gives the cost measured on 96 GPUs: scripts/plan_cost.py).
YIELD_PASSES = 4


def plan(supply: Sequence[GpuSupply], demand: Sequence[PodDemand], bounds: Bounds,
         previous: Optional[Plan] = None, keep: FrozenSet[Tuple[str, int]] = frozenset()) -> Plan:
    """Per-GPU targets for an auto pool (see the module's text for how it decides). ``keep``: the
    (node, GPU index) whose instances stay (GPUs within their dwell, dwell.py): their idle instances serve
    pods as any idle instance does, and instances may be added beside them, but none is destroyed.

    A pod asking several instances of a profile the pool is short of, which the pods ahead of it in pod order
    leave too few of once they bind (``_behind``), is planned as unserved, and the plan made again without
    its instances: the scheduler binds those pods first, so they took what was made for it, it waited with
    them idle, and the next tick destroyed them for the others (a flap on unchanged demand). So is a pod
    asking several profiles whose kept instances the pods ahead of it take (``_behind``): it keeps none. On
    pools of at most ``EXACT_GPUS`` GPUs (YIELD_PASSES says why)."""
    yielded = frozenset()  # type: FrozenSet[str]
    for k in range(YIELD_PASSES):
        result, behind = _plan(supply, demand, bounds, previous, keep, yielded,
                               k + 1 < YIELD_PASSES and len(supply) <= EXACT_GPUS)
        if result is not None:
            return result
        yielded |= behind
    raise AssertionError("unreachable: the last pass returns a plan")


def _plan(supply: Sequence[GpuSupply], demand: Sequence[PodDemand], bounds: Bounds, previous: Optional[Plan],
          keep: FrozenSet[Tuple[str, int]], yielded: FrozenSet[str], check: bool
          ) -> Tuple[Optional[Plan], FrozenSet[str]]:
    """One plan, with the pods asking several instances in ``yielded`` left unserved; where ``check`` and
    the search leaves such a pod behind the pods ahead of it (``_behind``), (None, those pods) instead."""
    # One order whatever the caller's (a list's order is the API server's): the search, the exact solve's
    # variables and the reasons all follow it, and a plan must not change with it.
    demand = sorted(demand, key=lambda d: (d.key, d.profile, d.count, d.pending, d.node, d.owner))
    demand, not_counted = countable(supply, demand, bounds)
    gpus, unplaced, whole = [], [], Counter()  # type: List[_Gpu], List[str], Counter
    twice = {k for k, n in Counter((s.node, s.index) for s in supply).items() if n > 1}
    for s in sorted(supply, key=lambda g: (g.node, g.index)):
        if (s.node, s.index) in twice:  # two answers for one GPU: neither is trusted
            why = "node %s GPU %d appears more than once in the supply; left as it is" % (s.node, s.index)
            if why not in unplaced:
                unplaced.append(why)
            continue
        gpu, why = _read(s)
        if gpu is not None:
            if gpu.sort_key in keep:
                for inst in gpu.actual:
                    inst.origin = _KEPT
            gpus.append(gpu)
        elif why:
            unplaced.append(why)
        elif not s.mig and not s.busy:
            whole[s.node] += 1  # per node: a pod asking whole GPUs beside instances needs both on one
    if previous is not None:
        earlier = {(t.node, t.index): t for t in previous.targets}
        asked = {d.profile for d in demand if d.pending} | {n for n, k in bounds.headroom if k > 0}
        for gpu in gpus:
            _carry(gpu, earlier.get(gpu.sort_key), asked)

    before = {g.sort_key: list(g.state) for g in gpus}  # what the exact form starts from (exact.py)
    unserved, notes = Counter(), []  # type: Counter, List[str]
    # pods asking several profiles (whole GPUs among them): the whole GPUs they take are no one else's
    joint, joint_short, joint_apart, floor, no_new_node, mixed, kept = _serve_joint(gpus, demand, whole, yielded)
    if joint:  # the rest of the plan, the exact solve and the needless-change check count profile by profile
        demand = [d for d in demand if d.key not in joint]
    # pods asking several instances of one node (those yielded to the pods ahead of them wait for a new one)
    multi = _serve_multi(gpus, [d for d in demand if d.key not in yielded], bounds)
    # A pod asking several instances that no node can give it now waits for a new node: instances spread
    # over the pool would serve nothing (the scheduler needs them on one node).
    apart, behind = Counter(), Counter()  # type: Counter, Counter
    singles = []  # type: List[PodDemand]
    for d in demand:
        if d.key in multi[0]:
            continue
        if d.pending and d.count > 1 and d.profile != WHOLE_GPU:
            (behind if d.key in yielded else apart)[d.profile] += int(d.count)
            continue
        singles.append(d)
    pending = Counter()
    for d in singles:
        if d.pending:
            pending[d.profile] += max(int(d.count), 0)
    for name, n in sorted(joint_short.items()):
        unserved[name] += n
    joint_behind = sum(1 for key in joint if key in yielded)
    if joint_apart - joint_behind:
        notes.append("%d pending pod%s asking several profiles: no node of the pool has idle instances of all of "
                     "them now (the scheduler needs them on one node): counted for a new node"
                     % (joint_apart - joint_behind, "" if joint_apart - joint_behind == 1 else "s"))
    if joint_behind:
        notes.append("%d pending pod%s asking several profiles: the pods ahead of %s in pod order take the idle "
                     "instances of all of them that a node holds first: counted for a new node"
                     % ((joint_behind, "", "it") if joint_behind == 1 else (joint_behind, "s", "them")))
    if mixed:
        notes.append("%d pending pod%s asking whole GPUs and MIG instances together: no node of the pool has free "
                     "whole GPUs (MIG off) beside idle instances of all of them (the scheduler needs them on one "
                     "node), and a new node cannot hold %s either (its GPUs all get MIG, or all stay whole): "
                     "short, and no new node is asked for %s" % ((mixed, "", "it", "it") if mixed == 1 else
                                                                 (mixed, "s", "them", "them")))
    for d in demand:  # one new node must hold each pod asking several of one profile that waits for one
        if d.pending and d.count > 1 and d.profile != WHOLE_GPU and d.key not in multi[0]:
            floor[d.profile] = max(floor.get(d.profile, 0), int(d.count))
    for name, n in sorted(behind.items()):
        unserved[name] += n
        notes.append("%d pending %s instance%s of pods asking several on one node: the pods ahead of them in pod "
                     "order take what the pool's GPUs can hold of it first" % (n, name, "" if n == 1 else "s"))
    for name, n in sorted(apart.items()):
        unserved[name] += n
        notes.append("%d pending %s instance%s of pods asking several on one node: no node of the pool can "
                     "give them together now" % (n, name, "" if n == 1 else "s"))
    idle = Counter(i.profile.name for g in gpus for i in g.state if not i.held)
    # Phase one plans on the GPUs that serve pods already: their idle
    # instances count first, and only the surplus among them may go. Idle instances on GPUs nothing uses
    # count only in phase two: a pod bound to one of those would take one more GPU into use, while room
    # beside running pods may hold it.
    # (a carried target counts where its GPU stands now: the same as once it is applied)
    first = [g for g in gpus if g.used]
    rest = [g for g in gpus if not g.used]
    idle_first = Counter(i.profile.name for g in first for i in g.state if not i.held)
    idle_rest = Counter(i.profile.name for g in rest for i in g.state if not i.held)
    offered = {p.name for g in gpus for p in g.model.profiles}
    need = {}  # type: Dict[str, int]
    for name in sorted(set(pending) | {n for n, _ in bounds.headroom}):
        if name == WHOLE_GPU:
            continue
        if pending[name] + bounds.headroom_of(name) - idle[name] > 0 and (not bounds.allows(name) or name not in offered):
            short = max(0, pending[name] - idle[name])
            if short:
                unserved[name] += short
                notes.append("%d pending %s instance%s: %s" % (
                    short, name, "" if short == 1 else "s",
                    "no GPU of the pool has this profile" if bounds.allows(name) else
                    "not among the profiles the pool allows (ack-mig-hook/layout-profiles)"))
            continue
        # Pods go beside running ones; headroom is any idle instance, wherever it is: only what the idle
        # instances of both kinds of GPU leave short of it is added here (or headroom would move about).
        spare_first = max(0, idle_first[name] - pending[name])
        gap = max(0, bounds.headroom_of(name) - spare_first - idle_rest[name])
        wanted = max(0, pending[name] - idle_first[name]) + gap
        if wanted > 0 and bounds.allows(name) and name in offered:
            need[name] = wanted
    surplus = Counter({n: idle_first[n] - pending[n] - max(0, bounds.headroom_of(n) - idle_rest[n])
                       for n in idle_first if idle_first[n] > pending[n] + max(0, bounds.headroom_of(n) - idle_rest[n])})
    ledger = _Ledger(singles, idle_first)
    served = multi[1]  # type: Dict[Tuple[str, int], List[Tuple[str, List[PodDemand], int]]]

    def add(gpu: _Gpu, placement: Tuple[Tuple[str, int], ...]) -> None:
        for name, start in placement:
            gpu.state.append(_Inst(gpu.model.profile_by_name(name), start, False, _NEW))
        for name, n in Counter(n for n, _ in placement).items():
            need[name] -= n
            pods, extra = ledger.take(name, n)
            served.setdefault(gpu.sort_key, []).append((name, pods, extra))

    def fill(gpu: _Gpu) -> None:
        placement = _best(gpu.model, gpu.state, need, bounds)
        if placement:
            add(gpu, placement)

    def repartition(gpu: _Gpu) -> None:
        # Only surplus idle instances that exist may go; what this plan (or a carried one) creates stays.
        spare = Counter(surplus)
        removable = []
        for inst in sorted(gpu.state, key=lambda i: (-i.profile.memory_slices, i.start)):
            if not inst.held and inst.origin == _ACTUAL and spare[inst.profile.name] > 0:
                spare[inst.profile.name] -= 1
                removable.append(inst)
        if not removable:
            return
        kept = [i for i in gpu.state if i not in removable]
        placement = _best(gpu.model, kept, need, bounds)
        if not placement:
            return
        new = [(gpu.model.profile_by_name(n), s) for n, s in placement]
        taken = 0
        for p, s in new:
            taken |= _mask(s, p.memory_slices)
        back = []
        for inst in removable:  # destroy only what the new instances need the room of
            trial = [(i.profile, i.start) for i in kept + back] + new + [(inst.profile, inst.start)]
            if not inst.mask & taken and _placeable(gpu.model, trial):
                back.append(inst)
        gone = [i for i in removable if i not in back]
        if not gone:
            add(gpu, placement)  # it all fits beside them after all
            return
        for inst in gone:
            surplus[inst.profile.name] -= 1
        gpu.state = kept + back
        add(gpu, placement)

    def wanting() -> bool:
        return any(v > 0 for v in need.values())

    # Node-aware (docs/auto-pools.md "Consolidation"): the scale-down removes only nodes without pods, so of
    # the GPUs a step may use, those on the nodes with the most compute in use come first; new instances go
    # beside what runs, and a node whose pods end is left with nothing new to keep it.
    node_busy = Counter()  # type: Counter
    for g in gpus:
        node_busy[g.supply.node] += g.compute_in_use
    used = sorted(first, key=lambda g: (-node_busy[g.supply.node], -g.compute_in_use, g.sort_key))
    for step in (fill, repartition):
        for gpu in used:
            if not wanting():
                break
            step(gpu)
    # Phase two: the idle instances on GPUs nothing uses take what is left, then those GPUs and empty ones.
    # What is still short, counted afresh over every GPU: pending + headroom - idle (what phase one made
    # counts as idle: it waits for its pods).
    now_idle = Counter(i.profile.name for g in gpus for i in g.state if not i.held)
    surplus = Counter()
    for name in sorted(set(need) | set(idle_rest)):
        if name in need:
            need[name] = pending[name] + bounds.headroom_of(name) - now_idle[name]
        ledger.take(name, idle_rest[name])  # pods left over bind to these first
        spare = idle_rest[name] - max(0, pending[name] + bounds.headroom_of(name) - (now_idle[name] - idle_rest[name]))
        if spare > 0:
            surplus[name] = spare
    # GPUs on nodes that run pods before those on nodes that run none (those can empty): adding there first,
    # idle-only GPUs before empty ones; repartitioning after every addition.
    idle_only = sorted((g for g in rest if g.state), key=lambda g: (-node_busy[g.supply.node], -len(g.state), g.sort_key))
    empty = sorted((g for g in rest if not g.state), key=lambda g: (-node_busy[g.supply.node], g.sort_key))
    busy_idle = [g for g in idle_only if node_busy[g.supply.node]]
    busy_empty = [g for g in empty if node_busy[g.supply.node]]
    # Repartitions among nodes equally busy take the GPUs the scheduler binds to last (it breaks ties by the
    # first GPU): the idle instances that stay serve the waiting pods from the first nodes on, whole nodes at a
    # time, and what is made for the other profiles, with what stays idle, sits together on the last ones. On
    # fresh nodes of one layout, taking the first GPUs instead spread the pods that bind to what exists over
    # every node (issue 37: a cold start's long 4g.40gb pods held a third node for days).
    last_first = sorted(reversed(idle_only), key=lambda g: (-node_busy[g.supply.node], -len(g.state)))
    for step, group in ((fill, busy_idle), (fill, busy_empty),
                        (fill, [g for g in idle_only if not node_busy[g.supply.node]]),
                        (fill, [g for g in empty if not node_busy[g.supply.node]]), (repartition, last_first)):
        for gpu in group:
            if not wanting():
                break
            step(gpu)

    # What the search itself leaves short, kept apart until the exact form has had its say: the search never
    # destroys an idle instance a waiting pod could use and places greedily, so it can leave a pod short that
    # the pool could serve. The exact form is asked too, and an answer serving every pod wins whatever it
    # costs (a needless scale-out costs more). Only when the pool has the room at all.
    search_short, search_notes = Counter(), []  # type: Counter, List[str]
    for name in sorted(need):
        short = len(ledger.queue.get(name, ()))  # pods' instances no new instance was found for
        if short > 0:
            search_short[name] += short
            search_notes.append("%d pending %s instance%s beyond what the pool's GPUs can hold" % (
                short, name, "" if short == 1 else "s"))
    if check and (kept or multi[0] and (search_short or apart)):
        late = _behind(gpus, singles, demand, multi[0], yielded, set(search_short) | set(apart), kept)
        if late:
            return None, late
    retry = bool(search_short) and _room_for(gpus, pending, bounds)
    whole_short = _serve_whole(singles, whole)
    all_served = False
    if not multi[0] and not joint and any(pending[n] for n in pending if n != WHOLE_GPU) and (
            retry or not (unserved or search_short or whole_short)):
        # (the pods the search planned for: those asking several on one node it could not serve are not the
        # exact form's, and must not be credited with what it makes)
        served, all_served = _exact(gpus, before, singles, pending, bounds, served,
                                    short=bool(unserved or search_short or whole_short))
    if not all_served:  # the search's shortfall stands
        unserved.update(search_short)
        notes.extend(search_notes)
    if whole_short:
        unserved[WHOLE_GPU] += whole_short
        notes.append("%d pending whole-GPU request%s beyond the pool's free GPUs with MIG off, each pod's on one "
                     "node (the planner never turns MIG off)" % (whole_short, "" if whole_short == 1 else "s"))
    unchecked, waiting, left_out = _prune(gpus, demand, bounds, served, first=multi[0])
    for d in left_out:  # a pod asking several that waits once the pods bind: one new node must hold it
        if d.count > 1:
            floor[d.profile] = max(floor.get(d.profile, 0), int(d.count))
    if unchecked:
        notes.append("%d change%s %s" % (unchecked, "" if unchecked == 1 else "s", UNCHECKED))
    for name, n in sorted(waiting.items()):  # what still waits once the pods bind, where the search saw less
        # (the binding check leaves out the pods asking several profiles: their shortfall comes on top)
        seen = unserved[name] - joint_short.get(name, 0)
        if n > seen:
            notes.append("%d pending %s instance%s left waiting once the pods bind (a pod asking several needs "
                         "them on one node)" % (n - seen, name, "" if n - seen == 1 else "s"))
            unserved[name] += n - seen

    targets, reasons = [], []
    readable = {g.sort_key: g for g in gpus}
    for s in sorted({(s.node, s.index): s for s in reversed(supply)}.values(), key=lambda g: (g.node, g.index)):
        gpu = readable.get((s.node, s.index))
        if gpu is None:
            targets.append(GpuTarget(s.node, s.index, tuple(sorted(((i.profile, i.start) for i in s.instances),
                                                                   key=lambda x: x[1])), CHANGE_NONE, ""))
            continue
        target = _target(gpu, served.get(gpu.sort_key, []), unplaced)
        targets.append(target)
        if target.reason:
            reasons.append(target.reason)
    for_node = unserved - no_new_node  # (a pod no new node holds has its own line above)
    new_node, shape = _new_node(for_node, bounds, supply, floor)
    in_shape = {name for layout, _ in shape for name, _ in layout}
    for name, n in sorted(for_node.items()):  # what the new node leaves out says so, not only an empty shape
        if shape and n > 0 and name != WHOLE_GPU and name not in in_shape:
            notes.append("%d pending %s instance%s not in the new node's layout: its GPU model has no such "
                         "profile, or one node cannot hold it beside the others (a later round)"
                         % (n, name, "" if n == 1 else "s"))
    if not shape and any(n > 0 for name, n in for_node.items() if name != WHOLE_GPU):
        notes.append("no new node's layout can be named for what is unserved: neither a GPU of the pool nor its "
                     "instance type has a model the catalogue knows with those profiles")
    return Plan(tuple(targets), tuple(sorted(unserved.items())), new_node,
                tuple(reasons + [_one_line(n) for n in notes]), tuple(_one_line(u) for u in unplaced),
                tuple((key, _one_line(why)) for key, why in not_counted), shape,
                tuple(sorted(no_new_node.items()))), frozenset()


def _behind(gpus: List[_Gpu], singles: Sequence[PodDemand], demand: Sequence[PodDemand], handled: set,
            yielded: FrozenSet[str], short: set, kept: Mapping[str, tuple]) -> FrozenSet[str]:
    """The pods asking several instances of a profile the plan leaves other pods ``short`` of, that the plan
    gives instances (``handled``, _serve_multi) and that are left unbound once the waiting pods bind in pod
    order (``exact.after_binding``, the project's model of the scheduler; the needless-change check binds
    them first, onto what was kept for them): the pods ahead of them, served by the plan or not, take what was
    made or kept for them first, and they wait beside instances that serve nothing. (Where the pool is short
    of nothing they ask, the pods ahead of them took room the pool has more of: the next tick makes it.)
    The pods asking several profiles that keep idle instances (``kept``, _serve_joint) bind in pod order
    too, and those left unbound are returned whatever the pool is short of: a pod ahead of one took an
    instance kept for it, so what was kept served nothing while the plan made more for the others (the
    next tick destroyed that for the pods still waiting). Pods asking whole GPUs beside instances keep
    theirs as before (the model binds no whole GPU)."""
    waiting = [d for d in singles if d.pending and d.profile != WHOLE_GPU and d.count > 0] + [
        d for d in demand if d.pending and d.count > 1 and d.profile != WHOLE_GPU and d.key not in yielded]
    pods = sorted([(d.key, d.profile, int(d.count), d) for d in waiting] +
                  [(key, asks, 1, key) for key, (asks, _) in kept.items()], key=lambda x: x[0])
    free = {id(i) for _, insts in kept.values() for i in insts}
    views = [(g.supply.node, [(i.profile.name, i.profile.compute_slices,
                               i.in_use or (i.reserved == _JOINT and id(i) not in free), i.origin == _NEW)
                              for i in g.state]) for g in gpus]
    left_out = after_binding(views, [x[1:] for x in pods], {})[4]
    return frozenset(d for d in left_out if isinstance(d, str)) | frozenset(
        d.key for d in left_out if not isinstance(d, str) and d.key in handled and d.profile in short)


MAX_NODE_GPUS = 16  # the most GPUs a node reports (functions/kube/supply.py reads nvidia_count up to 16)


def countable(supply: Sequence[GpuSupply], demand: Sequence[PodDemand], bounds: Bounds
               ) -> Tuple[List[PodDemand], List[Tuple[str, str]]]:
    """The demand less the waiting pods that no node of the pool, nor a new one, can hold: a profile the
    pool does not allow or its GPUs lack, more instances (or compute, or memory) than one node holds, more
    whole GPUs than a node has. Those are "not counted" (pod key, one line why): never planned for, never
    unserved (no new node is asked for them), so they change nothing and never turn the exact solve off.
    A node is every GPU the supply lists for it, whatever its state; a new node brings ``bounds.model``
    (else the pool's models) on as many GPUs as the largest node. Counts are capped at MAX_COUNT first, so
    nothing is ever expanded as a pod wrote it. With no GPU of a known model, nothing is judged."""
    capped = [d if d.count <= MAX_COUNT else dataclasses.replace(d, count=MAX_COUNT) for d in demand]
    shapes = OrderedDict()  # type: Dict[str, List[GpuModel]]
    known = {}  # type: Dict[str, Optional[GpuModel]]
    for s in sorted(supply, key=lambda g: (g.node, g.index)):
        if s.model not in known:
            known[s.model] = find_gpu_or_none(name=s.model)
        model = known[s.model]
        if model is not None:
            shapes.setdefault(s.node, []).append(model)
    template = find_gpu_or_none(name=bounds.model) if bounds.model else None
    nodes = list(shapes.values())
    if template is not None:
        nodes.append([template] * (bounds.node_gpus or max([len(n) for n in nodes] or [MAX_NODE_GPUS])))
    if not nodes:
        return capped, []
    asks = OrderedDict()  # type: Dict[str, Dict[str, int]]
    # in pod order, whatever the caller's: an idle instance of a profile the pool no longer allows goes to the
    # first pod that asks it (below), and the timer's plan and a pod event's choice must agree on which one
    for d in sorted(capped, key=lambda d: d.key):
        if d.pending and d.count > 0:
            mine = asks.setdefault(d.key, {})
            mine[d.profile] = min(mine.get(d.profile, 0) + d.count, MAX_COUNT)
    out = []  # type: List[Tuple[str, str]]
    models = {m.key: m for n in nodes for m in n}
    shapes_seen = {tuple(m.key for m in n): n for n in nodes}  # nodes alike answer alike
    verdicts = {}  # type: Dict[Tuple[Tuple[str, int], ...], str]
    # Idle instances of a profile the pool no longer allows (the label changed) still serve the pods that ask
    # it: such a pod stays counted while one is left for it, so that instance is not taken as spare and
    # destroyed for another pod (the plan creates none of the profile; what is short of it is said).
    # Per node: a pod asking several needs them on one node.
    spare = {}  # type: Dict[str, Counter]
    for s in supply:
        for i in s.instances:
            if not i.in_use and not bounds.allows(i.profile):
                spare.setdefault(s.node, Counter())[i.profile] += 1
    for key, wanted in asks.items():
        asked = tuple(sorted(wanted.items()))
        if asked not in verdicts:  # the replicas of one Deployment ask alike
            verdicts[asked] = _why_no_node(wanted, list(shapes_seen.values()), models, bounds)
        if verdicts[asked]:
            # every profile it asks that the pool no longer allows idle on one node (a pod asking several
            # profiles binds to them as one asking one does), and the pod counted were they allowed
            old = {name: k for name, k in wanted.items() if name != WHOLE_GPU and not bounds.allows(name)}
            node = next((n for n in sorted(spare) if all(spare[n][name] >= k for name, k in old.items())),
                        None) if old else None
            if node is not None and verdicts[asked].endswith(
                    "not among the profiles the pool allows (ack-mig-hook/layout-profiles)") and not _why_no_node(
                    wanted, list(shapes_seen.values()), models,
                    dataclasses.replace(bounds, profiles=bounds.profiles | frozenset(old))):
                for name, k in old.items():
                    spare[node][name] -= k
                continue
            out.append((key, verdicts[asked]))
    dropped = {key for key, _ in out}
    return [d for d in capped if not (d.pending and d.key in dropped)], out


def _why_no_node(wanted: Dict[str, int], nodes: List[List[GpuModel]], models: Dict[str, GpuModel],
                 bounds: Bounds) -> str:
    """Empty when one of ``nodes`` (each a list of its GPUs' models; ``models`` all of them by key) can hold
    all the pod asks; else why not."""
    for name in sorted(wanted):
        if name == WHOLE_GPU:
            continue
        if not bounds.allows(name):
            return "asks %s, not among the profiles the pool allows (ack-mig-hook/layout-profiles)" % name
        if not any(m.profile_by_name(name) for m in models.values()):
            return "asks %s, which no GPU of the pool has (%s)" % (name, ", ".join(sorted(models)))
    if any(_holds(node, wanted) for node in nodes):
        return ""
    # a count at the cap stands for any larger one (matching.MAX_COUNT): said so, not as the cap
    what = " + ".join("%sx %s" % (n if n < MAX_COUNT else "over %d" % (MAX_COUNT - 1), name)
                      for name, n in sorted(wanted.items()))
    most = max(len(n) for n in nodes)
    if len(wanted) == 1 and WHOLE_GPU not in wanted:
        (name, _), = wanted.items()
        room = max(sum(p.max_instances for p in (m.profile_by_name(name) for m in n) if p) for n in nodes)
        return "asks %s, more than a node of the pool holds (at most %d on %d GPUs)" % (what, room, most)
    return "asks %s, more than a node of the pool holds (%d GPUs at most)" % (what, most)


def _holds(node: List[GpuModel], wanted: Dict[str, int]) -> bool:
    """Whether one node with these GPUs could hold every instance the pod asks for (counts, compute and
    memory slices: what no layout of the node can go beyond; a pod that passes may still need more than
    the node's GPUs can be partitioned into together, and is then planned like the rest)."""
    whole = wanted.get(WHOLE_GPU, 0)
    if whole > len(node):
        return False
    gpus = node[:len(node) - whole]  # whole GPUs are GPUs with MIG off: the rest carry the instances
    compute = memory = 0
    for name, n in wanted.items():
        if name == WHOLE_GPU:
            continue
        profiles = [p for p in (m.profile_by_name(name) for m in gpus) if p]
        if not profiles or n > sum(p.max_instances for p in profiles):
            return False
        compute += n * profiles[0].compute_slices
        memory += n * profiles[0].memory_slices
    return compute <= sum(m.compute_slices for m in gpus) and memory <= sum(m.memory_slots for m in gpus)


PRUNE_BINDINGS = 256  # pools bound again at most, per plan, to check changes counting cannot show needed
PRUNE_WORK = 2_000_000  # and at most this much binding work (GPUs + pods x nodes they scan) in all
# The note on changes the check did not reach: about the changes, where every other note is about the pods
# short, so compose.py carries it from the round that made them.
UNCHECKED = "kept unchecked: the check that every change serves a pod ran out of its budget"


def _prune(gpus: List[_Gpu], demand: Sequence[PodDemand], bounds: Bounds, served, first=frozenset()) -> int:
    """Leave out every change that serves nothing: a GPU's change stays only when, without it (the GPU as
    it is, the rest of the plan as planned), a waiting pod or a headroom instance of some profile would go
    unserved or more GPUs would hold pods once the pods bind (``exact.after_binding``, the project's model
    of the scheduler). Changes are dropped one at a time until each one left is needed in that sense, so
    for the plan returned, dropping any one GPU's change leaves a pod unserved or costs a GPU.

    Most changes are shown needed by counting alone: without them a profile is short of more instances
    than it is short once the pods bind. The others are checked by binding the pool again, those no pod
    binds to first, at most PRUNE_BINDINGS times and PRUNE_WORK in all (a pool of 1,000 GPUs and 2,000
    waiting pods that ask several instances each: a few bindings); a change the budget does not reach is
    kept. Returns how many changes were left unchecked (0 on every pool the tests and benchmarks plan),
    per profile, the waiting pods' instances left unbound once the pods bind on the plan's pool (the plan
    reports at least those unserved), and those pods. A target still being applied (carried) is left to
    finish. ``first``: the pods asking several instances that the plan reserved instances for (_serve_multi):
    they bind first, onto what was reserved; bound after a pod asking one, they lost an idle instance to it,
    their change was dropped as serving nothing, and the GPU it freed stayed empty while a pod it fits waited."""
    pods = [(d.profile, int(d.count), d) for d in sorted(demand, key=lambda d: (d.key not in first, d.key))
            if d.pending and d.profile != WHOLE_GPU and d.count > 0]
    headroom = {n: k for n, k in bounds.headroom if k > 0}

    def layout(state: Sequence[_Inst]) -> set:
        return {(i.profile.name, i.start) for i in state}

    changed = [g for g in gpus if not g.carried and layout(g.state) != layout(g.actual)]
    if not pods and not changed:
        return 0, Counter(), []

    def view(g: _Gpu, state: Sequence[_Inst]):  # an instance kept for a pod asking several profiles is taken
        return g.supply.node, [(i.profile.name, i.profile.compute_slices, i.in_use or i.reserved == _JOINT,
                                i.origin == _NEW) for i in state]

    def idle_of(state: Sequence[_Inst]) -> Counter:
        return Counter(i.profile.name for i in state if not i.in_use and i.reserved != _JOINT)

    views = [view(g, g.state) for g in gpus]
    where = {g.sort_key: k for k, g in enumerate(gpus)}
    wanted = Counter()  # type: Counter
    for name, count, _ in pods:
        wanted[name] += count
    for name, k in headroom.items():
        wanted[name] += k
    idle = Counter()  # type: Counter
    for g in gpus:
        idle.update(idle_of(g.state))
    nodes = len({g.supply.node for g in gpus})
    work = len(gpus) + sum(nodes if count > 1 else 1 for _, count, _ in pods)
    budget = min(PRUNE_BINDINGS, PRUNE_WORK // max(1, work))
    short, holding, bound_new, unbound, left_out = after_binding(views, pods, headroom)
    unchecked, dropping = set(), bool(changed)  # type: set, bool
    while dropping:
        dropping = False
        unchecked.clear()
        # those no pod binds to first: the likeliest to serve nothing
        for g in sorted(changed, key=lambda g: (bool(bound_new[where[g.sort_key]]), g.sort_key)):
            if layout(g.state) == layout(g.actual):
                continue
            now, then = idle_of(g.state), idle_of(g.actual)
            if any(wanted[n] - (idle[n] - now[n] + then[n]) > short[n] for n in set(now) | set(then)):
                continue  # without it a profile is short of more than it is now, once bound: needed
            if budget <= 0:
                unchecked.add(g.sort_key)
                continue
            budget -= 1
            trial = list(views)
            trial[where[g.sort_key]] = view(g, g.actual)
            less, fewer, bound, left, out = after_binding(trial, pods, headroom)
            if fewer <= holding and all(less[n] <= short[n] for n in set(less) | set(short)):
                g.state = list(g.actual)
                served.pop(g.sort_key, None)
                views, idle = trial, idle - now + then
                short, holding, bound_new, unbound, left_out, dropping = less, fewer, bound, left, out, True
    was_changed = {g.sort_key for g in changed}
    for k, g in enumerate(gpus):  # a change kept for pods the search or the solve credited elsewhere
        if g.sort_key in was_changed and layout(g.state) != layout(g.actual) \
                and not _credited(served.get(g.sort_key)):
            mine = Counter()  # type: Counter
            for name, pod in bound_new[k]:
                mine[(name, pod)] += 1
            served[g.sort_key] = [(name, [pod] * n, 0) for (name, pod), n in mine.items()] or [("", [], 0)]
    return len(unchecked), unbound, left_out


def _credited(entries) -> bool:
    return bool(entries) and any(pods or extra for _, pods, extra in entries)


def _room_for(gpus: List[_Gpu], pending: Counter, bounds: Bounds) -> bool:
    """Whether the pool's GPUs have the compute slices the waiting pods and the headroom ask (the exact form
    must hold both), beside what pods hold: a quick bound, so the exact form is not asked to prove a full pool
    full (a scale-out's every step)."""
    free = sum(g.model.compute_slices - g.compute_in_use for g in gpus)
    asked = 0
    wanted = Counter({n: k for n, k in pending.items() if k > 0})
    for name, k in bounds.headroom:
        if k > 0:
            wanted[name] += k
    for name, n in wanted.items():
        if name == WHOLE_GPU or n <= 0:
            continue
        profile = next((g.model.profile_by_name(name) for g in gpus if g.model.profile_by_name(name)), None)
        if profile is None:
            return False
        asked += profile.compute_slices * n
    return asked <= free


def _exact(gpus: List[_Gpu], before: Dict[Tuple[str, int], List[_Inst]], demand: Sequence[PodDemand],
           pending: Counter, bounds: Bounds, served, short: bool = False):
    """The step solved exactly (exact.py) where it is small enough and HiGHS is there: when its answer
    leaves fewer GPUs holding pods than the search's (both bound as a bin-packing scheduler binds), or
    serves every pod where the search left some ``short``, the GPUs take its states and ``served`` its pods;
    else everything stays as the search left it. Returns (served, whether the exact answer was taken: it
    serves every waiting pod)."""
    if len(gpus) > EXACT_GPUS or not exact_available():
        return served, False
    waiting = [d.profile for d in sorted(demand, key=lambda d: d.key) if d.pending and d.profile != WHOLE_GPU
               for _ in range(max(int(d.count), 0))]
    steps = []
    for g in gpus:
        held = [i for i in before[g.sort_key] if i.held or i.origin == _NEW]  # in use, or a target in flight
        idle = [i for i in before[g.sort_key] if not (i.held or i.origin == _NEW)]
        steps.append((held, idle, Step(g.model, [(i.profile, i.start) for i in held],
                                                  [(i.profile, i.start) for i in idle], any(i.in_use for i in held))))
    allowed = sorted({p.name for g in gpus for p in g.model.profiles if bounds.allows(p.name)})
    answer = solve_exactly([st for _, _, st in steps], {n: k for n, k in sorted(pending.items()) if n != WHOLE_GPU},
                              dict(bounds.headroom), allowed)
    if answer is None:
        return served, False
    states = []
    for (held, idle, _), (kept, made, _) in zip(steps, answer):
        if any(i.origin == _KEPT for ii, i in enumerate(idle) if ii not in kept):
            return served, False  # it destroys an instance within its dwell (not a rule of the program): the search stands
        states.append(held + [idle[ii] for ii in kept] + [_Inst(p, st, False, _NEW) for p, st in made])

    def score(new_states) -> Tuple[int, int]:
        """(GPUs holding pods once the waiting pods bind, instances created or destroyed against now)."""
        bound = gpus_after_binding([[(i.profile.name, i.profile.compute_slices, i.in_use) for i in st]
                                    for st in new_states], waiting)
        return bound, sum(len({(i.profile.name, i.start) for i in st} ^ {(i.profile.name, i.start) for i in g.actual})
                          for g, st in zip(gpus, new_states))

    # Fewer GPUs wins; as many, less churn (so a plan applied and asked again with the same demand is left
    # as it is, where the search, which counts idle instances on GPUs without pods last, would move them).
    if not short and score(states) >= score([g.state for g in gpus]):
        return served, False
    ledger = _Ledger([d for d in demand if d.pending], Counter())
    out = {}  # type: Dict[Tuple[str, int], List[Tuple[str, List[PodDemand], int]]]
    for g, state, (_, made, pods) in zip(gpus, states, answer):
        g.state = state
        made_by = Counter(p.name for p, _ in made)
        for name in sorted(set(pods) | set(made_by)):
            mine, _ = ledger.take(name, pods.get(name, 0))
            out.setdefault(g.sort_key, []).append((name, mine, max(0, made_by[name] - len(mine))))
    return out, True


def _target(gpu: _Gpu, served, unplaced: List[str]) -> GpuTarget:
    s = gpu.supply
    layout = tuple(sorted(((i.profile.name, i.start) for i in gpu.state), key=lambda x: (x[1], x[0])))
    now = {(i.profile.name, i.start) for i in gpu.actual}
    create = tuple(sorted({x for x in layout} - now, key=lambda x: x[1]))
    destroy = tuple(sorted(now - set(layout), key=lambda x: x[1]))
    if not create and not destroy:
        return GpuTarget(s.node, s.index, layout, CHANGE_NONE, "")
    if not _placeable(gpu.model, [(gpu.model.profile_by_name(n), st) for n, st in layout]) or \
            any(i.in_use and (i.profile.name, i.start) not in set(layout) for i in gpu.actual):
        # Never expected (every step keeps these rules); one GPU's slip must not reach its node.
        unplaced.append("node %s GPU %d: the planned layout broke a rule and was dropped" % (s.node, s.index))
        return GpuTarget(s.node, s.index, tuple(sorted((n, st) for n, st in now)), CHANGE_NONE, "")
    change = CHANGE_REPARTITION if destroy else CHANGE_ADD
    if gpu.carried and not served:
        reason = gpu.carried
    else:
        before = _describe(gpu.actual, marks=True)
        new = [i for i in gpu.state if (i.profile.name, i.start) in set(create)]
        after = ("+ " + _describe(new, marks=False)) if change == CHANGE_ADD and gpu.actual else \
            _describe(gpu.state, marks=False)
        reason = _one_line("node %s GPU %d: %s -> %s for %s" % (s.node, s.index, before, after,
                                                               _served_text(served)))
    return GpuTarget(s.node, s.index, layout, change, reason, create, destroy)


def new_node_for(unserved: Sequence[Tuple[str, int]], bounds: Bounds, supply: Sequence[GpuSupply]
                 ) -> Tuple[Tuple[Tuple[str, int], ...], Tuple[Tuple[Tuple[Tuple[str, int], ...], int], ...]]:
    """``Plan.new_node`` and ``Plan.new_node_shape`` for ``unserved`` (profile, instances) pairs: what the
    dwell (dwell.py) advertises when what it holds back differs from the plan's own shortfall."""
    return _new_node(Counter(dict(unserved)), bounds, supply)


def _new_node(unserved: Counter, bounds: Bounds, supply: Sequence[GpuSupply],
              floor: Optional[Dict[str, int]] = None) -> Tuple[Tuple[Tuple[str, int], ...], Tuple[Tuple[Tuple[Tuple[str, int], ...], int], ...]]:
    """What a new node brings for the unserved instances: (the layout most of its GPUs get, the whole node as
    (per-GPU layout, GPUs) groups, most GPUs first). The node's GPU count is ``bounds.node_gpus``, else the
    largest node's, else one; its model ``bounds.model``, else the pool's most common one.

    The autoscaler adds copies of one template node until the pods that fit it are placed (one round), so the
    shape is chosen for the fewest copies that serve every unserved instance: the smallest k for which one
    node's GPUs hold ceil(unserved / k) of every profile. When no node's GPUs can hold every profile at once,
    the profiles with the fewest unserved instances are left out, one at a time: the most pods are served
    now, the rest by the next round's shape. GPUs the shape leaves free get the layout most GPUs get."""
    if not any(n > 0 for name, n in unserved.items() if name != WHOLE_GPU):
        return (), ()
    model = find_gpu_or_none(name=bounds.model) if bounds.model else None
    if model is None:
        names = Counter(s.model for s in supply if find_gpu_or_none(name=s.model) is not None)
        if not names:
            return (), ()
        model = find_gpu_or_none(name=sorted(names.items(), key=lambda x: (-x[1], x[0]))[0][0])
    wanted = sorted((n for n, c in unserved.items() if c > 0 and n != WHOLE_GPU and bounds.allows(n)
                     and model.profile_by_name(n)), key=lambda n: (-unserved[n], n))
    size = bounds.node_gpus or max(Counter(s.node for s in supply).values() or [1])
    size = max(1, min(size, MAX_NODE_GPUS))
    while wanted:
        layouts = _node_shape(model, {n: unserved[n] for n in wanted}, size, floor or {})
        if layouts is not None:
            groups = OrderedDict()  # type: Dict[Tuple[Tuple[str, int], ...], int]
            for layout in layouts:
                groups[layout] = groups.get(layout, 0) + 1
            shape = tuple(sorted(groups.items(), key=lambda x: -x[1]))  # stable: the first chosen first among equals
            return shape[0][0], shape
        wanted = wanted[:-1]  # the profile with the fewest unserved instances waits for the next round
    return (), ()


def _node_shape(model: GpuModel, counts: Dict[str, int], size: int, floor: Mapping[str, int]
                ) -> Optional[List[Tuple[Tuple[str, int], ...]]]:
    """``size`` per-GPU layouts (one node) such that the fewest copies of the node hold ``counts``, each copy
    at least ``floor`` of a profile (the most one waiting pod asks: the scheduler puts a pod on one node, and
    the autoscaler adds a node only for a pod its template holds); None when one node cannot hold one
    instance of every profile and the floors."""
    compute = sum(c * model.profile_by_name(n).compute_slices for n, c in counts.items())
    lo, hi = max(1, -(-compute // (size * model.compute_slices))), max(counts.values())
    if _node_fill(model, counts, size, hi, floor) is None:
        return None
    while lo < hi:  # the smallest k that fills (the greedy fill holds for any larger k too, near enough)
        mid = (lo + hi) // 2
        if _node_fill(model, counts, size, mid, floor) is None:
            lo = mid + 1
        else:
            hi = mid
    return _node_fill(model, counts, size, hi, floor)


def _node_fill(model: GpuModel, counts: Dict[str, int], size: int, k: int, floor: Mapping[str, int] = {}
               ) -> Optional[List[Tuple[Tuple[str, int], ...]]]:
    """One node's GPU layouts holding ceil(count / k) of every profile, GPU by GPU the layout that serves the
    most compute of what is left (``_choose``), each GPU's free slots then filled with more of the unserved
    profiles (a new node's spare instances serve the next pods at once); None when ``size`` GPUs do not."""
    need = {n: min(c, max(-(-c // k), floor.get(n, 0))) for n, c in counts.items()}
    full = (1 << model.memory_slots) - 1
    layouts = []  # type: List[Tuple[Tuple[str, int], ...]]
    while any(v > 0 for v in need.values()):
        if len(layouts) >= size:
            return None
        wanted = tuple(sorted(n for n, v in need.items() if v > 0))
        placement = _choose(model.key, full, (), wanted, tuple(min(need[n], 16) for n in wanted))
        if not placement:
            return None
        used = 0
        for name, start in placement:
            used |= _mask(start, model.profile_by_name(name).memory_slices)
            need[name] -= 1
        every = tuple(sorted(counts))
        more = _choose(model.key, full & ~used, tuple(sorted(Counter(n for n, _ in placement).items())), every,
                       tuple(16 for _ in every)) if full & ~used else ()
        layouts.append(tuple(sorted(placement + more, key=lambda x: (x[1], x[0]))))
    most = Counter(layouts).most_common(1)[0][0]
    return layouts + [most] * (size - len(layouts))

