"""The code package deploy uploads (functions.commands.stack.code_package): built twice from the same sources it
is the same bytes, whatever else lies in the folders (a clone's editor leftovers, a ``.env``, compiled files)
and whatever their times and modes, so deploy (which names the OSS object by the package's hash) uploads
nothing new, and a deploy from a clone sends what a deploy from the wheel sends: the sources, never a file
that happens to sit next to them."""

import os
import shutil
import zipfile

from functions.commands.stack import code_package
from tests.function.conftest import ROOT

STRAYS = {
    "functions/.env": "ALIBABA_CLOUD_ACCESS_KEY_SECRET=not-for-the-bucket\n",
    "functions/handler.py.orig": "an editor's leftover\n",
    "functions/kube/.client.py.swp": "vim swap\n",
    "functions/base/notes.md": "a note\n",
    "node_bootstrap/.DS_Store": "finder\n",
    "functions/.cache/state.json": "{}\n",
    "functions/base/settings.json": "{}\n",  # of a data file's kind, but no file the wheel ships
    "node_bootstrap/host/scratch.service": "[Unit]\n",
    "node_bootstrap/mig/__pycache__/layout.cpython-310.pyc": "compiled\n",
}


def _tree(base):
    for package in code_package.PACKAGES:
        shutil.copytree(os.path.join(ROOT, package), os.path.join(str(base), package), symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
    return str(base)


def test_the_same_sources_give_the_same_zip_whatever_lies_beside_them(tmp_path):
    clean, cluttered = _tree(tmp_path / "clean"), _tree(tmp_path / "cluttered")
    for name, text in STRAYS.items():
        path = os.path.join(cluttered, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
    handler = os.path.join(cluttered, "functions", "handler.py")
    os.chmod(handler, 0o755)  # another umask or checkout, another clock
    os.utime(handler, (1_000_000_000, 1_000_000_000))
    first = code_package.build(str(tmp_path / "a.zip"), root=clean)
    second = code_package.build(str(tmp_path / "b.zip"), root=cluttered)
    strays = [n for n in second if n in STRAYS or n.startswith(".") or "/." in n or n.endswith((".orig", ".md"))]
    assert strays == [] and first == second
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    assert b"not-for-the-bucket" not in (tmp_path / "b.zip").read_bytes()
    assert "functions/handler.py" in first and "node_bootstrap/mig/__init__.py" in first


def test_the_package_holds_the_files_the_wheel_ships_and_no_others(tmp_path):
    """The modules and pyproject.toml's package data (named files, the commands' data/ links left out: the
    function never reads them) are what an install from the wheel has: a deploy from a clone packs the same."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        data = tomllib.load(handle)["tool"]["setuptools"]["package-data"]
    named = {"%s/%s" % (package.replace(".", "/"), f) for package, files in data.items() for f in files
             if not f.startswith("data/")}
    assert set(code_package.OUR_DATA) == named
    names = code_package.build(str(tmp_path / "p.zip"), root=ROOT)
    ours = [n for n in names if n.startswith(code_package.PACKAGES)]
    assert ours and [n for n in ours if not n.endswith(".py") and n not in named] == []
    assert named <= set(ours)
    with zipfile.ZipFile(str(tmp_path / "p.zip")) as archive:
        assert {i.external_attr >> 16 for i in archive.infolist()} == {0o644}
        assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
