"""textsafe.clip closes what its cut leaves open: parentheses, and quotes too. A cause cut inside a quoted name
or path ("cannot write '/var/lib/ack-mig-h...") left the quote open, and with it the rest of the line it was
embedded in read as quoted. The rule for which quote marks open and close (an apostrophe is not one) is
textsafe._still_open's; the property test below holds it to texts whose structure is known by construction."""

from hypothesis import HealthCheck, example, given, settings, strategies as st

from functions.base.textsafe import clip

PATH = "/var/lib/ack-mig-hook/" + "/".join("folder-%d" % i for i in range(30))


def test_a_cut_inside_a_quoted_path_closes_the_quote():
    cut = clip("could not write '%s': permission denied" % PATH, 60)
    assert cut.startswith("could not write '/var/lib/ack-mig-hook/folder-0") and cut.endswith("...'"), cut
    assert len(cut) <= 63 and cut.count("'") == 2, cut
    cut = clip('cannot open "%s" (read-only)' % PATH, 50)
    assert cut.startswith('cannot open "/var/lib/') and cut.endswith('..."') and cut.count('"') == 2, cut


def test_quotes_inside_parentheses_close_innermost_first():
    cut = clip("pip failed (could not install to '%s')" % PATH, 70)
    assert cut.startswith("pip failed (could not install to '/var/lib/") and cut.endswith("...')"), cut
    assert len(cut) <= 73, cut


def test_a_quote_opened_late_goes_with_all_it_holds():
    text = "the dependencies could not be installed into the folder given to it: '%s'" % PATH
    cut = clip(text, 90)
    assert cut == "the dependencies could not be installed into the folder given to it..." , cut


def test_a_parenthesis_opened_late_inside_an_early_quote_goes_with_what_it_holds():
    """The quote (opened early) is closed after the dots; the parenthesis opened in the second half is not
    cut inside but dropped with all it holds, as it is outside any quote."""
    cut = clip("unsupported profile mode 'AK" + " word" * 32 + " (see the runbook of this account)'", 200)
    assert cut.endswith(" word...'") and "(" not in cut, cut


def test_an_apostrophe_is_not_a_quote():
    text = " ".join(["don't"] * 40)
    cut = clip(text, 50)
    assert cut.endswith("don't...") and cut.count("'") == cut.count("don't"), cut
    cut = clip("the nodes' pods " * 3 + "'" + "word " * 40 + "'", 100)
    assert cut.startswith("the nodes' pods " * 3 + "'word") and cut.endswith("word...'"), cut
    assert clip("the nodes' " + "pods " * 40, 40).endswith("pods..."), clip("the nodes' " + "pods " * 40, 40)
    # one long word cut inside: "don" of don't is no quote left open
    assert clip("'" + "x" * 60 + "don't" + "y" * 40 + "'", 67) == "'" + "x" * 60 + "don't...'"


# ---- the property: structure known by construction ----

MARKS = {"(": ")", "'": "'", '"': '"', "`": "`"}
WORD = st.text("abcdefgh", min_size=1, max_size=6)


@st.composite
def word(draw):
    """A word, with an apostrophe inside it (don't) or a comma after it now and then."""
    text = draw(WORD)
    if draw(st.booleans()):
        text += "'" + draw(WORD)
    return [(c, ()) for c in text + draw(st.sampled_from(["", "", ","]))]


def group(children, mark):
    """A group of ``mark`` around ``children`` (each a list of (char, marks open inside it) pairs)."""
    inside = []
    for number, child in enumerate(children):
        inside += [(" ", ())] * bool(number) + child
    return [(mark, (mark,))] + [(c, (mark,) + opened) for c, opened in inside] + [(MARKS[mark], ())]


def tree(depth):
    """Words and groups, a quote never directly inside one of the same mark ('a 'b' c' is ambiguous to any
    reader), a group sometimes given as a value (key='value')."""
    if depth == 0:
        return word()

    @st.composite
    def node(draw):
        if draw(st.integers(0, 2)) == 0:
            return draw(word())
        mark = draw(st.sampled_from(sorted(MARKS)))
        children = draw(st.lists(tree(depth - 1), max_size=4))
        children = [c for c in children if mark == "(" or not any(ch == mark and op == (mark,) for ch, op in c)]
        out = group(children, mark)
        if draw(st.booleans()):  # as a value: key='...'
            out = [(c, ()) for c in draw(WORD) + "="] + out
        return out

    return node()


@st.composite
def structured(draw):
    parts = draw(st.lists(tree(3), min_size=1, max_size=6))
    chars = []
    for number, part in enumerate(parts):
        chars += [(" ", ())] * bool(number) + part
    return "".join(c for c, _ in chars), [opened for _, opened in chars]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(structured())
@example(("'%s'" % ("a" * 40), [("'",)] * 41 + [()]))
def test_every_cut_closes_exactly_what_it_left_open(case):
    text, opened = case
    for limit in range(1, len(text)):
        cut = clip(text, limit)
        body, dots, closers = cut.rpartition("...")
        assert dots and text.startswith(body), (text, limit, cut)
        assert len(cut) <= limit + 3, (text, limit, cut)
        expected = "".join(MARKS[m] for m in reversed(opened[len(body) - 1])) if body else ""
        assert closers == expected, (text, limit, cut)
