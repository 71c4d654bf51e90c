"""Seeded random ticks of an auto pool: plan, carry the plan out, let the waiting pods bind, plan again on the
same remaining demand. A test helper (``tests/layout/test_planner_ticks.py`` runs a fixed sample of seeds) and
a script for many seeds:

    PYTHONPATH=. .venv/bin/python tests/layout/ticks.py 0 400

What it asserts of every tick after the first: no change undoes one the tick before made (an instance it
created destroyed, or one it destroyed created again on that GPU: the pool flaps while nothing in the demand
changes), and no instance in use is destroyed.

The pools: 1 to 3 nodes of 8 GPUs of one model, some with MIG off (whole GPUs, some of them busy), the others
with random layouts placed by the project's solver, some instances in use. The pods: waiting pods asking one
instance, several of one profile, several profiles, whole GPUs, or whole GPUs beside instances.

Binding is the project's model of kube-scheduler (docs/auto-pools.md, ``exact.after_binding``): in pod order
(namespace/name), a pod takes everything it asks on one node, the node with the most compute in use that has
it all (ties: the first by name), there from its GPUs with the most compute in use first (ties: the first).
"""

import random
import sys
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

from functions.decision.layout import WHOLE_GPU, Bounds, GpuSupply, Instance, Plan, PodDemand, plan
from node_bootstrap.mig.catalogue import find_gpu
from node_bootstrap.mig.solver import complete

MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")


def pool(rng: random.Random) -> Tuple[List[GpuSupply], Bounds]:
    name = rng.choice(MODELS)
    model = find_gpu(name)
    profiles = [p for p in model.profiles if "+me" not in p.name]
    off = rng.choice((0.0, 0.15, 0.3))
    supply = []
    for n in range(rng.randint(1, 3)):
        for index in range(8):
            node = "node-%d" % n
            if rng.random() < off:
                supply.append(GpuSupply(node, index, name, (), mig=False, busy=rng.random() < 0.4))
                continue
            placed = []  # type: list
            for _ in range(rng.randint(0, 5)):
                layout = complete(model, placed, [rng.choice(profiles)])
                if layout is not None:
                    placed = list(layout.instances)
            busy = rng.choice((0.0, 0.2, 0.5))
            supply.append(GpuSupply(node, index, name, tuple(
                Instance(i.profile.name, i.start, rng.random() < busy) for i in placed)))
    allowed = None if rng.random() < 0.7 else frozenset(rng.sample([p.name for p in profiles], 3))
    return supply, Bounds(profiles=allowed)


def pod_asks(rng: random.Random, supply: Sequence[GpuSupply]) -> List[PodDemand]:
    model = find_gpu(supply[0].model)
    names = [p.name for p in model.profiles if "+me" not in p.name and p.compute_slices < model.compute_slices]
    out = []  # type: List[PodDemand]
    for k in range(rng.randint(1, 10)):
        key, kind = "ns/p%02d" % k, rng.random()
        if kind < 0.45:  # one instance
            out.append(PodDemand(key, "deployment ns/a", rng.choice(names)))
        elif kind < 0.65:  # several of one profile
            out.append(PodDemand(key, "deployment ns/b", rng.choice(names), rng.randint(2, 3)))
        elif kind < 0.85:  # several profiles
            for name in rng.sample(names, 2):
                out.append(PodDemand(key, "deployment ns/c", name, rng.randint(1, 2)))
        elif kind < 0.93:  # whole GPUs
            out.append(PodDemand(key, "job ns/d", WHOLE_GPU, rng.randint(1, 2)))
        else:  # whole GPUs beside an instance
            out.append(PodDemand(key, "job ns/e", WHOLE_GPU, 1))
            out.append(PodDemand(key, "job ns/e", rng.choice(names)))
    return out


def applied(supply: Sequence[GpuSupply], result: Plan) -> List[GpuSupply]:
    """The pool once the plan is carried out: what it creates exists, idle; what it destroys is gone."""
    targets = {(t.node, t.index): t for t in result.targets}
    out = []
    for s in supply:
        t = targets[(s.node, s.index)]
        held = {(i.profile, i.start): i for i in s.instances}
        for key in t.destroy:
            del held[key]
        for name, start in t.create:
            held[(name, start)] = Instance(name, start, False)
        out.append(GpuSupply(s.node, s.index, s.model, tuple(held[k] for k in sorted(held, key=lambda x: x[1])),
                             s.mig, s.busy))
    return out


