"""A cloud service nothing answers at is one line in every command: the service, host:port, the cause and
what sets the endpoint, as the check before a command's first call says it (common.connect). Before, `wait`,
`logs`, `undeploy`, `invoke --remote` and `deploy` printed the SDK's RetryError with urllib3's whole text
cut mid-word at 300 characters ("... Failed t"), exit 1. Run as a user runs them: a separate process of
this tree's code, against a loopback port that refuses connections (bound, then closed) and, for the
service behind ROS, the ROS emulator."""

import os
import subprocess
import sys

import pytest

from tests.function.test_deploy import cloud as deploy_cloud  # noqa: F401  (fixture)
from tests.function.test_remote_and_logs import CLUSTER, KEY, SECRET, TOKEN, seed_stack
from tests.support.cli_errors import error_text
from tests.support.loopback import refused_port
from tests.support.ros_emulator import RosEmulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.timeout(120)
SDK_WORDS = ("RetryError", "HTTPConnectionPool", "NewConnectionError", "Max retries", "UnretryableException")


@pytest.fixture
def closed_port():
    return refused_port()  # nothing listens there, the kernel refuses at once, and no server can take it


def _env(port, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALIBABA_CLOUD_", "ACK_MIG_")) and k != "COLUMNS"
           and not k.lower().endswith("_proxy")}
    env.update({"ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true", "ALIBABA_CLOUD_ACCESS_KEY_ID": KEY,
                "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET, "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN,
                "ACK_MIG_CLUSTER_ID": CLUSTER, "ACK_MIG_REGION": "cn-beijing", "HOME": "/nonexistent"})
    for service in ("CS", "ROS", "STS", "FC", "SLS", "OSS", "VPC"):
        env["ACK_MIG_%s_ENDPOINT" % service] = "http://127.0.0.1:%d" % port
    env.update(extra)
    return env


def _run(env, *argv):
    # -m from the repository root: this tree's code, whatever the .venv's entry point was installed from
    return subprocess.run([sys.executable, "-m", "functions.commands.main"] + list(argv), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=100, stdin=subprocess.DEVNULL)


def _says_unreachable(done, what, port, variable):
    text = error_text(done.stderr)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert text.startswith("ack-mig-hook: error: cannot connect to %s at 127.0.0.1:%d (Connection refused); "
                           % (what, port)), text
    assert "%s=http://127.0.0.1:%d" % (variable, port) in text, text  # what set the endpoint, to check it
    assert not any(word in done.stderr for word in SDK_WORDS), done.stderr
    assert done.stdout == ""


ROS_FIRST = [["wait"], ["logs"], ["undeploy", "--yes"],
             ["invoke", "--remote", "--event", os.path.join(ROOT, "examples", "event.json")]]


@pytest.mark.parametrize("argv", ROS_FIRST, ids=lambda a: a[0])
def test_a_command_whose_first_call_is_ros_names_ros_its_address_and_its_variable(closed_port, argv):
    _says_unreachable(_run(_env(closed_port), *argv), "the ROS API", closed_port, "ACK_MIG_ROS_ENDPOINT")


def test_deploy_names_sts_its_first_call(closed_port):
    _says_unreachable(_run(_env(closed_port), "deploy", "--bucket", "my-code-bucket"), "the STS API", closed_port,
                      "ACK_MIG_STS_ENDPOINT")


@pytest.mark.parametrize("argv", [["status"], ["doctor"]], ids=lambda a: a[0])
def test_the_check_before_the_first_call_names_the_variable_that_set_the_ack_endpoint(closed_port, argv):
    """status and doctor said it already in one line; the line now names ACK_MIG_CS_ENDPOINT too, which is
    what to fix when it is set (the machine's internet access is not)."""
    done = _run(_env(closed_port), *argv)
    text = error_text(done.stderr)
    assert done.returncode == 2 and text.startswith(
        "ack-mig-hook: error: cannot connect to the ACK API at 127.0.0.1:%d (Connection refused); " % closed_port)
    assert "ACK_MIG_CS_ENDPOINT=http://127.0.0.1:%d" % closed_port in text, text


@pytest.fixture
def ros():
    emulator = RosEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN).start()
    seed_stack(emulator)
    yield emulator
    emulator.stop()


def test_logs_names_sls_when_the_stack_is_found_but_sls_does_not_answer(closed_port, ros):
    done = _run(_env(closed_port, ACK_MIG_ROS_ENDPOINT=ros.endpoint), "logs")
    _says_unreachable(done, "the SLS API", closed_port, "ACK_MIG_SLS_ENDPOINT")


