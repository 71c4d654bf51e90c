"""The code package to OSS, signed with OSS V4 (``OSS4-HMAC-SHA256``), on a bucket proven to be ours.

* **V4 only.** OSS no longer accepts V1 signatures from accounts created after 2025-03-01 nor on buckets
  created after 2025-09-01 (OSS "Guidelines for upgrading V1 signatures to V4 signatures"); ``deploy``
  creates its bucket, so V1 would fail on exactly the accounts that try it first. oss2's
  ``ProviderAuthV4`` signs with the bucket's region in the scope, so the region is given to the bucket.
* **A bucket we own, in the stack's region, that nobody else can write.** Bucket names are global: anyone can
  create ``ack-mig-hook-...`` first. Before anything is read or written there, ``GetBucketInfo`` must name
  the caller's account (STS ``GetCallerIdentity``, :func:`functions.commands.stack.credentials.account_id`)
  as the owner (else a hard stop) and ``oss-<region>`` as its ``Location`` (else a hard stop naming both
  regions: FC reads its code from a bucket of its own region; a bucket addressed through another region's
  endpoint answers ``AccessDenied`` with its own ``Endpoint``, which is reported as the region it names,
  not as another account's). Then its ACL must be ``private`` and ``GetBucketPolicy`` must hold no
  ``Allow`` statement that lets a principal other than the account write (``oss:PutObject``, ``oss:*``,
  ``oss:Put*``... see :data:`WRITE_ACTIONS`) to the package's object or the bucket's permissions; a
  statement whose ``NotPrincipal``/``NotAction``/``NotResource`` we would have to invert counts as such a
  grant. Either problem stops the deploy with a warning saying which statement, unless ``--force``
  (``allow_shared``) says the operator accepts it. A bucket that is missing is created private.
* **Uploaded once, by SHA-256.** The package's SHA-256 goes with the object as user metadata
  (``x-oss-meta-sha256``, written by the same ``PutObject``). The upload is skipped only when the stored
  object carries this SHA-256 AND its CRC-64 (``HeadObject``'s ``x-oss-hash-crc64ecma``) is the package's.
  CRC-64 alone proves nothing: it is linear, so appending 8 chosen bytes to any zip gives it any CRC-64
  (tests/function/test_package_integrity.py forges one); a writer who can forge the CRC-64 could also write
  the metadata, so before skipping, the object's bytes are read back (``GetObject``) and their SHA-256
  compared. Between this check and FC's fetch only the CRC-64 (``Code.Checksum``) guards the object: that
  is why the bucket must be writable by the account alone (above).
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
import hmac
from typing import NamedTuple, Optional

from functions.base.deadline import failure_code, failure_message
from functions.base.endpoints import resolve, url_of
from functions.base.settings import Endpoint
from functions.base.textsafe import clip
from functions.commands.stack.credentials import Keys
from functions.commands.stack.exit_codes import EXIT_CONFLICT, CloudError

PRIVATE = "private"
SHA256_META = "x-oss-meta-sha256"
# Actions that change an object or who may (OSS "Authorization syntax and elements", object and bucket
# level); a policy's Action patterns (``oss:*``, ``oss:Put*``) are matched against these, case-insensitively.
WRITE_ACTIONS = ("oss:PutObject", "oss:AppendObject", "oss:DeleteObject", "oss:PutObjectAcl", "oss:PutSymlink",
                 "oss:RestoreObject", "oss:InitiateMultipartUpload", "oss:UploadPart", "oss:UploadPartCopy",
                 "oss:CompleteMultipartUpload", "oss:PutObjectTagging", "oss:PutObjectVersionAcl",
                 "oss:PutBucketAcl", "oss:PutBucketPolicy", "oss:DeleteBucketPolicy")


class UploadError(CloudError):
    pass


class Uploaded(NamedTuple):
    where: str  # oss://bucket/key
    crc64: str  # CRC-64/ECMA-182 of the package, decimal: FC's Code.Checksum
    uploaded: bool  # False: the object already held these bytes, nothing was sent
    warnings: tuple = ()  # what --force accepted (a shared ACL or policy)


class SharedBucket(UploadError):
    """The bucket is ours but others may write there (ACL or policy): ``--force`` accepts it."""


class Stored(NamedTuple):
    """What a dry run finds: whether the bucket exists (and is ours: else UploadError) and already holds
    the package."""

    bucket_exists: bool
    object_present: bool
    warnings: tuple = ()


def crc64(data: bytes) -> str:
    """The package's CRC-64 the way OSS (``x-oss-hash-crc64ecma``) and FC's ``checksum`` write it: a decimal
    string (oss2's own ``Crc64``; Alibaba's FC deploy tool devsapp/fc3 uses the same ``crc64-ecma182``)."""
    from oss2.utils import Crc64

    digest = Crc64()
    digest.update(data)
    return str(digest.crc)


def _describe(exc: BaseException) -> str:
    code, message = failure_code(exc), failure_message(exc, 200, fallback="")
    return "%s%s" % (code, ": " + message if message else "")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bucket_problem(bucket: str, owner: str, acl: str, account: str) -> str:
    """Why an existing bucket cannot hold the code (one line, with the way out), or ''."""
    if owner != account:
        return ("OSS bucket %s belongs to account %s, not to yours (%s): bucket names are global, so choose one "
                "of your own with --bucket NAME" % (bucket, owner or "?", account))
    if acl != PRIVATE:
        return ("OSS bucket %s has ACL %s: anyone could read or replace the function's code there; make it "
                "private (OSS console > bucket > Permissions > ACL, or `ossutil set-acl oss://%s private -b`), "
                "choose another with --bucket NAME, or accept it with --force" % (bucket, acl or "?", bucket))
    return ""


def region_problem(bucket: str, location: str, region: str) -> str:
    """Why a bucket of another region cannot hold the code, or ''. ``location``: ``oss-<region>``."""
    if location == "oss-" + region:
        return ""
    return ("OSS bucket %s is in region %s, not in the stack's region %s: Function Compute reads its code from "
            "a bucket of its own region; choose one in %s with --bucket NAME (or deploy with --region %s)"
            % (bucket, location[4:] if location.startswith("oss-") else location or "?", region, region,
               location[4:] if location.startswith("oss-") else "?"))


def _listed(value) -> list:
    return value if isinstance(value, list) else [] if value is None else [value]


def policy_problem(bucket: str, key: str, policy: str, account: str, region: str) -> str:
    """The first statement of the bucket policy ``policy`` (JSON text) that lets someone other than
    ``account`` write the object ``key`` or the bucket's permissions, as one line; '' when none does. What
    cannot be read as OSS's policy form counts as such a grant (it cannot be shown not to be)."""
    import fnmatch
    import json

    try:
        doc = json.loads(policy)
        statements = _listed(doc.get("Statement"))
    except (ValueError, AttributeError):
        return "OSS bucket %s has a bucket policy that is not OSS's JSON form: it cannot be shown to keep " \
               "others from writing there" % bucket
    resources = ("acs:oss:%s:%s:%s/%s" % (region, account, bucket, key), "acs:oss:%s:%s:%s" % (region, account, bucket))
    for number, st in enumerate(statements, 1):
        if not isinstance(st, dict):
            return "OSS bucket %s: policy statement %d is not an object" % (bucket, number)
        if str(st.get("Effect", "")).lower() != "allow":
            continue  # a Deny takes rights away; it never grants
        inverted = [k for k in ("NotPrincipal", "NotAction", "NotResource") if k in st]
        principals = [str(p) for p in _listed(st.get("Principal"))]
        others = [p for p in principals if p != account] or (["*"] if not principals else [])
        actions = [str(a).lower() for a in _listed(st.get("Action"))]
        writes = [w for w in WRITE_ACTIONS if any(fnmatch.fnmatchcase(w.lower(), a) for a in actions)]
        patterns = [str(r) for r in _listed(st.get("Resource"))]
        ours = not patterns or any(fnmatch.fnmatchcase(r, p) for p in patterns for r in resources)
        if inverted or (others and writes and ours):
            return ("OSS bucket %s has a policy statement (%d) that lets %s %s: the function's code there could be "
                    "replaced by someone other than your account; remove the statement, choose another bucket "
                    "with --bucket NAME, or accept it with --force"
                    % (bucket, number, ", ".join(others)[:80] or "others",
                       "use %s" % "/".join(inverted) if inverted else "write (%s)" % ", ".join(writes[:3])))
    return ""


