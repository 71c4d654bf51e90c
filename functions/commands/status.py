"""``ack-mig-hook status [--inventory FILE] [--kubeconfig FILE] [--json] [--nodes] [--strict]``: the fleet,
per pool and per node.

It asks the same questions the timer asks, through the same path (``functions.pipeline.event.run_event`` with
a dry run of every labelled pool), so what it calls pending, deferred or in layout is exactly what the
next reconcile will do. The ACK API (or the snapshot's ``nodepools``/``nodes``) gives the pools and their
nodes; the Kubernetes API (the operator's ``--kubeconfig``, ACK's short-lived credential, or the
snapshot's ``kube_nodes``) gives each node's applied layout, its
``nvidia.com/mig.config.state``, its rollout progress and its allocatable ``nvidia.com/mig-*`` resources.

Per pool: the label (the pool's own, whatever its nodes decided), node count, nodes in the requested
layout, pending (this wave, or new nodes), failed (with the node's own reason and, from its rollout record,
how long ago), deferred (with the age of what it waits on), skipped (with why), and the allocatable MIG
resources summed over its nodes. The text fits the terminal (80 columns in a pipe, at most :data:`WIDTH`;
reasons wrap between words, long
layouts are written ``7x1g.5gb``); ``--json`` keeps every value whole. A Kubernetes API that cannot be used
is said on the first line and exits 1; ``--strict`` exits 3 when a node failed or the API cannot be used.
"""

import json
import re
import sys
import time
import textwrap
from typing import Any, Dict, List, Optional

from functions.commands import common, shipped
from functions.commands.terminal import fail
from node_bootstrap.kube import KubeError
from node_bootstrap.mig.annotations import LAYOUTS_ANNOTATION as GPU_LAYOUTS, read_layouts
from node_bootstrap.outside import OutsideDataError

from functions.decision import waves as rp


FAILED_STATES = ("failed",)
STRICT_EXIT = 3
WIDTH = 100  # the widest the text gets, on a wide terminal (terminal.width() decides below that)
# A profile name as the catalogue writes it (1g.5gb, 1g.10gb+me, 1g.24gb+me.all); a layout is several joined
# by "-". Profiles with a hyphen of their own (1g.24gb-me) are left as they are: "-" would be ambiguous.
_PROFILE = r"[1-9]g\.[0-9]+gb(?:[+.][a-z]+)*"
_LAYOUT = re.compile(r"(?<![\w.+-])(%s(?:-%s)+)(?![\w.+-])" % (_PROFILE, _PROFILE))
LONG_LAYOUT = 20  # characters: a layout longer than this is written with counted runs


def abbreviate_layout(layout: str) -> str:
    """``1g.5gb-1g.5gb-1g.5gb-2g.10gb`` -> ``3x1g.5gb-2g.10gb``: runs of the same profile counted, in order
    (so the layout can be read back). Only for text; JSON keeps every value as it is."""
    runs: List[List[Any]] = []
    for part in layout.split("-"):
        if runs and runs[-1][0] == part:
            runs[-1][1] += 1
        else:
            runs.append([part, 1])
    return "-".join(p if n == 1 else "%dx%s" % (n, p) for p, n in runs)


def abbreviate(text: str) -> str:
    """Every layout longer than LONG_LAYOUT characters in ``text``, abbreviated (:func:`abbreviate_layout`)."""
    return _LAYOUT.sub(lambda m: abbreviate_layout(m.group(1)) if len(m.group(1)) > LONG_LAYOUT else m.group(1),
                       text)


