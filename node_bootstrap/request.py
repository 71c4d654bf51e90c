"""The partition request of ``plan``, ``apply`` and ``install-boot-unit``: exactly one of ``--size V``,
``--sequence V``, ``--request-b64 B64`` or ``--request-file PATH``.

The last two carry the label as data, ``{"version": 1, "partition": {"kind": "size"|"sequence",
"value": "..."}, "destroy": false}`` (other keys ignored), so that only base64 text ever reaches a shell on
the way here. ``"destroy": false`` (absent: true) asks for "destroy nothing": apply then refuses, with
``destroy-required`` (exit 7) and before any change, a node that needs more than new instances.
"""

import base64
import binascii
import json
import typing
from typing import Any, Optional

from .errors import BadInput
from .mig import KIND_SEQUENCE, KIND_SIZE, PartitionSpec

MAX_REQUEST_BYTES = 64 * 1024
_FORMS = "--size VALUE, --sequence VALUE, --request-b64 B64 or --request-file PATH"


class Request(typing.NamedTuple):
    spec: PartitionSpec
    destroy: bool = True  # False: only add instances; anything else is refused (destroy-required)


def spec_from_document(doc, where):
    # type: (Any, str) -> PartitionSpec
    return request_from_document(doc, where).spec


def request_from_document(doc, where):
    # type: (Any, str) -> Request
    if not isinstance(doc, dict):
        raise BadInput("%s must be a JSON object like {\"version\": 1, \"partition\": {\"kind\": \"sequence\", "
                       "\"value\": \"9-9\"}}" % where)
    if doc.get("version") != 1:
        raise BadInput("%s has version %r; only version 1 is understood" % (where, doc.get("version")))
    partition = doc.get("partition")
    if not isinstance(partition, dict):
        raise BadInput("%s lacks a \"partition\" object with \"kind\" and \"value\"" % where)
    kind, value = partition.get("kind"), partition.get("value")
    if kind not in (KIND_SIZE, KIND_SEQUENCE):
        raise BadInput("%s partition.kind must be \"size\" or \"sequence\", got %r" % (where, str(kind)[:20]))
    if not isinstance(value, str):
        raise BadInput("%s partition.value must be a string such as \"1g.5gb\" or \"9-9\"" % where)
    destroy = doc.get("destroy", True)
    if not isinstance(destroy, bool):
        raise BadInput("%s \"destroy\" must be true or false (false: only add instances), got %r"
                       % (where, str(destroy)[:20]))
    return Request(PartitionSpec(kind, value), destroy)


def _decode_json(data, where):
    # type: (bytes, str) -> Any
    if len(data) > MAX_REQUEST_BYTES:
        raise BadInput("%s is larger than %d bytes" % (where, MAX_REQUEST_BYTES))
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadInput("%s is not UTF-8 JSON" % where)


def spec_from_options(size=None, sequence=None, request_b64=None, request_file=None):
    # type: (Optional[str], Optional[str], Optional[str], Optional[str]) -> PartitionSpec
    return request_from_options(size, sequence, request_b64, request_file).spec


def request_from_options(size=None, sequence=None, request_b64=None, request_file=None):
    # type: (Optional[str], Optional[str], Optional[str], Optional[str]) -> Request
    given = [x for x in (size, sequence, request_b64, request_file) if x is not None]
    if len(given) != 1:
        raise BadInput("give exactly one of %s" % _FORMS)
    if size is not None:
        return Request(PartitionSpec(KIND_SIZE, size))
    if sequence is not None:
        return Request(PartitionSpec(KIND_SEQUENCE, sequence))
    if request_b64 is not None:
        try:
            data = base64.b64decode(request_b64.strip().encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise BadInput("--request-b64 is not valid base64 (alphabet A-Z a-z 0-9 + / =)")
        return request_from_document(_decode_json(data, "--request-b64"), "--request-b64")
    assert request_file is not None
    try:
        with open(request_file, "rb") as fh:
            data = fh.read(MAX_REQUEST_BYTES + 1)
    except (IOError, OSError) as exc:
        raise BadInput("cannot read --request-file %s: %s" % (request_file, exc.strerror or exc))
    return request_from_document(_decode_json(data, "--request-file"), "--request-file")


def request_document(spec):
    # type: (PartitionSpec) -> str
    """The request file the boot unit re-applies (JSON; the label value stays data)."""
    return json.dumps({"version": 1, "partition": spec.to_dict()}, sort_keys=True) + "\n"
