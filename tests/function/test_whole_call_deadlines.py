"""Every outbound wait has a whole-call deadline (issue 30 item 3): a peer that drips a byte at a time
(tests/support/drip.py) never resets it, as it resets a socket timeout. One test per client. The peer drips
every 0.25 s, well inside each client's 1 s read timeout, so only the whole-call bound can end the call (and
the file stays fast); the clients whose timeout takes a fraction (Kubernetes, ROS) are given 0.5 s and a drip
every 0.1 s, the same margin at half the wait. test_notify_deadline.py drips one byte a second."""

import time

import pytest

from functions.kube.client import ApiError, KubeApi
from node_bootstrap.kube import KubeConfig
from tests.support.drip import Drip, HANG_S

@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """A CA and a server certificate for 127.0.0.1 (tests.support.kubeapi.CertificateAuthority)."""
    from tests.support.drip import loopback_tls

    return loopback_tls(tmp_path_factory.mktemp("drip-tls"), "drip-test-ca")


def test_the_kubernetes_client_ends_an_attempt_at_its_timeout_whatever_the_peer_drips(tls):
    """TLS completes at once; then the answer drips inside it (the handshake has a bound of its own)."""
    ca_pem, context = tls
    with Drip(life_s=15, interval_s=0.1, tls=context) as drip:
        api = KubeApi(KubeConfig("https://127.0.0.1:%d" % drip.port, ca_pem, None, None, "t0ken", None),
                      timeout=0.5, attempts=1)
        started = time.monotonic()
        with pytest.raises(ApiError) as info:
            api.request("GET", "/api/v1/nodes")
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert 0.4 < elapsed < HANG_S, elapsed  # the bound, never the drip's 15 s
    assert "no complete answer" in str(info.value) and "within 0.5s" in str(info.value)


def test_the_cloud_rpc_client_ends_an_attempt_at_its_timeout_whatever_the_peer_drips():
    """ECS and Auto Scaling (functions/cloud/rpc.py, aliyun-python-sdk-core through its vendored urllib3):
    the SDK's read timeout restarts at every byte; the attempt's Guard does not."""
    from functions.base.settings import Credentials, Endpoint
    from functions.cloud.rpc import ECS_VERSION, ApiError as RpcError, Backoff, RpcClient

    with Drip(life_s=15, interval_s=0.25) as drip:
        client = RpcClient("ecs", ECS_VERSION, "cn-test", Credentials("LTAIdrip", "drip-secret", "drip-token"),
                           Endpoint("127.0.0.1:%d" % drip.port, "http"), timeout_s=1,
                           backoff=Backoff(2, sleep=lambda s: None))
        started = time.monotonic()
        with pytest.raises(RpcError) as info:
            client.call("DescribeRegions", {"RegionId": "cn-test"})
        elapsed = time.monotonic() - started
        assert drip.accepted == 2 and drip.sent >= 2  # each attempt was dripped to, each was cut
    assert 1.8 < elapsed < HANG_S, elapsed  # two attempts of 1 s, never the drip's 15 s
    assert "no complete answer within 1s" in str(info.value) and "drip-secret" not in str(info.value)


def test_the_oss_upload_ends_each_call_at_its_timeout_whatever_the_peer_drips(tmp_path):
    """``deploy``'s OSS calls (functions/commands/stack/upload.py, oss2 through requests)."""
    from functions.base.settings import Endpoint
    from functions.commands.stack.credentials import Keys
    from functions.commands.stack.upload import UploadError, upload

    package = tmp_path / "pkg.zip"
    package.write_bytes(b"PK\x03\x04 package")
    with Drip(life_s=15, interval_s=0.25) as drip:
        started = time.monotonic()
        with pytest.raises(UploadError) as info:
            upload(Keys("LTAIdrip", "drip-secret", "drip-token"), "cn-test", "bucket-x", "o.zip", str(package),
                   "1234", Endpoint("127.0.0.1:%d" % drip.port, "http"), timeout_s=1)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert 0.8 < elapsed < HANG_S, elapsed  # the bound, never the drip's 15 s
    assert "no complete answer to get_bucket_info within 1s" in str(info.value)


