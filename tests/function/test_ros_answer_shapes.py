"""darabonba's ``DaraCore.from_map`` swallows any error reading an answer into the ROS SDK's model and leaves
the body None (darabonba/core.py): one stack, event, resource or parameter of another shape made the whole
answer read as nothing. ``deploy`` then found no stack of its name and created a second one, and ``wait`` or
``doctor`` saw no events or resources. The raw answer is read instead, each item of another shape left out,
and a body that is no JSON object is one line naming the call."""

import pytest

from functions.base.settings import parse_endpoint
from functions.commands.stack.credentials import Keys
from functions.commands.stack.ros import StackError, Stacks
from tests.support.ros_emulator import RosEmulator

KEY, SECRET, TOKEN = "LTAI5tTestKeyId", "test-secret", "test-token"
NAME = "ack-mig-hook"
STACK = {"StackId": "s-1", "StackName": NAME, "Status": "CREATE_COMPLETE", "RegionId": "cn-beijing"}


@pytest.fixture
def ros():
    emulator = RosEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN).start()
    yield emulator
    emulator.stop()


def _stacks(ros):
    return Stacks("cn-beijing", Keys(KEY, SECRET, TOKEN), parse_endpoint({"E": ros.endpoint}, "E"), timeout_s=5)


@pytest.mark.contract_exempt("answers items of another shape than the SDK's models on purpose")
@pytest.mark.parametrize("odd", [7, "s-2", [STACK], None])
def test_a_stack_item_of_another_shape_leaves_the_others_found(ros, odd):
    ros.answer_with("ListStacks", {"RequestId": "r", "TotalCount": 2, "PageNumber": 1, "PageSize": 50,
                                   "Stacks": [odd, STACK]})
    assert _stacks(ros).find(NAME)["StackId"] == "s-1"


@pytest.mark.contract_exempt("answers items of another shape than the SDK's models on purpose")
def test_events_resources_and_parameters_of_another_shape_leave_the_others_read(ros):
    event = {"EventId": "e-1", "LogicalResourceId": "Fn", "Status": "CREATE_COMPLETE"}
    resource = {"LogicalResourceId": "Fn", "ResourceType": "ALIYUN::FC3::Function", "Status": "CREATE_COMPLETE"}
    ros.answer_with("ListStackEvents", {"RequestId": "r", "Events": ["x", event, 5]})
    ros.answer_with("ListStackResources", {"RequestId": "r", "Resources": [resource, ["y"]]})
    ros.answer_with("ValidateTemplate", {"RequestId": "r", "Parameters": [{"ParameterKey": "ClusterId"}, None, 1]})
    stacks = _stacks(ros)
    assert stacks.events("s-1") == [event] and stacks.event_ids("s-1") == {"e-1"}
    assert stacks.resources("s-1") == [resource]
    assert stacks.validate("ROSTemplateFormatVersion: '2015-09-01'") == ["ClusterId"]


@pytest.mark.contract_exempt("answers bodies of another shape than the SDK's models on purpose")
@pytest.mark.parametrize("body, shape", [([STACK], "a list"), ({"Stacks": {"s-1": STACK}}, "Stacks as an object")])
def test_an_answer_of_another_shape_is_one_line_naming_the_call(ros, body, shape):
    ros.answer_with("ListStacks", body)
    with pytest.raises(StackError) as err:
        _stacks(ros).find(NAME)
    assert str(err.value).startswith("ROS ListStacks answered %s" % shape) and "\n" not in str(err.value)
