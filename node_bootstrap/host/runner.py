"""Running host commands: argv lists only (never a shell), with a timeout, output captured.

Label text never reaches here as shell text: every command is an argv list of fixed words and values
that the code itself chose (unit names, GPU indices). Tests put small recording scripts first on PATH.
"""

import subprocess
from typing import List, Tuple


def run(argv, timeout=120):
    # type: (List[str], float) -> Tuple[int, str]
    """(exit code, combined output); 127 when the program is missing, 124 on timeout."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, universal_newlines=True)
    except OSError as exc:
        return 127, "%s: %s" % (argv[0], exc.strerror or exc)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return 124, (out or "") + "\n%s: timed out after %ds" % (argv[0], timeout)
    return proc.returncode, out or ""


def last_line(text):
    # type: (str) -> str
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
