"""The one result type every transport returns, and the mapping from it to a node's outcome.

A transport reports what happened on the wire (:class:`NodeResult`): the node's exit code and its JSON
result, or a transport error code (agent not running, host key refused, timeout...). :func:`outcome`
turns that into exactly one of ``partitioned``, ``unchanged``, ``skipped``, ``failed`` or
``reboot-required``, with a reason a person can act on.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional

from node_bootstrap.mig.annotations import MAX_GPU_INDEX
from node_bootstrap.outside import OutsideDataError, loads, objects, whole

from functions.base.textsafe import one_line

PARTITIONED = "partitioned"
UNCHANGED = "unchanged"
SKIPPED = "skipped"
FAILED = "failed"
REBOOT_REQUIRED = "reboot-required"
# Another MIG manager (NVIDIA GPU Operator's mig-manager) is in charge of the node: nothing was changed.
# Not a failure of the node's GPUs, so never a reason to ABANDON a lifecycle hook; the startup taint stays
# until someone chooses one manager (docs/operations.md).
CONFLICT = "conflict"
# A "destroy nothing" apply (a running node the rollout changes without drain) that needs more than new
# instances: the node refused before any change (node_bootstrap's destroy-required, exit 7). Not a failure:
# the rollout takes the node the drained way next (functions/rollout/executor.py).
DESTROY_REQUIRED = "destroy-required"
# A node's result line: Cloud Assistant keeps 24 KB of output; SSH could carry more, and nothing of ours is
# near this. Changes per apply: 16 GPUs x (mode + 8 instances x 2) is under 300.
MAX_RESULT_BYTES = 262144
MAX_CHANGES = 100000
OUTCOMES = (PARTITIONED, UNCHANGED, SKIPPED, FAILED, REBOOT_REQUIRED, CONFLICT, DESTROY_REQUIRED)

# The startup taint of a partitioned or unchanged node (``Outcome.taint``): lifted, not there, left for a later
# event because the instance is not a Kubernetes node yet (the expected case under a lifecycle hook), or
# NOT_REMOVED followed by why (the API server refused or did not answer).
TAINT_REMOVED, TAINT_ABSENT = "removed", "absent"
TAINT_NOT_JOINED = "left for a later event: the node has not joined the cluster yet"
NOT_REMOVED = "not removed: "
# The code of a node whose GPUs are right but whose startup taint could not be lifted (:func:`settle`): no
# pod lands on it, so it is not serving. About reaching the API server, never the node's verdict on its GPUs.
TAINT_NOT_REMOVED = "taint-not-removed"

# Failure codes that are the node's own verdict on its GPUs: only these may make a lifecycle hook give up
# on its instances (ABANDON). Everything else (the agent not up yet, no address, a refused host key, an
# API error, a timeout, no result) is about reaching the node, and an instance is not released for that.
NODE_VERDICTS = ("not-mig-capable", "gpu-lost", "gpu-busy", "insufficient-resources", "verify-failed", "no-permission",
                 "nvml-unavailable", "nvml-error", "bad-input")

# Exit codes of the node CLI and of node_runner.py.
NODE_EXIT_REASONS = {2: "bad input", 3: "GPU not MIG-capable", 4: "GPU busy", 5: "reboot required",
                     6: "another MIG manager is in charge",
                     7: "destroy required (adding instances alone cannot reach the layout)",
                     10: "bundle missing", 124: "node timeout"}


class NodeTarget(NamedTuple):
    """One node to run on: who it is, how to reach it, and the node_bootstrap arguments."""

    instance_id: str
    node_name: str
    address: str  # private IP for SSH; unused by Cloud Assistant
    args: tuple  # node_bootstrap arguments (they travel as base64 JSON)


@dataclass
class NodeResult:
    """What one transport got back from one node. ``error`` is a transport-level code when the node's own
    result is missing (``agent-not-ready``, ``agent-unavailable``, ``instance-gone``, ``delivery-timeout``,
    ``execution-timeout``, ``node-timeout``, ``instance-released``, ``host-key-rejected``, ``auth-failed``,
    ``connect-failed``, ``bundle-missing``, ``api-error``...), ``None`` when ``result`` holds the node's
    JSON. None of these is a node verdict (see NODE_VERDICTS)."""

    instance_id: str
    transport: str
    exit_code: Optional[int] = None
    result: Optional[Dict[str, Any]] = None
    error: Optional[str] = None
    message: str = ""
    attempts: int = 1

    @property
    def bundle_missing(self) -> bool:
        return self.error == "bundle-missing" or bool(self.result and self.result.get("bundle") == "missing")


@dataclass
class Outcome:
    instance_id: str
    node_name: str
    outcome: str
    reason: str = ""
    gpus: List[dict] = field(default_factory=list)
    changes: int = 0
    sequence: str = ""
    transport: str = ""
    taint: str = ""  # TAINT_REMOVED, TAINT_ABSENT, TAINT_NOT_JOINED or NOT_REMOVED + why (partitioned/unchanged)
    code: str = ""  # for failed: the transport's or the node's error code
    left: List[dict] = field(default_factory=list)  # a per-GPU request's GPUs the node left as they were
    duration_ms: float = 0.0  # from the transport's start to this node's result (0: the node was not run)

    @property
    def node_verdict(self) -> bool:
        """A failure the node itself decided about its GPUs (see NODE_VERDICTS)."""
        return self.outcome == FAILED and self.code in NODE_VERDICTS

    def to_dict(self) -> dict:
        data = {"instance_id": self.instance_id, "node_name": self.node_name, "outcome": self.outcome,
                "reason": self.reason, "gpus": self.gpus, "changes": self.changes, "sequence": self.sequence,
                "transport": self.transport}
        if self.code:
            data["code"] = self.code
        if self.left:
            data["left"] = self.left
        if self.duration_ms:
            data["duration_ms"] = self.duration_ms
        if self.taint:
            data["taint"] = self.taint
            if self.taint.startswith(NOT_REMOVED) or self.taint == TAINT_NOT_JOINED:
                data["reason"] = "%s; startup taint %s" % (self.reason, self.taint)
        return data


def settle(node: dict) -> dict:
    """The event's last word on one node result (a dict as :meth:`Outcome.to_dict` or the rollout gives it),
    changed in place and returned. A node whose GPUs are right but whose startup taint could not be lifted
    ends ``failed`` with the code :data:`TAINT_NOT_REMOVED`: no pod can land on it, so reporting it as
    ``partitioned`` would hide a node that does not serve. ``changes``, ``gpus`` and ``sequence`` still say
    what the node did. The pipeline applies this once every executor is done, so a rollout's wave is not
    stopped for it, and a lifecycle hook was answered before taints are lifted: this is never a reason to
    ABANDON an instance (the code is not in NODE_VERDICTS)."""
    taint = str(node.get("taint") or "")
    if node.get("outcome") in (PARTITIONED, UNCHANGED) and taint.startswith(NOT_REMOVED):
        done = str(node.get("reason") or "").split("; startup taint ", 1)[0]
        node["reason"] = ("%s: the startup taint could not be lifted (%s); the GPUs are right (%s), but no pod "
                          "lands on the node until it is: the next event or the timer lifts it"
                          % (TAINT_NOT_REMOVED, taint[len(NOT_REMOVED):], done or node.get("outcome")))
        node["outcome"], node["code"] = FAILED, TAINT_NOT_REMOVED
    return node


def parse_output(text: str) -> Optional[Dict[str, Any]]:
    """The node's JSON result: the last non-empty line of its output, when it is a JSON object that passes
    the reader rule (node_bootstrap/outside.py: bounded, finite numbers). Anything else: this node gave no
    result, and the batch goes on."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = loads(lines[-1], "the node's result", max_bytes=MAX_RESULT_BYTES, max_depth=8)
    except OutsideDataError:
        return None
    return value if isinstance(value, dict) else None


