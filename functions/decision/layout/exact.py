"""The exact form of one planning step, for pools small enough to solve it (an integer program, HiGHS).

The planner's greedy search (``planner.py``) serves the waiting pods GPU by GPU; on small pools it can use
one or two GPUs more than needed (bench/demand.py measures it against this same problem's optimum). This
module states the step as an integer program and solves it exactly when HiGHS (``highspy``) is installed,
the pool is small and the solver proves optimality within its time limit; the planner keeps whichever of
the two answers leaves fewer GPUs holding pods (ties: its own, the one with reasons it already wrote).

Pure: no I/O, no clock (HiGHS' time limit aside, which can only make it give up: the planner's own answer
then stands). The program is a pattern (cutting-stock) model, not one variable per GPU and placement:

* what one GPU may become is enumerated once per GPU state (``options``, cached): every layout reachable
  from it (instances in use, reserved or created by a target still being applied stay; each idle instance
  stays or goes; instances of the allowed profiles that are asked for are added in free memory slots; the
  catalogue's placements and ``solver.check_budget``'s counting rules, media engines included), reduced
  to the options no other beats: free instances per profile asked for, instances created or destroyed,
  whether it keeps an idle instance a waiting pod could bind to;
* GPUs in the same state (model, instances, in use or not) are one class: integer variables count how many
  of its GPUs take each option, with pods or (a GPU that holds none now, keeping no idle instance a waiting
  pod could bind to) without; identical GPUs are never told apart, which is what made the per-GPU form slow
  (1 to 17 s on 72-GPU pools with a dozen idle GPUs), and the relaxation of a pattern model is tight;
* per class and profile, the waiting pods it takes, at most the free instances of its options with pods;
  every waiting pod goes somewhere, and each profile has at least its waiting pods plus its headroom in
  free instances over the pool;
* lexicographic, in two solves: the fewest GPUs holding no pod now that take one, then, with that many, the
  fewest instances created or destroyed (from the first solve's answer). GPUs that hold nothing beyond as
  many as pods wait are left out (never needed).
"""

import functools
import heapq
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from node_bootstrap.mig.catalogue import GpuModel, Profile
from node_bootstrap.mig.solver import check_budget

EXACT_GPUS = 96  # usable GPUs at most (a 32-GPU pool with its spares); above, the planner's search alone
EXACT_PODS = 128  # waiting instances at most
TIME_LIMIT_S = 1.0  # both solves together

Placed = Tuple[Profile, int]


class Step:
    """One GPU as the program sees it: what must stay, what may go, whether it holds a pod now."""

    def __init__(self, model: GpuModel, fixed: Sequence[Placed], idle: Sequence[Placed], used: bool):
        self.model, self.fixed, self.idle, self.used = model, list(fixed), list(idle), used


def available() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


Option = Tuple[Tuple[Tuple[str, int], ...], int, bool, Tuple[int, ...], Tuple[Placed, ...]]


