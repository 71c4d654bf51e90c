"""``invoke --remote`` (the deployed function, through FC's InvokeFunction, asynchronously) and ``logs`` (the
function's log lines from SLS GetLogs), run as a user runs them: a separate process against the loopback
emulators (ROS for the stack, tests/support/fc_emulator.py, tests/support/sls_emulator.py), the endpoints
passed in ACK_MIG_*_ENDPOINT."""

import json
import re
import os
import subprocess
import sys
import uuid

import pytest

from tests.support.cli_errors import error_text
from tests.support.fc_emulator import FcEmulator
from tests.support.ros_emulator import RosEmulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
FUNCTION = "ack-mig-hook-" + CLUSTER
POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"
KEY, SECRET, TOKEN = "LTAIremotetest", "remote-secret-value", "remote-sts-token"
pytestmark = pytest.mark.timeout(120)


def seed_stack(ros, name=None, function=FUNCTION, status="CREATE_COMPLETE", cluster=CLUSTER, project="my-sls-project"):
    """A stack as deploy leaves it (tests/function/test_deploy.py creates one the long way)."""
    with open(os.path.join(ROOT, "template.yml")) as handle:
        template = handle.read()
    params = [{"ParameterKey": k, "ParameterValue": v} for k, v in (
        ("ClusterId", cluster), ("FunctionName", function), ("LogProject", project),
        ("LogStore", "ack-mig-hook"), ("CodeBucket", "b"), ("CodeObject", "o.zip"))]
    stack_id = str(uuid.uuid4())
    ros.stacks[stack_id] = {"StackId": stack_id, "StackName": name or FUNCTION, "RegionId": "cn-beijing",
                            "Status": status, "Parameters": params, "TimeoutInMinutes": 60,
                            "Outputs": [{"OutputKey": "FunctionName", "OutputValue": function}],
                            "_template": template, "_events": [], "_polls": 0}
    return ros.stacks[stack_id]


@pytest.fixture
def cloud(tmp_path):
    ros = RosEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN).start()
    fc = FcEmulator(functions=(FUNCTION,), access_key_id=KEY, secret=SECRET, token=TOKEN).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALIBABA_CLOUD_", "ACK_MIG_")) and k != "COLUMNS"}
    env.update({"HOME": str(tmp_path), "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true",
                "ALIBABA_CLOUD_ACCESS_KEY_ID": KEY, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
                "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_ROS_ENDPOINT": ros.endpoint,
                "ACK_MIG_FC_ENDPOINT": fc.endpoint, "ACK_MIG_CLUSTER_ID": CLUSTER, "ACK_MIG_REGION": "cn-beijing"})
    yield ros, fc, env
    ros.stop()
    fc.stop()
    assert not ros.rejected and not fc.rejected, (ros.rejected, fc.rejected)


def cli(env, *argv, stdin=None):
    return subprocess.run([sys.executable, "-m", "functions.commands.main"] + list(argv), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=100, input=stdin)


# ---- invoke --remote ----

def test_invoke_remote_queues_the_manual_payload_asynchronously_and_says_how_to_follow_it(cloud):
    ros, fc, env = cloud
    seed_stack(ros)
    done = cli(env, "invoke", "--remote", "--nodepool-id", POOL)
    assert done.returncode == 0, done.stderr
    (call,) = fc.invocations
    assert call["function"] == FUNCTION and call["type"] == "Async"  # x-fc-invocation-type: Async
    assert json.loads(call["payload"]) == {"cluster_id": CLUSTER, "nodepool_id": POOL}
    text = " ".join(done.stdout.split())
    assert "function %s: invoked asynchronously, request id %s" % (FUNCTION, call["request_id"]) in text
    assert "ack-mig-hook logs --request-id %s --cluster-id %s --region cn-beijing --since 15m" % (
        call["request_id"], CLUSTER) in text
    # a pipe: 80 columns, wrapped between words (only a word longer than that, the console's URL, runs past)
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in done.stdout.splitlines())
    assert len(done.stdout.splitlines()) > 2
    assert [r.action for r in fc.requests] == ["InvokeFunction"]


