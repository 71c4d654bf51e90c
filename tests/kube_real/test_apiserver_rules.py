"""The API server's rules the rollout depends on, read off the real kube-apiserver and disruption
controller (not the project's code): budgets, evictions, deletion without a kubelet, paging after an etcd
compaction, optimistic concurrency, and what deploy/rbac.yaml lets the hook's credential do.

These are the facts tests/support/kubeapi.py (the double the other tests use) claims to follow; each test
here names the double's rule it checks."""

import pytest

pytestmark = pytest.mark.kube_real


def _ready_pods(cp, ns, count, labels, node=None, owner=None, prefix="p"):
    return [cp.pod(ns, "%s-%d" % (prefix, i), node=node, labels=labels, owner=owner)["metadata"]["name"]
            for i in range(count)]


def _causes(answer):
    return [c.get("type") or c.get("reason") for c in (answer.body.get("details") or {}).get("causes") or []]


# ---- PodDisruptionBudget status and the Eviction API ----

def test_budget_status_is_computed_by_the_disruption_controller(control_plane, ns):
    cp = control_plane
    _ready_pods(cp, ns, 3, {"app": "a"})
    cp.pod(ns, "not-ready", labels={"app": "a"}, ready=False)  # selected, counted, not healthy
    cp.pdb(ns, "budget", {"app": "a"}, min_available=2)
    status = cp.wait_pdb(ns, "budget")["status"]
    assert (status["expectedPods"], status["currentHealthy"], status["desiredHealthy"],
            status["disruptionsAllowed"]) == (4, 3, 2, 1)


def test_eviction_spends_the_budget_at_once_then_429_with_the_budget_cause(control_plane, ns):
    """The double: one budget that allows no disruption -> 429, cause DisruptionBudget, message naming the
    needed and current healthy counts, no Retry-After."""
    cp = control_plane
    cp.node(cp.unique("n"))
    pods = _ready_pods(cp, ns, 3, {"app": "a"})
    cp.pdb(ns, "budget", {"app": "a"}, min_available=2)
    cp.wait_pdb(ns, "budget", lambda s: s.get("disruptionsAllowed") == 1)

    first = cp.evict(cp.admin, ns, pods[0])
    assert first.status == 201, first.body
    assert first.body["status"] == "Success"
    # No wait for the controller: the eviction itself wrote the budget's status (disruptedPods) under the
    # budget's resourceVersion, so the very next eviction is refused.
    second = cp.evict(cp.admin, ns, pods[1])
    assert second.status == 429, second.body
    assert second.body["reason"] == "TooManyRequests"
    assert _causes(second) == ["DisruptionBudget"]
    # eviction.go's cause: "needs 2 healthy pods and has 2 currently" once the disruption controller has
    # recounted after the first eviction, "does not allow evicting pods currently" while its status still
    # counts 3 healthy (the eviction's own write decrements only disruptionsAllowed; seen in CI under load).
    assert second.body["details"]["causes"][0]["message"] in (
        "The disruption budget budget needs 2 healthy pods and has 2 currently",
        "The disruption budget budget does not allow evicting pods currently")
    assert "Retry-After" not in second.headers
    pdb = cp.wait_pdb(ns, "budget")
    assert pdb["status"]["disruptionsAllowed"] == 0


def test_a_pod_under_two_budgets_is_500(control_plane, ns):
    cp = control_plane
    pods = _ready_pods(cp, ns, 3, {"app": "a", "tier": "gpu"})
    cp.pdb(ns, "one", {"app": "a"}, min_available=1)
    cp.pdb(ns, "two", {"tier": "gpu"}, min_available=1)
    cp.wait_pdb(ns, "one")
    cp.wait_pdb(ns, "two")
    answer = cp.evict(cp.admin, ns, pods[0])
    assert answer.status == 500
    assert answer.body["message"] == \
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    assert [p["metadata"]["name"] for p in cp.pods(ns)] == sorted(pods)  # nothing evicted


@pytest.mark.parametrize("phase,ready", [("Pending", False), ("Succeeded", False), ("Failed", False)])
def test_pending_and_finished_pods_are_evicted_without_a_budget_check(control_plane, ns, phase, ready):
    """The double: a Pending, Succeeded or Failed pod is deleted without looking at budgets."""
    cp = control_plane
    _ready_pods(cp, ns, 2, {"app": "a"})
    cp.pod(ns, "odd", labels={"app": "a"}, phase=phase, ready=ready)
    cp.pdb(ns, "budget", {"app": "a"}, min_available=2)
    cp.wait_pdb(ns, "budget", lambda s: s.get("currentHealthy") == 2)
    assert cp.evict(cp.admin, ns, "p-0").status == 429
    answer = cp.evict(cp.admin, ns, "odd")
    assert answer.status == 201, answer.body
    assert "odd" not in [p["metadata"]["name"] for p in cp.pods(ns)]  # unbound: gone at once


