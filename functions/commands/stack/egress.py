"""Does a security group let the function open TCP to the API server? ECS's outbound rule order, pure.

``doctor`` asks this of the group the stack gives the function (``SecurityGroupId``), for the private
endpoint ACK names (``https://192.168.0.251:6443``). The rules are ECS's, from its documentation:

* a rule is a row of ``DescribeSecurityGroupAttribute`` with ``Direction=egress`` (``alibabacloud_ecs20140526``
  ``DescribeSecurityGroupAttributeResponseBodyPermissionsPermission``): ``Policy`` ``Accept``/``Drop``,
  ``Priority`` "1" to "100", ``IpProtocol`` (``TCP``, ``UDP``, ``ICMP``, ``ICMPv6``, ``GRE``, ``ALL``),
  ``PortRange`` ``start/end`` (``-1/-1``: every port), a destination in ``DestCidrIp``, ``Ipv6DestCidrIp``,
  ``DestPrefixListId`` or ``DestGroupId``;
* "A smaller value indicates a higher priority. When multiple security group rules have the same priority,
  drop rules take precedence" (AuthorizeSecurityGroupEgress); the first rule that matches decides;
* traffic no custom rule matches follows the group's implicit default: "Basic security groups ... allow all
  outbound traffic by default. Enterprise security groups deny both inbound and outbound traffic by default"
  (ECS "Security group rules"); the type is ``SecurityGroupType`` ``normal``/``enterprise`` of
  ``DescribeSecurityGroups``.

* a rule may also name its SOURCE side, a "quintuple rule" (ECS "Security group quintuple rules",
  help.aliyun.com/document_detail/97439; ``SourceCidrIp``, ``Ipv6SourceCidrIp``, ``SourcePortRange``,
  ``SourceGroupId``, ``SourcePrefixListId`` in the same SDK model): it applies only to traffic from those
  addresses and ports. The function's connections come from an address of its vSwitch (``source``, the
  vSwitch's CIDR block when known) and from an ephemeral port: Linux's default ``ip_local_port_range``
  32768-60999 (kernel ip-sysctl documentation; that FC's sandbox keeps the default is an assumption). A
  source side that covers all of those matches, one that covers none does not, and anything between (a
  part of the vSwitch or of the port range, an unknown vSwitch, a group or prefix list) cannot be decided:
  "unknown", with the rule named.

A rule whose destination is a prefix list or another security group, or whose ports are a port list, cannot be
judged from its row (their contents are other API calls, and whether a group rule covers the API server's
load balancer is not documented). When such a rule comes before the deciding one and says the opposite, the
answer is "cannot tell", with that rule named, never a guess.
"""

import ipaddress
from typing import Any, Dict, Iterable, List, NamedTuple, Optional

ALLOW, DENY, UNKNOWN = "allow", "deny", "unknown"
EPHEMERAL = (32768, 60999)  # Linux's default net.ipv4.ip_local_port_range: the function's source ports


class Verdict(NamedTuple):
    outcome: str  # ALLOW, DENY or UNKNOWN
    reason: str


def _priority(rule: Dict[str, Any]) -> int:
    try:
        return int(str(rule.get("Priority") or "1"))  # AuthorizeSecurityGroupEgress: default 1
    except ValueError:
        return 1


def _drop(rule: Dict[str, Any]) -> bool:
    return str(rule.get("Policy") or "Accept").lower() == "drop"  # Accept is the API's default


def _ports(rule: Dict[str, Any], port: int) -> bool:
    text = str(rule.get("PortRange") or "-1/-1")
    try:
        start, end = (int(p) for p in text.split("/", 1))
    except ValueError:
        return False
    return (start, end) == (-1, -1) or start <= port <= end


def _describe(rule: Dict[str, Any]) -> str:
    where = (rule.get("DestCidrIp") or rule.get("DestPrefixListId") or rule.get("DestGroupId")
             or rule.get("Ipv6DestCidrIp") or "?")
    source = [str(rule.get(k)) for k in ("SourceCidrIp", "Ipv6SourceCidrIp", "SourceGroupId", "SourcePrefixListId")
              if rule.get(k)]
    ports = str(rule.get("SourcePortRange") or "")
    origin = (" from %s" % " ".join(source) if source else "") + \
        (" source ports %s" % ports if ports and ports != "-1/-1" else "")
    return "rule %s (priority %d, %s %s %s%s to %s)" % (
        rule.get("SecurityGroupRuleId") or "?", _priority(rule), "Drop" if _drop(rule) else "Accept",
        str(rule.get("IpProtocol") or "?").upper(), rule.get("PortRangeListId") or rule.get("PortRange") or "?",
        origin, where)


