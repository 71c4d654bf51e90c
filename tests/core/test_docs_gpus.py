"""docs/gpus.md shows the catalogue and the family table as the code has them: its tables are these
rows, so a catalogue or family change that the page does not follow fails here."""

import os

from functions.decision.families import KNOWN_FAMILIES, capability
from node_bootstrap.mig import GPUS, MEMORY_CONFIRMED

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "gpus.md")


def gpu_rows():
    for gpu in GPUS:
        products = "<br>".join(
            name + "".join(" (%s)" % ids for ids in [", ".join("0x%04X" % pid for pid in gpu.pci_device_ids
                                                                if _product_of(pid) == name)] if ids)
            for name in gpu.product_names)
        profiles = ", ".join("%s (%d, idx %d, x%d)" % (p.name, p.id, p.nvml_index, p.max_instances)
                             for p in gpu.profiles)
        yield "| %s | %s | %d / %d | %s | %s |" % (gpu.key, products, gpu.memory_slots, gpu.compute_slices,
                                                 "yes" if gpu.key in MEMORY_CONFIRMED else "estimated", profiles)


def _product_of(pid):
    from node_bootstrap.mig import find_gpu

    return find_gpu("0x%04X" % pid).name


def family_rows():
    for name in sorted(KNOWN_FAMILIES):
        row = KNOWN_FAMILIES[name]
        size = next(iter(row.gpus_by_size), "")
        cap = capability("ecs.%s.%s" % (name, size or "xlarge"))
        mig = {True: "yes", False: "no", None: "node decides"}[cap.mig]
        count = ", ".join("%s: %d" % kv for kv in sorted(row.gpus_by_size.items())) or "-"
        yield "| %s | %s | %s | %s | %s | %s |" % (name, row.gpu_model or "not known", row.status,
                                                  "bare metal" if row.bare_metal else "passthrough", count, mig)


def test_the_gpu_table_is_the_catalogue():
    with open(DOC) as f:
        text = f.read()
    for line in gpu_rows():
        assert line in text, line


def test_the_family_table_is_families_py():
    with open(DOC) as f:
        text = f.read()
    for line in family_rows():
        assert line in text, line
