"""Which device kubelet gave to which pod: its device manager's checkpoint file, read without kubelet.

kubelet's device manager calls the device plugin's ``Allocate`` when it admits a pod (before the image is
pulled) and records every assignment in ``/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`` so
that it survives a kubelet restart. The format (kubernetes/kubernetes
``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go``, ``Data.MarshalCheckpoint``: Go's encoding/json
of)::

    {"Data": {"PodDeviceEntries": [{"PodUID": "<uid>", "ContainerName": "<name>",
                                    "ResourceName": "nvidia.com/mig-1g.10gb",
                                    "DeviceIDs": {"<NUMA node>": ["MIG-<uuid>", ...]},
                                    "AllocResp": "<base64>"}, ...],
              "RegisteredDevices": {"<resource>": ["<device id>", ...]}},
     "Checksum": <uint64>, "BootID": "<boot id>"}

``DeviceIDs`` is ``DevicesPerNUMA`` (``map[int64][]string``: Go writes the keys as decimal strings); kubelets
before 1.20 wrote a plain list (``checkpointv1``), read here too. A Go nil slice is written as ``null``.
``Checksum`` is an FNV-32a hash of the Go value as printed by go-spew (``checkpointmanager/checksum``): it
cannot be recomputed without Go's printer, so it is required to be an integer and not checked; the shape
of every field is, and anything else makes the allocations unknown.

NVIDIA's device plugin advertises a MIG device with its NVML UUID as the device ID ("MIG-<uuid>";
k8s-device-plugin ``internal/rm/devices.go``, ``BuildDevice``: ``dev.ID = uuid``), or with
``deviceIDStrategy=index`` its index "<gpu>:<mig index>"; shared (time-sliced) replicas add "::<n>"
(``NewAnnotatedID``), stripped here. An index is not trusted to name an instance (a change renumbers them;
``commands/holdings.gi_holders``).

Entries go lazily: kubelet drops the entries of pods that ended at its next allocation
(``ManagerImpl.UpdateAllocatedDevices``, called from ``Allocate``), and writes the file after that. So an
entry may name a pod that is gone; :func:`keep_live` drops those the API server says are gone or finished,
and without that answer every entry counts (an allocation is never taken for free on a guess).

Pure but for :func:`read_checkpoint` (one bounded file read). Python 3.6, standard library.
"""

import hashlib
import json
import re
import typing
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Tuple

from ..errors import one_line
from ..localfile import read_file
from ..outside import OutsideDataError, depth, json_type

DEFAULT_CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
# A node's file holds one entry per (pod, container, resource): a few KiB on a full node. Anything beyond
# this is not kubelet's: refused before it is parsed.
MAX_CHECKPOINT_BYTES = 4 * 1024 * 1024
MAX_CHECKPOINT_DEPTH = 8  # {"Data": {"PodDeviceEntries": [{"DeviceIDs": {"0": [...]}}]}} is 6 deep
MAX_ENTRIES = 20000
MAX_TEXT = 256  # a pod UID, container or resource name, device ID

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # a static pod's mirror: its value is the kubelet's pod UID
FINISHED = ("Succeeded", "Failed")

_NUMA_KEY = re.compile(r"^-?[0-9]{1,19}\Z")


class CheckpointError(ValueError):
    """The checkpoint cannot be read as kubelet's: one line saying why."""


class Entry(typing.NamedTuple):
    pod_uid: str
    container: str
    resource: str
    device_id: str  # the replica suffix "::<n>" removed


class Allocations(typing.NamedTuple):
    """What kubelet has allocated on this node. ``known`` False: nothing can be said (``why``), and every
    instance counts as possibly allocated."""

    known: bool
    why: str = ""
    entries: Tuple[Entry, ...] = ()
    dropped: Tuple[str, ...] = ()  # pod UIDs left out because the API server says they are gone

    @property
    def pods(self):
        # type: () -> FrozenSet[str]
        return frozenset(e.pod_uid for e in self.entries)

    def holders(self, device_id):
        # type: (str) -> Tuple[str, ...]
        return tuple(sorted(set(e.pod_uid for e in self.entries if e.device_id == device_id)))

    def by_device(self):
        # type: () -> Dict[str, Tuple[str, ...]]
        out = {}  # type: Dict[str, set]
        for e in self.entries:
            out.setdefault(e.device_id, set()).add(e.pod_uid)
        return dict((k, tuple(sorted(v))) for k, v in out.items())


