"""Scenarios run twice, against the project's API server double (tests/support/kubeapi.py) and the real
kube-apiserver (``world`` fixture, tests/kube_real/worlds.py), through the project's own client and drain
code, asserting the same answers: where the double is kinder or harsher than the real server, the
rollout's tests would pass against a server that does not exist.

Only the ``real`` variants need the control plane (marker ``kube_real``); the ``double`` ones always run.
"""

import re

import pytest

from functions.kube.client import ApiError
from functions.rollout import drain as dr


def _raises(call, *args):
    with pytest.raises(ApiError) as caught:
        call(*args)
    return caught.value


def _gpu_node(world):
    node = world.unique("node")
    world.add_node(node, labels={"pool": "p"}, capacity={"nvidia.com/gpu": "8"})
    return node


def test_an_eviction_spends_the_budget_and_the_next_is_refused_naming_it(world):
    ns, node = world.namespace(), _gpu_node(world)
    for i in range(3):
        world.add_pod(ns, "train-%d" % i, node, labels={"app": "train"}, gpus=1, owner_name="train")
    world.add_pdb(ns, "budget", {"app": "train"}, min_available=2)
    kube = world.client()
    kube.evict(ns, "train-0")
    refused = _raises(kube.evict, ns, "train-1")
    assert refused.budget and refused.status == 429 and refused.retry_after is None
    # eviction.go names the budget in one of two causes: "needs N healthy pods and has M currently" once the
    # disruption controller has recounted (currentHealthy below what it was), "does not allow evicting pods
    # currently" while its status still counts the evicted pod as healthy: which one depends on whether the
    # controller ran between the two evictions, so both are the real server's answer.
    assert re.search(r"HTTP 429 Cannot evict pod as it would violate the pod's disruption budget\. \(The disruption "
                     r"budget budget (needs 2 healthy pods and has 2 currently|does not allow evicting pods "
                     r"currently)\)$", str(refused)), str(refused)
    assert world.pods(ns)["train-0"]["metadata"]["deletionTimestamp"]  # terminating, not gone: a bound pod
    # A terminating pod evicted again: accepted, no budget consulted.
    kube.evict(ns, "train-0")
    assert world.kubelets(ns) == ["%s/train-0" % ns]
    assert sorted(world.pods(ns)) == ["train-1", "train-2"]


def test_a_pod_under_two_budgets_is_500_and_nothing_moves(world):
    ns, node = world.namespace(), _gpu_node(world)
    world.add_pod(ns, "p", node, labels={"app": "a", "tier": "gpu"}, gpus=1)
    world.add_pdb(ns, "one", {"app": "a"}, min_available=0)
    world.add_pdb(ns, "two", {"tier": "gpu"}, min_available=0)
    err = _raises(world.client().evict, ns, "p")
    assert err.status == 500 and "This pod has more than one PodDisruptionBudget, which the eviction " \
                                 "subresource does not support." in str(err)
    assert list(world.pods(ns)) == ["p"] and not world.pods(ns)["p"]["metadata"].get("deletionTimestamp")


@pytest.mark.parametrize("selector,refused", [({}, True), ({"matchLabels": {}}, True), (None, False)])
def test_an_empty_budget_selector_covers_the_namespace_a_missing_one_nothing(world, selector, refused):
    ns, node = world.namespace(), _gpu_node(world)
    world.add_pod(ns, "p", node, labels={"app": "a"}, gpus=1)
    if selector is None:
        world.add_pdb(ns, "b", {"app": "a"}, min_available=1)
        _drop_selector(world, ns, "b")
    else:
        world.add_pdb(ns, "b", selector=selector, min_available=1)
    kube = world.client()
    if refused:
        assert _raises(kube.evict, ns, "p").budget
    else:
        kube.evict(ns, "p")


def _drop_selector(world, ns, name):
    if world.name == "double":
        world.api.pdbs[(ns, name)]["spec"].pop("selector")
        return
    path = "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/%s" % (ns, name)
    world.cp.admin.ok("PATCH", path, [{"op": "remove", "path": "/spec/selector"}],
                      content_type="application/json-patch+json")
    world.settle()


def test_max_unavailable_counts_the_controllers_replicas(world):
    ns, node = world.namespace(), _gpu_node(world)
    for i in range(4):
        world.add_pod(ns, "w-%d" % i, node, labels={"app": "w"}, gpus=1, owner_name="workers")
    world.add_pdb(ns, "b", {"app": "w"}, max_unavailable="50%")
    kube = world.client()
    kube.evict(ns, "w-0")
    kube.evict(ns, "w-1")
    assert _raises(kube.evict, ns, "w-2").budget


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed"])
def test_pods_that_do_not_run_are_evicted_whatever_the_budget(world, phase):
    ns, node = world.namespace(), _gpu_node(world)
    world.add_pod(ns, "running", node, labels={"app": "a"}, gpus=1)
    world.add_pod(ns, "odd", node, labels={"app": "a"}, gpus=1, phase=phase)
    world.add_pdb(ns, "b", {"app": "a"}, min_available=1)
    kube = world.client()
    assert _raises(kube.evict, ns, "running").budget
    kube.evict(ns, "odd")


def test_an_eviction_of_a_pod_that_is_gone_is_404(world):
    ns = world.namespace()
    err = _raises(world.client().evict, ns, "nobody")
    assert (err.status, err.reason) == (404, "NotFound") and 'pods "nobody" not found' in str(err)


