"""Every cloud SDK answer bounded in size as it is read: the SDKs read a whole answer into memory (requests'
``Response.content``), bounded only in time, so an endpoint (hostile, or broken: whatever answers at an
``ACK_MIG_*_ENDPOINT``) that sends hundreds of MB at loopback speed exhausted the function's memory within
the call's deadline. functions/base/deadline.py cuts each body at ``MAX_ANSWER_BYTES`` (16 MiB, four times
the largest answer we read) as urllib3 hands it to the SDK; each client says so in one line naming the call
and the endpoint, and tries no more (the endpoint would send the same).

The emulators serve their real answer after 300 MB of white space (tests/support/loopback.py ``pad``: still
valid JSON, so only a size bound stops a client reading it whole), with a Content-Length or in chunks.
test_body_deadlines.py holds the same clients to their time bound.
"""

import pytest

from functions.base.deadline import MAX_ANSWER_BYTES
from tests.function.conftest import AK, SECRET, TOKEN, cloud_env

pytestmark = pytest.mark.timeout(120)

FLOOD = 300 << 20
LINE = ("the answer from %s is larger than 16 MiB, more than any answer of the API; it was cut off and nothing of "
        "it is read")
SLACK = 16 << 20  # what the sockets' buffers take in before the client stops reading: well below the flood


def one_line(exc):
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_the_ack_lookup_cuts_an_answer_past_the_bound_with_one_line_naming_the_endpoint(emulator, chunked):
    """functions/cloud/cs_lookup.py (cs20151215 through darabonba and requests): one call, not retried; the
    same call without the flood reads the nodes."""
    from functions.base.errors import ConfigurationError, Refused
    from functions.base.settings import load_settings
    from functions.cloud.cs_lookup import CsLookup

    emulator.pad = lambda method, path: FLOOD if path.split("?")[0].endswith("/nodes") else 0
    emulator.pad_chunked = chunked
    lookup = CsLookup(load_settings(cloud_env(emulator)), sleep=lambda s: None)
    with pytest.raises(ConfigurationError) as info:
        lookup.nodes(emulator.cluster_id, nodepool_id="np-any")
    assert not isinstance(info.value, Refused)  # the endpoint's answer, not a refusal about one pool
    assert one_line(info.value) == "DescribeClusterNodes failed: " + LINE % emulator.endpoint
    assert emulator.calls("DescribeClusterNodes") == 1
    assert emulator.padded < MAX_ANSWER_BYTES + SLACK, emulator.padded
    emulator.pad = None
    assert len(lookup.nodes(emulator.cluster_id)) == len(emulator.nodes)


def test_the_ecs_and_auto_scaling_client_cuts_an_answer_past_the_bound(no_proxy):
    """functions/cloud/rpc.py (aliyun-python-sdk-core through its vendored requests and urllib3): an ApiError
    AnswerTooLarge, not retried, not the SDK.Unexpected of an unknown error."""
    from functions.base.settings import Credentials, Endpoint
    from functions.cloud.rpc import ESS_VERSION, ApiError, Backoff, RpcClient
    from tests.support.rpc_emulator import Emulator

    with Emulator(AK, SECRET, TOKEN, "cn-beijing") as ess:
        ess.pad = lambda method, path: FLOOD
        client = RpcClient("ess", ESS_VERSION, ess.region, Credentials(AK, SECRET, TOKEN),
                           Endpoint(ess.endpoint.split("://", 1)[1], "http"), timeout_s=30,
                           backoff=Backoff(3, sleep=lambda s: None))
        with pytest.raises(ApiError) as info:
            client.call("DescribeScalingGroups", {"RegionId": ess.region})
        assert info.value.code == "AnswerTooLarge" and not info.value.retryable
        assert one_line(info.value) == "DescribeScalingGroups failed: AnswerTooLarge: " + LINE % ess.endpoint
        assert client.calls["DescribeScalingGroups"] == 1
        assert ess.padded < MAX_ANSWER_BYTES + SLACK, ess.padded


