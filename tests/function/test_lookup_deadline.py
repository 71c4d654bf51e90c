"""Every wait has a deadline, the name lookup of an endpoint's host included: ``socket.create_connection``'s
timeout bounds the connect, not ``getaddrinfo`` before it, which waits for as long as resolv.conf's timeouts
add up to (node_bootstrap/hostlookup.py). A name server that never answers (tests/support/slow_dns.py) costs
the command line's reachability check, the function's Kubernetes client, the webhook and the cloud SDK clients
(their connect timeout, functions/base/deadline.py) their own deadline, and each ends with its one line for an
endpoint it cannot reach, naming the host and the lookup."""

import io
import json
import os
import time

import pytest

from functions.base import settings
from functions.base.logs import JsonLogger
from functions.base.settings import Endpoint
from functions.commands import common
from functions.commands.stack.credentials import Keys
from functions.kube.client import ApiError, KubeApi
from functions.pipeline.notify import SCHEMA, deliver
from node_bootstrap.kube import KubeConfig, load_kubeconfig
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.slow_dns import HOLD_S, SlowDns

SLOW = "api.slow-dns.example"
KEYS = Keys("LTAI5tTestOnlyKey", "not-a-secret", None)


@pytest.fixture
def dns(monkeypatch):
    stand_in = SlowDns(slow=[SLOW, "hook.slow-dns.example"], mapped={"localhost": "127.0.0.1",
                                                                     "wrong-name.example": "127.0.0.1"})
    stand_in.install(monkeypatch)
    yield stand_in
    stand_in.release.set()  # the lookups left behind end now


def test_the_command_lines_reachability_check_gives_up_on_a_lookup_at_its_deadline(dns, monkeypatch):
    monkeypatch.setenv(settings.CONNECT_TIMEOUT_S, "1")
    started = time.monotonic()
    with pytest.raises(settings.SettingsError) as caught:
        common.connect("the ACK API", SLOW, 443, "check this machine's internet access (or set HTTPS_PROXY)")
    elapsed = time.monotonic() - started
    assert str(caught.value) == ("cannot connect to the ACK API at %s:443 (the name lookup of %s took over 1s); "
                                 "check this machine's internet access (or set HTTPS_PROXY); "
                                 "ACK_MIG_CONNECT_TIMEOUT_S sets the wait" % (SLOW, SLOW))
    assert elapsed < HOLD_S and dns.asked == [SLOW], elapsed  # a hang guard: the words above say it was cut
    assert dns.answered == 0  # it returned while its lookup was still held: cut, not waited out


def _slow_server():
    return KubeConfig("https://%s:6443" % SLOW, None, None, None, "t0ken", None)


def test_a_command_gives_up_on_an_api_server_whose_name_does_not_resolve_in_time(dns):
    api = KubeApi(_slow_server(), timeout=1.0, attempts=3, sleep=lambda s: None, stop_when_silent=True)
    started = time.monotonic()
    with pytest.raises(ApiError) as caught:
        api.get_node("node-a")
    assert time.monotonic() - started < HOLD_S  # a hang guard: the words below say the lookup was cut
    assert str(caught.value) == ("cannot reach the API server %s:6443: the name lookup of %s took over 1s; "
                                 "not asked again" % (SLOW, SLOW))
    with pytest.raises(ApiError, match="not asked again"):  # and is not asked again
        api.get_node("node-b")
    assert dns.asked == [SLOW] and dns.answered == 0  # returned while its lookup was still held: cut


def test_the_function_retries_a_lookup_that_timed_out_each_time_within_its_timeout(dns):
    api = KubeApi(_slow_server(), timeout=1.0, attempts=2, sleep=lambda s: None)
    started = time.monotonic()
    with pytest.raises(ApiError) as caught:
        api.get_node("node-a")
    assert time.monotonic() - started < 2 * HOLD_S  # a hang guard: the words below say each lookup was cut
    assert str(caught.value) == "cannot reach https://%s:6443: the name lookup of %s took over 1s" % (SLOW, SLOW)
    assert dns.asked == [SLOW, SLOW] and dns.answered == 0  # both lookups still held when each was given up


