"""``ack-mig-hook undeploy``: delete the stack and wait until it is gone, once it is confirmed.

Before anything is deleted it says what would go (the stack's resources) and checks for a rollout in
progress: a node whose ``ack-mig-hook/rollout`` annotation is in an active step (cordoned, drained,
applying, applied) would stay cordoned or half-done without the function that resumes it. The check reads
the nodes through the Kubernetes API (``--kubeconfig``, else a short-lived kubeconfig from ACK for the
public endpoint when the cluster is known); when it cannot, it says so.

Confirmation: ``--yes``, or ``y`` typed on a terminal. Without a terminal and without ``--yes`` nothing is
deleted (exit 2). ``--dry-run`` says what would be deleted and deletes nothing. What stays on nodes is
listed in docs/deploy.md (Uninstall).
"""

import json
import sys
from typing import Any, Dict, List, NamedTuple

from functions.base.textsafe import clip
from functions.commands import common
from functions.commands.deploy import add_stack_options, progress, stacks_for

# What the stack does not hold, so deleting it leaves: the autoscaler's tags above all (a pool that keeps them
# gets nodes the cluster-autoscaler adds for MIG pods that no new node will serve).
STAYS = "the OSS bucket and its packages, the pools' labels, startup taints and the autoscaler's node-template " \
        "tags, the Leases ack-mig-hook-* in default, and what runs on nodes stay: see docs/deploy.md (Uninstall)"
NODE_PAGE = 500  # nodes per list call (the API server pages with limit/continue)
MAX_PAGES = 200


class RolloutCheck(NamedTuple):
    checked: bool
    active: List[Dict[str, str]]  # node, step, target
    why: str  # why it could not check


def configure(parser, command):
    common.add_cloud_options(parser, cluster_help="the cluster whose nodes are checked for a rollout in progress "
                                                  "(default: $ACK_MIG_CLUSTER_ID)",
                             kubeconfig_help="kubeconfig for the rollout check (default: a 15-minute one that ACK "
                                             "issues for the cluster's public endpoint)")
    add_stack_options(parser)
    parser.add_argument("--yes", action="store_true", help="delete without asking (needed without a terminal)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be deleted; delete nothing")


def active_rollouts(nodes: List[Dict[str, Any]]) -> List[Dict[str, str]]:
    """Pure: the nodes whose rollout record is in an active step (functions/decision/waves.py's)."""
    from functions.decision import waves

    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        record = waves.Progress.from_annotation((meta.get("annotations") or {}).get(waves.PROGRESS_ANNOTATION))
        if record is not None and record.step in waves.ACTIVE_STEPS:
            out.append({"node": str(meta.get("name") or "?"), "step": record.step, "target": record.target})
    return out


def _slim(node: Dict[str, Any]) -> Dict[str, Any]:
    """What active_rollouts reads of a Node (its name and annotations), kept as each page arrives."""
    meta = node.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "annotations": meta.get("annotations") or {}}}


def check_rollout(args, found_keys) -> RolloutCheck:
    from node_bootstrap.kube import KubeError

    from functions.kube.client import KubeApi  # the one Kubernetes client: paged lists, retries

    try:
        if args.kubeconfig:
            client = KubeApi.from_file(args.kubeconfig)
        elif args.cluster_id:
            from functions.cloud.cs_lookup import CsLookup
            from functions.base.settings import load_settings

            config = load_settings(common.environment_with(found_keys, args.region, args.cluster_id))
            text = CsLookup(config).user_kubeconfig(args.cluster_id, private=False)
            client = KubeApi.from_text(lambda: text)
        else:
            return RolloutCheck(False, [], "no --kubeconfig and no --cluster-id (or ACK_MIG_CLUSTER_ID)")
        return RolloutCheck(True, active_rollouts(client.list_nodes(reduce=_slim)), "")
    except KubeError as exc:  # the server's answer only when one came: a kubeconfig refused or a server not
        # reached is no answer (status None)
        cause = clip(str(exc).splitlines()[0], 300)
        return RolloutCheck(False, [], "the Kubernetes API answered: %s" % cause if exc.status else cause)
    except Exception as exc:  # an ACK refusal or an unreachable API server: the check is advice, not a gate
        return RolloutCheck(False, [], clip(exc, 300) or type(exc).__name__)