def test_the_kms_secret_read_cuts_an_answer_past_the_bound(no_proxy):
    """functions/cloud/secrets.py (kms20160120 through darabonba): a SecretError that is not retryable (an
    unknown error there reads as retryable)."""
    from functions.base.settings import Credentials, Endpoint
    from functions.cloud.secrets import SecretError, forget_all, get_secret
    from tests.support.kms_emulator import KmsEmulator

    forget_all()
    with KmsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN, region="cn-beijing") as kms:
        kms.put_secret("ssh-key", "key-text")
        kms.pad = lambda method, path: FLOOD
        with pytest.raises(SecretError) as info:
            get_secret("ssh-key", "cn-beijing", Credentials(AK, SECRET, TOKEN),
                       Endpoint(kms.endpoint.split("://", 1)[1], "http"), 30)
        assert not info.value.retryable and info.value.code == "AnswerTooLarge"
        assert one_line(info.value) == "cannot read secret 'ssh-key' from KMS: AnswerTooLarge: " + LINE % kms.endpoint
        assert kms.padded < MAX_ANSWER_BYTES + SLACK, kms.padded


def test_the_operators_ros_client_says_a_cut_answer_in_its_own_words(no_proxy):
    """The command-line clients share the bound; their error lines read the cut answer through darabonba's
    UnretryableException (functions/base/deadline.failure_code/failure_message), which would otherwise name the
    wrapper and repr the answer's words: ``UnretryableException: AnswerTooLarge('the answer from ...')``. One
    ListStacks call, not retried."""
    from functions.base.settings import parse_endpoint
    from functions.commands.stack.credentials import Keys
    from functions.commands.stack.ros import StackError, Stacks
    from tests.support.ros_emulator import RosEmulator

    ros = RosEmulator(access_key_id=AK, secret=SECRET, token=TOKEN, steps=1).start()
    try:
        ros.pad = lambda method, path: FLOOD
        stacks = Stacks("cn-beijing", Keys(AK, SECRET, TOKEN), parse_endpoint({"E": ros.endpoint}, "E"),
                        timeout_s=30)
        with pytest.raises(StackError) as info:
            stacks.find("ack-mig-hook")
        assert one_line(info.value) == "ROS ListStacks failed: AnswerTooLarge: " + LINE % ros.endpoint
        assert [r.action for r in ros.requests] == ["ListStacks"]
        assert ros.padded < MAX_ANSWER_BYTES + SLACK, ros.padded
    finally:
        ros.stop()


def test_a_stacked_gzip_bomb_is_cut_before_it_inflates(no_proxy):
    """functions/cloud/rpc.py reads through aliyun-python-sdk-core's vendored urllib3 (1.24), which decodes a
    ``Content-Encoding: gzip, gzip`` chain whole for each piece it reads: a few KB of body inflated to 256 MiB
    in one piece, before the count of what was read saw any of it (the bound counts decoded bytes). No API
    stacks codings; such an answer is cut before it is read, as an AnswerTooLarge: one line, not retried, and
    the client's memory never holds the inflated text."""
    import tracemalloc

    from functions.base.settings import Credentials, Endpoint
    from functions.cloud.rpc import ESS_VERSION, ApiError, Backoff, RpcClient
    from tests.support.rpc_emulator import Emulator

    with Emulator(AK, SECRET, TOKEN, "cn-beijing") as ess:
        ess.bomb = lambda method, path: 256 << 20
        client = RpcClient("ess", ESS_VERSION, ess.region, Credentials(AK, SECRET, TOKEN),
                           Endpoint(ess.endpoint.split("://", 1)[1], "http"), timeout_s=30,
                           backoff=Backoff(3, sleep=lambda s: None))
        tracemalloc.start()
        try:
            with pytest.raises(ApiError) as info:
                client.call("DescribeScalingGroups", {"RegionId": ess.region})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < MAX_ANSWER_BYTES + SLACK, peak
        assert info.value.code == "AnswerTooLarge" and not info.value.retryable
        assert client.calls["DescribeScalingGroups"] == 1
        assert one_line(info.value) == (
            "DescribeScalingGroups failed: AnswerTooLarge: the answer from %s is compressed in layers "
            "(Content-Encoding: gzip, gzip), as no answer of the API is: it may inflate past 16 MiB unseen; it was "
            "cut off and nothing of it is read" % ess.endpoint)