def test_the_kms_secret_read_ends_at_its_timeout_whatever_the_peer_drips():
    from functions.base.settings import Credentials, Endpoint
    from functions.cloud.secrets import SecretError, forget_all, get_secret

    forget_all()
    with Drip(life_s=15, interval_s=0.25) as drip:
        started = time.monotonic()
        with pytest.raises(SecretError) as info:
            get_secret("ssh-key", "cn-test", Credentials("LTAIdrip", "drip-secret", "drip-token"),
                       Endpoint("127.0.0.1:%d" % drip.port, "http"), 1)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert 0.8 < elapsed < HANG_S, elapsed  # the bound, never the drip's 15 s
    assert info.value.retryable and "no complete answer within 1s" in str(info.value)


def test_the_ack_api_lookup_ends_each_attempt_at_its_timeout_whatever_the_peer_drips():
    """ACK (functions/cloud/cs_lookup.py, the Tea SDK through requests): two attempts, each cut at 1 s."""
    from functions.base.errors import RetryLater
    from functions.base.settings import load_settings
    from functions.cloud.cs_lookup import CsLookup

    with Drip(life_s=15, interval_s=0.25) as drip:
        settings = load_settings({"ACK_MIG_REGION": "cn-test", "ACK_MIG_CS_ENDPOINT": drip.url,
                                  "ACK_MIG_API_TIMEOUT_S": "1", "ACK_MIG_API_MAX_ATTEMPTS": "2",
                                  "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIdrip", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s3c",
                                  "ALIBABA_CLOUD_SECURITY_TOKEN": "tok"})
        started = time.monotonic()
        with pytest.raises(RetryLater) as info:
            CsLookup(settings, sleep=lambda s: None).nodepools("c" + "0" * 32)
        elapsed = time.monotonic() - started
        assert drip.accepted == 2 and drip.sent >= 2
    assert 1.8 < elapsed < HANG_S, elapsed
    assert "failed 2 times" in str(info.value)


def test_an_sdk_call_over_https_is_cut_inside_tls(tmp_path, tls, monkeypatch):
    """urllib3 wraps the connection's first socket into a TLS one (a new object): the guard watches the one
    the connection ends up with. oss2 through requests, trusting the test CA (REQUESTS_CA_BUNDLE)."""
    from functions.base.settings import Endpoint
    from functions.commands.stack.credentials import Keys
    from functions.commands.stack.upload import UploadError, upload

    ca_pem, context = tls
    (tmp_path / "ca.crt").write_bytes(ca_pem)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "ca.crt"))
    package = tmp_path / "pkg.zip"
    package.write_bytes(b"PK\x03\x04 package")
    with Drip(life_s=15, interval_s=0.25, tls=context) as drip:
        started = time.monotonic()
        with pytest.raises(UploadError) as info:
            upload(Keys("LTAIdrip", "drip-secret", "drip-token"), "cn-test", "bucket-x", "o.zip", str(package),
                   "1234", Endpoint("127.0.0.1:%d" % drip.port, "https"), timeout_s=1)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1  # TLS was up and the answer was dripping
    assert 0.8 < elapsed < HANG_S, elapsed
    assert "no complete answer to get_bucket_info within 1s" in str(info.value)


@pytest.mark.parametrize("call, action", [
    (lambda stacks: stacks.find("ack-mig-hook"), "ListStacks"),
    # GetStack is what deploy's, undeploy's and ``wait``'s wait loop polls: it went straight to the SDK, outside
    # the attempt's bound, and a dripping peer held it for the drip's whole life (``wait --timeout`` not kept)
    (lambda stacks: stacks.get("6b2a7f4e-0000-4000-8000-000000000001"), "GetStack"),
], ids=["find", "get"])
def test_the_ros_stack_calls_end_each_attempt_at_their_timeout_whatever_the_peer_drips(call, action):
    """deploy/undeploy/doctor's ROS client (functions/commands/stack/ros.py, the Tea SDK through requests):
    three attempts, each cut at its timeout, then a StackError that says so, for the stack lookup and the status read
    alike."""
    from functions.base.settings import Endpoint
    from functions.commands.stack.credentials import Keys
    from functions.commands.stack.ros import Stacks, StackError

    with Drip(life_s=15, interval_s=0.1) as drip:
        stacks = Stacks("cn-beijing", Keys("ak", "secret", None), Endpoint("127.0.0.1:%d" % drip.port, "http"),
                        timeout_s=0.5, sleep=lambda s: None)
        started = time.monotonic()
        with pytest.raises(StackError) as info:
            call(stacks)
        elapsed = time.monotonic() - started
        assert drip.accepted == 3
    assert 1.25 < elapsed < HANG_S, elapsed
    assert action in str(info.value) and "no complete answer within 0.5s" in str(info.value)


