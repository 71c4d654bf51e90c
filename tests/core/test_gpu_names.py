"""GPU names as people say them (node_bootstrap/mig/names.py): short names resolve to the catalogue's
models, case-insensitive; one that fits models with different layouts lists them; the CLI takes them."""

import pytest

from node_bootstrap.mig import AmbiguousGpuError, UnknownGpuError, resolve_gpu
from functions.commands.main import main


@pytest.mark.parametrize("name,key,product", [
    ("A100-80GB", "A100-80GB", "NVIDIA A100-SXM4-80GB"),
    ("a100-40gb", "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),  # SXM4 and PCIe 40GB: the same layouts
    ("H800", "H100-80GB", "NVIDIA H800"),
    ("a800-80gb", "A100-80GB", "NVIDIA A800-SXM4-80GB"),
    ("h20", "H100-96GB", "NVIDIA H20"),
    ("H200", "H200", "NVIDIA H200"),
    ("h100-nvl", "H100-NVL", "NVIDIA H100 NVL"),
])
def test_short_names_resolve(name, key, product):
    gpu = resolve_gpu(name)
    assert (gpu.key, gpu.name) == (key, product)


@pytest.mark.parametrize("name,choices", [
    ("A100", ["A100-SXM4-40GB", "A100-PCIE-40GB", "A100-80GB"]),
    ("h100", ["H100-80GB", "H100-NVL", "H100-96GB"]),
    ("A800", ["A100-PCIE-40GB", "A100-80GB"]),
])
def test_a_name_that_fits_different_layouts_lists_them(name, choices):
    with pytest.raises(AmbiguousGpuError) as caught:
        resolve_gpu(name)
    assert caught.value.choices == choices and all(c in str(caught.value) for c in choices)


def test_an_unknown_name_is_short_and_gives_examples():
    with pytest.raises(UnknownGpuError) as caught:
        resolve_gpu("Z9000")
    assert "unknown GPU 'Z9000'" in str(caught.value) and "H200" in str(caught.value)
    assert len("ack-mig-hook: error: " + str(caught.value)) <= 160  # was 489 characters


def test_the_cli_takes_short_names(capsys):
    assert main(["profiles", "--gpu", "a800-80gb"]) == 0
    assert capsys.readouterr().out.startswith("NVIDIA A800-SXM4-80GB (A100-80GB)")
    assert main(["plan", "--gpu", "H100", "--size", "3g.40gb"]) == 2
    assert "H100-80GB, H100-NVL, H100-96GB" in capsys.readouterr().err
