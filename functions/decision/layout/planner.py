"""The auto pool's planner: per-GPU target layouts from what the GPUs hold and what the pods wait for.

Pure (no I/O). See ``plan``.
"""

from typing import Optional, Sequence

from .vocabulary import Bounds, GpuSupply, Plan, PodDemand


def plan(supply: Sequence[GpuSupply], demand: Sequence[PodDemand], bounds: Bounds,
         previous: Optional[Plan] = None) -> Plan:
    raise NotImplementedError("the planner lands in the next commit")
