"""The code package as ``deploy`` builds it, from the real package index, imported by a real CPython 3.10
(FC's runtime): ``make package-check`` (CI runs it after ``make test``; it is out of ``make test`` because it
downloads and builds for a minute or more, and needs the network to the index and a python3.10).

It builds with ``python -m functions.commands.package`` (the locked, hash-checked dependencies; the
source-only ones built into wheels), unpacks the zip, and in a ``python3.10 -S`` that sees only the package
and the standard library imports every function module the handler may load (the operator-side
``functions.commands.stack`` and ``functions.commands`` excepted), every node module and the SDK clients, then runs
the handler on a sample event the way FC calls it.
"""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from functions.commands.stack import code_package, lock

ROOT = code_package.ROOT
SAMPLE = os.path.join(ROOT, "tests", "events", "ess_lifecycle_test.json")
SDK_CLIENTS = ("alibabacloud_cs20151215.client", "alibabacloud_kms20160120.client", "aliyunsdkcore.client",
               "paramiko", "pydantic", "pynvml", "highspy")  # highspy: the auto pools' exact step

PROBE = r'''
import importlib, json, sys, traceback
sys.path.insert(0, sys.argv[1])
failed = {}
for name in json.loads(sys.argv[2]):
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed[name] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
index = importlib.import_module("index")
result = index.handler(open(sys.argv[3], "rb").read(), None)
print(json.dumps({"failed": failed, "python": "%d.%d" % sys.version_info[:2], "index": index.__file__,
                  "outcome": json.loads(result)["outcome"]}))
'''


def _modules(root):
    out = []
    for top in code_package.PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(folder, root).replace(os.sep, ".")
            if rel.startswith(("functions.commands.stack", "functions.commands")):
                continue  # the operator's side: deploy, doctor, the CLI (yaml, ROS, OSS SDKs) never run in FC
            for name in sorted(files):
                if name.endswith(".py") and name != "__main__.py":
                    out.append(rel if name == "__init__.py" else "%s.%s" % (rel, name[:-3]))
    return out + list(SDK_CLIENTS)


@pytest.mark.timeout(1500)
def test_the_real_package_imports_everything_the_handler_needs_on_python310(tmp_path):
    python310 = lock.find_python310()
    assert python310, ("no CPython 3.10 here (FC's runtime): install one (pyenv install 3.10) or set "
                       "ACK_MIG_FC_PYTHON; without it only the wheel tags can be checked")
    out = tmp_path / "ack-mig-hook.zip"
    built = subprocess.run([sys.executable, "-m", "functions.commands.package", "--out", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=1400)
    assert built.returncode == 0, "the real package did not build: " + built.stderr.strip()[-600:]
    root = tmp_path / "code"
    with zipfile.ZipFile(out) as archive:
        archive.extractall(root)
    modules = _modules(str(root))
    assert "functions.handler" in modules and "node_bootstrap.mig.solver" in modules
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "PYTHON"))}
    env["HOME"] = str(tmp_path)
    probe = subprocess.run([python310, "-S", "-c", PROBE, str(root), json.dumps(modules), SAMPLE],
                           cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, "the handler did not run on python3.10: " + probe.stderr.strip()[-800:]
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    assert report["python"] == "3.10" and report["index"] == str(root / "index.py")
    assert report["failed"] == {}, ("python3.10 cannot import from the package: %s; fix the lock (make lock) "
                                    "or build the dependencies elsewhere and deploy with --deps-dir DIR"
                                    % json.dumps(report["failed"]))
    assert report["outcome"] == "skip"


@pytest.mark.timeout(1500)
def test_the_same_lock_gives_the_same_package_byte_for_byte(tmp_path):
    """Two fetches of the real lock into two empty caches (two machines, or a cache wiped in between), each
    built by ``python -m functions.commands.package``: the same zip. Issue 38: pip's ``direct_url.json``
    named its temporary folder, so every deploy built, uploaded and deployed a different package."""
    zips = []
    for n in (1, 2):
        env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / ("cache%d" % n)))
        out = tmp_path / ("%d.zip" % n)
        built = subprocess.run([sys.executable, "-m", "functions.commands.package", "--out", str(out)], cwd=ROOT,
                               env=env, capture_output=True, text=True, timeout=1400)
        assert built.returncode == 0, "the real package did not build: " + built.stderr.strip()[-600:]
        assert "fetched" in built.stderr and "installing" in built.stderr  # progress while it fetches
        zips.append(out.read_bytes())
    assert zips[0] == zips[1], "two builds of the same lock differ"
    names = zipfile.ZipFile(str(tmp_path / "1.zip")).namelist()
    assert not [n for n in names if n.endswith("direct_url.json") or n.startswith("bin/") or n.endswith(".pyc")]
    assert str(tmp_path).encode() not in zips[0]
