"""The MIG resources one node advertises (node_bootstrap/mig/resources.py), for every GPU of the catalogue.

Expected counts come from the label itself (a sequence names exactly its instances) or from the solver's
fill (a size label is "as many as fit"), never from the function under test; a few are written out as facts
of NVIDIA's MIG user guide ("Supported MIG Profiles": instances per GPU)."""

import re
from collections import Counter

import pytest

from node_bootstrap.mig import (GPUS, MigInputError, PartitionSpec, fill, find_gpu, layout_resources, node_resources,
                                try_place)

# A Kubernetes extended resource name: a domain prefix, then a qualified name of at most 63 characters
# (apimachinery validation IsQualifiedName); "+" is not allowed, which is why +me is published as .me.
QUALIFIED = re.compile(r"^nvidia\.com/([A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9])$")


def size(value):
    return PartitionSpec("size", value)


def sequence(value):
    return PartitionSpec("sequence", value)


def label_value(profile_name):
    """A profile as a label writes it: "+" as "." (labels.py)."""
    return profile_name.replace("+", ".")


@pytest.mark.parametrize("gpu", GPUS, ids=[g.key for g in GPUS])
@pytest.mark.parametrize("gpus", [1, 4, 8])
def test_a_size_label_advertises_gpus_times_what_fits_one_gpu(gpu, gpus):
    for profile in gpu.profiles:
        fits = len(fill(gpu, profile).instances)
        assert 1 <= fits <= profile.max_instances
        got = node_resources(gpu, gpus, size(label_value(profile.name)))
        ((name, count),) = got.items()
        assert count == gpus * fits, (gpu.key, profile.name)
        assert "+" not in name and QUALIFIED.match(name) and len(QUALIFIED.match(name).group(1)) <= 63
        assert name == "nvidia.com/mig-" + label_value(profile.name)


@pytest.mark.parametrize("gpu", GPUS, ids=[g.key for g in GPUS])
def test_a_sequence_advertises_each_requested_instance_on_every_gpu(gpu):
    """Every pair of profiles that fits one GPU together, +me and the other variants included."""
    checked = 0
    for a in gpu.profiles:
        for b in gpu.profiles:
            if a.id > b.id or try_place(gpu, [a, b]) is None:
                continue
            got = node_resources(gpu, 8, sequence("%s-%s" % (label_value(a.name), label_value(b.name))))
            wanted = Counter({"nvidia.com/mig-" + label_value(a.name): 8})
            wanted["nvidia.com/mig-" + label_value(b.name)] += 8
            assert got == dict(wanted), (gpu.key, a.name, b.name)
            assert list(got) == sorted(got)
            checked += 1
    assert checked >= 5


# Instances per GPU for a size label: NVIDIA's MIG user guide, "Supported MIG Profiles" (A100 40GB: 1g.5gb x7,
# 1g.10gb x4, 3g.20gb x2, one 1g.5gb+me; A30: 1g.6gb x4, 2g.12gb x2, one 1g.6gb+me; H200: 1g.18gb x7).
FACTS = [
    ("ecs.ebmgn7.26xlarge", "NVIDIA A100-SXM4-40GB", 8, "3g.20gb", {"nvidia.com/mig-3g.20gb": 16}),
    ("ecs.ebmgn7.26xlarge", "NVIDIA A100-SXM4-40GB", 8, "1g.5gb", {"nvidia.com/mig-1g.5gb": 56}),
    ("ecs.ebmgn7.26xlarge", "NVIDIA A100-SXM4-40GB", 8, "1g.10gb", {"nvidia.com/mig-1g.10gb": 32}),
    ("ecs.ebmgn7.26xlarge", "NVIDIA A100-SXM4-40GB", 8, "1g.5gb.me", {"nvidia.com/mig-1g.5gb.me": 8}),
    ("ecs.ebmgn7e.32xlarge", "NVIDIA A100-SXM4-80GB", 8, "1g.10gb", {"nvidia.com/mig-1g.10gb": 56}),
    ("4 x A30", "NVIDIA A30", 4, "1g.6gb.me", {"nvidia.com/mig-1g.6gb.me": 4}),
    ("4 x A30", "NVIDIA A30", 4, "2g.12gb", {"nvidia.com/mig-2g.12gb": 8}),
    ("8 x H200", "NVIDIA H200", 8, "1g.18gb", {"nvidia.com/mig-1g.18gb": 56}),
]


@pytest.mark.parametrize("where, gpu, gpus, value, wanted", FACTS, ids=[f[0] + " " + f[3] for f in FACTS])
def test_known_node_resources(where, gpu, gpus, value, wanted):
    assert node_resources(find_gpu(gpu), gpus, size(value)) == wanted


def test_a_mixed_sequence_with_me_on_an_eight_gpu_node():
    got = node_resources(find_gpu("A100-SXM4-40GB"), 8, sequence("1g.5gb.me-1g.5gb-2g.10gb-3g.20gb"))
    assert got == {"nvidia.com/mig-1g.5gb": 8, "nvidia.com/mig-1g.5gb.me": 8, "nvidia.com/mig-2g.10gb": 8,
                   "nvidia.com/mig-3g.20gb": 8}


def test_the_rtx_pro_variants_keep_their_suffixes():
    rtx = find_gpu("RTX-PRO-6000")
    assert node_resources(rtx, 2, size("1g.24gb.me.all")) == {"nvidia.com/mig-1g.24gb.me.all": 2}
    assert node_resources(rtx, 2, size("1g.24gb.gfx")) == {"nvidia.com/mig-1g.24gb.gfx": 8}
    # "-me" needs no change: a hyphen is allowed in a resource name
    assert node_resources(rtx, 2, sequence("1g.24gb-me-1g.24gb-me")) == {"nvidia.com/mig-1g.24gb-me": 4}


def test_a_label_that_does_not_fit_is_the_solvers_error_and_a_node_has_gpus():
    a100 = find_gpu("A100-SXM4-40GB")
    with pytest.raises(MigInputError, match="holds at most 1"):
        node_resources(a100, 8, sequence("4g.20gb-4g.20gb"))
    with pytest.raises(ValueError, match="at least one GPU"):
        layout_resources(fill(a100, a100.profile_by_name("3g.20gb")), 0)
