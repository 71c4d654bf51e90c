"""Node-side safety: a busy GPU is refused before the label says anything but ``failed``; ``--force`` signals
only the process NVML named; nothing but plain values reaches the boot unit; the unit's ordering; GPU
resets name GPUs by PCI bus id."""

import json
import os
import signal
import subprocess
import sys
import time

import pynvml
import pytest

from node_bootstrap.host import bootunit, processkill
from node_bootstrap.errors import BadInput, RebootRequired
from node_bootstrap.mig import PartitionSpec
from node_bootstrap.driver.nvml import NvmlWriter
from node_bootstrap.commands.reconcile import Host, reconcile
from tests.node.nodecli import Node, node_python

STATE = "nvidia.com/mig.config.state"


# --- a busy GPU: refused before anything changes, the label included -----------------------------

@pytest.mark.kube
def test_a_refused_apply_labels_failed_alone_never_pending_first(tmp_path, kube_api):
    kube_api.add_node("node-a")
    node = Node(tmp_path)
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a"))
    seen = []
    kube_api.on_node_patch = lambda name, obj: seen.append(obj["metadata"]["labels"].get(STATE))
    before = open(node.state).read() if os.path.exists(node.state) else None
    res = node.run("apply", "--sequence", "9-9", "--sim-fault", "processes")
    assert res.rc == 4 and res.json["error"]["code"] == "gpu-busy" and res.json["changes"] == 0
    assert seen == ["failed"] and res.json["labels"]["states"] == ["failed"]
    assert before is None or open(node.state).read() == before


def test_a_refused_apply_on_a_simulated_node_labels_its_stand_in_failed_alone(tmp_path):
    node = Node(tmp_path)
    node.kube_args = []  # labels go to <state>.host/node-labels.json
    res = node.run("apply", "--sequence", "9-9", "--sim-fault", "processes-unreadable")
    assert res.rc == 4
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        doc = json.load(fh)
    assert [h["labels"][STATE] for h in doc["history"]] == ["failed"]
    assert doc["labels"][STATE] == "failed"


# --- --force: only the process NVML named ---------------------------------------------------------

@pytest.mark.parametrize("pid", [-1, 0, 1])
def test_force_never_signals_init_or_process_groups(pid):
    assert processkill.refusal(pid) is not None
    sent = []
    assert processkill.kill(pid, lambda m: None, send=lambda p, s: sent.append((p, s))) is False
    assert sent == []


def test_force_never_signals_itself_or_its_own_process_group():
    assert "this process" in processkill.refusal(os.getpid())
    # a child in our own process group (as a shell pipeline or the boot unit's cgroup would be)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert "own process group" in processkill.refusal(child.pid)
        messages = []
        assert processkill.kill(child.pid, messages.append, grace=0.1) is False
        assert child.poll() is None and "not killing %d" % child.pid in messages[0]
    finally:
        child.kill()
        child.wait()


def test_force_sends_sigterm_then_sigkill_to_a_process_that_ignores_it():
    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                              "time.sleep(60)"], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout.readline().strip() == b"ready"
        assert processkill.kill(child.pid, lambda m: None, grace=0.5) is True
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _stat(pid, start, name="worker) x"):
    # proc(5): the command name may hold ") " itself; field 22 is the start time
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 12 + [str(start), "0"]
    return "%d (%s) %s\n" % (pid, name, " ".join(fields))


def test_force_rechecks_the_start_time_before_sigkill(tmp_path):
    """The PID exits during the grace period and a new process gets it: that one is left alone."""
    pid = 4000000  # above any real pid_max default, so group lookups find nothing of ours
    (tmp_path / str(pid)).mkdir()
    stat = tmp_path / str(pid) / "stat"
    stat.write_text(_stat(pid, 1111))
    assert processkill.start_time(pid, str(tmp_path)) == 1111
    sent = []

    def send(p, sig):
        sent.append(sig)
        stat.write_text(_stat(pid, 2222))  # the process went and its PID was reused

    assert processkill.kill(pid, lambda m: None, grace=0.3, proc=str(tmp_path), send=send,
                            sleep=lambda s: None) is True
    assert sent == [signal.SIGTERM]


def test_a_process_whose_name_is_not_utf8_still_has_its_start_time_read():
    """/proc/<pid>/stat holds the command name as the process set it, any bytes (prctl PR_SET_NAME, or the name
    of the file it ran). Read as text in the locale's encoding it raised UnicodeDecodeError: the start time is
    taken as NVML lists each GPU process, so any local user's GPU process named so made every apply's GPU read
    an internal error. The name is never needed: the fields after its last ")" are read as bytes."""
    code = ("import ctypes, sys, time; ctypes.CDLL(None).prctl(15, ctypes.c_char_p(b'gpu\\xe9\\xff)job'), 0, 0, 0); "
            "sys.stdout.write('named\\n'); sys.stdout.flush(); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"named\n"
        with open("/proc/%d/stat" % child.pid, "rb") as fh:
            raw = fh.read()
        assert b"(gpu\xe9\xff)job)" in raw  # the kernel keeps the bytes as given
        assert processkill.start_time(child.pid) == int(raw[raw.rfind(b")") + 2:].split()[19])
    finally:
        child.kill()
        child.wait()


def test_force_sends_sigkill_when_the_same_process_is_still_there(tmp_path):
    pid = 4000001
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "stat").write_text(_stat(pid, 1111))
    sent = []
    clock = iter(range(100)).__next__
    processkill.kill(pid, lambda m: None, grace=3, proc=str(tmp_path), send=lambda p, s: sent.append(s),
                     sleep=lambda s: None, clock=lambda: float(clock()))
    assert sent == [signal.SIGTERM, signal.SIGKILL]


