"""The webhook's deadlines are whole-call (functions/pipeline/notify.py, issue 30 item 3): a peer that drips
one byte a second (tests/support/drip.py) never resets them, and one attempt never runs past the deadline of
all the lines even when its own timeout is longer."""

import io
import json
import time

from functions.base.logs import JsonLogger
from functions.pipeline.notify import SCHEMA, deliver
from tests.support.drip import Drip, HANG_S
from tests.support.webhook import Webhook

LINE = {"schema": SCHEMA, "kind": "node-failed", "count": 1, "nodes": [], "text": "1 node failed"}


def logger():
    stream = io.StringIO()
    return JsonLogger("DEBUG", stream=stream, request_id="r-deadline"), stream


def test_a_peer_that_drips_one_byte_a_second_is_cut_at_the_deadline():
    log, stream = logger()
    with Drip(life_s=15) as drip:
        started = time.monotonic()
        sent = deliver([LINE, LINE], drip.url + "/hook", log, attempts=1, timeout_s=10.0, deadline_s=2.0)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1  # it was dripping: a per-read timeout would never have fired
    assert sent == 0 and 1.8 < elapsed < HANG_S, elapsed
    logged = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert logged[0]["message"] == "notification not sent" and logged[0]["error"] == "timeout"


def test_one_attempt_never_runs_past_the_deadline_of_all_lines():
    """A per-attempt timeout (10 s) larger than the deadline (1 s): the attempt gets what is left."""
    log, _ = logger()
    with Webhook() as hook:
        hook.stall_s = 8  # reads the request, never answers in time
        started = time.monotonic()
        assert deliver([LINE], hook.url(), log, attempts=1, timeout_s=10.0, deadline_s=1.0) == 0
        elapsed = time.monotonic() - started
    assert 0.8 < elapsed < HANG_S, elapsed


def test_a_prompt_answer_is_still_sent_under_the_guard():
    log, _ = logger()
    with Webhook() as hook:
        assert deliver([LINE], hook.url(), log, timeout_s=2.0, deadline_s=3.0) == 1
        assert json.loads(hook.received[0].body) == LINE


def test_an_https_webhook_that_drips_inside_tls_is_cut_at_the_deadline(tmp_path, monkeypatch):
    """TLS wraps the connection's first socket into a new one: the guard must watch the one it ends up with."""
    import ssl

    from tests.support.kubeapi import CertificateAuthority

    ca = CertificateAuthority("drip-webhook-ca")
    cert = ca.issue("127.0.0.1", server_ip="127.0.0.1")
    for name, data in (("ca.crt", ca.pem), ("server.crt", cert.cert_pem), ("server.key", cert.key_pem)):
        (tmp_path / name).write_bytes(data)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tmp_path / "server.crt"), str(tmp_path / "server.key"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.crt"))  # OpenSSL's default verify paths read it
    log, stream = logger()
    with Drip(life_s=15, interval_s=0.25, tls=context) as drip:
        started = time.monotonic()
        sent = deliver([LINE], "https://127.0.0.1:%d/hook" % drip.port, log, attempts=1, timeout_s=10.0,
                       deadline_s=1.0)
        elapsed = time.monotonic() - started
        assert drip.sent >= 1
    assert sent == 0 and 0.8 < elapsed < HANG_S, elapsed
    assert json.loads(stream.getvalue().splitlines()[0])["error"] == "timeout"
