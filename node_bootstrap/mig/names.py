"""GPU names as people say them ("A100", "h100", "A800-80GB") resolved to the catalogue's models. Pure.

:func:`find_gpu` takes exact names only (NVML's, ACK's hyphenated label form, a catalogue key, a PCI id):
what a node reports. An operator types the model's short name. :func:`resolve_gpu` tries the exact lookup
first, then matches the typed words against every product name's words: ``A800`` is every product whose
name starts with the word ``a800``, ``A100-40GB`` every product whose words include ``a100`` and ``40gb``.
One model (or several with the same profiles and memory: the A100 40GB in SXM4 and PCIe form) is the
answer; models that differ are listed, so nobody plans a 40GB layout for an 80GB GPU by accident.
"""

from .catalogue import GPUS, _ENTRIES, _VARIANTS, _norm_name, find_gpu
from .errors import GpuWithoutMigError, UnknownGpuError

GPUS_BY_KEY = {g.key: g.name for g in GPUS}

# The short names docs and error hints offer: one per model family people order by.
EXAMPLES = "A100-80GB, H100-80GB, H800, H20, H200"


class AmbiguousGpuError(UnknownGpuError):
    """A short name fits models whose layouts differ; ``choices`` are their catalogue keys."""

    def __init__(self, message, choices):
        UnknownGpuError.__init__(self, message)
        self.choices = choices


def _words(text):
    return _norm_name(text).split("-")


def matches(text):
    """The catalogue models (one product each, that product first) whose product names hold every word of
    ``text``, the first word as the name's own first word; in catalogue order, one per model key."""
    want = _words(text)
    if not want or not want[0]:
        return []
    found = []
    for entry in _ENTRIES:
        for i, (product, _) in enumerate(entry.products):
            words = _words(product)
            if words[0] == want[0] and all(w in words for w in want[1:]):
                found.append(_VARIANTS[(entry.key, i)])
                break
    return found


def _same_layouts(models):
    first = models[0]
    return all(m.profiles == first.profiles and m.memory_mib == first.memory_mib for m in models[1:])


def resolve_gpu(text):
    """A GPU model by exact name (as :func:`find_gpu`) or by its short name, case-insensitive.

    Raises :class:`AmbiguousGpuError` listing the models a short name fits, :class:`UnknownGpuError` with a
    short line and examples for a name nothing fits, :class:`GpuWithoutMigError` for a GPU without MIG.
    """
    try:
        return find_gpu(text)
    except GpuWithoutMigError:
        raise
    except UnknownGpuError:
        pass
    found = matches(text)
    if len(found) == 1 or (found and _same_layouts(found)):
        return found[0]
    shown = repr(text.strip()[:40])
    if found:
        choices = [m.key for m in found]
        shown_choices = ", ".join(m.key if m.name == GPUS_BY_KEY[m.key] else "%s (%s)" % (m.key, m.name) for m in found)
        raise AmbiguousGpuError("GPU %s fits %d models with different layouts; name one: %s"
                                % (shown, len(choices), shown_choices), choices)
    raise UnknownGpuError("unknown GPU %s; use a model such as %s, an NVML name or a PCI id"
                          % (shown, EXAMPLES))


def catalogue_keys():
    """Every model key, in catalogue order (what ``profiles --gpu`` takes besides the short names)."""
    return [g.key for g in GPUS]
