"""The code package in OSS is what we built (functions/commands/stack/upload.py, issue 30 item 1), with the
real oss2 SDK against the loopback OSS emulator (tests/support/oss_emulator.py): the upload is skipped only
when the object's stored SHA-256, its CRC-64 and its bytes all match; a forged-CRC object is replaced; the
bucket must be the account's, in the stack's region, private and writable by the account alone (else a
warning that stops the deploy unless --force)."""

import hashlib

import pytest

from functions.base.settings import Endpoint
from functions.commands.stack.credentials import Keys
from functions.commands.stack.upload import (SHA256_META, SharedBucket, UploadError, crc64, inspect, policy_problem,
                                             upload)
from tests.support.oss_emulator import _CRC64, OssEmulator, crc64_ecma

KEY, SECRET, TOKEN = "LTAIintegrity", "integrity-secret-77", "integrity-token-31"
ACCOUNT, REGION, BUCKET, OBJECT = "1357924680135792", "cn-beijing", "ack-mig-code", "ack-mig-hook/pkg.zip"
PACKAGE = b"PK\x03\x04" + bytes(range(256)) * 40 + b"the function we built"
ALL = 0xFFFFFFFFFFFFFFFF


def forge(data: bytes, crc: int) -> bytes:
    """``data`` plus 8 bytes chosen so that its CRC-64/ECMA-182 is ``crc``. CRC is linear: 8 bytes XORed into
    the register then shifted out through 8 zero-byte steps, which are inverted one byte at a time (each
    table entry has its own top byte)."""
    top = {entry >> 56: index for index, entry in enumerate(_CRC64)}
    assert len(top) == 256
    register = crc ^ ALL  # the register after the 8 bytes, before the final XOR
    for _ in range(8):  # undo one zero-byte step: register = T[low] ^ (previous >> 8)
        low = top[register >> 56]
        register = ((register ^ _CRC64[low]) << 8 & ALL) | low
    before = crc64_ecma(data) ^ ALL
    return data + (register ^ before).to_bytes(8, "little")


@pytest.fixture
def oss():
    with OssEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN, region=REGION, account_id=ACCOUNT) as emu:
        emu.buckets[BUCKET] = {}
        emu.acls[BUCKET] = "private"
        yield emu


@pytest.fixture
def package(tmp_path):
    path = tmp_path / "pkg.zip"
    path.write_bytes(PACKAGE)
    return str(path)


def send(oss, package, **kw):
    endpoint = Endpoint(oss.endpoint.split("://", 1)[1], "http")
    return upload(Keys(KEY, SECRET, TOKEN), REGION, BUCKET, OBJECT, package, ACCOUNT, endpoint, timeout_s=5, **kw)


def test_the_forger_works():
    forged = forge(b"another zip entirely", crc64_ecma(PACKAGE))
    assert forged != PACKAGE and crc64_ecma(forged) == crc64_ecma(PACKAGE) and str(crc64_ecma(forged)) == crc64(PACKAGE)


def test_the_package_goes_up_with_its_sha256_and_is_not_sent_twice(oss, package):
    first = send(oss, package)
    assert first.uploaded and oss.buckets[BUCKET][OBJECT] == PACKAGE
    assert oss.meta[(BUCKET, OBJECT)] == {SHA256_META: hashlib.sha256(PACKAGE).hexdigest()}
    puts = len([v for v, _ in oss.requests if v == "PUT"])
    again = send(oss, package)
    assert not again.uploaded and len([v for v, _ in oss.requests if v == "PUT"]) == puts


@pytest.mark.parametrize("claimed", [None, hashlib.sha256(PACKAGE).hexdigest()])
def test_an_object_with_the_same_crc64_but_other_bytes_is_replaced(oss, package, claimed):
    """A writer who can forge the CRC-64 can also write the metadata: the bytes themselves are checked."""
    forged = forge(b"PK\x03\x04 someone else's code", crc64_ecma(PACKAGE))
    oss.buckets[BUCKET][OBJECT] = forged
    oss.meta[(BUCKET, OBJECT)] = {SHA256_META: claimed} if claimed else {}
    result = send(oss, package)
    assert result.uploaded and oss.buckets[BUCKET][OBJECT] == PACKAGE


def test_a_bucket_in_another_region_is_named_so_not_as_another_accounts(oss, package):
    oss.bucket_regions[BUCKET] = "cn-hangzhou"
    with pytest.raises(UploadError) as info:
        send(oss, package)
    text = str(info.value)
    assert "is in region cn-hangzhou, not in the stack's region cn-beijing" in text and "another account" not in text
    assert OBJECT not in oss.buckets[BUCKET]


