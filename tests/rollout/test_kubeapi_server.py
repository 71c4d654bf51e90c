"""The test API server answers as kube-apiserver does where the hook depends on it (each rule's upstream
source is in tests/support/kubeapi.py and kubeselect.py): seen through a client that never retries."""

import pytest

from functions.kube.client import ApiError, KubeApi
from node_bootstrap.kube import load_kubeconfig
from tests.support import kubeselect


@pytest.fixture
def admin(kube_api, tmp_path):
    return KubeApi(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert())),
                   attempts=1)


def raises(fn, *args):
    with pytest.raises(ApiError) as err:
        fn(*args)
    return err.value


def test_every_object_has_a_resource_version_and_every_write_moves_it(kube_api, admin):
    kube_api.add_node("node-a")
    first = admin.get_node("node-a")["metadata"]["resourceVersion"]
    second = admin.patch_node("node-a", {"metadata": {"labels": {"x": "1"}}})["metadata"]["resourceVersion"]
    kube_api.add_pod("team", "p", "node-a")
    assert first != second and kube_api.pods[("team", "p")]["metadata"]["resourceVersion"] not in (first, second)
    listed = admin.request("GET", "/api/v1/nodes")
    assert listed["metadata"]["resourceVersion"] and "kind" not in listed["items"][0]  # list items carry no kind


def test_a_patch_or_update_on_a_stale_resource_version_is_409(kube_api, admin):
    kube_api.add_node("node-a")
    seen = admin.get_node("node-a")
    kube_api.label_node("node-a", {"someone": "else"})  # another writer in between
    stale = {"metadata": {"resourceVersion": seen["metadata"]["resourceVersion"], "labels": {"mine": "1"}}}
    err = raises(admin.patch_node, "node-a", stale)
    assert err.status == 409 and err.reason == "Conflict" and "the object has been modified" in str(err)
    assert "mine" not in kube_api.nodes["node-a"]["metadata"]["labels"]
    fresh = admin.get_node("node-a")
    assert admin.patch_node("node-a", dict(stale, metadata=dict(stale["metadata"], resourceVersion=fresh[
        "metadata"]["resourceVersion"])))["metadata"]["labels"]["mine"] == "1"
    assert admin.patch_node("node-a", {"metadata": {"labels": {"blind": "1"}}})  # no version: always applies
    put = dict(fresh, metadata=dict(fresh["metadata"], labels={"replaced": "1"}))
    assert raises(admin.request, "PUT", "/api/v1/nodes/node-a", put).status == 409
    put["metadata"]["resourceVersion"] = admin.get_node("node-a")["metadata"]["resourceVersion"]
    assert admin.request("PUT", "/api/v1/nodes/node-a", put)["metadata"]["labels"] == {"replaced": "1"}


def test_lists_page_with_limit_and_continue_and_a_compacted_token_is_410(kube_api, admin):
    for n in range(5):
        kube_api.add_node("node-%d" % n)
    page = admin.request("GET", "/api/v1/nodes", query={"limit": "2"})
    assert [i["metadata"]["name"] for i in page["items"]] == ["node-0", "node-1"]
    assert page["metadata"]["remainingItemCount"] == 3
    kube_api.add_node("node-00")  # a consistent snapshot: the next pages do not show it
    token = page["metadata"]["continue"]
    second = admin.request("GET", "/api/v1/nodes", query={"limit": "2", "continue": token})
    assert [i["metadata"]["name"] for i in second["items"]] == ["node-2", "node-3"]
    kube_api.compact()
    err = raises(admin.request, "GET", "/api/v1/nodes", None, "application/json",
                 {"limit": "2", "continue": second["metadata"]["continue"]})
    assert (err.status, err.reason) == (410, "Expired") and "too old to display a consistent list" in str(err)
    # the client's full listing restarts then and reads every page
    kube_api.on_list_page = lambda path, continued: kube_api.compact() if not continued and not seen else None
    seen = []
    names = KubeApi(admin.config(), page=2).list_nodes(reduce=lambda n: seen.append(1) or n["metadata"]["name"])
    assert names == ["node-0", "node-00", "node-1", "node-2", "node-3", "node-4"]


