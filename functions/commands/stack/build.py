"""The function's code package with its dependencies for FC's python3.10 on Linux x86_64, checked.

The dependencies are the pins of :mod:`functions.commands.stack.lock` (``requirements-fc.txt``), fetched with
``pip download --require-hashes``: a file whose SHA-256 is not the locked one stops the build. Wheels are
fetched for ``manylinux2014_x86_64`` / cp310 (``--only-binary=:all: --platform ...``); the distributions
PyPI has only as source archives (marked ``# sdist`` in the lock) are fetched as such, by hash too, and
turned into wheels with ``pip wheel``; each must come out pure Python (``py3-none-any``), which FC's
python3.10 loads whatever built it. Then ``pip install --no-index --target`` puts them all in one folder,
never the ``deploy`` or ``dev`` extras. The check then reads each installed distribution's ``*.dist-info``
(``WHEEL`` tags) so a missing dependency or a wheel built for another Python or platform stops the deploy
with the names, instead of a function that cannot import pydantic at its first event. Every failure names
the distribution and the way out: ``--deps-dir`` with a folder prepared elsewhere.
"""

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

from functions.commands.stack import code_package

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
        return abi == "abi3" and p.startswith("cp3") and p[3:].isascii() and p[3:].isdigit() and int(p[3:]) <= 10

    return (any(python_ok(p) for p in python.split("."))
            and (platform in FC_PLATFORMS or (platform.startswith("manylinux") and platform.endswith("_x86_64"))))


def check(deps_dir: str, requirements: List[str]) -> Tuple[List[str], List[str]]:
    """(missing distributions, distributions with no wheel tag FC can load)."""
    have = installed(deps_dir)
    missing = sorted(_name(r) for r in requirements if _name(r) not in have)
    wrong = sorted("%s (%s)" % (name, ", ".join(tags)) for name, tags in have.items()
                   if tags and not any(_fits_fc(t) for t in tags))
    return missing, wrong


DEPS_DIR_HINT = ("or fetch them elsewhere (`pip install --target DIR --platform manylinux2014_x86_64 --python-version "
                 "3.10 --only-binary=:all:` on a machine that reaches the index) and pass --deps-dir DIR")


def _pip(args: List[str], what: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check"] + args
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise BuildError("pip did not finish %s in 900 s; %s" % (what, DEPS_DIR_HINT)) from None


def _pip_failure(done: subprocess.CompletedProcess, what: str) -> BuildError:
    """One line: the distribution pip names (not found, or not the locked hash), pip's reason, the way out."""
    text = done.stderr + done.stdout
    named = re.findall(r"(?:found for|satisfies the requirement) ([A-Za-z0-9._-]+)", text)
    named += re.findall(r"^\s+([A-Za-z0-9._-]+)==\S+ from ", text, re.M)  # the hash-mismatch listing
    lines = [l for l in text.strip().splitlines() if l.strip() and not l.startswith("WARNING: Location")]
    reason = "the file does not have the locked SHA-256" if "DO NOT MATCH THE HASHES" in text \
        else (lines or ["pip failed"])[-1].strip()[:200]
    return BuildError("pip could not %s%s for python%s on Linux x86_64: %s; refresh the lock (make lock) %s"
                      % (what, " " + ", ".join(sorted(set(named))) if named else "", FC_PYTHON, reason,
                         DEPS_DIR_HINT))


def fetch(deps_dir: str, lock_path: str = "") -> None:
    """Install the locked dependencies into ``deps_dir`` (see the module's docstring)."""
    from functions.commands.stack import lock

    try:
        pins = lock.read(lock_path or lock.LOCK)
    except (OSError, lock.LockError) as exc:
        raise BuildError("cannot read the dependency lock: %s" % exc) from None
    with tempfile.TemporaryDirectory(prefix="ack-mig-hook-fetch-") as work:
        files = lock.split(pins, work)
        wheels, sdists = os.path.join(work, "wheels"), os.path.join(work, "sdists")
        if "wheel" in files:
            done = _pip(["download", "--quiet", "--no-deps", "--require-hashes", "--only-binary=:all:", "-d", wheels]
                        + lock.FC_TARGET + ["-r", files["wheel"]], "fetching the wheels")
            if done.returncode != 0:
                raise _pip_failure(done, "fetch")
        if "sdist" in files:
            # --no-binary names them: with :all: pip would also build the build environment's setuptools from source.
            names = ",".join(p.name for p in pins.pins if p.sdist)
            done = _pip(["download", "--quiet", "--no-deps", "--require-hashes", "--no-binary=%s" % names, "-d",
                         sdists, "-r", files["sdist"]], "fetching the source archives")
            if done.returncode != 0:
                raise _pip_failure(done, "fetch")
            for archive in sorted(os.listdir(sdists)):
                _wheel_from_source(os.path.join(sdists, archive), wheels)
        built = sorted(os.path.join(wheels, f) for f in os.listdir(wheels)) if os.path.isdir(wheels) else []
        done = _pip(["install", "--quiet", "--no-deps", "--no-index", "--only-binary=:all:", "--target", deps_dir]
                    + lock.FC_TARGET + built, "installing the dependencies")
        if done.returncode != 0:
            raise _pip_failure(done, "install")


def _wheel_from_source(archive: str, out: str) -> None:
    """``pip wheel`` one locked source archive into ``out``; the wheel must be pure Python (``*-none-any``):
    only then does the machine that built it not matter to FC's python3.10."""
    before = set(os.listdir(out)) if os.path.isdir(out) else set()
    name = os.path.basename(archive)
    done = _pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", out, archive], "building %s" % name)
    if done.returncode != 0:
        raise BuildError("%s is published only as source and did not build into a wheel: %s; %s"
                         % (name, ((done.stderr.strip().splitlines() or ["pip wheel failed"])[-1])[:200],
                            DEPS_DIR_HINT))
    for wheel in sorted(set(os.listdir(out)) - before):
        tags = wheel[:-len(".whl")].split("-")[-3:]
        if tags[1:] != ["none", "any"] or not _fits_fc("-".join(tags)):
            raise BuildError("%s is published only as source and built %s, not a pure-Python wheel FC's python%s "
                             "can load; %s" % (name, wheel, FC_PYTHON, DEPS_DIR_HINT))


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