@pytest.mark.contract_exempt("a hostile GetStack answer: Outputs of the wrong shape")
@pytest.mark.parametrize("outputs", [["FunctionName"], {"OutputKey": "FunctionName"}, 7,
                                     [{"OutputKey": "FunctionName", "OutputValue": {"Name": "x"}}]],
                         ids=["strings", "object", "number", "value-object"])
def test_invoke_remote_reads_outputs_of_the_wrong_shape_as_none(cloud, outputs):
    """GetStack's Outputs is a list of objects (ros20190910 ``GetStackResponseBody.outputs``: List[Dict]) that
    the SDK's model passes on as it came: a list of strings, an object or a number ended invoke --remote and
    logs in an internal error (AttributeError, TypeError: exit 70), and a value that was not text named a
    function ``{'Name': 'x'}``. Such outputs are no outputs: the FunctionName parameter names the function."""
    ros, fc, env = cloud
    seed_stack(ros)["Outputs"] = outputs
    done = cli(env, "invoke", "--remote", "--nodepool-id", POOL)
    assert done.returncode == 0, done.stderr
    (call,) = fc.invocations
    assert call["function"] == FUNCTION


@pytest.mark.contract_exempt("a hostile GetStack answer: no StackId or Status")
@pytest.mark.parametrize("body", [{}, {"RequestId": "r-1"}, {"StackId": "s-1"}],
                         ids=["empty", "request-id", "no-status"])
def test_a_get_stack_answer_without_its_stack_is_unreadable_not_gone(cloud, body):
    """ROS answers GetStack of a stack with its StackId and Status (ros20190910 ``GetStackResponseBody``),
    and StackNotFound for one that is gone. An answer without them read as "no stack": invoke --remote and
    logs ended NotDeployed (exit 6, "run ack-mig-hook deploy") for a stack that is there. It is ROS's answer
    that cannot be read: one line naming GetStack, exit 1, nothing invoked."""
    ros, fc, env = cloud
    seed_stack(ros)
    ros.answer_with("GetStack", body)
    done = cli(env, "invoke", "--remote", "--nodepool-id", POOL)
    text = " ".join(done.stderr.split())
    assert done.returncode == 1 and "GetStack" in text and "no stack" not in text, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and fc.invocations == []