def age(seconds: Optional[float]) -> str:
    """``45s``, ``12m``, ``2h 5m``, ``3d 4h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm" % (s // 60)
    if s < 86400:
        return "%dh %dm" % (s // 3600, s % 3600 // 60) if s % 3600 >= 60 else "%dh" % (s // 3600)
    return "%dd %dh" % (s // 86400, s % 86400 // 3600) if s % 86400 >= 3600 else "%dd" % (s // 86400)


def pool_label(pool: Any) -> Optional[str]:
    """The pool's partition label as the pool carries it (``sequence=3g.20gb-3g.20gb``), whatever its nodes
    decided (a passthrough pool's nodes are skipped, its label is still there); both labels when a pool
    carries both (an error the decisions name)."""
    from node_bootstrap.mig import KIND_SEQUENCE, KIND_SIZE, SEQUENCE_LABEL, SIZE_LABEL

    found = ["%s=%s" % (kind, pool.labels[name]) for name, kind in ((SIZE_LABEL, KIND_SIZE),
                                                                     (SEQUENCE_LABEL, KIND_SEQUENCE))
             if name in pool.labels]
    return ", ".join(found) or None


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


def _since(kube: Optional[rp.KubeNode]) -> Optional[float]:
    """When the node's rollout record began (``since``, wall clock), or None without one."""
    progress = kube.progress if kube is not None else None
    return progress.since if progress is not None and progress.since > 0 else None


def _rollout_times(entry: Dict[str, Any], members: List[Optional[rp.KubeNode]]) -> None:
    """The pool's rollout start (the oldest record for its current target) and, when stopped, the oldest
    stop: what a deferral's age counts from when the node has no record of its own."""
    target = (entry["label"] or "").split(", ")[0]
    records = [k.progress for k in members if k is not None and k.progress is not None
               and k.progress.target == target and k.progress.since > 0]
    entry["rollout_since"] = min((p.since for p in records), default=None)
    entry["stopped_since"] = min((p.since for p in records if p.step in rp.STOP_STEPS), default=None)
    stop = rp.stopped_by(target, members)
    entry["stopped_by"] = {"node": stop[0], "step": stop[1].step, "reason": stop[1].reason} if stop else None
    waiting = entry["deferred"] or entry["pending"] or any(
        k is not None and k.progress is not None and k.progress.step in rp.ACTIVE_STEPS for k in members)
    # What the pool's rollout is doing: stopped on a node (waits for a person), paused by the pool label, in
    # progress (nodes in a wave or waiting for one), or None (no rollout, or it is done).
    if stop:
        entry["rollout"] = "stopped"
    elif entry["rollout_since"] is not None and waiting:
        entry["rollout"] = "paused" if entry["paused"] else "in progress"
    else:
        entry["rollout"] = None


def _entry(pool_id: str, pool: Any) -> Dict[str, Any]:
    return {"nodepool_id": pool_id, "name": pool.name if pool else None,
            "label": pool_label(pool) if pool else None,
            "max_unavailable": (pool.labels.get(rp.MAX_UNAVAILABLE_LABEL) if pool else None),
            "paused": bool(pool is not None and rp.paused(pool.labels)), "rollout": None, "stopped_by": None,
            "nodes": 0, "in_layout": 0, "pending": 0, "deferred": 0, "skipped": 0, "unknown": 0, "failed": [], "allocatable": {},
            "rollout_since": None, "stopped_since": None, "node_list": []}


def gpu_layouts(kube: Optional[rp.KubeNode]) -> Optional[Dict[str, str]]:
    """Per GPU index, what the node said it holds after its last apply (annotation ack-mig-hook/gpu-layouts,
    node_bootstrap/kube/nodelabels.py), as "profile@start ..." ("(unreadable)": a GPU the node could not read,
    fallen off the bus); None when it has not said (or unreadable)."""
    text = (kube.annotations.get(GPU_LAYOUTS) if kube else None) or ""
    if not text:
        return None
    try:
        held = read_layouts(text)
    except OutsideDataError:
        return None
    return {str(i): "(unreadable)" if pairs is None else " ".join("%s@%d" % pair for pair in pairs) or "(empty)"
            for i, pairs in sorted(held.items())}


def _serves(pods: Optional[List[dict]]) -> Optional[Dict[str, int]]:
    """The MIG instances the node's pods (bound, not finished) hold, by profile; None when not read."""
    if pods is None:
        return None
    from functions.decision.layout.matching import pod_asks
    from functions.kube.supply import holds_gpus

    out: Dict[str, int] = {}
    for pod in pods:
        if holds_gpus(pod):
            for profile, n in pod_asks(pod).items():
                out[profile] = out.get(profile, 0) + n
    return dict(sorted(out.items()))


def auto_entry(pool: Any, nodes: List[rp.KubeNode], pods: Optional[Dict[str, List[dict]]]) -> Dict[str, Any]:
    """Pure: an auto pool's status entry (the labelled pools' shape): its nodes as the API has them, each
    one's per-GPU layout, its rollout step and what its pods use. ``pods``: by node name, None when the pods
    were not read (a snapshot): "serves" is then unknown. A node is ``in-layout`` when its last change
    succeeded, ``pending`` while one is under way, ``failed`` with its reason, ``skipped`` with MIG off
    (the planner gives it a layout once something waits)."""
    from functions.decision.layout import HEADROOM_LABEL, LAYOUT_LABEL, PROFILES_LABEL

    entry = _entry(pool.nodepool_id, pool)
    bounds = ", ".join("%s=%s" % (k.split("/")[-1], pool.labels[k]) for k in (PROFILES_LABEL, HEADROOM_LABEL)
                       if k in pool.labels)
    entry["label"] = "%s=%s%s" % (LAYOUT_LABEL, pool.labels.get(LAYOUT_LABEL), " (%s)" % bounds if bounds else "")
    entry["auto"] = True
    for kube in sorted(nodes, key=lambda k: k.name):
        p, state, layouts = kube.progress, kube.labels.get(rp.STATE_LABEL), gpu_layouts(kube)
        failed = _failure(kube)
        serves = _serves(None if pods is None else pods.get(kube.name, []))
        if failed:
            status, reason = "failed", failed
            entry["failed"].append({"node": kube.name, "reason": failed, "since": _since(kube)})
        elif (p is not None and p.step in rp.ACTIVE_STEPS) or state in ("pending", "rebooting"):
            status, reason = "pending", "changing: %s" % (p.step if p is not None and p.step in rp.ACTIVE_STEPS
                                                         else "%s=%s" % (rp.STATE_LABEL, state))
            entry["pending"] += 1
        elif state == "success":
            status, reason = "in-layout", "the planner's last change is done" if p is not None else "MIG applied"
            entry["in_layout"] += 1
        else:
            status, reason = "skipped", "MIG off: its GPUs get a layout once a MIG pod waits for them"
            entry["skipped"] += 1
        if serves is not None:
            reason += "; serves %s" % (", ".join("%s x%d" % kv for kv in serves.items()) or "no MIG pod")
        entry["nodes"] += 1
        for key, count in kube.mig_allocatable().items():
            entry["allocatable"][key] = entry["allocatable"].get(key, 0) + count
        entry["node_list"].append({
            "node": kube.name, "instance_id": kube.instance_id or None, "status": status, "action": None,
            "applied": kube.labels.get(rp.APPLIED_LABEL) or ("per-GPU" if layouts else None),
            "mig_state": state, "rollout_step": p.step if p is not None else None, "since": _since(kube),
            "cordoned": kube.unschedulable, "reason": reason, "gpus": layouts, "serves": serves})
    return entry


def summarize(result: Any, pools: List[Any], kube_nodes: Optional[Dict[str, rp.KubeNode]],
              autoscaler_mode: str = "auto", kube_error: Optional[str] = None,
              now: Optional[float] = None) -> Dict[str, Any]:
    """Pure: the dry-run result of a reconcile, the pools, and the Kubernetes nodes -> the status.
    ``kube_error``: why the Kubernetes API could not be used (None: it answered, or there is no Kubernetes
    side); ``now``: wall-clock time the ages count to (default: the time now)."""
    now = time.time() if now is None else now
    by_pool: Dict[str, Dict[str, Any]] = {}
    members: Dict[str, List[Optional[rp.KubeNode]]] = {}
    names = {p.nodepool_id: p for p in pools}
    for d in result.decisions:
        pool_id = d.nodepool_id or "(no pool)"
        entry = by_pool.get(pool_id)
        if entry is None:
            entry = by_pool[pool_id] = _entry(pool_id, names.get(pool_id))
        if entry["label"] is None and d.partition is not None:  # a pool the lookup did not list
            entry["label"] = "%s=%s" % (d.partition.kind, d.partition.value)
        kube = (kube_nodes or {}).get(d.node_name or "")
        members.setdefault(pool_id, []).append(kube)
        why_failed = _failure(kube)
        if d.action == "error":
            why_failed = why_failed or d.reason
        if why_failed:
            state = "failed"
            entry["failed"].append({"node": d.node_name or d.instance_id, "reason": why_failed,
                                    "since": _since(kube)})
        elif d.action == "skip" and d.partition is not None:
            state = "in-layout"
            entry["in_layout"] += 1
        elif d.action == "defer" and kube_error:  # waiting only because the API server cannot be read
            state = "unknown"
            entry["unknown"] += 1
        elif d.action == "defer":
            state = "deferred"
            entry["deferred"] += 1
        elif d.action == "partition":
            state = "pending"
            entry["pending"] += 1
        else:
            state = "skipped"
            entry["skipped"] += 1
        entry["nodes"] += 1
        for key, count in (kube.mig_allocatable() if kube else {}).items():
            entry["allocatable"][key] = entry["allocatable"].get(key, 0) + count
        entry["node_list"].append({
            "node": d.node_name, "instance_id": d.instance_id, "status": state, "action": d.action,
            "applied": kube.labels.get(rp.APPLIED_LABEL) if kube else None,
            "mig_state": kube.labels.get(rp.STATE_LABEL) if kube else None,
            "rollout_step": kube.progress.step if kube and kube.progress else None,
            "since": _since(kube), "cordoned": kube.unschedulable if kube else None, "reason": why_failed or d.reason,
            "gpus": gpu_layouts(kube)})
    for pool_id, entry in by_pool.items():
        _rollout_times(entry, members.get(pool_id, []))
        for n in entry["node_list"]:  # a deferral without a record of its own waits on the pool's rollout
            if n["status"] == "deferred" and n["since"] is None:
                n["since"] = entry["stopped_since"] or entry["rollout_since"]
    _add_autoscaler(by_pool, pools, autoscaler_mode)
    ordered = [by_pool[k] for k in sorted(by_pool)]
    return {"cluster_id": result.cluster_id, "outcome": result.outcome, "reason": result.reason,
            "kubernetes": kube_nodes is not None and kube_error is None, "kubernetes_error": kube_error,
            "now": round(now, 3), "pools": ordered, "paused_pools": [p["nodepool_id"] for p in ordered if p["paused"]],
            "rollouts": {p["nodepool_id"]: p["rollout"] for p in ordered if p["rollout"]}}


def _add_autoscaler(by_pool: Dict[str, Dict[str, Any]], pools: List[Any], mode: str) -> None:
    """Each pool's ``autoscaler``: whether the cluster-autoscaler's template node advertises the layout's MIG
    resources (functions/decision/autoscaler_tags.py). A labelled pool without nodes (an autoscaling pool at zero)
    gets an entry of its own: its template is what scales it out."""
    from functions.decision.autoscaler_tags import is_ours, template_status
    from functions.decision.decide import has_partition_label

    for pool in pools:
        entry = by_pool.get(pool.nodepool_id)
        if entry is None:
            if not has_partition_label(pool) and not any(is_ours(k) for k in pool.tags):
                continue
            entry = by_pool[pool.nodepool_id] = _entry(pool.nodepool_id, pool)
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


def _wrap(line: str, more: Optional[str] = None, columns: int = WIDTH) -> List[str]:
    """One logical line as lines of at most ``columns``, broken between words (never inside a layout at
    its hyphens), continuation lines indented ``more`` (default: two more than the line's own indent)."""
    text = abbreviate(line)
    if len(text) <= columns:
        return [text]
    indent = text[:len(text) - len(text.lstrip(" "))]
    return textwrap.wrap(text.lstrip(" "), columns, initial_indent=indent,
                         subsequent_indent=more if more is not None else indent + "  ",
                         break_on_hyphens=False, break_long_words=True) or [""]


def _ago(since: Optional[float], now: float) -> str:
    return "" if since is None else " %s ago" % age(now - since)


def render(status: Dict[str, Any], nodes: bool, columns: Optional[int] = None) -> str:
    """The text: ``columns`` wide (default: the terminal's, 80 in a pipe, at most :data:`WIDTH`)."""
    from functions.base.textsafe import escape_data
    from functions.commands.terminal import width

    status = escape_data(status)  # node names, reasons and labels come from the cluster: no terminal escapes
    now = status.get("now") or time.time()
    out: List[str] = []
    columns = columns or min(WIDTH, width())

    def line(text: str, more: Optional[str] = None) -> None:
        out.extend(_wrap(text, more, columns))

    if status.get("kubernetes_error"):
        line("cluster %s: the Kubernetes API cannot be used (%s): applied layouts, rollouts and failures are "
             "unknown, and running nodes wait until it answers; the function needs the cluster's VPC and the "
             "RBAC of deploy/rbac.yaml (`ack-mig-hook doctor` checks both)" % (
                 status["cluster_id"], status["kubernetes_error"]))
    else:
        line("cluster %s%s" % (status["cluster_id"], "" if status["kubernetes"] else
                               " (no Kubernetes view: applied layouts unknown, every node counts as pending)"))
    if status["outcome"] != "done" and not (status.get("kubernetes_error") and status["outcome"] == "retry"):
        line("  %s: %s" % (status["outcome"], status["reason"]))
    if "function" in status:
        for text in _function_lines(status["function"]):
            line(text, "    ")
    if status.get("paused_pools"):
        line("paused pools: %s (ack-mig-hook rollout resume POOL)" % ", ".join(status["paused_pools"]))
    if status.get("rollouts"):
        line("pools in rollout: %s" % ", ".join("%s (%s)" % kv for kv in sorted(status["rollouts"].items())))
    for p in status["pools"]:
        name = "%s (%s)" % (p["nodepool_id"], p["name"]) if p["name"] else p["nodepool_id"]
        line("pool %s: %s%s" % (name, p["label"] or "no partition label",
                                "; PAUSED (%s=true): nothing new starts" % rp.PAUSED_LABEL if p.get("paused") else ""))
        counts = "  nodes %d: in layout %d, pending %d, failed %d, deferred %d" % (
            p["nodes"], p["in_layout"], p["pending"], len(p["failed"]), p["deferred"])
        if p.get("skipped"):
            counts += ", skipped %d" % p["skipped"]
        if p.get("unknown"):
            counts += ", unknown %d (not checked: the Kubernetes API cannot be used)" % p["unknown"]
        if p.get("not_checked"):
            counts = "  nodes: not checked: %s" % p["not_checked"]
        if p.get("rollout_since") is not None and (p["deferred"] or p["pending"] or p["failed"]):
            counts += "; rollout since%s" % _ago(p["rollout_since"], now)
            if p.get("rollout") == "stopped" and p.get("stopped_by"):
                counts += ", STOPPED at node %s (%s)" % (p["stopped_by"]["node"], p["stopped_by"]["step"])
            elif p.get("rollout") == "paused":
                counts += ", paused"
        line(counts)
        if _autoscaler_line(p.get("autoscaler")):
            line(_autoscaler_line(p["autoscaler"]))
        if p["allocatable"]:
            line("  allocatable: %s" % ", ".join("%s=%d" % kv for kv in sorted(p["allocatable"].items())))
        for f in p["failed"]:
            line("  failed %s%s: %s" % (f["node"], _ago(f.get("since"), now), f["reason"]), "    ")
        skipped: Dict[str, int] = {}
        for n in p.get("node_list") or []:
            if n["status"] == "skipped":
                skipped[n["reason"]] = skipped.get(n["reason"], 0) + 1
        if not nodes:
            for reason, count in list(skipped.items())[:3]:
                line("  skipped %d: %s" % (count, reason), "    ")
            if len(skipped) > 3:
                line("  skipped: %d more reasons (--nodes shows each node)" % (len(skipped) - 3))
            continue
        for n in p.get("node_list") or []:
            when = _ago(n.get("since"), now) if n["status"] in ("deferred", "failed") else ""
            line("    %s  %s%s  applied %s  state %s%s" % (
                n["node"] or n["instance_id"], n["status"], when, n["applied"] or "-", n["mig_state"] or "-",
                "  cordoned" if n["cordoned"] else ""), "      ")
            line("      %s" % n["reason"], "      ")
            for index, layout in (n.get("gpus") or {}).items():
                line("      GPU %s: %s" % (index, layout), "        ")
    return "\n".join(out)


def _function_lines(info: Dict[str, Any]) -> List[str]:
    """The run record (functions/kube/last_run.py) in words: the last run, then each trigger's last run."""
    from functions.decision import run_record as lr

    if info.get("error"):
        return ["function: last run unknown (the run record was not read: %s)" % info["error"]]
    record = info.get("record")
    if record is None:
        return ["function: no run recorded yet (the deployed function records each run in Lease %s/%s)"
                % ("default", lr.RECORD_LEASE)]
    now, last = info["now"], record["last"]
    out = ["function: last ran%s, %s: %s" % (_ago(last["at"], now), lr.trigger_key(last["trigger"], last["event_type"]),
                                              lr.summary(last))]
    others = ["%s%s %s" % (key, _ago(e["at"], now), e["outcome"]) for key, e in record["by_trigger"].items()]
    if others:
        out.append("  by trigger: %s" % "; ".join(others))
    return out


def configure(parser, command):
    parser.add_argument("--inventory", metavar="FILE", type=shipped.inventory_file,
                        help="cluster snapshot (or example:NAME, one shipped with the package) {cluster_id, nodepools, nodes, kube_nodes}; without it the ACK "
                             "and Kubernetes APIs are asked (credentials needed)")
    common.add_cloud_options(parser, kubeconfig_help="your kubeconfig for the Kubernetes side (the ACK side from "
                                                     "--inventory or the ACK API); default: the snapshot's "
                                                     "kube_nodes, else a short-lived one ACK issues for the cluster")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--nodes", action="store_true", help="one line per node as well")
    parser.add_argument("--strict", action="store_true",
                        help="exit %d when any node failed or the Kubernetes API cannot be read (for CI and "
                             "alerts)" % STRICT_EXIT)
    from functions.commands.watch import add_watch_options

    add_watch_options(parser)


def checked_kubeconfig(path: str) -> str:
    """The --kubeconfig file, read once now so that a wrong one is one line (exit 2), not a deferred fleet."""
    from node_bootstrap.kube import KubeError, load_kubeconfig

    from functions.base.settings import SettingsError

    try:
        load_kubeconfig(path)
    except KubeError as exc:
        raise SettingsError("--kubeconfig: %s" % exc) from None
    return path


def reachable(server: str) -> None:
    """Connect to the API server once (common.connect: ACK_MIG_CONNECT_TIMEOUT_S, a note after 2 s on a
    terminal) before anything is decided: an unreachable one is one line naming it at once."""
    from urllib.parse import urlsplit

    split = urlsplit(server)
    common.connect("the API server", split.hostname or "", split.port or 443,
                   "check that this machine reaches it (the cluster's public endpoint, a VPN), or pass another "
                   "--kubeconfig")


class _Watched:
    """The Kubernetes backend as ``status`` reads it: the first failure other than a 404 (no answer, 403,
    5xx after the client's retries) is kept, to be reported, and answers every later call at once, so an
    unreachable API server is waited out once, not once by the dry run and again by the status."""

    def __init__(self, backend: Any) -> None:
        self.backend, self.failure = backend, None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.failure is not None:
            raise self.failure
        from functions.base.errors import EventOutcome

        try:
            return getattr(self.backend, method)(*args, **kwargs)
        except KubeError as exc:
            if exc.status != 404:
                self.failure = exc
            raise
        except EventOutcome as exc:  # ACK would not hand out the cluster credential (DescribeClusterUserKubeconfig)
            self.failure = KubeError("no cluster credential from ACK: %s" % exc.reason, None)
            raise self.failure from None

    def list_nodes(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("list_nodes", *args, **kwargs)

    def get_node(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_node", *args, **kwargs)


def collect(settings: Any, lookup: Any = None, kube: Any = None, now: Optional[float] = None,
            unreached: Any = None, logger: Any = None) -> Dict[str, Any]:
    """``unreached``: the KubeError of an API server found unreachable already: no call is made to it."""
    from functions.base.logs import JsonLogger
    from functions.pipeline.event import run_event
    from functions.kube.nodes import NodeView
    from functions.rollout.run import kube_view

    cluster = getattr(lookup, "cluster_id", None) or settings.cluster_id
    if not cluster:
        from functions.base.settings import SettingsError

        raise SettingsError("status needs a cluster: give --cluster-id ID (or ACK_MIG_CLUSTER_ID), or --inventory "
                            "FILE")
    if kube is not None:
        view = kube if isinstance(kube, NodeView) else NodeView(kube)
    else:  # --kubeconfig, else the snapshot's kube_nodes, else the live API server through ACK's credential
        view = kube_view(lookup, lookup, settings, cluster)
    watched = None
    if view is not None:
        watched = _Watched(common.one_deadline(view.backend))
        watched.failure = unreached
        view = NodeView(watched)
    if lookup is None:  # the live cluster: the ACK API for pools and nodes
        from functions.cloud.cs_lookup import CsLookup

        lookup = CsLookup(settings)
    result = run_event(json.dumps({"cluster_id": cluster}), settings, inventory=lookup, dry_run=True,
                       logger=logger or JsonLogger("OFF"), kube=view)
    pools = lookup.nodepools(cluster) if lookup is not None else []
    known = None
    if view is not None:
        try:  # the nodes the dry run already read (one listing per event), and any it did not need
            view.named([d.node_name for d in result.decisions if d.node_name])
            known = view.known()
        except KubeError:
            known = None
    auto = _auto_pools(view, watched, pools)
    failure = watched.failure if watched is not None else None
    from functions.base.textsafe import clip  # said inside the first line's parentheses: cut where it reads whole

    error = clip(failure, 300) if failure is not None else None
    if now is None and view is not None and error is None:
        # The records' ages on the clock they were written on (the API server's, functions.rollout.run.cluster_clock),
        # not the operator's laptop's; a snapshot's nodes have none: the time here, as before.
        from functions.kube.leases import cluster_now

        now = cluster_now(view.backend)
    status = summarize(result, pools, None if error else known, settings.autoscaler_tags, error, now)
    # A live API server only (a KubeApi knows whether it is ``connected``): a snapshot's nodes hold no record.
    if view is not None and error is None and hasattr(getattr(view.backend, "backend", view.backend), "connected"):
        from functions.kube.last_run import read as read_record

        status["function"] = read_record(view.backend)  # when the function last ran, and what it did
        if now is not None:
            status["function"]["now"] = now
    if auto:  # an auto pool's nodes carry no partition decision: shown from what the API holds (or not checked)
        ids = {e["nodepool_id"] for e in auto}
        status["pools"] = sorted([p for p in status["pools"] if p["nodepool_id"] not in ids] + auto,
                                 key=lambda p: p["nodepool_id"])
    return status


def _auto_pools(view: Any, watched: Any, pools: List[Any]) -> List[Dict[str, Any]]:
    """The auto pools' entries: their nodes (one paged list), and the pods on them when the API can list pods
    (a live API server; a snapshot's kube_nodes has none). [] without a Kubernetes view."""
    from functions.decision.layout import LAYOUT_LABEL

    auto = [p for p in pools if LAYOUT_LABEL in p.labels]
    if not auto or view is None:
        return []
    try:
        listed = view.pool_nodes([p.nodepool_id for p in auto])
    except KubeError:  # the failure is recorded by the watched client and said on the first line
        out = [auto_entry(p, [], None) for p in auto]
        for entry in out:  # listed, not left out: what could not be read is said so
            entry["not_checked"] = "the Kubernetes API cannot be used"
        return out
    backend = getattr(watched, "backend", None)
    pods = None
    if hasattr(backend, "list_all"):
        from functions.kube.demand import pods_on

        try:
            pods = pods_on(backend, [k.name for nodes in listed.values() for k in nodes])
        except KubeError:
            pods = None
    return [auto_entry(p, listed.get(p.nodepool_id, []), pods) for p in auto]


def exit_code(status: Dict[str, Any], strict: bool) -> int:
    """0; 1 when the reconcile did not end done/skip or the Kubernetes API cannot be used; with ``strict``,
    3 when any node failed or the Kubernetes API cannot be used (nodes whose state cannot be known)."""
    if strict and (status.get("kubernetes_error") or any(p["failed"] for p in status["pools"])):
        return STRICT_EXIT
    if status.get("kubernetes_error") or status["outcome"] not in ("done", "skip"):
        return 1
    return 0


def gather(args) -> Dict[str, Any]:
    """One status report for ``args`` (--inventory, or the ACK and Kubernetes APIs). Raises BadInventory,
    SettingsError or KubeError for what the caller reports in one line (exit 2)."""
    from node_bootstrap.kube import KubeError

    from functions.base import settings as names
    from functions.base.logs import JsonLogger
    from functions.base.settings import SettingsError, load_settings

    lookup = None
    if args.inventory:
        from functions.cloud.cluster import InventoryLookup

        lookup = InventoryLookup.from_file(args.inventory)
        env = common.environment_with(None, args.region, args.cluster_id)
    else:
        common.require(args, "cluster_id", "region")
        env = common.environment_with(common.keys(args), args.region, args.cluster_id)
    unreached = None
    if args.kubeconfig:
        from node_bootstrap.kube import load_kubeconfig

        env[names.KUBECONFIG] = checked_kubeconfig(args.kubeconfig)
        # One connection within ACK_MIG_CONNECT_TIMEOUT_S first: an unreachable API server is said at once,
        # naming it, not after a minute of the client's retries; the ACK side is still shown.
        try:
            reachable(load_kubeconfig(args.kubeconfig).server)
        except SettingsError as exc:
            unreached = KubeError(str(exc), None)
    settings = load_settings(env)
    if lookup is None:
        common.reach_cloud(settings)  # the ACK API, before the first call
    return collect(settings, lookup, unreached=unreached,
                   logger=JsonLogger(common.log_level(args), settings.secrets(), stream=sys.stderr, request_id="cli"))


def run(args):
    if getattr(args, "watch", False):
        from functions.commands.watch import watch

        return watch(args, lambda: _once(args, quiet=True), _show)
    return _once(args)


def _once(args, quiet: bool = False):
    """(exit code, status or None) when ``quiet`` (for --watch), else the exit code with the report printed."""
    from node_bootstrap.kube import KubeError

    from functions.base.errors import BadInventory
    from functions.base.settings import SettingsError

    try:
        status = gather(args)
    except (BadInventory, SettingsError, KubeError) as exc:
        from functions.base.textsafe import escape  # the message may quote the file or an API's answer

        code = fail(escape(exc), 2, args.json)
        return (code, None) if quiet else code
    if args.json and not args.nodes:  # the text reads node_list for the skipped reasons
        for p in status["pools"]:
            p.pop("node_list")
    code = exit_code(status, getattr(args, "strict", False))
    if quiet:
        return code, status
    _show(args, status)
    return code


def _show(args, status: Dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(render(status, args.nodes))