def test_set_based_label_selectors(kube_api, admin):
    kube_api.add_node("a", labels={"pool": "np-1", "gpu": "a100"})
    kube_api.add_node("b", labels={"pool": "np-2"})
    kube_api.add_node("c", labels={})

    def names(selector):
        return [n["metadata"]["name"] for n in admin.list_nodes(selector)]

    assert names("pool in (np-1,np-2)") == ["a", "b"]
    assert names("pool notin (np-1)") == ["b", "c"]  # notin also matches nodes without the key
    assert names("pool,!gpu") == ["b"]
    assert names("pool==np-1,gpu=a100") == ["a"] and names("pool!=np-1") == ["b", "c"]
    assert raises(admin.list_nodes, "pool in ()").status == 400
    assert raises(admin.request, "GET", "/api/v1/pods", None, "application/json",
                  {"fieldSelector": "spec.unknown=x"}).status == 400


def test_a_granted_eviction_is_201_and_pending_or_terminating_pods_skip_the_budget(kube_api, admin):
    kube_api.add_pod("team", "run", "node-a", labels={"app": "x"}, owner_kind="ReplicaSet")
    kube_api.add_pod("team", "wait", "node-a", labels={"app": "x"}, phase="Pending", owner_kind="ReplicaSet")
    kube_api.add_pdb("team", "all", {"app": "x"}, min_available=5)  # allows nothing
    err = raises(admin.evict, "team", "run")
    assert err.status == 429 and err.budget and not err.throttled and err.retry_after is None
    assert "The disruption budget all needs 5 healthy pods and has 1 currently" in str(err)
    admin.evict("team", "wait")  # Pending: deleted without a budget check
    assert kube_api.requests[-1].status == 201 and ("team", "wait") not in kube_api.pods
    kube_api.graceful_evictions = True
    kube_api.pdbs.clear()
    admin.evict("team", "run")
    assert kube_api.pods[("team", "run")]["metadata"]["deletionTimestamp"]
    kube_api.add_pdb("team", "all", {"app": "x"}, min_available=5)
    admin.evict("team", "run")  # terminating: no budget check either
    assert raises(admin.evict, "team", "gone").status == 404


@pytest.mark.parametrize("spec,pods,allowed", [
    ({"min_available": 2}, 3, 1),
    ({"min_available": "50%"}, 3, 1),  # ceil(1.5) = 2 desired
    ({"max_unavailable": 1}, 3, 1),
    ({"max_unavailable": "34%"}, 3, 2),  # ceil(1.02) = 2 may be unavailable
    ({"max_unavailable": 0}, 3, 0),
])
def test_budgets_count_as_the_disruption_controller(kube_api, spec, pods, allowed):
    for n in range(pods):  # a scaled budget counts controllers' replicas: pods without one would allow none
        kube_api.add_pod("team", "p%d" % n, "node-a", labels={"app": "x"}, owner_kind="ReplicaSet")
    kube_api.add_pdb("team", "b", {"app": "x"}, **spec)
    assert kube_api.budget_status("team", "b")["disruptionsAllowed"] == allowed


def test_budget_selectors_expressions_empty_and_several(kube_api, admin):
    kube_api.add_pod("team", "p", "node-a", labels={"app": "x", "tier": "gpu"}, owner_kind="ReplicaSet")
    kube_api.add_pdb("team", "empty", {}, min_available=9)
    kube_api.pdbs[("team", "empty")]["spec"].pop("selector")  # no selector selects nothing ({} selects all)
    kube_api.add_pdb("team", "other-ns", {"app": "x"}, min_available=9)
    kube_api.pdbs[("elsewhere", "other-ns")] = kube_api.pdbs.pop(("team", "other-ns"))
    kube_api.add_pdb("team", "expr", match_expressions=[{"key": "tier", "operator": "In", "values": ["gpu"]}],
                     min_available=9)
    assert raises(admin.evict, "team", "p").budget
    kube_api.add_pdb("team", "second", {"app": "x"}, min_available=0)
    err = raises(admin.evict, "team", "p")
    assert err.status == 500 and "more than one PodDisruptionBudget" in str(err)
    assert not kubeselect.pdb_selects({"spec": {"selector": {"matchExpressions": [
        {"key": "tier", "operator": "Sometimes"}]}}}, {"tier": "gpu"})  # an invalid selector matches nothing


