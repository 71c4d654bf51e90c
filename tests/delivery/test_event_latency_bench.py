"""A small sample of bench/event_latency.py (the numbers are the benchmark's): every pod of a short burst of
events, and of the timer's ticks, gets its instance through the real function path, and the events of the
burst that arrived while a plan ran were coalesced into fewer plans than events. Nothing here is timed."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import event_latency  # noqa: E402

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]


def test_every_pod_of_a_burst_and_of_the_timer_gets_its_instance():
    events = event_latency.run_events(4, 0.0, 3, 0.0)  # four events at once
    assert events["served"] == 4 and events["invocations"] == 4, events
    assert events["outcomes"] == ["done", "skip"] and events["coalesced"] >= 1
    assert events["applies"] < 4  # coalesced: fewer plans that changed the node than events
    timer = event_latency.run_timer(2, 3)
    assert [row["served"] for row in timer] == [2, 2]
    assert [row["mode"] for row in timer] == ["timer @every 1m", "timer @every 10m"]
