"""What the event intake calls a value of the wrong type: ``node_bootstrap.outside.json_type``'s words, as every
other reader of outside data (tests/function/test_value_words.py). The envelope said "is a JSON dict" and "got
list" (Python's type names), and pydantic's own lines said "a valid dictionary or instance of PodEventPayload"
(a class of ours): words a person sending an event has no use for. Each case starts from a real sample event."""

import json

import pytest

from functions.base.errors import BadEvent
from functions.pipeline.intake import parse_event
from node_bootstrap.outside import json_type
from tests.function.conftest import event_json

# Python's names for the types, and pydantic's words for them: none belongs in a line about an event.
PYTHON_WORDS = ("dict", "list,", "str", "int", "float", "bool", "NoneType", "instance of", "valid string",
                "Payload", "InvolvedObject")
VALUES = [5, 1.5, True, None, "text", [1], {"a": 1}]


def _refusal(event):
    with pytest.raises(BadEvent) as info:
        parse_event(json.dumps(event))
    return info.value.reason


def _clean(reason):
    assert "\n" not in reason and not any(word in reason for word in PYTHON_WORDS), reason


def _set(event, path, value):
    *parents, last = path
    for key in parents:
        event = event[key]
    event[last] = value


# (sample event, field path, the accepted form the line names, the field as the line names it)
FIELDS = [
    ("ess_scale_out_success.json", ("id",), "text", "envelope.id"),
    ("ess_scale_out_success.json", ("type",), "text", "envelope.type"),
    ("ess_scale_out_success.json", ("subject",), "text", "envelope.subject"),
    ("ack_pod_failed_scheduling.json", ("data", "involvedObject"), "an object", "data.involvedObject"),
    ("ack_pod_failed_scheduling.json", ("data", "involvedObject", "name"), "text", "data.involvedObject.name"),
    ("actiontrail_api_scale_nodepool.json", ("data", "requestParameters"), "an object",
     "data.requestParameters"),
    ("actiontrail_api_scale_nodepool.json", ("data", "eventName"), "text", "data.eventName"),
    ("ecs_instance_running.json", ("data", "resourceId"), "text", "data.resourceId"),
    ("fc_timer.json", ("payload",), "text", "timer.payload"),
    ("manual.json", ("instance_ids",), "a list of i-... ids", "payload.instance_ids"),
    ("manual.json", ("dry_run",), "true or false", "payload.dry_run"),
]


@pytest.mark.parametrize("sample, path, expected, where", FIELDS)
@pytest.mark.parametrize("value", VALUES)
def test_a_field_of_the_wrong_type_is_named_in_json_words(sample, path, expected, where, value):
    nullable = ("subject", "requestParameters", "payload", "instance_ids")
    if expected.startswith(json_type(value)) or (value is None and path[-1] in nullable):
        return  # the accepted type itself, or a field that may be null
    if value is True and expected == "true or false":
        return
    if isinstance(value, str) and expected.startswith("a list"):
        return  # instance ids may come as a comma-separated string
    event = event_json(sample)
    _set(event, path, value)
    reason = _refusal(event)
    got = "text 'text'" if value == "text" and expected == "true or false" else json_type(value)
    assert where in reason and "expected %s, got %s" % (expected, got) in reason, reason
    _clean(reason)


@pytest.mark.parametrize("value", [v for v in VALUES if not isinstance(v, dict)])
def test_a_whole_event_or_mns_message_that_is_no_object_is_named_in_json_words(value):
    """The event itself, and the message inside an MNS trigger's wrapper (here Base64 of the JSON)."""
    import base64

    if value is not None and value != "text" and not isinstance(value, list):  # a list of one is unwrapped
        with pytest.raises(BadEvent) as info:
            parse_event(json.dumps(value).encode())
        assert "event is %s; send a JSON object" % json_type(value) in info.value.reason, info.value.reason
        _clean(info.value.reason)
    wrapper = event_json("mns_topic_json_base64_lifecycle_scale_out.json")
    wrapper["Message"] = base64.b64encode(json.dumps(value).encode()).decode()
    reason = _refusal(wrapper)
    assert "Message (MNS trigger) is %s; send a JSON object" % json_type(value) in reason, reason
    _clean(reason)


@pytest.mark.parametrize("sample", ["ess_scale_out_success.json", "cloudmonitor_scale_out_success.json",
                                    "ess_lifecycle_scale_out.json", "ecs_instance_running.json"])
@pytest.mark.parametrize("twice", [False, True])
@pytest.mark.parametrize("value", [5, True, [1], "text"])
def test_data_that_is_no_object_is_named_not_read_as_empty(sample, value, twice):
    """``data`` of another type read as an empty object: the line then blamed a missing field
    (``data.scalingGroupId: missing, and no instanceIds either``) of data that was all there, JSON-encoded twice
    (``twice``: a string holding a string of the JSON object) or of another type altogether."""
    event = event_json(sample)
    if twice:
        event["data"] = json.dumps(json.dumps(event["data"]))
        value = "text"
    else:
        event["data"] = value
    reason = _refusal(event)
    assert reason.startswith("event field data: expected an object, got %s" % json_type(value)), reason
    _clean(reason)


