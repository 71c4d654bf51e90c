"""``invoke --remote`` (the deployed function, through FC's InvokeFunction, asynchronously) and ``logs`` (the
function's log lines from SLS GetLogs), run as a user runs them: a separate process against the loopback
emulators (ROS for the stack, tests/support/fc_emulator.py, tests/support/sls_emulator.py), the endpoints
passed in ACK_MIG_*_ENDPOINT."""

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.support.fc_emulator import FcEmulator
from tests.support.ros_emulator import RosEmulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
FUNCTION = "ack-mig-hook-" + CLUSTER
POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"
KEY, SECRET, TOKEN = "LTAIremotetest", "remote-secret-value", "remote-sts-token"
pytestmark = pytest.mark.timeout(120)


def seed_stack(ros, name=None, function=FUNCTION, status="CREATE_COMPLETE"):
    """A stack as deploy leaves it (tests/function/test_deploy.py creates one the long way)."""
    with open(os.path.join(ROOT, "template.yml")) as handle:
        template = handle.read()
    params = [{"ParameterKey": k, "ParameterValue": v} for k, v in (
        ("ClusterId", CLUSTER), ("FunctionName", function), ("LogProject", "my-sls-project"),
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
    assert "ack-mig-hook logs --cluster-id %s --since 15m" % CLUSTER in text
    # a pipe: 80 columns, wrapped between words (only a word longer than that, the console's URL, runs past)
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in done.stdout.splitlines())
    assert len(done.stdout.splitlines()) > 2
    assert [r.action for r in fc.requests] == ["InvokeFunction"]


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
    assert doc["follow"] == "ack-mig-hook logs --stack-name team-hook --since 15m"


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


def test_a_local_invoke_still_needs_its_event_file(cloud):
    _, fc, env = cloud
    done = cli(env, "invoke", "--inventory", "example:inventory")
    assert done.returncode == 2 and "invoke needs --event FILE" in done.stderr
    done = cli(env, "invoke", "--event", "examples/event.json", "--nodepool-id", POOL)
    assert done.returncode == 2 and "go with --remote" in done.stderr
    assert fc.invocations == []
