"""The benchmark's yardsticks, independent of the planner: the exact optimum / lower bound of GPUs for a
demand (an integer program over whole-GPU configurations, solved by HiGHS through ``highspy``) and the
static layouts (the best single layout with hindsight, ACK's four fixed sequences).

The configurations are enumerated here from the catalogue's placements by a separate search (not the
planner's), and each one is confirmed by the project's solver (``solver.try_place``).

The integer program (the cutting-stock form, Gilmore and Gomory): minimize sum_c x_c subject to
sum_c a[c][p] x_c >= d_p for every profile p, x_c >= 0 integer, where a[c][p] is how many instances of p
configuration c holds. Its optimum is the fewest GPUs that hold the demand if every pod could be placed
afresh: a lower bound for any planner that never moves a running pod.
"""

import contextlib
import functools
import os
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

import _path  # noqa: F401

from node_bootstrap.mig.catalogue import GpuModel
from node_bootstrap.mig.solver import check_budget, try_place

Config = Tuple[Tuple[str, int], ...]  # (profile name, count), sorted


@functools.lru_cache(maxsize=64)
def configurations(gpu: GpuModel, names: Tuple[str, ...]) -> Tuple[Config, ...]:
    """Every maximal multiset of ``names`` one GPU holds (nothing else of ``names`` fits beside it)."""
    profiles = [gpu.profile_by_name(n) for n in names]
    found = set()

    def visit(slot, used, chosen):
        if slot == gpu.memory_slots:
            if chosen and check_budget(gpu, chosen) is None:
                found.add(tuple(sorted(Counter(p.name for p in chosen).items())))
            return
        visit(slot + 1, used, chosen)
        for p in profiles:
            for pl in p.placements:
                bits = ((1 << pl.size) - 1) << pl.start
                if pl.start == slot and not used & bits:
                    visit(slot + 1, used | bits, chosen + [p])

    visit(0, 0, [])
    maximal = [c for c in found if not any(_dominates(o, c) for o in found if o != c)]
    for c in maximal:  # the project's own solver must agree that each one is placeable
        assert try_place(gpu, [gpu.profile_by_name(n) for n, k in c for _ in range(k)]) is not None, c
    return tuple(sorted(maximal))


def _dominates(a: Config, b: Config) -> bool:
    da, db = dict(a), dict(b)
    return all(da.get(n, 0) >= k for n, k in db.items()) and da != db


@contextlib.contextmanager
def _quiet_stdout():
    """HiGHS prints its banner on the C stdout when a model object is made: keep --json output clean."""
    fd = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(fd, 1)
        os.close(fd)


_SOLVER = None


def _highs():
    global _SOLVER
    if _SOLVER is None:
        import highspy
        with _quiet_stdout():
            _SOLVER = highspy.Highs()
        _SOLVER.setOptionValue("output_flag", False)
        _SOLVER.setOptionValue("time_limit", 10.0)
    _SOLVER.clearModel()
    return _SOLVER


def min_gpus(gpu: GpuModel, demand: Dict[str, int], integral: bool = True) -> Tuple[Optional[float], bool]:
    """(fewest GPUs that hold ``demand``, proven optimal). ``integral=False``: the LP relaxation's value
    rounded up (a lower bound). (None, False) when some profile fits no configuration. Each mix is solved
    once per process: the repack bound, the bound without evictions and the replays ask the same mixes."""
    return _min_gpus(gpu, tuple(sorted((n, k) for n, k in demand.items() if k > 0)), integral)


