"""Running ``python -m node_bootstrap`` as a real process, with recording stand-ins for host commands.

``systemctl`` and ``nvidia-smi`` on a temporary PATH are small shell scripts that append their argv to a
log file (and keep systemd unit "active" state as files), so tests see exactly what would have run on
the host: for a simulated node, nothing (``commands()`` stays empty). The simulated node's own systemd
(``node_bootstrap.commands.simhost.SimSystemd``, under ``<state>.host/systemd``) is what its clients and boot
unit talk to: ``set_unit``, ``unit_active``, ``fail_systemctl`` and ``systemctl()`` reach it.
"""

import json
import os
import subprocess
import sys
import time
import typing
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A node's own interpreter: the standard library and pynvml only, the project not installed (make node-env).
NODE_PYTHON = os.path.join(ROOT, ".venv-node", "bin", "python")


def node_python():
    # type: () -> str
    """The interpreter node commands run on: the node's (NODE_PYTHON, a real 3.6 where `make node-env` found
    one; `make test` builds it first), else this one (pytest run without `make node-env`)."""
    return NODE_PYTHON if os.path.isfile(NODE_PYTHON) else sys.executable


_SYSTEMCTL = """#!/bin/sh
echo "systemctl $*" >> "$FAKE_LOG"
[ "$1" = "--no-block" ] && shift
case "$1" in
  is-active) [ -e "$FAKE_UNITS/$3" ] && exit 0; exit 3 ;;
  stop) rm -f "$FAKE_UNITS/$2" ;;
  start) touch "$FAKE_UNITS/$2" ;;
  --root|enable|daemon-reload) exit "${FAKE_SYSTEMCTL_ENABLE_RC:-0}" ;;
esac
exit 0
"""

_NVIDIA_SMI = """#!/bin/sh
echo "nvidia-smi $*" >> "$FAKE_LOG"
exit "${FAKE_NVIDIA_SMI_RC:-0}"
"""


class Result(typing.NamedTuple):
    rc: int
    json: dict
    stdout: str
    stderr: str


