"""stderr fits 80 columns in a pipe, as stdout does, and wraps only between words: never inside a path or
an object key with its hash (a word longer than the line keeps a line of its own), never between a flag and
its value (``--timeout 30`` stays on one line, so a reader can copy it), never inside the function's JSON log
lines (``-v``: one JSON object per line)."""

import os
import re
import subprocess
import sys

import pytest

from functions.commands import terminal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HASH = "3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b" * 2
FLAG_VALUE = re.compile(r"(?<!\S)(--?[A-Za-z][\w.-]*) ([^\s-]\S*)")
pytestmark = pytest.mark.timeout(120)


def cli(*argv):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "functions.commands.main"] + list(argv), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=100)


def one_unit(line):
    """One word, or a flag with its value: what may run past the edge rather than be broken."""
    words = line.split()
    return len(words) == 1 or (len(words) == 2 and words[0].startswith("-"))


def check_wrapped(lines, columns, words=None):
    """Every line fits unless it is one word (or a flag and its value); the words are all there, in order;
    every flag is on the line of its value."""
    for line in lines:
        assert len(line) <= columns or one_unit(line), line
    if words is not None:
        assert " ".join(lines).split() == words
    for line, following in zip(lines, lines[1:]):
        last, first = line.split()[-1], following.split()[0]
        assert not (re.fullmatch(r"--?[A-Za-z][\w.-]*", last) and not first.startswith("-")), (line, following)


TEXT = ("the stack ack-mig-hook-c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b is UPDATE_IN_PROGRESS; run ack-mig-hook wait "
        "--stack-name ack-mig-hook-c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b --region cn-beijing --timeout 30, then "
        "deploy again with -o yaml (the package oss://ack-mig-hook-1357924680135792-cn-beijing/ack-mig-hook/"
        + HASH + ".zip is kept) --dry-run --json")


@pytest.mark.parametrize("columns", range(20, 121, 7))
def test_wrap_words_breaks_between_words_only_and_keeps_flags_with_their_values(columns):
    lines = terminal.wrap_words(TEXT, columns, "", "  ")
    check_wrapped(lines, columns, TEXT.split())
    assert any(HASH in line for line in lines)  # the object key, whole


@pytest.mark.parametrize("columns", range(30, 121, 9))
def test_error_lines_fit_and_say_the_whole_message(columns):
    from tests.support.cli_errors import error_text

    lines = terminal.error_lines(TEXT, columns=columns)
    check_wrapped(lines, columns)
    assert error_text("\n".join(lines)) == "ack-mig-hook: error: " + TEXT


def test_fitted_keeps_what_it_is_told_to_keep():
    import io

    out = io.StringIO()
    fitted = terminal.Fitted(out, columns=40, keep=lambda line: line.startswith("{"))
    record = '{"level": "INFO", "message": "' + "x " * 40 + '"}'
    fitted.write(record + "\n" + "  indented " + "word " * 20 + "\n")
    lines = out.getvalue().splitlines()
    assert lines[0] == record and all(line.startswith("  ") for line in lines[1:]) and len(lines) > 2


@pytest.mark.parametrize("argv", [
    ("status", "--inventory", "/tmp/ack-mig-hook-wrapping/%s/cache/%s/inventory.json" % (HASH, HASH)),
    ("deploy", "--cluster-id", "foo bar", "--region", "cn-beijing", "--dry-run"),
    ("doctor", "--cluster-id", "c-xxxxxxxx", "--region", "cn-beijing"),
    ("plan", "--gpu", "H20", "--size", "1g.10gb"),
    ("plan", "--gpu", "A100-SXM4-40GB", "--sequence", "3g.20gb-3g.20gb-3g.20gb"),
    ("rollout", "status", "--pool", "np" + "0" * 32, "--inventory", os.path.join(ROOT, "examples", "inventory.json")),
], ids=lambda a: a[0])
def test_stderr_of_a_command_fits_80_columns_in_a_pipe(argv):
    done = cli(*argv)
    assert done.returncode == 2 and done.stderr, done
    lines = done.stderr.rstrip("\n").splitlines()
    assert all(len(line) <= 80 or one_unit(line) for line in lines), lines
    text = " ".join(done.stderr.split())
    for value in argv:  # a path or value the message quotes is whole on one line
        if value.startswith("/") and value in text:
            assert any(value in line for line in lines), lines
    for flag, value in FLAG_VALUE.findall(text):
        assert any("%s %s" % (flag, value) in line for line in lines), (flag, value, lines)


def test_progress_lines_on_stderr_are_wrapped_too(monkeypatch, capsys):
    """A command's own progress lines (deploy's upload line was 203 columns) go through the same fitting as
    its errors: main fits stderr for every command."""
    from functions.commands import deploy, main, version

    line = ("uploading the package to oss://ack-mig-hook-1357924680135792-cn-beijing/ack-mig-hook/%s.zip (34007 "
            "KiB), then updating stack ack-mig-hook-c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b with --timeout 30" % HASH)
    monkeypatch.setattr(version, "run", lambda args: deploy.progress(line) or 0)
    monkeypatch.delenv("COLUMNS")
    assert main.main(["version"]) == 0
    lines = capsys.readouterr().err.splitlines()
    check_wrapped(lines, 80, line.split())
    assert len(lines) > 2 and any(HASH in row for row in lines) and any("--timeout 30" in row for row in lines)
