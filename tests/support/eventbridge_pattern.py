"""Alibaba Cloud EventBridge event pattern matching, as the EventBridge user guide's "Event patterns" page
(help.aliyun.com/en/eventbridge/user-guide/event-patterns) documents it, so template.yml's
``eventRuleFilterPattern`` values are tested the way EventBridge applies them:

* A pattern is a JSON object with the same nested structure as the events it matches; keys are combined
  with AND. A key whose value is an object matches a nested object of the event; every other value must be
  an array of conditions, combined with OR ("Each operator is wrapped in an array as the field value").
* Matching is exact and case-sensitive; strings are not normalized ("Case-sensitive exact match").
* Conditions: an exact value (string, number, ``true``/``false``, ``null``; an empty string matches only an
  empty string and ``null`` only ``null``), ``{"prefix": s}``, ``{"suffix": s}``, ``{"contains": s}``,
  ``{"anything-but": value | [values] | {"prefix": s}}``, ``{"numeric": [op, n, (op, n)]}`` with ``<``, ``<=``,
  ``=``, ``>=``, ``>``, ``{"cidr": "a.b.c.d/n"}`` (IPv4 only) and ``{"exists": bool}``.
* A field of the event that is an array matches when one of its elements matches (the page's array matching).
* A missing field matches only ``{"exists": false}``.

Anything else in a pattern is an invalid pattern (:class:`InvalidPattern`): EventBridge refuses to create
such a rule, so a template with one would not deploy.
"""

import ipaddress
import numbers
from typing import Any, Dict, List

_MISSING = object()
_OPERATORS = {"prefix", "suffix", "contains", "anything-but", "numeric", "cidr", "exists"}
_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, "=": lambda a, b: a == b,
            ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}


class InvalidPattern(ValueError):
    pass


def validate(pattern: Any, path: str = "") -> None:
    """Raise InvalidPattern for anything the documented syntax does not allow."""
    if not isinstance(pattern, dict) or not pattern:
        raise InvalidPattern("%s: a pattern level must be a non-empty JSON object" % (path or "pattern"))
    for key, value in pattern.items():
        where = "%s.%s" % (path, key) if path else key
        if isinstance(value, dict):
            validate(value, where)
        elif isinstance(value, list) and value:
            for condition in value:
                _validate_condition(condition, where)
        else:
            raise InvalidPattern("%s: the value must be an array of conditions or a nested object" % where)


def _validate_condition(condition: Any, where: str) -> None:
    if condition is None or isinstance(condition, (str, bool, numbers.Number)):
        return
    if not isinstance(condition, dict) or len(condition) != 1 or next(iter(condition)) not in _OPERATORS:
        raise InvalidPattern("%s: %r is not a value or one documented operator" % (where, condition))
    (operator, argument), = condition.items()
    ok = {"prefix": isinstance(argument, str), "suffix": isinstance(argument, str),
          "contains": isinstance(argument, str), "exists": isinstance(argument, bool),
          "cidr": isinstance(argument, str),
          "numeric": isinstance(argument, list) and len(argument) in (2, 4)
          and all(argument[i] in _COMPARE for i in range(0, len(argument), 2))
          and all(isinstance(argument[i], numbers.Number) for i in range(1, len(argument), 2)),
          "anything-but": isinstance(argument, (str, numbers.Number, list))
          or (isinstance(argument, dict) and list(argument) == ["prefix"])}[operator]
    if not ok:
        raise InvalidPattern("%s: bad argument for %s: %r" % (where, operator, argument))
    if operator == "cidr":
        try:
            ipaddress.IPv4Network(argument, strict=False)
        except ValueError:
            raise InvalidPattern("%s: %r is not an IPv4 CIDR block" % (where, argument)) from None


def matches(pattern: Dict[str, Any], event: Any) -> bool:
    """Whether EventBridge would route ``event`` through a rule with ``pattern`` (validated first)."""
    validate(pattern)
    return _object(pattern, event)


def _object(pattern: Dict[str, Any], event: Any) -> bool:
    if not isinstance(event, dict):
        return False
    for key, expected in pattern.items():
        actual = event.get(key, _MISSING)
        if isinstance(expected, dict):
            if not _object(expected, actual):
                return False
        elif not any(_condition(c, actual) for c in expected):
            return False
    return True


def _condition(condition: Any, actual: Any) -> bool:
    if isinstance(condition, dict) and "exists" in condition:
        return (actual is not _MISSING) == condition["exists"]
    if actual is _MISSING:
        return False
    if isinstance(actual, list):  # array matching: any element
        return any(_leaf(condition, item) for item in actual)
    return _leaf(condition, actual)


def _same(a: Any, b: Any) -> bool:
    # JSON true is not the number 1 (Python's bool is an int): compare kinds first.
    return isinstance(a, bool) == isinstance(b, bool) and a == b and (a is None) == (b is None)


def _leaf(condition: Any, value: Any) -> bool:
    if not isinstance(condition, dict):
        return _same(condition, value)
    (operator, argument), = condition.items()
    if operator in ("prefix", "suffix", "contains"):
        if not isinstance(value, str):
            return False
        return {"prefix": value.startswith, "suffix": value.endswith,
                "contains": lambda s: s in value}[operator](argument)
    if operator == "anything-but":
        if isinstance(argument, dict):
            return isinstance(value, str) and not value.startswith(argument["prefix"])
        excluded = argument if isinstance(argument, list) else [argument]
        return not any(_same(e, value) for e in excluded)
    if operator == "numeric":
        if isinstance(value, bool) or not isinstance(value, numbers.Number):
            return False
        return all(_COMPARE[argument[i]](value, argument[i + 1]) for i in range(0, len(argument), 2))
    if operator == "cidr":
        try:
            return ipaddress.IPv4Address(value) in ipaddress.IPv4Network(argument, strict=False)
        except (ValueError, TypeError):
            return False
    return False
