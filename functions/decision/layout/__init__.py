"""Layouts chosen from demand (auto pools): the vocabulary (``model``), the pool labels (``bounds``) and the
pure planner (``planner``) from what the GPUs hold and what the pods wait for to per-GPU target layouts.
No I/O."""

from .bounds import (HEADROOM_LABEL, LAYOUT_LABEL, PROFILES_LABEL, LayoutLabelError, bounds_from_labels, is_auto,
                     parse_headroom, parse_profiles)
from .model import (CHANGE_ADD, CHANGE_NONE, CHANGE_REPARTITION, WHOLE_GPU, Bounds, GpuSupply, GpuTarget, Instance,
                    Plan, PodDemand)
from .planner import plan

__all__ = [
    "HEADROOM_LABEL", "LAYOUT_LABEL", "PROFILES_LABEL", "LayoutLabelError", "bounds_from_labels", "is_auto",
    "parse_headroom", "parse_profiles",
    "CHANGE_ADD", "CHANGE_NONE", "CHANGE_REPARTITION", "WHOLE_GPU", "Bounds", "GpuSupply", "GpuTarget", "Instance",
    "Plan", "PodDemand", "plan",
]
