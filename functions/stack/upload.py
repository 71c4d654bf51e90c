"""The code package to OSS: make sure the bucket exists (private), then put the object with its MD5 so
OSS refuses a corrupted upload (``InvalidDigest``). Official ``oss2`` SDK; endpoint
``oss-<region>.aliyuncs.com`` (OSS's documented public endpoint form) unless ``ACK_MIG_OSS_ENDPOINT``."""

import base64
import hashlib
from typing import Optional

from functions.endpoints import resolve, url_of
from functions.settings import Endpoint
from functions.stack.credentials import Keys


class UploadError(RuntimeError):
    exit_code = 1


def _describe(exc: BaseException) -> str:
    code = getattr(exc, "code", "") or type(exc).__name__
    message = " ".join(str(getattr(exc, "message", "") or "").split())[:200]
    return "%s%s" % (code, ": " + message if message else "")


def upload(keys: Keys, region: str, bucket: str, key: str, path: str, endpoint: Optional[Endpoint] = None,
           timeout_s: int = 60) -> str:
    """Returns ``oss://bucket/key``."""
    import oss2

    url = url_of(resolve("oss", region, endpoint))  # the override, else oss-<region>.aliyuncs.com
    auth = oss2.StsAuth(keys.access_key_id, keys.access_key_secret, keys.security_token) if keys.security_token \
        else oss2.Auth(keys.access_key_id, keys.access_key_secret)
    client = oss2.Bucket(auth, url, bucket, connect_timeout=timeout_s)
    try:
        client.get_bucket_info()
    except oss2.exceptions.NoSuchBucket:
        try:
            client.create_bucket(oss2.BUCKET_ACL_PRIVATE)
        except oss2.exceptions.OssError as exc:
            hint = " (bucket names are global: choose another with --bucket)" \
                if getattr(exc, "code", "") == "BucketAlreadyExists" else ""
            raise UploadError("cannot create OSS bucket %s: %s%s" % (bucket, _describe(exc), hint)) from None
    except oss2.exceptions.OssError as exc:
        raise UploadError("cannot read OSS bucket %s: %s" % (bucket, _describe(exc))) from None
    except oss2.exceptions.RequestError as exc:
        raise UploadError("cannot reach OSS at %s: %s" % (url, type(exc).__name__)) from None
    with open(path, "rb") as handle:
        data = handle.read()
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode("ascii")
    try:
        client.put_object(key, data, headers={"Content-MD5": md5, "Content-Type": "application/zip"})
    except (oss2.exceptions.OssError, oss2.exceptions.RequestError) as exc:
        raise UploadError("cannot upload %s to oss://%s/%s: %s" % (path, bucket, key, _describe(exc))) from None
    return "oss://%s/%s" % (bucket, key)
