"""The project's own Kubernetes client (functions.kube.client.KubeApi) and the calls built on it, against
the real kube-apiserver, with the hook's credential (deploy/rbac.yaml) unless said otherwise: paging with
limit/continue, a list whose continue token expires mid-way (410 after an etcd compaction), the
compare-and-swap on a Node's resourceVersion, evictions refused by budgets, the startup-taint removal's
guarded JSON patch, Events."""

import re

import pytest

from functions.kube.client import ApiError, ClusterCredential, KubeApi
from functions.kube.taint import TaintRemover, parse_taint
from functions.rollout import drain as dr
from functions.rollout.executor import event

pytestmark = pytest.mark.kube_real


@pytest.fixture
def hook(control_plane, tmp_path):
    """KubeApi with the hook's kubeconfig (an ACK-like one: CA inline, a bearer token), no retry sleeps."""
    path = control_plane.kubeconfig(str(tmp_path / "hook.conf"), control_plane.hook.token, inline=True)
    return ClusterCredential(path=path, attempts=3).client(sleep=lambda s: None, page=2)


def _pool(cp, count):
    label = cp.unique("pool")
    names = sorted(cp.unique("node") for _ in range(count))
    for name in names:
        cp.node(name, labels={"alibabacloud.com/nodepool-id": label})
    return label, names


def test_a_paged_list_reads_every_page(control_plane, hook):
    label, names = _pool(control_plane, 5)
    got = hook.list_nodes("alibabacloud.com/nodepool-id=" + label, reduce=lambda n: n["metadata"]["name"])
    assert got == names
    assert hook.requests == 3  # pages of 2


def test_a_list_whose_continue_token_expires_starts_over_and_is_whole(control_plane, hook):
    cp = control_plane
    label, names = _pool(cp, 5)
    real, pages = hook.request, []

    def request(method, path, *args, **kwargs):
        pages.append((kwargs.get("query") or {}).get("continue", ""))
        answer = real(method, path, *args, **kwargs)
        if len(pages) == 1:
            cp.compact()  # between the first and the second page: the first page's token is expired
        return answer

    hook.request = request
    got = hook.list_nodes("alibabacloud.com/nodepool-id=" + label, reduce=lambda n: n["metadata"]["name"])
    assert got == names
    # page 1, its continuation (410), then the whole list again: three pages of 2, 2, 1
    assert len(pages) == 5 and pages[0] == "" and pages[1] and pages[2] == ""


def test_a_node_patch_with_a_stale_resource_version_is_a_conflict(control_plane, hook):
    cp = control_plane
    name = cp.unique("node")
    node = cp.node(name)
    rv = node["metadata"]["resourceVersion"]
    cp.admin.ok("PATCH", "/api/v1/nodes/" + name, {"metadata": {"labels": {"someone": "else"}}},
                content_type="application/merge-patch+json")
    with pytest.raises(ApiError) as caught:
        hook.patch_node(name, {"metadata": {"resourceVersion": rv, "annotations": {"ack-mig-hook/rollout": "{}"}}})
    assert (caught.value.status, caught.value.reason) == (409, "Conflict")
    fresh = hook.get_node(name)
    done = hook.patch_node(name, {"metadata": {"resourceVersion": fresh["metadata"]["resourceVersion"],
                                               "annotations": {"ack-mig-hook/rollout": "{}"}},
                                  "spec": {"unschedulable": True}})
    assert done["spec"]["unschedulable"] is True
    assert done["metadata"]["resourceVersion"] != fresh["metadata"]["resourceVersion"]
    # the uncordon the executor sends: null removes the field
    assert "unschedulable" not in hook.patch_node(name, {"spec": {"unschedulable": None}})["spec"]


def test_evictions_refused_by_a_budget_are_not_retried_and_say_so(control_plane, ns, hook):
    cp = control_plane
    for i in range(2):
        cp.pod(ns, "p-%d" % i, labels={"app": "a"})
    cp.pdb(ns, "budget", {"app": "a"}, min_available=2)
    cp.wait_pdb(ns, "budget", lambda s: s.get("currentHealthy") == 2)  # the controller's informer saw both pods
    before = hook.requests
    with pytest.raises(ApiError) as caught:
        hook.evict(ns, "p-0")
    assert caught.value.budget and not caught.value.throttled
    assert "needs 2 healthy pods and has 2 currently" in str(caught.value)
    assert hook.requests == before + 1


def test_a_pod_under_two_budgets_is_one_500_not_retried(control_plane, ns, hook):
    cp = control_plane
    cp.pod(ns, "p", labels={"app": "a"})
    cp.pdb(ns, "one", {"app": "a"}, min_available=0)
    cp.pdb(ns, "two", {"app": "a"}, min_available=0)
    cp.wait_pdb(ns, "one")
    before = hook.requests
    with pytest.raises(ApiError) as caught:
        hook.evict(ns, "p")
    assert caught.value.status == 500 and "more than one PodDisruptionBudget" in str(caught.value)
    assert hook.requests == before + 1


