"""Alibaba's GPU-sharing trace, cluster-trace-gpu-v2023, as MIG demand for ``bench/demand.py --peers``.

The data is public (github.com/alibaba/clusterdata, folder cluster-trace-gpu-v2023; Weng et al., "Beware
of Fragmentation", USENIX ATC'23) and is NOT part of this repository: nothing of it is committed here.
Get it once (any clone or snapshot of alibaba/clusterdata will do)::

    mkdir -p ../shared/data/cluster-trace-gpu-v2023
    git -C clusterdata show HEAD:cluster-trace-gpu-v2023/csv/openb_pod_list_gpushare100.csv \\
        > ../shared/data/cluster-trace-gpu-v2023/openb_pod_list_gpushare100.csv

and point the bench at the folder (``--trace PATH`` or ``ACK_MIG_TRACE_DIR``; default
``../shared/data/cluster-trace-gpu-v2023`` beside the repository, when it exists).

Columns read (checked against the files' header: name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec,
qos, pod_phase, creation_time, deletion_time, scheduled_time): ``num_gpu`` (0..8; 0 = CPU only, skipped),
``gpu_milli`` (the share of one GPU a sharing pod asks for, 1..1000), ``creation_time`` and
``deletion_time`` (seconds). Every GPU pod counts from creation to deletion, whatever its ``pod_phase``
(Pending and Failed pods asked for a GPU too; ``scheduled_time`` is production's answer, not demand).

The mapping to A100-80GB MIG profiles, by compute: a pod asking ``gpu_milli`` m of one GPU gets the
smallest profile whose compute share (compute slices / 7) covers m / 1000: k = ceil(7 m / 1000) slices,
k = 1, 2, 3, 4 -> 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb; k = 5, 6, 7 -> 7g.80gb (A100 has no 5g or 6g
profile). A whole-GPU pod (``gpu_milli`` 1000) gets 7g.80gb, and a pod with ``num_gpu`` n > 1 becomes n
independent 7g.80gb pods (a simplification every peer gets alike: the real pod needs its n instances on
one node). The rounding cost is reported: instance GPU-hours (the profile's compute share x hours)
against the trace's own fractional GPU-hours (m / 1000 x hours).

Time: a window of ``days`` days ending at the trace's last creation, in steps of ``step_s`` seconds; pods
alive at the window's start arrive at step 0 (a cold start), pods alive at its end leave there.
"""

import csv
import os
from typing import Dict, List, Tuple

from demand_traces import PodEvent

COLUMNS = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time")
DEFAULT_FILE = "openb_pod_list_gpushare100.csv"
CLASS_BY_SLICES = {1: "1g", 2: "2g", 3: "3g", 4: "4g", 5: "7g", 6: "7g", 7: "7g"}
SLICES = {"1g": 1, "2g": 2, "3g": 3, "4g": 4, "7g": 7}


class TraceError(ValueError):
    """The trace file cannot be read as the documented CSV; the message names the problem."""


def default_dir(root: str) -> str:
    return os.environ.get("ACK_MIG_TRACE_DIR") or os.path.join(os.path.dirname(root), "shared", "data",
                                                               "cluster-trace-gpu-v2023")


def slice_class(milli: int) -> str:
    """The slice class of the smallest A100 profile whose compute covers ``milli``/1000 of a GPU."""
    if not 0 < milli <= 1000:
        raise TraceError("gpu_milli %d is outside 1..1000" % milli)
    return CLASS_BY_SLICES[-(-7 * milli // 1000)]


def read_rows(path: str) -> List[Tuple[str, int, int, int, int]]:
    """(name, num_gpu, gpu_milli, creation, deletion) of every GPU pod in the file."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError("%s: column %s missing; expected the cluster-trace-gpu-v2023 pod list header "
                             "(name,cpu_milli,memory_mib,num_gpu,gpu_milli,...)" % (path, ", ".join(missing)))
        rows = []
        for line, r in enumerate(reader, 2):
            try:
                n, m = int(r["num_gpu"]), int(r["gpu_milli"] or 0)
                c, d = int(r["creation_time"]), int(r["deletion_time"])
            except ValueError:
                raise TraceError("%s line %d: num_gpu, gpu_milli, creation_time and deletion_time must be "
                                 "whole numbers" % (path, line)) from None
            if n > 0 and d > c:
                rows.append((r["name"], n, m if n == 1 else 1000, c, d))
        return rows


def events(rows, days: float, step_s: int, weeks_back: int = 0) -> Tuple[List[PodEvent], int, Dict[str, float]]:
    """The window's pod events, its number of steps, and the rounding's cost in GPU-hours. The window is the
    ``days`` before the trace's last creation, or before the moment ``weeks_back`` weeks earlier."""
    end = max(c for _, _, _, c, _ in rows) - weeks_back * 7 * 86400
    start = end - int(days * 86400)
    steps = -(-(end - start) // step_s)
    out, fractional, rounded = [], 0.0, 0.0
    for name, n, milli, c, d in sorted(rows, key=lambda r: (r[3], r[0])):
        lo, hi = max(c, start), min(d, end)
        if hi <= lo:
            continue
        klass = slice_class(milli)
        arrive, leave = (lo - start) // step_s, max((lo - start) // step_s + 1, -(-(hi - start) // step_s))
        hours = (hi - lo) / 3600.0
        for i in range(n):
            out.append(PodEvent("trace/%s-%d" % (name, i) if n > 1 else "trace/" + name, "pod trace/" + name,
                                klass, arrive, leave))
            fractional += milli / 1000.0 * hours
            rounded += SLICES[klass] / 7.0 * hours
    return out, steps, {"fractional_gpu_hours": round(fractional, 1), "instance_gpu_hours": round(rounded, 1),
                        "rounding_cost_pct": round(100.0 * (rounded - fractional) / fractional, 1)
                        if fractional else 0.0}
