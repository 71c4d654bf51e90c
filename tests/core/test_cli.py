"""The CLI contract of `profiles` and `plan` (issue 2, point 6), run as a real process."""

import json
import os
import subprocess
import sys

import pytest
from tests.support.cli_errors import error_text, is_one_error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "functions.commands.main"] + list(args), cwd=ROOT,
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


@pytest.mark.parametrize("gpu,name", [("NVIDIA H20", "NVIDIA H20"), ("NVIDIA-H20", "NVIDIA H20"),
                                      ("0x232910de", "NVIDIA H20"), ("NVIDIA H800", "NVIDIA H800")])
def test_an_alias_prints_the_name_it_was_given(gpu, name):
    rc, out, err = cli("plan", "--gpu", gpu, "--size", "9")
    assert rc == 0, err
    assert out.splitlines()[0].startswith(name + ": 2 instances")
    assert "GH200" not in out
    rc, out, err = cli("plan", "--gpu", gpu, "--size", "9", "--json")
    assert json.loads(out)["gpu"] == name
    rc, out, err = cli("profiles", "--gpu", gpu)
    assert out.startswith(name + " (")


def test_plan_on_a_twelve_slot_gpu_with_label_safe_variant_names():
    rc, out, err = cli("plan", "--gpu", "0x2bb510de", "--sequence", "1g.24gb-me-2g.48gb.gfx-1g.24gb.gfx")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == ("NVIDIA RTX PRO 6000 Blackwell Server Edition: 3 instances, compute 4/4 slices, "
                        "memory 12/12 slots")
    width = len("2g.48gb+gfx")  # the longest name sets the first column
    assert lines[1] == "  %-*s  %s" % (width, "slot", " ".join("%2d" % s for s in range(12)))
    assert lines[2] == "  %-*s  %s   start 0 size 6" % (width, "2g.48gb+gfx", " ".join([" #"] * 6 + [" ."] * 6))


def test_plan_text_shows_the_diagram():
    rc, out, _ = cli("plan", "--gpu", "NVIDIA H200", "--size", "3g.71gb")
    assert rc == 0
    assert "3g.71gb  # # # # . . . .   start 0 size 4" in out
    assert "3g.71gb  . . . . # # # #   start 4 size 4" in out


@pytest.mark.parametrize("args,needle", [
    (["plan", "--gpu", "Banana 9000", "--size", "19"], "unknown GPU 'Banana 9000'"),
    (["plan", "--gpu", "Tesla V100", "--size", "19"], "Tesla V100 has no MIG"),
    (["plan", "--gpu", "A10", "--size", "19"], "A10 has no MIG"),
    (["profiles", "--gpu", "NVIDIA L20"], "NVIDIA L20 has no MIG"),
    (["plan", "--gpu", "T4", "--size", "19"], "T4 has no MIG"),
    (["plan", "--gpu", "NVIDIA H200", "--sequence", "1g.18gb,2g.35gb"], "1g.18gb-2g.35gb"),
    (["plan", "--gpu", "NVIDIA H200", "--sequence", "9-9-9"], "holds at most 2"),
    (["plan", "--gpu", "NVIDIA H200", "--size", "1g.5gb"], "valid profiles: 1g.18gb (19)"),
    (["plan", "--gpu", "NVIDIA H200"], "--size"),
    (["plan", "--gpu", "NVIDIA H200", "--size", "19", "--sequence", "9"], "not allowed with"),
    (["nonsense"], "unknown command"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    """One error line of at most 160 characters; where the accepted form makes it longer, that follows as an
    indented hint (functions/commands/terminal.py error_lines)."""
    rc, out, err = cli(*args)
    assert rc == 2
    assert out == ""
    assert needle in error_text(err)


def test_profiles_text_fits_long_variant_names_and_marks_estimated_memory():
    rc, out, _ = cli("profiles", "--gpu", "NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert rc == 0
    rows = out.splitlines()[2:]
    width = len("1g.24gb+me.all")  # the longest name: every row keeps its id in the same column
    assert [(row[2:2 + width].rstrip(), row[2 + width:].split()[0]) for row in rows][:5] == [
        ("1g.24gb", "14"), ("1g.24gb+me", "21"), ("1g.24gb+gfx", "47"), ("1g.24gb+me.all", "65"), ("1g.24gb-me", "67")]
    assert "estimated" not in out  # read from a real RTX PRO 6000
    rc, out, _ = cli("profiles", "--gpu", "NVIDIA GB200")
    assert rc == 0 and out.splitlines()[-1] == ("  MiB: estimated, not read from a real GPU of this model; a node "
                                                "uses what its driver reports")
