"""The notification webhook (functions/pipeline/notify.py) against real loopback receivers (tests/support/webhook.py):
what is sent, retries and their bounds, a webhook that is down or stalls, redirects, TLS, the URL from
KMS, and that the URL (it may carry a token) never reaches a log line or an error message."""

import io
import json
import os
import sys
import time

import pytest

from functions.cloud.cluster import InventoryLookup
from functions.base.logs import JsonLogger
from functions.pipeline.notify import SCHEMA, deliver
from functions.pipeline.event import run_event
from functions.base.settings import SettingsError, load_settings
from tests.function.conftest import AK, INVENTORY, ROOT, SECRET, TOKEN
from tests.support.loopback import refused_port
from tests.support.webhook import Webhook

TOKEN_PATH = "/hooks/T0KEN-abc123-secret-part"
LINE = {"schema": SCHEMA, "kind": "node-failed", "count": 1, "nodes": [], "text": "1 node failed"}


def logger():
    stream = io.StringIO()
    return JsonLogger("DEBUG", stream=stream, request_id="r-notify"), stream


def closed_port():
    return refused_port()  # a loopback port nobody listens on, nor can


def test_a_line_is_one_json_object_posted_with_its_type():
    log, _ = logger()
    with Webhook() as hook:
        assert deliver([LINE, dict(LINE, kind="rollout-finished")], hook.url(), log) == 2
        first = hook.received[0]
    assert first.method == "POST" and first.path == TOKEN_PATH
    assert first.headers["Content-Type"] == "application/json" and first.body.endswith(b"}\n")
    assert first.body.count(b"\n") == 1 and json.loads(first.body) == LINE


def test_a_5xx_is_retried_with_its_retry_after_and_a_4xx_is_not():
    log, stream = logger()
    waits = []
    with Webhook() as hook:
        hook.answers = [503, 503]
        hook.headers = {"Retry-After": "0"}
        assert deliver([LINE], hook.url(), log, sleep=waits.append) == 1
        assert len(hook.received) == 3 and waits == [0.0, 0.0]  # Retry-After: 0 honoured, not the backoff
        hook.answers = [404]
        assert deliver([LINE, LINE], hook.url(), log, sleep=waits.append) == 1  # refused once, next one sent
        assert len(hook.received) == 5
        hook.answers = [503, 503, 503]
        hook.headers = {}
        assert deliver([LINE, LINE], hook.url(), log, sleep=waits.append) == 0  # down: the rest is not tried
        assert len(hook.received) == 8 and waits[-2:] == [0.5, 1.0]  # the backoff without Retry-After
    logged = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["message"], e.get("status")) for e in logged] == [
        ("notification not sent", 404), ("notification not sent", 503),
        ("notifications left unsent: the webhook does not answer", None)]


@pytest.mark.parametrize("value", ["inf", "Infinity", "1e400", "1_0", "+3", "1.5"], ids=repr)
def test_a_retry_after_that_is_no_count_of_seconds_is_the_backoff(value):
    """The reader rule on the webhook's answer: ``Retry-After`` is delay-seconds, ASCII digits (RFC 9110 section
    10.2.3), read as the Kubernetes client reads it (``outside.digits``). ``float()`` took "inf" and "1e400" as a
    wait to the deadline of all lines, so no attempt followed, and "1_0" or "+3" as seconds. Anything but digits
    is the sender's own backoff."""
    log, _ = logger()
    waits = []
    with Webhook() as hook:
        hook.answers = [503]
        hook.headers = {"Retry-After": value}
        assert deliver([LINE], hook.url(), log, sleep=waits.append) == 1
    assert waits == [0.5]


@pytest.mark.parametrize("value", ["9" * 19, "9" * 400, " 3600 "], ids=len)
def test_a_retry_after_of_many_digits_is_a_wait_capped_by_the_deadline_as_the_kube_clients(value):
    """One rule for ``Retry-After`` (``outside.delay_seconds``): delay-seconds of any length are a wait, capped
    by the caller (here the deadline of all lines; the Kubernetes client its 30 s). Past 18 digits notify read
    it as none and retried after half a second, the server's ask ignored, where the Kubernetes client waited."""
    from functions.pipeline.notify import DEADLINE_S

    log, _ = logger()
    waits = []
    with Webhook() as hook:
        hook.answers = [503]
        hook.headers = {"Retry-After": value}
        deliver([LINE], hook.url(), log, sleep=waits.append)
    assert waits and DEADLINE_S - 5 < waits[0] <= DEADLINE_S, waits


