"""``ack-mig-hook demo --json`` run once per test process, for every test that reads its output.

The demo runs the node tool some thirty times (about 5 s on 2 cores); three test files read the same output
of the same command (what it rolls, its JSON layout, the nodes it partitions). The demo reads nothing a test
sets (its example files and simulated nodes are its own), so one run answers them all."""

import contextlib
import functools
import io


@functools.lru_cache(maxsize=None)
def demo_json() -> str:
    """What ``demo --json`` wrote on stdout; the run's exit code is checked here (0)."""
    from functions.commands.main import main

    with contextlib.redirect_stdout(io.StringIO()) as stdout:
        code = main(["demo", "--json"])
    assert code == 0, code
    return stdout.getvalue()
