"""The one reader rule for data from outside the process (docs/security.md, "The reader rule").

Everything that arrives from elsewhere (annotations, labels, Lease slots, rollout records, a node's output,
event payloads, API answers, kubeconfig and inventory files, webhook answers) is read through here or
through the same checks:

* size is bounded before anything is parsed (``max_bytes``);
* nesting is bounded before anything is parsed (``max_depth``): Python's decoder recurses, and ``'[' *
  100000`` would otherwise end in RecursionError, which most ``except ValueError`` clauses miss;
* ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow a float (``1e400`` parses as infinity,
  and ``int(inf)`` raises OverflowError) are refused, and so are integers of more than 18 digits: no field
  of ours needs one, and Python 3.6 would happily build a 10**100000;
* every failure is one :class:`OutsideDataError` (a ValueError) with a one-line reason naming what was
  read; callers turn it into that one item's refusal and go on with the others.

:func:`number` and :func:`whole` check a field's value against its own range after parsing; :func:`as_object`,
:func:`as_list` and :func:`objects` read a part of another shape than expected as absent. Standard library
only: the node imports this too (Python 3.6).
"""

import json
import math
import re
from typing import Any, Dict, List, Optional, Union

DEFAULT_MAX_BYTES = 1 << 20
MAX_DEPTH = 32  # the deepest document of ours (an event envelope around its payload) nests under 10
MAX_INT_DIGITS = 18  # |n| < 10**18: inside int64, more than any count, size or time of ours
# The latest wall-clock time (2100-01-01) a record of ours may name, or a clock it is written on may say: a time
# beyond it is not one this hook wrote.
MAX_EPOCH = 4102444800.0

# A JSON string (the unrolled form runs in linear time); brackets inside one are not nesting.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


_DIGITS = re.compile(r"[0-9]{1,%d}\Z" % MAX_INT_DIGITS)


def digits(text):
    # type: (Any) -> Optional[int]
    """The whole number ``text`` spells in ASCII digits, at most MAX_INT_DIGITS of them; None for anything else
    (another type, a sign, a blank, a longer number). ``str.isdigit`` admits other scripts' digits, and ``int``
    of 5,000 digits raises ValueError (Python's limit) where a caller expects a count or nothing."""
    return int(text) if isinstance(text, str) and _DIGITS.match(text) else None


_ALL_DIGITS = re.compile(r"[0-9]+\Z")


def delay_seconds(text, cap):
    # type: (Any, float) -> Optional[float]
    """An HTTP ``Retry-After`` as delay-seconds (RFC 9110 section 10.2.3: ``1*DIGIT``, ASCII), at most ``cap``
    (the caller's longest wait: its own bound or its deadline); None for anything else (an HTTP-date, "inf",
    "+3": the caller's backoff). Digits of any length are a wait: more than MAX_INT_DIGITS of them is longer
    than any cap, not "none" (that retried at once against the server's ask). The one reader of every client's
    Retry-After."""
    value = text.strip(" \t") if isinstance(text, str) else ""
    if not _ALL_DIGITS.match(value):
        return None
    return min(float(int(value)) if len(value) <= MAX_INT_DIGITS else math.inf, cap)


class OutsideDataError(ValueError):
    """Data from outside the process that this reader refuses; the message is one line and says why.
    ``syntax``: the text is not JSON at all (a reader may then try another encoding of the same data);
    False when it is JSON that breaks the rule (too big, too deep, a number out of range, a wrong shape)."""

    def __init__(self, message, syntax=False):
        # type: (str, bool) -> None
        super(OutsideDataError, self).__init__(message)
        self.syntax = syntax


def _refuse_constant(name):
    # type: (str) -> Any
    raise OutsideDataError("%s is not a number JSON allows" % name)


def _float(text):
    # type: (str) -> float
    value = float(text)
    if math.isinf(value) or math.isnan(value):
        raise OutsideDataError("number %s is out of range" % text[:24])
    return value


