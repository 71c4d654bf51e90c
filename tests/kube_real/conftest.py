"""Fixtures of the tests against the real kube-apiserver (marker ``kube_real``): one control plane per
pytest process (each xdist worker starts its own, with its own ports and directory, on first use: a few
seconds), stopped at the end of the session.

The binary is built by ``make controlplane`` (``make test`` runs it) into
``.cache/controlplane/<kubernetes version>/controlplane``. Without it the tests are skipped with one reason
(pytest's summary folds them into one line), except under CI (``CI=true``), where a missing binary fails
them: CI must run them.
"""

import os
import shutil

import pytest

from tests.kube_real import controlplane

# The user deploy/rbac.yaml binds: the hook's credential in these tests.
RBAC_DOCS = controlplane.rbac_documents()


def _missing_reason(binary):
    go = shutil.which("go") or (os.path.exists("/usr/local/go/bin/go") and "/usr/local/go/bin/go")
    why = ("no Go toolchain to build it (Go >= 1.26, then `make controlplane`)" if not go
           else "not built yet: `make controlplane` (minutes, once per Kubernetes version)")
    return ("the kube-apiserver tests (tests/kube_real, -m kube_real) are skipped: the test control plane %s "
            "is missing, %s" % (os.path.relpath(binary, controlplane.ROOT), why))


BINARY = controlplane.binary_path()
MISSING = "" if os.access(BINARY, os.X_OK) else _missing_reason(BINARY)
HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    if MISSING and os.environ.get("CI") != "true":
        for item in items:
            if str(item.path).startswith(HERE + os.sep) and item.get_closest_marker("kube_real"):
                item.add_marker(pytest.mark.skip(reason=MISSING))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Every skip for the missing binary reported at one place, so pytest's summary folds them into one
    line (it folds equal location and reason; a skip mark's location is each test's own)."""
    report = yield
    if MISSING and report.skipped and isinstance(report.longrepr, tuple) and MISSING in report.longrepr[2]:
        report.longrepr = (os.path.relpath(__file__, controlplane.ROOT), None, MISSING)
    return report


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    """The running control plane (tests.kube_real.controlplane.ControlPlane), deploy/rbac.yaml applied."""
    if MISSING:  # only under CI=true: the tests were not skipped
        pytest.fail("CI=true: " + MISSING, pytrace=False)
    plane = controlplane.start(BINARY, str(tmp_path_factory.mktemp("controlplane")))
    try:
        plane.apply_rbac(RBAC_DOCS)
        yield plane
    finally:
        controlplane.stop_process(plane.process)


@pytest.fixture(params=["double", pytest.param("real", marks=pytest.mark.kube_real)])
def world(request, tmp_path):
    """The scenario's API server: the project's double, then the real one (tests/kube_real/worlds.py)."""
    from tests.kube_real.worlds import DoubleWorld, RealWorld

    made = DoubleWorld(tmp_path) if request.param == "double" else \
        RealWorld(request.getfixturevalue("control_plane"), tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def ns(control_plane):
    """A namespace of this test's own."""
    return control_plane.namespace()
