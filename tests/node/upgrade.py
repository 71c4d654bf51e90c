"""A simulated node that meets a new bundle with the state an older bundle left (docs/delivery.md, "The
bundle"): the old code is a bundle built from ``git archive OLD`` into a temporary directory, the new one is
this checkout's; each is delivered as a node gets it (its parts in ``ROOT/incoming``, its own runner from
stdin, the bundle unpacked into ``ROOT/bundles/HASH`` and checked) and runs in its own processes, on the node
interpreter, against one simulated node (its GPUs, its host directory: the boot unit, the stopped-clients
record, the simulated systemd, the device plugin's manifest).

``kill_at_write``: the run is SIGKILLed just before its (k+1)-th write under the simulated host (a file opened
for writing, created, renamed or removed), that is, right after its k-th: an interpreter wrapper installs an
audit hook (Python 3.8+; before, on a node's 3.6, wrappers of the functions that raise those events) and then
runs ``node_bootstrap`` as ``-m`` would. ``--sim-fault crash-after:N`` kills at the GPUs' writes instead.

Used by tests/node/test_upgrade_convergence.py (a few representative cases) and by
scripts/upgrade_convergence.py (every kill point).

A node's ``kill_roots``: more directories whose writes count (a state directory a test put on another file
system); ``writes_log``: a file each counted write is appended to ("EVENT PATH"), so a test sees which writes
a run makes."""

import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
import typing
import zlib
from typing import Dict, List, Optional

from functions.delivery import bundle as bundle_module
from tests.node.nodecli import ROOT, node_python

OLD = "b3ead70"  # the last commit before the node's state handling changed (docs/node.md, "The boot unit")
GPU, COUNT = "A100-SXM4-40GB", 2
UNITS = ("dcgm-exporter", "nvidia-dcgm")  # the default --clients' systemd units
MANIFEST = "etc/kubernetes/manifests/nvidia-device-plugin.yml"  # the default manifest client, under the host
MANIFEST_TEXT = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nvidia-device-plugin\n"

_KILLER = r"""
import os, runpy, signal, sys
roots = [os.path.realpath(p) for p in os.environ["UPGRADE_HOST"].split(os.pathsep)]
left = [int(os.environ["UPGRADE_KILL_AT_WRITE"])]
log = os.environ.get("UPGRADE_WRITES_LOG")
WRITES = ("os.rename", "os.replace", "os.remove", "os.unlink", "os.rmdir", "os.mkdir", "os.symlink")

def mine(path):
    try:
        path = os.fsdecode(path)
    except TypeError:
        return False  # a descriptor
    path = os.path.realpath(os.path.join(os.getcwd(), path))
    return any(path == root or path.startswith(root + os.sep) for root in roots)

def hook(event, args):
    if event == "open":
        path, mode, flags = args
        writing = ("w" in mode or "a" in mode or "x" in mode or "+" in mode) if mode else \
            bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
    elif event in WRITES:
        path, writing = args[0], True
    else:
        return
    if writing and mine(path):
        if log:  # its own open is an event too, outside every root: not counted
            with open(log, "a") as fh:
                fh.write("%s %s\n" % (event, os.fsdecode(path)))
        if left[0] <= 0:
            os.kill(os.getpid(), signal.SIGKILL)
        left[0] -= 1

def wrap(module, name, event, args_of):
    real = getattr(module, name)

    def wrapper(*args, **kw):
        hook(event, args_of(args, kw))
        return real(*args, **kw)
    setattr(module, name, wrapper)

if hasattr(sys, "addaudithook"):
    sys.addaudithook(hook)
else:  # before 3.8 (a node's 3.6): the same events, raised by wrappers of the functions that raise them there
    import builtins, io
    opened = lambda args, kw: (args[0] if args else kw["file"], args[1] if len(args) > 1 else kw.get("mode", "r"), 0)
    wrap(builtins, "open", "open", opened)
    io.open = builtins.open
    wrap(os, "open", "open", lambda args, kw: (args[0] if args else kw["path"], None,
                                               args[1] if len(args) > 1 else kw["flags"]))
    for event in WRITES:
        wrap(os, event.split(".")[1], event, lambda args, kw: args or tuple(kw.values()))
assert sys.argv[1:3] == ["-m", "node_bootstrap"], sys.argv
sys.argv = [sys.argv[0]] + sys.argv[3:]
runpy.run_module("node_bootstrap", run_name="__main__", alter_sys=True)
"""


def _pynvml_source():
    # type: () -> bytes
    out = subprocess.run([node_python(), "-c", "import pynvml; print(pynvml.__file__)"], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True, timeout=60).stdout.strip()
    with open(out, "rb") as fh:
        return fh.read()


