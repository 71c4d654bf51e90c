"""stdout that cannot be written, as an operator meets it: started closed (`>&-`), a full disk (`> /dev/full`),
a reader gone before a `--json` error object. Each is one line on stderr with its exit code (2 before anything
ran, 1 for output lost, the command's own code for an error already said), never an internal error (70) and
never a traceback. Run as a person runs the command: a separate process."""

import os
import subprocess
import sys

import pytest

from tests.function.conftest import ROOT

COMMANDS = [
    ["version"],
    ["profiles", "--gpu", "A100-SXM4-40GB"],
    ["plan", "--gpu", "H200", "--size", "1g.18gb", "--json"],
    ["status", "--inventory", "example:inventory", "-o", "yaml"],
    ["convert", "--to-mig-parted", "3g.20gb-2g.10gb", "--gpu", "A100-SXM4-40GB"],
]


def run(args, stdout, tmp_path, stderr=subprocess.PIPE):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))}
    env["HOME"] = str(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "functions.commands.main", *args], cwd=ROOT, env=env,
                            stdout=stdout, stderr=stderr)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, (err or b"").decode()


def closed_stdout(args, tmp_path):
    """`ack-mig-hook ... >&-`: the child starts with descriptor 1 closed (Python then sets sys.stdout None)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))}
    env["HOME"] = str(tmp_path)
    script = 'exec "$@" >&-'
    proc = subprocess.run(["sh", "-c", script, "sh", sys.executable, "-m", "functions.commands.main", *args],
                          cwd=ROOT, env=env, stderr=subprocess.PIPE, timeout=60)
    return proc.returncode, proc.stderr.decode()


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_full_disk_is_one_line_exit_1(args, tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        code, err = run(args, full, tmp_path)
    assert code == 1, err
    assert err == "ack-mig-hook: error: cannot write the output to stdout: No space left on device\n"


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_closed_stdout_is_refused_before_the_command_runs(args, tmp_path):
    code, err = closed_stdout(args, tmp_path)
    assert code == 2, err
    assert err.startswith("ack-mig-hook: error: stdout is closed: nothing could be printed")
    assert "run it with stdout open (> /dev/null discards the output)" in " ".join(err.split())
    assert "Traceback" not in err and len(err.splitlines()) <= 2


def test_a_json_error_on_a_closed_or_full_stdout_keeps_its_code_and_one_line(tmp_path):
    args = ["plan", "--gpu", "nope", "--size", "1g.5gb", "--json"]
    code, err = closed_stdout(args, tmp_path)
    assert code == 2 and err.startswith("ack-mig-hook: error: stdout is closed") and "Traceback" not in err
    code, err = closed_stdout(["plan", "--bogus", "--json"], tmp_path)  # refused by the parser itself
    assert code == 2 and err.startswith("ack-mig-hook: error:") and "Traceback" not in err
    if os.path.exists("/dev/full"):
        for argv in (args, ["plan", "--bogus", "--json"]):
            with open("/dev/full", "w") as full:
                code, err = run(argv, full, tmp_path)
            assert code == 2 and err.startswith("ack-mig-hook: error:") and "Traceback" not in err, err


def test_a_reader_gone_before_a_json_error_object_keeps_the_error_and_its_code(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "functions.commands.main", "plan", "--gpu", "nope", "--size",
                             "1g.5gb", "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, HOME=str(tmp_path)))
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 2
    assert err.startswith("ack-mig-hook: error: unknown GPU 'nope'") and "Traceback" not in err


def test_a_closed_stderr_keeps_the_exit_code(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))
    proc = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, "-m", "functions.commands.main",
                           "plan", "--gpu", "nope", "--size", "1g.5gb"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, timeout=60)
    assert proc.returncode == 2


@pytest.mark.parametrize("args,out", [
    (["status", "--bogus"], ""),
    (["status", "--bogus", "--json"],
     '{"error": "unrecognized arguments: --bogus (did you mean --verbose?); see --help", "exit_code": 2}\n'),
], ids=["usage", "usage-json"])
def test_a_usage_error_with_stderr_closed_leaves_stdout_to_the_command(args, out, tmp_path):
    """`2>&-`: Python's sys.stderr is None, and argparse's refusal, printed before any command ran, went to
    stdout (print's file=None), ahead of the --json error object a script parses."""
    proc = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, "-m", "functions.commands.main", *args],
                          cwd=ROOT, env=dict(os.environ, HOME=str(tmp_path)), stdout=subprocess.PIPE, timeout=60)
    assert (proc.returncode, proc.stdout.decode()) == (2, out)


