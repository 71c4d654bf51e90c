"""The node's host commands (node_bootstrap/host/runner.py: `nvidia-smi -r`, `systemctl`) end at their
timeout, whatever the command leaves behind. A command killed at its timeout whose output pipe stays open (a
process in uninterruptible sleep in a hung driver, which SIGKILL does not end; here a grandchild that inherited
the pipe and never exits) held the node tool in the read after the kill, for as long as the pipe stayed open."""

import os
import signal
import time

import pytest

from node_bootstrap.host.runner import run


@pytest.fixture
def holder(tmp_path):
    """A pid file for the process that keeps the pipe open; it is ended after the test, whatever happened."""
    pid_file = tmp_path / "holder.pid"
    yield pid_file
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


@pytest.mark.timeout(60)  # a hang here is the bug: the read after the kill waited for the pipe to close
def test_a_command_whose_pipe_stays_open_after_the_kill_ends_at_its_timeout(holder):
    script = "sleep 600 & echo $! > %s; echo started; sleep 600" % holder
    started = time.monotonic()
    code, out = run(["/bin/sh", "-c", script], timeout=1)
    elapsed = time.monotonic() - started
    assert code == 124 and "timed out after 1s" in out, (code, out)
    assert elapsed < 20, elapsed  # the timeout and a bounded read of what is left, not the holder's 600 s


@pytest.mark.timeout(60)
def test_a_command_that_finished_while_a_grandchild_holds_its_pipe_ends_at_its_timeout(holder):
    """The command itself exited at once; the pipe it left to a grandchild never closes."""
    script = "sleep 600 & echo $! > %s; echo done; exit 0" % holder
    started = time.monotonic()
    code, out = run(["/bin/sh", "-c", script], timeout=1)
    elapsed = time.monotonic() - started
    assert code == 124 and "timed out after 1s" in out, (code, out)
    assert elapsed < 20, elapsed


def test_a_command_that_ends_in_time_gives_its_code_and_output():
    assert run(["/bin/sh", "-c", "echo hello; exit 3"], timeout=10) == (3, "hello\n")
