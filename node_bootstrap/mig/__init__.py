"""The pure MIG core: catalogue, label parsing, placement solver, diagrams. No I/O anywhere in here.

Imported by the node bootstrap (Python 3.6, stdlib only) and by the Function Compute code, so a label is
validated the same way before a node is touched and on the node itself.
"""

from .catalogue import (GPUS, MEMORY_CONFIRMED, GpuModel, Placement, Profile, find_gpu, find_gpu_or_none, has_no_mig,
                        known_gpus, suffix_of)
from .diagram import render, render_all
from .errors import GpuWithoutMigError, LabelError, MigInputError, PlacementError, UnknownGpuError
from .labels import (KIND_SEQUENCE, KIND_SIZE, PARTITION_LABELS, SEQUENCE_LABEL, SIZE_LABEL, PartitionRequest,
                     PartitionSpec, label_items, parse, resolve_profile, spec_from_args, spec_from_labels)
from .names import AmbiguousGpuError, resolve_gpu
from .resources import RESOURCE_PREFIX, layout_resources, node_resources, resource_name
from .solver import Instance, Layout, check_budget, fill, place, plan, try_place

__all__ = [
    "GPUS", "MEMORY_CONFIRMED", "GpuModel", "Placement", "Profile", "find_gpu", "find_gpu_or_none", "has_no_mig",
    "known_gpus", "suffix_of",
    "render", "render_all",
    "GpuWithoutMigError", "LabelError", "MigInputError", "PlacementError", "UnknownGpuError",
    "KIND_SEQUENCE", "KIND_SIZE", "PARTITION_LABELS", "SEQUENCE_LABEL", "SIZE_LABEL", "PartitionRequest",
    "PartitionSpec", "label_items", "parse", "resolve_profile", "spec_from_args", "spec_from_labels",
    "AmbiguousGpuError", "resolve_gpu",
    "RESOURCE_PREFIX", "layout_resources", "node_resources", "resource_name",
    "Instance", "Layout", "check_budget", "fill", "place", "plan", "try_place",
]
