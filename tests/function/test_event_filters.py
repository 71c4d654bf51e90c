"""template.yml's EventBridge filters applied the way EventBridge applies them
(tests/support/eventbridge_pattern.py follows the EventBridge "Event patterns" page), to the sample events
of tests/events, whose ECS samples have the shape Alibaba documents for the instance state-change event."""

import json
import os

import pytest

from tests.function.conftest import EVENTS
from tests.function.test_template import _patterns
from tests.support.eventbridge_pattern import InvalidPattern, matches, validate


def _events():
    for name in sorted(os.listdir(EVENTS)):
        event = json.load(open(os.path.join(EVENTS, name)))
        if isinstance(event, dict) and "specversion" in event:
            yield name, event


# ---- the matcher follows the documented rules ----

EVENT = {"source": "acs.oss", "type": "oss:ObjectCreated:PostObject", "subject": "acs:oss:cn-hangzhou:1:b/a.jpg",
         "data": {"state": "Running", "count": 3, "ip": "10.0.0.7", "tags": ["a", "b"], "empty": "", "none": None}}


@pytest.mark.parametrize("pattern,routed", [
    ({"source": ["acs.oss"]}, True),
    ({"source": ["ACS.OSS"]}, False),  # case-sensitive exact match
    ({"source": ["acs.ecs", "acs.oss"], "type": ["oss:ObjectCreated:PostObject"]}, True),  # OR within, AND across
    ({"source": ["acs.oss"], "type": ["oss:ObjectRemoved"]}, False),
    ({"source": [{"prefix": "acs."}]}, True),
    ({"subject": [{"suffix": ".jpg"}]}, True),
    ({"type": [{"contains": "Created"}]}, True),
    ({"data": {"state": [{"anything-but": "Running"}]}}, False),
    ({"data": {"state": [{"anything-but": ["Stopped", "Stopping"]}]}}, True),
    ({"data": {"state": [{"anything-but": {"prefix": "Run"}}]}}, False),
    ({"data": {"count": [{"numeric": [">", 0, "<=", 5]}]}}, True),
    ({"data": {"count": [{"numeric": [">", 3]}]}}, False),
    ({"data": {"ip": [{"cidr": "10.0.0.0/24"}]}}, True),
    ({"data": {"ip": [{"cidr": "10.0.1.0/24"}]}}, False),
    ({"data": {"tags": ["b"]}}, True),  # an array in the event: any element
    ({"data": {"empty": [""]}}, True),
    ({"data": {"none": [""]}}, False),  # null and "" are different values
    ({"data": {"none": [None]}}, True),
    ({"data": {"missing": [{"exists": False}]}}, True),
    ({"data": {"state": [{"exists": True}]}}, True),
    ({"data": {"missing": ["x"]}}, False),  # a field the event lacks matches nothing else
    ({"state": ["Running"]}, False),  # the same nested structure: state is under data
    ({"data": {"state": {"value": ["Running"]}}}, False),
])
def test_the_matcher_follows_eventbridges_pattern_rules(pattern, routed):
    assert matches(pattern, EVENT) is routed


@pytest.mark.parametrize("pattern", [{"source": "acs.oss"}, {"source": []}, {}, {"source": [{"regex": ".*"}]},
                                     {"data": {"count": [{"numeric": ["~", 1]}]}}, {"ip": [{"cidr": "10.0.0/33"}]}])
def test_an_invalid_pattern_is_refused_not_guessed(pattern):
    with pytest.raises(InvalidPattern):
        validate(pattern)


# ---- the template's filters ----

IRRELEVANT = {"ess_scale_in_success.json", "actiontrail_api_describe_clusters.json", "ecs_instance_stopping.json"}


def test_every_handled_sample_is_routed_by_exactly_one_trigger_and_no_other_sample_is():
    patterns = _patterns()
    for pattern in patterns:
        validate(pattern)  # EventBridge would refuse to create the rule otherwise
    seen = 0
    for name, event in _events():
        routed = [p for p in patterns if matches(p, event)]
        assert len(routed) == (0 if name in IRRELEVANT else 1), (name, routed)
        seen += 1
    assert seen >= 10


def test_the_ecs_samples_have_the_documented_state_change_shape_and_only_running_is_routed():
    """Alibaba's ECS event notification doc (help.aliyun.com/en/ecs/user-guide/overview-35) gives the
    Instance:StateChange event: ``resourceId`` the ARN ``acs:ecs:<region>:<uid>:instance/<id>``, ``name``
    ``Instance:StateChange``, ``content`` ``{"resourceId": "<instance id>", "resourceType":
    "ALIYUN::ECS::Instance", "state": "Stopping"}`` (the state capitalized as the ECS API writes it).
    EventBridge publishes it as type ``ecs:Instance:StateChange`` (EventBridge "Elastic Computing Service
    events" page), source ``acs.ecs``, the content as the CloudEvent's ``data`` and the ARN as ``subject``."""
    ecs = [(n, e) for n, e in _events() if e["source"] == "acs.ecs"]
    assert {n for n, _ in ecs} == {"ecs_instance_running.json", "ecs_instance_stopping.json"}
    (pattern,) = [p for p in _patterns() if p["source"] == ["acs.ecs"]]
    for name, event in ecs:
        assert event["type"] == "ecs:Instance:StateChange"
        assert set(event["data"]) == {"resourceId", "resourceType", "state"}
        assert event["data"]["resourceType"] == "ALIYUN::ECS::Instance"
        assert event["subject"] == "acs:ecs:%s:%s:instance/%s" % (event["aliyunregionid"], event["aliyunaccountid"],
                                                                 event["data"]["resourceId"])
        assert matches(pattern, event) is (event["data"]["state"] == "Running"), name
    # The documented sample itself (Stopping) is not routed; the same event Running is.
    documented = {"specversion": "1.0", "source": "acs.ecs", "type": "ecs:Instance:StateChange",
                  "subject": "acs:ecs:cn-hangzhou:169070********30:instance/i-bp1ecr********5go2go",
                  "data": {"resourceId": "i-bp1ecr********5go2go", "resourceType": "ALIYUN::ECS::Instance",
                           "state": "Stopping"}}
    assert not matches(pattern, documented)
    assert matches(pattern, dict(documented, data=dict(documented["data"], state="Running")))
    # A filter on the CloudMonitor notification's own field names would never fire on the EventBridge event.
    assert not matches({"source": ["acs.ecs"], "content": {"state": ["Running"]}}, documented)
