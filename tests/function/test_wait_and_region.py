"""Against the loopback emulators (ROS, OSS, STS, ACK; tests/support): ``wait`` follows an interrupted
deploy's stack operation to its end and says what to do about a failed one; deploy and doctor point at it;
the region comes from ``ALIBABA_CLOUD_REGION_ID`` or the aliyun CLI profile when no ``--region`` and no
``ACK_MIG_REGION`` give one; a mistyped ``--profile`` is answered with the one meant."""

import json
import os
import time

import pytest

from functions.commands import doctor
from tests.function.test_deploy import CLUSTER, cloud, deploy_args, foreign_stacks, make_deps, run  # noqa: F401
from tests.support.cli_errors import error_text

pytestmark = pytest.mark.timeout(180)
STACK = "ack-mig-hook-" + CLUSTER
WAIT = ("wait", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--poll", "0")


@pytest.fixture
def deployed(cloud, capsys, tmp_path):  # noqa: F811
    ros, _ = cloud
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 0, err
    assert "KiB, sha256" in err  # the package's size in the unit it is counted in (1024 bytes)
    (stack,) = ros.stacks.values()
    return ros, stack


def test_an_interrupted_update_is_refused_by_deploy_and_followed_to_its_end_by_wait(deployed, capsys, tmp_path):
    ros, stack = deployed
    ros._start(stack, "UPDATE")  # what a deploy interrupted after UpdateStack leaves: ROS goes on
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2"))))
    text = error_text(err[err.index("ack-mig-hook: error:"):])
    assert code == 6 and "is UPDATE_IN_PROGRESS" in text and "`ack-mig-hook wait --stack-name %s" % STACK in text
    assert [c.status for c in doctor.stack_checks(stack, [], STACK)][0] == "PROBLEM"
    assert "ack-mig-hook wait --stack-name" in doctor.stack_checks(stack, [], STACK)[0].text
    polls = ros.calls("GetStack")
    code, out, err = run(capsys, *WAIT)
    assert code == 0 and out.strip() == "stack %s: UPDATE_COMPLETE" % STACK, err
    assert "is UPDATE_IN_PROGRESS; waiting for it to end" in err and "UPDATE_COMPLETE" in err  # its events
    assert ros.calls("GetStack") > polls + 1 and stack["Status"] == "UPDATE_COMPLETE"


def test_wait_says_what_to_do_about_a_failed_update_and_exits_1(deployed, capsys):
    ros, stack = deployed
    ros.fail_with = "Resource Function failed: CodeChecksum mismatch"
    ros._start(stack, "UPDATE")
    code, out, err = run(capsys, *WAIT, "-o", "json")
    doc = json.loads(out)
    assert code == 1 and doc["status"] == "ROLLBACK_COMPLETE" and "CodeChecksum mismatch" in doc["reason"]
    assert "the last update failed and was rolled back" in doc["advice"]


LONG_REASON = ("Resource Function failed: ServerError: code: 400, the function's code could not be read from the "
               "bucket ack-mig-hook-1234567890-cn-beijing for the service in region cn-beijing after three tries "
               "(RequestId: 6583A1B2-0C4D-4E5F-8A9B-0123456789AB, Recommend: https://api.aliyun.com/troubleshoot?"
               "q=CodeChecksumMismatch) and the stack was rolled back")


def test_a_long_reason_is_cut_where_it_reads_whole(deployed, capsys):
    """ROS's StatusReason goes inside the line's parentheses ("stack S: ROLLBACK_COMPLETE (reason); advice"):
    a raw cut at 300 characters left them open mid-word; it is cut whole now (textsafe.clip)."""
    ros, stack = deployed
    ros.fail_with = LONG_REASON
    ros._start(stack, "UPDATE")
    code, out, err = run(capsys, *WAIT)
    (line,) = [text for text in (out + err).splitlines() if "ROLLBACK_COMPLETE (" in text]
    assert code == 1 and line.count("(") == line.count(")") and "...); " in line, line
    assert "the last update failed and was rolled back" in line, line


def test_wait_on_a_finished_or_absent_stack_returns_at_once(deployed, capsys):
    ros, stack = deployed
    polls = ros.calls("GetStack")
    code, out, _ = run(capsys, *WAIT)
    assert code == 0 and "CREATE_COMPLETE" in out and ros.calls("GetStack") <= polls + 1
    code, out, _ = run(capsys, "wait", "--stack-name", "nothing-here", "--region", "cn-beijing", "--json")
    assert code == 0 and json.loads(out)["status"] == "absent"


def test_wait_never_follows_a_stack_name_that_serves_another_cluster_or_none(cloud, capsys):  # noqa: F811
    """``wait --stack-name`` of another cluster's stack followed it and said "stack ...: UPDATE_COMPLETE" as if this
    cluster's deploy had ended (an operator then ran the next step on the wrong cluster); a stack deploy never
    made was followed too. Refused as deploy and undeploy refuse them: exit 6, one line, no stack polled. With
    no cluster named, the stack named is the one meant."""
    ros, _ = cloud
    other = foreign_stacks(ros)
    ros._start(ros.stacks["st-other"], "UPDATE", touched={})  # that cluster's deploy, going on
    code, out, err = run(capsys, *WAIT, "--stack-name", "ack-mig-hook-" + other)
    text = error_text(err)
    assert code == 6 and "stack ack-mig-hook-%s serves cluster %s, not %s" % (other, other, CLUSTER) in text, err
    assert "name this cluster's stack with --stack-name, or leave it out" in text and "nothing was waited on" in text
    assert out == "" and ros.calls("ListStackEvents") == 0 and ros.calls("GetStack") <= 1
    code, out, err = run(capsys, "wait", "--region", "cn-beijing", "--stack-name", "network", "--poll", "0")
    assert code == 6 and "stack network has no ClusterId parameter" in error_text(err) and out == "", err
    ros.stacks["st-other"]["Status"] = "UPDATE_COMPLETE"
    code, out, err = run(capsys, "wait", "--region", "cn-beijing", "--stack-name", "ack-mig-hook-" + other, "--json")
    assert code == 0 and json.loads(out)["status"] == "UPDATE_COMPLETE", err


def test_wait_gives_up_at_its_deadline_with_exit_1(deployed, capsys, monkeypatch):
    ros, stack = deployed
    ros.steps = 10 ** 6  # an operation that does not end
    ros._start(stack, "UPDATE")
    from functions.commands import deploy
    from functions.commands.stack.ros import Stacks

    now = [0.0]  # a clock that moves only when wait sleeps: 10 s per poll

    def stacks_for(args, keys):
        from functions.base import settings

        return Stacks(args.region, keys, settings.parse_endpoint(settings.environment(), settings.ROS_ENDPOINT),
                      sleep=lambda s: now.__setitem__(0, now[0] + 10), clock=lambda: now[0])

    monkeypatch.setattr(deploy, "stacks_for", stacks_for)
    code, _, err = run(capsys, *WAIT, "--timeout", "1")
    assert now[0] == 60  # six polls of ten seconds: the minute, not a second more
    assert code == 1 and "still UPDATE_IN_PROGRESS" in error_text(err[err.index("ack-mig-hook: error:"):])


def test_a_poll_longer_than_the_time_left_never_sleeps_past_the_deadline(deployed, capsys, monkeypatch):
    """--poll 45 with --timeout 1: the second sleep is the 15 s left, then the last look at the deadline; a
    whole poll took the command to 90 s, half its timeout again."""
    ros, stack = deployed
    ros.steps = 10 ** 6  # an operation that does not end
    ros._start(stack, "UPDATE")
    from functions.commands import deploy
    from functions.commands.stack.ros import Stacks

    now = [0.0]  # a clock that moves only when wait sleeps, by what it sleeps

    def stacks_for(args, keys):
        from functions.base import settings

        return Stacks(args.region, keys, settings.parse_endpoint(settings.environment(), settings.ROS_ENDPOINT),
                      sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])

    monkeypatch.setattr(deploy, "stacks_for", stacks_for)
    code, _, err = run(capsys, "wait", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--poll", "45",
                       "--timeout", "1")
    assert now[0] == 60 and code == 1 and "still UPDATE_IN_PROGRESS" in err