@pytest.mark.parametrize("selector,applies", [({}, True), (None, False)])
def test_an_empty_selector_selects_every_pod_of_the_namespace_a_missing_one_none(control_plane, ns, selector,
                                                                                applies):
    """policy/v1: ``selector: {}`` is labels.Everything(), for the controller's count and for the eviction
    subresource alike (eviction.go getPodDisruptionBudgets); no selector at all is labels.Nothing(). (The
    double had both select nothing, as policy/v1beta1 did.)"""
    cp = control_plane
    pods = _ready_pods(cp, ns, 2, {"app": "a"})
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"},
              "spec": {"minAvailable": 2}}
    if selector is not None:
        budget["spec"]["selector"] = selector
    cp.admin.ok("POST", "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % ns, budget)
    status = cp.wait_pdb(ns, "b")["status"]
    answer = cp.evict(cp.admin, ns, pods[0])
    if applies:
        assert (status["expectedPods"], status["disruptionsAllowed"], answer.status) == (2, 0, 429), answer.body
        assert _causes(answer) == ["DisruptionBudget"]
    else:
        assert (status["expectedPods"], answer.status) == (0, 201), (status, answer.body)


def test_an_evicted_pod_on_a_node_terminates_until_its_kubelet_deletes_it(control_plane, ns):
    """The double's ``graceful_evictions``: an evicted bound pod stays, terminating, until
    finish_termination; an unbound pod goes at once."""
    cp = control_plane
    node = cp.unique("n")
    cp.node(node)
    cp.pod(ns, "bound", node=node, labels={"app": "a"}, grace_period=30)
    cp.pod(ns, "unbound", labels={"app": "a"})
    assert cp.evict(cp.admin, ns, "bound").status == 201
    assert cp.evict(cp.admin, ns, "unbound").status == 201
    left = {p["metadata"]["name"]: p for p in cp.pods(ns)}
    assert list(left) == ["bound"]
    assert left["bound"]["metadata"]["deletionTimestamp"]
    assert left["bound"]["metadata"]["deletionGracePeriodSeconds"] == 30
    # Evicting a terminating pod again: accepted, nothing changes (no budget is consulted).
    assert cp.evict(cp.admin, ns, "bound").status == 201
    cp.finish(ns, "bound")
    assert cp.pods(ns) == []


# ---- lists: paging, compaction ----

def test_a_continue_token_expires_with_the_compaction_410_with_a_token_for_the_rest(control_plane):
    """The double: once compacted every outstanding token answers 410 Gone, reason Expired, with a token
    for an inconsistent remainder in metadata.continue."""
    cp = control_plane
    label = cp.unique("pool")
    names = sorted(cp.unique("page") for _ in range(5))
    for name in names:
        cp.node(name, labels={"pool": label})
    first = cp.admin.get("/api/v1/nodes", labelSelector="pool=" + label, limit="2")
    assert [n["metadata"]["name"] for n in first["items"]] == names[:2]
    token = first["metadata"]["continue"]
    assert "remainingItemCount" not in first["metadata"]  # a selector hides the count
    second = cp.admin.get("/api/v1/nodes", labelSelector="pool=" + label, limit="2", **{"continue": token})
    assert [n["metadata"]["name"] for n in second["items"]] == names[2:4]

    cp.compact()
    answer = cp.admin.call("GET", "/api/v1/nodes", query={"labelSelector": "pool=" + label, "limit": "2",
                                                         "continue": second["metadata"]["continue"]})
    assert answer.status == 410, answer.body
    assert answer.body["reason"] == "Expired"
    assert answer.body["message"].startswith("The provided continue parameter is too old to display a "
                                             "consistent list result.")
    rest_token = answer.body["metadata"]["continue"]
    rest = cp.admin.get("/api/v1/nodes", labelSelector="pool=" + label, limit="2", **{"continue": rest_token})
    assert [n["metadata"]["name"] for n in rest["items"]] == names[4:]


def test_remaining_item_count_without_selectors(control_plane):
    cp = control_plane
    page = cp.admin.get("/api/v1/namespaces", limit="1")
    assert page["metadata"]["remainingItemCount"] >= 3  # default, kube-system, kube-public, kube-node-lease...


def test_resource_version_zero_and_field_selectors_on_pods(control_plane, ns):
    """The double: pod lists take spec.nodeName (and the indexed fields); another field is 400."""
    cp = control_plane
    node = cp.unique("n")
    cp.node(node)
    cp.pod(ns, "here", node=node)
    cp.pod(ns, "elsewhere")
    listed = cp.admin.get("/api/v1/pods", fieldSelector="spec.nodeName=" + node, resourceVersion="0")
    assert [p["metadata"]["name"] for p in listed["items"]] == ["here"]
    bad = cp.admin.call("GET", "/api/v1/pods", query={"fieldSelector": "spec.hostname=x"})
    assert bad.status == 400
    assert 'field label not supported: spec.hostname' in bad.body["message"]


# ---- optimistic concurrency on Nodes ----

def test_a_merge_patch_with_a_stale_resource_version_is_409(control_plane):
    """The double: a patch that carries a resourceVersion other than the current one is 409 Conflict."""
    cp = control_plane
    name = cp.unique("n")
    node = cp.node(name)
    stale = node["metadata"]["resourceVersion"]
    cp.admin.ok("PATCH", "/api/v1/nodes/" + name, {"metadata": {"labels": {"x": "1"}}},
                content_type="application/merge-patch+json")
    answer = cp.admin.call("PATCH", "/api/v1/nodes/" + name,
                           {"metadata": {"resourceVersion": stale, "labels": {"x": "2"}}},
                           content_type="application/merge-patch+json")
    assert answer.status == 409
    assert answer.body["reason"] == "Conflict"
    assert answer.body["message"] == ('Operation cannot be fulfilled on nodes "%s": the object has been modified; '
                                      "please apply your changes to the latest version and try again" % name)
    # Without a resourceVersion the patch always applies.
    cp.admin.ok("PATCH", "/api/v1/nodes/" + name, {"metadata": {"labels": {"x": "3"}}},
                content_type="application/merge-patch+json")


def test_new_nodes_are_tainted_not_ready_by_admission(control_plane):
    """Why ControlPlane.node sets the taints itself: TaintNodesByCondition taints every new Node."""
    cp = control_plane
    name = cp.unique("n")
    created = cp.admin.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    assert [t["key"] for t in created["spec"]["taints"]] == ["node.kubernetes.io/not-ready"]


# ---- RBAC: deploy/rbac.yaml ----

def test_the_hook_credential_can_do_what_deploy_rbac_yaml_grants(control_plane, ns):
    cp = control_plane
    node = cp.unique("n")
    cp.node(node)
    cp.pod(ns, "gpu", node=node, gpus=1)
    hook = cp.hook
    assert hook.get("/api/v1/nodes", limit="1")["kind"] == "NodeList"
    assert hook.get("/api/v1/nodes/" + node)["metadata"]["name"] == node
    hook.ok("PATCH", "/api/v1/nodes/" + node, {"spec": {"unschedulable": True}},
            content_type="application/merge-patch+json")
    assert [p["metadata"]["name"] for p in hook.get("/api/v1/pods", fieldSelector="spec.nodeName=" + node,
                                                       resourceVersion="0")["items"]] == ["gpu"]
    assert cp.evict(hook, ns, "gpu").status == 201
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": cp.unique("ev")},
             "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
             "reason": "Test", "message": "m", "type": "Normal", "source": {"component": "ack-mig-hook"}}
    assert hook.call("POST", "/api/v1/namespaces/default/events", event).status == 201


