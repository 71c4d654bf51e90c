"""A loopback emulator of Function Compute 3.0's ``InvokeFunction``, for the real ``alibabacloud-fc20230330``
SDK to talk to over HTTP on 127.0.0.1 (point it here with ``ACK_MIG_FC_ENDPOINT=<emulator.endpoint>``).

Rules, each with its source:

* The route: ``POST /2023-03-30/functions/{functionName}/invocations``, optional query ``qualifier``, the
  payload as the raw body (alibabacloud_fc20230330/client.py ``invoke_function_with_options``: pathname,
  method, ``body = request.body``).
* Headers: ``x-fc-invocation-type`` ``Sync`` (the default) or ``Async``, ``x-fc-log-type`` ``None`` or
  ``Tail``, ``x-fc-async-task-id`` (``InvokeFunctionHeaders``); anything else in the invocation type is a 400
  ``InvalidArgument`` (FC 3.0 API reference, InvokeFunction request headers).
* The answer: an asynchronous invocation is queued and answered ``202`` with no body and its request id in
  ``x-fc-request-id`` (FC 3.0 "InvokeFunction": "the HTTP status code 202 ... for an asynchronous
  invocation"; "Asynchronous invocations": the request id identifies the invocation in its records), of FC
  3.0's shape ``1-<seconds, 8 hex>-<24 hex>`` (the FC 3.0 user guide's answers, e.g. ``X-Fc-Request-Id:
  1-64f7449a-127fbe39cd7681596e33ebad`` of Tue, 05 Sep 2023 15:09:14 GMT, where 0x64f7449a is that second). A
  synchronous one answers 200 with ``self.sync_answer``. An unknown function is a 404 ``FunctionNotFound``
  (FC 3.0 error codes), an async payload over 128 KB a 413 ``RequestEntityTooLarge`` (FC "Limits").
* Signature: ACS3-HMAC-SHA256 as every Tea ROA client sends it (tea-openapi ``do_request``), verified by
  :class:`CsEmulator`'s independent verifier, with ``x-acs-version`` 2023-03-30.

``invocations`` records each accepted call (function, type, payload bytes, request id); ``requests`` every
call as :class:`CsEmulator` records them.
"""

import time
import uuid
from typing import Any, Dict, List, Tuple
from urllib.parse import unquote

from tests.support.cs_emulator import CsEmulator
from tests.support.loopback import Answer

MAX_ASYNC_BYTES = 128 * 1024


class FcEmulator(CsEmulator):
    version = "2023-03-30"

    def __init__(self, functions: Tuple[str, ...] = (), **kw: Any) -> None:
        super().__init__(**kw)
        self.functions = set(functions)
        self.invocations: List[Dict[str, Any]] = []
        self.sync_answer = b'{"outcome": "done"}'

    def respond(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> Answer:
        (status, payload, extra), _ = self.handle_rpc(method, path, headers, body, self._answer)
        if isinstance(payload, bytes):
            return status, payload, extra
        from tests.support.loopback import json_answer

        return json_answer(status, payload, extra)

    def _answer(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes,
                action: str) -> Tuple[int, Any, Dict[str, str]]:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if not (method == "POST" and len(parts) == 4 and parts[:2] == ["2023-03-30", "functions"]
                and parts[3] == "invocations"):
            return self._error(404, "InvalidAction.NotFound", "no such API: %s %s" % (method, path))
        refused = self._refused(method, path, query, headers, body, "InvokeFunction") or self._injected(
            "InvokeFunction")
        if refused is not None:
            return refused
        name = parts[2]
        kind = headers.get("x-fc-invocation-type", "Sync")
        if kind not in ("Sync", "Async"):
            return self._error(400, "InvalidArgument", "x-fc-invocation-type %r is not Sync or Async" % kind)
        if name not in self.functions:
            return self._error(404, "FunctionNotFound", "function '%s' does not exist" % name)
        if kind == "Async" and len(body) > MAX_ASYNC_BYTES:
            return self._error(413, "RequestEntityTooLarge", "payload size exceeds maximum allowed size")
        request_id = "1-%08x-%s" % (int(time.time()), uuid.uuid4().hex[:24])
        with self._lock:
            self.invocations.append({"function": name, "type": kind, "payload": body, "request_id": request_id,
                                     "qualifier": query.get("qualifier")})
        if kind == "Async":
            return 202, b"", {"x-fc-request-id": request_id}
        return 200, self.sync_answer, {"x-fc-request-id": request_id, "content-type": "application/json"}