def test_a_name_that_resolves_still_verifies_the_certificate_by_that_name(dns, kube_api, tmp_path):
    """The connection goes to the address found, and TLS checks the server's certificate against the host
    name (the test server's names 127.0.0.1 and localhost), never the address: a name the certificate does
    not carry is refused, however it resolved."""
    kube_api.add_node("node-a")
    path = kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert())
    config = load_kubeconfig(path)
    port = config.server.rsplit(":", 1)[1]
    by_name = KubeApi(config._replace(server="https://localhost:%s" % port), timeout=5.0, attempts=1)
    assert by_name.get_node("node-a")["metadata"]["name"] == "node-a"
    wrong = KubeApi(config._replace(server="https://wrong-name.example:%s" % port), timeout=5.0, attempts=1)
    with pytest.raises(ApiError, match="TLS with https://wrong-name.example:%s failed: .*wrong-name.example" % port):
        wrong.get_node("node-a")
    assert "localhost" in dns.asked and "wrong-name.example" in dns.asked


def test_the_webhook_gives_up_on_a_lookup_at_its_deadline(dns, monkeypatch):
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    stream = io.StringIO()
    log = JsonLogger("DEBUG", stream=stream, request_id="r-lookup")
    line = {"schema": SCHEMA, "kind": "node-failed", "count": 1, "nodes": [], "text": "1 node failed"}
    started = time.monotonic()
    sent = deliver([line], "http://hook.slow-dns.example/hook", log, attempts=3, timeout_s=1.0, deadline_s=1.5,
                   sleep=lambda s: None)
    elapsed = time.monotonic() - started
    assert sent == 0 and elapsed < HOLD_S, elapsed  # a hang guard: the logged error says it was cut
    assert dns.answered == 0  # its lookup still held when it gave up: cut, not waited out
    logged = json.loads(stream.getvalue().splitlines()[0])
    assert (logged["message"], logged["webhook_host"], logged["error"]) == (
        "notification not sent", "hook.slow-dns.example", "name lookup timeout")


# ---- a name server that never answers (tests/support/slow_dns.py): the SDKs' lookups end at the connect timeout

CLOUD = "cloud.slow-dns.example"
PORT = 8443


@pytest.fixture
def sdk_dns(monkeypatch):
    stand_in = SlowDns(slow=[CLOUD, "my-code-bucket." + CLOUD, "k8s-log-x." + CLOUD]).install(monkeypatch)
    yield stand_in
    stand_in.release.set()  # the lookups left behind end now


def _ros():
    from functions.commands.stack.ros import Stacks

    return Stacks("cn-beijing", KEYS, Endpoint("%s:%d" % (CLOUD, PORT), "http")).find("ack-mig-hook")


def _sts():
    from functions.commands.stack.credentials import account_id

    return account_id(KEYS, "cn-beijing", Endpoint("%s:%d" % (CLOUD, PORT), "http"))


def _ack():
    from functions.commands.stack import cluster_network

    return cluster_network.read(KEYS, "cn-beijing", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b",
                                Endpoint("%s:%d" % (CLOUD, PORT), "http"))


def _oss():
    from functions.commands.stack import upload

    return upload.inspect(KEYS, "cn-beijing", "my-code-bucket", "ack-mig-hook/x.zip", os.devnull, "1234567890123456",
                          Endpoint("%s:%d" % (CLOUD, PORT), "http"))


def _fc():
    from functions.commands import remote

    return remote.invoke_async("cn-beijing", KEYS, "ack-mig-hook", b"{}")


def _sls():
    from functions.commands import sls_logs

    return sls_logs.fetch("cn-beijing", KEYS, "k8s-log-x", "ack-mig-hook", "*", 0, 1, 1)


