"""The node's host commands (node_bootstrap/host/runner.py: `nvidia-smi -r`, `systemctl`) end at their
timeout, whatever the command leaves behind. A command killed at its timeout whose output pipe stays open (a
process in uninterruptible sleep in a hung driver, which SIGKILL does not end; here a grandchild that inherited
the pipe and never exits) held the node tool in the read after the kill, for as long as the pipe stayed open."""

import os
import signal

import pytest

from node_bootstrap.host import runner
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
@pytest.mark.parametrize("tail", ["echo started; sleep 600", "echo done; exit 0"],
                         ids=["command-runs-on", "command-exited-grandchild-holds-the-pipe"])
def test_a_command_whose_pipe_stays_open_ends_at_its_timeout(holder, tail, monkeypatch):
    """A grandchild keeps the command's pipe open for 600 s, whether the command runs on or exited at once:
    the run ends at its timeout and a bounded read of what is left, not when the pipe closes."""
    # The bounded read after the kill, shortened from 5 s: a read that waited for the pipe still hangs 600 s
    # (the timeout mark above fails it), a bounded one ends within the timeout plus twice this.
    monkeypatch.setattr(runner, "PIPE_DRAIN_S", 1)
    code, out = run(["/bin/sh", "-c", "sleep 600 & echo $! > %s; %s" % (holder, tail)], timeout=1)
    assert code == 124 and "timed out after 1s" in out, (code, out)


def test_a_command_that_ends_in_time_gives_its_code_and_output():
    assert run(["/bin/sh", "-c", "echo hello; exit 3"], timeout=10) == (3, "hello\n")


@pytest.mark.parametrize("code", [0, 1])
def test_output_that_is_not_text_in_the_locales_encoding_is_read_not_raised(code):
    """The output was decoded strictly in the locale's encoding (ASCII under Python 3.6's C locale, as a
    systemd unit starts it without LANG): one byte it cannot decode (a unit name or a driver message in
    another encoding) raised UnicodeDecodeError out of run(), an internal error in the middle of an apply
    instead of the command's exit code and words. Undecodable bytes are replaced; the code and the rest stay."""
    got, out = run(["/bin/sh", "-c", "printf 'unit caf\\351 failed\\n'; exit %d" % code])
    assert got == code and out.startswith("unit caf") and out.rstrip().endswith("failed"), (got, out)
