"""A node's failure is told once across Function Compute's retries of one event (functions/kube/alerted.py).

Through the handler FC calls, with every part on loopback: the cluster from the CS emulator, the nodes and the
lifecycle hook on the RPC emulator (Cloud Assistant, Auto Scaling), the local HTTPS Kubernetes API the
kubeconfig DescribeClusterUserKubeconfig returned points at (the mark lives on its Lease), and a real webhook.
A lifecycle hook that cannot be answered ends the event ``retry``: the handler raises and FC runs the same
event again, whose node fails again the same way. The operator used to get the same ``node-failed`` line on
every attempt."""

import json
import os

import pytest

from functions.decision import alert_marks as am
from functions.handler import RetryInvocation, handler
from functions.kube.nodes import EVENT_NAMESPACE
from tests.delivery.conftest import SECRET, TOKEN
from tests.delivery.test_end_to_end import ROOT, cloud  # noqa: F401  (fixture)
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.rpc_emulator import SimNode
from tests.support.webhook import Webhook

pytestmark = [pytest.mark.cloud_assistant, pytest.mark.kube]
NODE = "i-2zeb7c1mig0a100x3q2h"  # the lifecycle event's instance: not a Kubernetes node yet
BUSY = {"outcome": "failed", "changes": 0, "gpus": [],
        "error": {"code": "gpu-busy", "message": "GPU 0 has running processes: 4242"}}


def lifecycle_event(event_id="3e5a7c9d-2f4b-4d6e-8a0c-5b7d9f1a3c4e"):
    with open(os.path.join(ROOT, "tests", "events", "ess_lifecycle_scale_out.json")) as fh:
        doc = json.load(fh)
    doc["id"] = event_id
    return json.dumps(doc).encode()


@pytest.fixture
def retrying(cloud, monkeypatch, kube_api):  # noqa: F811
    """The handler's environment, the node busy, and Auto Scaling unable to take the hook's answer (the polls and
    backoffs short: the ``cloud`` fixture's)."""
    cs, rpc, settings = cloud
    rpc.nodes[NODE] = SimNode(result=BUSY, exit_code=4)  # node_bootstrap's exit code for a busy GPU
    rpc.fail_next("CompleteLifecycleAction", "ServiceUnavailable", 503, times=1000)
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIe2e", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
           "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_REGION": "cn-beijing",
           "ACK_MIG_CLUSTER_ID": cs.cluster_id, "ACK_MIG_CS_ENDPOINT": cs.endpoint,
           "ACK_MIG_ECS_ENDPOINT": rpc.endpoint, "ACK_MIG_ESS_ENDPOINT": rpc.endpoint, "ACK_MIG_LOG_LEVEL": "ERROR",
           "ACK_MIG_API_MAX_ATTEMPTS": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with Webhook() as hook:
        monkeypatch.setenv("ACK_MIG_NOTIFY_URL", hook.url())
        yield hook, rpc


def attempt(raw):
    """One FC attempt: the handler ends it by raising for a retry."""
    with pytest.raises(RetryInvocation, match="lifecycle hook .* not answered"):
        handler(raw, None)


def failed_lines(hook):
    return [line for line in hook.lines() if line["kind"] == "node-failed"]


def marks(kube_api):
    lease = kube_api.leases.get((EVENT_NAMESPACE, am.MARK_LEASE))
    return None if lease is None else lease["metadata"]["annotations"].get(am.MARK_ANNOTATION)


def test_one_failure_is_told_once_across_the_retries_of_its_event(retrying, kube_api):  # noqa: F811
    hook, rpc = retrying
    for _ in range(3):  # the first attempt and FC's two retries of the same event
        attempt(lifecycle_event())
    assert rpc.calls["RunCommand"] >= 3  # each attempt ran the node again, and it failed again
    (line,) = failed_lines(hook)
    assert line["count"] == 1 and line["nodes"][0]["instance_id"] == NODE and "gpu-busy" in line["text"]
    assert NODE in json.loads(marks(kube_api))["nodes"]


def test_a_later_event_with_the_same_failure_is_told_again(retrying):
    hook, _ = retrying
    attempt(lifecycle_event())
    attempt(lifecycle_event("7a1b2c3d-0000-4000-8000-0000000000aa"))  # another scale-out, another run
    assert len(failed_lines(hook)) == 2


def test_a_line_the_webhook_did_not_take_is_sent_by_the_retry(retrying, kube_api):  # noqa: F811
    hook, _ = retrying
    hook.answers = [404]  # refused: not retried within the attempt, and nothing is marked
    attempt(lifecycle_event())
    assert hook.lines()[0]["kind"] == "node-failed" and marks(kube_api) is None
    attempt(lifecycle_event())
    assert len(failed_lines(hook)) == 2 and NODE in json.loads(marks(kube_api))["nodes"]
    attempt(lifecycle_event())
    assert len(failed_lines(hook)) == 2