def test_drain_passes_until_the_node_is_empty(world):
    """functions.rollout.drain.evict_pass, pass after pass, the kubelets ending what was evicted in between,
    and a ReplicaSet replacing its pod on another node (what lets the budget allow the next one)."""
    ns, node, elsewhere = world.namespace(), _gpu_node(world), _gpu_node(world)
    for i in range(3):
        world.add_pod(ns, "train-%d" % i, node, labels={"app": "train"}, gpus=1, owner_name="train")
    world.add_pod(ns, "plugin", node, labels={"app": "plugin"}, gpus=1, owner_kind="DaemonSet", owner_name="plugin")
    world.add_pod(ns, "web", node, labels={"app": "web"})
    # A mirror pod's annotation is the kubelet's at creation (the API refuses to add it later).
    world.add_pod(ns, "mirror", node, gpus=1, owner_kind=None, annotations={"kubernetes.io/config.mirror": "h"})
    world.add_pdb(ns, "train", {"app": "train"}, min_available=2)
    kube = world.client()
    passes, replaced, evicted = [], 0, set()
    for _ in range(8):
        one = dr.evict_pass(kube, node)
        # new evictions only: a list from the watch cache (resourceVersion=0) may still show a pod evicted in
        # the pass before as running, and evicting it again changes nothing
        passes.append((one.remaining, len(set(one.evicted) - evicted), len(one.budget), sorted(one.errors)))
        evicted |= set(one.evicted)
        if one.remaining == 0:
            break
        for ended in world.kubelets(ns):
            replaced += 1
            world.add_pod(ns, "train-new-%d" % replaced, elsewhere, labels={"app": "train"}, gpus=1,
                          owner_name="train", replacement=True)
        world.settle()
    assert passes == [(3, 1, 2, []), (2, 1, 1, []), (1, 1, 0, []), (0, 0, 0, [])], passes
    assert sorted(n for n, p in world.pods(ns).items() if p["spec"].get("nodeName") == node) == \
        ["mirror", "plugin", "web"]


def test_a_paged_list_survives_a_compaction_between_pages(world):
    label = world.unique("pool")
    names = sorted(world.unique("node") for _ in range(5))
    for name in names:
        world.add_node(name, labels={"alibabacloud.com/nodepool-id": label})
    kube = world.client(page=2)
    real, calls = kube.request, []

    def request(method, path, *args, **kwargs):
        calls.append((kwargs.get("query") or {}).get("continue", ""))
        answer = real(method, path, *args, **kwargs)
        if len(calls) == 1:
            world.compact()
        return answer

    kube.request = request
    assert kube.list_nodes("alibabacloud.com/nodepool-id=" + label, reduce=lambda n: n["metadata"]["name"]) == names
    assert [bool(c) for c in calls] == [False, True, False, True, True]


def test_a_paged_pod_list_goes_on_from_the_last_namespace_and_name(world):
    """etcd lists keys in order (``/registry/pods/<namespace>/<name>``) and a continue token names the last
    one read: a page that ends in one namespace goes on in the next. The double went on from the last name
    alone, and left out a pod of a later namespace whose name sorts before it."""
    node = _gpu_node(world)
    first, second = sorted(world.namespace() for _ in range(2))
    world.add_pod(first, "z-pod", node)
    world.add_pod(second, "a-pod", node)
    kube = world.client()
    keys = kube.list_all("/api/v1/pods", {"fieldSelector": "spec.nodeName=" + node}, page=1,
                         reduce=lambda p: "%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"]))
    assert keys == [first + "/z-pod", second + "/a-pod"]


def test_a_stale_resource_version_is_409_and_the_current_one_applies(world):
    name = _gpu_node(world)
    kube = world.client()
    rv = kube.get_node(name)["metadata"]["resourceVersion"]
    world.label_node(name, {"someone": "else"})
    err = _raises(kube.patch_node, name, {"metadata": {"resourceVersion": rv, "labels": {"x": "y"}}})
    assert (err.status, err.reason) == (409, "Conflict")
    assert 'Operation cannot be fulfilled on nodes "%s": the object has been modified; please apply your ' \
           "changes to the latest version and try again" % name in str(err)
    fresh = kube.get_node(name)["metadata"]["resourceVersion"]
    assert kube.patch_node(name, {"metadata": {"resourceVersion": fresh, "labels": {"x": "y"}}})["metadata"][
        "labels"]["x"] == "y"


@pytest.mark.parametrize("value", ["NVIDIA A100-SXM4-80GB", "x" * 64, "-edge"])
def test_a_label_value_kubernetes_does_not_accept_is_422_and_changes_nothing(world, value):
    """A label value is at most 63 characters, alphanumeric at both ends, "-_." inside: an NVML name with a
    space (what nvmlDeviceGetName answers) cannot be a label value, on either server."""
    name = _gpu_node(world)
    kube = world.client()
    err = _raises(kube.patch_node, name, {"metadata": {"labels": {"aliyun.accelerator/nvidia_name": value}}})
    assert err.status == 422 and 'Node "%s" is invalid: metadata.labels: Invalid value: ' % name in str(err)
    assert "aliyun.accelerator/nvidia_name" not in kube.get_node(name)["metadata"]["labels"]
    assert kube.patch_node(name, {"metadata": {"labels": {"aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB"}}})


