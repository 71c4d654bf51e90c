"""install-boot-unit: rendered contents, idempotence, and the unit's own command restoring a rebooted node."""

import base64
import fcntl
import json
import os
import subprocess
import zlib

import pytest

from node_bootstrap.host import bootunit
from tests.node.nodecli import NODE_PYTHON, ROOT, Node
from tests.support.kills import KillAfter, Killed
from tests.support.systemd_unit import SYSTEMD_PATH, Unit, request_under

SEQ = "3g.71gb-2g.35gb-1g.18gb"


def _install(node, root, *extra, **kw):
    return node.run("install-boot-unit", "--sequence", SEQ, "--root", str(root), *extra, **kw)


def _unit(root):
    return (root / "etc/systemd/system/ack-mig-hook.service").read_text()


def test_unit_orders_before_kubelet_and_keeps_the_label_out_of_its_command_line(tmp_path):
    node = Node(tmp_path, gpu="H200", count=1)
    root = tmp_path / "root"
    res = _install(node, root)
    assert res.rc == 0, res.stderr
    assert res.json["changed"] is True
    unit = _unit(root)
    assert "Before=kubelet.service" in unit and "WantedBy=multi-user.target kubelet.service" in unit
    assert "Type=oneshot" in unit
    exec_line = [line for line in unit.splitlines() if line.startswith("ExecStart=")][0]
    assert "--request-file /etc/ack-mig-hook/request.json" in exec_line
    assert "3g.71gb" not in unit  # the label travels as data in the request file
    assert "--device-plugin-restart none" in exec_line and "--capacity-timeout 0" in exec_line
    request = json.loads((root / "etc/ack-mig-hook/request.json").read_text())
    assert request == {"version": 1, "partition": {"kind": "sequence", "value": SEQ}}
    assert res.json["commands"] == [["systemctl", "--root", str(root), "enable", "ack-mig-hook.service"]]
    # a simulated node's systemd took it; the host's systemctl never ran
    assert node.systemctl() == ["systemctl --root %s enable ack-mig-hook.service" % root]
    assert node.commands() == []


def test_installing_twice_changes_nothing_and_a_new_label_rewrites_only_the_request(tmp_path):
    node = Node(tmp_path, gpu="H200", count=1)
    root = tmp_path / "root"
    assert _install(node, root).json["changed"] is True
    unit = _unit(root)
    mtime = (root / "etc/systemd/system/ack-mig-hook.service").stat().st_mtime_ns
    again = _install(node, root)
    assert again.json["changed"] is False and again.json["commands"] == []
    assert (root / "etc/systemd/system/ack-mig-hook.service").stat().st_mtime_ns == mtime
    assert len(node.systemctl()) == 1
    other = node.run("install-boot-unit", "--size", "1g.18gb", "--root", str(root))
    assert other.json["changed"] is True and _unit(root) == unit
    assert json.loads((root / "etc/ack-mig-hook/request.json").read_text())["partition"] == {
        "kind": "size", "value": "1g.18gb"}


def test_boot_unit_bad_request_is_bad_input(tmp_path):
    node = Node(tmp_path, count=1)
    res = node.run("install-boot-unit", "--root", str(tmp_path / "root"))
    assert res.rc == 2 and not (tmp_path / "root").exists()


@pytest.mark.skipif(not os.path.isfile(NODE_PYTHON), reason="no .venv-node here (make node-env)")
def test_the_units_command_restores_the_layout_after_a_reboot(tmp_path):
    """Installed from a checkout, not a bundle, by the node's own Python (the project not installed: only
    PYTHONPATH finds it): the unit runs ``python -B -m node_bootstrap`` with PYTHONPATH the directory that
    holds the package, and started as systemd starts it (only its Environment=, working directory /) it
    restores the layout. The request path moves under the test root, the node's "/"."""
    node = Node(tmp_path, gpu="H200", count=2)
    root = tmp_path / "root"
    assert _install(node, root, python=NODE_PYTHON).rc == 0
    assert node.run("apply", "--sequence", SEQ).rc == 0
    layout = node.layout(1)
    assert node.run("sim-reboot").json["gpus"][1]["mig_mode"]["current"] == "disabled"  # Hopper forgets
    unit = Unit(_unit(root))
    argv = unit.exec_start()
    assert argv[:4] == [NODE_PYTHON, "-B", "-m", "node_bootstrap"]
    assert unit.environment() == {"PYTHONPATH": ROOT}  # what holds node_bootstrap/, not the package itself
    proc = unit.start(request_under(argv, str(root)))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["outcome"] == "success" and result["changes"] == 2 * (1 + 6)
    assert node.layout(1) == layout and node.layout(0) == layout


def test_a_unit_named_the_package_directory_would_not_start(tmp_path):
    """The old unit's PYTHONPATH (the node_bootstrap directory itself) fails on a Python without the
    project, which is every node: the reason the path above must be the directory that holds it."""
    if not os.path.isfile(NODE_PYTHON):
        pytest.skip("no .venv-node here (make node-env)")
    proc = subprocess.run([NODE_PYTHON, "-B", "-m", "node_bootstrap", "--help"], cwd="/", stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
                          env={"PATH": SYSTEMD_PATH, "PYTHONPATH": os.path.join(ROOT, "node_bootstrap")})
    assert proc.returncode == 1 and "No module named node_bootstrap" in proc.stderr
    assert bootunit.package_parent() == ROOT


