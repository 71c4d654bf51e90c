"""Pod events as triggers of an auto pool (issue 37): a Kubernetes ``FailedScheduling`` event, as ACK's
kube-eventer publishes it to EventBridge, into the FC handler and ``run_event``; pods on the local TLS
Kubernetes API server; the real node bundle run by the local transport on a simulated A100 80GB.

The sample, tests/events/ack_pod_failed_scheduling.json, is built field by field from the two sources that
define it (it was not captured from a live cluster):

* the CloudEvent: AliyunContainerService/kube-eventer ``sinks/eventbridge/driver.go`` (``toCloudEvent``):
  ``source`` ``acs.cs``, ``type`` ``cs:k8s:<involvedObject.kind>RelatedEvent``, ``subject``
  ``acs:cs:<region>:<account>:<cluster id>/apis/<apiVersion>/namespaces/<ns>/pods/<name>``
  (``createEventSubject``), ``datacontenttype`` ``application/json``, ``time`` RFC 3339 UTC, the extension
  ``aliyuneventbusname``, and ``data`` the Kubernetes v1 Event marshalled as JSON; EventBridge's own
  attributes (``aliyunaccountid``, ``aliyunregionid``, ``aliyunpublishtime``, ``aliyunoriginalaccountid``) as in
  the other EventBridge samples here. EventBridge's "ACK events" page lists ``cs:k8s:PodRelatedEvent`` among
  the ACK event types, published by ack-node-problem-detector's eventer with the EventBridge sink.
* ``data``: a core/v1 Event of kube-scheduler's ``FailedScheduling``, which the scheduler records through
  events.k8s.io/v1 (client-go ``tools/events``), so its core/v1 form has ``eventTime``, ``action``
  ``Scheduling``, ``reportingComponent`` ``default-scheduler``, and null ``firstTimestamp``/``lastTimestamp``.
"""

import copy
import json
import os
import sys
import threading
import time
import uuid
from urllib.parse import unquote

import pytest

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.decision import coalesce as co
from functions.delivery.node_executor import DeliveryExecutor, make_transport
from functions.kube.client import KubeApi
from functions.pipeline.event import run_event
from functions.rollout.plan_marker import marker_lease
from node_bootstrap.kube import load_kubeconfig
from tests.delivery.test_auto_pool_e2e import (CLUSTER, INSTANCE, POOL, TICK, DevicePlugin, add_node, held, lookup,
                                               node_args, seven_gb_node, snapshot, waiting)
from tests.function.conftest import EVENTS, ROOT, cloud_env, emulator, inventory_dict, no_proxy  # noqa: F401  (fixtures)
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.module_time import module_time

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]

SAMPLE = os.path.join(EVENTS, "ack_pod_failed_scheduling.json")


def pod_event(namespace, name, cluster=CLUSTER):
    """The sample, about another pod (as kube-eventer would send it for that pod)."""
    event = json.load(open(SAMPLE))
    event["id"] = str(uuid.uuid4())
    event["subject"] = "acs:cs:cn-beijing:1234567890123456:%s/apis/v1/namespaces/%s/pods/%s" % (cluster, namespace,
                                                                                                name)
    event["data"]["involvedObject"].update(namespace=namespace, name=name, uid=str(uuid.uuid4()))
    event["data"]["metadata"].update(namespace=namespace, name="%s.181e0c3a9f2b7d41" % name)
    return json.dumps(event).encode()


def node_env(tmp_path):
    args = node_args(tmp_path)
    # A whole invocation of FC's (the template's Timeout): room for the rounds a burst asks for. No dwell
    # (docs/auto-pools.md): this simulated node runs with --no-label, so its Node keeps the sequence it had and
    # the next round sees GPU 0 as before; the dwell would keep that stale layout (it has its own tests).
    return {"ACK_MIG_TRANSPORT": "local", "ACK_MIG_NODE_ARGS": args, "ACK_MIG_NODE_TIMEOUT_S": "60",
            "ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_LOG_LEVEL": "ERROR", "ACK_MIG_CLUSTER_ID": CLUSTER,
            "ACK_MIG_INVOCATION_TIMEOUT_S": "14400", "ACK_MIG_AUTO_DWELL_S": "0"}


class Gate:
    """An executor that holds every node's apply until the test opens it (a plan that is still running);
    ``calls``: the applies asked for."""

    def __init__(self, inner):
        self.inner, self.entered, self.open, self.calls = inner, threading.Event(), threading.Event(), 0

    def execute(self, request, decisions):
        if not decisions:  # the rollout's call for the nodes outside its waves: none here
            return self.inner.execute(request, decisions)
        self.calls += 1
        self.entered.set()
        assert self.open.wait(60)
        return self.inner.execute(request, decisions)


@pytest.fixture
def cluster(kube_api, tmp_path):  # noqa: F811
    add_node(kube_api)
    nodes = seven_gb_node(tmp_path)
    settings = load_settings(node_env(tmp_path))
    transport = make_transport(settings, sim_state_dir=str(nodes), root=str(tmp_path / "node-root"),
                               python=sys.executable)
    executor = DevicePlugin(DeliveryExecutor.from_settings(settings, transport=transport), kube_api, nodes)
    api = KubeApi(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert())))
    yield kube_api, api, settings, executor, nodes / ("%s.json" % INSTANCE)
    api.close()


class ClusterClock:
    """The test API server's wall clock (its answers' Date, which the invocations time the marker and the leases
    on: functions/kube/leases.py's cluster_now), moved by ``sleep``: a wait on the cluster's time passes at once,
    and what the invocation reads after it is as late as after a real sleep (rounds still begin
    coalesce.SPACING_S apart on the cluster's clock)."""

    def __init__(self):
        self.shift = 0.0

    def __call__(self):
        return time.time() + self.shift

    def sleep(self, seconds):
        self.shift += max(0.0, seconds)


@pytest.fixture
def clock(cluster, monkeypatch):
    """The plan marker's wait between rounds, the client's backoff (its siblings' too) and the rollout's waits
    (a tick's list read again two of the Date's seconds later: auto_pool.relist) sleep on ``clock``, which is
    the rollout's clock too (as tests/rollout/conftest.py's Cluster: the invocation and the cluster share the
    test's time)."""
    from functions.rollout import plan_marker, run as rollout

    server, api = cluster[0], cluster[1]
    clock = ClusterClock()
    server.clock = clock

    class Marker(plan_marker.PlanMarker):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("sleep", clock.sleep)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(plan_marker, "PlanMarker", Marker)
    monkeypatch.setattr(api, "sleep", clock.sleep)
    monkeypatch.setattr(rollout, "clock", clock)
    monkeypatch.setattr(rollout, "sleep", clock.sleep)
    return clock


def run(raw, cluster, executor=None, **kw):
    server, api, settings, default, _ = cluster
    return run_event(raw, settings, inventory=lookup(), executor=executor or default, kube=api,
                     logger=JsonLogger("OFF"), **kw)


def holding(cluster, gate):
    """A pod ``first`` waits and its event runs in a thread until its plan is applying (held at ``gate``):
    the thread and the dict its result goes to (``"result"``)."""
    server = cluster[0]
    waiting(server, "first", "1g.10gb")
    holder = {}
    thread = threading.Thread(target=lambda: holder.setdefault("result", run(pod_event("llm", "first"), cluster,
                                                                             executor=gate)))
    thread.start()
    assert gate.entered.wait(60)  # the first plan is applying now
    return thread, holder


def acked(nodes):
    """What ACK's DescribeClusterNodes lists for a fake pool: every Node the fake API server lists there (their
    names, and the instance each one's providerID names), so every one is a proven member."""
    from types import SimpleNamespace

    from functions.decision.waves import instance_of

    return [SimpleNamespace(node_name=n["metadata"]["name"],
                            instance_id=instance_of((n.get("spec") or {}).get("providerID")) or "i-unnamed")
            for n in nodes]


def stored_marker(server, pool=POOL):
    lease = server.leases.get(("default", marker_lease(pool)))
    return json.loads(lease["metadata"]["annotations"][co.MARKER_ANNOTATION]) if lease else None


def profiles(state_file):
    return [p for p, _ in held(state_file)]


