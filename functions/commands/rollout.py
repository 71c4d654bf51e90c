"""``ack-mig-hook rollout pause|resume|status --pool ID``: stop, restart and follow a pool's rolling
repartition.

``status`` (as ``kubectl rollout status``) reads what ``ack-mig-hook status`` reads and says per pool how far
its rollout is: nodes in layout of all, the current wave, the nodes waiting, a failed node that stopped it,
a pause. It waits until every chosen pool is complete (exit 0), stopped by a failed node or paused (exit 1),
or ``--timeout`` minutes have passed (exit 1), printing a line each time a pool's progress changes;
``--no-watch`` looks once. Without ``--pool`` it follows every labelled pool.

Runs on the operator's machine with their credentials and the flags every cloud command shares
(``functions.commands.common``: ``--cluster-id``, ``--region``, ``--profile``, checked as they are read)
and changes one thing: the node pool label ``ack-mig-hook/paused`` (``true`` pauses), through the ACK API
(DescribeClusterNodePools, then ModifyClusterNodePool with the pool's whole ``kubernetes_config.labels``
list: every other label is written back exactly, key, value and place). The function reads the label at
every plan and between waves (``functions.decision.waves.paused``): a paused pool starts no new node, the
nodes in progress finish and are uncordoned, the others are deferred with the reason ``paused``. Nothing
is written when the label already says so.

ACK's label rules (the cs20151215 SDK model): at most 20 labels on a pool. A pause that would need a 21st
is refused before anything is written. Resuming writes ``ack-mig-hook/paused=false`` rather than leaving the
label out: whether ModifyClusterNodePool replaces a pool's label list or merges into it is not documented,
and a label left out would stay ``true`` under "merge" (``false`` works under both, and an empty list,
which the API takes as "no change", is never sent).
"""

import argparse
import json
import re
import sys
import time
from typing import List, Optional, Sequence, Tuple

from functions.commands import common, shipped
from functions.commands.terminal import fail
from functions.decision.waves import PAUSED_LABEL

Labels = List[Tuple[str, Optional[str]]]
MAX_LABELS = 20  # cs20151215 ModifyClusterNodePoolRequestKubernetesConfig.labels: "up to 20 labels"
POOL_ID = re.compile(r"^np[0-9a-f]{32}\Z")  # np + 32 hex digits (ROS DATASOURCE::CS::ClusterNodePools: npf63e2a53b0594ec4bceacc56741b****)
EXAMPLE_POOL = "np1f6779297c4444a3a1cdd29be8e5a0b5"


class RolloutInputError(ValueError):
    """The pool cannot take the change asked for (e.g. no room for one more label). One line; exit code 2."""

    exit_code = 2


def pool_id(text: str) -> str:
    import argparse

    value = (text or "").strip()
    if not POOL_ID.match(value):
        raise argparse.ArgumentTypeError("%r is not an ACK node pool id; use np followed by 32 lower-case hex "
                                         "digits, e.g. %s (`ack-mig-hook status` lists them)"
                                         % (value[:80], EXAMPLE_POOL))
    return value


