"""What the command line prints, fitted to the reader: the terminal's width on a TTY, 80 columns otherwise
(as kubectl and helm assume for a pipe), on stdout and on stderr alike; an error's problem on its first
line with the rest as an indented hint; a note when a wait outlasts 2 seconds.

Wrapping happens between words only (:func:`wrap_words`): a word longer than the line (a path, an OSS key
with its hash, a URL) stays whole on a line of its own, and a flag stays on the line of its value
(``--timeout 30``, ``-o yaml``), so what a reader copies from the terminal still works.

``--json`` output is never wrapped: it is complete, and an error object where a command fails (fail).
"""

import re
import shutil
import sys
import textwrap
import threading
from typing import List, Optional, TextIO

from functions.base.settings import environment
from functions.base.textsafe import one_line

COLUMNS = "COLUMNS"  # the shell's own variable (POSIX), not one of ours: it is not in the settings table
PIPE_WIDTH = 80  # not a terminal: what a pager, a CI log or an email shows without wrapping
ERROR_LINE = 160  # the longest error line even on a wider terminal; the rest goes to an indented hint
WAIT_NOTE_AFTER = 2.0  # seconds before a wait says what it waits for (on a terminal only)


def width(stream: Optional[TextIO] = None) -> int:
    """Columns to fit: ``COLUMNS`` when set (the shell's variable: ``COLUMNS=200 ack-mig-hook status | less``
    keeps longer lines), else the terminal's on a TTY, else 80 (a pipe, a CI log)."""
    stream = stream or sys.stdout
    columns = environment().get(COLUMNS, "").strip()
    if columns.isascii() and columns.isdigit() and 0 < len(columns) <= 5:
        return max(40, int(columns))
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        return PIPE_WIDTH
    return max(40, shutil.get_terminal_size((PIPE_WIDTH, 24)).columns)


def fit(line: str, columns: Optional[int] = None) -> str:
    """One line cut to ``columns`` with an ellipsis: tables keep their rows one per line."""
    columns = columns or width()
    return line if len(line) <= columns else line[:columns - 3] + "..."


# A flag and its value: "--timeout 30", "-o yaml", "--profile prod" (not "--dry-run --json": the next word is a
# flag of its own). The space between them is held by GLUE while the text is wrapped.
_FLAG_VALUE = re.compile(r"(?<![^\s(`'\"])(--?[A-Za-z][\w.-]*) (?=[^\s-])")
GLUE = "\ue000"  # a private-use character: never in our text (textsafe.escape writes such characters escaped)


def wrap_words(text: str, columns: int, initial_indent: str = "", subsequent_indent: str = "") -> List[str]:
    """``text`` wrapped to ``columns`` between words only: never inside a word (a path or key longer than
    the line gets a line of its own, longer than ``columns``), never between a flag and its value."""
    glued = _FLAG_VALUE.sub(lambda m: m.group(1) + GLUE, text.replace(GLUE, " "))
    lines = textwrap.wrap(glued, width=columns, initial_indent=initial_indent, subsequent_indent=subsequent_indent,
                          break_long_words=False, break_on_hyphens=False)
    return [line.replace(GLUE, " ") for line in lines]


def wrap(text: str, columns: Optional[int] = None, indent: str = "") -> List[str]:
    """Prose wrapped at word boundaries (:func:`wrap_words`), continuation lines indented by ``indent`` plus
    two spaces."""
    columns = columns or width()
    return wrap_words(text, columns, indent, indent + "  ") or [indent]


def error_lines(text: str, prefix: str = "ack-mig-hook: error: ", columns: Optional[int] = None) -> List[str]:
    """An error fitted to stderr (its width, 80 columns in a pipe, at most 160): the problem first, then the
    rest as an indented hint.

    Messages here say the problem, then ``; `` and the accepted form or the fix: the error line keeps the
    most of the message that fits up to a ``; `` and the rest becomes ``  hint: ...``. A problem longer than
    the line goes on over indented lines before the hint. Every line breaks between words (wrap_words)."""
    columns = min(columns or width(sys.stderr), ERROR_LINE)
    line = prefix + one_line(text)
    if len(line) <= columns:
        return [line]
    cut = line.rfind("; ", len(prefix), columns + 1)
    if cut < 0:
        cut = line.find("; ", len(prefix))
    head, rest = (line, "") if cut < 0 else (line[:cut], line[cut + 2:])
    out = wrap_words(head, columns, "", "  ") or [head]
    if rest:
        out += wrap_words("hint: " + rest, columns, "  ", "    ")
    return out


