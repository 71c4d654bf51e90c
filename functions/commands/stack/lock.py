"""The lock of the function's code package: every distribution FC's python3.10 on Linux x86_64 installs,
pinned to one version and to the SHA-256 of the one file it installs (``requirements-fc.txt`` beside this
module, in pip's requirements format, consumed with ``pip --require-hashes``).

``make lock`` (``python -m functions.commands.stack.lock``) refreshes it from the package index:

1. resolve :data:`functions.commands.stack.code_package.DEPENDENCIES` (= pyproject's ``[project] dependencies``)
   with pip's own resolver *on a python3.10 interpreter* (``pip install --dry-run --report``), so
   environment markers are evaluated as on FC (Linux, CPython 3.10);
2. for each pinned distribution, download the file FC installs: the wheel for ``manylinux2014_x86_64`` /
   cp310 (``pip download --only-binary=:all: --platform ...``), or, for a distribution published only as a
   source archive (``alibabacloud-tea``, ``alibabacloud-tea-xml``, ``alibabacloud-endpoint-util`` and the
   ``alibabacloud-darabonba-*`` helpers have no wheel on PyPI), that sdist, marked ``# sdist`` so
   :mod:`functions.commands.stack.build` turns it into a pure-Python wheel;
3. write ``name==version --hash=sha256:<hash of that file>`` lines under a header that records the
   requirements it was resolved from (a test compares them with pyproject.toml).

Reading the lock is pure (:func:`read`); only :func:`refresh` touches the network.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, NamedTuple, Optional

from functions.base import settings
from functions.base.textsafe import clip
from functions.commands.stack import code_package

LOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "requirements-fc.txt")
FC_PYTHON = "3.10"
FC_PLATFORM = "manylinux2014_x86_64"  # FC's python3.10 runtime: glibc >= 2.17 wheels load there
FC_TARGET = ["--platform", FC_PLATFORM, "--implementation", "cp", "--python-version", FC_PYTHON,
             "--abi", "cp310"]
SDIST_MARK = "# sdist"
_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+) --hash=sha256:([0-9a-f]{64})(\s+# sdist)?\s*$")
_FROM = re.compile(r"^#\s{3}(\S.*)$")


class LockError(RuntimeError):
    exit_code = 1


class Pin(NamedTuple):
    name: str  # as the index spells it
    version: str
    sha256: str
    sdist: bool  # published only as a source archive: built into a wheel before install

    def line(self) -> str:
        return "%s==%s --hash=sha256:%s%s" % (self.name, self.version, self.sha256,
                                              "  " + SDIST_MARK if self.sdist else "")


class Lock(NamedTuple):
    requirements: List[str]  # what it was resolved from (pyproject's runtime dependencies)
    pins: List[Pin]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


SHOWN = 120  # characters of a refused line that its error shows


def read(path: str = LOCK) -> Lock:
    """Parse the lock; a line that is neither a comment nor a hashed pin is an error (never ignored)."""
    requirements, pins, in_from = [], [], False
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, 1):
            line = raw.rstrip("\n")
            if line.startswith("# resolved from"):
                in_from = True
                continue
            if line.startswith("#"):
                m = _FROM.match(line)
                if in_from and m:
                    requirements.append(m.group(1).strip())
                else:
                    in_from = False
                continue
            if not line.strip():
                continue
            m = _LINE.match(line)
            if not m:  # shown as repr (a tab or a stray space may be what is wrong: clip would fold it), so
                # a cut is said after it, not inside
                raise LockError("%s:%d is not `name==version --hash=sha256:<64 hex>[  # sdist]`: %r%s"
                                % (path, number, line[:SHOWN], "" if len(line) <= SHOWN else
                                   " (cut: its first %d of %d characters)" % (SHOWN, len(line))))
            pins.append(Pin(m.group(1), m.group(2), m.group(3), bool(m.group(4))))
    return Lock(requirements, pins)


def render(lock: Lock) -> str:
    head = ["# The function's code package (FC python%s, Linux x86_64, %s): every distribution it installs,"
            % (FC_PYTHON, FC_PLATFORM),
            "# pinned to the SHA-256 of the one file installed (`pip --require-hashes`). `# sdist`: published",
            "# only as a source archive; built into a pure-Python wheel (functions/commands/stack/build.py).",
            "# Do not edit: `make lock` rewrites it (functions/commands/stack/lock.py).",
            "# resolved from pyproject.toml [project] dependencies:"]
    head += ["#   %s" % r for r in lock.requirements]
    body = [p.line() for p in sorted(lock.pins, key=lambda p: norm(p.name))]
    return "\n".join(head + [""] + body) + "\n"


def split(lock: Lock, folder: str) -> Dict[str, str]:
    """Write the wheel pins and the sdist pins as two requirement files; {"wheel": path, "sdist": path}
    (a kind with no pin is left out)."""
    out = {}
    for kind, pins in (("wheel", [p for p in lock.pins if not p.sdist]), ("sdist", [p for p in lock.pins if p.sdist])):
        if pins:
            out[kind] = os.path.join(folder, "%s-requirements.txt" % kind)
            with open(out[kind], "w", encoding="utf-8") as handle:
                handle.write("".join("%s==%s --hash=sha256:%s\n" % (p.name, p.version, p.sha256) for p in pins))
    return out


# ---- refresh (make lock): the only part that reaches the package index ----

def find_python310() -> Optional[str]:
    """A CPython 3.10 to resolve with: ``ACK_MIG_FC_PYTHON``, python3.10 on PATH, or a pyenv 3.10 (~/.pyenv)."""
    from functions.base.settings import FC_PYTHON as FC_PYTHON_SETTING, env_text

    candidates = [env_text(FC_PYTHON_SETTING), shutil.which("python3.10") or ""]
    candidates += sorted(glob.glob(os.path.join(os.path.expanduser("~/.pyenv"), "versions", "3.10*", "bin",
                                                "python3.10")), reverse=True)
    for candidate in filter(None, candidates):
        try:
            done = subprocess.run([candidate, "-c", "import sys, pip; print('%d.%d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip() == FC_PYTHON:
            return candidate
    return None


def _pip(args: List[str], python: str = sys.executable, timeout: int = 900) -> subprocess.CompletedProcess:
    command = [python, "-m", "pip", "--disable-pip-version-check"] + args
    try:
        # no cloud credential: pip and the builds it runs need none (settings.child_environment)
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=settings.child_environment())
    except subprocess.TimeoutExpired:
        raise LockError("pip did not finish in %d s: %s" % (timeout, " ".join(args[:3]))) from None


def _last(done: subprocess.CompletedProcess) -> str:
    lines = [l for l in done.stderr.strip().splitlines() if not l.startswith("WARNING: Location")]
    return clip((lines or ["pip failed"])[-1], 300)  # a path pip names can be long: "..." where it is cut


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def refresh(requirements: List[str], python310: str) -> Lock:
    with tempfile.TemporaryDirectory(prefix="ack-mig-hook-lock-") as work:
        report = os.path.join(work, "report.json")
        done = _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", report, "--target",
                     os.path.join(work, "target")] + requirements, python=python310)
        if done.returncode != 0:
            raise LockError("pip could not resolve the function's dependencies on python%s: %s"
                            % (FC_PYTHON, _last(done)))
        with open(report, encoding="utf-8") as handle:
            chosen = [(i["metadata"]["name"], i["metadata"]["version"], i["download_info"]["url"])
                      for i in json.load(handle)["install"]]
        pins = []
        for name, version, url in chosen:
            # pip prefers a wheel: a source archive chosen on Linux means the distribution has no wheel at all.
            sdist = not url.endswith(".whl")
            folder = os.path.join(work, norm(name))
            # --no-binary names the one distribution: with :all: pip would build setuptools itself from source
            # for the build environment too.
            kind = ["--no-binary=%s" % name] if sdist else ["--only-binary=:all:"] + FC_TARGET
            done = _pip(["download", "--quiet", "--no-deps", "-d", folder] + kind + ["%s==%s" % (name, version)])
            files = glob.glob(os.path.join(folder, "*"))
            if done.returncode != 0 or len(files) != 1:
                raise LockError("%s==%s has no %s for FC's python%s on Linux x86_64: %s"
                                % (name, version, "source archive" if sdist else "wheel", FC_PYTHON, _last(done)))
            pins.append(Pin(name, version, _sha256(files[0]), sdist))
    return Lock(list(requirements), pins)


def main(argv: Optional[List[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m functions.commands.stack.lock", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=LOCK, help="the lock to write (default: %(default)s)")
    args = parser.parse_args(argv)
    python310 = find_python310()
    if python310 is None:
        print("error: the lock is resolved on CPython 3.10 (FC's runtime) and none was found: install one "
              "(e.g. `pyenv install 3.10`) or set ACK_MIG_FC_PYTHON=/path/to/python3.10", file=sys.stderr)
        return 2
    requirements = [r for r, _module in code_package.DEPENDENCIES]
    try:
        lock = refresh(requirements, python310)
    except LockError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 1
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(render(lock))
    print("%s: %d distributions (%d built from source) for python%s on Linux x86_64"
          % (args.out, len(lock.pins), sum(p.sdist for p in lock.pins), FC_PYTHON))
    return 0


if __name__ == "__main__":
    sys.exit(main())
