"""A loopback emulator of STS ``GetCallerIdentity`` (RPC API 2015-04-01) for the real
``alibabacloud-sts20150401`` SDK (point it here with ``ACK_MIG_STS_ENDPOINT``).

The SDK sends ``POST /`` with ``x-acs-action: GetCallerIdentity``, ``x-acs-version: 2015-04-01``, signed
ACS3-HMAC-SHA256 (its ``client.py``: style RPC, auth type AK); the headers and the signature are checked by
:class:`CsEmulator`'s verifier. The answer carries the fields of the SDK's response model
(``GetCallerIdentityResponseBody``: ``AccountId``, ``Arn``, ``IdentityType``, ``PrincipalId``, ``UserId``,
``RoleId``, ``RequestId``; the API reference's sample answer has the same). The API reference's "RAM
authorization" says "No authorization for this operation": any valid identity gets its answer, so the
emulator checks only the signature.
"""

import uuid
from typing import Any, Dict

from tests.support.cs_emulator import CsEmulator

Answer = Any


class StsEmulator(CsEmulator):
    version = "2015-04-01"

    def __init__(self, account_id: str = "1234567890123456", **kw: Any) -> None:
        super().__init__(**kw)
        self.account_id = account_id

    def handle(self, method: str, raw_path: str, headers: Dict[str, str], body: bytes) -> Answer:
        return self.handle_rpc(method, raw_path, headers, body, self._answer)[0]

    def _answer(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes,
                action: str) -> Answer:
        if method != "POST" or path != "/" or action != "GetCallerIdentity":
            return self._error(404, "InvalidAction.NotFound", "no such API: %s %s %s" % (method, path, action))
        refused = self._refused(method, path, query, headers, body, action) or self._injected(action)
        if refused is not None:
            return refused
        principal = "30%014d" % (int(self.account_id) % 10 ** 14)
        return 200, {"RequestId": str(uuid.uuid4()).upper(), "AccountId": self.account_id,
                     "IdentityType": "RAMUser", "PrincipalId": principal, "UserId": principal,
                     "Arn": "acs:ram::%s:user/deployer" % self.account_id}, {}