class _Bounded:
    """An oss2 Bucket whose every call ends within its bound, whatever OSS (or what answers in its place)
    does: oss2's timeout covers each socket read and restarts at every byte, a Guard covers the call. A
    PutObject's bound grows with the body, at 64 KB/s at least."""

    def __init__(self, bucket, timeout_s: int, url: str) -> None:
        import urllib3  # oss2 calls through requests: let each call's Guard reach its sockets

        from functions.base.deadline import urllib3_guarded

        urllib3_guarded(urllib3)
        self._bucket, self._timeout_s, self._url = bucket, timeout_s, url

    def _limit(self, size: int) -> int:
        return self._timeout_s + size // 65536

    def _late(self, name: str, limit: int) -> UploadError:
        return UploadError("OSS at %s gave no complete answer to %s within %ds" % (self._url, name, limit))

    def __getattr__(self, name: str):
        from functions.base.deadline import Guard

        method = getattr(self._bucket, name)

        def bounded(*args, **kwargs):
            body = args[1] if name == "put_object" and len(args) > 1 else b""
            limit = self._limit(len(body))
            guard = Guard(limit)
            try:
                with guard:
                    return method(*args, **kwargs)
            except Exception:
                if guard.fired:
                    raise self._late(name, limit) from None
                raise
        return bounded

    def read_object(self, key: str, size: int) -> bytes:
        """GetObject and its body, ``size`` bytes at most, all inside one bound. oss2 streams the body:
        ``get_object`` returns with the headers, so a bound around it alone leaves the body to a socket
        timeout that restarts at every byte (issue 36). An oss2 error other than a broken body is raised as
        is; a body cut short or past the bound is an UploadError."""
        import oss2
        from functions.base.deadline import Guard

        limit = self._limit(size)
        guard = Guard(limit, max_bytes=None)  # the package's size, not an API answer's: read(size + 1) bounds it
        try:
            with guard:
                return self._bucket.get_object(key).read(size + 1)
        except Exception as exc:
            if guard.fired:
                raise self._late("get_object", limit) from None
            if isinstance(exc, oss2.exceptions.OssError) and not isinstance(exc, oss2.exceptions.RequestError):
                raise
            raise UploadError("OSS at %s broke off the body of %s: %s" % (self._url, key, type(exc).__name__)) \
                from None