def through_the_handler(emulator, kube_api, tmp_path, monkeypatch, inventory):  # noqa: F811
    """The world the handler runs in as FC calls it: ``inventory`` on the ACK API (the CS emulator, real SDK),
    the pods through the kubeconfig ACK issues, the pool's node gpu-a simulated behind the local transport.
    Returns the settings and the folder of the simulated nodes' states."""
    from functions.pipeline import point_of_change

    add_node(kube_api)
    nodes = seven_gb_node(tmp_path)
    emulator.load_inventory(inventory)
    emulator.kubeconfig = open(kube_api.function_kubeconfig(tmp_path / "ack.conf", inline=True)).read()  # its RBAC
    env = dict(cloud_env(emulator), **node_env(tmp_path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(env)
    transport = make_transport(settings, sim_state_dir=str(nodes), root=str(tmp_path / "node-root"),
                               python=sys.executable)
    executor = DevicePlugin(DeliveryExecutor.from_settings(settings, transport=transport), kube_api, nodes)
    monkeypatch.setattr(point_of_change, "make_executor", lambda s, dry: executor)
    return settings, nodes


def pending_lists(server):
    """How many lists of the cluster's Pending pods the server answered (first pages: a list is paged)."""
    return sum(1 for r in server.requests if r.path == "/api/v1/pods" and "status.phase=Pending" in unquote(r.query)
               and "continue=" not in r.query)


def test_the_sample_event_through_the_fc_handler_gives_the_pod_its_instance(emulator, kube_api, tmp_path,
                                                                              monkeypatch):  # noqa: F811
    """The handler as FC calls it (bytes in, JSON text out), the pools from the ACK API (the CS emulator, real
    SDK), the pods through the kubeconfig ACK issues; only the transport is the local one."""
    from functions import handler as fc

    inventory = snapshot()
    # a labelled pool whose autoscaler tags are not set yet: the timer's to write, not this pod's event
    inventory["nodepools"].append({"nodepool_info": {"nodepool_id": "np-static", "name": "static"},
                                   "kubernetes_config": {"labels": [{"key": "ack.aliyun.com/gpu-partition-size",
                                                                     "value": "1g.10gb"}]},
                                   "auto_scaling": {"enable": True},
                                   "scaling_group": {"scaling_group_id": "asg-static",
                                                     "instance_types": ["ecs.ebmgn7e.32xlarge"]}})
    _, nodes = through_the_handler(emulator, kube_api, tmp_path, monkeypatch, inventory)
    waiting(kube_api, "llm-7b-5d8f7c9b6d-q4x2m", "1g.10gb")
    out = json.loads(fc.handler(open(SAMPLE, "rb").read(), None))
    assert out["outcome"] == "done" and out["trigger"] == "pod-unschedulable", out["reason"]
    (node,) = out["nodes"]
    assert node["outcome"] == "partitioned", node
    assert "1g.10gb" in profiles(nodes / ("%s.json" % INSTANCE))
    # The pod was read again (one list of its namespace by name), the plan marker let go, the event kept.
    assert any(r.path == "/api/v1/namespaces/llm/pods" and "metadata.name=llm-7b-5d8f7c9b6d-q4x2m" in unquote(r.query)
               for r in kube_api.requests)
    # The cluster's Pending pods were listed once, by the plan: which pool takes this pod depends on no
    # other pod (no pool holds idle instances of a profile it no longer allows), so the choice lists none.
    assert pending_lists(kube_api) == 1
    marker = stored_marker(kube_api)
    assert marker["holder"] == "" and marker["asked"] == 1
    # The pools were listed three times: by the event (its plan uses that list), for its tags after its claim
    # (another invocation may have written them since), and by the rollout before the node's slot (a pause set
    # after the plan stops it); only the event's pool's tags were synced.
    assert emulator.calls("DescribeClusterNodePools") == 3
    assert [t["nodepool_id"] for t in out["pool_tags"]] == [POOL]
    assert emulator.calls("ModifyClusterNodePool") == 0
    # Every call the event made is one deploy/rbac.yaml grants (the pod's lookup is a list: no new grant),
    # and every Lease it wrote is in default.
    import yaml

    from tests.rollout.test_waves import _rbac

    with open(os.path.join(ROOT, "deploy", "rbac.yaml")) as fh:
        roles = [d for d in yaml.safe_load_all(fh) if d and d["kind"] in ("ClusterRole", "Role")]
    granted = {(res, verb) for role in roles for rule in role["rules"] for res in rule["resources"]
               for verb in rule["verbs"]}
    used = {_rbac(r.method, r.path) for r in kube_api.requests}
    assert used <= granted, used - granted
    assert all(r.path.startswith("/apis/coordination.k8s.io/v1/namespaces/default/")
               for r in kube_api.requests if "/leases" in r.path)
    assert marker["last"]["pod"] == "llm/llm-7b-5d8f7c9b6d-q4x2m" and marker["last"]["event"] == \
        json.load(open(SAMPLE))["id"]


EARLIER = "np00a1b2c3d4e5f60718293a4b5c6d7e8f"  # an auto pool whose id sorts before POOL's


def spare_instance_world(emulator, kube_api, tmp_path, monkeypatch):  # noqa: F811
    """Two auto pools; the earlier (by id), EARLIER, now allows only 3g.40gb, and its node gpu-old still holds
    an idle 1g.10gb made before the label changed; two pods ask 1g.10gb (``first``, then the sample's pod):
    which pool counts the sample's pod depends on the pods that wait. Returns the settings, the folder of
    the simulated nodes' states, and the two pods' names."""
    inventory = snapshot()
    inventory["nodepools"].append({
        "nodepool_info": {"nodepool_id": EARLIER, "name": "llm-auto-old"},
        "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"},
                                         {"key": "ack-mig-hook/layout-profiles", "value": "3g.40gb"}]},
        "auto_scaling": {"enable": True},
        "scaling_group": {"scaling_group_id": "asg-old", "instance_types": ["ecs.ebmgn7e.32xlarge"]}})
    inventory["nodes"].append({"instance_id": "i-2zeauto0a100x80g09", "node_name": "gpu-old", "nodepool_id": EARLIER,
                               "state": "running", "instance_type": "ecs.ebmgn7e.32xlarge",
                               "ip_address": ["127.0.0.1"]})
    settings, nodes = through_the_handler(emulator, kube_api, tmp_path, monkeypatch, inventory)
    kube_api.add_node("gpu-old", labels={"alibabacloud.com/nodepool-id": EARLIER,
                                         "aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                                         "aliyun.accelerator/nvidia_count": "1",
                                         "nvidia.com/mig.config.state": "success"},
                      annotations={"ack-mig-hook/gpu-layouts": json.dumps({"0": [["1g.10gb", 0], ["3g.40gb", 4]]})},
                      capacity={"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-3g.40gb": "1"})
    first, sample = "llm-7b-5d8f7c9b6d-b2v7n", "llm-7b-5d8f7c9b6d-q4x2m"
    assert first < sample  # pod order: the idle 1g.10gb is the first pod's
    waiting(kube_api, first, "1g.10gb")
    waiting(kube_api, sample, "1g.10gb")
    return settings, nodes, first, sample


