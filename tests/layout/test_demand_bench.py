"""A small sample of bench/demand.py (the full runs are in the benchmark): an 8-GPU pool over a quarter
of a day of the mixed family. Nothing is evicted, nothing flaps, every pod is served in its step, and the
planner never beats the integer program's optimum (which would mean a wrong bound or a wrong count)."""

import os
import sys

import pytest

pytest.importorskip("highspy")  # the dev extra's: the integer program of the optimum
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import demand  # noqa: E402


def test_a_short_replay_evicts_nothing_and_stays_at_or_above_the_optimum():
    result = demand.replay("mixed", "A100-80GB", 8, seed=3, steps=12)
    assert result["pods"] > 10
    assert result["evicted"] == 0 and result["flaps"] == 0 and result["unserved_pod_steps"] == 0
    assert result["optimum_exact"] and 0 < result["optimum_gpus"] <= result["planner_gpus"]
    assert result["created"] > 0