def _gpu_index(value: Any) -> Optional[int]:
    """A GPU index from a node's document, or None: readers put it in sets and compare it with ints."""
    return value if type(value) is int and 0 <= value <= MAX_GPU_INDEX else None


def outcome(res: NodeResult, node_name: str = "") -> Outcome:
    """Exactly one outcome for one node's result (see the module docstring)."""
    base = Outcome(res.instance_id, node_name, FAILED, transport=res.transport)
    doc = res.result
    if doc is None:
        base.code = res.error or "no-result"
        base.reason = "%s: %s" % (base.code, res.message or "the node gave no result")
        return base
    base.gpus = objects(doc.get("gpus"))  # a node's document: any shape
    base.sequence = str(doc.get("sequence") or "")
    try:
        base.changes = whole(doc.get("changes"), "changes", 0, MAX_CHANGES, default=0)
    except OutsideDataError:
        base.changes = 0
    node_outcome = doc.get("outcome")
    error = doc.get("error") if isinstance(doc.get("error"), dict) else {}
    # one line, bounded: the reason goes into labels' annotations, Events and the operator's terminal
    message = one_line(error.get("message") or "", 300)
    error_code = one_line(error.get("code") or "", 64)
    if node_outcome == "success" and res.exit_code in (0, None):
        base.outcome = PARTITIONED if base.changes > 0 else UNCHANGED
        base.reason = "%d change%s" % (base.changes, "" if base.changes == 1 else "s") if base.changes else \
            "already partitioned as requested"
    elif node_outcome == "reboot-required" or res.exit_code == 5:
        base.outcome = REBOOT_REQUIRED
        base.reason = message or "MIG mode is pending until the node reboots"
    elif node_outcome == CONFLICT or res.exit_code == 6:
        base.outcome, base.code = CONFLICT, CONFLICT
        base.reason = "conflict: %s" % (message or NODE_EXIT_REASONS[6])
        return base
    elif error_code == DESTROY_REQUIRED or res.exit_code == 7:
        base.outcome, base.code = DESTROY_REQUIRED, DESTROY_REQUIRED
        base.reason = "destroy-required: %s" % (message or NODE_EXIT_REASONS[7])
        return base
    else:
        code = error_code or NODE_EXIT_REASONS.get(res.exit_code or 1, "exit %s" % one_line(res.exit_code, 12))
        base.code = error_code
        base.reason = "%s: %s" % (code, message or "node_bootstrap failed (exit %s)" % one_line(res.exit_code, 12))
        return base
    # An entry whose GPU is not an index is dropped: the readers (the dwell's marks, the capacity created)
    # key sets by it, and one node's odd line must not fail the pool's tick.
    left = [g for g in objects(doc.get("left")) if g.get("why") != "not in the request"
            and _gpu_index(g.get("gpu")) is not None]
    if left:  # an auto pool's per-GPU request left these GPUs as they were (node_bootstrap/commands/planner.py)
        base.left = [{"gpu": g["gpu"], "why": one_line(g.get("why"), 80)} for g in left[:16]]
        base.reason = "%s; left as they were: %s" % (base.reason, ", ".join(
            "GPU %d (%s)" % (g["gpu"], g["why"]) for g in base.left))
    boot = doc.get("boot_unit") if isinstance(doc.get("boot_unit"), dict) else {}
    if boot.get("error"):  # the GPUs are right, but a reboot would lose them: say so
        base.reason = "%s; boot unit not installed: %s" % (base.reason, one_line(boot["error"], 200))
    return base
