"""A loopback emulator of the OSS object API for the real ``oss2`` SDK (``ack-mig-hook deploy`` uploads
the code package with it; point it here with ``ACK_MIG_OSS_ENDPOINT=http://127.0.0.1:PORT``).

oss2 addresses an IP endpoint path-style (``/<bucket>/<key>``), which is what this server takes. Every rule
below names its source; a rule we could not confirm is marked so.

Authentication, as OSS serves an account created after 2025-03-01 (or a bucket created after 2025-09-01):

* **V1 is refused.** "From March 1, 2025, the V1 signature algorithm of OSS is no longer available to new
  customers with new UIDs. From September 1, 2025 ... no longer available for new buckets" (OSS, "Guidelines
  for upgrading V1 signatures to V4 signatures"); the answer is a 403 with EC ``0002-00000080`` (OSS error
  center, 0002-00000080: "OSS returns a 403 error when you call an API operation signed with a V1
  signature"). ``accept_v1 = True`` models an old account that still may use it.
* **V4 is recomputed here**, written from OSS "Include a V4 signature in the header (recommended)", not from
  the SDK: ``Authorization: OSS4-HMAC-SHA256 Credential=<AccessKeyId>/<SignDate>/<SignRegion>/oss/
  aliyun_v4_request[, AdditionalHeaders=<h1;h2>], Signature=<hex>``. Canonical request = method, the
  canonical URI (``/<bucket>/<key>``, ``/<bucket>/`` for a bucket, URI-encoded, ``/`` kept), the canonical
  query (names and values URI-encoded, sorted, ``name`` alone when the value is empty), the canonical
  headers (lower-case ``name:value`` lines of every ``x-oss-*`` header, ``content-type``, ``content-md5``
  and the additional headers, sorted), the additional header names, and the hashed payload, joined by
  newlines. String to sign = ``OSS4-HMAC-SHA256``, ``x-oss-date``, the scope and the SHA-256 of the
  canonical request. Signing key = HMAC-SHA256 chain from ``"aliyun_v4" + secret`` over the date, the
  region, ``oss`` and ``aliyun_v4_request``.
* The Credential must end ``/oss/aliyun_v4_request`` (EC 0002-00000213) and carry the bucket's region, the
  region id without ``oss-`` (EC 0002-00000226, 0002-00000228: "the region in the signature does not match
  the bucket's actual region"); ``x-oss-content-sha256`` must be ``UNSIGNED-PAYLOAD`` (EC 0002-00000214);
  the sign date is the date of ``x-oss-date``, which may be at most 15 minutes from the server's clock (the
  15-minute rule of the OSS signature docs, ``RequestTimeTooSkewed``). The HTTP status and ``Code`` of the
  0002-002xx answers are not given on those pages (unconfirmed): 403 ``SignatureDoesNotMatch`` /
  ``AccessDenied`` here.
* The STS token comes as ``x-oss-security-token`` (an ``x-oss-`` header, so it is signed).

Data:

* ``PutObject`` with a ``Content-MD5`` that does not match the body is ``InvalidDigest`` (OSS PutObject
  reference). OSS answers every upload with ``x-oss-hash-crc64ecma``, the object's CRC-64/ECMA-182 in
  decimal (OSS "data verification"; the same CRC-64 oss2's ``Crc64`` computes: reflected polynomial
  0x42F0E1EBA9EA3693, all-ones initial value and final XOR, check value 0x995DC9BBDF1939FA for
  ``123456789``), written here independently of oss2.
* Buckets have an owner and an ACL: ``GetBucketInfo`` (``GET /<bucket>?bucketInfo``) answers
  ``Bucket/Owner/ID`` and ``Bucket/AccessControlList/Grant`` (OSS GetBucketInfo reference; oss2's parser reads
  the same paths). ``PUT /<bucket>`` creates one owned by ``account_id``; a name another account holds
  (``foreign_buckets[name] = (owner, acl, readable)``) is ``BucketAlreadyExists`` (409), and its
  ``GetBucketInfo`` is 403 ``AccessDenied`` unless its owner's bucket policy lets anyone read it
  (``readable``), as OSS authorizes a request on another account's bucket only through that policy.

* **Object metadata**: ``x-oss-meta-*`` headers of a ``PutObject`` are kept with the object and answered,
  names lower-cased, by ``HeadObject`` and ``GetObject`` (OSS "Manage object metadata": user metadata is
  sent as ``x-oss-meta-*`` headers and returned the same way; OSS stores the names in lower case).
* **Region**: each bucket is in a region (``bucket_regions``, default the emulator's); ``GetBucketInfo``
  answers ``Location`` ``oss-<region>`` (OSS GetBucketInfo reference). A request signed for another
  region is refused 403 ``AccessDenied`` naming the bucket's own endpoint in ``<Endpoint>`` ("The bucket you
  are attempting to access must be addressed using the specified endpoint", the answer ossutil users report
  for a bucket addressed through the wrong region; unconfirmed on an OSS reference page).
* **GetBucketAcl** (``GET /<bucket>?acl``): ``AccessControlPolicy/Owner/ID`` and
  ``AccessControlPolicy/AccessControlList/Grant`` (OSS GetBucketAcl reference; oss2's
  ``parse_get_bucket_acl`` reads ``AccessControlList/Grant``).
* **GetBucketPolicy** (``GET /<bucket>?policy``): the policy document as JSON text (``policies``), or 404
  ``NoSuchBucketPolicy`` when the bucket has none (OSS GetBucketPolicy reference; oss2's
  ``NoSuchBucketPolicy``). The document's form is OSS's ``{"Version": "1", "Statement": [{"Effect",
  "Action", "Principal", "Resource"}]}`` (OSS "Authorization syntax and elements").

* **ListObjects** (``GET /<bucket>/?prefix=&marker=&max-keys=&encoding-type=url``): the keys under the
  prefix in lexicographic order after ``marker``, at most ``max-keys`` (default 100, at most 1000), with
  ``IsTruncated`` and ``NextMarker``; ``LastModified`` is when the object was put (ISO 8601), keys URL-encoded
  when ``encoding-type=url`` is asked, with ``EncodingType`` saying so (OSS ListObjects (GetBucket) reference;
  oss2's ``parse_list_objects`` reads these elements).
* **RAM actions** (``actions``): the action RAM authorizes each request by, as OSS's "RAM policy" table of
  API operations names them: HeadObject and GetObject are both ``oss:GetObject``; GetBucketInfo, PutBucket,
  GetBucketAcl, GetBucketPolicy, ListObjects, PutObject and DeleteObject are their own names. The page test
  of docs/first-deployment.md checks the deployer's policy against them.

Errors are OSS's XML with ``x-oss-request-id`` (and ``EC`` where a page names one).
"""

