"""The auto pool labels: what they accept, and a one-line error naming the label for what they do not."""

import pytest

from functions.decision.layout import (HEADROOM_LABEL, LAYOUT_LABEL, PROFILES_LABEL, Bounds, LayoutLabelError,
                                       bounds_from_labels, is_auto, parse_headroom, parse_profiles)


def test_a_pool_without_the_label_is_not_an_auto_pool():
    assert is_auto({}) is False
    assert bounds_from_labels({"ack.aliyun.com/gpu-partition-size": "1g.10gb"}) is None


def test_auto_with_bounds():
    b = bounds_from_labels({LAYOUT_LABEL: "auto", PROFILES_LABEL: "1g.10gb.2g.20gb.3g.40gb",
                            HEADROOM_LABEL: "1g.10gb-2.2g.20gb-1"})
    assert b == Bounds(profiles=frozenset({"1g.10gb", "2g.20gb", "3g.40gb"}), headroom=(("1g.10gb", 2), ("2g.20gb", 1)))
    assert b.allows("2g.20gb") and not b.allows("7g.80gb") and b.headroom_of("1g.10gb") == 2
    assert b.headroom_of("3g.40gb") == 0
    assert bounds_from_labels({LAYOUT_LABEL: "auto"}) == Bounds()


def test_profile_names_are_read_by_the_catalogues_name_pattern():
    # dots join the names and sit inside them; ".me" / ".me.all" / ".gfx" are the label spelling of "+"
    assert parse_profiles("1g.10gb.1g.10gb.me.2g.20gb") == {"1g.10gb", "1g.10gb+me", "2g.20gb"}
    assert parse_profiles("1g.24gb.me.all.1g.24gb-me.2g.48gb.gfx") == {"1g.24gb+me.all", "1g.24gb-me", "2g.48gb+gfx"}
    assert parse_profiles(" 7G.80GB ") == {"7g.80gb"}
    assert parse_headroom("1g.24gb-me-3.1g.10gb-0") == {"1g.24gb-me": 3, "1g.10gb": 0}


@pytest.mark.parametrize("labels, words", [
    ({LAYOUT_LABEL: "on"}, [LAYOUT_LABEL, "auto"]),
    ({LAYOUT_LABEL: ""}, [LAYOUT_LABEL, "empty"]),
    ({LAYOUT_LABEL: "auto", PROFILES_LABEL: "1g.10gb,2g.20gb"}, [PROFILES_LABEL, "','", "joined by '.'"]),
    ({LAYOUT_LABEL: "auto", PROFILES_LABEL: "1g.10gb..2g.20gb"}, [PROFILES_LABEL, "character 9"]),
    ({LAYOUT_LABEL: "auto", PROFILES_LABEL: "1g.11gb"}, [PROFILES_LABEL, "'1g.11gb'", "catalogue"]),
    ({LAYOUT_LABEL: "auto", PROFILES_LABEL: "\uff11g.10gb"}, [PROFILES_LABEL, "character 1"]),  # fullwidth 1
    ({LAYOUT_LABEL: "auto", PROFILES_LABEL: "1g.10gb." * 8}, [PROFILES_LABEL, "64 characters", "63"]),
    ({LAYOUT_LABEL: "auto", HEADROOM_LABEL: "1g.10gb=2"}, [HEADROOM_LABEL, "<profile>-<count>"]),
    ({LAYOUT_LABEL: "auto", HEADROOM_LABEL: "1g.10gb-100"}, [HEADROOM_LABEL, "0 to 99"]),
    ({LAYOUT_LABEL: "auto", HEADROOM_LABEL: "1g.10gb-\u0663"}, [HEADROOM_LABEL]),  # Arabic-Indic 3
    ({LAYOUT_LABEL: "auto", HEADROOM_LABEL: "1g.10gb-1.1g.10gb-2"}, [HEADROOM_LABEL, "twice"]),
    ({LAYOUT_LABEL: "auto", PROFILES_LABEL: "1g.10gb", HEADROOM_LABEL: "2g.20gb-1"},
     [HEADROOM_LABEL, "2g.20gb", PROFILES_LABEL]),
    ({LAYOUT_LABEL: "auto", PROFILES_LABEL: 7}, [PROFILES_LABEL, "text"]),
])
def test_bad_labels_get_one_line_naming_the_label_and_form(labels, words):
    with pytest.raises(LayoutLabelError) as err:
        bounds_from_labels(labels)
    text = str(err.value)
    assert "\n" not in text and isinstance(err.value, ValueError)
    for word in words:
        assert word in text, (word, text)


def test_label_text_is_shown_escaped_never_raw():
    with pytest.raises(LayoutLabelError) as err:
        parse_profiles("1g.10gb.\x1b[31m")
    assert "\x1b" not in str(err.value) and "\\x1b" in str(err.value)


def test_the_layout_label_is_auto_in_any_case_and_nothing_else():
    from functions.decision.layout import LayoutLabelError, bounds_from_labels

    for value in ("auto", "AUTO", "Auto"):
        assert bounds_from_labels({"ack-mig-hook/layout": value}) is not None
    for value in ("off", "autos", "", " auto2"):
        with pytest.raises(LayoutLabelError):
            bounds_from_labels({"ack-mig-hook/layout": value})
