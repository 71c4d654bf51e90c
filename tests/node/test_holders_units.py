"""The holders units (issue 35 item 1b): the boot unit of a per-GPU request brings a path unit on kubelet's
device checkpoint and a timer that run ``report-holders`` through the boot unit's own runner, rate limited;
the report is written only when it says something new; uninstall and disable remove every unit.

The units are read as systemd reads them (tests/support/systemd_unit.py) and the service's command is started
as systemd starts it, with the node's own interpreter (the project not installed), against a simulated node
whose kubelet checkpoint is written in kubelet's format (tests/node/test_kubelet_allocations.py)."""

import base64
import json
import os

import pytest

from node_bootstrap.commands.holdings import FOLLOW_BUDGET_S, follow, same_report
from node_bootstrap.driver.sim import driver
from node_bootstrap.host import holdersunit
from node_bootstrap.kube.allocations import DEFAULT_CHECKPOINT, checkpoint_signature
from node_bootstrap.mig import find_gpu
from tests.node.nodecli import NODE_PYTHON, ROOT, Node, lay_out
from tests.node.test_kubelet_allocations import checkpoint, write_checkpoint
from tests.support.systemd_unit import Unit, node_args, with_node_args

UNITS = (holdersunit.SERVICE, holdersunit.PATH_UNIT, holdersunit.TIMER)
LAYOUT = [("3g.20gb", 0), ("3g.20gb", 4)]


def per_gpu_b64(count=2):
    doc = {"version": 2, "kind": "per-gpu",
           "gpus": [{"index": i, "layout": [{"profile": p, "start": s} for p, s in LAYOUT]} for i in range(count)]}
    return base64.b64encode(json.dumps(doc).encode()).decode()


def unit_dir(root):
    return os.path.join(str(root), "etc/systemd/system")


def read_unit(root, name):
    with open(os.path.join(unit_dir(root), name)) as fh:
        return Unit(fh.read())


def present(root):
    return sorted(n for n in os.listdir(unit_dir(root))) if os.path.isdir(unit_dir(root)) else []


def install(node, root, *request, **kw):
    return node.run("install-boot-unit", *(request or ("--request-b64", per_gpu_b64())), "--root", str(root), **kw)


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path, count=2)  # A100-SXM4-40GB
    n.use_kube(str(tmp_path / "kubelet.conf"))  # a kubeconfig path: installing reads nothing of it
    return n


# --- what is installed, and when --------------------------------------------------------------------------

def test_a_per_gpu_boot_unit_brings_a_path_unit_on_the_checkpoint_and_a_timer(node, tmp_path):
    root = tmp_path / "root"
    res = install(node, root)
    assert res.rc == 0, res.stderr
    assert present(root) == sorted(("ack-mig-hook.service",) + UNITS)
    assert res.json["holders_units"] == [os.path.join(unit_dir(root), n) for n in sorted(UNITS)]
    checkpoint_path = os.path.join(node.host, DEFAULT_CHECKPOINT.lstrip("/"))  # the simulated node's own

    service = read_unit(root, holdersunit.SERVICE)
    argv = service.exec_start()
    assert argv[1:4] == ["-B", "-m", "node_bootstrap"]  # what installed it, as the boot unit does
    assert service.environment() == {"PYTHONPATH": ROOT}
    args = node_args(argv)
    assert args[args.index("report-holders"):] == ["report-holders", "--json", "--min-interval", "10"]
    options = dict(zip(args[:args.index("report-holders")][::2], args[:args.index("report-holders")][1::2]))
    assert options == {"--backend": "sim:A100-SXM4-40GB:2", "--lock-file": str(tmp_path / "apply.lock"),
                       "--sim-state": node.state,
                       "--kubeconfig": str(tmp_path / "kubelet.conf"), "--kubelet-checkpoint": checkpoint_path}
    assert service.values("Type") == ["oneshot"] and service.values("TimeoutStartSec") == ["270"]
    assert "ack-mig-hook.service" in service.values("After", "Unit")[0].split()
    assert "Install" not in service.sections  # only the path unit and the timer start it

    path = read_unit(root, holdersunit.PATH_UNIT)
    assert path.path_changed() == [checkpoint_path]  # the very file report-holders reads
    assert path.values("Unit", "Path") == [holdersunit.SERVICE]
    assert path.values("WantedBy", "Install") == ["paths.target"]
    timer = read_unit(root, holdersunit.TIMER)
    assert {k: timer.values(k, "Timer") for k in ("OnActiveSec", "OnUnitActiveSec", "AccuracySec", "Unit")} == {
        "OnActiveSec": ["1min"], "OnUnitActiveSec": ["5min"], "AccuracySec": ["10s"], "Unit": [holdersunit.SERVICE]}
    assert timer.values("WantedBy", "Install") == ["timers.target"]
    for name in UNITS:  # no label text, no layout: only checked paths and option values
        assert "3g.20gb" not in read_unit(root, name).text
    assert res.json["commands"] == [["systemctl", "--root", str(root), "enable", "ack-mig-hook.service"],
                                    ["systemctl", "--root", str(root), "enable", holdersunit.PATH_UNIT,
                                     holdersunit.TIMER]]
    assert node.commands() == []  # the host's systemctl never ran


