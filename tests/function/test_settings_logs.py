"""Settings (one module owns every variable), JSON log lines, and credentials that never leak."""

import io
import json
import os
import re

import pytest

from functions.base import settings as settings_mod
from functions.handler import handler
from functions.base.logs import JsonLogger
from functions.base.settings import Credentials, SettingsError, load_settings
from tests.function.conftest import AK, ONE_KUBE_TRY, ROOT, SECRET, TOKEN, cloud_env, event_bytes


@pytest.mark.parametrize("env, fragment", [
    ({"ACK_MIG_DRY_RUN": "maybe"}, "ACK_MIG_DRY_RUN"),
    ({"ACK_MIG_API_TIMEOUT_S": "0"}, "out of range"),
    ({"ACK_MIG_LOG_LEVEL": "LOUD"}, "ACK_MIG_LOG_LEVEL"),
    ({"ACK_MIG_CS_ENDPOINT": "ftp://x"}, "http:// or https://"),
    ({"ACK_MIG_CS_ENDPOINT": "http://a/b"}, "not an endpoint"),
    ({"ACK_MIG_TRANSPORT": "pigeon"}, "cloud-assistant, ssh, local"),
    ({"ALIBABA_CLOUD_ACCESS_KEY_ID": "AK"}, "set both"),
    ({"ACK_MIG_NODE_ROOT": "var/lib/x"}, "absolute path"),
    ({"ACK_MIG_NODE_ROOT": "/var/lib/x'; rm -rf /"}, "absolute path"),
    ({"ACK_MIG_NODE_ROOT": "/var/lib/../../etc"}, "absolute path"),
])
def test_bad_settings_are_one_line(env, fragment):
    with pytest.raises(SettingsError) as info:
        load_settings(env)
    assert fragment in str(info.value) and "\n" not in str(info.value) and info.value.exit_code == 2


@pytest.mark.parametrize("text", ["\u0669\u0660\u0660", "\uff19\uff10\uff10", "9_00", "+900", "9" * 5000], ids=repr)
def test_a_whole_number_setting_is_ascii_digits_only(text):
    """The reader rule's count (``outside.digits``): ``int`` read another script's digits ("\u0669\u0660\u0660",
    fullwidth "\uff19\uff10\uff10"), "9_00" and "+900" as 900, a drain timeout the ROS template, a shell or a
    person reading the same text would not take; and 5,000 digits raised out of ``int`` as its own error. Each is
    one setting error naming the accepted range."""
    with pytest.raises(SettingsError) as info:
        load_settings({"ACK_MIG_DRAIN_TIMEOUT_S": text})
    assert "ACK_MIG_DRAIN_TIMEOUT_S" in str(info.value) and "use 1..86400" in str(info.value)
    assert load_settings({"ACK_MIG_DRAIN_TIMEOUT_S": " 900 "}).rollout.drain_timeout_s == 900


def test_the_node_directory_defaults_to_the_documented_one_and_reaches_the_script():
    from functions.delivery.node_executor import make_transport
    from functions.delivery.node_script import DEFAULT_ROOT
    from functions.delivery.transport import NodeTarget

    assert load_settings({}).delivery.node_root == DEFAULT_ROOT == "/var/lib/ack-mig-hook"
    settings = load_settings({"ACK_MIG_TRANSPORT": "local", "ACK_MIG_NODE_ROOT": "/srv/mig-hook"})
    target = NodeTarget("i-1", "node-1", "127.0.0.1", ("--size", "1g.5gb"))
    script = make_transport(settings).maker.script([target], "i-1")
    assert "'/srv/mig-hook'" in script  # the runner's argument: it checks and creates the directories
    assert DEFAULT_ROOT not in script


def test_region_and_credentials_sources():
    assert load_settings({"FC_REGION": "cn-hangzhou"}).region == "cn-hangzhou"
    assert load_settings({"FC_REGION": "cn-hangzhou", "ACK_MIG_REGION": "cn-beijing"}).region == "cn-beijing"

    class Creds:
        access_key_id, access_key_secret, security_token = "STS.ctx", "ctx-secret", "ctx-token"

    class Context:
        credentials = Creds()
        region = "cn-shanghai"
        request_id = "r-1"

    s = load_settings({"ALIBABA_CLOUD_ACCESS_KEY_ID": "AK", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "S"}, Context())
    assert s.credentials.access_key_id == "STS.ctx"  # the context's fresh credentials win
    assert s.region == "cn-shanghai"
    assert load_settings({"ALIBABA_CLOUD_ACCESS_KEY_ID": "AK", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "S"}
                         ).credentials.access_key_secret == "S"


