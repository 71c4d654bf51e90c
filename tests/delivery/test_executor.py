"""The delivery executor: decisions to outcomes, lifecycle hooks (ESS emulator), startup taint (local
HTTPS Kubernetes API), and the demo."""

import json
import sys

import pytest

from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.lifecycle import Lifecycle
from functions.delivery.local import LocalTransport
from functions.kube.taint import TaintError, TaintRemover, parse_taint
from functions.base.model import Decision, LifecycleHook, PartitionLabel, Request, Trigger
from tests.delivery.conftest import rpc
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

TAINT = {"key": "ack-mig-hook/partition-pending", "value": "true", "effect": "NoSchedule"}
OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def decision(iid, action="partition", node=None, value="3g.20gb-3g.20gb", reason="pool asks"):
    part = PartitionLabel(kind="sequence", value=value) if action == "partition" else None
    return Decision(instance_id=iid, node_name=node, action=action, reason=reason, partition=part)


def request(hook=False):
    life = LifecycleHook(lifecycle_hook_id="ash-1", lifecycle_action_token="tok-1") if hook else None
    return Request(trigger=Trigger.LIFECYCLE_HOOK if hook else Trigger.MANUAL, event_type="test",
                   cluster_id="c-1", lifecycle=life)


class Recording:
    """Wraps a transport to see exactly which nodes it was asked to touch."""

    def __init__(self, inner):
        self.inner, self.seen, self.name = inner, [], inner.name

    def run(self, targets):
        self.seen.extend(t.instance_id for t in targets)
        return self.inner.run(targets)


def test_each_decision_ends_in_exactly_one_outcome_and_errors_touch_nothing(maker):
    transport = Recording(LocalTransport(maker))
    decisions = [decision("i-a", node="node-a"), decision("i-b", "skip", reason="no partition label"),
                 decision("i-c", "error", reason="ecs.gn7 is passthrough: no MIG"),
                 decision("i-d", node="node-d")]
    nodes = DeliveryExecutor(transport, ["--fake-changes", "0"]).execute(request(), decisions)
    assert [(n["instance_id"], n["outcome"]) for n in nodes] == [
        ("i-a", "unchanged"), ("i-b", "skipped"), ("i-c", "failed"), ("i-d", "unchanged")]
    assert nodes[2]["reason"] == "ecs.gn7 is passthrough: no MIG" and transport.seen == ["i-a", "i-d"]
    assert all(set(n) >= {"instance_id", "outcome", "reason", "gpus"} for n in nodes)


@pytest.mark.cloud_assistant
@pytest.mark.parametrize("extra,failure,want", [
    ((), "ABANDON", "CONTINUE"),
    (("--fake-exit", "4"), "ABANDON", "ABANDON"),
    (("--fake-exit", "4"), "ROLLBACK", "ROLLBACK"),
])
def test_the_lifecycle_hook_is_answered(emulator, maker, extra, failure, want):
    life = Lifecycle(rpc(emulator, "ess"), failure, heartbeat_s=600)
    executor = DeliveryExecutor(LocalTransport(maker), extra, lifecycle=lambda: life)
    executor.execute(request(hook=True), [decision("i-a"), decision("i-b")])
    (kind, params), = emulator.lifecycle
    assert kind == "complete" and params["LifecycleActionResult"] == want
    assert params["LifecycleHookId"] == "ash-1" and params["LifecycleActionToken"] == "tok-1"
    assert params["Version"] == "2022-02-22" and emulator.rejected == []  # Auto Scaling's current API


class Unreachable:
    """A transport whose nodes never answer (the agent not up yet, no address): what the executor does with
    transport-level failures, against the real ESS emulator."""

    name = "unreachable"

    def __init__(self, error):
        self.error = error

    def run(self, targets):
        from functions.delivery.outcome import NodeResult

        return [NodeResult(t.instance_id, self.name, error=self.error, message="not reached") for t in targets]


@pytest.mark.cloud_assistant
@pytest.mark.parametrize("error", ["agent-not-ready", "connect-failed", "host-key-rejected", "api-error"])
def test_nodes_that_could_not_be_reached_never_release_the_instances(emulator, error):
    life = Lifecycle(rpc(emulator, "ess"), "ABANDON", heartbeat_s=600)
    nodes = DeliveryExecutor(Unreachable(error), lifecycle=lambda: life).execute(
        request(hook=True), [decision("i-a"), decision("i-b")])
    assert [n["outcome"] for n in nodes] == ["failed", "failed"] and nodes[0]["reason"].startswith(error)
    assert emulator.lifecycle[-1][1]["LifecycleActionResult"] == "CONTINUE"


