"""``ack-mig-hook invoke --event FILE [--inventory FILE] [--kubeconfig FILE] [--dry-run] [--json] [--strict]``:
the FC handler's path (``functions.pipeline.event.run_event``) on an event file, run locally from a shell (not the
deployed function).

With ``--inventory`` the cluster comes from a snapshot file and no credentials are needed; without it the
credentials come from the chain every cloud command uses (functions/commands/common.py: the environment,
``--profile``, the instance role). With ``--kubeconfig`` the Kubernetes side (applied layouts, the rollout,
taint removal) uses the operator's own credential instead of the snapshot's ``kube_nodes`` or a short-lived
one from ACK. Exit codes: 0 the event ended done or skip; 2 the event, inventory or configuration is wrong
(one line on stderr); 4 / 5 a cloud API refused the credentials / the action; 1 a transient cloud failure
(retry: a cloud API kept failing, or the Kubernetes API could not be used) or a node that failed (a startup
taint that could not be lifted included: ``taint-not-removed``); 3 with ``--strict``, when any decision
ended ``error``, any node ``failed`` or is in conflict, a node pool was refused (the result's
``refused_pools``: ACK refused the list of its nodes for good, so it has no decision while the other pools
were decided), or the event must be retried (for CI). An error is printed once: on stderr.
"""

import argparse
import json
import sys

from functions.commands import common, shipped
from functions.commands.terminal import error_lines, fail
from functions.base.errors import BadInventory
from node_bootstrap.outside import OutsideDataError, loads


class EventFileError(ValueError):
    """The --event file cannot be read. One line; exit code 2."""


HELP = ("run the function's pipeline locally on an event file, as FC would run it (this does not call "
        "the deployed function)")
STRICT_EXIT = 3


def configure(parser, command):
    parser.description = HELP
    parser.add_argument("--event", metavar="FILE", help="event JSON file ('-' for stdin); with --remote, "
                                                        "optional: the manual payload from --cluster-id and "
                                                        "--nodepool-id")
    parser.add_argument("--remote", action="store_true",
                        help="run the DEPLOYED function now, through Function Compute's API, asynchronously "
                             "(InvokeFunction): prints the request id and how to follow it (`logs`)")
    parser.add_argument("--nodepool-id", default="", metavar="ID",
                        help="with --remote and no --event: the node pool of the manual payload "
                             "{cluster_id, nodepool_id} (default: every labelled pool)")
    common.add_stack_name(parser, help="with --remote: the ROS stack that names the function (default: "
                             "ack-mig-hook-<cluster id>)")
    common.add_cloud_options(
        parser, cluster_help="the cluster the function serves (default: $ACK_MIG_CLUSTER_ID, else the event's)",
        region_help="region of the cluster (default: $ACK_MIG_REGION, else the event's region)",
        kubeconfig_help="your kubeconfig for the Kubernetes side (the ACK side from --inventory or the ACK API); "
                        "default: the snapshot's kube_nodes, else a short-lived one ACK issues for the cluster's "
                        "private endpoint, as the deployed function uses")
    parser.add_argument("--strict", action="store_true",
                        help="exit %d when any decision ends error, any node failed or is in conflict, a node "
                             "pool's nodes could not be listed (refused_pools), or the event must be retried "
                             "(for CI)" % STRICT_EXIT)
    parser.add_argument("--inventory", metavar="FILE", type=shipped.inventory_file,
                        help="cluster snapshot (or example:NAME, one shipped with the package) {cluster_id, nodepools, nodes} in the CS API's shapes; "
                             "without it the ACK API is asked (credentials needed)")
    parser.add_argument("--dry-run", action="store_true", help="decide and report; touch no node")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="name every instance (by default a line names %d and counts the rest); the "
                             "function's log lines on stderr (-v INFO, -vv DEBUG)" % NAMES_SHOWN)


def _read_event(path):
    """The event's bytes, read no further than one byte past the limit: /dev/zero or a stream without end
    is refused, not read until memory runs out."""
    from functions.pipeline.envelope import MAX_EVENT_BYTES

    name = "standard input" if path == "-" else "event file %s" % path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_EVENT_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_EVENT_BYTES + 1)
    except OSError as exc:
        raise EventFileError("cannot read %s: %s" % (name, exc.strerror or exc)) from None
    if len(raw) > MAX_EVENT_BYTES:
        raise EventFileError("%s is larger than %d bytes; an event is at most that (FC's own payload limit is "
                             "128 KB)" % (name, MAX_EVENT_BYTES))
    return raw