def test_credentials_never_in_repr():
    s = load_settings({"ALIBABA_CLOUD_ACCESS_KEY_ID": "AKID-visible?", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "SEKRIT",
                       "ALIBABA_CLOUD_SECURITY_TOKEN": "TOKEN123", "ACK_MIG_SSH_KEY_SECRET": "ack-mig/ssh-key"})
    text = repr(s) + str(s)
    for secret in ("AKID-visible?", "SEKRIT", "TOKEN123"):
        assert secret not in text
    assert s.delivery.ssh_key_secret == "ack-mig/ssh-key"  # a name, not the key: the key lives in KMS
    assert repr(Credentials("a", "b", "c")) == "Credentials(<redacted>)"


def test_no_other_module_reads_the_environment():
    offenders = []
    for folder, _, files in os.walk(os.path.join(ROOT, "functions")):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
            if not name.endswith(".py") or rel == "functions/base/settings.py":
                continue
            if rel == "functions/delivery/node_runner.py":
                continue  # runs on the node (sent as text, never imported here): the node's environment
            text = open(path).read()
            if re.search(r"os\.environ|os\.getenv", text):
                offenders.append(rel)
    assert offenders == []


def test_docs_table_is_the_generated_one():
    # docs/function.md holds the one configuration table: every variable the code reads, of every part
    # (function, delivery, deploy, rollout, notify), generated from settings.ENV_VARS, byte for byte.
    docs = open(os.path.join(ROOT, "docs", "function.md")).read()
    start = docs.index(settings_mod.TABLE_HEAD, docs.index("## Configuration"))
    table = docs[start:docs.index("\n\n", start) + 1]
    assert table == settings_mod.markdown_table()
    assert {v.section for v in settings_mod.ENV_VARS} >= {"function", "delivery", "deploy", "rollout", "notify"}
    # each name once, each row with its default as the code has it
    assert len({v.name for v in settings_mod.ENV_VARS}) == len(settings_mod.ENV_VARS)
    assert "| `ACK_MIG_NODE_TIMEOUT_S` | `600` | delivery |" in table


def test_log_lines_are_json_with_context_and_masking():
    stream = io.StringIO()
    log = JsonLogger("INFO", secrets=["hunter2-secret"], stream=stream, request_id="r-9").bind(trigger="timer")
    log.debug("hidden")
    log.info("hello", instance_id="i-1", lifecycle_action_token="tok-abc", note="pw is hunter2-secret")
    log.error("multi\nline")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["level"] == "INFO" and first["request_id"] == "r-9" and first["trigger"] == "timer"
    assert first["instance_id"] == "i-1" and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", first["time"])
    assert first["lifecycle_action_token"] == "***" and "hunter2-secret" not in lines[0]
    assert json.loads(lines[1])["message"] == "multi\nline"  # one physical line, escaped


# Header and field names that carry a credential, as HTTP clients, the Alibaba Cloud SDKs and OSS spell them.
# Each is matched by one entry of the redactor's list (folded: no case, "-" or "_"), so dropping an entry
# fails its case here.
_SECRET_FIELDS = [
    ("Authorization", "ACS3-HMAC-SHA256 Credential=LTAIexample,SignedHeaders=host,Signature=5d2f0c"),
    ("proxy-authorization", "Basic dXNlcjpwYXNzd29yZA=="),
    ("x-acs-security-token", "CAIS8gF1q6Ft5B2yfSjIr5bx"),
    ("SecurityToken", "CAIS8gF1q6Ft5B2yfSjIr5by"),
    ("Cookie", "SESSIONID=9b1d0c7e4a"),
    ("Set-Cookie", "login_ticket=a81f33; HttpOnly"),
    ("client_secret", "cs-0b5e7a1f"),
    ("password", "correct-horse"),
    ("db_passwd", "battery-staple"),
    ("key_passphrase", "open sesame"),
    ("privateKey", "-----BEGIN PRIVATE KEY-----"),
    ("AccessKeyId", "LTAI5tExampleKeyId"),
    ("x-api-key", "ak-7781-live"),
    ("credentials", {"id": "LTAI5t", "value": "s3cr3t-in-a-dict"}),
    ("Signature", "q0M9x1Zk2k%2BdJq1s%3D"),  # an OSS presigned URL's signature is a bearer credential
]
# Named alike, but nothing secret: a log reader needs these, so they stay as they are.
_PLAIN_FIELDS = {"x-acs-date": "2026-11-29T01:31:42Z", "x-acs-signature-nonce": "1f0e7a2b", "host": "kms.local",
                 "x-acs-action": "GetSecretValue", "SignatureMethod": "HMAC-SHA1", "content-type": "application/json"}


