"""The exact form of one planning step, for pools small enough to solve it (an integer program, HiGHS).

The planner's greedy search (``planner.py``) serves the waiting pods GPU by GPU; on small pools it can use
one or two GPUs more than needed (bench/demand.py measures it against this same problem's optimum). This
module states the step as an integer program and solves it exactly when HiGHS (``highspy``) is installed,
the pool is small and the solver proves optimality within its time limit; the planner keeps whichever of
the two answers leaves fewer GPUs holding pods (ties: its own, the one with reasons it already wrote).

Pure: no I/O, no clock (HiGHS' time limit aside, which can only make it give up: the planner's own answer
then stands). The program, per usable GPU ``g``:

* ``keep[g, i]``: an idle instance ``i`` stays (1) or is destroyed (0); instances in use, reserved or created
  by a target still being applied are fixed (they are not variables);
* ``x[g, p, s]``: a new instance of profile ``p`` at start ``s``, for the catalogue's placements that overlap
  nothing fixed;
* per memory slice at most one instance; compute slices and each profile's ``max_instances`` within the
  GPU's limits (``solver.check_budget`` confirms every GPU of an answer, media engines included);
* ``u[g, p]``: the waiting pods of ``p`` that go to ``g``, at most its kept and new instances of ``p``;
  every waiting pod goes somewhere, and each profile has at least its waiting pods plus its headroom in
  idle instances over the pool;
* ``y[g]``: ``g`` (holding no pod now) takes one. Minimize ``1000 * sum(y)`` plus one per instance created or
  destroyed (the fewest GPUs first, then the least churn). GPUs that hold nothing are interchangeable: only
  as many as pods wait are offered, their ``y`` ordered.
"""

import functools
import heapq
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from node_bootstrap.mig.catalogue import GpuModel, Profile
from node_bootstrap.mig.solver import check_budget

EXACT_GPUS = 96  # usable GPUs at most (a 32-GPU pool with its spares); above, the planner's search alone
EXACT_PODS = 128  # waiting instances at most
TIME_LIMIT_S = 1.0
GPU_WEIGHT = 1000

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


@functools.lru_cache(maxsize=64)
def patterns(model: GpuModel, names: Tuple[str, ...]) -> Tuple[Tuple[Tuple[Tuple[str, int], ...], Tuple[Placed, ...]], ...]:
    """Every non-empty multiset of ``names`` one empty GPU of ``model`` holds (counts, sorted by name), each
    with one placement of it: memory slots from the catalogue's placements, the counting rules (media
    engines included) from ``check_budget``. What an empty GPU may become, whatever its place in the pool."""
    profiles = [p for p in (model.profile_by_name(n) for n in names) if p is not None]
    found = {}  # type: Dict[Tuple[Tuple[str, int], ...], Tuple[Placed, ...]]

    def visit(slot: int, used: int, chosen: List[Placed]) -> None:
        if slot == model.memory_slots:
            if chosen and check_budget(model, [p for p, _ in chosen]) is None:
                found.setdefault(tuple(sorted(Counter(p.name for p, _ in chosen).items())), tuple(chosen))
            return
        visit(slot + 1, used, chosen)
        for p in profiles:
            for pl in p.placements:
                bits = ((1 << pl.size) - 1) << pl.start
                if pl.start == slot and not used & bits:
                    visit(slot + 1, used | bits, chosen + [(p, pl.start)])

    visit(0, 0, [])
    return tuple(sorted(found.items()))