LEFT_S = 2.0  # real seconds of --timeout left when ROS turns slow
# past the deadline: the Guard's timer, the SDK unwinding the cut call, the exit. A hang guard, not a speed check
# (a CI runner has 2 cores for 3 test workers): short of the 8 s that waiting the slow ROS out takes
MARGIN_S = 5.0


@pytest.mark.parametrize("slow", ["late", "drip"])
def test_a_slow_ros_never_holds_wait_past_its_deadline(deployed, capsys, monkeypatch, slow):
    """The poll made with 2 s of --timeout left meets a ROS that answers 8 s late, or drips its answer:
    the call is cut at the deadline and none is tried after it, so wait ends within the margin (the
    deadline fires the Guard at once; what is left is unwinding). Each try had its own 30 s and up to
    three tries plus back-off: a round of polls ran minutes past --timeout."""
    ros, stack = deployed
    ros.steps = 10 ** 6  # an operation that does not end
    ros._start(stack, "UPDATE")
    from functions.commands import deploy
    from functions.commands.stack.ros import Stacks

    skipped, armed = [0.0], []  # the clock runs in real time, plus what the pause skipped

    def pause(seconds):  # the first pause skips to LEFT_S before the deadline, then ROS turns slow
        skipped[0] += seconds
        if not armed:
            armed.append((time.monotonic(), ros.calls("GetStack")))
            if slow == "late":
                ros.answer_late_next("GetStack", 8)
            else:
                ros.drip_interval_s, ros.drip_life_s = 0.25, 8
                ros.drip = lambda method, path: True

    def stacks_for(args, keys):
        from functions.base import settings

        return Stacks(args.region, keys, settings.parse_endpoint(settings.environment(), settings.ROS_ENDPOINT),
                      sleep=pause, clock=lambda: time.monotonic() + skipped[0])

    monkeypatch.setattr(deploy, "stacks_for", stacks_for)
    code, _, err = run(capsys, "wait", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--poll", str(60 - LEFT_S),
                       "--timeout", "1")
    ended = time.monotonic()
    (since, polls), = armed
    assert ended - since < LEFT_S + MARGIN_S, ended - since
    assert code == 1 and "still UPDATE_IN_PROGRESS after 60 s" in error_text(err[err.index("ack-mig-hook: error:"):])
    assert ros.calls("GetStack") <= polls + 1  # the cut try alone: none started after the deadline


