"""The auto pool's vocabulary: what a GPU holds, what the pods ask for, the pool's bounds and the plan.

Pure values (frozen dataclasses, stdlib only): the planner (``planner.py``) reads the first three and
returns a :class:`Plan`; the Kubernetes readers build them, the rollout and ``advise`` read the plan.
Profile names are the catalogue's (``node_bootstrap/mig/catalogue.py``: "1g.10gb", "1g.10gb+me"), the
same names the device plugin's ``nvidia.com/mig-<profile>`` resources carry.
"""

from dataclasses import dataclass, field
from typing import FrozenSet, Iterable, Mapping, Optional, Tuple, Union

# What a target does to its GPU.
CHANGE_NONE = "none"  # the GPU stays as it is
CHANGE_ADD = "add"  # every existing instance stays; only new ones are created (nothing drains)
CHANGE_REPARTITION = "repartition"  # instances nothing uses are destroyed, others created; in-use ones stay
CHANGES = (CHANGE_NONE, CHANGE_ADD, CHANGE_REPARTITION)

# PodDemand.profile of a pod that asks for a whole GPU (nvidia.com/gpu) rather than a MIG instance.
WHOLE_GPU = "gpu"

Pairs = Tuple[Tuple[str, int], ...]


@dataclass(frozen=True)
class Instance:
    """One MIG GPU instance that exists on a GPU."""

    profile: str  # the catalogue's name, e.g. "1g.10gb"
    start: int  # its placement's first memory slot
    in_use: bool  # a pod (or process) holds it: the planner never moves or destroys it


@dataclass(frozen=True)
class GpuSupply:
    """One GPU of the pool as it is now."""

    node: str
    index: int  # the GPU's NVML index on its node
    model: str  # the NVML name the catalogue knows, e.g. "NVIDIA A100-SXM4-80GB"
    instances: Tuple[Instance, ...] = ()
    mig: bool = True  # MIG mode on; a GPU with MIG off is never repartitioned (that needs a GPU reset)
    busy: bool = False  # a non-MIG process or a whole-GPU pod uses it: the plan never changes it


@dataclass(frozen=True)
class PodDemand:
    """One pod that asks for MIG instances of one profile (or whole GPUs) and can land on the pool."""

    key: str  # "namespace/name"
    owner: str  # who made it, for the reasons: "deployment llm/serve", "pod llm/once"
    profile: str  # a MIG profile name, or WHOLE_GPU for nvidia.com/gpu
    count: int = 1  # instances it asks for
    pending: bool = True  # False: it runs (its instances are among the in-use ones)
    node: str = ""  # where it runs, when it runs


def _pairs(value: Union[Mapping[str, int], Iterable[Tuple[str, int]], None]) -> Pairs:
    items = value.items() if isinstance(value, Mapping) else (value or ())
    return tuple(sorted((str(k), int(v)) for k, v in items))


@dataclass(frozen=True)
class Bounds:
    """What an auto pool's labels allow (``bounds.py`` parses them).

    ``profiles``: the profiles the planner may create; None: every profile of the GPU model.
    ``headroom``: per profile, idle instances kept ready beyond the pending pods; a Mapping or pairs in,
    sorted pairs stored (hashable). ``model``: the GPU model a new node of the pool brings (for
    ``Plan.new_node``); empty: the model most of the pool's GPUs have. ``node_gpus``: how many GPUs a new node
    has (the pool's instance type); 0: as many as the largest node of the pool, else one.
    """

    profiles: Optional[FrozenSet[str]] = None
    headroom: Pairs = ()
    model: str = ""
    node_gpus: int = 0

    def __post_init__(self):
        if self.profiles is not None and not isinstance(self.profiles, frozenset):
            object.__setattr__(self, "profiles", frozenset(self.profiles))
        object.__setattr__(self, "headroom", _pairs(self.headroom))

    def allows(self, profile: str) -> bool:
        return self.profiles is None or profile in self.profiles

    def headroom_of(self, profile: str) -> int:
        return dict(self.headroom).get(profile, 0)


@dataclass(frozen=True)
class GpuTarget:
    """What one GPU should hold after the plan: its whole layout, and how it gets there."""

    node: str
    index: int
    layout: Tuple[Tuple[str, int], ...]  # every instance the GPU should hold, (profile, start), by start
    change: str  # one of CHANGES
    reason: str  # one line; empty when change is "none"
    create: Tuple[Tuple[str, int], ...] = ()  # instances to create, (profile, start)
    destroy: Tuple[Tuple[str, int], ...] = ()  # existing idle instances to destroy, (profile, start)


@dataclass(frozen=True)
class Plan:
    """The planner's answer for one pool."""

    targets: Tuple[GpuTarget, ...]  # one per GPU of the supply, in (node, index) order
    unserved: Pairs  # (profile, instances) the existing GPUs cannot serve, by profile
    new_node: Tuple[Tuple[str, int], ...]  # per-GPU layout (profile, start) for a new node; () when none
    reasons: Tuple[str, ...]  # one line per change, then one per unserved profile
    unplaced: Tuple[str, ...] = field(default=())  # GPUs the planner could not read, one line each
    # (pod key, one line why) for waiting pods no node of the pool (or of its template) can hold: a profile
    # its GPUs lack or the pool does not allow, more than one node holds; never planned for, never unserved
    not_counted: Tuple[Tuple[str, str], ...] = field(default=())
    # One new node, GPU by GPU, as (per-GPU layout, how many GPUs get it), most GPUs first: the shape the
    # autoscaler's template advertises (copies of it serve every unserved pod the shape can, in one round);
    # ``new_node`` is its first layout (the one most GPUs get). () when none.
    new_node_shape: Tuple[Tuple[Tuple[Tuple[str, int], ...], int], ...] = field(default=())
    # (profile, instances) of ``unserved`` that no new node can hold either: those of pods asking whole GPUs
    # beside them (a new node's GPUs all get MIG, or all stay whole); left out of ``new_node_shape``
    no_new_node: Pairs = field(default=())

    @property
    def changes(self) -> Tuple[GpuTarget, ...]:
        return tuple(t for t in self.targets if t.change != CHANGE_NONE)
