"""``ack-mig-hook status [--inventory FILE] [--kubeconfig FILE] [--json] [--nodes]``: the fleet, per pool
and per node.

It asks the same questions the timer asks, through the same path (``functions.pipeline.run_event`` with
a dry run of every labelled pool), so what it calls pending, deferred or in layout is exactly what the
next reconcile will do. The ACK API (or the snapshot's ``nodepools``/``nodes``) gives the pools and their
nodes; the Kubernetes API (the operator's ``--kubeconfig``, ACK's short-lived credential, or the
snapshot's ``kube_nodes``) gives each node's applied layout, its
``nvidia.com/mig.config.state``, its rollout progress and its allocatable ``nvidia.com/mig-*`` resources.

Per pool: the label, node count, nodes in the requested layout, pending (this wave, or new nodes),
failed (with the node's own reason), deferred, and the allocatable MIG resources summed over its nodes.
"""

import json
import sys
from typing import Any, Dict, List, Optional

from functions.commands import common
from functions.rollout import waves as rp

FAILED_STATES = ("failed",)


def _failure(kube: Optional[rp.KubeNode]) -> Optional[str]:
    """Why a node is failed, from what it says itself (the state label and reason annotation, or the
    rollout's own record), or None."""
    if kube is None:
        return None
    progress = kube.progress
    if progress is not None and progress.step in rp.STOP_STEPS:
        return "%s: %s" % (progress.step, progress.reason or "no reason recorded")
    if kube.labels.get(rp.STATE_LABEL) in FAILED_STATES:
        return kube.annotations.get(rp.REASON_ANNOTATION) or "%s=failed" % rp.STATE_LABEL
    return None


def summarize(result: Any, pools: List[Any], kube_nodes: Optional[Dict[str, rp.KubeNode]],
              autoscaler_mode: str = "auto") -> Dict[str, Any]:
    """Pure: the dry-run result of a reconcile, the pools, and the Kubernetes nodes -> the status."""
    by_pool: Dict[str, Dict[str, Any]] = {}
    names = {p.nodepool_id: p for p in pools}
    for d in result.decisions:
        pool_id = d.nodepool_id or "(no pool)"
        pool = names.get(pool_id)
        entry = by_pool.setdefault(pool_id, {
            "nodepool_id": pool_id, "name": pool.name if pool else None,
            "label": ("%s=%s" % (d.partition.kind, d.partition.value)) if d.partition else None,
            "max_unavailable": (pool.labels.get(rp.MAX_UNAVAILABLE_LABEL) if pool else None),
            "nodes": 0, "in_layout": 0, "pending": 0, "deferred": 0, "failed": [], "allocatable": {},
            "node_list": []})
        if entry["label"] is None and d.partition is not None:
            entry["label"] = "%s=%s" % (d.partition.kind, d.partition.value)
        kube = (kube_nodes or {}).get(d.node_name or "")
        why_failed = _failure(kube)
        if d.action == "error":
            why_failed = why_failed or d.reason
        if why_failed:
            state = "failed"
            entry["failed"].append({"node": d.node_name or d.instance_id, "reason": why_failed})
        elif d.action == "skip" and d.partition is not None:
            state = "in-layout"
            entry["in_layout"] += 1
        elif d.action == "defer":
            state = "deferred"
            entry["deferred"] += 1
        elif d.action == "partition":
            state = "pending"
            entry["pending"] += 1
        else:
            state = "skipped"
        entry["nodes"] += 1
        for key, count in (kube.mig_allocatable() if kube else {}).items():
            entry["allocatable"][key] = entry["allocatable"].get(key, 0) + count
        entry["node_list"].append({
            "node": d.node_name, "instance_id": d.instance_id, "status": state, "action": d.action,
            "applied": kube.labels.get(rp.APPLIED_LABEL) if kube else None,
            "mig_state": kube.labels.get(rp.STATE_LABEL) if kube else None,
            "rollout_step": kube.progress.step if kube and kube.progress else None,
            "cordoned": kube.unschedulable if kube else None, "reason": why_failed or d.reason})
    _add_autoscaler(by_pool, pools, autoscaler_mode)
    return {"cluster_id": result.cluster_id, "outcome": result.outcome, "reason": result.reason,
            "kubernetes": kube_nodes is not None, "pools": [by_pool[k] for k in sorted(by_pool)]}


