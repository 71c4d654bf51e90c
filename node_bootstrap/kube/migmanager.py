"""Living beside NVIDIA GPU Operator's mig-manager: a node it is in charge of is not ours to change.

mig-manager acts on the node label ``nvidia.com/mig.config`` (the mig-parted config name it should
apply) and reports in ``nvidia.com/mig.config.state``. Two managers writing MIG layouts on one GPU undo
each other, and the state label would say whatever the last one wrote. So where ``nvidia.com/mig.config``
is present, ``apply`` and ``disable`` stop before any change with the outcome ``conflict`` and write no
label (the state label is mig-manager's as well); the Event says why.

The check reads the Node with the kubelet credential (``system:node`` may get its own Node). Without
Kubernetes access (``--no-label``, or the API server unreachable, as at boot before the control plane
answers) nothing can be known: the run goes on and says so in its log.
"""

from typing import Any, Callable, Optional

from ..errors import Conflict
from ..outside import as_object
from .client import KubeError

MIG_CONFIG_LABEL = "nvidia.com/mig.config"


def refuse_if_mig_manager(client, node_name, log):
    # type: (Any, Optional[str], Callable[[str], None]) -> None
    """Raise Conflict when the node carries mig-manager's label; a Node that cannot be read is let pass."""
    get_node = getattr(client, "get_node", None)
    if get_node is None or not node_name:
        return  # no Kubernetes access (or a simulated node's stand-in, which has no such label)
    try:
        node = get_node(node_name)
    except KubeError as exc:
        log("could not read node %s to check for NVIDIA mig-manager's %s label (%s); going on"
            % (node_name, MIG_CONFIG_LABEL, exc))
        return
    labels = as_object(as_object(as_object(node).get("metadata")).get("labels"))  # another shape: absent
    if MIG_CONFIG_LABEL in labels:
        raise Conflict("node %s carries the label %s=%s: NVIDIA GPU Operator's mig-manager is in charge of its MIG "
                       "layout, and two managers would undo each other; nothing was changed. Remove that label "
                       "(and mig-manager's rollout to this node) to let ack-mig-hook manage it, or manage MIG "
                       "through mig-manager alone" % (node_name, MIG_CONFIG_LABEL,
                                                      str(labels[MIG_CONFIG_LABEL])[:63]))
