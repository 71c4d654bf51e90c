"""A loopback emulator of Simple Log Service's ``GetLogs``, for the real ``alibabacloud-sls20201230`` SDK (and its
gateway, ``alibabacloud-gateway-sls``) to talk to on 127.0.0.1 (``ACK_MIG_SLS_ENDPOINT=<emulator.endpoint>``).

SLS names the project in the host (``<project>.<region>.log.aliyuncs.com``: the gateway's ``get_host``), which
a loopback address cannot carry, so the client sends its requests here as to an HTTP proxy: the request line
holds the absolute URL, the ``host`` header the project's host (RFC 9112 3.2.2, absolute-form).

Rules, each with its source:

* The route: ``POST /logstores/{logstore}/logs`` on ``<project>.<endpoint>``, a JSON body with ``from`` and
  ``to`` (Unix seconds, both required), ``query``, ``line`` (0..100), ``offset``, ``reverse``
  (alibabacloud_sls20201230 client.py ``get_logs_with_options``, models/_get_logs_request.py; SLS API
  "GetLogs": ``line`` at most 100). The answer ``{"meta": {"count", "progress", ...}, "data": [{field:
  value}]}`` (models/_get_logs_response_body.py), every value a string; ``__time__`` the entry's Unix time.
  Entries are those of ``self.stores[(project, logstore)]`` with ``from <= __time__ < to`` (the API's
  "[from, to)") matching the query, newest first with ``reverse`` true (else oldest first).
* The query: ``*``, or terms ``message.<field>: "<value>"`` joined by ``and``, a parenthesised ``or`` of two
  such terms allowed: the subset of the SLS search syntax the stack's JSON index on ``message`` answers
  (SLS "Search syntax": ``key: value``, ``and``, ``or``, parentheses; a JSON field is ``message.field``).
  Anything else is a 400 ``ParameterInvalid``.
* A term matches by tokens, not by equality (SLS "Phrase search": a search is tokenized, ``abc def`` matches
  every log holding both words in any order, and a quoted ``"redo_index/1"`` matches its words, not the
  string): the value and the line's field are split at the index's delimiters and compared case-insensitively,
  and the term matches when the field holds every word of the value. The delimiters and case are those of
  the stack's index (template.yml ``FunctionLogIndex``: the ``message`` key sets neither, so ROS's defaults
  hold, ros-cdk-sls 1.15.0 ``RosIndex.KeyIndicesProperty``: ``caseSensitive`` "Default to false",
  ``delimiter`` ``, '";=()[]{}?@&<>/:\n\t\r``; a JSON key's subfields have no settings of their own,
  ``JsonKeyIndicesProperty``). A value with no word at all is not modelled (a 400).
* ``meta.progress``: ``Complete``, or ``Incomplete`` for the next :meth:`SlsEmulator.incomplete_next` answers,
  which then hold only the first half of the page. SLS answers ``Incomplete`` when a search did not finish in
  time: the rows are a part, and the same call must be made again for the whole (the SLS API reference of
  GetProjectLogs tells the caller to read ``x-log-progress`` in every answer and to call again until the result
  is complete; the official aliyun-log-python-sdk's ``LogClient.get_log``, which sends this very request,
  repeats it up to 5 times, 0.5 s apart, until ``is_completed()``).
* Errors: ``{"errorCode", "errorMessage"}`` with ``x-log-requestid`` (the gateway's ``modify_response``);
  an unknown project ``ProjectNotExist`` 404, logstore ``LogStoreNotExist`` 404 (SLS error codes).
* Signature: SLS's own ``LOG`` scheme, written here from SLS "Request signatures" independently of the
  gateway: ``Authorization: LOG <AccessKeyId>:<base64(HMAC-SHA256(secret, StringToSign))>`` with
  ``StringToSign = VERB\\nContent-MD5\\nContent-Type\\nDate\\nCanonicalizedLOGHeaders + CanonicalizedResource``,
  the headers those named ``x-log-*`` and ``x-acs-*``, lower-case, sorted, ``name:value\\n`` each; the
  resource the path plus ``?`` and the sorted ``key=value`` query joined by ``&``. ``x-log-signaturemethod``
  must be ``hmac-sha256``, ``x-log-apiversion`` ``0.6.0``, ``Content-MD5`` the body's MD5 (upper-case hex),
  ``x-acs-security-token`` the issued token. A mismatch is 401 ``SignatureNotMatch``, recorded in ``rejected``.

``requests`` records each call (project, logstore, the request's JSON body).
"""

