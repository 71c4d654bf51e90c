"""The auto pool's labels, parsed. Pure: text in, :class:`Bounds` or a one-line :class:`LayoutLabelError` out.

* ``ack-mig-hook/layout=auto`` turns the pool on (the hook's own key: ACK's ``gpu-partition-*`` labels keep
  their meaning). No label: off. Any other value is refused, so a typo never looks like "off".
* ``ack-mig-hook/layout-profiles=1g.10gb.2g.20gb.3g.40gb``: the profiles the planner may create, joined by
  ``.``. Profile names contain dots themselves, so the value is read name by name with the catalogue's
  name pattern (``<n>g.<m>gb``, then ``.me``, ``.me.all``, ``.gfx`` for ``+me``, ``+me.all``, ``+gfx``, as
  the partition labels write them, or ``-me``). Every name must be one the catalogue knows.
* ``ack-mig-hook/layout-headroom=1g.10gb-2.2g.20gb-1``: per profile, idle instances kept ready: pairs
  ``<profile>-<count>`` joined by ``.`` (a label value cannot hold a comma). Each profile once; counts
  0 to 99; a profile outside ``layout-profiles`` is refused.

Values are at most 63 characters (the Kubernetes label value limit, ``validation.IsValidLabelValue`` in
k8s.io/apimachinery); digits are ASCII only.
"""

import re
from typing import Dict, FrozenSet, Mapping, Optional

from node_bootstrap.mig.catalogue import GPUS

from .vocabulary import Bounds

LAYOUT_LABEL = "ack-mig-hook/layout"
PROFILES_LABEL = "ack-mig-hook/layout-profiles"
HEADROOM_LABEL = "ack-mig-hook/layout-headroom"
AUTO = "auto"

MAX_VALUE_LENGTH = 63  # Kubernetes: a label value is at most 63 characters
MAX_HEADROOM = 99

# One profile as a label writes it: "+" is "." (labels cannot hold "+"); "-me" stays.
_PROFILE = r"[0-9]{1,2}g\.[0-9]{1,3}gb(?:\.me\.all|\.me|\.gfx|-me)?"
_PROFILE_AT = re.compile(_PROFILE)
_PAIR_AT = re.compile(r"(%s)-([0-9]{1,2})" % _PROFILE)
_LABEL_SUFFIX = re.compile(r"\.(me\.all|me|gfx)\Z")

KNOWN_PROFILES = frozenset(p.name for g in GPUS for p in g.profiles)

_PROFILES_FORM = "profile names joined by '.', e.g. %s=1g.10gb.2g.20gb.3g.40gb" % PROFILES_LABEL
_HEADROOM_FORM = ("<profile>-<count> pairs joined by '.', count 0 to %d, e.g. %s=1g.10gb-2.2g.20gb-1"
                  % (MAX_HEADROOM, HEADROOM_LABEL))


class LayoutLabelError(ValueError):
    """An auto pool label that cannot be read: the message is one line naming the label and its form."""


def _shown(text: str) -> str:
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def _checked(label: str, value, form: str) -> str:
    if not isinstance(value, str):
        raise LayoutLabelError("%s must be text, got %s; the accepted form: %s" % (label, type(value).__name__, form))
    if len(value) > MAX_VALUE_LENGTH:
        raise LayoutLabelError("%s is %d characters long, over the label limit of %d; the accepted form: %s"
                               % (label, len(value), MAX_VALUE_LENGTH, form))
    text = value.strip()
    if not text:
        raise LayoutLabelError("%s is empty; the accepted form: %s" % (label, form))
    return text


def _catalogue_name(label: str, written: str, form: str) -> str:
    name = _LABEL_SUFFIX.sub(lambda m: "+" + m.group(1), written.lower())
    if name not in KNOWN_PROFILES:
        raise LayoutLabelError("%s names %s, which no GPU of the catalogue has; the accepted form: %s"
                               % (label, _shown(written), form))
    return name


def _tokens(label: str, text: str, pattern, form: str):
    """The matches of ``pattern`` that make up all of ``text``, joined by single dots."""
    position, found = 0, []
    while True:
        match = pattern.match(text, position)
        if match is None:
            raise LayoutLabelError("%s %s cannot be read at character %d; the accepted form: %s"
                                   % (label, _shown(text), position + 1, form))
        found.append(match)
        position = match.end()
        if position == len(text):
            return found
        if text[position] != ".":
            raise LayoutLabelError("%s %s has %r at character %d where a '.' belongs; the accepted form: %s"
                                   % (label, _shown(text), text[position], position + 1, form))
        position += 1


def is_auto(labels: Mapping[str, str]) -> bool:
    """True when the pool carries ``ack-mig-hook/layout=auto``; False without the label."""
    value = labels.get(LAYOUT_LABEL)
    if value is None:
        return False
    form = "%s=%s (or no label for a pool whose labels choose the layout)" % (LAYOUT_LABEL, AUTO)
    if _checked(LAYOUT_LABEL, value, form).lower() != AUTO:
        raise LayoutLabelError("%s=%s is not accepted; the accepted form: %s" % (LAYOUT_LABEL, _shown(value), form))
    return True


def parse_profiles(value: str) -> FrozenSet[str]:
    """``1g.10gb.2g.20gb.1g.10gb.me`` -> {"1g.10gb", "2g.20gb", "1g.10gb+me"}."""
    text = _checked(PROFILES_LABEL, value, _PROFILES_FORM)
    return frozenset(_catalogue_name(PROFILES_LABEL, m.group(0), _PROFILES_FORM)
                     for m in _tokens(PROFILES_LABEL, text.lower(), _PROFILE_AT, _PROFILES_FORM))


def parse_headroom(value: str) -> Dict[str, int]:
    """``1g.10gb-2.2g.20gb-1`` -> {"1g.10gb": 2, "2g.20gb": 1}."""
    text = _checked(HEADROOM_LABEL, value, _HEADROOM_FORM)
    out = {}  # type: Dict[str, int]
    for match in _tokens(HEADROOM_LABEL, text.lower(), _PAIR_AT, _HEADROOM_FORM):
        name = _catalogue_name(HEADROOM_LABEL, match.group(1), _HEADROOM_FORM)
        if name in out:
            raise LayoutLabelError("%s names %s twice; the accepted form: %s" % (HEADROOM_LABEL, name, _HEADROOM_FORM))
        out[name] = int(match.group(2))  # [0-9]{1,2}: ASCII digits, at most 99
    return out


def bounds_from_labels(labels: Mapping[str, str]) -> Optional[Bounds]:
    """The bounds of an auto pool from its labels; None when the pool is not an auto pool."""
    if not is_auto(labels):
        return None
    profiles = parse_profiles(labels[PROFILES_LABEL]) if PROFILES_LABEL in labels else None
    headroom = parse_headroom(labels[HEADROOM_LABEL]) if HEADROOM_LABEL in labels else {}
    outside = sorted(p for p in headroom if profiles is not None and p not in profiles)
    if outside:
        raise LayoutLabelError("%s keeps headroom of %s, which %s does not allow; name only allowed profiles"
                               % (HEADROOM_LABEL, ", ".join(outside), PROFILES_LABEL))
    return Bounds(profiles=profiles, headroom=headroom)
