"""Fuzzing at volume: the checks of tests/fuzz with ``examples`` inputs each (10,000 by default): raw
events through ``run_event`` and through the FC handler, hostile labels through the function path.

Hypothesis generates the inputs (the same strategies as the CI tests); here a failing input does not
stop the run: it is counted and the first few are kept, so the report says how many crashes there were
and which hostile labels reached delivery. Targets: 0 and 0.
"""

import json
import sys
import time
import traceback
from collections import Counter

import _path  # noqa: F401

from hypothesis import HealthCheck, Phase, given, settings

from tests.fuzz.harness import (HOSTILE_LABELS, LABEL_KEYS, RAW_EVENTS, check_event, check_handler, check_label,
                                handler_environment)


def _settings(examples):
    return settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))


def events(examples, prefix="fuzz_events", check=check_event):
    outcomes, crashes = Counter(), []

    @_settings(examples)
    @given(RAW_EVENTS)
    def run(raw):
        try:
            outcomes[check(raw)] += 1
        except Exception:  # noqa: BLE001 - counted and reported, the run goes on
            crashes.append(traceback.format_exc(limit=3)[-600:])

    started = time.perf_counter()
    run()
    return {prefix + "_examples": sum(outcomes.values()) + len(crashes), prefix + "_crashes": len(crashes),
            prefix + "_outcomes": dict(outcomes), prefix + "_s": round(time.perf_counter() - started, 1),
            prefix + "_crash_samples": crashes[:3]}


def handler_events(examples):
    """The same inputs through the FC entry point, the CS API answered by the loopback emulator."""
    with handler_environment():
        return events(examples, "fuzz_handler", check_handler)


def labels(examples):
    counts, crashes, leaks, multiline = Counter(), [], [], 0

    @_settings(examples)
    @given(LABEL_KEYS, HOSTILE_LABELS)
    def run(keys, value):
        try:
            report = check_label(keys, value)
        except Exception:  # noqa: BLE001 - counted and reported, the run goes on
            crashes.append(traceback.format_exc(limit=3)[-600:])
            return
        nonlocal multiline
        counts["delivered" if report.delivered else "refused"] += 1
        leaks.extend(report.leaks)
        multiline += bool(report.multiline_reasons)

    started = time.perf_counter()
    run()
    return {"fuzz_labels_examples": sum(counts.values()) + len(crashes), "fuzz_labels_crashes": len(crashes),
            "fuzz_labels_reached_delivery_unvalidated": len(leaks), "fuzz_labels_outcomes": dict(counts),
            "fuzz_labels_multiline_reasons": multiline, "fuzz_labels_s": round(time.perf_counter() - started, 1),
            "fuzz_labels_crash_samples": crashes[:3], "fuzz_labels_leak_samples": leaks[:3]}


def measure(examples=10_000):
    out = events(examples)
    out.update(handler_events(examples))
    out.update(labels(examples))
    return out


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    print(json.dumps(measure(count), indent=2))