def solve(gpus: Sequence[Step], pending: Dict[str, int], headroom: Dict[str, int], allowed: Sequence[str],
          time_limit: float = TIME_LIMIT_S, stats: Optional[Dict[str, Any]] = None
          ) -> Optional[List[Tuple[List[int], List[Placed], Dict[str, int]]]]:
    """Per GPU (in order): the indices of its idle instances kept, the instances created, and the waiting
    pods it takes per profile. None when the program is not solved to proven optimality (or is too big,
    or infeasible): the caller keeps its own plan. ``stats``, when given, gets the solver's status name
    and its own time (``status``, ``solve_s``)."""
    wanted = {n: k for n, k in pending.items() if k > 0}
    if not wanted or len(gpus) > EXACT_GPUS or sum(wanted.values()) > EXACT_PODS:
        if stats is not None:
            stats["status"] = "not tried"
        return None
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 0.0)
    integral = highspy.HighsVarType.kInteger  # binaries are integers bounded to [0, 1]
    names = sorted(set(wanted) | {n for n, k in headroom.items() if k > 0})
    empty_seen = 0
    offered = []  # the GPUs in the program, one by one (GPUs that hold nothing: per model, below)
    empties = {}  # type: Dict[GpuModel, List[int]]
    for index, g in enumerate(gpus):
        if not g.used and not g.fixed and not g.idle:
            if empty_seen >= sum(wanted.values()):
                continue  # spare empty ones beyond the waiting pods are left out
            empty_seen += 1
            empties.setdefault(g.model, []).append(index)
            continue
        offered.append(index)
    keep: Dict[Tuple[int, int], object] = {}
    new: Dict[Tuple[int, str, int], object] = {}
    take: Dict[Tuple[int, str], object] = {}
    gate: Dict[int, object] = {}
    have: Dict[str, List[object]] = {n: [] for n in names}
    pods_of: Dict[str, List[object]] = {n: [] for n in wanted}
    counted = []  # GPUs that hold no pod now and take one (the empty ones: how many, per pattern)
    churn = []
    for gi in offered:
        g = gpus[gi]
        model = g.model
        taken = 0
        for profile, start in g.fixed:
            taken |= ((1 << profile.memory_slices) - 1) << start
        slots: Dict[int, List[object]] = {}
        compute, count = [], {}  # type: List[Tuple[int, object]], Dict[str, List[object]]
        for ii, (profile, start) in enumerate(g.idle):
            v = h.addVariable(lb=0, ub=1, type=integral)
            keep[gi, ii] = v
            churn.append(1 - v)
            for m in range(start, start + profile.memory_slices):
                slots.setdefault(m, []).append(v)
            compute.append((profile.compute_slices, v))
            count.setdefault(profile.name, []).append(v)
            if profile.name in have:
                have[profile.name].append(v)
        for name in names:
            profile = model.profile_by_name(name)
            if profile is None or name not in allowed:
                continue
            for pl in profile.placements:
                bits = ((1 << pl.size) - 1) << pl.start
                if taken & bits:
                    continue
                v = h.addVariable(lb=0, ub=1, type=integral)
                new[gi, name, pl.start] = v
                churn.append(v)
                for m in range(pl.start, pl.start + pl.size):
                    slots.setdefault(m, []).append(v)
                compute.append((profile.compute_slices, v))
                count.setdefault(name, []).append(v)
                have[name].append(v)
        for vs in slots.values():
            if len(vs) > 1:
                h.addConstr(sum(vs) <= 1)
        if compute:
            h.addConstr(sum(c * v for c, v in compute) <= model.compute_slices
                        - sum(p.compute_slices for p, _ in g.fixed))
        for name, vs in count.items():
            profile = model.profile_by_name(name)
            h.addConstr(sum(vs) <= profile.max_instances - sum(1 for p, _ in g.fixed if p.name == name))
        if not g.used:
            gate[gi] = h.addVariable(lb=0, ub=1, type=integral)
            # An idle instance a waiting pod could bind to makes the GPU count: the scheduler may bind there
            # whatever the program intends (ties between GPUs without pods are the scheduler's to break).
            for ii, (profile, _) in enumerate(g.idle):
                if profile.name in wanted:
                    h.addConstr(keep[gi, ii] - gate[gi] <= 0)
        for name, k in wanted.items():
            mine = [keep[gi, ii] for ii, (p, _) in enumerate(g.idle) if p.name == name] + \
                [v for (gg, n, _), v in new.items() if gg == gi and n == name]
            if not mine:
                continue
            u = h.addVariable(lb=0, ub=len(mine), type=integral)
            take[gi, name] = u
            pods_of[name].append(u)
            h.addConstr(u - sum(mine) <= 0)
            if gi in gate:
                h.addConstr(u - k * gate[gi] <= 0)
    # GPUs that hold nothing are interchangeable (per model): not one variable per GPU and placement, which
    # the solver would have to tell apart, but how many of them take each pattern (the cutting-stock form,
    # whose relaxation is tight), with pods (they count) or for headroom only (they do not).
    groups = []  # type: List[Tuple[GpuModel, List[int], list, list, Dict[str, object]]]
    for model, members in empties.items():
        mine_names = tuple(n for n in names if n in allowed and model.profile_by_name(n) is not None)
        pats = patterns(model, mine_names) if mine_names else ()
        if not pats:
            continue
        with_pods = [h.addVariable(lb=0, ub=len(members), type=integral) for _ in pats]
        spare_only = [h.addVariable(lb=0, ub=len(members), type=integral) for _ in pats]
        h.addConstr(sum(with_pods) + sum(spare_only) <= len(members))
        placed = {}  # type: Dict[str, object]
        for (counts, _), z, w in zip(pats, with_pods, spare_only):
            size = sum(k for _, k in counts)
            counted.append(z)
            churn.append(size * z)
            churn.append(size * w)
        for name in mine_names:
            held = [(k, z, w) for (counts, _), z, w in zip(pats, with_pods, spare_only) for n, k in counts if n == name]
            if not held:
                continue
            if name in have:
                have[name].extend([k * z for k, z, _ in held] + [k * w for k, _, w in held])
            if name in wanted:
                u = h.addVariable(lb=0, ub=wanted[name], type=integral)
                placed[name] = u
                pods_of[name].append(u)
                h.addConstr(u - sum(k * z for k, z, _ in held) <= 0)
        groups.append((model, members, with_pods, spare_only, placed))
    for name in names:
        need = wanted.get(name, 0) + max(0, headroom.get(name, 0))
        if not have[name]:
            if need:
                return _none(stats, "infeasible")
            continue
        h.addConstr(sum(have[name]) >= need)
    for name, k in wanted.items():
        if not pods_of[name]:
            return _none(stats, "infeasible")
        h.addConstr(sum(pods_of[name]) == k)
    counted.extend(gate.values())
    h.minimize(GPU_WEIGHT * sum(counted) + sum(churn) if counted or churn else 0)
    status = h.getModelStatus()
    if stats is not None:
        stats["status"] = h.modelStatusToString(status)
        stats["solve_s"] = h.getRunTime()
        stats["objective"] = h.getInfo().objective_function_value
    if status != highspy.HighsModelStatus.kOptimal:
        return None
    value = h.getSolution().col_value
    on = lambda v: value[v.index] > 0.5  # noqa: E731
    count_of = lambda v: int(round(value[v.index]))  # noqa: E731
    out: List[Tuple[List[int], List[Placed], Dict[str, int]]] = []
    for gi, g in enumerate(gpus):
        kept = [ii for ii in range(len(g.idle)) if gi not in offered or on(keep[gi, ii])]
        made = [(g.model.profile_by_name(n), s) for (gg, n, s), v in sorted(new.items(), key=lambda kv: kv[0])
                if gg == gi and on(v)]
        pods = {n: count_of(u) for (gg, n), u in take.items() if gg == gi and value[u.index] > 0.5}
        out.append((kept, made, pods))
    for model, members, with_pods, spare_only, placed in groups:
        chosen = [(pl, True) for (_, pl), z in zip(patterns_of(model, names, allowed), with_pods)
                  for _ in range(count_of(z))] + \
            [(pl, False) for (_, pl), w in zip(patterns_of(model, names, allowed), spare_only) for _ in range(count_of(w))]
        left = {n: count_of(u) for n, u in placed.items()}
        room = [Counter(p.name for p, _ in pl) if takes else Counter() for pl, takes in chosen]
        given = [Counter() for _ in chosen]  # type: List[Counter]
        # the pods of the GPUs with pods: one each first (each of them counts for a pod), then the rest
        for first in (True, False):
            for free, mine in zip(room, given):
                for n in sorted(free):
                    while left.get(n, 0) > 0 and mine[n] < free[n] and not (first and mine):
                        mine[n] += 1
                        left[n] -= 1
        for gi, (pl, _), mine in zip(members, chosen, given):
            out[gi] = ([], list(pl), dict(mine))
    for g, (kept, made, _) in zip(gpus, out):
        together = [p for p, _ in g.fixed] + [g.idle[ii][0] for ii in kept] + [p for p, _ in made]
        if check_budget(g.model, together) is not None:
            return None  # a rule the program does not state (media engines): the planner's answer stands
    return out