def _source(rule: Dict[str, Any], vswitch: Any) -> Optional[bool]:
    """Whether the rule's source side covers every connection the function opens (True), none (False), or
    cannot be told (None). ``vswitch``: the function's vSwitch CIDR block (an IPv4 network) or None."""
    if rule.get("SourceGroupId") or rule.get("SourcePrefixListId"):
        return None  # their members are other API calls
    if rule.get("Ipv6SourceCidrIp") and not rule.get("SourceCidrIp"):
        return False  # an IPv6 source: the function's IPv4 connection is not from it
    covered: List[Optional[bool]] = []
    cidr = str(rule.get("SourceCidrIp") or "")
    if cidr:
        try:
            network = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            return False  # ECS would not have accepted it; it cannot match anything we send
        if network.prefixlen == 0:
            covered.append(True)
        elif vswitch is None or vswitch.version != network.version:
            covered.append(None)
        elif vswitch.subnet_of(network):
            covered.append(True)
        elif not vswitch.overlaps(network):
            covered.append(False)
        else:
            covered.append(None)  # part of the vSwitch: which address the function gets is not known
    text = str(rule.get("SourcePortRange") or "")
    if text and text != "-1/-1":
        try:
            start, end = (int(p) for p in text.split("/", 1))
        except ValueError:
            return False
        low, high = EPHEMERAL
        covered.append(True if start <= low and high <= end else False if end < low or start > high else None)
    if False in covered:
        return False
    return None if None in covered else True


def _matches(rule: Dict[str, Any], address: Any, port: int, vswitch: Any = None) -> Optional[bool]:
    """True or False when the row decides it, None when it names a list or group we do not read or a source
    side that covers part of the function's addresses or ports."""
    if str(rule.get("Direction") or "egress").lower() != "egress":
        return False
    if str(rule.get("IpProtocol") or "").upper() not in ("TCP", "ALL"):
        return False
    if rule.get("PortRangeListId"):
        return None
    if not _ports(rule, port):
        return False
    source = _source(rule, vswitch)
    if source is False:
        return False
    destination = _destination(rule, address)
    if destination is False:
        return False
    return None if source is None or destination is None else True


def _destination(rule: Dict[str, Any], address: Any) -> Optional[bool]:
    cidr = str(rule.get("DestCidrIp") or "")
    if cidr:
        try:
            return address in ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            return False
    if rule.get("DestPrefixListId") or rule.get("DestGroupId"):
        return None
    return False  # an IPv6 destination never matches the IPv4 endpoint


def egress_verdict(group_type: str, rules: Iterable[Dict[str, Any]], host: str, port: int,
                   vswitch_cidr: str = "") -> Verdict:
    """Would a connection from the group to ``host:port`` over TCP be allowed? ``group_type`` is
    ``normal`` or ``enterprise``; ``rules`` the group's egress rows as the API returns them; ``vswitch_cidr``
    the CIDR block of the function's vSwitch ("" when not known: a rule limited to some source addresses is
    then "unknown")."""
    try:
        vswitch = ipaddress.ip_network(vswitch_cidr, strict=False) if vswitch_cidr else None
    except ValueError:
        vswitch = None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return Verdict(UNKNOWN, "the API server's endpoint %s is a name, not an address: its rules cannot be "
                                "matched here" % host)
    ordered = sorted(rules, key=lambda r: (_priority(r), not _drop(r)))  # drop first at one priority
    unsure: List[Dict[str, Any]] = []
    for rule in ordered:
        hit = _matches(rule, address, port, vswitch)
        if hit is None:
            unsure.append(rule)
        elif hit:
            outcome = DENY if _drop(rule) else ALLOW
            return _settled(outcome, "%s matches" % _describe(rule), unsure)
    if str(group_type or "normal").lower() == "enterprise":
        return _settled(DENY, "no rule matches and an enterprise group denies outbound traffic by default", unsure)
    return _settled(ALLOW, "no rule matches and a basic group allows outbound traffic by default", unsure)


def _settled(outcome: str, reason: str, unsure: List[Dict[str, Any]]) -> Verdict:
    """The outcome holds unless an unreadable rule before it would say the opposite if it matched."""
    for rule in unsure:
        if (DENY if _drop(rule) else ALLOW) != outcome:
            return Verdict(UNKNOWN, "%s comes first and whether it applies cannot be told here (its "
                                    "destination or ports are a list or a group that is not read, or its source "
                                    "side covers part of the function's vSwitch or ports, or a vSwitch not "
                                    "read); otherwise %s" % (_describe(rule), reason))
    return Verdict(outcome, reason)
