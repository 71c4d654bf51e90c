"""Which pod holds which MIG instance on this node: kubelet's allocations matched to NVML's MIG devices.

The per-GPU request (version 2) never destroys an instance kubelet allocated to a pod that exists, process
or not (:func:`gi_holders`, used by :func:`planner.plan_gpu_layout`); and the node reports each instance's
holder in the annotation ``ack-mig-hook/gpu-holders`` (:func:`report_value`), which an auto pool's planner
reads instead of guessing (functions/kube/supply.py).

The report::

    {"at": "2026-05-01T10:00:00Z", "pods": ["<uid>", ...],
     "gpus": {"0": [["1g.10gb", 0, "<uid>"], ["1g.10gb", 1, null], ...], "1": null}}

``pods``: every pod UID kubelet's checkpoint names (after dropping pods the API server says are gone): the
pods the report covers. Each GPU lists its instances (profile, start) with the holder's UID or null; a GPU
whose MIG devices could not be read is null (nothing said about it). When the allocations are unknown the
report is ``{"at": ..., "unknown": "<why>"}``. At most MAX_REPORT_PODS pods (else unknown), and at most
MAX_REPORT_CHARS (32 KiB) in all: pod UIDs need not be UUIDs (a static pod's manifest may set any uid), so
when the pods do not fit, ``pods`` keeps the instances' holders and what fits after them, and
``"pods_left_out": N`` counts the others (:func:`_bounded`).
"""

import argparse
import json
import os
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..driver.live import LiveGpu, effective_model
from ..errors import one_line
from ..kube.allocations import DEFAULT_CHECKPOINT, Allocations, keep_live, live_uids, read_checkpoint, unknown
from ..outside import OutsideDataError, loads
from .simhost import host_root, under

MAX_REPORT_PODS = 512
MAX_REPORT_CHARS = 32 * 1024
MAX_READ_CHARS = 64 * 1024  # what the planner reads too (functions/kube/supply.py MAX_HOLDERS_CHARS)
# ``report-holders --min-interval``: no new round starts this long after the first one began. A checkpoint
# that keeps changing is then left to the next trigger (the path unit re-arms when the run ends).
FOLLOW_BUDGET_S = 120.0


def gi_holders(gpu, allocations):
    # type: (LiveGpu, Allocations) -> Tuple[Optional[Dict[int, Tuple[str, ...]]], str]
    """({GPU instance id: pod UIDs} for the instances kubelet allocated, ""), or (None, why) when that
    cannot be known: the allocations are unknown, or NVML would not list the GPU's MIG devices."""
    if not allocations.known:
        return None, allocations.why
    if gpu.mig_devices_unreadable:
        return None, "GPU %d: %s" % (gpu.index, gpu.mig_devices_unreadable)
    by_device = allocations.by_device()
    # The device plugin's two ID strategies: the UUID (default), or "<gpu index>:<MIG device index>". NVML
    # numbers a GPU's MIG devices in order, so destroying or creating an instance renumbers the ones after it,
    # while kubelet keeps the ID it recorded at allocation: an index names the pod's instance only if nothing
    # changed on the GPU since, which no one records. So an index ID makes the GPU's holders unknown (nothing
    # destroyed there) rather than give the pod's holding to whichever instance has that number now.
    prefix = "%d:" % gpu.index
    indexed = sorted(d for d in by_device if d.startswith(prefix) and d[len(prefix):].isdigit())
    if indexed:
        return None, ("GPU %d: kubelet names its MIG devices by index (%s: deviceIDStrategy=index), which a "
                      "change to the GPU's instances renumbers; use the device plugin's default, uuid"
                      % (gpu.index, indexed[0]))
    found = {}  # type: Dict[int, set]
    for device in gpu.mig_devices:
        pods = set(by_device.get(device.uuid, ()))
        if pods:
            found.setdefault(device.gi, set()).update(pods)
    return dict((gi, tuple(sorted(p))) for gi, p in found.items()), ""


