"""functions/commands/stack/egress.py: ECS's outbound rule order (priority, drop before accept at one priority, first
match decides, the group type's default), judged on the rows DescribeSecurityGroupAttribute returns."""

from hypothesis import given, strategies as st

from functions.commands.stack.egress import ALLOW, DENY, UNKNOWN, egress_verdict

HOST, PORT = "192.168.0.251", 6443


def rule(policy="Accept", priority="1", protocol="TCP", ports="6443/6443", cidr="0.0.0.0/0", rid="sgr-1", **extra):
    row = {"Direction": "egress", "Policy": policy, "Priority": priority, "IpProtocol": protocol,
           "PortRange": ports, "DestCidrIp": cidr, "SecurityGroupRuleId": rid}
    row.update(extra)
    return row


def verdict(group_type, *rules):
    return egress_verdict(group_type, list(rules), HOST, PORT)


def test_with_no_rule_the_group_type_decides():
    assert verdict("normal").outcome == ALLOW and "basic group allows" in verdict("normal").reason
    assert verdict("enterprise").outcome == DENY and "enterprise group denies" in verdict("enterprise").reason


def test_a_drop_wins_over_an_accept_of_the_same_priority_and_loses_to_a_higher_one():
    drop = rule("Drop", "5", cidr="192.168.0.0/16", rid="sgr-drop")
    assert verdict("normal", rule("Accept", "5", rid="sgr-ok"), drop).outcome == DENY
    assert "sgr-drop" in verdict("normal", rule("Accept", "5"), drop).reason
    assert verdict("normal", drop, rule("Accept", "4", cidr="%s/32" % HOST)).outcome == ALLOW


def test_rules_for_other_protocols_ports_addresses_or_directions_do_not_match():
    others = [rule("Drop", protocol="UDP"), rule("Drop", ports="22/22"), rule("Drop", cidr="10.0.0.0/8"),
              rule("Drop", cidr="", Ipv6DestCidrIp="::/0"), dict(rule("Drop"), Direction="ingress")]
    assert verdict("normal", *others).outcome == ALLOW
    assert verdict("enterprise", *others).outcome == DENY


def test_all_protocols_and_every_port_match():
    assert verdict("enterprise", rule(protocol="ALL", ports="-1/-1")).outcome == ALLOW
    assert verdict("enterprise", rule(ports="1/65535")).outcome == ALLOW
    assert verdict("normal", rule("Drop", protocol="all", ports="-1/-1")).outcome == DENY


def test_a_list_or_group_rule_before_the_decision_makes_it_unknown_only_when_it_says_the_opposite():
    listed = rule("Drop", "1", cidr="", DestPrefixListId="pl-office", rid="sgr-pl")
    unsure = verdict("normal", listed)
    assert unsure.outcome == UNKNOWN and "sgr-pl" in unsure.reason and "basic group allows" in unsure.reason
    assert verdict("enterprise", listed).outcome == DENY  # dropped either way
    group = rule("Accept", "1", cidr="", DestGroupId="sg-other", rid="sgr-g")
    assert verdict("normal", group).outcome == ALLOW
    assert verdict("enterprise", group).outcome == UNKNOWN
    ports = rule("Drop", "1", ports="", PortRangeListId="prl-1")
    assert verdict("normal", ports).outcome == UNKNOWN
    assert verdict("normal", rule("Drop", "2", cidr="", DestPrefixListId="pl-x"), rule("Accept", "1")).outcome == ALLOW


def test_an_endpoint_by_name_cannot_be_matched():
    answer = egress_verdict("normal", [], "apiserver.internal", PORT)
    assert answer.outcome == UNKNOWN and "apiserver.internal" in answer.reason


RULES = st.lists(st.builds(
    rule, policy=st.sampled_from(["Accept", "Drop"]), priority=st.sampled_from(["1", "2", "50", "100"]),
    protocol=st.sampled_from(["TCP", "UDP", "ALL"]), ports=st.sampled_from(["6443/6443", "-1/-1", "22/22"]),
    cidr=st.sampled_from(["0.0.0.0/0", "192.168.0.0/16", "10.0.0.0/8"])), max_size=6)


@given(RULES, st.randoms(use_true_random=False), st.sampled_from(["normal", "enterprise"]))
def test_the_order_the_api_lists_rules_in_does_not_change_the_verdict(rules, rnd, group_type):
    shuffled = list(rules)
    rnd.shuffle(shuffled)
    assert verdict(group_type, *rules).outcome == verdict(group_type, *shuffled).outcome