def test_installing_twice_changes_nothing(node, tmp_path):
    root = tmp_path / "root"
    assert install(node, root).json["changed"] is True
    stamps = {n: os.stat(os.path.join(unit_dir(root), n)).st_mtime_ns for n in present(root)}
    calls = len(node.systemctl())
    again = install(node, root)
    assert again.rc == 0 and again.json["changed"] is False and again.json["commands"] == []
    assert {n: os.stat(os.path.join(unit_dir(root), n)).st_mtime_ns for n in present(root)} == stamps
    assert len(node.systemctl()) == calls


def test_a_labelled_request_or_no_kubernetes_access_gets_no_holders_units(node, tmp_path):
    labelled = install(node, tmp_path / "labelled", "--sequence", "3g.20gb-3g.20gb")
    assert labelled.rc == 0 and present(tmp_path / "labelled") == ["ack-mig-hook.service"]
    assert "holders_units" not in labelled.json
    node.kube_args = ["--no-label"]  # report-holders could never write: no unit that fails every time
    quiet = install(node, tmp_path / "quiet")
    assert quiet.rc == 0 and present(tmp_path / "quiet") == ["ack-mig-hook.service"]


def test_a_labelled_request_after_a_per_gpu_one_removes_the_holders_units(node, tmp_path):
    root = tmp_path / "root"
    install(node, root)
    node.clear_calls()
    res = install(node, root, "--sequence", "3g.20gb-3g.20gb")
    assert res.rc == 0 and res.json["changed"] is True, res.stderr
    assert present(root) == ["ack-mig-hook.service"]
    assert res.json["commands"] == [["systemctl", "--root", str(root), "disable", holdersunit.PATH_UNIT,
                                     holdersunit.TIMER],
                                    ["systemctl", "--root", str(root), "enable", "ack-mig-hook.service"]]


def test_on_a_live_node_the_units_are_started_and_stopped_with_systemctl():
    assert holdersunit.install_commands("/") == [["systemctl", "enable", "--now", holdersunit.PATH_UNIT,
                                                  holdersunit.TIMER]]
    assert holdersunit.remove_commands("/", list(UNITS)) == [
        ["systemctl", "disable", "--now", holdersunit.PATH_UNIT, holdersunit.TIMER],
        ["systemctl", "stop", holdersunit.SERVICE]]  # a run in progress ends before its file goes
    assert holdersunit.remove_commands("/", []) == []


