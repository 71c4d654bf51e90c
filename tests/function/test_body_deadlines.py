"""Every outbound read inside its deadline, bodies included (issue 36 item 4): a peer that answers the status
line and headers at once and then drips the body (tests/support/drip.py: ``Drip(head=...)``, or a loopback
emulator's own answer with ``drip`` set) leaves the client a complete set of headers and a body that never
ends; a socket timeout restarts at every byte, so only a bound around the whole call, body read included,
ends it. One test per client that reads a body, each ending at its own deadline with its own one-line error.

test_whole_call_deadlines.py drips the whole answer, headers included; here the headers are prompt. The body
drips every 0.5 s, well inside each client's 1 s read timeout, so only the whole-call bound can end the call;
the clients whose bound takes a fraction (the webhook, Kubernetes, ROS) are given 0.5 s and a drip every 0.1 s.
"""

import hashlib
import time

import pytest

from tests.support.drip import HTTP_HEAD, JSON_BODY, Drip, HANG_S

INTERVAL_S = 0.5
FAST_S = 0.1  # the drip for a bound of 0.5 s


def body_drip(interval_s=INTERVAL_S, **options):
    return Drip(head=HTTP_HEAD, payload=JSON_BODY, interval_s=interval_s, life_s=15, **options)


def one_line(exc):
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """A CA and a server certificate for 127.0.0.1 (tests.support.kubeapi.CertificateAuthority)."""
    from tests.support.drip import loopback_tls

    return loopback_tls(tmp_path_factory.mktemp("body-drip-tls"), "body-drip-ca")


# ---- deploy's upload check: the object's bytes are read back before an upload is skipped ----

PACKAGE = b"PK\x03\x04" + bytes(range(256)) * 4
BUCKET, OBJECT, ACCOUNT, REGION = "bucket-drip", "ack-mig-hook/pkg.zip", "1234567890123456", "cn-beijing"


@pytest.fixture
def stored(tmp_path):
    """An OSS emulator whose bucket already holds the package, with its SHA-256 and CRC-64: the upload check
    reads the object's body back (GetObject) before it skips the upload."""
    from functions.commands.stack.upload import SHA256_META
    from tests.support.oss_emulator import OssEmulator

    (tmp_path / "pkg.zip").write_bytes(PACKAGE)
    with OssEmulator(access_key_id="LTAIdrip", secret="drip-secret", token="drip-token", region=REGION,
                     account_id=ACCOUNT) as oss:
        oss.buckets[BUCKET] = {OBJECT: PACKAGE}
        oss.acls[BUCKET] = "private"
        oss.meta[(BUCKET, OBJECT)] = {SHA256_META: hashlib.sha256(PACKAGE).hexdigest()}
        oss.drip_interval_s = INTERVAL_S
        yield oss


def get_object(method, path):
    return method == "GET" and "?" not in path  # (the bucket calls all have a query: ?bucketInfo, ?policy)


def _upload(oss, tmp_path, timeout_s=1):
    from functions.base.settings import Endpoint
    from functions.commands.stack.credentials import Keys
    from functions.commands.stack.upload import upload

    return upload(Keys("LTAIdrip", "drip-secret", "drip-token"), REGION, BUCKET, OBJECT, str(tmp_path / "pkg.zip"),
                  ACCOUNT, Endpoint(oss.endpoint.split("://", 1)[1], "http"), timeout_s=timeout_s)


def test_the_upload_check_reads_the_objects_body_within_its_deadline(stored, tmp_path):
    """Issue 36: oss2 streams GetObject's body, so a bound around the call alone left the body to the socket
    timeout (30 s against this peer with timeout 2 s, ending in requests' ChunkedEncodingError)."""
    from functions.commands.stack.upload import UploadError

    stored.drip = get_object
    started = time.monotonic()
    with pytest.raises(UploadError) as info:
        _upload(stored, tmp_path)
    elapsed = time.monotonic() - started
    assert stored.dripped >= 1 and any(get_object(verb, path) for verb, path in stored.requests)
    assert 0.8 < elapsed < HANG_S, elapsed  # the bound, never the drip's 15 s
    assert one_line(info.value) == "OSS at %s gave no complete answer to get_object within 1s" % stored.endpoint


def test_an_object_body_cut_short_is_an_upload_error(stored, tmp_path):
    """The peer closes the connection mid-body (well inside the bound): UploadError, not requests'
    ChunkedEncodingError."""
    from functions.commands.stack.upload import UploadError

    stored.drip = get_object
    stored.drip_interval_s, stored.drip_life_s = 0.05, 0.3
    with pytest.raises(UploadError) as info:
        _upload(stored, tmp_path, timeout_s=10)
    assert one_line(info.value) == "OSS at %s broke off the body of %s: ChunkedEncodingError" % (stored.endpoint,
                                                                                                 OBJECT)


def test_the_upload_check_without_a_drip_skips_the_upload(stored, tmp_path):
    result = _upload(stored, tmp_path)
    assert not result.uploaded and not any(verb == "PUT" for verb, _ in stored.requests)


def test_an_oss_answer_whose_xml_body_drips_is_cut_at_the_deadline(stored, tmp_path):
    """GetBucketInfo's XML (oss2 reads it inside the call)."""
    from functions.commands.stack.upload import UploadError

    stored.drip = lambda method, path: "bucketInfo" in path
    with pytest.raises(UploadError) as info:
        _upload(stored, tmp_path)
    assert stored.dripped >= 1
    assert one_line(info.value) == "OSS at %s gave no complete answer to get_bucket_info within 1s" % stored.endpoint


