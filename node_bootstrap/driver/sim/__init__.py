"""A simulated NVIDIA driver for nodes without a GPU.

``driver`` holds the rules (placements, counts, compute budget, IN_USE, pending MIG mode, resets,
reboots) over a JSON state; ``store`` keeps that state in a file so successive commands see the same
node; ``library`` exposes it as the NVML C functions that pynvml calls, so the one real NVML backend
runs unchanged against it and pynvml's own ctypes marshalling is exercised.
"""