def test_the_sample_event_gives_its_pod_the_pool_the_timer_gives_it(emulator, kube_api, tmp_path,
                                                                     monkeypatch):  # noqa: F811
    """Two auto pools; the earlier (by id) now allows only 3g.40gb, and its node still holds an idle 1g.10gb
    made before the label changed. Two pods ask 1g.10gb: the timer's plan spends that instance on the first
    pod (pod order) and gives the second, the sample's, to POOL, whose idle 7g.80gb GPU is repartitioned for
    it. The sample event's choice judged its pod alone: the idle instance kept it counted in the earlier
    pool, whose step left it uncounted and changed nothing; nothing planned POOL for it until the timer."""
    from functions import handler as fc

    settings, nodes, first, sample = spare_instance_world(emulator, kube_api, tmp_path, monkeypatch)
    # The timer's plan: POOL's GPU gets a 1g.10gb for the second pod (a dry run: nothing changes)
    timer = run_event(TICK, settings, logger=JsonLogger("OFF"), dry_run=True)
    assert [(n["node_name"], n["outcome"]) for n in timer.nodes] == [("gpu-a", "dry-run")], timer.reason
    assert "1g.10gb" in timer.nodes[0]["reason"], timer.nodes
    before = pending_lists(kube_api)
    out = json.loads(fc.handler(open(SAMPLE, "rb").read(), None))
    assert out["outcome"] == "done", out["reason"]
    assert [(n["node_name"], n["outcome"]) for n in out.get("nodes") or []] == [("gpu-a", "partitioned")], out["reason"]
    assert "1g.10gb" in profiles(nodes / ("%s.json" % INSTANCE))
    # The choice depended on the pods waiting before this one: it listed them, and its plan planned on that
    # list (no event asked between it and the round: pod_event._plan), not on a second one of every Pending
    # pod of the cluster. The plan is the timer's, GPU for GPU.
    assert pending_lists(kube_api) - before == 1
    layouts = [(d["node_name"], d["gpu_layouts"]) for d in out["decisions"] if d["action"] == "partition"]
    assert layouts == [(d.node_name, d.model_dump(mode="json")["gpu_layouts"]) for d in timer.decisions
                       if d.action == "partition"] and layouts, (layouts, timer.decisions)
    assert stored_marker(kube_api)["last"]["pod"] == "llm/" + sample and stored_marker(kube_api, EARLIER) is None
    # the first pod's event plans the earlier pool, whose idle 1g.10gb serves it: nothing changes
    out = json.loads(fc.handler(pod_event("llm", first), None))
    assert out["outcome"] == "done" and not out.get("nodes"), out
    assert stored_marker(kube_api, EARLIER)["last"]["pod"] == "llm/" + first


def test_a_pool_whose_pods_cannot_be_read_fails_alone_in_a_pod_events_choice(emulator, kube_api, tmp_path,
                                                                             monkeypatch):  # noqa: F811
    """The world above, with the pods on the earlier pool's node gpu-old unreadable (a 503 after the client's
    tries). The choice reads them only because that pool's idle 1g.10gb decides between the pools; the failed
    list ended the whole event in retry, and POOL, which counts the sample's pod on every reading of gpu-old (its
    one idle 1g.10gb goes to the first pod, pod order, as the tick's unread pool holds it back), was not
    planned. Now that pool fails alone, as in the timer's tick: the sample's pod gets POOL's instance now (the
    step still ends in retry naming the unread pool, as the tick does); the first pod, which may be that pool's
    own, ends in retry saying so, and nothing is planned for it elsewhere."""
    from functions.kube import client as kube_client

    settings, nodes, first, sample = spare_instance_world(emulator, kube_api, tmp_path, monkeypatch)
    # every try of those lists is made, as many as the client's attempts; their back-off (0.25 s doubling, about
    # 3 s a list) is no part of what is checked here, and waited in real time it was nearly all of the test's
    monkeypatch.setattr(kube_client, "BACKOFF_S", 0.001)
    kube_api.break_next(times=10 ** 6, status=503, method="GET", path="/api/v1/pods", query="spec.nodeName=gpu-old")
    out = run_event(open(SAMPLE, "rb").read(), settings, logger=JsonLogger("OFF"))
    assert [(n["node_name"], n["outcome"]) for n in out.nodes or []] == [("gpu-a", "partitioned")], out.reason
    assert "1g.10gb" in profiles(nodes / ("%s.json" % INSTANCE))
    assert out.outcome == "retry" and "pool %s: the pods on its nodes could not be read" % EARLIER in out.reason, \
        out.reason
    made = profiles(nodes / ("%s.json" % INSTANCE))
    out = run_event(pod_event("llm", first), settings, logger=JsonLogger("OFF"))
    assert out.outcome == "retry" and not out.nodes, out.reason
    assert out.reason.startswith("pod llm/%s may be the demand of auto pool %s, the pods on whose nodes could not "
                                 "be read" % (first, EARLIER)), out.reason
    assert profiles(nodes / ("%s.json" % INSTANCE)) == made and stored_marker(kube_api, EARLIER) is None
    # FC's retry, once the pods read again: the earlier pool's idle 1g.10gb serves the first pod, nothing changes
    with kube_api.lock:
        kube_api._throttles.clear()
    out = run_event(pod_event("llm", first), settings, logger=JsonLogger("OFF"))
    assert out.outcome == "done" and not out.nodes, out.reason
    assert stored_marker(kube_api, EARLIER)["last"]["pod"] == "llm/" + first


@pytest.mark.parametrize("asked", ["before its ask", "before its round"])
def test_an_ask_after_the_choices_list_gets_the_round_a_new_list(emulator, kube_api, tmp_path, monkeypatch,
                                                                 asked):  # noqa: F811
    """The event's first round plans on the list its choice read only where no other event asked for the pool
    since that list. Here a pod, ``late`` (2g.20gb, POOL's only), starts to wait after that list and its event
    asks: before this event's ask (it took over a holder that had no time for another round, so this event's
    round answers for it), or after it and before the round (answered coalesced into this holder). Planned on
    the choice's list, the round lacked ``late`` and, its count of asks already taken, let go: the pod waited
    for the timer. It gets a new list, which holds ``late``."""
    import time as time_mod

    from functions import handler as fc
    from functions.rollout.plan_marker import PlanMarker

    _, nodes, _, _ = spare_instance_world(emulator, kube_api, tmp_path, monkeypatch)
    arrive, begin, api = PlanMarker.arrive, PlanMarker.begin_round, None
    injected = []

    def late_pod():
        injected.append(True)
        waiting(kube_api, "late", "2g.20gb")

    def arrive_after_another(self, pool_id, pod, event_id, before=None, claim=None):
        if asked == "before its ask" and not injected and pool_id == POOL:
            late_pod()  # its event took over a closed holder just now: that holder plans no further round
            now = time_mod.time()
            kube_api.leases[("default", marker_lease(POOL))] = kube_api._stamp({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": marker_lease(POOL), "namespace": "default", "uid": "lease-late",
                             "annotations": {co.MARKER_ANNOTATION: json.dumps({
                                 "holder": "late-event", "until": now + 600, "round": now - 60, "asked": 4,
                                 "open": False, "last": {"at": now, "pod": "llm/late", "event": "e-late"}})}},
                "spec": {}})
        return arrive(self, pool_id, pod, event_id, before=before, claim=claim)

    def begin_after_another(self, pool_id, is_open=True):
        if asked == "before its round" and not injected and pool_id == POOL:
            late_pod()
            role, _ = arrive(PlanMarker(self.kube, "late-event", self.hold_s), POOL, "llm/late", "e-late")
            assert role == co.COALESCED  # into this holder, which is open
        return begin(self, pool_id, is_open)

    monkeypatch.setattr(PlanMarker, "arrive", arrive_after_another)
    monkeypatch.setattr(PlanMarker, "begin_round", begin_after_another)
    before = pending_lists(kube_api)
    out = json.loads(fc.handler(open(SAMPLE, "rb").read(), None))
    assert injected and out["outcome"] == "done", out["reason"]
    assert not out["reason"].startswith("2 rounds"), out["reason"]  # the one round planned both pods
    made = profiles(nodes / ("%s.json" % INSTANCE))
    assert "2g.20gb" in made and "1g.10gb" in made, made
    assert pending_lists(kube_api) - before == 2
    assert stored_marker(kube_api)["holder"] == ""


def test_a_burst_is_planned_in_two_rounds_and_the_events_during_the_first_are_coalesced(cluster, clock):
    server, api, settings, executor, state_file = cluster
    gate = Gate(executor)
    thread, holder = holding(cluster, gate)
    answers = []
    for i in range(5):
        waiting(server, "burst-%d" % i, "1g.10gb")
        answers.append(run(pod_event("llm", "burst-%d" % i), cluster, executor=gate))
    assert [a.outcome for a in answers] == ["skip"] * 5
    assert all(a.reason.startswith("coalesced: a plan of auto pool %s runs now" % POOL) for a in answers)
    assert gate.calls == 1  # no coalesced event planned or applied anything
    gate.open.set()
    thread.join(120)
    result = holder["result"]
    assert result.outcome == "done" and result.reason.startswith("2 rounds"), result.reason
    assert gate.calls == 2  # one more plan, for the five pods together
    assert profiles(state_file).count("1g.10gb") == 6  # every pod of the burst has its instance
    marker = stored_marker(server)
    assert marker["holder"] == "" and marker["asked"] == 6