@functools.lru_cache(maxsize=512)
def options(model: GpuModel, fixed: Tuple[Placed, ...], idle: Tuple[Placed, ...], names: Tuple[str, ...],
            creatable: Tuple[str, ...], wanted: Tuple[str, ...]) -> Tuple[Option, ...]:
    """What one GPU may become: per layout reachable from its state (``fixed`` stays, each ``idle`` instance
    stays or goes, instances of ``creatable`` profiles are added in free memory slots; the counting rules,
    media engines included, from ``check_budget``), the options no other beats: (instances per profile of
    ``names``, instances created or destroyed, whether it keeps an idle instance of a ``wanted`` profile,
    the idle indices kept, the instances created). An option beats another when it has at least as many
    instances of each profile of ``names``, changes no more, and keeps no wanted idle instance where the
    other keeps none. Cached: pools repeat the same few GPU states."""
    profiles = [p for p in (model.profile_by_name(n) for n in creatable) if p is not None]
    taken = 0
    for p, start in fixed:
        taken |= ((1 << p.memory_slices) - 1) << start
    starts = {}  # type: Dict[int, List[Tuple[object, Placed, int]]]
    for ii, (p, start) in enumerate(idle):
        starts.setdefault(start, []).append((ii, (p, start), ((1 << p.memory_slices) - 1) << start))
    for p in profiles:
        for pl in p.placements:
            bits = ((1 << pl.size) - 1) << pl.start
            if not taken & bits:
                starts.setdefault(pl.start, []).append((None, (p, pl.start), bits))
    base = [p for p, _ in fixed]
    best = {}  # type: Dict[Tuple[Tuple[Tuple[str, int], ...], bool], Tuple[int, Tuple[int, ...], Tuple[Placed, ...]]]
    verdicts = {}  # type: Dict[Tuple[str, ...], bool]  # check_budget per multiset: many layouts share one

    def visit(slot: int, used: int, compute: int, kept: List[int], made: List[Placed]) -> None:
        if slot == model.memory_slots:
            free = [idle[ii][0] for ii in kept] + [p for p, _ in made]  # fixed ones are not free
            together = tuple(sorted(p.name for p in base + free))
            if together not in verdicts:
                verdicts[together] = check_budget(model, base + free) is None
            if not verdicts[together]:
                return
            counts = Counter(p.name for p in free if p.name in names)
            key = (tuple(sorted(counts.items())), any(idle[ii][0].name in wanted for ii in kept))
            cost = len(idle) - len(kept) + len(made)
            if key not in best or cost < best[key][0]:
                best[key] = (cost, tuple(kept), tuple(made))
            return
        visit(slot + 1, used, compute, kept, made)
        for ii, placed, bits in starts.get(slot, ()):
            more = compute + placed[0].compute_slices
            if used & bits or more > model.compute_slices:  # check_budget would refuse it anyway
                continue
            if ii is None:
                visit(slot + 1, used | bits, more, kept, made + [placed])
            else:
                visit(slot + 1, used | bits, more, kept + [ii], made)

    visit(0, taken, sum(p.compute_slices for p in base), [], [])
    found = [(counts, cost, forced, kept, made) for (counts, forced), (cost, kept, made) in best.items()]
    vectors = [tuple(dict(o[0]).get(n, 0) for n in names) for o in found]

    def beaten(i: int) -> bool:
        _, cost, forced, _, _ = found[i]
        mine = vectors[i]
        return any(j != i and found[j][1] <= cost and found[j][2] <= forced
                   and all(x >= y for x, y in zip(vectors[j], mine)) for j in range(len(found)))

    return tuple(sorted(o for i, o in enumerate(found) if not beaten(i)))


