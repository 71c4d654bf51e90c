"""Logs: one JSON object per line, the shape Simple Log Service indexes field by field.

Every line has ``time`` (UTC, ISO 8601), ``level``, ``message``, ``request_id`` and ``trigger``, plus
``instance_id`` where a line is about one instance, plus any extra fields. Credentials never appear:
values of fields whose name says they hold one are masked, at any depth (an HTTP header dict is the
typical carrier: ``Authorization``, ``Cookie``, ``x-acs-security-token``), and every known secret value
(the settings' credentials, and values read at run time such as the SSH key from KMS, see
:func:`register_secret`) is replaced wherever it occurs, in any field, before the line is written. FC
sends stdout to the function's log store.
"""

import json
import re
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterable, Optional, TextIO

LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "OFF": 100}
MASK = "***"
# A context value (request id, trigger, event type and id, cluster) is repeated on every line of an
# event: cut to this many characters. Intake already refuses longer event fields
# (functions.pipeline.envelope.MAX_TEXT); this keeps any other path from repeating a huge value.
MAX_CONTEXT_CHARS = 512
# Matched inside the name, compared without case, "-" or "_" (Authorization, Proxy-Authorization,
# x-acs-security-token, SecurityToken, AccessKeyId, private-key and privateKey are all caught).
_SECRET_NAMES = ("secret", "token", "password", "passwd", "passphrase", "privatekey", "accesskey", "apikey",
                 "authorization", "credential", "cookie")
# Matched at the end only: a request's Signature (an OSS presigned URL's is a bearer credential), but not
# SignatureNonce / SignatureMethod / SignatureVersion, which say nothing secret.
_SECRET_ENDINGS = ("signature",)


def secret_name(name: str) -> bool:
    """Whether a field (or an environment variable) of this name holds a credential, by its name alone."""
    folded = name.lower().replace("-", "").replace("_", "")
    return any(part in folded for part in _SECRET_NAMES) or folded.endswith(_SECRET_ENDINGS)


