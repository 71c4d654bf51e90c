import pytest

from tests.support.kubeapi import kube_api  # noqa: F401  (the local HTTPS API server fixture)


@pytest.fixture
def holders():
    """Processes that hold (temporary) GPU device files; stopped after the test whatever happened."""
    started = []
    yield started
    for holder in started:
        holder.stop()
