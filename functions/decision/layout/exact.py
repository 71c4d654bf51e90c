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


def solve(gpus: Sequence[Step], pending: Dict[str, int], headroom: Dict[str, int], allowed: Sequence[str],
          time_limit: float = TIME_LIMIT_S) -> Optional[List[Tuple[List[int], List[Placed], Dict[str, int]]]]:
    """Per GPU (in order): the indices of its idle instances kept, the instances created, and the waiting
    pods it takes per profile. None when the program is not solved to proven optimality (or is too big,
    or infeasible): the caller keeps its own plan."""
    wanted = {n: k for n, k in pending.items() if k > 0}
    if not wanted or len(gpus) > EXACT_GPUS or sum(wanted.values()) > EXACT_PODS:
        return None
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 0.0)
    integral = highspy.HighsVarType.kInteger  # binaries are integers bounded to [0, 1]
    names = sorted(set(wanted) | {n for n, k in headroom.items() if k > 0})
    empty_seen = 0
    offered = []  # the GPUs in the program (spare empty ones beyond the waiting pods are left out)
    for index, g in enumerate(gpus):
        if not g.used and not g.fixed and not g.idle:
            if empty_seen >= sum(wanted.values()):
                continue
            empty_seen += 1
        offered.append(index)
    keep: Dict[Tuple[int, int], object] = {}
    new: Dict[Tuple[int, str, int], object] = {}
    take: Dict[Tuple[int, str], object] = {}
    gate: Dict[int, object] = {}
    have: Dict[str, List[object]] = {n: [] for n in names}
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
            h.addConstr(u - sum(mine) <= 0)
            if gi in gate:
                h.addConstr(u - k * gate[gi] <= 0)
    for name in names:
        need = wanted.get(name, 0) + max(0, headroom.get(name, 0))
        if not have[name]:
            if need:
                return None
            continue
        h.addConstr(sum(have[name]) >= need)
    for name, k in wanted.items():
        pods = [u for (gi, n), u in take.items() if n == name]
        if not pods:
            return None
        h.addConstr(sum(pods) == k)
    order = [gi for gi in offered if gi in gate and not gpus[gi].idle]  # empty GPUs: interchangeable
    for a, b in zip(order, order[1:]):
        h.addConstr(gate[a] - gate[b] >= 0)
    h.minimize(GPU_WEIGHT * sum(gate.values()) + sum(churn) if gate or churn else 0)
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    value = h.getSolution().col_value
    on = lambda v: value[v.index] > 0.5  # noqa: E731
    out: List[Tuple[List[int], List[Placed], Dict[str, int]]] = []
    for gi, g in enumerate(gpus):
        kept = [ii for ii in range(len(g.idle)) if gi not in offered or on(keep[gi, ii])]
        made = [(g.model.profile_by_name(n), s) for (gg, n, s), v in sorted(new.items(), key=lambda kv: kv[0])
                if gg == gi and on(v)]
        pods = {n: int(round(value[u.index])) for (gg, n), u in take.items() if gg == gi and value[u.index] > 0.5}
        together = [p for p, _ in g.fixed] + [g.idle[ii][0] for ii in kept] + [p for p, _ in made]
        if check_budget(g.model, together) is not None:
            return None  # a rule the program does not state (media engines): the planner's answer stands
        out.append((kept, made, pods))
    return out


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
