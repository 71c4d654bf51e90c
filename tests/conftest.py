"""Plugins every test runs under, and the Hypothesis profiles for the whole suite (property tests:
tests/fuzz, core, delivery, node).

``ci``, the default and what ``make test`` runs: derandomized, so every property test draws the same
examples on every run and machine (seeded from the test itself); a red build is the code, never the luck
of the draw. No example database, no deadline and no too_slow health check: on a shared 2-core machine
timing is not stable, and nothing may depend on it. ``wide`` (``make fuzz``, or ``pytest
--hypothesis-profile=wide``): fresh random examples on every run, ``WIDE_FACTOR`` times as many as each
test asks for, with the example database under ``.hypothesis`` so a failure found once is tried first the
next time. A case ``wide`` finds is pinned in its test with ``@example`` (docs/development.md).
"""

from hypothesis import HealthCheck, settings

# Every API call a test makes through the loopback emulators is checked against the official SDK models.
pytest_plugins = ("tests.support.contract_plugin",)

WIDE_FACTOR = 10

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("wide", derandomize=False, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
# Loaded here, before any test module is imported, so each @settings(...) inherits it; the Hypothesis
# plugin's --hypothesis-profile option is applied after this and wins.
settings.load_profile("ci")


def pytest_collection_modifyitems(config, items):
    """Under ``wide``, each property test runs WIDE_FACTOR times its own ``max_examples`` (a test's
    ``@settings(max_examples=...)`` would otherwise override the profile's)."""
    if config.getoption("--hypothesis-profile", None) != "wide":
        return
    scaled = set()
    for item in items:
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        if not getattr(test, "is_hypothesis_test", False) or id(test) in scaled:
            continue  # a parametrized test is one function behind several items: scale it once
        scaled.add(id(test))
        # The attribute @given reads its settings from (Hypothesis' own pytest plugin sets it the same way).
        current = test._hypothesis_internal_use_settings
        test._hypothesis_internal_use_settings = settings(current, max_examples=current.max_examples * WIDE_FACTOR)
