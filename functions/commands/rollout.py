"""``ack-mig-hook rollout pause|resume --pool ID``: stop and restart a pool's rolling repartition.

Runs on the operator's machine with their credentials (the standard chain, ``functions.stack.credentials``)
and changes one thing: the node pool label ``ack-mig-hook/paused`` (``true`` pauses), through the ACK API
(DescribeClusterNodePools, then ModifyClusterNodePool with the pool's whole ``kubernetes_config.labels``
list: every other label is written back exactly, key, value and place). The function reads the label at
every plan and between waves (``functions.rollout.waves.paused``): a paused pool starts no new node, the
nodes in progress finish and are uncordoned, the others are deferred with the reason ``paused``. Nothing
is written when the label already says so.

ACK's label rules (the cs20151215 SDK model): at most 20 labels on a pool. A pause that would need a 21st
is refused before anything is written. An empty label list cannot be sent (it would mean "no change"), so
resuming a pool whose only label is the pause writes ``ack-mig-hook/paused=false`` instead.
"""

import json
import re
import sys
from typing import List, Optional, Sequence, Tuple

from functions import settings
from functions.rollout.waves import PAUSED_LABEL

Labels = List[Tuple[str, Optional[str]]]
MAX_LABELS = 20  # cs20151215 ModifyClusterNodePoolRequestKubernetesConfig.labels: "up to 20 labels"
_ID = re.compile(r"^[a-z0-9][a-z0-9-]{1,63}\Z")
_REGION = re.compile(r"^[a-z]{2}(-[a-z0-9]+){1,3}\Z")


class RolloutInputError(ValueError):
    """A flag value that cannot name a cluster, region or pool. One line; exit code 2."""

    exit_code = 2


def configure(parser, command):
    parser.add_argument("action", choices=("pause", "resume"),
                        help="pause: no new node of the pool's rollout starts; resume: it goes on")
    parser.add_argument("--pool", required=True, metavar="ID", help="the node pool id (np...)")
    parser.add_argument("--cluster-id", default=settings.env_text(settings.CLUSTER_ID),
                        help="the ACK cluster (default: $ACK_MIG_CLUSTER_ID)")
    parser.add_argument("--region", default=settings.env_text(settings.REGION),
                        help="the cluster's region (default: $ACK_MIG_REGION)")
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
    """The pool's labels without the pause, and whether that changes them. The one left would be none at
    all: ``paused=false`` instead (an empty list leaves a pool's labels as they are)."""
    from functions.rollout.waves import paused

    if not paused({k: v or "" for k, v in labels if k == PAUSED_LABEL}):
        return list(labels), False
    out = [(k, v) for k, v in labels if k != PAUSED_LABEL]
    return (out or [(PAUSED_LABEL, "false")]), True


def _check(args) -> None:
    for flag, value, pattern, example in (("--pool", args.pool, _ID, "np1f6779297c4444a3a1cdd29be8e5a0b5"),
                                          ("--cluster-id", args.cluster_id, _ID, "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"),
                                          ("--region", args.region, _REGION, "cn-beijing")):
        if not value:
            raise RolloutInputError("missing %s%s" % (flag, "" if flag == "--pool" else
                                                      " (or %s)" % {"--cluster-id": settings.CLUSTER_ID,
                                                                    "--region": settings.REGION}[flag]))
        if not pattern.match(value):
            raise RolloutInputError("%s %r is not one; use the form %s" % (flag, value[:40], example))


# ---- the ACK API (the only part that talks to the cloud) ----

def _lookup(region: str):
    from functions.cs_lookup import CsLookup
    from functions.stack.credentials import resolve

    keys = resolve()
    env = dict(settings.environment(), ALIBABA_CLOUD_ACCESS_KEY_ID=keys.access_key_id,
               ALIBABA_CLOUD_ACCESS_KEY_SECRET=keys.access_key_secret,
               ALIBABA_CLOUD_SECURITY_TOKEN=keys.security_token or "", ACK_MIG_REGION=region)
    return CsLookup(settings.load_settings(env))


def change(cs, cluster_id: str, pool_id: str, action: str) -> dict:
    """Read the pool's labels, write them back with the pause set or removed when that changes them."""
    name, labels = cs.nodepool_labels(cluster_id, pool_id)
    wanted, changed = (paused_labels if action == "pause" else resumed_labels)(labels)
    if changed and len(wanted) > MAX_LABELS:
        raise RolloutInputError("node pool %s has %d labels, the most ACK allows; pausing needs one more: remove a "
                                "label, or stop the rollout by reverting the partition label" % (pool_id, len(labels)))
    if changed:
        cs.set_nodepool_labels(cluster_id, pool_id, wanted)
    return {"cluster_id": cluster_id, "nodepool_id": pool_id, "name": name, "action": action, "changed": changed,
            "paused": action == "pause", "labels": [{"key": k, "value": v} for k, v in wanted]}


def _text(result: dict) -> str:
    from functions.textsafe import escape

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
    return ("pool %s: resumed: label %s removed, the %d other label%s kept; the next invocation (the timer, "
            "every 30 minutes) goes on with the rollout" % (pool, PAUSED_LABEL, others, "" if others == 1 else "s"))


def run(args) -> int:
    from functions.errors import EventOutcome
    from functions.stack.credentials import CredentialsMissing
    from functions.textsafe import escape

    try:
        _check(args)
        result = change(_lookup(args.region), args.cluster_id, args.pool, args.action)
    except (RolloutInputError, CredentialsMissing, EventOutcome) as exc:
        print("ack-mig-hook: error: %s" % escape(exc), file=sys.stderr)
        return getattr(exc, "exit_code", 2) or 2
    print(json.dumps(result, indent=2) if args.json else _text(result))
    return 0
