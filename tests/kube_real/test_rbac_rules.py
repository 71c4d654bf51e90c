"""deploy/rbac.yaml grants exactly what the function needs: each of its permissions (a rule's verb) taken
away in turn, a rollout of a one-node pool (cordon, drain under a budget, apply, capacity, uncordon,
Events) and the startup taint's removal meet a 403 on the very call that permission covers; with the
file as it is, no call is refused and the node is done.

Each case binds its own copy of the ClusterRole and the Role, one permission short, to a user of the
control plane's token file (no group: only these bindings apply)."""

import copy
import time

import pytest

from functions.kube.client import ClusterCredential
from functions.kube.taint import TaintRemover, parse_taint
from tests.kube_real import controlplane
from tests.kube_real.rollout_harness import Harness
from tests.kube_real.worlds import RealWorld

pytestmark = pytest.mark.kube_real

DOCS = controlplane.rbac_documents()
ROLES = [d for d in DOCS if d["kind"] in ("ClusterRole", "Role")]
TAINT = "ack-mig-hook/unpartitioned=true:NoSchedule"


def _permissions():
    out = []
    for role in ROLES:
        for i, rule in enumerate(role["rules"]):
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.append((role["kind"], i, resource, verb))
    return out


PERMISSIONS = _permissions()
# What the function calls with each permission (method, a path the refused call has).
CALLS = {
    ("nodes", "get"): ("GET", "/api/v1/nodes/"),
    ("nodes", "list"): ("GET", "/api/v1/nodes"),
    ("nodes", "patch"): ("PATCH", "/api/v1/nodes/"),
    ("pods", "list"): ("GET", "/api/v1/pods"),
    ("pods/eviction", "create"): ("POST", "/eviction"),
    ("events", "create"): ("POST", "/api/v1/namespaces/default/events"),
    ("leases", "get"): ("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/"),
    ("leases", "create"): ("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases"),
    ("leases", "update"): ("PUT", "/apis/coordination.k8s.io/v1/namespaces/default/leases/"),
}


# The calls of a node's claim (read the node, look at its pods before the cordon, its slot of the pool's budget,
# write its record).
CLAIM_CALLS = (("nodes", "get"), ("pods", "list"), ("nodes", "patch"), ("leases", "get"), ("leases", "create"),
               ("leases", "update"))


def test_every_permission_of_deploy_rbac_yaml_is_one_the_function_uses():
    assert sorted((r, v) for _, _, r, v in PERMISSIONS) == sorted(CALLS)


def _roles_without(permission, user, suffix):
    out = []
    for role in ROLES:
        role = copy.deepcopy(role)
        role["metadata"]["name"] += "-" + suffix
        rules = []
        for i, rule in enumerate(role["rules"]):
            if permission is not None and (role["kind"], i) == permission[:2]:
                rule = dict(rule, resources=[r for r in rule["resources"] if r != permission[2]] or rule["resources"],
                            verbs=[v for v in rule["verbs"] if v != permission[3]])
                if len(rule["resources"]) > 1:  # a rule of several resources: take the verb from this one only
                    raise AssertionError("split rules with several resources here")
            if rule["verbs"]:
                rules.append(rule)
        role["rules"] = rules
        out.append(role)
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1",
                   "kind": "ClusterRoleBinding" if role["kind"] == "ClusterRole" else "RoleBinding",
                   "metadata": dict({"name": role["metadata"]["name"]}, **(
                       {"namespace": role["metadata"]["namespace"]} if role["kind"] == "Role" else {})),
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"],
                               "name": role["metadata"]["name"]},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
        out.append(binding)
    return out


def _wait_bound(cp, user, permission):
    """The RBAC authorizer reads bindings through informers: wait until the user holds a permission this
    case grants (any one other than the removed)."""
    kind, _, resource, verb = next(p for p in PERMISSIONS if p != permission)
    group_resource, _, sub = resource.partition("/")
    attributes = {"verb": verb, "resource": group_resource, "subresource": sub}
    if kind == "Role":
        attributes["namespace"] = "default"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        review = cp.admin.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "resourceAttributes": attributes}})
        if review["status"].get("allowed"):
            return
        time.sleep(0.05)
    raise AssertionError("the bindings of %s did not take effect" % user)


def _recording(kube, seen):
    real = kube._once

    def once(method, path, *rest, **kw):  # the client's own arguments, whatever it adds (a call's timeout)
        status, headers, data = real(method, path, *rest, **kw)
        seen.append((method, path, status))
        return status, headers, data

    kube._once = once
    return kube


@pytest.mark.parametrize("permission", [None] + PERMISSIONS,
                         ids=["as-deployed"] + ["without-%s-%s" % (p[2], p[3]) for p in PERMISSIONS])
def test_each_permission_taken_away_shows_a_403_on_its_call(control_plane, tmp_path, monkeypatch, permission):
    cp = control_plane
    user, rest = cp.spare_user()
    cp.apply_rbac(_roles_without(permission, user, user))
    _wait_bound(cp, user, permission)
    world = RealWorld(cp, tmp_path)
    h = Harness(world, monkeypatch, 1)
    h.add_pods("train")
    world.add_pdb(h.ns, "train", {"app": "train"}, min_available=0)
    seen = []
    kube = _recording(world.client(token=rest.token), seen)
    # A refused eviction waits out the drain, on the harness's time (its polls' sleeps: OnTestTime). That case
    # needs only the drain's first pass (the 403), so it times out at its first poll; the others keep 20 s, ten
    # polls, far more than their drain's two passes need.
    evictions_refused = permission is not None and permission[2:] == ("pods/eviction", "create")
    result = h.run(kube=kube, ACK_MIG_DRAIN_TIMEOUT_S="1" if evictions_refused else "20")
    # The startup taint's removal, with the same credential (a node that joined with the taint).
    tainted = world.unique("new")
    world.add_node(tainted, taints=[{"key": "ack-mig-hook/unpartitioned", "value": "true", "effect": "NoSchedule"}])
    path = cp.kubeconfig(str(tmp_path / "user.conf"), rest.token)
    remover = TaintRemover(parse_taint(TAINT), ClusterCredential(path=path, attempts=1), sleep=lambda s: None)
    _recording(remover.client(), seen)
    try:
        remover.remove(tainted)
    except Exception:  # noqa: BLE001 - a refused call is what this case may expect
        pass
    refused = [(m, p) for m, p, status in seen if status == 403]
    if permission is None:
        assert refused == [] and result.nodes and result.nodes[0]["outcome"] == "partitioned", (refused, result)
        assert h.annotation(h.names[0])["step"] == "done"
        assert not (world.node(tainted)["spec"].get("taints"))
        return
    method, fragment = CALLS[(permission[2], permission[3])]
    assert any(m == method and fragment in p and (fragment != "/api/v1/nodes" or p == fragment)
               for m, p in refused), (permission, refused)
    if (permission[2], permission[3]) in CLAIM_CALLS:
        # refused at the node's claim: the node deferred, not failed, the permission named as the real
        # kube-apiserver words it (verb, resource), and the event ends retry (rollout/test_claim_unanswered.py)
        node = result.nodes[0]
        assert node["outcome"] == "deferred" and result.outcome == "retry", (node, result.reason)
        assert "may not %s %s" % (permission[3], permission[2]) in node["reason"], node["reason"]