def old_bundle(commit=OLD):
    # type: (str) -> bundle_module.Bundle
    """The bundle ``commit``'s delivery built: its node_bootstrap, its runner, and pynvml."""
    tar = subprocess.run(["git", "-C", ROOT, "archive", commit, "node_bootstrap", "functions/delivery/node_runner.py"],
                         stdout=subprocess.PIPE, check=True, timeout=60).stdout
    files = []
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            data = archive.extractfile(member).read()
            if member.name == "functions/delivery/node_runner.py":
                files.append((bundle_module.RUNNER_NAME, data))
            elif member.name.endswith(bundle_module._SUFFIXES) and "__pycache__" not in member.name:
                files.append((member.name, data))
    files.append(("pynvml.py", _pynvml_source()))
    return bundle_module.pack(files)


def git_has(commit=OLD):
    # type: (str) -> bool
    return subprocess.run(["git", "-C", ROOT, "cat-file", "-e", commit + "^{commit}"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=60).returncode == 0


class Run(typing.NamedTuple):
    rc: int
    json: dict
    stdout: str
    stderr: str


class UpgradeNode(object):
    """One simulated node, its bundle directory and its host, reached by delivered runs."""

    def __init__(self, directory, old=None, new=None):
        # type: (str, Optional[bundle_module.Bundle], Optional[bundle_module.Bundle]) -> None
        self.dir = os.path.realpath(directory)
        os.chmod(self.dir, 0o700)  # the runner's node directory check: nothing above it writable by others
        self.root = os.path.join(self.dir, "node-root")
        self.state = os.path.join(self.dir, "node.json")
        self.host = os.path.join(self.dir, "node.host")  # simhost.host_root(state)
        self.bundles = {"old": old or old_bundle(), "new": new or bundle_module.build()}
        self.killer = os.path.join(self.dir, "killer.py")
        with open(self.killer, "w") as fh:
            fh.write(_KILLER)
        self.kill_roots = []  # type: List[str]
        self.writes_log = None  # type: Optional[str]
        self.wrapper = os.path.join(self.dir, "python-killed-at-write")
        with open(self.wrapper, "w") as fh:
            fh.write('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (node_python(), self.killer))
        os.chmod(self.wrapper, 0o700)
        self.prepare_host()

    def prepare_host(self):
        # type: () -> None
        """The GPU clients of the default --clients, running: the device plugin's manifest and DCGM's units."""
        manifest = os.path.join(self.host, MANIFEST)
        os.makedirs(os.path.dirname(manifest), exist_ok=True)
        with open(manifest, "w") as fh:
            fh.write(MANIFEST_TEXT)
        self.write_systemd({"units": dict((u, "active") for u in UNITS), "failing": {}})

    # --- the simulated host --------------------------------------------------------------------

    def path(self, *parts):
        # type: (str) -> str
        return os.path.join(self.host, *parts)

    def systemd(self):
        # type: () -> dict
        with open(self.path("systemd", "state.json")) as fh:
            return json.load(fh)

    def write_systemd(self, state):
        # type: (dict) -> None
        os.makedirs(self.path("systemd"), exist_ok=True)
        with open(self.path("systemd", "state.json"), "w") as fh:
            json.dump(state, fh)

    def calls(self):
        # type: () -> List[str]
        try:
            with open(self.path("systemd", "calls.log")) as fh:
                return [" ".join(json.loads(line)) if line.startswith("[") else line.strip()
                        for line in fh if line.strip()]
        except IOError:
            return []

    def clear_calls(self):
        # type: () -> None
        if os.path.exists(self.path("systemd", "calls.log")):
            open(self.path("systemd", "calls.log"), "w").close()

    def record(self, name="stopped-clients.json"):
        # type: (str) -> typing.Any
        path = self.path("var/lib/ack-mig-hook", name)
        if not os.path.exists(path):
            return None
        with open(path) as fh:
            return json.load(fh)

    def unit_text(self):
        # type: () -> Optional[str]
        path = self.path("etc/systemd/system/ack-mig-hook.service")
        if not os.path.exists(path):
            return None
        with open(path) as fh:
            return fh.read()

    def unit_bundle(self):
        # type: () -> Optional[str]
        """The bundle hash the boot unit's ExecStart runs ("" for a unit that runs no bundle)."""
        text = self.unit_text()
        if text is None:
            return None
        for line in text.splitlines():
            if line.startswith("ExecStart="):
                for digest, b in self.bundles.items():
                    if os.path.join("bundles", b.digest, bundle_module.RUNNER_NAME) in line:
                        return digest
        return ""

    def enable_pending(self):
        # type: () -> bool
        return os.path.lexists(self.path("etc/ack-mig-hook/enable-pending"))

    def clients_running(self):
        # type: () -> Dict[str, bool]
        units = self.systemd()["units"]
        found = dict((u, units.get(u) == "active") for u in UNITS)
        manifest = self.path(MANIFEST)
        found["manifest"] = os.path.isfile(manifest) and open(manifest).read() == MANIFEST_TEXT
        return found

    def layout(self):
        # type: () -> List[List[tuple]]
        with open(self.state) as fh:
            gpus = json.load(fh)["gpus"]
        return [sorted((gi["profile_id"], gi["start"], len(gi["cis"])) for gi in gpu["gis"]) for gpu in gpus]

    # --- runs ----------------------------------------------------------------------------------

    def args(self, *command):
        # type: (str) -> List[str]
        return ["--json", "--backend", "sim:%s:%d" % (GPU, COUNT), "--sim-state", self.state, "--no-label",
                "--capacity-timeout", "0"] + list(command)

    def killer_env(self, kill):
        # type: (int) -> Dict[str, str]
        env = {"UPGRADE_HOST": os.pathsep.join([self.host] + self.kill_roots),
               "UPGRADE_KILL_AT_WRITE": str(kill)}
        if self.writes_log:
            env["UPGRADE_WRITES_LOG"] = self.writes_log
        return env

    def deliver(self, which, *command, **kw):
        # type: (str, str, typing.Any) -> Run
        """``which`` bundle ("old" or "new") runs ``node_bootstrap ARGS`` (``self.args(*command)``) as
        delivery runs it: its parts sent, its own runner on stdin. ``kill_at_write``: killed after that many
        writes under the host."""
        bundle = self.bundles[which]
        incoming = os.path.join(self.root, "incoming")
        os.makedirs(incoming, mode=0o700, exist_ok=True)
        if not os.path.isdir(os.path.join(self.root, "bundles", bundle.digest)):
            for name, part in zip(bundle.part_names(), bundle.chunks()):
                with open(os.path.join(incoming, name), "wb") as fh:
                    fh.write(part)
        with tarfile.open(fileobj=io.BytesIO(bundle_module.lzma.decompress(bundle.packed))) as tar:
            runner = tar.extractfile(bundle_module.RUNNER_NAME).read()
        python = node_python()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        kill = kw.pop("kill_at_write", None)
        if kill is not None:
            python = self.wrapper
            env.update(self.killer_env(kill))
        encoded = base64.b64encode(json.dumps(self.args(*command)).encode("utf-8")).decode("ascii")
        names = base64.b64encode(zlib.compress(b"{}")).decode("ascii")
        proc = subprocess.run([node_python(), "-I", "-", bundle.digest, self.root, encoded, "120", python, "-",
                               names, "5"], input=runner, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              cwd=self.dir, env=env, timeout=180)
        out, err = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
        lines = [line for line in out.splitlines() if line.startswith("{")]
        assert not kw, kw
        return Run(proc.returncode, json.loads(lines[-1]) if lines else {}, out, err)

    def boot(self, kill_at_write=None, reboot=True):
        # type: (Optional[int], bool) -> Run
        """A reboot (simulated driver) and the boot unit's command as systemd starts it (its request file
        under the host). ``kill_at_write`` as for :meth:`deliver`."""
        from node_bootstrap.driver.sim import driver
        from node_bootstrap.driver.sim.store import SimStore
        from tests.support.systemd_unit import SYSTEMD_PATH, Unit, request_under

        if reboot:
            with SimStore(self.state).transaction() as state:
                driver.reboot(state)
        unit = Unit(self.unit_text())
        argv = request_under(unit.exec_start(), self.host)
        env = unit.service_env()
        if kill_at_write is not None:  # the runner's PYTHON argument: what runs node_bootstrap
            argv[8] = self.wrapper
            env.update(self.killer_env(kill_at_write), PATH=SYSTEMD_PATH)
        proc = subprocess.run(argv, env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=180)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        return Run(proc.returncode, json.loads(lines[-1]) if lines else {}, proc.stdout, proc.stderr)

    def remove_boot_unit(self):
        # type: () -> None
        """The host as before any install: no unit, request, marker or leftover temporary; no calls logged."""
        for sub in ("etc/systemd/system", "etc/ack-mig-hook"):
            shutil.rmtree(self.path(sub), ignore_errors=True)
        self.clear_calls()

    def remove(self):
        # type: () -> None
        shutil.rmtree(self.dir, ignore_errors=True)