@pytest.mark.parametrize("command", ["uninstall-boot-unit", "disable"])
def test_uninstall_and_disable_remove_every_unit(node, tmp_path, command):
    root = tmp_path / "root"
    lay_out(node, [LAYOUT, LAYOUT])
    assert install(node, root).rc == 0
    node.clear_calls()
    node.kube_args = ["--no-label"]
    res = node.run(command, "--root", str(root))
    assert res.rc == 0, res.stderr
    assert present(root) == [] and not os.path.exists(os.path.join(str(root), "etc/ack-mig-hook"))
    removed = res.json if command == "uninstall-boot-unit" else res.json["boot_unit"]
    assert removed["holders_units"] == [os.path.join(unit_dir(root), n) for n in UNITS]
    assert node.systemctl()[:2] == [
        "systemctl --root %s disable %s %s" % (root, holdersunit.PATH_UNIT, holdersunit.TIMER),
        "systemctl --root %s disable ack-mig-hook.service" % root]


def test_a_checkpoint_path_a_path_unit_cannot_watch_is_refused_before_any_change(node, tmp_path):
    lay_out(node, [[], []])
    res = node.run("apply", "--request-b64", per_gpu_b64(), "--boot-unit", "--boot-unit-root", str(tmp_path / "r"),
                   "--kubelet-checkpoint", "/var/lib/kubelet/checkpoint ")
    assert res.rc == 2 and "without leading or trailing spaces" in res.json["error"]["message"]
    assert node.layout(0) == [] and not (tmp_path / "r").exists()
    res = node.run("install-boot-unit", "--request-b64", per_gpu_b64(), "--root", str(tmp_path / "r"),
                   "--kubelet-checkpoint", "/var/lib/kubelet/a\nExecStart=/bin/sh")
    assert res.rc == 2 and "control character" in res.json["error"]["message"] and not (tmp_path / "r").exists()


# --- the service's command, run as systemd runs it --------------------------------------------------------

def _patches(kube_api, since):
    return [r for r in kube_api.requests[since:] if r.method == "PATCH"]


@pytest.mark.kube
@pytest.mark.skipif(not os.path.isfile(NODE_PYTHON), reason="no .venv-node here (make node-env)")
def test_the_service_reports_a_new_allocation_and_a_run_with_nothing_new_writes_nothing(tmp_path, kube_api):
    kube_api.add_node("node-a")
    for name in ("serve", "train"):  # kubelet's checkpoint names pods by UID; the API server's are pod-uid-<name>
        kube_api.add_pod("default", name, "node-a", resources={"nvidia.com/mig-3g.20gb": "1"})
    node = Node(tmp_path, count=2)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a"))
    lay_out(node, [LAYOUT, LAYOUT])
    root = tmp_path / "root"
    assert install(node, root, python=NODE_PYTHON).rc == 0
    service = read_unit(root, holdersunit.SERVICE)
    # the unit's own command; only the rate limit's wait shortened (the waits are test_follow_*'s)
    argv = with_node_args(service.exec_start(), lambda a: [("0" if p == "--min-interval" else v)
                                                          for p, v in zip([""] + a, a)])
    assert argv[0] == NODE_PYTHON
    state = node.sim()

    def uuid(gpu, start):
        gi = [g["id"] for g in state["gpus"][gpu]["gis"] if g["start"] == start][0]
        return [u for g, _, u in driver.mig_devices(state, gpu) if g == gi][0]

    def run():
        proc = service.start(argv)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def report():
        return json.loads(kube_api.nodes["node-a"]["metadata"]["annotations"]["ack-mig-hook/gpu-holders"])

    write_checkpoint(node, checkpoint([("pod-uid-serve", "main", "nvidia.com/mig-3g.20gb", [uuid(1, 4)])]))
    since = len(kube_api.requests)
    first = run()
    assert first["written"] is True and first["rounds"] == 1 and len(_patches(kube_api, since)) == 1
    assert report()["pods"] == ["pod-uid-serve"]
    assert report()["gpus"] == {"0": [["3g.20gb", 0, None], ["3g.20gb", 4, None]],
                                "1": [["3g.20gb", 0, None], ["3g.20gb", 4, "pod-uid-serve"]]}
    at = report()["at"]

    since = len(kube_api.requests)
    second = run()  # nothing changed: read, compared, not written
    assert second["written"] is False and second["unchanged"] is True
    assert _patches(kube_api, since) == [] and report()["at"] == at
    assert [r.method for r in kube_api.requests[since:]] == ["GET", "GET"]  # the pods, then the node

    # serve ends; train is admitted on GPU 0: kubelet rewrites its checkpoint, the path unit starts the service
    write_checkpoint(node, checkpoint([("pod-uid-train", "main", "nvidia.com/mig-3g.20gb", [uuid(0, 0)])]))
    since = len(kube_api.requests)
    third = run()
    assert third["written"] is True and len(_patches(kube_api, since)) == 1
    assert report()["pods"] == ["pod-uid-train"]
    assert report()["gpus"]["0"][0] == ["3g.20gb", 0, "pod-uid-train"]
    assert report()["gpus"]["1"][1] == ["3g.20gb", 4, None]


