"""An error's text as one line, cut: one helper on each side (``functions/base/textsafe.one_line``,
``node_bootstrap/errors.one_line``: node code cannot import ``functions``), the text every caller wrote
inline before (``" ".join(str(x).split())[:n]``), so lines that tests and operators read stay the same."""

import os
import re

import pytest

from functions.base.textsafe import clip, escape, one_line
from node_bootstrap.errors import NodeFailure, one_line as node_one_line

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every character str.split takes for whitespace, the Unicode ones included (str.isspace).
SPACES = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2028\u2029\u202f\u205f\u3000"


@pytest.mark.parametrize("helper", [one_line, node_one_line], ids=["functions", "node"])
def test_every_run_of_whitespace_is_one_space_and_none_is_left_at_either_end(helper):
    assert helper(SPACES + "a" + SPACES + "b\r\n\tc" + SPACES) == "a b c"
    assert helper("\n \t") == ""


@pytest.mark.parametrize("helper", [one_line, node_one_line], ids=["functions", "node"])
def test_the_limit_cuts_where_it_falls_and_adds_nothing(helper):
    assert helper("one  two\nthree", 7) == "one two"  # counted after the fold, cut mid-word
    assert helper("one two", 7) == "one two"
    assert helper("one two", 0) == ""
    assert helper("x " * 500) == ("x " * 500).strip()  # no limit: all of it


@pytest.mark.parametrize("helper", [one_line, node_one_line], ids=["functions", "node"])
def test_any_value_is_made_a_string_first(helper):
    assert helper(OSError(2, "No such\nfile")) == "[Errno 2] No such file"
    assert helper(None) == "None" and helper(137, 2) == "13"


@pytest.mark.parametrize("helper", [one_line, node_one_line], ids=["functions", "node"])
def test_a_control_character_that_is_not_whitespace_stays_for_the_printer_to_escape(helper):
    """The helper only folds and cuts: escaping is the printer's (a JSON result needs none), so a line
    built with it and printed through escape shows the ESC as ``\\x1b``, never raw."""
    text = helper("\x1b[2Kall nodes\nhealthy\u202e", 40)
    assert text == "\x1b[2Kall nodes healthy\u202e"
    assert escape(text) == "\\x1b[2Kall nodes healthy\\u202e"


@pytest.mark.parametrize("text", ["", "a", " a\tb \n", "x" * 400, "é\u2028ü" * 90, SPACES * 3 + "end"])
@pytest.mark.parametrize("limit", [None, 0, 1, 64, 200, 300])
def test_both_helpers_give_what_the_inline_idiom_gave(text, limit):
    inline = " ".join(str(text).split())
    expected = inline if limit is None else inline[:limit]
    assert one_line(text, limit) == node_one_line(text, limit) == expected


def test_clip_and_a_node_failure_fold_as_the_helper_does():
    assert clip("a\n\tb", 10) == "a b"
    assert NodeFailure("apply\nfailed:\t GPU 0").message == "apply failed: GPU 0"


# The layout planner (functions/decision/layout/) depends on nothing of functions/ outside its package (and
# node_bootstrap.mig): its one fold of a reason stays its own.
OWN_FOLD = ("functions/base/textsafe.py", "node_bootstrap/errors.py", "functions/decision/layout/compose.py")


def test_no_caller_writes_the_idiom_inline_again():
    """One helper a side: a new caller that writes ``" ".join(str(x).split())`` (or ``x.split()`` of a
    string) again is found here."""
    inline = re.compile(r"""["']\s["']\.join\(.*\.split\(\)\)""")
    found = []
    for top in ("functions", "node_bootstrap"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    rel = os.path.relpath(path, ROOT)
                    with open(path, encoding="utf-8") as f:
                        found += ["%s:%d" % (rel, n) for n, line in enumerate(f, 1) if inline.search(line)]
    assert sorted(hit.split(":")[0] for hit in found) == sorted(OWN_FOLD), found
