"""A lower bound on node-hours for any way of sharing that never moves a running pod (``bench/demand.py
--peers``): the yardstick the repack bound is not.

The repack bound (``demand_peers.lower_bound``) packs the pods alive at each step afresh, so it moves pods
between nodes whenever that saves one; no peer may (the no-eviction rule), and a node holding one long pod
stays. This bound keeps every pod on one node for its whole life and chooses those nodes with hindsight:

    minimise  sum over nodes n and segments s of  len(s) * on[n, s]
    subject to  sum_n x[p, n] = 1                       every pod on one node, for its whole life
                x[p, n] <= on[n, s]                     for every segment s of p's life
                sum_{p alive in s} w(p) x[p, n] <= 8 on[n, s]    for each GPU weight w below

and at least as many nodes on in each segment as the repack bound needs then (a valid cut: no solution has
fewer; it keeps this bound from ever falling below the repack bound). A segment is a run of steps with the
same pods alive, and each weight w is one no GPU
configuration exceeds 1 (so eight GPUs hold at most 8): compute slices / 7, memory slots / 8, and one for
every instance of 4 or more compute slices (a GPU holds one at most). These only relax what eight GPUs hold,
so the optimum of this program is at most the true no-eviction optimum: a lower bound. Node symmetry is
broken by the usual relabelling (pod i, in arrival order, goes to one of the first i + 1 nodes). Pods
are served at arrival and held to their end, as in the repack bound; a peer that leaves pods waiting can
come in below either bound (read ``never``).

The nodes are labels that may go and come back; the program has ``max_nodes`` of them (the bench: the
busiest peer's peak plus two). A solution whose nodes' lives overlap more than that many at a time needs
more labels and is outside the program, so the value bounds the solutions within that many. Raising it
changed nothing where tried (mixed, 16 GPUs: 37.0 node-h with 4 and with 5).

Solved by HiGHS with a time limit; a solve cut by the limit reports HiGHS' proven lower bound (its dual
bound, never below the repack bound), still valid if weaker (``proven`` says whether it is the optimum).
The program grows with pods x nodes x segments: the 16-GPU synthetic days solve in seconds to a minute and
a half; the 64-GPU days and the trace's week of minutes do not within minutes, so the bench runs it on the
16-GPU days only.
"""

import math
from collections import Counter
from typing import Dict, List, Sequence, Tuple

import _path  # noqa: F401

import demand_bound
from node_bootstrap.mig.catalogue import GpuModel

GPUS_PER_NODE = 8


def _weights(gpu: GpuModel, names: Sequence[str]) -> List[Dict[str, float]]:
    out = [{n: gpu.profile_by_name(n).compute_slices / float(gpu.compute_slices) for n in names},
           {n: gpu.profile_by_name(n).memory_slices / float(gpu.memory_slots) for n in names},
           {n: 1.0 if gpu.profile_by_name(n).compute_slices >= 4 else 0.0 for n in names}]
    # each weight is checked against every maximal configuration the catalogue allows (demand_bound's
    # enumeration): a weight that one GPU could exceed would not be a bound
    for w in out:
        for config in demand_bound.configurations(gpu, tuple(sorted(names))):
            assert sum(w[n] * k for n, k in config) <= 1.0 + 1e-9, (w, config)
    return [w for w in out if any(v > 0 for v in w.values())]


def segments(lives: Sequence[Tuple[int, int]], steps: int) -> List[Tuple[int, int, Tuple[int, ...]]]:
    """(start, end, pods alive) for each run of steps with the same non-empty set of pods alive."""
    change = sorted({0, steps} | {a for a, _ in lives} | {b for _, b in lives})
    out = []
    for start, end in zip(change, change[1:]):
        if start >= steps:
            break
        alive = tuple(i for i, (a, b) in enumerate(lives) if a <= start < b)
        if alive:
            out.append((start, min(end, steps), alive))
    return out


def node_hours(gpu: GpuModel, events, names: Dict[str, str], steps: int, step_h: float, max_nodes: int,
               time_limit: float = 60.0) -> dict:
    """The no-eviction lower bound on node-hours over at most ``max_nodes`` nodes at once (see the module's
    text): {"node_hours": HiGHS' proven lower bound, "proven": solved to optimality, "nodes": max_nodes}."""
    pods = sorted(((e.arrive, max(e.leave, e.arrive + 1), names[e.klass]) for e in events if e.arrive < steps))
    lives = [(a, min(b, steps)) for a, b, _ in pods]
    profile = [n for _, _, n in pods]
    weights = _weights(gpu, sorted(set(profile)))
    segs = segments(lives, steps)
    import highspy
    with demand_bound._quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    binary = highspy.HighsVarType.kInteger
    nodes = min(max_nodes, len(pods))
    x = {}
    for i in range(len(pods)):
        for n in range(min(i + 1, nodes)):
            x[i, n] = h.addVariable(lb=0, ub=1, type=binary)
    on = {}
    cost = []
    for s, (start, end, alive) in enumerate(segs):
        for n in range(nodes):
            if not any((i, n) in x for i in alive):
                continue
            on[n, s] = h.addVariable(lb=0, ub=1, type=binary)
            cost.append((end - start) * on[n, s])
            for w in weights:
                terms = [w[profile[i]] * x[i, n] for i in alive if (i, n) in x and w[profile[i]] > 0]
                if terms:
                    h.addConstr(sum(terms) - GPUS_PER_NODE * on[n, s] <= 0)
    floors = 0  # the repack bound over the same segments: what a solve cut short still proves
    # at least as many nodes on as the repack bound needs then (valid, as no solution does with fewer): the
    # program's own bound then starts from the repack bound, never below it
    for s, (_, _, alive) in enumerate(segs):  # segments with the same mix alive: one solve (min_gpus caches)
        fewest = demand_bound.min_gpus(gpu, Counter(profile[i] for i in alive))[0] or 0
        floor = -(-int(math.ceil(fewest - 1e-9)) // GPUS_PER_NODE)
        here = [on[n, s] for n in range(nodes) if (n, s) in on]
        floors += floor * (segs[s][1] - segs[s][0])
        if floor and here:
            h.addConstr(sum(here) >= floor)
    for i in range(len(pods)):
        h.addConstr(sum(x[i, n] for n in range(min(i + 1, nodes))) == 1)
    for s, (_, _, alive) in enumerate(segs):
        for i in alive:
            for n in range(min(i + 1, nodes)):
                h.addConstr(x[i, n] - on[n, s] <= 0)
    h.minimize(sum(cost))
    info = h.getInfo()
    status = h.modelStatusToString(h.getModelStatus())
    proven = status == "Optimal"
    if proven:
        bound = info.objective_function_value
    else:  # HiGHS' dual bound where it has one, never below the repack bound its cuts hold
        dual = info.mip_dual_bound
        bound = max(dual if math.isfinite(dual) else 0.0, float(floors))
    return {"node_hours": round(math.ceil(bound - 1e-6) * step_h, 1), "proven": proven, "nodes": nodes,
            "status": status}