@pytest.mark.parametrize("args,out", [
    (["status", "--bogus"], ""),  # refused by argparse, which writes the message itself
    (["plan", "--bogus", "--json"],
     '{"error": "one of the arguments --gpu --instance-type is required; see --help", "exit_code": 2}\n'),
    (["plan", "--gpu", "nope", "--size", "1g.5gb"], ""),  # refused by the command
], ids=["usage", "usage-json", "command"])
def test_a_stderr_whose_reader_is_gone_keeps_the_exit_code_and_stdout(args, out, tmp_path):
    """stderr a pipe whose reader went away (`2>&1 >out | head -1` once head has left): the error cannot be
    said, but the exit code still says it (2), stdout holds what it would, and no internal error or
    traceback takes its place (it ended with exit 1, a traceback written nowhere)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "functions.commands.main", *args], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=write, env=dict(os.environ, HOME=str(tmp_path)), timeout=60)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stdout.decode()) == (2, out)


@pytest.mark.parametrize("args,said", [
    (["invoke", "--event", "-", "--inventory", "example:inventory", "--dry-run"], "ack-mig-hook: error: event is empty"),
    (["convert", "--from-mig-parted", "-"], "ack-mig-hook: error: not a mig-parted config"),
], ids=["invoke", "convert"])
def test_reading_a_closed_stdin_is_an_empty_input_not_an_internal_error(args, said, tmp_path):
    """`<&-`: Python's sys.stdin is None, and `--event -` / `--from-mig-parted -` read from it ended in
    `internal error: AttributeError` (exit 70). It reads as empty, as /dev/null does: one line, exit 2."""
    proc = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", sys.executable, "-m", "functions.commands.main", *args],
                          cwd=ROOT, env=dict(os.environ, HOME=str(tmp_path)), capture_output=True, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.startswith(said) and "internal error" not in err, err


def test_a_prompt_flushed_to_a_stderr_whose_reader_is_gone_is_dropped_and_stderr_points_at_devnull():
    """undeploy's confirmation prompt (`delete ...? [y/N] `) has no newline: on a line-buffered stderr its
    write only fills the buffer, and the flush after it is the call that meets the gone reader (EPIPE). That
    flush must drop the text as a failed write does, stderr's descriptor then /dev/null, not raise out of
    the command (the subprocess tests above only ever fail in a write, which ends in a newline)."""
    from functions.commands.terminal import Unheard

    read, write = os.pipe()
    os.close(read)
    stream = os.fdopen(write, "w", buffering=1)  # line-buffered, as Python's sys.stderr
    try:
        unheard = Unheard(stream)
        prompt = "delete stack ack-mig-hook? [y/N] "
        assert unheard.write(prompt) == len(prompt)  # buffered: the reader's absence is not met yet
        assert not os.path.samestat(os.fstat(write), os.stat(os.devnull))
        unheard.flush()
        assert os.path.samestat(os.fstat(write), os.stat(os.devnull))
    finally:
        stream.close()  # what is still buffered goes to /dev/null now


POLICY = ["--account", "1234567890", "--region", "cn-beijing", "--cluster-id", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b",
          "--log-project", "mig-logs", "--log-store", "hook"]


@pytest.mark.parametrize("argv,code", [
    (["-m", "functions.commands.main", "--help"], 141),
    (["-m", "functions.commands.main", "--version"], 141),
    (["-m", "functions.commands.main", "status", "--help"], 141),
    (["-m", "functions.commands.main", "convert", "--help"], 141),
    (["-m", "functions.commands.main", "status", "--inventory", "example:inventory", "-o", "json"], 141),
    (["-m", "functions.commands.main", "status", "--inventory", "example:inventory"], 141),
    (["-m", "functions.commands.main", "completion", "bash"], 141),
    (["-m", "functions.commands.main", "status", "--bogus", "-o", "yaml"], 2),  # said on stderr: its own code
    (["-m", "tests.support.deployer_policy"] + POLICY, 141),
    (["-m", "tests.support.deployer_policy", "--help"], 141),
], ids=lambda a: " ".join(a[1:4]) if isinstance(a, list) else str(a))
def test_a_pipe_into_head_ends_quietly_for_every_command_and_the_help(argv, code, tmp_path):
    """`... | head -1` with head gone before the output is flushed, as an operator's shell has it: stdout
    block-buffered (no PYTHONUNBUFFERED), so argparse's --help, --version and the parser's own error object
    met the closed pipe only at the interpreter's exit ("Exception ignored ... BrokenPipeError", exit 120),
    and deployer_policy's print raised a traceback. Each ends as a writer SIGPIPE kills (141) with nothing
    on stderr, or with its own code when it had something to say there."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_", "PYTHONUNBUFFERED", "COLUMNS"))}
    env["HOME"] = str(tmp_path)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes
    try:
        proc = subprocess.run([sys.executable] + argv, cwd=ROOT, env=env, stdout=write, stderr=subprocess.PIPE,
                              timeout=60)
    finally:
        os.close(write)
    err = proc.stderr.decode()
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == code, err
    if code == 141:
        assert err == ""


def test_the_help_on_a_full_disk_is_one_line_exit_1(tmp_path):
    """argparse's --help is flushed by main (not at the interpreter's exit, "Exception ignored", exit 120)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_", "PYTHONUNBUFFERED"))}
    env["HOME"] = str(tmp_path)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "functions.commands.main", "status", "--help"], cwd=ROOT,
                              env=env, stdout=full, stderr=subprocess.PIPE, timeout=60)
    assert (proc.returncode, proc.stderr.decode()) == (
        1, "ack-mig-hook: error: cannot write the output to stdout: No space left on device\n")