def test_a_live_holder_renews_its_hold_and_keeps_coalescing_past_it(cluster, monkeypatch):
    """The hold is short (``coalesce.HOLD_S``), so that a holder FC ends frees its pool within it
    (tests/delivery/test_pod_event_kills.py); a live holder renews it while it works. Here its plan's apply
    lasts ten holds on the API server's clock: the marker is renewed on that clock, and an event of the pool
    then is still coalesced into it and planned in its next round, not planned beside it."""
    server, api, settings, executor, state_file = cluster
    monkeypatch.setattr(co, "RENEW_S", 0.05)  # renewals as often as the test looks (the suite holds them)
    gate = Gate(executor)
    thread, holder = holding(cluster, gate)
    server.clock = lambda: time.time() + 10 * co.HOLD_S  # the apply has run for ten holds
    waited = time.monotonic() + 60
    while stored_marker(server)["until"] <= server.clock():  # until a renewal on that clock is stored
        assert time.monotonic() < waited, stored_marker(server)
        time.sleep(0.05)
    waiting(server, "late", "2g.20gb")
    answer = run(pod_event("llm", "late"), cluster, executor=gate)
    assert answer.outcome == "skip" and answer.reason.startswith("coalesced"), answer.reason
    assert gate.calls == 1
    gate.open.set()
    thread.join(120)
    result = holder["result"]
    assert result.outcome == "done" and result.reason.startswith("2 rounds"), result.reason
    assert "2g.20gb" in profiles(state_file) and "1g.10gb" in profiles(state_file)
    assert stored_marker(server)["holder"] == ""


def test_events_lost_in_a_dead_plan_are_caught_by_the_timer(cluster):
    """A holder that FC ended mid-plan leaves a live marker: the events of its pool are coalesced into a plan
    that never comes. The auto pool timer never coalesces, and plans them."""
    server, api, settings, executor, state_file = cluster
    server.leases[("default", marker_lease(POOL))] = server._stamp({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": marker_lease(POOL), "namespace": "default", "uid": "lease-dead",
                     "annotations": {co.MARKER_ANNOTATION: json.dumps({"holder": "dead", "until": 4e9, "round": 0,
                                                                       "asked": 3})}},
        "spec": {}})
    waiting(server, "lost", "2g.20gb")
    answer = run(pod_event("llm", "lost"), cluster)
    assert answer.outcome == "skip" and answer.reason.startswith("coalesced"), answer.reason
    assert "2g.20gb" not in profiles(state_file)  # lost for now
    result = run(TICK, cluster)
    assert result.outcome == "done", result.reason
    assert "2g.20gb" in profiles(state_file)


def test_a_dead_plans_marker_runs_out_with_its_lease_and_the_next_event_plans(cluster):
    server, api, settings, executor, state_file = cluster
    server.leases[("default", marker_lease(POOL))] = server._stamp({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": marker_lease(POOL), "namespace": "default", "uid": "lease-dead",
                     "annotations": {co.MARKER_ANNOTATION: json.dumps({"holder": "dead", "until": 1000.0})}},
        "spec": {}})
    waiting(server, "next", "3g.40gb")
    result = run(pod_event("llm", "next"), cluster)
    assert result.outcome == "done", result.reason
    assert "3g.40gb" in profiles(state_file)


