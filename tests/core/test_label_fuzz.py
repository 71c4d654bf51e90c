"""Hostile label values: whatever the text, parsing either yields catalogue profiles or one clean line.

bench/run.py --fuzz runs the same properties with 10,000+ examples; here a few hundred keep CI quick."""

import string

from hypothesis import given, settings, strategies as st

from node_bootstrap.mig import GPUS, MigInputError, PartitionSpec, plan

HOSTILE = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=string.printable, max_size=80),
    st.lists(st.sampled_from(["1g.5gb", "19", "9", "3g.20gb", "-", ",", ";", "$(id)", "`id`", "|", "&&",
                              "\n", "\x00", "'", '"', "\\", " ", "+me", "\u202e", "\u0661", "..", "*"]),
             max_size=20).map("".join),
    st.integers(min_value=0, max_value=12000).map(lambda n: "1g.5gb-" * (n // 7)),
)


def check(gpu, kind, value):
    try:
        layout = plan(PartitionSpec(kind, value), gpu)
    except MigInputError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg and "\r" not in msg and "\x00" not in msg
        assert len(msg) < 1200
        return None
    # Accepted: every instance is a catalogue profile and the normalized sequence is plain ASCII.
    names = {p.name for p in gpu.profiles}
    assert all(i.profile.name in names for i in layout.instances)
    assert all(c in string.ascii_lowercase + string.digits + ".-+" for c in layout.sequence)
    return layout


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(GPUS), st.sampled_from(["size", "sequence"]), HOSTILE)
def test_hostile_values_never_escape_as_text(gpu, kind, value):
    check(gpu, kind, value)