def test_a_2xx_whose_body_breaks_off_is_delivered_once_not_posted_again():
    """The status is the webhook's verdict: once a 2xx came the line is in the channel, whatever the body does
    after it. Reading it as no answer retried the POST, and the channel got the same alert three times while the
    function logged it as not sent."""
    log, stream = logger()
    with Webhook() as hook:
        hook.cut_body = True
        assert deliver([LINE, dict(LINE, kind="rollout-finished")], hook.url(), log, sleep=lambda s: None) == 2
        assert [line["kind"] for line in hook.lines()] == ["node-failed", "rollout-finished"]
    assert "notification not sent" not in stream.getvalue()


def test_a_webhook_that_is_down_or_stalls_ends_within_the_deadline_and_never_logs_the_url():
    log, stream = logger()
    url = "http://127.0.0.1:%d%s" % (closed_port(), TOKEN_PATH)
    started = time.monotonic()
    assert deliver([LINE, LINE], url, log, sleep=lambda s: None) == 0
    assert time.monotonic() - started < 5
    with Webhook() as hook:
        hook.stall_s = 30  # accepts, reads the request, never answers in time
        started = time.monotonic()
        assert deliver([LINE], hook.url(), log, timeout_s=0.3, deadline_s=1.0, sleep=time.sleep) == 0
        elapsed = time.monotonic() - started
        tries = len(hook.received)
    # every attempt cut by the read timeout, all by the deadline: the stall (30 s) is never waited out; a
    # hang guard, not a speed check (a loaded CI runner may take seconds to unwind a cut attempt)
    assert elapsed < 15 and 1 <= tries <= 3
    text = stream.getvalue()
    assert "T0KEN" not in text and "secret-part" not in text and '"webhook_host": "127.0.0.1"' in text


def test_a_redirect_is_not_followed():
    """A POST that carries a token is never replayed to, nor shown to, another address."""
    log, _ = logger()
    with Webhook() as elsewhere, Webhook() as hook:
        hook.answers = [302]
        hook.headers = {"Location": elsewhere.url("/collect")}
        assert deliver([LINE], hook.url(), log) == 0
        assert len(hook.received) == 1 and elsewhere.received == []


def test_https_with_a_trusted_certificate_and_an_untrusted_one(tmp_path, monkeypatch):
    log, stream = logger()
    with Webhook(tls_dir=str(tmp_path)) as hook:
        assert deliver([LINE], hook.url(), log) == 0  # the throwaway CA is nobody's: refused, not retried
        assert hook.received == [] and "SSLCertVerificationError" in stream.getvalue()
        monkeypatch.setenv("SSL_CERT_FILE", hook.ca_file)  # OpenSSL's default verify paths read it
        assert deliver([LINE], hook.url(), log) == 1
        assert hook.lines() == [LINE]


@pytest.mark.parametrize("url, fragment", [
    ("http://hooks.example.com/T0KEN-abc", "uses http://; use https://"),
    ("ftp://hooks.example.com/T0KEN-abc", "is not a URL"),
    ("https://hooks.example.com:port/T0KEN-abc", "is not a URL"),
    ("hooks.example.com/T0KEN-abc", "is not a URL"),
    # user info: urllib reads "user:T0KEN@host" as the host (a port of "T0KEN@host": InvalidURL, never posted;
    # with a port, the password goes into a DNS lookup), and a password in a URL is a secret in clear text
    ("https://user:T0KEN-pw@hooks.example.com/hook", "carries user info"),
    ("https://user:T0KEN-pw@hooks.example.com:8443/hook", "carries user info"),
    ("https://T0KEN-abc@hooks.example.com/hook", "carries user info"),
    ("https://:T0KEN-pw@hooks.example.com/hook", "carries user info"),
])
def test_a_wrong_url_is_one_line_that_never_quotes_it(url, fragment):
    with pytest.raises(SettingsError) as info:
        load_settings({"ACK_MIG_NOTIFY_URL": url})
    assert fragment in str(info.value) and "T0KEN" not in str(info.value)
    assert "ACK_MIG_NOTIFY_URL" in str(info.value) and "use https://" in str(info.value)
    assert "\n" not in str(info.value)