def configure(parser, command):
    parser.add_argument("action", choices=("pause", "resume", "status"),
                        help="pause: no new node of the pool's rollout starts; resume: it goes on; status: how "
                             "far it is, waiting until it ends")
    parser.add_argument("--pool", type=pool_id, metavar="ID",
                        help="the node pool id (np...); required for pause and resume; status: every labelled "
                             "pool without it")
    common.add_cloud_options(parser, kubeconfig_help="status: your kubeconfig for the nodes' progress (default: a "
                                                     "short-lived one ACK issues for the cluster)")
    parser.add_argument("--inventory", metavar="FILE", type=shipped.inventory_file,
                        help="status: a cluster snapshot (or example:NAME, one shipped with the package) instead of "
                             "the ACK and Kubernetes APIs (looked at once)")
    parser.add_argument("--watch", action=argparse.BooleanOptionalAction, default=True,
                        help="status: wait until the rollout ends (--no-watch: look once)")
    parser.add_argument("--timeout", type=common.whole_number(1, 1440, "minutes"), default=30, metavar="MINUTES",
                        help="status: how long to wait, 1..1440 minutes (default: %(default)s)")
    parser.add_argument("--interval", type=common.whole_number(1, 3600, "seconds"), default=15, metavar="SECONDS",
                        help="status: seconds between two looks (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


# ---- the labels (pure) ----

def paused_labels(labels: Sequence[Tuple[str, Optional[str]]]) -> Tuple[Labels, bool]:
    """The pool's labels with the pause set, and whether that changes them (the key keeps its place)."""
    out: Labels = []
    found = False
    for key, value in labels:
        if key == PAUSED_LABEL:
            found = True
            if value == "true":
                return list(labels), False
            value = "true"
        out.append((key, value))
    if not found:
        out.append((PAUSED_LABEL, "true"))
    return out, True


def resumed_labels(labels: Sequence[Tuple[str, Optional[str]]]) -> Tuple[Labels, bool]:
    """The pool's labels with the pause set to ``false`` (in its place), and whether that changes them."""
    from functions.decision.waves import paused

    if not paused({k: v or "" for k, v in labels if k == PAUSED_LABEL}):
        return list(labels), False
    return [(k, "false" if k == PAUSED_LABEL else v) for k, v in labels], True


# ---- the ACK API (the only part that talks to the cloud) ----

def _lookup(args):
    from functions.cloud.cs_lookup import CsLookup
    from functions.base.settings import load_settings

    config = load_settings(common.environment_with(common.keys(args), args.region, args.cluster_id))
    common.reach_cloud(config)
    return CsLookup(config)


def change(cs, cluster_id: str, pool_id: str, action: str) -> dict:
    """Read the pool's labels, write them back with the pause set or removed when that changes them; checked
    (functions/cloud/checked_write.py): a label someone else writes meanwhile is kept, never undone."""
    from functions.cloud.checked_write import checked_write

    names = {}

    def read():
        names["name"], labels = cs.nodepool_labels(cluster_id, pool_id)
        return labels

    def changed(labels):
        wanted, differs = (paused_labels if action == "pause" else resumed_labels)(labels)
        if differs and len(wanted) > MAX_LABELS:
            raise RolloutInputError("node pool %s has %d labels, the most ACK allows; pausing needs one more: remove "
                                    "a label, or stop the rollout by reverting the partition label"
                                    % (pool_id, len(labels)))
        return wanted if differs else None

    done = checked_write("the labels of node pool %s" % pool_id, read, changed,
                         lambda labels: cs.set_nodepool_labels(cluster_id, pool_id, labels))
    return {"cluster_id": cluster_id, "nodepool_id": pool_id, "name": names["name"], "action": action,
            "changed": done.written, "paused": action == "pause",
            "labels": [{"key": k, "value": v} for k, v in done.value]}


def _text(result: dict) -> str:
    from functions.base.textsafe import escape

    pool = "%s%s" % (result["nodepool_id"], " (%s)" % escape(result["name"]) if result["name"] else "")
    others = sum(1 for label in result["labels"] if label["key"] != PAUSED_LABEL)
    if result["action"] == "pause":
        if not result["changed"]:
            return "pool %s: already paused (%s=true); nothing written" % (pool, PAUSED_LABEL)
        return ("pool %s: paused: label %s=true written, the %d other label%s kept; no new node of its rollout "
                "starts, nodes in progress finish and are uncordoned" % (pool, PAUSED_LABEL, others,
                                                                        "" if others == 1 else "s"))
    if not result["changed"]:
        return "pool %s: not paused; nothing written" % pool
    return ("pool %s: resumed: label %s=false written, the %d other label%s kept; the next invocation (the "
            "timer, every 30 minutes) goes on with the rollout" % (pool, PAUSED_LABEL, others,
                                                                   "" if others == 1 else "s"))


# ---- rollout status (pure, then the loop) ----

PAUSED_REASON = "paused:"  # how functions/decision/waves.py starts the reason of a node a pause defers


def progress_of(pool: dict) -> dict:
    """One pool's rollout from its ``status`` entry (with ``node_list``): state ``complete`` (every node it
    partitions is in layout), ``stopped`` (a node failed: the pool's rollout stops there), ``paused`` (the
    pool label), ``unknown`` (nodes whose state cannot be read) or ``progressing``; the counts and the wave."""
    nodes = pool.get("node_list") or []
    wave = [n.get("node") or n.get("instance_id") or "?" for n in nodes if n.get("status") == "pending"]
    # the pool label, as status reads it (its "paused" field); a node a pause deferred says so too
    paused = bool(pool.get("paused")) or any(n.get("status") == "deferred" and
                                             str(n.get("reason", "")).startswith(PAUSED_REASON) for n in nodes)
    total = pool.get("nodes", 0) - pool.get("skipped", 0)
    failed = pool.get("failed") or []
    if failed:
        state = "stopped"
    elif pool.get("unknown"):
        state = "unknown"
    elif not pool.get("pending") and not pool.get("deferred"):
        state = "complete"
    else:
        state = "paused" if paused and not wave else "progressing"
    return {"nodepool_id": pool.get("nodepool_id"), "name": pool.get("name"), "label": pool.get("label"),
            "state": state, "in_layout": pool.get("in_layout", 0), "nodes": total, "wave": wave,
            "waiting": pool.get("deferred", 0), "failed": failed}


def progress_line(p: dict) -> str:
    from functions.base.textsafe import escape

    name = "pool %s%s" % (p["nodepool_id"], " (%s)" % escape(p["name"]) if p["name"] else "")
    counts = "%d of %d nodes in layout" % (p["in_layout"], p["nodes"]) if p["nodes"] else \
        "no node it partitions (ack-mig-hook status says why)"
    if p["state"] == "complete":
        return "%s: rollout to %s complete: %s" % (name, p["label"], counts)
    if p["state"] == "stopped":
        first = p["failed"][0]
        why = first.get("reason") if isinstance(first, dict) else first
        who = first.get("node") if isinstance(first, dict) else ""
        return ("%s: rollout to %s stopped: %s; node %s failed: %s; fix it (docs/troubleshooting.md), the next "
                "invocation goes on" % (name, p["label"], counts, escape(who or "?"), escape(why or "?")))
    if p["state"] == "paused":
        return ("%s: rollout to %s paused: %s, %d waiting; `ack-mig-hook rollout resume --pool %s` goes on"
                % (name, p["label"], counts, p["waiting"], p["nodepool_id"]))
    if p["state"] == "unknown":
        return "%s: rollout to %s: %s; some nodes cannot be read (see ack-mig-hook status)" % (name, p["label"],
                                                                                               counts)
    return "%s: rollout to %s: %s; pending (this wave, or new nodes): %s; %d waiting for a later wave" % (
        name, p["label"], counts, ", ".join(escape(w) for w in p["wave"]) or "none (the next invocation starts one)",
        p["waiting"])


def _status_args(args):
    """``args`` as ``status`` reads them (functions/commands/status.py gather)."""
    return argparse.Namespace(**dict(vars(args), nodes=True, strict=False))


def _look(args) -> list:
    from functions.commands.status import gather

    report = gather(_status_args(args))
    pools = [p for p in report["pools"] if p.get("label") and (not args.pool or p["nodepool_id"] == args.pool)]
    if args.pool and not pools:
        raise RolloutInputError("no labelled node pool %s in cluster %s (ack-mig-hook status lists them)"
                                % (args.pool, report.get("cluster_id")))
    return [progress_of(p) for p in pools]


def rollout_status(args, sleep=None, clock=None) -> int:
    """Look every ``--interval`` s until no chosen pool is progressing (or once: --no-watch, a snapshot)."""
    sleep, clock = sleep or time.sleep, clock or time.monotonic
    once = not args.watch or bool(args.inventory)
    deadline = clock() + args.timeout * 60
    said = {}  # pool -> its last line
    while True:
        pools = _look(args)
        for p in pools:
            line = progress_line(p)
            if said.get(p["nodepool_id"]) != line and not args.json:
                print(line, flush=True)
            said[p["nodepool_id"]] = line
        moving = [p for p in pools if p["state"] in ("progressing", "unknown")]
        if once or not moving or clock() + args.interval > deadline:
            break
        sleep(args.interval)
    if args.json:
        print(json.dumps({"pools": pools}, indent=2))
    if moving and not once:
        print("ack-mig-hook: error: %d pool(s) still rolling after %d minutes (--timeout); the rollout goes on: "
              "rerun to keep following it" % (len(moving), args.timeout), file=sys.stderr)
        return 1
    return 0 if all(p["state"] == "complete" for p in pools) or (once and not any(
        p["state"] in ("stopped", "paused") for p in pools)) else 1


def run(args) -> int:
    from functions.base.errors import BadInventory
    from functions.base.settings import SettingsError
    from node_bootstrap.kube import KubeError

    if args.action == "status":
        try:
            return rollout_status(args)
        except (BadInventory, SettingsError, KubeError, RolloutInputError) as exc:
            from functions.base.textsafe import escape

            return fail(escape(exc), 2, args.json)
    if not args.pool:
        return fail("rollout %s needs --pool ID (ack-mig-hook status lists the pools)" % args.action, 2, args.json)
    return _change(args)


def _change(args) -> int:
    from functions.base.errors import EventOutcome, RetryLater
    from functions.commands.stack.credentials import CredentialsMissing
    from functions.cloud.checked_write import ConcurrentChange
    from functions.commands.stack.exit_codes import EXIT_CONFLICT, EXIT_FAILED, EXIT_USAGE, explain
    from functions.base.textsafe import escape, one_line

    try:
        common.require(args, "cluster_id", "region")
        result = change(_lookup(args), args.cluster_id, args.pool, args.action)
    except (common.UsageError, RolloutInputError, CredentialsMissing, EventOutcome) as exc:
        # a refusal of the credentials or of the action is 4 or 5 with what to do, as in every command
        default = EXIT_CONFLICT if isinstance(exc, ConcurrentChange) else \
            EXIT_FAILED if isinstance(exc, RetryLater) else EXIT_USAGE
        code, text = explain(one_line(exc), default)
        return fail(escape(text), code, args.json)
    print(json.dumps(result, indent=2) if args.json else _text(result))
    return 0
