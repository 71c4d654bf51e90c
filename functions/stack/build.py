"""The function's code package with its dependencies for FC's python3.10 on Linux x86_64, checked.

``pip install --target`` with ``--platform manylinux2014_x86_64 --python-version 3.10 --only-binary=:all:``
fetches the runtime dependencies (never the ``deploy`` or ``dev`` extras) as FC will import them. The check
then reads each installed distribution's ``*.dist-info`` (``WHEEL`` tags) so a missing dependency or a
wheel built for another Python or platform stops the deploy with the names, instead of a function that
cannot import pydantic at its first event.
"""

import hashlib
import os
import re
import subprocess
import sys
from typing import Dict, List, Tuple

from functions.stack import code_package

FC_PYTHON = "3.10"
FC_TAGS_PYTHON = ("cp310", "py3", "py310", "py30")
FC_PLATFORMS = ("any", "linux_x86_64")  # plus manylinux*_x86_64


class BuildError(RuntimeError):
    exit_code = 1


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_requirements() -> List[str]:
    """The function's runtime dependencies (code_package.DEPENDENCIES, which a test keeps equal to
    pyproject.toml's): never the ``deploy`` or ``dev`` extras."""
    return [requirement for requirement, _module in code_package.DEPENDENCIES]


def _name(requirement: str) -> str:
    return _norm(re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0])


def installed(deps_dir: str) -> Dict[str, List[str]]:
    """Distributions in a ``pip --target`` folder: normalized name -> their wheel tags."""
    out = {}
    for entry in os.listdir(deps_dir):
        if not entry.endswith(".dist-info"):
            continue
        name = _norm(entry[: -len(".dist-info")].rsplit("-", 1)[0])
        tags = []
        wheel = os.path.join(deps_dir, entry, "WHEEL")
        if os.path.isfile(wheel):
            with open(wheel, encoding="utf-8") as handle:
                tags = [line.split(":", 1)[1].strip() for line in handle if line.startswith("Tag:")]
        out[name] = tags
    return out


def _fits_fc(tag: str) -> bool:
    python, abi, platform = (tag.split("-") + ["", "", ""])[:3]

    def python_ok(p: str) -> bool:
        if p in FC_TAGS_PYTHON:
            return True
        # A stable-ABI wheel (cp37-abi3) loads on that CPython and every later one.
        return abi == "abi3" and p.startswith("cp3") and p[3:].isdigit() and int(p[3:]) <= 10

    return (any(python_ok(p) for p in python.split("."))
            and (platform in FC_PLATFORMS or (platform.startswith("manylinux") and platform.endswith("_x86_64"))))


def check(deps_dir: str, requirements: List[str]) -> Tuple[List[str], List[str]]:
    """(missing distributions, distributions with no wheel tag FC can load)."""
    have = installed(deps_dir)
    missing = sorted(_name(r) for r in requirements if _name(r) not in have)
    wrong = sorted("%s (%s)" % (name, ", ".join(tags)) for name, tags in have.items()
                   if tags and not any(_fits_fc(t) for t in tags))
    return missing, wrong


def fetch(deps_dir: str, requirements: List[str]) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target",
               deps_dir, "--platform", "manylinux2014_x86_64", "--implementation", "cp", "--python-version",
               FC_PYTHON, "--only-binary=:all:", "--upgrade"] + requirements
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise BuildError("pip did not finish fetching the function's dependencies in 900 s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise BuildError("pip could not fetch the function's dependencies for python%s on Linux x86_64: %s"
                         % (FC_PYTHON, last[:300]))


def build(out_path: str, deps_dir: str, known_hosts: str = "") -> str:
    """Check ``deps_dir``, write the zip; return its SHA-256 (it names the OSS object, so every code change
    is a new object and ROS sees the function's Code change)."""
    missing, wrong = check(deps_dir, runtime_requirements())
    if missing:
        raise BuildError("the code package would lack %s: leave out the dependency folder to have them fetched, "
                         "or `pip install --target DIR` them for python%s" % (", ".join(missing), FC_PYTHON))
    if wrong:
        raise BuildError("built for another Python or platform than FC's python%s on Linux x86_64: %s"
                         % (FC_PYTHON, "; ".join(wrong)))
    code_package.build(out_path, deps_dir, known_hosts=known_hosts)
    digest = hashlib.sha256()
    with open(out_path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