class Node(object):
    """One simulated node: a state file, a lock, a state dir, fake host commands, optional kube access."""

    def __init__(self, tmp_path, gpu="A100-SXM4-40GB", count=2, clients=""):
        # type: (typing.Any, str, int, str) -> None
        self.dir = str(tmp_path)
        self.gpu, self.count = gpu, count
        self.state = os.path.join(self.dir, "sim-state.json")
        self.bin = os.path.join(self.dir, "bin")
        self.units = os.path.join(self.dir, "units")
        self.log = os.path.join(self.dir, "commands.log")
        self.clients = clients
        os.makedirs(self.bin, exist_ok=True)
        os.makedirs(self.units, exist_ok=True)
        for name, text in (("systemctl", _SYSTEMCTL), ("nvidia-smi", _NVIDIA_SMI)):
            path = os.path.join(self.bin, name)
            with open(path, "w") as fh:
                fh.write(text)
            os.chmod(path, 0o755)
        self.kube_args = ["--no-label"]  # type: List[str]
        self.host = os.path.join(self.dir, "sim-state.host")  # simhost.host_root(self.state)

    def _sim_systemd(self):
        # type: () -> typing.Any
        from node_bootstrap.commands.simhost import SimSystemd

        return SimSystemd(self.host)

    def set_unit(self, unit, active=True):
        # type: (str, bool) -> None
        """A unit of the simulated node's systemd, active or not."""
        systemd = self._sim_systemd()
        state = systemd.load()
        state["units"][unit] = "active" if active else "inactive"
        systemd.save(state)

    def unit_active(self, unit):
        # type: (str) -> bool
        return self._sim_systemd().load()["units"].get(unit) == "active"

    def fail_systemctl(self, verb, message="Failed (injected)"):
        # type: (str, str) -> None
        systemd = self._sim_systemd()
        state = systemd.load()
        state["failing"][verb] = message
        systemd.save(state)

    def systemctl(self):
        # type: () -> List[str]
        """The simulated node's systemctl calls, as command lines."""
        return [" ".join(argv) for argv in self._sim_systemd().calls()]

    def clear_calls(self):
        # type: () -> None
        for path in (self.log, os.path.join(self.host, "systemd", "calls.log")):
            if os.path.exists(path):
                open(path, "w").close()

    def use_kube(self, kubeconfig, node_name=None):
        # type: (str, Optional[str]) -> None
        self.kube_args = ["--kubeconfig", kubeconfig] + (["--node-name", node_name] if node_name else [])

    def args(self, *extra):
        # type: (str) -> List[str]
        defaults = ["--backend", "sim:%s:%d" % (self.gpu, self.count), "--sim-state", self.state,
                    "--lock-file", os.path.join(self.dir, "apply.lock"),
                    "--state-dir", os.path.join(self.dir, "var"), "--clients", self.clients,
                    "--capacity-timeout", "0"] + self.kube_args
        # these defaults before the subcommand (where every option is taken; a subcommand takes only its
        # own), then the subcommand and the test's own options (given after it, they win)
        return defaults + list(extra)

    def env(self, extra=None):
        # type: (Optional[Dict[str, str]]) -> Dict[str, str]
        env = dict(os.environ)
        env.update({"PATH": self.bin + os.pathsep + env.get("PATH", ""), "FAKE_LOG": self.log,
                    "FAKE_UNITS": self.units, "PYTHONPATH": ROOT})
        env.update(extra or {})
        return env

    def popen(self, *argv, **kw):
        # type: (str, typing.Any) -> subprocess.Popen
        raw = kw.pop("raw", False)
        cmd = [kw.pop("python", None) or node_python(), "-m", "node_bootstrap"] + (list(argv) if raw else self.args(*argv)) + ["--json"]
        return subprocess.Popen(cmd, cwd=self.dir, env=self.env(kw.pop("env", None)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)

    def run(self, *argv, **kw):
        # type: (str, typing.Any) -> Result
        proc = self.popen(*argv, **kw)
        out, err = proc.communicate(timeout=120)
        return parse(proc.returncode, out, err)

    def commands(self):
        # type: () -> List[str]
        if not os.path.exists(self.log):
            return []
        with open(self.log) as fh:
            return [line.strip() for line in fh if line.strip()]

    def sim(self):
        # type: () -> dict
        with open(self.state) as fh:
            return json.load(fh)

    def layout(self, index=0):
        # type: (int) -> List[tuple]
        gpu = self.sim()["gpus"][index]
        return sorted((gi["profile_id"], gi["start"], len(gi["cis"])) for gi in gpu["gis"])


def parse(rc, out, err):
    # type: (int, str, str) -> Result
    lines = [line for line in out.splitlines() if line.strip()]
    doc = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return Result(rc, doc, out, err)


_HOLDER = r"""
import json, os, sys, time
spec = json.loads(sys.argv[1])
with open("/proc/self/comm", "w") as fh:  # the command name apply must report
    fh.write(spec["name"])
held = [open(p, "rb") for p in spec["devices"]]
open(spec["ready"], "w").close()
manifest = spec.get("manifest")
if not manifest:
    time.sleep(3600)
while os.path.exists(manifest):  # the kubelet noticing the manifest is gone...
    time.sleep(0.02)
time.sleep(spec.get("lag", 1.0))  # ...and stopping the pod a while later
with open(spec["sim_state"]) as fh:
    gpus = json.load(fh)["gpus"]
with open(spec["seen"], "w") as fh:  # what the GPUs looked like while this process still held them
    json.dump(gpus, fh)
for action in spec.get("then", []):
    if action == "block-manifest-dir":  # the manifest can no longer be moved back
        os.rmdir(os.path.dirname(manifest))
        open(os.path.dirname(manifest), "w").close()
"""


class Holder(object):
    """A real process holding fake GPU device files open, as the device plugin or DCGM would.

    With ``manifest`` it behaves like a static pod under the kubelet: it lets go ``lag`` seconds after the
    manifest disappears, first recording the simulated GPUs it saw (``seen()``); without, it holds on.
    """

    def __init__(self, tmp_path, name, devices, node=None, manifest=None, lag=1.0, then=()):
        # type: (typing.Any, str, List[str], Optional[Node], Optional[str], float, typing.Sequence[str]) -> None
        self.dir = str(tmp_path)
        self.ready = os.path.join(self.dir, "%s.ready" % name)
        self.seen_path = os.path.join(self.dir, "%s.seen.json" % name)
        spec = {"name": name, "devices": devices, "ready": self.ready, "manifest": manifest, "lag": lag,
                "sim_state": node.state if node else None, "seen": self.seen_path, "then": list(then)}
        # pytest's own interpreter, not the node's: this stands for a pod's process (the device plugin, DCGM, a
        # workload) in its own container image, never node code, and it writes /proc/self/comm as any process may
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, json.dumps(spec)])
        while not os.path.exists(self.ready):  # no deadline of its own: a slow start is no failure (pytest's
            assert self.proc.poll() is None, "holder did not start"  # timeout guards a hang)
            time.sleep(0.02)

    @property
    def pid(self):
        # type: () -> int
        return self.proc.pid

    def seen(self):
        # type: () -> list
        with open(self.seen_path) as fh:
            return json.load(fh)

    def stop(self):
        # type: () -> None
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def fake_devices(tmp_path, count=2):
    # type: (typing.Any, int) -> typing.Tuple[str, List[str]]
    """``<tmp>/dev/nvidia0..N`` and ``nvidiactl`` as plain files; returns (glob for apply, GPU paths)."""
    dev = os.path.join(str(tmp_path), "dev")
    os.makedirs(dev, exist_ok=True)
    paths = [os.path.join(dev, "nvidia%d" % i) for i in range(count)]
    for path in paths + [os.path.join(dev, "nvidiactl")]:
        open(path, "w").close()
    return os.path.join(dev, "nvidia[0-9]*"), paths


