"""The function's command line explains itself: --version, help on every option, invoke's settings,
--strict, reasons printed once, and one-line errors that name what the user wrote."""

import argparse
import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

from functions.commands import invoke
from functions.commands import main as cli
from tests.function.conftest import EVENTS, INVENTORY, ROOT
from tests.support.cli_errors import error_text, is_one_error
from tests.support.stop_now import shutdown_now


def run(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-m", "functions.commands.main", *args], cwd=ROOT, env=clean,
                          capture_output=True, text=True, timeout=60)


def test_version_is_the_installed_one():
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == "ack-mig-hook %s" % metadata.version("ack-mig-hook")


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_option_of_every_command_has_help(command):
    parser = cli._build([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    undocumented = [a.option_strings or a.dest for a in sub._actions
                    if a.help is None and not isinstance(a, argparse._HelpAction)]
    assert undocumented == []
    assert sub.description


def test_invoke_says_it_runs_locally():
    proc = run("invoke", "--help")
    assert "locally" in proc.stdout and "not call the deployed function" in proc.stdout.replace("\n", " ") \
        .replace("  ", " ") or "deployed function" in proc.stdout


def test_invoke_reports_every_missing_setting_at_once(tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"cluster_id": "c-1", "dry_run": True}))
    proc = run("invoke", "--event", str(event))
    assert proc.returncode == 2 and is_one_error(proc.stderr)
    assert "a region (--region" in proc.stderr and "credentials (ALIBABA_CLOUD_ACCESS_KEY_ID" in proc.stderr
    # --region satisfies one of them; the other is still named.
    proc = run("invoke", "--event", str(event), "--region", "cn-beijing")
    assert proc.returncode == 2 and "region" not in proc.stderr and "credentials" in proc.stderr


def test_the_event_carries_the_region():
    with open(os.path.join(ROOT, "examples", "event.json"), "rb") as handle:
        raw = handle.read()
    assert invoke._event_region(raw) == json.loads(raw)["aliyunregionid"] == "cn-beijing"
    assert invoke._event_region(b'{"regionId": "cn-hangzhou", "content": {}}') == "cn-hangzhou"
    assert invoke._event_region(b"[1]") == "" and invoke._event_region(b"{not json") == ""


def test_strict_exits_3_on_an_error_decision_and_0_without():
    args = ("invoke", "--inventory", INVENTORY, "--dry-run", "--strict")
    proc = run(*args, "--event", os.path.join(ROOT, "examples", "event-reconcile.json"))
    assert proc.returncode == invoke.STRICT_EXIT == 3, proc.stderr
    assert "error" in proc.stdout and "gpu-mig-typo" in proc.stdout
    proc = run(*args, "--event", os.path.join(ROOT, "examples", "event.json"))
    assert proc.returncode == 0, proc.stderr
    # Without --strict the same error decision is not a failed command (the event itself was done).
    proc = run("invoke", "--inventory", INVENTORY, "--dry-run", "--event",
               os.path.join(ROOT, "examples", "event-reconcile.json"))
    assert proc.returncode == 0


def test_a_manual_payload_typo_names_the_field_written_and_the_nearest_accepted(tmp_path):
    event = tmp_path / "typo.json"
    event.write_text(json.dumps({"cluster_id": "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b", "nodepool_idd": "np1"}))
    proc = run("invoke", "--event", str(event), "--inventory", INVENTORY)
    assert proc.returncode == 2
    assert "event field payload.nodepool_idd: unknown field (did you mean 'nodepool_id'?)" in proc.stderr


def test_json_syntax_errors_say_at_once(tmp_path):
    event = tmp_path / "ctl.json"
    event.write_bytes(b'{"a": "x\x01y"}')
    proc = run("invoke", "--event", str(event), "--inventory", INVENTORY)
    assert proc.returncode == 2 and "character at line 1 column 9" in proc.stderr and "at at" not in proc.stderr


def test_timer_event_in_text_prints_a_shared_reason_once():
    proc = run("invoke", "--event", os.path.join(EVENTS, "fc_timer.json"), "--inventory", INVENTORY, "--dry-run",
               env={"ACK_MIG_CLUSTER_ID": "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"})
    assert proc.returncode == 0, proc.stderr
    assert "partition 3 instances: i-2zeb7c1mig0a100x1k4d" in proc.stdout
    assert proc.stdout.count("gets 3g.20gb-3g.20gb") == 1