def test_apply_with_boot_unit_installs_it_once_and_a_rerun_changes_nothing(tmp_path):
    """Delivery runs `apply --boot-unit`: the layout and the unit that restores it after a reboot come
    from one run, and a rerun on a node that is right touches neither."""
    node = Node(tmp_path, gpu="H200", count=1)
    root = tmp_path / "root"
    first = node.run("apply", "--sequence", SEQ, "--boot-unit", "--boot-unit-root", str(root))
    assert first.rc == 0 and first.json["outcome"] == "success" and first.json["changes"] > 0
    boot = first.json["boot_unit"]
    assert boot["installed"] is True and boot["changed"] is True and "error" not in boot
    assert json.loads((root / "etc/ack-mig-hook/request.json").read_text())["partition"] == {
        "kind": "sequence", "value": SEQ}
    exec_line = [line for line in _unit(root).splitlines() if line.startswith("ExecStart=")][0]
    assert " apply " in exec_line and "--boot-unit" not in exec_line  # the unit never reinstalls itself
    assert node.systemctl() == ["systemctl --root %s enable ack-mig-hook.service" % root]
    again = node.run("apply", "--sequence", SEQ, "--boot-unit", "--boot-unit-root", str(root))
    assert again.json["changes"] == 0 and again.json["boot_unit"]["changed"] is False
    assert len(node.systemctl()) == 1 and node.commands() == []


def test_an_apply_without_boot_unit_says_when_an_earlier_unit_would_undo_it_at_boot(tmp_path):
    """A hand-run apply without --boot-unit left an earlier apply's unit in place, and the next reboot put the
    old layout back unseen. It still leaves the unit alone, and says so in its result and on stderr; with the
    same request, or with no unit, it says nothing."""
    node = Node(tmp_path, gpu="H200", count=1)
    root = str(tmp_path / "root")
    assert node.run("apply", "--sequence", SEQ, "--boot-unit", "--boot-unit-root", root).rc == 0
    unit_before = _unit(tmp_path / "root")
    other = node.run("apply", "--sequence", "3g.71gb-3g.71gb", "--boot-unit-root", root)
    assert other.rc == 0 and other.json["outcome"] == "success", other.stderr
    stale = other.json["boot_unit"]
    assert stale["installed"] is False and "re-applies another request" in stale["stale"]
    assert "pass --boot-unit to make it this one, or run uninstall-boot-unit" in stale["stale"]
    assert "warning: the boot unit ack-mig-hook.service" in other.stderr
    assert _unit(tmp_path / "root") == unit_before  # left as it was: installing is --boot-unit's to do
    back = node.run("apply", "--sequence", SEQ, "--boot-unit-root", root)
    assert back.rc == 0 and "boot_unit" not in back.json
    fresh = Node(tmp_path / "other", gpu="H200", count=1)
    assert "boot_unit" not in fresh.run("apply", "--sequence", SEQ, "--boot-unit-root", str(tmp_path / "none")).json


def test_boot_unit_follows_reboot_required_but_not_failure(tmp_path):
    node = Node(tmp_path, gpu="A100-SXM4-40GB", count=1)
    busy_root, reboot_root = tmp_path / "busy", tmp_path / "reboot"
    busy = node.run("apply", "--sequence", "9-9", "--boot-unit", "--boot-unit-root", str(busy_root),
                    "--sim-fault", "processes")
    assert busy.rc == 4 and "boot_unit" not in busy.json and not busy_root.exists()
    reboot = node.run("apply", "--sequence", "9-9", "--boot-unit", "--boot-unit-root", str(reboot_root),
                      "--sim-fault", "passthrough")
    assert reboot.rc == 5 and reboot.json["outcome"] == "reboot-required"
    assert reboot.json["boot_unit"]["installed"] is True  # the reboot itself will finish the job


def test_a_failing_systemctl_is_reported_without_hiding_the_gpus(tmp_path):
    node = Node(tmp_path, gpu="H200", count=1)
    node.fail_systemctl("enable")
    res = node.run("apply", "--sequence", SEQ, "--boot-unit", "--boot-unit-root", str(tmp_path / "root"))
    assert res.rc == 0 and res.json["outcome"] == "success"
    assert res.json["boot_unit"]["installed"] is False
    assert res.json["boot_unit"]["error"].startswith("systemctl --root exited 1")
    alone = node.run("install-boot-unit", "--sequence", SEQ, "--root", str(tmp_path / "other"))
    assert alone.rc == 1 and alone.json["error"]["code"] == "boot-unit-failed"
    # systemd fixed, the rerun troubleshooting.md asks for enables the unit: it said "installed" and called
    # no systemctl, finding the files it had written unchanged (found by a review of the node side)
    systemd = node._sim_systemd()
    state = systemd.load()
    state["failing"] = {}
    systemd.save(state)
    node.clear_calls()
    again = node.run("apply", "--sequence", SEQ, "--boot-unit", "--boot-unit-root", str(tmp_path / "root"))
    assert again.rc == 0 and again.json["boot_unit"]["installed"] is True, again.json["boot_unit"]
    assert "systemctl --root %s enable ack-mig-hook.service" % (tmp_path / "root") in node.systemctl()