def test_the_url_is_a_secret_of_the_settings():
    settings = load_settings({"ACK_MIG_NOTIFY_URL": "https://hooks.example.com" + TOKEN_PATH})
    assert "T0KEN" not in repr(settings) and "https://hooks.example.com" + TOKEN_PATH in settings.secrets()


def failing_event(tmp_path, env):
    """The example scale-out with both nodes answering gpu-busy (the fake node of the delivery tests)."""
    from functions.delivery.local import LocalTransport
    from functions.delivery.node_executor import DeliveryExecutor
    from functions.delivery.transport import ScriptMaker
    from functions.delivery import bundle as bundle_mod
    from tests.delivery.conftest import FAKE_MAIN

    fake = bundle_mod.pack([("node_bootstrap/__init__.py", b""), ("node_bootstrap/__main__.py", FAKE_MAIN)])
    maker = ScriptMaker(fake, 30, str(tmp_path / "node-root"), sys.executable)
    settings = load_settings(dict({"ACK_MIG_STARTUP_TAINT": "none"}, **env))
    log, stream = logger()
    with open(os.path.join(ROOT, "examples", "event.json"), "rb") as fh:
        raw = fh.read()
    result = run_event(raw, settings, inventory=InventoryLookup.from_file(INVENTORY), logger=log,
                       executor=DeliveryExecutor(LocalTransport(maker), ["--fake-exit", "4"]))
    return result, stream.getvalue()


def test_an_event_ends_as_it_would_whether_the_webhook_answers_or_not(tmp_path):
    down = "http://127.0.0.1:%d%s" % (closed_port(), TOKEN_PATH)
    result, logged = failing_event(tmp_path, {"ACK_MIG_NOTIFY_URL": down})
    assert result.outcome == "done" and [n["outcome"] for n in result.nodes] == ["failed", "failed"]
    assert '"message": "notification not sent"' in logged and "T0KEN" not in logged
    assert "T0KEN" not in json.dumps(result.to_json())
    with Webhook() as hook:
        told, _ = failing_event(tmp_path, {"ACK_MIG_NOTIFY_URL": hook.url()})
        (line,) = hook.lines()
    def timeless(doc):  # how long each node took differs between two runs; nothing else may
        return dict(doc, nodes=[{k: v for k, v in n.items() if k != "duration_ms"} for n in doc["nodes"]])

    assert timeless(told.to_json()) == timeless(dict(result.to_json(), event_id=told.event_id))
    assert line["kind"] == "node-failed" and line["count"] == 2 and line["trigger"] == "scale-out"
    assert [n["instance_id"] for n in line["nodes"]] == ["i-2zeb7c1mig0a100x1k4d", "i-2zeb7c1mig0a100x2m8f"]
    assert line["text"] == ("2 nodes failed (2 gpu-busy): cn-beijing.192.168.12.31, cn-beijing.192.168.12.47")


def test_the_url_from_a_kms_secret_is_read_when_there_is_something_to_send(tmp_path, kms):
    env = {"ACK_MIG_REGION": "cn-beijing", "ALIBABA_CLOUD_ACCESS_KEY_ID": AK, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
           "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_KMS_ENDPOINT": kms.endpoint,
           "ACK_MIG_NOTIFY_URL_SECRET": "ack-mig/notify-url"}
    with Webhook() as hook:
        kms.put_secret("ack-mig/notify-url", hook.url())
        result, logged = failing_event(tmp_path, env)
        assert [line["kind"] for line in hook.lines()] == ["node-failed"]
    assert kms.calls["GetSecretValue"] == 1 and kms.rejected == []
    assert "T0KEN" not in logged and result.outcome == "done"
    kms.put_secret("ack-mig/notify-url", "http://hooks.example.com/T0KEN-abc")  # not https: refused
    from functions.cloud import secrets

    secrets.forget_all()
    result, logged = failing_event(tmp_path, env)
    assert result.outcome == "done" and "T0KEN" not in logged
    assert "the URL in secret 'ack-mig/notify-url' (ACK_MIG_NOTIFY_URL_SECRET) uses http://" in logged


