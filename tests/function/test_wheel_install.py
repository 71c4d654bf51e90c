"""docs/first-deployment.md from a wheel, as a person follows it: the wheel built from the source tree,
installed into a fresh virtual environment outside it, and every ``ack-mig-hook`` command of the page run
there, each its own process, against the loopback emulators, with the commands' own polling.

Issue 38: ``pip install '.[deploy]'`` (not editable) gave a CLI whose deploy, doctor and demo crashed on
``template.yml``, ``deploy/rbac.yaml`` and ``examples/event.json``, which the wheel did not carry.

How the environment is made, and why it still proves that the wheel alone carries the project's files:

* The wheel is built (``pip wheel --no-deps``, once per session) from a copy of the project's packaging
  inputs (pyproject.toml, README, LICENSE, the two packages with their links to template.yml, deploy/ and
  examples/), so a build can never pick up a stray file of the working tree.
* The fresh venv (``python -m venv --without-pip``) gets the wheel by ``pip --python VENV install --no-deps
  --no-index``: the project's files are the wheel's files, nothing else.
* Its third-party dependencies (the runtime ones and the deploy extra) are this test interpreter's own,
  through one ``.pth`` line naming a folder of links to each of its site-packages entries except the
  project's (``functions``, ``node_bootstrap``, its dist-info and editable finder). Installing them from an
  index would download about 50 distributions per run; they are not what is under test.
* Every command runs with the venv's ``bin/ack-mig-hook``, in an empty folder outside the source tree,
  without PYTHONPATH; the test checks that ``functions`` and the shipped files load from the venv.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

from tests.function.conftest import ROOT
from tests.function.test_doctor import cloud  # noqa: F401  (fixture: ACK, ECS, ROS, Kubernetes API)
from tests.function.test_first_deployment import EXPECTED_COMMANDS, PageWorld, page_steps
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
PACKAGING = ("pyproject.toml", "README.md", "LICENSE", "functions", "node_bootstrap", "template.yml", "deploy",
             "examples")
PROJECT = ("functions", "node_bootstrap")


def _clean_env():
    """No PYTHONPATH: the source tree on it would count as the project installed already (pip) or be
    imported instead of the wheel (the commands)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(argv, **kwargs):
    kwargs.setdefault("env", _clean_env())
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, **kwargs)
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    return done


def _dependency_links(folder):
    """Links to this interpreter's site-packages entries, the project's own left out."""
    os.makedirs(folder)
    site = sysconfig.get_paths()["purelib"]
    for entry in sorted(os.listdir(site)):
        lowered = entry.lower()
        if (entry in PROJECT or lowered.startswith(("ack_mig_hook", "__editable__", "_ack_mig_hook"))
                or entry.endswith(".pth") or entry == "__pycache__"):
            continue
        os.symlink(os.path.join(site, entry), os.path.join(folder, entry))
    return folder


def _no_isolation():
    """Build with this interpreter's setuptools when it is one pyproject.toml accepts (the dev extra
    installs it): no download. Else pip fetches the build backend into an isolated environment."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major = int(version("setuptools").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return []
    return ["--no-build-isolation"] if major >= 77 else []


def _wheel(base, strays=None):
    """The wheel built from a copy of the packaging inputs, with ``strays`` (path: text) added to the copy."""
    source = base / "source"
    source.mkdir()
    for name in PACKAGING:
        path = os.path.join(ROOT, name)
        if os.path.isdir(path):
            shutil.copytree(path, str(source / name), symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy(path, str(source / name))
    for name, text in (strays or {}).items():
        (source / name).write_text(text)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(base / "dist"), str(source)]
         + _no_isolation())
    (wheel,) = glob.glob(str(base / "dist" / "ack_mig_hook-*-py3-none-any.whl"))
    return wheel


# Files that sit in a package folder of a clone without being ours: a note, a tool's state, a unit file
# someone tried by hand. A package-data rule by kind (``*.json``) put them in the wheel.
STRAYS = {"functions/base/settings.json": '{"ACK_MIG_SECRET": "not-for-the-wheel"}\n',
          "node_bootstrap/host/scratch.service": "[Unit]\n", "functions/kube/notes.txt": "a note\n"}


def test_the_wheel_ships_the_files_the_commands_read_and_no_stray_beside_the_code(tmp_path):
    import zipfile

    from functions.commands import shipped
    from functions.commands.stack import lock

    with zipfile.ZipFile(_wheel(tmp_path, STRAYS)) as archive:
        names = set(archive.namelist())
    read = [shipped.TEMPLATE, shipped.RBAC, lock.LOCK] + [
        os.path.join(shipped.EXAMPLES, n) for n in os.listdir(os.path.join(ROOT, "examples"))]
    wanted = {os.path.relpath(p, ROOT).replace(os.sep, "/") for p in read}
    assert wanted - names == set() and len(wanted) > 4
    assert sorted(set(STRAYS) & names) == []
    ours = [n for n in names if n.startswith(PROJECT)]
    assert [n for n in ours if not n.endswith(".py") and n not in wanted] == []


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the venv's bin folder, its site-packages), the wheel built and installed once for the module."""
    base = tmp_path_factory.mktemp("wheel")
    wheel = _wheel(base)
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel])
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                cwd=str(base)).stdout.strip()
    with open(os.path.join(site, "zz-test-dependencies.pth"), "w") as handle:
        handle.write(_dependency_links(str(base / "dependencies")) + "\n")
    return str(venv / "bin"), site


