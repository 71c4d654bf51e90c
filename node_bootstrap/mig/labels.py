"""Parsing of ACK's partition labels into a request for one GPU model. Pure: no I/O.

Rules (also in the README):

* ``ack.aliyun.com/gpu-partition-size`` takes one profile name or NVML id and means "as many as fit".
* ``ack.aliyun.com/gpu-partition-sequence`` takes profile names or ids separated by hyphens; it means
  exactly those instances, in any order (the solver places them).
* Names are case-insensitive (``1G.5GB`` is ``1g.5gb``); spaces around the whole value and around each
  item are ignored. Names and ids can be mixed (``19-2g.10gb``).
* A comma anywhere is refused with the hyphen form; an empty item (``1g.5gb--2g.10gb``, a trailing
  hyphen) is refused with its position.
* An unknown name or id is refused with the list of valid profiles of that GPU.
* Variant profiles (``+me``, ``+me.all``, ``+gfx``, ``-me``) are accepted by name or id. Kubernetes label
  values cannot hold ``+``, so a label writes ``+`` as ``.``, as mig-parted's config names do:
  ``1g.5gb.me`` is ``1g.5gb+me``, ``1g.24gb.me.all`` is ``1g.24gb+me.all``, ``1g.24gb.gfx`` is
  ``1g.24gb+gfx`` (the node's ``nvidia_mig_sequence`` label is written the same way). ``-me`` needs no
  change: in a sequence, an item ``me`` belongs to the profile before it (``1g.24gb-me-2g.48gb`` is
  ``1g.24gb-me`` and ``2g.48gb``), since no profile is called ``me``.
* A pool that carries both labels is refused: which one wins would be a guess.
"""

import re
import typing
from typing import List, Mapping, Optional, Tuple

from .catalogue import GpuModel, Profile
from .errors import LabelError

SIZE_LABEL = "ack.aliyun.com/gpu-partition-size"
SEQUENCE_LABEL = "ack.aliyun.com/gpu-partition-sequence"
PARTITION_LABELS = (SIZE_LABEL, SEQUENCE_LABEL)

# Long enough for 7 profile names or ids with separators, with room; anything longer is not a label.
MAX_VALUE_LENGTH = 256

_ID = re.compile(r"^[0-9]{1,3}\Z")  # ASCII digits only: str.isdigit() also accepts other scripts' digits
# The label-safe spelling of a "+" variant: "<n>g.<m>gb" then ".me", ".me.all" or ".gfx".
_DOTTED = re.compile(r"^([0-9]+g\.[0-9]+gb)\.(me\.all|me|gfx)\Z")
_NO_ME = "me"  # the item a sequence split leaves of a "-me" suffix

KIND_SIZE = "size"
KIND_SEQUENCE = "sequence"


class PartitionSpec(typing.NamedTuple):
    """A label as written: which kind and the raw value. Independent of any GPU model."""

    kind: str  # KIND_SIZE or KIND_SEQUENCE
    value: str

    def to_dict(self):
        # type: () -> dict
        return {"kind": self.kind, "value": self.value}


class PartitionRequest(typing.NamedTuple):
    """A label resolved against one GPU model."""

    spec: PartitionSpec
    profiles: Tuple[Profile, ...]  # size: one profile; sequence: the multiset as written

    @property
    def fill(self):
        # type: () -> bool
        return self.spec.kind == KIND_SIZE


def _valid_profiles(gpu):
    # type: (GpuModel) -> str
    return ", ".join("%s (%d)" % (p.name, p.id) for p in gpu.profiles)