def _add_autoscaler(by_pool: Dict[str, Dict[str, Any]], pools: List[Any], mode: str) -> None:
    """Each pool's ``autoscaler``: whether the cluster-autoscaler's template node advertises the layout's MIG
    resources (functions/autoscaler_tags.py). A labelled pool without nodes (an autoscaling pool at zero)
    gets an entry of its own: its template is what scales it out."""
    from node_bootstrap.mig import MigInputError, spec_from_labels

    from functions.autoscaler_tags import is_ours, template_status
    from functions.decide import has_partition_label

    for pool in pools:
        entry = by_pool.get(pool.nodepool_id)
        if entry is None:
            if not has_partition_label(pool) and not any(is_ours(k) for k in pool.tags):
                continue
            try:
                spec = spec_from_labels(pool.labels)
            except MigInputError:
                spec = None
            entry = by_pool[pool.nodepool_id] = {
                "nodepool_id": pool.nodepool_id, "name": pool.name,
                "label": "%s=%s" % (spec.kind, spec.value) if spec else None,
                "max_unavailable": pool.labels.get(rp.MAX_UNAVAILABLE_LABEL), "nodes": 0, "in_layout": 0,
                "pending": 0, "deferred": 0, "failed": [], "allocatable": {}, "node_list": []}
        entry["autoscaler"] = template_status(pool, mode)


def _autoscaler_line(a: Optional[Dict[str, Any]]) -> Optional[str]:
    if not a or (not a["auto_scaling"] and not a["advertised"]):
        return None
    scaling = "auto scaling %s" % ("on" if a["auto_scaling"] else "off")
    want = ", ".join("%s=%d" % kv for kv in (a["expected"] or {}).items()) or "no MIG resource"
    if a["advertises"]:
        return "  autoscaler: %s; its template advertises %s" % (scaling, want)
    have = ", ".join("%s=%s" % kv for kv in a["advertised"].items()) or "none"
    if a["expected"] is None:
        return "  autoscaler: %s; tags say %s; %s" % (scaling, have, a["reason"])
    who = ("the next event or reconcile writes them" if a["managed"]
           else "ACK_MIG_AUTOSCALER_TAGS leaves this pool's tags alone")
    return "  autoscaler: %s; its template does NOT advertise the layout (expected %s, tags say %s): %s" % (
        scaling, want, have, who)


def render(status: Dict[str, Any], nodes: bool) -> str:
    from functions.textsafe import escape_data

    status = escape_data(status)  # node names, reasons and labels come from the cluster: no terminal escapes
    lines = ["cluster %s%s" % (status["cluster_id"], "" if status["kubernetes"] else
                               " (no Kubernetes view: applied layouts unknown, every node counts as pending)")]
    if status["outcome"] != "done":
        lines.append("  %s: %s" % (status["outcome"], status["reason"]))
    for p in status["pools"]:
        name = "%s (%s)" % (p["nodepool_id"], p["name"]) if p["name"] else p["nodepool_id"]
        lines.append("pool %s: %s" % (name, p["label"] or "no partition label"))
        lines.append("  nodes %d: in layout %d, pending %d, failed %d, deferred %d" % (
            p["nodes"], p["in_layout"], p["pending"], len(p["failed"]), p["deferred"]))
        if _autoscaler_line(p.get("autoscaler")):
            lines.append(_autoscaler_line(p["autoscaler"]))
        if p["allocatable"]:
            lines.append("  allocatable: %s" % ", ".join("%s=%d" % kv for kv in sorted(p["allocatable"].items())))
        for f in p["failed"]:
            lines.append("  failed %s: %s" % (f["node"], f["reason"]))
        if nodes:
            for n in p["node_list"]:
                lines.append("    %-28s %-10s applied=%s state=%s%s  %s" % (
                    n["node"] or n["instance_id"], n["status"], n["applied"] or "-", n["mig_state"] or "-",
                    " cordoned" if n["cordoned"] else "", n["reason"]))
    return "\n".join(lines)