@pytest.mark.cloud_assistant
def test_a_mix_of_good_and_failed_nodes_continues(emulator, maker):
    life = Lifecycle(rpc(emulator, "ess"), "ABANDON", heartbeat_s=600)
    executor = DeliveryExecutor(LocalTransport(maker), lifecycle=lambda: life)
    executor.execute(request(hook=True), [decision("i-a"), decision("i-b", "error", reason="bad label")])
    assert emulator.lifecycle[-1][1]["LifecycleActionResult"] == "CONTINUE"


@pytest.mark.cloud_assistant
def test_long_work_extends_the_hook_with_heartbeats(emulator, maker):
    life = Lifecycle(rpc(emulator, "ess"), heartbeat_s=0.1, heartbeat_timeout_s=900)
    executor = DeliveryExecutor(LocalTransport(maker), ["--fake-sleep", "1"], lifecycle=lambda: life)
    executor.execute(request(hook=True), [decision("i-a")])
    beats = [p for kind, p in emulator.lifecycle if kind == "heartbeat"]
    assert beats and emulator.lifecycle[-1][0] == "complete"
    assert beats[0]["lifecycleHookId"] == "ash-1" and beats[0]["lifecycleActionToken"] == "tok-1"
    assert beats[0]["heartbeatTimeout"] == "900"


@pytest.mark.cloud_assistant
def test_a_hook_answered_already_is_not_an_error(emulator, maker):
    # A duplicate event (EventBridge delivers at least once) completes the same action again: ESS answers the
    # documented 400 LifecycleHookIdAndLifecycleActionToken.Invalid (no action in process), and the run is
    # no failure.
    life = Lifecycle(rpc(emulator, "ess"), heartbeat_s=600)
    for _ in range(2):
        nodes = DeliveryExecutor(LocalTransport(maker), lifecycle=lambda: life).execute(
            request(hook=True), [decision("i-a")])
        assert nodes[0]["outcome"] == "partitioned"
    answers = [e for e in emulator.exchanges if e.action == "CompleteLifecycleAction"]
    assert [e.status for e in answers] == [200, 400]
    assert [kind for kind, _ in emulator.lifecycle].count("complete") == 1


def test_a_heartbeat_after_the_answer_is_refused_as_ess_documents(emulator):
    # RecordLifecycleActionHeartbeat of an action no longer in process: ESS's documented 400 (a beat that fails
    # is only a warning in Lifecycle.kept_alive).
    from functions.cloud.rpc import ApiError

    life = Lifecycle(rpc(emulator, "ess"), heartbeat_s=600)
    hook = LifecycleHook(lifecycle_hook_id="ash-1", lifecycle_action_token="tok-1")
    life.complete(hook, [])
    with pytest.raises(ApiError) as refused:
        life.heartbeat(hook)
    assert refused.value.code == "LifecycleHookIdAndLifecycleActionToken.Invalid"
    assert [kind for kind, _ in emulator.lifecycle] == ["complete"]


@pytest.mark.cloud_assistant
def test_a_hook_ess_does_not_hold_is_not_an_error(emulator, maker):
    emulator.lifecycle_hooks["ash-other"] = "asg-1"  # ESS knows another hook: ash-1 matches no action in process
    life = Lifecycle(rpc(emulator, "ess"), heartbeat_s=600)
    nodes = DeliveryExecutor(LocalTransport(maker), lifecycle=lambda: life).execute(
        request(hook=True), [decision("i-a")])
    assert nodes[0]["outcome"] == "partitioned"
    assert [e.status for e in emulator.exchanges if e.action == "CompleteLifecycleAction"] == [400]


@pytest.mark.cloud_assistant
@pytest.mark.parametrize("code,status,error", [
    ("InvalidRegionId.NotFound", 404, "ConfigurationError"),  # about the request, not the action
    ("LifecycleAction.Busy", 503, "RetryLater"),  # a server error whose code merely starts like ESS's
])
def test_only_the_documented_refusal_reads_as_already_answered(emulator, maker, code, status, error):
    # CompleteLifecycleAction documents one code for an action not in process (LifecycleHookIdAndLifecycleAction
    # Token.Invalid, AlibabaCloudDocs/ess CompleteLifecycleAction.md); any other error leaves the hook waiting
    # and is reported (retried when transient), never logged as answered.
    from functions.base import errors

    emulator.fail_next("CompleteLifecycleAction", code, status, times=10)
    life = Lifecycle(rpc(emulator, "ess", attempts=2), heartbeat_s=600)
    with pytest.raises(getattr(errors, error), match="lifecycle hook ash-1 not answered: .*" + code):
        DeliveryExecutor(LocalTransport(maker), lifecycle=lambda: life).execute(request(hook=True), [decision("i-a")])
    assert emulator.lifecycle == []


