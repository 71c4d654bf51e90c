"""Calls to Alibaba Cloud RPC APIs (ECS, Auto Scaling) through the real ``aliyun-python-sdk-core``:
``AcsClient`` + ``CommonRequest``, HMAC-SHA1 signed, STS credentials (the token goes in SecurityToken).
Versions are the ones of the official Tea SDKs' models (ECS 2014-05-26 ``alibabacloud_ecs20140526``, Auto
Scaling 2022-02-22 ``alibabacloud_ess20220222``); tests/contract checks every request the test suite sends
against those models (parameter names, list encodings, value types, required and deprecated parameters).

Retries are ours, not the SDK's (its retry table does not cover these APIs): throttling, 5xx and
connection errors are retried with bounded, jittered exponential backoff; anything else is raised at once
as :class:`ApiError` with the service's code. Nothing here logs parameters, so credentials and command
content never reach a log.
"""

import json
import logging
import random
import re
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, Mapping, Optional

from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException
from aliyunsdkcore.auth.credentials import AccessKeyCredential, StsTokenCredential
from aliyunsdkcore.client import AcsClient
from aliyunsdkcore.request import CommonRequest

from functions.base import deadline
from functions.base.deadline import Guard, answer_too_large, urllib3_guarded
from functions.base.settings import Credentials, Endpoint
from functions.base.textsafe import one_line
from node_bootstrap.outside import OutsideDataError, loads

log = logging.getLogger(__name__)
# The core SDK logs every request's parameters at DEBUG, the STS SecurityToken among them, and its HTTP
# layer can dump headers; it also logs each error it returns at ERROR, retried throttling included. Our
# own lines say what happened (without parameters), so the SDK's are silenced whatever the root level is
# (tests/delivery checks that no secret reaches a log).
for _name in ("aliyunsdkcore", "aliyunsdkcore.client", "aliyunsdkcore.http.http_response"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)

ECS_VERSION = "2014-05-26"
ESS_VERSION = "2022-02-22"  # the current Auto Scaling API (2014-08-28 is the legacy one)
VPC_VERSION = "2016-04-28"  # doctor: DescribeVSwitchAttributes
# The largest answer of ours (100 invocation results with 24 KB of output each) is under 4 MB. The body is
# cut at the same bound as it is read (functions/base/deadline.py), not after the SDK has read it whole.
MAX_ANSWER_BYTES = deadline.MAX_ANSWER_BYTES
# IdempotentProcessing (403): a request carrying the ClientToken of one still being processed ("Try again
# later", the error tables of ECS's ClientToken APIs): a RunCommand retried after a read timeout meets it, and
# the next try gets the first request's invocation.
_RETRYABLE_CODES = ("Throttling", "ServiceUnavailable", "InternalError", "Unavailable", "IdempotentProcessing")


# A SignatureDoesNotMatch answer quotes the service's "string to sign": the whole canonical request, with
# the AccessKeyId and the STS SecurityToken in it (percent-encoded). It is cut off here, so no ApiError,
# log line or result ever carries it.
_STRING_TO_SIGN = re.compile(r"\s*\S*\s*string\s*to\s*sign\b.*", re.IGNORECASE | re.DOTALL)


# A connection error's text quotes the request URL, whose query string holds the SecurityToken and the
# signature: the query is cut off too.
_URL_QUERY = re.compile(r"\?[^\s'\")]*")


def clean_message(message: str) -> str:
    """A service's error message without any string to sign or request query string it quotes, on one
    line, at most 200 chars."""
    text = _STRING_TO_SIGN.sub(" (the server's string to sign is withheld)", str(message or ""))
    text = _URL_QUERY.sub("?(query withheld)", text)
    return one_line(text, 200)


class ApiError(RuntimeError):
    """A cloud API call failed for good. ``code`` is the service's error code (or SDK.HttpError)."""

    def __init__(self, action: str, code: str, message: str, retryable: bool = False):
        super().__init__("%s failed: %s: %s" % (action, code, clean_message(message)))
        self.action, self.code, self.retryable = action, code, retryable


def resolve_endpoint(product: str, region: str, override: Optional[Endpoint] = None,
                     network: str = "public") -> Endpoint:
    """The endpoint of an RPC product (``ecs``, ``ess``...) in ``region``: :func:`functions.base.endpoints.resolve`
    (an override, else the VPC endpoint or the one the product's Tea SDK resolves), as an :class:`ApiError`
    when it cannot be named. No location-service lookup: that would be a network call of its own."""
    from functions.base.endpoints import EndpointError, resolve

    try:
        return resolve(product, region, override, network)
    except EndpointError as exc:
        raise ApiError(product, "NoRegion" if not region else "BadEndpoint", str(exc)) from None