def test_dollar_and_percent_in_options_reach_apply_literally():
    state_dir = "/var/lib/$HOME/${USER}/100%"
    unit = bootunit.render_unit("/usr/bin/python3", "/opt/$pkg", "/etc/ack-mig-hook/request.json",
                                ["--state-dir", state_dir, "--clients", "systemd:a$b"])
    exec_line = [line for line in unit.splitlines() if line.startswith("ExecStart=")][0][len("ExecStart="):]
    assert '"/var/lib/$$HOME/$${USER}/100%%"' in exec_line
    argv = Unit(unit).exec_start()  # refuses a lone $ systemd would expand
    assert argv[argv.index("--state-dir") + 1] == state_dir
    assert argv[argv.index("--clients") + 1] == "systemd:a$b"
    # Environment= does no $ expansion: a doubled $ there would reach Python doubled
    assert 'Environment=PYTHONPATH="/opt/$pkg"' in unit.splitlines()
    assert Unit(unit).environment() == {"PYTHONPATH": "/opt/$pkg"}


def test_the_units_lock_wait_ends_before_systemd_gives_up_on_it():
    unit = bootunit.render_unit("/usr/bin/python3", "/opt/pkg", "/etc/ack-mig-hook/request.json", [])
    argv = Unit(unit).exec_start()
    lock = float(argv[argv.index("--lock-timeout") + 1])
    start = float(Unit(unit).values("TimeoutStartSec")[0])
    # room for the apply itself after the lock: the client stop wait (60 s) and a reset (up to 300 s)
    assert lock + 60 + 300 < start


def test_from_a_bundle_the_runners_deadline_and_kill_end_before_systemd_gives_up():
    """The runner SIGTERMs apply at its deadline, SIGKILLs GRACE later and drains the pipes at most twice
    PIPE_DRAIN_S: all before TimeoutStartSec, and the lock wait, a client stop and a reset before the deadline."""
    from functions.delivery import node_runner

    origin = bootunit.BundleOrigin("/var/lib/ack-mig-hook", "a" * 64)
    unit = Unit(bootunit.render_unit("/usr/bin/python3", "/opt/pkg", "/etc/ack-mig-hook/request.json", [], origin))
    argv = unit.exec_start()
    assert argv[:4] == ["/usr/bin/python3", "-B", "-I", "/var/lib/ack-mig-hook/bundles/%s/ack_mig_runner.py" % ("a" * 64)]
    digest, node_root, args_b64, deadline, python, instance, names, grace = argv[4:]
    assert (digest, node_root, python, instance) == ("a" * 64, "/var/lib/ack-mig-hook", "/usr/bin/python3", "-")
    args = json.loads(base64.b64decode(args_b64).decode("utf-8"))
    assert args[:3] == ["apply", "--request-file", "/etc/ack-mig-hook/request.json"]
    assert json.loads(zlib.decompress(base64.b64decode(names)).decode("utf-8")) == {}
    assert "PYTHONPATH" not in unit.environment() and "Environment=" not in unit.text
    lock = float(args[args.index("--lock-timeout") + 1])
    start = float(unit.values("TimeoutStartSec")[0])
    assert lock + 60 + 300 < float(deadline)
    assert float(deadline) + float(grace) + 2 * node_runner.PIPE_DRAIN_S < start


def test_bundle_origin_is_taken_only_where_the_package_really_is(tmp_path):
    """The runner's ACK_MIG_BUNDLE_DIR is believed only when it names ROOT/bundles/HASH holding the runner and
    this very package; anything else (a developer's shell that kept the variable) gets the plain unit."""
    digest = "b" * 64
    bundle_dir = tmp_path / "node" / "bundles" / digest
    (bundle_dir / "node_bootstrap").mkdir(parents=True)
    env = {bootunit.BUNDLE_ENV: str(bundle_dir)}
    assert bootunit.bundle_origin(env, str(bundle_dir)) is None  # no runner in it
    (bundle_dir / bootunit.RUNNER_NAME).write_text("# runner")
    origin = bootunit.bundle_origin(env, str(bundle_dir))
    assert origin == (os.path.realpath(str(tmp_path / "node")), digest)
    assert origin.directory == os.path.realpath(str(bundle_dir))
    assert bootunit.bundle_origin(env, ROOT) is None  # the package is not the one in that bundle
    assert bootunit.bundle_origin({}, str(bundle_dir)) is None
    assert bootunit.bundle_origin({bootunit.BUNDLE_ENV: "relative/bundles/" + digest}, str(bundle_dir)) is None
    other = tmp_path / "node" / "cache" / digest
    other.mkdir(parents=True)
    (other / bootunit.RUNNER_NAME).write_text("# runner")
    assert bootunit.bundle_origin({bootunit.BUNDLE_ENV: str(other)}, str(other)) is None  # not under bundles/


@pytest.mark.kube
def test_converged_gpus_get_the_unit_inside_the_lock_even_when_the_capacity_wait_fails(tmp_path, kube_api):
    """The GPUs are right, so the next boot must restore them, whatever the device plugin reports; and the
    unit is there before the final label, while this apply still holds the node lock."""
    kube_api.add_node("node-a")
    node = Node(tmp_path, gpu="H200", count=1)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a"))
    root = tmp_path / "root"
    unit_path = root / "etc/systemd/system/ack-mig-hook.service"
    seen = []

    def on_patch(name, obj):
        state = obj["metadata"]["labels"].get("nvidia.com/mig.config.state")
        seen.append((state, unit_path.exists(), _lock_held(tmp_path / "apply.lock")))

    kube_api.on_node_patch = on_patch
    res = node.run("apply", "--sequence", SEQ, "--boot-unit", "--boot-unit-root", str(root),
                   "--capacity-timeout", "0.3", "--capacity-interval", "0.1")
    assert res.rc == 1 and res.json["error"]["code"] == "capacity-timeout"
    assert res.json["boot_unit"]["installed"] is True and unit_path.exists()
    assert seen == [("pending", False, True), ("failed", True, True)]


