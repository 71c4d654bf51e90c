"""A simulated node's host: with ``--backend sim:...`` nothing apply does outside NVML reaches this machine.

The simulator replaces the driver; this module replaces the rest of the node for it. Every host path
an option leaves at its default moves under the node's host directory, ``<state>.host/`` next to the
sim state file (``/tmp/node.json`` -> ``/tmp/node.host/``):

========================  ===========================================  ==============================
what                      real node                                    simulated node
========================  ===========================================  ==============================
node lock                 ``/run/ack-mig-hook.lock``                   ``<host>/run/ack-mig-hook.lock``
state dir                 ``/var/lib/ack-mig-hook``                    ``<host>/var/lib/ack-mig-hook``
kubelet device checkpoint ``/var/lib/kubelet/device-plugins/...``      the same path under ``<host>`` (none: empty)
device plugin manifest    ``/etc/kubernetes/manifests/nvidia-...yml``  the same path under ``<host>``
boot unit                 ``/etc/systemd/system``, ``/etc/ack-mig...``  the same paths under ``<host>``
systemctl                 the host's                                   :class:`SimSystemd` (no process)
node labels               the API server, kubelet credentials          ``<host>/node-labels.json``
GPU reset, process kill   ``nvidia-smi -r``, signals                   the simulated driver
a mount that never        a FUSE or network mount whose daemon or      fault ``hung-mount``:
answers                   server is gone                               :func:`hung_mount_stat`
========================  ===========================================  ==============================

An option the caller gives explicitly (``--lock-file``, ``--state-dir``, ``--clients``,
``--kubeconfig``, ``--boot-unit-root``/``--root``) is used as given: naming a path is asking for it.
``systemctl`` is never run for a simulated node, explicit options or not: its units are not this
machine's.
"""

import argparse
import json
import os
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..host.clients import DEFAULT_CLIENTS
from ..host.jsonfile import read_json, write_json
from ..kube.allocations import DEFAULT_CHECKPOINT
from ..kube.client import DEFAULT_KUBELET_KUBECONFIG
from ..host.lock import DEFAULT_LOCK_FILE
from ..host.runner import run

DEFAULT_STATE_DIR = "/var/lib/ack-mig-hook"
LABELS_FILE = "node-labels.json"


def is_sim(args):
    # type: (argparse.Namespace) -> bool
    return str(getattr(args, "backend", "") or "").startswith("sim:")


def is_host_root(path):
    # type: (Optional[str]) -> bool
    """Whether ``path`` is this machine's own file system root, however it is written (``/``, ``//``,
    ``/./``, ``/tmp/..``, a link to ``/``): a simulated node's files must never go there."""
    return path is not None and os.path.realpath(path) == "/"


def host_root(sim_state):
    # type: (str) -> str
    """``/tmp/node.json`` -> ``/tmp/node.host``: the simulated node's own file system root."""
    path = os.path.abspath(sim_state)
    stem = os.path.basename(path)
    if stem.endswith(".json"):
        stem = stem[:-len(".json")]
    return os.path.join(os.path.dirname(path), stem + ".host")


def under(root, path):
    # type: (str, str) -> str
    return os.path.join(root, path.lstrip("/"))


def _sim_clients(root):
    # type: (str) -> str
    out = []
    for item in DEFAULT_CLIENTS:
        kind, _, target = item.partition(":")
        out.append("%s:%s" % (kind, under(root, target)) if kind == "manifest" else item)
    return ",".join(out)


def resolve_defaults(args):
    # type: (argparse.Namespace) -> None
    """Fill in the host options the parser left unset (None): the real paths on a real node, paths under
    the host directory on a simulated one. Sets ``args.sim_labels`` (labels go to the stand-in)."""
    sim = is_sim(args)
    if sim and getattr(args, "sim_state", None) is None:
        # a fresh node for this one command (TMPDIR decides where)
        args.sim_state = os.path.join(tempfile.mkdtemp(prefix="ack-mig-sim-"), "state.json")
    root = host_root(args.sim_state) if sim else "/"
    args.sim_labels = sim and getattr(args, "kubeconfig", "") is None
    defaults = {
        "kubeconfig": DEFAULT_KUBELET_KUBECONFIG,
        "lock_file": DEFAULT_LOCK_FILE,
        "state_dir": DEFAULT_STATE_DIR,
        "kubelet_checkpoint": DEFAULT_CHECKPOINT,
    }  # type: Dict[str, str]
    for name, real in defaults.items():
        if hasattr(args, name) and getattr(args, name) is None:
            setattr(args, name, under(root, real) if sim else real)
    if hasattr(args, "clients") and args.clients is None:
        args.clients = _sim_clients(root) if sim else ",".join(DEFAULT_CLIENTS)
    for name in ("boot_unit_root", "root"):
        if hasattr(args, name) and getattr(args, name) is None:
            setattr(args, name, root)


def host_runner(args):
    # type: (argparse.Namespace) -> Any
    """What runs host commands (systemctl) for this node: the real runner, or the simulated systemd."""
    if is_sim(args) and getattr(args, "sim_state", None):
        return SimSystemd(host_root(args.sim_state)).run
    return run


