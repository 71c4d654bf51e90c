"""The Kubernetes extended resources the NVIDIA device plugin publishes for MIG instances (strategy
``mixed``): ``nvidia.com/mig-<profile>``. Pure: the node's capacity wait, the function's rollout and the
autoscaler's node template (``functions/decision/autoscaler_tags.py``) all compute what a layout should publish
from here, so they agree on every profile name and count."""

from collections import Counter
from typing import Dict

from .catalogue import GpuModel
from .labels import PartitionSpec
from .solver import Layout, plan

RESOURCE_PREFIX = "nvidia.com/mig-"


def resource_name(profile_name):
    # type: (str) -> str
    # "+" is not allowed in a resource name; NVIDIA's plugin writes the +me (+me.all, +gfx) profiles with a
    # dot, e.g. nvidia.com/mig-1g.10gb.me (k8s-device-plugin's MIG resource naming; not seen on a real node
    # here, see docs/gpus.md).
    return RESOURCE_PREFIX + profile_name.replace("+", ".")


def layout_resources(layout, gpus):
    # type: (Layout, int) -> Dict[str, int]
    """The MIG resources one node advertises when each of its ``gpus`` GPUs holds ``layout`` (the device
    plugin's mixed strategy: one ``nvidia.com/mig-<profile>`` unit per GPU instance, summed over the GPUs;
    a GPU with MIG on adds nothing to ``nvidia.com/gpu``). Sorted by resource name."""
    if gpus < 1:
        raise ValueError("a node has at least one GPU, got %r" % (gpus,))
    counts = Counter(resource_name(i.profile.name) for i in layout.instances)
    return {name: counts[name] * gpus for name in sorted(counts)}


def node_resources(gpu, gpus, spec):
    # type: (GpuModel, int, PartitionSpec) -> Dict[str, int]
    """The MIG resources of one node with ``gpus`` GPUs of model ``gpu`` whose pool carries ``spec``: the
    label placed by the same solver the node uses (a label that does not fit raises its MigInputError)."""
    return layout_resources(plan(spec, gpu), gpus)