def _lock_held(path):
    fd = os.open(str(path), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.mark.skipif(not os.path.isfile(NODE_PYTHON), reason="no .venv-node here (make node-env)")
def test_the_units_command_restores_a_per_gpu_layout_after_a_hopper_reboot(tmp_path):
    """An auto pool's per-GPU request never turns MIG on (that may need a reset while pods run); at boot
    nothing runs yet, and a Hopper GPU comes back with MIG off: the unit's run (``--at-boot``) turns it back
    on for each GPU whose layout is not empty. Without it the unit reported success and restored nothing, and
    the node, labelled success, was never a fresh node again: whole GPUs for good. A GPU the request keeps
    whole stays whole."""
    node = Node(tmp_path, gpu="H200", count=3)
    root = tmp_path / "root"
    doc = {"version": 2, "kind": "per-gpu", "destroy": True, "gpus": [
        {"index": 0, "layout": [{"profile": "3g.71gb", "start": 0}, {"profile": "3g.71gb", "start": 4}]},
        {"index": 1, "layout": [{"profile": "7g.141gb", "start": 0}]}, {"index": 2, "layout": []}]}
    request = base64.b64encode(json.dumps(doc).encode()).decode()
    assert node.run("install-boot-unit", "--request-b64", request, "--root", str(root), python=NODE_PYTHON).rc == 0
    assert node.run("apply", "--sequence", "7g.141gb").rc == 0  # every GPU with MIG on and one 7g.141gb
    assert node.run("apply", "--request-b64", request).rc == 0
    layouts = [node.layout(i) for i in range(3)]
    assert layouts[2] == []  # GPU 2: MIG on, no instance (the reboot turns the mode off, the unit leaves it)
    assert [g["mig_mode"]["current"] for g in node.run("sim-reboot").json["gpus"]] == ["disabled"] * 3
    unit = Unit(_unit(root))
    argv = unit.exec_start()
    assert "--at-boot" in argv
    proc = unit.start(request_under(argv, str(root)))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["outcome"] == "success", result
    assert [node.layout(i) for i in range(2)] == layouts[:2]
    assert [g["mig_mode"]["current"] for g in node.run("status").json["gpus"]] == ["enabled", "enabled", "disabled"]
    assert result.get("left") == [{"gpu": 2, "why": "MIG mode is off"}]
    # The same run without --at-boot (an apply at any other time) never turns MIG on.
    assert node.run("sim-reboot").rc == 0
    plain = node.run("apply", "--request-b64", request)
    assert plain.rc == 0 and plain.json["changes"] == 0 and len(plain.json["left"]) == 3


def test_a_unit_file_is_on_disk_before_it_takes_the_old_ones_name(tmp_path, monkeypatch):
    """The request file is written just before the reboot a reboot-required apply asks for: synced before the
    rename, so a power loss leaves the old file or the new one (as jsonfile.write_json does)."""
    from node_bootstrap.host import unitfile

    order = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(unitfile.os, "fsync", lambda fd: order.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(unitfile.os, "rename", lambda a, b: order.append("rename") or real_rename(a, b))
    assert unitfile.write_if_changed(str(tmp_path / "etc" / "request.json"), '{"version": 1}\n') is True
    assert order == ["fsync", "rename"]
    assert unitfile.write_if_changed(str(tmp_path / "etc" / "request.json"), '{"version": 1}\n') is False


def test_a_private_file_is_never_readable_by_others_while_it_is_written(tmp_path, monkeypatch):
    """The request and the enable-pending marker are 0600: their temporary was created with the umask's mode
    (0644 under the usual 022) and chmodded only after the write, readable by every user until then."""
    import stat

    from node_bootstrap.host import unitfile

    seen = []
    real_fsync = os.fsync
    monkeypatch.setattr(unitfile.os, "fsync", lambda fd: seen.append(stat.S_IMODE(os.fstat(fd).st_mode)) or
                        real_fsync(fd))
    old = os.umask(0o022)
    try:
        path = str(tmp_path / "etc" / "request.json")
        assert unitfile.write_if_changed(path, '{"version": 1}\n', 0o600) is True
        assert unitfile.write_if_changed(str(tmp_path / "etc" / "unit.service"), "[Unit]\n") is True
    finally:
        os.umask(old)
    assert seen == [0o600, 0o644] and stat.S_IMODE(os.stat(path).st_mode) == 0o600


def _rebooted_with_a_client_left_stopped(tmp_path):
    """A node whose apply was killed after stopping dcgm-exporter (left in the stopped-clients record), with the
    boot unit installed, rebooted: its boot run is next. Returns the node and the boot unit's root."""
    node = Node(tmp_path, gpu="A100-SXM4-40GB", count=1, clients="systemd:dcgm-exporter.service")
    node.set_unit("dcgm-exporter.service")
    root = tmp_path / "root"
    killed = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--boot-unit", "--boot-unit-root", str(root),
                      "--sim-fault", "crash-after:2")
    assert killed.rc < 0 and not node.unit_active("dcgm-exporter.service")
    assert node.run("install-boot-unit", "--sequence", "3g.20gb-3g.20gb", "--root", str(root)).rc == 0
    assert node.run("sim-reboot").rc == 0
    return node, root


def test_the_boot_run_queues_the_clients_a_killed_run_left_stopped_without_waiting_for_them(tmp_path):
    """A run killed after stopping dcgm-exporter leaves it in the stopped-clients record. At boot the unit
    starts it again; dcgm-exporter is ordered after the unit (Before=), so a blocking `systemctl start` from
    inside the unit would wait for the unit itself: the start is queued (--no-block)."""
    node, root = _rebooted_with_a_client_left_stopped(tmp_path)
    node.clear_calls()
    boot = node.run("apply", "--request-file", str(root / "etc/ack-mig-hook/request.json"), "--at-boot",
                    "--device-plugin-restart", "none")
    assert boot.rc == 0, boot.stderr
    assert "systemctl --no-block start dcgm-exporter.service" in node.systemctl()
    assert "systemctl start dcgm-exporter.service" not in node.systemctl()
    assert node.unit_active("dcgm-exporter.service")


def test_an_enable_that_failed_is_owed_to_the_next_install_and_a_working_unit_is_never_removed(tmp_path):
    """An install whose `systemctl enable` failed: the rerun finds its files unchanged and must enable all the
    same; an earlier fix removed the unit file, which also removed a unit that was enabled and working when
    only the request changed (found by the review of this change)."""
    from node_bootstrap.mig import PartitionSpec

    calls = []

    def runner(fails=()):
        def run(argv):
            calls.append(" ".join(argv))
            return (1, "Failed to connect to bus: Connection timed out") if argv[-2] in fails else (0, "")
        return run

    root = str(tmp_path)
    unit = bootunit._unit_path(root, bootunit.UNIT_NAME)
    first = bootunit.install(PartitionSpec("sequence", "3g.40gb-3g.40gb"), root, runner=runner())
    assert first.errors == [] and os.path.exists(unit)
    failed = bootunit.install(PartitionSpec("sequence", "7g.80gb"), root, runner=runner(fails=("enable",)))
    assert failed.errors and os.path.exists(unit)  # the working unit stays; only its enable is owed
    del calls[:]
    again = bootunit.install(PartitionSpec("sequence", "7g.80gb"), root, runner=runner())
    assert again.errors == [] and again.changed is True and any(c.endswith("enable ack-mig-hook.service") for c in calls)
    del calls[:]
    settled = bootunit.install(PartitionSpec("sequence", "7g.80gb"), root, runner=runner())
    assert settled.changed is False and calls == []  # nothing owed any more: no systemctl at all
    assert bootunit.uninstall(root, runner=runner()).changed
    assert not os.path.exists(os.path.join(root, "etc/ack-mig-hook"))  # request and marker gone, then the folder


class _OfflineSystemd(object):
    """``systemctl --root R enable|disable UNIT...`` on an image tree: enable reads each unit's [Install]
    section from its file as it is at that moment and makes the wants-links (systemctl(1), "--root"); so a
    unit counts as enabled from the text it had then."""

    def __init__(self, root):
        self.root, self.enabled = root, {}

    def __call__(self, argv):
        assert argv[:3] == ["systemctl", "--root", os.path.abspath(self.root)], argv
        verb, units = argv[3], argv[4:]
        for unit in units:
            if verb == "enable":
                with open(bootunit._unit_path(self.root, unit)) as fh:
                    self.enabled[unit] = fh.read()
            elif verb == "disable":
                self.enabled.pop(unit, None)
        return 0, ""


class _Kills(KillAfter):
    """Counts install's writes (a file written, a file removed, a systemctl call) and raises Killed right
    after the k-th."""

    def __init__(self, k, systemd):
        super(_Kills, self).__init__(k)
        self.systemd, self.os = systemd, self.module(os, "remove", "remove")

    def write_if_changed(self, path, text, mode=0o644):
        from node_bootstrap.host.unitfile import write_if_changed

        if write_if_changed(path, text, mode):
            self.count("write %s" % os.path.basename(path))
            return True
        return False

    def runner(self, argv):
        out = self.systemd(argv)
        self.count(" ".join(argv[3:]))
        return out


@pytest.mark.parametrize("before", [None, "3g.40gb-3g.40gb"], ids=["fresh", "request-changed"])
def test_an_install_killed_after_any_write_is_finished_by_the_rerun_and_then_settled(tmp_path, monkeypatch, before):
    """Every write of install is a kill point in turn (the unit files, the request, the marker, each systemctl):
    the rerun ends with the files of the request and every unit enabled from the text it now has, and a third
    install changes nothing. The marker was written only just before the enable: a run killed after writing
    the unit file left nothing owed, and every rerun found its files unchanged and never enabled the unit."""
    from node_bootstrap.host import holdersunit
    from node_bootstrap.mig import PartitionSpec
    from node_bootstrap.request import GpuLayouts

    spec = GpuLayouts(((0, (("3g.40gb", 0), ("2g.20gb", 4))), (1, (("7g.80gb", 0),))))
    report = holdersunit.Report(["--kubeconfig", "/etc/kubernetes/kubelet.conf"],
                                "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
    points = []
    for k in range(1, 40):
        root = str(tmp_path / str(k))
        systemd = _OfflineSystemd(root)
        if before:
            assert bootunit.install(PartitionSpec("sequence", before), root, runner=systemd).errors == []
        kills = _Kills(k, systemd)
        with monkeypatch.context() as patch:
            patch.setattr(bootunit, "write_if_changed", kills.write_if_changed)
            patch.setattr(bootunit, "os", kills.os)
            try:
                bootunit.install(spec, root, runner=kills.runner, report=report)
                break  # the whole install ran: every write has been a kill point
            except Killed:
                points.append(kills.calls[-1])
        again = bootunit.install(spec, root, runner=systemd, report=report)
        # killed after its last write (the marker's removal) the install was whole: the rerun changes nothing
        assert again.errors == [] and again.changed == (points[-1] != "remove enable-pending"), (points[-1], again)
        units = {n: open(bootunit._unit_path(root, n)).read() for n in (bootunit.UNIT_NAME,) + holdersunit.NAMES}
        with open(again.request_path) as fh:
            assert fh.read() == bootunit.request_document(spec), points[-1]
        for name in (bootunit.UNIT_NAME,) + holdersunit.STARTED:
            assert systemd.enabled.get(name) == units[name], (points[-1], name)
        assert not os.path.lexists(os.path.join(root, "etc/ack-mig-hook", bootunit.ENABLE_PENDING_NAME)), points[-1]
        settled = bootunit.install(spec, root, runner=systemd, report=report)
        assert settled.changed is False and settled.commands == [], points[-1]
    steps = " | ".join(points)
    for expected in ("write request.json", "write ack-mig-hook-holders.timer", "enable ack-mig-hook.service",
                     "enable ack-mig-hook-holders.path", "remove enable-pending") + (("write ack-mig-hook.service",)
                                                                                      if before is None else ()):
        assert expected in steps, (expected, steps)


def test_a_client_whose_queued_start_failed_after_the_boot_run_is_reported_by_the_next_run(tmp_path):
    """The boot run only queues the start (--no-block): systemctl has exited 0 when the unit, started after the
    boot unit, fails. That run cannot know; the next run looks, says so among its client problems, and starts
    the unit again (a blocking start, whose failure it reports too)."""
    node, root = _rebooted_with_a_client_left_stopped(tmp_path)
    node.fail_systemctl("start", "Job for dcgm-exporter.service failed because the control process exited with "
                                 "error code.")
    boot = node.run("apply", "--request-file", str(root / "etc/ack-mig-hook/request.json"), "--at-boot",
                    "--device-plugin-restart", "none")
    assert boot.rc == 0 and "client_problems" not in boot.json, boot.stderr  # queued: nothing known yet
    assert not node.unit_active("dcgm-exporter.service")  # its start failed after the queueing
    node.clear_calls()
    later = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--device-plugin-restart", "none")
    assert later.rc == 0, later.stderr
    problems = later.json.get("client_problems", [])
    assert "systemd:dcgm-exporter.service, queued to start at boot, is failed; starting it again" in problems
    assert any(p.startswith("could not start systemd:dcgm-exporter.service: Job for") for p in problems)
    assert "systemctl start dcgm-exporter.service" in node.systemctl()
    # the queue is said once: the run after it has nothing queued to look at, but starts the unit again (still
    # stopped), and says that it would not start, until it does
    node.clear_calls()
    again = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--device-plugin-restart", "none")
    assert again.rc == 0 and again.json["client_problems"] == [
        p for p in problems if p.startswith("could not start")], again.json
    assert "systemctl is-active dcgm-exporter.service" not in node.systemctl()
    assert "systemctl start dcgm-exporter.service" in node.systemctl()
    state = node._sim_systemd().load()
    state["failing"] = {}
    node._sim_systemd().save(state)
    healed = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--device-plugin-restart", "none")
    assert healed.rc == 0 and "client_problems" not in healed.json and node.unit_active("dcgm-exporter.service")


class _Blocked(Exception):
    pass


@pytest.mark.parametrize("where", ["etc/ack-mig-hook/request.json", "etc/systemd/system/ack-mig-hook.service",
                                   "etc/ack-mig-hook/enable-pending", "etc/ack-mig-hook/request.json.tmp"])
def test_a_fifo_where_a_boot_unit_file_is_expected_is_replaced_not_waited_on(tmp_path, where):
    """A FIFO at the request, the unit, the enable-pending marker or a leftover temporary file: install opened
    it to compare or to write, and waited for a writer (or a reader) for good; the apply holding the node lock
    with it. Now a file that is no regular file differs from the one wanted, and is replaced."""
    import signal

    from node_bootstrap.mig import PartitionSpec

    root = str(tmp_path)
    fifo = os.path.join(root, where)
    os.makedirs(os.path.dirname(fifo))
    os.mkfifo(fifo)

    def blocked(signum, frame):
        raise _Blocked(where)
    old = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(10)
    try:
        result = bootunit.install(PartitionSpec("sequence", "7g.80gb"), root, runner=lambda argv: (0, ""))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert result.errors == [] and result.changed
    assert bootunit.stale(PartitionSpec("sequence", "7g.80gb"), root) == ""
    for name in ("etc/ack-mig-hook/request.json", "etc/systemd/system/ack-mig-hook.service"):
        assert os.path.isfile(os.path.join(root, name))
    assert not os.path.lexists(os.path.join(root, "etc/ack-mig-hook/enable-pending"))


@pytest.mark.parametrize("files", [False, True], ids=["empty", "with-files"])
def test_a_directory_at_the_enable_pending_marker_still_gets_the_unit_enabled(tmp_path, files):
    """A directory where the enable-pending marker goes (mkdir by hand, or hostile state) read as the marker,
    but neither writing the marker over it nor removing it could work: every install raised ("boot unit not
    written: Is a directory", install-boot-unit an internal error) and the unit was never installed or
    enabled again. It still says the enable is owed, so the calls are made; an empty one is then removed as
    the marker is, one with files in it is left and named in one line, with what to do."""
    from node_bootstrap.mig import PartitionSpec

    root = str(tmp_path / "root")
    marker = os.path.join(root, "etc/ack-mig-hook", bootunit.ENABLE_PENDING_NAME)
    os.makedirs(marker)
    if files:
        open(os.path.join(marker, "note"), "w").close()
    calls = []

    def runner(argv):
        calls.append(" ".join(argv[3:]))
        return 0, ""
    spec = PartitionSpec("sequence", "7g.80gb")
    first = bootunit.install(spec, root, runner=runner)
    assert calls == ["enable ack-mig-hook.service"] and first.changed
    assert bootunit.stale(spec, root) == ""  # the request and the unit are written
    if not files:
        assert first.errors == [] and not os.path.lexists(marker)
        del calls[:]
        assert bootunit.install(spec, root, runner=runner).changed is False and calls == []  # settled
        assert bootunit.uninstall(root, runner=runner).errors == []
        return
    assert first.errors == ["the enable-pending marker %s is not ack-mig-hook's and cannot be removed (Directory "
                            "not empty): remove it (rm -r %s); until then every install calls systemctl again"
                            % (marker, marker)]
    assert os.path.exists(os.path.join(marker, "note"))  # someone's file: never removed
    node = Node(tmp_path, gpu="H200", count=1)
    res = node.run("install-boot-unit", "--sequence", "7g.80gb", "--root", root)
    assert res.rc == 1 and res.json["error"] == {"code": "boot-unit-failed", "message": first.errors[0]}, res
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    gone = node.run("uninstall-boot-unit", "--root", root)
    assert gone.rc == 1 and gone.json["error"]["message"] == first.errors[0]
    assert not os.path.exists(os.path.join(root, "etc/systemd/system/ack-mig-hook.service"))


def test_a_boot_unit_file_that_cannot_be_written_or_removed_is_one_line_naming_it(tmp_path):
    """A directory where the request file goes (install) or where the unit file is (uninstall): install-boot-unit
    and uninstall-boot-unit let the OSError out, an internal error as if a bug. apply said the same line in its
    boot_unit; now every command says it, boot-unit-failed."""
    node = Node(tmp_path, gpu="H200", count=1)
    root = tmp_path / "root"
    request = root / "etc/ack-mig-hook/request.json"
    request.mkdir(parents=True)
    res = _install(node, root)
    assert res.rc == 1 and res.json["error"] == {"code": "boot-unit-failed", "message": (
        "boot unit not written: [Errno 21] Is a directory: '%s.tmp' -> '%s'" % (request, request))}, res.json
    applied = node.run("apply", "--sequence", SEQ, "--boot-unit", "--boot-unit-root", str(root))
    assert applied.rc == 0 and applied.json["boot_unit"] == {"installed": False, "error": res.json["error"]["message"]}
    unit = tmp_path / "r2/etc/systemd/system/ack-mig-hook.service"
    unit.mkdir(parents=True)
    gone = node.run("uninstall-boot-unit", "--root", str(tmp_path / "r2"))
    assert gone.rc == 1 and gone.json["error"] == {"code": "boot-unit-failed", "message": (
        "boot unit not removed: [Errno 21] Is a directory: '%s'" % unit)}, gone.json


def test_the_directories_an_install_makes_are_writable_by_root_alone_whatever_the_umask(tmp_path):
    """Made under umask 0, /etc/ack-mig-hook was writable by everyone: any local user could rename a request of
    their own over request.json, which the boot unit applies as root at every boot. The directories an install
    makes are 0755 at most, whatever the umask; the files keep their own modes."""
    from node_bootstrap.mig import PartitionSpec

    root = str(tmp_path / "image")
    old = os.umask(0)
    try:
        done = bootunit.install(PartitionSpec("sequence", "3g.40gb-3g.40gb"), root, runner=lambda argv: (0, ""))
    finally:
        os.umask(old)
    assert done.errors == []
    for sub in ("etc/ack-mig-hook", "etc/systemd/system", "etc/systemd", "etc"):
        assert os.stat(os.path.join(root, sub)).st_mode & 0o022 == 0, sub
    assert os.stat(os.path.join(root, "etc/ack-mig-hook/request.json")).st_mode & 0o777 == 0o600


def test_a_config_directory_others_can_write_is_repaired_and_its_request_written_anew(tmp_path):
    """/etc/ack-mig-hook made 0777 by an older run (its directories followed the umask) was kept as it was: any
    local user could swap the request the boot unit applies as root at every boot. install makes it go-w,
    says so in one line, and writes the request anew when the one there is not its own to trust (writable
    by others); the unit then reads only what this install wrote."""
    node = Node(tmp_path)
    root = tmp_path / "root"
    config = root / "etc" / "ack-mig-hook"
    config.mkdir(parents=True)
    os.chmod(str(config), 0o777)
    assert _install(node, root).rc == 0
    request = config / bootunit.REQUEST_NAME
    ours = request.read_text()
    os.chmod(str(config), 0o777)
    os.chmod(str(request), 0o666)  # the older run's file, open to anybody meanwhile
    res = _install(node, root)
    assert res.rc == 0, res.stderr
    assert os.stat(str(config)).st_mode & 0o777 == 0o755
    assert os.stat(str(request)).st_mode & 0o777 == 0o600 and request.read_text() == ours
    assert ("%s was writable by others (mode 0777): made 0755; a file in it others could write is written anew"
            % config) in " ".join(res.stderr.split()), res.stderr
    again = _install(node, root)
    assert again.rc == 0 and again.stderr == "" and not again.json["changed"]


def test_a_config_directory_another_user_owns_is_refused(tmp_path):
    """Owned by another user, the directory the boot unit's request lives in is not this tool's to repair."""
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    node = Node(tmp_path)
    root = tmp_path / "root"
    config = root / "etc" / "ack-mig-hook"
    config.mkdir(parents=True)
    os.chown(str(config), 65534, 65534)
    res = _install(node, root)
    assert res.rc == 1 and res.json["error"]["code"] == "config-dir-unsafe", res.json
    assert res.json["error"]["message"].startswith("the boot unit's directory %s is owned by uid 65534" % config)
    assert not (config / bootunit.REQUEST_NAME).exists()


@pytest.mark.parametrize("made", ["directory", "request"])
def test_the_boot_run_refuses_a_config_directory_or_request_others_could_write_since_the_install(tmp_path, made):
    """install repairs /etc/ack-mig-hook (go-w, the request written anew), but the boot run read the request in
    it without looking: a directory made 0777 after the install (or a request made 0666) let any local user put
    the layout the unit applies as root at every boot. The boot run checks it with the same function and
    refuses (``config-dir-unsafe``, the node labelled failed), changing nothing, and never repairs a directory
    it was merely pointed at."""
    node = Node(tmp_path, gpu="H200", count=1)
    root = tmp_path / "root"
    assert _install(node, root).rc == 0
    config = root / "etc" / "ack-mig-hook"
    request = config / bootunit.REQUEST_NAME
    assert node.run("sim-reboot").rc == 0
    os.chmod(str(config if made == "directory" else request), 0o777 if made == "directory" else 0o666)
    node.kube_args = []  # labels go to the simulated node's stand-in (<state>.host/node-labels.json)
    boot = node.run("apply", "--request-file", str(request), "--at-boot", "--device-plugin-restart", "none")
    assert boot.rc == 1 and boot.json["error"]["code"] == "config-dir-unsafe", boot.json
    assert boot.json["changes"] == 0 and node.layout(0) == []
    with open(os.path.join(node.host, "node-labels.json")) as fh:  # not left saying the last boot's success
        assert json.load(fh)["labels"]["nvidia.com/mig.config.state"] == "failed"
    unsafe = config if made == "directory" else request
    assert boot.json["error"]["message"].startswith(
        "the boot unit's %s %s is writable by others (mode %s)" % (
            "directory" if made == "directory" else "request", unsafe, "0777" if made == "directory" else "0666"))
    assert os.stat(str(config)).st_mode & 0o777 == (0o777 if made == "directory" else 0o755)  # left as it was
    # repaired by the next install, the boot run applies it
    assert _install(node, root).rc == 0
    again = node.run("apply", "--request-file", str(request), "--at-boot", "--device-plugin-restart", "none")
    assert again.rc == 0, again.stderr
    assert len(node.layout(0)) == len(SEQ.split("-"))


def test_the_boot_run_judges_a_config_directory_that_is_a_link_by_what_it_links_to(tmp_path):
    """/etc/ack-mig-hook as a symbolic link (a node image that keeps its configuration on another disk) was
    passed unchecked, since lstat saw no directory: the request the unit applies as root at every boot was read
    through it from a directory anybody could write. The directory it links to is judged as the directory
    itself; the boot run refuses it, changing nothing."""
    node = Node(tmp_path, gpu="H200", count=1)
    root = tmp_path / "root"
    assert _install(node, root).rc == 0
    config = root / "etc" / "ack-mig-hook"
    elsewhere = tmp_path / "config-disk"
    os.rename(str(config), str(elsewhere))
    os.symlink(str(elsewhere), str(config))
    os.chmod(str(elsewhere), 0o777)
    assert node.run("sim-reboot").rc == 0
    request = config / bootunit.REQUEST_NAME
    boot = node.run("apply", "--request-file", str(request), "--at-boot", "--device-plugin-restart", "none")
    assert boot.rc == 1 and boot.json["error"]["code"] == "config-dir-unsafe", boot.json
    assert boot.json["changes"] == 0 and node.layout(0) == []
    assert boot.json["error"]["message"].startswith(
        "the boot unit's directory %s (a symbolic link to %s) is writable by others (mode 0777)"
        % (config, elsewhere)), boot.json
    os.chmod(str(elsewhere), 0o755)  # what it links to made safe: the boot run applies the request through it
    again = node.run("apply", "--request-file", str(request), "--at-boot", "--device-plugin-restart", "none")
    assert again.rc == 0, again.stderr
    assert len(node.layout(0)) == len(SEQ.split("-"))
