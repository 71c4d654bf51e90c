"""Demand benchmark: the auto pool planner (functions/decision/layout) replayed over a day of pod arrivals
and departures, against the exact optimum / lower bound and static layouts.

  python bench/demand.py [--quick] [--json]
  python bench/demand.py --peers [--trace PATH] [--json]   # the peers side by side (bench/demand_peers.py)
  python bench/demand.py --peers --seeds N [--json]         # the synthetic demands over N seeds each
  python bench/demand.py --peers --weeks N [--trace PATH]   # the trace files over their last N weeks each

Per run (trace family x GPU model x pool size): the planner's GPUs (the peak number of GPUs holding a
running pod), the optimum (max over steps of the integer program's optimum for the pods alive then; exact
up to 32 GPUs, also solved at 1,000 where HiGHS proves it, else its bound; above 32 GPUs every 4th step),
the best single static layout chosen with hindsight (None when no one layout holds every profile the pods
ask for, e.g. 7g beside anything), the best static pool chosen with hindsight (GPUs may differ but never
change: the integer program over each profile's peak; the savings are against it, the stronger baseline)
and ACK's four sequences (the GPUs for the pods whose profile a sequence has, and the share of pods it
cannot serve at all), pods evicted (in-use instances destroyed: must be 0),
instances destroyed (churn), plans that changed a GPU with demand unchanged (flaps: must be 0), changes
that serve nothing (up to 32 GPUs: without that one GPU's change every pod still binds, on as few GPUs;
must be 0), planner time. The pool has more GPUs than needed (twice the size, plus 8) so the planner's
own choice shows; pods pending after a plan are a failure (``unserved_pod_steps``).

The scheduler model: a pending pod binds to an idle instance of its profile, on the GPU with the most
compute in use first, counting the pods bound before it (a bin-packing scheduler, kube-scheduler's
MostAllocated scoring, one pod at a time), in pod order.
"""

import argparse
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from typing import Dict, List, Optional

import _path  # noqa: F401

import demand_alibaba
import demand_alternating
import demand_bound
import demand_peers
import demand_traces
from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, exact, plan, planner
from node_bootstrap.mig.catalogue import find_gpu

MODELS = {"A100-40GB": "NVIDIA A100-SXM4-40GB", "A100-80GB": "NVIDIA A100-SXM4-80GB",
          "H100-80GB": "NVIDIA H100 80GB HBM3"}
GPUS_PER_NODE = 8
EXACT_UP_TO = 32