def test_late_or_foreign_events_read_the_pod_again_and_change_nothing(cluster):
    server, api, settings, executor, state_file = cluster
    before = state_file.read_text()
    server.add_pod("llm", "bound", "gpu-a", phase="Running", resources={"nvidia.com/mig-1g.10gb": "1"})
    server.add_pod("llm", "cpu-only", "", phase="Pending")
    with server.lock:
        server.pods[("llm", "cpu-only")]["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    pod = server.add_pod("llm", "elsewhere", "", phase="Pending", resources={"nvidia.com/mig-1g.10gb": "1"})
    with server.lock:
        pod["spec"]["nodeSelector"] = {"pool": "other"}
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    half = server.add_pod("llm", "half", "", phase="Pending", resources={"nvidia.com/mig-1g.10gb": "1.5"})
    with server.lock:
        half["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    # a pod being deleted keeps its Unschedulable condition, but the scheduler never tries it again
    # (skipPodSchedule): its event planned GPUs for it
    waiting(server, "leaving", "1g.10gb")
    with server.lock:
        server.pods[("llm", "leaving")]["metadata"]["deletionTimestamp"] = "2026-12-06T10:00:00Z"
    cases = {"bound": "is scheduled already (gpu-a)", "cpu-only": "asks for no nvidia.com/mig-* or nvidia.com/gpu",
             "leaving": "is being deleted: the scheduler does not try it again",
             "half": "asks for nvidia.com/mig-1g.10gb=1.5; a pod may ask for a whole quantity",
             "gone": "pod llm/gone is gone", "elsewhere": "no auto pool can take pod llm/elsewhere"}
    for name, why in cases.items():
        result = run(pod_event("llm", name), cluster)
        assert result.outcome == "skip" and why in result.reason, (name, result.reason)
    # docs/auto-pools.md's step 1 of a pod event names each reason the pod read again ends it for
    with open(os.path.join(ROOT, "docs", "auto-pools.md"), encoding="utf-8") as handle:
        page = " ".join(handle.read().split())
    step = page[page.index("1. **Reads the pod again**"):page.index("2. **Finds its auto pool**")]
    said = {"bound": "bound since", "cpu-only": "asks for no `nvidia.com/mig-*` or `nvidia.com/gpu`",
            "leaving": "being deleted", "half": "not a whole quantity", "gone": "a pod that is gone"}
    assert [name for name, words in said.items() if words not in step] == [], step
    other = run(pod_event("llm", "bound", cluster="c0000000000000000000000000000000b"), cluster)
    assert other.outcome == "skip" and "this function serves %s" % CLUSTER in other.reason
    assert state_file.read_text() == before and stored_marker(server) is None  # no plan, no marker


def test_a_dry_run_plans_once_and_writes_nothing(cluster):
    server, api, settings, executor, state_file = cluster
    waiting(server, "dry", "1g.10gb")
    before = state_file.read_text()
    result = run(pod_event("llm", "dry"), cluster, dry_run=True)
    assert result.outcome == "done" and result.nodes[0]["outcome"] == "dry-run", result.reason
    assert state_file.read_text() == before and stored_marker(server) is None
    assert not [r for r in server.requests if r.method != "GET"]


def test_only_failed_scheduling_events_of_pods_are_taken(cluster):
    server = cluster[0]
    event = json.loads(pod_event("llm", "x"))
    scheduled = copy.deepcopy(event)
    scheduled["data"]["reason"] = "Scheduled"
    result = run(json.dumps(scheduled), cluster)
    assert result.outcome == "skip" and "only FailedScheduling" in result.reason
    bad = copy.deepcopy(event)
    bad["data"]["involvedObject"]["name"] = "$(reboot)"
    result = run(json.dumps(bad), cluster)
    assert result.outcome == "error" and "data.involvedObject.name" in result.reason
    assert server.requests == []  # neither reached the API server


def test_a_plan_that_breaks_lets_its_pool_go_at_once(cluster, clock):
    """An unexpected failure in the holder's round ends the event as one error line, and the marker is let go
    then, not a run lease later: the next event of the pool plans (the node itself stays with the broken
    run's rollout record until that record's lease ends, as for any run FC ended)."""
    server, api, settings, executor, state_file = cluster

    class Broken:
        def execute(self, request, decisions):
            if decisions:
                raise RuntimeError("the transport broke")
            return []

    waiting(server, "first", "1g.10gb")
    result = run(pod_event("llm", "first"), cluster, executor=Broken())
    assert result.outcome == "error" and "RuntimeError: the transport broke" in result.reason, result.reason
    assert stored_marker(server)["holder"] == ""
    again = run(pod_event("llm", "first"), cluster)
    assert again.outcome == "done" and not again.reason.startswith("coalesced"), again.reason
    (node,) = again.nodes
    assert "took this node (step applying)" in node["reason"], node


def marker_write_committed_unanswered(monkeypatch, error=None):
    """The API server commits the first write of a plan marker and its answer never comes (``error``: what the
    client raises instead, by default no complete answer within its timeout); the list holds that write."""
    from functions.kube.client import ApiError

    replace, cut = KubeApi.replace_lease, []

    def committed_unanswered(self, namespace, lease):
        answer = replace(self, namespace, lease)
        if co.MARKER_ANNOTATION in ((lease.get("metadata") or {}).get("annotations") or {}) and not cut:
            cut.append(lease)
            raise error or ApiError("no complete answer from the API server within 15s")
        return answer

    monkeypatch.setattr(KubeApi, "replace_lease", committed_unanswered)
    return cut


@pytest.mark.parametrize("read_back", ["answers", "fails"])
def test_a_marker_written_whose_answer_never_came_is_let_go_and_the_next_event_plans(cluster, clock, monkeypatch,
                                                                                      read_back):
    """The API server committed this event's plan marker (holder: this invocation) but no answer reached it
    (an overloaded server answers after the client's timeout). The invocation planned "without coalescing"
    and never let the marker go: the pool's events met a live holder, were answered coalesced, and were never
    planned (only the timer caught them). One more read shows whose the marker is: this invocation's, it
    plans as the holder, a round for the events that asked during its first included, and lets go. A read
    that fails too left the marker unknown: the invocation planned once and let go, and an event answered
    coalesced during that round (the marker named it) waited for the timer. Its rounds now begin as a
    holder's do, marked where the marker names it, so that event's pod is planned in a second round; the
    marker is let go at its end, and the next event plans."""
    from functions.kube.client import ApiError

    server, api, settings, executor, state_file = cluster
    gate = Gate(executor)
    get, failed = KubeApi.get_lease, []
    cut = marker_write_committed_unanswered(monkeypatch)

    def read_fails_once(self, namespace, name):
        if read_back == "fails" and cut and not failed and name == marker_lease(POOL):
            failed.append(name)
            raise ApiError("no complete answer from the API server within 15s")
        return get(self, namespace, name)

    monkeypatch.setattr(KubeApi, "get_lease", read_fails_once)
    thread, holder = holding(cluster, gate)
    waiting(server, "second", "2g.20gb")
    second = run(pod_event("llm", "second"), cluster, executor=gate)
    assert second.outcome == "skip" and second.reason.startswith("coalesced"), second.reason  # the marker names it
    gate.open.set()
    thread.join(120)
    first = holder["result"]
    assert cut and len(failed) == (read_back == "fails") and first.outcome == "done", first.reason
    assert stored_marker(server)["holder"] == ""  # let go as it ended
    # the holder's second round planned the pod that asked during its first, the read back or not
    assert first.reason.startswith("2 rounds"), first.reason
    assert "2g.20gb" in profiles(state_file)
    waiting(server, "third", "1g.10gb")  # let go: the next event plans
    third = run(pod_event("llm", "third"), cluster)
    assert third.outcome == "done" and not third.reason.startswith("coalesced"), third.reason


def _marker_held_by_another(server):
    """The pool's plan marker held by another invocation ("other", open, three asks), as the server stores it."""
    server.leases[("default", marker_lease(POOL))] = server._stamp({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": marker_lease(POOL), "namespace": "default", "uid": "lease-other",
                     "annotations": {co.MARKER_ANNOTATION: json.dumps({"holder": "other", "until": 4e9, "round": 0,
                                                                       "asked": 3, "open": True})}},
        "spec": {}})

def test_an_unanswered_marker_write_not_read_back_under_another_holder_still_plans(cluster, monkeypatch):
    """The marker write gets no answer and was not written; the read back fails too; the marker names another
    live holder (this event's ask is not in it). The round's beginning finds the marker another's: the event
    plans once without coalescing, not "taken over" (its pod's ask was never written for that holder to see),
    and leaves the other holder's marker alone."""
    from functions.kube.client import ApiError

    server, api, settings, executor, state_file = cluster
    _marker_held_by_another(server)
    replace, get, cut, failed = KubeApi.replace_lease, KubeApi.get_lease, [], []

    def read_fails_once(self, namespace, name):
        if cut and not failed and name == marker_lease(POOL):
            failed.append(name)
            raise ApiError("no complete answer from the API server within 15s")
        return get(self, namespace, name)

    def lost(self, namespace, lease):
        if co.MARKER_ANNOTATION in ((lease.get("metadata") or {}).get("annotations") or {}):
            cut.append(lease)
            raise ApiError("no complete answer from the API server within 15s")
        return replace(self, namespace, lease)

    monkeypatch.setattr(KubeApi, "get_lease", read_fails_once)
    monkeypatch.setattr(KubeApi, "replace_lease", lost)
    waiting(server, "first", "2g.20gb")
    result = run(pod_event("llm", "first"), cluster)
    assert cut and failed and result.outcome == "done", result.reason
    assert "2g.20gb" in profiles(state_file)
    assert stored_marker(server)["holder"] == "other" and stored_marker(server)["asked"] == 3


def test_an_unanswered_marker_write_read_back_under_another_holder_plans_once_and_says_so(cluster, monkeypatch):
    """The marker write gets no answer, and the read back works: the marker names another live holder. That
    read is the verdict (this invocation is no holder), so the event plans once without coalescing, as when the
    write was refused. It logged "not read back ... planned as its holder" and began its rounds as a holder's,
    marking a round begun: two more reads of the Lease, and up to 2 s of the pool's round spacing waited, to
    find what the read back had said."""
    import io

    from functions.kube.client import ApiError

    server, api, settings, executor, state_file = cluster
    _marker_held_by_another(server)
    replace, get, reads = KubeApi.replace_lease, KubeApi.get_lease, []

    def counted(self, namespace, name):
        if name == marker_lease(POOL):
            reads.append(name)
        return get(self, namespace, name)

    def lost(self, namespace, lease):
        if co.MARKER_ANNOTATION in ((lease.get("metadata") or {}).get("annotations") or {}):
            raise ApiError("no complete answer from the API server within 15s")
        return replace(self, namespace, lease)

    monkeypatch.setattr(KubeApi, "get_lease", counted)
    monkeypatch.setattr(KubeApi, "replace_lease", lost)
    waiting(server, "first", "2g.20gb")
    out = io.StringIO()
    server_, api_, settings_, default, _ = cluster
    result = run_event(pod_event("llm", "first"), settings_, inventory=lookup(), executor=default, kube=api_,
                       logger=JsonLogger("INFO", stream=out))
    assert result.outcome == "done", result.reason
    assert "2g.20gb" in profiles(state_file)
    assert stored_marker(server)["holder"] == "other" and stored_marker(server)["asked"] == 3
    said = [json.loads(line) for line in out.getvalue().splitlines() if '"plan marker"' in line]
    assert said and all("not read back" not in line.get("reason", "") for line in said), said
    assert any("invocation other" in line.get("reason", "") for line in said), said
    # the arrival, the read back, and the let-go's read (a write landing late would name this invocation)
    assert len(reads) == 3, reads


def test_a_marker_write_the_server_refused_is_not_read_back_nor_let_go(cluster, monkeypatch):
    """A 4xx (here RBAC's 403) is the server's answer: nothing was written, so the event plans without
    coalescing and reads the marker Lease neither back nor again to let it go (two reads an event for
    nothing, where the Lease RBAC is broken)."""
    from functions.kube.client import ApiError

    server, api, settings, executor, state_file = cluster
    replace, get, reads = KubeApi.replace_lease, KubeApi.get_lease, []

    def refused(self, namespace, lease):
        if co.MARKER_ANNOTATION in ((lease.get("metadata") or {}).get("annotations") or {}):
            raise ApiError("leases is forbidden", 403, "Forbidden")
        return replace(self, namespace, lease)

    def counted(self, namespace, name):
        if name == marker_lease(POOL):
            reads.append(name)
        return get(self, namespace, name)

    monkeypatch.setattr(KubeApi, "replace_lease", refused)
    monkeypatch.setattr(KubeApi, "get_lease", counted)
    waiting(server, "first", "1g.10gb")
    result = run(pod_event("llm", "first"), cluster)
    assert result.outcome == "done", result.reason
    assert len(reads) == 1, reads  # the arrival's own read, nothing after the refusal
    assert "1g.10gb" in profiles(state_file)


def test_an_event_whose_marker_is_not_usable_names_the_claim_its_wait_gave_up_on(cluster, monkeypatch):
    """The marker write is refused (RBAC's 403): the event plans without coalescing, and finds a timer tick
    holding the pool's planning claim. Its wait gives up at CLAIM_WAIT_S, and its line says whose claim it
    waited for and until when, as a holder's does: the operator reads who plans the pool and when the pod's
    next chance comes, not only that something else does."""
    import time as time_mod

    from functions.pipeline import pod_event as pod_event_module

    server = cluster[0]
    monkeypatch.setattr(pod_event_module, "CLAIM_POLL_S", 0.2)
    monkeypatch.setattr(pod_event_module, "CLAIM_WAIT_S", 0.3)
    annotations = server.leases[timer_holds_the_claim(server)]["metadata"]["annotations"]
    until = json.loads(next(iter(annotations.values())))["expires"]
    server.break_next(status=403, method="PUT", path="/apis/coordination.k8s.io/v1/namespaces/default/leases/"
                      + marker_lease(POOL), message='leases.coordination.k8s.io "%s" is forbidden' % marker_lease(POOL))
    waiting(server, "late", "2g.20gb")
    result = run(pod_event("llm", "late"), cluster)
    assert result.outcome == "skip", result.reason
    assert result.reason.startswith("another invocation plans auto pool %s and waited 0 s for it, the most a pod "
                                    "event waits (invocation timer-tick holds the pool's planning claim until %s, "
                                    % (POOL, time_mod.strftime("%Y-%m-%dT%H:%M:%SZ", time_mod.gmtime(until)))), \
        result.reason
    lease = server.leases.get(("default", marker_lease(POOL))) or {"metadata": {}}
    assert co.MARKER_ANNOTATION not in (lease["metadata"].get("annotations") or {})  # refused: nothing written


def test_a_marker_write_throttled_after_an_unanswered_attempt_is_read_back_and_let_go(cluster, monkeypatch):
    """A 429 is a 4xx but no verdict on the write: the client tries a write again after an attempt that got no
    answer (which the server may have committed) and ends with the last attempt's 429. Taken for "nothing
    written", the event planned without coalescing and never let go of a marker naming it: the pool's events
    were answered coalesced into an invocation that had returned, for a whole run lease."""
    from functions.kube.client import ApiError

    server, api, settings, executor, state_file = cluster
    # the first attempt committed, unanswered; the client's retries were throttled
    cut = marker_write_committed_unanswered(monkeypatch, ApiError(
        "PUT %s: HTTP 429 Too many requests" % marker_lease(POOL), 429, "TooManyRequests"))
    waiting(server, "first", "1g.10gb")
    result = run(pod_event("llm", "first"), cluster)
    assert cut and result.outcome == "done", result.reason
    assert stored_marker(server)["holder"] == ""  # read back (this invocation's), planned as holder, let go
    assert "1g.10gb" in profiles(state_file)


def timer_holds_the_claim(server):
    """A timer's tick holds the pool's planning claim (its Lease, for two minutes): the key of that Lease."""
    import time as time_mod

    from functions.decision import claim_rules
    from functions.decision.budget import lease_name

    key = ("default", lease_name(POOL))
    server.leases[key] = server._stamp({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": lease_name(POOL), "namespace": "default", "uid": "lease-timer",
                     "annotations": {claim_rules.PLANNING_ANNOTATION: json.dumps(
                         {"owner": "timer-tick", "expires": time_mod.time() + 120})}},
        "spec": {}})
    return key