# ---- the region ----

def _profiles(home, **regions):
    os.makedirs(home / ".aliyun", exist_ok=True)
    (home / ".aliyun" / "config.json").write_text(json.dumps({"current": "default", "profiles": [
        {"name": name, "mode": "AK", "access_key_id": "x", "access_key_secret": "y", "region_id": region}
        for name, region in regions.items()]}))


def test_the_region_comes_from_the_environment_then_the_cli_profile(deployed, capsys, monkeypatch, tmp_path):
    no_region = ("wait", "--cluster-id", CLUSTER, "--poll", "0", "--json")
    _profiles(tmp_path, default="cn-beijing", other="cn-hangzhou")  # cloud() points HOME at tmp_path
    code, out, err = run(capsys, *no_region)
    assert code == 0 and json.loads(out)["region"] == "cn-beijing", err
    monkeypatch.setenv("ALIBABA_CLOUD_PROFILE", "other")  # the profile the credentials would come from
    code, out, _ = run(capsys, *no_region)
    assert json.loads(out)["region"] == "cn-hangzhou"
    monkeypatch.setenv("ALIBABA_CLOUD_REGION_ID", "cn-shanghai")  # the SDKs' variable wins over a profile
    code, out, _ = run(capsys, *no_region)
    assert json.loads(out)["region"] == "cn-shanghai"
    code, out, _ = run(capsys, *no_region, "--region", "cn-beijing")  # and --region over both
    assert json.loads(out)["region"] == "cn-beijing"


def test_a_wrong_region_from_the_profile_is_one_line_naming_where_it_came_from(cloud, capsys, tmp_path):  # noqa: F811
    _profiles(tmp_path, default="beijing")
    code, _, err = run(capsys, "wait", "--cluster-id", CLUSTER)
    text = error_text(err)
    assert code == 2 and "'beijing' is not a region" in text and "did you mean cn-beijing?" in text
    assert "aliyun CLI profile default in %s" % (tmp_path / ".aliyun" / "config.json") in text


def test_without_any_region_the_error_names_every_source(cloud, capsys):  # noqa: F811
    code, _, err = run(capsys, "wait", "--cluster-id", CLUSTER)
    assert code == 2 and "ALIBABA_CLOUD_REGION_ID, the aliyun CLI profile's region_id" in error_text(err)


def test_a_mistyped_profile_is_answered_with_the_one_meant(cloud, capsys, tmp_path):  # noqa: F811
    _profiles(tmp_path, default="cn-beijing", production="cn-beijing")
    code, _, err = run(capsys, *WAIT, "--profile", "prodution")
    text = error_text(err)
    assert code == 2 and "no such profile" in text and "(did you mean production?)" in text


def test_a_profile_the_sdk_refuses_at_length_is_said_in_a_line_that_reads_whole(cloud, capsys, tmp_path):  # noqa: F811
    """The credentials SDK repeats the profile's mode in its refusal ("unsupported profile mode '...' form cli
    credentials file."): a long mode, cut at 200 characters, ended the line mid-word inside a parenthesis."""
    mode = "AK" + " word" * 32 + " (see the runbook of this account)"
    os.makedirs(tmp_path / ".aliyun", exist_ok=True)
    (tmp_path / ".aliyun" / "config.json").write_text(json.dumps({"current": "ops", "profiles": [
        {"name": "ops", "mode": mode, "access_key_id": "x", "access_key_secret": "y", "region_id": "cn-beijing"}]}))
    code, _, err = run(capsys, *WAIT, "--profile", "ops")
    text = error_text(err)
    assert code == 2 and "--profile ops gave no credentials: unsupported profile mode 'AK word word" in text, text
    assert text.count("(") == text.count(")") and text.endswith(" word...'"), text  # the mode's quote closed
