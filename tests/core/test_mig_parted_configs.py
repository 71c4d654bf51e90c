"""NVIDIA's own default mig-parted configuration plans here, configuration by configuration.

``data/mig-parted-config-default.yaml`` is that file (data only; its header names the source commit and
licence). A configuration with a ``device-filter`` must plan on every PCI id the filter names; one
without a filter applies to whatever GPU it meets in mig-parted, so it must plan on every catalogue GPU
that has all of its profiles, and at least one must have them.
"""

import os

import pytest
import yaml

from node_bootstrap.mig import GPUS, PartitionSpec, find_gpu, plan

DATA = os.path.join(os.path.dirname(__file__), "data", "mig-parted-config-default.yaml")

with open(DATA) as _f:
    CONFIGS = yaml.safe_load(_f)["mig-configs"]

# Configurations left over from mig-parted's first GB200 support (commit 89dd81a3: "3g.95gb",
# "4g.95gb", "7g.189gb"); commit ebab1f77 replaced those GB200 values with the production boards'
# 93gb / 186gb ones, which are in the catalogue, but left these three behind. No GPU has them.
STALE = {"all-3g.95gb", "all-4g.95gb", "all-7g.189gb"}


def _filters(entry):
    value = entry.get("device-filter")
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _sequence(entry):
    """The mig-devices map as a sequence label value: each profile name repeated by its count."""
    return "-".join(name for name, count in sorted(entry["mig-devices"].items()) for _ in range(count))


def _cases():
    for config, entries in sorted(CONFIGS.items()):
        for n, entry in enumerate(entries):
            if not entry.get("mig-enabled") or not entry.get("mig-devices"):
                continue  # all-disabled / all-enabled: nothing to place
            filters = _filters(entry)
            if filters:
                for pci in filters:
                    yield pytest.param(config, n, pci, id="%s[%d]-%s" % (config, n, pci))
            else:
                wanted = set(entry["mig-devices"])
                for gpu in GPUS:
                    if wanted <= {p.name for p in gpu.profiles}:
                        yield pytest.param(config, n, gpu.key, id="%s[%d]-%s" % (config, n, gpu.key))


CASES = list(_cases())


def test_the_copy_is_the_whole_file():
    assert len(CONFIGS) > 80 and {"all-disabled", "all-balanced", "all-1g.24gb.me.all"} <= set(CONFIGS)


def test_every_pci_id_in_the_device_filters_is_a_catalogue_gpu():
    ids = {pci for entries in CONFIGS.values() for entry in entries for pci in _filters(entry)}
    assert len(ids) == 27  # 0x20B0 ... 0x31C2 as of the copied commit
    for pci in sorted(ids):
        find_gpu(pci)  # raises for an unknown one


@pytest.mark.parametrize("config,entry,gpu", CASES)
def test_configuration_plans_on_each_gpu_it_names(config, entry, gpu):
    spec = _sequence(CONFIGS[config][entry])
    model = find_gpu(gpu)
    layout = plan(PartitionSpec("sequence", spec), model)
    want = sorted(name for name, count in CONFIGS[config][entry]["mig-devices"].items() for _ in range(count))
    assert sorted(i.profile.name for i in layout.instances) == want
    # The label-safe spelling (no "+") that a node pool label and the node's sequence label use plans alike.
    label_safe = plan(PartitionSpec("sequence", layout.sequence.replace("+", ".")), model)
    assert label_safe == layout
    by_id = plan(PartitionSpec("sequence", "-".join(str(i.profile.id) for i in layout.instances)), model)
    assert by_id == layout


def test_every_configuration_names_a_gpu_that_plans_it():
    planned = {case.values[0] for case in CASES}
    placeable = {c for c, entries in CONFIGS.items() if any(e.get("mig-enabled") and e.get("mig-devices")
                                                            for e in entries)}
    assert placeable - planned == STALE
    for config in STALE:  # really no GPU: were one added, it would have to plan them
        names = set(CONFIGS[config][0]["mig-devices"])
        assert not any(names <= {p.name for p in gpu.profiles} for gpu in GPUS)


def test_rtx_pro_6000_variant_profiles_are_all_named_by_the_file():
    rtx = find_gpu("0x2BB510DE")
    named = {name for entries in CONFIGS.values() for e in entries for name in (e.get("mig-devices") or {})}
    assert {"1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "2g.48gb+gfx", "2g.48gb+me.all", "2g.48gb-me",
            "4g.96gb+gfx"} <= named & {p.name for p in rtx.profiles}
