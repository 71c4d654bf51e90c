"""What the webhook gets goes through the same cleaning as every log line, result and run record: a secret
that a node's reason happens to quote never reaches the chat channel."""

import io

from functions.base.event_result import HandlerResult
from functions.base.logs import JsonLogger, register_secret
from functions.base.settings import load_settings
from functions.pipeline.notify import after_event
from tests.support.webhook import Webhook

SECRET = "kms-read-secret-0f3a9c2e7b1d4a6f"


def test_a_secret_quoted_by_a_node_reason_is_masked_in_the_notification():
    register_secret(SECRET)  # e.g. a value functions.cloud.secrets read from KMS
    result = HandlerResult(trigger="manual", outcome="done", cluster_id="c-1", event_id="e-1", nodes=[
        {"instance_id": "i-1", "node_name": "n-1", "outcome": "failed",
         "reason": "ssh: the agent answered: token=%s refused" % SECRET}])
    stream = io.StringIO()
    log = JsonLogger("DEBUG", stream=stream, request_id="r-1")
    with Webhook() as hook:
        assert after_event(result, load_settings({"ACK_MIG_NOTIFY_URL": hook.url()}), log) == 1
        body = hook.received[0].body.decode()
    assert SECRET not in stream.getvalue()  # the log line is clean ...
    assert SECRET not in body  # ... and so must be what goes to the chat channel


def test_a_secret_the_reasons_cut_would_split_is_masked_whole_first():
    long_secret = "kms-read-secret-" + "7" * 40
    register_secret(long_secret)
    result = HandlerResult(trigger="manual", outcome="done", cluster_id="c-1", event_id="e-1", nodes=[
        {"instance_id": "i-1", "node_name": "n-1", "outcome": "failed", "reason": "x" * 280 + " " + long_secret}])
    with Webhook() as hook:
        assert after_event(result, load_settings({"ACK_MIG_NOTIFY_URL": hook.url()}),
                           JsonLogger("OFF", request_id="r-1")) == 1
        body = hook.received[0].body.decode()
    assert "kms-read-secret" not in body and "***" in body