# --- the node lock: a report never outlives the layout it read -------------------------------------------

def _holders_rows(kube_api, node_name="node-a"):
    report = json.loads(kube_api.nodes[node_name]["metadata"]["annotations"]["ack-mig-hook/gpu-holders"])
    return {gpu: sorted((profile, start) for profile, start, _ in rows) for gpu, rows in report["gpus"].items()}


def _gpu_rows(node):
    model = find_gpu(node.gpu)
    return {str(i): sorted((model.profile_by_id(gi["profile_id"]).name, gi["start"]) for gi in gpu["gis"])
            for i, gpu in enumerate(node.sim()["gpus"])}


@pytest.mark.kube
def test_a_report_read_before_an_apply_is_never_written_over_the_applys_own(tmp_path, kube_api):
    """The race: report-holders reads the GPUs, an apply changes them and writes its final report, then the
    first report's write lands. Without the node lock that write put back the old layout, which the auto
    pool planner read until the next checkpoint change or the 5-minute timer. The report's GET of the node
    (after its GPU read, before its write) is held while the apply runs."""
    node = _kube_node(tmp_path, kube_api)
    held = kube_api.hold_next("GET", "/api/v1/nodes/node-a")
    report = node.popen("report-holders")
    try:
        _arrives(held, report)
        apply = node.run("apply", "--size", "1g.5gb", "--lock-timeout", "0")
    finally:
        held.release()
        out, err = report.communicate(timeout=60)
    assert report.returncode == 0, err
    assert _holders_rows(kube_api) == _gpu_rows(node)  # the report says what the GPUs hold
    # the round held the node lock from its GPU read to its write: the apply found it held and changed nothing
    assert apply.rc == 1 and apply.json["error"]["code"] == "locked", apply.stderr


def _arrives(held, proc):
    # No deadline of its own: a slow start on a loaded machine is no failure (pytest's timeout guards a hang)
    while not held.arrived.wait(0.05):
        assert proc.poll() is None, "it ended before the held request: %s" % (proc.communicate(),)


def _kube_node(tmp_path, kube_api):
    kube_api.add_node("node-a")
    node = Node(tmp_path, count=1)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a"))
    lay_out(node, [LAYOUT])
    return node


@pytest.mark.kube
def test_while_an_apply_holds_the_node_lock_a_report_skips_its_round_at_once_and_the_apply_reports(
        tmp_path, kube_api):
    node = _kube_node(tmp_path, kube_api)
    held = kube_api.hold_next("PATCH", "/api/v1/nodes/node-a")  # apply's "pending", under the node lock
    apply = node.popen("apply", "--size", "1g.5gb")
    try:
        _arrives(held, apply)
        since = len(kube_api.requests)
        report = node.run("report-holders")
        asked = kube_api.requests[since:]
    finally:
        held.release()
        out, err = apply.communicate(timeout=120)
    assert report.rc == 0, report.stderr  # nothing wrong: the apply writes the report
    assert report.json["skipped"] is True and report.json["written"] is False and report.json["holders"] is None
    assert "round skipped" in report.stderr
    assert asked == []  # no GPU read to write, so no API call either: it neither waited nor wrote
    assert apply.returncode == 0, err
    assert _holders_rows(kube_api) == _gpu_rows(node) and _gpu_rows(node)["0"][0] == ("1g.5gb", 0)