def solve(gpus: Sequence[Step], pending: Dict[str, int], headroom: Dict[str, int], allowed: Sequence[str],
          time_limit: float = TIME_LIMIT_S, stats: Optional[Dict[str, Any]] = None
          ) -> Optional[List[Tuple[List[int], List[Placed], Dict[str, int]]]]:
    """Per GPU (in order): the indices of its idle instances kept, the instances created, and the waiting
    pods it takes per profile. None when the program is not solved to proven optimality (or is too big,
    or infeasible): the caller keeps its own plan. ``stats``, when given, gets the solver's status name,
    its own time and the objective (``status``, ``solve_s``, ``objective``)."""
    wanted = {n: k for n, k in pending.items() if k > 0}
    if not wanted or len(gpus) > EXACT_GPUS or sum(wanted.values()) > EXACT_PODS:
        return _none(stats, "not tried")
    import highspy

    names = tuple(sorted(set(wanted) | {n for n, k in headroom.items() if k > 0}))
    creatable = tuple(n for n in names if n in allowed)
    # GPUs in the same state are interchangeable (the same model, instances and use): one class each, whose
    # variables count how many of its GPUs take each option, so the solver never tells them apart. GPUs
    # that hold nothing beyond as many as pods wait are left out (never needed).
    classes = {}  # type: Dict[tuple, List[int]]
    empty_seen = 0
    for index, g in enumerate(gpus):
        if not g.used and not g.fixed and not g.idle:
            if empty_seen >= sum(wanted.values()):
                continue
            empty_seen += 1
        key = (g.model, tuple(g.fixed), tuple(g.idle), g.used)
        classes.setdefault(key, []).append(index)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 0.0)
    integral = highspy.HighsVarType.kInteger
    have = {n: [] for n in names}  # type: Dict[str, list]
    pods_of = {n: [] for n in wanted}  # type: Dict[str, list]
    counted, churn = [], []  # GPUs that count (hold no pod now, take one); instances created or destroyed
    chosen = []  # per class: its GPUs, its options, per option the variables (with pods, without)
    for (model, fixed, idle, used), members in classes.items():
        opts = options(model, fixed, idle, names, creatable, tuple(sorted(wanted)))
        n = len(members)
        per_option = []
        for counts, changes, forced, _, _ in opts:
            # a GPU that holds no pod now counts once it takes one, or keeps an idle instance a waiting pod
            # could bind to (the scheduler may bind there whatever the program intends)
            z = h.addVariable(lb=0, ub=n, type=integral)
            w = None if used or forced else h.addVariable(lb=0, ub=n, type=integral)
            if not used:
                counted.append(z)
            churn.append(changes * z)
            if w is not None:
                churn.append(changes * w)
            for name, k in counts:
                have[name].append(k * z)
                if w is not None:
                    have[name].append(k * w)
            per_option.append((z, w))
        h.addConstr(sum(z for z, _ in per_option) + sum(w for _, w in per_option if w is not None) == n)
        for name in wanted:
            room = [k * z for (counts, _, _, _, _), (z, _) in zip(opts, per_option) for nm, k in counts if nm == name]
            if room:
                u = h.addVariable(lb=0, ub=wanted[name], type=integral)
                h.addConstr(u - sum(room) <= 0)
                pods_of[name].append(u)
                per_option.append(("pods", name, u))
        chosen.append((members, opts, per_option))
    for name in names:
        need = wanted.get(name, 0) + max(0, headroom.get(name, 0))
        if need and not have[name]:
            return _none(stats, "infeasible")
        if need:
            h.addConstr(sum(have[name]) >= need)
    for name, k in wanted.items():
        if not pods_of[name]:
            return _none(stats, "infeasible")
        h.addConstr(sum(pods_of[name]) == k)
    # Lexicographic, in two solves: the fewest GPUs that count first (an objective of whole GPUs, so its
    # relaxation's bound rounds up to the next GPU: proven at once where one weighted objective made the
    # solver branch for it), then, with that many at most, the fewest instances created or destroyed,
    # starting from the first answer.
    h.minimize(sum(counted) if counted else 0 * churn[0])
    status = h.getModelStatus()
    first_s = h.getRunTime()
    if status == highspy.HighsModelStatus.kOptimal:
        fewest = int(round(h.getInfo().objective_function_value))
        start = h.getSolution()
        if counted:
            h.addConstr(sum(counted) <= fewest)
        h.setOptionValue("time_limit", max(0.0, float(time_limit) - first_s))
        h.setSolution(start)
        h.minimize(sum(churn) if churn else 0 * churn[0])
        status = h.getModelStatus()
    if stats is not None:
        stats["status"] = h.modelStatusToString(status)
        stats["solve_s"] = h.getRunTime()
        stats["first_s"] = first_s
    if status != highspy.HighsModelStatus.kOptimal:
        return None
    value = h.getSolution().col_value
    count_of = lambda v: int(round(value[v.index]))  # noqa: E731
    out = [(list(range(len(g.idle))), [], {}) for g in gpus]  # type: List[Tuple[List[int], List[Placed], Dict[str, int]]]
    for members, opts, per_option in chosen:
        picks = []  # (option, takes pods) per GPU of the class, in the class's order
        for o, (z, w) in zip(opts, per_option):
            picks += [(o, True)] * count_of(z) + [(o, False)] * (count_of(w) if w is not None else 0)
        left = {name: count_of(u) for tag, name, u in per_option[len(opts):]}
        room = [Counter(dict(o[0])) if takes else Counter() for o, takes in picks]
        given = [Counter() for _ in picks]  # type: List[Counter]
        # the pods of the GPUs that take some: one each first (each of them counts for a pod), then the rest
        for first in (True, False):
            for free, mine in zip(room, given):
                for name in sorted(free):
                    while left.get(name, 0) > 0 and mine[name] < free[name] and not (first and mine):
                        mine[name] += 1
                        left[name] -= 1
        for gi, (o, _), mine in zip(members, picks, given):
            out[gi] = (list(o[3]), list(o[4]), dict(mine))
    return out


def _none(stats: Optional[Dict[str, Any]], status: str) -> None:
    if stats is not None:
        stats["status"] = status
    return None


def gpus_after_binding(states: Sequence[Sequence[Tuple[str, int, bool]]], pending: Sequence[str]) -> int:
    """GPUs holding a pod once the waiting pods (their profiles, in pod order) bind as a bin-packing
    scheduler binds them (:func:`after_binding`). ``states``: per GPU, its instances as (profile, compute
    slices, in use). Both answers are scored by it, so the planner keeps the one that leaves fewer GPUs in
    use."""
    return after_binding([(str(gi), [(p, c, busy, False) for p, c, busy in s]) for gi, s in enumerate(states)],
                         [(name, 1, None) for name in pending], {})[1]


