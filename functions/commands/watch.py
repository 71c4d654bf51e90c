"""``--watch``: a report again each time it changes, as ``kubectl get -w`` shows changes, with a deadline.

The report is collected every ``--interval`` seconds and printed only when something in it changed (its
clock, ``now``, left out), each time under a line with the time, until Ctrl-C or ``--watch-timeout``
minutes (every wait has a deadline). ``--json`` and ``-o yaml`` print one document per change. A report that
cannot be collected (a wrong snapshot, refused credentials) ends the watch with its exit code; a
Kubernetes API that stops answering is part of the report, and the watch goes on.
"""

import json
import sys
import time
from typing import Any, Callable, Dict, Optional, Tuple

from functions.commands import common


def add_watch_options(parser) -> None:
    parser.add_argument("-w", "--watch", action="store_true",
                        help="print the report again each time it changes, until Ctrl-C or --watch-timeout")
    parser.add_argument("--interval", type=common.whole_number(1, 3600, "seconds"), default=10, metavar="SECONDS",
                        help="--watch: seconds between two looks, 1..3600 (default: %(default)s)")
    parser.add_argument("--watch-timeout", type=common.whole_number(1, 1440, "minutes"), default=60,
                        metavar="MINUTES", help="--watch: stop after this many minutes, 1..1440 (default: %(default)s)")


def comparable(report: Dict[str, Any]) -> str:
    """The report without its clock: two looks at an unchanged fleet compare equal."""
    return json.dumps({k: v for k, v in report.items() if k != "now"}, sort_keys=True, default=str)


def watch(args, once: Callable[[], Tuple[int, Optional[Dict[str, Any]]]], show: Callable[[Any, Dict[str, Any]], None],
          sleep: Optional[Callable[[float], None]] = None, clock: Optional[Callable[[], float]] = None) -> int:
    """Call ``once()`` -> (exit code, report or None) every ``args.interval`` s and ``show`` each changed
    report, until ``args.watch_timeout`` minutes have passed; the last look's exit code."""
    sleep, clock = sleep or time.sleep, clock or time.monotonic
    deadline = clock() + args.watch_timeout * 60
    print("ack-mig-hook: watching: a new report when something changes, looked at every %ds, for at most %d "
          "minutes (Ctrl-C ends)" % (args.interval, args.watch_timeout), file=sys.stderr, flush=True)
    last = None
    while True:
        code, report = once()
        if report is None:
            return code
        key = comparable(report)
        if key != last:
            if not args.json:
                print("--- %s" % time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime()))
            show(args, report)
            sys.stdout.flush()
            last = key
        if clock() + args.interval > deadline:
            print("ack-mig-hook: watched for %d minutes (--watch-timeout); ending" % args.watch_timeout,
                  file=sys.stderr, flush=True)
            return code
        sleep(args.interval)