def _client(keys: Keys, region: str, bucket: str, endpoint: Optional[Endpoint], timeout_s: int):
    import oss2
    from oss2.credentials import StaticCredentialsProvider

    url = url_of(resolve("oss", region, endpoint))  # the override, else oss-<region>.aliyuncs.com
    auth = oss2.ProviderAuthV4(StaticCredentialsProvider(keys.access_key_id, keys.access_key_secret,
                                                         keys.security_token or ""))
    from functions.base.settings import connect_timeout_s

    # oss2 hands connect_timeout to requests as its timeout: (connect, read), a connection within
    # ACK_MIG_CONNECT_TIMEOUT_S (oss2's default is 60 s for both), a read within the call's own.
    timeouts = (min(connect_timeout_s(), timeout_s), timeout_s)
    return _Bounded(oss2.Bucket(auth, url, bucket, connect_timeout=timeouts, region=region), timeout_s, url), url


def _unreached(url: str, exc: BaseException) -> UploadError:
    """A request that got no answer: a connection never made is said as every command says it (exit 2, with
    what sets the endpoint); anything else (a reset, a read cut short) names OSS's address and its kind."""
    from functions.commands.stack.exit_codes import EXIT_USAGE
    from functions.commands.stack.unreachable import said

    unreached = said("oss", exc)
    if unreached:
        return UploadError(unreached, exit_code=EXIT_USAGE)
    return UploadError("cannot reach OSS at %s: %s" % (url, type(exc).__name__))


def _refused(what: str, exc: BaseException, default_exit: Optional[int] = None) -> UploadError:
    code = str(getattr(exc, "code", "") or "")
    return UploadError("%s: %s" % (what, _describe(exc)), code, default_exit)


