"""Pod traces for the demand benchmark: arrivals and departures of MIG pods, seeded, per trace family.

The mixes are SYNTHETIC, modelled on the published setups (no trace of either paper is public here):

* ``inference``: many small model servers on small slices, the setting of MIG-serving (Tan et al., "Serving
  DNN Models with Multi-Instance GPUs: A Case of the Reconfigurable Machine Scheduling Problem", 2021,
  arXiv:2109.11067), whose workloads are sets of inference services each sized to one MIG slice: mostly 1g
  and 2g, a few 3g; services scale in and out over minutes to hours.
* ``mixed``: training jobs on big slices beside inference on small ones, as in MISO (Li et al., SoCC 2022),
  whose job mixes combine training of varied sizes with small jobs: long 4g/7g training pods, short 1g/2g
  inference, 3g in between.
* ``diurnal``: the share of the two mixes above shifts over a day: inference in the day, training at
  night (the daily pattern production GPU clusters report, e.g. Alibaba PAI's trace study, Weng et al.,
  NSDI 2022; here a sine over 24 hours).

Profiles are named by slice class (``1g``, ``1g2`` = double-memory 1g, ``2g``, ``3g``, ``4g``, ``7g``) and
mapped to a GPU model's names by NVML profile id, so one trace runs on A100-40GB, A100-80GB and H100-80GB.
"""

import math
import random
from typing import Dict, List, NamedTuple

# Slice class -> NVML profile id (the same on every 8-slot GPU: catalogue.py's _eight_slot_profiles).
CLASS_IDS = {"1g": 19, "1g2": 15, "2g": 14, "3g": 9, "4g": 5, "7g": 0}

# (share of arrivals, mean lifetime in steps) per class; one step is half an hour.
INFERENCE = {"1g": (0.55, 6.0), "1g2": (0.10, 6.0), "2g": (0.25, 8.0), "3g": (0.10, 10.0)}
TRAINING_MIX = {"1g": (0.30, 3.0), "2g": (0.20, 4.0), "3g": (0.20, 8.0), "4g": (0.10, 16.0), "7g": (0.20, 20.0)}
FAMILIES = ("inference", "mixed", "diurnal")
STEPS = 48  # a day


class PodEvent(NamedTuple):
    key: str
    owner: str
    klass: str
    arrive: int  # step the pod is created (pending)
    leave: int  # step it is deleted


def _compute(klass: str) -> int:
    return {"1g": 1, "1g2": 1, "2g": 2, "3g": 3, "4g": 4, "7g": 7}[klass]


def _mean_load(mix: Dict[str, tuple]) -> float:
    """Mean compute-slice-steps one arrival brings."""
    return sum(share * life * _compute(k) for k, (share, life) in mix.items())


def _mix_at(family: str, step: int) -> Dict[str, tuple]:
    if family == "inference":
        return INFERENCE
    if family == "mixed":
        return TRAINING_MIX
    day = 0.5 + 0.5 * math.sin(2 * math.pi * step / STEPS)  # 1 at midday, 0 at midnight
    out = {}
    for mix, weight in ((INFERENCE, day), (TRAINING_MIX, 1 - day)):
        for k, (share, life) in mix.items():
            s, l = out.get(k, (0.0, life))
            out[k] = (s + share * weight, life)
    return out


def trace(family: str, gpus: int, seed: int, steps: int = STEPS, load: float = 0.8) -> List[PodEvent]:
    """Pods arriving as a Poisson process sized so the alive pods use about ``load`` of ``gpus`` GPUs'
    compute slices, lifetimes exponential; deterministic for a seed."""
    rng = random.Random("%s/%d/%d" % (family, gpus, seed))
    events = []
    owners = {k: ["deployment %s/%s-%d" % ("train" if k in ("4g", "7g") else "serve", k, i) for i in range(4)]
              for k in CLASS_IDS}
    n = 0
    for step in range(steps):
        mix = _mix_at(family, step)
        rate = load * gpus * 7 / _mean_load(mix)  # arrivals per step: Little's law on compute slices
        if step == 0:
            rate *= 4  # start near steady state instead of from an empty pool
        count = _poisson(rng, rate)
        classes, weights = zip(*[(k, v[0]) for k, v in sorted(mix.items())])
        for _ in range(count):
            klass = rng.choices(classes, weights)[0]
            life = max(1, int(round(rng.expovariate(1.0 / mix[klass][1]))))
            n += 1
            events.append(PodEvent("ns/p%06d" % n, rng.choice(owners[klass]), klass, step, step + life))
    return events


def _poisson(rng: random.Random, mean: float) -> int:
    if mean > 50:  # normal approximation: exact enough for a load generator, and O(1)
        return max(0, int(round(rng.gauss(mean, math.sqrt(mean)))))
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1
