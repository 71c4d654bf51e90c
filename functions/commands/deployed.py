"""What the deployed stack names: its function, and the SLS project and logstore the function logs to, for the
commands that act on the deployed function (``invoke --remote``, ``logs``).

The stack is found as ``wait``, ``undeploy`` and ``doctor`` find it (``--stack-name``, else the cluster's default
name, else an older stack of the legacy name holding this cluster: :func:`functions.commands.common.find_stack`).
The function's name is the stack's ``FunctionName`` output (template.yml ``Outputs``), else its ``FunctionName``
parameter, else the default deploy gives it (``ack-mig-hook-<cluster id>``); the log project and store are the
stack's ``LogProject`` and ``LogStore`` parameters (template.yml ``Parameters``, required there). A stack whose
``ClusterId`` parameter is another cluster's, or that has none, is refused as deploy and undeploy refuse it
(:func:`functions.commands.common.refuse_not_ours`).
"""

from typing import Any, Dict, NamedTuple

from functions.commands import common
from functions.commands.stack.exit_codes import EXIT_CONFLICT


class NotDeployed(RuntimeError):
    """No stack to act on (exit 6: the cloud's state stops the command), with what to do."""

    exit_code = EXIT_CONFLICT


class Deployed(NamedTuple):
    stack: str
    region: str
    function: str
    log_project: str
    log_store: str
    cluster: str = ""  # the stack's ClusterId parameter: the cluster its function serves


def _listed(outputs: Any) -> list:
    """GetStack's Outputs, the objects of it: a list of objects in ROS's model (``GetStackResponseBody.outputs``,
    List[Dict]), which the SDK passes on as it came; anything else in its place holds no output."""
    return [o for o in outputs if isinstance(o, dict)] if isinstance(outputs, list) else []


def pick(stack: Dict[str, Any], stack_name: str, cluster: str, region: str) -> Deployed:
    """The names a GetStack answer holds (pure: tests call it with a stack dict)."""
    outputs = {str(o.get("OutputKey")): o.get("OutputValue") for o in _listed(stack.get("Outputs"))}
    named = outputs.get("FunctionName")
    params = common.stack_parameters(stack)
    function = (named if isinstance(named, str) else "") or params.get("FunctionName") or common.default_name(cluster)
    return Deployed(stack_name, region, function, params.get("LogProject", ""), params.get("LogStore", ""),
                    params.get("ClusterId", ""))


def find(args, nothing: str) -> Deployed:
    """The deployed stack's names (GetStack); :class:`NotDeployed` when there is no stack, or it is gone; a
    CloudError (exit 6) when it is not this cluster's, ``nothing`` saying what the command did not do. Without
    a cluster (no --cluster-id, no ACK_MIG_CLUSTER_ID) a stack of any cluster is taken: --stack-name alone is
    then what says which deployment is meant; one deploy never made is still refused."""
    from functions.commands.deploy import stacks_for

    common.require(args, "region")
    stacks = stacks_for(args, common.keys(args))
    existing = common.find_stack(stacks, args)
    detail = stacks.get(existing["StackId"]) if existing else None
    if not detail:
        raise NotDeployed("no stack %s in %s: nothing is deployed there; run `ack-mig-hook deploy` (or name the "
                          "stack with --stack-name, the cluster with --cluster-id)" % (args.stack_name, args.region))
    # Before anything else is read from it: another cluster's function and logstore would pass for this one's.
    common.refuse_not_ours(args.stack_name, detail, getattr(args, "cluster_id", "") or "", nothing)
    status = str(detail.get("Status") or "")
    if status.startswith("CREATE_") and status != "CREATE_COMPLETE":  # no function yet, or a failed one
        raise NotDeployed("stack %s is %s: its function is not there to call; `ack-mig-hook wait` follows it, "
                          "`ack-mig-hook doctor` says what is wrong" % (args.stack_name, status))
    return pick(detail, args.stack_name, getattr(args, "cluster_id", "") or "", args.region)
