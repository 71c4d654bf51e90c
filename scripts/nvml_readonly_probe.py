#!/usr/bin/env python3
"""Read-only NVML probe of a real GPU: what the driver says about MIG, for checking the catalogue.

Only query calls: it never sets MIG mode, never creates or destroys instances, never resets a GPU.
Prints one JSON document (and writes it to the path given as the first argument, if any).
"""
import ctypes
import json
import sys

import pynvml as N


def call(fn, *args):
    try:
        return fn(*args)
    except N.NVMLError as exc:
        return "NVMLError: %s" % exc
    except Exception as exc:  # older bindings lack some functions
        return "%s: %s" % (type(exc).__name__, exc)


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def main():
    N.nvmlInit()
    doc = {"driver": text(call(N.nvmlSystemGetDriverVersion)), "nvml": text(call(N.nvmlSystemGetNVMLVersion)),
           "gpus": []}
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        pci = call(N.nvmlDeviceGetPciInfo, h)
        mem = call(N.nvmlDeviceGetMemoryInfo, h)
        gpu = {"index": i, "name": text(call(N.nvmlDeviceGetName, h)),
               "pci_device_id": hex(pci.pciDeviceId) if hasattr(pci, "pciDeviceId") else pci,
               "memory_total_mib": mem.total // 2**20 if hasattr(mem, "total") else mem,
               "mig_mode": call(N.nvmlDeviceGetMigMode, h),
               "max_mig_devices": call(N.nvmlDeviceGetMaxMigDeviceCount, h),
               "processes": [p.pid for p in call(N.nvmlDeviceGetComputeRunningProcesses, h) or []]
               if not isinstance(call(N.nvmlDeviceGetComputeRunningProcesses, h), str) else "n/a",
               "profiles": []}
        for idx in range(getattr(N, "NVML_GPU_INSTANCE_PROFILE_COUNT", 10)):
            info = call(N.nvmlDeviceGetGpuInstanceProfileInfo, h, idx)
            v2_error = None
            if isinstance(info, str) and "Not Supported" not in info:
                v2_error = info  # some bindings leave the v2 struct's version unset: retry with v1
                info = call(N.nvmlDeviceGetGpuInstanceProfileInfo, h, idx, 1)
            if isinstance(info, str):
                gpu["profiles"].append({"index": idx, "error": info})
                continue
            row = {"index": idx, "id": info.id, "slices": info.sliceCount, "instances": info.instanceCount,
                   "memory_mib": info.memorySizeMB, "copy_engines": info.copyEngineCount,
                   "decoders": info.decoderCount, "encoders": info.encoderCount, "jpeg": info.jpegCount,
                   "ofa": info.ofaCount, "multiprocessors": info.multiprocessorCount, "v2_error": v2_error}
            row["name"] = text(getattr(info, "name", "n/a"))
            arr = (N.c_nvmlGpuInstancePlacement_t * 16)()
            cnt = ctypes.c_uint(16)
            r = call(N.nvmlDeviceGetGpuInstancePossiblePlacements, h, info.id, arr, ctypes.byref(cnt))
            row["placements"] = r if isinstance(r, str) else [[arr[k].start, arr[k].size]
                                                              for k in range(cnt.value)]
            row["remaining"] = call(N.nvmlDeviceGetGpuInstanceRemainingCapacity, h, info.id)
            gis = (N.c_nvmlGpuInstance_t * 16)()
            gcnt = ctypes.c_uint(0)
            r = call(N.nvmlDeviceGetGpuInstances, h, info.id, gis, ctypes.byref(gcnt))
            row["existing"] = r if isinstance(r, str) else gcnt.value
            gpu["profiles"].append(row)
        doc["gpus"].append(gpu)
    N.nvmlShutdown()
    out = json.dumps(doc, indent=1, default=str)
    print(out)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(out)


if __name__ == "__main__":
    main()