@pytest.mark.parametrize("name, value", _SECRET_FIELDS, ids=[n for n, _ in _SECRET_FIELDS])
def test_a_log_field_named_for_a_secret_is_masked_wherever_it_sits(name, value):
    """The value was never registered as a secret: only its field's name can hide it. A header dict as an
    HTTP client holds it, at the top of a line and inside a list of requests; what a log reader gets is
    *** for that header and every other header intact."""
    out = io.StringIO()
    log = JsonLogger("INFO", stream=out, request_id="r-1")
    headers = dict(_PLAIN_FIELDS, **{name: value})
    log.warning("call refused", headers=headers, attempts=[{"status": 403, "headers": headers}])
    log.warning("refused again", **{name: value})
    first, second = [json.loads(line) for line in out.getvalue().splitlines()]
    for seen in (first["headers"], first["attempts"][0]["headers"]):
        assert seen == dict(_PLAIN_FIELDS, **{name: "***"})
    assert second[name] == "***" and first["attempts"][0]["status"] == 403
    leaked = value if isinstance(value, str) else value["value"]
    assert leaked not in out.getvalue()


def test_known_secret_never_reaches_logs_or_results(emulator, monkeypatch, capsys):
    """Put real-looking credentials in the environment, run events through the SDK path, and search every
    byte of output for them."""
    env = cloud_env(emulator, ACK_MIG_LOG_LEVEL="DEBUG", **ONE_KUBE_TRY)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from functions.handler import RetryInvocation

    def answer(raw):
        # The emulator's kubeconfig names an API server not there (nothing listens): an event whose nodes wait for
        # the Kubernetes API ends retry, and the handler raises its reason for FC. That text is output too.
        try:
            return handler(raw, None)
        except RetryInvocation as exc:
            return str(exc)

    outputs = []
    for name in ("ess_scale_out_success.json", "fc_timer.json", "ess_lifecycle_scale_out.json"):
        monkeypatch.setenv("ACK_MIG_DRY_RUN", "true")
        outputs.append(answer(event_bytes(name)))
    emulator.fail_next("DescribeClusterNodePools", 403, "Forbidden.RAM")
    outputs.append(handler(event_bytes("fc_timer.json"), None))  # an error path too
    captured = capsys.readouterr()
    everything = "\n".join(outputs) + captured.out + captured.err
    assert emulator.rejected == [] and len(emulator.requests) >= 6
    assert '"outcome": "error"' in outputs[-1]
    for secret in (SECRET, TOKEN, "8f2c6d1e-7b3a-4c5d-9e0f-1a2b3c4d5e6f"):
        assert secret not in everything
    assert AK not in captured.out  # the key id is kept out of logs as well


def test_handler_reports_a_bad_setting_as_an_error_result(monkeypatch, capsys):
    monkeypatch.setenv("ACK_MIG_DRY_RUN", "perhaps")
    out = json.loads(handler(event_bytes("manual.json"), None))
    assert out["outcome"] == "error" and "ACK_MIG_DRY_RUN" in out["reason"]
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["level"] == "ERROR"


def test_handler_uses_the_fc_context(emulator, monkeypatch, capsys):
    """FC's context: request id in every log line, and its credentials for the API calls."""
    env = cloud_env(emulator, **ONE_KUBE_TRY)
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"):
        env.pop(name)
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("ACK_MIG_DRY_RUN", "true")

    class Creds:
        access_key_id, access_key_secret, security_token = AK, SECRET, TOKEN

    class Context:
        request_id = "fc-req-42"
        credentials = Creds()

    from functions.handler import RetryInvocation

    # The emulator's kubeconfig names an API server not there (nothing listens): the scale-out's nodes wait for the
    # Kubernetes API, so the event ends retry and the handler raises for FC; the cloud calls went through.
    with pytest.raises(RetryInvocation, match="deferred because the Kubernetes API cannot be used"):
        handler(event_bytes("ess_scale_out_success.json"), Context())
    assert emulator.rejected == [] and emulator.requests
    lines = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    assert lines and all(l["request_id"] == "fc-req-42" for l in lines)