def lay_out(node, gpus, models=None, pending=None):
    """Write ``node``'s state file (docs/simulator.md, version 1) with the simulated driver's own calls, so
    that it holds what the driver could have made (ids by placement, every rule checked): ``gpus`` lists,
    per GPU, (profile name, start) pairs, each instance with one compute instance spanning it; an empty
    list leaves that GPU with MIG off. ``models``: a catalogue key per GPU where the node mixes models.
    ``pending``: per GPU, a pending mode to leave behind (a mode set but not yet activated)."""
    from node_bootstrap.mig import find_gpu
    from node_bootstrap.driver.nvml import FULL_CI_INDEX
    from node_bootstrap.driver.sim import driver

    state = driver.new_state(node.gpu, len(gpus))
    for index, layout in enumerate(gpus):
        if models and models[index] != node.gpu:
            state["gpus"][index]["gpu"] = models[index]
        if layout:
            driver.set_mig_mode(state, index, 1, [])
        model = find_gpu((models or [node.gpu] * len(gpus))[index])
        for name, start in layout:
            profile = model.profile_by_name(name)
            gi = driver.create_gpu_instance(state, index, profile.id, start, profile.memory_slices)
            driver.create_compute_instance(state, index, gi, FULL_CI_INDEX[profile.compute_slices])
        if pending is not None and pending[index] is not None:
            state["gpus"][index]["mig_pending"] = pending[index]
    with open(node.state, "w") as fh:
        json.dump(state, fh)
    return state


def gi_id(node, index, start):
    """The id of the GPU instance placed at ``start`` on GPU ``index`` of ``node``."""
    return next(gi["id"] for gi in node.sim()["gpus"][index]["gis"] if gi["start"] == start)