def test_a_reader_that_goes_away_ends_the_command_quietly():
    # `ack-mig-hook ... | head -1`: the pipe closes before the command writes.
    proc = subprocess.Popen([sys.executable, "-m", "functions.commands.main", "profiles", "--gpu", "A100-SXM4-40GB"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""


@pytest.mark.parametrize("argv", [["status"], ["doctor"], ["rollout", "status", "--pool", "np1f6779297c4444a3a1cdd29be8e5a0b5", "--no-watch"]])
def test_a_cloud_api_that_keeps_failing_is_exit_1_and_never_says_the_invocation_will_be_retried(tmp_path, argv):
    """The function's words reached the terminal: "hint: the invocation will be retried", and nothing retries
    a command (found by the docs audit). The ACK API here answers 503 to everything."""
    import http.server
    import threading

    class Busy(http.server.BaseHTTPRequestHandler):
        def answer(self):
            body = b'{"code":"ServiceUnavailable","message":"busy","requestId":"r1"}'
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = run(*argv, "--cluster-id", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b", "--region", "cn-beijing", env={
            "HOME": str(tmp_path), "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true",
            "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIx", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s",
            "ACK_MIG_CS_ENDPOINT": "http://127.0.0.1:%d" % server.server_port, "ACK_MIG_API_MAX_ATTEMPTS": "1"})
    finally:
        shutdown_now(server)  # not at its loop's next 0.5 s poll
    text = error_text(done.stderr)
    assert done.returncode == 1, done.stderr
    assert "503" in text and "a later try may pass" in text and "invocation" not in text, text


@pytest.mark.parametrize("argv", [["status", "--inventory", INVENTORY, "--json", "--interval", "0"],
                                  ["plan", "--gpu", "A100-SXM4-40GB", "-o", "json"],
                                  ["plan", "--gpu", "A100-SXM4-40GB", "-ojson"],
                                  ["rollout", "status", "--pool", "np-1", "--json"]])
def test_with_json_a_refused_argument_still_puts_an_error_object_on_stdout(argv):
    """docs/cli.md: "With --json, or -o json, stdout is JSON even when a command fails". A refused argument
    printed nothing there (found by the docs audit); the stderr line is the same as without --json."""
    done = run(*argv)
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert doc["exit_code"] == 2 and doc["error"].endswith("see --help")
    assert doc["error"] == error_text(done.stderr)[len("ack-mig-hook: error: "):]


def test_without_json_a_refused_argument_leaves_stdout_empty():
    done = run("plan", "--gpu", "A100-SXM4-40GB", "--", "-o")
    assert done.returncode == 2 and done.stdout == "" and is_one_error(done.stderr)
    # a command whose stdout is its own (a shell script) gets nothing there, --json or not
    done = run("completion", "bash", "--json")
    assert done.returncode == 2 and done.stdout == "" and is_one_error(done.stderr)


@pytest.mark.parametrize("argv", [["plan", "--gpu", "A100-SXM4-40GB", "--output=yaml"],
                                  ["status", "-o", "yaml", "--bogus"]])
def test_with_o_yaml_a_refused_argument_puts_its_error_object_on_stdout_as_yaml(argv):
    import yaml

    done = run(*argv)
    assert done.returncode == 2 and not done.stdout.lstrip().startswith("{"), done.stdout
    doc = yaml.safe_load(done.stdout)
    assert doc["exit_code"] == 2 and doc["error"] == error_text(done.stderr)[len("ack-mig-hook: error: "):]


def test_ctrl_c_ends_a_command_with_130_and_one_line():
    """docs/cli.md's exit table: 130 interrupted (Ctrl-C). A watching status is stopped the way a terminal
    stops it: SIGINT to the process, mid-wait."""
    import signal
    import time

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))}
    proc = subprocess.Popen([sys.executable, "-m", "functions.commands.main", "status", "--inventory", INVENTORY,
                             "--watch", "--interval", "60"], cwd=ROOT, env=clean, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # the first report is out: the command waits for its next look
        assert first.strip(), proc.stderr.read()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "ack-mig-hook: interrupted" and "Traceback" not in err