def _check_bucket(client, url: str, bucket: str, key: str, account: str, region: str, create: bool,
                  allow_shared: bool = False):
    """(whether the bucket exists, warnings accepted by ``allow_shared``): proven ours, in ``region``, private
    and writable by the account alone (else UploadError, SharedBucket for what --force may accept);
    ``create``: make it when missing."""
    import oss2

    policy = ""
    try:
        try:
            info = client.get_bucket_info()
        except oss2.exceptions.NoSuchBucket:
            if not create:
                return False, ()
            try:
                client.create_bucket(oss2.BUCKET_ACL_PRIVATE)
            except oss2.exceptions.OssError as exc:
                taken = getattr(exc, "code", "") == "BucketAlreadyExists"
                hint = " (bucket names are global: choose another with --bucket NAME)" if taken else ""
                raise _refused("cannot create OSS bucket %s%s" % (bucket, hint), exc,
                               EXIT_CONFLICT if taken else None) from None
            info = client.get_bucket_info()  # and check what was created, like any other bucket
        if str(getattr(info.owner, "id", "") or "") == account:
            try:
                policy = client.get_bucket_policy().policy
            except oss2.exceptions.NoSuchBucketPolicy:
                pass
    except oss2.exceptions.AccessDenied as exc:
        endpoint = str((getattr(exc, "details", None) or {}).get("Endpoint") or "")
        if endpoint:  # OSS names the endpoint of the bucket's own region: the bucket is elsewhere
            raise UploadError(region_problem(bucket, endpoint.split(".")[0], region), "AccessDenied",
                              EXIT_CONFLICT) from None
        # Another account's bucket answers so (the owner check below could not even be made).
        raise UploadError("cannot read OSS bucket %s: %s (a bucket of another account answers so: choose your own "
                          "with --bucket NAME)" % (bucket, _describe(exc)), "AccessDenied", EXIT_CONFLICT) from None
    except oss2.exceptions.RequestError as exc:  # (an OssError too: caught first)
        raise _unreached(url, exc) from None
    except oss2.exceptions.OssError as exc:
        raise _refused("cannot read OSS bucket %s" % bucket, exc) from None
    owner, acl = str(getattr(info.owner, "id", "") or ""), str(getattr(info.acl, "grant", "") or "")
    if owner != account:
        raise UploadError(bucket_problem(bucket, owner, acl, account), exit_code=EXIT_CONFLICT)
    problem = region_problem(bucket, str(getattr(info, "location", "") or ""), region)
    if problem:
        raise UploadError(problem, exit_code=EXIT_CONFLICT)
    shared = tuple(p for p in (bucket_problem(bucket, owner, acl, account),
                               policy_problem(bucket, key, policy, account, region) if policy else "") if p)
    if shared and not allow_shared:
        raise SharedBucket(shared[0], exit_code=EXIT_CONFLICT)
    return True, shared


def _holds(client, bucket: str, key: str, checksum: str, digest: str, size: int) -> bool:
    """Whether the object exists with this SHA-256 (its ``x-oss-meta-sha256``) AND this CRC-64 (HeadObject:
    read-only, no body) AND these ``size`` bytes (GetObject). The CRC-64 alone can be forged; the SHA-256
    cannot."""
    import oss2

    try:
        head = client.head_object(key)
    except oss2.exceptions.NotFound:  # NoSuchKey; a HEAD answer has no body, so oss2 names it by status
        return False
    except oss2.exceptions.OssError as exc:
        raise _refused("cannot read oss://%s/%s" % (bucket, key), exc) from None
    stored = str((head.headers or {}).get(SHA256_META) or "")
    if not (head.server_crc is not None and str(head.server_crc) == checksum
            and hmac.compare_digest(stored.lower(), digest)):
        return False
    # The metadata is a claim whoever wrote the object made: the bytes themselves are read and hashed before
    # an upload is skipped (a download of the package's size, inside OSS's region, within the call's bound).
    if head.content_length != size:
        return False  # other bytes, whatever the metadata says
    try:
        body = client.read_object(key, size)
    except oss2.exceptions.NotFound:
        return False
    except oss2.exceptions.OssError as exc:  # InconsistentError (the body's CRC-64) included
        raise _refused("cannot read oss://%s/%s" % (bucket, key), exc) from None
    return hmac.compare_digest(hashlib.sha256(body).hexdigest(), digest)


def inspect(keys: Keys, region: str, bucket: str, key: str, path: str, account: str,
            endpoint: Optional[Endpoint] = None, timeout_s: int = 60, allow_shared: bool = False) -> Stored:
    """Read-only (``deploy --dry-run``): the bucket is checked like :func:`upload` checks it, never created."""
    client, url = _client(keys, region, bucket, endpoint, timeout_s)
    exists, warnings = _check_bucket(client, url, bucket, key, account, region, False, allow_shared)
    if not exists:
        return Stored(False, False)
    with open(path, "rb") as handle:
        data = handle.read()
    return Stored(True, _holds(client, bucket, key, crc64(data), sha256(data), len(data)), warnings)