import base64
import hashlib
import hmac
import json
import re
import threading
import uuid
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl, unquote, urlsplit

from tests.support.loopback import Answer, LoopbackServer, json_answer

TERM = re.compile(r'message\.([A-Za-z_][A-Za-z0-9_]*): "([^"\\]*)"')
# ROS's default delimiters of a key index (the space included), see the module docstring
DELIMITERS = re.compile(r"[ ,'\";=()\[\]{}?@&<>/:\n\t\r]+")


def words(text: str):
    """The words SLS indexes (or searches) in ``text``: split at the delimiters, case folded."""
    return {w for w in DELIMITERS.split(text.lower()) if w}


class SlsEmulator(LoopbackServer):
    def __init__(self, access_key_id: str = "LTAItestkey", secret: str = "test-secret-value",
                 token: Optional[str] = "sts-token-value", endpoint_suffix: str = ".log.aliyuncs.com") -> None:
        self.access_key_id, self.secret, self.token = access_key_id, secret, token
        self.suffix = endpoint_suffix
        self.stores: Dict[Tuple[str, str], List[Dict[str, str]]] = {}
        self.requests: List[Dict[str, Any]] = []
        self.rejected: List[str] = []
        self.fault: Optional[Tuple[int, str]] = None  # the next answer's (status, errorCode)
        self.incomplete = 0  # how many of the next GetLogs answers are Incomplete (incomplete_next)
        # Fields put into every GetLogs answer's meta, of any shape: a meta field the SDK's model reads into a
        # nested model (GetLogsResponseBodyMeta.phraseQueryInfo) given as text fails that model's from_map.
        self.meta_extra: Dict[str, Any] = {}
        # Rows of any shape put first into every GetLogs answer's data (a row that is text or a number).
        self.rows_extra: List[Any] = []
        self._lock = threading.Lock()

    def add(self, project: str, logstore: str, when: int, line: Dict[str, Any]) -> None:
        """One entry as FC writes a stdout line: the line's JSON in ``message``, its time in ``__time__``."""
        self.stores.setdefault((project, logstore), []).append(
            {"__time__": str(when), "__topic__": "", "__source__": "", "message": json.dumps(line)})

    def incomplete_next(self, times: int = 1) -> None:
        """The next ``times`` GetLogs answers are ``Incomplete``, with half their page (module docstring)."""
        with self._lock:
            self.incomplete += times

    # ---- requests ----

    def _error(self, status: int, code: str, message: str) -> Answer:
        return json_answer(status, {"errorCode": code, "errorMessage": message},
                           {"x-log-requestid": uuid.uuid4().hex.upper()})

    def respond(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> Answer:
        split = urlsplit(path)  # absolute-form (through the proxy) or origin-form
        host = (headers.get("host") or split.netloc).split(":")[0]
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        parts = [unquote(p) for p in split.path.strip("/").split("/")]
        if not (method == "POST" and len(parts) == 3 and parts[0] == "logstores" and parts[2] == "logs"):
            return self._error(404, "InvalidAction", "no such API: %s %s" % (method, split.path))
        refused = self._verify(method, split.path, query, headers, body)
        if refused:
            with self._lock:
                self.rejected.append(refused)
            return self._error(401, refused.split(":")[0], refused)
        project = host[: -len(self.suffix)].rpartition(".")[0] if host.endswith(self.suffix) else ""
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            return self._error(400, "PostBodyInvalid", "the body is not JSON")
        with self._lock:
            self.requests.append({"project": project, "logstore": parts[1], "body": doc})
            fault, self.fault = self.fault, None
        if fault:
            return self._error(fault[0], fault[1], "injected %s" % fault[1])
        if not any(p == project for p, _ in self.stores):
            return self._error(404, "ProjectNotExist", "Project %s does not exist" % project)
        if (project, parts[1]) not in self.stores:
            return self._error(404, "LogStoreNotExist", "logstore %s does not exist" % parts[1])
        return self._get_logs(self.stores[(project, parts[1])], doc)

    def _get_logs(self, rows: List[Dict[str, str]], doc: Dict[str, Any]) -> Answer:
        start, end = doc.get("from"), doc.get("to")
        line, offset = doc.get("line", 100), doc.get("offset", 0)
        if not isinstance(start, int) or not isinstance(end, int) or not isinstance(line, int) or not 0 <= line <= 100:
            return self._error(400, "ParameterInvalid", "from and to are required Unix seconds, line 0..100")
        matcher = _matcher(str(doc.get("query") or "*"))
        if matcher is None:
            return self._error(400, "ParameterInvalid", "query %r is not understood" % doc.get("query"))
        found = [r for r in rows if start <= int(r["__time__"]) < end and matcher(json.loads(r["message"]))]
        found.sort(key=lambda r: int(r["__time__"]), reverse=bool(doc.get("reverse")))
        page = found[int(offset or 0): int(offset or 0) + line]
        with self._lock:
            partial, self.incomplete = self.incomplete > 0, max(self.incomplete - 1, 0)
        if partial:
            page = page[:len(page) // 2]
        meta = {"count": len(page), "progress": "Incomplete" if partial else "Complete",
                "processedRows": len(found), "isAccurate": True,
                "hasSQL": False, "keys": ["__time__", "__topic__", "__source__", "message"]}
        meta.update(self.meta_extra)
        if self.rows_extra and not offset:
            page = list(self.rows_extra) + page
        return json_answer(200, {"meta": meta, "data": page}, {"x-log-requestid": uuid.uuid4().hex.upper()})

    def _verify(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str], body: bytes
                ) -> Optional[str]:
        if headers.get("x-log-apiversion") != "0.6.0":
            return "InvalidAPIVersion: x-log-apiversion %r" % headers.get("x-log-apiversion")
        if headers.get("x-log-signaturemethod") != "hmac-sha256":
            return "SignatureNotMatch: x-log-signaturemethod is not hmac-sha256"
        if body and headers.get("content-md5") != hashlib.md5(body).hexdigest().upper():
            return "InvalidContentMD5: Content-MD5 is not the body's MD5"
        if self.token is not None and headers.get("x-acs-security-token") != self.token:
            return "SecurityTokenInvalid: wrong or missing x-acs-security-token"
        auth = headers.get("authorization", "")
        if not auth.startswith("LOG ") or ":" not in auth:
            return "SignatureNotMatch: Authorization is not LOG <key>:<signature>"
        key, _, signature = auth[4:].partition(":")
        if key != self.access_key_id:
            return "Unauthorized: unknown AccessKeyId"
        logged = "".join("%s:%s\n" % (k, headers[k]) for k in sorted(headers) if k.startswith(("x-log-", "x-acs-")))
        resource = path + ("?" + "&".join("%s=%s" % (k, query[k]) for k in sorted(query)) if query else "")
        to_sign = "%s\n%s\n%s\n%s\n%s%s" % (method, headers.get("content-md5", ""), headers.get("content-type", ""),
                                            headers.get("date", ""), logged, resource)
        expected = base64.b64encode(hmac.new(self.secret.encode(), to_sign.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(expected.decode(), signature):
            return "SignatureNotMatch: the signature does not match"
        return None


def _matcher(statement: str):
    """A predicate over a line's fields for the supported subset of the search syntax, else None."""
    statement = statement.strip()
    if statement == "*":
        return lambda line: True
    tests = []
    for part in statement.split(" and "):
        part = part.strip()
        if part.startswith("(") and part.endswith(")"):
            alternatives = [TERM.fullmatch(p.strip()) for p in part[1:-1].split(" or ")]
        else:
            alternatives = [TERM.fullmatch(part)]
        if not all(alternatives):
            return None
        if not all(words(m.group(2)) for m in alternatives):
            return None
        tests.append([(m.group(1), words(m.group(2))) for m in alternatives])
    return lambda line: all(any(v <= words(str(line.get(k, ""))) for k, v in alt) for alt in tests)