def test_no_hook_no_ess_client(maker):
    def boom():
        raise AssertionError("an ESS client was built for a request without a lifecycle hook")
    DeliveryExecutor(LocalTransport(maker), lifecycle=boom).execute(request(), [decision("i-a")])


@pytest.mark.kube
def test_the_startup_taint_is_lifted_only_from_nodes_that_succeeded(kube_api, maker, tmp_path):  # noqa: F811
    for name in ("node-a", "node-b"):
        kube_api.add_node(name, taints=[OTHER, TAINT])
    kubeconfig = open(kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert(),
                                                inline=True)).read()
    remover = TaintRemover(parse_taint("ack-mig-hook/partition-pending=true:NoSchedule"), lambda: kubeconfig)
    executor = DeliveryExecutor(LocalTransport(maker), taints=lambda cluster: remover)
    ok = executor.execute(request(), [decision("i-a", node="node-a")])
    assert ok[0]["taint"] == "removed" and kube_api.nodes["node-a"]["spec"]["taints"] == [OTHER]
    bad = DeliveryExecutor(LocalTransport(maker), ["--fake-exit", "4"], taints=lambda c: remover).execute(
        request(), [decision("i-b", node="node-b")])
    assert bad[0]["outcome"] == "failed" and "taint" not in bad[0]
    assert kube_api.nodes["node-b"]["spec"]["taints"] == [OTHER, TAINT]
    again = executor.execute(request(), [decision("i-a", node="node-a")])  # a duplicate event
    assert again[0]["taint"] == "absent" and kube_api.nodes["node-a"]["spec"]["taints"] == [OTHER]


@pytest.mark.kube
def test_an_api_server_outage_is_retried(kube_api, tmp_path):  # noqa: F811
    kube_api.add_node("node-a", taints=[TAINT])
    kubeconfig = open(kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert(),
                                                inline=True)).read()
    sleeps = []

    def recover(seconds):
        sleeps.append(seconds)
        kube_api.fail.clear()  # the API server is back after the first backoff

    kube_api.fail["GET"] = 503
    remover = TaintRemover(parse_taint("ack-mig-hook/partition-pending=true:NoSchedule"), lambda: kubeconfig,
                           sleep=recover)
    assert remover.remove("node-a") == "removed" and len(sleeps) == 1
    assert kube_api.nodes["node-a"]["spec"].get("taints") in ([], None)