import base64
import calendar
import functools
import hashlib
import hmac
import json
import re
import threading
import time
import uuid
from email.utils import formatdate
from typing import Callable, Dict, List, Optional, Set, Tuple
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from xml.sax.saxutils import escape as xml_escape

from tests.support.loopback import Answer as LoopAnswer, LoopbackServer

ALGORITHM = "OSS4-HMAC-SHA256"
SKEW_S = 15 * 60
_ERR = Tuple[int, bytes, Dict[str, str]]


def _crc64_table() -> List[int]:
    poly = 0xC96C5795D7870F42  # 0x42F0E1EBA9EA3693, bit-reversed
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC64 = _crc64_table()


def crc64_ecma(data: bytes) -> int:
    """CRC-64/ECMA-182 as OSS writes ``x-oss-hash-crc64ecma`` (reflected, init and xorout all ones)."""
    return _crc64_ecma(bytes(data))


@functools.lru_cache(maxsize=32)
def _crc64_ecma(data: bytes) -> int:
    # A byte at a time in Python: ~0.1 s a package, and the emulators check each package two or three times
    # (its upload, its reads, ROS's code check), so each content is computed once.
    crc = 0xFFFFFFFFFFFFFFFF
    for byte in data:
        crc = _CRC64[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFFFFFFFFFF


def uri_encode(text: str, keep_slash: bool) -> str:
    """RFC 3986 unreserved characters kept, everything else %XX of its UTF-8 bytes (V4 doc)."""
    out = []
    for byte in text.encode("utf-8"):
        c = chr(byte)
        if c.isascii() and (c.isalnum() or c in "-_.~") or (keep_slash and c == "/"):
            out.append(c)
        else:
            out.append("%%%02X" % byte)
    return "".join(out)


def v4_signature(secret: str, method: str, bucket: str, key: str, query: Dict[str, str],
                 headers: Dict[str, str], additional: List[str], date_time: str, region: str) -> str:
    uri = uri_encode("/%s/%s" % (bucket, key) if bucket else "/", keep_slash=True)
    pairs = sorted((uri_encode(k, False), uri_encode(v, False)) for k, v in query.items())
    canonical_query = "&".join("%s=%s" % (k, v) if v else k for k, v in pairs)
    signed = sorted(k for k in headers if k.startswith("x-oss-") or k in ("content-type", "content-md5")
                    or k in additional)
    canonical_headers = "".join("%s:%s\n" % (k, headers[k].strip()) for k in signed)
    canonical = "\n".join([method, uri, canonical_query, canonical_headers, ";".join(sorted(additional)),
                           headers.get("x-oss-content-sha256", "")])
    scope = "%s/%s/oss/aliyun_v4_request" % (date_time[:8], region)
    to_sign = "\n".join([ALGORITHM, date_time, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
    signing = ("aliyun_v4" + secret).encode("utf-8")
    for part in (date_time[:8], region, "oss", "aliyun_v4_request"):
        signing = hmac.new(signing, part.encode("utf-8"), hashlib.sha256).digest()
    return hmac.new(signing, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


class OssEmulator(LoopbackServer):
    def __init__(self, access_key_id: str = "LTAItestkey", secret: str = "test-secret-value",
                 token: Optional[str] = "sts-token-value", region: str = "cn-beijing",
                 account_id: str = "1234567890123456", clock: Callable[[], float] = time.time) -> None:
        self.access_key_id, self.secret, self.token, self.region = access_key_id, secret, token, region
        self.account_id, self.clock = account_id, clock
        self.accept_v1 = False
        self.buckets: Dict[str, Dict[str, bytes]] = {}
        self.meta: Dict[Tuple[str, str], Dict[str, str]] = {}  # (bucket, key) -> x-oss-meta-* headers
        self.acls: Dict[str, str] = {}
        self.bucket_regions: Dict[str, str] = {}  # bucket -> region (default: the emulator's)
        self.policies: Dict[str, object] = {}  # bucket -> its policy document (GetBucketPolicy)
        self.foreign_buckets: Dict[str, Tuple[str, str, bool]] = {}
        self.corrupt_crc: Set[str] = set()  # object keys whose answer names another CRC-64 (a broken store)
        self.requests: List[Tuple[str, str]] = []
        self.actions: List[str] = []  # the RAM action of each signed request, in order
        self.modified: Dict[Tuple[str, str], float] = {}  # (bucket, key) -> when it was put
        self.rejected: List[str] = []
        self._lock = threading.Lock()

    def respond(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> LoopAnswer:
        status, data, extra = self.handle(method, path, headers, body)
        return status, data, dict(extra, **{"x-oss-request-id": uuid.uuid4().hex.upper()[:24]})

    @staticmethod
    def _error(status: int, code: str, message: str, ec: str = "", extra: str = "") -> _ERR:
        xml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message>"
               "<RequestId>%s</RequestId><HostId>127.0.0.1</HostId>%s%s</Error>"
               % (code, message, uuid.uuid4().hex, extra, "<EC>%s</EC>" % ec if ec else ""))
        return status, xml.encode("utf-8"), {"content-type": "application/xml"}

    def _verify(self, verb: str, headers: Dict[str, str], bucket: str, key: str,
                query: Dict[str, str]) -> Optional[Tuple[int, str, str, str]]:
        """None, or (status, code, EC, message)."""
        auth = headers.get("authorization", "")
        if auth.startswith("OSS ") and not self.accept_v1:
            return 403, "AccessDenied", "0002-00000080", "V1 signatures are no longer accepted; use V4"
        if auth.startswith("OSS "):
            return 403, "AccessDenied", "", "this emulator checks V4 signatures only"
        if not auth.startswith(ALGORITHM + " "):
            return 403, "AccessDenied", "0002-00000202", "the Authorization header is not %s" % ALGORITHM
        fields = {}
        for part in auth[len(ALGORITHM) + 1:].split(","):
            name, sep, value = part.strip().partition("=")
            if not sep:
                return 403, "AccessDenied", "0002-00000203", "malformed Authorization field %r" % part[:40]
            fields[name] = value
        if "Credential" not in fields or "Signature" not in fields:
            return 403, "AccessDenied", "0002-00000205", "Credential and Signature are required"
        credential = fields["Credential"].split("/")
        if len(credential) != 5 or credential[3:] != ["oss", "aliyun_v4_request"]:
            return 403, "AccessDenied", "0002-00000213", "Credential must be <id>/<date>/<region>/oss/aliyun_v4_request"
        key_id, sign_date, sign_region = credential[:3]
        if key_id != self.access_key_id:
            return 403, "InvalidAccessKeyId", "", "unknown access key"
        if sign_region != self.region and sign_region != self.bucket_regions.get(bucket):
            return 403, "SignatureDoesNotMatch", "0002-00000228", \
                "the region in the signature (%s) is not the bucket's (%s)" % (sign_region, self.region)
        if headers.get("x-oss-content-sha256") != "UNSIGNED-PAYLOAD":
            return 403, "SignatureDoesNotMatch", "0002-00000214", "x-oss-content-sha256 must be UNSIGNED-PAYLOAD"
        date_time = headers.get("x-oss-date", "")
        if not re.fullmatch(r"\d{8}T\d{6}Z", date_time) or date_time[:8] != sign_date:
            return 403, "AccessDenied", "", "x-oss-date is missing or not the Credential's date"
        when = calendar.timegm(time.strptime(date_time, "%Y%m%dT%H%M%SZ"))
        if abs(when - self.clock()) > SKEW_S:
            return 403, "RequestTimeTooSkewed", "", "x-oss-date is more than 15 minutes from the server's time"
        if self.token is not None and headers.get("x-oss-security-token") != self.token:
            return 403, "InvalidSecurityToken", "", "wrong or missing x-oss-security-token"
        additional = [h.strip().lower() for h in fields.get("AdditionalHeaders", "").split(";") if h.strip()]
        expected = v4_signature(self.secret, verb, bucket, key, query, headers, additional, date_time, sign_region)
        if not hmac.compare_digest(expected, fields["Signature"]):
            return 403, "SignatureDoesNotMatch", "", "the request signature does not match"
        return None

    def handle(self, verb: str, raw_path: str, headers: Dict[str, str], body: bytes) -> _ERR:
        split = urlsplit(raw_path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        bucket, _, key = unquote(split.path).lstrip("/").partition("/")
        with self._lock:
            self.requests.append((verb, split.path + ("?" + split.query if split.query else "")))
        with self._lock:
            self.actions.append(ram_action(verb, key, query))
        problem = self._verify(verb, headers, bucket, key, query)
        if problem:
            status, code, ec, message = problem
            with self._lock:
                self.rejected.append("%s%s: %s" % (code, " " + ec if ec else "", message))
            return self._error(status, code, message, ec)
        home = self.bucket_regions.get(bucket, self.region)
        if bucket and home != self.region and (bucket in self.buckets or bucket in self.foreign_buckets):
            return self._error(403, "AccessDenied", "The bucket you are attempting to access must be addressed "
                               "using the specified endpoint. Please send all future requests to this endpoint.",
                               extra="<Bucket>%s</Bucket><Endpoint>oss-%s.aliyuncs.com</Endpoint>" % (bucket, home))
        with self._lock:
            if not key:
                return self._bucket(verb, bucket, query, headers)
            if bucket in self.foreign_buckets:  # another account's: only its bucket policy could let us in
                return self._error(403, "AccessDenied", "You have no right to access this object.")
            objects = self.buckets.get(bucket)
            if objects is None:
                return self._error(404, "NoSuchBucket", "The specified bucket does not exist.")
            if verb == "PUT":
                md5 = headers.get("content-md5")
                if md5 and md5 != base64.b64encode(hashlib.md5(body).digest()).decode("ascii"):
                    return self._error(400, "InvalidDigest", "The Content-MD5 you specified is not valid.")
                objects[key] = body
                self.modified[(bucket, key)] = self.clock()
                self.meta[(bucket, key)] = {k: v for k, v in headers.items() if k.startswith("x-oss-meta-")}
                crc = crc64_ecma(body) ^ (1 if key in self.corrupt_crc else 0)
                return 200, b"", {"etag": '"%s"' % hashlib.md5(body).hexdigest().upper(),
                                  "x-oss-hash-crc64ecma": str(crc)}
            if verb == "DELETE":  # OSS DeleteObject answers 204 whether or not the object was there
                objects.pop(key, None)
                return 204, b"", {}
            if key not in objects:
                return self._error(404, "NoSuchKey", "The specified key does not exist.")
            data = objects[key]
            return 200, data, {**self.meta.get((bucket, key), {}),
                               "etag": '"%s"' % hashlib.md5(data).hexdigest().upper(),
                               "content-type": "application/octet-stream",
                               "x-oss-hash-crc64ecma": str(crc64_ecma(data)),
                               "last-modified": formatdate(self.modified.get((bucket, key), self.clock()),
                                                           usegmt=True)}

    def _bucket(self, verb: str, bucket: str, query: Dict[str, str], headers: Dict[str, str]) -> _ERR:
        foreign = self.foreign_buckets.get(bucket)
        if verb == "PUT":
            if foreign:
                return self._error(409, "BucketAlreadyExists", "The requested bucket name is not available.")
            if bucket not in self.buckets:
                self.buckets[bucket] = {}
                self.acls[bucket] = headers.get("x-oss-acl", "private")  # PutBucket: x-oss-acl, default private
            return 200, b"", {}
        if verb == "GET" and ("acl" in query or "policy" in query):
            if foreign:
                return self._error(403, "AccessDenied", "You have no right to access this bucket.")
            if bucket not in self.buckets:
                return self._error(404, "NoSuchBucket", "The specified bucket does not exist.")
            if "policy" in query:
                if bucket not in self.policies:
                    return self._error(404, "NoSuchBucketPolicy", "The bucket policy does not exist.")
                return 200, json.dumps(self.policies[bucket]).encode("utf-8"), {"content-type": "application/json"}
            xml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<AccessControlPolicy><Owner><ID>%s</ID>"
                   "<DisplayName>%s</DisplayName></Owner><AccessControlList><Grant>%s</Grant></AccessControlList>"
                   "</AccessControlPolicy>" % (self.account_id, self.account_id, self.acls.get(bucket, "private")))
            return 200, xml.encode("utf-8"), {"content-type": "application/xml"}
        if verb == "GET" and "bucketInfo" in query:
            if foreign:
                owner, acl, readable = foreign
                if not readable:
                    return self._error(403, "AccessDenied", "You have no right to access this bucket.")
            elif bucket in self.buckets:
                owner, acl = self.account_id, self.acls.get(bucket, "private")
            else:
                return self._error(404, "NoSuchBucket", "The specified bucket does not exist.")
            xml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<BucketInfo><Bucket><Name>%s</Name>"
                   "<Location>oss-%s</Location><CreationDate>2026-01-01T00:00:00.000Z</CreationDate>"
                   "<StorageClass>Standard</StorageClass><ExtranetEndpoint>oss-%s.aliyuncs.com</ExtranetEndpoint>"
                   "<IntranetEndpoint>oss-%s-internal.aliyuncs.com</IntranetEndpoint>"
                   "<Owner><ID>%s</ID><DisplayName>%s</DisplayName></Owner><AccessControlList><Grant>%s</Grant>"
                   "</AccessControlList></Bucket></BucketInfo>"
                   % (bucket, *([self.bucket_regions.get(bucket, self.region)] * 3), owner, owner, acl))
            return 200, xml.encode("utf-8"), {"content-type": "application/xml"}
        if verb == "GET" and not (set(query) - {"prefix", "marker", "max-keys", "delimiter", "encoding-type"}):
            return self._list(bucket, query)
        return self._error(400, "NotImplemented", "this emulator serves bucketInfo, acl, policy, create and list")

    def _list(self, bucket: str, query: Dict[str, str]) -> _ERR:
        if bucket in self.foreign_buckets:
            return self._error(403, "AccessDenied", "You have no right to access this bucket.")
        if bucket not in self.buckets:
            return self._error(404, "NoSuchBucket", "The specified bucket does not exist.")
        if query.get("delimiter"):
            return self._error(400, "NotImplemented", "this emulator lists without a delimiter only")
        try:
            limit = int(query.get("max-keys") or 100)
        except ValueError:
            limit = -1
        if not 1 <= limit <= 1000:
            return self._error(400, "InvalidArgument", "max-keys must be 1..1000")
        prefix, marker, encode = query.get("prefix", ""), query.get("marker", ""), query.get("encoding-type") == "url"
        keys = sorted(k for k in self.buckets[bucket] if k.startswith(prefix) and k > marker)
        page, truncated = keys[:limit], len(keys) > limit

        def text(value: str) -> str:
            return quote(value, safe="") if encode else xml_escape(value)

        contents = "".join(
            "<Contents><Key>%s</Key><LastModified>%s</LastModified><ETag>\"%s\"</ETag><Type>Normal</Type>"
            "<Size>%d</Size><StorageClass>Standard</StorageClass><Owner><ID>%s</ID><DisplayName>%s</DisplayName>"
            "</Owner></Contents>" % (text(k), time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(
                self.modified.get((bucket, k), 0))), hashlib.md5(self.buckets[bucket][k]).hexdigest().upper(),
                len(self.buckets[bucket][k]), self.account_id, self.account_id) for k in page)
        xml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult><Name>%s</Name><Prefix>%s</Prefix>"
               "<Marker>%s</Marker><MaxKeys>%d</MaxKeys><Delimiter></Delimiter>%s<IsTruncated>%s</IsTruncated>%s%s"
               "</ListBucketResult>" % (bucket, text(prefix), text(marker), limit,
                                        "<EncodingType>url</EncodingType>" if encode else "",
                                        "true" if truncated else "false",
                                        "<NextMarker>%s</NextMarker>" % text(page[-1]) if truncated else "", contents))
        return 200, xml.encode("utf-8"), {"content-type": "application/xml"}


def ram_action(verb: str, key: str, query: Dict[str, str]) -> str:
    """The RAM action OSS authorizes a request by (see the module's docstring)."""
    if key:
        return {"PUT": "oss:PutObject", "DELETE": "oss:DeleteObject"}.get(verb, "oss:GetObject")
    if verb == "PUT":
        return "oss:PutBucket"
    for name, action in (("bucketInfo", "oss:GetBucketInfo"), ("acl", "oss:GetBucketAcl"),
                         ("policy", "oss:GetBucketPolicy")):
        if name in query:
            return action
    return "oss:ListObjects"
