"""functions.kube.nodes.MemoryKube (the snapshot and demo backend) follows the same policy/v1 selector rule as
the real API server and the test double: the empty selector ``{}`` covers every pod of its namespace, a
missing selector none (tests/kube_real/test_double_agrees.py checks the double against the real server)."""

import pytest

from functions.kube.client import ApiError
from functions.kube.nodes import MemoryKube


@pytest.mark.parametrize("selector,refused", [({}, True), (None, False)])
def test_an_empty_budget_selector_covers_the_namespace_a_missing_one_nothing(selector, refused):
    kube = MemoryKube()
    kube.add_pod("team", "p", "node-a", labels={"app": "x"}, owner="ReplicaSet")
    kube.add_pdb("team", "b", {}, min_available=1)
    kube.pdbs[0]["spec"]["selector"] = selector
    if refused:
        with pytest.raises(ApiError) as caught:
            kube.evict("team", "p")
        assert caught.value.status == 429
        assert ("team", "p") in kube.pods
    else:
        kube.evict("team", "p")
        assert ("team", "p") not in kube.pods
