"""The peak resident set size of this process since it started, for the memory benchmarks and tests.

Not ``resource.getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries the parent's high-water mark across
fork and exec into that number (``signal_struct.maxrss``, set from the old mm in ``exec_mmap``), so a child
started by a large pytest process reports the parent's size, not its own (measured: a child of a 313 MB
parent reports 313 MB; its own ``VmHWM`` is 13 MB). ``VmHWM`` in ``/proc/self/status`` belongs to the
process's own address space, which exec makes new. Elsewhere, ``ru_maxrss`` is all there is.
"""

import resource
import sys


def peak_rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024.0, 1)  # kB
    except OSError:
        pass
    scale = 1024.0 * 1024.0 if sys.platform == "darwin" else 1024.0  # bytes on macOS, KiB on Linux
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale, 1)
