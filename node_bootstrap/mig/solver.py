"""Placement solver: for a GPU model and a multiset of profiles, concrete start slots or a precise reason.

Pure and deterministic. The node creates GPU instances exactly at these placements
(``nvmlDeviceCreateGpuInstanceWithPlacement``), so there are no permutation retries at apply time: the
order the user wrote the profiles in does not matter, and what the solver accepts the hardware holds.

The hardware rules modelled (facts.md): each instance occupies ``size`` consecutive memory slots from one
of its profile's allowed starts; instances never overlap; at most ``max_instances`` of a profile; the
compute slices of all instances add up to at most the GPU's compute slices; where the GPU has fewer media
engines than its ``+me`` profiles together would take (the A30), at most ``media_instances`` of them.

:func:`complete` places profiles around instances that already exist (a node keeps what it can), with
the same rules.
"""

import typing
from collections import Counter
from typing import Iterable, List, Optional, Sequence, Tuple

from .catalogue import GpuModel, Profile, all_media_conflict
from .errors import PlacementError
from .labels import PartitionSpec, parse


class Instance(typing.NamedTuple):
    """One planned GPU instance: a profile at a start slot."""

    profile: Profile
    start: int

    @property
    def size(self):
        # type: () -> int
        return self.profile.memory_slices

    def to_dict(self):
        # type: () -> dict
        return {"profile": self.profile.name, "id": self.profile.id, "start": self.start, "size": self.size}


class Layout(typing.NamedTuple):
    """The instances one GPU should hold, ordered by start slot."""

    gpu: GpuModel
    instances: Tuple[Instance, ...]

    @property
    def compute_used(self):
        # type: () -> int
        return sum(i.profile.compute_slices for i in self.instances)

    @property
    def memory_used(self):
        # type: () -> int
        return sum(i.size for i in self.instances)

    @property
    def sequence(self):
        # type: () -> str
        """The normalized sequence: profile names in start order, hyphen-joined (the node label value)."""
        return "-".join(i.profile.name for i in self.instances)

    def to_dict(self):
        # type: () -> dict
        return {"gpu": self.gpu.name, "instances": [i.to_dict() for i in self.instances]}


def _search_order(profiles):
    # type: (Iterable[Profile]) -> List[Profile]
    # Biggest and most constrained first: they have the fewest choices, so dead ends show up early.
    return sorted(profiles, key=lambda p: (-p.memory_slices, len(p.placements), -p.compute_slices, p.id))


def _mask(start, size):
    # type: (int, int) -> int
    return ((1 << size) - 1) << start


def _backtrack(order, index, used, min_start, chosen):
    # type: (List[Profile], int, int, int, List[Instance]) -> bool
    if index == len(order):
        return True
    profile = order[index]
    for placement in profile.placements:
        # Equal profiles take increasing starts: the same set in another order is the same layout.
        if placement.start < min_start:
            continue
        bits = _mask(placement.start, placement.size)
        if used & bits:
            continue
        chosen.append(Instance(profile, placement.start))
        nxt = order[index + 1] if index + 1 < len(order) else None
        next_min = placement.start + 1 if nxt is not None and nxt == profile else 0
        if _backtrack(order, index + 1, used | bits, next_min, chosen):
            return True
        chosen.pop()
    return False


def _describe(profiles):
    # type: (Sequence[Profile]) -> str
    counts = Counter(p.name for p in profiles)
    return " + ".join("%dx %s" % (n, name) if n > 1 else name for name, n in sorted(counts.items()))


def is_media_extension(profile):
    # type: (Profile) -> bool
    """A "+me" profile (1g.6gb+me, 1g.5gb+me, ...): it takes the GPU's JPEG decoder and OFA."""
    return "+me" in profile.name