def _stamp(now):
    # type: (float) -> str
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def report_value(gpus, allocations, now=None, unreadable=()):
    # type: (Sequence[LiveGpu], Allocations, Optional[float], Iterable[int]) -> str
    """The annotation's value (compact JSON) for what ``gpus`` hold now; the GPUs ``unreadable`` names (lost
    after a failed apply) are null, as a GPU whose MIG devices cannot be read: nothing said about them."""
    at = _stamp(time.time() if now is None else now)
    if not allocations.known:
        return json.dumps({"at": at, "unknown": allocations.why}, sort_keys=True, separators=(",", ":"))
    pods = sorted(allocations.pods)
    if len(pods) > MAX_REPORT_PODS:
        return json.dumps({"at": at, "unknown": "kubelet names %d pods, more than the report holds (%d)"
                           % (len(pods), MAX_REPORT_PODS)}, sort_keys=True, separators=(",", ":"))
    per_gpu = dict((str(i), None) for i in unreadable)  # type: Dict[str, Any]
    for gpu in gpus:
        held, _ = gi_holders(gpu, allocations)
        model, _ = effective_model(gpu)
        if held is None or model is None:
            per_gpu[str(gpu.index)] = None
            continue
        rows = []  # type: List[List[Any]]
        for gi in sorted(gpu.gis, key=lambda g: (g.start, g.id)):
            profile = model.profile_by_id(gi.profile_id)
            if profile is None:
                continue  # an instance the report cannot name is left out: the reader counts it as unknown
            holders = held.get(gi.id, ())
            rows.append([profile.name, gi.start, holders[0] if holders else None])
        per_gpu[str(gpu.index)] = rows
    return _bounded(at, pods, per_gpu)


def _bounded(at, pods, per_gpu):
    # type: (str, List[str], Dict[str, Any]) -> str
    """The report in at most MAX_REPORT_CHARS. kubelet's PodUID is any string of up to 256 characters here (a
    static pod's manifest may set its own uid), so 512 of them outgrow the bound. ``pods`` keeps the instances'
    holders first, then the other pods in order, while they fit, and ``pods_left_out`` counts the rest: a pod
    the report does not cover counts, for the planner, as possibly holding any instance of the profiles it asks
    (more in use, never fewer), and an instance whose holder runs stays in use either way. The holders all fit
    on a node of up to 8 GPUs whatever their uids (56 of 256 characters: about 30,000 characters with their
    rows); on 16 GPUs of 7 such holders each, the rows alone leave room for a few. When even the instances do
    not fit, the report is unknown."""
    def dump(doc):
        # type: (Dict[str, Any]) -> str
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    whole = dump({"at": at, "pods": pods, "gpus": per_gpu})
    if len(whole) <= MAX_REPORT_CHARS:
        return whole
    held = set(row[2] for rows in per_gpu.values() if rows for row in rows if row[2] is not None)
    order = [p for p in pods if p in held] + [p for p in pods if p not in held]
    # the rest of the report with an empty list and the largest count it may carry, then each pod's share
    room = MAX_REPORT_CHARS - len(dump({"at": at, "pods": [], "pods_left_out": len(pods), "gpus": per_gpu}))
    kept = []  # type: List[str]
    for pod in order:
        cost = len(json.dumps(pod)) + (1 if kept else 0)
        if cost > room:
            break
        kept.append(pod)
        room -= cost
    if room < 0:
        return dump({"at": at, "unknown": "the report of what %d GPUs hold is over %d characters"
                                          % (len(per_gpu), MAX_REPORT_CHARS)})
    return dump({"at": at, "pods": sorted(kept), "pods_left_out": len(pods) - len(kept), "gpus": per_gpu})


def same_report(current, value):
    # type: (Optional[str], str) -> bool
    """Whether the annotation as it stands (``current``, outside data) says what ``value`` says, ``at``
    aside. One that is missing or cannot be read (the reader rule) never does: it is rewritten."""
    if current is None:
        return False
    try:
        old = loads(current, "annotation", MAX_READ_CHARS, max_depth=4)
        new = json.loads(value)
    except (OutsideDataError, ValueError):
        return False
    if not isinstance(old, dict):
        return False
    old.pop("at", None)
    new.pop("at", None)
    # Compared as JSON text, not by ``==``: Python has False == 0 and True == 1, and a start written ``false``
    # (which the planner's reader refuses) would be "the same" as 0 and never written over.
    return json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)


