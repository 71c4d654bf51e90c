"""The one shell script every transport runs on a node, and the node_bootstrap arguments it carries.

The script is a fixed template. What varies is substituted only after a strict check: the bundle hash
(hex), the node directory and interpreter (checked paths), the deadline and its grace (integers), the instance id
(checked, or Cloud Assistant's own ``{{ACS::InstanceId}}``), and the arguments and node names as base64.
A label value therefore reaches the node inside base64 only and can never become shell text, whatever it
contains (tests/delivery/test_command.py tries hostile values).
"""

import base64
import json
import os
import re
import zlib
from typing import Any, List, Mapping, Optional, Sequence

from functions.base.settings import DEFAULT_NODE_ROOT as DEFAULT_ROOT, node_directory_problem  # the one directory rule

HEREDOC = "ACK_MIG_RUNNER_EOF"
# SIGTERM -> SIGKILL on the node: apply's cleanup (start the clients again, label the node) needs seconds;
# kept well inside the transports' own margin past the deadline (SSH 30 s, Cloud Assistant 60 s).
DEFAULT_GRACE_S = 15

_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_PYTHON = re.compile(r"^(python3(\.[0-9]{1,2})?|/[A-Za-z0-9._/-]{1,200})\Z")
_B64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}\Z")
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
_INSTANCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
# Cloud Assistant's built-in parameter: each instance sees its own id here (needs EnableParameter=true).
ACS_INSTANCE_ID = "{{ACS::InstanceId}}"

# -I: the runner's own imports come from the interpreter's library only, never from the working directory
# (python - puts it first on sys.path) or PYTHON* variables; node_bootstrap runs after the bundle's check.
TEMPLATE = """#!/bin/sh
# ack-mig-hook: partition this node's GPUs with node_bootstrap (fixed template; the only substitutions
# are a hex hash, checked paths, an integer and base64). The runner below is documented in the project.
umask 077
exec {python} -I - '{digest}' '{root}' '{args}' '{deadline}' '{python}' '{instance}' '{names}' '{grace}' <<'""" + HEREDOC + """'
{runner}
""" + HEREDOC + "\n"


class CommandError(ValueError):
    """A value that would go into the node command failed its check. Never happens with our own values."""

    exit_code = 2


def _runner_source() -> str:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_runner.py")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if HEREDOC in text:
        raise CommandError("node_runner.py must not contain the heredoc marker")
    # Its module docstring stays in the project (and in the bundle's copy): a 100-node script must fit
    # RunCommand's 24 KB of base64, and with the docstring it had under 300 bytes of room left.
    if text.startswith('"""'):
        text = text[text.index('"""', 3) + 3:].lstrip("\n")
    return text.rstrip("\n")


_RUNNER = _runner_source()


def _check(pattern, value, what):
    if not _fits(pattern, value):
        raise CommandError("refusing %s %r in a node command" % (what, str(value)[:40]))
    return value


def _fits(pattern, value) -> bool:
    return isinstance(value, str) and bool(pattern.match(value)) and ".." not in value.split("/")


def encode_args(args: Sequence[str]) -> str:
    if not all(isinstance(a, str) for a in args):
        raise CommandError("node arguments must be text")
    return base64.b64encode(json.dumps(list(args)).encode("utf-8")).decode("ascii")


