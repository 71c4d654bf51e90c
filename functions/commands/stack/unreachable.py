"""One line for a cloud call that could not connect to its service, worded as :func:`functions.commands.
common.connect` words the check before a command's first call: ``cannot connect to <service> at host:port
(<cause>); <what to do>``.

The Tea SDKs (darabonba) turn a failed connection into ``RetryError(str(requests' ConnectionError))``, oss2
into a ``RequestError`` around it: urllib3's whole text (the pool, the URL and its query, a repr of the new
connection), which a cut at 300 characters leaves mid-word and which never says what to check. The service,
the address, the cause and the variable that sets the endpoint are what a user acts on; they are read here
from the exception's chain (its text only: the SDKs' exception types differ by version) and nothing else of
it is shown.
"""

import re
from typing import Dict, Iterator, Mapping, Optional

from functions.base import settings
from functions.base.textsafe import clip  # a value cut short ends in "..."

# service -> (how a line names it, the variable that overrides its endpoint)
SERVICES: Dict[str, tuple] = {
    "cs": ("the ACK API", settings.CS_ENDPOINT),
    "ros": ("the ROS API", settings.ROS_ENDPOINT),
    "sts": ("the STS API", settings.STS_ENDPOINT),
    "fc": ("the Function Compute API", settings.FC_ENDPOINT),
    "sls": ("the SLS API", settings.SLS_ENDPOINT),
    "oss": ("OSS", settings.OSS_ENDPOINT),
}

# urllib3's words for a connection that was never made (NewConnectionError, NameResolutionError in urllib3 2,
# ConnectTimeoutError): nothing answers at that address. A read timeout or a reset is not one of them.
_NOT_CONNECTED = re.compile(r"Failed to establish a new connection|Failed to resolve|NameResolutionError"
                            r"|ConnectTimeout|connect timeout=")
_ADDRESS = re.compile(r"host='([^'\s]{1,253})', port=(\d{1,5})")
_ERRNO = re.compile(r"\[Errno -?\d+\] ([A-Za-z][A-Za-z ,'-]{2,80}?)['\")]")
_CONNECT_TIMEOUT = re.compile(r"connect timeout=(\d+(?:\.\d+)?)")
# node_bootstrap.hostlookup.LookupTimeout's words, the cause of urllib3's ConnectTimeoutError when the host's name
# did not resolve within the connect timeout (functions/base/deadline.py bounds the SDKs' lookups)
_LOOKUP = re.compile(r"the name lookup of [^\s'\"]{1,253} took over \d+(?:\.\d+)?s")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: darabonba's inner_exception, oss2's exception, urllib3's reason, the
    exceptions in args, and Python's own cause and context (darabonba raises RetryError inside the except
    of requests' error). Bounded: a chain is a few links, a cycle is cut."""
    seen, todo = set(), [exc]
    while todo and len(seen) < 20:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [getattr(current, name, None) for name in ("inner_exception", "exception", "reason")]
        linked += list(getattr(current, "args", ()) or ()) + [current.__cause__, current.__context__]
        todo.extend(e for e in linked if isinstance(e, BaseException))


def _text(exc: BaseException) -> str:
    parts = []
    for link in _chain(exc):
        try:
            parts.append(str(link))
        except Exception:  # a str() that fails says nothing of use here
            continue
    return "\n".join(parts)


def fix(service: str, env: Optional[Mapping[str, str]] = None) -> str:
    """What to do: check the override when one set the endpoint (it is what is wrong more often than the
    network); else the network and the region, which picks the SDK's endpoint, naming the override."""
    variable = SERVICES[service][1]
    value = settings.env_text(variable) if env is None else str(env.get(variable, "") or "").strip()
    if value:
        return "%s=%s set it: check that value, or unset it for the region's endpoint" % (variable, clip(value, 120))
    return ("check this machine's internet access (or set HTTPS_PROXY) and --region; %s overrides the endpoint"
            % variable)


def said(service: str, exc: BaseException) -> Optional[str]:
    """The line for ``exc`` when it is a connection that could not be made to ``service``; None for any other
    failure (an answer, a read timeout, a reset: the caller's own wording stays)."""
    text = _text(exc)
    if not _NOT_CONNECTED.search(text):
        return None
    address = _ADDRESS.search(text)
    where = " at %s:%s" % address.groups() if address else ""
    errno = _ERRNO.search(text)
    timeout = _CONNECT_TIMEOUT.search(text)
    lookup = _LOOKUP.search(text)
    if errno:  # the system's words, as common.connect gives them (strerror): "Connection refused"
        cause = errno.group(1).strip()
    elif lookup:  # as common.connect says it: the name server, not the service, did not answer
        cause = lookup.group(0)
    elif timeout:
        cause = "no answer within %gs" % float(timeout.group(1))
    else:
        cause = "no connection"
    return "cannot connect to %s%s (%s); %s" % (SERVICES[service][0], where, cause, fix(service))
