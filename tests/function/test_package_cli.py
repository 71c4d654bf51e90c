"""``python -m functions.commands.package`` (docs/security.md: the code package deploy uploads, built on its own),
run as an operator runs it, in its own process: a wrong argument or an --out it cannot write is one line naming
the problem and the accepted form, exit 2, never a traceback, and nothing is left behind."""

import os
import subprocess
import sys

import pytest

from tests.function.conftest import ROOT


def _package(*argv, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-m", "functions.commands.package", *argv], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def _one_line(err):
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize("given, said", [
    (["--nope"], "unrecognized arguments: --nope; see --help"),
    (["--deps", "x", "--sources-only"], "argument --sources-only: not allowed with argument --deps; see --help"),
])
def test_a_wrong_argument_is_one_line_and_exit_2(tmp_path, given, said):
    code, out, err = _package(*given, cwd=tmp_path)
    assert code == 2 and out == "" and _one_line(err).endswith(said), err


def test_an_out_that_is_a_folder_is_refused_naming_the_form_it_takes(tmp_path):
    code, out, err = _package("--sources-only", "--out", str(tmp_path), cwd=tmp_path)
    line = _one_line(err)
    assert code == 2 and "--out %s is a directory" % tmp_path in line and "ack-mig-hook.zip" in line, err
    assert os.listdir(str(tmp_path)) == []  # no partial zip beside it


def test_an_out_under_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "dist").write_text("a file where the folder would be\n")
    code, out, err = _package("--sources-only", "--out", str(tmp_path / "dist" / "x.zip"), cwd=tmp_path)
    line = _one_line(err)
    assert code == 2 and "--out %s" % (tmp_path / "dist" / "x.zip") in line and "not a directory" in line, err
    assert sorted(os.listdir(str(tmp_path))) == ["dist"]
