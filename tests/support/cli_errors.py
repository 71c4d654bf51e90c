"""The shape every CLI error has (functions/commands/terminal.py error_lines): one line starting
``ack-mig-hook: error: `` of at most 160 characters, then only indented hint lines; no traceback."""


def error_text(stderr):
    """The error's whole text (hint lines joined back), after checking its shape; fails the test otherwise."""
    lines = stderr.rstrip("\n").splitlines()
    assert lines and lines[0].startswith("ack-mig-hook: error: ") and len(lines[0]) <= 160, stderr
    assert all(line.startswith("  ") and len(line) <= 160 for line in lines[1:]), stderr
    assert "Traceback" not in stderr
    text = lines[0]
    if len(lines) > 1:  # the message as it was before error_lines split it: "; " or a cut word rejoined
        hint = " ".join(line.strip() for line in lines[1:])
        assert hint.startswith("hint: "), stderr
        hint = hint[len("hint: "):]
        if text.endswith("...") and hint.startswith("..."):
            text = text[:-3] + " " + hint[3:]
        else:
            text += "; " + hint
    return text


def is_one_error(stderr):
    error_text(stderr)
    return True