def _mismatch(exc) -> str:
    """oss2's words for a CRC-64 mismatch (its ``body``: "InconsistentError: InconsistentError: req_id: ...,
    CRC checksum of client: N is mismatch with oss: M"), cut where it reads whole. ``str(exc)`` is a dict's
    repr around them, which a cut at 200 characters ended inside a number with its brace open."""
    text = str(getattr(exc, "body", "") or exc)
    while text.startswith("InconsistentError: "):
        text = text[len("InconsistentError: "):]
    return clip(text, 200)


def upload(keys: Keys, region: str, bucket: str, key: str, path: str, account: str,
           endpoint: Optional[Endpoint] = None, timeout_s: int = 60, allow_shared: bool = False) -> Uploaded:
    import oss2

    client, url = _client(keys, region, bucket, endpoint, timeout_s)
    _, warnings = _check_bucket(client, url, bucket, key, account, region, True, allow_shared)
    with open(path, "rb") as handle:
        data = handle.read()
    checksum, digest = crc64(data), sha256(data)
    if _holds(client, bucket, key, checksum, digest, len(data)):
        return Uploaded("oss://%s/%s" % (bucket, key), checksum, False, warnings)
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode("ascii")
    try:
        client.put_object(key, data, headers={"Content-MD5": md5, "Content-Type": "application/zip",
                                              SHA256_META: digest})
    except oss2.exceptions.InconsistentError as exc:  # the CRC-64 OSS stored is not the one sent
        raise UploadError("OSS stored oss://%s/%s with another CRC-64 than the package's: %s"
                          % (bucket, key, _mismatch(exc))) from None
    except oss2.exceptions.OssError as exc:  # RequestError included
        raise _refused("cannot upload %s to oss://%s/%s" % (path, bucket, key), exc) from None
    return Uploaded("oss://%s/%s" % (bucket, key), checksum, True, warnings)


# ---- old packages: the bucket keeps the last few of a stack, never the one in use ----

class Pruned(NamedTuple):
    kept: tuple
    deleted: tuple


def prune_plan(objects, in_use: str, keep: int) -> Pruned:
    """Pure: which of ``objects`` ((last modified, key) pairs) to delete so that ``keep`` remain: the one in
    use, whatever its age, and the newest others (ties by key, so the plan is the same every time)."""
    others = sorted(((t, k) for t, k in objects if k != in_use), key=lambda o: (o[0], o[1]), reverse=True)
    present = any(k == in_use for _t, k in objects)
    room = max(keep - (1 if present else 0), 0)
    kept = ((in_use,) if present else ()) + tuple(k for _t, k in others[:room])
    return Pruned(kept, tuple(sorted(k for _t, k in others[room:])))


def prune(keys: Keys, region: str, bucket: str, prefix: str, in_use: str, keep: int,
          endpoint: Optional[Endpoint] = None, timeout_s: int = 60) -> Pruned:
    """List the packages under ``prefix`` (``ListObjects``, 1000 a page, 100 pages at most) and delete
    (``DeleteObject``) those :func:`prune_plan` does not keep. The prefix is one stack's: another
    cluster's stack in the same bucket keeps its own packages."""
    import oss2

    client, url = _client(keys, region, bucket, endpoint, timeout_s)
    objects, marker = [], ""
    try:
        for _page in range(100):
            result = client.list_objects(prefix=prefix, marker=marker, max_keys=1000)
            objects += [(int(o.last_modified or 0), o.key) for o in result.object_list
                        if o.key.endswith(".zip") and "/" not in o.key[len(prefix):]]
            if not result.is_truncated or not result.next_marker:
                break
            marker = result.next_marker
        plan = prune_plan(objects, in_use, keep)
        for key in plan.deleted:
            client.delete_object(key)
    except oss2.exceptions.RequestError as exc:
        raise _unreached(url, exc) from None
    except oss2.exceptions.OssError as exc:
        raise _refused("cannot prune the old packages in oss://%s/%s" % (bucket, prefix), exc) from None
    return plan
