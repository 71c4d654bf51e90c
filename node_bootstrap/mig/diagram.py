"""Text diagrams of a GPU's memory slots: plain ASCII, one instance a row, so they read the same in a
terminal, in Simple Log Service and in a Cloud Assistant output. Pure."""

from typing import List, Optional, Sequence

from .solver import Layout

_USED = "#"
_FREE = "."


def render(layout, title=None):
    # type: (Layout, Optional[str]) -> str
    gpu = layout.gpu
    head = title or gpu.name
    lines = [
        "%s: %d instance%s, compute %d/%d slices, memory %d/%d slots"
        % (head, len(layout.instances), "" if len(layout.instances) == 1 else "s",
           layout.compute_used, gpu.compute_slices, layout.memory_used, gpu.memory_slots)
    ]
    width = max([len("slot")] + [len(i.profile.name) for i in layout.instances])
    cell = len(str(gpu.memory_slots - 1))  # 12-slot GPUs (RTX PRO 6000) number their slots up to 11
    lines.append("  %-*s  %s" % (width, "slot", " ".join("%*d" % (cell, s) for s in range(gpu.memory_slots))))
    for inst in layout.instances:
        cells = ["%*s" % (cell, _USED if inst.start <= s < inst.start + inst.size else _FREE)
                 for s in range(gpu.memory_slots)]
        lines.append("  %-*s  %s   start %d size %d" % (width, inst.profile.name, " ".join(cells),
                                                       inst.start, inst.size))
    if not layout.instances:
        lines.append("  (no instances)")
    return "\n".join(lines)


def render_all(layouts, titles=None):
    # type: (Sequence[Layout], Optional[Sequence[str]]) -> str
    blocks = []  # type: List[str]
    for n, layout in enumerate(layouts):
        blocks.append(render(layout, titles[n] if titles else None))
    return "\n\n".join(blocks)
