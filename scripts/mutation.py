"""``make mutation``: plant each deliberate bug of ``scripts/mutants.py`` in a throwaway copy of the tree,
run that subsystem's tests against it, and print the catch rate.

A mutant is caught when its tests fail (or hang past ``--timeout``, which pytest-timeout reports as a
failure by name). A mutant whose ``find`` texts no longer occur exactly once in its file is *stale*: the
code moved on and the list must follow it, so a stale mutant fails the run just as a survivor does. The
tests are first run once unmutated (the union of every mutant's tests): a red baseline would make every
mutant look caught, so it stops the run.

The copy holds the files git tracks plus the untracked ones it does not ignore (what CI would see of this
working tree); it runs with this checkout's ``.venv`` and ``PYTHONPATH`` set to the copy, so the
mutated sources are the ones imported, in the test process and in every child it starts.

    .venv/bin/python scripts/mutation.py            # every mutant
    .venv/bin/python scripts/mutation.py --list     # what is planted where, and the tests that must catch it
    .venv/bin/python scripts/mutation.py --only membership-any-listed-row
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import List, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(1, ROOT)  # tests.support.temproot

from mutants import MUTANTS, Mutant  # noqa: E402


def _copy_tree(dest: str) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, stdout=subprocess.PIPE).stdout.decode("utf-8").split("\0")
    for rel in filter(None, listed):
        source = os.path.join(ROOT, rel)
        target = os.path.join(dest, rel)
        if os.path.islink(source):  # a tracked link (functions/commands/data/examples -> a folder): a link again
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(os.readlink(source), target)
            continue
        if not os.path.isfile(source):  # deleted in the working tree but still in the index
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(source, target)


def _pytest(copy: str, tests: Sequence[str], timeout_s: int) -> "tuple[int, float, str]":
    env = dict(os.environ, PYTHONPATH=copy, PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               "--timeout=%d" % timeout_s] + list(tests)
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout_s * 3)
        code, output = done.returncode, done.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        code, output = 124, "the test run outlasted %d s" % (timeout_s * 3)
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return code, time.monotonic() - started, lines[-1] if lines else ""


def _plant(copy: str, mutant: Mutant) -> "str | None":
    """The original text of the file (to restore), or None when the mutant is stale."""
    path = os.path.join(copy, mutant.file)
    try:
        with open(path, encoding="utf-8") as handle:
            original = handle.read()
    except OSError:
        return None
    text = original
    for find, replace in mutant.edits:
        if text.count(find) != 1:
            return None
        text = text.replace(find, replace)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return original


def main(argv: "List[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", action="append", default=[], metavar="ID", help="run only this mutant (repeatable)")
    parser.add_argument("--timeout", type=int, default=300, metavar="SECONDS",
                        help="pytest-timeout per test (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.timeout < 10:
        parser.error("--timeout must be at least 10 seconds")
    chosen = [m for m in MUTANTS if not args.only or m.id in args.only]
    unknown = sorted(set(args.only) - {m.id for m in MUTANTS})
    if unknown:
        parser.error("no mutant %s; --list shows them" % ", ".join(unknown))
    if args.list:
        for m in chosen:
            print("%-40s %s\n%40s %s\n%40s tests: %s" % (m.id, m.file, "", m.why, "", " ".join(m.tests)))
        return 0
    # Not under /tmp: the node runner refuses a node directory below a world-writable one, and the copy's
    # tests keep their node directories inside it (tests/conftest.py): the tests' own private directory.
    from tests.support.temproot import private_tmp

    private = private_tmp()
    copy = tempfile.mkdtemp(prefix="ack-mig-mutation-", dir=private)
    try:
        _copy_tree(copy)
        tests = sorted({t for m in chosen for t in m.tests})
        code, seconds, last = _pytest(copy, tests, args.timeout)
        print("baseline (%d test paths, unmutated): %s in %.0f s" % (len(tests), last, seconds), flush=True)
        if code != 0:
            print("mutation: the unmutated tests fail; fix them first (a red baseline catches every mutant)")
            return 1
        caught, survived, stale = [], [], []
        for m in chosen:
            original = _plant(copy, m)
            if original is None:
                stale.append(m.id)
                print("STALE     %-40s its text is not in %s exactly once: update scripts/mutants.py"
                      % (m.id, m.file), flush=True)
                continue
            try:
                code, seconds, last = _pytest(copy, m.tests, args.timeout)
            finally:
                with open(os.path.join(copy, m.file), "w", encoding="utf-8") as handle:
                    handle.write(original)
            verdict = "caught" if code != 0 else "SURVIVED"
            (caught if code != 0 else survived).append(m.id)
            print("%-9s %-40s %4.0f s  %s" % (verdict, m.id, seconds, last[:90]), flush=True)
        total = len(chosen)
        print("catch rate: %d/%d (%.0f%%); survived: %s; stale: %s" % (
            len(caught), total, 100.0 * len(caught) / total if total else 100.0,
            ", ".join(survived) or "none", ", ".join(stale) or "none"))
        return 0 if len(caught) == total else 1
    finally:
        shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
