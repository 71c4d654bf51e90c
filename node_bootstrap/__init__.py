"""Everything that runs on the node.

This package runs on the node's system Python (3.6 on Alibaba Cloud Linux 3), so it uses the standard
library and pynvml only. The pure MIG core (catalogue, label parsing, placement solver, diagrams) lives in
``node_bootstrap.mig`` and is imported by the Function Compute code too, so both sides validate a label
the same way.
"""

__version__ = "0.1.0"