@pytest.mark.parametrize("marker", ["usable", "busy"])
def test_an_event_that_finds_a_timer_tick_planning_its_pool_waits_for_it_and_plans_its_pod(cluster, monkeypatch,
                                                                                           marker):
    """The plan marker (events) and the planning claim (every tick, the timer's too) meet: a timer tick holds
    the pool's claim, having listed the pending pods before this pod waited. The event's invocation does not
    let go with the tick's "being planned" skip (the pod would wait for the next timer tick, 10 minutes away):
    it looks again until the claim is given back, then plans the pod. So does an event whose plan marker
    cannot be written (busy under a burst: planned without coalescing), which before planned once and ended
    with the tick's skip."""
    import time as time_mod

    from functions.decision import claim_rules
    from functions.pipeline import pod_event as pod_event_module

    server, api, settings, executor, state_file = cluster
    monkeypatch.setattr(pod_event_module, "CLAIM_POLL_S", 0.2)
    if marker == "busy":
        from functions.rollout import plan_marker

        def busy(self, *args, **kwargs):
            raise plan_marker.MarkerBusy("the plan marker changed under 24 writes in a row")
        monkeypatch.setattr(plan_marker.PlanMarker, "arrive", busy)
    key = timer_holds_the_claim(server)

    def give_back():  # the timer's tick ends its rollout and gives the claim back
        time_mod.sleep(1.5)
        with server.lock:
            server.leases[key]["metadata"]["annotations"].pop(claim_rules.PLANNING_ANNOTATION)
            server._stamp(server.leases[key])

    waiting(server, "late", "2g.20gb")
    thread = threading.Thread(target=give_back)
    thread.start()
    result = run(pod_event("llm", "late"), cluster)
    thread.join()
    assert result.outcome == "done", result.reason
    assert "2g.20gb" in profiles(state_file)
    # it waited on the Lease (a read every 0.2 s), listing the cluster's Pending pods only to plan: before it
    # found the claim held and after it was given back (a round at every poll listed them 9 or 10 times)
    lists = sum(1 for r in server.requests if r.path == "/api/v1/pods")
    assert lists <= 3, lists


def test_a_claim_one_event_waited_out_is_not_waited_for_again_by_the_next_events(cluster, monkeypatch):
    """A dead run's planning claim lasts until its invocation would have ended (up to 4 hours). The first event
    waits CLAIM_WAIT_S for it and gives up; every later event of the pool then became the marker's holder and
    waited its own CLAIM_WAIT_S (billed FC time, once an event). The first one notes the claim it waited out
    in the marker as it lets go; the next event ends at once naming it (no list of the Pending pods, no
    wait); once that claim is given back, the next event plans its pod and the note is dropped."""
    from functions.decision import claim_rules
    from functions.pipeline import pod_event as pod_event_module

    server, api, settings, executor, state_file = cluster
    monkeypatch.setattr(pod_event_module, "CLAIM_POLL_S", 0.2)
    monkeypatch.setattr(pod_event_module, "CLAIM_WAIT_S", 1.0)
    key = timer_holds_the_claim(server)
    waiting(server, "late", "2g.20gb")
    first = run(pod_event("llm", "late"), cluster)
    assert first.outcome == "skip" and "waited 1 s" in first.reason and "timer-tick" in first.reason, first.reason
    noted = stored_marker(server)
    assert noted["holder"] == "" and noted["waited"]["owner"] == "timer-tick", noted

    waiting(server, "later", "2g.20gb")
    before = len(server.requests)
    sleeps = []
    monkeypatch.setattr(pod_event_module, "time", module_time(sleep=sleeps.append))  # its waits, no other thread's
    second = run(pod_event("llm", "later"), cluster)
    assert second.outcome == "skip" and "gave up" in second.reason and "timer-tick" in second.reason, \
        second.reason
    assert "llm/later" in second.reason and "auto pool timer" in second.reason, second.reason
    assert sleeps == [], "waited again for a claim already waited out"
    assert not [r for r in server.requests[before:] if r.path == "/api/v1/pods"], "planned a round for it"
    assert stored_marker(server)["asked"] == noted["asked"] + 1  # its ask is counted, as a coalesced one's

    monkeypatch.undo()  # real sleeps again; the claim is given back: the next event plans
    with server.lock:
        server.leases[key]["metadata"]["annotations"].pop(claim_rules.PLANNING_ANNOTATION)
        server._stamp(server.leases[key])
    third = run(pod_event("llm", "later"), cluster)
    assert third.outcome == "done", third.reason
    assert "2g.20gb" in profiles(state_file)
    assert "waited" not in stored_marker(server)


