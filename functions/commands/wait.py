"""``ack-mig-hook wait``: follow the ROS stack's operation in progress to its end, as ``kubectl wait`` and
``kubectl rollout status`` do for theirs.

A deploy that was interrupted (Ctrl-C, a closed laptop, a lost connection) leaves the stack's operation
running in ROS: a rerun is refused while the stack is ``*_IN_PROGRESS`` (exit 6), and this command is what
to run meanwhile. It finds the stack the way undeploy and doctor do (``--stack-name``, else the cluster's
default name) and refuses, as they do, one that serves another cluster or none; it prints each new event of
the operation (ListStackEvents) on stderr until the stack leaves ``*_IN_PROGRESS`` (GetStack) or ``--timeout``
passes, and ends with the status and what to do next.

Exit codes: 0 the stack is complete (or gone after a delete, or was never there); 1 the operation ended
failed or rolled back, or the deadline passed; 6 the stack named is another cluster's or none's; 2, 4, 5 as
every command.
"""

import json
import time
from typing import Any, Dict, Optional

from functions.base.textsafe import clip, one_line
from functions.commands import common
from functions.commands.stack.ros import DONE, advice


def configure(parser, command):
    common.add_cloud_options(parser, cluster_help="the cluster whose stack to follow (its default name, "
                                                  "ack-mig-hook-<cluster id>) (default: $ACK_MIG_CLUSTER_ID)",
                             kubeconfig=False)
    common.add_stack_name(parser)
    parser.add_argument("--timeout", type=common.whole_number(1, 1440, "minutes"), default=30, metavar="MINUTES",
                        help="how long to wait, 1..1440 minutes (default: %(default)s)")
    parser.add_argument("--poll", type=common.number(0, 60, "seconds"), default=5.0, metavar="SECONDS",
                        help="seconds between two GetStack calls (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def run(args) -> int:
    from functions.commands.deploy import progress, stacks_for
    from functions.commands.stack.ros import StackError

    common.require(args, "region")
    stacks = stacks_for(args, common.keys(args))
    existing = common.find_stack(stacks, args)
    result: Dict[str, Any] = {"stack": args.stack_name, "region": args.region, "stack_id": None}
    if not existing:
        result["status"] = "absent"
        return _done(args, result, 0, "no stack %s in %s: nothing in progress" % (args.stack_name, args.region))
    result["stack_id"] = stack_id = existing["StackId"]
    detail = stacks.get(stack_id)
    if detail:  # gone meanwhile (a delete ending): nothing left to tell whose it was, nor to wait for long
        # Another cluster's operation ending would read as this cluster's deploy done. Without a cluster
        # (no --cluster-id, no ACK_MIG_CLUSTER_ID) --stack-name alone says which is meant, as for logs.
        common.refuse_not_ours(args.stack_name, detail, getattr(args, "cluster_id", "") or "",
                               "nothing was waited on")
    stack: Optional[Dict[str, Any]] = detail or existing
    status = str(stack.get("Status", ""))
    started = time.monotonic()
    if status.endswith("_IN_PROGRESS"):
        progress("stack %s is %s; waiting for it to end (at most %d minutes)" % (args.stack_name, status,
                                                                               args.timeout))
        try:
            stack = stacks.wait(stack_id, args.timeout * 60, args.poll, progress, stacks.event_ids(stack_id))
        except StackError as exc:  # the deadline: the operation goes on in ROS
            result["status"] = status
            return _timeout(args, result, exc)
    final = "DELETE_COMPLETE" if stack is None else str(stack.get("Status", ""))
    result.update(status=final, waited_s=round(time.monotonic() - started, 1),
                  reason=None if stack is None else clip(stack.get("StatusReason") or "", 300))
    if final in DONE:
        return _done(args, result, 0, "stack %s: %s" % (args.stack_name, final))
    result["advice"] = advice(final, args.stack_name, args.region)
    return _done(args, result, 1, "stack %s: %s%s; %s" % (args.stack_name, final,
                                                           " (%s)" % result["reason"] if result["reason"] else "",
                                                           result["advice"]))


def _timeout(args, result: Dict[str, Any], exc: Exception) -> int:
    from functions.commands.terminal import fail

    result["advice"] = "rerun `ack-mig-hook wait` to keep waiting"
    if args.json:
        print(json.dumps(result, indent=2))
    from functions.base.textsafe import escape

    return fail(escape(one_line(exc)), 1)  # it quotes the stack's status as ROS answered it


def _done(args, result: Dict[str, Any], code: int, text: str) -> int:
    from functions.base.textsafe import escape

    print(json.dumps(result, indent=2) if args.json else escape(text))
    return code
