"""The worst case of an auto pool's plan on a 96-GPU pool (exact.EXACT_GPUS: the largest that pays compose.py's
further rounds whatever the demand, and the planner's yield passes), or on GPUS GPUs (larger pools run the
rounds within compose.ROUND_WORK), measured, not asserted (a timed test would fail on a busy
runner). The rounds (compose.ROUNDS) and the passes (planner.YIELD_PASSES) multiply: each round is a
``planner.plan``, and each of those up to YIELD_PASSES plans (``planner._plan``), so ROUNDS x YIELD_PASSES = 24
plans at most in one tick. The exact solve (exact.TIME_LIMIT_S) runs in none of them: the planner leaves it out
while a pod asks several instances, which is what the rounds and passes are for.

    PYTHONPATH=. .venv/bin/python scripts/plan_cost.py [SEEDS] [FIRST SEED] [IDLE SHARE] [PODS] [GPUS]

Each seed: GPUS/8 nodes of 8 GPUs (96: 12 nodes; tests/layout/ticks.py's random layouts, some in use; IDLE
SHARE of them emptied, 0.0) and PODS/5 to PODS waiting pods (50), each asking several instances (one profile
or several). Prints the seeds with the most plans and the slowest, and the CPU time per plan. What
compose.ROUNDS' comment quotes: ``40 0 0.3 500`` (24 plans reached) and ``10 0 0.3 2000`` (the slowest); what
ROUND_WORK's quotes: ``10 0 0.3 45 1000``, ``10 0 0.3 100 400``, and ``4 0 0.0 100 1000`` with ROUND_WORK
raised (past it, the rounds do not run).
"""

import dataclasses
import random
import sys
import time

from functions.decision.layout import PodDemand, compose, planner
from node_bootstrap.mig.catalogue import find_gpu
from tests.layout.ticks import pool


def big_pool(rng, idle, gpus=96):
    """``gpus`` GPUs of one model (the first random pool's), renumbered as nodes of 8; ``idle``: that share of
    them emptied (MIG on, no instance: the most the exact solve and the search can choose among)."""
    supply, bounds = pool(rng)
    model, out = supply[0].model, []
    while len(out) < gpus:
        out.extend(s for s in supply if s.model == model)
        supply, _ = pool(rng)
    return [dataclasses.replace(s, node="node-%03d" % (n // 8), index=n % 8,
                                **({"instances": (), "mig": True, "busy": False} if rng.random() < idle else {}))
            for n, s in enumerate(out[:gpus])], bounds


def demand_for(rng, supply, pods=50):
    model = find_gpu(supply[0].model)
    names = [p.name for p in model.profiles if "+me" not in p.name and p.compute_slices < model.compute_slices]
    out = []
    for k in range(rng.randint(pods // 5, pods)):
        key = "ns/p%03d" % k
        if rng.random() < 0.5:
            out.append(PodDemand(key, "deployment ns/b", rng.choice(names), rng.randint(2, 3)))
        else:
            for name in rng.sample(names, 2):
                out.append(PodDemand(key, "deployment ns/c", name, rng.randint(1, 2)))
    return out


def main(argv):
    seeds = int(argv[1]) if len(argv) > 1 else 20
    first = int(argv[2]) if len(argv) > 2 else 0
    idle = float(argv[3]) if len(argv) > 3 else 0.0
    pods = int(argv[4]) if len(argv) > 4 else 50
    gpus = int(argv[5]) if len(argv) > 5 else 96
    calls = [0]
    inner = planner._plan

    def counted(*args, **kwargs):
        calls[0] += 1
        return inner(*args, **kwargs)

    planner._plan = counted  # a script's count of the plans made, never in the function
    rows = []
    for seed in range(first, first + seeds):
        rng = random.Random(seed)
        supply, bounds = big_pool(rng, idle, gpus)
        demand = demand_for(rng, supply, pods)
        calls[0] = 0
        start = time.process_time()
        compose.plan(supply, demand, bounds)
        rows.append((calls[0], time.process_time() - start, seed, len(supply), sum(d.count for d in demand)))
    rows.sort(reverse=True)
    print("plans at most: %d (ROUNDS %d x YIELD_PASSES %d = %d)" % (
        rows[0][0], compose.ROUNDS, planner.YIELD_PASSES, compose.ROUNDS * planner.YIELD_PASSES))
    for n, cpu, seed, gpus, asked in rows[:5]:
        print("seed %d: %d GPUs, %d instances asked: %d plans, %.2f s CPU (%.2f s a plan)"
              % (seed, gpus, asked, n, cpu, cpu / n))
    slowest = max(rows, key=lambda r: r[1])
    print("slowest: seed %d, %d plans, %.2f s CPU" % (slowest[2], slowest[0], slowest[1]))


if __name__ == "__main__":
    main(sys.argv)