def check_budget(gpu, profiles):
    # type: (GpuModel, Sequence[Profile]) -> Optional[str]
    """The first counting rule the multiset breaks, as a message; None when all counts are within limits."""
    counts = Counter(profiles)
    for profile in sorted(counts, key=lambda p: p.id):
        if counts[profile] > profile.max_instances:
            return "%d x %s requested, but %s holds at most %d" % (
                counts[profile], profile.name, gpu.shown, profile.max_instances)
    media = [p for p in profiles if is_media_extension(p)]
    if gpu.media_instances and len(media) > gpu.media_instances:
        return "%s requested, but %s holds at most %d +me instance%s in all (they share its one JPEG decoder " \
               "and OFA)" % (_describe(media), gpu.shown, gpu.media_instances, "" if gpu.media_instances == 1 else "s")
    all_media = all_media_conflict(gpu, profiles)  # "+me.all" beside anything but "-me" (RTX PRO 6000)
    if all_media is not None:
        return all_media
    compute = sum(p.compute_slices for p in profiles)
    if compute > gpu.compute_slices:
        return "%s needs %d compute slices, but %s has %d" % (_describe(profiles), compute, gpu.shown,
                                                             gpu.compute_slices)
    memory = sum(p.memory_slices for p in profiles)
    if memory > gpu.memory_slots:
        return "%s needs %d memory slots, but %s has %d" % (_describe(profiles), memory, gpu.shown,
                                                           gpu.memory_slots)
    return None


def _search(gpu, profiles, fixed=()):
    # type: (GpuModel, Sequence[Profile], Sequence[Instance]) -> Optional[Layout]
    """The placement search itself, for profiles already within the counting rules, around ``fixed``
    instances (already placed; assumed not to overlap each other)."""
    used = 0
    for inst in fixed:
        used |= _mask(inst.start, inst.size)
    chosen = []  # type: List[Instance]
    if not _backtrack(_search_order(profiles), 0, used, 0, chosen):
        return None
    return Layout(gpu, tuple(sorted(list(fixed) + chosen, key=lambda i: (i.start, i.profile.id))))


def complete(gpu, fixed, profiles):
    # type: (GpuModel, Sequence[Instance], Sequence[Profile]) -> Optional[Layout]
    """A layout holding the ``fixed`` instances where they are plus ``profiles`` placed around them, or
    None when the counting rules (over both together) or the free slots do not allow it.

    ``fixed`` are instances that exist already: they stay at their start whether or not the solver would
    have chosen it, and must not overlap each other or leave the GPU's memory slots.
    """
    used = 0
    for inst in fixed:
        bits = _mask(inst.start, inst.size)
        if used & bits or inst.start < 0 or inst.start + inst.size > gpu.memory_slots:
            return None
        used |= bits
    if check_budget(gpu, [i.profile for i in fixed] + list(profiles)) is not None:
        return None
    return _search(gpu, profiles, fixed)


def try_place(gpu, profiles):
    # type: (GpuModel, Sequence[Profile]) -> Optional[Layout]
    """A layout for exactly these profiles, or None when no non-overlapping placement exists."""
    if check_budget(gpu, profiles) is not None:
        return None
    return _search(gpu, profiles)


def place(gpu, profiles):
    # type: (GpuModel, Sequence[Profile]) -> Layout
    """A layout for exactly these profiles, or PlacementError saying precisely why not."""
    if not profiles:
        raise PlacementError("no profiles given; name at least one, e.g. 1g.5gb")
    reason = check_budget(gpu, profiles)
    if reason is not None:
        raise PlacementError(reason)
    layout = _search(gpu, profiles)
    if layout is None:
        starts = "; ".join("%s starts at %s" % (p.name, ",".join(str(x.start) for x in p.placements))
                           for p in sorted(set(profiles), key=lambda p: p.id))
        raise PlacementError("%s cannot be placed on %s without overlapping memory slots (%s)"
                             % (_describe(profiles), gpu.shown, starts))
    return layout


def fill(gpu, profile):
    # type: (GpuModel, Profile) -> Layout
    """As many instances of one profile as the GPU holds (the meaning of gpu-partition-size)."""
    for count in range(profile.max_instances, 0, -1):
        layout = try_place(gpu, [profile] * count)
        if layout is not None:
            return layout
    raise PlacementError("%s holds no %s instance" % (gpu.shown, profile.name))


def plan(spec, gpu):
    # type: (PartitionSpec, GpuModel) -> Layout
    """Parse a label value for a GPU model and place it: the one call the CLI, function and node use."""
    request = parse(spec, gpu)
    if request.fill:
        return fill(gpu, request.profiles[0])
    return place(gpu, request.profiles)
