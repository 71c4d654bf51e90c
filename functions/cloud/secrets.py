"""Secrets read at run time from KMS Secrets Manager (``GetSecretValue``, API 2016-01-20) through the
official SDK ``alibabacloud_kms20160120``.

The environment holds only a secret's *name*; the value is fetched with the function role's credentials
the first time it is needed and cached for the life of the FC instance (a warm instance does not ask
again; a new version of the secret is picked up by the next instance). Every value fetched is registered
with the log redactor (:func:`functions.base.logs.register_secret`) before it is returned, so it is masked in
every log line, result and command-line output from then on. Nothing here logs the value, the request
or the SDK's answer; an error names the secret and the service's code only.

RAM: ``kms:GetSecretValue`` on ``acs:kms:<region>:<account>:secret/<name>`` (template.yml grants exactly
that); a secret encrypted with a customer master key also needs ``kms:Decrypt`` on that key.
"""

import threading
from typing import Dict, Optional, Tuple

from functions.base.logs import register_secret
from functions.base.settings import Credentials, Endpoint

SECRET_ACTION = "kms:GetSecretValue"  # what template.yml must grant, on the secret's ARN only
_CACHE: Dict[Tuple[str, str, str], str] = {}
_LOCK = threading.Lock()


class SecretError(RuntimeError):
    """A secret could not be read. One line naming the secret and the reason; never the value."""

    def __init__(self, name: str, code: str, message: str, retryable: bool = False):
        from functions.cloud.rpc import clean_message

        super().__init__("cannot read secret %r from KMS: %s: %s" % (name, code, clean_message(message)))
        self.code, self.retryable = code, retryable


def _client(region: str, credentials: Credentials, endpoint: Optional[Endpoint], timeout_s: int):
    from alibabacloud_kms20160120.client import Client
    from alibabacloud_tea_openapi import utils_models as openapi_models

    from functions.base.endpoints import resolve

    endpoint = resolve("kms", region, endpoint)  # the override, else the KMS SDK's own kms.<region>.aliyuncs.com
    config = openapi_models.Config(
        access_key_id=credentials.access_key_id, access_key_secret=credentials.access_key_secret,
        security_token=credentials.security_token or None, region_id=region,
        endpoint=endpoint.host, protocol=endpoint.protocol,
        read_timeout=timeout_s * 1000, connect_timeout=timeout_s * 1000)
    return Client(config)


def get_secret(name: str, region: str, credentials: Optional[Credentials], endpoint: Optional[Endpoint] = None,
               timeout_s: int = 10) -> str:
    """The current value (``ACSCurrent``) of secret ``name``; cached per (region, endpoint, name)."""
    key = (region, endpoint.host if endpoint else "", name)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    if credentials is None:
        raise SecretError(name, "NoCredentials", "the function role's credentials are missing")
    if not region and endpoint is None:
        raise SecretError(name, "NoRegion", "set ACK_MIG_REGION (FC sets FC_REGION)")
    from alibabacloud_kms20160120 import models as kms_models
    from darabonba.runtime import RuntimeOptions

    import urllib3  # the Tea SDK calls through requests: let the call's Guard reach its sockets

    from functions.base.deadline import Guard, answer_too_large, urllib3_guarded

    urllib3_guarded(urllib3)
    guard = Guard(timeout_s)  # the whole call: the SDK's read timeout restarts at every byte read
    try:
        client = _client(region, credentials, endpoint, timeout_s)
        with guard:
            answer = client.get_secret_value_with_options(
                kms_models.GetSecretValueRequest(secret_name=name, version_stage="ACSCurrent"),
                RuntimeOptions(read_timeout=timeout_s * 1000, connect_timeout=timeout_s * 1000, autoretry=False))
    except Exception as exc:  # noqa: BLE001 - the Tea SDKs raise their own exception types, and plain ones
        if guard.fired:
            raise SecretError(name, "Timeout", "no complete answer within %ds" % timeout_s, True) from None
        too_large = answer_too_large(exc)
        if too_large is not None:  # cut off as it was read: the next try would read the same
            raise SecretError(name, "AnswerTooLarge", str(too_large)) from None
        code = str(getattr(exc, "code", "") or type(exc).__name__)
        status = getattr(exc, "statusCode", None) or (getattr(exc, "data", None) or {}).get("statusCode", 0)
        message = str(getattr(exc, "message", "") or "")
        # KMS's own transient codes: over the QPS quota it answers 429 Rejected.Throttling (help.aliyun.com
        # knowledge_detail/444042), beside ServiceUnavailableTemporary and InternalFailure (5xx); the
        # gateway's Throttling.* and ServiceUnavailable as the other APIs answer them.
        retryable = code.startswith(("Throttling", "Rejected.Throttling", "ServiceUnavailable", "InternalError",
                                     "InternalFailure")) or \
            (isinstance(status, int) and (status == 429 or status >= 500)) or not getattr(exc, "code", None)
        raise SecretError(name, code, message, retryable) from None
    body = answer.body
    value = getattr(body, "secret_data", None) if body is not None else None
    if not isinstance(value, str) or not value:
        raise SecretError(name, "EmptySecret", "the answer carries no SecretData")
    if getattr(body, "secret_data_type", "text") not in (None, "", "text"):
        raise SecretError(name, "BinarySecret", "SecretDataType is %s; store the key as a text secret"
                          % str(body.secret_data_type)[:20])
    register_secret(value)
    with _LOCK:
        _CACHE[key] = value
    return value


def forget_all() -> None:
    """Drop every cached value (tests; a real instance keeps them for its life)."""
    with _LOCK:
        _CACHE.clear()