@pytest.mark.parametrize("garbage", ["{not json", '{"version": 1, "nodes": []}', "[1, 2]",
                                     '{"version": 1, "nodes": {"%s": {"key": 7, "at": "x"}}}' % NODE,
                                     "x" * 70000])
def test_a_malformed_mark_reads_as_not_sent_and_is_replaced(retrying, kube_api, garbage):  # noqa: F811
    hook, _ = retrying
    meta = {"name": am.MARK_LEASE, "namespace": EVENT_NAMESPACE, "resourceVersion": "1", "uid": "u-1",
            "annotations": {am.MARK_ANNOTATION: garbage, "someone-else/note": "kept"}}
    kube_api.leases[(EVENT_NAMESPACE, am.MARK_LEASE)] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                                         "metadata": meta, "spec": {}}
    attempt(lifecycle_event())
    attempt(lifecycle_event())
    assert len(failed_lines(hook)) == 1
    lease = kube_api.leases[(EVENT_NAMESPACE, am.MARK_LEASE)]
    assert NODE in json.loads(lease["metadata"]["annotations"][am.MARK_ANNOTATION])["nodes"]
    assert lease["metadata"]["annotations"]["someone-else/note"] == "kept"


def test_another_failure_of_the_node_in_a_retry_is_told(retrying):
    hook, rpc = retrying
    attempt(lifecycle_event())
    rpc.nodes[NODE] = SimNode(result=dict(BUSY, error={"code": "mig-not-enabled", "message": "GPU 0: MIG is off"}),
                              exit_code=4)
    attempt(lifecycle_event())
    attempt(lifecycle_event())
    assert ["gpu-busy" in line["text"] for line in failed_lines(hook)] == [True, False]


@pytest.mark.parametrize("refused", [{"GET": 503, "POST": 503, "PUT": 503}, {"POST": 503, "PUT": 503}],
                         ids=["nothing-read", "nothing-written"])
def test_an_api_server_that_cannot_keep_the_marks_loses_no_alert(retrying, kube_api, refused, monkeypatch):  # noqa: F811
    hook, _ = retrying
    kube_api.fail = refused
    # The Kubernetes client's backoff between its retries of the 503s, recorded instead of slept (10 s of
    # waiting in all): what is under test is what the alert does once the retries are spent, not their pacing.
    from functions.kube.client import ClusterCredential

    slept, client = [], ClusterCredential.client
    monkeypatch.setattr(ClusterCredential, "client", lambda self, **options: client(
        self, **dict({"sleep": slept.append}, **options)))
    attempt(lifecycle_event())
    attempt(lifecycle_event())
    assert len(failed_lines(hook)) == 2  # told on each attempt: a repeat, never a loss
    assert slept  # the client did retry the 503s before giving up


def test_a_dry_run_sends_nothing_and_marks_nothing(retrying, kube_api, monkeypatch):  # noqa: F811
    hook, _ = retrying
    monkeypatch.setenv("ACK_MIG_DRY_RUN", "true")
    handler(lifecycle_event(), None)
    assert hook.lines() == [] and (EVENT_NAMESPACE, am.MARK_LEASE) not in kube_api.leases
    assert not [r for r in kube_api.requests if r.path.endswith("/leases/" + am.MARK_LEASE)]  # not even read


def test_marks_that_are_not_ours_are_named_in_one_warning_line(retrying, kube_api, monkeypatch, capsys):  # noqa: F811
    """The reader rule's one line: a marks document that is not ours read as no marks (every failure told, the
    document replaced), with nothing said, so a person saw a repeated alert and no reason for it. It is one warning
    naming what is wrong, once per event."""
    hook, _ = retrying
    monkeypatch.setenv("ACK_MIG_LOG_LEVEL", "WARNING")
    meta = {"name": am.MARK_LEASE, "namespace": EVENT_NAMESPACE, "resourceVersion": "1", "uid": "u-1",
            "annotations": {am.MARK_ANNOTATION: '{"version": 9, "nodes": {}}'}}
    kube_api.leases[(EVENT_NAMESPACE, am.MARK_LEASE)] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                                         "metadata": meta, "spec": {}}
    attempt(lifecycle_event())
    assert len(failed_lines(hook)) == 1
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    noted = [line for line in said if "alert marks" in line.get("message", "")]
    assert len(noted) == 1 and "not a version 1 document" in noted[0]["reason"], said
