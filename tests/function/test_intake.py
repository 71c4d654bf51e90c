"""Event intake: every source's sample becomes the right normalized request; irrelevant events end as
a typed skip, malformed ones as a typed error naming the field."""

import json
import re

import pytest

from functions.base.errors import BadEvent, SkipEvent
from functions.pipeline.intake import HANDLED_TYPES, parse_event
from functions.base.model import Trigger
from tests.function.conftest import event_bytes, event_json

ASG = "asg-2ze4x7c1mig8a100q9wz"
POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"


def test_ess_scale_out_success_camel_case():
    r = parse_event(event_bytes("ess_scale_out_success.json"))
    assert r.trigger == Trigger.SCALE_OUT
    assert r.event_type == "ess:ScalingActivity:ScaleOutSuccess"
    assert r.scaling_group_id == ASG
    assert r.instance_ids == ["i-2zeb7c1mig0a100x1k4d", "i-2zeb7c1mig0a100x2m8f"]
    assert r.region == "cn-beijing" and r.event_id == event_json("ess_scale_out_success.json")["id"]
    assert r.lifecycle is None and r.cluster_id is None


def test_ess_partial_success_pascal_case_and_comma_string():
    r = parse_event(event_bytes("ess_scale_out_partial_success.json"))
    assert r.trigger == Trigger.SCALE_OUT
    assert r.scaling_group_id == ASG
    assert r.instance_ids == ["i-2zeb7c1mig0a100x3q2h"]


def test_ess_lifecycle_scale_out_carries_hook_and_token():
    r = parse_event(event_bytes("ess_lifecycle_scale_out.json"))
    assert r.trigger == Trigger.LIFECYCLE_HOOK
    assert r.lifecycle.lifecycle_hook_id == "ash-2ze6hook0mig1a100w3e"
    assert r.lifecycle.lifecycle_action_token == "8f2c6d1e-7b3a-4c5d-9e0f-1a2b3c4d5e6f"
    assert r.lifecycle.scaling_group_id == ASG and r.lifecycle.default_result == "CONTINUE"
    assert r.instance_ids == ["i-2zeb7c1mig0a100x3q2h"]


def test_ess_lifecycle_test_is_acknowledged_as_skip():
    with pytest.raises(SkipEvent) as info:
        parse_event(event_bytes("ess_lifecycle_test.json"))
    assert info.value.trigger == "test" and "acknowledged" in info.value.reason


def test_cloudmonitor_form_reads_nested_content():
    r = parse_event(event_bytes("cloudmonitor_scale_out_success.json"))
    assert r.trigger == Trigger.SCALE_OUT
    assert r.event_type == "ess:CloudMonitor:AUTOSCALING[SCALEOUTSUCCESS]"
    assert r.scaling_group_id == ASG
    assert len(r.instance_ids) == 2


def test_cloudmonitor_scaling_group_from_arn_when_no_id():
    event = event_json("cloudmonitor_scale_out_success.json")
    del event["data"]["content"]["scalingGroupId"]
    r = parse_event(json.dumps(event).encode())
    assert r.scaling_group_id == ASG  # from acs:ess:...:scalinggroup/asg-...


def test_mns_lifecycle_notification():
    r = parse_event(event_bytes("mns_lifecycle_scale_out.json"))
    assert r.trigger == Trigger.LIFECYCLE_HOOK
    assert r.event_type == "ess:LifecycleHook:MNS"
    assert r.lifecycle.lifecycle_action_token == "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d"
    assert r.scaling_group_id == ASG and r.instance_ids == ["i-2zeb7c1mig0a100x3q2h"]


def _same_lifecycle_request(r):
    plain = parse_event(event_bytes("mns_lifecycle_scale_out.json"))
    assert r.trigger == Trigger.LIFECYCLE_HOOK and r.event_type == plain.event_type
    assert r.lifecycle == plain.lifecycle and r.instance_ids == plain.instance_ids
    assert r.scaling_group_id == plain.scaling_group_id


def test_mns_message_in_the_fc_topic_trigger_json_wrapper_base64_encoded():
    """FC's MNS topic trigger (notifyContentFormat JSON) wraps the message; ESS's body comes Base64-encoded."""
    wrapper = event_json("mns_topic_json_base64_lifecycle_scale_out.json")
    assert wrapper["Message"][:1] != "{"  # the sample really carries Base64
    _same_lifecycle_request(parse_event(event_bytes("mns_topic_json_base64_lifecycle_scale_out.json")))
    # The same wrapper around the plain JSON text, and around an already decoded object.
    body = event_json("mns_lifecycle_scale_out.json")
    for message in (json.dumps(body), body):
        _same_lifecycle_request(parse_event(json.dumps(dict(wrapper, Message=message))))


def test_mns_message_body_alone_base64_encoded():
    """notifyContentFormat STREAM: the event is the published body itself, here Base64 text (with the
    line breaks some encoders add)."""
    import base64

    raw = base64.encodebytes(event_bytes("mns_lifecycle_scale_out.json"))
    assert b"\n" in raw.strip() and not raw.startswith(b"{")
    _same_lifecycle_request(parse_event(raw))