@pytest.mark.parametrize("elsewhere", ["another-region", "another-account", "another-account-unreadable"])
def test_force_never_accepts_another_accounts_bucket_nor_another_regions(oss, package, elsewhere):
    """docs/security.md: --force (``allow_shared``) accepts a shared ACL or policy on the account's own bucket,
    never another account's bucket (whether or not it lets us read its info) nor one in another region: the
    deploy stops (exit 6) with what --force cannot change, and nothing is written there."""
    if elsewhere == "another-region":
        oss.bucket_regions[BUCKET] = "cn-hangzhou"
    else:
        del oss.buckets[BUCKET]
        oss.foreign_buckets[BUCKET] = ("9999999999999999", "public-read-write", elsewhere == "another-account")
    with pytest.raises(UploadError) as info:
        send(oss, package, allow_shared=True)
    assert not isinstance(info.value, SharedBucket) and info.value.exit_code == 6, info.value
    text = str(info.value)
    assert "--force" not in text, text  # the way out is another bucket, never --force
    assert "cn-hangzhou" in text if elsewhere == "another-region" else ("9999999999999999" in text
                                                                        or "another account" in text), text
    assert not [path for verb, path in oss.requests if verb in ("PUT", "POST")], oss.requests


@pytest.mark.parametrize("acl", ["public-read-write", "public-read"])
def test_a_bucket_that_is_not_private_stops_unless_forced(oss, package, acl):
    oss.acls[BUCKET] = acl
    with pytest.raises(SharedBucket) as info:
        send(oss, package)
    assert "has ACL %s" % acl in str(info.value) and "--force" in str(info.value)
    assert OBJECT not in oss.buckets[BUCKET]  # stopped before anything was written
    forced = send(oss, package, allow_shared=True)
    assert forced.uploaded and len(forced.warnings) == 1 and acl in forced.warnings[0]


def grant(principal, action, resource="acs:oss:*:*:%s/*" % BUCKET, effect="Allow", **extra):
    st = {"Effect": effect, "Action": action, "Principal": principal, "Resource": resource}
    st.update(extra)
    return {"Version": "1", "Statement": [st]}


def test_a_policy_that_lets_others_write_stops_the_deploy_and_force_accepts_it(oss, package):
    oss.policies[BUCKET] = grant(["*"], ["oss:PutObject", "oss:GetObject"])
    with pytest.raises(SharedBucket) as info:
        send(oss, package)
    assert "policy statement (1) that lets * write (oss:PutObject)" in str(info.value)
    assert ("GET", "/%s/?policy=" % BUCKET) in oss.requests  # GetBucketPolicy was read
    assert OBJECT not in oss.buckets[BUCKET]
    assert send(oss, package, allow_shared=True).uploaded
    with pytest.raises(UploadError):  # a dry run stops the same way, and writes nothing
        inspect(Keys(KEY, SECRET, TOKEN), REGION, BUCKET, OBJECT, package, ACCOUNT,
                Endpoint(oss.endpoint.split("://", 1)[1], "http"), timeout_s=5)


@pytest.mark.parametrize("policy, verdict", [
    (grant(["*"], ["oss:GetObject"]), ""),  # read only
    (grant([ACCOUNT], ["oss:*"]), ""),  # the account itself
    (grant(["*"], ["oss:PutObject"], effect="Deny"), ""),  # a Deny grants nothing
    (grant(["*"], ["oss:PutObject"], resource="acs:oss:*:*:%s/logs/*" % BUCKET), ""),  # another prefix
    (grant(["20000001"], ["oss:Put*"]), "lets 20000001 write"),  # another account or RAM user
    (grant([], ["oss:*"]), "lets * write"),  # an empty Principal is everyone (OSS policy syntax)
    (grant("*", "oss:putobject"), "lets * write"),  # single strings, any case
    (grant(["*"], ["oss:PutBucketPolicy"], resource="acs:oss:*:*:%s" % BUCKET), "write (oss:PutBucketPolicy)"),
    ({"Version": "1", "Statement": [{"Effect": "Allow", "NotPrincipal": [ACCOUNT], "Action": ["oss:GetObject"],
                                     "Resource": ["*"]}]}, "use NotPrincipal"),
    ("{not json", "not OSS's JSON form"),
])
def test_policy_statements_are_judged_as_oss_applies_them(policy, verdict):
    import json

    text = policy if isinstance(policy, str) else json.dumps(policy)
    found = policy_problem(BUCKET, OBJECT, text, ACCOUNT, REGION)
    assert (verdict in found and found) if verdict else found == ""


def test_a_store_that_keeps_another_crc64_is_said_in_a_line_that_reads_whole(oss, package):
    """oss2's InconsistentError reads "{'status': -3, 'x-oss-request-id': ..., 'details': 'InconsistentError:
    ..., CRC checksum of client: N is mismatch with oss: M'}": cut at 200 characters, the line ended inside a
    number with its brace and quote open, both checksums gone."""
    oss.corrupt_crc.add(OBJECT)
    with pytest.raises(UploadError) as caught:
        send(oss, package)
    text = str(caught.value)
    assert text.startswith("OSS stored oss://%s/%s with another CRC-64 than the package's: " % (BUCKET, OBJECT)), text
    sent = crc64(PACKAGE)
    assert "client: %s" % sent in text and "oss: %d" % (int(sent) ^ 1) in text, text
    assert "{" not in text and "'details'" not in text and text.count("(") == text.count(")"), text
