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


# ---- loopback only ----
# The tests talk to loopback emulators and servers alone; nothing may reach another address, not even by
# mistake (a default endpoint left in a test, an SDK's fallback host). Every socket this process opens goes
# through these guards: a connection to, or a name lookup of, anything but loopback fails the call at once
# with a message naming the address, instead of leaving the machine. Child processes (sshd, pip) are not
# covered: they are started by the tests with loopback addresses only.
import ipaddress  # noqa: E402
import socket  # noqa: E402

_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def _loopback(host) -> bool:
    if host is None or host == "":
        return True  # a wildcard bind or the local host's own sockets
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    host = str(host).strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


class NonLoopbackTraffic(OSError):
    """A test tried to reach an address outside loopback."""


_real_getaddrinfo = socket.getaddrinfo
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guarded_getaddrinfo(host, *args, **kwargs):
    if not _loopback(host):
        raise NonLoopbackTraffic("tests reach loopback only: name lookup of %r refused (tests/conftest.py)" % (host,))
    return _real_getaddrinfo(host, *args, **kwargs)


def _check_address(sock, address):
    if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) and \
            not _loopback(address[0]):
        raise NonLoopbackTraffic("tests reach loopback only: connection to %r refused (tests/conftest.py)"
                                 % (address[0],))


def _guarded_connect(self, address):
    _check_address(self, address)
    return _real_connect(self, address)


def _guarded_connect_ex(self, address):
    _check_address(self, address)
    return _real_connect_ex(self, address)


socket.getaddrinfo = _guarded_getaddrinfo
socket.socket.connect = _guarded_connect
socket.socket.connect_ex = _guarded_connect_ex


# ---- the host untouched ----
# Nodes are simulated: every test gives the node its own directories under tmp_path. The paths a real node
# uses (the bundle cache, the node lock) must not appear on the machine that runs the tests; a test that
# runs the node script without its own ACK_MIG_NODE_ROOT or --lock-file would create them here.
import os  # noqa: E402

import pytest  # noqa: E402

HOST_PATHS = ("/var/lib/ack-mig-hook", "/run/ack-mig-hook.lock")


@pytest.fixture(autouse=True)
def _host_untouched():
    before = [p for p in HOST_PATHS if os.path.lexists(p)]
    yield
    created = [p for p in HOST_PATHS if os.path.lexists(p) and p not in before]
    assert not created, "this test created %s on the host: give the node its own directories" % ", ".join(created)


# ---- a temporary directory the node runner trusts ----
# /tmp is world-writable, and the node runner refuses a node directory under it (sshd's StrictModes rule):
# the tests' temporary files live under the repository's .pytest-tmp (tests/support/temproot.py; pytest still
# makes pytest-of-<user>/pytest-<n> there and keeps the last three).
from tests.support.temproot import use_private_tmp  # noqa: E402

use_private_tmp()

# Human output is fitted to COLUMNS when it is set, else to the terminal, else 80 columns (a pipe:
# functions/commands/terminal.py). Tests read what a command says, whole: they run with wide columns. How the
# text fits 80 columns, on a pipe and on a terminal, is tests/function/test_terminal_width.py's, which sets
# its own COLUMNS (or none) for each run. Set per test, not for the session: pytest sizes its own report by
# COLUMNS too.
@pytest.fixture(autouse=True)
def _wide_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")


# A pod event's holder renews its plan marker from a thread every coalesce.RENEW_S of wall-clock time
# (functions/rollout/plan_marker.py's Renewal). The kill and fail-once matrices count an invocation's writes and
# fail each in turn: a renewal landing at whatever moment a slow run reaches would move every write after it.
# So renewals wait for the test to ask: the tests of the renewal set the interval they drive it with
# (tests/delivery/test_pod_events.py::test_a_live_holder_renews_its_hold_and_keeps_coalescing_past_it).
@pytest.fixture(autouse=True)
def _plan_marker_renewal_held(monkeypatch):
    from functions.decision import coalesce
    from functions.rollout import plan_claim

    monkeypatch.setattr(coalesce, "RENEW_S", 10.0 ** 6)
    # the same for a planning claim's renewals (plan_claim.ClaimRenewal, every CLAIM_RENEW_S): driven by
    # tests/rollout/test_plan_claim_renewal.py
    monkeypatch.setattr(plan_claim, "CLAIM_RENEW_S", 10.0 ** 6)