@pytest.mark.parametrize("message, fragment", [
    ("not json, not base64!", "neither JSON nor Base64"),
    ("bm90IGpzb24=", "neither JSON nor Base64"),  # Base64 of "not json"
    ("WzEsIDJd", "is a list"),  # Base64 of "[1, 2]"
    ("", "empty or not text"),
    (17, "empty or not text"),
])
def test_a_bad_mns_message_is_one_line_naming_it(message, fragment):
    wrapper = event_json("mns_topic_json_base64_lifecycle_scale_out.json")
    with pytest.raises(BadEvent) as info:
        parse_event(json.dumps(dict(wrapper, Message=message)))
    assert fragment in str(info.value) and "Message" in str(info.value) and "\n" not in str(info.value)


def test_text_that_is_neither_json_nor_base64_stays_a_json_error():
    with pytest.raises(BadEvent, match="not JSON"):
        parse_event(b"{not json")
    with pytest.raises(BadEvent, match="neither JSON nor Base64"):
        parse_event(b"hello world")  # could have been Base64: the message says both


def test_mns_scale_in_transition_is_skipped():
    event = event_json("mns_lifecycle_scale_out.json")
    event["content"]["lifecycleTransition"] = "SCALE_IN"
    with pytest.raises(SkipEvent, match="SCALE_IN"):
        parse_event(json.dumps(event))


def test_actiontrail_console_create_takes_pool_from_response():
    r = parse_event(event_bytes("actiontrail_console_create_nodepool.json"))
    assert r.trigger == Trigger.NODEPOOL_OPERATION
    assert (r.cluster_id, r.nodepool_id) == (CLUSTER, POOL)


def test_actiontrail_api_scale_takes_pool_from_request():
    r = parse_event(event_bytes("actiontrail_api_scale_nodepool.json"))
    assert r.event_type == "cs:ActionTrail:ApiCall"
    assert (r.cluster_id, r.nodepool_id) == (CLUSTER, POOL)


def test_actiontrail_read_operation_is_skipped():
    with pytest.raises(SkipEvent, match="DescribeClustersV1"):
        parse_event(event_bytes("actiontrail_api_describe_clusters.json"))


def test_actiontrail_failed_operation_is_skipped():
    event = event_json("actiontrail_api_scale_nodepool.json")
    event["data"]["errorCode"] = "QuotaExceeded.Ecs"
    with pytest.raises(SkipEvent, match="failed"):
        parse_event(json.dumps(event))


def test_ecs_running_and_other_states():
    r = parse_event(event_bytes("ecs_instance_running.json"))
    assert r.trigger == Trigger.INSTANCE_RUNNING and r.instance_ids == ["i-2zeb7c1mig0a100x3q2h"]
    with pytest.raises(SkipEvent, match="Stopping"):
        parse_event(event_bytes("ecs_instance_stopping.json"))


def test_a_pods_failed_scheduling_names_the_pod_and_the_cluster():
    r = parse_event(event_bytes("ack_pod_failed_scheduling.json"))
    assert r.trigger == Trigger.POD_UNSCHEDULABLE and r.event_type == "cs:k8s:PodRelatedEvent"
    assert (r.pod.namespace, r.pod.name) == ("llm", "llm-7b-5d8f7c9b6d-q4x2m") and r.cluster_id == CLUSTER
    assert r.region == "cn-beijing" and not r.instance_ids and not r.auto_pools
    event = event_json("ack_pod_failed_scheduling.json")
    event["data"] = json.dumps(event["data"])  # data as JSON text: the same request
    del event["subject"]  # no subject: the configured cluster
    again = parse_event(json.dumps(event))
    assert again.pod == r.pod and again.cluster_id is None