def unknown(why):
    # type: (str) -> Allocations
    return Allocations(False, one_line(why, 300))


def _no_constant(name):
    # type: (str) -> Any
    raise CheckpointError("holds %s, which kubelet never writes" % name)


def _no_float(text):
    # type: (str) -> Any
    raise CheckpointError("holds the number %s where kubelet writes only integers" % text[:20])


def _bounded_int(text):
    # type: (str) -> int
    if len(text.lstrip("-")) > 20:
        raise CheckpointError("holds a %d-digit number; kubelet's are at most 20 digits" % len(text))
    return int(text)


def _text(value, what):
    # type: (Any, str) -> str
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise CheckpointError("%s is not a string of at most %d characters" % (what, MAX_TEXT))
    return value


def _device_ids(value, n):
    # type: (Any, int) -> List[str]
    """DeviceIDs: {"<NUMA node>": [ids] or null} (DevicesPerNUMA), or a list (kubelet before 1.20)."""
    what = "PodDeviceEntries[%d].DeviceIDs" % n
    if value is None:
        return []
    if isinstance(value, list):
        lists = [value]
    elif isinstance(value, dict):
        for key in value:
            if not _NUMA_KEY.match(key):
                raise CheckpointError("%s has the key %r, not a NUMA node number" % (what, key[:20]))
        lists = [v for v in value.values() if v is not None]
    else:
        raise CheckpointError("%s is neither a map of NUMA node to IDs nor a list" % what)
    out = []
    for ids in lists:
        if not isinstance(ids, list):
            raise CheckpointError("%s holds something other than a list of device IDs" % what)
        for device in ids:
            out.append(_text(device, what + " item").split("::", 1)[0])
    return out


def parse_checkpoint(data):
    # type: (bytes) -> List[Entry]
    """Every (pod, container, resource, device) the checkpoint records, or CheckpointError saying why not."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise CheckpointError("is %d bytes, more than the %d a kubelet checkpoint may be"
                              % (len(data), MAX_CHECKPOINT_BYTES))
    try:  # the reader rule (node_bootstrap/outside.py) with kubelet's own number rules: a uint64 checksum
        text = data.decode("utf-8")
        if depth(text, MAX_CHECKPOINT_DEPTH) > MAX_CHECKPOINT_DEPTH:
            raise CheckpointError("is nested more than %d levels deep, which kubelet never writes" % MAX_CHECKPOINT_DEPTH)
        doc = json.loads(text, parse_constant=_no_constant, parse_float=_no_float, parse_int=_bounded_int)
    except CheckpointError:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CheckpointError("is not JSON (%s)" % one_line(exc, 100))
    if not isinstance(doc, dict) or not isinstance(doc.get("Data"), dict):
        raise CheckpointError('has no "Data" object')
    checksum = doc.get("Checksum")
    if isinstance(checksum, bool) or not isinstance(checksum, int) or not 0 <= checksum < 2 ** 64:
        raise CheckpointError('has no unsigned 64-bit "Checksum"')
    entries = doc["Data"].get("PodDeviceEntries")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise CheckpointError('"PodDeviceEntries" is not a list')
    if len(entries) > MAX_ENTRIES:
        raise CheckpointError("has %d entries, more than %d" % (len(entries), MAX_ENTRIES))
    out = []  # type: List[Entry]
    for n, item in enumerate(entries):
        if not isinstance(item, dict):
            raise CheckpointError("PodDeviceEntries[%d] is not an object" % n)
        uid = _text(item.get("PodUID"), "PodDeviceEntries[%d].PodUID" % n)
        if not uid:
            raise CheckpointError("PodDeviceEntries[%d] has an empty PodUID" % n)
        container = _text(item.get("ContainerName", ""), "PodDeviceEntries[%d].ContainerName" % n)
        resource = _text(item.get("ResourceName", ""), "PodDeviceEntries[%d].ResourceName" % n)
        for device in _device_ids(item.get("DeviceIDs"), n):
            out.append(Entry(uid, container, resource, device))
    return out


def read_checkpoint(path):
    # type: (str) -> Allocations
    """The allocations in the file at ``path``; unknown (with the reason) when it is missing, unreadable,
    too large or not kubelet's format. Never raises."""
    try:
        data = read_file(path, MAX_CHECKPOINT_BYTES)  # a FIFO or a device: refused at once, never waited on
    except (IOError, OSError) as exc:
        return unknown("kubelet's device checkpoint %s cannot be read (%s)" % (path, exc.strerror or exc))
    try:
        return Allocations(True, entries=tuple(parse_checkpoint(data)))
    except CheckpointError as exc:
        return unknown("kubelet's device checkpoint %s %s" % (path, exc))