def encode_names(names: Mapping[str, str]) -> str:
    """instance id -> node name, as base64 of zlib'd JSON: 100 ACK node names fit in about 1 KB."""
    for iid, name in names.items():
        _check(_INSTANCE, iid, "instance id")
        _check(_NODE_NAME, name, "node name")
    raw = json.dumps(dict(sorted(names.items())), separators=(",", ":")).encode("utf-8")
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def render(digest: str, args: Sequence[str], deadline_s: int, instance_id: str = ACS_INSTANCE_ID,
           names: Optional[Mapping[str, str]] = None, root: str = DEFAULT_ROOT, python: str = "python3",
           grace_s: int = DEFAULT_GRACE_S) -> str:
    """The script for one node or, with ``instance_id`` left to Cloud Assistant, for a whole batch: the
    runner adds ``--node-name`` from ``names`` for its own instance. ``args`` travel as base64 JSON.
    At ``deadline_s`` the runner sends SIGTERM to node_bootstrap's process group, ``grace_s`` later SIGKILL."""
    args_b64 = encode_args(args)
    _check(_B64, args_b64, "arguments")
    if not isinstance(deadline_s, int) or isinstance(deadline_s, bool) or not 1 <= deadline_s <= 86400:
        raise CommandError("refusing deadline %r in a node command" % (deadline_s,))
    if not isinstance(grace_s, int) or isinstance(grace_s, bool) or not 1 <= grace_s <= 600:
        raise CommandError("refusing grace %r in a node command" % (grace_s,))
    if instance_id != ACS_INSTANCE_ID:
        _check(_INSTANCE, instance_id, "instance id")
    problem = node_directory_problem(root)
    if problem:
        raise CommandError("refusing directory %r in a node command: %s" % (str(root)[:40], problem))
    return TEMPLATE.format(root=root, python=_check(_PYTHON, python, "python"),
                           digest=_check(_HEX64, digest, "bundle hash"), args=args_b64,
                           deadline=deadline_s, instance=instance_id, names=encode_names(names or {}),
                           grace=grace_s, runner=_RUNNER)


PER_GPU = "per-gpu"


def per_gpu_partition(targets: Sequence[Any]) -> dict:
    """The partition of a per-GPU request from one node's planned targets (functions.decision.layout.GpuTarget):
    every GPU's whole target layout, changed or not, because the node's boot unit re-applies this request after
    a reboot (instances never survive one) and a GPU left out would come back empty. The node leaves a GPU whose
    layout it already holds as it is, and one with MIG off (its target is empty) untouched."""
    return {"kind": PER_GPU, "gpus": [{"index": t.index, "layout": [{"profile": p, "start": s} for p, s in t.layout]}
                                      for t in sorted(targets, key=lambda t: t.index)]}


def request_document(partition: Mapping[str, Any], destroy: bool = True) -> dict:
    """The node request: ``{"version": 1, "partition": {"kind": "size"|"sequence", "value": ...}}``, with
    ``"destroy": false`` for a "destroy nothing" apply (the node refuses, exit 7 ``destroy-required``,
    where more than adding instances is needed; docs/node.md)."""
    kind, value = partition.get("kind"), partition.get("value")
    if kind == PER_GPU:  # version 2: an auto pool's per-GPU targets (node_bootstrap/request.py)
        doc = {"version": 2, "kind": PER_GPU, "gpus": list(partition.get("gpus") or ())}
        if not doc["gpus"]:
            raise CommandError("a per-GPU node request needs at least one GPU layout")
        if not destroy:
            doc["destroy"] = False
        return doc
    if kind not in ("size", "sequence") or not isinstance(value, str):
        raise CommandError("a node request needs partition kind size or sequence and a text value")
    doc: dict = {"version": 1, "partition": {"kind": kind, "value": value}}
    if not destroy:
        doc["destroy"] = False
    return doc


def node_args(partition: Mapping[str, Any], extra: Sequence[str] = (), destroy: bool = True) -> List[str]:
    """node_bootstrap's command line for an apply: global options first, then the subcommand. The node
    name is not here (it differs per node); the runner adds it, so a whole batch shares one script.
    ``destroy`` False: the request asks the node to only add instances (the rollout's path without drain)."""
    doc = json.dumps(request_document(partition, destroy), sort_keys=True, separators=(",", ":"))
    # --boot-unit: the same run installs the systemd unit that re-applies this partition at every boot.
    return ["--json"] + list(extra) + ["apply", "--boot-unit", "--request-b64",
                                       base64.b64encode(doc.encode("utf-8")).decode("ascii")]