def after_binding(gpus: Sequence[Tuple[str, Sequence[Tuple[str, int, bool, bool]]]],
                  pods: Sequence[Tuple[str, int, Any]], headroom: Mapping[str, int]
                  ) -> Tuple[Counter, int, List[List[Tuple[str, Any]]], Counter, List[Any]]:
    """The pool once the waiting pods bind, as the project models the scheduler (bench/demand.py too): in
    pod order, a pod asking one instance takes an idle one of its profile on the GPU with the most compute
    in use, counting the pods bound before it (kube-scheduler's MostAllocated scoring; ties: the first
    GPU); a pod asking several takes them on one node (the node with the most compute in use that has
    enough; ties: the first), from its GPUs with the most compute in use first. Within a GPU, instances
    that exist are taken before ones the plan creates.

    A pod asking several profiles takes all of them on one node, the one with the most compute in use that
    has them all (ties: the first), each from its GPUs with the most compute in use first.

    ``gpus``: per GPU (its node, its instances as (profile, compute slices, in use, created by the plan));
    ``pods``: (profile, count, tag) in pod order, where a pod asking several profiles gives, for profile, a
    tuple of (profile, count) (and a count it does not read); ``headroom``: idle instances wanted per profile
    after.
    Returns (per profile: the instances of waiting pods left unbound plus the headroom missing; the GPUs
    holding a pod; per GPU the (profile, tag) of each pod bound to an instance the plan creates; per
    profile the instances of waiting pods left unbound alone; the tags of the pods left unbound).
    Heaps keep it O(pods x log GPUs) for pods of one instance."""
    # plain dicts (a missing profile reads as 0 through .get): this runs for every GPU on every binding
    used, holding = [], []  # type: List[int], List[bool]
    idle, fresh = [], []  # type: List[Dict[str, int]], List[Dict[str, int]]
    size = {}  # type: Dict[str, int]
    nodes = {}  # type: Dict[str, List[int]]
    node_used, node_idle = {}, {}  # type: Dict[str, int], Dict[str, Dict[str, int]]
    heaps = {}  # type: Dict[str, List[Tuple[int, int]]]
    for gi, (node, inst) in enumerate(gpus):
        busy_compute, holds, free, made = 0, False, {}, {}  # type: int, bool, Dict[str, int], Dict[str, int]
        for p, c, busy, new in inst:
            size[p] = c
            if busy:
                busy_compute, holds = busy_compute + c, True
            else:
                free[p] = free.get(p, 0) + 1
                if new:
                    made[p] = made.get(p, 0) + 1
        used.append(busy_compute)
        holding.append(holds)
        idle.append(free)
        fresh.append(made)
        nodes.setdefault(node, []).append(gi)
        node_used[node] = node_used.get(node, 0) + busy_compute
        mine = node_idle.setdefault(node, {})
        for p, n in free.items():
            mine[p] = mine.get(p, 0) + n
        for p in free:
            heaps.setdefault(p, []).append((-busy_compute, gi))
    for heap in heaps.values():
        heapq.heapify(heap)
    bound_new = [[] for _ in gpus]  # type: List[List[Tuple[str, Any]]]
    short = Counter()  # type: Counter
    left_out = []  # type: List[Any]

    def take(gi: int, p: str, tag: Any) -> None:
        if idle[gi][p] <= fresh[gi].get(p, 0):  # only created ones are left on this GPU
            fresh[gi][p] -= 1
            bound_new[gi].append((p, tag))
        idle[gi][p] -= 1
        node = gpus[gi][0]
        node_idle[node][p] -= 1
        used[gi] += size[p]
        node_used[node] += size[p]
        holding[gi] = True
        for q, n in idle[gi].items():  # its place in every heap moves up: pushed again (stale ones skipped)
            if n > 0:
                heapq.heappush(heaps[q], (-used[gi], gi))

    for p, count, tag in pods:
        if isinstance(p, tuple):  # several profiles: all on one node or none
            best = None
            for node in nodes:
                if all(node_idle[node].get(q, 0) >= n for q, n in p) and (
                        best is None or node_used[node] > node_used[best]):
                    best = node
            if best is None:
                for q, n in p:
                    short[q] += n
                left_out.append(tag)
                continue
            for q, n in p:
                for gi in sorted(nodes[best], key=lambda g: (-used[g], g)):
                    while n and idle[gi].get(q, 0) > 0:
                        take(gi, q, tag)
                        n -= 1
            continue
        if count <= 0:
            continue
        if count == 1:
            heap = heaps.get(p) or []
            while heap and (idle[heap[0][1]].get(p, 0) <= 0 or -heap[0][0] != used[heap[0][1]]):
                heapq.heappop(heap)
            if heap:
                take(heap[0][1], p, tag)
            else:
                short[p] += 1
                left_out.append(tag)
            continue
        best = None
        for node, members in nodes.items():
            if node_idle[node].get(p, 0) >= count and (best is None or node_used[node] > node_used[best]):
                best = node
        if best is None:
            short[p] += count
            left_out.append(tag)
            continue
        left = count
        for gi in sorted(nodes[best], key=lambda g: (-used[g], g)):
            while left and idle[gi].get(p, 0) > 0:
                take(gi, p, tag)
                left -= 1
    unbound = Counter(short)
    for p, k in headroom.items():
        spare = sum(counts.get(p, 0) for counts in idle)
        if k > spare:
            short[p] += k - spare
    return short, sum(holding), bound_new, unbound, left_out
