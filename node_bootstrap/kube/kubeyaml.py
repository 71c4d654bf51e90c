"""Just enough YAML to read a kubeconfig with the standard library (the node has no PyYAML).

Kubeconfigs written by kubeadm, kubectl and ACK are block YAML: mappings, sequences of mappings (with
the ``- key: value`` form, at the parent's indentation or deeper), plain and quoted scalars, ``{}`` and
``[]``, and comments. That subset is what this reads; JSON (a YAML subset too) is read with ``json``.
Anything else raises ValueError with the line number, rather than being guessed at.

Nesting is bounded BEFORE parsing (:data:`MAX_DEPTH` levels, from the indentation of block YAML or the
brackets of JSON): the readers recurse, and a document nested 2,000 deep must be one ValueError, not a
RecursionError. A kubeconfig is 5 levels deep.
"""

import json
import re
from typing import Any, List, Tuple

_Line = Tuple[int, str, int]  # indentation, text, 1-based line number

# Plain integers as YAML 1.1 resolves them (PyYAML's int resolver; go-yaml's ParseInt(s, 0) reads these
# the same): decimal without a leading zero, or octal with one. Other runs of digits (08, 09, 0189) are no
# int in YAML 1.1: PyYAML loads them, and writes them unquoted, as text, so they are text here too (a
# kubeconfig value is a string unless YAML makes it something else). Underscores, 0x, 0b and base 60 are
# not read as numbers: no kubeconfig field is one.
_DECIMAL = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)\Z")
_OCTAL = re.compile(r"^[-+]?0[0-7]+\Z")
MAX_DEPTH = 32
# A JSON string (escapes included) or a bracket: what the JSON depth check looks at.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _json_depth(text):
    # type: (str) -> None
    """Refuse JSON nested deeper than MAX_DEPTH (brackets inside strings do not count)."""
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group(0)
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError("nested deeper than %d levels (a kubeconfig needs 5)" % MAX_DEPTH)
        elif token in "]}":
            depth -= 1


def _block_depth(lines):
    # type: (List[_Line]) -> None
    """Refuse block YAML nested deeper than MAX_DEPTH: each deeper indentation opens a level (a sequence at its
    key's indentation adds one more, so the parser's depth is at most twice this)."""
    open_levels = []  # type: List[int]
    for indent, _text, number in lines:
        while open_levels and open_levels[-1] > indent:
            open_levels.pop()
        if not open_levels or open_levels[-1] < indent:
            open_levels.append(indent)
            if len(open_levels) > MAX_DEPTH:
                raise ValueError("line %d: nested deeper than %d levels (a kubeconfig needs 5)" % (number, MAX_DEPTH))


def _strip_comment(text):
    # type: (str) -> str
    """Drop a trailing ``# comment`` that is outside quotes."""
    quote = None
    for pos, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (pos == 0 or text[pos - 1] in " \t"):
            return text[:pos].rstrip()
    return text.rstrip()


def _lines(text):
    # type: (str) -> List[_Line]
    out = []  # type: List[_Line]
    for number, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[:len(raw) - len(raw.lstrip())]:
            raise ValueError("line %d: tabs are not allowed in YAML indentation" % number)
        indent = len(raw) - len(raw.lstrip(" "))
        content = _strip_comment(raw[indent:]).strip()  # the indentation is not scanned char by char
        if not content or content in ("---", "..."):
            continue
        out.append((indent, content, number))
    return out


def _scalar(text, number):
    # type: (str, int) -> Any
    if text.startswith('"'):
        if not text.endswith('"') or len(text) < 2:
            raise ValueError("line %d: unterminated double-quoted string" % number)
        return json.loads(text)  # YAML double-quoted escapes are a superset of JSON's common ones
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise ValueError("line %d: unterminated single-quoted string" % number)
        return text[1:-1].replace("''", "'")
    if text == "{}":
        return {}
    if text == "[]":
        return []
    if text[:1] in "{[|>&*!":
        raise ValueError("line %d: YAML form %s not supported here; use block style ('key: value', '- item')"
                         % (number, text[:1]))
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if _DECIMAL.match(text):
        return int(text)
    if _OCTAL.match(text):
        return int(text, 8)
    return text


