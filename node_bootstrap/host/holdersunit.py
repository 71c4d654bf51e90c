"""The systemd units that keep an auto pool node's holders report fresh while pods come and go.

Installed with the boot unit when it is installed for a per-GPU request (version 2, what an auto pool
sends); a labelled pool (version 1) drains a node before it changes it, so nothing there reads the report,
and its boot unit comes without them (installing it removes them). Three units:

* ``ack-mig-hook-holders.service``: a oneshot that runs ``report-holders --min-interval 10`` through the
  same runner as the boot unit (the bundle checked before anything of it runs, a deadline, one JSON line),
  with the options the node's report needs (backend, apply's node lock, kubeconfig, node name, kubelet's
  checkpoint; checked paths, never label text). It reports, waits 10 s, and reports again while the
  checkpoint's bytes changed meanwhile (for about 120 s at most): rounds start at least 10 s apart, and only
  a report that says something new is written (``commands/holdings.py`` ``follow``).
* ``ack-mig-hook-holders.path``: ``PathChanged=`` kubelet's device checkpoint, the file the node reads.
  kubelet writes it to a temporary file renamed over the old one at every allocation
  (kubernetes ``pkg/kubelet/util/store/filestore.go`` ``writeFile``); the watched inode's unlink is an
  event on the path, and the new file is watched when the path unit re-arms.
* ``ack-mig-hook-holders.timer``: the service 1 min after the timer starts and then 5 min after each run,
  whatever started it: the bound when a change is missed.

Why the rate limit lives in the service: systemd 239 (Alibaba Cloud Linux 3) has no ``TriggerLimitBurst=``
for path units (added in systemd 250, systemd.path(5)), and while the triggered service is active the path
unit watches nothing and re-arms afterwards without looking back for ``PathChanged=`` (src/core/path.c:
``path_enter_running`` unwatches; ``path_trigger_notify`` re-checks only existence). So a change made while
the service runs is the service's to see: it compares the checkpoint before and after its wait. Each run
lasting at least 10 s also keeps it far from systemd's default start limit (5 starts in 10 s), which newer
systemd versions pass on to the path unit as a failure.

Installing twice changes nothing; :func:`files` and :func:`commands` give what to write and which
``systemctl`` calls follow a change (``host/bootunit.py`` does the writing and runs them).
"""

import os
import shlex
import typing
from typing import Dict, List, Optional

from ..errors import BadInput
from .unitfile import BundleOrigin, check_values, quote, runner_argv

SERVICE = "ack-mig-hook-holders.service"
PATH_UNIT = "ack-mig-hook-holders.path"
TIMER = "ack-mig-hook-holders.timer"
NAMES = (SERVICE, PATH_UNIT, TIMER)
STARTED = (PATH_UNIT, TIMER)  # the service itself is only ever started by these two

MIN_INTERVAL_S = 10
TIMER_FIRST = "1min"
TIMER_PERIOD = "5min"
TIMER_ACCURACY = "10s"  # systemd's default AccuracySec= is 1 min: the bound stays 5 min, not 6
# The runner's deadline: 120 s of rounds (holdings.FOLLOW_BUDGET_S), then a round, its 10 s wait and one
# last round fit within it while the API server answers in seconds (a round: NVML and three API calls, each
# cut at 30 s, twice the client's 15 s socket timeout); a slower server's last round is cut by it, which
# leaves the annotation as the last whole patch wrote it. SIGTERM, GRACE_S later SIGKILL, then at most twice
# the runner's 5 s pipe drain, all before TimeoutStartSec (240 + 10 + 10 < 270).
DEADLINE_S = 240
GRACE_S = 10
START_TIMEOUT_S = 270


class Report(typing.NamedTuple):
    options: List[str]  # node_bootstrap's global options for report-holders (checked values, no label text)
    checkpoint: str  # kubelet's device checkpoint: what the path unit watches and report-holders reads


def check(report):
    # type: (Report) -> None
    """Refuse what could not be written into the units as it is (one line, BadInput)."""
    check_values(list(report.options) + [report.checkpoint], "holders unit option")
    path = report.checkpoint
    if not os.path.isabs(path) or path != path.strip():
        # PathChanged= takes the rest of its line, trimmed, as an absolute path (no quoting there)
        raise BadInput("kubelet's checkpoint path %r cannot be watched by a path unit; use an absolute path "
                       "without leading or trailing spaces" % path[:80])


