"""Running host commands: argv lists only (never a shell), with a timeout, output captured.

Label text never reaches here as shell text: every command is an argv list of fixed words and values
that the code itself chose (unit names, GPU indices). Tests put small recording scripts first on PATH.
"""

import subprocess
from typing import List, Tuple


PIPE_DRAIN_S = 5  # after the kill: how long to read what is left and wait for the process to go


def run(argv, timeout=120):
    # type: (List[str], float) -> Tuple[int, str]
    """(exit code, combined output); 127 when the program is missing, 124 on timeout. Returns within
    ``timeout`` plus twice PIPE_DRAIN_S whatever the command does: killed at its timeout, it may not end (a
    process in uninterruptible sleep in a hung driver, which SIGKILL does not end) or may have left its pipe
    to a process that lives on; the output is then read and the process waited for a bounded time only."""
    try:
        # UTF-8 with undecodable bytes replaced, not the locale's encoding strictly (ASCII under Python 3.6's
        # C locale, as a unit starts it): one byte of another encoding raised out of here, an internal error
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, universal_newlines=True, encoding="utf-8",
                                errors="replace")
    except OSError as exc:
        return 127, "%s: %s" % (argv[0], exc.strerror or exc)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return 124, _drain(proc) + "\n%s: timed out after %ds" % (argv[0], timeout)
    return proc.returncode, out or ""


def _drain(proc):
    # type: (subprocess.Popen) -> str
    """What a killed command wrote, read for at most PIPE_DRAIN_S; "" when its pipe stays open. Then up to
    PIPE_DRAIN_S for it to be gone (one that never goes is left behind: nothing else can be done)."""
    try:
        out, _ = proc.communicate(timeout=PIPE_DRAIN_S)
        return out or ""
    except subprocess.TimeoutExpired:
        try:
            proc.stdout.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=PIPE_DRAIN_S)
        except subprocess.TimeoutExpired:
            pass
        return ""


def last_line(text):
    # type: (str) -> str
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
