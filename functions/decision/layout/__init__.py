"""Layouts chosen from demand (auto pools). No I/O.

``vocabulary``: the values (GpuSupply, PodDemand, Bounds, GpuTarget, Plan; not ``model.py``, a name
functions/base/ has already, and tests/test_layout.py keeps file names unique); ``bounds``: the pool
labels; ``planner``: from what the GPUs hold and what the pods wait for to per-GPU target layouts.
Import from this package: ``from functions.decision.layout import plan, Bounds``.
"""

from .bounds import (HEADROOM_LABEL, LAYOUT_LABEL, PROFILES_LABEL, LayoutLabelError, bounds_from_labels, is_auto,
                     parse_headroom, parse_profiles)
from .vocabulary import (CHANGE_ADD, CHANGE_NONE, CHANGE_REPARTITION, WHOLE_GPU, Bounds, GpuSupply, GpuTarget, Instance,
                    Plan, PodDemand)
from .compose import plan  # planner.plan, in a second round where the first leaves a pod short

__all__ = [
    "HEADROOM_LABEL", "LAYOUT_LABEL", "PROFILES_LABEL", "LayoutLabelError", "bounds_from_labels", "is_auto",
    "parse_headroom", "parse_profiles",
    "CHANGE_ADD", "CHANGE_NONE", "CHANGE_REPARTITION", "WHOLE_GPU", "Bounds", "GpuSupply", "GpuTarget", "Instance",
    "Plan", "PodDemand", "plan",
]