@pytest.mark.parametrize("call, what, host", [
    (_ros, "the ROS API", CLOUD), (_sts, "the STS API", CLOUD), (_ack, "the ACK API", CLOUD),
    (_oss, "OSS", "my-code-bucket." + CLOUD), (_fc, "the Function Compute API", CLOUD),
    (_sls, "the SLS API", "k8s-log-x." + CLOUD),
], ids=["ros", "sts", "ack", "oss", "fc", "sls"])
def test_an_sdk_clients_name_lookup_ends_at_the_connect_timeout_with_its_line(sdk_dns, monkeypatch, call, what, host):
    """Before, urllib3's getaddrinfo waited for the resolver (here until HOLD_S, then "Temporary failure in name
    resolution"; on a host, resolv.conf's timeouts x attempts x search domains), and ROS asked three times."""
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(settings.CONNECT_TIMEOUT_S, "1")
    monkeypatch.setenv(settings.FC_ENDPOINT, "http://%s:%d" % (CLOUD, PORT))
    monkeypatch.setenv(settings.SLS_ENDPOINT, "http://%s:%d" % (CLOUD, PORT))
    with pytest.raises(Exception) as caught:
        call()
    assert str(caught.value).startswith("cannot connect to %s at %s:%d (the name lookup of %s took over 1s); "
                                        % (what, host, PORT, host)), str(caught.value)
    assert getattr(caught.value, "exit_code", None) == 2 and sdk_dns.asked == [host]
    assert sdk_dns.answered == 0  # its lookup still held when the client gave up: cut, not waited out


# ---- the function's own cloud clients: the core SDK's vendored urllib3 (ECS, Auto Scaling), the Tea SDKs (ACK, KMS)

FUNCTION_CREDENTIALS = dict(access_key_id="LTAI5tTestOnlyKey", access_key_secret="not-a-secret",
                            security_token="tok")


def _ecs():
    from functions.base.settings import Credentials
    from functions.cloud.rpc import ECS_VERSION, Backoff, RpcClient

    return RpcClient("ecs", ECS_VERSION, "cn-beijing", Credentials(**FUNCTION_CREDENTIALS),
                     Endpoint("%s:%d" % (CLOUD, PORT), "http"), timeout_s=1,
                     backoff=Backoff(1, sleep=lambda s: None)).call("DescribeRegions", {})


def _kms():
    from functions.base.settings import Credentials
    from functions.cloud.secrets import forget_all, get_secret

    forget_all()
    return get_secret("ssh-key", "cn-beijing", Credentials(**FUNCTION_CREDENTIALS),
                      Endpoint("%s:%d" % (CLOUD, PORT), "http"), 1)


def _cs():
    from functions.base.settings import load_settings
    from functions.cloud.cs_lookup import CsLookup

    return CsLookup(load_settings({
        "ACK_MIG_REGION": "cn-beijing", "ACK_MIG_CS_ENDPOINT": "http://%s:%d" % (CLOUD, PORT),
        "ACK_MIG_API_TIMEOUT_S": "1", "ACK_MIG_API_MAX_ATTEMPTS": "1",
        "ALIBABA_CLOUD_ACCESS_KEY_ID": FUNCTION_CREDENTIALS["access_key_id"],
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": FUNCTION_CREDENTIALS["access_key_secret"],
        "ALIBABA_CLOUD_SECURITY_TOKEN": FUNCTION_CREDENTIALS["security_token"]}),
        sleep=lambda s: None).nodepools("c" + "0" * 32)


@pytest.mark.parametrize("call", [_ecs, _kms, _cs], ids=["ecs", "kms", "ack"])
def test_the_functions_cloud_clients_give_up_on_a_lookup_the_name_server_still_holds(sdk_dns, monkeypatch, call):
    """docs/security.md: the SDKs' name lookups end within the call's time. The call fails (its own timeout
    line) while the name server still holds the one lookup it was asked: a lookup without a bound would have
    waited for the name server's answer (HOLD_S, then "Temporary failure") before the call could fail."""
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(Exception) as caught:
        call()
    assert sdk_dns.asked == [CLOUD] and sdk_dns.answered == 0, (sdk_dns.asked, sdk_dns.answered)
    assert "Temporary failure" not in str(caught.value), str(caught.value)