class Waiting:
    """``with Waiting("connecting to 1.2.3.4:6443", 15):`` prints what it waits for after 2 s on a terminal
    (nothing on a pipe, nothing for a wait that ends sooner) and its deadline, so a slow network shows."""

    def __init__(self, what: str, timeout: float, stream: Optional[TextIO] = None,
                 after: float = WAIT_NOTE_AFTER, tty: Optional[bool] = None):
        self.what, self.timeout, self.after = what, timeout, after
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._done = threading.Event()
        self._thread = None  # type: Optional[threading.Thread]

    def _note(self) -> None:
        if not self._done.wait(self.after):
            print("ack-mig-hook: waiting for %s (gives up after %gs)" % (self.what, self.timeout),
                  file=self.stream, flush=True)

    def __enter__(self):
        if self.tty:
            self._thread = threading.Thread(target=self._note, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        if self._thread is not None:
            self._thread.join(1)
        return False


def fail(text: str, code: int, as_json: bool = False) -> int:
    """Say an error (error_lines, on stderr) and return ``code``; with ``--json`` stdout gets the same text
    as an error object too, as kubectl -o json does, so a script reading stdout never parses plain text."""
    print("\n".join(error_lines(text)), file=sys.stderr)
    if as_json and sys.stdout is not None:  # None: started with stdout closed (>&-), said on stderr alone
        import json

        try:
            print(json.dumps({"error": one_line(text), "exit_code": code}))
            sys.stdout.flush()
        except (OSError, OutputError):  # stdout full or its reader gone: said on stderr, with its code
            discard_stdout()
    return code


def discard_stdout() -> None:
    """stdout points at /dev/null from here on: what is still buffered, or printed at exit, cannot fail again."""
    discard(sys.stdout)


def discard(stream: TextIO) -> None:
    """``stream``'s descriptor points at /dev/null from here on (what is still buffered, or written at exit,
    cannot fail again)."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class Wrapped:
    """A stream that rewrites what is written to ``stream``: the rest of the stream's face (isatty, fileno,
    encoding, errors, buffer...) is the real stream's."""

    stream: TextIO

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def __getattr__(self, name):
        return getattr(self.stream, name)


class OutputError(Exception):
    """stdout could not be written: a full disk (``> /dev/full``), a descriptor that broke. Not a bug and not the
    input: the command ran and its output was lost (exit 1). A reader that went away is BrokenPipeError, said
    by main as 141."""

    exit_code = 1


class Guarded(Wrapped):
    """stdout whose write errors are an :class:`OutputError` naming stdout, never an internal error (70) whose
    traceback quotes a TextIOWrapper."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError("cannot write the output to stdout: %s" % (exc.strerror or exc)) from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError("cannot write the output to stdout: %s" % (exc.strerror or exc)) from None


class Unheard(Wrapped):
    """stderr that may lose its reader (``2>&1 >out | head -1``, a log collector gone) or its room (``2>
    /dev/full``): nothing can say that any more, so what follows is dropped (stderr points at /dev/null) and the
    command goes on to its own exit code, 2 for a usage error included, rather than ending as a bug (a
    traceback nobody sees, exit 1) or stopping a deploy halfway for a message no one reads."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError:
            self._gone()

    def _gone(self) -> None:
        try:
            discard(self.stream)
        except (OSError, ValueError, AttributeError):  # no descriptor of its own (a test's StringIO)
            pass


class Redacted(Wrapped):
    """What a command prints, line by line through the redactor (functions.base.logs.redact_shown): the secrets
    registered at run time and the values of known secret shapes, whatever printed them (an error that quotes a
    server's answer, a warning, argparse). Whole lines, before any wrapping (Fitted): a token split from its
    name by a wrap would no longer be recognised."""

    def __init__(self, stream: TextIO):
        self.stream, self._pending = stream, ""

    def write(self, text: str) -> int:
        from functions.base.logs import redact_shown

        self._pending += text
        if "\n" in text:  # only the new text is looked at: many small writes stay linear
            done, _, self._pending = self._pending.rpartition("\n")
            self.stream.write(redact_shown(done) + "\n")
        return len(text)

    def flush(self) -> None:
        from functions.base.logs import redact_shown

        if self._pending:
            self.stream.write(redact_shown(self._pending))
            self._pending = ""
        self.stream.flush()


class Fitted(Wrapped):
    """Human output fitted to its stream: every line longer than the width is wrapped between words
    (wrap_words), the continuation indented under the line's own indentation plus four spaces, so nothing
    runs past the terminal's edge (or 80 columns in a pipe). Machine output (``--json``, ``convert``'s YAML)
    never goes through it; ``keep`` names lines to pass whole (the JSON log lines ``-v`` shows on stderr)."""

    def __init__(self, stream: TextIO, columns: Optional[int] = None, keep=None):
        self.stream, self.columns, self._pending = stream, columns or width(stream), ""
        self.keep = keep

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self.stream.write("\n".join(self.fit_line(line)) + "\n")
        return len(text)

    def fit_line(self, line: str) -> List[str]:
        if len(line) <= self.columns or (self.keep is not None and self.keep(line)):
            return [line]
        indent = line[:len(line) - len(line.lstrip(" "))]
        return wrap_words(line[len(indent):], self.columns, indent, indent + "    ") or [line]

    def flush(self) -> None:
        if self._pending:
            self.stream.write("\n".join(self.fit_line(self._pending)))
            self._pending = ""
        self.stream.flush()
