"""The deploy supply chain against the real cloud's contract: OSS V4 only, a code bucket proven to be the
caller's and private, the function's code tied to the uploaded bytes, idempotent ROS calls. The real
``oss2``, STS and ROS SDKs talk to loopback emulators that recompute their signatures."""

import hashlib
import time

import pytest

from functions.commands.stack import upload as upload_module
from functions.commands.stack.credentials import Keys
from tests.function.test_deploy import (ACCOUNT, BUCKET, KEY, SECRET, TOKEN, cloud, deploy_args,  # noqa: F401
                                        make_deps, run)
from tests.support.oss_emulator import OssEmulator, crc64_ecma
from tests.support.cli_errors import error_text


# ---- the OSS emulator is the service a new account meets ----

def _bucket(oss, auth, region="cn-beijing"):
    import oss2

    return oss2.Bucket(auth, oss.endpoint, "probe-bucket", region=region, connect_timeout=5)


def test_crc64_is_the_one_oss_and_fc_write():
    """CRC-64/ECMA-182 (xz): the published check value, and oss2's own Crc64 on the same bytes."""
    from oss2.utils import Crc64

    assert crc64_ecma(b"123456789") == 0x995DC9BBDF1939FA
    data = hashlib.sha256(b"package").digest() * 999
    digest = Crc64()
    digest.update(data)
    assert crc64_ecma(data) == digest.crc and upload_module.crc64(data) == str(digest.crc)


def test_oss_refuses_v1_and_checks_every_part_of_a_v4_signature():
    import oss2
    from oss2.credentials import StaticCredentialsProvider

    with OssEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN) as oss:
        good = oss2.ProviderAuthV4(StaticCredentialsProvider(KEY, SECRET, TOKEN))
        _bucket(oss, good).create_bucket(oss2.BUCKET_ACL_PRIVATE)
        assert _bucket(oss, good).get_bucket_info().acl.grant == "private" and not oss.rejected
        # V1, what upload.py sent before: refused as OSS refuses it for new accounts (EC 0002-00000080).
        with pytest.raises(oss2.exceptions.AccessDenied) as refused:
            _bucket(oss, oss2.StsAuth(KEY, SECRET, TOKEN)).get_bucket_info()
        assert refused.value.details.get("EC") == "0002-00000080"
        # V4 with the wrong secret, the wrong region in the scope, or a clock 20 minutes off.
        with pytest.raises(oss2.exceptions.ServerError) as wrong:
            _bucket(oss, oss2.ProviderAuthV4(StaticCredentialsProvider(KEY, "not-the-secret", TOKEN))).get_bucket_info()
        assert wrong.value.code == "SignatureDoesNotMatch"
        with pytest.raises(oss2.exceptions.ServerError) as region:
            _bucket(oss, good, region="cn-shanghai").get_bucket_info()
        assert region.value.details.get("EC") == "0002-00000228"
        oss.clock = lambda: time.time() + 20 * 60
        with pytest.raises(oss2.exceptions.ServerError) as skewed:
            _bucket(oss, good).get_bucket_info()
        assert skewed.value.code == "RequestTimeTooSkewed"
        assert len(oss.rejected) == 4


# ---- deploy: the bucket ----

def test_a_new_bucket_is_created_private_and_named_by_the_callers_account(cloud, capsys, tmp_path):
    ros, oss = cloud
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 0, err
    assert oss.acls[BUCKET] == "private" and BUCKET == "ack-mig-hook-%s-cn-beijing" % ACCOUNT
    # Every OSS call was V4-signed for the bucket's region (the emulator refuses anything else).
    assert not oss.rejected and ("PUT", "/%s/" % BUCKET) in oss.requests


