"""A cloud service whose address takes no connection (a black hole: the SYN is never answered) costs a command
ACK_MIG_CONNECT_TIMEOUT_S once, then the one line of unreachable.said, not the SDK's retries of a 30 s (OSS: 60 s)
connect timeout. Before, ROS cost 3 x 30 s and the back-offs (93 s) before its line, STS, FC, SLS and the ACK
API 30 s, OSS 60 s. The black hole is a loopback listener whose accept queue is full: Linux drops further SYNs,
so a connection neither fails nor succeeds. What is asserted is that the configured value reaches the SDK's
request (urllib3 words it ``connect timeout=1``, the line ``no answer within 1s``) and that nothing is retried
(the client's sleep is recorded), not the wall clock."""

import os
import socket
import time

import pytest

from functions.base import settings
from functions.base.settings import Endpoint
from functions.commands.stack.credentials import Keys
from tests.function.test_unreachable_services import KEY, SECRET, TOKEN, _env, _run
from tests.function.test_unreachable_services import ros  # noqa: F401  (fixture)
from tests.support.cli_errors import error_text
from tests.support.loopback import refused_port

pytestmark = pytest.mark.timeout(150)
KEYS = Keys(KEY, SECRET, TOKEN)


@pytest.fixture
def black_hole():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(8):  # fill the accept queue (never accepted): later SYNs are dropped, never refused
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.2)
    yield port
    for filler in fillers:
        filler.close()
    listener.close()


def _line(what, port, variable=None):
    text = "cannot connect to %s at 127.0.0.1:%d (no answer within 1s); " % (what, port)
    if variable:
        text += "%s=http://127.0.0.1:%d set it: check that value, or unset it for the region's endpoint" % (
            variable, port)
    return text


def test_ros_gives_up_at_the_connect_timeout_and_does_not_retry_a_connection_never_made(black_hole, monkeypatch):
    from functions.commands.stack.ros import StackError, Stacks

    monkeypatch.setenv(settings.CONNECT_TIMEOUT_S, "1")
    slept = []
    stacks = Stacks("cn-beijing", KEYS, Endpoint("127.0.0.1:%d" % black_hole, "http"), sleep=slept.append)
    with pytest.raises(StackError) as caught:
        stacks.find("ack-mig-hook")
    assert str(caught.value).startswith(_line("the ROS API", black_hole)), str(caught.value)
    assert caught.value.exit_code == 2 and slept == []  # one try: nothing ever answered there


def test_ros_still_retries_a_lost_connection_once_it_has_answered(ros):  # noqa: F811
    """A wait's poll that loses the network after ROS answered is retried, as before: only a client that never
    connected gives up at once."""
    from functions.commands.stack.ros import StackError, Stacks

    slept = []
    stacks = Stacks("cn-beijing", KEYS, settings.parse_endpoint({"X": ros.endpoint}, "X"), sleep=slept.append)
    assert stacks.find("nothing-by-this-name") is None
    closed = refused_port()  # a loopback port nothing listens on: the kernel refuses at once
    # the network lost after the first answer: the Tea client's host for every later call (ROS's emulator keeps
    # the first connection alive, so stopping it would not do)
    stacks._client._endpoint = "127.0.0.1:%d" % closed
    with pytest.raises(StackError, match=r"\(Connection refused\)"):
        stacks.find("nothing-by-this-name")
    assert slept == [1.0, 2.0]


@pytest.mark.parametrize("argv, what, variable", [
    (["wait"], "the ROS API", "ACK_MIG_ROS_ENDPOINT"),
    (["deploy", "--bucket", "my-code-bucket"], "the STS API", "ACK_MIG_STS_ENDPOINT"),
], ids=["wait-ros", "deploy-sts"])
def test_a_command_whose_first_service_is_a_black_hole_ends_with_its_line(black_hole, argv, what, variable):
    done = _run(_env(black_hole, ACK_MIG_CONNECT_TIMEOUT_S="1"), *argv)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert error_text(done.stderr) == "ack-mig-hook: error: " + _line(what, black_hole, variable), done.stderr