def test_delivery_stdlib_logs_become_json_lines_with_the_event_context():
    """Delivery modules log with the standard logging module; during an event those records are JSON
    lines with the request id and trigger, and a known secret inside one is masked."""
    import logging

    from functions.pipeline.event import run_event
    from tests.function.conftest import INVENTORY

    class LoggingExecutor:
        def execute(self, request, decisions):
            logging.getLogger("functions.delivery.fake").warning("heartbeat failed for %s with %s",
                                                                 "hook-1", SECRET)
            return []

    out = io.StringIO()
    logger = JsonLogger("INFO", secrets=[SECRET], stream=out, request_id="req-42")
    result = run_event(event_bytes("ess_scale_out_success.json"), load_settings({}), inventory=INVENTORY,
                       executor=LoggingExecutor(), logger=logger)
    assert result.outcome == "done"
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    bridged = [line for line in lines if line.get("logger") == "functions.delivery.fake"]
    assert len(bridged) == 1
    assert bridged[0]["level"] == "WARNING" and bridged[0]["request_id"] == "req-42"
    assert bridged[0]["trigger"] == "scale-out"
    assert bridged[0]["message"] == "heartbeat failed for hook-1 with ***"
    assert SECRET not in out.getvalue()
    # Outside an event the bridge is gone again.
    assert not any(type(h).__name__ == "_Bridge" for h in logging.getLogger("functions").handlers)


def test_secrets_are_masked_in_their_json_and_url_encoded_forms_too():
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
    token = "CAIS+/abc=def&ghi"
    out = io.StringIO()
    log = JsonLogger("INFO", secrets=[key, token], stream=out)
    log.info("ssh failed", detail="key was %s" % key)  # the JSON line holds the key with \n escapes
    log.info("api error", detail="string to sign ...SecurityToken=CAIS%2B%2Fabc%3Ddef%26ghi...")
    text = out.getvalue()
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in text and "CAIS%2B%2Fabc" not in text and "CAIS+/abc" not in text
    assert text.count("***") >= 2 and all(json.loads(line) for line in text.splitlines())


# ---- secrets that are really used: the SSH key from KMS over a real sshd, the access key in a signed call ----

def _key_fragments(key_text):
    """The key as a whole and every base64 line of it: none may show anywhere."""
    return [key_text] + [line for line in key_text.splitlines() if len(line) >= 16 and "PRIVATE KEY" not in line]


@pytest.mark.ssh
def test_ssh_key_from_kms_connects_then_fails_mid_run_and_never_leaks(kms, tmp_path, caplog):
    """The key is read from the KMS emulator (the real alibabacloud_kms20160120 SDK, its signature checked),
    logs in to the real sshd on loopback and runs a node; a second node is cut off mid-run by its deadline.
    The key text is nowhere in the results, the log lines, the stdlib logs (paramiko included) or the
    command line's output; KMS is asked once for both runs (cached for the instance's life)."""
    import logging
    import sys

    from functions.delivery.outcome import outcome
    from functions.delivery.ssh import SshTransport, key_from_settings
    from functions.delivery.transport import ScriptMaker
    from functions.base.logs import redact_text, stdlib_logs_into
    from tests.delivery.conftest import FAKE_MAIN, targets
    from tests.support.sshd import SSHD, Sshd

    if not os.path.exists(SSHD):
        pytest.skip("OpenSSH sshd is not installed (make test installs openssh-server)")
    from functions.delivery import bundle as bundle_mod

    (tmp_path / "sshd").mkdir()
    server = Sshd(str(tmp_path / "sshd")).start()
    try:
        kms.put_secret("ack-mig/ssh-key", server.client_key_text)
        settings = load_settings({"ACK_MIG_REGION": "cn-beijing", "ALIBABA_CLOUD_ACCESS_KEY_ID": AK,
                                  "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET, "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN,
                                  "ACK_MIG_TRANSPORT": "ssh", "ACK_MIG_SSH_KEY_SECRET": "ack-mig/ssh-key",
                                  "ACK_MIG_KMS_ENDPOINT": kms.endpoint, "ACK_MIG_SSH_KNOWN_HOSTS": server.known_hosts,
                                  "ACK_MIG_SSH_PORT": str(server.port), "ACK_MIG_LOG_LEVEL": "DEBUG"})
        fake = bundle_mod.pack([("node_bootstrap/__init__.py", b""), ("node_bootstrap/__main__.py", FAKE_MAIN)])
        maker = ScriptMaker(fake, 2, str(tmp_path / "node-root"), sys.executable)
        stream = io.StringIO()
        logger = JsonLogger("DEBUG", settings.secrets(), stream=stream, request_id="r-key")
        caplog.set_level(logging.DEBUG)  # paramiko's own DEBUG lines too
        with stdlib_logs_into(logger):
            first = SshTransport(maker, key_from_settings(settings), server.known_hosts, port=server.port,
                                 grace_s=1.0).run(targets(1))
            logger.info("first run", nodes=[r.__dict__ for r in first])
            # Mid-run: the node outlives its 2 s deadline (+1 s grace); the watchdog closes the connection.
            second = SshTransport(maker, key_from_settings(settings), server.known_hosts, port=server.port,
                                  grace_s=1.0).run(targets(1, extra=("--fake-sleep", "20"), prefix="i-late"))
            logger.error("second run", nodes=[r.__dict__ for r in second])
            # Whatever quotes the key is masked, in logs and in what the handler and CLI print.
            logger.warning("a careless message: %s" % server.client_key_text)
        assert outcome(first[0]).outcome == "partitioned"
        # Cut off at its deadline, by the node runner (exit 124) or the transport's watchdog, whichever first.
        late = second[0]
        assert outcome(late).outcome != "partitioned" and (late.exit_code == 124 or late.error == "node-timeout")
        assert "node-timeout" in repr(late)
        assert kms.calls["GetSecretValue"] == 1 and kms.rejected == [] and kms.algorithms == ["ACS3-HMAC-SHA256"]
        everything = stream.getvalue() + caplog.text + repr(first) + repr(second) + \
            redact_text(json.dumps({"reason": server.client_key_text}))
        for fragment in _key_fragments(server.client_key_text):
            assert fragment not in everything
        assert "a careless message: ***" in stream.getvalue()
    finally:
        server.stop()