def bind(supply: List[GpuSupply], demand: Sequence[PodDemand]) -> Tuple[List[GpuSupply], List[PodDemand]]:
    """The waiting pods bound as the module text says; returns the pool after and the pods still waiting."""
    gpus = [[s, list(s.instances)] for s in supply]
    model = find_gpu(supply[0].model)
    size = {p.name: p.compute_slices for p in model.profiles}

    def compute(instances: Sequence[Instance]) -> int:
        return sum(size[i.profile] for i in instances if i.in_use)

    asks = {}  # type: Dict[str, Counter]
    for d in demand:
        asks.setdefault(d.key, Counter())[d.profile] += d.count
    waiting = set()
    for key in sorted(asks):
        wanted = asks[key]
        chosen = None  # type: Optional[Tuple[int, str]]
        for node in sorted({s.node for s in supply}):
            mine = [g for g in gpus if g[0].node == node]
            whole = sum(1 for s, _ in mine if not s.mig and not s.busy)
            idle = Counter(i.profile for s, inst in mine if s.mig and not s.busy for i in inst if not i.in_use)
            if whole < wanted[WHOLE_GPU] or any(idle[n] < c for n, c in wanted.items() if n != WHOLE_GPU):
                continue
            score = sum(compute(inst) for _, inst in mine) + sum(
                model.compute_slices for s, _ in mine if not s.mig and s.busy)
            if chosen is None or score > chosen[0]:
                chosen = (score, node)
        if chosen is None:
            waiting.add(key)
            continue
        mine = sorted((g for g in gpus if g[0].node == chosen[1]), key=lambda g: (-compute(g[1]), g[0].index))
        for name, count in wanted.items():
            for g in mine:
                s, inst = g
                if name == WHOLE_GPU:
                    if count and not s.mig and not s.busy:
                        g[0] = GpuSupply(s.node, s.index, s.model, s.instances, s.mig, True)
                        count -= 1
                    continue
                if not s.mig or s.busy:
                    continue
                for k, i in enumerate(inst):
                    if count and i.profile == name and not i.in_use:
                        inst[k] = Instance(i.profile, i.start, True)
                        count -= 1
    out = [GpuSupply(s.node, s.index, s.model, tuple(inst), s.mig, s.busy) for s, inst in gpus]
    return out, [d for d in demand if d.key in waiting]


def undone(before: Plan, after: Plan) -> List[str]:
    """The changes of ``after`` that undo one of ``before``'s, one line each."""
    made = {(t.node, t.index): t for t in before.targets}
    out = []
    for t in after.changes:
        was = made[(t.node, t.index)]
        back = (set(t.destroy) & set(was.create)) | (set(t.create) & set(was.destroy))
        if back:
            out.append("%s GPU %d: %s undoes %s (%s)" % (t.node, t.index, t.layout, was.layout, sorted(back)))
    return out


def check(seed: int, ticks: int = 3) -> List[str]:
    """The problems found in ``ticks`` ticks of the pool and pods the seed draws (empty: none)."""
    rng = random.Random(seed)
    supply, limits = pool(rng)
    demand = pod_asks(rng, supply)
    problems, last = [], None  # type: List[str], Optional[Plan]
    for tick in range(ticks):
        result = plan(supply, demand, limits, previous=last)
        in_use = {(s.node, s.index, i.profile, i.start) for s in supply for i in s.instances if i.in_use}
        for t in result.changes:
            for name, start in t.destroy:
                if (t.node, t.index, name, start) in in_use:
                    problems.append("tick %d: %s GPU %d destroys %s@%d, in use" % (tick, t.node, t.index, name, start))
        if last is not None:
            problems.extend("tick %d: %s" % (tick, line) for line in undone(last, result))
        if not result.changes:
            break
        supply, demand = bind(applied(supply, result), demand)
        last = result
    return problems


def main(argv: Sequence[str]) -> int:
    first, last = int(argv[0]), int(argv[1])
    bad = 0
    for seed in range(first, last):
        found = check(seed)
        if found:
            bad += 1
            print("seed %d:" % seed, *found, sep="\n  ")
    print("%d of %d seeds with problems" % (bad, last - first))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
