"""The CLI contract of `profiles` and `plan` (issue 2, point 6), run as a real process."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "functions.cli"] + list(args), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def test_profiles_json_has_the_contract_fields():
    rc, out, err = cli("profiles", "--gpu", "NVIDIA A100-SXM4-40GB", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert {r["name"] for r in rows} >= {"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}
    for row in rows:
        assert set(row) >= {"name", "id", "compute_slices", "memory_slices", "memory_mib", "max_instances",
                            "placements"}
    three = next(r for r in rows if r["name"] == "3g.20gb")
    assert three["placements"] == [[0, 4], [4, 4]]


@pytest.mark.parametrize("gpu", ["NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", "0x20b010de", "0x20B0"])
def test_plan_json_for_every_gpu_form(gpu):
    rc, out, err = cli("plan", "--gpu", gpu, "--sequence", "19-14-9", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["gpu"] == "NVIDIA A100-SXM4-40GB"
    assert doc["instances"] == [
        {"profile": "3g.20gb", "id": 9, "start": 0, "size": 4},
        {"profile": "2g.10gb", "id": 14, "start": 4, "size": 2},
        {"profile": "1g.5gb", "id": 19, "start": 6, "size": 1},
    ]


def test_plan_text_shows_the_diagram():
    rc, out, _ = cli("plan", "--gpu", "NVIDIA H200", "--size", "3g.71gb")
    assert rc == 0
    assert "3g.71gb  # # # # . . . .   start 0 size 4" in out
    assert "3g.71gb  . . . . # # # #   start 4 size 4" in out


@pytest.mark.parametrize("args,needle", [
    (["plan", "--gpu", "Tesla V100", "--size", "19"], "unknown GPU"),
    (["plan", "--gpu", "NVIDIA H200", "--sequence", "1g.18gb,2g.35gb"], "1g.18gb-2g.35gb"),
    (["plan", "--gpu", "NVIDIA H200", "--sequence", "9-9-9"], "holds at most 2"),
    (["plan", "--gpu", "NVIDIA H200", "--size", "1g.5gb"], "valid profiles: 1g.18gb (19)"),
    (["plan", "--gpu", "NVIDIA H200"], "--size"),
    (["plan", "--gpu", "NVIDIA H200", "--size", "19", "--sequence", "9"], "not allowed with"),
    (["nonsense"], "invalid choice"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    rc, out, err = cli(*args)
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err
