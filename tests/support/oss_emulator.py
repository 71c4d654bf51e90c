"""A loopback emulator of the OSS object API for the real ``oss2`` SDK (``ack-mig-hook deploy`` uploads
the code package with it; point it here with ``ACK_MIG_OSS_ENDPOINT=http://127.0.0.1:PORT``).

oss2 addresses an IP endpoint path-style (``/<bucket>/<key>``), which is what this server takes. Each
request's ``Authorization: OSS <AccessKeyId>:<Signature>`` is recomputed here as OSS documents the header
signature (V1): HMAC-SHA1 over ``VERB\\nContent-MD5\\nContent-Type\\nDate\\n`` + the ``x-oss-`` headers
(lower-case, sorted, ``name:value\\n``) + the canonical resource (``/bucket/key`` plus the signed
sub-resources, sorted). The STS token must come as ``x-oss-security-token``. A ``Content-MD5`` that does
not match the body is ``InvalidDigest``, as OSS answers. Errors are OSS's XML with ``x-oss-request-id``.

Operations: ``GET /<bucket>?bucketInfo``, ``PUT /<bucket>`` (create; ``BucketAlreadyExists`` when
another account owns the name: set ``foreign_buckets``), ``PUT/HEAD/GET/DELETE /<bucket>/<key>``.
"""

import base64
import hashlib
import hmac
import threading
import uuid
from email.utils import formatdate
from typing import Dict, List, Optional, Set, Tuple
from urllib.parse import parse_qsl, unquote, urlsplit
from tests.support.loopback import Answer as LoopAnswer, LoopbackServer

# Sub-resources that take part in the signature (OSS "CanonicalizedResource"); others are left out.
SIGNED_SUBRESOURCES = {"acl", "bucketInfo", "location", "uploads", "partNumber", "uploadId", "versionId",
                       "versioning", "stat", "tagging", "security-token"}


def oss_v1_signature(secret: str, verb: str, headers: Dict[str, str], resource: str) -> str:
    oss_headers = "".join("%s:%s\n" % (k, headers[k].strip()) for k in sorted(headers) if k.startswith("x-oss-"))
    to_sign = "\n".join([verb, headers.get("content-md5", ""), headers.get("content-type", ""),
                         headers.get("date", "")]) + "\n" + oss_headers + resource
    digest = hmac.new(secret.encode("utf-8"), to_sign.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


class OssEmulator(LoopbackServer):
    def __init__(self, access_key_id: str = "LTAItestkey", secret: str = "test-secret-value",
                 token: Optional[str] = "sts-token-value", region: str = "cn-beijing") -> None:
        self.access_key_id, self.secret, self.token, self.region = access_key_id, secret, token, region
        self.buckets: Dict[str, Dict[str, bytes]] = {}
        self.foreign_buckets: Set[str] = set()
        self.requests: List[Tuple[str, str]] = []
        self.rejected: List[str] = []
        self._lock = threading.Lock()

    def respond(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> LoopAnswer:
        status, data, extra = self.handle(method, path, headers, body)
        return status, data, dict(extra, **{"x-oss-request-id": uuid.uuid4().hex.upper()[:24]})

    @staticmethod
    def _error(status: int, code: str, message: str) -> Tuple[int, bytes, Dict[str, str]]:
        xml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message>"
               "<RequestId>%s</RequestId><HostId>127.0.0.1</HostId></Error>" % (code, message, uuid.uuid4().hex))
        return status, xml.encode("utf-8"), {"content-type": "application/xml"}

    def _verify(self, verb: str, headers: Dict[str, str], bucket: str, key: str,
                query: Dict[str, str]) -> Optional[str]:
        auth = headers.get("authorization", "")
        if not auth.startswith("OSS ") or ":" not in auth:
            return "AccessDenied: no OSS signature"
        key_id, _, signature = auth[4:].rpartition(":")
        if key_id != self.access_key_id:
            return "InvalidAccessKeyId: unknown access key"
        if self.token is not None and headers.get("x-oss-security-token") != self.token:
            return "InvalidSecurityToken: wrong or missing x-oss-security-token"
        sub = sorted(k for k in query if k in SIGNED_SUBRESOURCES)
        resource = "/%s/%s" % (bucket, key) if bucket else "/"
        if sub:
            resource += "?" + "&".join(k if query[k] == "" else "%s=%s" % (k, query[k]) for k in sub)
        expected = oss_v1_signature(self.secret, verb, headers, resource)
        if not hmac.compare_digest(expected, signature):
            return "SignatureDoesNotMatch: the request signature does not match"
        return None

    def handle(self, verb: str, raw_path: str, headers: Dict[str, str], body: bytes
               ) -> Tuple[int, bytes, Dict[str, str]]:
        split = urlsplit(raw_path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        bucket, _, key = unquote(split.path).lstrip("/").partition("/")
        with self._lock:
            self.requests.append((verb, split.path + ("?" + split.query if split.query else "")))
        problem = self._verify(verb, headers, bucket, key, query)
        if problem:
            with self._lock:
                self.rejected.append(problem)
            return self._error(403, problem.split(":")[0], problem)
        with self._lock:
            if not key:
                return self._bucket(verb, bucket, query)
            objects = self.buckets.get(bucket)
            if objects is None:
                return self._error(404, "NoSuchBucket", "The specified bucket does not exist.")
            if verb == "PUT":
                md5 = headers.get("content-md5")
                if md5 and md5 != base64.b64encode(hashlib.md5(body).digest()).decode("ascii"):
                    return self._error(400, "InvalidDigest", "The Content-MD5 you specified is not valid.")
                objects[key] = body
                return 200, b"", {"etag": '"%s"' % hashlib.md5(body).hexdigest().upper()}
            if verb == "DELETE":  # OSS DeleteObject answers 204 whether or not the object was there
                objects.pop(key, None)
                return 204, b"", {}
            if key not in objects:
                return self._error(404, "NoSuchKey", "The specified key does not exist.")
            data = objects[key]
            return 200, data, {"etag": '"%s"' % hashlib.md5(data).hexdigest().upper(),
                               "content-type": "application/octet-stream",
                               "last-modified": formatdate(usegmt=True)}

    def _bucket(self, verb: str, bucket: str, query: Dict[str, str]) -> Tuple[int, bytes, Dict[str, str]]:
        if verb == "PUT":
            if bucket in self.foreign_buckets:
                return self._error(409, "BucketAlreadyExists", "The requested bucket name is not available.")
            self.buckets.setdefault(bucket, {})
            return 200, b"", {}
        if verb == "GET" and "bucketInfo" in query:
            if bucket not in self.buckets:
                return self._error(404, "NoSuchBucket", "The specified bucket does not exist.")
            xml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<BucketInfo><Bucket><Name>%s</Name>"
                   "<Location>oss-%s</Location><CreationDate>2026-01-01T00:00:00.000Z</CreationDate>"
                   "<StorageClass>Standard</StorageClass><ExtranetEndpoint>oss-%s.aliyuncs.com</ExtranetEndpoint>"
                   "<IntranetEndpoint>oss-%s-internal.aliyuncs.com</IntranetEndpoint>"
                   "<Owner><ID>1</ID><DisplayName>1</DisplayName></Owner><AccessControlList><Grant>private</Grant>"
                   "</AccessControlList></Bucket></BucketInfo>" % (bucket, self.region, self.region, self.region))
            return 200, xml.encode("utf-8"), {"content-type": "application/xml"}
        return self._error(400, "NotImplemented", "this emulator serves bucketInfo and create only")
