"""``ack-mig-hook invoke --event FILE [--inventory FILE] [--kubeconfig FILE] [--dry-run] [--json] [--strict]``:
the FC handler's path (``functions.pipeline.run_event``) on an event file, run locally from a shell (not the
deployed function).

With ``--inventory`` the cluster comes from a snapshot file and no credentials are needed. With
``--kubeconfig`` the Kubernetes side (applied layouts, the rollout, taint removal) uses the operator's own
credential instead of the snapshot's ``kube_nodes`` or a short-lived one from ACK. Exit codes:
0 the event ended done or skip; 2 the event, inventory or configuration is wrong (one line on stderr);
1 a transient cloud failure (retry: a cloud API kept failing, or the Kubernetes API could not be used) or
a node that failed (a startup taint that could not be lifted included: ``taint-not-removed``); 3 with
``--strict``, when any decision ended ``error``, any node ``failed`` or is in conflict, or the event must be
retried (for CI).
"""

import json
import sys

from functions.errors import BadInventory


class EventFileError(ValueError):
    """The --event file cannot be read. One line; exit code 2."""


HELP = ("run the function's pipeline locally on an event file, as FC would run it (this does not call "
        "the deployed function)")
STRICT_EXIT = 3


def configure(parser, command):
    parser.description = HELP
    parser.add_argument("--event", required=True, metavar="FILE", help="event JSON file ('-' for stdin)")
    parser.add_argument("--region", default="", help="region of the cluster (default: the event's region, "
                        "else $ACK_MIG_REGION)")
    parser.add_argument("--cluster-id", default="", help="the cluster the function serves (default: "
                        "$ACK_MIG_CLUSTER_ID, else the event's)")
    parser.add_argument("--strict", action="store_true",
                        help="exit %d when any decision ends error, any node failed or is in conflict, or "
                             "the event must be retried (for CI)" % STRICT_EXIT)
    parser.add_argument("--inventory", metavar="FILE",
                        help="cluster snapshot {cluster_id, nodepools, nodes} in the CS API's shapes; "
                             "without it the ACK API is asked (credentials needed)")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="your kubeconfig for the Kubernetes side (the ACK side from --inventory or the ACK "
                             "API); default: the snapshot's kube_nodes, else a short-lived one from ACK")
    parser.add_argument("--dry-run", action="store_true", help="decide and report; touch no node")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _read_event(path):
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise EventFileError("cannot read event file %s: %s" % (path, exc.strerror or exc)) from None


def _grouped(rows):
    """(key, names) in first-seen order: a reason shared by many nodes is printed once, with its nodes."""
    groups = {}
    for key, name in rows:
        groups.setdefault(key, []).append(name)
    return groups.items()


def _text(result):
    from functions.textsafe import escape

    # Reasons, ids and node names come from the event, the cluster and the nodes: no terminal escapes.
    lines = ["%s: %s%s (%s)" % (result.trigger, result.outcome, " [dry run]" if result.dry_run else "",
                                escape(result.reason))]
    rows = []
    for d in result.decisions:
        where = d.node_name if d.node_name and d.node_name != d.instance_id else ""
        rows.append(((d.action, escape(d.reason)), escape(d.instance_id + (" (%s)" % where if where else ""))))
    for (action, reason), names in _grouped(rows):
        if len(names) == 1:
            lines.append("  %-9s %s: %s" % (action, names[0], reason))
        else:
            lines.append("  %-9s %d instances: %s" % (action, len(names), ", ".join(names)))
            lines.append("  %-9s   %s" % ("", reason))
    nodes = [((escape(n.get("outcome")), escape(n.get("reason"))), escape(n.get("instance_id")))
             for n in result.nodes or []]
    for (outcome, reason), names in _grouped(nodes):
        lines.append("  node %s: %s (%s)" % (", ".join(names), outcome, reason))
    return "\n".join(lines)


def _event_region(raw):
    """The region a CloudEvent (``aliyunregionid``) or an MNS message (``regionId``) carries, if any."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(doc, dict):
        return ""
    value = doc.get("aliyunregionid") or doc.get("regionId") or ""
    return value if isinstance(value, str) and len(value) < 64 else ""


def _reaches_the_cluster(raw):
    """Whether the event passes stage 1 (an event skipped there, or refused as bad, needs no cloud)."""
    from functions.envelope import read_envelope
    from functions.errors import EventOutcome

    try:
        read_envelope(raw)
    except (EventOutcome, ValueError, RecursionError):
        return False
    return True


def _settings(args, raw):
    """Settings from the environment with the command line's --region/--cluster-id (else the event's
    region); every missing setting reported at once."""
    from functions import settings as names
    from functions.settings import SettingsError, load_settings

    env = names.environment()
    if args.region:
        env[names.REGION] = args.region
    elif not (env.get(names.REGION) or env.get(names.FC_REGION)) and _event_region(raw):
        env[names.REGION] = _event_region(raw)
    if args.cluster_id:
        env[names.CLUSTER_ID] = args.cluster_id
    if getattr(args, "kubeconfig", None):
        from functions.commands.status import checked_kubeconfig

        env[names.KUBECONFIG] = checked_kubeconfig(args.kubeconfig)
    settings = load_settings(env)
    if not args.inventory and _reaches_the_cluster(raw):
        missing = []
        if not settings.region and settings.cs_endpoint is None:
            missing.append("a region (--region, ACK_MIG_REGION, or the event's aliyunregionid)")
        if settings.credentials is None:
            missing.append("credentials (ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET)")
        if missing:
            raise SettingsError("missing %s; or use --inventory FILE to run on a cluster snapshot without "
                                "the cloud" % " and ".join(missing))
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
    from functions.logs import JsonLogger
    from functions.pipeline import run_event
    from functions.settings import SettingsError

    try:
        raw = _read_event(args.event)
        settings = _settings(args, raw)
        lookup = None
        if args.inventory:
            from functions.cluster import InventoryLookup

            lookup = InventoryLookup.from_file(args.inventory)
    except (EventFileError, BadInventory, SettingsError) as exc:
        from functions.textsafe import escape  # the message may quote the file or an API's answer

        print("ack-mig-hook: error: %s" % escape(exc), file=sys.stderr)
        return 2
    # The result goes to stdout. The JSON log lines would bury it, so the command line shows them (on
    # stderr, `--json | jq` still works) only with ACK_MIG_LOG_LEVEL=DEBUG.
    logger = JsonLogger("DEBUG" if settings.log_level == "DEBUG" else "OFF", settings.secrets(),
                        stream=sys.stderr, request_id="cli")
    result = run_event(raw, settings, inventory=lookup, dry_run=args.dry_run, logger=logger,
                       progress=Progress(sys.stderr))
    # Everything printed goes through the log lines' redaction (credentials, secrets read at run time).
    if args.json:
        print(logger.redact(json.dumps(result.to_json(), indent=2)))
    else:
        print(logger.redact(_text(result)))
    if result.outcome == "error":
        from functions.textsafe import escape

        print("ack-mig-hook: error: %s" % escape(logger.redact(result.reason)), file=sys.stderr)
        return 2
    if args.strict and (result.outcome == "retry" or any(d.action == "error" for d in result.decisions)
                        or any(n.get("outcome") in ("failed", "conflict") for n in result.nodes or [])):
        return STRICT_EXIT
    if result.outcome == "retry":
        return 1
    if any(n.get("outcome") == "failed" for n in result.nodes or []):
        return 1
    return 0