def test_a_budget_not_processed_yet_refuses_with_retry_after(kube_api, admin):
    kube_api.add_pod("team", "p", "node-a", labels={"app": "x"}, owner_kind="ReplicaSet")
    kube_api.add_pdb("team", "new", {"app": "x"}, min_available=0, processed=False)
    err = raises(admin.evict, "team", "p")
    assert err.budget and err.retry_after == 10.0 and "The disruption budget new is still being processed" in str(err)


def test_throttling_is_a_plain_text_429_with_retry_after(kube_api, admin):
    kube_api.add_node("node-a")
    kube_api.throttle(times=1, retry_after=3, method="GET")
    err = raises(admin.get_node, "node-a")
    assert err.status == 429 and err.throttled and not err.budget and err.retry_after == 3.0
    assert admin.get_node("node-a")["metadata"]["name"] == "node-a"


def test_a_node_credential_is_limited_as_the_node_authorizer_limits_it(kube_api, tmp_path):
    kube_api.add_node("node-a")
    kube_api.add_node("node-b")
    kube_api.add_pod("team", "mine", "node-a")
    kube_api.add_pod("team", "theirs", "node-b")
    node = KubeApi(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "k.conf", node="node-a")), attempts=1)
    assert raises(node.list_nodes).status == 403
    assert [n["metadata"]["name"] for n in node.request("GET", "/api/v1/nodes", query={
        "fieldSelector": "metadata.name=node-a"})["items"]] == ["node-a"]
    assert raises(node.get_node, "node-b").status == 403
    assert raises(node.request, "GET", "/api/v1/pods").status == 403
    assert [p["metadata"]["name"] for p in node.list_pods("node-a")] == ["mine"]
    assert raises(node.list_pods, "node-b").status == 403
    err = raises(node.request, "DELETE", "/api/v1/namespaces/team/pods/theirs")
    assert err.status == 403 and "can only delete pods with spec.nodeName set to itself" in str(err)
    node.request("DELETE", "/api/v1/namespaces/team/pods/mine")
    assert ("team", "mine") not in kube_api.pods and ("team", "theirs") in kube_api.pods


def test_the_functions_identity_gets_exactly_what_deploy_rbac_yaml_grants_it(kube_api, tmp_path):
    # RBAC (plugin/pkg/auth/authorizer/rbac): the ClusterRole everywhere, the Role's leases and events in default
    # only; anything else 403 with the words of responsewriters.forbiddenMessage in apierrors.NewForbidden.
    kube_api.add_node("node-a")
    kube_api.add_pod("team", "p", "node-a")
    fn = KubeApi(load_kubeconfig(kube_api.function_kubeconfig(tmp_path / "f.conf")), attempts=1)
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "x"}, "spec": {}}
    assert fn.create_lease("default", dict(lease))["metadata"]["name"] == "x"
    assert fn.get_node("node-a")["metadata"]["name"] == "node-a"
    elsewhere = raises(fn.create_lease, "kube-system", dict(lease))
    assert (elsewhere.status, elsewhere.reason) == (403, "Forbidden")
    assert str(elsewhere).count('leases.coordination.k8s.io is forbidden: User "ack-mig-hook-function-ram-role-id" '
                                'cannot create resource "leases" in API group "coordination.k8s.io" in the '
                                'namespace "kube-system"') == 1
    assert ("kube-system", "x") not in kube_api.leases
    deleted = raises(fn.request, "DELETE", "/api/v1/namespaces/team/pods/p")
    assert deleted.status == 403 and 'pods "p" is forbidden' in str(deleted) and ("team", "p") in kube_api.pods
    read = raises(fn.request, "GET", "/api/v1/namespaces/default/events")
    assert read.status == 403 and 'cannot list resource "events" in API group "" in the namespace' in str(read)
    fn.evict("team", "p")  # pods/eviction create: the ClusterRole's, in any namespace
    assert ("team", "p") not in kube_api.pods