def test_a_bucket_of_another_account_is_refused_in_one_line(cloud, capsys, tmp_path):
    """Names are global: another account created the default name first (and lets anyone read its info, to
    lure uploads), or a --bucket that is someone else's."""
    ros, oss = cloud
    oss.foreign_buckets[BUCKET] = ("9999999999999999", "private", True)
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 6 and len(err.strip().splitlines()) >= 1  # the cloud's state stops the deploy (docs/cli.md)
    last = error_text(err[err.index("ack-mig-hook: error:"):])  # after the progress lines: the error
    assert "belongs to account 9999999999999999" in last and ACCOUNT in last and "--bucket" in last
    oss.foreign_buckets["someone-elses"] = ("8888888888888888", "private", False)
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2")), "--bucket", "someone-elses"))
    assert code == 6 and "AccessDenied" in err and "--bucket" in err
    assert not ros.stacks and not any(v == "PUT" and p.endswith(".zip") for v, p in oss.requests)


def test_a_bucket_of_ours_that_is_not_private_is_refused(cloud, capsys, tmp_path):
    ros, oss = cloud
    oss.buckets[BUCKET], oss.acls[BUCKET] = {}, "public-read"
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 6 and "ACL public-read" in err and "private" in err and "--bucket" in err
    assert oss.buckets[BUCKET] == {} and not ros.stacks


def test_the_account_id_comes_from_sts_and_its_failure_is_one_line(cloud, capsys, tmp_path, monkeypatch):
    ros, oss = cloud
    monkeypatch.setenv("ACK_MIG_STS_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--dry-run"))
    # nothing answers there: said as every command says an address nothing answers at (exit 2,
    # test_unreachable_services.py), not the SDK's RetryError
    assert code == 2 and "cannot connect to the STS API at 127.0.0.1:9 (Connection refused)" in " ".join(err.split())
    assert "Traceback" not in err and "RetryError" not in err
    assert not oss.requests


# ---- deploy: the code FC runs is the code that was uploaded ----

def test_the_stack_pins_the_uploaded_packages_crc64(cloud, capsys, tmp_path):
    ros, oss = cloud
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))[0] == 0
    (stack,) = ros.stacks.values()
    params = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    data = oss.buckets[params["CodeBucket"]][params["CodeObject"]]
    assert params["CodeChecksum"] == str(crc64_ecma(data))


def test_a_package_replaced_after_the_upload_is_never_deployed(cloud, capsys, tmp_path):
    """Someone with write access to the bucket swaps the object between the upload and FC's fetch: FC's
    checksum check fails the function, ROS rolls the stack back, deploy says why."""
    ros, oss = cloud

    def swap(stack):
        params = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
        oss.buckets[params["CodeBucket"]][params["CodeObject"]] = b"PK\x03\x04 not our code"

    ros.before_complete = swap
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    last = error_text(err[err.index("ack-mig-hook: error:"):])
    assert code == 1 and "CREATE_ROLLBACK_COMPLETE" in last and "checksum" in last


# ---- ROS: a retried call is the same operation ----

def test_a_create_retried_while_its_first_request_is_still_processed_is_the_same_stack(cloud):
    """A CreateStack slower than the client's timeout is still being processed when its retry (the same
    ClientToken) arrives: ROS answers that retry 400 ``LastTokenProcessing``, "the last token request is being
    processed. Try again later." (ROS "Common error codes"). Read as a refusal, deploy failed while ROS went on
    creating the stack; it is now tried again, and the next try gets the first request's answer."""
    from functions.base.settings import parse_endpoint
    from functions.commands.stack.ros import Stacks

    ros, _ = cloud
    stacks = Stacks("cn-beijing", Keys(KEY, SECRET, TOKEN), parse_endpoint({"E": ros.endpoint}, "E"), timeout_s=1)
    template = open(__import__("functions.commands.deploy", fromlist=["TEMPLATE"]).TEMPLATE).read()
    values = {"ClusterId": "c" + "0123456789abcdef" * 2, "CodeBucket": BUCKET, "LogProject": "proj",
              "LogStore": "store"}
    ros.hold_processing_next("CreateStack")
    stack_id = stacks.create("ack-mig-hook", template, values, 30)
    assert len(ros.stacks) == 1 and stack_id in ros.stacks
    creates = [r for r in ros.requests if r.action == "CreateStack"]
    assert len({r.query.get("ClientToken") for r in creates}) == 1
    assert [r.status for r in creates][1] == 400 and creates[-1].status == 200, [r.status for r in creates]


