"""A loopback emulator of KMS Secrets Manager's ``GetSecretValue`` (API 2016-01-20), for the real
``alibabacloud_kms20160120`` SDK to talk to over HTTP on 127.0.0.1 (``ACK_MIG_KMS_ENDPOINT=<endpoint>``).

How that SDK signs (checked in its source, alibabacloud_kms20160120 3.3.1 on alibabacloud_tea_openapi
0.4.6): ``Client.call_api`` sends every request through ``do_request``, signed ``ACS3-HMAC-SHA256`` (the
V3 signature, verified here with tests/support/cs_emulator.py ``acs3_signature``), unless the config asks
for ``signature_version='v4'``; then it goes through the ``alibabacloud_gateway_pop`` plug-in, signed
``ACS4-HMAC-SHA256``: the same canonical request, string to sign ``ACS4-HMAC-SHA256\n<hex sha256 of
it>``, HMAC-SHA256 with a key derived ``"aliyun_v4" + secret`` -> date (YYYYMMDD) -> region -> product
(``Kms``) -> ``"aliyun_v4_request"`` and ``Credential=<ak>/<date>/<region>/Kms/aliyun_v4_request``
(alibabacloud_gateway_pop/client.py: get_signingkey, get_signature, get_authorization). Both are
recomputed here, independently, from what arrives on the wire.

The action is RPC style: ``POST /`` with ``x-acs-action: GetSecretValue``, ``x-acs-version: 2016-01-20``,
``SecretName`` (a name or the secret's ARN) and ``VersionStage`` (default ``ACSCurrent``) in the query.
Answer fields as the API reference names them: ``SecretName``, ``VersionId``, ``SecretData``,
``SecretDataType`` (``text`` or ``binary``), ``VersionStages``, ``CreateTime``, ``RequestId``. An unknown
secret is ``404 Forbidden.ResourceNotFound``; a wrong signature ``400 SignatureDoesNotMatch``.

Faults: :meth:`KmsEmulator.fail_next` answers with an API error (a status and a code);
:meth:`KmsEmulator.throttle_next` as KMS answers a caller over its QPS quota: HTTP 429, ``Rejected.Throttling``,
``QPS Limit Exceeded`` (Alibaba Cloud's KMS knowledge base, help.aliyun.com/knowledge_detail/444042; the code
is the one ACK's own ack-secret-manager and the KMS client SDKs back off on, beside ``ServiceUnavailableTemporary``
and ``InternalFailure``: it does not start with ``Throttling`` as the RPC APIs' codes do); :meth:`KmsEmulator.drop_next`
answers nothing at all, the way a network failure looks to the SDK: ``reset`` aborts the TCP connection
(SO_LINGER 0, so the kernel sends RST: "connection reset by peer"), ``close`` closes it cleanly before
any status line (the SDK's HTTP client reports the server disconnected), ``stall`` keeps it open and
silent past the client's read timeout. Each request is read whole first, so the emulator has counted it
(``calls``) and the SDK has sent it: what fails is the answer, as when a load balancer or NAT drops an
established connection.
``exchanges`` records every answer; tests/support/contract_plugin.py checks them against
``alibabacloud_kms20160120/models/_get_secret_value_response_body.py`` after each test.
"""

import hashlib
import hmac
import socket
import struct
import threading
import uuid
from collections import Counter, deque
from typing import Any, Deque, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl, urlsplit

from tests.support import contract
from tests.support.cs_emulator import ALGORITHM as ACS3, acs3_signature, canonical_request
from tests.support.loopback import Answer as LoopAnswer, LoopbackServer, json_answer

VERSION = "2016-01-20"
ALGORITHM = "ACS4-HMAC-SHA256"
PRODUCT = "Kms"
SIGN_PREFIX = "aliyun_v4"
DROPS = ("reset", "close", "stall")
# KMS over its QPS quota: status, code and message (help.aliyun.com/knowledge_detail/444042)
THROTTLED = (429, "Rejected.Throttling", "QPS Limit Exceeded")


