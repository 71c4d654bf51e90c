"""A simulated GPU answers the product name it was asked to be, as a real one does: aliases such as
"NVIDIA H20" share a catalogue entry with other products but keep their own name."""

import json
import subprocess

import pytest

from node_bootstrap.mig import find_gpu
from tests.node.nodecli import node_python


@pytest.mark.parametrize("asked", ["NVIDIA H20", "NVIDIA H100 NVL", "NVIDIA A100-SXM4-40GB"])
def test_the_simulated_gpu_reports_the_name_it_was_given(asked, tmp_path):
    state = tmp_path / "state.json"
    proc = subprocess.run([node_python(), "-m", "node_bootstrap", "--backend", "sim:%s:2" % asked,
                           "--sim-state", str(state), "--json", "status"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    gpus = json.loads(proc.stdout)["gpus"]
    assert [g["name"] for g in gpus] == [asked, asked]
    saved = json.loads(state.read_text())
    assert saved["gpu"] == find_gpu(asked).key and saved["gpu_name"] == asked