@pytest.mark.parametrize("argv, what, variable", [
    (["logs"], "the SLS API", "ACK_MIG_SLS_ENDPOINT"),
    (["invoke", "--remote"], "the Function Compute API", "ACK_MIG_FC_ENDPOINT"),
], ids=["logs-sls", "invoke-fc"])
def test_a_service_after_ros_that_is_a_black_hole_ends_with_its_line(black_hole, ros, argv, what,  # noqa: F811
                                                                     variable):
    done = _run(_env(black_hole, ACK_MIG_CONNECT_TIMEOUT_S="1", ACK_MIG_ROS_ENDPOINT=ros.endpoint), *argv)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert error_text(done.stderr) == "ack-mig-hook: error: " + _line(what, black_hole, variable), done.stderr


def test_oss_and_the_ack_api_give_up_at_the_connect_timeout(black_hole, monkeypatch):
    from functions.commands.stack import cluster_network, upload

    monkeypatch.setenv(settings.CONNECT_TIMEOUT_S, "1")
    where = Endpoint("127.0.0.1:%d" % black_hole, "http")
    with pytest.raises(upload.UploadError) as oss:
        upload.inspect(KEYS, "cn-beijing", "my-code-bucket", "ack-mig-hook/x.zip", os.devnull, "1234567890123456",
                       where)
    assert str(oss.value).startswith(_line("OSS", black_hole)) and oss.value.exit_code == 2, str(oss.value)
    with pytest.raises(Exception) as ack:
        cluster_network.read(KEYS, "cn-beijing", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b", where)
    assert str(ack.value).startswith(_line("the ACK API", black_hole)), str(ack.value)


def test_the_connect_timeout_is_checked_like_every_setting(monkeypatch):
    monkeypatch.setenv(settings.CONNECT_TIMEOUT_S, "0")
    with pytest.raises(settings.SettingsError, match=r"ACK_MIG_CONNECT_TIMEOUT_S=0 is out of range; use 1\.\.15"):
        settings.connect_timeout_s()



def test_doctors_ecs_and_vpc_reads_try_once_within_the_connect_timeout(black_hole, monkeypatch):
    """doctor's ECS and VPC reads (the security group's outbound rules, the vSwitch's block, the nodes' Cloud
    Assistant) went through the function's client: up to 5 tries with back-offs, each with its own connect and
    read timeouts, ~17 s against an unanswering name server before one check's line. An operator's doctor
    gives up at ACK_MIG_CONNECT_TIMEOUT_S, one try, and says so in that check's line; the function's own
    retries are left as they are."""
    from types import SimpleNamespace

    from functions.base.settings import Credentials
    from functions.cloud.rpc import ECS_VERSION, VPC_VERSION, ApiError
    from functions.commands import doctor

    monkeypatch.setenv(settings.CONNECT_TIMEOUT_S, "1")
    hole = Endpoint("127.0.0.1:%d" % black_hole, "http")
    config = SimpleNamespace(region="cn-beijing", credentials=Credentials(KEY, SECRET, TOKEN),
                             delivery=SimpleNamespace(ecs_endpoint=hole))
    for product, version in (("ecs", ECS_VERSION), ("vpc", VPC_VERSION)):
        client = doctor.rpc_client(product, version, config, hole)
        assert client.timeout_s == 1 and client.backoff.attempts == 1
        with pytest.raises(ApiError):
            client.call("DescribeSecurityGroups", {"RegionId": "cn-beijing"})
        assert sum(client.calls.values()) == 1, client.calls
    line = doctor._egress(config, "sg-1", "https://10.0.0.1:6443")
    assert isinstance(line, str) and "\n" not in line and "SDK.HttpError" in line, line
    (check,) = doctor._agents(config, {"i-1": "node-a"})  # one check's line, not the end of doctor
    assert check.status == "PROBLEM" and "Cloud Assistant status not read" in check.text, check
