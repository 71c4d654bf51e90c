import pynvml
import pytest

from node_bootstrap.driver.sim.driver import new_state
from node_bootstrap.driver.sim.faults import parse_faults
from node_bootstrap.driver.sim.library import SimNvmlLibrary
from node_bootstrap.driver.sim.store import SimStore
from tests.support.kubeapi import kube_api  # noqa: F401  (the local HTTPS API server fixture)


@pytest.fixture
def sim(tmp_path):
    """``sim(gpu_key, count, faults, mig)``: the simulated driver installed under the real pynvml, with a
    fresh state file (MIG mode on from the start when ``mig``); pynvml is released after the test."""
    def make(gpu_key="A100-SXM4-40GB", count=1, faults=(), mig=False):
        store = SimStore(str(tmp_path / "state.json"))
        state = new_state(gpu_key, count)
        for gpu in state["gpus"]:
            gpu["mig_current"] = gpu["mig_pending"] = int(mig)
        store.init(state)
        lib = SimNvmlLibrary(store, parse_faults(faults))
        lib.install()
        return lib
    yield make
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()


@pytest.fixture
def holders():
    """Processes that hold (temporary) GPU device files; stopped after the test whatever happened."""
    started = []
    yield started
    for holder in started:
        holder.stop()
