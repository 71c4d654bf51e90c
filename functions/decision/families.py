"""ECS instance families -> GPU model, GPU count and MIG capability, in one place.

Used before any node is touched: to skip instances that cannot do MIG (with the reason), to refuse a
label that cannot fit the pool's GPU, and to plan the layout. The node's live NVML answer stays the ground
truth: a family this table does not know, in a pool labelled for MIG, goes to the node and the node
decides; so does a row whose GPU model is not known.

Whether a family may use MIG follows ACK's MIG guide: ECS bare metal instances (``ebm``) with a MIG GPU;
passthrough instances cannot reset the GPU, so the guide rules them out even where the GPU has MIG.

Each row says whether its GPU model is ``confirmed`` (named by an Alibaba Cloud doc or ACK's guide) or
``believed`` (inferred, e.g. from the GPU memory the ECS docs give). Sources, in
``/shared/reference/facts.md`` "Added after the first release": ebmgn7 8 x A100 SXM4 40GB (ACK's guide,
ECS docs); ebmgn7e 8 x 80 GB, bare metal, MIG per ECS docs (the model A100 80GB believed); gn7e 80 GB
passthrough; gn7 A100 40GB passthrough; gn7s A30 passthrough; ebmgn7i/ebmgn7ix/gn7i A10; gn8is/ebmgn8is/
ebmgn8ia L20; gn8v/ebmgn8v 96 GB HBM3, 8 per ebmgn8v.48xlarge (the model H20 believed); gn5i P4 (an
Alibaba API example). The generation-6 rows follow the ECS naming (T4 for ``i``, V100 for ``v``/``e``).
"""

import re
from typing import NamedTuple, Optional

from node_bootstrap.mig import find_gpu, has_no_mig

CONFIRMED = "confirmed"
BELIEVED = "believed"

GUIDE_PASSTHROUGH = ("%s is a GPU passthrough instance type: ACK's MIG guide says only ECS bare metal "
                     "instances with A100 GPUs (ecs.ebmgn7.*) support MIG, passthrough ones (ecs.gn7.*) do not")

# ecs.<family>.<size>, where the family may carry a -cNgM suffix (ecs.gn7-c12g1.3xlarge, ecs.vgn7i-vws-m4.xlarge).
_TYPE = re.compile(r"^ecs\.([a-z0-9]+)(?:-[a-z0-9]+)*\.[a-z0-9]+$")
# NVIDIA GPU families: optional ebm/scc, optional v/s (vGPU), gn, generation digits, feature letters. The
# generation is at most four digits: ``int`` of 5,000 raises ValueError (Python's limit), out of the decision.
_NVIDIA = re.compile(r"^(ebm|scc)?([vs])?gn([0-9]{1,4})([a-z]*)\Z")


class Capability(NamedTuple):
    """What the table says about one instance type."""

    family: str  # e.g. ebmgn7
    gpu: bool  # an NVIDIA GPU instance at all
    mig: Optional[bool]  # True: MIG capable; False: not; None: unknown, the node decides
    gpu_model: Optional[str] = None  # catalogue product name when known (NVIDIA A100-SXM4-40GB)
    gpus: Optional[int] = None  # GPUs per instance when known
    reason: str = ""  # why not, or what is known
    status: str = ""  # CONFIRMED or BELIEVED for the GPU model; "" when the table has no row


class Family(NamedTuple):
    """One row: the family's GPU and how it is attached."""

    name: str
    gpu_model: Optional[str]  # catalogue product name (find_gpu resolves it); None: not known
    bare_metal: bool
    status: str  # CONFIRMED or BELIEVED, for gpu_model
    gpus_by_size: dict  # instance size -> GPU count, where known
    note: str = ""  # what backs a believed row


def _row(name, gpu_model, bare_metal, status, gpus_by_size=None, note=""):
    # type: (str, Optional[str], bool, str, Optional[dict], str) -> Family
    return Family(name, gpu_model, bare_metal, status, gpus_by_size or {}, note)