def test_a_field_selector_on_an_unindexed_field_is_400(world):
    err = _raises(world.client().get, "/api/v1/pods?fieldSelector=spec.hostname%3Dx")
    assert err.status == 400 and "field label not supported: spec.hostname" in str(err)


def test_a_json_patch_whose_test_fails_is_refused(world):
    name = world.unique("node")
    world.add_node(name, taints=[{"key": "a", "effect": "NoSchedule"}])
    err = _raises(world.client().json_patch_node, name,
                  [{"op": "test", "path": "/spec/taints/0", "value": {"key": "b", "effect": "NoSchedule"}}])
    assert err.status == 422


def test_events_the_rollout_writes_and_their_namespace_rule(world):
    from functions.rollout.executor import event

    node = _gpu_node(world)
    kube = world.client()
    event(kube, node, "MigRolloutCordon", "cordoned")
    event(kube, node, "MigRolloutCordon", "cordoned")  # the same again: 409, swallowed
    mine = [e for e in world.events(node) if e["reason"] == "MigRolloutCordon"]
    assert len(mine) == 1 and mine[0]["involvedObject"]["kind"] == "Node"
    # An Event about a Node without eventTime must live in default (legacy validation): elsewhere it is 422
    # (and for the hook's credential, which may create Events in default only, 403 first).
    body = dict(mine[0], metadata={"name": world.unique("ev"), "namespace": "team"})
    err = _raises(kube.create_event, body)
    assert err.status == 403  # the double holds the hook's token to the same roles (tests/kube_real/worlds.py)


def test_event_names_of_the_longest_node_name_and_path_segment_names(world):
    """A core v1 Event's name is checked only as a path segment (``registry/rest/create.go`` BeforeCreate:
    ``content.IsPathSegmentName``, no length limit; ``ValidateEventCreate`` adds the DNS-subdomain rule for
    events.k8s.io/v1 only): ``<node>.<16 hex>`` of a 253-character node name (270 characters) is created,
    ``..`` and a name with ``%`` are 422."""
    from functions.rollout.executor import event

    node = (world.unique("x") + "n" * 253)[:253]  # the longest node name (a DNS subdomain)
    world.add_node(node)
    kube = world.client()
    event(kube, node, "MigRolloutCordon", "cordoned")
    mine = [e for e in world.events(node) if e["reason"] == "MigRolloutCordon"]
    assert len(mine) == 1 and len(mine[0]["metadata"]["name"]) == 270
    for name, why in (("..", "may not be '..'"), ("a%b", "may not contain '%'")):
        body = dict(mine[0], metadata={"name": name, "namespace": "default"})
        err = _raises(kube.create_event, body)
        assert err.status == 422 and why in str(err), str(err)


@pytest.mark.parametrize("ready_pods,refused", [(2, False), (1, True)])
def test_an_unready_pod_is_evicted_while_its_budget_is_met(world, ready_pods, refused):
    """eviction.go: a pod that is not Ready is deleted without spending the budget while the budget has
    its desired healthy pods (currentHealthy >= desiredHealthy > 0); otherwise the budget decides."""
    ns, node = world.namespace(), _gpu_node(world)
    for i in range(ready_pods):
        world.add_pod(ns, "ready-%d" % i, node, labels={"app": "a"}, gpus=1, owner_name="a")
    world.add_pod(ns, "starting", node, labels={"app": "a"}, gpus=1, owner_name="a", ready=False)
    world.add_pdb(ns, "b", {"app": "a"}, min_available=ready_pods if ready_pods == 2 else 2)
    kube = world.client()
    if refused:
        assert _raises(kube.evict, ns, "starting").budget
    else:
        kube.evict(ns, "starting")
        assert _raises(kube.evict, ns, "ready-0").budget  # the budget was not spent, and allows nothing


def test_a_scaled_budget_over_pods_without_a_controller(world):
    """maxUnavailable is scaled on the controllers' replicas; a pod without a controller adds nothing to
    the expected count (the disruption controller's 'unmanaged pods') but counts as healthy."""
    ns, node = world.namespace(), _gpu_node(world)
    for i in range(3):
        world.add_pod(ns, "bare-%d" % i, node, labels={"app": "a"}, gpus=1, owner_kind=None)
    world.add_pod(ns, "managed", node, labels={"app": "a"}, gpus=1, owner_name="rs")
    world.add_pdb(ns, "b", {"app": "a"}, max_unavailable=1)
    kube = world.client()
    # expected 1 (the ReplicaSet's one replica), desired 0, healthy 4: four may go
    for name in ("bare-0", "bare-1", "bare-2", "managed"):
        kube.evict(ns, name)


def test_a_scaled_budget_over_pods_without_any_controller_allows_nothing(world):
    """No controller at all: nothing expected, nothing allowed, whatever is healthy."""
    ns, node = world.namespace(), _gpu_node(world)
    for i in range(3):
        world.add_pod(ns, "bare-%d" % i, node, labels={"app": "a"}, gpus=1, owner_kind=None)
    world.add_pdb(ns, "b", {"app": "a"}, max_unavailable=1)
    err = _raises(world.client().evict, ns, "bare-0")
    assert err.budget and str(err).endswith("(The disruption budget b does not allow evicting pods currently)")


