"""The boot path is the run path (issue 36 item 5): a node that got the real bundle by delivery (the local
transport, the simulated GPUs) boots with its own interpreter, the standard library and pynvml only, the
project not installed, by the unit file read and started as systemd would (tests/support/systemd_unit.py).

The unit runs the bundle's own runner, so a boot is a delivered run: the node directory checked, the bundle's
SHA-256 and contents checked before anything of it runs, no bytecode written, one JSON line."""

import json
import os
import subprocess

import pytest

from functions.delivery import bundle
from functions.delivery.local import LocalTransport
from functions.delivery.node_runner import EXIT_BUNDLE_MISSING
from functions.delivery.node_script import node_args
from functions.delivery.outcome import NodeTarget
from functions.delivery.transport import ScriptMaker
from node_bootstrap.driver.sim import driver
from node_bootstrap.driver.sim.store import SimStore
from node_bootstrap.host import bootunit, holdersunit
from node_bootstrap.kube.allocations import DEFAULT_CHECKPOINT
from tests.node.nodecli import NODE_PYTHON
from tests.node.test_kubelet_allocations import checkpoint
from tests.support.systemd_unit import SYSTEMD_PATH, Unit, node_args as unit_node_args, request_under, with_node_args

pytestmark = pytest.mark.skipif(not os.path.isfile(NODE_PYTHON), reason="no .venv-node here (make node-env)")

SEQ = "3g.71gb-2g.35gb-1g.18gb"
IID = "i-bootpath01"


class DeliveredNode:
    """One simulated node reached by the local transport: its node directory (where bundles are cached)
    and its simulated host, whose "/" holds the boot unit and the request file."""

    def __init__(self, tmp_path):
        self.root = str(tmp_path / "node-root")  # ACK_MIG_NODE_ROOT; tmp_path is under .pytest-tmp (0700)
        self.sims = tmp_path / "sims"
        self.sims.mkdir()
        self.state = str(self.sims / ("%s.json" % IID))
        self.host = str(self.sims / ("%s.host" % IID))  # node_bootstrap.commands.simhost.host_root
        self.bundle = bundle.build()
        self.bundle_dir = os.path.join(os.path.realpath(self.root), "bundles", self.bundle.digest)

    def deliver(self, partition=None, labels=False):
        """``labels``: the simulated node's own node object takes them (no --no-label)."""
        transport = LocalTransport(ScriptMaker(self.bundle, 120, self.root, NODE_PYTHON), sim_state_dir=str(self.sims))
        args = node_args(partition or {"kind": "sequence", "value": SEQ},
                         ["--backend", "sim:H200:2", "--clients=", "--device-plugin-restart", "none"] +
                         ([] if labels else ["--no-label"]))
        [result] = transport.run([NodeTarget(IID, "cn-test.10.0.0.1", "127.0.0.1", tuple(args))])
        return result

    def unit(self, name=bootunit.UNIT_NAME):
        with open(os.path.join(self.host, "etc/systemd/system", name)) as fh:
            return Unit(fh.read())

    def reboot(self):
        with SimStore(self.state).transaction() as state:
            driver.reboot(state)

    def layout(self):
        with open(self.state) as fh:
            gpus = json.load(fh)["gpus"]
        return [sorted((gi["profile_id"], gi["start"], len(gi["cis"])) for gi in gpu["gis"]) for gpu in gpus]

    def bundle_files(self):
        return sorted(os.path.relpath(os.path.join(d, f), self.bundle_dir)
                      for d, dirs, files in os.walk(self.bundle_dir) for f in files + dirs)

    def boot(self):
        """One boot: the unit's command started as systemd starts it, its request file under the host."""
        unit = self.unit()
        proc = unit.start(request_under(unit.exec_start(), self.host))
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        return proc.returncode, (json.loads(lines[-1]) if lines else {}), proc


@pytest.fixture
def node(tmp_path, monkeypatch):
    # The node's shell gets nothing of this checkout: the runner alone decides what node_bootstrap imports.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    made = DeliveredNode(tmp_path)
    done = made.deliver()
    assert done.result and done.result["outcome"] == "success", (done.error, done.message, done.result)
    assert done.result["boot_unit"]["installed"] is True and done.attempts == 2  # cold node: run, push, run
    return made