@pytest.mark.parametrize("change, outcome, fragment", [
    ({"reason": "Scheduled"}, SkipEvent, "only FailedScheduling"),
    ({"involvedObject": {"kind": "Node", "namespace": "", "name": "n"}}, SkipEvent, "about a 'Node', not a Pod"),
    ({"involvedObject": {"kind": "Pod", "namespace": "llm", "name": "$(reboot)"}}, BadEvent,
     "data.involvedObject.name"),
    ({"involvedObject": {"kind": "Pod", "namespace": "LLM", "name": "p"}}, BadEvent, "data.involvedObject.namespace"),
    ({"involvedObject": {"kind": "Pod", "namespace": "llm", "name": "p" * 254}}, BadEvent, "not a pod name"),
    ({"involvedObject": {"kind": "Pod", "namespace": "llm", "name": "p", "uid": "x y"}}, BadEvent, "not a uid"),
    ({"involvedObject": None}, BadEvent, "data.involvedObject"),
])
def test_a_pod_event_that_is_not_ours_skips_and_a_malformed_one_names_the_field(change, outcome, fragment):
    event = event_json("ack_pod_failed_scheduling.json")
    event["data"].update(change)
    with pytest.raises(outcome, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        parse_event(json.dumps(event))


def test_timer_with_empty_and_json_payload():
    r = parse_event(event_bytes("fc_timer.json"))
    assert r.trigger == Trigger.TIMER and r.instance_ids == [] and r.nodepool_id is None
    event = event_json("fc_timer.json")
    event["payload"] = json.dumps({"cluster_id": CLUSTER, "dry_run": True})
    r = parse_event(json.dumps(event))
    assert r.cluster_id == CLUSTER and r.dry_run is True
    event["payload"] = "every pool please"
    with pytest.raises(BadEvent, match="timer.payload"):
        parse_event(json.dumps(event))


def test_manual_payload():
    r = parse_event(event_bytes("manual.json"))
    assert r.trigger == Trigger.MANUAL
    assert (r.cluster_id, r.nodepool_id, r.instance_ids, r.dry_run) == (
        CLUSTER, POOL, ["i-2zeb7c1mig0a100x1k4d"], True)


@pytest.mark.parametrize("payload, field", [
    ({"cluster_id": CLUSTER, "nodepool": "np-1"}, "payload.nodepool"),
    ({"cluster_id": "c 1; rm -rf /"}, "payload.cluster_id"),
    ({"instance_ids": {"a": "i-abc"}}, "payload.instance_ids"),
    ({"instance_ids": "[i-abc"}, "payload.instance_ids"),
    ({"dry_run": "yes"}, "payload.dry_run"),
])
def test_manual_payload_errors_name_the_field(payload, field):
    with pytest.raises(BadEvent) as info:
        parse_event(json.dumps(payload))
    assert ("event field %s" % field) in info.value.reason
    assert "\n" not in info.value.reason and info.value.exit_code == 2


@pytest.mark.parametrize("ids", [["$(reboot)", "i-abc"], "i-abc,not-an-id"])
def test_an_id_that_fails_validation_is_a_target_of_its_own(ids):
    """One bad item no longer fails the whole event: it becomes an invalid target (its own error
    decision, functions.pipeline.event), the valid ids stay."""
    r = parse_event(json.dumps({"instance_ids": ids}))
    assert r.instance_ids == ["i-abc"]
    (bad,) = r.invalid_targets
    assert bad.target in ("'$(reboot)'", "'not-an-id'") and "not an ECS instance id" in bad.reason


def test_lifecycle_without_token_names_the_field():
    event = event_json("ess_lifecycle_scale_out.json")
    del event["data"]["lifecycleActionToken"]
    with pytest.raises(BadEvent, match="data.lifecycleActionToken"):
        parse_event(json.dumps(event))


def test_scale_out_without_group_or_instances_is_an_error():
    event = event_json("ess_scale_out_success.json")
    event["data"] = {"scalingActivityId": "asa-1"}
    with pytest.raises(BadEvent, match="scalingGroupId"):
        parse_event(json.dumps(event))


def test_cloudevent_data_as_json_string():
    event = event_json("ess_scale_out_success.json")
    event["data"] = json.dumps(event["data"])
    assert parse_event(json.dumps(event)).scaling_group_id == ASG


def test_cloudevent_missing_envelope_field():
    event = event_json("ess_scale_out_success.json")
    del event["id"]
    with pytest.raises(BadEvent, match="envelope.id"):
        parse_event(json.dumps(event))


def test_batch_of_one_is_unwrapped_and_larger_batches_refused():
    one = [event_json("ess_scale_out_success.json")]
    assert parse_event(json.dumps(one)).trigger == Trigger.SCALE_OUT
    with pytest.raises(BadEvent, match="runOptions.mode event-driven"):
        parse_event(json.dumps(one * 2))


@pytest.mark.parametrize("raw, fragment", [
    (b"", "empty"), (b"   ", "empty"), (b"{not json", "not JSON"), (b"\xff\xfe", "UTF-8"),
    (b"[]", "list of 0"), (b"42", "event is a number"), (b"\"text\"", "event is text"),
    (b"x" * (300 * 1024), "bytes"),
])
def test_malformed_bytes(raw, fragment):
    with pytest.raises(BadEvent) as info:
        parse_event(raw)
    assert fragment in info.value.reason


def test_unknown_shapes_and_types_are_typed_skips():
    with pytest.raises(SkipEvent, match="not handled"):
        parse_event(event_bytes("ess_scale_in_success.json"))
    with pytest.raises(SkipEvent, match="unrecognised"):
        parse_event(json.dumps({"hello": "world"}))
    event = event_json("ess_scale_out_success.json")
    event["type"] = "oss:ObjectCreated:PutObject"
    with pytest.raises(SkipEvent):
        parse_event(json.dumps(event))


def test_every_handled_type_has_a_sample_event():
    import os
    from tests.function.conftest import EVENTS

    seen = set()
    for name in os.listdir(EVENTS):
        data = event_json(name)
        if isinstance(data, dict) and "type" in data:
            seen.add(data["type"])
    missing = set(HANDLED_TYPES) - seen - {"ess:CloudMonitor:AUTOSCALING[SCALEOUTWARN]"}
    assert not missing, missing