def test_a_ros_call_inside_a_wait_gets_at_most_the_time_left_whatever_the_peer_drips():
    """A call a wait makes (its ``end``): 1.5 s left, 1 s per try. The first try is cut at its 1 s, the
    back-off sleeps only what is left, the second try is cut at the deadline (0.5 s), and no third starts:
    three whole tries and their back-off would run past the wait's --timeout."""
    from functions.base.settings import Endpoint
    from functions.commands.stack.credentials import Keys
    from functions.commands.stack.ros import Stacks, StackError

    pauses = []
    with Drip(life_s=15, interval_s=0.25) as drip:
        stacks = Stacks("cn-beijing", Keys("ak", "secret", None), Endpoint("127.0.0.1:%d" % drip.port, "http"),
                        timeout_s=1, sleep=pauses.append)
        started = time.monotonic()
        with pytest.raises(StackError) as info:
            stacks.get("6b2a7f4e-0000-4000-8000-000000000001", started + 1.5)
        elapsed = time.monotonic() - started
        assert drip.accepted == 2
    assert 1.4 < elapsed < HANG_S, elapsed
    assert len(pauses) == 2 and 0 < pauses[0] <= 0.5 and pauses[1] == 0, pauses
    assert "GetStack" in str(info.value) and "no complete answer within 0." in str(info.value)  # what was left


def test_the_sts_account_lookup_ends_at_its_timeout_whatever_the_peer_drips():
    from functions.base.settings import Endpoint
    from functions.commands.stack.credentials import AccountUnknown, Keys, account_id

    with Drip(life_s=15, interval_s=0.25) as drip:
        started = time.monotonic()
        with pytest.raises(AccountUnknown) as info:
            account_id(Keys("ak", "secret", None), "cn-beijing", Endpoint("127.0.0.1:%d" % drip.port, "http"),
                       timeout_s=1)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert 0.8 < elapsed < HANG_S, elapsed
    assert "no complete answer within 1s" in str(info.value)


@pytest.mark.timeout(60)
def test_the_cluster_network_read_ends_at_its_timeout_whatever_the_peer_drips():
    """deploy's and doctor's DescribeClusterDetail (functions/commands/stack/cluster_network.py, the Tea SDK
    through requests): the SDK's read timeout restarts at every byte, so without a whole-call bound the call
    lasted as long as the peer dripped (the drip's whole life here, however short the timeout)."""
    from functions.base.settings import Endpoint
    from functions.commands.stack.cluster_network import ClusterUnreadable, read
    from functions.commands.stack.credentials import Keys

    with Drip(life_s=15, interval_s=0.25) as drip:
        started = time.monotonic()
        with pytest.raises(ClusterUnreadable) as info:
            read(Keys("ak", "drip-secret", None), "cn-test", "c" + "0" * 32,
                 Endpoint("127.0.0.1:%d" % drip.port, "http"), timeout_s=1)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert 0.8 < elapsed < HANG_S, elapsed
    assert "DescribeClusterDetail" in str(info.value) and "no complete answer within 1s" in str(info.value)


def test_the_drip_counts_a_connection_its_accepting_thread_has_not_taken_yet():
    """The tests above read ``drip.accepted`` right after a client's attempts; the accepting thread may not have
    run since (a loaded machine). Not started here: no accepting thread at all."""
    import socket

    drip = Drip(life_s=1)
    try:
        with socket.create_connection(("127.0.0.1", drip.port), timeout=5):
            assert drip.accepted == 1
            assert drip.accepted == 1  # counted once
    finally:
        drip.stop()