@pytest.mark.parametrize("method,path", [
    ("GET", "/api/v1/namespaces/{ns}/pods/gpu"),  # pods: list only, never get
    ("DELETE", "/api/v1/namespaces/{ns}/pods/gpu"),  # moves go through evictions
    ("PUT", "/api/v1/nodes/{node}"),  # patch, not update
    ("DELETE", "/api/v1/nodes/{node}"),
    ("GET", "/api/v1/namespaces/default/events"),  # events: create only
    ("POST", "/api/v1/namespaces/{ns}/events"),  # and only in default
    ("GET", "/api/v1/secrets"),
    ("GET", "/apis/policy/v1/poddisruptionbudgets"),
    ("PATCH", "/api/v1/nodes/{node}/status"),
])
def test_the_hook_credential_is_refused_outside_deploy_rbac_yaml(control_plane, ns, method, path):
    cp = control_plane
    node = cp.unique("n")
    cp.node(node)
    cp.pod(ns, "gpu", node=node, gpus=1)
    path = path.format(ns=ns, node=node)
    body = None
    if method in ("PUT", "POST"):
        body = cp.admin.get("/api/v1/nodes/" + node) if method == "PUT" else {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Node", "name": node}, "reason": "R", "message": "m"}
    answer = cp.hook.call(method, path, body, content_type="application/merge-patch+json" if method == "PATCH"
                          else "application/json")
    assert answer.status == 403, (answer.status, answer.body)
    assert answer.body["reason"] == "Forbidden"
    assert 'User "%s" cannot' % cp.hook_user in answer.body["message"]
