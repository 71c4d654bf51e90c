"""The shape every CLI error has (functions/commands/terminal.py error_lines): a first line starting
``ack-mig-hook: error: ``, the problem going on over indented lines where it is longer than the line, then
the rest as an indented ``hint:``; every line at most 160 characters (80 in a pipe, tests/function/
test_stderr_wrapping.py) but for a single word longer than that, broken between words only; no traceback."""


def error_text(stderr):
    """The error's whole text (problem and hint lines joined back), after checking its shape; fails the test
    otherwise."""
    lines = stderr.rstrip("\n").splitlines()
    # A word longer than the rest of the line (a path under a deep temporary directory) starts a line of its
    # own, however long (terminal.wrap_words): the first line is then the bare prefix.
    assert lines and (lines[0].startswith("ack-mig-hook: error: ") or lines[0] == "ack-mig-hook: error:"), stderr
    assert all(len(line) <= 160 or " " not in line.strip() for line in lines), stderr
    assert all(line.startswith("  ") for line in lines[1:]), stderr
    assert "Traceback" not in stderr
    hint_at = next((n for n, line in enumerate(lines) if line.startswith("  hint: ")), len(lines))
    text = " ".join([lines[0]] + [line.strip() for line in lines[1:hint_at]])
    if hint_at < len(lines):  # the message as it was before error_lines split it at "; "
        hint = " ".join(line.strip() for line in lines[hint_at:])
        assert hint.startswith("hint: "), stderr
        text += "; " + hint[len("hint: "):]
    return text


def is_one_error(stderr):
    error_text(stderr)
    return True