def test_a_kms_failure_is_one_line_naming_the_secret_and_throttling_asks_for_a_retry(kms):
    from functions.delivery.ssh import SshError, key_from_settings
    from functions.base.errors import RetryLater

    env = {"ACK_MIG_REGION": "cn-beijing", "ALIBABA_CLOUD_ACCESS_KEY_ID": AK, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
           "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_TRANSPORT": "ssh", "ACK_MIG_SSH_KEY_SECRET": "missing",
           "ACK_MIG_KMS_ENDPOINT": kms.endpoint}
    with pytest.raises(SshError) as info:
        key_from_settings(load_settings(env))
    text = str(info.value)
    assert "'missing'" in text and "Forbidden.ResourceNotFound" in text and "\n" not in text
    kms.fail_next("GetSecretValue", 503, "ServiceUnavailable")
    with pytest.raises(RetryLater):
        key_from_settings(load_settings(env))
    # A wrong secret is refused by the emulator's signature check, and the error carries no credential.
    with pytest.raises(SshError) as info:
        key_from_settings(load_settings(dict(env, ALIBABA_CLOUD_ACCESS_KEY_SECRET="not-the-secret")))
    assert "SignatureDoesNotMatch" in str(info.value)
    assert kms.rejected and all(s not in str(info.value) for s in (SECRET, TOKEN, "not-the-secret"))


def test_kms_throttling_as_kms_answers_it_asks_for_a_retry(kms):
    """KMS over its QPS quota answers HTTP 429 ``Rejected.Throttling`` "QPS Limit Exceeded"
    (help.aliyun.com/knowledge_detail/444042; ACK's ack-secret-manager backs off on that code): a code that
    does not start with ``Throttling``, on a 4xx. It is the transient failure a 503 is (RetryLater: FC retries
    the event), never the permanent error a missing secret is."""
    from alibabacloud_kms20160120 import models as kms_models

    from functions.base.errors import RetryLater
    from functions.cloud.secrets import SecretError, _client, get_secret
    from functions.delivery.ssh import key_from_settings

    env = {"ACK_MIG_REGION": "cn-beijing", "ALIBABA_CLOUD_ACCESS_KEY_ID": AK, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
           "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_TRANSPORT": "ssh", "ACK_MIG_SSH_KEY_SECRET": "ack-mig/ssh-key",
           "ACK_MIG_KMS_ENDPOINT": kms.endpoint}
    settings = load_settings(env)
    # The double against its source, through the real SDK: what the product's except clause receives.
    kms.throttle_next()
    with pytest.raises(Exception) as raw:
        _client("cn-beijing", settings.credentials, settings.delivery.kms_endpoint, 5).get_secret_value(
            kms_models.GetSecretValueRequest(secret_name="ack-mig/ssh-key"))
    assert (raw.value.status_code, raw.value.code) == (429, "Rejected.Throttling")
    assert "QPS Limit Exceeded" in raw.value.message
    kms.throttle_next()
    with pytest.raises(SecretError) as info:
        get_secret("ack-mig/ssh-key", "cn-beijing", settings.credentials, settings.delivery.kms_endpoint, 5)
    assert info.value.retryable and "Rejected.Throttling" in str(info.value)
    kms.throttle_next()
    with pytest.raises(RetryLater) as later:
        key_from_settings(load_settings(env))
    assert "Rejected.Throttling" in str(later.value) and "\n" not in str(later.value)
    assert kms.calls["GetSecretValue"] == 3 and kms.rejected == []