def _split_key(text, number):
    # type: (str, int) -> Tuple[str, str]
    if text.startswith(('"', "'")):
        quote = text[0]
        end = text.find(quote, 1)
        if end < 0 or text[end + 1:end + 2] != ":":
            raise ValueError("line %d: bad quoted key" % number)
        return text[1:end], text[end + 2:].strip()
    pos = text.find(": ")
    if pos < 0:
        if text.endswith(":"):
            return text[:-1].strip(), ""
        # never the line's text: in a kubeconfig it may be a token or a key's data (a wrapped paste)
        raise ValueError("line %d: expected 'key: value' (a value goes on its key's line)" % number)
    return text[:pos].strip(), text[pos + 2:].strip()


def _block(lines, index, indent):
    # type: (List[_Line], int, int) -> Tuple[Any, int]
    if lines[index][1] == "-" or lines[index][1].startswith("- "):
        return _sequence(lines, index, indent)
    return _mapping(lines, index, indent)


def _sequence(lines, index, indent):
    # type: (List[_Line], int, int) -> Tuple[Any, int]
    items = []  # type: List[Any]
    while index < len(lines):
        ind, text, number = lines[index]
        if ind < indent:
            break
        if ind > indent:
            raise ValueError("line %d: unexpected indentation" % number)
        if not (text == "-" or text.startswith("- ")):
            break
        rest = text[1:].lstrip()
        if not rest:
            if index + 1 < len(lines) and lines[index + 1][0] > indent:
                value, index = _block(lines, index + 1, lines[index + 1][0])
            else:
                value, index = None, index + 1
            items.append(value)
            continue
        inner = ind + (len(text) - len(rest))
        if _is_mapping_item(rest):
            # "- key: value": the item is a mapping whose keys sit at the column of "key".
            lines[index] = (inner, rest, number)
            value, index = _mapping(lines, index, inner)
        else:
            value, index = _scalar(rest, number), index + 1
        items.append(value)
    return items, index


def _is_mapping_item(text):
    # type: (str) -> bool
    if text.startswith(('"', "'")):
        quote = text[0]
        end = text.find(quote, 1)
        return end > 0 and text[end + 1:end + 2] == ":"
    return ": " in text or text.endswith(":")


def _mapping(lines, index, indent):
    # type: (List[_Line], int, int) -> Tuple[Any, int]
    result = {}  # type: dict
    while index < len(lines):
        ind, text, number = lines[index]
        if ind < indent:
            break
        if ind > indent:
            raise ValueError("line %d: unexpected indentation" % number)
        if text == "-" or text.startswith("- "):
            break
        key, rest = _split_key(text, number)
        index += 1
        if rest:
            try:
                result[key] = _scalar(rest, number)
            except ValueError as exc:  # name the key: "line 6: contexts: this YAML form ([) ..."
                raise ValueError(str(exc).replace("line %d: " % number, "line %d: %s: " % (number, key[:40]), 1))
            continue
        if index < len(lines):
            nxt_ind, nxt_text = lines[index][0], lines[index][1]
            # A sequence may sit at the key's own indentation ("clusters:\n- cluster: ...").
            if nxt_ind > indent or (nxt_ind == indent and (nxt_text == "-" or nxt_text.startswith("- "))):
                result[key], index = _block(lines, index, nxt_ind)
                continue
        result[key] = None
    return result, index


def loads(text):
    # type: (str) -> Any
    """Parse a kubeconfig document (block YAML subset or JSON)."""
    stripped = text.strip()
    if stripped.startswith("{"):
        _json_depth(stripped)
        return json.loads(stripped)
    lines = _lines(text)
    if not lines:
        return None
    _block_depth(lines)
    value, index = _block(lines, 0, lines[0][0])
    if index != len(lines):
        raise ValueError("line %d: unexpected content (its indentation fits no key above it)" % lines[index][2])
    return value