class Pool:
    """The simulated pool: instances per GPU and which pod holds each."""

    def __init__(self, model: str, gpus: int):
        self.model = model
        self.gpus = [(("n%04d" % (g // GPUS_PER_NODE)), g % GPUS_PER_NODE) for g in range(gpus)]
        self.inst = {g: {} for g in self.gpus}  # gpu -> {(profile, start): pod key or None}

    def supply(self) -> List[GpuSupply]:
        return [GpuSupply(node, idx, self.model,
                          tuple(Instance(p, s, holder is not None) for (p, s), holder in sorted(self.inst[(node, idx)].items())))
                for node, idx in self.gpus]

    def apply(self, result) -> Dict[str, int]:
        evicted = destroyed = created = 0
        for t in result.targets:
            if t.change == "none":
                continue
            held = self.inst[(t.node, t.index)]
            for key in t.destroy:
                if held.get(key) is not None:
                    evicted += 1  # a pod's instance destroyed: never expected
                held.pop(key, None)
                destroyed += 1
            for key in t.create:
                held[key] = None
                created += 1
            assert sorted(held) == sorted(t.layout), (t, sorted(held))
        return {"evicted": evicted, "destroyed": destroyed, "created": created}

    def in_use_gpus(self) -> int:
        return sum(1 for g in self.gpus if any(v is not None for v in self.inst[g].values()))


def replay(family: str, model_key: str, size: int, seed: int = 1, steps: int = demand_traces.STEPS) -> dict:
    """One run (see the module's docstring), with every exact solve the planner makes timed (``_timed``)."""
    solves = []  # type: List[tuple]
    real = planner.solve_exactly
    planner.solve_exactly = _timed(solves)
    try:
        out = _replay(family, model_key, size, seed, steps)
    finally:
        planner.solve_exactly = real
    cpu = sorted(t for t, _ in solves)
    out.update({
        # the planner's exact solves (exact.py, HiGHS, every plan of a pool of at most 96 usable GPUs where the
        # search served every pod): how many, how many HiGHS proved optimal within its 1 s limit, and their CPU
        # time (model, enumeration and solve; process time: the machine is shared), ms
        "exact_solves": len(solves), "exact_optimal": sum(1 for _, ok in solves if ok),
        "exact_cpu_ms_p50": _ms(_quantile(cpu, 0.5)), "exact_cpu_ms_p95": _ms(_quantile(cpu, 0.95)),
        "exact_cpu_ms_max": _ms(cpu[-1] if cpu else None), "exact_cpu_s": cpu,
    })
    return out


def _timed(solves: list):
    def solve(*args, **kwargs):
        stats = {}
        t0 = time.process_time()
        answer = exact.solve(*args, stats=stats, **kwargs)
        solves.append((time.process_time() - t0, stats.get("status") == "Optimal"))
        return answer
    return solve


def _quantile(values: List[float], q: float):
    """The nearest-rank quantile of sorted ``values`` (None when there are none)."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _ms(seconds):
    return None if seconds is None else round(1000 * seconds, 1)


def _replay(family: str, model_key: str, size: int, seed: int, steps: int) -> dict:
    gpu = find_gpu(MODELS[model_key])
    names = {k: gpu.profile_by_id(i).name for k, i in demand_traces.CLASS_IDS.items()}
    events = demand_traces.trace(family, size, seed, steps)
    pool = Pool(MODELS[model_key], 2 * size + 8)
    arrivals, leaving = defaultdict(list), defaultdict(list)
    for e in events:
        arrivals[e.arrive].append(e)
        leaving[e.leave].append(e)
    bound_to = {}  # pod key -> (gpu, (profile, start))
    pending = {}  # pod key -> PodEvent
    bounds = Bounds(profiles=frozenset(names.values()))
    totals = Counter()
    times, opt, lp, peaks_by_profile = [], [], [], Counter()
    planner_peak, cold_ms = 0, 0.0
    exact = True
    previous = None
    steps_solved = steps_at_opt = 0
    step_over = []  # (step, GPUs over the step's exact optimum)
    for step in range(steps):
        for e in leaving[step]:
            if e.key in bound_to:
                g, key = bound_to.pop(e.key)
                pool.inst[g][key] = None
            pending.pop(e.key, None)
        for e in arrivals[step]:
            if e.leave > step:
                pending[e.key] = e
        alive = Counter(names[e.klass] for e in events if e.arrive <= step < e.leave)
        for n, k in alive.items():
            peaks_by_profile[n] = max(peaks_by_profile[n], k)
        demand = [PodDemand(k, e.owner, names[e.klass]) for k, e in sorted(pending.items())]
        supply = pool.supply()
        if size <= EXACT_UP_TO and pending:  # the exact optimum of this step's problem (running pods stay)
            held = [[key for key, holder in pool.inst[g].items() if holder is not None] for g in pool.gpus]
            step_best, step_proven = demand_bound.step_optimum(
                gpu, [h for h in held if h], sum(1 for h in held if not h), Counter(d.profile for d in demand))
        cold = step == steps // 2
        if cold:  # once mid-day: the planner's placement caches emptied, as in a fresh function instance
            planner._candidates.cache_clear()
            planner._choose.cache_clear()
        t0 = time.perf_counter()
        result = plan(supply, demand, bounds, previous)
        times.append(time.perf_counter() - t0)
        if cold:
            cold_ms = 1000 * times[-1]
        if size <= EXACT_UP_TO:
            totals["needless"] += _needless(pool, result, [d.profile for d in demand])
        totals.update(pool.apply(result))
        # unchanged demand and the plan applied: a second plan must change nothing
        again = plan(pool.supply(), demand, bounds, result)
        totals["flaps"] += len(again.changes)
        previous = result
        _bind(pool, pending, names, bound_to)
        totals["unserved_pod_steps"] += len(pending)
        planner_peak = max(planner_peak, pool.in_use_gpus())
        if size <= EXACT_UP_TO and demand:
            steps_solved += 1
            if step_best is not None and pool.in_use_gpus() <= step_best:
                steps_at_opt += 1
            elif step_best is not None:
                step_over.append((step, pool.in_use_gpus() - step_best))
            exact = exact and step_proven
        if size <= EXACT_UP_TO or step % 4 == 0 or step == steps - 1:
            value, proven = demand_bound.min_gpus(gpu, dict(alive))
            opt.append(value or 0)
            exact = exact and proven
    statics = []
    for layout in demand_bound.static_layouts(gpu, sorted(set(names.values()) & set(peaks_by_profile))):
        need = demand_bound.static_gpus(layout, peaks_by_profile)
        if need is not None:
            statics.append((need, layout))
    best_static = min(statics) if statics else (None, ())
    static_pool, _ = demand_bound.min_gpus(gpu, dict(peaks_by_profile))
    ack, ack_lost = {}, {}
    arrived = Counter(names[e.klass] for e in events)
    for label, layout in demand_bound.ack_sequences(gpu):
        held = {n for n, _ in layout}
        ack[label] = demand_bound.static_gpus(layout, {n: k for n, k in peaks_by_profile.items() if n in held})
        ack_lost[label] = round(100.0 * sum(k for n, k in arrived.items() if n not in held) / max(1, len(events)), 1)
    optimum = max(opt) if opt else 0
    return {
        "family": family, "model": model_key, "pool": size, "pods": len(events),
        "planner_gpus": planner_peak, "optimum_gpus": optimum, "optimum_exact": exact,
        "optimum_sampled": size > EXACT_UP_TO,
        # the exact optimum of each step's own problem (running pods stay where they are): how often the planner
        # reached it, and by how many GPUs it missed where it did not
        "steps_solved": steps_solved, "steps_at_optimum": steps_at_opt, "step_over_max": max(
            (o for _, o in step_over), default=0), "step_over": step_over[:10],
        "gap_pct": round(100.0 * (planner_peak - optimum) / optimum, 2) if optimum else 0.0,
        "best_static_gpus": best_static[0], "best_static_layout": "-".join(
            "%dx%s" % (k, n) for n, k in best_static[1]),
        "static_pool_gpus": static_pool,
        "saving_vs_static_pct": round(100.0 * (static_pool - planner_peak) / static_pool, 1)
        if static_pool else None,
        # ACK's sequences: GPUs for the pods whose profile the sequence has, and the share of pods it cannot serve
        "ack_sequences_gpus": ack, "ack_sequences_unservable_pct": ack_lost,
        "evicted": totals["evicted"], "destroyed": totals["destroyed"], "created": totals["created"],
        "flaps": totals["flaps"], "unserved_pod_steps": totals["unserved_pod_steps"],
        # changes that serve nothing (pools up to 32 GPUs; dropping that GPU's change alone binds every pod
        # on as few GPUs): must be 0
        "needless": totals["needless"] if size <= EXACT_UP_TO else None,
        "plan_ms_max": round(1000 * max(times), 1), "plan_ms_cold": round(cold_ms, 1), "plan_ms_mean": round(1000 * sum(times) / len(times), 1),
    }


def _outcome(pool: Pool, inst: dict, pods: List[str]):
    """Pods (profiles, in pod order) bound as _bind binds them, on the instances ``inst`` (gpu -> {(profile,
    start): holder}): (instances left unbound per profile, GPUs holding a pod)."""
    used = {g: sum(int(p.split("g.")[0]) for (p, _), h in inst[g].items() if h is not None) for g in pool.gpus}
    free = {g: Counter(p for (p, _), h in inst[g].items() if h is None) for g in pool.gpus}
    holding = {g for g in pool.gpus if used[g] or any(h is not None for h in inst[g].values())}
    short = Counter()
    for p in pods:
        best = None
        for g in pool.gpus:  # the first of the busiest wins ties
            if free[g][p] > 0 and (best is None or used[g] > used[best]):
                best = g
        if best is None:
            short[p] += 1
            continue
        free[best][p] -= 1
        used[best] += int(p.split("g.")[0])
        holding.add(best)
    return short, len(holding)


def _needless(pool: Pool, result, pods: List[str]) -> int:
    """Changes of the plan that serve nothing: without that one GPU's change (the rest carried out), no pod
    is left unbound that was bound and no more GPUs hold pods once the pods bind (issue 35: must be 0)."""
    after = {g: dict(held) for g, held in pool.inst.items()}
    for t in result.changes:
        held = after[(t.node, t.index)]
        for key in t.destroy:
            held.pop(key, None)
        for key in t.create:
            held[key] = None
    short, holding = _outcome(pool, after, pods)
    needless = 0
    for t in result.changes:
        trial = dict(after)
        trial[(t.node, t.index)] = pool.inst[(t.node, t.index)]
        less, fewer = _outcome(pool, trial, pods)
        if fewer <= holding and all(less[p] <= short[p] for p in less):
            needless += 1
    return needless


def _bind(pool: Pool, pending: dict, names: dict, bound_to: dict) -> None:
    """Each pending pod, in pod order, to an idle instance of its profile on the GPU with the most compute in
    use counting the pods bound before it (kube-scheduler scores one pod at a time against its cache, which
    holds the pods it just assumed; MostAllocated scoring); ties: the first GPU, the lowest start."""
    used = {g: sum(int(p.split("g.")[0]) for (p, _), h in pool.inst[g].items() if h is not None) for g in pool.gpus}
    for key in sorted(pending):
        p = names[pending[key].klass]
        free = [(-used[g], g, s) for g in pool.gpus for (q, s), holder in pool.inst[g].items()
                if q == p and holder is None]
        if free:
            _, g, s = min(free)
            pool.inst[g][(p, s)] = key
            bound_to[key] = (g, (p, s))
            used[g] += int(p.split("g.")[0])
            del pending[key]


RUNS_QUICK = [(f, m, n) for f in demand_traces.FAMILIES for m in ("A100-80GB",) for n in (8, 32)] + \
    [("mixed", "A100-40GB", 16), ("diurnal", "H100-80GB", 16), ("mixed", "A100-80GB", 1000)]
RUNS_FULL = [(f, m, n) for f in demand_traces.FAMILIES for m in MODELS for n in (8, 16, 32, 128)] + \
    [(f, m, 1000) for f in demand_traces.FAMILIES for m in ("A100-80GB",)]


# Peers (bench/demand_peers.py): the synthetic families on A100-80GB, a day in half-hour steps (a node is
# ready one step after it is asked for, removed after one empty step); the trace in 1-minute steps over
# the last TRACE_DAYS days (a node ready 5 minutes after it is asked for, removed after 10 empty minutes:
# cluster-autoscaler's default scale-down-unneeded-time).
PEER_RUNS_FULL = [(f, 16) for f in demand_traces.FAMILIES] + [(f, 64) for f in demand_traces.FAMILIES]
PEER_RUNS_QUICK = [("mixed", 8)]
TRACE_FILES = ("openb_pod_list_gpushare100.csv", "openb_pod_list_gpushare20.csv")
TRACE_DAYS, TRACE_STEP_S, TRACE_BOOT_S, TRACE_IDLE_S = 7, 60, 300, 600
PEER_MODEL = "A100-80GB"
# HiGHS' time for the no-eviction node-hours bound (bench/demand_noevict.py) on the 16-GPU synthetic demands
NO_EVICTION_S = 120.0
NO_EVICTION_UP_TO = 16  # GPUs of load: the larger days' programs are not solved within minutes


def _names(gpu) -> Dict[str, str]:
    return {k: gpu.profile_by_id(i).name for k, i in demand_traces.CLASS_IDS.items()}


def peer_runs(quick: bool = False, trace_dir: str = None, note=lambda text: None) -> List[dict]:
    """The peers over the synthetic families and, when its files are there, the production trace."""
    gpu = find_gpu(MODELS[PEER_MODEL])
    names = _names(gpu)
    out = []
    for family, size in (PEER_RUNS_QUICK if quick else PEER_RUNS_FULL):
        steps = 12 if quick else demand_traces.STEPS
        events = demand_traces.trace(family, size, 1, steps)
        run = demand_peers.compare(gpu, MODELS[PEER_MODEL], events, names, steps, 0.5,
                                   no_eviction_s=0 if quick or size > NO_EVICTION_UP_TO else NO_EVICTION_S)
        run.update(demand="%s (synthetic, load for %d GPUs)" % (family, size))
        out.append(run)
    if quick:
        return out
    for name, rows in _trace_files(trace_dir, note):
        events, steps, cost = demand_alibaba.events(rows, TRACE_DAYS, TRACE_STEP_S)
        run = _trace_compare(gpu, names, events, steps)
        run.update(demand="%s, last %d days (cluster-trace-gpu-v2023)" % (name, TRACE_DAYS), rounding=cost)
        out.append(run)
    return out


def _trace_files(trace_dir: str, note):
    """(file name, its pod rows) of each trace file there; one note and no more rows at the first missing."""
    trace_dir = trace_dir or demand_alibaba.default_dir(_path.ROOT)
    for name in TRACE_FILES:
        path = os.path.join(trace_dir, name)
        if not os.path.isfile(path):
            note("trace rows skipped: %s not found; get cluster-trace-gpu-v2023 from github.com/alibaba/clusterdata "
                 "and pass --trace DIR (bench/demand_alibaba.py says how)" % path)
            return
        yield name, demand_alibaba.read_rows(path)


def _trace_compare(gpu, names, events, steps) -> dict:
    """The peers over a trace window: 1-minute steps, a node ready 5 minutes after it is asked for."""
    return demand_peers.compare(gpu, MODELS[PEER_MODEL], events, names, steps, TRACE_STEP_S / 3600.0,
                                TRACE_BOOT_S // TRACE_STEP_S, TRACE_IDLE_S // TRACE_STEP_S)


def seed_runs(seeds: int, demands=None, steps: int = demand_traces.STEPS) -> List[dict]:
    """The synthetic demands drawn with ``seeds`` seeds each (no bound without evictions: minutes each): per
    demand, on how many seeds the auto pool used the fewest GPU-hours (of the peers offering every profile,
    and per GPU-hour served, against every peer) and its node-hours against the repack bound. One seed's
    margin can be noise (a plan taken a step earlier moves a row by a few GPU-hours); this says whether it is."""
    gpu = find_gpu(MODELS[PEER_MODEL])
    names = _names(gpu)
    out = []
    for family, size in demands or PEER_RUNS_FULL:
        rows = []
        for seed in range(1, seeds + 1):
            events = demand_traces.trace(family, size, seed, steps)
            rows.append(demand_peers.compare(gpu, MODELS[PEER_MODEL], events, names, steps, 0.5))
        out.append({"demand": "%s (synthetic, load for %d GPUs)" % (family, size), "seeds": seeds, **_margins(rows)})
    return out


def week_runs(weeks: int, trace_dir: str = None, note=lambda text: None) -> List[dict]:
    """The trace files over their last ``weeks`` weeks, a window of TRACE_DAYS days each (the seeds of the
    trace: one week's margin can be noise too), counted as :func:`seed_runs` counts. A week without pods is
    left out (``weeks`` counts those run)."""
    gpu = find_gpu(MODELS[PEER_MODEL])
    names = _names(gpu)
    out = []
    for name, trace in _trace_files(trace_dir, note):
        rows = []
        for back in range(weeks):
            events, steps, _ = demand_alibaba.events(trace, TRACE_DAYS, TRACE_STEP_S, back)
            if events:
                rows.append(_trace_compare(gpu, names, events, steps))
        if rows:
            out.append({"demand": "%s, %d-day windows" % (name, TRACE_DAYS), "weeks": len(rows), **_margins(rows)})
    return out


def _margins(rows: List[dict]) -> dict:
    """Over several runs of one demand: on how many the auto pool used the fewest GPU-hours (of the peers
    offering every profile, and per GPU-hour served against every peer), and its GPU-hours and node-hours
    margins (mean and worst)."""
    gaps = [100.0 * (r["peers"][0]["gpu_hours"] - min(p["gpu_hours"] for p in r["peers"][1:] if p["unservable"] == 0))
            / r["peers"][0]["gpu_hours"] for r in rows]
    over = [r["auto_node_hours_over_bound_pct"] for r in rows]
    return {"auto_fewest_gpu_hours_full_peers": sum(1 for r in rows if r["auto_fewest_gpu_hours_full_peers"]),
            "auto_fewest_gpu_hours_per_served": sum(1 for r in rows if r["auto_fewest_gpu_hours_per_served"]),
            "auto_gpu_hours_vs_best_full_peer_pct_mean": round(sum(gaps) / len(gaps), 1),
            "auto_gpu_hours_vs_best_full_peer_pct_max": round(max(gaps), 1),
            "auto_node_hours_over_bound_pct_mean": round(sum(over) / len(over), 1),
            "auto_node_hours_over_bound_pct_max": max(over),
            "auto_node_hours_within_5pct": sum(1 for v in over if v <= 5.0)}


def _seed_table(rows: List[dict], unit: str = "seeds") -> str:
    lines = ["%-40s %6s %14s %12s %17s %16s" % ("demand", unit, "fewest GPU-h", "per served", "GPU-h vs best %",
                                                  "node-h vs bound %")]
    lines.append("%-40s %6s %14s %12s %17s %16s" % ("", "", "(full peers)", "(every peer)", "mean / max",
                                                      "mean / max"))
    for r in rows:
        lines.append("%-40s %6d %14s %12s %17s %16s" % (
            r["demand"], r[unit], "%d of %d" % (r["auto_fewest_gpu_hours_full_peers"], r[unit]),
            "%d of %d" % (r["auto_fewest_gpu_hours_per_served"], r[unit]),
            "%+.1f / %+.1f" % (r["auto_gpu_hours_vs_best_full_peer_pct_mean"], r["auto_gpu_hours_vs_best_full_peer_pct_max"]),
            "%+.1f / %+.1f" % (r["auto_node_hours_over_bound_pct_mean"], r["auto_node_hours_over_bound_pct_max"])))
    lines.append("GPU-h vs best: the auto pool's GPU-hours against the fewest of DRA, HAMi and the static pool "
                 "(negative: fewer)")
    return "\n".join(lines)


def _worst(runs: List[dict], key: str) -> Optional[float]:
    """The largest ``key`` over the runs that have one (None: none has)."""
    return max((r[key] for r in runs if r[key] is not None), default=None)


def _peer_summary(runs: List[dict]) -> dict:
    return {
        "peers_demands": len(runs),
        # strictly, against every peer; "like for like", against the peers that offer every profile (ACK's
        # sequences leave whole profiles unserved, and a pod never served costs no GPU-hour)
        "peers_auto_fewest_gpu_hours": sum(1 for r in runs if r["auto_fewest_gpu_hours"]),
        "peers_auto_fewest_gpu_hours_like_for_like": sum(1 for r in runs if r["auto_fewest_gpu_hours_full_peers"]),
        "peers_auto_node_hours_over_bound_max_pct": _worst(runs, "auto_node_hours_over_bound_pct"),
        "peers_evicted": sum(p["evicted"] for r in runs for p in r["peers"]),
        # GPU-hours per GPU-hour of instances served, against every peer (what each served taken out)
        "peers_auto_fewest_gpu_hours_per_served": sum(1 for r in runs if r["auto_fewest_gpu_hours_per_served"]),
        # the node-hours any peer needs that never moves a pod, against the repack bound and the auto pool
        "peers_repack_bound_below_no_eviction_max_pct": _worst(runs, "repack_bound_below_no_eviction_pct"),
        "peers_auto_node_hours_over_no_eviction_max_pct": _worst(runs, "auto_node_hours_over_no_eviction_pct"),
    }


def measure(quick: bool = False) -> dict:
    runs = [replay(*r) for r in (RUNS_QUICK if quick else RUNS_FULL)]
    small = [r for r in runs if r["pool"] <= EXACT_UP_TO]
    cpu = sorted(t for r in small for t in r.pop("exact_cpu_s"))
    for r in runs:
        r.pop("exact_cpu_s", None)
    large = [r for r in runs if r["pool"] >= 1000]
    mixed = [r for r in runs if r["family"] in ("mixed", "diurnal") and r["saving_vs_static_pct"] is not None]
    return {
        "demand_runs": runs,
        "demand_small_pools_at_optimum": sum(1 for r in small if r["planner_gpus"] <= r["optimum_gpus"]),
        "demand_small_pools_every_step_optimal": sum(1 for r in small if r["steps_at_optimum"] == r["steps_solved"]),
        "demand_small_steps_at_optimum": sum(r["steps_at_optimum"] for r in small),
        "demand_small_steps": sum(r["steps_solved"] for r in small),
        "demand_small_steps_off_optimum": sum(r["steps_solved"] - r["steps_at_optimum"] for r in small),
        "demand_small_pools": len(small),
        # the planner's exact solves on those pools: each proven optimal within HiGHS' 1 s limit, its CPU time
        "demand_small_exact_solves": sum(r["exact_solves"] for r in small),
        "demand_small_exact_not_optimal": sum(r["exact_solves"] - r["exact_optimal"] for r in small),
        "demand_small_exact_cpu_ms_p50": _ms(_quantile(cpu, 0.5)),
        "demand_small_exact_cpu_ms_p95": _ms(_quantile(cpu, 0.95)),
        "demand_small_exact_cpu_ms_max": _ms(cpu[-1] if cpu else None),
        "demand_small_gap_max_pct": max((r["gap_pct"] for r in small), default=0.0),
        "demand_1000_gap_max_pct": max((r["gap_pct"] for r in large), default=0.0),
        "demand_mixed_saving_min_pct": min((r["saving_vs_static_pct"] for r in mixed), default=None),
        "demand_evicted": sum(r["evicted"] for r in runs),
        "demand_flaps": sum(r["flaps"] for r in runs),
        "demand_needless_changes": sum(r["needless"] or 0 for r in small),
        "demand_plan_1000_ms_max": max((r["plan_ms_max"] for r in large), default=None),
        "demand_plan_1000_ms_cold": max((r["plan_ms_cold"] for r in large), default=None),
        **_peer_summary(peer_runs(quick=True)),  # the full peer runs: ``--peers`` (minutes)
        **demand_alternating.measure(),  # the adversarial alternating pod: repartitions per hour, dwell or not
    }


def _table(result: dict) -> str:
    head = "%-9s %-9s %5s %6s %5s %7s %5s %6s %6s %6s %6s %-34s %5s %6s %5s %8s %9s %15s" % (
        "family", "model", "pool", "pods", "plan", "stepopt", "opt", "gap%", "layout", "static", "save%",
        "ACK 7x1g/3x2g+1g/2x3g/4g+3x1g",
        "evict", "destr", "flaps", "ms max", "exact", "exact ms p50/95/max")
    lines = [head]
    for r in result["demand_runs"]:
        ack = "/".join("%s(%d%%)" % (v, r["ack_sequences_unservable_pct"][k]) for k, v in r["ack_sequences_gpus"].items())
        lines.append("%-9s %-9s %5d %6d %5d %7s %5s %6.1f %6s %6s %6s %-34s %5d %6d %5d %8.1f %9s %15s" % (
            r["family"], r["model"], r["pool"], r["pods"], r["planner_gpus"],
            "%d/%d" % (r["steps_at_optimum"], r["steps_solved"]) if r["steps_solved"] else "-",
            ("%d" if r["optimum_exact"] else "%d*") % r["optimum_gpus"], r["gap_pct"],
            "-" if r["best_static_gpus"] is None else r["best_static_gpus"], r["static_pool_gpus"],
            r["saving_vs_static_pct"], ack, r["evicted"], r["destroyed"], r["flaps"], r["plan_ms_max"],
            "%d/%d" % (r["exact_optimal"], r["exact_solves"]) if r["exact_solves"] else "-",
            "%.0f/%.0f/%.0f" % (r["exact_cpu_ms_p50"], r["exact_cpu_ms_p95"], r["exact_cpu_ms_max"])
            if r["exact_solves"] else "-"))
    lines.append("stepopt: steps at the exact optimum of their own problem (running pods stay) / steps with pods "
                 "waiting (pools up to 32 GPUs)")
    lines.append("exact: the planner's exact solves proven optimal within HiGHS' 1 s limit / solves (each plan of a pool "
                 "of at most 96 usable GPUs where the search served every pod); exact ms: their CPU time")
    lines.append("opt: integer-program optimum (* its bound, not proven within HiGHS' time limit); layout: best "
                 "single static layout (- none holds every profile); static: best static pool; save%: vs static; "
                 "ACK: GPUs for the pods each sequence can serve (share of pods it cannot)")
    lines.extend(["", "one waiting pod alternating 7g.80gb / 3g.40gb on one A100 80GB (bench/demand_alternating.py):",
                  demand_alternating.table(result)])
    return "\n".join(lines)


def _peer_table(runs: List[dict]) -> str:
    lines = []
    for r in runs:
        b = r["bound"]
        lines.append("%s: %d pods, %d steps of %g min; bound %.1f GPU-h (peak %d), %.1f node-h%s" % (
            r["demand"], r["pods"], r["steps"], r["step_h"] * 60, b["gpu_hours"], b["peak_gpus"], b["node_hours"],
            "" if b["proven"] else " (not all proven)"))
        if r.get("rounding"):
            c = r["rounding"]
            lines.append("  rounding gpu_milli up to profiles: %.1f instance GPU-h for %.1f fractional (+%.1f%%)" % (
                c["instance_gpu_hours"], c["fractional_gpu_hours"], c["rounding_cost_pct"]))
        kept = r.get("no_eviction_bound")
        if kept:
            lines.append("  bound without evictions (each pod on one node for its life): %.1f node-h%s, %s" % (
                kept["node_hours"], "" if kept["proven"] else " (HiGHS' bound, not proven optimal: %s)" % kept["status"],
                "the repack bound's" if not r["repack_bound_below_no_eviction_pct"] else
                "%.1f%% above the repack bound" % r["repack_bound_below_no_eviction_pct"]))
        lines.append("  %-14s %8s %6s %7s %7s %6s %6s %7s %6s %6s %6s %6s %5s" % (
            "peer", "GPU-h", "/srvd", "node-h", "pk GPU", "pk nd", "served", "waited", "p50m", "p95m", "maxm", "never",
            "evict"))
        for p in r["peers"]:
            lines.append("  %-14s %8.1f %6s %7.1f %7d %6d %6d %7d %6s %6s %6s %6d %5d" % (
                p["peer"], p["gpu_hours"], _num(p["gpu_hours_per_served"]), p["node_hours"], p["peak_gpus"],
                p["peak_nodes"], p["served"], p["waited"], _num(p["wait_p50_min"]), _num(p["wait_p95_min"]),
                _num(p["wait_max_min"]), p["never_served"], p["evicted"]))
        lines.append("  auto: fewest GPU-h of every peer %s, of the peers offering every profile %s, per GPU-h served "
                     "%s; node-h %+.1f%% against the bound%s" % (
                         "yes" if r["auto_fewest_gpu_hours"] else "NO",
                         "yes" if r["auto_fewest_gpu_hours_full_peers"] else "NO",
                         "yes" if r["auto_fewest_gpu_hours_per_served"] else "NO",
                         r["auto_node_hours_over_bound_pct"] or 0.0,
                         "" if not kept else ", %+.1f%% against the bound without evictions"
                         % r["auto_node_hours_over_no_eviction_pct"]))
    lines.append("/srvd: GPU-hours per GPU-hour of instances served (compute slices / 7 x hours held; 1 = every GPU "
                 "in use full)")
    return "\n".join(lines)


def _num(v):
    return "-" if v is None else "%g" % v


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--peers", action="store_true", help="only the peers side by side (bench/demand_peers.py)")
    parser.add_argument("--trace", metavar="DIR", help="folder holding cluster-trace-gpu-v2023's openb_pod_list_"
                        "gpushare*.csv (default: $ACK_MIG_TRACE_DIR, else ../shared/data/cluster-trace-gpu-v2023)")
    parser.add_argument("--seeds", type=int, metavar="N", help="with --peers: only the synthetic demands, each "
                        "drawn with seeds 1..N, and how often the auto pool's margins hold")
    parser.add_argument("--weeks", type=int, metavar="N", help="with --peers: only the trace files, each over its "
                        "last N weeks (a window each), and how often the auto pool's margins hold")
    args = parser.parse_args(argv)
    if args.seeds is not None and (not args.peers or args.seeds < 1):
        print("demand.py: --seeds N needs --peers and N of at least 1 (e.g. --peers --seeds 5)", file=sys.stderr)
        return 2
    if args.weeks is not None and (not args.peers or args.seeds is not None or not 1 <= args.weeks <= 52):
        print("demand.py: --weeks N needs --peers, no --seeds, and N from 1 to 52 (e.g. --peers --weeks 5)",
              file=sys.stderr)
        return 2
    if args.seeds:
        rows = seed_runs(args.seeds)
        print(json.dumps({"seed_runs": rows}) if args.json else _seed_table(rows))
        return 0
    if args.peers:
        def note(text):
            print(text, file=sys.stderr)
        try:
            runs = week_runs(args.weeks, args.trace, note) if args.weeks else peer_runs(args.quick, args.trace, note)
        except (OSError, demand_alibaba.TraceError) as exc:
            print("demand.py: %s" % exc, file=sys.stderr)
            return 2
        if args.weeks:  # the trace alone: without its files there is nothing to show (the note said why)
            if not runs:
                return 2
            print(json.dumps({"week_runs": runs}) if args.json else _seed_table(runs, "weeks"))
            return 0
        if not args.json:
            print(_peer_table(runs))
        print(json.dumps({"peer_runs": runs, **_peer_summary(runs)} if args.json else _peer_summary(runs)))
        return 0
    result = measure(args.quick)
    if not args.json:
        print(_table(result))
    print(json.dumps({k: v for k, v in result.items() if args.json or k not in ("demand_runs", "alternating_runs")},
                     indent=None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