@pytest.mark.parametrize("how", ["reset", "close", "stall"])
def test_a_kms_connection_that_fails_without_an_answer_asks_for_a_retry_like_a_5xx(kms, how):
    """KMS accepts the request and then the connection fails with no API code at all: reset by the peer,
    closed before any status line, or silent past the read timeout (ACK_MIG_API_TIMEOUT_S=1). That is
    the same transient failure as a 503 (FC retries the event: RetryLater, nothing touched), never the
    permanent error a missing secret is; the next attempt reads the key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from functions.delivery.ssh import key_from_settings
    from functions.base.errors import RetryLater

    private = ed25519.Ed25519PrivateKey.generate()
    key = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    kms.put_secret("ack-mig/ssh-key", key)
    env = {"ACK_MIG_REGION": "cn-beijing", "ALIBABA_CLOUD_ACCESS_KEY_ID": AK, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
           "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_TRANSPORT": "ssh", "ACK_MIG_SSH_KEY_SECRET": "ack-mig/ssh-key",
           "ACK_MIG_KMS_ENDPOINT": kms.endpoint, "ACK_MIG_API_TIMEOUT_S": "1"}
    kms.drop_next("GetSecretValue", how)
    with pytest.raises(RetryLater) as info:
        key_from_settings(load_settings(env))
    text = str(info.value)
    assert "'ack-mig/ssh-key'" in text and "\n" not in text
    assert all(s not in text for s in [SECRET, TOKEN] + _key_fragments(key))
    assert kms.dropped == [how] and kms.calls["GetSecretValue"] == 1  # the request arrived; its answer did not
    # The failed read cached nothing: the retried event asks KMS again and logs in with the key.
    assert "ssh-ed25519 %s" % key_from_settings(load_settings(env)).get_base64() == public.decode()
    assert kms.calls["GetSecretValue"] == 2 and kms.rejected == []


def test_access_key_in_a_signed_call_that_errors_never_leaks(caplog):
    """A real signed RPC call (aliyun-python-sdk-core against the loopback emulator) that the service
    refuses, twice: a wrong AccessKey secret, and a SignatureDoesNotMatch whose answer quotes the server's
    string to sign (AccessKeyId and SecurityToken inside). Neither the ApiError nor a log line carries
    the secret, the token or the string to sign."""
    import logging

    from functions.cloud.rpc import ECS_VERSION, ApiError, Backoff, RpcClient
    from functions.base.settings import Endpoint
    from tests.support.rpc_emulator import Emulator, string_to_sign

    class QuotingEmulator(Emulator):  # answers as the service does when the strings to sign differ
        def _verify(self, method, params, action):
            signed = {k: v for k, v in params.items() if k != "Signature"}
            signed["Extra"] = "x"  # a proxy that added a parameter: the strings differ
            return self._error(400, "SignatureDoesNotMatch", "Specified signature is not matched with our "
                               "calculation. server string to sign is:%s" % string_to_sign(method, signed))

    caplog.set_level(logging.DEBUG)
    # With a wrong secret the SDK reports InvalidAccessKeySecret when it recognises its own string to sign
    # in the answer, else the service's SignatureDoesNotMatch with the string quoted: either is fine.
    for emulator_class, secret, codes in ((Emulator, "wrong-secret-value", ("InvalidAccessKeySecret",
                                                                            "SignatureDoesNotMatch")),
                                          (QuotingEmulator, SECRET, ("SignatureDoesNotMatch",))):
        with emulator_class(access_key_id=AK, secret=SECRET, token=TOKEN) as emu:
            client = RpcClient("ecs", ECS_VERSION, emu.region, Credentials(AK, secret, TOKEN),
                               Endpoint(emu.endpoint.split("://", 1)[1], "http"), 2, Backoff(1))
            with pytest.raises(ApiError) as info:
                client.call("DescribeCloudAssistantStatus", {"RegionId": emu.region})
            stream = io.StringIO()
            JsonLogger("DEBUG", [SECRET, TOKEN, secret], stream=stream).error("call failed", error=str(info.value))
            text = str(info.value) + stream.getvalue() + caplog.text
            assert info.value.code in codes and emu.calls["DescribeCloudAssistantStatus"] == 1
            for leak in (SECRET, TOKEN, secret, "string to sign is:", "POST&", "SecurityToken%3D"):
                assert leak not in text, leak


def test_a_connection_error_never_carries_the_request_url_query():
    """The core SDK's connection error quotes the URL, SecurityToken and Signature in its query."""
    from functions.cloud.rpc import ECS_VERSION, ApiError, Backoff, RpcClient
    from functions.base.settings import Endpoint
    from tests.support.loopback import refused_port

    client = RpcClient("ecs", ECS_VERSION, "cn-beijing", Credentials(AK, SECRET, TOKEN),
                       Endpoint("127.0.0.1:%d" % refused_port(), "http"), 1, Backoff(1))
    with pytest.raises(ApiError) as info:
        client.call("DescribeCloudAssistantStatus", {"RegionId": "cn-beijing"})
    text = str(info.value)
    assert info.value.code in ("SDK.HttpError", "SDK.ServerUnreachable") and "query withheld" in text
    assert TOKEN not in text and "SecurityToken" not in text and "Signature=" not in text


