"""A JSON escape of half a UTF-16 pair (``"\\ud800"``) is no text: it could not be written as UTF-8, and the
first log line of an event holding one raised UnicodeEncodeError on FC's stdout, a traceback, and FC retried
the invocation (found by a review of the event intake). Every reader refuses it, as the field's problem."""

import io
import json
import sys

import pytest

from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from tests.function.conftest import event_json
from tests.function.test_pipeline import INVENTORY, Recorder, settings


def strict_utf8():
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")  # as FC's stdout


@pytest.mark.parametrize("name", ["ess_scale_out_success.json", "ess_lifecycle_scale_out.json"])
def test_a_lone_surrogate_in_an_event_is_a_bad_event_not_a_traceback(name):
    event = event_json(name)
    event["id"] = "evt-\ud800"
    recorder = Recorder()
    result = run_event(json.dumps(event).encode("ascii"), settings(), inventory=INVENTORY, executor=recorder,
                       logger=JsonLogger("INFO", stream=strict_utf8(), request_id="r"))
    assert result.outcome == "error" and "lone surrogate" in result.reason, result.reason
    assert recorder.calls == []


def test_the_fc_handler_answers_a_lone_surrogate_timer_name_with_a_result(monkeypatch):
    from functions.handler import handler

    monkeypatch.setenv("ACK_MIG_CLUSTER_ID", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b")
    monkeypatch.setattr(sys, "stdout", strict_utf8())
    raw = json.dumps({"triggerTime": "t", "triggerName": "t\ud800", "payload": ""}).encode()
    answer = json.loads(handler(raw, None))
    assert answer["outcome"] == "error" and "lone surrogate" in answer["reason"]


def test_a_log_line_holding_a_lone_surrogate_from_elsewhere_is_written_escaped():
    stream = strict_utf8()
    JsonLogger("INFO", stream=stream, request_id="r").warning("odd", reason="text \ud800 from an exception")
    stream.flush()
    line = stream.buffer.getvalue().decode("utf-8")
    assert "\\ud800" in line and json.loads(line)["reason"] == "text \ud800 from an exception"  # JSON's own escape