def test_the_node_interpreter_cannot_import_the_project(tmp_path):
    proc = subprocess.run([NODE_PYTHON, "-c", "import pynvml, sys; print(sys.version_info[0]); import node_bootstrap"],
                          cwd=str(tmp_path), env={"PATH": SYSTEMD_PATH}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.stdout.strip() == "3"  # pynvml is there
    assert proc.returncode == 1 and "No module named 'node_bootstrap'" in proc.stderr


def test_a_delivered_node_boots_twice_on_its_own_python_and_gets_its_instances_back(node):
    unit = node.unit()
    argv = unit.exec_start()
    runner = os.path.join(node.bundle_dir, bootunit.RUNNER_NAME)
    assert argv[:4] == [NODE_PYTHON, "-B", "-I", runner]
    assert argv[4:6] == [node.bundle.digest, os.path.realpath(node.root)] and argv[8:10] == [NODE_PYTHON, "-"]
    assert unit.environment() == {}  # nothing on PYTHONPATH: the runner sets it to the bundle it has checked
    with open(runner, "rb") as fh, open(os.path.join(os.path.dirname(bundle.__file__), "node_runner.py"), "rb") as own:
        assert fh.read() == own.read()  # the very runner delivery sends as text
    assert SEQ not in unit.text  # the label travels in the request file only
    layout = node.layout()
    assert all(len(gpu) == 3 for gpu in layout)
    files = node.bundle_files()
    assert not any("__pycache__" in f for f in files)
    for boot in (1, 2):
        node.reboot()
        assert node.layout() == [[], []]  # instances never survive a reboot
        code, doc, proc = node.boot()
        assert code == 0, (boot, proc.stdout, proc.stderr)
        assert doc["outcome"] == "success" and doc["changes"] > 0 and "bundle" not in doc, (boot, doc)
        assert node.layout() == layout, boot
        assert node.bundle_files() == files, boot  # no __pycache__: the next boot's check still passes


@pytest.mark.parametrize("planted", ["sitecustomize.py", "json.py"])
def test_a_file_planted_in_the_cached_bundle_stops_the_boot_before_it_runs(node, tmp_path, planted):
    """sitecustomize.py would be loaded from node_bootstrap's PYTHONPATH; json.py from the runner's own
    directory, before its check, if the unit did not start it with -I. Neither runs: the boot ends in
    bundle-missing, the cache is removed (the next delivery sends it again), and the GPUs stay untouched."""
    marker = tmp_path / "planted-code-ran"
    with open(os.path.join(node.bundle_dir, planted), "w") as fh:
        fh.write("open(%r, 'w').close()\n" % str(marker))
    node.reboot()
    code, doc, proc = node.boot()
    assert code == EXIT_BUNDLE_MISSING, (proc.stdout, proc.stderr)
    assert doc["error"]["code"] == "bundle-missing" and doc["bundle"] == "missing"
    assert "failed its SHA-256 check" in doc["error"]["message"]
    assert not marker.exists()
    assert not os.path.exists(node.bundle_dir) and node.layout() == [[], []]
    # A later boot, the bundle (and its runner) gone, fails at once with Python's own line naming the runner,
    # until a delivery brings the bundle back; nothing runs either.
    code, doc, proc = node.boot()
    assert code == 2 and doc == {} and "can't open file" in proc.stderr and bootunit.RUNNER_NAME in proc.stderr
    assert not marker.exists() and node.layout() == [[], []]
    again = node.deliver()  # the next delivery: bundle-missing, the parts sent, run; and the boots work again
    assert again.result["outcome"] == "success" and again.attempts == 2 and not os.path.exists(
        os.path.join(node.bundle_dir, planted))
    node.reboot()
    code, doc, proc = node.boot()
    assert code == 0 and doc["outcome"] == "success" and all(len(gpu) == 3 for gpu in node.layout()), proc.stderr


PER_GPU = {"kind": "per-gpu", "gpus": [{"index": i, "layout": [{"profile": "3g.71gb", "start": 0},
                                                              {"profile": "3g.71gb", "start": 4}]}
                                       for i in (0, 1)]}
POD = "0b7c5a7e-3333-4b9e-9c53-5d2a8f0e0003"


def test_an_auto_pool_node_reports_its_holders_through_the_bundles_runner(tmp_path, monkeypatch):
    """Delivered with a per-GPU request, the node gets the holders units; the service runs report-holders
    through the same checked runner as the boot unit, and writes the simulated node's annotation only when
    kubelet's allocations say something new."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    node = DeliveredNode(tmp_path)
    assert node.deliver().result["outcome"] == "success"  # a labelled node first: MIG on (a per-GPU request leaves a GPU with MIG off as it is)
    done = node.deliver(PER_GPU, labels=True)
    assert done.result and done.result["outcome"] == "success", (done.error, done.message, done.result)
    assert len(done.result["boot_unit"]["holders_units"]) == 3
    service = node.unit(holdersunit.SERVICE)
    argv = service.exec_start()
    assert argv[:4] == [NODE_PYTHON, "-B", "-I", os.path.join(node.bundle_dir, bootunit.RUNNER_NAME)]
    assert argv[4:6] == [node.bundle.digest, os.path.realpath(node.root)] and argv[7] == str(holdersunit.DEADLINE_S)
    assert service.environment() == {}
    args = unit_node_args(argv)
    assert args[-4:] == ["report-holders", "--json", "--min-interval", "10"] and "3g.71gb" not in service.text
    checkpoint_path = os.path.join(node.host, DEFAULT_CHECKPOINT.lstrip("/"))
    assert node.unit(holdersunit.PATH_UNIT).path_changed() == [checkpoint_path]
    argv = with_node_args(argv, lambda a: a[:-1] + ["0"])  # the rate limit's wait shortened, nothing else

    with open(node.state) as fh:
        state = json.load(fh)
    gi = [g["id"] for g in state["gpus"][1]["gis"] if g["start"] == 4][0]
    uuid = [u for g, _, u in driver.mig_devices(state, 1) if g == gi][0]
    os.makedirs(os.path.dirname(checkpoint_path), exist_ok=True)
    with open(checkpoint_path, "w") as fh:
        json.dump(checkpoint([(POD, "main", "nvidia.com/mig-3g.71gb", [uuid])]), fh)

    def run():
        proc = service.start(argv)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        assert proc.returncode == 0 and lines, (proc.stdout, proc.stderr)
        with open(os.path.join(node.host, "node-labels.json")) as fh:
            labels = json.load(fh)
        return json.loads(lines[-1]), labels

    doc, labels = run()
    assert doc["written"] is True and "bundle" not in doc
    report = json.loads(labels["annotations"]["ack-mig-hook/gpu-holders"])
    assert report["pods"] == [POD] and report["gpus"]["1"] == [["3g.71gb", 0, None], ["3g.71gb", 4, POD]]
    writes = len(labels["history"])
    doc, labels = run()
    assert doc["written"] is False and doc["unchanged"] is True and len(labels["history"]) == writes