class SimSystemd(object):
    """``systemctl`` for a simulated node, over ``<host>/systemd/state.json``::

        {"units": {"dcgm-exporter": "active"}, "failing": {"enable": "Failed to enable unit"}}

    A unit not listed as "active" is inactive; a verb listed in "failing" exits 1 with that message (a
    fault to inject). Every call is appended to ``<host>/systemd/calls.log`` as a JSON argv."""

    def __init__(self, root):
        # type: (str) -> None
        self.dir = os.path.join(root, "systemd")
        self.state_path = os.path.join(self.dir, "state.json")
        self.log_path = os.path.join(self.dir, "calls.log")

    def load(self):
        # type: () -> Dict[str, Any]
        state = read_json(self.state_path)
        if not isinstance(state, dict):
            state = {}
        state.setdefault("units", {})
        state.setdefault("failing", {})
        return state

    def save(self, state):
        # type: (Dict[str, Any]) -> None
        write_json(self.state_path, state, indent=1, sort_keys=True)

    def calls(self):
        # type: () -> List[List[str]]
        try:
            with open(self.log_path) as fh:
                return [json.loads(line) for line in fh if line.strip()]
        except (IOError, OSError, ValueError):
            return []

    def run(self, argv, timeout=120):
        # type: (List[str], float) -> Tuple[int, str]
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir)
        with open(self.log_path, "a") as fh:
            fh.write(json.dumps(argv) + "\n")
        if not argv or argv[0] != "systemctl":
            return 127, "%s: not simulated" % (argv[0] if argv else "")
        # systemctl(1): --quiet only silences; --no-block queues the job and returns (here the job is done at
        # once, so a unit ordered after the caller is not modelled waiting). A queued start that fails is not
        # systemctl's failure: it has exited 0 by then, and the unit is left "failed" (what is-active prints).
        no_block = "--no-block" in argv[1:]
        words = [a for a in argv[1:] if a not in ("--quiet", "--no-block")]
        if words[:1] == ["--root"]:
            words = words[2:]  # an image tree: enabling there is all there is to do
        state = self.load()
        verb, rest = (words[0], words[1:]) if words else ("", [])
        if verb in state["failing"]:
            if no_block and verb == "start" and rest:
                state["units"][rest[0]] = "failed"
                self.save(state)
                return 0, ""
            return 1, str(state["failing"][verb])
        if verb == "is-active":
            now = state["units"].get(rest[0]) if rest else None
            return (0, "active") if now == "active" else (3, "failed" if now == "failed" else "inactive")
        if verb in ("stop", "start") and rest:
            state["units"][rest[0]] = "active" if verb == "start" else "inactive"
            self.save(state)
            return 0, ""
        if verb in ("daemon-reload", "enable", "disable"):
            return 0, ""
        return 1, "systemctl %s: not simulated" % verb


class SimNodeLabels(object):
    """The node object a simulated node's labels go to: ``<host>/node-labels.json``, with the label and
    annotation values and the history of states written (what the API server would have seen)."""

    def __init__(self, root):
        # type: (str) -> None
        self.path = os.path.join(root, LABELS_FILE)

    def load(self):
        # type: () -> Dict[str, Any]
        doc = read_json(self.path)
        if not isinstance(doc, dict):
            doc = {"labels": {}, "annotations": {}, "history": []}
        return doc

    def merge_patch(self, patch):
        # type: (Dict[str, Any]) -> None
        """A JSON merge patch on the node's metadata (None removes a key), as the API server applies it."""
        doc = self.load()
        meta = patch.get("metadata", {})
        for field in ("labels", "annotations"):
            for key, value in (meta.get(field) or {}).items():
                if value is None:
                    doc[field].pop(key, None)
                else:
                    doc[field][key] = value
        doc["history"].append({"time": round(time.time(), 3), "labels": dict(meta.get("labels") or {})})
        write_json(self.path, doc, indent=1, sort_keys=True)


class SimNodeClient(SimNodeLabels):
    """Stands in for the Kubernetes client where apply only labels the node (no pods, no capacity)."""

    def merge_patch_node(self, name, patch):
        # type: (str, Dict[str, Any]) -> None
        self.merge_patch(patch)

    def read_annotations(self, name):
        # type: (str) -> Dict[str, Any]
        """The node's annotations as they stand (no ``get_node``: that would say "an API server is here")."""
        return dict(self.load().get("annotations") or {})


def sim_node_client(args):
    # type: (argparse.Namespace) -> Optional[SimNodeClient]
    """The stand-in taking this simulated node's labels, or None (real labels, or none at all)."""
    if getattr(args, "sim_labels", False) and is_sim(args):
        return SimNodeClient(host_root(args.sim_state))
    return None


def hung_mount_stat(stat_path):
    # type: (Callable[[str], Any]) -> Callable[[str], Any]
    """Fault ``hung-mount``: the holder scan's stat of an open file's ``/proc/<pid>/fd/<n>`` link never
    returns, as a stat on a FUSE mount whose daemon does not reply waits in the kernel for good (the
    scan reaches such a stat only for a file named like a GPU device that is not one of the glob's).
    Other paths (the glob's own device files) are stat'ed as usual."""
    def stat(path):
        # type: (str) -> Any
        if os.path.basename(os.path.dirname(path)) == "fd":
            threading.Event().wait()  # never set: the daemon never answers
        return stat_path(path)

    return stat

