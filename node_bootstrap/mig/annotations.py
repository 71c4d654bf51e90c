"""The annotation in which a node says what each of its GPUs holds, its writer and its one reader.

After an apply the node writes ``ack-mig-hook/gpu-layouts``: ``{"<index>": [["1g.10gb", 0], ...]}`` (JSON;
node_bootstrap/kube/nodelabels.py): on success the layouts applied; on a failure what it read back, where
a GPU it could not read (fallen off the bus) is ``null``: unknown, never empty and never its old layout.
The function's auto pool supply, the rollout's claim and ``status`` read it (a per-GPU layout, request
version 2, has no one sequence to label). Anyone who may edit the Node (its kubelet,
for one) can write it, so it is read under the reader rule (node_bootstrap/outside.py). Pure: no I/O.
"""

import json
import re
from typing import Dict, Iterable, Mapping, Optional, Tuple

from ..outside import OutsideDataError, loads, whole

LAYOUTS_ANNOTATION = "ack-mig-hook/gpu-layouts"
MAX_LAYOUTS_TEXT = 16384  # 16 GPUs x 8 instances is about 1.5 KB: anything much longer is not ours
MAX_GPU_INDEX = 63
# The highest start slot a layout may name, in a request or an annotation: every GPU in the catalogue has at
# most 12 memory slots (an RTX PRO 6000 places 1g profiles at 9); the GPU model's own placements are checked
# where a layout meets a GPU.
MAX_START = 31
_INDEX = re.compile(r"^[0-9]{1,2}\Z")  # ASCII digits only: "\u00b2".isdigit() is true and int() refuses it


def write_layouts(per_gpu):
    # type: (Mapping[int, Optional[Iterable[Tuple[str, int]]]]) -> str
    """The annotation's value: GPU index -> (profile, start) pairs, or None for a GPU that could not be read."""
    return json.dumps({str(i): [[p, s] for p, s in pairs] if pairs is not None else None
                       for i, pairs in per_gpu.items()}, sort_keys=True, separators=(",", ":"))


def read_layouts(text):
    # type: (Optional[str]) -> Dict[int, Optional[Tuple[Tuple[str, int], ...]]]
    """The layouts annotation as GPU index -> ((profile, start), ...), or None for a GPU the node could not
    read (unknown: every reader leaves it alone), under the reader rule (node_bootstrap/outside.py): any
    other shape, a start outside 0..7 or an index outside 0..63 raises OutsideDataError, which the readers (the auto pool's supply, the claim's check, status) turn into "left
    out" for that node alone. Anyone who may edit the node (its kubelet, for one) can write this annotation."""
    data = loads(text or "", "annotation %s" % LAYOUTS_ANNOTATION, max_bytes=MAX_LAYOUTS_TEXT, max_depth=3)
    if not isinstance(data, dict):
        raise OutsideDataError("annotation %s is not an object of GPU index to layout" % LAYOUTS_ANNOTATION)
    out = {}  # type: Dict[int, Optional[Tuple[Tuple[str, int], ...]]]
    for key, pairs in data.items():
        if not _INDEX.match(key) or not (pairs is None or isinstance(pairs, list)):
            raise OutsideDataError("annotation %s: GPU %r is not an index with a list of instances or null"
                                   % (LAYOUTS_ANNOTATION, key[:16]))
        index = whole(int(key), "annotation %s GPU index" % LAYOUTS_ANNOTATION, 0, MAX_GPU_INDEX)
        if pairs is None:
            out[index] = None
            continue
        layout = []
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and 0 < len(pair[0]) <= 32):
                raise OutsideDataError("annotation %s GPU %d: each instance is [profile, start]"
                                       % (LAYOUTS_ANNOTATION, index))
            layout.append((pair[0], whole(pair[1], "annotation %s GPU %d start" % (LAYOUTS_ANNOTATION, index), 0,
                                           MAX_START)))
        out[index] = tuple(layout)
    return out
