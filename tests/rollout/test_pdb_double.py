"""The test API server's PodDisruptionBudgets as kube-apiserver and the disruption controller keep them:
an eviction reads the status the controller last wrote, spends one disruption and records the pod in
status.disruptedPods (pkg/registry/core/pod/storage/eviction.go checkAndDecrement); only the controller's
next sync (pkg/controller/disruption/disruption.go trySync) counts the pods again. Between two syncs a
budget is never overdrawn, whatever the pods do."""

import time

import pytest

from functions.kube.client import ApiError, KubeApi
from node_bootstrap.kube import load_kubeconfig


@pytest.fixture
def admin(kube_api, tmp_path):
    return KubeApi(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert())),
                   sleep=lambda s: None)


def _pods(api, count, ns="team"):
    for n in range(count):
        api.add_pod(ns, "p%d" % n, "node-a", labels={"app": "x"}, owner_kind="ReplicaSet")


def _refused(call, *args):
    with pytest.raises(ApiError) as caught:
        call(*args)
    return caught.value


def test_three_pods_under_max_unavailable_one_give_one_eviction_until_the_controller_syncs(kube_api, admin):
    kube_api.disruption_controller_auto = False
    _pods(kube_api, 3)
    kube_api.add_pdb("team", "b", {"app": "x"}, max_unavailable=1)
    admin.evict("team", "p0")
    status = admin.get("/apis/policy/v1/namespaces/team/poddisruptionbudgets/b")["status"]
    assert status["disruptionsAllowed"] == 0 and set(status["disruptedPods"]) == {"p0"}
    # a replacement comes up at once (its ReplicaSet): the stored status still allows nothing
    kube_api.add_pod("team", "p3", "node-b", labels={"app": "x"}, owner_kind="ReplicaSet")
    err = _refused(admin.evict, "team", "p1")
    assert err.status == 429 and err.budget
    kube_api.disruption_controller_step()  # the controller counts p1, p2, p3 healthy: one more may go
    status = admin.get("/apis/policy/v1/namespaces/team/poddisruptionbudgets/b")["status"]
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (3, 2, 1)
    assert "disruptedPods" not in status  # p0 is gone: its entry dropped
    admin.evict("team", "p1")
    assert _refused(admin.evict, "team", "p2").status == 429


def test_an_evicted_pod_that_never_goes_counts_as_disrupted_for_two_minutes(kube_api, admin):
    kube_api.disruption_controller_auto = False
    kube_api.graceful_evictions = False
    _pods(kube_api, 3)
    kube_api.add_pdb("team", "b", {"app": "x"}, min_available=2)
    admin.evict("team", "p0")
    kube_api.add_pod("team", "p0", "node-a", labels={"app": "x"}, owner_kind="ReplicaSet")  # same name, back
    now = time.time()
    kube_api.disruption_controller_step(now=now)
    status = kube_api.pdbs[("team", "b")]["status"]
    assert status["currentHealthy"] == 2 and status["disruptionsAllowed"] == 0  # p0 still in disruptedPods
    kube_api.disruption_controller_step(now=now + 121)  # DeletionTimeout passed: p0 counts again
    status = kube_api.pdbs[("team", "b")]["status"]
    assert status["currentHealthy"] == 3 and status["disruptionsAllowed"] == 1 and "disruptedPods" not in status


@pytest.mark.parametrize("spec,allowed", [({"min_available": "50%"}, 1), ({"max_unavailable": "34%"}, 2),
                                          ({"min_available": 3}, 0)])
def test_the_stored_status_is_what_evictions_spend(kube_api, admin, spec, allowed):
    kube_api.disruption_controller_auto = False
    _pods(kube_api, 3)
    kube_api.add_pdb("team", "b", {"app": "x"}, **spec)
    evicted = 0
    for n in range(3):
        try:
            admin.evict("team", "p%d" % n)
            evicted += 1
        except ApiError as exc:
            assert exc.status == 429 and exc.budget
    assert evicted == allowed
    listed = admin.get("/apis/policy/v1/namespaces/team/poddisruptionbudgets")["items"]
    assert [b["status"]["disruptionsAllowed"] for b in listed] == [0]