def _int(text):
    # type: (str) -> int
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise OutsideDataError("integer of %d digits is out of range" % len(text.lstrip("-")))
    return int(text)


def _scan(brackets, limit):
    # type: (str, int) -> int
    """The nesting of a string of brackets, one by one (the exact count, for what :func:`depth` cannot pair)."""
    level = deepest = 0
    for char in brackets:
        if char in "[{":
            level += 1
            if level > deepest:
                deepest = level
                if deepest > limit:
                    return deepest
        else:
            level -= 1
    return deepest


def depth(text, limit=MAX_DEPTH):
    # type: (str, int) -> int
    """How deeply ``text`` nests its arrays and objects, counted without parsing; counting stops once it
    passes ``limit`` (the answer is then more than ``limit``). Strings are dropped first (a bracket inside one
    is text), then every other character; each pass then removes the innermost empty pairs, in C, so a
    document costs one pass per level. Brackets that do not pair (JSON the parser will refuse anyway) are
    counted one by one, on top of the levels already removed: never less than the truth."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    level = 0
    while brackets:
        # marked first, removed after: "{[]}" loses one level a pass ("{}"), not two
        shorter = brackets.replace("[]", "\0").replace("{}", "\0").replace("\0", "")
        if len(shorter) == len(brackets):
            return level + _scan(brackets, limit - level)
        level += 1
        if level > limit:
            return level
        brackets = shorter
    return level


def _unique(pairs):
    # type: (List[Any]) -> Dict[str, Any]
    """An object's members, refused when a name comes twice: the decoder would keep the last value and say
    nothing, where another reader of the same text (a person, a filter) may take the first."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()  # type: set
        twice = next(name for name, _ in pairs if name in seen or seen.add(name))
        raise OutsideDataError("the field %r appears twice (each field at most once)" % twice[:40])
    return obj


def loads(data, what, max_bytes=DEFAULT_MAX_BYTES, max_depth=MAX_DEPTH, unique_keys=False):
    # type: (Union[str, bytes], str, int, int, bool) -> Any
    """``data`` (text or UTF-8 bytes) as JSON under the rule above; OutsideDataError naming ``what``.
    ``unique_keys``: an object that names a field twice is refused too (what a person or another service
    wrote, where the two readings must not differ: an event)."""
    if data is None:
        raise OutsideDataError("%s is empty" % what)
    if len(data) > max_bytes:
        raise OutsideDataError("%s is larger than %d bytes" % (what, max_bytes))
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise OutsideDataError("%s is not UTF-8" % what)
    if not isinstance(data, str):
        raise OutsideDataError("%s is not text" % what)
    if depth(data, max_depth) > max_depth:
        raise OutsideDataError("%s is nested too deeply (more than %d levels)" % (what, max_depth))
    try:
        value = json.loads(data, parse_constant=_refuse_constant, parse_float=_float, parse_int=_int,
                           object_pairs_hook=_unique if unique_keys else None)
        if _SURROGATE_ESCAPE.search(data):
            _whole_text(value)
        return value
    except OutsideDataError as exc:
        raise OutsideDataError("%s: %s" % (what, exc))
    except RecursionError:  # the count above makes this unreachable; kept so no reader ever sees one
        raise OutsideDataError("%s is nested too deeply" % what)
    except ValueError as exc:
        # json's own messages can end in "at" ("Invalid control character at"): one "at" is enough.
        msg = getattr(exc, "msg", "") or "invalid JSON"
        msg = msg[:-3] if msg.endswith(" at") else msg
        where = " at line %d column %d" % (exc.lineno, exc.colno) if hasattr(exc, "lineno") else ""
        raise OutsideDataError("%s is not JSON (%s%s)" % (what, msg[:80], where), syntax=True)


