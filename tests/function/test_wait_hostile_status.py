"""``wait`` at its deadline quotes the stack's status as ROS answered it: a terminal escape sequence in it
reaches the operator's terminal written visibly, never raw (textsafe.escape)."""

import pytest

from tests.function.test_deploy import CLUSTER, cloud, run  # noqa: F401
from tests.function.test_wait_and_region import STACK, WAIT, deployed  # noqa: F401
from tests.support.cli_errors import error_text

pytestmark = pytest.mark.timeout(180)
HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2KUPDATE_IN_PROGRESS"  # OSC 52 (clipboard), erase line


def test_wait_at_its_deadline_never_prints_the_status_raw(deployed, capsys, monkeypatch):
    ros, stack = deployed
    ros.steps = 10 ** 6
    ros._start(stack, "UPDATE")
    stack["Status"] = HOSTILE
    from functions.commands import deploy
    from functions.commands.stack.ros import Stacks

    now = [0.0]

    def stacks_for(args, keys):
        from functions.base import settings

        return Stacks(args.region, keys, settings.parse_endpoint(settings.environment(), settings.ROS_ENDPOINT),
                      sleep=lambda s: now.__setitem__(0, now[0] + 10), clock=lambda: now[0])

    monkeypatch.setattr(deploy, "stacks_for", stacks_for)
    code, out, err = run(capsys, *WAIT, "--timeout", "1")
    assert code == 1 and "still" in err
    assert "\x1b" not in err and "\x07" not in err and "\x1b" not in out, repr(err)


@pytest.mark.contract_exempt("a hostile ListStackEvents answer: fields of the wrong JSON type")
def test_wait_reads_an_event_of_the_wrong_shape_as_text(deployed, capsys):
    """ListStackEvents' EventId is a string (ros20190910 ``ListStackEventsResponseBodyEvents``), but the SDK's
    model passes any JSON value on as it came: an id that is a list ended the wait in an internal error
    (``TypeError: unhashable type: 'list'``, exit 70) while the stack went on. It is a key like any other now."""
    ros, stack = deployed
    ros._start(stack, "UPDATE")
    stack["_events"].append({"EventId": ["not", "text"], "Status": {"odd": 1}, "LogicalResourceId": 7,
                             "StatusReason": ["a", "list"]})
    code, out, err = run(capsys, *WAIT)
    assert code == 0 and out.strip() == "stack %s: UPDATE_COMPLETE" % STACK, err
    assert "internal error" not in err and "UPDATE_COMPLETE" in err, err


@pytest.mark.contract_exempt("a hostile ListStacks answer: the stack of that name listed without its StackId")
@pytest.mark.parametrize("argv", [WAIT, ("undeploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--yes")],
                         ids=["wait", "undeploy"])
def test_a_stack_listed_without_its_id_is_one_line_not_an_internal_error(deployed, capsys, argv):
    """ListStacks' StackId is a string in ROS's model; an answer without one (or null, which the SDK's model
    drops) ended every command that reads the stack in ``internal error: KeyError: 'StackId'`` (exit 70)."""
    ros, stack = deployed
    stack["StackId"] = None
    code, out, err = run(capsys, *argv)
    text = error_text(err[err.index("ack-mig-hook: error:"):]) if "ack-mig-hook: error:" in err else err
    assert code == 1 and out == "", err
    assert text == ("ack-mig-hook: error: ROS ListStacks listed stack %s without its StackId; nothing was done: "
                    "rerun, or see the stack in the ROS console" % STACK), text


@pytest.mark.contract_exempt("a hostile ListStacks answer: a list of numbers where the model has objects")
@pytest.mark.parametrize("argv", [WAIT, ("undeploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--yes")],
                         ids=["wait", "undeploy"])
def test_an_answer_the_sdk_cannot_read_is_a_failure_not_no_stack(deployed, capsys, argv):
    """darabonba's DaraCore.from_map swallows the model's failure to read an answer and leaves the body empty:
    a ListStacks answer whose Stacks held a number read as "no stack", and wait said "nothing in progress",
    undeploy "nothing to delete", exit 0, with the stack there. The answer is read as sent, item by item, and
    an item of another shape may be the stack: with none of its name readable it is ROS's failure, one line."""
    ros, stack = deployed
    ros.tamper_next("ListStacks", lambda payload: dict(payload, Stacks=[1]))
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == "", (out, err)
    assert error_text(err[err.index("ack-mig-hook: error:"):]) == (
        "ack-mig-hook: error: ROS ListStacks listed 1 stack(s) of another shape than ROS's objects and none named "
        "%s it could read; nothing was done: rerun, or check what answers at the ROS endpoint "
        "(ACK_MIG_ROS_ENDPOINT)" % STACK)
    assert stack["Status"] == "CREATE_COMPLETE"
