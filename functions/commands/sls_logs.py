"""``ack-mig-hook logs``: the deployed function's log lines, from its Simple Log Service logstore, one line per
log entry, as ``kubectl logs`` shows a pod's.

The project and logstore are the stack's ``LogProject`` and ``LogStore`` parameters (functions/commands/deployed.py
finds the stack as ``wait`` and ``doctor`` do). The lines come from SLS ``GetLogs`` through the official SDK
(``alibabacloud-sls20201230``: ``POST /logstores/{logstore}/logs`` on ``<project>.<endpoint>``, body ``from``,
``to`` in Unix seconds, ``query``, ``line`` <= 100, ``offset``, ``reverse``; the answer ``{"meta", "data": [{field:
value}]}``), signed by the SDK's SLS gateway. FC writes each stdout line of the function to the logstore's
``message`` field; the stack's index reads it as JSON (``message.<field>``, docs/troubleshooting.md), which is
what the filters search: ``--node`` (node name or instance id), ``--pool``, ``--outcome``, ``--request-id`` (the
id ``invoke --remote`` printed). ``--since`` bounds the time (default 1h), ``--limit`` the lines (the newest,
printed oldest first). RAM: ``log:GetLogStoreLogs`` on the logstore.

SLS matches a search term by its words, case-insensitively (the index's defaults: SLS "Phrase search",
ros-cdk-sls ``KeyIndicesProperty``): ``--node GPU-A`` finds ``gpu-a``, and a value with ``:`` or ``/`` finds a
field holding those words in any order. So the search narrows what is read, and each line is kept only when
its field equals the value given (:func:`wanted`), as the options promise.
"""

import argparse
import ipaddress
import json
import re
import time
from typing import Any, Callable, Dict, List, Optional

from functions.base import settings
from functions.base.event_result import NODE_OUTCOMES, OUTCOMES as EVENT_OUTCOMES
from functions.commands import common
from functions.commands.stack.exit_codes import EXIT_USAGE, CloudError
from functions.commands.stack.unreachable import said
from node_bootstrap.outside import as_object, json_type

PAGE = 100  # GetLogs' most lines per call (SLS API GetLogs: "line ... 0 to 100")
TIMEOUT_S = 30
VALUE = re.compile(r"^[A-Za-z0-9._:/-]{1,128}\Z")  # what an id, name or outcome holds: nothing to escape in a query
DURATION = re.compile(r"^([0-9]{1,6})([smhd])\Z")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_SINCE_S = 30 * 86400  # the logstore's retention is the stack's choice; a month bounds the scan
# Every outcome a line of the function holds, lower case: an event's, then a node's (functions/base/event_result.py).
OUTCOMES = EVENT_OUTCOMES + NODE_OUTCOMES
MAX_SCAN = 5000  # rows read at most for one command (50 calls): lines the search found but a filter drops count
# An answer whose meta.progress is "Incomplete" holds part of the rows: the same call is made again (SLS GetLogs;
# the official aliyun-log-python-sdk's LogClient.get_log repeats it up to 5 times, 0.5 s apart).
INCOMPLETE_TRIES = 5
INCOMPLETE_WAIT_S = 0.5
# The fields a line shows after its time, level and message, in this order (functions/base/logs.py and the
# node lines: node_name, nodepool_id, outcome, code, duration_ms; decisions: action, sequence).
SHOWN = ("node_name", "instance_id", "nodepool_id", "action", "outcome", "code", "duration_ms", "sequence", "reason")


# SLS's own error codes (SLS API "Error codes") in the words exit_codes knows: 4 credentials, 5 permission.
SLS_CODES = {"Unauthorized": "NoPermission", "SignatureNotMatch": "SignatureDoesNotMatch",
             "SecurityTokenInvalid": "InvalidSecurityToken", "SecurityTokenExpired": "SecurityTokenExpired",
             "InvalidAccessKeyId": "InvalidAccessKeyId"}


class LogsError(CloudError):
    pass