def test_invoke_remote_names_fc_when_the_stack_is_found_but_fc_does_not_answer(closed_port, ros):
    done = _run(_env(closed_port, ACK_MIG_ROS_ENDPOINT=ros.endpoint), "invoke", "--remote")
    _says_unreachable(done, "the Function Compute API", closed_port, "ACK_MIG_FC_ENDPOINT")


def test_without_an_override_the_line_says_the_region_picks_the_endpoint():
    """No ACK_MIG_*_ENDPOINT set: the fix is the network or the region, and the variable that would override."""
    from functions.commands.stack import unreachable

    fix = unreachable.fix("ros", {})
    assert fix == ("check this machine's internet access (or set HTTPS_PROXY) and --region; "
                   "ACK_MIG_ROS_ENDPOINT overrides the endpoint"), fix


def test_oss_that_does_not_answer_is_said_the_same_way(closed_port, monkeypatch):
    """deploy's upload (oss2, its RequestError): before, "cannot reach OSS at URL: RequestError", no cause and
    nothing to check. Through upload.inspect, deploy --dry-run's read of the bucket (a deploy gets there only
    after building the package)."""
    from functions.base.settings import Endpoint
    from functions.commands.stack import upload
    from functions.commands.stack.credentials import Keys

    monkeypatch.setenv("ACK_MIG_OSS_ENDPOINT", "http://127.0.0.1:%d" % closed_port)
    with pytest.raises(upload.UploadError) as caught:
        upload.inspect(Keys(KEY, SECRET, TOKEN), "cn-beijing", "my-code-bucket", "ack-mig-hook/x.zip", os.devnull,
                       "1234567890123456", Endpoint("127.0.0.1:%d" % closed_port, "http"), 10)
    assert caught.value.exit_code == 2
    assert str(caught.value) == ("cannot connect to OSS at 127.0.0.1:%d (Connection refused); ACK_MIG_OSS_ENDPOINT="
                                 "http://127.0.0.1:%d set it: check that value, or unset it for the region's "
                                 "endpoint" % (closed_port, closed_port))


@pytest.mark.parametrize("service, what, found", [
    ("OSS", "OSS", "cannot reach OSS at http://127.0.0.1:PORT: RequestError"),
    ("CS", "the ACK API", "ACK DescribeClusterDetail failed: UnretryableException: RetryError(..."),
], ids=["oss", "cs"])
def test_deploy_says_oss_or_the_ack_api_it_reaches_later_the_same_way(deploy_cloud, capsys, tmp_path, closed_port,
                                                                       monkeypatch, service, what, found):
    """deploy reaches OSS (after building the package) and the ACK API (the cluster's network) after STS and ROS
    answered; those said ``found`` before: no cause, or the SDK's text, and nothing to check."""
    from tests.function.test_deploy import deploy_args, make_deps, run

    monkeypatch.setenv("ACK_MIG_%s_ENDPOINT" % service, "http://127.0.0.1:%d" % closed_port)
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--dry-run"))
    text = error_text(err[err.index("ack-mig-hook: error:"):])
    assert code == 2 and text.startswith("ack-mig-hook: error: cannot connect to %s at 127.0.0.1:%d (Connection "
                                         "refused); ACK_MIG_%s_ENDPOINT=" % (what, closed_port, service)), text
    assert not any(word in err for word in SDK_WORDS + ("RequestError",)), err


def test_a_long_endpoint_setting_is_named_with_dots_where_cut(closed_port):
    """The override that set the endpoint is named so the user checks it; one longer than 120 characters was cut
    there with no mark, so the line read as if that were its whole value. A host of 193 characters that is
    still 127.0.0.1 (each part in octal with leading zeros, read numerically: no name lookup leaves the
    machine) now ends in "..." where cut."""
    host = "0" * 60 + "177." + "0" * 63 + "." + "0" * 63 + ".1"
    value = "http://%s:%d" % (host, closed_port)
    done = _run(_env(closed_port, ACK_MIG_CS_ENDPOINT=value), "status")
    text = " ".join(error_text(done.stderr).split())
    assert done.returncode == 2 and "(Connection refused)" in text and "ACK_MIG_CS_ENDPOINT=" in text, done.stderr
    shown = text.split("ACK_MIG_CS_ENDPOINT=", 1)[1].split(" set it: check that value", 1)[0]
    assert shown.endswith("...") and value.startswith(shown[:-3]) and len(shown) <= 123, text