# A \uD800-\uDFFF escape: JSON may write half of a UTF-16 pair alone, which is no text (it cannot be written
# as UTF-8: a log line or a result holding it fails to encode). Go's encoder never writes one alone.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _whole_text(value):
    # type: (Any) -> None
    """OutsideDataError when a string of ``value`` (keys too) holds a lone surrogate."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise OutsideDataError("a string holds a \\u escape of half a UTF-16 pair (a lone surrogate), which is "
                               "not text")


def _show(value):
    # type: (Any) -> str
    """A short form of a number for a message (``str`` of a huge int raises ValueError on Python 3.11)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** MAX_INT_DIGITS:
        return "(a %d-bit integer)" % value.bit_length()
    return str(value)[:24]


def number(value, what, low, high, default=None):
    # type: (Any, str, float, float, Optional[float]) -> float
    """A finite number in ``[low, high]`` (an int or a float; never a bool, a string or None, unless
    ``default`` stands for None)."""
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OutsideDataError("%s is %s, not a number" % (what, json_type(value)))
    try:
        result = float(value)
    except OverflowError:
        raise OutsideDataError("%s is out of range" % what)
    if math.isnan(result) or not low <= result <= high:
        raise OutsideDataError("%s %s is outside %g to %g" % (what, _show(value), low, high))
    return result


def whole(value, what, low, high, default=None):
    # type: (Any, str, int, int, Optional[int]) -> int
    """An integer in ``[low, high]``; a float only when it is whole (JSON writers may say ``2.0``)."""
    if value is None and default is not None:
        return default
    if isinstance(value, float) and not isinstance(value, bool):
        if math.isnan(value) or math.isinf(value) or value != int(value):
            raise OutsideDataError("%s %s is not a whole number" % (what, _show(value)))
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise OutsideDataError("%s is %s, not a whole number" % (what, json_type(value)))
    if not low <= value <= high:
        raise OutsideDataError("%s %s is outside %d to %d" % (what, _show(value), low, high))
    return value


def as_object(value):
    # type: (Any) -> Dict[str, Any]
    """``value`` when it is a JSON object, else {}: a part of another type reads as absent."""
    return value if isinstance(value, dict) else {}


def as_list(value):
    # type: (Any) -> List[Any]
    """``value`` when it is a JSON list, else []."""
    return value if isinstance(value, list) else []


def json_type(value):
    # type: (Any) -> str
    """A decoded JSON value's type in words, for a one-line refusal: the one wording of every reader of an
    answer (the node's, the ACK and ROS answers', the Kubernetes objects' shapes) and of every file a person
    wrote (a kubeconfig, an inventory snapshot, a mig-parted config: YAML adds dates and sets, "a date")."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    for kind, words in ((dict, "an object"), (list, "a list"), (str, "text"), (type(None), "null")):
        if isinstance(value, kind):
            return words
    return "a %s" % type(value).__name__


def list_items(answer, what):
    # type: (Any, str) -> List[Dict[str, Any]]
    """The items of a Kubernetes list answer (``what``: "pod list"); no ``items`` is an empty list. An answer
    of another shape (a JSON list, a number, ``items`` that is no list or holds anything but objects: what a
    proxy or webhook in front of the API server may send) is one OutsideDataError: an item left out would be
    a pod a caller never sees, so none of the list is read."""
    items = answer.get("items") if isinstance(answer, dict) else None
    if not isinstance(answer, dict):
        problem = "the answer is %s" % json_type(answer)
    elif not isinstance(items, (list, type(None))):
        problem = "its items is %s" % json_type(items)
    else:
        odd = [item for item in items or [] if not isinstance(item, dict)]
        if not odd:
            return list(items or [])
        problem = "an item is %s" % json_type(odd[0])
    raise OutsideDataError("the API server's answer is no %s (an object whose items are objects): %s"
                           % (what, problem))


def objects(value):
    # type: (Any) -> List[Dict[str, Any]]
    """The objects of a JSON list (its items of other types read as absent); [] when it is no list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