def _shown(text):
    # type: (str) -> str
    """Quote user text for a one-line message: repr() escapes newlines and control characters."""
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def _split(kind, value):
    # type: (str, str) -> List[str]
    if not isinstance(value, str):
        raise LabelError("gpu-partition-%s must be text, got %s" % (kind, type(value).__name__))
    if len(value) > MAX_VALUE_LENGTH:
        raise LabelError("gpu-partition-%s value is %d characters long; the limit is %d"
                         % (kind, len(value), MAX_VALUE_LENGTH))
    text = value.strip()
    if not text:
        raise LabelError("gpu-partition-%s is empty; give a profile name or id, e.g. 1g.5gb or 19" % kind)
    if "," in text:
        hyphens = "-".join(item.strip() for item in text.split(","))
        raise LabelError("commas are not accepted in gpu-partition-%s; separate profiles with hyphens: %s"
                         % (kind, _shown(hyphens)))
    items = [item.strip() for item in text.split("-")]
    for position, item in enumerate(items, 1):
        if not item:
            raise LabelError("empty item at position %d of gpu-partition-%s %s; write profiles separated by "
                             "single hyphens, e.g. 1g.5gb-2g.10gb" % (position, kind, _shown(value)))
    merged = []  # type: List[str]
    for item in items:
        if item.lower() == _NO_ME and merged:
            merged[-1] = "%s-%s" % (merged[-1], item)  # "1g.24gb-me": the profile without media engines
        else:
            merged.append(item)
    return merged


def label_items(kind, value):
    # type: (str, str) -> List[str]
    """The items of a partition label value, as the parser reads them ("1g.24gb-me" stays one item);
    LabelError for a value that cannot be read at all."""
    return _split(kind, value)


def resolve_profile(gpu, item):
    # type: (GpuModel, str) -> Profile
    """One profile by name (any case) or NVML id, or a LabelError listing the valid ones."""
    text = item.strip().lower()
    dotted = _DOTTED.match(text)
    if dotted:
        text = "%s+%s" % dotted.groups()
    profile = None  # type: Optional[Profile]
    if _ID.match(text):
        profile = gpu.profile_by_id(int(text))
    else:
        profile = gpu.profile_by_name(text)
    if profile is None:
        raise LabelError("unknown profile %s for %s; valid profiles: %s"
                         % (_shown(item), gpu.shown, _valid_profiles(gpu)))
    return profile


def parse(spec, gpu):
    # type: (PartitionSpec, GpuModel) -> PartitionRequest
    """Resolve a label value against a GPU model (names, ids, syntax). Placement is the solver's job."""
    items = _split(spec.kind, spec.value)
    if spec.kind == KIND_SIZE:
        if len(items) != 1:
            raise LabelError("gpu-partition-size takes one profile, got %d; use gpu-partition-sequence "
                             "for several, e.g. 1g.5gb-2g.10gb" % len(items))
    elif spec.kind != KIND_SEQUENCE:
        raise LabelError("unknown partition kind %s; use size or sequence" % _shown(spec.kind))
    return PartitionRequest(spec, tuple(resolve_profile(gpu, item) for item in items))


def spec_from_labels(labels):
    # type: (Mapping[str, str]) -> Optional[PartitionSpec]
    """The partition spec a set of node pool labels asks for, None when it has none."""
    size = labels.get(SIZE_LABEL)
    sequence = labels.get(SEQUENCE_LABEL)
    if size is not None and sequence is not None:
        raise LabelError("the pool carries both %s and %s; keep exactly one" % (SIZE_LABEL, SEQUENCE_LABEL))
    if size is not None:
        return PartitionSpec(KIND_SIZE, size)
    if sequence is not None:
        return PartitionSpec(KIND_SEQUENCE, sequence)
    return None


def spec_from_args(size=None, sequence=None):
    # type: (Optional[str], Optional[str]) -> PartitionSpec
    """The spec given on a command line as --size / --sequence (exactly one)."""
    if (size is None) == (sequence is None):
        raise LabelError("give exactly one of --size VALUE or --sequence VALUE")
    if size is not None:
        return PartitionSpec(KIND_SIZE, size)
    return PartitionSpec(KIND_SEQUENCE, typing.cast(str, sequence))
