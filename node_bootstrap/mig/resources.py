"""The Kubernetes extended resources the NVIDIA device plugin publishes for MIG instances (strategy
``mixed``): ``nvidia.com/mig-<profile>``. Pure: the node's capacity wait and the function's rollout both
compute what a layout should publish from here, so they agree on every profile name."""

RESOURCE_PREFIX = "nvidia.com/mig-"


def resource_name(profile_name):
    # type: (str) -> str
    # "+" is not allowed in a resource name; NVIDIA's plugin writes the +me (+me.all, +gfx) profiles with a
    # dot, e.g. nvidia.com/mig-1g.10gb.me (k8s-device-plugin's MIG resource naming; not seen on a real node
    # here, see docs/gpus.md).
    return RESOURCE_PREFIX + profile_name.replace("+", ".")