def patterns_of(model: GpuModel, names: Sequence[str], allowed: Sequence[str]):
    return patterns(model, tuple(n for n in names if n in allowed and model.profile_by_name(n) is not None))


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
                  ) -> Tuple[Counter, int, List[List[Tuple[str, Any]]], Counter]:
    """The pool once the waiting pods bind, as the project models the scheduler (bench/demand.py too): in
    pod order, a pod asking one instance takes an idle one of its profile on the GPU with the most compute
    in use, counting the pods bound before it (kube-scheduler's MostAllocated scoring; ties: the first
    GPU); a pod asking several takes them on one node (the node with the most compute in use that has
    enough; ties: the first), from its GPUs with the most compute in use first. Within a GPU, instances
    that exist are taken before ones the plan creates.

    ``gpus``: per GPU (its node, its instances as (profile, compute slices, in use, created by the plan));
    ``pods``: (profile, count, tag) in pod order; ``headroom``: idle instances wanted per profile after.
    Returns (per profile: the instances of waiting pods left unbound plus the headroom missing; the GPUs
    holding a pod; per GPU the (profile, tag) of each pod bound to an instance the plan creates; per
    profile the instances of waiting pods left unbound alone).
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
            continue
        best = None
        for node, members in nodes.items():
            if node_idle[node].get(p, 0) >= count and (best is None or node_used[node] > node_used[best]):
                best = node
        if best is None:
            short[p] += count
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
    return short, sum(holding), bound_new, unbound
