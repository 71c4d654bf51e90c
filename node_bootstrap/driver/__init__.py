"""The driver side: NVML through pynvml (``nvml``), what it reads as plain values (``live``), and the
simulated driver that replaces the NVML library for a node without a GPU (``sim``).

Imports only the pure MIG core and the node's error classes: never the host, Kubernetes or the commands
(tests/test_layout.py).
"""
