"""The partition request of ``plan``, ``apply`` and ``install-boot-unit``: exactly one of ``--size V``,
``--sequence V``, ``--request-b64 B64`` or ``--request-file PATH``.

The last two carry the label as data, ``{"version": 1, "partition": {"kind": "size"|"sequence",
"value": "..."}, "destroy": false}`` (other keys ignored), so that only base64 text ever reaches a shell on
the way here. ``"destroy": false`` (absent: true) asks for "destroy nothing": apply then refuses, with
``destroy-required`` (exit 7) and before any change, a node that needs more than new instances.

Version 2 (auto pools, docs/auto-pools.md) names a layout per GPU instead of one label for every GPU:
``{"version": 2, "kind": "per-gpu", "gpus": [{"index": 0, "layout": [{"profile": "1g.10gb", "start": 0},
...]}], "destroy": true}``. A GPU not listed stays as it is; apply destroys only the instances of a listed
GPU that its layout leaves out, and leaves a GPU as it is when a process runs in one of those (it turned
busy since the plan was made) or its MIG mode is off.
"""

import base64
import binascii
import json
import typing
from typing import Any, Optional

from .errors import BadInput
from .outside import OutsideDataError, loads
from .mig import KIND_SEQUENCE, KIND_SIZE, PartitionSpec
from .mig.annotations import MAX_START

MAX_REQUEST_BYTES = 64 * 1024
_FORMS = "--size VALUE, --sequence VALUE, --request-b64 B64 or --request-file PATH"


MAX_GPUS = 16
KIND_PER_GPU = "per-gpu"
_V1_FORM = '{"version": 1, "partition": {"kind": "size" or "sequence", "value": "1g.10gb"}}'
_V2_FORM = ('{"version": 2, "kind": "per-gpu", "gpus": [{"index": 0, "layout": [{"profile": "1g.10gb", "start": 0}]}]}')


class GpuLayouts(typing.NamedTuple):
    """A version 2 request: per GPU index, the (profile name, start) pairs it should hold, by start."""

    gpus: typing.Tuple[typing.Tuple[int, typing.Tuple[typing.Tuple[str, int], ...]], ...]

    @property
    def kind(self):
        # type: () -> str
        return KIND_PER_GPU

    def layout_of(self, index):
        # type: (int) -> Optional[typing.Tuple[typing.Tuple[str, int], ...]]
        for i, pairs in self.gpus:
            if i == index:
                return pairs
        return None

    def to_dict(self):
        # type: () -> dict
        return {"kind": KIND_PER_GPU, "gpus": [{"index": i, "layout": [{"profile": p, "start": s} for p, s in pairs]}
                                               for i, pairs in self.gpus]}


class Request(typing.NamedTuple):
    spec: typing.Any  # a PartitionSpec (version 1) or GpuLayouts (version 2)
    destroy: bool = True  # False: only add instances; anything else is refused (destroy-required)


def spec_from_document(doc, where):
    # type: (Any, str) -> PartitionSpec
    return request_from_document(doc, where).spec


def request_from_document(doc, where):
    # type: (Any, str) -> Request
    if not isinstance(doc, dict):
        raise BadInput("%s must be a JSON object like {\"version\": 1, \"partition\": {\"kind\": \"sequence\", "
                       "\"value\": \"9-9\"}}" % where)
    if doc.get("version") == 2:
        return Request(_gpu_layouts(doc, where), _destroy(doc, where))
    if doc.get("version") != 1:
        raise BadInput("%s has version %r; versions 1 and 2 are understood" % (where, str(doc.get("version"))[:20]))
    partition = doc.get("partition")
    if not isinstance(partition, dict):
        raise BadInput("%s lacks a \"partition\" object with \"kind\" and \"value\"" % where)
    kind, value = partition.get("kind"), partition.get("value")
    if kind not in (KIND_SIZE, KIND_SEQUENCE):
        raise BadInput("%s partition.kind must be \"size\" or \"sequence\", got %r" % (where, str(kind)[:20]))
    if not isinstance(value, str):
        raise BadInput("%s partition.value must be a string such as \"1g.5gb\" or \"9-9\"" % where)
    return Request(PartitionSpec(kind, value), _destroy(doc, where))