def _grouped(rows):
    """(key, names) in first-seen order: a reason shared by many nodes is printed once, with its nodes."""
    groups = {}
    for key, name in rows:
        groups.setdefault(key, []).append(name)
    return groups.items()


NAMES_SHOWN = 5  # instances named per line of the human output without --verbose


def _names(names, verbose):
    """The instances of one line: all with --verbose, else the first few and how many more (a 2,000-node event
    is a few lines, not one of 60,000 characters)."""
    if verbose or len(names) <= NAMES_SHOWN:
        return ", ".join(names)
    return "%s and %d more (--verbose lists them)" % (", ".join(names[:NAMES_SHOWN]), len(names) - NAMES_SHOWN)


def _text(result, with_reason=True, verbose=False):
    from functions.base.textsafe import escape

    # Reasons, ids and node names come from the event, the cluster and the nodes: no terminal escapes.
    lines = ["%s: %s%s%s" % (result.trigger, result.outcome, " [dry run]" if result.dry_run else "",
                             " (%s)" % escape(result.reason) if with_reason else "")]
    rows = []
    for d in result.decisions:
        where = d.node_name if d.node_name and d.node_name != d.instance_id else ""
        rows.append(((d.action, escape(d.reason)), escape(d.instance_id + (" (%s)" % where if where else ""))))
    for (action, reason), names in _grouped(rows):
        if len(names) == 1:
            lines.append("  %-9s %s: %s" % (action, names[0], reason))
        else:
            lines.append("  %-9s %d instances: %s" % (action, len(names), _names(names, verbose)))
            lines.append("  %-9s   %s" % ("", reason))
    nodes = [((escape(n.get("outcome")), escape(n.get("reason"))), escape(n.get("instance_id")))
             for n in result.nodes or []]
    for (outcome, reason), names in _grouped(nodes):
        lines.append("  %s %s: %s (%s)" % ("node" if len(names) == 1 else "%d nodes" % len(names),
                                          _names(names, verbose), outcome, reason))
    # A pool ACK refused to list has no decision and, once a later retry or error replaced the reason, no
    # word in it either: one row each, so the plain text says what --json's refused_pools says.
    for pool_id in sorted(result.refused_pools):
        lines.append("  %-9s %s" % ("refused", escape(result.refused_pools[pool_id])))
    return "\n".join(lines)


def _event_region(raw):
    """The region a CloudEvent (``aliyunregionid``) or an MNS message (``regionId``) carries, if any."""
    try:
        doc = loads(raw, "event")  # the reader rule (node_bootstrap/outside.py)
    except OutsideDataError:
        return ""
    if not isinstance(doc, dict):
        return ""
    value = doc.get("aliyunregionid") or doc.get("regionId") or ""
    return value if isinstance(value, str) and len(value) < 64 else ""


def _reaches_the_cluster(raw):
    """Whether the event passes both stages of its reading (an event skipped there, or refused as bad, needs
    no cloud)."""
    from functions.pipeline.envelope import read_envelope
    from functions.pipeline.intake import parse_envelope
    from functions.base.errors import EventOutcome

    try:  # both stages: a payload refused as bad is reported without asking the cloud anything
        parse_envelope(read_envelope(raw))
    except (EventOutcome, ValueError, RecursionError):
        return False
    return True


def _settings(args, raw):
    """Settings from the environment with the command line's --region/--cluster-id (else the event's
    region) and the credentials of the shared chain; every missing setting reported at once."""
    from functions.base import settings as names
    from functions.base.settings import SettingsError, load_settings
    from functions.commands.stack.credentials import CredentialsMissing

    needs_cloud = not args.inventory and _reaches_the_cluster(raw)
    found, missing = None, []
    if needs_cloud:
        try:
            found = common.keys(args)
        except CredentialsMissing:
            missing.append("credentials (ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET, an aliyun "
                           "CLI profile (--profile NAME) or an instance role)")
    env = common.environment_with(found, args.region, args.cluster_id)
    if not (env.get(names.REGION) or env.get(names.FC_REGION)) and _event_region(raw):
        env[names.REGION] = _event_region(raw)
    if getattr(args, "kubeconfig", None):
        from node_bootstrap.kube import load_kubeconfig

        from functions.commands.status import checked_kubeconfig, reachable

        env[names.KUBECONFIG] = checked_kubeconfig(args.kubeconfig)
        reachable(load_kubeconfig(args.kubeconfig).server)  # before any decision: fail before acting
    settings = load_settings(env)
    if needs_cloud and not settings.region and settings.cs_endpoint is None:
        missing.insert(0, "a region (--region, ACK_MIG_REGION, or the event's aliyunregionid)")
    if missing:
        raise SettingsError("missing %s; or use --inventory FILE to run on a cluster snapshot without "
                            "the cloud" % " and ".join(missing))
    if needs_cloud:
        common.reach_cloud(settings)  # the ACK API, before anything is decided
    return settings


