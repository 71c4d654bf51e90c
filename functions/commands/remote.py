"""``ack-mig-hook invoke --remote``: run the DEPLOYED function now, through Function Compute's API, without
waiting for its timer (after a label change, say).

One ``InvokeFunction`` call of the FC 3.0 API (official SDK ``alibabacloud-fc20230330``:
``POST /2023-03-30/functions/{name}/invocations``) with the header ``x-fc-invocation-type: Async``
(``InvokeFunctionHeaders.x_fc_invocation_type``): FC queues the event and answers 202 at once with the
invocation's request id in ``x-fc-request-id`` (FC 3.0 "InvokeFunction": an asynchronous invocation returns
202 and no body). The function then runs as it runs for its triggers, with its own role; what it did is in its
log lines (``ack-mig-hook logs``), its request id on each of them. The payload is the ``--event`` file as it
is, else the manual payload ``{"cluster_id", "nodepool_id"}`` made from ``--cluster-id`` and ``--nodepool-id``.
Nothing runs on this machine; the RAM action is ``fc:InvokeFunction`` on the function (docs/security.md).
"""

import json
from typing import Any, Dict, Optional

from functions.base import settings
from functions.commands import common
from functions.commands.stack.exit_codes import EXIT_USAGE, CloudError
from functions.commands.stack.unreachable import said

TIMEOUT_S = 30  # the whole call: an async invocation is only queued, FC answers at once
# FC's limit on an asynchronous invocation's payload (FC 3.0 "Limits": 128 KB for an async request)
MAX_ASYNC_BYTES = 128 * 1024


class InvokeError(CloudError):
    pass


def payload(args, raw: Optional[bytes]) -> bytes:
    """The body to send: the event file's bytes, else the manual payload (pure)."""
    if raw is not None:
        if len(raw) > MAX_ASYNC_BYTES:
            raise common.UsageError("the event is %d bytes; Function Compute takes at most %d (128 KiB) in an "
                                    "asynchronous invocation" % (len(raw), MAX_ASYNC_BYTES))
        return raw
    if not getattr(args, "cluster_id", ""):
        raise common.UsageError("invoke --remote needs --event FILE, or --cluster-id (and --nodepool-id) for the "
                                "manual payload")
    body: Dict[str, Any] = {"cluster_id": args.cluster_id}
    if getattr(args, "nodepool_id", ""):
        body["nodepool_id"] = args.nodepool_id
    return json.dumps(body, sort_keys=True).encode("utf-8")


def _acted_on(body: bytes) -> Optional[str]:
    """The payload read as the function reads it (both stages of intake, no cloud): one the function would
    refuse or skip is said here, before anything is sent. Returns the cluster the payload names, if any."""
    from functions.base.errors import EventOutcome
    from functions.pipeline.envelope import read_envelope
    from functions.pipeline.intake import parse_envelope

    try:
        return parse_envelope(read_envelope(body)).cluster_id
    except (EventOutcome, ValueError, RecursionError) as exc:
        from functions.base.textsafe import clip, escape

        # cut where it reads whole: a reason can list every field of the payload or every event type handled
        raise common.UsageError("the deployed function would not act on this payload: %s; nothing was sent"
                                % clip(escape(getattr(exc, "reason", "") or exc), 300)) from None


def _about_its_cluster(about: Optional[str], target) -> None:
    """The function skips an event about another cluster than the one it serves (functions/pipeline/event.py
    ``_cluster_id``): such a payload is said, as :func:`_acted_on` says the others, and not sent (pure)."""
    if about and target.cluster and about != target.cluster:
        raise common.UsageError("the deployed function would not act on this payload: the event is about cluster "
                                "%s, but stack %s serves %s; invoke that cluster's stack (--cluster-id %s, or its "
                                "--stack-name); nothing was sent" % (about, target.stack, target.cluster, about))


