"""Hostile node pool label values through the whole function path: snapshot -> run_event (timer and
scale-out events) -> decisions -> the real delivery executor -> a transport that records each node's
script. A label reaches a node only if it validated, and then only inside the base64 request: the shell
text is byte for byte the template's. ``bench/run.py --fuzz`` runs 10,000 examples."""

import pytest
from hypothesis import HealthCheck, example, given, settings

from tests.fuzz.harness import HOSTILE_LABELS, LABEL_KEYS, SEQUENCE_KEY, SIZE_KEY, check_label


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LABEL_KEYS, HOSTILE_LABELS)
@example((SEQUENCE_KEY,), "$(reboot)")
@example((SEQUENCE_KEY,), "1g.5gb'; reboot; echo '")
@example((SIZE_KEY,), "1g.5gb\nACK_MIG_RUNNER_EOF\nreboot")
@example((SEQUENCE_KEY,), "1g.5gb\x00-2g.10gb")
@example((SEQUENCE_KEY,), "1g.5gb-" * 1500)
def test_no_hostile_label_reaches_a_node(keys, value):
    report = check_label(keys, value)
    assert report.leaks == []


def test_valid_labels_do_reach_the_nodes():
    # The check above would pass vacuously if nothing were ever delivered.
    assert check_label((SEQUENCE_KEY,), "3g.20gb-2g.10gb-1g.5gb").delivered == 6
    assert check_label((SIZE_KEY,), " 1G.5GB ").delivered == 6  # case and spaces are accepted
    # an H200 profile: refused on the A100 pool, accepted for the open-family pool (its node decides), which
    # only the timer event reaches
    assert check_label((SEQUENCE_KEY,), "1g.18gb").delivered == 1
    assert check_label((SEQUENCE_KEY, SIZE_KEY), "1g.5gb").delivered == 0  # both labels: refused


def test_a_valid_label_with_a_line_break_still_gives_one_line_reasons():
    report = check_label((SEQUENCE_KEY,), "1g.5gb\n-2g.10gb")
    assert report.delivered == 6 and report.leaks == []
    assert report.multiline_reasons == []