class Progress:
    """``done/total`` with counts per outcome on stderr as nodes finish (stdout keeps the result)."""

    def __init__(self, stream):
        self.stream, self.counts, self.done = stream, {}, 0

    def __call__(self, node, total):
        self.done += 1
        outcome = str(node.get("outcome"))
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        print("ack-mig-hook: %d/%d nodes (%s)" % (self.done, total, ", ".join(
            "%d %s" % (n, k) for k, n in sorted(self.counts.items()))), file=self.stream, flush=True)


def run(args):
    from functions.base.logs import JsonLogger
    from functions.pipeline.event import run_event
    from functions.base.settings import SettingsError

    from node_bootstrap.kube import KubeError

    if args.remote:
        from functions.commands import remote

        common.default_region(args)  # as every command on the deployed stack: ALIBABA_CLOUD_REGION_ID, profile
        try:
            raw = _read_event(args.event) if args.event else None
        except EventFileError as exc:
            from functions.base.textsafe import escape

            return fail(escape(exc), 2, getattr(args, "json", False))
        return remote.run(args, raw)
    if not args.event:
        return fail("invoke needs --event FILE (an event JSON file, '-' for stdin); --remote runs the deployed "
                    "function instead", 2, getattr(args, "json", False))
    if args.nodepool_id or args.stack_name:
        return fail("--nodepool-id and --stack-name go with --remote; a local run takes the pool from the "
                    "--event file", 2, getattr(args, "json", False))
    try:
        raw = _read_event(args.event)
        settings = _settings(args, raw)
        lookup = None
        if args.inventory:
            from functions.cloud.cluster import InventoryLookup

            lookup = InventoryLookup.from_file(args.inventory)
    except (EventFileError, BadInventory, SettingsError, KubeError) as exc:
        from functions.base.textsafe import escape  # the message may quote the file or an API's answer

        return fail(escape(exc), 2, getattr(args, "json", False))
    # The result goes to stdout. The JSON log lines would bury it, so the command line shows them (on
    # stderr, `--json | jq` still works) only when asked: -v, -vv, --debug or ACK_MIG_LOG_LEVEL=DEBUG.
    logger = JsonLogger(common.log_level(args), settings.secrets(), stream=sys.stderr, request_id="cli")
    result = run_event(raw, settings, inventory=lookup, dry_run=args.dry_run, logger=logger,
                       progress=Progress(sys.stderr))
    applied = [d.node_name for d in result.decisions if d.action == "partition" and d.node_name]
    if applied and lookup is not None and lookup.kube_nodes is None and not args.kubeconfig and not result.dry_run:
        # Without a Kubernetes view nothing tells a running node from a new one (the deployed function always
        # has one): the operator learns what this run could not do.
        print("ack-mig-hook: warning: %s has no kube_nodes and no --kubeconfig was given, so %d node(s) were "
              "applied directly, as new nodes are, not rolled (cordon, drain, waves); give --kubeconfig FILE "
              "when they may be running" % (args.inventory, len(applied)), file=sys.stderr)
    failed = result.outcome == "error"
    # Everything printed goes through the log lines' redaction (credentials, secrets read at run time).
    if args.json:
        print(logger.redact(json.dumps(result.to_json(), indent=2)))
    elif not failed or result.decisions or result.nodes:  # an error alone is said once, on stderr
        print(logger.redact(_text(result, with_reason=not failed, verbose=getattr(args, "verbose", False))))
    if failed:
        from functions.commands.stack.exit_codes import EXIT_USAGE, explain
        from functions.base.textsafe import escape, one_line

        # A CS refusal of the credentials or of the action is 4 or 5, with what to do (docs/cli.md).
        code, text = explain(one_line(logger.redact(result.reason)), EXIT_USAGE)
        print("\n".join(error_lines(escape(text))), file=sys.stderr)
        return code
    # A refused pool has no decision and may sit beside a run that is done: only refused_pools tells.
    if args.strict and (result.outcome == "retry" or result.refused_pools
                        or any(d.action == "error" for d in result.decisions)
                        or any(n.get("outcome") in ("failed", "conflict") for n in result.nodes or [])):
        return STRICT_EXIT
    if result.outcome == "retry":
        return 1
    if any(n.get("outcome") == "failed" for n in result.nodes or []):
        return 1
    return 0