def _confirm(args, what: str) -> None:
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise common.UsageError("undeploy deletes %s and nothing confirmed it: rerun with --yes (stdin is not a "
                                "terminal to ask on), or --dry-run to see what would go" % what)
    from functions.base.textsafe import escape

    sys.stderr.write("delete %s? [y/N] " % escape(what))  # resource names as ROS answered them: never raw
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise common.UsageError("not deleted: %s was not confirmed" % what)


def run(args) -> int:
    from functions.base.textsafe import escape

    common.require(args, "region")
    found_keys = common.keys(args)
    stacks = stacks_for(args, found_keys)
    existing = common.find_stack(stacks, args)
    result: Dict[str, Any] = {"stack": args.stack_name, "region": args.region, "dry_run": args.dry_run}
    stack_id = existing["StackId"] if existing else ""
    # ListStacks lists a stack whose delete is in progress (an undeploy killed after DeleteStack): ROS may end
    # it before GetStack reads it. Gone is gone, not "a stack without ClusterId, not deploy's" (exit 6).
    current = stacks.get(stack_id) if existing else None
    if current is None:
        result["status"] = "absent"
        _print(args, result, "no stack %s in %s: nothing to remove" % (args.stack_name, args.region))
        return 0
    foreign = common.not_ours(args.stack_name, common.stack_parameters(current), getattr(args, "cluster_id", "") or "")
    if foreign:  # --stack-name may name any stack of the region: only one deploy made, for this cluster, goes
        from functions.commands.stack.ros import StackError
        from functions.commands.stack.exit_codes import EXIT_CONFLICT

        raise StackError("%s; nothing was deleted" % foreign, exit_code=EXIT_CONFLICT)
    resources = [{"logical_id": r.get("LogicalResourceId"), "type": r.get("ResourceType"),
                  "physical_id": r.get("PhysicalResourceId")} for r in stacks.resources(stack_id)]
    rollout = check_rollout(args, found_keys)
    result.update(stack_id=stack_id, resources=resources, rollout=rollout._asdict())
    what = "stack %s (%s) in %s with its %d resources (%s)" % (
        args.stack_name, stack_id, args.region, len(resources),
        ", ".join("%s %s" % (r["logical_id"], r["type"]) for r in resources) or "none")
    if rollout.active:
        progress("warning: a rollout is in progress on %s: without the function they stay as they are (cordoned "
                 "nodes stay cordoned); let it finish, or see docs/operations.md to finish it by hand" % ", ".join(
                     "%s (%s)" % (n["node"], n["step"]) for n in rollout.active))
    elif not rollout.checked:
        progress("warning: could not check for a rollout in progress (%s); give --kubeconfig FILE to check"
                 % rollout.why)
    if args.dry_run:
        result["status"] = "would delete"
        _print(args, result, escape("dry run: would delete %s; %s" % (what, STAYS)))
        return 0
    _confirm(args, what)
    before = stacks.event_ids(stack_id)
    final = None  # gone already when ROS no longer finds it (an earlier delete ended): deleted, as asked
    if stacks.delete(stack_id):
        progress("deleting stack %s (%s) ..." % (args.stack_name, stack_id))
        final = stacks.wait(stack_id, args.timeout * 60, args.poll, progress, before)
    if final is not None and final.get("Status") != "DELETE_COMPLETE":
        from functions.commands.stack.ros import StackError

        result["status"] = final.get("Status")
        if args.json:
            print(json.dumps(result, indent=2))
        raise StackError("stack %s ended %s: %s" % (args.stack_name, final.get("Status"),
                                                    clip(final.get("StatusReason", ""), 300)))
    result["status"] = "deleted"
    _print(args, result, "stack %s deleted; %s" % (args.stack_name, STAYS))
    return 0


def _print(args, result: Dict[str, Any], text: str) -> None:
    print(json.dumps(result, indent=2) if args.json else text)