def test_invoke_remote_sends_the_event_file_as_it_is_and_its_json_names_the_request(cloud, tmp_path):
    ros, fc, env = cloud
    seed_stack(ros, name="team-hook", function="team-hook-fn")
    fc.functions.add("team-hook-fn")
    event = os.path.join(ROOT, "examples", "event.json")
    done = cli(env, "invoke", "--remote", "--event", event, "--stack-name", "team-hook", "-o", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (call,) = fc.invocations
    assert call["payload"] == open(event, "rb").read() and call["function"] == "team-hook-fn"
    assert doc["request_id"] == call["request_id"] and doc["status"] == "202" and doc["invocation"] == "async"
    assert doc["follow"] == "ack-mig-hook logs --request-id %s --stack-name team-hook --region cn-beijing --since 15m" % (
        call["request_id"])


def test_invoke_remote_without_a_stack_or_with_a_bad_payload_sends_nothing(cloud, tmp_path):
    ros, fc, env = cloud
    done = cli(env, "invoke", "--remote", "--nodepool-id", POOL)
    assert done.returncode == 6 and "no stack %s in cn-beijing" % FUNCTION in " ".join(done.stderr.split())
    seed_stack(ros)
    done = cli(env, "invoke", "--remote", "--event", "-", stdin='{"nodepool_idd": "np-1"}')
    assert done.returncode == 2 and "nothing was sent" in " ".join(done.stderr.split())
    done = cli(env, "invoke", "--remote", "--nodepool-id", POOL, "--dry-run")
    assert done.returncode == 2 and "its DryRun parameter decides" in " ".join(done.stderr.split())
    assert fc.invocations == [] and done.stdout == ""


def test_invoke_remote_refusals_keep_their_exit_codes(cloud):
    ros, fc, env = cloud
    seed_stack(ros, function="gone-fn")  # the stack names a function FC no longer has
    done = cli(env, "invoke", "--remote", "--nodepool-id", POOL)
    assert done.returncode == 6 and "FunctionNotFound" in done.stderr and "doctor" in done.stderr
    seed_stack(ros, name="denied", function=FUNCTION)
    fc.fail_next("InvokeFunction", 403, "AccessDenied")
    done = cli(env, "invoke", "--remote", "--stack-name", "denied", "--nodepool-id", POOL)
    text = " ".join(done.stderr.split())
    assert done.returncode == 5 and "AccessDenied" in text and "fc:InvokeFunction" in text
    assert done.stderr.count("ack-mig-hook: error:") == 1 and "Traceback" not in done.stderr


OTHER = "c" + "0" * 32  # a second cluster of the same region and account


def foreign(ros, fc):
    """Two stacks of the region that are not CLUSTER's: ``other-hook`` deployed for OTHER (its own function and
    log project), and ``network``, no stack deploy made (no ClusterId; without a FunctionName output the
    function looked up would be CLUSTER's default one, which FC has)."""
    seed_stack(ros, name="other-hook", function="other-fn", cluster=OTHER, project="other-project")
    fc.functions.add("other-fn")
    ros.put_stack("st-vpc", "network", VpcName="prod", LogProject="my-sls-project", LogStore="ack-mig-hook")


def test_invoke_remote_never_runs_a_stack_name_that_serves_another_cluster_or_none(cloud):
    """``--stack-name`` names any stack of the region: one of another cluster ran that cluster's function with
    an event for this one (it skipped it, and the operator read "invoked"), one deploy never made ran
    whatever its names pointed at. Refused as deploy and undeploy refuse them: exit 6, one line naming the
    stack and the cluster it serves, nothing sent."""
    ros, fc, env = cloud
    foreign(ros, fc)
    done = cli(env, "invoke", "--remote", "--stack-name", "other-hook", "--nodepool-id", POOL)
    text = error_text(done.stderr)
    assert done.returncode == 6 and "stack other-hook serves cluster %s, not %s" % (OTHER, CLUSTER) in text, text
    assert "name this cluster's stack with --stack-name, or leave it out" in text and "nothing was sent" in text
    done = cli(env, "invoke", "--remote", "--stack-name", "network", "--nodepool-id", POOL)
    text = error_text(done.stderr)
    assert done.returncode == 6 and "stack network has no ClusterId parameter: not a stack ack-mig-hook deploy " \
                                    "made" in text, text
    assert fc.invocations == [] and fc.requests == [] and done.stdout == ""


def test_invoke_remote_refuses_an_event_about_another_cluster_than_the_stack_serves(cloud):
    """The function skips an event about another cluster than its own (functions/pipeline/event.py): an event
    file naming OTHER sent to CLUSTER's function, or, with no --cluster-id, to other-hook's for an event naming
    CLUSTER, was reported "invoked" and did nothing. docs/cli.md: a payload the function would skip is said,
    exit 2, and nothing is sent."""
    ros, fc, env = cloud
    seed_stack(ros)
    done = cli(env, "invoke", "--remote", "--event", "-", stdin=json.dumps({"cluster_id": OTHER}))
    text = error_text(done.stderr)
    assert done.returncode == 2 and "the event is about cluster %s, but stack %s serves %s; invoke that " \
        "cluster's stack (--cluster-id %s, or its --stack-name)" % (OTHER, FUNCTION, CLUSTER, OTHER) in text, text
    assert "nothing was sent" in text
    foreign(ros, fc)
    fresh = {k: v for k, v in env.items() if k != "ACK_MIG_CLUSTER_ID"}
    done = cli(fresh, "invoke", "--remote", "--stack-name", "other-hook", "--event", "-",
               stdin=json.dumps({"cluster_id": CLUSTER}))
    text = error_text(done.stderr)
    assert done.returncode == 2 and "the event is about cluster %s, but stack other-hook serves %s" % (
        CLUSTER, OTHER) in text, text
    assert fc.invocations == []
    # with no cluster named anywhere, the stack named is the one meant: its function gets the event
    done = cli(fresh, "invoke", "--remote", "--stack-name", "other-hook", "--event", "-",
               stdin=json.dumps({"cluster_id": OTHER}))
    assert done.returncode == 0 and [c["function"] for c in fc.invocations] == ["other-fn"], done.stderr


def test_a_local_invoke_still_needs_its_event_file(cloud):
    _, fc, env = cloud
    done = cli(env, "invoke", "--inventory", "example:inventory")
    assert done.returncode == 2 and "invoke needs --event FILE" in done.stderr
    done = cli(env, "invoke", "--event", "examples/event.json", "--nodepool-id", POOL)
    assert done.returncode == 2 and "go with --remote" in done.stderr
    assert fc.invocations == []


# ---- logs ----

@pytest.fixture
def store(cloud):
    import time

    from tests.support.sls_emulator import SlsEmulator

    ros, fc, env = cloud
    seed_stack(ros)
    sls = SlsEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN).start()
    env["ACK_MIG_SLS_ENDPOINT"] = sls.endpoint
    now = int(time.time())
    lines = [
        (now - 7200, {"time": "T-2h", "level": "INFO", "message": "event", "outcome": "done"}),  # outside 1h
        (now - 600, {"time": "T-10m", "level": "ERROR", "message": "node result", "node_name": "cn-beijing.10.0.0.7",
                     "instance_id": "i-2zeb7c1mig0a100x1k4d", "nodepool_id": POOL, "outcome": "failed",
                     "code": "nvml-error", "duration_ms": 4210, "request_id": "req-1",
                     "reason": "nvidia-smi mig -cgi failed: " + "the GPU is in use by another process " * 3}),
        (now - 300, {"time": "T-5m", "level": "INFO", "message": "decision", "node_name": "cn-beijing.10.0.0.8",
                     "nodepool_id": "np-other", "action": "skip", "request_id": "req-2"}),
        (now - 60, {"time": "T-1m", "level": "INFO", "message": "node result", "node_name": "cn-beijing.10.0.0.8",
                    "nodepool_id": POOL, "outcome": "partitioned", "duration_ms": 900, "request_id": "req-2"}),
    ]
    for when, line in lines:
        sls.add("my-sls-project", "ack-mig-hook", when, line)
    yield sls, env
    sls.stop()
    assert not sls.rejected, sls.rejected


