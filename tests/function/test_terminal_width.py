"""Output that fits: every command's human output, run as a user runs it on an 80-column terminal (a real
pseudo-terminal, COLUMNS=80), fits; --json stays whole and unwrapped; error lines keep to 160 characters
with the rest as an indented hint. The commands are the offline ones of the docs plus the demo (about
10 s, the slowest here); cloud commands' text goes through the same main. Error lines wrap to the width of
stderr (tests/function/test_stderr_wrapping.py)."""

import io
import json
import os
import pty
import subprocess
import sys

import pytest

from functions.commands import terminal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EX = os.path.join(ROOT, "examples")
HUMAN = [
    ["profiles", "--gpu", "RTX-PRO-6000"],  # the widest profile table
    ["profiles", "--gpu", "H200"],
    ["plan", "--gpu", "H200", "--sequence", "1g.18gb+me-3g.71gb"],
    ["plan", "--instance-type", "ecs.ebmgn7.26xlarge", "--size", "3g.20gb"],
    ["invoke", "--event", os.path.join(EX, "event.json"), "--inventory", os.path.join(EX, "inventory.json"),
     "--dry-run"],
    ["invoke", "--event", os.path.join(EX, "event-reconcile.json"), "--inventory",
     os.path.join(EX, "inventory-rollout.json"), "--dry-run"],  # was 607 columns
    ["status", "--inventory", os.path.join(EX, "inventory.json")],
    ["status", "--inventory", os.path.join(EX, "inventory-rollout.json"), "--nodes"],
    ["advise", "--pool", "llm-auto", "--inventory", os.path.join(EX, "inventory-auto.json")],
    ["demo"],  # was 262 columns
]


def cli(argv, columns=None):
    """Run with stdout a pipe; ``columns``: COLUMNS for the run (None: unset, as in most pipes)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "functions.commands.main"] + argv, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def on_terminal(argv, columns=80):
    """(exit code, what the terminal shows on stdout, stderr) with stdout a pseudo-terminal of ``columns``."""
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS=str(columns))  # shutil.get_terminal_size reads COLUMNS first
    proc = subprocess.Popen([sys.executable, "-m", "functions.commands.main"] + argv, cwd=ROOT, env=env,
                            stdout=slave, stderr=subprocess.PIPE, text=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    err = proc.stderr.read()
    proc.wait(timeout=120)
    return proc.returncode, b"".join(chunks).decode().replace("\r\n", "\n"), err


@pytest.mark.parametrize("argv", HUMAN, ids=lambda a: " ".join(a[:2]))
def test_human_output_fits_80_columns(argv):
    code, out, err = on_terminal(argv)
    assert code == 0, err
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert wide == [], wide[:3]
    assert out.strip()


@pytest.mark.parametrize("argv", [a for a in HUMAN if a[0] != "demo"], ids=lambda a: " ".join(a[:2]))
def test_piped_human_output_fits_80_columns(argv):
    """A pipe (a pager, a CI log, grep) gets 80 columns, as kubectl and helm assume: every line fits, and the
    words are all there (wrapped, not cut)."""
    done = cli(argv)
    assert done.returncode == 0, done.stderr
    wide = [line for line in done.stdout.splitlines() if len(line) > 80]
    assert wide == [] and done.stdout.strip(), wide[:3]


def test_columns_widens_a_pipe_and_wrapping_keeps_every_word():
    argv = HUMAN[5]  # the reconcile dry run: its reasons run long
    narrow, wide = cli(argv), cli(argv, columns=400)
    assert max(len(line) for line in wide.stdout.splitlines()) > 80
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    assert narrow.stdout.split() == wide.stdout.split()  # wrapped at spaces: the same words in the same order


def test_json_is_not_wrapped():
    done = cli(HUMAN[5] + ["--json"])
    result = json.loads(done.stdout)  # whole: a wrapped string would not parse
    assert max(len(line) for line in done.stdout.splitlines()) > 80 and result["decisions"]


def test_fitted_wraps_under_the_lines_indentation_and_keeps_short_lines():
    out = io.StringIO()
    fitted = terminal.Fitted(out, columns=30)
    fitted.write("short\n  " + "word " * 12 + "\nlast")
    fitted.flush()
    lines = out.getvalue().split("\n")
    assert lines[0] == "short" and lines[1].startswith("  word") and lines[2].startswith("      word")
    assert all(len(line) <= 30 for line in lines) and lines[-1] == "last"
    assert " ".join(" ".join(lines[1:-1]).split()) == " ".join(["word"] * 12)


def test_error_lines_keep_the_problem_and_hint_the_rest():
    text = "unknown thing 'x'; use one of " + ", ".join("choice-%d" % n for n in range(40))
    lines = terminal.error_lines(text)
    assert lines[0] == "ack-mig-hook: error: unknown thing 'x'"
    assert lines[1].startswith("  hint: use one of choice-0") and all(l.startswith("    ") for l in lines[2:])
    long_problem = "x" * 50 + " " + "y" * 200  # a word longer than the line: kept whole on its own line
    lines = terminal.error_lines(long_problem)
    assert lines == ["ack-mig-hook: error: " + "x" * 50, "  " + "y" * 200]
