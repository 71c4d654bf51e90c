"""The node tool as a node runs it: the bundle the function sends (functions.delivery.bundle), unpacked, on
the oldest Python a node may have (3.6, Alibaba Cloud Linux 3's system Python), against the simulator.

``vermin`` checks the language level statically; this runs it. Anything 3.7+ that slipped through at run
time (a dataclass, ``from __future__ import annotations``, a keyword argument of a newer stdlib) fails
here. The interpreter is found on PATH or among pyenv's versions; where none is installed the test says
so and is skipped.
"""

import glob
import io
import json
import lzma
import os
import shutil
import subprocess
import tarfile

import pytest

from functions.delivery import bundle as bundle_mod


def _python36():
    # pyenv's own interpreter first: its shim on PATH needs pyenv's environment to pick a version
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = sorted(glob.glob(os.path.join(pyenv, "versions", "3.6*", "bin", "python3.6")))
    if candidates:
        return candidates[-1]
    found = shutil.which("python3.6")
    return found if found and "/shims/" not in found else None


PYTHON36 = _python36()
pytestmark = pytest.mark.skipif(PYTHON36 is None, reason="no Python 3.6 here (PATH or ~/.pyenv/versions/3.6*)")


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """The node bundle, unpacked as node_runner.py unpacks it on a node."""
    target = tmp_path_factory.mktemp("bundle")
    built = bundle_mod.build()
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(built.packed))) as tar:
        tar.extractall(str(target))
    return str(target)


def node(unpacked, *args):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": unpacked, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([PYTHON36, "-m", "node_bootstrap"] + list(args), cwd=unpacked, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return done.returncode, done.stdout.decode("utf-8"), done.stderr.decode("utf-8")


def test_the_bundle_partitions_and_turns_mig_off_on_python36(unpacked, tmp_path):
    state = str(tmp_path / "node.json")
    sim = ["--backend", "sim:A100-SXM4-40GB:2", "--sim-state", state]
    code, out, err = node(unpacked, "apply", "--sequence", "3g.20gb-2g.10gb-1g.5gb", "--json", *sim)
    assert code == 0, err
    result = json.loads(out)
    assert result["outcome"] == "success" and result["changes"] > 0
    assert [sorted(i["profile"] for i in g["instances"]) for g in result["gpus"]] == \
        [["1g.5gb", "2g.10gb", "3g.20gb"]] * 2

    code, out, err = node(unpacked, "apply", "--sequence", "1g.5gb-3g.20gb-2g.10gb", "--json", *sim)
    assert code == 0 and json.loads(out)["changes"] == 0, err  # already right: nothing changes

    code, out, err = node(unpacked, "apply", "--sequence", "7g.40gb", "--no-destroy", "--json", *sim)
    assert code == 7 and json.loads(out)["error"]["code"] == "destroy-required", err

    code, out, err = node(unpacked, "disable", "--json", *sim)
    assert code == 0, err
    assert all(g["mig_mode"] == {"current": "disabled", "pending": "disabled"} for g in json.loads(out)["gpus"])


def test_bad_input_is_one_line_on_python36(unpacked, tmp_path):
    code, out, err = node(unpacked, "plan", "--sequence", "3g.20gb,2g.10gb", "--backend", "sim:A100-SXM4-40GB:1",
                          "--sim-state", str(tmp_path / "node.json"))
    assert code == 2
    assert "Traceback" not in err and len([line for line in err.splitlines() if line.strip()]) == 1, err



def test_make_node_env_builds_on_the_python36_found_here():
    """`make node-env` builds .venv-node on a 3.6 where one runs, so that the tests running node code through
    NODE_PYTHON (tests/node/nodecli.py) run it as a node does: on python3 (3.10+) only vermin stood for 3.6.
    Asked of the Makefile's own choice (NODE_PYTHON=... given to make still wins, for a run without 3.6)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make here")
    env = dict((k, v) for k, v in os.environ.items() if k not in ("NODE_PYTHON", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"))
    done = subprocess.run([make, "-s", "--no-print-directory", "--eval", "chosen: ; @echo '$(NODE_PYTHON)'", "chosen"],
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), env=env,
                          stdout=subprocess.PIPE, universal_newlines=True, timeout=60)
    chosen = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert chosen, "the Makefile chose no node interpreter"
    version = subprocess.run([chosen, "-c", "import sys; print(sys.version_info[:2])"], stdout=subprocess.PIPE,
                             universal_newlines=True, timeout=60)
    assert version.stdout.strip() == "(3, 6)", (chosen, version.stdout)
