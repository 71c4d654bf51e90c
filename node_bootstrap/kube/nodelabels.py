"""The node's labels and reason annotation, written with the kubelet's own credentials.

* ``nvidia.com/mig.config.state``: ``pending`` before anything changes, then ``success``, ``failed`` or
  ``rebooting`` (a reboot is required to finish) on every exit path.
* ``aliyun.accelerator/nvidia_mig_sequence``: the normalized sequence once it is in place (removed while
  pending and on failure, so ``kubectl get nodes -l aliyun.accelerator/nvidia_mig_sequence`` lists nodes
  that are ready).
* annotation ``ack-mig-hook/mig-config-reason``: why it failed or needs a reboot (removed otherwise).

``disable`` removes all three once MIG mode is off (:meth:`NodeLabeler.clear`).

A kubelet may change its own labels but never its taints (NodeRestriction): nothing here touches them.
Labelling is best effort: an unreachable API server never blocks the GPUs (at boot it may not be up);
the error is reported in the result instead.
"""

import re
import time
from typing import Callable, Optional

from ..errors import one_line
from ..mig.annotations import LAYOUTS_ANNOTATION
from .client import KubeClient, KubeError, retry_delay

STATE_LABEL = "nvidia.com/mig.config.state"
SEQUENCE_LABEL = "aliyun.accelerator/nvidia_mig_sequence"
REASON_ANNOTATION = "ack-mig-hook/mig-config-reason"
# What every GPU holds after an apply, a GPU that could not be read null (node_bootstrap/mig/annotations.py,
# with its writer and its one reader).
# Which pod holds each instance, from kubelet's allocations (node_bootstrap/commands/holdings.py has the
# format): written with the layouts after every apply and by ``report-holders`` while pods come and go.
HOLDERS_ANNOTATION = "ack-mig-hook/gpu-holders"
STATES = ("pending", "success", "failed", "rebooting")
# Seconds before the second and third try of a write that failed transiently (KubeError.transient): a final
# state lost to one 503 left the node `pending`, which an auto pool takes for a node being changed, for good.
# A Retry-After the server sent (KubeError.retry_after) is waited instead when longer, as long as the write's
# tries end within RETRY_WINDOW_S of its first: a wait past that ends them at once (the failure is said),
# rather than a try the server asked not to have before then. 10 s: the back-offs and APF's usual ask (1 s)
# with room, well inside the minutes a run's event waits for the node.
RETRY_DELAYS = (0.5, 1.5)
RETRY_WINDOW_S = 10.0

_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")


def sequence_label_value(sequence, ids=""):
    # type: (str, str) -> str
    """A valid label value for a sequence: "+me" becomes ".me"; too long falls back to the ids form."""
    value = sequence.replace("+", ".")
    if _VALUE.match(value):
        return value
    if ids and _VALUE.match(ids):
        return ids
    return value[:63].strip("-_.")


def state_patch(state, sequence_value=None, reason=None, layouts=None, holders=None):
    # type: (str, Optional[str], Optional[str], Optional[str], Optional[str]) -> dict
    if state not in STATES:
        raise ValueError("unknown state %r" % state)
    labels = {STATE_LABEL: state}  # type: dict
    if state == "success":
        labels[SEQUENCE_LABEL] = sequence_value
    else:
        labels[SEQUENCE_LABEL] = None
    annotations = {REASON_ANNOTATION: one_line(reason, 1024) if reason else None}
    if state == "success" or layouts is not None:  # a failure's read-back too: the last success's is stale
        annotations[LAYOUTS_ANNOTATION] = layouts
    if holders is not None:
        annotations[HOLDERS_ANNOTATION] = holders
    return {"metadata": {"labels": labels, "annotations": annotations}}


CLEAR_PATCH = {"metadata": {"labels": {STATE_LABEL: None, SEQUENCE_LABEL: None},
                             "annotations": {REASON_ANNOTATION: None, LAYOUTS_ANNOTATION: None,
                                             HOLDERS_ANNOTATION: None}}}