def test_one_drain_pass_over_a_node(control_plane, ns, hook):
    """functions.rollout.drain.evict_pass with the hook's credential: what it lists, leaves, evicts and
    reports as refused by a budget."""
    cp = control_plane
    node = cp.unique("node")
    cp.node(node)
    rs = cp.replica_set(ns, "train", 3, {"app": "train"})
    ds = cp.admin.ok("POST", "/apis/apps/v1/namespaces/%s/daemonsets" % ns, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "plugin"},
        "spec": {"selector": {"matchLabels": {"app": "plugin"}}, "template": {
            "metadata": {"labels": {"app": "plugin"}},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}}})
    for i in range(3):
        cp.pod(ns, "train-%d" % i, node=node, labels={"app": "train"}, gpus=1, owner=cp.owner(rs))
    cp.pod(ns, "plugin", node=node, labels={"app": "plugin"}, gpus=1, owner=cp.owner(ds))
    cp.pod(ns, "web", node=node, owner=cp.owner(rs))
    cp.pdb(ns, "train", {"app": "train"}, max_unavailable=1)
    cp.wait_pdb(ns, "train", lambda s: s.get("disruptionsAllowed") == 1)
    one = dr.evict_pass(hook, node)
    assert one.remaining == 3 and len(one.evicted) == 1 and len(one.budget) == 2
    # A budget's refusal (registry/core/pod/storage/eviction.go, checkAndDecrement) quotes the counts only when
    # status.currentHealthy <= desiredHealthy: 2 once the disruption controller has recounted after the
    # eviction's own write (which decrements only disruptionsAllowed); while it still counts 3 the cause is
    # "does not allow evicting pods currently"; and while the controller has not processed the PDB's latest
    # generation the refusal says so instead (each seen under load).
    refusal = re.compile(r"The disruption budget train (needs 2 healthy pods and has 2 currently|"
                         r"does not allow evicting pods currently|is still being processed by the server)")
    assert all(refusal.search(m) for m in one.budget.values()), sorted(one.budget.values())
    # The evicted pod terminates (no kubelet here to end it): the next pass waits for it and evicts nothing
    # new. (Its pod list asks resourceVersion=0, the watch cache, which may not show the pod terminating
    # yet: then it is evicted again, a 201 that changes nothing. The double's lists are never behind.)
    again = dr.evict_pass(hook, node)
    assert again.remaining == 3 and set(again.evicted) <= set(one.evicted) and len(again.budget) == 2


def test_the_startup_taint_is_removed_by_a_guarded_json_patch(control_plane, tmp_path):
    cp = control_plane
    name = cp.unique("node")
    startup = {"key": "ack-mig-hook/unpartitioned", "value": "true", "effect": "NoSchedule"}
    other = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    cp.node(name, taints=[other, startup])
    path = cp.kubeconfig(str(tmp_path / "hook.conf"), cp.hook.token)
    remover = TaintRemover(parse_taint("ack-mig-hook/unpartitioned=true:NoSchedule"), ClusterCredential(path=path),
                           sleep=lambda s: None)
    assert remover.remove(name) == "removed"
    assert cp.admin.get("/api/v1/nodes/" + name)["spec"]["taints"] == [other]
    assert remover.remove(name) == "absent"


def test_a_json_patch_whose_test_fails_is_422(control_plane, hook):
    """What the taint remover reads as 'the taints changed under me' (it retries on 409 and 422)."""
    cp = control_plane
    name = cp.unique("node")
    cp.node(name, taints=[{"key": "a", "effect": "NoSchedule"}])
    with pytest.raises(ApiError) as caught:
        hook.json_patch_node(name, [{"op": "test", "path": "/spec/taints/0", "value": {"key": "b",
                                                                                      "effect": "NoSchedule"}},
                                    {"op": "remove", "path": "/spec/taints/0"}])
    assert caught.value.status == 422, caught.value


def test_the_rollout_events_are_accepted_once_and_a_repeat_is_409(control_plane, hook):
    cp = control_plane
    node = cp.unique("node")
    cp.node(node)
    event(hook, node, "MigRolloutCordon", "cordoned for sequence=3g.20gb-3g.20gb")
    event(hook, node, "MigRolloutCordon", "cordoned for sequence=3g.20gb-3g.20gb")  # 409, swallowed
    events = cp.admin.get("/api/v1/namespaces/default/events",
                          fieldSelector="involvedObject.name=%s,reason=MigRolloutCordon" % node)["items"]
    assert len(events) == 1 and events[0]["source"] == {"component": "ack-mig-hook"}
    with pytest.raises(ApiError) as caught:
        hook.create_event(dict(events[0], metadata={"name": events[0]["metadata"]["name"],
                                                    "namespace": "default"}))
    assert caught.value.status == 409 and caught.value.reason == "AlreadyExists"


def test_a_call_outside_the_role_is_one_403_not_retried(control_plane, hook):
    before = hook.requests
    with pytest.raises(ApiError) as caught:
        hook.get("/api/v1/namespaces/default/pods/anything")
    assert (caught.value.status, caught.value.reason) == (403, "Forbidden")
    assert hook.requests == before + 1


def test_a_kubeconfig_for_another_ca_fails_tls_at_once(control_plane, tmp_path):
    other = tmp_path / "other-ca.crt"
    from tests.support.kubeapi import CertificateAuthority

    other.write_bytes(CertificateAuthority().pem)
    path = control_plane.kubeconfig(str(tmp_path / "bad.conf"), control_plane.hook.token)
    text = open(path).read().replace(control_plane.ca_file, str(other))
    open(path, "w").write(text)
    client = KubeApi.from_file(path, sleep=lambda s: None)
    with pytest.raises(ApiError) as caught:
        client.get("/api/v1/nodes")
    assert caught.value.final and "TLS" in str(caught.value)
