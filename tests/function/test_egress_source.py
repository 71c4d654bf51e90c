"""The source side of an outbound rule (functions/commands/stack/egress.py, issue 30 item 4): a quintuple rule
(ECS "Security group quintuple rules": SourceCidrIp, SourcePortRange) applies only to traffic from its
source addresses and ports. It decides the function's connection when it covers the whole vSwitch and the
ephemeral ports (32768-60999), is skipped when it covers none of them, and makes the verdict "unknown"
when it covers a part, or when the vSwitch is not known and the rule names some source addresses."""

import pytest

from functions.commands.stack.egress import ALLOW, DENY, UNKNOWN, egress_verdict
from tests.function.test_egress import HOST, PORT, rule

VSWITCH = "192.168.16.0/20"


def judged(*rules, vswitch=VSWITCH, group="normal"):
    return egress_verdict(group, list(rules), HOST, PORT, vswitch)


@pytest.mark.parametrize("source", [dict(SourceCidrIp="10.9.0.0/16"), dict(SourcePortRange="1/1023"),
                                    dict(SourcePortRange="61000/65535"), dict(Ipv6SourceCidrIp="2408::/16")])
def test_a_drop_for_other_sources_does_not_decide_the_functions_connection(source):
    other = rule("Drop", rid="sgr-other", **source)
    assert judged(other).outcome == ALLOW  # the basic group's default decides, not the drop
    assert judged(other, group="enterprise").outcome == DENY and "sgr-other" not in judged(other).reason


@pytest.mark.parametrize("source", [dict(SourceCidrIp="192.168.0.0/16"), dict(SourceCidrIp="0.0.0.0/0"),
                                    dict(SourcePortRange="1024/65535"), dict(SourcePortRange="-1/-1")])
def test_a_source_side_that_covers_the_vswitch_and_ephemeral_ports_decides(source):
    drop = rule("Drop", rid="sgr-all", **source)
    answer = judged(drop)
    assert answer.outcome == DENY and "sgr-all" in answer.reason


@pytest.mark.parametrize("source, why", [
    (dict(SourceCidrIp="192.168.16.0/24"), "part of the vSwitch"),
    (dict(SourcePortRange="40000/65535"), "part of the ephemeral ports"),
    (dict(SourceGroupId="sg-other"), "a group"),
    (dict(SourcePrefixListId="pl-x"), "a prefix list"),
])
def test_a_source_side_covering_part_of_the_function_is_unknown(source, why):
    drop = rule("Drop", rid="sgr-part", **source)
    answer = judged(drop)
    assert answer.outcome == UNKNOWN and "sgr-part" in answer.reason and "source side" in answer.reason, why
    # an accept of the same reach before an allowing default changes nothing: it would say the same
    assert judged(rule("Accept", rid="sgr-part", **source)).outcome == ALLOW


def test_without_the_vswitch_a_rule_for_some_sources_is_unknown_and_one_for_all_is_not():
    some = rule("Drop", rid="sgr-some", SourceCidrIp="192.168.0.0/16")
    assert judged(some, vswitch="").outcome == UNKNOWN
    assert judged(rule("Drop", SourceCidrIp="0.0.0.0/0"), vswitch="").outcome == DENY
    assert "from 192.168.0.0/16" in judged(some, vswitch="").reason  # the rule is named with its source