KNOWN_FAMILIES = {f.name: f for f in (
    # Ampere, MIG GPUs
    _row("ebmgn7", "NVIDIA A100-SXM4-40GB", True, CONFIRMED, {"26xlarge": 8}),
    _row("ebmgn7e", "NVIDIA A100-SXM4-80GB", True, BELIEVED, {"32xlarge": 8},
         "ECS documents 8 x 80 GB GPUs and MIG; that they are A100 80GB is inferred"),
    _row("ebmgn7ex", None, True, BELIEVED, {}, "bare metal with eRDMA; A100 x 8 only per a third-party README, "
         "memory size unknown"),
    _row("gn7", "NVIDIA A100-SXM4-40GB", False, CONFIRMED),
    _row("gn7e", "NVIDIA A100-SXM4-80GB", False, BELIEVED, {}, "ECS documents 80 GB GPUs"),
    _row("gn7s", "NVIDIA A30", False, CONFIRMED),
    # Ampere and Ada GPUs without MIG
    _row("gn7i", "NVIDIA A10", False, CONFIRMED),
    _row("ebmgn7i", "NVIDIA A10", True, CONFIRMED),
    _row("ebmgn7ix", "NVIDIA A10", True, CONFIRMED),
    _row("gn8is", "NVIDIA L20", False, CONFIRMED),
    _row("ebmgn8is", "NVIDIA L20", True, CONFIRMED),
    _row("ebmgn8ia", "NVIDIA L20", True, CONFIRMED),
    # Hopper, 96 GB per GPU
    _row("gn8v", "NVIDIA H20", False, BELIEVED, {}, "ECS documents 96 GB HBM3 per GPU, which matches the H20"),
    _row("ebmgn8v", "NVIDIA H20", True, BELIEVED, {"48xlarge": 8},
         "ECS documents 8 x 96 GB HBM3 GPUs; that they are H20 is inferred"),
    # Older generations: no MIG
    _row("gn6i", "Tesla T4", False, BELIEVED),
    _row("ebmgn6i", "Tesla T4", True, BELIEVED),
    _row("gn6v", "Tesla V100-SXM2-16GB", False, BELIEVED),
    _row("ebmgn6v", "Tesla V100-SXM2-16GB", True, BELIEVED),
    _row("gn6e", "Tesla V100-SXM2-32GB", False, BELIEVED),
    _row("ebmgn6e", "Tesla V100-SXM2-32GB", True, BELIEVED),
    _row("gn5i", "Tesla P4", False, CONFIRMED),
    _row("gn5", "Tesla P100-PCIE-16GB", False, BELIEVED),
)}


def family_of(instance_type: str) -> Optional[str]:
    match = _TYPE.match((instance_type or "").strip().lower())
    return match.group(1) if match else None


def _known(instance_type: str, row: Family) -> Capability:
    size = instance_type.rsplit(".", 1)[-1]
    count = row.gpus_by_size.get(size)
    gpus = ("%d x %s" % (count, row.gpu_model)) if count and row.gpu_model else (row.gpu_model or "GPUs")
    believed = " (%s: %s)" % (BELIEVED, row.note) if row.status == BELIEVED and row.note else (
        " (%s)" % BELIEVED if row.status == BELIEVED else "")

    def verdict(mig: Optional[bool], reason: str) -> Capability:
        return Capability(row.name, True, mig, row.gpu_model, count, reason, row.status)

    if row.gpu_model is None:
        return verdict(None, "%s is ECS bare metal whose GPU model is not known%s; the node's NVML check decides"
                       % (instance_type, believed))
    if has_no_mig(row.gpu_model):
        return verdict(False, "%s has %s%s, which has no MIG" % (instance_type, gpus, believed))
    find_gpu(row.gpu_model)  # every MIG row names a catalogue GPU (a test holds the table to it)
    if not row.bare_metal:
        return verdict(False, "%s is a GPU passthrough instance type: ACK's MIG guide supports MIG only on ECS "
                       "bare metal instances (ecs.ebmgn7.*), not on passthrough ones (ecs.gn7.*), although its %s%s "
                       "has MIG" % (instance_type, gpus, believed))
    return verdict(True, "%s is ECS bare metal with %s%s: MIG capable" % (instance_type, gpus, believed))


def capability(instance_type: str) -> Capability:
    """The table's verdict on one instance type (e.g. ecs.ebmgn7.26xlarge)."""
    family = family_of(instance_type)
    if family is None:
        return Capability("", False, False, reason="%r is not an ECS instance type (ecs.<family>.<size>)"
                          % (instance_type or "")[:60])
    known = KNOWN_FAMILIES.get(family)
    if known is not None:
        return _known(instance_type.strip().lower(), known)
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