def _mask_fields(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (MASK if secret_name(str(k)) and v not in (None, "") else _mask_fields(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask_fields(v) for v in value]
    return value


def _with_encodings(secrets: Iterable[str]) -> set:
    """Each secret as written and as it shows up inside a JSON line (a multi-line SSH key's newlines become
    \\n) or inside a URL or string-to-sign (an STS token, percent-encoded): masking the raw form alone
    would miss those."""
    found = set()
    for secret in secrets:
        found.add(secret)
        found.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        if any(not (c.isalnum() or c in "-_.~") for c in secret):
            from urllib.parse import quote  # only for secrets that encode differently

            found.add(quote(secret, safe=""))
            found.add(quote(secret, safe="").replace("%7E", "~"))
    return found


_RUNTIME_SECRETS: list = []  # values learnt while running (a key read from KMS), longest first
_RUNTIME_LOCK = threading.Lock()


def _forms(secrets: Iterable[str]) -> list:
    # Longest first, so a secret that contains another is masked whole. Short values are ignored:
    # masking "1" everywhere would garble the log without protecting anything.
    return sorted(_with_encodings(s for s in secrets if s and len(s) >= 4), key=len, reverse=True)


def register_secret(value: str) -> None:
    """A secret learnt at run time (functions.cloud.secrets): masked from now on in every logger's lines and in
    everything :func:`redact_text` cleans, for the life of the process. A multi-line secret (a PEM key)
    is also masked line by line, so a fragment quoted in an error cannot leak a whole line of it."""
    if not value:
        return
    parts = [value] + [line.strip() for line in value.splitlines() if len(line.strip()) >= 16]
    with _RUNTIME_LOCK:
        merged = set(_RUNTIME_SECRETS) | set(_forms(parts))
        _RUNTIME_SECRETS[:] = sorted(merged, key=len, reverse=True)


def _mask(text: str, forms: Iterable[str]) -> str:
    for secret in forms:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret masked: ``secrets`` (the settings' credentials) and every value
    registered at run time. The handler's result and every command-line output go through this, the
    same cleaning as the log lines."""
    return _mask_runtime(_mask(text, _forms(secrets)))


def _mask_runtime(text: str) -> str:
    """Mask the values registered at run time (a secret read from KMS, say)."""
    with _RUNTIME_LOCK:
        runtime = list(_RUNTIME_SECRETS)
    return _mask(text, runtime)


# A value after a name, as an SDK's debug record prints a header or parameter: ``'Authorization': 'OSS4...``,
# ``x-oss-security-token:TOKEN`` (a canonical request), ``SecurityToken=TOKEN``, ``...,Signature=HEX``. The value
# ends at a quote, comma, ampersand, space or backslash (a bytes repr's escaped newline).
# The name starts a word (the look-behind): tried at every letter of a long word instead, the search would take
# time quadratic in the word's length (a 200 KB value in a line printed by a command).
_NAMED_VALUE = re.compile(r"""(?<![A-Za-z0-9_.-])(?P<name>[A-Za-z][A-Za-z0-9_.-]*)"""
                          r"""(?P<sep>['"]?[ \t]*[:=][ \t]*['"]?)"""
                          r"""(?P<value>[^'",&\s\\]+)""")


def mask_named_values(text: str, shown: bool = False) -> str:
    """``text`` with the value after every secret name (:func:`secret_name`) masked: for text whose shape is not
    ours (a cloud SDK's debug record of a signed request), where the values may be ones never registered.
    ``shown``: text a command prints for a person, where only a value long enough to be a key or token is
    masked, and never the value of a secret's *name* (:data:`_SHOWN_MIN_VALUE`)."""
    def named(m: "re.Match") -> str:
        name, value = m.group("name"), m.group("value")
        if not secret_name(name) or shown and (len(value) < _SHOWN_MIN_VALUE or name.lower().replace(
                "-", "").replace("_", "").endswith(("name", "names"))):
            return m.group(0)
        return name + m.group("sep") + MASK

    return _NAMED_VALUE.sub(named, text)


# Values that are credentials by their shape alone, wherever they stand: a JWT (an OAuth or OIDC access token: three
# base64url parts, the first two JSON objects, so "eyJ") and an Alibaba Cloud STS security token (base64 of its
# protobuf header, "CAIS", then hundreds of characters).
_SECRET_SHAPES = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*|CAIS[A-Za-z0-9+/=]{60,}")
# A named value shown to the user is masked when it is long enough to be a key or token: "InvalidSecurityToken.Expired:
# Specified ..." (an error code, then words) stays readable, and a secret's *name* (SshKeySecretName=...) is no secret.
_SHOWN_MIN_VALUE = 16


def redact_shown(text: str) -> str:
    """``text`` as a command may print it: every secret registered at run time, every value of a secret-named field
    that looks like a key or token (an SDK quoting a server's answer: ``"access_token": "..."``,
    ``"AccessKeySecret": "..."``) and every value of a known secret shape (:data:`_SECRET_SHAPES`) masked."""
    return _SECRET_SHAPES.sub(MASK, mask_named_values(_mask_runtime(text), shown=True))


def sdk_log_formatter(fmt: str):
    """A ``logging.Formatter`` for the cloud SDKs' own records (``--debug``): each record as ``fmt`` formats it,
    then cleaned as every other line: the secrets registered at run time (the command's keys, see
    functions.commands.stack.credentials.resolve) and the value of every secret-named header or parameter (oss2
    logs each request's signed headers and its V4 canonical request, the STS token among them)."""
    import logging

    class _Masking(logging.Formatter):
        def format(self, record: "logging.LogRecord") -> str:
            return mask_named_values(_mask_runtime(super().format(record)))

    return _Masking(fmt)


def _context_value(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_CONTEXT_CHARS:
        return value[:MAX_CONTEXT_CHARS] + "...(%d characters)" % len(value)
    return value


# The level of a node's result line and of a decision line, so that an alert on WARNING or ERROR sees every
# failure (docs/operations.md, "Signals"). ERROR: the node did not get its layout, or a rollout stopped on it;
# WARNING: it needs a person but is not broken (a reboot to finish, another MIG manager in charge); INFO:
# everything else (partitioned, unchanged, skipped, deferred, a dry run, gone, a destroy-nothing refusal the
# rollout takes the drained way next).
NODE_ERROR_OUTCOMES = ("failed", "drain-timeout", "drain-refused")
NODE_WARNING_OUTCOMES = ("reboot-required", "conflict")
# A decision ``error`` (a label that does not parse or fit, an id the node command refuses) is WARNING: its
# node's result line (``failed``) is the ERROR, so an alert that counts ERROR lines counts the node once.
DECISION_LEVELS = {"error": "WARNING"}


def node_level(outcome: Any) -> str:
    """The level of a ``node result`` line for this outcome."""
    if outcome in NODE_ERROR_OUTCOMES:
        return "ERROR"
    return "WARNING" if outcome in NODE_WARNING_OUTCOMES else "INFO"


def decision_level(action: Any) -> str:
    """The level of a ``decision`` line for this action."""
    return DECISION_LEVELS.get(action, "INFO")


def node_code(node: Dict[str, Any]) -> str:
    """The code a ``node result`` line carries, so one field groups every node: a failure's own code (the
    node's verdict or the transport's, ``functions.delivery.outcome``), else the first word of a reason written
    ``code: text``, else the outcome itself (``partitioned``, ``drain-timeout``, ...)."""
    outcome = str(node.get("outcome") or "unknown")
    code = str(node.get("code") or "")
    if code:
        return code
    if outcome == "failed":
        head = str(node.get("reason") or "").split(":", 1)[0].strip()
        return head if head and len(head) <= 40 and all(c.isalnum() or c == "-" for c in head) else "failed"
    return outcome


class JsonLogger:
    """A small structured logger. ``bind()`` returns a child with more context fields."""

    def __init__(self, level: str = "INFO", secrets: Iterable[str] = (), stream: Optional[TextIO] = None,
                 **context: Any) -> None:
        self.level = LEVELS.get(str(level).upper(), 20)
        self._secrets = _forms(secrets)
        self._stream = stream
        self.context = {k: _context_value(v) for k, v in context.items() if v is not None}

    def bind(self, **context: Any) -> "JsonLogger":
        child = JsonLogger.__new__(JsonLogger)
        child.level, child._secrets, child._stream = self.level, self._secrets, self._stream
        child.context = dict(self.context)
        child.context.update({k: _context_value(v) for k, v in context.items() if v is not None})
        return child

    def redact(self, text: str) -> str:
        return _mask_runtime(_mask(text, self._secrets))

    def log(self, level: str, message: str, **fields: Any) -> None:
        if LEVELS.get(level, 20) < self.level:
            return
        now = time.time()
        record: Dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ" % int((now % 1) * 1000),
            "level": level,
            "message": message,
        }
        record.update(self.context)
        record.update({k: v for k, v in fields.items() if v is not None})
        line = self.redact(json.dumps(_mask_fields(record), default=str, ensure_ascii=False))
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from anywhere (an exception's text): written escaped
            line = line.encode("utf-8", "backslashreplace").decode("utf-8")
        stream = self._stream or sys.stdout
        stream.write(line + "\n")
        stream.flush()

    def debug(self, message: str, **fields: Any) -> None:
        self.log("DEBUG", message, **fields)

    def info(self, message: str, **fields: Any) -> None:
        self.log("INFO", message, **fields)

    def warning(self, message: str, **fields: Any) -> None:
        self.log("WARNING", message, **fields)

    def error(self, message: str, **fields: Any) -> None:
        self.log("ERROR", message, **fields)


@contextmanager
def stdlib_logs_into(logger: JsonLogger, name: str = "functions"):
    """Route the standard ``logging`` records of ``name`` (delivery's modules log that way) into
    ``logger`` for the duration of a block, so they too become one redacted JSON line with the event's
    request id and trigger, and do not also reach FC's own root handler in another format. Yields the bridge:
    set its ``logger`` to a child bound later (``log.bind(cluster_id=...)``) for the lines after that."""
    import logging  # here, not at the top: an event skipped in stage 1 never needs it

    class _Bridge(logging.Handler):
        def emit(self, record: "logging.LogRecord") -> None:
            try:
                message = record.getMessage()
            except Exception:  # noqa: BLE001 - a bad format string must not lose the line
                message = str(record.msg)
            level = record.levelname if record.levelname in LEVELS else "INFO"
            # ``log.warning(..., extra={"fields": {...}})``: a line that needs fields of its own (a stopped
            # rollout's pool and node) gets them as fields, not only inside its message.
            fields = getattr(record, "fields", None)
            self.logger.log(level, message, logger=record.name, **(fields if isinstance(fields, dict) else {}))

    target = logging.getLogger(name)
    bridge = _Bridge()
    # Yielded: a caller that learns more context later (the cluster, once looked up) points it at the bound
    # child, so these lines carry it too (the alert rules keep to message.cluster_id, template.yml).
    bridge.logger = logger
    saved = (target.level, target.propagate)
    target.addHandler(bridge)
    target.setLevel(logging.DEBUG)
    target.propagate = False
    try:
        yield bridge
    finally:
        target.removeHandler(bridge)
        target.setLevel(saved[0])
        target.propagate = saved[1]