def _env(bin_dir, extra=()):
    env = _clean_env()
    env.update(PATH=bin_dir + os.pathsep + env.get("PATH", ""), COLUMNS="80", **dict(extra))
    return env


def test_the_wheel_carries_every_file_the_commands_read(installed, tmp_path):
    bin_dir, site = installed
    probe = ("import functions, yaml; from functions.commands import shipped, demo, doctor, deploy; "
             "print(functions.__file__); print(deploy.TEMPLATE); print(doctor.RBAC_FILE); "
             "print(demo.EXAMPLES); print(shipped.inventory_file('example:inventory-auto'))")
    lines = _run([os.path.join(bin_dir, "python"), "-c", probe], cwd=str(tmp_path), env=_env(bin_dir)).stdout.split()
    assert all(line.startswith(site + os.sep) for line in lines), lines
    for path in lines[1:]:
        assert os.path.exists(path) and not os.path.islink(path), path
    assert not os.path.exists(os.path.join(site, "template.yml"))  # in the package, not site-packages' root
    demo = subprocess.run([os.path.join(bin_dir, "ack-mig-hook"), "demo"], cwd=str(tmp_path), env=_env(bin_dir),
                          capture_output=True, text=True, timeout=240)
    assert demo.returncode == 0 and "Traceback" not in demo.stderr, demo.stderr[-2000:]
    # examples/event.json (a scale-out of two nodes) and the rollout, additive and autoscaling snapshots
    assert demo.stdout.startswith("event ess:ScalingActivity:ScaleOutSuccess (scale-out): done, 2 partition")
    assert "examples/inventory-rollout.json" in demo.stdout and "examples/inventory-autoscaling.json" in demo.stdout


def test_every_command_of_the_first_deployment_page_runs_from_the_wheel(installed, cloud, monkeypatch,  # noqa: F811
                                                                        tmp_path):
    bin_dir, _site = installed
    cloud[2].steps = 1  # ROS's emulator: one GetStack poll in progress (the commands still poll and wait)
    world = PageWorld(cloud, monkeypatch, tmp_path)
    work = tmp_path / "operator"  # an empty folder: nothing of the source tree around
    work.mkdir()
    exported, outputs = {}, []
    try:
        for kind, step in page_steps():
            if kind == "export":
                exported.update(world.exported(step))
                continue
            argv = world.argv(step, poll=True)
            done = subprocess.run([os.path.join(bin_dir, "ack-mig-hook")] + argv, cwd=str(work),
                                  env=_env(bin_dir, exported), capture_output=True, text=True, timeout=120)
            outputs.append((argv, done.returncode, done.stdout, done.stderr))
            assert "Traceback" not in done.stderr and "internal error" not in done.stderr, (argv, done.stderr)
            assert done.returncode == (1 if argv[0] == "doctor" else 0), (argv, done.returncode, done.stdout,
                                                                         done.stderr)
    finally:
        world.stop()
    assert [argv[0] for argv, _, _, _ in outputs] == EXPECTED_COMMANDS
    world.check(outputs)
    doctor = next(out for argv, _, out, _ in outputs if argv[0] == "doctor")
    assert "every rule" in " ".join(doctor.split())  # deploy/rbac.yaml, read from the wheel
    advise = outputs[-1][2]
    assert re.search(r"llm-auto", advise), advise[-500:]
    assert world.recorded() <= set(__import__("tests.function.test_first_deployment", fromlist=["x"])
                                   .policy_actions())