@pytest.mark.kube
def test_a_killed_report_or_apply_leaves_the_node_lock_to_the_other(tmp_path, kube_api):
    node = _kube_node(tmp_path, kube_api)
    held = kube_api.hold_next("GET", "/api/v1/nodes/node-a")
    report = node.popen("report-holders")
    try:
        _arrives(held, report)  # the round holds the lock now
        report.kill()  # the kernel drops an flock with its holder's last descriptor
        report.communicate(timeout=60)
    finally:
        held.release()
    apply = node.run("apply", "--size", "1g.5gb", "--lock-timeout", "0", "--sim-fault", "crash-after:1")
    assert apply.rc == -9  # it took the lock (else "locked", exit 1), then died holding it
    after = node.run("report-holders")
    assert after.rc == 0 and after.json["written"] is True, after.stderr
    assert _holders_rows(kube_api) == _gpu_rows(node)


# --- the rounds and the comparison, pure ------------------------------------------------------------------

class Clock(object):
    """A clock that moves only when the code under test waits."""

    def __init__(self, changes=()):
        self.now = 1000.0
        self.waits = []
        self.changes = list(changes)  # after the n-th wait, the checkpoint changes when changes[n] is true
        self.version = 0

    def wait(self, seconds):
        self.waits.append(seconds)
        self.now += seconds
        if self.changes and self.changes.pop(0):
            self.version += 1

    def signature(self):
        return "v%d" % self.version


def test_follow_reports_again_while_the_checkpoint_changed_during_the_wait():
    clock = Clock(changes=[True, True, False])
    rounds = follow(lambda: "report %s" % clock.signature(), clock.signature, clock.wait, lambda: clock.now, 10)
    assert rounds == ["report v0", "report v1", "report v2"]  # the change made while it waited is reported
    assert clock.waits == [10, 10, 10]  # rounds start at least the minimum interval apart


