"""``ack-mig-hook invoke --event FILE [--inventory FILE] [--dry-run] [--json]``: the FC handler's path
(``functions.pipeline.run_event``) on an event file, from a shell.

With ``--inventory`` the cluster comes from a snapshot file and no credentials are needed. Exit codes:
0 the event ended done or skip; 2 the event, inventory or configuration is wrong (one line on stderr);
1 a transient cloud failure (retry) or a node that failed.
"""

import json
import sys

from .errors import BadInventory


class EventFileError(ValueError):
    """The --event file cannot be read. One line; exit code 2."""


def configure(parser, command):
    parser.add_argument("--event", required=True, metavar="FILE", help="event JSON file ('-' for stdin)")
    parser.add_argument("--inventory", metavar="FILE",
                        help="cluster snapshot {cluster_id, nodepools, nodes} in the CS API's shapes; "
                             "without it the ACK API is asked (credentials needed)")
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


def _text(result):
    lines = ["%s: %s%s (%s)" % (result.trigger, result.outcome, " [dry run]" if result.dry_run else "",
                                result.reason)]
    for d in result.decisions:
        where = d.node_name or d.instance_id
        lines.append("  %-9s %-22s %-28s %s" % (d.action, d.instance_id, where if where != d.instance_id else "-",
                                                d.reason))
    for n in result.nodes or []:
        lines.append("  node %s: %s (%s)" % (n.get("instance_id"), n.get("outcome"), n.get("reason")))
    return "\n".join(lines)


def run(args):
    from .logs import JsonLogger
    from .pipeline import run_event
    from .settings import SettingsError, load_settings

    try:
        raw = _read_event(args.event)
        settings = load_settings()
        lookup = None
        if args.inventory:
            from .cluster import InventoryLookup

            lookup = InventoryLookup.from_file(args.inventory)
    except (EventFileError, BadInventory, SettingsError) as exc:
        print("ack-mig-hook: error: %s" % exc, file=sys.stderr)
        return 2
    # The result goes to stdout. The JSON log lines would bury it, so the command line shows them (on
    # stderr, `--json | jq` still works) only with ACK_MIG_LOG_LEVEL=DEBUG.
    logger = JsonLogger("DEBUG" if settings.log_level == "DEBUG" else "OFF", settings.secrets(),
                        stream=sys.stderr, request_id="cli")
    result = run_event(raw, settings, inventory=lookup, dry_run=args.dry_run, logger=logger)
    # Everything printed goes through the log lines' redaction (credentials, secrets read at run time).
    if args.json:
        print(logger.redact(json.dumps(result.to_json(), indent=2)))
    else:
        print(logger.redact(_text(result)))
    if result.outcome == "error":
        print("ack-mig-hook: error: %s" % logger.redact(result.reason), file=sys.stderr)
        return 2
    if result.outcome == "retry":
        return 1
    if any(n.get("outcome") == "failed" for n in result.nodes or []):
        return 1
    return 0