def signing_key(secret: str, date: str, region: str, product: str = PRODUCT) -> bytes:
    key = hmac.new((SIGN_PREFIX + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, product, SIGN_PREFIX + "_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def acs4_signature(canonical: str, key: bytes) -> str:
    to_sign = "%s\n%s" % (ALGORITHM, hashlib.sha256(canonical.encode("utf-8")).hexdigest())
    return hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


class KmsEmulator(LoopbackServer):
    def __init__(self, access_key_id: str = "LTAItestkey", secret: str = "test-secret-value",
                 token: Optional[str] = "sts-token-value", region: str = "cn-test-1",
                 account: str = "1234567890123456") -> None:
        self.access_key_id, self.secret, self.token = access_key_id, secret, token
        self.region, self.account = region, account
        self.secrets: Dict[str, Tuple[str, str]] = {}  # name -> (data, type)
        self.calls: Counter = Counter()
        self.requests: List[Dict[str, str]] = []
        self.rejected: List[str] = []
        self.algorithms: List[str] = []  # the signature scheme of each accepted request
        self.dropped: List[str] = []  # how each dropped request was dropped
        self._faults: Dict[str, Deque[Tuple[int, str, str]]] = {}
        self._drops: Dict[str, Deque[str]] = {}
        self._release = threading.Event()  # ends a stalled answer (stop())
        self._nonces: set = set()
        self._lock = threading.Lock()
        self.exchanges: List[contract.Exchange] = []
        contract.register(self)

    def put_secret(self, name: str, data: str, data_type: str = "text") -> None:
        self.secrets[name] = (data, data_type)

    def fail_next(self, action: str, status: int, code: str, times: int = 1) -> None:
        self._faults.setdefault(action, deque()).extend([(status, code, "injected %s" % code)] * times)

    def throttle_next(self, action: str = "GetSecretValue", times: int = 1) -> None:
        """The next ``times`` requests for ``action`` answer as KMS throttles (see the module's docstring)."""
        self._faults.setdefault(action, deque()).extend([THROTTLED] * times)

    def drop_next(self, action: str, how: str = "reset", times: int = 1) -> None:
        """The next ``times`` requests for ``action`` get no answer: ``reset``, ``close`` or ``stall``
        (see the module's docstring)."""
        if how not in DROPS:
            raise ValueError("how must be one of %s" % ", ".join(DROPS))
        self._drops.setdefault(action, deque()).extend([how] * times)

    def respond(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> LoopAnswer:
        status, payload = self.handle(method, path, headers, body)
        with self._lock:
            self.exchanges.append(contract.Exchange("kms", VERSION, headers.get("x-acs-action", "?"), None,
                                                    status, payload))
        return json_answer(status, payload)

    def start(self):
        self._release.clear()
        super().start()
        # The shared loopback server always answers; a dropped connection needs the socket itself, so the
        # handler class is extended here, before any request arrives.
        owner, base = self, self._server.RequestHandlerClass

        class DroppingHandler(base):  # type: ignore[misc, valid-type]
            def _serve(self) -> None:
                action = self.headers.get("x-acs-action", "")
                with owner._lock:
                    how = owner._drops[action].popleft() if owner._drops.get(action) else None
                if how is None:
                    return base._serve(self)
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                with owner._lock:
                    owner.calls[action] += 1
                    owner.dropped.append(how)
                self.close_connection = True
                if how == "stall":
                    owner._release.wait(60)  # bounded: stop() releases it at once
                elif how == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _serve

        self._server.RequestHandlerClass = DroppingHandler
        return self

    def stop(self) -> None:
        self._release.set()
        super().stop()

    # ---- requests ----

    @staticmethod
    def _error(status: int, code: str, message: str) -> Tuple[int, Dict[str, Any]]:
        return status, {"Code": code, "Message": message, "RequestId": str(uuid.uuid4()).upper()}

    def handle(self, method: str, raw_path: str, headers: Dict[str, str], body: bytes) -> Tuple[int, Dict[str, Any]]:
        split = urlsplit(raw_path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        action = headers.get("x-acs-action", "")
        with self._lock:
            self.calls[action] += 1
            self.requests.append(dict(query, Action=action))
        problem = self._verify(method, split.path, query, headers, body)
        if problem is not None:
            with self._lock:
                self.rejected.append(problem)
            code, _, message = problem.partition(": ")
            return self._error(404 if code.endswith("NotFound") else 400, code, message)
        with self._lock:
            fault = self._faults[action].popleft() if self._faults.get(action) else None
        if fault is not None:
            return self._error(*fault)
        if action != "GetSecretValue":
            return self._error(400, "InvalidAction.NotFound", "this emulator serves GetSecretValue only")
        return self._get_secret_value(query)

    def _verify(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str],
                body: bytes) -> Optional[str]:
        if method != "POST" or path != "/":
            return "InvalidAction.NotFound: %s %s" % (method, path)
        if headers.get("x-acs-version") != VERSION:
            return "InvalidVersion: x-acs-version %r" % headers.get("x-acs-version")
        nonce = headers.get("x-acs-signature-nonce")
        with self._lock:
            if not nonce or nonce in self._nonces:
                return "SignatureNonceUsed: nonce missing or repeated"
            self._nonces.add(nonce)
        date = headers.get("x-acs-date", "")
        if len(date) < 10:
            return "MissingDate: no x-acs-date"
        payload_hash = hashlib.sha256(body).hexdigest()
        if headers.get("x-acs-content-sha256") != payload_hash:
            return "InvalidContentSha256: x-acs-content-sha256 is not the body's hash"
        if self.token is not None and headers.get("x-acs-security-token") != self.token:
            return "InvalidSecurityToken: wrong or missing x-acs-security-token"
        auth = headers.get("authorization", "")
        algorithm = auth.split(" ", 1)[0]
        if algorithm not in (ACS3, ALGORITHM):
            return "IncompleteSignature: Authorization is neither %s nor %s" % (ACS3, ALGORITHM)
        fields = dict(part.strip().split("=", 1) for part in auth[len(algorithm) + 1:].split(",") if "=" in part)
        scope = fields.get("Credential", "").split("/")
        if scope[0] != self.access_key_id:
            return "InvalidAccessKeyId.NotFound: unknown access key"
        day = date[:10].replace("-", "")
        if algorithm == ALGORITHM and scope[1:] != [day, self.region, PRODUCT, SIGN_PREFIX + "_request"]:
            return "IncompleteSignature: credential scope %s is not %s/%s/%s" % ("/".join(scope[1:]), day,
                                                                               self.region, PRODUCT)
        signed = fields.get("SignedHeaders", "").split(";")
        for required in ("host", "x-acs-action", "x-acs-content-sha256", "x-acs-date", "x-acs-signature-nonce",
                         "x-acs-version"):
            if required not in signed:
                return "IncompleteSignature: %s is not signed" % required
        if algorithm == ACS3:
            expected = acs3_signature(method, path, query, headers, signed, payload_hash, self.secret)
        else:
            canonical = canonical_request(method, path, query, headers, signed, payload_hash)
            expected = acs4_signature(canonical, signing_key(self.secret, day, self.region))
        if not hmac.compare_digest(expected, fields.get("Signature", "")):
            return "SignatureDoesNotMatch: the signature does not match"
        self.algorithms.append(algorithm)
        return None

    def _get_secret_value(self, query: Dict[str, str]) -> Tuple[int, Dict[str, Any]]:
        name = query.get("SecretName", "")
        if not name:
            return self._error(400, "MissingParameter", "SecretName is mandatory for this action")
        prefix = "acs:kms:%s:%s:secret/" % (self.region, self.account)
        if name.startswith(prefix):
            name = name[len(prefix):]
        stage = query.get("VersionStage") or "ACSCurrent"
        if name not in self.secrets or stage != "ACSCurrent":
            return self._error(404, "Forbidden.ResourceNotFound", "the secret or version does not exist")
        data, data_type = self.secrets[name]
        return 200, {"RequestId": str(uuid.uuid4()), "SecretName": name, "VersionId": "v1",
                     "CreateTime": "2026-01-01T00:00:00Z", "SecretData": data, "SecretDataType": data_type,
                     "VersionStages": {"VersionStage": ["ACSCurrent"]}}