def test_logs_prints_the_last_hour_one_entry_a_line_oldest_first_wrapped_at_80(store):
    sls, env = store
    done = cli(env, "logs")
    assert done.returncode == 0, done.stderr
    starts = [line for line in done.stdout.splitlines() if not line.startswith(" ")]
    assert [s.split()[0] for s in starts] == ["T-10m", "T-5m", "T-1m"]  # not the line of 2 hours ago
    assert all(len(line) <= 80 for line in done.stdout.splitlines())
    first = " ".join(done.stdout.split("T-5m")[0].split())
    assert first.startswith("T-10m ERROR node result node_name=cn-beijing.10.0.0.7 instance_id=i-2zeb7c1mig0a100x1k4d")
    assert "outcome=failed code=nvml-error duration_ms=4210" in first
    (call,) = sls.requests
    assert call["project"] == "my-sls-project" and call["logstore"] == "ack-mig-hook"  # the stack's parameters
    assert call["body"]["query"] == "*" and call["body"]["to"] - call["body"]["from"] == 3601


@pytest.mark.parametrize("argv,times", [
    (("--node", "cn-beijing.10.0.0.8"), ["T-5m", "T-1m"]),
    (("--node", "i-2zeb7c1mig0a100x1k4d"), ["T-10m"]),
    (("--pool", POOL, "--outcome", "partitioned"), ["T-1m"]),
    (("--request-id", "req-2", "--since", "3h"), ["T-5m", "T-1m"]),
    (("--since", "3h", "--outcome", "done"), ["T-2h"]),
    (("--limit", "1",), ["T-1m"]),  # the newest
], ids=["node-name", "instance", "pool-outcome", "request", "since", "limit"])
def test_logs_filters_by_node_pool_outcome_request_and_time(store, argv, times):
    _, env = store
    done = cli(env, "logs", "-o", "json", *argv)
    assert done.returncode == 0, done.stderr
    assert [line["time"] for line in json.loads(done.stdout)["lines"]] == times


def test_logs_yaml_holds_the_lines_as_written(store):
    import yaml

    _, env = store
    done = cli(env, "logs", "--pool", POOL, "-o", "yaml")
    doc = yaml.safe_load(done.stdout)
    assert done.returncode == 0 and doc["project"] == "my-sls-project"
    assert doc["query"] == 'message.nodepool_id: "%s"' % POOL
    assert [(l["outcome"], l["duration_ms"]) for l in doc["lines"]] == [("failed", 4210), ("partitioned", 900)]


