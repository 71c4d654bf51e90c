"""The code package to OSS, signed with OSS V4 (``OSS4-HMAC-SHA256``), on a bucket proven to be ours.

* **V4 only.** OSS no longer accepts V1 signatures from accounts created after 2025-03-01 nor on buckets
  created after 2025-09-01 (OSS "Guidelines for upgrading V1 signatures to V4 signatures"); ``deploy``
  creates its bucket, so V1 would fail on exactly the accounts that try it first. oss2's
  ``ProviderAuthV4`` signs with the bucket's region in the scope, so the region is given to the bucket.
* **A bucket we own, private.** Bucket names are global: anyone can create ``ack-mig-hook-...`` first. An
  existing bucket is used only when ``GetBucketInfo`` names the caller's account (STS
  ``GetCallerIdentity``, :func:`functions.commands.stack.credentials.account_id`) as its owner and its ACL is
  ``private``; otherwise the deploy stops in one line saying which and what to do. A bucket that is
  missing is created private.
* **Uploaded once.** The object's name carries the package's SHA-256, so an object of that name whose CRC-64
  (``HeadObject``'s ``x-oss-hash-crc64ecma``) is the package's already holds these bytes: it is not sent
  again, and ``deploy`` says so instead of "uploaded".
* **What was uploaded is what FC gets.** The object is put with its MD5 (OSS refuses a corrupted body,
  ``InvalidDigest``) and oss2 compares the CRC-64 OSS computed (``x-oss-hash-crc64ecma``) with its own. The
  same CRC-64 goes to the stack as the function's ``Code.Checksum``: FC 3.0 checks the package it
  fetches against it (FC API 2023-03-30, ``InputCodeLocation.checksum``), so an object replaced between
  upload and stack update is refused instead of deployed.

Endpoint ``oss-<region>.aliyuncs.com`` (OSS's documented public endpoint form) unless
``ACK_MIG_OSS_ENDPOINT`` overrides it.
"""

import base64
import hashlib
from typing import NamedTuple, Optional

from functions.base.endpoints import resolve, url_of
from functions.base.settings import Endpoint
from functions.commands.stack.credentials import Keys
from functions.commands.stack.exit_codes import EXIT_CONFLICT, CloudError

PRIVATE = "private"


class UploadError(CloudError):
    pass


class Uploaded(NamedTuple):
    where: str  # oss://bucket/key
    crc64: str  # CRC-64/ECMA-182 of the package, decimal: FC's Code.Checksum
    uploaded: bool  # False: the object already held these bytes, nothing was sent


class Stored(NamedTuple):
    """What a dry run finds: whether the bucket exists (and is ours: else UploadError) and already holds
    the package."""

    bucket_exists: bool
    object_present: bool


def crc64(data: bytes) -> str:
    """The package's CRC-64 the way OSS (``x-oss-hash-crc64ecma``) and FC's ``checksum`` write it: a decimal
    string (oss2's own ``Crc64``; Alibaba's FC deploy tool devsapp/fc3 uses the same ``crc64-ecma182``)."""
    from oss2.utils import Crc64

    digest = Crc64()
    digest.update(data)
    return str(digest.crc)


def _describe(exc: BaseException) -> str:
    code = getattr(exc, "code", "") or type(exc).__name__
    message = " ".join(str(getattr(exc, "message", "") or "").split())[:200]
    return "%s%s" % (code, ": " + message if message else "")


def bucket_problem(bucket: str, owner: str, acl: str, account: str) -> str:
    """Why an existing bucket cannot hold the code (one line, with the way out), or ''."""
    if owner != account:
        return ("OSS bucket %s belongs to account %s, not to yours (%s): bucket names are global, so choose one "
                "of your own with --bucket NAME" % (bucket, owner or "?", account))
    if acl != PRIVATE:
        return ("OSS bucket %s has ACL %s: anyone could read or replace the function's code there; make it "
                "private (OSS console > bucket > Permissions > ACL, or `ossutil set-acl oss://%s private -b`) "
                "or choose another with --bucket NAME" % (bucket, acl or "?", bucket))
    return ""


def _client(keys: Keys, region: str, bucket: str, endpoint: Optional[Endpoint], timeout_s: int):
    import oss2
    from oss2.credentials import StaticCredentialsProvider

    url = url_of(resolve("oss", region, endpoint))  # the override, else oss-<region>.aliyuncs.com
    auth = oss2.ProviderAuthV4(StaticCredentialsProvider(keys.access_key_id, keys.access_key_secret,
                                                         keys.security_token or ""))
    return oss2.Bucket(auth, url, bucket, connect_timeout=timeout_s, region=region), url


