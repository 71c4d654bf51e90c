"""Text from the cluster or the cloud, made safe for an operator's terminal.

A node writes its own annotations and labels, an API error carries whatever the server put in it: printed
as they are, an ESC sequence can erase the line and print "all nodes healthy" in green, move the cursor,
set the window title or the clipboard (OSC 52), and a bidi override can reverse what the eye reads. Every
human-readable output of the command line (status, invoke, doctor, demo, the last-resort error line)
passes such data through :func:`escape` (one value) or :func:`escape_data` (a whole structure before it is
rendered). JSON output needs nothing: ``json.dumps`` already writes control characters as ``\\uXXXX``.

The rule is Python's own ``str.isprintable``: control characters (C0, DEL, C1), format characters (bidi
overrides, zero-width), line and paragraph separators, surrogates, private-use and unassigned code points
are written as ``\\n``, ``\\r``, ``\\t``, ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``; everything else,
non-ASCII letters included, stays.
The node tool has its own copy of this rule (``node_bootstrap/commands/textout.py``): node code cannot import
``functions`` (it runs alone on the node's system Python, tests/test_layout.py pins the import direction).
"""

import re
from typing import Any, List, Optional, Tuple

# Where in CPython's own C source an error was raised, as ssl and socket errors say it ("certificate verify
# failed (_ssl.c:1006)"): a file of the interpreter, nothing an operator can act on. Dropped from every text.
_C_SOURCE = re.compile(r"\s*\((?:[A-Za-z0-9_]+/)*_?[A-Za-z0-9_]+\.c:[0-9]+\)")


def escape(text: Any) -> str:
    """``text`` (made a string) with every non-printable character written as a visible escape, and
    CPython's C source locations (``(_ssl.c:1006)``) left out."""
    text = text if isinstance(text, str) else str(text)
    if ".c:" in text:
        text = _C_SOURCE.sub("", text)
    if text.isprintable():  # the common case costs one scan
        return text
    return "".join(c if c.isprintable() else _code(c) for c in text)


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _code(c: str) -> str:
    n = ord(c)
    return _SHORT.get(c) or ("\\x%02x" % n if n < 0x100 else "\\u%04x" % n if n < 0x10000 else "\\U%08x" % n)


def escape_data(value: Any) -> Any:
    """A copy of ``value`` (dicts, lists, tuples of strings and scalars) with every string, keys included,
    escaped: for a structure that is rendered into lines afterwards, so no field can start a line of its
    own or carry a terminal sequence. Other values are returned as they are."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {escape_data(k): escape_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(escape_data(v) for v in value) if not hasattr(value, "_fields") else \
            type(value)(*(escape_data(v) for v in value))
    return value


def one_line(text: Any, limit: Optional[int] = None) -> str:
    """``text`` (made a string) on one line: each run of whitespace (what ``str.split`` splits on: newlines,
    tabs, the Unicode line and paragraph separators) one space, none at either end; then at most ``limit``
    characters (None: all), cut where the limit falls, nothing added: an error's text in a log line, a
    reason or a message, whose length a test or a field's size pins. Nothing else changes: a control
    character that is not whitespace (ESC) stays for :func:`escape` where the line is printed (JSON needs
    nothing). :func:`clip` cuts where the text reads whole instead. The node has its copy
    (``node_bootstrap/errors.py``)."""
    text = " ".join(str(text).split())
    return text if limit is None else text[:limit]


def clip(text: Any, limit: int) -> str:
    """``text`` on one line and at most ``limit`` characters (plus "..." when cut), cut where it reads whole:
    at a word's end, and before a parenthesis or a quote still open there ("...instead (the ", "...into
    '/var/li"), but never so that less than half of ``limit`` is left (one long word, a parenthesis opened
    near the start): there it cuts inside and closes what is open after the dots ("'/var/lib/ack...'"). A
    cause embedded in a longer line ("could not check (%s); give ...") must not leave that line's
    parentheses or quotes unbalanced. Which quote marks open and close is :func:`_still_open`'s rule."""
    text = one_line(text)
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = text[:limit]
    if text[limit] != " ":  # mid-word: back to the word's start, where that keeps half the limit
        space = cut.rfind(" ")
        cut = cut[:space] if space >= half else cut
    opened = _still_open(text, len(cut))
    late = [o for o in opened if o[0] >= half]
    if late:  # the first mark still open in the second half goes with all it holds; those before it stay open
        cut, opened = cut[:late[0][0]], opened[:opened.index(late[0])]
    while opened:  # each one left open is closed after the dots, within the limit
        cut = cut[:limit - len(opened)].rstrip(" ,;:")
        if len(_still_open(text, len(cut))) == len(opened):
            break
        opened = _still_open(text, len(cut))
    return cut.rstrip(" ,;:") + "..." + "".join(_CLOSER[mark] for _at, mark in reversed(opened))


_CLOSER = {"(": ")", "'": "'", '"': '"', "`": "`"}


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _still_open(text: str, end: int) -> List[Tuple[int, str]]:
    """Where the parentheses and quotes that ``text[:end]`` opens and does not close stand, and which mark each
    is (each mark judged by its neighbours in the whole ``text``, so a cut right after one reads it as the
    whole text does).

    A quote mark (' " `) is the same character at both ends, and ' is an apostrophe too, so its neighbours
    decide: it closes the innermost mark still open when that is the same quote, something other than a
    space is before it and no letter or digit after it; else it opens when no letter or digit is before it
    (the start, a space, "(", "=", another quote) and something other than a space after it. Any other one
    is not a quote: the apostrophe of "don't" (letters on both sides), or of "the nodes' pods" with no ' open.
    A ")" closes the innermost "(", and with it any quote opened inside it and never closed (not a quote)."""
    opened: List[Tuple[int, str]] = []
    for at in range(min(end, len(text))):
        char = text[at]
        if char == "(":
            opened.append((at, char))
        elif char == ")":
            inner = [i for i, (_at, mark) in enumerate(opened) if mark == "("]
            if inner:
                del opened[inner[-1]:]
        elif char in _CLOSER:
            before = text[at - 1] if at else " "
            after = text[at + 1] if at + 1 < len(text) else " "
            if opened and opened[-1][1] == char and not before.isspace() and not _word(after):
                opened.pop()
            elif not _word(before) and not after.isspace():
                opened.append((at, char))
    return opened
