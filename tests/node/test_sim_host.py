"""A simulated node never touches this machine: the README's simulator commands, and apply with every
host option left at its default, run with a recording ``systemctl``/``nvidia-smi`` first on PATH and a
Python audit hook that records every file the process writes, creates, moves or removes and every
program it starts. Zero host commands, and nothing written outside the test's own directory.
The documented commands are those of README.md and docs/*.md."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.node.nodecli import ROOT, Node

# Installed through sitecustomize into every Python the commands start: each write-like audit event and
# each program started, as one JSON line, with the working directory to resolve relative paths. Audit hooks
# are Python 3.8+, so these commands run on pytest's interpreter, not the node's 3.6 (NODE_PYTHON).
_SITECUSTOMIZE = r'''
import json, os, sys
_fd = os.open(os.environ["AUDIT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_EVENTS = {"os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "os.chmod", "os.chown", "os.link",
           "os.symlink", "os.truncate", "os.utime", "shutil.move", "shutil.copyfile", "shutil.rmtree",
           "os.mknod", "os.mkfifo"}

def _hook(event, args):
    paths = []
    if event == "open":
        path, mode, flags = args
        if isinstance(path, (str, bytes)) and ((mode and any(c in mode for c in "wax+")) or (flags or 0) & _WRITE):
            paths = [path]
    elif event in _EVENTS:
        paths = [a for a in args[:2] if isinstance(a, (str, bytes))]
    elif event in ("subprocess.Popen", "os.exec", "os.posix_spawn"):
        os.write(_fd, (json.dumps({"exec": [str(a) for a in (args[1] or [args[0]])]}) + "\n").encode())
        return
    for p in paths:
        p = os.fsdecode(p)
        os.write(_fd, (json.dumps({"event": event, "path": os.path.join(os.getcwd(), p)}) + "\n").encode())

sys.addaudithook(_hook)
'''


def _harness(tmp_path):
    """(env, audit log path) for commands run as a user would: `python3 -m node_bootstrap` from PATH."""
    node = Node(tmp_path)  # its bin/ holds the recording systemctl and nvidia-smi
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    with open(os.path.join(node.bin, "python3"), "w") as fh:
        fh.write("#!/bin/sh\nexec %s \"$@\"\n" % sys.executable)
    os.chmod(os.path.join(node.bin, "python3"), 0o755)
    audit = tmp_path / "audit.jsonl"
    env = node.env({"PYTHONPATH": "%s%s%s" % (site, os.pathsep, ROOT), "AUDIT_LOG": str(audit),
                    "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(tmp_path / "tmp")})
    (tmp_path / "tmp").mkdir()
    return node, env, audit


def _check(node, audit, tmp_path):
    events = [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []
    assert events, "the audit hook recorded nothing: it did not run"
    outside = [e for e in events if "path" in e
               and not os.path.realpath(e["path"]).startswith(os.path.realpath(str(tmp_path)) + os.sep)]
    assert outside == []
    started = [e["exec"] for e in events if "exec" in e]
    assert [argv for argv in started if os.path.basename(argv[0]) in ("systemctl", "nvidia-smi")] == []
    assert node.commands() == []  # the recording systemctl/nvidia-smi on PATH never ran


def _doc_sim_blocks():
    """Every shell block in README.md and docs/*.md that runs a simulated node (not a usage line)."""
    import glob

    found = []
    for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path) as fh:
            text = fh.read()
        blocks = re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, re.S)
        found += [(os.path.relpath(path, ROOT), b) for b in blocks if "--backend sim:" in b and "<GPU>" not in b]
    return found


def test_the_documented_simulator_commands_touch_nothing_on_the_host(tmp_path):
    blocks = _doc_sim_blocks()
    assert blocks, "neither README.md nor docs/ show a runnable --backend sim block"
    node, env, audit = _harness(tmp_path)
    for n, (where, block) in enumerate(blocks):
        work = tmp_path / ("work%d" % n)
        work.mkdir()
        # the docs name the interpreter that has pynvml, `.venv/bin/python` from the repository root: here
        # it is the audited one, like `python3`
        (work / ".venv" / "bin").mkdir(parents=True)
        os.symlink(os.path.join(node.bin, "python3"), str(work / ".venv" / "bin" / "python"))
        # the docs' /tmp paths become this test's own directory; everything else runs as written
        script = "set -e\n" + block.replace("/tmp/", str(work) + "/")
        proc = subprocess.run(["bash", "-c", script], cwd=str(work), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
        assert proc.returncode == 0, (where, proc.stderr[-2000:])
    _check(node, audit, tmp_path)


def test_apply_with_every_host_option_at_its_default_stays_in_the_nodes_directory(tmp_path):
    node, env, audit = _harness(tmp_path)
    state = tmp_path / "node.json"
    (tmp_path / "node.host" / "systemd").mkdir(parents=True)
    # the simulated node runs DCGM and the device plugin, as an ACK node does
    (tmp_path / "node.host" / "systemd" / "state.json").write_text(json.dumps(
        {"units": {"dcgm-exporter": "active", "nvidia-dcgm": "active"}}))
    manifest = tmp_path / "node.host" / "etc/kubernetes/manifests/nvidia-device-plugin.yml"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("kind: Pod\n")
    argv = [sys.executable, "-m", "node_bootstrap", "apply", "--backend", "sim:A100-SXM4-40GB:2",
            "--sim-state", str(state), "--sequence", "3g.20gb-3g.20gb", "--boot-unit", "--json"]
    proc = subprocess.run(argv, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["outcome"] == "success" and doc["boot_unit"]["installed"] is True
    _check(node, audit, tmp_path)
    host = tmp_path / "node.host"
    # every stand-in did its job, in the node's own directory
    assert (host / "run/ack-mig-hook.lock").exists()
    assert json.loads((host / "var/lib/ack-mig-hook/stopped-clients.json").read_text()) == []
    assert manifest.read_text() == "kind: Pod\n"  # moved away and back
    calls = [json.loads(line) for line in (host / "systemd/calls.log").read_text().splitlines()]
    assert ["systemctl", "stop", "dcgm-exporter"] in calls and ["systemctl", "start", "nvidia-dcgm"] in calls
    assert ["systemctl", "--root", str(host), "enable", "ack-mig-hook.service"] in calls
    assert (host / "etc/systemd/system/ack-mig-hook.service").exists()
    labels = json.loads((host / "node-labels.json").read_text())
    assert [h["labels"]["nvidia.com/mig.config.state"] for h in labels["history"]] == ["pending", "success"]
    assert labels["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == "3g.20gb-3g.20gb"
    unit = (host / "etc/systemd/system/ack-mig-hook.service").read_text()
    assert "--kubeconfig" not in unit and str(host / "run/ack-mig-hook.lock") in unit


def test_paths_named_explicitly_are_used_as_given(tmp_path):
    node, env, audit = _harness(tmp_path)
    (tmp_path / "n.host" / "systemd").mkdir(parents=True)
    (tmp_path / "n.host" / "systemd" / "state.json").write_text(json.dumps({"units": {"dcgm-exporter": "active"}}))
    lock, state_dir = tmp_path / "elsewhere" / "my.lock", tmp_path / "elsewhere" / "state"
    argv = [sys.executable, "-m", "node_bootstrap", "apply", "--backend", "sim:H200:1", "--sim-state",
            str(tmp_path / "n.json"), "--sequence", "7g.141gb", "--lock-file", str(lock), "--state-dir",
            str(state_dir), "--clients", "systemd:dcgm-exporter", "--no-label", "--json"]
    proc = subprocess.run(argv, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert lock.exists() and json.loads((state_dir / "stopped-clients.json").read_text()) == []
    assert not (tmp_path / "n.host" / "run").exists() and not (tmp_path / "n.host" / "var").exists()
    _check(node, audit, tmp_path)  # a unit name is no path: still the simulated systemd, never the host's


@pytest.mark.parametrize("command", [["status"], ["plan", "--size", "1g.5gb"], ["sim-reboot"],
                                     ["install-boot-unit", "--size", "1g.5gb"]])
def test_other_commands_with_defaults_stay_in_the_nodes_directory(tmp_path, command):
    node, env, audit = _harness(tmp_path)
    argv = [sys.executable, "-m", "node_bootstrap"] + command[:1] + [
        "--backend", "sim:A100-SXM4-40GB:1", "--sim-state", str(tmp_path / "n.json"), "--json"] + command[1:]
    proc = subprocess.run(argv, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    _check(node, audit, tmp_path)