def configure(parser, command):
    parser.add_argument("--inventory", metavar="FILE",
                        help="cluster snapshot {cluster_id, nodepools, nodes, kube_nodes}; without it the ACK "
                             "and Kubernetes APIs are asked (credentials needed)")
    common.add_cloud_options(parser, kubeconfig_help="your kubeconfig for the Kubernetes side (the ACK side from "
                                                     "--inventory or the ACK API); default: the snapshot's "
                                                     "kube_nodes, else a short-lived one ACK issues for the cluster")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--nodes", action="store_true", help="one line per node as well")


def checked_kubeconfig(path: str) -> str:
    """The --kubeconfig file, read once now so that a wrong one is one line (exit 2), not a deferred fleet."""
    from node_bootstrap.kube import KubeError, load_kubeconfig

    from functions.settings import SettingsError

    try:
        load_kubeconfig(path)
    except KubeError as exc:
        raise SettingsError("--kubeconfig: %s" % exc) from None
    return path


def collect(settings: Any, lookup: Any = None, kube: Any = None) -> Dict[str, Any]:
    from node_bootstrap.kube import KubeError

    from functions.logs import JsonLogger
    from functions.pipeline import run_event
    from functions.rollout.kube import NodeView
    from functions.rollout.run import kube_view

    cluster = getattr(lookup, "cluster_id", None) or settings.cluster_id
    if not cluster:
        from functions.settings import SettingsError

        raise SettingsError("status needs a cluster: give --cluster-id ID (or ACK_MIG_CLUSTER_ID), or --inventory "
                            "FILE")
    if kube is not None:
        view = kube if isinstance(kube, NodeView) else NodeView(kube)
    else:  # --kubeconfig, else the snapshot's kube_nodes, else the live API server through ACK's credential
        view = kube_view(lookup, lookup, settings, cluster)
    if lookup is None:  # the live cluster: the ACK API for pools and nodes
        from functions.cs_lookup import CsLookup

        lookup = CsLookup(settings)
    result = run_event(json.dumps({"cluster_id": cluster}), settings, inventory=lookup, dry_run=True,
                       logger=JsonLogger("OFF"), kube=view)
    pools = lookup.nodepools(cluster) if lookup is not None else []
    known = None
    if view is not None:
        try:  # the nodes the dry run already read (one listing per event), and any it did not need
            view.named([d.node_name for d in result.decisions if d.node_name])
            known = view.known()
        except KubeError:
            known = None
    return summarize(result, pools, known, settings.autoscaler_tags)


def run(args):
    from node_bootstrap.kube import KubeError

    from functions.errors import BadInventory
    from functions import settings as names
    from functions.settings import SettingsError, load_settings

    try:
        lookup = None
        if args.inventory:
            from functions.cluster import InventoryLookup

            lookup = InventoryLookup.from_file(args.inventory)
            env = common.environment_with(None, args.region, args.cluster_id)
        else:
            common.require(args, "cluster_id", "region")
            env = common.environment_with(common.keys(args), args.region, args.cluster_id)
        if args.kubeconfig:
            env[names.KUBECONFIG] = checked_kubeconfig(args.kubeconfig)
        settings = load_settings(env)
        status = collect(settings, lookup)
    except (BadInventory, SettingsError, KubeError) as exc:
        from functions.textsafe import escape  # the message may quote the file or an API's answer

        print("ack-mig-hook: error: %s" % escape(exc), file=sys.stderr)
        return 2
    if args.json:
        if not args.nodes:
            for p in status["pools"]:
                p.pop("node_list")
        print(json.dumps(status, indent=2))
    else:
        print(render(status, args.nodes))
    return 0 if status["outcome"] in ("done", "skip") else 1
