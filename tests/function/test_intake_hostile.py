"""Hostile event fields, found by a review of the event intake: a lifecycle hook of another transition, an
ActionTrail record of another cluster, event text in a reason, and a field name as the sender wrote it."""

import json

import pytest

from functions.base.errors import BadEvent, SkipEvent
from functions.pipeline.intake import parse_event
from tests.function.conftest import event_json
from tests.function.test_pipeline import INVENTORY, Recorder, quiet, run_event, settings


def test_a_cloudevent_lifecycle_hook_of_another_transition_is_skipped_as_the_mns_form_is():
    """The MNS form skips a hook whose lifecycleTransition is not SCALE_OUT; the CloudEvent form with the same
    data partitions the instance (and the real executor then answers that hook)."""
    mns = event_json("mns_lifecycle_scale_out.json")
    mns["content"]["lifecycleTransition"] = "SCALE_IN"
    with pytest.raises(SkipEvent):
        parse_event(json.dumps(mns))
    event = event_json("ess_lifecycle_scale_out.json")
    event["data"]["lifecycleTransition"] = "SCALE_IN"
    recorder = Recorder()
    result = run_event(json.dumps(event), settings(), inventory=INVENTORY, executor=recorder, logger=quiet())
    assert result.outcome == "skip" and recorder.calls == [], (result.outcome, result.reason)


def test_an_actiontrail_record_whose_subject_names_another_cluster_changes_nothing_here():
    """The CloudEvent subject names the cluster the operation was on; the record's parameters happen to carry no
    ClusterId spelling intake knows: the function serves c3f5... and must not reconcile its pools for it."""
    event = event_json("actiontrail_console_create_nodepool.json")
    event["subject"] = "acs:cs:cn-beijing:1234567890123456:cluster/c0ther0000000000000000000000000000"
    event["data"]["requestParameters"] = {"nodepool_info": {"name": "gpu-mig-a100"}}
    event["data"]["responseElements"] = {"task_id": "T-1"}
    recorder = Recorder()
    result = run_event(json.dumps(event), settings(), inventory=INVENTORY, executor=recorder, logger=quiet())
    assert result.outcome == "skip" and recorder.calls == [], (result.outcome, result.reason)


@pytest.mark.parametrize("name, where, field", [
    ("ecs_instance_stopping.json", "data", "state"),
    ("mns_lifecycle_scale_out.json", "content", "lifecycleTransition"),
    ("actiontrail_api_scale_nodepool.json", "data", "errorCode"),
])
def test_event_text_quoted_in_a_reason_keeps_it_one_line(name, where, field):
    event = event_json(name)
    event[where][field] = "x\nFORGED LINE\x1b[2J"
    with pytest.raises((SkipEvent, BadEvent)) as info:
        parse_event(json.dumps(event))
    assert info.value.reason.isprintable(), info.value.reason


@pytest.mark.parametrize("wrap", ["manual", "timer"])
def test_an_unknown_field_name_is_quoted_bounded_and_on_one_line(wrap):
    """A manual payload (or a timer's trigger message) with a typo'd field: the reason names the field, cut, and
    stays one line; a 40 KB field name with newlines and ESC must not come back whole."""
    payload = {"cluster_id": "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b", "x\n\x1b[2J" * 8000: 1}
    event = payload if wrap == "manual" else {"triggerTime": "t", "triggerName": "reconcile",
                                              "payload": json.dumps(payload)}
    with pytest.raises(BadEvent) as info:
        parse_event(json.dumps(event))
    reason = info.value.reason
    assert len(reason) < 1000 and reason.isprintable(), (len(reason), reason[:80])


def test_an_actiontrail_record_names_its_cluster_before_the_subject_does():
    event = event_json("actiontrail_console_create_nodepool.json")
    event["subject"] = "acs:cs:cn-beijing:1234567890123456:cluster/c0ther0000000000000000000000000000"
    assert parse_event(json.dumps(event)).cluster_id == "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"  # the record's
    event["data"]["requestParameters"] = {"nodepool_info": {"name": "gpu-mig-a100"}}
    event["data"]["responseElements"] = {"task_id": "T-1"}
    assert parse_event(json.dumps(event)).cluster_id == "c0ther0000000000000000000000000000"  # the subject's


def test_a_transition_that_is_scale_out_only_after_unicode_case_mapping_is_skipped():
    """str.upper() maps U+017F (long s) to "S": "\u017fCALE_OUT".upper() == "SCALE_OUT" (the one letter of
    SCALE_OUT that a non-ASCII letter upper-cases to). ESS writes the transition in ASCII (SCALE_OUT, SCALE_IN);
    one that reads as SCALE_OUT only through Unicode's case mapping is another transition, skipped in both forms
    and named as sent."""
    transition = "\u017fCALE_OUT"
    assert transition.upper() == "SCALE_OUT"
    mns = event_json("mns_lifecycle_scale_out.json")
    mns["content"]["lifecycleTransition"] = transition
    with pytest.raises(SkipEvent, match="only SCALE_OUT") as info:
        parse_event(json.dumps(mns))
    assert repr(transition)[1:-1] in str(info.value), str(info.value)
    event = event_json("ess_lifecycle_scale_out.json")
    event["data"]["lifecycleTransition"] = transition
    recorder = Recorder()
    result = run_event(json.dumps(event), settings(), inventory=INVENTORY, executor=recorder, logger=quiet())
    assert result.outcome == "skip" and recorder.calls == [], (result.outcome, result.reason)


def test_a_scale_out_transition_in_ascii_of_either_case_is_handled():
    for transition in ("SCALE_OUT", "scale_out"):
        mns = event_json("mns_lifecycle_scale_out.json")
        mns["content"]["lifecycleTransition"] = transition
        assert parse_event(json.dumps(mns)).lifecycle.lifecycle_transition == transition
