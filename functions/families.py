"""ECS instance families -> GPU model and MIG capability, in one place.

Used before any node is touched, to skip instances that cannot do MIG with the reason and to plan the
layout for GPUs we know. The node's live NVML answer stays the ground truth: a family this table does not
know, in a pool labelled for MIG, goes to the node and the node decides.

Sources: ACK's MIG guide (``ecs.ebmgn7`` bare metal A100 yes, ``ecs.gn7`` passthrough no), the ECS
naming convention (``gn`` NVIDIA GPU, ``vgn``/``sgn`` GRID vGPU, ``ebm`` bare metal, ``scc`` super computing
cluster; generation 6 is Volta/Turing, 7 Ampere), facts.md (``ecs.ebmgn7.26xlarge`` = 8 x A100 40GB).
Not confirmed from public sources, so deliberately left to the node: ``ebmgn7e``/``ebmgn7ex`` (believed
A100/A800 80GB) and the generation-8 families.
"""

import re
from typing import NamedTuple, Optional

GUIDE_PASSTHROUGH = ("%s is a GPU passthrough instance type: ACK's MIG guide says only ECS bare metal "
                     "instances with A100 GPUs (ecs.ebmgn7.*) support MIG, passthrough ones (ecs.gn7.*) do not")

# ecs.<family>.<size>, where the family may carry a -cNgM suffix (ecs.gn7-c12g1.3xlarge, ecs.vgn7i-vws-m4.xlarge).
_TYPE = re.compile(r"^ecs\.([a-z0-9]+)(?:-[a-z0-9]+)*\.[a-z0-9]+$")
# NVIDIA GPU families: optional ebm/scc, optional v/s (vGPU), gn, generation digits, feature letters.
_NVIDIA = re.compile(r"^(ebm|scc)?([vs])?gn(\d+)([a-z]*)$")


class Capability(NamedTuple):
    """What the table says about one instance type."""

    family: str  # e.g. ebmgn7
    gpu: bool  # an NVIDIA GPU instance at all
    mig: Optional[bool]  # True: MIG capable; False: not; None: unknown, the node decides
    gpu_model: Optional[str] = None  # catalogue name when known (NVIDIA A100-SXM4-40GB)
    gpus: Optional[int] = None  # GPUs per instance when known
    reason: str = ""  # why not, or what is known


class Family(NamedTuple):
    name: str
    mig: bool
    gpu_model: Optional[str]
    gpus_by_size: dict  # instance size -> GPU count, where known
    reason: str


# Families known by name. Prefix rules below cover the rest.
KNOWN_FAMILIES = {
    "ebmgn7": Family("ebmgn7", True, "NVIDIA A100-SXM4-40GB", {"26xlarge": 8},
                     "ECS bare metal with NVIDIA A100 SXM4 40GB GPUs: MIG capable"),
    "gn7": Family("gn7", False, "NVIDIA A100-SXM4-40GB", {}, GUIDE_PASSTHROUGH),
    "gn7i": Family("gn7i", False, None, {}, "%s is a GPU passthrough instance type with NVIDIA A10 GPUs, which "
                   "do not support MIG (ACK's MIG guide: only ECS bare metal A100 instances, ecs.ebmgn7.*, do)"),
    "ebmgn7i": Family("ebmgn7i", False, None, {}, "%s has NVIDIA A10 GPUs, which do not support MIG (ACK's MIG "
                      "guide: only ECS bare metal A100 instances, ecs.ebmgn7.*, do)"),
}


def family_of(instance_type: str) -> Optional[str]:
    match = _TYPE.match((instance_type or "").strip().lower())
    return match.group(1) if match else None


def capability(instance_type: str) -> Capability:
    """The table's verdict on one instance type (e.g. ecs.ebmgn7.26xlarge)."""
    family = family_of(instance_type)
    if family is None:
        return Capability("", False, False, reason="%r is not an ECS instance type (ecs.<family>.<size>)"
                          % (instance_type or "")[:60])
    known = KNOWN_FAMILIES.get(family)
    if known is not None:
        size = instance_type.rsplit(".", 1)[-1]
        return Capability(family, True, known.mig, known.gpu_model, known.gpus_by_size.get(size),
                          known.reason % instance_type if "%s" in known.reason else known.reason)
    nvidia = _NVIDIA.match(family)
    if nvidia is None:
        return Capability(family, False, False, reason="%s is not an NVIDIA GPU instance type" % instance_type)
    bare, vgpu, generation = nvidia.group(1), nvidia.group(2), int(nvidia.group(3))
    if vgpu:
        return Capability(family, True, False, reason="%s is a vGPU (GRID) instance type: the GPU is shared "
                          "through vGPU and MIG cannot be set from the instance" % instance_type)
    if generation <= 6:
        return Capability(family, True, False, reason="%s is GPU generation %d (Volta/Turing or older); MIG "
                          "needs Ampere or newer" % (instance_type, generation))
    if generation == 7 and bare is None:
        # The guide's rule: every ecs.gn7* family is passthrough, which cannot use MIG.
        return Capability(family, True, False, reason=GUIDE_PASSTHROUGH % instance_type)
    return Capability(family, True, None, reason="%s is not in the family table; the node's NVML check "
                      "decides whether its GPUs can do MIG" % instance_type)
