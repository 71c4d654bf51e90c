"""``ack-mig-hook demo [--json]``: the bundled example, end to end, on simulated nodes.

The example scale-out event (``examples/event.json``) and cluster snapshot (``examples/inventory.json``)
go through the real handler path (``functions.pipeline.run_event``: intake, lookup, decisions) into the
delivery executor with the local transport: the node bundle is built, unpacked into a temporary node
directory by the same runner Cloud Assistant and SSH use, and ``node_bootstrap`` partitions simulated
8-GPU nodes (the simulated NVML driver, one state file per node). Then the same event runs again, as a
duplicate delivery would, and every node comes back ``unchanged`` with nothing sent twice. Last, a
dry-run reconcile of every labelled pool shows the other decisions: a passthrough pool skipped with the
guide's reason and a pool whose label is refused with the parser's message.
"""

import json
import os
import sys
import tempfile

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
SIM_BACKEND = "sim:A100-SXM4-40GB:8"  # ecs.ebmgn7.26xlarge: 8 x A100 SXM4 40GB


def configure(parser, command):
    parser.add_argument("--json", action="store_true",
                        help='print {"nodes": [{"instance_id", "outcome", "reason", "gpus"}]}')
    parser.add_argument("--event", default=os.path.join(EXAMPLES, "event.json"), help=argparse_suppress())
    parser.add_argument("--inventory", default=os.path.join(EXAMPLES, "inventory.json"), help=argparse_suppress())


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


def _settings(tmp):
    """Local transport, simulated 8-GPU nodes, and everything the node would touch kept inside ``tmp``:
    no node labels (no cluster), no device plugin or GPU clients to stop, its own lock and state."""
    from .settings import load_settings

    node_args = ("--backend %s --no-label --clients= --device-plugin-restart none --lock-file %s "
                 "--state-dir %s" % (SIM_BACKEND, os.path.join(tmp, "node.lock"), os.path.join(tmp, "state")))
    env = {"ACK_MIG_TRANSPORT": "local", "ACK_MIG_NODE_ARGS": node_args, "ACK_MIG_NODE_TIMEOUT_S": "120",
           "ACK_MIG_STARTUP_TAINT": "none", "ACK_MIG_LOG_LEVEL": "ERROR"}
    return load_settings(env)


def _gpu_lines(gpus):
    """Slot diagrams: GPUs with the same layout share one diagram (the node titles each "GPU <n> ...")."""
    groups = []
    for gpu in gpus or []:
        lines = (gpu.get("diagram") or "").splitlines() or ["GPU %s: no diagram" % gpu.get("index")]
        title, body = lines[0], lines[1:]
        prefix = "GPU %s " % gpu.get("index")
        title = title[len(prefix):] if title.startswith(prefix) else title
        for group in groups:
            if group[1] == title and group[2] == body:
                group[0].append(str(gpu.get("index")))
                break
        else:
            groups.append(([str(gpu.get("index"))], title, body))
    out = []
    for indexes, title, body in groups:
        which = "%s-%s" % (indexes[0], indexes[-1]) if len(indexes) > 2 else ",".join(indexes)
        out.append("  GPU %s %s" % (which, title))
        out.extend("  " + line for line in body)
    return out


def _run_once(raw, settings, inventory, executor):
    from .logs import JsonLogger
    from .pipeline import run_event

    quiet = JsonLogger("OFF", stream=sys.stderr)
    return run_event(raw, settings, inventory=inventory, executor=executor, logger=quiet)


def run(args):
    from .delivery.executor import DeliveryExecutor, make_transport

    with open(args.event, "rb") as fh:
        raw = fh.read()
    with tempfile.TemporaryDirectory(prefix="ack-mig-demo-") as tmp:
        settings = _settings(tmp)
        transport = make_transport(settings, sim_state_dir=os.path.join(tmp, "nodes"),
                                   root=os.path.join(tmp, "node-root"), python=sys.executable)
        os.makedirs(os.path.join(tmp, "nodes"))
        executor = DeliveryExecutor.from_settings(settings, transport=transport)
        first = _run_once(raw, settings, args.inventory, executor)
        again = _run_once(raw, settings, args.inventory, executor)
        with open(os.path.join(EXAMPLES, "event-reconcile.json"), "rb") as fh:
            reconcile = _run_once(fh.read(), settings, args.inventory, executor)  # the event asks for a dry run
    nodes = first.nodes or []
    if args.json:
        print(json.dumps({"nodes": [{"instance_id": n["instance_id"], "outcome": n["outcome"],
                                     "reason": n["reason"], "gpus": n.get("gpus") or []} for n in nodes]}))
        return 0 if first.outcome == "done" else 1
    print("event %s (%s): %s, %s" % (first.event_type, first.trigger, first.outcome, first.reason))
    for d in first.decisions:
        print("  decision %-22s %-9s %s" % (d.instance_id, d.action, d.reason))
    print()
    for n in nodes:
        print("%s %s: %s (%s)" % (n["instance_id"], n.get("node_name") or "", n["outcome"], n["reason"]))
        for line in _gpu_lines(n.get("gpus")):
            print(line)
    rerun = ", ".join("%s %s" % (n["instance_id"], n["outcome"]) for n in again.nodes or [])
    print()
    print("same event again (a duplicate delivery): %s" % (rerun or again.reason))
    print()
    print("dry-run reconcile of every labelled pool (examples/event-reconcile.json): %s, %s"
          % (reconcile.outcome, reconcile.reason))
    for d in reconcile.decisions:
        print("  decision %-22s %-9s %s" % (d.instance_id, d.action, d.reason))
    return 0 if first.outcome == "done" and all(n["outcome"] != "failed" for n in nodes) else 1
