"""kubectl's and helm's habits, run as a user runs them (a separate process, stdout and stderr pipes):
``version``, ``-o json|yaml``, did-you-mean, ``-v``, ``completion``, ``rollout status``, ``status --watch``, and
the plan error that names the GPU asked for. Stderr wrapping: tests/function/test_stderr_wrapping.py; wait,
the region and profiles against the emulators: tests/function/test_wait_and_region.py."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import yaml

from functions.commands import rollout, watch
from tests.support.module_time import module_time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EX = os.path.join(ROOT, "examples")
POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"  # gpu-mig-a100 in the examples
pytestmark = pytest.mark.timeout(120)


def cli(*argv, env=None):
    merged = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    merged.update(env or {})
    return subprocess.run([sys.executable, "-m", "functions.commands.main"] + list(argv), cwd=ROOT, env=merged,
                          capture_output=True, text=True, timeout=100)


# ---- version ----

def test_version_prints_the_version_and_its_json_is_the_same():
    text, doc = cli("version"), cli("version", "-o", "json")
    assert text.returncode == 0 and doc.returncode == 0, text.stderr + doc.stderr
    found = json.loads(doc.stdout)
    assert text.stdout.splitlines()[0] == "ack-mig-hook %s" % found["version"]
    assert found["python"] == "%d.%d.%d" % sys.version_info[:3]
    assert cli("--version").stdout.strip() == "ack-mig-hook %s" % found["version"]


# ---- -o json|yaml ----

@pytest.mark.parametrize("argv", [
    ("plan", "--gpu", "H200", "--sequence", "1g.18gb+me-3g.71gb"),
    ("status", "--inventory", os.path.join(EX, "inventory-rollout.json"), "--nodes"),
    ("rollout", "status", "--inventory", os.path.join(EX, "inventory-rollout.json")),
    ("version",),
], ids=lambda a: a[0])
def test_output_yaml_and_json_hold_what_json_holds(argv):
    plain, as_json, as_yaml = cli(*argv, "--json"), cli(*argv, "-o", "json"), cli(*argv, "-o", "yaml")
    assert plain.returncode == as_json.returncode == as_yaml.returncode == 0, plain.stderr + as_yaml.stderr
    expected = json.loads(plain.stdout)
    for doc in (expected, json.loads(as_json.stdout), yaml.safe_load(as_yaml.stdout)):
        doc.pop("now", None)  # status's clock
    assert json.loads(as_json.stdout) == yaml.safe_load(as_yaml.stdout) or argv[0] == "status"
    got = yaml.safe_load(as_yaml.stdout)
    got.pop("now", None)
    assert got == expected
    assert not as_yaml.stdout.lstrip().startswith("{")  # YAML, not JSON (which YAML also reads)


def test_output_yaml_of_an_error_is_the_error_object_in_yaml():
    done = cli("plan", "--gpu", "H20", "--size", "1g.10gb", "-o", "yaml")
    assert done.returncode == 2
    doc = yaml.safe_load(done.stdout)
    assert doc["exit_code"] == 2 and "unknown profile '1g.10gb'" in doc["error"]


def test_an_unknown_output_format_is_one_line_with_the_choices():
    done = cli("status", "--inventory", os.path.join(EX, "inventory.json"), "-o", "yml")
    assert done.returncode == 2 and done.stdout == ""
    text = " ".join(done.stderr.split())
    assert "invalid choice 'yml' (did you mean yaml?)" in text and "json, yaml" in text


# ---- did you mean ----

@pytest.mark.parametrize("argv,said", [
    (("stauts",), "unknown command 'stauts' (did you mean status?)"),
    (("rollout", "stauts"), "invalid choice 'stauts' (did you mean status?)"),
    (("status", "--josn"), "unrecognized arguments: --josn (did you mean --json?)"),
    (("deploy", "--dry-rnu"), "(did you mean --dry-run?)"),
    (("completion", "bsh"), "(did you mean bash?)"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_a_mistyped_command_choice_or_option_suggests_the_one_meant(argv, said):
    done = cli(*argv)
    assert done.returncode == 2 and done.stdout == ""
    assert said in " ".join(done.stderr.split()), done.stderr
    assert done.stderr.startswith("ack-mig-hook: error: ") and "Traceback" not in done.stderr


def test_nothing_close_suggests_nothing():
    done = cli("frobnicate")
    assert done.returncode == 2 and "did you mean" not in done.stderr and "status" in done.stderr


# ---- -v / --debug ----

def test_verbose_shows_the_functions_log_lines_whole_on_stderr_and_not_without():
    argv = ("invoke", "--event", os.path.join(EX, "event-reconcile.json"), "--inventory",
            os.path.join(EX, "inventory-rollout.json"), "--dry-run")
    quiet, verbose, debug = cli(*argv), cli(*argv, "-v"), cli("--debug", *argv)
    assert quiet.returncode == verbose.returncode == debug.returncode == 0
    assert not [line for line in quiet.stderr.splitlines() if line.startswith("{")]
    logged = [json.loads(line) for line in verbose.stderr.splitlines() if line.startswith("{")]  # whole lines
    assert {r["level"] for r in logged} <= {"INFO", "WARNING", "ERROR"} and "decision" in {r["message"] for r in
                                                                                           logged}
    assert max(len(line) for line in verbose.stderr.splitlines()) > 80  # JSON log lines are never wrapped
    assert quiet.stdout == verbose.stdout  # the result stays on stdout, the same
    debug_lines = [json.loads(line) for line in debug.stderr.splitlines() if line.startswith("{")]
    assert len(debug_lines) >= len(logged)


def test_verbose_and_debug_are_taken_before_and_after_the_command():
    for argv in (("-v", "version"), ("version", "-vv"), ("--debug", "version"), ("version", "--debug")):
        assert cli(*argv).returncode == 0, argv


# ---- plan: the GPU asked for ----

def test_an_h20_error_names_the_h20_not_the_model_whose_layout_it_shares():
    done = cli("plan", "--gpu", "H20", "--size", "1g.10gb")
    text = " ".join(done.stderr.split())
    assert done.returncode == 2 and "unknown profile '1g.10gb' for NVIDIA H20" in text and "H100" not in text
    done = cli("plan", "--gpu", "A100-SXM4-40GB", "--size", "1g.18gb")
    assert "for A100-SXM4-40GB" in " ".join(done.stderr.split())  # a GPU named by its own key keeps it


# ---- completion ----

@pytest.mark.skipif(not shutil.which("bash"), reason="no bash on this machine")
def test_bash_completion_completes_commands_choices_and_options(tmp_path):
    done = cli("completion", "bash")
    assert done.returncode == 0, done.stderr
    script = tmp_path / "ack-mig-hook.bash"
    script.write_text(done.stdout)

    def complete(*words):
        probe = ('source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _shtab_ack_mig_hook; printf "%%s\\n" "${COMPREPLY[@]}"'
                 % (script, " ".join("'%s'" % w for w in words), len(words) - 1))
        return subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30).stdout.split()

    assert complete("ack-mig-hook", "sta") == ["status"]
    assert complete("ack-mig-hook", "rollout", "") == ["pause", "resume", "status"]
    assert complete("ack-mig-hook", "status", "-o", "") == ["json", "yaml"]
    assert "--watch" in complete("ack-mig-hook", "status", "--wa")


@pytest.mark.parametrize("shell", ["zsh", "tcsh"])
def test_completion_scripts_for_other_shells_name_every_command(shell):
    done = cli("completion", shell)
    assert done.returncode == 0, done.stderr
    for command in ("status", "rollout", "wait", "deploy", "version"):
        assert command in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) > 80  # a script is never wrapped


# ---- rollout status ----

def _pool(**kw):
    base = {"nodepool_id": POOL, "name": "gpu-mig-a100", "label": "sequence=3g.20gb-3g.20gb", "nodes": 3,
            "in_layout": 1, "pending": 1, "deferred": 1, "skipped": 0, "unknown": 0, "failed": [],
            "node_list": [{"node": "n1", "status": "pending", "reason": "wave"},
                          {"node": "n2", "status": "deferred", "reason": "waits for a later wave"},
                          {"node": "n3", "status": "in-layout", "reason": "already"}]}
    base.update(kw)
    return base


def test_rollout_progress_states():
    assert rollout.progress_of(_pool())["state"] == "progressing"
    assert rollout.progress_of(_pool())["wave"] == ["n1"]
    assert rollout.progress_of(_pool(in_layout=3, pending=0, deferred=0))["state"] == "complete"
    stopped = rollout.progress_of(_pool(failed=[{"node": "n1", "reason": "drain-timeout"}]))
    assert stopped["state"] == "stopped" and "node n1 failed: drain-timeout" in rollout.progress_line(stopped)
    paused = _pool(pending=0, deferred=2, node_list=[
        {"node": "n1", "status": "deferred", "reason": "paused: pool np... is paused by the pool label"},
        {"node": "n2", "status": "deferred", "reason": "paused: ..."}])
    line = rollout.progress_line(rollout.progress_of(paused))
    assert "paused" in line and "rollout resume --pool %s" % POOL in line


def test_rollout_status_on_a_snapshot_looks_once():
    done = cli("rollout", "status", "--pool", POOL, "--inventory", os.path.join(EX, "inventory-rollout.json"))
    text = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stderr
    assert "rollout to sequence=3g.20gb-3g.20gb: 1 of 3 nodes in layout" in text
    assert "pending (this wave, or new nodes): cn-beijing.192.168.12.31; 1 waiting for a later wave" in text
    stopped = cli("rollout", "status", "--inventory", os.path.join(EX, "inventory.json"))
    assert stopped.returncode == 1 and "(gpu-mig-typo): rollout to sequence=1g.5gb,2g.10gb stopped" in " ".join(
        stopped.stdout.split())
    unknown = cli("rollout", "status", "--pool", "np" + "0" * 32, "--inventory", os.path.join(EX, "inventory.json"))
    assert unknown.returncode == 2 and "no labelled node pool np000" in unknown.stderr


def test_rollout_status_takes_a_shipped_example_as_status_does():
    """``example:NAME`` names the same snapshot for rollout status as for status, invoke and advise (one helper,
    shipped.inventory_file), and a wrong name is the same one line with the names that exist."""
    done = cli("rollout", "status", "--pool", POOL, "--inventory", "example:inventory-rollout")
    assert done.returncode == 0, done.stderr
    assert "rollout to sequence=3g.20gb-3g.20gb: 1 of 3 nodes in layout" in " ".join(done.stdout.split())
    wrong = cli("rollout", "status", "--inventory", "example:nope")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr and not wrong.stdout
    text = " ".join(wrong.stderr.split())
    assert "'example:nope' is not a shipped example" in text and "use example:NAME" in text, text
    assert "inventory-rollout" in text
    assert wrong.stderr == cli("status", "--inventory", "example:nope").stderr  # status's words, the same helper


def test_pause_and_resume_still_need_a_pool():
    done = cli("rollout", "pause", "--cluster-id", "c" + "1" * 32, "--region", "cn-beijing")
    assert done.returncode == 2 and "rollout pause needs --pool ID" in done.stderr


def _rollout_args(**kw):
    base = dict(pool=None, inventory=None, watch=True, timeout=5, interval=10, json=False)
    base.update(kw)
    return argparse.Namespace(**base)


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds

    def __call__(self):
        return self.now


def test_rollout_status_waits_until_complete_saying_each_change_once(monkeypatch, capsys):
    looks = iter([[_pool()], [_pool()], [_pool(in_layout=2, node_list=[{"node": "n2", "status": "pending"}])],
                  [_pool(in_layout=3, pending=0, deferred=0, node_list=[])]])
    monkeypatch.setattr(rollout, "_look", lambda args: [rollout.progress_of(p) for p in next(looks)])
    clock = Clock()
    assert rollout.rollout_status(_rollout_args(), sleep=clock.sleep, clock=clock) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "1 of 3" in lines[0] and "2 of 3" in lines[1] and "complete" in lines[2]
    assert clock.slept == [10, 10, 10]


def test_rollout_status_ends_at_its_deadline_with_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(rollout, "_look", lambda args: [rollout.progress_of(_pool())])
    clock = Clock()
    assert rollout.rollout_status(_rollout_args(timeout=1, interval=25), sleep=clock.sleep, clock=clock) == 1
    assert clock.now <= 60 and "still rolling after 1 minutes" in capsys.readouterr().err


# ---- status --watch ----

def test_watch_prints_a_report_only_when_it_changed_and_ends_at_its_deadline(capsys):
    reports = iter([{"now": 1, "pools": [1]}, {"now": 2, "pools": [1]}, {"now": 3, "pools": [2]}] +
                   [{"now": n, "pools": [2]} for n in range(4, 100)])
    shown = []
    clock = Clock()
    args = argparse.Namespace(interval=10, watch_timeout=1, json=True)
    code = watch.watch(args, lambda: (0, next(reports)), lambda a, r: shown.append(r["now"]), clock.sleep, clock)
    assert code == 0 and shown == [1, 3] and clock.now <= 60 and len(clock.slept) == 6  # the last look at 60 s
    assert "watched for 1 minutes" in capsys.readouterr().err


def test_watch_ends_with_the_exit_code_of_a_report_that_cannot_be_made():
    clock = Clock()
    args = argparse.Namespace(interval=10, watch_timeout=60, json=True)
    assert watch.watch(args, lambda: (2, None), lambda a, r: None, clock.sleep, clock) == 2 and not clock.slept


def test_status_watch_runs_from_the_command_line(monkeypatch, capsys):
    from functions.commands import main

    clock = Clock()
    done = threading.Event()

    def elsewhere():  # a thread of the process that sleeps meanwhile (a test server's): not the watch's sleep
        while not done.is_set():
            time.sleep(0.001)

    thread = threading.Thread(target=elsewhere, daemon=True)
    thread.start()
    try:
        monkeypatch.setattr(watch, "time", module_time(sleep=clock.sleep, monotonic=clock))
        code = main.main(["status", "--inventory", os.path.join(EX, "inventory-rollout.json"), "--watch",
                          "--interval", "30", "--watch-timeout", "2", "-o", "json"])
    finally:
        done.set()
        thread.join(60)
    out, err = capsys.readouterr()
    assert code == 0 and out.count('"cluster_id"') == 1  # the snapshot never changes: one report
    assert len(clock.slept) == 4 and "watching" in err  # looks at 0, 30, 60, 90 and 120 s


# ---- demo ----

def test_the_demo_with_home_and_tmpdir_under_tmp_says_to_set_tmpdir_and_makes_nothing():
    """The simulated nodes' directories must have no folder others can write to above them (the node
    runner's rule), so neither /tmp nor a HOME under it will do, as some CI containers set it: the demo
    stopped inside its first node run on a refusal that named a path cut short. It says so before it starts,
    naming TMPDIR, and creates no cache folder."""
    import tempfile

    home = tempfile.mkdtemp(dir="/tmp")
    try:
        done = cli("demo", env={"HOME": home, "TMPDIR": "/tmp", "XDG_CACHE_HOME": ""})
        assert done.returncode == 2, done.stdout + done.stderr
        text = " ".join(done.stderr.split())
        assert text.startswith("ack-mig-hook: error: the demo's simulated nodes need a directory") and \
            "set TMPDIR to one" in text and "Traceback" not in done.stderr, done.stderr
        assert os.listdir(home) == [] and done.stdout == ""
    finally:
        os.rmdir(home)


def test_the_demo_makes_its_cache_folder_where_the_home_has_no_cache_yet(tmp_path, monkeypatch):
    """The default temporary directory (/tmp) fails the node runner's rule, so the demo's nodes live under
    ``~/.cache/ack-mig-hook``, made as needed. The check of that rule judged ``~/.cache`` before making it: a
    HOME with no ``.cache`` yet (a fresh user, a new container) could not be read, and the demo refused to
    start with exit 2, asking for a TMPDIR."""
    import tempfile

    from functions.commands import demo
    from functions.delivery import node_runner

    shared, home = (os.path.realpath(str(tmp_path / name)) for name in ("shared", "home"))
    os.mkdir(shared)
    os.mkdir(home)

    def unsafe(path, uid):  # the rule, with tmp_path's own folders above standing in for a trusted /home
        if not os.path.isdir(path) or os.path.islink(path):
            return "cannot be read"
        return "is writable by others" if path == shared else ""

    monkeypatch.setattr(node_runner, "unsafe", unsafe)
    monkeypatch.setattr(tempfile, "tempdir", shared)
    monkeypatch.setenv("HOME", home)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    base = demo._private_base()
    assert base == os.path.join(home, ".cache", "ack-mig-hook") and os.path.isdir(base)


def test_the_demo_whose_cache_folder_cannot_be_made_says_to_set_tmpdir(tmp_path, monkeypatch):
    """A HOME that does not exist and cannot be made (Debian's ``nobody``: ``/nonexistent``) with TMPDIR /tmp:
    its cache folder is judged by ``/``, which passes, and making it failed with an `internal error:
    PermissionError` (exit 70) where the demo asks for a TMPDIR of its own (exit 2)."""
    import errno
    import tempfile

    from functions.commands import demo
    from functions.commands.common import UsageError
    from functions.delivery import node_runner

    shared = os.path.realpath(str(tmp_path / "shared"))
    home = os.path.join(os.path.realpath(str(tmp_path)), "nonexistent")
    os.mkdir(shared)

    def unsafe(path, uid):  # the rule, with tmp_path's own folders above standing in for a trusted /
        if not os.path.isdir(path) or os.path.islink(path):
            return "cannot be read"
        return "is writable by others" if path == shared else ""

    def makedirs(path, mode=0o777, exist_ok=False):  # what a user other than root meets under /
        raise PermissionError(errno.EACCES, "Permission denied", home)

    monkeypatch.setattr(node_runner, "unsafe", unsafe)
    monkeypatch.setattr(tempfile, "tempdir", shared)
    monkeypatch.setenv("HOME", home)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(os, "makedirs", makedirs)
    with pytest.raises(UsageError) as caught:
        demo._private_base()
    assert "set TMPDIR" in str(caught.value) and "\n" not in str(caught.value)
    assert not os.path.exists(home)