def follow(report_once, signature, wait, clock, min_interval, budget=FOLLOW_BUDGET_S):
    # type: (Callable[[], Any], Callable[[], str], Callable[[float], None], Callable[[], float], float, float) -> List[Any]
    """Rounds of ``report_once`` for the holders unit; pure but for what it is given.

    One round, then (``min_interval`` > 0) a wait of ``min_interval``, and another round only when the
    checkpoint's ``signature`` changed since the last round read it; it ends once a wait saw no change.
    So rounds start at least ``min_interval`` apart (the rate limit), and a change made while this runs,
    which systemd's path unit does not see while its service is active, is reported by this run. Past
    ``budget`` seconds a change seen after a wait gets one last round and the run ends: a checkpoint that
    never settles is left to the next start (the path unit re-arms when the service ends). A round that
    raises ends the run after the same wait, so even a failing service starts at most once per
    ``min_interval``. Returns every round's result."""
    start = clock()
    rounds = []  # type: List[Any]

    def one():
        # type: () -> None
        try:
            rounds.append(report_once())
        except Exception:  # noqa: BLE001 - re-raised: a round that fails is rate limited too (not SIGTERM)
            wait(max(min_interval, 0))
            raise

    while True:
        before = signature()
        one()
        if min_interval <= 0:
            return rounds
        wait(min_interval)
        if signature() == before:
            return rounds
        if clock() - start >= budget:
            one()
            return rounds


def checkpoint_reader(args, backend):
    # type: (argparse.Namespace, Any) -> Callable[[], Allocations]
    """Reads the checkpoint ``--kubelet-checkpoint`` names. A simulated node with none at its default place
    (under its host directory) reads as empty: its kubelet has allocated nothing. Anywhere else a missing
    file is unknown (a real kubelet writes one as soon as a device plugin registers)."""
    path = args.kubelet_checkpoint
    sim_default = backend is not None and getattr(backend, "sim", None) is not None and \
        path == under(host_root(args.sim_state), DEFAULT_CHECKPOINT)

    def read():
        # type: () -> Allocations
        if sim_default and not os.path.exists(path):
            return Allocations(True)
        return read_checkpoint(path)

    read.path = path  # type: ignore[attr-defined]
    return read


def allocations_reader(checkpoint, client=None, node=None, log=None):
    # type: (Callable[[], Allocations], Any, Optional[str], Optional[Callable[[str], None]]) -> Callable[[], Allocations]
    """A fresh read of kubelet's allocations each call: the checkpoint first, then (with a Kubernetes
    client that lists pods) the node's pods, so every pod the file names existed before the listing and
    one missing from it is gone. Never raises: what cannot be read is unknown, or every entry stands."""

    def read():
        # type: () -> Allocations
        try:
            found = checkpoint()
        except Exception as exc:  # noqa: BLE001 - never an exception out of the apply: unknown is safe
            return unknown("kubelet's device checkpoint %s: %s" % (getattr(checkpoint, "path", "?"),
                                                                   exc.__class__.__name__))
        if not found.known or not found.entries or client is None or not node or \
                not hasattr(client, "list_pods"):
            return found
        try:
            alive = live_uids(client.list_pods(node_name=node))
        except OutsideDataError as exc:  # a pod of another shape: named, with its field
            if log is not None:
                log("this node's pod list does not read (%s): every kubelet allocation counts" % one_line(exc, 200))
            return found
        except Exception as exc:  # noqa: BLE001 - without the API server's answer every entry stands
            if log is not None:
                log("listing this node's pods failed (%s): every kubelet allocation counts"
                    % one_line(exc, 200))
            return found
        return keep_live(found, alive)

    return read