@pytest.mark.kube
def test_a_kubelet_credential_could_not_have_done_it(kube_api, maker, tmp_path):  # noqa: F811
    kube_api.add_node("node-a", taints=[TAINT])
    kubelet = open(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a", inline=True)).read()
    remover = TaintRemover(parse_taint("ack-mig-hook/partition-pending=true:NoSchedule"), lambda: kubelet)
    nodes = DeliveryExecutor(LocalTransport(maker), taints=lambda c: remover).execute(
        request(), [decision("i-a", node="node-a"), decision("i-b")])
    assert nodes[0]["outcome"] == "partitioned" and nodes[0]["taint"].startswith("not removed")
    assert "startup taint not removed" in nodes[0]["reason"] and nodes[1]["outcome"] == "partitioned"
    assert kube_api.nodes["node-a"]["spec"]["taints"] == [TAINT]


@pytest.mark.parametrize("text", ["nokey", "a=b", "a:Sometimes", "a b:NoSchedule", "$(x):NoSchedule"])
def test_a_bad_startup_taint_is_one_line(text):
    with pytest.raises(TaintError, match="key\\[=value\\]:Effect"):
        parse_taint(text)


def test_make_demo_shows_partitioned_simulated_nodes(capsys):
    from functions.commands.main import main
    from tests.support.demo_run import demo_json

    nodes = json.loads(demo_json())["nodes"]  # the process's one run of demo --json (tests/support/demo_run.py)
    assert [n["outcome"] for n in nodes] == ["partitioned", "partitioned"]
    assert all(set(n) == {"instance_id", "outcome", "reason", "gpus"} for n in nodes)
    assert len(nodes[0]["gpus"]) == 8
    assert [i["profile"] for i in nodes[0]["gpus"][0]["instances"]] == ["3g.20gb", "3g.20gb"]
    assert main(["demo"]) == 0
    text = capsys.readouterr().out
    assert "partitioned" in text and "3g.20gb  # # # # . . . ." in text and "unchanged" in text
    # The dry-run reconcile shows the other decisions: passthrough skipped, the comma label refused.
    reconcile = text.split("dry-run reconcile")[1]
    assert "skip      ecs.gn7-c13g1.13xlarge is a GPU passthrough instance type" in reconcile
    assert "error     pool np9c4f7a0d3e6b9c2f5a8d1e4b7c0f3a92 (gpu-mig-typo) asks for sequence=1g.5gb,2g.10gb" \
        in reconcile and "commas are not accepted" in reconcile  # an error names its pool (issue 12)


@pytest.mark.parametrize("env,match", [
    ({"ACK_MIG_TRANSPORT": "ssh"}, "needs a private key"),
    ({"ACK_MIG_TRANSPORT": "cloud-assistant", "ACK_MIG_REGION": "cn-x"}, "NoCredentials"),
    ({"ACK_MIG_TRANSPORT": "local", "ACK_MIG_STARTUP_TAINT": "oops"}, "key\\[=value\\]:Effect"),
    ({"ACK_MIG_TRANSPORT": "local", "ACK_MIG_NODE_ARGS": "--backend 'unclosed"}, "quotation"),
])
def test_a_wrong_delivery_setting_is_one_error_line_before_any_node(env, match):
    from functions.base.errors import ConfigurationError
    from functions.base.settings import load_settings

    with pytest.raises(ConfigurationError, match=match):
        DeliveryExecutor.from_settings(load_settings(env))


@pytest.mark.cloud_assistant
def test_a_hook_that_cannot_be_answered_retries_the_event(emulator, maker):
    from functions.base.errors import RetryLater

    emulator.fail_next("CompleteLifecycleAction", "ServiceUnavailable", 503, times=10)
    life = Lifecycle(rpc(emulator, "ess", attempts=2), heartbeat_s=600)
    with pytest.raises(RetryLater, match="1 partitioned; lifecycle hook ash-1 not answered") as err:
        DeliveryExecutor(LocalTransport(maker), lifecycle=lambda: life).execute(request(hook=True), [decision("i-a")])
    # The node did run: its result travels with the retry, so the event's result still shows it.
    assert [(n["instance_id"], n["outcome"]) for n in err.value.nodes] == [("i-a", "partitioned")]


@pytest.mark.cloud_assistant
def test_a_broken_transport_still_answers_the_hook_and_reports_every_node(emulator):
    class Broken:
        name = "broken"

        def run(self, targets):
            raise RuntimeError("bug in the transport")

    life = Lifecycle(rpc(emulator, "ess"), "ABANDON", heartbeat_s=600)
    nodes = DeliveryExecutor(Broken(), lifecycle=lambda: life).execute(request(hook=True),
                                                                       [decision("i-a"), decision("i-b")])
    assert [n["outcome"] for n in nodes] == ["failed", "failed"]
    assert nodes[0]["reason"] == "internal-error: the broken transport failed (RuntimeError)"
    assert emulator.lifecycle[-1][1]["LifecycleActionResult"] == "CONTINUE"  # not the instances' fault


@pytest.mark.kube
def test_an_unreachable_api_server_is_tried_once_not_per_node(kube_api, maker, tmp_path):  # noqa: F811
    from tests.support.loopback import refused_port

    dead_port = refused_port()  # a loopback port nobody listens on
    kubeconfig = open(kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert(),
                                                inline=True)).read()
    kubeconfig = kubeconfig.replace("127.0.0.1:%d" % kube_api.port, "127.0.0.1:%d" % dead_port)
    assert str(dead_port) in kubeconfig
    remover = TaintRemover(parse_taint("ack-mig-hook/partition-pending=true:NoSchedule"), lambda: kubeconfig,
                           sleep=lambda s: None)
    calls = []
    real_remove = remover.remove
    remover.remove = lambda name: calls.append(name) or real_remove(name)
    nodes = DeliveryExecutor(LocalTransport(maker), taints=lambda c: remover).execute(
        request(), [decision("i-%d" % i, node="node-%d" % i) for i in range(3)])
    assert calls == ["node-0"]
    assert all(n["outcome"] == "partitioned" for n in nodes)
    assert all("the API server did not answer" in n["taint"] for n in nodes[1:])