def since(text: str) -> int:
    """``--since``: a whole number and s, m, h or d (``90m``, ``1h``, ``2d``), at most 30 days; seconds."""
    found = DURATION.match((text or "").strip())
    seconds = int(found.group(1)) * UNITS[found.group(2)] if found else 0
    if not 1 <= seconds <= MAX_SINCE_S:
        raise argparse.ArgumentTypeError("%r is not accepted; use a duration such as 15m, 1h or 2d (at most 30d)"
                                         % str(text)[:20])
    return seconds


def value(text: str) -> str:
    if not VALUE.match(text or ""):
        raise argparse.ArgumentTypeError("%r is not accepted; use an id or name of letters, digits and . _ : / - "
                                         "(at most 128)" % str(text)[:40])
    return text


def outcome(text: str) -> str:
    """``--outcome``: one of the outcomes the function writes (a closed set, unlike ids and names), whatever
    its case (``FAILED`` is ``failed``), as written in the lines: the filter compares it exactly."""
    folded = (text or "").lower()
    if folded in OUTCOMES:
        return folded
    from functions.commands.stack.credentials import did_you_mean

    raise argparse.ArgumentTypeError("%r is not an outcome the function logs%s; use one of %s"
                                     % (str(text)[:40], did_you_mean(folded, OUTCOMES), ", ".join(OUTCOMES)))


def configure(parser, command):
    common.add_cloud_options(parser, cluster_help="the cluster whose function's lines to show (its stack, "
                                                  "ack-mig-hook-<cluster id>) (default: $ACK_MIG_CLUSTER_ID)",
                             kubeconfig=False)
    common.add_stack_name(parser)
    parser.add_argument("--node", type=value, metavar="NAME", help="only lines about this node (its Kubernetes "
                                                                    "name or its ECS instance id)")
    parser.add_argument("--pool", type=value, metavar="ID", help="only lines about this node pool")
    parser.add_argument("--outcome", type=outcome, metavar="OUTCOME",
                        help="only lines with this outcome, in any case: %s" % ", ".join(OUTCOMES))
    parser.add_argument("--request-id", type=value, metavar="ID",
                        help="only one invocation's lines (the request id invoke --remote printed)")
    parser.add_argument("--since", type=since, default=3600, metavar="DURATION",
                        help="how far back: 15m, 1h, 2d ... at most 30d (default: 1h)")
    parser.add_argument("--limit", type=common.whole_number(1, 1000, "lines"), default=100, metavar="N",
                        help="at most this many lines, the newest, 1..1000 (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the lines as JSON on stdout")


def query(args) -> str:
    """The SLS search statement of the filters (pure): values are checked by :func:`value`, so quoting them
    is all they need."""
    terms = []
    if args.node:
        terms.append('(message.node_name: "%s" or message.instance_id: "%s")' % (args.node, args.node))
    for field, given in (("nodepool_id", args.pool), ("outcome", args.outcome), ("request_id", args.request_id)):
        if given:
            terms.append('message.%s: "%s"' % (field, given))
    return " and ".join(terms) or "*"


def wanted(args) -> Callable[[Dict[str, Any]], bool]:
    """Whether a line (:func:`entry`) is one the filters ask for (pure): each filter's field equals its value,
    as written (SLS's search, by words and case-insensitive, also finds others)."""
    def equal(line: Dict[str, Any], field: str, given: str) -> bool:
        return isinstance(line.get(field), str) and line[field] == given

    def keep(line: Dict[str, Any]) -> bool:
        if args.node and not (equal(line, "node_name", args.node) or equal(line, "instance_id", args.node)):
            return False
        return all(equal(line, field, given) for field, given in (
            ("nodepool_id", args.pool), ("outcome", args.outcome), ("request_id", args.request_id)) if given)
    return keep