class NodeLabeler(object):
    """Writes states; remembers the last one written and the last error (None when all went through)."""

    def __init__(self, client, node_name, log, sleep=time.sleep, clock=time.monotonic):
        # type: (Optional[KubeClient], Optional[str], Callable[[str], None], Callable[[float], None], Callable[[], float]) -> None
        self.client = client
        self.node_name = node_name
        self.log = log
        self.sleep = sleep
        self.clock = clock
        self.written = []  # type: list
        self.error = None  # type: Optional[str]
        self.last_state = None  # type: Optional[str]  # the last state asked for, written or not

    @property
    def enabled(self):
        # type: () -> bool
        return self.client is not None and bool(self.node_name)

    def set(self, state, sequence_value=None, reason=None, layouts=None, holders=None):
        # type: (str, Optional[str], Optional[str], Optional[str], Optional[str]) -> bool
        return self._patch(state, state_patch(state, sequence_value, reason, layouts, holders))

    def report_holders(self, value):
        # type: (str) -> bool
        """The holders annotation alone (no state label changes): ``report-holders``."""
        if not self.enabled:
            return False
        assert self.client is not None and self.node_name is not None
        try:
            self._merge_patch({"metadata": {"annotations": {HOLDERS_ANNOTATION: value}}})
        except KubeError as exc:
            self.error = "writing %s on node %s failed: %s" % (HOLDERS_ANNOTATION, self.node_name, exc)
            self.log(self.error)
            return False
        return True

    def holders_now(self):
        # type: () -> Optional[str]
        """The holders annotation as the node object has it now, so that ``report-holders`` writes only what
        changed; None when there is none or it cannot be read (then the report is written)."""
        if not self.enabled:
            return None
        assert self.client is not None and self.node_name is not None
        own = getattr(self.client, "read_annotations", None)  # a simulated node's stand-in (commands/simhost.py)
        try:
            if own is not None:
                annotations = own(self.node_name)
            else:
                node = self.client.get_node(self.node_name)
                meta = node.get("metadata") if isinstance(node, dict) else None
                annotations = meta.get("annotations") if isinstance(meta, dict) else None
        except KubeError as exc:
            self.log("reading %s on node %s failed (it is written): %s" % (HOLDERS_ANNOTATION, self.node_name, exc))
            return None
        value = (annotations or {}).get(HOLDERS_ANNOTATION) if isinstance(annotations, dict) else None
        return value if isinstance(value, str) else None

    def clear(self):
        # type: () -> bool
        """Remove every label and annotation this tool writes (MIG turned off): state "cleared"."""
        return self._patch("cleared", CLEAR_PATCH)

    def _patch(self, state, patch):
        # type: (str, dict) -> bool
        self.last_state = state
        if not self.enabled:
            return False
        assert self.client is not None and self.node_name is not None
        try:
            self._merge_patch(patch)
        except KubeError as exc:
            self.error = "labelling node %s %s failed: %s" % (self.node_name, state, exc)
            self.log(self.error)
            return False
        self.written.append(state)
        return True

    def _merge_patch(self, patch):
        # type: (dict) -> None
        """The patch, tried again after a transient failure (a merge patch is idempotent), three times at
        most, each after the back-off or the server's Retry-After, whichever is longer, within RETRY_WINDOW_S;
        the last failure is raised."""
        assert self.client is not None and self.node_name is not None
        deadline = self.clock() + RETRY_WINDOW_S
        for backoff in RETRY_DELAYS + (None,):
            try:
                self.client.merge_patch_node(self.node_name, patch)
                return
            except KubeError as exc:
                if backoff is None or not getattr(exc, "transient", False):
                    raise
                asked = getattr(exc, "retry_after", None)
                delay = retry_delay(exc, backoff)
                if self.clock() + delay > deadline:
                    raise KubeError("%s (the server asks to retry after %gs: past the %gs a write of the node's "
                                    "labels tries within)" % (exc, delay, RETRY_WINDOW_S), exc.status, exc.transient,
                                    asked)
                self.log("writing node %s failed (%s); trying again in %gs" % (self.node_name, exc, delay))
                self.sleep(delay)

    def summary(self):
        # type: () -> dict
        out = {"node": self.node_name, "enabled": self.enabled, "states": list(self.written)}
        if self.error:
            out["error"] = self.error
        return out
