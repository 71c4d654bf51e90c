"""``python3 -m node_bootstrap`` whose stdout cannot take the result, as an operator meets it on a node: a reader
gone (``... | head -1``), a full disk (``> /dev/full``), stdout closed (``>&-``). One line on stderr and an exit
code that says so, never a Python traceback; a closed stdout is refused before anything is done. And a read-only
command says `error` whatever stopped it (a Python without pynvml, SIGTERM)."""

import json
import os
import signal
import subprocess
import time

import pytest

from tests.node.nodecli import Node, node_python


def _sh(node, redirect, *argv):
    """The node command run by a shell with ``redirect`` applied to it (``>&-``, ``> /dev/full``)."""
    cmd = [node_python(), "-m", "node_bootstrap"] + node.args(*argv)
    proc = subprocess.run(["sh", "-c", 'exec "$@" ' + redirect, "sh"] + cmd, cwd=node.dir, env=node.env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_reader_gone_is_141_without_a_traceback(tmp_path, json_flag):
    node = Node(tmp_path)
    proc = subprocess.Popen([node_python(), "-m", "node_bootstrap"] + node.args("status", *json_flag), cwd=node.dir,
                            env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    proc.stdout.close()  # the reader went away before the result was written
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err


@pytest.mark.parametrize("argv", [["--help"], ["status", "--help"], ["apply", "--help"]], ids=" ".join)
def test_a_reader_gone_from_the_help_is_141_without_a_word(tmp_path, argv):
    """``python3 -m node_bootstrap --help | head -1``, stdout block-buffered as on a node (no PYTHONUNBUFFERED):
    argparse's help met the gone reader only at the interpreter's exit ("Exception ignored ... BrokenPipeError",
    exit 120). It ends as a result does, 141 and nothing on stderr."""
    node = Node(tmp_path)
    env = {k: v for k, v in node.env().items() if k != "PYTHONUNBUFFERED"}
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([node_python(), "-m", "node_bootstrap"] + argv, cwd=node.dir, env=env, stdout=write,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([node_python(), "-m", "node_bootstrap"] + argv, cwd=node.dir, env=env,
                                  stdout=full, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        assert (proc.returncode, proc.stderr) == (
            1, "node_bootstrap: error: cannot write the result to stdout: No space left on device\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_full_disk_is_one_line_and_exit_1(tmp_path):
    node = Node(tmp_path)
    for argv in (("status",), ("plan", "--sequence", "3g.20gb"), ("status", "--json")):
        rc, err = _sh(node, "> /dev/full", *argv)
        assert rc == 1, err
        assert err == "node_bootstrap: error: cannot write the result to stdout: No space left on device\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_failed_command_keeps_its_exit_code_when_its_result_cannot_be_written(tmp_path):
    node = Node(tmp_path)
    rc, err = _sh(node, "> /dev/full", "plan", "--sequence", "1g.5gb--2g.10gb")
    assert rc == 2, err
    assert err.splitlines() == [
        "node_bootstrap: error: empty item at position 2 of gpu-partition-sequence '1g.5gb--2g.10gb'; write "
        "profiles separated by single hyphens, e.g. 1g.5gb-2g.10gb",
        "node_bootstrap: error: cannot write the result to stdout: No space left on device"]


def test_a_closed_stdout_is_refused_before_anything_is_done(tmp_path):
    node = Node(tmp_path)
    rc, err = _sh(node, ">&-", "apply", "--sequence", "3g.20gb")
    assert rc == 2, err
    assert err == ("node_bootstrap: error: stdout is closed: no result could be printed; run it with stdout open "
                   "(> /dev/null discards the result)\n")
    assert not os.path.exists(node.state)  # the simulated node was never even opened, let alone changed


# --- read-only commands say `error`, whatever stopped them ------------------------------------------------------

_NO_PYNVML = "import sys; sys.modules['pynvml'] = None; from node_bootstrap.commands.cli import main; sys.exit(main())"


@pytest.mark.parametrize("argv", [["status"], ["plan", "--size", "1g.5gb"], ["apply", "--size", "1g.5gb"]])
def test_the_simulator_without_pynvml_is_nvml_unavailable_and_writes_no_state(tmp_path, argv):
    """The simulator on a Python without pynvml (the docs' commands run with a system python3) said
    `internal error: ModuleNotFoundError` (the code for a bug), as `failed` for a read-only command, and had
    written the simulated node's state file first."""
    node = Node(tmp_path)
    proc = subprocess.run([node_python(), "-c", _NO_PYNVML] + node.args(*argv) + ["--json"], cwd=node.dir,
                          env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120)
    result = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 1, proc.stderr
    assert result["error"] == {"code": "nvml-unavailable",
                               "message": "pynvml is not installed; install nvidia-ml-py (the simulator runs under it)"}
    assert result["outcome"] == ("failed" if argv[0] == "apply" else "error")
    assert not os.path.exists(node.state)


# The plan held where a slow read would hold it (opening the backend), after its SIGTERM handler is set: a
# --request-file FIFO held it so once, but such a file is refused at once now (request.py reads regular files).
_HELD = ("import os, sys, time; import node_bootstrap.commands.cli as cli\n"
         "def held(*args, **kwargs):\n"
         "    open(os.environ['HELD_FILE'], 'w').close()\n"
         "    time.sleep(3600)\n"
         "cli.open_backend = held\n"
         "sys.exit(cli.main())")


def test_a_read_only_command_interrupted_says_error_not_failed(tmp_path):
    """docs/node.md: read-only commands report a problem as `error`, never as `failed`; a plan stopped by
    SIGTERM said `failed`."""
    node = Node(tmp_path)
    held = str(tmp_path / "held")
    proc = subprocess.Popen([node_python(), "-c", _HELD] + node.args("plan", "--size", "1g.5gb", "--json"),
                            cwd=node.dir, env=node.env({"HELD_FILE": held}), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    while not os.path.exists(held):  # no deadline of its own: pytest's timeout guards a hang
        if proc.poll() is not None:
            raise AssertionError("the plan never reached its backend: %r" % (proc.communicate(),))
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # only this ends the held read (3600 s) within the test's run
    out, err = proc.communicate(timeout=200)  # a hang guard
    result = json.loads(out.splitlines()[-1])
    assert proc.returncode == 1, err
    assert result["error"]["code"] == "interrupted"
    assert result["outcome"] == "error" and "changes" not in result


def test_a_failed_command_keeps_its_exit_code_when_the_reader_went_away(tmp_path):
    """As for a full stdout: the reader of ``apply ... | head -1`` (with ``set -o pipefail``) gone must not turn a
    refusal or a failure (here bad input, 2; a reboot-required apply's 5 alike) into 141, which says only that
    the output was not read. It said 141 whatever the command's own code."""
    node = Node(tmp_path)
    proc = subprocess.Popen([node_python(), "-m", "node_bootstrap"] +
                            node.args("plan", "--sequence", "1g.5gb--2g.10gb"), cwd=node.dir, env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)
    proc.stdout.close()  # the reader went away before the result was written
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 2, err
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_an_apply_whose_stderr_reader_went_away_runs_to_its_end_and_prints_its_result(tmp_path):
    """Logs are advice: ``apply ... 2>&1 | head -3``, or a log reader that died, must not end the apply midway.
    The first log line after the reader went away raised BrokenPipeError out of the run (an `internal error`
    halfway through the change), the error line raised it again out of main, and no result was printed."""
    node = Node(tmp_path)
    proc = subprocess.Popen([node_python(), "-m", "node_bootstrap"] +
                            node.args("apply", "--sequence", "3g.20gb-3g.20gb", "--json"), cwd=node.dir, env=node.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    proc.stderr.close()  # the reader of the log went away before the first line
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 0, out
    result = json.loads(out.splitlines()[-1])
    assert result["outcome"] == "success" and result["sequence"] == "3g.20gb-3g.20gb"