def _refused(what: str, exc: BaseException, default_exit: Optional[int] = None) -> UploadError:
    code = str(getattr(exc, "code", "") or "")
    return UploadError("%s: %s" % (what, _describe(exc)), code, default_exit)


def _check_bucket(client, url: str, bucket: str, account: str, create: bool) -> bool:
    """Whether the bucket exists, proven ours and private (else UploadError); ``create``: make it when missing."""
    import oss2

    try:
        try:
            info = client.get_bucket_info()
        except oss2.exceptions.NoSuchBucket:
            if not create:
                return False
            try:
                client.create_bucket(oss2.BUCKET_ACL_PRIVATE)
            except oss2.exceptions.OssError as exc:
                taken = getattr(exc, "code", "") == "BucketAlreadyExists"
                hint = " (bucket names are global: choose another with --bucket NAME)" if taken else ""
                raise _refused("cannot create OSS bucket %s%s" % (bucket, hint), exc,
                               EXIT_CONFLICT if taken else None) from None
            info = client.get_bucket_info()  # and check what was created, like any other bucket
    except oss2.exceptions.AccessDenied as exc:
        # Another account's bucket answers so (the owner check below could not even be made).
        raise UploadError("cannot read OSS bucket %s: %s (a bucket of another account answers so: choose your own "
                          "with --bucket NAME)" % (bucket, _describe(exc)), "AccessDenied", EXIT_CONFLICT) from None
    except oss2.exceptions.RequestError as exc:  # (an OssError too: caught first)
        raise UploadError("cannot reach OSS at %s: %s" % (url, type(exc).__name__)) from None
    except oss2.exceptions.OssError as exc:
        raise _refused("cannot read OSS bucket %s" % bucket, exc) from None
    problem = bucket_problem(bucket, str(getattr(info.owner, "id", "") or ""),
                             str(getattr(info.acl, "grant", "") or ""), account)
    if problem:
        raise UploadError(problem, exit_code=EXIT_CONFLICT)
    return True


def _holds(client, bucket: str, key: str, checksum: str) -> bool:
    """Whether the object exists with this CRC-64 (HeadObject: read-only, no body)."""
    import oss2

    try:
        head = client.head_object(key)
    except oss2.exceptions.NotFound:  # NoSuchKey; a HEAD answer has no body, so oss2 names it by status
        return False
    except oss2.exceptions.OssError as exc:
        raise _refused("cannot read oss://%s/%s" % (bucket, key), exc) from None
    return head.server_crc is not None and str(head.server_crc) == checksum


def inspect(keys: Keys, region: str, bucket: str, key: str, path: str, account: str,
            endpoint: Optional[Endpoint] = None, timeout_s: int = 60) -> Stored:
    """Read-only (``deploy --dry-run``): the bucket is checked like :func:`upload` checks it, never created."""
    client, url = _client(keys, region, bucket, endpoint, timeout_s)
    if not _check_bucket(client, url, bucket, account, create=False):
        return Stored(False, False)
    with open(path, "rb") as handle:
        return Stored(True, _holds(client, bucket, key, crc64(handle.read())))


def upload(keys: Keys, region: str, bucket: str, key: str, path: str, account: str,
           endpoint: Optional[Endpoint] = None, timeout_s: int = 60) -> Uploaded:
    import oss2

    client, url = _client(keys, region, bucket, endpoint, timeout_s)
    _check_bucket(client, url, bucket, account, create=True)
    with open(path, "rb") as handle:
        data = handle.read()
    checksum = crc64(data)
    if _holds(client, bucket, key, checksum):
        return Uploaded("oss://%s/%s" % (bucket, key), checksum, False)
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode("ascii")
    try:
        client.put_object(key, data, headers={"Content-MD5": md5, "Content-Type": "application/zip"})
    except oss2.exceptions.InconsistentError as exc:  # the CRC-64 OSS stored is not the one sent
        raise UploadError("OSS stored oss://%s/%s with another CRC-64 than the package's: %s"
                          % (bucket, key, str(exc)[:200])) from None
    except oss2.exceptions.OssError as exc:  # RequestError included
        raise _refused("cannot upload %s to oss://%s/%s" % (path, bucket, key), exc) from None
    return Uploaded("oss://%s/%s" % (bucket, key), checksum, True)