def test_an_event_coalesced_into_a_waiter_that_gives_up_was_not_promised_its_plan(cluster, monkeypatch):
    """An event answered "coalesced" was told the holder "plans again when it ends, with pod X among the
    Pending pods"; a holder waiting for a dead run's planning claim gives up after CLAIM_WAIT_S and plans
    nothing, and the timer plans that pod. The answer now says so: the holder plans the pool's pods, or the
    auto pool timer does if it cannot."""
    from functions.pipeline import pod_event as pod_event_module

    server, api, settings, executor, state_file = cluster
    monkeypatch.setattr(pod_event_module, "CLAIM_POLL_S", 0.2)
    monkeypatch.setattr(pod_event_module, "CLAIM_WAIT_S", 2.0)
    arrived = threading.Event()

    def sleep(seconds):  # the holder's waits for the claim: the first lasts until the coalesced event arrived
        arrived.wait(60)  # (a slow run of it on a loaded machine came after the holder had given up) (hang guard)
        time.sleep(seconds)

    monkeypatch.setattr(pod_event_module, "time", module_time(sleep=sleep))
    timer_holds_the_claim(server)
    waiting(server, "late", "2g.20gb")
    waiting(server, "later", "2g.20gb")
    holder = {}
    thread = threading.Thread(target=lambda: holder.setdefault("result", run(pod_event("llm", "late"), cluster)))
    thread.start()
    deadline = time.time() + 20
    while time.time() < deadline:  # the first event holds the pool and waits for the claim
        lease = server.leases.get(("default", marker_lease(POOL))) or {}
        if co.MARKER_ANNOTATION in ((lease.get("metadata") or {}).get("annotations") or {}) \
                and stored_marker(server)["holder"]:
            break
        time.sleep(0.05)
    coalesced = run(pod_event("llm", "later"), cluster)
    arrived.set()
    thread.join()
    first = holder["result"]
    assert first.outcome == "skip" and "waited 2 s" in first.reason, first.reason  # it gave up: planned nothing
    assert coalesced.outcome == "skip" and coalesced.reason.startswith("coalesced:"), coalesced.reason
    assert "llm/later" in coalesced.reason and "or the auto pool timer does if it cannot" in coalesced.reason, \
        coalesced.reason
    assert "plans again when it ends" not in coalesced.reason, coalesced.reason


def test_an_event_whose_pool_is_deleted_while_it_waits_says_so(cluster, monkeypatch):
    """The event's pool is deleted while its round waits for a timer tick's planning claim; another auto pool
    remains. The round after the wait lists the pools again and plans nothing: it said "no node pool carries
    ack-mig-hook/layout=auto", which the other pool does. It names the pool that is gone."""
    import time as time_mod

    from functions.base.model import NodePool
    from functions.decision import claim_rules
    from functions.pipeline import pod_event as pod_event_module

    server, api, settings, executor, state_file = cluster
    monkeypatch.setattr(pod_event_module, "CLAIM_POLL_S", 0.2)
    pools = lookup()
    other = NodePool(nodepool_id=EARLIER, instance_types=["ecs.ebmgn7e.32xlarge"],
                     labels={"ack-mig-hook/layout": "auto", "ack-mig-hook/layout-profiles": "3g.40gb"})
    pools._pools = [other] + list(pools._pools)
    key = timer_holds_the_claim(server)

    def delete_then_give_back():  # the pool is deleted; the timer's tick then gives its claim back
        time_mod.sleep(1.0)
        pools._pools = [other]
        with server.lock:
            server.leases[key]["metadata"]["annotations"].pop(claim_rules.PLANNING_ANNOTATION)
            server._stamp(server.leases[key])

    waiting(server, "orphan", "2g.20gb")
    before = state_file.read_text()
    thread = threading.Thread(target=delete_then_give_back)
    thread.start()
    result = run_event(pod_event("llm", "orphan"), settings, inventory=pools, executor=executor, kube=api,
                       logger=JsonLogger("OFF"))
    thread.join()
    assert result.outcome == "skip", result.reason
    assert "no node pool carries" not in result.reason, result.reason
    assert "auto pool %s is gone or no longer carries ack-mig-hook/layout=auto" % POOL in result.reason, result.reason
    assert state_file.read_text() == before and stored_marker(server)["holder"] == ""


def test_an_event_plans_the_first_pool_that_can_take_its_pod_not_the_first_it_matches(monkeypatch):
    """Two auto pools whose nodes the pod may land on (no selector, no taints): the first allows only
    1g.10gb, or is paused; the pod asks 3g.40gb. The timer plans each pool and serves the pod in the second;
    the event planned the first only (the pod not counted there, or the pool paused) and the pod waited for
    the timer."""
    from functions.base.model import NodePool
    from functions.kube.demand import slim
    from functions.pipeline.pool_of import counted_pods
    from functions.pipeline import pod_event as pod_event_module
    from functions.pipeline.intake import parse_event

    pod = {"metadata": {"name": "big", "namespace": "llm"},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}]},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                         "reason": "Unschedulable"}]}}

    class Api:  # the two reads the event makes: the pod, and each pool's nodes (none yet: new nodes only)
        def list_all(self, path, query, reduce=None, page=None, grow=0):
            return [reduce(pod)] if query["fieldSelector"] == "metadata.name=big" else []

        def list_nodes(self, selector):
            return []

    class Pools:
        def __init__(self, pools):
            self.pools = pools

        def nodepools(self, cluster):
            return self.pools

        def nodes(self, cluster, pool_id=None):
            return acked(Api().list_nodes("alibabacloud.com/nodepool-id=%s" % pool_id))

    types = ["ecs.ebmgn7e.32xlarge"]  # A100 80GB: 3g.40gb exists
    narrow = NodePool(nodepool_id="np-a", instance_types=types,
                      labels={"ack-mig-hook/layout": "auto", "ack-mig-hook/layout-profiles": "1g.10gb"})
    paused = NodePool(nodepool_id="np-a", instance_types=types,
                      labels={"ack-mig-hook/layout": "auto", "ack-mig-hook/paused": "true"})
    wide = NodePool(nodepool_id="np-b", instance_types=types, labels={"ack-mig-hook/layout": "auto"})
    planned = []
    monkeypatch.setattr(pod_event_module, "_plan", lambda *args, **kw: planned.append(args[-2]) or "planned")
    request = parse_event(pod_event("llm", "big"))
    for first in (narrow, paused):
        assert not counted_pods(first, [], [slim(pod)], None)  # its plan counts the pod not: passed over
        assert pod_event_module.run_pod_event(request, Pools([first, wide]), CLUSTER, load_settings({}), False, None,
                                              Api(), JsonLogger("OFF")) == "planned"
    assert planned == ["np-b", "np-b"]
    # when no pool can, the first it matches is still the one its step names: paused says so
    result = pod_event_module.run_pod_event(request, Pools([paused]), CLUSTER, load_settings({}), False, None,
                                            Api(), JsonLogger("OFF"))
    assert result.outcome == "skip" and "auto pool np-a, which is paused" in result.reason


def test_a_pod_event_that_needs_a_new_node_sets_the_node_template_tags_now(cluster):
    """The pool's one GPU holds one 7g.80gb; two pods ask one each. The event's plan serves one and names a
    new node for the other: the tags that make the autoscaler add it are set by this event, within seconds,
    not by the next timer tick (the pool's tags were only ever written by the timer's step)."""
    server, api, settings, executor, state_file = cluster
    waiting(server, "whole-0", "7g.80gb")
    waiting(server, "whole-1", "7g.80gb")
    result = run(pod_event("llm", "whole-1"), cluster)
    assert result.outcome == "done", result.reason
    (tags,) = result.pool_tags
    key = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-7g.80gb"
    assert tags["set"] == {key: "8"}, tags  # a new node of 8 GPUs, one 7g.80gb each



