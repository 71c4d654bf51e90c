"""Adversarial alternating demand for the auto pool (issue 35 item 5): one waiting pod asking 7g.80gb, then,
replaced, 3g.40gb, every tick, on a pool of one A100 80GB GPU whose every change is marked as the tick marks
it (functions/decision/claim_rules.py's table on the pool's Lease, written and read back each tick). Each
replaced pod starts its wait again, as a new pod does. Reports repartitions (a change that destroys an
instance: the node stops its device plugin and DCGM for it) per hour, with and without the dwell.

  python bench/demand_alternating.py [--ticks N] [--json]

The planner and the dwell are the function's (functions/decision/layout/planner.py, dwell.py); only the
node is simulated: a target's layout is what the GPU holds at the next tick.
"""

import argparse
import json
import sys
from typing import Dict, List

import _path  # noqa: F401

from functions.decision import claim_rules as pc
from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan
from functions.decision.layout.dwell import Dwell, plan_steady

MODEL = "NVIDIA A100-SXM4-80GB"
PROFILES = ("7g.80gb", "3g.40gb")
TICK_S = 60  # the template's AutoPoolSchedule: @every 1m
TICKS = 120  # two hours
GPU = ("node-a", 0)


def alternate(dwell_s: float, max_wait_s: float = 300, ticks: int = TICKS, tick_s: float = TICK_S,
              every: int = 1) -> Dict[str, float]:
    """The trace over ``ticks`` ticks; the pod's profile flips every ``every`` ticks (a new pod each time)."""
    held: List = []  # (profile, start) the GPU holds
    table = ""  # the Lease's change marks, as text
    repartitions = adds = 0
    for k in range(ticks):
        now = 1_000_000.0 + k * tick_s
        turn = k // every
        pod = PodDemand("adversary/serve-%d" % turn, "deployment adversary/serve", PROFILES[turn % 2])
        born = 1_000_000.0 + turn * every * tick_s
        changed = pc.read_changed(table, now)
        dwell = Dwell(changed, now, dwell_s, max_wait_s, {pod.key: now - born})
        supply = [GpuSupply(GPU[0], GPU[1], MODEL, tuple(Instance(p, s, False) for p, s in held))]
        result = plan_steady(plan, supply, [pod], Bounds(), dwell)
        marks = []
        for t in result.changes:
            repartitions += 1 if t.destroy else 0
            adds += 0 if t.destroy else 1
            held = list(t.layout)
            marks.append((t.node, t.index))
        table = pc.write_changed(changed, now, dwell_s, marks)
    hours = ticks * tick_s / 3600.0
    return {"dwell_s": dwell_s, "max_wait_s": max_wait_s, "ticks": ticks, "flip_every_ticks": every,
            "repartitions": repartitions, "adds": adds, "repartitions_per_hour": round(repartitions / hours, 1)}


def measure(ticks: int = TICKS) -> dict:
    runs = [alternate(0, ticks=ticks), alternate(600, ticks=ticks),
            alternate(0, ticks=ticks, every=10), alternate(600, ticks=ticks, every=10)]
    return {"alternating_runs": runs,
            "alternating_repartitions_per_hour_no_dwell": runs[0]["repartitions_per_hour"],
            "alternating_repartitions_per_hour_dwell": runs[1]["repartitions_per_hour"]}


def table(result: dict) -> str:
    lines = ["%-8s %-9s %-11s %6s %13s %5s %11s" % ("dwell s", "max wait", "flip every", "ticks", "repartitions",
                                                  "adds", "per hour")]
    for r in result["alternating_runs"]:
        lines.append("%-8d %-9d %-11s %6d %13d %5d %11.1f" % (
            r["dwell_s"], r["max_wait_s"], "%d tick(s)" % r["flip_every_ticks"], r["ticks"], r["repartitions"],
            r["adds"], r["repartitions_per_hour"]))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=TICKS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.ticks)
    if not args.json:
        print(table(result))
    print(json.dumps({k: v for k, v in result.items() if args.json or k != "alternating_runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