def test_follow_stops_a_checkpoint_that_never_settles_at_its_budget_after_reporting_the_last_change():
    clock = Clock(changes=[True] * 1000)
    rounds = follow(lambda: "report %s" % clock.signature(), clock.signature, clock.wait, lambda: clock.now, 10)
    waits = int(FOLLOW_BUDGET_S // 10)
    assert sum(clock.waits) == FOLLOW_BUDGET_S and len(clock.waits) == waits
    assert len(rounds) == waits + 1 and rounds[-1] == "report v%d" % waits  # what changed in the last wait too


def test_follow_once_without_an_interval_and_a_failing_round_still_waits():
    clock = Clock()
    assert follow(lambda: "r", clock.signature, clock.wait, lambda: clock.now, 0) == ["r"] and clock.waits == []

    def broken():
        raise OSError("NVML gone")

    with pytest.raises(OSError):
        follow(broken, clock.signature, clock.wait, lambda: clock.now, 10)
    assert clock.waits == [10]  # a service that fails fast would otherwise restart at kubelet's pace


def test_same_report_ignores_only_the_time_and_rewrites_what_it_cannot_read():
    value = '{"at":"2026-01-01T00:00:00Z","gpus":{"0":[["3g.20gb",0,null]]},"pods":[]}'
    assert same_report('{"at":"2025-12-31T00:00:00Z","gpus":{"0":[["3g.20gb",0,null]]},"pods":[]}', value)
    assert not same_report('{"at":"x","gpus":{"0":[["3g.20gb",0,"u"]]},"pods":["u"]}', value)
    assert not same_report(None, value)
    assert not same_report("{not json", value)
    assert not same_report("[" * 100 + "]" * 100, value)  # the reader rule: too deep is not read
    assert not same_report('{"at": "x", "pods": [], "gpus": {"0": [["3g.20gb", 0, NaN]]}}', value)
    unknown = '{"at":"a","unknown":"kubelet\'s device checkpoint cannot be read"}'
    assert same_report(unknown.replace('"a"', '"b"'), unknown)


def test_checkpoint_signature_follows_the_bytes(tmp_path):
    path = str(tmp_path / "kubelet_internal_checkpoint")
    assert checkpoint_signature(path).startswith("unreadable: ")
    with open(path, "w") as fh:
        fh.write('{"Data": {}, "Checksum": 1}')
    first = checkpoint_signature(path)
    os.rename(path, path + ".old")
    with open(path, "w") as fh:  # kubelet's way: a new file renamed over the old, same bytes
        fh.write('{"Data": {}, "Checksum": 1}')
    assert checkpoint_signature(path) == first
    with open(path, "w") as fh:
        fh.write('{"Data": {}, "Checksum": 2}')
    assert checkpoint_signature(path) != first


@pytest.mark.kube
def test_a_failed_apply_writes_its_final_state_without_listing_pods(tmp_path, kube_api):
    """The failure path writes the holders report with the final label, in one patch: listing the node's pods
    there (an API call of up to 30 s) could hold that label past a SIGTERM's grace, and the node would be
    killed before it said how it ended. The checkpoint alone counts (every entry a holder: the safe side)."""
    node = _kube_node(tmp_path, kube_api)
    write_checkpoint(node, checkpoint([("pod-uid-serve", "main", "nvidia.com/mig-3g.20gb", ["MIG-anything"])]))
    since = len(kube_api.requests)
    res = node.run("apply", "--size", "1g.5gb", "--sim-fault", "gpu-lost:0")
    assert res.rc == 1 and res.json["error"]["code"] == "gpu-lost", res.stderr
    asked = [(r.method, r.path) for r in kube_api.requests[since:]]
    assert not [a for a in asked if a[0] == "GET" and a[1].startswith("/api/v1/pods")], asked
    meta = kube_api.nodes["node-a"]["metadata"]
    assert meta["labels"]["nvidia.com/mig.config.state"] == "failed"
    assert json.loads(meta["annotations"]["ack-mig-hook/gpu-holders"])["gpus"] == {"0": None}


@pytest.mark.kube
def test_a_report_whose_start_is_a_boolean_is_written_again(tmp_path, kube_api):
    """The holders annotation as it stands is outside data: one whose start 0 reads ``false`` (a hand edit,
    another tool) is no report the planner reads (functions/kube/supply.py refuses a start that is no
    whole number: every instance of the node then counts as possibly held). report-holders compared it with
    its own by Python's ``==``, where ``False == 0``: it said unchanged and left it so for good."""
    from functions.kube.supply import _holders

    node = _kube_node(tmp_path, kube_api)
    first = node.run("report-holders")
    assert first.rc == 0 and first.json["written"] is True, first.stderr
    annotations = kube_api.nodes["node-a"]["metadata"]["annotations"]
    mine = annotations["ack-mig-hook/gpu-holders"]
    assert '["3g.20gb",0,null]' in mine and _holders(mine) is not None
    kube_api.annotate_node("node-a", {"ack-mig-hook/gpu-holders": mine.replace('["3g.20gb",0,null]',
                                                                              '["3g.20gb",false,null]')})
    assert _holders(kube_api.nodes["node-a"]["metadata"]["annotations"]["ack-mig-hook/gpu-holders"]) is None
    again = node.run("report-holders")
    assert again.rc == 0 and again.json["written"] is True, again.stderr
    assert _holders(kube_api.nodes["node-a"]["metadata"]["annotations"]["ack-mig-hook/gpu-holders"]) is not None