def report_args(report):
    # type: (Report) -> List[str]
    """node_bootstrap's arguments in the service: the options, then the command and its rate limit."""
    return list(report.options) + ["report-holders", "--json", "--min-interval", str(MIN_INTERVAL_S)]


def exec_argv(python, report, bundle=None):
    # type: (str, Report, Optional[BundleOrigin]) -> List[str]
    if bundle is None:
        return [python, "-B", "-m", "node_bootstrap"] + report_args(report)
    return runner_argv(python, bundle, report_args(report), DEADLINE_S, GRACE_S)


def files(python, package_dir, report, bundle=None):
    # type: (str, str, Report, Optional[BundleOrigin]) -> Dict[str, str]
    """{unit name: text}. ``bundle`` (run from one) makes ExecStart the runner's, and there is no
    PYTHONPATH, exactly as in the boot unit."""
    check(report)
    check_values([python, package_dir] + ([bundle.root, bundle.digest] if bundle else []), "holders unit option")
    if bundle is None:
        environment = ["Environment=PYTHONPATH=%s" % quote(package_dir, exec_line=False)]
    else:
        environment = ["# The bundle's runner checks it (SHA-256, contents) before it runs node_bootstrap with:",
                       "#   node_bootstrap " + " ".join(shlex.quote(a) for a in report_args(report))]
    head = "# Written by ack-mig-hook (node_bootstrap install-boot-unit, a per-GPU request); reinstalling replaces it."
    service = [
        head,
        "[Unit]",
        "Description=Report which pod holds each MIG instance of this node (ack-mig-hook)",
        "# Started by %s (kubelet's device checkpoint changed) and %s (the safety net)." % (PATH_UNIT, TIMER),
        "# At boot the layout is applied first, then reported.",
        "After=ack-mig-hook.service network-online.target",
        "",
        "[Service]",
        "Type=oneshot",
    ] + environment + [
        "ExecStart=%s" % " ".join(quote(a) for a in exec_argv(python, report, bundle)),
        "TimeoutStartSec=%d" % START_TIMEOUT_S,
        "",
    ]
    path = [
        head,
        "[Unit]",
        "Description=Report MIG instance holders when kubelet's device allocations change (ack-mig-hook)",
        "",
        "[Path]",
        "# kubelet renames a new checkpoint over this file at every allocation; the service rate-limits itself.",
        "PathChanged=%s" % report.checkpoint.replace("%", "%%"),
        "Unit=%s" % SERVICE,
        "",
        "[Install]",
        "WantedBy=paths.target",
        "",
    ]
    timer = [
        head,
        "[Unit]",
        "Description=Report MIG instance holders at least every %s (ack-mig-hook)" % TIMER_PERIOD,
        "",
        "[Timer]",
        "# A change the path unit missed, or a pod gone (kubelet drops its entry only at its next allocation).",
        "OnActiveSec=%s" % TIMER_FIRST,
        "OnUnitActiveSec=%s" % TIMER_PERIOD,
        "AccuracySec=%s" % TIMER_ACCURACY,
        "Unit=%s" % SERVICE,
        "",
        "[Install]",
        "WantedBy=timers.target",
        "",
    ]
    return {SERVICE: "\n".join(service), PATH_UNIT: "\n".join(path), TIMER: "\n".join(timer)}


def install_commands(root):
    # type: (str) -> List[List[str]]
    """After the units changed (and, on a live root, systemd reloaded): enable them, and start them now."""
    if os.path.abspath(root) == "/":
        return [["systemctl", "enable", "--now"] + list(STARTED)]
    return [["systemctl", "--root", os.path.abspath(root), "enable"] + list(STARTED)]  # an image: offline


def remove_commands(root, present):
    # type: (str, List[str]) -> List[List[str]]
    """Before the unit files named ``present`` go: disable and stop them (the files still say what to unlink)."""
    started = [n for n in STARTED if n in present]
    if os.path.abspath(root) != "/":
        return [["systemctl", "--root", os.path.abspath(root), "disable"] + started] if started else []
    out = [["systemctl", "disable", "--now"] + started] if started else []
    if SERVICE in present:
        out.append(["systemctl", "stop", SERVICE])  # a run in progress ends (SIGTERM) before its file goes
    return out