def test_a_scaled_budget_over_daemonset_pods(world):
    """A DaemonSet has no scale: a percentage or maxUnavailable budget over its pods cannot be computed (the
    controller's failSafe: SyncFailed, no observedGeneration), and the eviction answers as for a budget not
    processed yet."""
    ns, node = world.namespace(), _gpu_node(world)
    for i in range(2):
        world.add_pod(ns, "ds-%d" % i, node, labels={"app": "a"}, gpus=1, owner_kind="DaemonSet", owner_name="ds")
    world.add_pdb(ns, "b", {"app": "a"}, max_unavailable=1)
    err = _raises(world.client().evict, ns, "ds-0")
    assert err.budget, err
    assert str(err).endswith("(The disruption budget b is still being processed by the server.)"), err
    assert err.retry_after == 10


def test_a_pool_lease_is_created_once_and_updated_only_at_its_version(world):
    """The pool budget's Lease (functions/rollout/pool_lease.py): a second create is 409 AlreadyExists, an update
    carrying an older resourceVersion is 409 Conflict, a missing Lease is 404, a zero duration is 422; the
    update at the current version applies and the MicroTime the hook writes is accepted as written."""
    from functions.kube.leases import micro_time as _micro_time

    kube, name = world.client(), world.unique("ack-mig-hook-pool-np")
    assert _raises(kube.get_lease, "default", name).status == 404
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "default", "annotations": {"ack-mig-hook/slots": "{}"}},
            "spec": {}}
    first = kube.create_lease("default", body)
    again = _raises(kube.create_lease, "default", body)
    assert (again.status, again.reason) == (409, "AlreadyExists")
    mine = dict(first, spec={"holderIdentity": "run-1", "leaseDurationSeconds": 60,
                             "renewTime": _micro_time(1767225600.5)})
    updated = kube.replace_lease("default", mine)
    assert updated["spec"]["renewTime"] == "2026-01-01T00:00:00.500000Z"
    stale = _raises(kube.replace_lease, "default", dict(mine, spec={"holderIdentity": "run-2"}))
    assert (stale.status, stale.reason) == (409, "Conflict")
    assert kube.get_lease("default", name)["spec"]["holderIdentity"] == "run-1"
    zero = dict(updated, spec={"holderIdentity": "run-3", "leaseDurationSeconds": 0})
    assert _raises(kube.replace_lease, "default", zero).status == 422


def test_a_lease_update_must_name_a_version_and_one_of_a_missing_lease_creates_it(world):
    """What the generic registry does with the Lease writes the pool budget, the planning claims and the run
    record never send but a mistake would: an update without a resourceVersion is 422 (the lease strategy
    allows no unconditional update: the double applied it), a create carrying one is 500, and an update of a
    Lease someone deleted creates it again (AllowCreateOnUpdate: the double answered 404)."""
    kube, name = world.client(attempts=1), world.unique("ack-mig-hook-pool-np")
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "default", "annotations": {"ack-mig-hook/slots": "{}"}},
            "spec": {}}
    made = _raises(kube.create_lease, "default", dict(body, metadata=dict(body["metadata"], resourceVersion="7")))
    assert made.status == 500 and "resourceVersion should not be set on objects to be created" in str(made)
    first = kube.create_lease("default", body)
    blind = dict(body, spec={"holderIdentity": "run-1"})
    err = _raises(kube.replace_lease, "default", blind)
    assert (err.status, err.reason) == (422, "Invalid") and \
        "metadata.resourceVersion: Invalid value: 0: must be specified for an update" in str(err)
    assert kube.get_lease("default", name)["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    gone = dict(body, metadata=dict(body["metadata"], name=name + "-gone", resourceVersion="5"))
    again = kube.replace_lease("default", gone)
    assert again["metadata"]["annotations"] == {"ack-mig-hook/slots": "{}"} and \
        again["metadata"]["resourceVersion"] != "5"


def test_a_stranded_record_is_ended_on_the_version_listed_a_stale_or_gone_node_left(world):
    """What an auto tick's finish_stranded (functions/rollout/auto_waves.py) relies on, through the Nodes a
    label-selector list reads page by page (supply.list_pool_nodes, pages of 2, other pools' Nodes between
    them): the merge patch carries the resourceVersion listed, so a Node changed since is 409 and keeps its
    record and opt-out, a Node deleted since is 404; on the version listed the record ends and null removes
    the autoscaler's opt-out, the Node's other annotations kept. The stopped run's slot on an ended Node, run
    out, leaves the pool's Lease by a PUT on the version read, before the record ends (a tick stopped between
    the two leaves a stranded record, never a slot no run gives back), so a Node whose record stays has lost its
    run-out slot too."""
    import json

    from functions.base.settings import load_settings
    from functions.decision import budget as pb, waves as rp
    from functions.kube.supply import list_pool_nodes
    from functions.rollout.auto_waves import finish_stranded

    pool = world.unique("np")
    record = json.dumps({"target": "per-gpu=3g.20gb-3g.20gb", "step": "applying", "owner": "x", "expires": 1.0,
                         "drain": False, "autoscaler": True})
    names = []
    for i in range(5):
        name = world.unique("auto-%d" % i)
        world.add_node(name, labels={"alibabacloud.com/nodepool-id": pool if i < 4 else pool + "-other"})
        world.annotate_node(name, {rp.PROGRESS_ANNOTATION: record, rp.SCALE_DOWN_DISABLED: "true", "keep": "me"})
        names.append(name)
    ended, stale, gone, kept, _other = names
    kube = world.client(page=2)
    lease = pb.lease_name(pool)
    kube.create_lease("default", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                  "metadata": {"name": lease, "namespace": "default", "annotations": {
                                      pb.SLOTS_ANNOTATION: pb.write_slots({ended: pb.Slot("x", 1.0),
                                                                           stale: pb.Slot("x", 1.0)}, 1.0, 1.0)}},
                                  "spec": {}})

    def slots():
        return set(pb.read_slots(kube.get_lease("default", lease)["metadata"]["annotations"][pb.SLOTS_ANNOTATION]))

    listed = list_pool_nodes(kube, "alibabacloud.com/nodepool-id=" + pool)
    assert sorted(n["metadata"]["name"] for n in listed) == sorted(names[:4])
    world.label_node(stale, {"someone": "else"})
    world.delete_node(gone)
    settings = load_settings({"ACK_MIG_STARTUP_TAINT": "none"})
    mine = [n for n in listed if n["metadata"]["name"] != kept]
    lines = finish_stranded(kube, mine, settings, "tick-2", pool)
    assert [line.split(":")[0] for line in lines] == ["node " + ended], lines
    assert "slot of the pool's budget, run out, was given back" in lines[0] and slots() == set(), lines
    notes = world.node(ended)["metadata"]["annotations"]
    assert json.loads(notes[rp.PROGRESS_ANNOTATION])["step"] == rp.DONE and notes["keep"] == "me"
    assert rp.SCALE_DOWN_DISABLED not in notes
    for name in (stale, kept):
        notes = world.node(name)["metadata"]["annotations"]
        assert (notes[rp.PROGRESS_ANNOTATION], notes[rp.SCALE_DOWN_DISABLED]) == (record, "true"), name
    again = [n for n in list_pool_nodes(kube, "alibabacloud.com/nodepool-id=" + pool)
             if n["metadata"]["name"] == stale]
    assert len(finish_stranded(kube, again, settings, "tick-2", pool)) == 1 and slots() == set()
    assert rp.SCALE_DOWN_DISABLED not in world.node(stale)["metadata"]["annotations"]