def entry(row: Dict[str, Any]) -> Dict[str, Any]:
    """One GetLogs row as the function wrote it: its ``message`` read as the JSON line it is, else the text."""
    from node_bootstrap.outside import OutsideDataError, loads

    row = row if isinstance(row, dict) else {"message": str(row)[:300]}
    text = row.get("message")
    try:  # bounded as every answer we read (depth, size): SLS hands back what was written
        line = loads(text, "a log line") if isinstance(text, str) else None
    except OutsideDataError:
        line = None
    if not isinstance(line, dict):  # text as SLS gave it; any other value as its text (a NaN is no JSON)
        line = {"message": text if isinstance(text, str) else "" if text is None else str(text)[:300]}
    stamp = str(row.get("__time__", ""))
    if "time" not in line and stamp.isascii() and stamp.isdigit() and len(stamp) <= 10:  # until 2286
        line["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(stamp)))
    return line


def render(line: Dict[str, Any]) -> str:
    """``TIME LEVEL MESSAGE field=value ...``: one log entry on one line (wrapped by the terminal's Fitted)."""
    from functions.base.textsafe import escape

    head = [str(line.get("time", "")), str(line.get("level", "")), str(line.get("message", ""))]
    rest = ["%s=%s" % (k, json.dumps(line[k]) if isinstance(line[k], (dict, list)) else line[k])
            for k in SHOWN if line.get(k) not in (None, "")]
    return escape(" ".join(h for h in head if h) + ("" if not rest else " " + " ".join(rest)))


def _client(region: str, keys):
    """The SLS client and runtime: the region's endpoint (``<region>.log.aliyuncs.com``, the gateway's own),
    or ACK_MIG_SLS_ENDPOINT. SLS puts the project in the host (``<project>.<endpoint>``), which an address
    cannot carry: an IP-address override (an emulator) gets the requests as an HTTP proxy instead."""
    from alibabacloud_sls20201230.client import Client
    from alibabacloud_tea_openapi import utils_models as openapi_models
    from darabonba.runtime import RuntimeOptions

    override = settings.parse_endpoint(settings.environment(), settings.SLS_ENDPOINT)
    connect_ms = min(settings.connect_timeout_s(), TIMEOUT_S) * 1000  # a connection: seconds, not the call's 30
    config = openapi_models.Config(
        access_key_id=keys.access_key_id, access_key_secret=keys.access_key_secret,
        security_token=keys.security_token, region_id=region,
        read_timeout=TIMEOUT_S * 1000, connect_timeout=connect_ms)
    runtime = RuntimeOptions(read_timeout=TIMEOUT_S * 1000, connect_timeout=connect_ms)
    if override is not None:
        host = override.host.rsplit(":", 1)[0].strip("[]")
        try:
            ipaddress.ip_address(host)
            literal = True
        except ValueError:
            literal = False
        config.protocol = override.protocol
        if literal:
            config.endpoint = "%s.log.aliyuncs.com" % region
            runtime.http_proxy = runtime.https_proxy = "http://%s" % override.host
        else:
            config.endpoint = override.host
    return Client(config), runtime


def fetch(region: str, keys, project: str, logstore: str, statement: str, start: int, end: int,
          limit: int, keep: Optional[Callable[[Dict[str, Any]], bool]] = None) -> List[Dict[str, Any]]:
    """The newest ``limit`` lines (:func:`entry`) of the statement in [start, end) that ``keep`` takes, newest
    first, in pages of 100; at most MAX_SCAN rows are read."""
    from alibabacloud_sls20201230 import models

    from functions.base.deadline import urllib3_guarded
    import urllib3

    urllib3_guarded(urllib3)
    client, runtime = _client(region, keys)
    rows: List[Dict[str, Any]] = []
    read = 0  # rows SLS answered: the next page's offset
    while len(rows) < limit and read < MAX_SCAN:
        # a filter may drop any row: whole pages then, or each call asked for the few lines still missing
        size = min(PAGE, MAX_SCAN - read, limit - len(rows) if keep is None else PAGE)
        request = models.GetLogsRequest(from_=start, to=end, query=statement, line=size, offset=read,
                                        reverse=True)
        for attempt in range(INCOMPLETE_TRIES):
            if attempt:
                time.sleep(INCOMPLETE_WAIT_S)
            body = _body(_get_logs(client, runtime, project, logstore, request, models), project, logstore)
            if as_object(body.get("meta")).get("progress") != "Incomplete":
                break
        else:
            raise LogsError("SLS GetLogs of %s/%s answered an incomplete result %d times (its search did not finish "
                            "in time); try again, or narrow it with --since or a filter"
                            % (project, logstore, INCOMPLETE_TRIES), "Incomplete")
        data = body.get("data")
        page = list(data) if isinstance(data, list) else []  # anything else holds no rows of ours
        read += len(page)
        rows.extend(line for line in (entry(r) for r in page) if keep is None or keep(line))
        if len(page) < size:
            break
    return rows[:limit]


def _body(response: Any, project: str, logstore: str) -> Dict[str, Any]:
    """The GetLogs answer's body as SLS sent it (``meta``, ``data``). The SDK reads a body into its model
    through darabonba's ``DaraCore.from_map`` (darabonba/core.py), which swallows any error there and leaves
    the body None, keeping the raw answer in ``_map``: one meta field of another shape (``phraseQueryInfo``
    as text) read as a page with no rows, and ``logs`` said "no lines". The raw body is read then; a body
    that is no JSON object is one line naming the call."""
    if response.body is not None:
        return response.body.to_map() or {}
    raw = getattr(response, "_map", None)
    if not isinstance(raw, dict):
        return {}  # no answer kept at all: no rows, as before
    body = raw.get("body")
    if not isinstance(body, dict):
        raise LogsError("SLS GetLogs of %s/%s answered %s, not SLS's JSON object; nothing of it is read"
                        % (project, logstore, json_type(body)))
    return body


def _get_logs(client, runtime, project: str, logstore: str, request, models):
    """One GetLogs call, its failure one LogsError line."""
    from functions.base.deadline import Guard, failure_code, failure_message

    guard = Guard(TIMEOUT_S)
    try:
        with guard:
            return client.get_logs_with_options(project, logstore, request, models.GetLogsHeaders(), runtime)
    except Exception as exc:  # the SDK's exception types vary by version; code and message are common
        if guard.fired:
            raise LogsError("SLS GetLogs of %s/%s: no answer within %ds" % (project, logstore, TIMEOUT_S)) \
                from None
        unreached = said("sls", exc)  # nothing answers at the address: as every command says it (exit 2)
        if unreached:
            raise LogsError(unreached, exit_code=EXIT_USAGE) from None
        code, message = failure_code(exc), failure_message(exc)
        hint = ""
        if code.startswith(("Unauthorized", "AccessDenied", "Forbidden")):
            hint = "; it needs log:GetLogStoreLogs on the logstore"
        elif code in ("ProjectNotExist", "LogStoreNotExist"):
            hint = "; the stack's LogProject / LogStore name it: check them with `ack-mig-hook doctor`"
        raise LogsError("SLS GetLogs of %s/%s failed: %s: %s%s" % (project, logstore, code, message, hint),
                        SLS_CODES.get(code, code)) from None


def run(args) -> int:
    from functions.commands import deployed

    target = deployed.find(args, "nothing was read")
    if not (target.log_project and target.log_store):
        raise deployed.NotDeployed("stack %s names no LogProject and LogStore: the function's lines are not kept "
                                   "in SLS" % target.stack)
    end = int(time.time()) + 1  # to is exclusive: the line written this second too
    start = end - 1 - args.since
    statement = query(args)
    newest = fetch(target.region, common.keys(args), target.log_project, target.log_store, statement, start, end,
                   args.limit, wanted(args))
    lines = list(reversed(newest))  # oldest first, as a log reads
    if args.json:
        print(json.dumps({"stack": target.stack, "project": target.log_project, "logstore": target.log_store,
                          "query": statement, "from": start, "to": end, "lines": lines}, indent=2))
        return 0
    for line in lines:
        print(render(line))
    if not lines:
        import sys

        print("ack-mig-hook: no lines in %s/%s for %s in the last %ds (--since widens it)"
              % (target.log_project, target.log_store, statement, args.since), file=sys.stderr)
    return 0