# ---- the other clients, against Drip(head=...) ----

def test_the_webhook_is_cut_at_its_deadline_when_the_answers_body_drips():
    """The hook's 200 came (the line is delivered: its status says so); the body after it is read inside the
    same bound and cut there, not at the drip's 15 s."""
    import io
    import json

    from functions.base.logs import JsonLogger
    from functions.pipeline.notify import SCHEMA, deliver

    stream = io.StringIO()
    log = JsonLogger("DEBUG", stream=stream, request_id="r-body")
    line = {"schema": SCHEMA, "kind": "node-failed", "count": 1, "nodes": [], "text": "1 node failed"}
    with body_drip(FAST_S) as drip:
        started = time.monotonic()
        sent = deliver([line], drip.url + "/hook", log, attempts=1, timeout_s=10.0, deadline_s=0.5)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert sent == 1 and 0.4 < elapsed < HANG_S, elapsed
    logged = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert not any(entry["message"] == "notification not sent" for entry in logged), logged


def test_the_api_server_client_is_cut_at_its_timeout_when_the_body_drips(tls):
    from functions.kube.client import ApiError, KubeApi
    from node_bootstrap.kube import KubeConfig

    ca_pem, context = tls
    with body_drip(FAST_S, tls=context) as drip:
        api = KubeApi(KubeConfig("https://127.0.0.1:%d" % drip.port, ca_pem, None, None, "t0ken", None),
                      timeout=0.5, attempts=1)
        started = time.monotonic()
        with pytest.raises(ApiError) as info:
            api.request("GET", "/api/v1/nodes")
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert 0.4 < elapsed < HANG_S, elapsed
    assert one_line(info.value) == "no complete answer from https://127.0.0.1:%d within 0.5s" % drip.port


@pytest.mark.parametrize("product", ["ecs", "ess"])
def test_the_ecs_and_auto_scaling_clients_are_cut_at_their_timeout_when_the_body_drips(product):
    """functions/cloud/rpc.py (aliyun-python-sdk-core through its vendored requests): two attempts of 1 s."""
    from functions.base.settings import Credentials, Endpoint
    from functions.cloud.rpc import ECS_VERSION, ESS_VERSION, ApiError as RpcError, Backoff, RpcClient

    version = {"ecs": ECS_VERSION, "ess": ESS_VERSION}[product]
    with body_drip() as drip:
        client = RpcClient(product, version, "cn-test", Credentials("LTAIdrip", "drip-secret", "drip-token"),
                           Endpoint("127.0.0.1:%d" % drip.port, "http"), timeout_s=1,
                           backoff=Backoff(2, sleep=lambda s: None))
        started = time.monotonic()
        with pytest.raises(RpcError) as info:
            client.call("DescribeRegions", {"RegionId": "cn-test"})
        elapsed = time.monotonic() - started
        assert drip.accepted == 2 and drip.sent >= 2
    assert 1.8 < elapsed < HANG_S, elapsed
    text = one_line(info.value)
    assert "no complete answer within 1s" in text and "drip-secret" not in text


def test_the_kms_secret_read_is_cut_at_its_timeout_when_the_body_drips():
    from functions.base.settings import Credentials, Endpoint
    from functions.cloud.secrets import SecretError, forget_all, get_secret

    forget_all()
    with body_drip() as drip:
        started = time.monotonic()
        with pytest.raises(SecretError) as info:
            get_secret("ssh-key", "cn-test", Credentials("LTAIdrip", "drip-secret", "drip-token"),
                       Endpoint("127.0.0.1:%d" % drip.port, "http"), 1)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert 0.8 < elapsed < HANG_S, elapsed
    assert info.value.retryable and "no complete answer within 1s" in one_line(info.value)


def test_the_ack_lookup_is_cut_at_its_timeout_when_the_body_drips():
    from functions.base.errors import RetryLater
    from functions.base.settings import load_settings
    from functions.cloud.cs_lookup import CsLookup

    with body_drip() as drip:
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
    assert "failed 2 times" in one_line(info.value)


def test_the_ros_stack_calls_are_cut_at_their_timeout_when_the_body_drips():
    from functions.base.settings import Endpoint
    from functions.commands.stack.credentials import Keys
    from functions.commands.stack.ros import Stacks, StackError

    with body_drip(FAST_S) as drip:
        stacks = Stacks("cn-beijing", Keys("ak", "secret", None), Endpoint("127.0.0.1:%d" % drip.port, "http"),
                        timeout_s=0.5, sleep=lambda s: None)
        started = time.monotonic()
        with pytest.raises(StackError) as info:
            stacks.find("ack-mig-hook")
        elapsed = time.monotonic() - started
        assert drip.accepted == 3 and drip.sent >= 3
    assert 1.25 < elapsed < HANG_S, elapsed
    text = one_line(info.value)
    assert "ListStacks" in text and "no complete answer within 0.5s" in text


def test_the_sts_account_lookup_is_cut_at_its_timeout_when_the_body_drips():
    from functions.base.settings import Endpoint
    from functions.commands.stack.credentials import AccountUnknown, Keys, account_id

    with body_drip() as drip:
        started = time.monotonic()
        with pytest.raises(AccountUnknown) as info:
            account_id(Keys("ak", "secret", None), "cn-beijing", Endpoint("127.0.0.1:%d" % drip.port, "http"),
                       timeout_s=1)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert 0.8 < elapsed < HANG_S, elapsed
    assert "no complete answer within 1s" in one_line(info.value)