def test_the_date_header_is_the_servers_clock_cut_to_whole_seconds(world):
    """KubeApi.server_time reads the Date header: the pool Lease's change marks and a tick's pending list are
    on that clock, and plan_claim's STALE_MARGIN_S and the tick's relist (two margins later) rely on it being
    whole seconds cut down, never rounded up (Go's net/http formats time.Now() with http.TimeFormat). Calls
    a tenth of a second apart over a second: each Date is the second the call was answered in."""
    import math
    import time

    from functions.rollout.plan_claim import STALE_MARGIN_S

    node, kube = _gpu_node(world), world.client(clock=lambda: 0.0)  # server_time(): the last Date itself
    seen = []
    for _ in range(11):
        before = time.time()
        kube.get_node(node)
        after = time.time()
        seen.append((before, kube.server_time(), after))
        time.sleep(0.1)
    for before, date, after in seen:
        assert date == int(date) and math.floor(before) <= date <= after, (before, date, after)
    assert STALE_MARGIN_S == 1.0  # one whole second of the header's resolution


def _answer_lost(kube):
    """``kube`` whose next Lease update reaches the server and is written there, its answer lost."""
    real, lost = kube.replace_lease, []

    def replace_lease(namespace, lease):
        answer = real(namespace, lease)
        if not lost:
            lost.append(answer)
            raise ApiError("PUT lease: no complete answer (test)")
        return answer

    kube.replace_lease = replace_lease
    return kube


def test_lease_writes_whose_answer_was_lost_are_given_back_on_the_servers_version(world):
    """The planning claim and the pool budget's slot (plan_claim.py, pool_lease.py): a write the server took
    whose answer never came is given back on the Lease's version read again, and another invocation may
    then claim the pool and take the slot. The claim's give-back marks the pool changed on the Date header's
    clock: a pending list from before it reads as before the change, one two margins later as after."""
    import time

    from functions.rollout.plan_claim import STALE_MARGIN_S, PlanClaims
    from functions.rollout.pool_lease import PoolBudget

    pool, node = world.unique("np"), _gpu_node(world)
    one = PlanClaims(_answer_lost(world.client(attempts=1)), "tick-1", time.time, 600.0, 300.0)
    other = PlanClaims(world.client(), "tick-2", time.time, 600.0, 300.0)
    assert _raises(one.take, pool, pool, one.until).status is None and one.held == [pool]
    assert "being planned" in other.take(pool, pool, other.until).why
    listed = world.client(clock=lambda: 0.0)
    listed.get_node(node)
    before = listed.server_time()
    one.release_all()
    assert one.held == [] and other.take(pool, pool, other.until).why == ""
    assert other.take(pool, pool, other.until).changed_since(before) is False  # released unmarked
    other.release(pool, touched=True)
    taken = other.take(pool, pool, other.until)
    assert taken.changed_since(before)
    time.sleep(2 * STALE_MARGIN_S)
    listed.get_node(node)
    assert not taken.changed_since(listed.server_time())
    other.release_all()

    budget = PoolBudget(_answer_lost(world.client(attempts=1)), "run-1", time.time, 600.0)
    assert _raises(budget.take, pool, pool, node, 1, time.time() + 600).status is None
    assert "run-1" in str(world.client().get_lease("default", "ack-mig-hook-pool-" + pool))
    budget.release(pool, node)
    assert PoolBudget(world.client(), "run-2", time.time, 600.0).take(pool, pool, node, 1, time.time() + 600) == ""


