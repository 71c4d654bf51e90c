"""``python3 -m node_bootstrap`` whose stdout cannot take the result, as an operator meets it on a node: a reader
gone (``... | head -1``), a full disk (``> /dev/full``), stdout closed (``>&-``). One line on stderr and an exit
code that says so, never a Python traceback; a closed stdout is refused before anything is done."""

import os
import subprocess
import sys

import pytest

from tests.node.nodecli import Node


def _sh(node, redirect, *argv):
    """The node command run by a shell with ``redirect`` applied to it (``>&-``, ``> /dev/full``)."""
    cmd = [sys.executable, "-m", "node_bootstrap"] + node.args(*argv)
    proc = subprocess.run(["sh", "-c", 'exec "$@" ' + redirect, "sh"] + cmd, cwd=node.dir, env=node.env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_reader_gone_is_141_without_a_traceback(tmp_path, json_flag):
    node = Node(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "node_bootstrap"] + node.args("status", *json_flag), cwd=node.dir,
                            env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    proc.stdout.close()  # the reader went away before the result was written
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err


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