@pytest.mark.parametrize("value", [5, [1], "text"])
def test_a_content_that_is_no_object_is_named_not_read_as_empty(value):
    event = event_json("mns_lifecycle_scale_out.json")
    event["content"] = value
    reason = _refusal(event)
    assert reason.startswith("event field content: expected an object, got %s" % json_type(value)), reason


# Control characters: CloudEvents 1.0 ("Type System", String) disallows U+0000-U+001F and U+007F-U+009F in an
# attribute's text. A terminal escape (ESC [ ... m) or a line break in an event id went into every log line,
# the result and the run record as it was.
CONTROLS = ["a\x1b[31mred", "two\nlines", "nul\x00", "del\x7f", "c1\x85next", "cr\r"]
TEXT_FIELDS = [
    ("ess_scale_out_success.json", ("id",), "envelope.id"),
    ("ess_scale_out_success.json", ("subject",), "envelope.subject"),
    ("ess_scale_out_success.json", ("aliyunregionid",), "envelope.aliyunregionid"),
    ("ack_pod_failed_scheduling.json", ("data", "involvedObject", "kind"), "data.involvedObject.kind"),
    ("actiontrail_api_scale_nodepool.json", ("data", "acsRegion"), "data.acsRegion"),
    ("ess_lifecycle_scale_out.json", ("data", "lifecycleActionToken"), "data.lifecycleActionToken"),
    ("mns_lifecycle_scale_out.json", ("regionId",), "regionId"),
    ("mns_lifecycle_scale_out.json", ("content", "requestId"), "content.requestId"),
    ("fc_timer.json", ("triggerName",), "timer.triggerName"),
]


@pytest.mark.parametrize("sample, path, where", TEXT_FIELDS)
@pytest.mark.parametrize("text", CONTROLS)
def test_event_text_with_a_control_character_is_refused_naming_the_field(sample, path, where, text):
    event = event_json(sample)
    _set(event, path, text)
    reason = _refusal(event)
    assert where in reason and "control character" in reason, reason
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in reason), repr(reason)


def test_an_event_id_with_a_control_character_changes_nothing_and_says_so_in_one_line():
    from tests.function.test_pipeline import INVENTORY, Recorder, quiet, run_event, settings

    event = event_json("ess_scale_out_success.json")
    event["id"] = "x\x1b]0;owned\x07\ny"
    recorder = Recorder()
    result = run_event(json.dumps(event), settings(), inventory=INVENTORY, executor=recorder, logger=quiet())
    assert result.outcome == "error" and recorder.calls == [], (result.outcome, result.reason)
    assert "envelope.id" in result.reason and "\x1b" not in json.dumps(result.to_json(), ensure_ascii=False)


# A field written twice: Python's decoder keeps the last value and says nothing, where another reader (a person
# reviewing the payload, a filter that reads the first) may see the first. CloudEvents 1.0: "Each context
# attribute MUST only appear at most once"; RFC 8259 section 4: the names within an object SHOULD be unique.
def _twice(text, field, first):
    """``text`` (JSON of an object) with ``"field": first`` written before the field's own entry."""
    key = '"%s": ' % field
    assert text.count(key) == 1, text
    return text.replace(key, key + json.dumps(first) + ", " + key)


def test_a_cloudevent_attribute_written_twice_is_refused_naming_it():
    text = _twice(json.dumps(event_json("ess_scale_out_success.json")), "type", "ess:LifecycleHook:Test")
    with pytest.raises(BadEvent) as info:
        parse_event(text.encode())
    assert "'type' appears twice" in info.value.reason, info.value.reason


def test_a_data_field_written_twice_is_refused_naming_it():
    event = event_json("ess_scale_out_success.json")
    text = _twice(json.dumps(event), "scalingGroupId", "asg-other")
    with pytest.raises(BadEvent, match="'scalingGroupId' appears twice"):
        parse_event(text)
    event["data"] = _twice(json.dumps(event["data"]), "scalingGroupId", "asg-other")  # data as JSON text
    with pytest.raises(BadEvent, match="event field data: .*'scalingGroupId' appears twice"):
        parse_event(json.dumps(event))


def test_a_dry_run_written_twice_in_a_timer_payload_is_refused_not_run_for_real():
    """``{"dry_run": true, "dry_run": false}``: whoever reads the first sees a dry run; the decoder kept false."""
    event = event_json("fc_timer.json")
    event["payload"] = _twice(json.dumps({"cluster_id": "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b", "dry_run": False}),
                              "dry_run", True)
    with pytest.raises(BadEvent) as info:
        parse_event(json.dumps(event))
    assert "timer.payload" in info.value.reason and "'dry_run' appears twice" in info.value.reason, info.value.reason


