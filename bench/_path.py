"""Put the repository root on sys.path, so ``python bench/<x>.py`` imports the product and tests/support, and
keep temporary files where the node runner trusts them (tests/support/temproot.py: not under /tmp). Also the
one way a benchmark runs a part of itself in a child process (:func:`run_child`: its own peak memory)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.support.temproot import use_private_tmp  # noqa: E402

use_private_tmp()


def run_child(script: str, *args: str) -> dict:
    """``python SCRIPT ARGS`` without the ACK_MIG_ settings of this process; its last stdout line as JSON.
    RuntimeError with its last stderr line when it fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACK_MIG_")}
    proc = subprocess.run([sys.executable, os.path.abspath(script)] + list(args), capture_output=True,
                          text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["no output"])[-1])
    return json.loads(proc.stdout.strip().splitlines()[-1])