def test_handler_result_and_cli_output_are_redacted_like_logs(tmp_path, monkeypatch, capsys):
    """A secret quoted back in a result (here: a bad event that carries it) is masked in the handler's
    returned JSON and in everything the invoke command prints, as it is in the log lines."""
    import argparse

    from functions.commands import invoke
    from functions.base.logs import register_secret

    learnt = "LEARNT-AT-RUN-TIME-0123456789"  # e.g. the SSH key read from KMS
    register_secret(learnt)
    event = json.dumps({"cluster_id": "c-1", "nodepool_id": "np %s" % learnt}).encode()
    result = handler(event, None)
    assert json.loads(result)["outcome"] == "error" and "***" in result and learnt not in result
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", AK)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", SECRET)
    path = tmp_path / "event.json"
    for value in (learnt, SECRET):
        path.write_bytes(json.dumps({"cluster_id": "c-1", "nodepool_id": "np %s" % value[:30]}).encode())
        for as_json in (True, False):
            parser = argparse.ArgumentParser()
            invoke.configure(parser, "invoke")  # the command's own options, whatever they are now
            region = ["--region", "cn-beijing"] if "--region" in parser._option_string_actions else []  # noqa
            args = parser.parse_args(["--event", str(path), "--dry-run"] + region + (["--json"] if as_json else []))
            code = invoke.run(args)
            out = capsys.readouterr()
            assert code == 2 and "***" in out.out + out.err
            assert value[:30] not in out.out + out.err


@pytest.mark.parametrize("product, region, host", [
    ("ess", "cn-beijing", "ess.aliyuncs.com"),  # the SDK's central endpoint for these regions
    ("ess", "cn-hangzhou", "ess.aliyuncs.com"),
    ("ess", "ap-southeast-1", "ess.aliyuncs.com"),
    ("ess", "us-east-1", "ess.aliyuncs.com"),
    ("ess", "cn-zhangjiakou", "ess.cn-zhangjiakou.aliyuncs.com"),
    ("ess", "cn-wulanchabu", "ess.cn-wulanchabu.aliyuncs.com"),  # not in the SDK's data: the regional rule
    ("ecs", "eu-central-1", "ecs.eu-central-1.aliyuncs.com"),
    ("kms", "cn-beijing", "kms.cn-beijing.aliyuncs.com"),
])
def test_endpoints_are_resolved_the_sdk_way(product, region, host):
    from functions.cloud.rpc import RpcClient, resolve_endpoint
    from functions.base.settings import Endpoint

    assert resolve_endpoint(product, region) == Endpoint(host, "https")
    assert resolve_endpoint(product, region, Endpoint("127.0.0.1:1", "http")) == Endpoint("127.0.0.1:1", "http")
    client = RpcClient(product, "2014-08-28", region, Credentials(AK, SECRET, TOKEN))
    assert client.endpoint.host == host  # the client itself uses the one resolver