def test_logs_reads_at_most_30_days_back_and_says_an_empty_window_on_stderr_exit_0(store):
    """docs/cli.md: ``--since`` is at most ``30d`` (31 days is refused before SLS is asked, naming the bound),
    and a window with no line is said on stderr, exit 0, stdout empty."""
    sls, env = store
    done = cli(env, "logs", "--since", "31d")
    assert done.returncode == 2 and "at most 30d" in " ".join(done.stderr.split()), done.stderr
    assert sls.requests == []
    done = cli(env, "logs", "--since", "30d", "--request-id", "req-9")
    (call,) = sls.requests
    assert call["body"]["to"] - call["body"]["from"] == 30 * 86400 + 1, call["body"]
    assert done.returncode == 0 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.startswith("ack-mig-hook: no lines in my-sls-project/ack-mig-hook for "), done.stderr


def test_logs_refuses_bad_filters_before_any_call_and_says_refusals_in_one_line(store):
    sls, env = store
    for argv, said in ((("--since", "yesterday"), "use a duration such as 15m, 1h or 2d"),
                       (("--node", 'x" or *'), "use an id or name of letters")):  # nothing to inject in a query
        done = cli(env, "logs", *argv)
        text = " ".join(done.stderr.split())
        assert done.returncode == 2 and "is not accepted" in text and said in text
    assert sls.requests == []
    sls.fault = (403, "Unauthorized")
    done = cli(env, "logs")
    text = " ".join(done.stderr.split())
    assert done.returncode == 5 and "log:GetLogStoreLogs" in text and "Traceback" not in done.stderr
    sls.secret = "another-secret"  # SLS refuses what ROS accepted: the signature is checked there too
    done = cli(env, "logs")
    assert done.returncode == 4 and "SignatureNotMatch" in done.stderr
    sls.rejected.clear()  # the wrong secret's refusal was the point


def test_logs_never_reads_a_stack_name_that_serves_another_cluster_or_none(cloud, store):
    """``logs --stack-name`` of another cluster's stack read that cluster's logstore and showed its lines as this
    cluster's; a stack deploy never made pointed at whatever its parameters said. Refused as deploy and
    undeploy refuse them: exit 6, one line, SLS never asked. With no cluster named, the stack named is the one
    meant, and its lines are read."""
    (ros, fc, _), (sls, env) = cloud, store
    foreign(ros, fc)
    sls.add("other-project", "ack-mig-hook", int(__import__("time").time()) - 5,
            {"time": "T-5s", "level": "INFO", "message": "event", "outcome": "done"})
    done = cli(env, "logs", "--stack-name", "other-hook")
    text = error_text(done.stderr)
    assert done.returncode == 6 and "stack other-hook serves cluster %s, not %s" % (OTHER, CLUSTER) in text, text
    assert "nothing was read" in text and done.stdout == ""
    done = cli(env, "logs", "--stack-name", "network", "-o", "json")
    assert done.returncode == 6 and "stack network has no ClusterId parameter" in " ".join(done.stderr.split())
    assert sls.requests == []
    fresh = {k: v for k, v in env.items() if k != "ACK_MIG_CLUSTER_ID"}
    done = cli(fresh, "logs", "--stack-name", "other-hook", "-o", "json")
    assert done.returncode == 0 and [l["time"] for l in json.loads(done.stdout)["lines"]] == ["T-5s"], done.stderr