def test_an_mns_message_with_a_field_written_twice_is_refused_naming_it():
    import base64

    wrapper = event_json("mns_topic_json_base64_lifecycle_scale_out.json")
    body = json.dumps(json.loads(base64.b64decode(wrapper["Message"])))
    wrapper["Message"] = base64.b64encode(_twice(body, "lifecycleActionToken", "other").encode()).decode()
    with pytest.raises(BadEvent, match="Message .*'lifecycleActionToken' appears twice"):
        parse_event(json.dumps(wrapper))


@pytest.mark.parametrize("sample, path, where", [
    ("manual.json", ("cluster_id",), "payload.cluster_id"),
    ("manual.json", ("nodepool_id",), "payload.nodepool_id"),
    ("ess_scale_out_success.json", ("data", "scalingGroupId"), "data.scalingGroupId"),
    ("ess_lifecycle_scale_out.json", ("data", "lifecycleHookId"), "data.lifecycleHookId"),
])
@pytest.mark.parametrize("value", [12345, True, 1.5])
def test_an_id_that_is_a_number_or_true_is_named_as_such_not_quoted_as_text(sample, path, where, value):
    """``"cluster_id": 12345`` was refused as ``cluster_id '12345' is not an id; expected letters, digits...``:
    quoted as the text '12345', which is letters and digits, so the line contradicted itself."""
    event = event_json(sample)
    _set(event, path, value)
    reason = _refusal(event)
    assert where in reason and "expected text, got %s" % json_type(value) in reason, reason
    assert repr(json.dumps(value)) not in reason, reason


@pytest.mark.parametrize("etype", ["ess:Scaling\x1b[2KActivity:ScaleOutSuccess", "x\ny", "\x85"])
def test_an_event_type_with_a_control_character_reaches_no_result_or_log_line(etype, capsys):
    """The type is read before any model (stage 1): a type that is not handled was skipped with the type itself
    (cut at 200 characters) as the result's and every log line's ``event_type``."""
    from tests.function.test_pipeline import INVENTORY, Recorder, run_event, settings

    event = event_json("ess_scale_out_success.json")
    event["type"] = etype
    with pytest.raises(BadEvent) as info:
        parse_event(json.dumps(event))
    assert "envelope.type" in info.value.reason and "control character" in info.value.reason
    recorder = Recorder()
    result = run_event(json.dumps(event), settings(), inventory=INVENTORY, executor=recorder)
    shown = json.dumps(result.to_json(), ensure_ascii=False) + capsys.readouterr().out
    assert result.outcome == "error" and recorder.calls == [] and etype not in shown and "\\u001b" not in shown


@pytest.mark.parametrize("sample", ["cloudmonitor_scale_out_success.json", "mns_lifecycle_scale_out.json"])
def test_a_scaling_group_arn_naming_no_id_is_a_bad_event_not_an_internal_error(sample):
    """With no scalingGroupId, the group is read from the ARN (CloudMonitor's data.resourceId, the MNS form's
    resourceArn): its check raised ValueError after validation, out of parse_event, and the event ended as
    ``internal error while reading the event`` (an ERROR line blaming the function) instead of a bad event."""
    from tests.function.test_pipeline import INVENTORY, Recorder, quiet, run_event, settings

    event = event_json(sample)
    holder = event["data"] if "data" in event else event
    inner = holder["content"]
    del inner["scalingGroupId"]
    holder["resourceId" if "data" in event else "resourceArn"] = "acs:ess:cn-beijing:1:scalinggroup/asg-x;reboot"
    reason = _refusal(event)
    assert "resourceArn" in reason and "'asg-x;reboot' is not an id" in reason, reason
    recorder = Recorder()
    result = run_event(json.dumps(event), settings(), inventory=INVENTORY, executor=recorder, logger=quiet())
    assert result.outcome == "error" and "internal error" not in result.reason and recorder.calls == [], result.reason


def test_a_batch_is_refused_with_the_trigger_setting_the_template_really_uses():
    """A list of two real events, one of them bad. The template's EventBridge triggers run in event-driven mode
    (runOptions.mode), which has no batch setting at all ("batching is not supported in this mode",
    template.yml); the line told the operator to "set the trigger's batch size to 1", a setting they could not
    find there. Each event is refused alike (one invocation is one event: docs/function.md)."""
    good = event_json("ess_scale_out_success.json")
    bad = dict(event_json("ess_scale_out_success.json"), id=5)
    for batch in ([good, bad], [good, good]):
        reason = _refusal(batch)
        assert reason.startswith("event is a list of 2 events;") and "runOptions.mode event-driven" in reason, reason
        assert "batch size" not in reason