@functools.lru_cache(maxsize=1 << 16)
def _min_gpus(gpu: GpuModel, need: Tuple[Tuple[str, int], ...], integral: bool) -> Tuple[Optional[float], bool]:
    demand = dict(need)
    names = tuple(n for n, _ in need)
    if not names:
        return 0, True
    configs = configurations(gpu, names)
    if any(all(dict(c).get(n, 0) == 0 for c in configs) for n in names):
        return None, False
    import highspy
    h = _highs()
    kind = highspy.HighsVarType.kInteger if integral else highspy.HighsVarType.kContinuous
    x = [h.addVariable(lb=0, type=kind) for _ in configs]
    for n in names:
        h.addConstr(sum(dict(c).get(n, 0) * v for c, v in zip(configs, x) if dict(c).get(n, 0)) >= demand[n])
    h.minimize(sum(x))
    status = h.getModelStatus()
    value = h.getInfo().objective_function_value
    if integral:
        optimal = status == highspy.HighsModelStatus.kOptimal
        bound = h.getInfo().mip_dual_bound
        return (round(value) if optimal else -(-bound // 1)), optimal
    return -(-round(value, 6) // 1), False


def min_gpu_configs(gpu: GpuModel, demand: Dict[str, int]) -> List[Config]:
    """One optimal answer of ``min_gpus``' program, a configuration per GPU (the best static pool's GPUs when
    ``demand`` is each profile's peak); [] when there is none or HiGHS did not prove one in time."""
    names = tuple(sorted(n for n, k in demand.items() if k > 0))
    if not names:
        return []
    configs = configurations(gpu, names)
    if any(all(dict(c).get(n, 0) == 0 for c in configs) for n in names):
        return []
    import highspy
    h = _highs()
    x = [h.addVariable(lb=0, type=highspy.HighsVarType.kInteger) for _ in configs]
    for n in names:
        h.addConstr(sum(dict(c).get(n, 0) * v for c, v in zip(configs, x) if dict(c).get(n, 0)) >= demand[n])
    h.minimize(sum(x))
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return []
    values = h.getSolution().col_value
    return [c for c, v in zip(configs, x) for _ in range(int(round(values[v.index])))]


def static_layouts(gpu: GpuModel, names: Sequence[str]) -> List[Config]:
    """Every maximal single layout of the profiles in the trace."""
    return list(configurations(gpu, tuple(sorted(names))))


def ack_sequences(gpu: GpuModel) -> List[Tuple[str, Config]]:
    """ACK's four fixed sequences (its MIG node pool guide: 19x7, 14-14-14-19, 9-9, 5-19-19-19), by id."""
    out = []
    for label, ids in (("7x1g", (19,) * 7), ("3x2g+1g", (14, 14, 14, 19)), ("2x3g", (9, 9)),
                       ("4g+3x1g", (5, 19, 19, 19))):
        out.append((label, tuple(sorted(Counter(gpu.profile_by_id(i).name for i in ids).items()))))
    return out


def static_gpus(layout: Config, peaks: Dict[str, int]) -> Optional[int]:
    """GPUs a pool of identical ``layout`` GPUs needs to hold ``peaks`` (each profile's peak of alive pods:
    instances are the same on every GPU, so only the counts matter); None when it lacks a profile."""
    have = dict(layout)
    need = 0
    for n, k in peaks.items():
        if k <= 0:
            continue
        if not have.get(n):
            return None
        need = max(need, -(-k // have[n]))
    return need


def step_optimum(gpu: GpuModel, in_use: Sequence[Sequence[Tuple[str, int]]], spare: int,
                 pending: Dict[str, int]) -> Tuple[Optional[int], bool]:
    """The exact optimum of the problem the planner is given at one step: the fewest GPUs holding a pod once
    the ``pending`` pods (count per profile) are placed, when every running pod stays where it is. ``in_use``:
    per GPU that holds a running pod, its in-use instances ``(profile, start)`` (idle instances are free
    space: they may be kept or destroyed); ``spare``: GPUs holding no running pod. (optimum, proven); (None,
    False) when the pool cannot hold the pending pods.

    Its own formulation (not the planner's search): a binary x[g, p, s] per GPU, profile and start of a
    placement that overlaps nothing in use, y[g] per spare GPU (it holds a pod); per GPU and memory slice at
    most one instance (a spare GPU's slices only when y[g]), the compute slices and each profile's
    max_instances within the GPU's limits, every pending pod placed; minimize the spare GPUs used (the GPUs
    in use count anyway). Spare GPUs are interchangeable: y is ordered, and only as many as pods wait are
    offered. Each GPU of the answer is confirmed by the project's counting rules (``check_budget``)."""
    wanted = {n: k for n, k in sorted(pending.items()) if k > 0}
    if not wanted:
        return len(in_use), True
    import highspy
    h = _highs()
    profiles = {n: gpu.profile_by_name(n) for n in wanted}
    spare = min(spare, sum(wanted.values()))
    gpus = [tuple(g) for g in in_use] + [()] * spare
    x = {}
    y = {}
    for gi, held in enumerate(gpus):
        taken = 0
        for name, start in held:
            taken |= ((1 << gpu.profile_by_name(name).memory_slices) - 1) << start
        if gi >= len(in_use):
            y[gi] = h.addVariable(lb=0, ub=1, type=highspy.HighsVarType.kInteger)
        for n, p in profiles.items():
            for pl in p.placements:
                bits = ((1 << pl.size) - 1) << pl.start
                if not taken & bits:
                    x[gi, n, pl.start, pl.size] = h.addVariable(lb=0, ub=1, type=highspy.HighsVarType.kInteger)
        mine = [(k, v) for k, v in x.items() if k[0] == gi]
        gate = y.get(gi)
        for m in range(gpu.memory_slots):
            cover = [v for (g, n, s, size), v in mine if s <= m < s + size]
            if cover:
                h.addConstr(sum(cover) - (gate if gate is not None else 0) <= (0 if gate is not None else 1))
        used_compute = sum(gpu.profile_by_name(n).compute_slices for n, _ in held)
        if mine:
            h.addConstr(sum(profiles[n].compute_slices * v for (g, n, s, size), v in mine)
                        <= gpu.compute_slices - used_compute)
        for n, p in profiles.items():
            same = [v for (g, pn, s, size), v in mine if pn == n]
            if same:
                h.addConstr(sum(same) <= p.max_instances - sum(1 for hn, _ in held if hn == n))
    for n, k in wanted.items():
        options = [v for (g, pn, s, size), v in x.items() if pn == n]
        if not options:
            return None, False
        h.addConstr(sum(options) >= k)
    order = sorted(y)
    for a, b in zip(order, order[1:]):
        h.addConstr(y[a] - y[b] >= 0)
    h.minimize(sum(y.values()) if y else 0 * next(iter(x.values())))
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        return (None, False) if status == highspy.HighsModelStatus.kInfeasible else \
            (len(in_use) + int(-(-h.getInfo().mip_dual_bound // 1)), False)
    values = h.getSolution().col_value
    for gi, held in enumerate(gpus):  # the project's counting rules agree with every GPU of the answer
        chosen = [gpu.profile_by_name(n) for n, _ in held] + [
            profiles[n] for (g, n, s, size), v in x.items() if g == gi and values[v.index] > 0.5]
        assert check_budget(gpu, chosen) is None, (held, chosen)
    return len(in_use) + sum(1 for v in y.values() if values[v.index] > 0.5), True