def test_an_event_gives_its_pod_to_the_pool_the_timers_plan_would_count_it_in(monkeypatch):
    """One rule for both triggers: the pod is the demand of the first auto pool by id, not paused, whose plan
    counts it (planner.countable). The first pool's only node has one A100 80GB and no instance type the
    family table knows; the pod asks two 7g.80gb, more than that node holds. Its profile is offered there, so
    the event chose that pool, whose plan did not count the pod, while the timer counted it in the second."""
    from functions.base.model import NodePool
    from functions.kube.demand import slim
    from functions.decision.layout.matching import demand_of
    from functions.pipeline.pool_of import not_counted, planned_bounds
    from functions.pipeline import pod_event as pod_event_module
    from functions.pipeline.intake import parse_event

    pod = {"metadata": {"name": "pair", "namespace": "llm"},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-7g.80gb": "2"}}}]},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                         "reason": "Unschedulable"}]}}
    small = {"metadata": {"name": "one-gpu", "labels": {"alibabacloud.com/nodepool-id": "np-a",
                                                          "aliyun.accelerator/nvidia_name": "NVIDIA A100-SXM4-80GB",
                                                          "aliyun.accelerator/nvidia_count": "1"}},
             "spec": {}, "status": {}}

    class Api:
        def list_all(self, path, query, reduce=None, page=None, grow=0):
            return [reduce(pod)] if query["fieldSelector"] == "metadata.name=pair" else []

        def list_nodes(self, selector):
            return [small] if selector.endswith("np-a") else []

    class Pools:
        def nodepools(self, cluster):
            return [NodePool(nodepool_id="np-a", instance_types=["ecs.custom-type"],
                             labels={"ack-mig-hook/layout": "auto"}),
                    NodePool(nodepool_id="np-b", instance_types=["ecs.ebmgn7e.32xlarge"],
                             labels={"ack-mig-hook/layout": "auto"})]

        def nodes(self, cluster, pool_id=None):
            return acked(Api().list_nodes("alibabacloud.com/nodepool-id=%s" % pool_id))

    bounds = planned_bounds(Pools().nodepools("")[0])[0]
    ((_, why),) = not_counted(bounds, [small], demand_of(slim(pod)))
    assert "more than a node of the pool holds" in why
    planned = []
    monkeypatch.setattr(pod_event_module, "_plan", lambda *args, **kw: planned.append(args[-2]) or "planned")
    assert pod_event_module.run_pod_event(parse_event(pod_event("llm", "pair")), Pools(), CLUSTER, load_settings({}),
                                          False, None, Api(), JsonLogger("OFF")) == "planned"
    assert planned == ["np-b"]


def test_event_and_timer_pick_the_same_pool_when_a_disallowed_instance_is_in_use(monkeypatch):
    """Pool np-a allows only 3g.40gb and has a 1g.10gb a running pod holds; the pod asks 1g.10gb. The timer's
    plan of np-a does not count it (no idle instance of the profile is left for it): the event read every
    instance as idle and chose np-a (found by the review of this change). It reads the pods of the nodes
    holding such instances where that decides."""
    import json
    from functions.base.model import NodePool
    from functions.pipeline import pod_event as pod_event_module
    from functions.pipeline.intake import parse_event

    pod = {"metadata": {"name": "want", "namespace": "llm", "uid": "u-want"},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                         "reason": "Unschedulable"}]}}
    node = {"metadata": {"name": "n1", "labels": {"alibabacloud.com/nodepool-id": "np-a",
            "aliyun.accelerator/nvidia_name": "NVIDIA A100-SXM4-80GB", "aliyun.accelerator/nvidia_count": "1",
            "nvidia.com/mig.config.state": "success"},
            "annotations": {"ack-mig-hook/gpu-layouts": json.dumps({"0": [["1g.10gb", 0], ["3g.40gb", 4]]})}},
            "spec": {}, "status": {}}
    running = {"metadata": {"name": "r", "namespace": "llm", "uid": "u-r"},
               "spec": {"nodeName": "n1", "containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
               "status": {"phase": "Running"}}

    class Api:
        def list_all(self, path, query, reduce=None, page=None, grow=0):
            if query.get("fieldSelector") == "metadata.name=want":
                return [reduce(pod)]
            return [reduce(running)] if "n1" in str(query) else []

        def list_nodes(self, selector):
            return [node] if selector.endswith("np-a") else []

        def list_pods(self, node_name=None, reduce=lambda pod: pod, page=None):
            read.append(node_name)
            return [reduce(running)] if node_name == "n1" else []

    class Pools:
        def nodepools(self, cluster):
            return [NodePool(nodepool_id="np-a", instance_types=["ecs.ebmgn7e.32xlarge"],
                             labels={"ack-mig-hook/layout": "auto", "ack-mig-hook/layout-profiles": "3g.40gb"}),
                    NodePool(nodepool_id="np-b", instance_types=["ecs.ebmgn7e.32xlarge"],
                             labels={"ack-mig-hook/layout": "auto"})]

        def nodes(self, cluster, pool_id=None):
            return acked(Api().list_nodes("alibabacloud.com/nodepool-id=%s" % pool_id))

    planned, read = [], []
    monkeypatch.setattr(pod_event_module, "_plan", lambda *args, **kw: planned.append(args[-2]) or "planned")
    pod_event_module.run_pod_event(parse_event(pod_event("llm", "want")), Pools(), CLUSTER, load_settings({}), False,
                                   None, Api(), JsonLogger("OFF"))
    # the timer's plan of np-a does not count the pod (its 1g.10gb is held by the running pod): np-b does
    assert planned == ["np-b"] and read == ["n1"]


def test_a_holder_whose_marker_write_was_read_back_gives_up_on_a_claim_naming_it(cluster, monkeypatch):
    """The event's marker write committed but its answer was lost; the read back names this invocation, so it
    plans as the holder. Its round then finds a timer tick's planning claim and waits it out. The read back
    took the name of the function that reads the claim as the wait gives up (``held``): the give-up called the
    marker it read back and the event ended in a TypeError, and an event whose read back named another
    holder gave up naming no claim. It now ends as any holder's wait does: one skip naming the claim's
    holder and its end, the marker let go with the claim noted, so the next event does not wait again."""
    from functions.pipeline import pod_event as pod_event_module

    server, api, settings, executor, state_file = cluster
    monkeypatch.setattr(pod_event_module, "CLAIM_POLL_S", 0.2)
    monkeypatch.setattr(pod_event_module, "CLAIM_WAIT_S", 1.0)
    cut = marker_write_committed_unanswered(monkeypatch)
    timer_holds_the_claim(server)
    waiting(server, "late", "2g.20gb")
    result = run(pod_event("llm", "late"), cluster)
    assert cut and result.outcome == "skip", result.reason
    assert "waited 1 s" in result.reason and "invocation timer-tick holds the pool's planning claim" in result.reason, \
        result.reason
    noted = stored_marker(server)
    assert noted["holder"] == "" and noted["waited"]["owner"] == "timer-tick", noted


def test_a_holder_whose_renewals_cannot_start_still_plans_and_lets_go(cluster, monkeypatch):
    """The renewals' thread is started after the event became the holder, outside the block that lets the pool
    go when the plan breaks: where the instance can start no thread (its limit reached), the event ended in an
    error, planned nothing, and its marker held the pool for a hold, the pool's events answered coalesced into
    it meanwhile. Planning needs no renewal (a hold that lapses costs one extra plan at most): the event plans
    without them, says so, and lets go."""
    import io

    from functions.rollout import plan_marker

    class NoThreads(threading.Thread):
        def start(self):
            if self.name == "plan-marker-renewal":
                raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(plan_marker.threading, "Thread", NoThreads)
    server, api, settings, executor, state_file = cluster
    waiting(server, "first", "1g.10gb")
    out = io.StringIO()
    result = run_event(pod_event("llm", "first"), settings, inventory=lookup(), executor=executor, kube=api,
                       logger=JsonLogger("INFO", stream=out))
    assert result.outcome == "done", result.reason
    assert "1g.10gb" in profiles(state_file)
    assert stored_marker(server)["holder"] == ""
    assert "renewals not started (RuntimeError: can't start new thread)" in out.getvalue(), out.getvalue()[-2000:]