def test_concurrent_duplicate_events_converge(tmp_path):
    """Two deliveries of the same event at once, with the real bundle on simulated nodes: the node lock
    lets one partition each node and the other find it done; nothing ends failed or half-applied."""
    import threading

    from functions.delivery import bundle
    from functions.delivery.transport import ScriptMaker

    maker = ScriptMaker(bundle.build(), 120, str(tmp_path / "root"), sys.executable)
    transport = LocalTransport(maker, sim_state_dir=str(tmp_path))
    extra = ["--backend", "sim:A100-SXM4-40GB:2", "--no-label", "--clients=", "--device-plugin-restart", "none",
             "--lock-file", str(tmp_path / "node.lock"), "--state-dir", str(tmp_path / "state")]
    executor = DeliveryExecutor(transport, extra)
    decisions = [decision("i-a", value="1g.5gb-2g.10gb-3g.20gb"), decision("i-b", value="1g.5gb-2g.10gb-3g.20gb")]
    results = []
    threads = [threading.Thread(target=lambda: results.append(executor.execute(request(), decisions)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    by_node = {}
    for run in results:
        for n in run:
            by_node.setdefault(n["instance_id"], []).append(n["outcome"])
    assert {k: sorted(v) for k, v in by_node.items()} == {"i-a": ["partitioned", "unchanged"],
                                                         "i-b": ["partitioned", "unchanged"]}
    final = executor.execute(request(), decisions)
    assert [n["outcome"] for n in final] == ["unchanged", "unchanged"]
    assert [i["profile"] for i in final[0]["gpus"][1]["instances"]] == ["3g.20gb", "2g.10gb", "1g.5gb"]


def test_with_taint_removal_off_nothing_is_said_about_taints(maker):
    executor = DeliveryExecutor(LocalTransport(maker), taints=lambda cluster: None)
    nodes = executor.execute(request(), [decision("i-a"), decision("i-b", node="node-b")])
    assert [n["outcome"] for n in nodes] == ["partitioned", "partitioned"]
    assert all("taint" not in n and "taint" not in n["reason"] for n in nodes)


@pytest.mark.kube
def test_the_taint_patch_is_guarded_by_the_whole_entry(kube_api, tmp_path):  # noqa: F811
    """A same-key taint with another effect must never be the one removed: the patch tests the entry."""
    same_key_other_effect = dict(TAINT, effect="NoExecute")
    kube_api.add_node("node-a", taints=[same_key_other_effect, OTHER, TAINT])
    kubeconfig = open(kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert(),
                                                inline=True)).read()
    remover = TaintRemover(parse_taint("ack-mig-hook/partition-pending=true:NoSchedule"), lambda: kubeconfig)
    assert remover.remove("node-a") == "removed"
    assert kube_api.nodes["node-a"]["spec"]["taints"] == [same_key_other_effect, OTHER]
    (patch,) = [r for r in kube_api.requests if r.method == "PATCH"]
    assert patch.body[0] == {"op": "test", "path": "/spec/taints/2", "value": TAINT}


def test_the_local_transport_never_hands_the_clouds_credentials_to_the_node_tool(maker, monkeypatch, tmp_path):
    """The local transport (demo, a node running the hook on itself) runs the node script as a child: it needs
    no AccessKey, STS token, webhook URL or other secret of the shell that started it, and /proc/<pid>/environ
    of every process it starts would show them."""
    from tests.delivery.conftest import targets

    secrets = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIlocalkeyid0001", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "local-ak-secret-77",
               "ALIBABA_CLOUD_SECURITY_TOKEN": "local-sts-token-88", "ALICLOUD_SECRET_KEY": "legacy-secret-99",
               "ACK_MIG_NOTIFY_URL": "https://hooks.example.com/services/T0/B0/webhooktoken42",
               "GITHUB_TOKEN": "ghp-token-of-the-shell-55"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    seen = tmp_path / "env.json"
    (result,) = LocalTransport(maker).run(targets(1, extra=("--fake-env", str(seen))))
    assert result.error is None and result.result["outcome"] == "success", result
    env = json.loads(seen.read_text())
    assert not [name for name in secrets if name in env], env
    assert not [value for value in secrets.values() if value in json.dumps(env)]
    assert env.get("PATH") and env.get("ACK_MIG_BUNDLE_DIR")  # what the node tool needs is still there