def invoke_async(region: str, keys, function: str, body: bytes) -> Dict[str, str]:
    """Queue one asynchronous invocation; ``{"request_id", "status"}`` from FC's answer. Raises
    :class:`InvokeError` (its exit code from FC's error code: 4 credentials, 5 permission)."""
    from alibabacloud_fc20230330 import models
    from alibabacloud_fc20230330.client import Client
    from alibabacloud_tea_openapi import utils_models as openapi_models
    from darabonba.runtime import RuntimeOptions

    from functions.base.deadline import Guard, failure_code, failure_message, urllib3_guarded

    override = settings.parse_endpoint(settings.environment(), settings.FC_ENDPOINT)
    connect_ms = min(settings.connect_timeout_s(), TIMEOUT_S) * 1000  # a connection: seconds, not the call's 30
    config = openapi_models.Config(
        access_key_id=keys.access_key_id, access_key_secret=keys.access_key_secret,
        security_token=keys.security_token, region_id=region,
        read_timeout=TIMEOUT_S * 1000, connect_timeout=connect_ms)
    if override is not None:  # else the SDK's own endpoint for the region (its _endpoint_map, fcv3.<region>)
        config.endpoint, config.protocol = override.host, override.protocol
    client = Client(config)
    import urllib3

    urllib3_guarded(urllib3)
    guard = Guard(TIMEOUT_S)
    try:
        with guard:
            response = client.invoke_function_with_options(
                function, models.InvokeFunctionRequest(body=body),
                models.InvokeFunctionHeaders(x_fc_invocation_type="Async"),
                RuntimeOptions(read_timeout=TIMEOUT_S * 1000, connect_timeout=connect_ms))
    except Exception as exc:  # the SDK's exception types vary by version; code and message are common
        if guard.fired:
            raise InvokeError("FC InvokeFunction of %s: no answer within %ds" % (function, TIMEOUT_S)) from None
        unreached = said("fc", exc)  # nothing answers at the address: the line every command says (exit 2)
        if unreached:
            raise InvokeError(unreached, exit_code=EXIT_USAGE) from None
        code, message = failure_code(exc), failure_message(exc)
        text = "FC InvokeFunction of %s failed: %s: %s" % (function, code, message)
        if code == "FunctionNotFound":
            raise InvokeError(text + "; the stack names a function FC does not have: `ack-mig-hook doctor` "
                                     "checks the stack", code, 6) from None
        raise InvokeError(text + ("; it needs fc:InvokeFunction on the function" if code.startswith(
            ("AccessDenied", "Forbidden")) else ""), code) from None
    headers = {str(k).lower(): str(v) for k, v in (response.headers or {}).items()}
    return {"request_id": headers.get("x-fc-request-id", ""), "status": str(response.status_code or "")}


def run(args, raw: Optional[bytes]) -> int:
    from functions.base.textsafe import escape
    from functions.commands import deployed

    body = payload(args, raw)
    about = _acted_on(body)
    if args.inventory or args.dry_run or getattr(args, "kubeconfig", "") or args.strict:
        raise common.UsageError("--inventory, --kubeconfig, --dry-run and --strict are for a local run; "
                                "invoke --remote runs the deployed function as it is configured (its DryRun "
                                "parameter decides)")
    named = args.stack_name  # given on the command line: the follow-up command names it too
    target = deployed.find(args, "nothing was sent")
    _about_its_cluster(about, target)
    answer = invoke_async(args.region, common.keys(args), target.function, body)
    # What the operator copies: it must work in a fresh shell, so it names the request, the stack the way it
    # was named here, and the region (which may have come from a flag).
    follow = "ack-mig-hook logs %s%s--region %s --since 15m" % (
        "--request-id %s " % answer["request_id"] if answer["request_id"] else "",
        "--stack-name %s " % target.stack if named else "--cluster-id %s " % args.cluster_id if args.cluster_id
        else "", target.region)
    result = {"function": target.function, "stack": target.stack, "region": target.region,
              "invocation": "async", "request_id": answer["request_id"], "status": answer["status"],
              "payload_bytes": len(body), "follow": follow,
              "console": "https://fcnext.console.aliyun.com/%s/functions/%s" % (target.region, target.function)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(escape("function %s: invoked asynchronously, request id %s" % (target.function,
                                                                         answer["request_id"] or "(none given)")))
    print(escape("follow it: %s (its lines carry request_id %s), or the FC console's invocation "
                 "records: %s" % (follow, answer["request_id"], result["console"])))
    return 0