def test_the_follow_up_command_invoke_remote_prints_works_as_printed_in_a_fresh_shell(store):
    """Its follow-up lacked the request id and the region: with the region given as a flag, the printed line
    failed with "missing --region" (found by the docs audit). Copied to a shell with no ACK_MIG_* set, it
    finds the function's lines of that invocation."""
    import shlex

    sls, env = store
    fresh = {k: v for k, v in env.items() if k not in ("ACK_MIG_REGION", "ACK_MIG_CLUSTER_ID")}
    done = cli(fresh, "invoke", "--remote", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--nodepool-id", POOL,
               "-o", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    sls.add("my-sls-project", "ack-mig-hook", int(__import__("time").time()) - 5,
            {"time": "T-5s", "level": "INFO", "message": "event", "outcome": "done", "request_id": doc["request_id"]})
    argv = shlex.split(doc["follow"])
    assert argv[:2] == ["ack-mig-hook", "logs"]
    followed = cli(fresh, *argv[1:], "-o", "json")
    assert followed.returncode == 0, followed.stderr
    assert [line["time"] for line in json.loads(followed.stdout)["lines"]] == ["T-5s"]


@pytest.mark.parametrize("argv,times", [
    (("--node", "GPU-A"), []),
    (("--node", "gpu-a"), ["T-30s"]),
    (("--outcome", "FAILED"), ["T-10m", "T-30s"]),  # an outcome's case does not matter: the set is closed
    (("--outcome", "failed"), ["T-10m", "T-30s"]),
    (("--request-id", "req-2"), ["T-5m", "T-1m"]),
    (("--request-id", "req-2", "--limit", "1"), ["T-1m"]),  # the newest kept: read on past the one dropped
], ids=["node-case", "node", "outcome-case", "outcome", "request-words", "request-limit"])
def test_logs_keeps_only_the_lines_whose_field_is_the_value_given(store, argv, times):
    """SLS searches by words, case-insensitively (the stack's index, ROS's defaults): ``--node GPU-A`` finds
    gpu-a's lines there, and ``--request-id req-2`` a line whose request id is ``x/req-2``. docs/cli.md promises
    this node's, this outcome's, this invocation's lines: the command keeps those whose field is the value (an
    outcome in lower case, as the function writes every one)."""
    from tests.support.sls_emulator import _matcher

    sls, env = store
    now = int(__import__("time").time())
    sls.add("my-sls-project", "ack-mig-hook", now - 30, {"time": "T-30s", "level": "ERROR", "message": "node result",
                                                         "node_name": "gpu-a", "outcome": "failed",
                                                         "request_id": "x/req-2"})
    done = cli(env, "logs", "-o", "json", *argv)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [line["time"] for line in doc["lines"]] == times
    # what SLS answered that query: the gpu-a line, whatever the case asked, and x/req-2 for req-2
    assert _matcher(doc["query"])({"node_name": "gpu-a", "outcome": "failed", "request_id": "x/req-2"})


def test_logs_refuses_an_outcome_the_function_never_logs_naming_the_ones_it_does(store):
    """Outcomes are a closed set (an event's, a node's): a value that is none of them (a typo, a rollout step
    such as ``applied``) would find nothing, silently; it is refused before any call, naming the accepted ones."""
    from functions.commands.sls_logs import OUTCOMES

    sls, env = store
    for given, said in (("faild", "(did you mean failed?)"), ("applied", "")):
        done = cli(env, "logs", "--outcome", given)
        text = " ".join(done.stderr.split())
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert text.startswith("ack-mig-hook: error: argument --outcome: %r is not an outcome the function logs%s"
                               % (given, " " + said if said else ""))
        assert "use one of " + ", ".join(OUTCOMES) in text
    assert sls.requests == []


def test_every_outcome_the_function_writes_is_one_logs_accepts():
    """The list ``logs --outcome`` takes (functions/base/event_result.py) holds what the producers write: an event's
    outcomes, delivery's, a rollout wave's and the ``rollout stopped`` line's (a node's stop step)."""
    from functions.base.event_result import NODE_OUTCOMES, OUTCOMES as EVENT_OUTCOMES
    from functions.commands.sls_logs import OUTCOMES
    from functions.decision import waves
    from functions.delivery import outcome as delivery
    from functions.rollout import executor

    produced = set(delivery.OUTCOMES) | set(waves.STOP_STEPS) | {
        executor.DEFERRED, executor.DRAIN_TIMEOUT, executor.DRAIN_REFUSED, executor.FAILED, executor.SKIPPED,
        executor.GONE, executor.DESTROY_REQUIRED, "dry-run"}
    assert produced == set(NODE_OUTCOMES)
    assert OUTCOMES == EVENT_OUTCOMES + NODE_OUTCOMES and all(o == o.lower() for o in OUTCOMES)


def test_logs_reads_at_most_5000_lines_a_command_however_many_the_search_finds(store):
    """docs/cli.md: SLS's search only narrows what is read, at most 5,000 lines a command. Lines the search
    finds and a filter drops (``GPU-A`` for ``--node gpu-a``) count: the command stops reading there (50 calls),
    never pages through the whole logstore for lines it would not show."""
    from functions.commands.sls_logs import MAX_SCAN

    sls, env = store
    now = int(__import__("time").time())
    sls.add("my-sls-project", "ack-mig-hook", now - 50, {"time": "T-50s", "level": "INFO", "message": "node result",
                                                         "node_name": "gpu-a", "outcome": "failed"})
    for i in range(MAX_SCAN + 50):
        sls.add("my-sls-project", "ack-mig-hook", now - 40, {"time": "T-40s", "level": "INFO",
                                                             "message": "node result", "node_name": "GPU-A"})
    before = len(sls.requests)
    done = cli(env, "logs", "-o", "json", "--node", "gpu-a")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["lines"] == []  # the gpu-a line is past the 5,000 read
    bodies = [r["body"] for r in sls.requests[before:]]
    assert MAX_SCAN == 5000 and sum(b["line"] for b in bodies) == MAX_SCAN and len(bodies) == 50, \
        [(b["offset"], b["line"]) for b in bodies][-3:]


@pytest.mark.parametrize("message", [float("nan"), float("inf"), 12, None, ["a"], "plain text", '{"outcome": "done"}'])
def test_every_row_sls_answers_reads_as_a_line_that_json_can_write(message):
    """SLS's answer is JSON its SDK reads with Python's parser, which takes NaN: a row whose message was a NaN
    went into `logs --json` as NaN, which is no JSON (the command's output must load anywhere)."""
    from functions.commands.sls_logs import entry

    line = entry({"message": message, "__time__": "1700000000"})
    text = json.dumps(line, allow_nan=False)
    assert json.loads(text)["time"] == "2023-11-14T22:13:20Z"
    assert line == {"outcome": "done", "time": "2023-11-14T22:13:20Z"} or isinstance(line["message"], str)


def test_logs_reads_whole_pages_while_a_filter_drops_lines(store):
    """A page asked for only the lines still missing: once a filter had kept some, each later call asked SLS
    for one or two rows, so a search whose lines the filter drops (``GPU-A`` for ``--node gpu-a``) took a call
    per row, hundreds where the 5,000-row bound promises 50 calls at most. Pages stay 100 rows."""
    sls, env = store
    now = int(__import__("time").time())
    sls.add("my-sls-project", "ack-mig-hook", now - 10, {"time": "T-10s", "level": "INFO", "message": "node result",
                                                         "node_name": "gpu-a", "outcome": "failed"})
    for i in range(300):
        sls.add("my-sls-project", "ack-mig-hook", now - 40, {"time": "T-40s", "level": "INFO",
                                                             "message": "node result", "node_name": "GPU-A"})
    before = len(sls.requests)
    done = cli(env, "logs", "-o", "json", "--node", "gpu-a", "--limit", "2")
    assert done.returncode == 0, done.stderr
    assert [line["time"] for line in json.loads(done.stdout)["lines"]] == ["T-10s"]
    bodies = [r["body"] for r in sls.requests[before:]]
    assert len(bodies) <= 4, [(b["offset"], b["line"]) for b in bodies][:5]


def test_logs_asks_again_while_sls_answers_an_incomplete_result(store):
    """SLS answers ``meta.progress: Incomplete`` when a search did not finish in time: its rows are a part, and
    the same call must be made again (SLS GetLogs; aliyun-log-python-sdk ``get_log`` repeats it up to 5 times).
    Read as complete, a page short of rows ended the listing: lines in the logstore were never shown, and with
    an empty part the command said there were none. Each call is now made again until SLS says Complete; an
    answer still Incomplete after 5 calls is one line saying so, never a short listing."""
    sls, env = store
    sls.incomplete_next(2)
    before = len(sls.requests)
    done = cli(env, "logs", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert [line["time"] for line in json.loads(done.stdout)["lines"]] == ["T-10m", "T-5m", "T-1m"]
    bodies = [r["body"] for r in sls.requests[before:]]
    assert len(bodies) == 3 and len({json.dumps(b, sort_keys=True) for b in bodies}) == 1  # the same call again
    sls.incomplete_next(5)
    done = cli(env, "logs")
    assert done.returncode == 1 and done.stdout == ""
    said = error_text(done.stderr)
    assert "incomplete" in said and "5 times" in said and "\n" not in said.strip(), done.stderr
    assert sls.incomplete == 0


@pytest.mark.contract_exempt("answers a meta field of another shape than the SDK's model on purpose")
def test_logs_reads_the_rows_of_an_answer_whose_meta_the_sdk_model_cannot_read(store):
    """darabonba's ``DaraCore.from_map`` swallows any error reading an answer into the SDK's model and leaves
    the body None: one meta field of another shape (``phraseQueryInfo`` as text) made every page read as no
    rows, and ``logs`` said "no lines" over a logstore that holds them. The answer is read as SLS sent it."""
    sls, env = store
    sls.meta_extra = {"phraseQueryInfo": "x"}
    sls.rows_extra = ["not a row"]
    done = cli(env, "logs", "-o", "json")
    assert done.returncode == 0, done.stderr
    lines = json.loads(done.stdout)["lines"]
    assert [line.get("time") for line in lines] == ["T-10m", "T-5m", "T-1m", None]  # newest first, read oldest first
    assert lines[-1] == {"message": "not a row"}  # a row of another shape: its text, the others as they are


def test_wait_and_undeploy_through_the_installed_command_never_touch_a_stack_of_another_cluster(cloud):
    """docs/cli.md: a stack named whose ClusterId is another cluster, or that has none, is never deleted, and
    ``wait`` refuses it, exit 6, one line naming the stack and the cluster it serves. Run as a person runs it: the
    installed ``ack-mig-hook`` (the worktree's code first on its path), a process of its own."""
    ros, fc, env = cloud
    foreign(ros, fc)
    env = dict(env, PYTHONPATH=ROOT)
    # the entry point installed beside the interpreter running the tests (a copy of the tree, as the mutation
    # run makes, has no .venv of its own; PYTHONPATH puts its code first)
    entry = os.path.join(os.path.dirname(sys.executable), "ack-mig-hook")
    for argv, said in ((["wait", "--stack-name", "other-hook"], "stack other-hook serves cluster %s, not %s" % (
                           OTHER, CLUSTER)),
                       (["undeploy", "--stack-name", "other-hook", "--yes"], "serves cluster %s, not %s" % (
                           OTHER, CLUSTER)),
                       (["wait", "--stack-name", "network"], "stack network has no ClusterId parameter"),
                       (["undeploy", "--stack-name", "network", "--yes"], "has no ClusterId parameter")):
        done = subprocess.run([entry] + argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=100,
                              stdin=subprocess.DEVNULL)
        text = error_text(done.stderr)
        assert done.returncode == 6 and said in text and "Traceback" not in done.stderr, (argv, done.stderr)
        assert done.stderr.startswith("ack-mig-hook: error: "), done.stderr
    assert ros.calls("DeleteStack") == 0 and ros.calls("ListStackEvents") == 0  # nothing deleted, nothing waited on
    assert {s["StackName"] for s in ros.stacks.values()} >= {"other-hook", "network"}


@pytest.mark.parametrize("payload, last_word", [
    ({"field-number-%d-of-a-long-payload (v2)" % i: 1 for i in range(20)},
     r"'field-number-\d+-of-a-long-payload|\(v2\)'"),
    ({"source": "acs.cs", "type": "x", "data": {}}, r"[a-z]+:[A-Za-z]+:[A-Za-z]+(\[[A-Z]+\])?"),
], ids=["many-fields", "type-not-handled"])
def test_invoke_remote_says_a_long_refusal_in_a_line_that_reads_whole(cloud, payload, last_word):
    """The function's reason, cut at 300 characters, ended mid-word ("'field-number-14-of", "cs:ActionTra")
    with a parenthesis or the list it was naming left open."""
    ros, fc, env = cloud
    seed_stack(ros)
    done = cli(env, "invoke", "--remote", "--event", "-", stdin=json.dumps(payload))
    text = error_text(done.stderr)
    assert done.returncode == 2 and text.endswith("; nothing was sent") and fc.invocations == [], text
    reason = text[len("ack-mig-hook: error: the deployed function would not act on this payload: "):-len(
        "; nothing was sent")]
    assert reason.count("(") == reason.count(")") and reason.endswith("..."), text
    assert re.fullmatch(last_word, reason[:-3].rstrip(",").split()[-1].lstrip("'")), text
