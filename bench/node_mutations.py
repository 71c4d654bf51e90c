"""Mutating NVML calls of ``apply`` on a simulated 8-GPU node, counted where the driver receives them.

The five mutating NVML entry points of the simulated ``libnvidia-ml`` (SetMigMode, CreateGpuInstanceWith-
Placement, GpuInstanceCreateComputeInstance, GpuInstanceDestroy, ComputeInstanceDestroy) are wrapped, so
the count does not rely on the product's own ``changes`` counter. GPU resets (``nvidia-smi -r``, not an
NVML call) are reported separately: ``changes`` in the node's result counts them too, which is why the
demo shows 41 changes for a fresh 8 x A100 ``3g.20gb-3g.20gb`` (40 NVML calls + 1 reset of all 8 GPUs).

- ``noop_mutations``: calls when the node already holds the plan (target 0).
- ``fresh_extra_mutations``: calls beyond the minimum for a fresh node, the minimum being one mode set per
  GPU whose MIG mode is off + one GPU instance create + one compute instance create per planned instance
  (target 0: placements are computed, never tried).
"""

import json
import os
import sys
import tempfile
from collections import Counter

import _path  # noqa: F401

from node_bootstrap.commands.backend import end_processes, open_backend
from node_bootstrap.mig import PartitionSpec, find_gpu, plan
from node_bootstrap.driver.nvml import NvmlWriter
from node_bootstrap.commands.reconcile import Host, reconcile
from node_bootstrap.driver.sim.library import MUTATING

SCENARIOS = [  # (GPU, count, label kind, label value)
    ("A100-SXM4-40GB", 8, "sequence", "3g.20gb-3g.20gb"),
    ("A100-SXM4-40GB", 8, "sequence", "1g.5gb-2g.10gb-3g.20gb"),
    ("A100-SXM4-40GB", 8, "size", "1g.5gb"),
    ("H200", 8, "sequence", "4g.71gb-3g.71gb"),
]


def _counted_backend(gpu, count, state):
    backend = open_backend("sim:%s:%d" % (gpu, count), state)
    calls = Counter()
    library = backend.sim
    for name in MUTATING:
        real = library._functions[name]

        def counting(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)

        library._functions[name] = counting
    backend.nv._nvmlGetFunctionPointer_cache.clear()  # pynvml must look the wrapped entry points up again
    return backend, calls


def _apply(gpu, count, state, spec):
    backend, calls = _counted_backend(gpu, count, state)
    resets = []

    def reset(indices):
        resets.append(list(indices))
        return backend.sim.reset(indices)

    host = Host(stop_clients=lambda: [], start_clients=lambda stopped: [], reset_gpus=reset,
                end_processes=end_processes(backend, lambda line: None), log=lambda line: None)
    writer = NvmlWriter(backend.nv)
    with writer:
        report = reconcile(writer, spec, host)
    assert all(p.converged for p in report.plans), "apply did not converge"
    return calls, len(resets), writer.changes


def scenario(gpu, count, kind, value):
    spec = PartitionSpec(kind, value)
    instances = len(plan(spec, find_gpu(gpu)).instances)
    minimum = count * (1 + 2 * instances)  # fresh node: MIG mode off on every GPU
    with tempfile.TemporaryDirectory(prefix="bench-mig-") as tmp:
        state = os.path.join(tmp, "node.json")
        fresh, fresh_resets, fresh_changes = _apply(gpu, count, state, spec)
        again, again_resets, _ = _apply(gpu, count, state, spec)
    return {
        "gpu": "%d x %s" % (count, gpu), "label": "%s=%s" % (kind, value),
        "fresh_nvml_calls": sum(fresh.values()), "fresh_minimum": minimum,
        "fresh_extra": sum(fresh.values()) - minimum, "fresh_by_call": dict(sorted(fresh.items())),
        "fresh_gpu_resets": fresh_resets, "fresh_reported_changes": fresh_changes + fresh_resets,
        "noop_nvml_calls": sum(again.values()), "noop_gpu_resets": again_resets,
    }


def measure():
    rows = [scenario(*s) for s in SCENARIOS]
    head = rows[0]  # the demo's layout: 8 x A100 3g.20gb-3g.20gb
    return {
        "noop_mutations": max(r["noop_nvml_calls"] + r["noop_gpu_resets"] for r in rows),
        "fresh_extra_mutations": max(r["fresh_extra"] for r in rows),
        "fresh_mutations_a100_3g3g": head["fresh_nvml_calls"],
        "fresh_minimum_a100_3g3g": head["fresh_minimum"],
        "fresh_gpu_resets_a100_3g3g": head["fresh_gpu_resets"],
        "node_mutation_scenarios": rows,
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
    sys.exit(0)