def test_a_kubelet_credential_reaches_its_own_node_only(world):
    """What node_bootstrap's kubelet credential may do on the node (it labels its own Node): the Node
    authorizer and NodeRestriction (plugin/pkg/auth/authorizer/node, plugin/pkg/admission/noderestriction)
    on the real server, tests/support/kubeapi.py's rules on the double."""
    name, kubelet = world.kubelet()
    other, ns = _gpu_node(world), world.namespace()
    world.add_node(name, labels={"pool": "p"}, capacity={"nvidia.com/gpu": "8"})
    world.add_pod(ns, "mine", name, labels={"app": "a"}, gpus=1)
    world.add_pod(ns, "theirs", other, labels={"app": "a"}, gpus=1)
    assert kubelet.get_node(name)["metadata"]["name"] == name
    # its own labels: the MIG layout node_bootstrap writes
    patched = kubelet.patch_node(name, {"metadata": {"labels": {"nvidia.com/mig.config.state": "success"}}})
    assert patched["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    assert _raises(kubelet.patch_node, other, {"metadata": {"labels": {"x": "y"}}}).status == 403
    taint = {"spec": {"taints": [{"key": "ack-mig-hook/x", "value": "y", "effect": "NoSchedule"}]}}
    assert _raises(kubelet.patch_node, name, taint).status == 403  # NodeRestriction: taints are not the kubelet's
    assert [p["metadata"]["name"] for p in kubelet.list_pods(name)] == ["mine"]
    assert _raises(kubelet.list_pods, other).status == 403
    # reading another Node, or every Node, is refused too (the authorizer's node selectors)
    assert _raises(kubelet.get_node, other).status == 403
    assert _raises(kubelet.list_nodes).status == 403


ANNOTATIONS_LIMIT = 256 * 1024  # apimachinery ValidateAnnotations: keys and values, summed in bytes
TOO_LONG = "metadata.annotations: Too long: may not be more than 262144 bytes"


def _room(annotations):
    return ANNOTATIONS_LIMIT - sum(len(k.encode()) + len(v.encode()) for k, v in (annotations or {}).items())


def test_a_node_s_annotations_past_256_kib_are_422_and_change_nothing(world):
    """What a node whose kubelet or another controller filled its annotations answers the rollout's record:
    the whole map up to 262,144 bytes (keys and values summed, UTF-8) is taken, one byte more is 422 Invalid
    with the cause FieldValueTooLong, and the Node keeps what it had."""
    name = _gpu_node(world)
    kube = world.client()
    room = _room(kube.get_node(name)["metadata"].get("annotations"))
    full = kube.patch_node(name, {"metadata": {"annotations": {"f": "x" * (room - 1)}}})
    assert _room(full["metadata"]["annotations"]) == 0
    err = _raises(kube.patch_node, name, {"metadata": {"annotations": {"g": ""}}})
    assert (err.status, err.reason, err.causes) == (422, "Invalid", ("FieldValueTooLong",)), err
    assert 'HTTP 422 Node "%s" is invalid: %s' % (name, TOO_LONG) in str(err), err
    assert "g" not in kube.get_node(name)["metadata"]["annotations"]
    # two bytes a character: half as many characters
    kube.patch_node(name, {"metadata": {"annotations": {"f": None}}})
    assert _raises(kube.patch_node, name, {"metadata": {"annotations": {"f": "\u00e9" * (room // 2)}}}).status == 422


def test_a_full_node_takes_a_write_that_only_shrinks_its_annotations_with_the_uncordon(world):
    """What the rollout falls back on when a full node refuses its record (functions/rollout/executor.py
    ``_unrecorded``, ``_stale``): the limit is on the object as written, so a record no longer than the one it
    replaces, or the record's removal with the cordon lifted in the same merge patch, is taken at the limit."""
    name = world.unique("node")
    world.add_node(name, labels={"pool": "p"}, capacity={"nvidia.com/gpu": "8"}, unschedulable=True)
    kube = world.client()
    kube.patch_node(name, {"metadata": {"annotations": {"ack-mig-hook/rollout": "r" * 200}}})
    room = _room(kube.get_node(name)["metadata"].get("annotations"))
    kube.patch_node(name, {"metadata": {"annotations": {"f": "x" * (room - 1)}}})
    assert _raises(kube.patch_node, name, {"metadata": {"annotations": {"ack-mig-hook/rollout": "r" * 201}}}).status \
        == 422
    same = kube.patch_node(name, {"metadata": {"annotations": {"ack-mig-hook/rollout": "s" * 200}}})
    assert _room(same["metadata"]["annotations"]) == 0
    version = same["metadata"]["resourceVersion"]
    gone = kube.patch_node(name, {"metadata": {"resourceVersion": version, "annotations": {
        "ack-mig-hook/rollout": None}}, "spec": {"unschedulable": None}})
    assert "ack-mig-hook/rollout" not in gone["metadata"]["annotations"] and not gone["spec"].get("unschedulable")


def test_a_lease_s_annotations_past_256_kib_are_422_on_create_and_update(world):
    """The pool budget's, the planning claim's, the marker's and the run record's Lease: a create or an
    update whose annotations pass 262,144 bytes is 422 Invalid, and the stored Lease is unchanged."""
    kube, name = world.client(), world.unique("ack-mig-hook-pool-np")
    big = {"ack-mig-hook/slots": "x" * (ANNOTATIONS_LIMIT - len("ack-mig-hook/slots") + 1)}
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "default", "annotations": big}, "spec": {}}
    err = _raises(kube.create_lease, "default", body)
    assert (err.status, err.reason, err.causes) == (422, "Invalid", ("FieldValueTooLong",)), err
    assert 'Lease.coordination.k8s.io "%s" is invalid: %s' % (name, TOO_LONG) in str(err), err
    assert _raises(kube.get_lease, "default", name).status == 404
    made = kube.create_lease("default", dict(body, metadata=dict(body["metadata"], annotations={"a": "b"})))
    err = _raises(kube.replace_lease, "default", dict(made, metadata=dict(made["metadata"], annotations=big)))
    assert (err.status, err.reason) == (422, "Invalid") and TOO_LONG in str(err), err
    assert kube.get_lease("default", name)["metadata"]["annotations"] == {"a": "b"}


@pytest.mark.parametrize("ops", [
    [{"op": "remove", "path": "/spec/taints/0"}],  # a Node without taints: no list to remove from
    [{"op": "test", "path": "/spec/taints/0", "value": {"key": "a", "effect": "NoSchedule"}}],
    [{"op": "replace", "path": "/metadata/labels/nobody", "value": "x"}],
    [{"op": "frob", "path": "/spec"}],
], ids=["remove-under-missing", "test-under-missing", "replace-missing", "unknown-op"])
def test_a_json_patch_that_does_not_apply_is_422_with_the_servers_words(world, ops):
    """What functions/kube/taint.py's test-and-remove meets when the taints changed under it (it reads the
    Node again on 409 or 422): every JSON patch that does not apply is 422 Invalid, one message for all."""
    name = world.unique("node")
    world.add_node(name)
    err = _raises(world.client().json_patch_node, name, ops)
    assert (err.status, err.reason) == (422, "Invalid"), err
    assert str(err).endswith("HTTP 422 the server rejected our request due to an error in our request"), err


@pytest.mark.parametrize("content_type,body,words", [
    ("application/merge-patch+json", [1], "array into Go value of type map[string]interface {}"),
    ("application/json-patch+json", {"op": "add"}, "object into Go value of type []handlers.jsonPatchOp"),
])
def test_a_patch_that_is_not_of_its_type_is_400(world, content_type, body, words):
    name = world.unique("node")
    world.add_node(name)
    err = _raises(world.client().request, "PATCH", "/api/v1/nodes/" + name, body, content_type)
    assert (err.status, err.reason) == (400, "BadRequest") and \
        "HTTP 400 error decoding patch: json: cannot unmarshal " + words in str(err), err


@pytest.mark.parametrize("version,status", [("0", 200), ("abc", 500)])
def test_a_node_patch_at_version_zero_applies_and_one_not_a_number_is_500(world, version, status):
    """resourceVersion "0" is no precondition (storage reads it as unset); one that is not a number never
    reaches a comparison: 500 from its parse, not 409."""
    name = _gpu_node(world)
    kube = world.client(attempts=1)
    patch = {"metadata": {"resourceVersion": version, "labels": {"x": "y"}}}
    if status == 200:
        assert kube.patch_node(name, patch)["metadata"]["labels"]["x"] == "y"
    else:
        err = _raises(kube.patch_node, name, patch)
        assert err.status == 500 and 'strconv.ParseUint: parsing "abc": invalid syntax' in str(err), err
        assert "x" not in kube.get_node(name)["metadata"]["labels"]


def _lease(name, **meta):
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": dict({"name": name, "namespace": "default"}, **meta), "spec": {}}


def test_lease_bodies_the_registry_refuses(world):
    """A name that is no DNS subdomain is 422, a body naming another namespace than the URL 400, an update
    at version "0" is one without a version (422), one at a version that is not a number 500."""
    kube = world.client(attempts=1)
    err = _raises(kube.create_lease, "default", _lease("Pool_1"))
    assert (err.status, err.reason) == (422, "Invalid") and \
        'Lease.coordination.k8s.io "Pool_1" is invalid: metadata.name: Invalid value: "Pool_1": a lowercase ' \
        "RFC 1123 subdomain must consist of" in str(err), err
    name = world.unique("lease")
    err = _raises(kube.create_lease, "default", _lease(name, namespace="other"))
    assert (err.status, err.reason) == (400, "BadRequest") and "the namespace of the provided object does not " \
        "match the namespace sent on the request" in str(err), err
    made = kube.create_lease("default", _lease(name))
    err = _raises(kube.replace_lease, "default", dict(made, metadata=dict(made["metadata"], resourceVersion="0")))
    assert (err.status, err.reason) == (422, "Invalid") and "must be specified for an update" in str(err), err
    err = _raises(kube.replace_lease, "default", dict(made, metadata=dict(made["metadata"], resourceVersion="abc")))
    assert err.status == 500 and 'strconv.ParseUint: parsing "abc": invalid syntax' in str(err), err
    err = _raises(kube.replace_lease, "default", dict(made, metadata=dict(made["metadata"], namespace="other")))
    assert err.status == 400, err


@pytest.mark.parametrize("written,stored", [
    ("2026-01-01T00:00:00.500000Z", "2026-01-01T00:00:00.500000Z"),
    ("2026-01-01T08:00:00.500000+08:00", "2026-01-01T00:00:00.500000Z"),
    ("2026-01-01T00:00:00.5Z", None),
    ("2026-01-01T00:00:00Z", None),
    ("2026-01-01T00:00:00.5000000Z", None),
    ("2026-01-01T00:00:00.000000z", None),
    ("2026", None),
])
def test_a_lease_time_is_a_micro_time_with_six_digits(world, written, stored):
    """spec.renewTime and acquireTime are metav1.MicroTime, parsed with RFC3339Micro (six fraction digits,
    exactly): anything else is 400 before validation, an offset is stored as UTC. What
    functions.kube.leases.micro_time writes must be the first form."""
    kube = world.client()
    for field in ("renewTime", "acquireTime"):
        body = dict(_lease(world.unique("lease")), spec={field: written})
        if stored is None:
            err = _raises(kube.create_lease, "default", body)
            assert (err.status, err.reason) == (400, "BadRequest") and 'HTTP 400 Lease in version "v1" cannot be ' \
                'handled as a Lease: parsing time "%s" as "2006-01-02T15:04:05.000000Z07:00": cannot parse' % written \
                in str(err), err
        else:
            assert kube.create_lease("default", body)["spec"][field] == stored


@pytest.mark.parametrize("pool,said", [
    ("a" * 64, '"%s": must be no more than 63 bytes' % ("a" * 64)),
    ("np-x.", '"np-x.": a valid label must be an empty string or consist of alphanumeric characters'),
])
def test_a_pool_id_that_is_no_label_value_is_refused_in_the_servers_words(world, pool, said):
    """functions.pipeline.auto_pool.labelled_nodes: the 400 for the pool's selector is the pool's alone, and
    its line quotes the server."""
    from functions.pipeline.auto_pool import POOL_LABEL, PoolUnproven, labelled_nodes

    with pytest.raises(PoolUnproven) as caught:
        labelled_nodes(world.client(), pool)
    err = _raises(world.client().list_nodes, "%s=%s" % (POOL_LABEL, pool))
    assert (err.status, err.reason) == (400, "BadRequest"), err
    assert "HTTP 400 unable to parse requirement: values[0][%s]: Invalid value: %s" % (POOL_LABEL, said) in str(err)
    assert caught.value.line.startswith("pool %s: the API server refused the list of its nodes (400: GET "
                                        "/api/v1/nodes: HTTP 400 unable to parse requirement: values[0]" % pool)


@pytest.mark.parametrize("change,said", [
    ({}, None),
    ({"action": None}, "action: Required value"),
    ({"reportingComponent": None}, "reportingComponent: Required value"),
    ({"reportingInstance": None}, "reportingInstance: Required value"),
    ({"reportingComponent": "bad name!"}, 'reportingComponent: Invalid value: "bad name!": name part must consist'),
    ({"message": "m" * 1025}, 'message: Invalid value: "": can have at most 1024 characters'),
    ({"action": "a" * 129}, 'action: Invalid value: "": can have at most 128 characters'),
])
def test_an_event_with_an_event_time_must_say_who_reported_what(world, change, said):
    """A core v1 Event carrying ``eventTime`` is a new-style one: legacyValidateEvent
    (pkg/apis/core/validation/events.go) requires ``reportingComponent`` (a qualified name),
    ``reportingInstance`` and ``action`` (each at most 128 characters) and a message of at most 1024; one
    without ``eventTime`` (what the hook and the node write) is held to none of it."""
    node = _gpu_node(world)
    body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": world.unique("ev"), "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "reason": "MigFailed", "message": "m", "type": "Warning", "eventTime": "2026-01-01T00:00:00.000000Z",
            "action": "Apply", "reportingComponent": "ack-mig-hook", "reportingInstance": node}
    body.update(change)
    body = {k: v for k, v in body.items() if v is not None}
    kube = world.client()
    if said is None:
        kube.create_event(body)
        old = {k: v for k, v in body.items() if k not in ("eventTime", "action", "reportingComponent")}
        kube.create_event(dict(old, metadata=dict(body["metadata"], name=world.unique("ev")), message="m" * 1025))
        return
    err = _raises(kube.create_event, body)
    assert err.status == 422 and re.search(r'Event "%s" is invalid: \[?%s' % (body["metadata"]["name"], re.escape(said)),
                                           str(err)), str(err)


def test_the_hooks_rbac_reaches_leases_in_default_only(world):
    """deploy/rbac.yaml's Role grants leases in default only: a Lease elsewhere is 403 with RBAC's words
    (responsewriters.forbiddenMessage), the user's name apart, and nothing is written."""
    kube = world.client()
    name = world.unique("lease")
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": {}}
    assert kube.create_lease("default", dict(lease))["metadata"]["name"] == name
    ns = world.namespace()
    err = _raises(kube.create_lease, ns, dict(lease))
    assert (err.status, err.reason) == (403, "Forbidden"), str(err)
    said = re.sub(r'User "[^"]*"', 'User "U"', str(err))
    assert ('leases.coordination.k8s.io is forbidden: User "U" cannot create resource "leases" in API group '
            '"coordination.k8s.io" in the namespace "%s"' % ns) in said, said
