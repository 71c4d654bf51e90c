"""A Kubernetes Event on the node for every final state, so that ``kubectl describe node`` tells the story.

Written with the kubelet's own credential: the ``system:node`` rules allow core v1 events create, and
NodeRestriction does not restrict events. The Event has the shape the kubelet gives its own node events
(client-go's recorder): namespace ``default`` (an Event about a cluster-scoped object without
``eventTime`` must live there), ``involvedObject`` kind Node with the node's name as its uid, which is
one of the two references ``kubectl describe node`` searches events by, and a name ``<node>.<hex ns>``.

Best effort, like the labels: an unreachable API server never changes the verdict on the GPUs; the
result says whether the Event was written.
"""

import time
from typing import Any, Callable, Dict, Optional

from ..errors import one_line
from .client import KubeError

NAMESPACE = "default"
COMPONENT = "ack-mig-hook"
MESSAGE_LIMIT = 1024  # the API server's limit for a new-style event note; long reasons are cut there

# (command, outcome) -> Event reason. Success of apply means the layout is in place; of disable, MIG off.
REASONS = {
    ("apply", "success"): "MigPartitioned",
    ("apply", "failed"): "MigFailed",
    ("apply", "reboot-required"): "MigRebootRequired",
    ("disable", "success"): "MigDisabled",
    ("disable", "failed"): "MigDisableFailed",
    ("disable", "reboot-required"): "MigRebootRequired",
}
CONFLICT_REASON = "MigConflict"
# A "destroy nothing" apply refused: not a failure of the node (nothing changed, the labels stand), the
# step after which the rollout repartitions it the drained way.
DESTROY_REQUIRED_REASON = "MigDestroyRequired"
FINAL_STATES = ("success", "failed", "rebooting", "cleared")


def _destroy_required(result):
    # type: (Dict[str, Any]) -> bool
    return (result.get("error") or {}).get("code") == "destroy-required"


def reason_for(command, outcome):
    # type: (str, str) -> str
    if outcome == "conflict":
        return CONFLICT_REASON
    return REASONS.get((command, outcome), "MigFailed")


def message_for(result):
    # type: (Dict[str, Any]) -> str
    """The outcome's reason: the error message, or what success means for this command."""
    error = result.get("error") or {}
    if error.get("message"):
        text = str(error["message"])
    elif result.get("command") == "disable":
        text = "MIG mode is off on every GPU; %d change%s" % (result.get("changes", 0),
                                                              "" if result.get("changes") == 1 else "s")
    else:
        text = "MIG layout %s is in place; %d change%s" % (result.get("sequence") or "?", result.get("changes", 0),
                                                            "" if result.get("changes") == 1 else "s")
    return one_line(text, MESSAGE_LIMIT)


def _timestamp(now):
    # type: (float) -> str
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def node_event(node_name, reason, message, warning, now):
    # type: (str, str, str, bool, float) -> Dict[str, Any]
    """The Event document (pure)."""
    stamp = _timestamp(now)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "%s.%x" % (node_name, int(now * 1e9)), "namespace": NAMESPACE},
        "involvedObject": {"kind": "Node", "name": node_name, "uid": node_name, "apiVersion": "v1"},
        "reason": reason, "message": message, "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT, "host": node_name},
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        "reportingComponent": COMPONENT, "reportingInstance": node_name[:128],
    }


def record_final_state(labeler, result, clock=time.time):
    # type: (Any, Dict[str, Any], Callable[[], float]) -> Optional[Dict[str, Any]]
    """Write the Event for a run's final state; returns what happened (None: no Event is due).

    Due when the run reached a verdict on the node: it wrote (or tried to write) a final state label,
    or it was refused because another MIG manager is in charge, or because it was told to destroy nothing
    and could not (a Normal Event: nothing changed). A run that only waited for the node lock
    or was interrupted before it says nothing about the node, and writes nothing.
    """
    outcome = result.get("outcome", "")
    refused = _destroy_required(result)
    if not labeler.enabled or not (outcome == "conflict" or refused or labeler.last_state in FINAL_STATES):
        return None
    if getattr(labeler.client, "create_event", None) is None:
        return None  # a simulated node's label stand-in: no API server to hold events
    reason = DESTROY_REQUIRED_REASON if refused else reason_for(result.get("command") or "apply", outcome)
    event = node_event(labeler.node_name, reason, message_for(result), outcome != "success" and not refused,
                       clock())
    try:
        labeler.client.create_event(NAMESPACE, event)
    except KubeError as exc:
        labeler.log("writing event %s on node %s failed: %s" % (reason, labeler.node_name, exc))
        return {"reason": reason, "written": False, "error": str(exc)}
    return {"reason": reason, "written": True}