def checkpoint_signature(path):
    # type: (str) -> str
    """What the checkpoint at ``path`` holds now, as one short string: the SHA-256 of its bytes, or why it
    cannot be read. Equal signatures mean the same allocations (kubelet replaces the whole file at every
    write: a temporary file renamed over it). Never raises."""
    try:
        data = read_file(path, MAX_CHECKPOINT_BYTES)  # a FIFO or a device: refused at once, never waited on
    except (IOError, OSError) as exc:
        return "unreadable: %s" % (exc.strerror or exc.__class__.__name__)
    return "sha256:" + hashlib.sha256(data).hexdigest()


def live_uids(pods):
    # type: (Iterable[Dict[str, Any]]) -> FrozenSet[str]
    """The kubelet pod UIDs of the pods that have not finished: each pod's own UID, and for a static pod's
    mirror the UID kubelet knows it by (the mirror annotation; the mirror's own UID is the API server's).
    OutsideDataError naming the pod and its field when a pod has another shape (a proxy or webhook in front
    of the API server): which pods live cannot then be told, so none of the list is read."""
    out = set()
    for number, pod in enumerate(pods):
        if not isinstance(pod, dict):
            raise OutsideDataError("pod number %d of the list is %s, not an object" % (number + 1, json_type(pod)))
        meta = pod.get("metadata")
        for field, value in (("metadata", meta), ("status", pod.get("status")),
                             ("metadata.annotations", meta.get("annotations") if isinstance(meta, dict) else None)):
            if not isinstance(value, (dict, type(None))):
                raise OutsideDataError("pod %s: its %s is %s, not an object" % (_pod_name(meta, number), field,
                                                                               json_type(value)))
        if (pod.get("status") or {}).get("phase") in FINISHED:
            continue
        for value in ((meta or {}).get("uid"), ((meta or {}).get("annotations") or {}).get(MIRROR_ANNOTATION)):
            if isinstance(value, str) and value:
                out.add(value)
    return frozenset(out)


def _pod_name(meta, number):
    # type: (Any, int) -> str
    """``<namespace>/<name>`` of a pod as listed, clipped; its place in the list when they are not text."""
    if isinstance(meta, dict) and isinstance(meta.get("name"), str) and isinstance(meta.get("namespace"), str):
        return one_line("%s/%s" % (meta["namespace"], meta["name"]), 160)
    return "number %d of the list" % (number + 1)


def keep_live(allocations, alive):
    # type: (Allocations, Optional[FrozenSet[str]]) -> Allocations
    """Drop the entries of pods ``alive`` (the node's pods listed AFTER the checkpoint was read, so every
    pod the file names existed before the listing) does not hold. ``alive`` None: the API server did not
    answer, every entry stands."""
    if not allocations.known or alive is None:
        return allocations
    gone = tuple(sorted(set(e.pod_uid for e in allocations.entries if e.pod_uid not in alive)))
    if not gone:
        return allocations
    return allocations._replace(entries=tuple(e for e in allocations.entries if e.pod_uid in alive), dropped=gone)

