"""Settings (one module owns every variable), JSON log lines, and credentials that never leak."""

import io
import json
import os
import re

import pytest

from functions import settings as settings_mod
from functions.handler import handler
from functions.logs import JsonLogger
from functions.settings import Credentials, SettingsError, load_settings
from tests.function.conftest import AK, ROOT, SECRET, TOKEN, cloud_env, event_bytes


@pytest.mark.parametrize("env, fragment", [
    ({"ACK_MIG_DRY_RUN": "maybe"}, "ACK_MIG_DRY_RUN"),
    ({"ACK_MIG_API_TIMEOUT_S": "0"}, "out of range"),
    ({"ACK_MIG_LOG_LEVEL": "LOUD"}, "ACK_MIG_LOG_LEVEL"),
    ({"ACK_MIG_CS_ENDPOINT": "ftp://x"}, "http:// or https://"),
    ({"ACK_MIG_CS_ENDPOINT": "http://a/b"}, "not an endpoint"),
    ({"ACK_MIG_TRANSPORT": "pigeon"}, "cloud-assistant, ssh, local"),
    ({"ALIBABA_CLOUD_ACCESS_KEY_ID": "AK"}, "set both"),
])
def test_bad_settings_are_one_line(env, fragment):
    with pytest.raises(SettingsError) as info:
        load_settings(env)
    assert fragment in str(info.value) and "\n" not in str(info.value) and info.value.exit_code == 2


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
                       "ALIBABA_CLOUD_SECURITY_TOKEN": "TOKEN123", "ACK_MIG_SSH_PRIVATE_KEY": "-----KEY-----"})
    text = repr(s) + str(s)
    for secret in ("AKID-visible?", "SEKRIT", "TOKEN123", "-----KEY-----"):
        assert secret not in text
    assert repr(Credentials("a", "b", "c")) == "Credentials(<redacted>)"


def test_no_other_module_reads_the_environment():
    offenders = []
    for folder, _, files in os.walk(os.path.join(ROOT, "functions")):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path.endswith(os.path.join("functions", "settings.py")):
                continue
            if "delivery" in path or name in ("cli.py", "demo.py", "cli_core.py"):
                continue  # other engineers' modules
            text = open(path).read()
            if re.search(r"os\.environ|os\.getenv", text):
                offenders.append(name)
    assert offenders == []


def test_docs_table_lists_every_variable():
    docs = open(os.path.join(ROOT, "README.md")).read()
    # The function's own variables must all be documented here; delivery documents its own additions.
    missing = [v.name for v in settings_mod.ENV_VARS if v.section == "function" and "`%s`" % v.name not in docs]
    assert missing == []


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


def test_known_secret_never_reaches_logs_or_results(emulator, monkeypatch, capsys):
    """Put real-looking credentials in the environment, run events through the SDK path, and search every
    byte of output for them."""
    env = cloud_env(emulator, ACK_MIG_SSH_PRIVATE_KEY="-----BEGIN OPENSSH PRIVATE KEY-----xyzzy",
                    ACK_MIG_LOG_LEVEL="DEBUG")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    outputs = []
    for name in ("ess_scale_out_success.json", "fc_timer.json", "ess_lifecycle_scale_out.json"):
        monkeypatch.setenv("ACK_MIG_DRY_RUN", "true")
        outputs.append(handler(event_bytes(name), None))
    emulator.fail_next("DescribeClusterNodePools", 403, "Forbidden.RAM")
    outputs.append(handler(event_bytes("fc_timer.json"), None))  # an error path too
    captured = capsys.readouterr()
    everything = "\n".join(outputs) + captured.out + captured.err
    assert emulator.rejected == [] and len(emulator.requests) >= 6
    assert '"outcome": "error"' in outputs[-1]
    for secret in (SECRET, TOKEN, "-----BEGIN OPENSSH PRIVATE KEY-----xyzzy", "8f2c6d1e-7b3a-4c5d-9e0f-1a2b3c4d5e6f"):
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
    env = cloud_env(emulator)
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

    out = json.loads(handler(event_bytes("ess_scale_out_success.json"), Context()))
    assert out["outcome"] == "done" and emulator.rejected == []
    lines = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    assert lines and all(l["request_id"] == "fc-req-42" for l in lines)


def test_delivery_stdlib_logs_become_json_lines_with_the_event_context():
    """Delivery modules log with the standard logging module; during an event those records are JSON
    lines with the request id and trigger, and a known secret inside one is masked."""
    import logging

    from functions.pipeline import run_event
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