def test_the_cs_endpoint_is_the_cs_sdks_own():
    """No override: the CS Tea SDK resolves it (its endpoint map sends e.g. cn-wuhan to cs.aliyuncs.com)."""
    from functions.cloud.cs_lookup import CsLookup

    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": AK, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET}
    hosts = {region: CsLookup(load_settings(dict(env, ACK_MIG_REGION=region)))._client._endpoint  # noqa: SLF001
             for region in ("cn-beijing", "cn-wuhan")}
    assert hosts == {"cn-beijing": "cs.cn-beijing.aliyuncs.com", "cn-wuhan": "cs.aliyuncs.com"}


def test_the_run_record_on_the_cluster_is_redacted_like_the_log_lines():
    """The run record is a Lease annotation whoever may read Leases in the namespace reads, and `status` and
    `doctor` print: its reason was written before the handler's cleaning (found by a security review)."""
    import time

    from functions.base.event_result import HandlerResult
    from functions.base.logs import register_secret
    from functions.decision import run_record
    from functions.kube.nodes import MemoryKube
    from functions.pipeline.event import _record

    learnt = "LEARNT-AT-RUN-TIME-SSH-KEY-LINE-0123456789"
    register_secret(learnt)
    result = HandlerResult(trigger="timer", event_type="timer:reconcile", outcome="error",
                           reason="delivery: something quoted %s and %s" % (learnt, SECRET))
    kube = MemoryKube()
    _record(result, kube, JsonLogger("OFF", [SECRET]), time.monotonic())
    (lease,) = [lease for lease in kube.leases.values()]
    text = lease["metadata"]["annotations"][run_record.RECORD_ANNOTATION]
    assert "delivery: something quoted ***" in text and learnt not in text and SECRET not in text
    # a secret the record's 300-character cut would split is masked whole first
    long_secret = "S3cretTokenValue-" + "q" * 30
    register_secret(long_secret)
    result = HandlerResult(trigger="timer", event_type="timer:reconcile", outcome="error",
                           reason="x" * 280 + " " + long_secret + " and more")
    _record(result, kube, JsonLogger("OFF"), time.monotonic())
    text = kube.leases[next(iter(kube.leases))]["metadata"]["annotations"][run_record.RECORD_ANNOTATION]
    assert "S3cretToken" not in text and "***" in text


@pytest.mark.parametrize("region", ["beijing", "cn_beijing", "evil.example/#", "CN-BEIJING"])
def test_a_region_that_is_no_region_id_is_one_setting_error_not_a_retry_for_good(region, monkeypatch):
    """It became the host name cs.<region>.aliyuncs.com: every call failed as transient, the outcome was
    retry, and FC retried the invocation for good (found by a review of the event intake)."""
    with pytest.raises(SettingsError, match="ACK_MIG_REGION=.* is not a region id; use one such as cn-beijing"):
        load_settings({"ACK_MIG_REGION": region})
    monkeypatch.setenv("ACK_MIG_REGION", region)
    monkeypatch.setenv("ACK_MIG_CLUSTER_ID", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b")
    answer = json.loads(handler(event_bytes("fc_timer.json"), None))
    assert answer["outcome"] == "error" and "ACK_MIG_REGION" in answer["reason"], answer
    for good in ("cn-beijing", "ap-southeast-1", "cn-hangzhou-finance", "us-east-1"):
        assert load_settings({"ACK_MIG_REGION": good}).region == good


def test_accept_new_host_keys_is_a_workstations_choice_never_the_deployed_functions():
    """accept-new trusts a host seen for the first time: in FC a machine answering at a new node's address
    would get the node command and could answer "partitioned" (found by a security review)."""
    assert load_settings({"ACK_MIG_SSH_HOST_KEY_POLICY": "accept-new"}).delivery.ssh_host_key_policy == "accept-new"
    with pytest.raises(SettingsError, match="accept-new is not accepted in Function Compute"):
        load_settings({"ACK_MIG_SSH_HOST_KEY_POLICY": "accept-new", "FC_FUNCTION_NAME": "ack-mig-hook-c1"})
    assert load_settings({"FC_FUNCTION_NAME": "ack-mig-hook-c1"}).delivery.ssh_host_key_policy == "verify"
