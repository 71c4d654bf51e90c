"""Event fuzzing: mutated sample events, random JSON, wrong types, non-UTF-8 bytes and huge values, through
``run_event`` (snapshot + real delivery executor with a recording transport) and through the FC handler
(CS API on the loopback emulator, dry run). Every input ends in a typed result, never an exception or a
traceback. ``bench/run.py --fuzz`` runs the same checks with 10,000 examples."""

import json

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz.harness import RAW_EVENTS, SAMPLES, check_event, check_handler, handler_environment

SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]


@pytest.mark.parametrize("name", [name for name, _ in SAMPLES])
def test_every_sample_event_passes_the_checks_unchanged(name):
    # The harness must accept good input: the samples end done or skip, never error.
    assert check_event(dict(SAMPLES)[name]) in ("done", "skip")


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW_OK)
@given(RAW_EVENTS)
def test_any_event_ends_in_a_typed_result(raw):
    check_event(raw)


@pytest.fixture(scope="module")
def cs_api():
    with handler_environment() as emu:
        yield emu


def test_the_handler_answers_the_samples_through_the_emulator(cs_api):
    # The emulator's kubeconfig names an API server that is not there (nothing listens): the scale-out's nodes
    # wait for the Kubernetes API, so the event ends retry (the handler raises for FC) after asking the CS API.
    assert check_handler(json.dumps(dict(SAMPLES)["ess_scale_out_success.json"]).encode()) == "retry"
    assert cs_api.calls("DescribeClusterNodes") >= 1  # the CS API was really asked
    assert check_handler(json.dumps(dict(SAMPLES)["ess_lifecycle_test.json"]).encode()) == "skip"


@settings(max_examples=100, deadline=None, suppress_health_check=SLOW_OK + [HealthCheck.function_scoped_fixture])
@given(raw=RAW_EVENTS)
def test_the_handler_never_raises_or_prints_a_traceback(cs_api, raw):
    check_handler(raw)