def _destroy(doc, where):
    # type: (dict, str) -> bool
    destroy = doc.get("destroy", True)
    if not isinstance(destroy, bool):
        raise BadInput("%s \"destroy\" must be true or false (false: only add instances), got %r"
                       % (where, str(destroy)[:20]))
    return destroy


def _gpu_layouts(doc, where):
    # type: (dict, str) -> GpuLayouts
    """Shape only (names and starts are checked against the GPU's model by the planner)."""
    gpus = doc.get("gpus")
    if doc.get("kind") != KIND_PER_GPU or not isinstance(gpus, list) or not 0 < len(gpus) <= MAX_GPUS:
        raise BadInput("%s version 2 must be kind \"per-gpu\" with 1 to %d GPUs; the accepted form: %s"
                       % (where, MAX_GPUS, _V2_FORM))
    out, seen = [], set()
    for gpu in gpus:
        index = gpu.get("index") if isinstance(gpu, dict) else None
        layout = gpu.get("layout") if isinstance(gpu, dict) else None
        if type(index) is not int or not 0 <= index < MAX_GPUS or index in seen or not isinstance(layout, list) \
                or len(layout) > 8:
            raise BadInput("%s gpus[%d] needs a unique \"index\" 0 to %d and a \"layout\" list of at most 8 "
                           "instances; the accepted form: %s" % (where, len(out), MAX_GPUS - 1, _V2_FORM))
        pairs = []
        for inst in layout:
            profile = inst.get("profile") if isinstance(inst, dict) else None
            start = inst.get("start") if isinstance(inst, dict) else None
            # (the GPU model's placements are checked when the request meets the GPU: an RTX PRO 6000 places
            # 1g profiles at 9 on its 12 memory slots, so 8 slots is no bound)
            if not isinstance(profile, str) or not 0 < len(profile) <= 32 or type(start) is not int or \
                    not 0 <= start <= MAX_START:
                raise BadInput("%s GPU %d: each instance is {\"profile\": NAME, \"start\": 0 to %d}; the accepted "
                               "form: %s" % (where, index, MAX_START, _V2_FORM))
            pairs.append((profile, start))
        seen.add(index)
        out.append((index, tuple(sorted(pairs, key=lambda x: (x[1], x[0])))))
    return GpuLayouts(tuple(sorted(out)))


def _decode_json(data, where):
    # type: (bytes, str) -> Any
    try:  # the reader rule (node_bootstrap/outside.py): bounded, shallow, finite
        return loads(data, where, MAX_REQUEST_BYTES, max_depth=6)
    except OutsideDataError as exc:
        raise BadInput("%s; the accepted forms: %s or %s" % (exc if not exc.syntax else
                                                             "%s is not UTF-8 JSON" % where, _V1_FORM, _V2_FORM))


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
    from node_bootstrap.localfile import read_file

    try:  # a regular file only: a FIFO there held the boot apply until the runner's deadline killed it
        data = read_file(request_file, MAX_REQUEST_BYTES)
    except (IOError, OSError) as exc:
        raise BadInput("cannot read --request-file %s: %s" % (request_file, exc.strerror or exc))
    return request_from_document(_decode_json(data, "--request-file"), "--request-file")


def request_document(spec):
    # type: (PartitionSpec) -> str
    """The request file the boot unit re-applies (JSON; the label value stays data)."""
    if isinstance(spec, GpuLayouts):
        return json.dumps(dict(spec.to_dict(), version=2), sort_keys=True) + "\n"
    return json.dumps({"version": 1, "partition": spec.to_dict()}, sort_keys=True) + "\n"