def retryable(exc: Exception) -> bool:
    if isinstance(exc, ServerException):
        code = exc.get_error_code() or ""
        return (exc.get_http_status() or 0) >= 500 or code.startswith(_RETRYABLE_CODES)
    if isinstance(exc, ClientException):  # connection refused, reset, read timeout
        return exc.get_error_code() in ("SDK.HttpError", "SDK.ServerUnreachable")
    return False


class Backoff:
    """Bounded exponential backoff with full jitter. ``sleep`` is injectable so tests stay fast."""

    def __init__(self, attempts: int = 5, base_s: float = 0.2, cap_s: float = 5.0,
                 sleep: Callable[[float], None] = time.sleep):
        self.attempts, self.base_s, self.cap_s, self.sleep = max(1, attempts), base_s, cap_s, sleep

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.cap_s, self.base_s * (2 ** attempt)))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class RpcClient:
    """One product's RPC API (``ecs`` or ``ess``) at one endpoint, thread-safe."""

    def __init__(self, product: str, version: str, region: str, credentials: Optional[Credentials],
                 endpoint: Optional[Endpoint] = None, timeout_s: int = 10, backoff: Optional[Backoff] = None):
        if credentials is None:
            raise ApiError(product, "NoCredentials", "no access key: set ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET "
                           "(the function role sets them)")
        self.product, self.version, self.region = product, version, region
        self.endpoint = resolve_endpoint(product, region, endpoint)
        if credentials.security_token:
            cred: Any = StsTokenCredential(credentials.access_key_id, credentials.access_key_secret,
                                           credentials.security_token)
        else:
            cred = AccessKeyCredential(credentials.access_key_id, credentials.access_key_secret)
        # auto_retry=False: retrying is decided here, where throttling and 5xx are known to be safe to retry.
        self._client = AcsClient(region_id=region, credential=cred, auto_retry=False, timeout=timeout_s,
                                 connect_timeout=min(timeout_s, 5), pool_size=64)
        self.timeout_s = timeout_s
        # the core SDK calls through its own vendored urllib3: let each attempt's Guard reach its sockets
        from aliyunsdkcore.vendored.requests.packages import urllib3

        urllib3_guarded(urllib3)
        self.backoff = backoff or Backoff()
        self.calls: Counter = Counter()  # per action, attempts included (benchmarks read it)
        self._lock = threading.Lock()

    def call(self, action: str, params: Mapping[str, Any]) -> Dict[str, Any]:
        request = CommonRequest(domain=self.endpoint.host, version=self.version, action_name=action)
        request.set_method("POST")
        request.set_protocol_type(self.endpoint.protocol)
        # POST form body, not the query string: a RunCommand carries up to 24 KB of script and 100 ids.
        for key, value in params.items():
            if value is not None:
                request.add_body_params(key, _text(value))
        for attempt in range(self.backoff.attempts):
            with self._lock:
                self.calls[action] += 1
            guard = Guard(self.timeout_s)  # the whole attempt: the SDK's timeout restarts at every byte read
            try:
                with guard:
                    body = self._client.do_action_with_exception(request)
                answer = loads(body, "the %s answer" % action, MAX_ANSWER_BYTES)  # the reader rule (outside.py)
                if not isinstance(answer, dict):  # every caller reads fields of it: a list is one failed call
                    raise OutsideDataError("the %s answer is a JSON %s, not an object" % (action, type(answer).__name__))
                return answer
            except Exception as exc:  # the SDK also raises plain errors on odd answers (IndexError...)
                too_large = answer_too_large(exc)
                if too_large is not None:  # cut off as it was read: the next try would read the same
                    raise ApiError(action, "AnswerTooLarge", str(too_large)) from None
                if isinstance(exc, OutsideDataError) and not guard.fired:  # a whole answer the reader rule
                    raise ApiError(action, "BadAnswer", str(exc)) from None  # refuses: the next would be the same
                if guard.fired and not isinstance(exc, ServerException):  # cut at the attempt's bound
                    exc = ClientException("SDK.HttpError", "no complete answer within %ds (whole-call bound)" % self.timeout_s)
                if not isinstance(exc, (ServerException, ClientException)):
                    raise ApiError(action, "SDK.Unexpected", "%s: %s" % (type(exc).__name__, exc)) from None
                code = exc.get_error_code() or type(exc).__name__
                message = exc.get_error_msg() or ""
                if not retryable(exc) or attempt + 1 == self.backoff.attempts:
                    raise ApiError(action, code, message, retryable(exc)) from None
                log.warning("%s: %s, retrying (attempt %d of %d)", action, code, attempt + 2,
                            self.backoff.attempts)
                self.backoff.sleep(self.backoff.delay(attempt))
        raise AssertionError("unreachable")