@pytest.mark.contract_exempt("answers a field and a body of another shape than the SDK's model on purpose")
def test_a_stack_answer_the_sdks_model_does_not_fit_is_read_as_sent_not_as_no_stack(cloud):
    """darabonba's DaraCore.from_map swallows any error while reading an answer into the ros20190910 model and
    leaves the body None (as bcefb12 found for ACK's). The ROS readers took that for an empty answer: one field of
    another shape in GetStack (``Log`` as text, where the model has an object) made a stack still being created
    read as one with no status, so ``wait`` returned at once and deploy said it "ended gone" while ROS went on;
    in ListStacks it read as no stack of that name. They now read the body as ROS sent it (cs_lookup's reader),
    and a body that is no JSON object is one line naming the call."""
    from functions.base.settings import parse_endpoint
    from functions.commands.stack.ros import StackError, Stacks

    ros, _ = cloud
    stacks = Stacks("cn-beijing", Keys(KEY, SECRET, TOKEN), parse_endpoint({"E": ros.endpoint}, "E"), timeout_s=5)
    template = open(__import__("functions.commands.deploy", fromlist=["TEMPLATE"]).TEMPLATE).read()
    values = {"ClusterId": "c" + "0123456789abcdef" * 2, "CodeBucket": BUCKET, "LogProject": "proj",
              "LogStore": "store"}
    stack_id = stacks.create("ack-mig-hook", template, values, 30)
    ros.stacks[stack_id]["Log"] = "resource logs follow"  # an object in the model (GetStack reference)
    final = stacks.wait(stack_id, 60, 0.01, lambda line: None)
    assert final is not None and final["Status"] == "CREATE_COMPLETE", final
    assert len([r for r in ros.requests if r.action == "GetStack"]) > 1  # followed while in progress
    assert (stacks.find("ack-mig-hook") or {}).get("StackId") == stack_id
    ros.answer_with("GetStack", ["not", "an", "object"])
    with pytest.raises(StackError) as refused:
        stacks.get(stack_id)
    assert str(refused.value) == "ROS GetStack answered a list, not the API's JSON object; nothing of it is read"


def test_a_create_whose_answer_was_lost_is_retried_as_the_same_stack(cloud):
    """The SDK retries a call that timed out with the same request; with a ClientToken ROS answers the retry
    with the first result. Without one the retry would meet its own stack: StackExists."""
    from functions.base.settings import parse_endpoint
    from functions.commands.stack.ros import Stacks

    ros, _ = cloud
    # The back-off between the tries is only counted: the first request was served before its answer was held
    # back, so the retry finds its result whenever it comes.
    pauses = []
    stacks = Stacks("cn-beijing", Keys(KEY, SECRET, TOKEN), parse_endpoint({"E": ros.endpoint}, "E"), timeout_s=1,
                    sleep=pauses.append)
    template = open(__import__("functions.commands.deploy", fromlist=["TEMPLATE"]).TEMPLATE).read()
    values = {"ClusterId": "c" + "0123456789abcdef" * 2, "CodeBucket": BUCKET, "LogProject": "proj",
              "LogStore": "store"}
    ros.answer_late_next("CreateStack", 2.5)
    stack_id = stacks.create("ack-mig-hook", template, values, 30)
    assert len(ros.stacks) == 1 and stack_id in ros.stacks
    creates = [r for r in ros.requests if r.action == "CreateStack"]
    tokens = {r.query.get("ClientToken") for r in creates}
    assert len(creates) == 2 and len(tokens) == 1 and None not in tokens
    # Updates too: the retry of an update already running is not a StackOperationConflict.
    ros.stacks[stack_id]["Status"] = "CREATE_COMPLETE"
    ros.answer_late_next("UpdateStack", 2.5)
    assert stacks.update(stack_id, template, dict(values, LogLevel="DEBUG"), 30) is True
    updates = [r for r in ros.requests if r.action == "UpdateStack"]
    assert len(updates) == 2 and len({r.query.get("ClientToken") for r in updates}) == 1
    assert len(pauses) == 2  # one back-off before each retry
    # Each operation has its own token: a later deploy of the same values is a new operation.
    assert {r.query["ClientToken"] for r in updates} != tokens