def test_a_line_lists_at_most_20_nodes_counts_them_all_and_cuts_each_reason_at_300():
    """docs/operations.md: `nodes` lists at most 20 (`count` says how many), each reason cut at 300 characters,
    the node's `code` kept; `text` stays one readable line. 25 nodes of one pool fail with 1,000-character
    reasons, in a rollout wave (`rollout-stopped`) and out of one (`node-failed`)."""
    from functions.base.event_result import HandlerResult
    from functions.base.model import Decision, PartitionLabel
    from functions.pipeline.notify import notifications

    ids = ["i-2zeb7c1mig0a100n%03d" % i for i in range(25)]
    label = PartitionLabel(kind="sequence", value="3g.20gb-3g.20gb")
    decisions = [Decision(instance_id=i, node_name="node-%d" % n, nodepool_id="np-a", action="partition",
                          reason="layout", partition=label, drain=True) for n, i in enumerate(ids)]
    nodes = [{"instance_id": i, "node_name": "node-%d" % n, "outcome": "failed", "code": "gpu-busy",
              "reason": "gpu-busy: " + "x" * 1000} for n, i in enumerate(ids)]
    result = HandlerResult(trigger="timer", outcome="done", cluster_id="c" + "0" * 32, decisions=decisions,
                           nodes=nodes)
    for waves, kinds in (((), ["node-failed"]), (ids, ["rollout-stopped", "node-failed"])):
        lines = notifications(result, wave_ids=waves, whole_pools=True, now=0)
        assert [line["kind"] for line in lines] == kinds
        for line in lines:
            assert line["count"] == 25 and len(line["nodes"]) == 20, line["kind"]
            assert [n["instance_id"] for n in line["nodes"]] == ids[:20]
            assert all(len(n["reason"]) <= 300 and n["reason"].startswith("gpu-busy: x") for n in line["nodes"])
            assert all(n["code"] == "gpu-busy" for n in line["nodes"])
            assert "\n" not in line["text"] and len(line["text"]) <= 600


@pytest.mark.parametrize("outcome, code, stopped", [("failed", None, True), ("drain-timeout", None, True),
                                                    ("drain-refused", None, True), ("failed", "claim-refused", False),
                                                    ("drain-timeout", "record-refused", False)])
def test_the_outcomes_docs_operations_names_for_a_stopped_rollout_are_the_ones_told(outcome, code, stopped):
    """docs/operations.md's table: ``rollout-stopped`` for a wave node ended failed, drain-timeout or drain-refused;
    never for one whose claim was refused or whose record was removed after a refusal (nothing stops the pool)."""
    from functions.base.event_result import HandlerResult
    from functions.base.model import Decision, PartitionLabel
    from functions.pipeline.notify import notifications

    label = PartitionLabel(kind="sequence", value="3g.20gb-3g.20gb")
    decision = Decision(instance_id="i-a", node_name="node-a", nodepool_id="np-a", action="partition",
                        reason="layout", partition=label, drain=True)
    node = dict({"instance_id": "i-a", "node_name": "node-a", "outcome": outcome, "reason": "why"},
                **({"code": code} if code else {}))
    result = HandlerResult(trigger="timer", outcome="done", cluster_id="c" + "0" * 32, decisions=[decision],
                           nodes=[node])
    kinds = [line["kind"] for line in notifications(result, wave_ids=["i-a"], whole_pools=True, now=0)]
    assert ("rollout-stopped" in kinds) is stopped, kinds
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "operations.md"), encoding="utf-8").read()
    row = next(line for line in text.splitlines() if line.startswith("| `rollout-stopped` |"))
    assert "`%s`" % (code or outcome) in row, row
