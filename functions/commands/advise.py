"""``ack-mig-hook advise --pool P [--inventory FILE] [--kubeconfig FILE] [--json]``: an auto pool's demand,
plan and reasons (docs/auto-pools.md). Reads only: nothing is applied, labelled or tagged.

Where it reads from: the pool (labels, taints) from ``--inventory`` (its ``nodepools``) or the ACK API; the
Kubernetes side from ``--kubeconfig`` (one paged list of Pending pods, the pods of the pool's nodes) or, in
a snapshot, ``"kubernetes"``: what ``kubectl get nodes,pods -A -o json`` prints (a List of Node and Pod items).
"""

import json
import sys
from typing import Any, Dict, List

from functions.commands import common, shipped

POOL_LABEL = "alibabacloud.com/nodepool-id"


class AdviseError(ValueError):
    """Input advise cannot use: one line, exit 2."""


def configure(parser, command):
    parser.add_argument("--pool", required=True, metavar="ID_OR_NAME", help="the node pool (its id or its name)")
    parser.add_argument("--inventory", metavar="FILE", type=shipped.inventory_file,
                        help="cluster snapshot (or example:NAME, one shipped with the package) {cluster_id, nodepools, nodes, kubernetes}; kubernetes is what "
                             "'kubectl get nodes,pods -A -o json' prints")
    common.add_cloud_options(parser, kubeconfig_help="kubeconfig for the Kubernetes API (default: the snapshot's "
                                                     "kubernetes objects)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _snapshot(path: str) -> Dict[str, Any]:
    from functions.base.errors import BadInventory
    from functions.cloud.cluster import read_snapshot

    data = read_snapshot(path, '{"cluster_id", "nodepools", "nodes", "kubernetes"}')
    if not isinstance(data, dict):
        raise BadInventory("inventory %s must be a JSON object {cluster_id, nodepools, nodes, kubernetes}" % path)
    return data


def _objects(data: Dict[str, Any]) -> List[dict]:
    kube = data.get("kubernetes")
    if kube is None:
        raise AdviseError("no Kubernetes objects: give --kubeconfig FILE, or add \"kubernetes\" to the snapshot "
                          "(what 'kubectl get nodes,pods -A -o json' prints)")
    items = kube.get("items") if isinstance(kube, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise AdviseError("the snapshot's \"kubernetes\" must be a List {\"items\": [Node and Pod objects]}, as "
                          "'kubectl get nodes,pods -A -o json' prints")
    from functions.kube.shapes import problem

    for index, item in enumerate(items):  # a hand-edited object: one line naming the field, not a TypeError later
        wrong = problem(item, where="kubernetes.items[%d]" % index)
        if not wrong and not ((item.get("metadata") or {}).get("name")):
            wrong = "kubernetes.items[%d].metadata.name: missing; every object has a name" % index
        if wrong:
            raise AdviseError("the snapshot's %s, as the Kubernetes API writes it" % wrong)
    return items


def _pool(pools: List[Any], wanted: str) -> Any:
    found = [p for p in pools if wanted in (p.nodepool_id, p.name)]
    if len(found) != 1:
        from functions.base.textsafe import clip  # whole entries: never "np-.. (gpu-mi" with its "(" open

        known = clip(", ".join(sorted("%s (%s)" % (p.nodepool_id, p.name or "-") for p in pools)), 300) or "none"
        raise AdviseError("%s pool %r; give a pool id or a unique name: %s" % (
            "no" if not found else "more than one", wanted[:60], known))
    return found[0]


def gather(args) -> Dict[str, Any]:
    from functions.base.settings import load_settings
    from functions.pipeline.auto_pool import advise, proven_members

    data = _snapshot(args.inventory) if args.inventory else {}
    if args.inventory:
        from functions.cloud.cluster import InventoryLookup

        lookup = InventoryLookup.from_dict(data, args.inventory)
        cluster = lookup.cluster_id
    else:
        common.require(args, "cluster_id", "region")
        from functions.cloud.cs_lookup import CsLookup

        config = load_settings(common.environment_with(common.keys(args), args.region, args.cluster_id))
        common.reach_cloud(config)
        lookup = CsLookup(config)
        cluster = args.cluster_id
    pool = _pool(lookup.nodepools(cluster), args.pool)
    selected = lambda labels: (labels or {}).get(POOL_LABEL) == pool.nodepool_id  # noqa: E731
    if args.kubeconfig:
        from functions.kube.client import KubeApi
        from functions.kube.demand import pending_pods, pods_on, slim
        from functions.kube.supply import list_pool_nodes

        from functions.rollout.plan_claim import dwell_for_advice

        from node_bootstrap.kube import load_kubeconfig

        from functions.commands.status import reachable

        reachable(load_kubeconfig(args.kubeconfig).server)  # one line naming it, as invoke and status say it
        api = common.one_deadline(KubeApi.from_file(args.kubeconfig))
        try:
            nodes = list_pool_nodes(api, "%s=%s" % (POOL_LABEL, pool.nodepool_id))
            pending = pending_pods(api)
            by_node = pods_on(api, [(n.get("metadata") or {}).get("name") or "" for n in nodes])
            # the dwell as the tick reads it (the pool's Lease, read only): GPUs changed lately stay
            dwell, dwell_note = dwell_for_advice(api, pool.nodepool_id, pending, load_settings())
        finally:
            api.close()
    else:  # a snapshot has no Lease: the advice is the plan without the dwell (docs/auto-pools.md)
        dwell, dwell_note = None, ""
        items = _objects(data)
        nodes = [i for i in items if i.get("kind") == "Node" and selected((i.get("metadata") or {}).get("labels"))]
        names = {(n.get("metadata") or {}).get("name") for n in nodes}
        pods = [i for i in items if i.get("kind") == "Pod"]
        pending = [p for p in pods if (p.get("status") or {}).get("phase") == "Pending"]
        by_node = {name: [p for p in pods if (p.get("spec") or {}).get("nodeName") == name] for name in sorted(names)}
    # Only nodes ACK lists in the pool count, as on the function's tick (auto_pool.proven_members).
    members = {n.node_name: n for n in lookup.nodes(cluster, pool.nodepool_id) if n.node_name}
    nodes, strangers = proven_members(nodes, members)
    by_node = {name: pods for name, pods in by_node.items() if name in members}
    taints = [t.model_dump(exclude_none=True) for t in pool.taints]
    from functions.decision.autoscaler_tags import MODE_ON, plan_pool, pool_template

    from functions.rollout.run import startup_taint

    # the startup taint as the function has it (ACK_MIG_STARTUP_TAINT from this environment, as the dwell's)
    advice = advise(pool.nodepool_id, pool.labels, taints, nodes, by_node, pending, template=pool_template(pool),
                    dwell=dwell, lifted=startup_taint(load_settings()))
    advice["plan"]["unplaced"].extend(strangers + ([dwell_note] if dwell_note else []))
    # What the autoscaler step would write for this pool (the same decision; advise writes nothing).
    shape = tuple((tuple(tuple(x) for x in g["layout"]), g["gpus"]) for g in advice["plan"]["new_node_shape"])
    tags = plan_pool(pool, MODE_ON, shape or tuple(tuple(x) for x in advice["plan"]["new_node"]))
    advice["autoscaler_tags"] = tags.to_json() if tags is not None else None
    advice["name"] = pool.name
    return advice


def _counts(counts: Dict[str, int]) -> str:
    return ", ".join("%s x%d" % (p, n) for p, n in counts.items()) or "none"


def _layout(pairs) -> str:
    return " ".join("%s@%d" % (p, s) for p, s in pairs) or "(empty)"


def render(advice: Dict[str, Any]) -> str:
    b = advice["bounds"]
    lines = ["pool %s%s (auto; profiles: %s; headroom: %s)" % (
        advice["pool"], " %s" % advice["name"] if advice.get("name") else "", ", ".join(b["profiles"]) if b["profiles"] is not None else "any the GPU has",
        _counts(b["headroom"]))]
    d = advice["demand"]
    lines.append("demand: pending %s; in use %s" % (_counts(d["pending"]), _counts(d["in_use"])))
    for pod in d["pods"]:
        lines.append("  waits: %s (%s) %s x%d" % (pod["pod"], pod["owner"], pod["profile"], pod["count"]))
    from functions.pipeline.auto_pool import uncounted_text

    for pod in d["not_counted"]:  # cut as the tick's line cuts them: a reason may name a resource of any length
        lines.append("  not counted: " + uncounted_text(pod["pod"], pod["why"]))
    lines.append("GPUs (* in use):")
    for g in advice["gpus"]:
        now = " ".join("%s@%d%s" % (i["profile"], i["start"], "*" if i["in_use"] else "") for i in g["instances"])
        state = "busy" if g["busy"] else ("MIG off or not applied" if not g["mig"] else now or "(empty)")
        after = "" if g["change"] == "none" else "  -> %s: %s" % (g["change"], _layout(g["target"]))
        lines.append("  %s GPU %d: %s%s" % (g["node"], g["gpu"], state, after))
    p = advice["plan"]
    lines.append("plan: %d change%s" % (p["changes"], "" if p["changes"] == 1 else "s"))
    lines.extend("  " + r for r in p["reasons"])
    if p["unserved"]:
        shape = p.get("new_node_shape") or []
        lines.append("unserved: %s; %s" % (_counts(p["unserved"]), (
            "a new node's GPUs would get " + " + ".join("%dx %s" % (g["gpus"], _layout(g["layout"])) for g in shape))
            if shape else "no new node's layout can be named (no GPU of the pool, nor its instance type, has a "
                          "model the catalogue knows with a profile that waits)"))
    lines.extend("  note: " + u for u in p["unplaced"])
    tags = advice.get("autoscaler_tags")
    if tags:
        change = ", ".join("%s=%s" % (k.rsplit("/", 1)[-1], v) for k, v in tags["set"].items())
        lines.append("autoscaler tags: %s" % ("in sync" if tags["in_sync"] else "would set %s%s" % (
            change or "nothing", "; zero " + ", ".join(k.rsplit("/", 1)[-1] for k in tags["remove"])
            if tags["remove"] else "")))
        lines.append("  " + tags["reason"])
    lines.append("nothing was changed (advise only reads)")
    return "\n".join(lines)


def run(args):
    from node_bootstrap.kube import KubeError

    from functions.base.errors import BadInventory
    from functions.base.settings import SettingsError
    from functions.base.textsafe import escape, escape_data
    from functions.decision.layout import LayoutLabelError
    from functions.pipeline.auto_pool import NotAutoPool

    try:
        advice = gather(args)
    except (AdviseError, BadInventory, SettingsError, KubeError, LayoutLabelError, NotAutoPool) as exc:
        from functions.commands.terminal import fail

        return fail(escape(exc), 2, args.json)
    print(json.dumps(advice, indent=2) if args.json else render(escape_data(advice)))
    return 0