def test_a_zombie_counts_as_gone(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text(_stat(7, 5).replace(" S ", " Z ", 1))
    assert processkill.start_time(7, str(tmp_path)) is None


# --- the boot unit --------------------------------------------------------------------------------

@pytest.mark.parametrize("option, value", [("--kubeconfig", "/etc/k.conf\nExecStart=/bin/sh -c 'id > /tmp/x'"),
                                           ("--node-name", "node\rExecStart=/bin/true"),
                                           ("--state-dir", "/var/lib/x\tb")])
def test_a_control_character_in_an_option_never_reaches_the_unit(tmp_path, option, value):
    node = Node(tmp_path, gpu="H200", count=1)
    root = tmp_path / "root"
    res = node.run("install-boot-unit", "--sequence", "7g.141gb", "--root", str(root), option, value)
    assert res.rc == 2 and res.json["error"]["code"] == "bad-input", res.stderr
    assert "control character" in res.json["error"]["message"] and "\n" not in res.json["error"]["message"]
    assert not root.exists()
    # apply --boot-unit refuses it before touching a GPU
    applied = node.run("apply", "--sequence", "7g.141gb", "--boot-unit", "--boot-unit-root", str(root), option, value)
    assert applied.rc == 2 and applied.json["changes"] == 0 and not root.exists()
    assert node.sim()["gpus"][0]["mig_current"] == 0


def test_render_refuses_control_characters_itself():
    with pytest.raises(BadInput):
        bootunit.render_unit("/usr/bin/python3", "/opt/x\n[Service]", "/etc/ack-mig-hook/request.json", [])


def test_the_unit_orders_after_the_fabric_manager_and_persistenced():
    unit = bootunit.render_unit("/usr/bin/python3", "/opt/hook", "/etc/ack-mig-hook/request.json", [])
    after = [line for line in unit.splitlines() if line.startswith("After=")]
    assert len(after) == 1
    units = after[0][len("After="):].split()
    assert "nvidia-fabricmanager.service" in units and "nvidia-persistenced.service" in units
    # ordering only: no Wants=/Requires= on them, so a node without the fabric manager boots the same
    assert not any(("fabricmanager" in line or "persistenced" in line) for line in unit.splitlines()
                   if line.startswith(("Wants=", "Requires=", "BindsTo=")))


# --- GPU resets by PCI bus id ---------------------------------------------------------------------


def test_a_pending_mode_is_reset_by_pci_bus_id(sim):
    sim("A100-SXM4-40GB", 3, ["reset-fails"])  # a client holds the GPUs: the mode stays pending
    asked = []

    def reset(gpus):
        asked.append(list(gpus))
        return 0, "GPU reset successful"

    host = Host(lambda: [], lambda stopped: [], reset, lambda pid: False, lambda m: None)
    with NvmlWriter(pynvml) as writer:
        with pytest.raises(RebootRequired):  # the stand-in "reset" changed nothing: still pending
            reconcile(writer, PartitionSpec("sequence", "9-9"), host)
    assert asked == [["00000000:10:00.0", "00000000:11:00.0", "00000000:12:00.0"]]


def test_the_simulated_reset_takes_bus_ids_as_nvidia_smi_does(sim):
    lib = sim("A100-SXM4-40GB", 2, ["processes"])
    with NvmlWriter(pynvml) as writer:
        writer.set_mig_mode(0, True)  # pending: pid 4242 holds GPU 0
    lib.kill(4242)
    assert lib.reset(["00000000:10:00.0"]) == (0, "GPU reset successful")
    with NvmlWriter(pynvml) as writer:
        assert writer.read_gpu(0).mig_current == 1


def test_nvidia_smi_gets_the_bus_ids(tmp_path):
    from node_bootstrap.commands.backend import Backend, reset_gpus

    calls = []
    reset = reset_gpus(Backend("nvml", pynvml, None), runner=lambda argv, timeout: (calls.append(argv), (0, ""))[1])
    reset(["00000000:10:00.0", "00000000:11:00.0"])
    assert calls == [["nvidia-smi", "-r", "-i", "00000000:10:00.0,00000000:11:00.0"]]


def test_processkill_refusal_has_no_race_with_a_vanished_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    time.sleep(0.05)
    assert processkill.kill(proc.pid, lambda m: None, grace=0.1) is False  # gone: nothing to signal


@pytest.mark.parametrize("root", ["/", "//", "/./", "/tmp/..", "link"])
def test_a_simulated_node_never_treats_this_machines_root_as_its_own(tmp_path, root):
    # However "/" is written (or a link to it), a simulated node's boot unit is never installed into, or
    # removed from, this machine's real /etc.
    if root == "link":
        os.symlink("/", str(tmp_path / "to-root"))
        root = str(tmp_path / "to-root")
    state = str(tmp_path / "state.json")
    base = [node_python(), "-m", "node_bootstrap", "--backend", "sim:A100-SXM4-40GB:1", "--sim-state", state]
    for command in (["uninstall-boot-unit", "--root", root],
                    ["install-boot-unit", "--size", "3g.20gb", "--root", root]):
        done = subprocess.run(base + command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "this machine's /etc" in done.stderr, (root, done.stderr)
    done = subprocess.run(base + ["--json", "apply", "--size", "3g.20gb", "--boot-unit", "--boot-unit-root", root],
                          capture_output=True, text=True, timeout=60)
    result = json.loads(done.stdout)
    assert result["outcome"] == "success" and result["boot_unit"]["installed"] is False
    assert "simulated node" in result["boot_unit"]["skipped"]
