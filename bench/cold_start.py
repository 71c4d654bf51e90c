"""Cold start of the FC handler on an irrelevant event (the ESS lifecycle hook test notification).

Prints JSON: ``cold_start_skip_ms`` is the median wall time of fresh Python processes that import
``functions.handler`` and handle the event; ``cold_start_ratio`` divides it by the median of fresh
processes that only ``import pydantic`` (the floor the function cannot go below). Also reports which
heavy modules the skip path loaded (it must be none). Importable: ``measure(runs=...) -> dict``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVENT = os.path.join(ROOT, "tests", "events", "ess_lifecycle_test.json")
HEAVY = ("alibabacloud_cs20151215", "alibabacloud_tea_openapi", "aliyunsdkcore", "paramiko", "darabonba")

HANDLER_SNIPPET = """
import json, sys
from functions.handler import handler
out = json.loads(handler(open(%r, "rb").read(), None))
assert out["outcome"] == "skip", out
heavy = sorted(m for m in sys.modules if m.split(".")[0] in %r)
sys.stderr.write(json.dumps(heavy))
""" % (EVENT, HEAVY)
PYDANTIC_SNIPPET = "import pydantic"


def _run(snippet):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACK_MIG_")}
    env["ACK_MIG_LOG_LEVEL"] = "ERROR"  # keep the skip line out of the timing's stdout
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", snippet], cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = (time.perf_counter() - started) * 1000
    if proc.returncode != 0:
        raise RuntimeError("cold start probe failed: %s" % proc.stderr.strip().splitlines()[-1:])
    return elapsed, proc.stderr


def measure(runs=7):
    """Median milliseconds of ``runs`` fresh processes each way, interleaved so drift hits both."""
    skip, floor, heavy = [], [], []
    for _ in range(runs):
        ms, err = _run(HANDLER_SNIPPET)
        skip.append(ms)
        heavy = json.loads(err or "[]")
        floor.append(_run(PYDANTIC_SNIPPET)[0])
    skip_ms, floor_ms = statistics.median(skip), statistics.median(floor)
    return {
        "cold_start_skip_ms": round(skip_ms, 1),
        "cold_start_pydantic_ms": round(floor_ms, 1),
        "cold_start_ratio": round(skip_ms / floor_ms, 2),
        "cold_start_runs": runs,
        "cold_start_heavy_modules": heavy,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
