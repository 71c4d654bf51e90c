"""The text a person reads (without ``--json``): the same facts as the JSON result, shorter. Pure.

GPUs whose lines, diagram and notes are the same apart from their index are printed once, as a range
(``GPU 0-7 NVIDIA A100-SXM4-40GB: ...``): an 8-GPU node reads like one GPU, and a GPU that differs
stands out. Read-only commands (status, plan) report an error as ``error``, never ``failed``.
"""

import re
from typing import Any, Dict, List, Tuple

READ_ONLY = ("status", "plan")
_TITLE = re.compile(r"^GPU [0-9]+ ")


def printable(text):
    # type: (Any) -> str
    """``text`` with every non-printable character (``str.isprintable``: ESC and the other controls, bidi
    overrides, line separators) written as ``\\n``, ``\\xNN``, ``\\uNNNN``...: a GPU name from the
    driver, a label or an API server's error must not drive the terminal. The same rule as
    ``functions/base/textsafe.py``; node code cannot import ``functions`` (it runs alone on the node's system
    Python, tests/test_layout.py pins it), hence this copy."""
    text = text if isinstance(text, str) else str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _SHORT.get(c) or ("\\x%02x" % ord(c) if ord(c) < 0x100 else
                                                             "\\u%04x" % ord(c) if ord(c) < 0x10000 else
                                                             "\\U%08x" % ord(c)) for c in text)


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _printable_data(value, key=""):
    # type: (Any, str) -> Any
    """Every string of a result made printable; a diagram (several lines of its own) line by line."""
    if isinstance(value, str):
        return "\n".join(printable(l) for l in value.split("\n")) if key == "diagram" else printable(value)
    if isinstance(value, dict):
        return dict((printable(k) if isinstance(k, str) else k, _printable_data(v, str(k))) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_printable_data(v) for v in value]
    return value


def index_ranges(indices):
    # type: (List[int]) -> str
    """[0, 1, 2, 3, 5] -> "0-3, 5"."""
    parts = []  # type: List[str]
    run = []  # type: List[int]
    for index in sorted(indices) + [None]:  # type: ignore[operator]
        if run and (index is None or index != run[-1] + 1):
            parts.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
            run = []
        if index is not None:
            run.append(index)
    return ", ".join(parts)


def _plural(count, word, plural=None):
    # type: (int, str, str) -> str
    return "%d %s" % (count, word if count == 1 else (plural or word + "s"))


def mode_on(gpu):
    # type: (Dict[str, Any]) -> bool
    return "enabled" in ((gpu.get("mig_mode") or {}).get("current"), (gpu.get("mig_mode") or {}).get("pending"))


def _gpu_text(command, gpu):
    # type: (str, Dict[str, Any]) -> Tuple[str, Tuple[str, ...]]
    """(the GPU's line without "GPU <index> ", the lines under it with the diagram's index blanked)."""
    if command == "plan":
        what = "no change" if gpu["converged"] else "%s%s" % (
            _plural(gpu["mutating_calls"], "mutating call"), ", enable MIG mode" if gpu["mode_change"] else "")
        head = "%s: keep %d, destroy %d, create %d (%s)" % (gpu["name"], len(gpu["keep"]), len(gpu["destroy"]),
                                                            len(gpu["create"]), what)
    else:
        mode = gpu["mig_mode"]
        head = "%s: MIG %s%s" % (gpu["name"], mode["current"] or "unknown",
                                 " (pending %s)" % mode["pending"] if mode["pending"] != mode["current"] else "")
    body = []  # type: List[str]
    # An empty diagram of a GPU with MIG off says nothing the MIG line does not (plan's is the planned one)
    if gpu.get("diagram") and (command == "plan" or gpu.get("instances") or mode_on(gpu)):
        body.append(_TITLE.sub("GPU {} ", gpu["diagram"], count=1))
    if gpu.get("processes"):
        pids = gpu["processes"]
        where = dict((p["pid"], p["gpu_instance_id"]) for p in gpu.get("compute_processes", ()))
        body.append("  compute process%s on the GPU: %s" % (
            "es" if len(pids) > 1 else "",
            ", ".join(str(p) + (" (GPU instance %d)" % where[p] if where.get(p) is not None else "") for p in pids)))
    for note in gpu.get("notes", []):
        body.append("  note: %s" % note)
    return head, tuple(body)


def gpu_lines(command, gpus):
    # type: (str, List[Dict[str, Any]]) -> List[str]
    groups = []  # type: List[Tuple[List[int], Tuple[str, Tuple[str, ...]]]]
    for gpu in gpus:
        key = _gpu_text(command, gpu)
        for indices, seen in groups:
            if seen == key:
                indices.append(gpu["index"])
                break
        else:
            groups.append(([gpu["index"]], key))
    lines = []  # type: List[str]
    for indices, (head, body) in groups:
        label = index_ranges(indices)
        lines.append("GPU %s %s" % (label, head))
        lines.extend(line.replace("GPU {} ", "GPU %s " % label, 1) for line in body)
    return lines


def _boot_unit_line(command, result):
    # type: (str, Dict[str, Any]) -> List[str]
    if command in ("install-boot-unit", "uninstall-boot-unit") and "unit" not in result:
        return []  # the command was refused before it got to the unit: its error says why
    holders = ["holders unit %s" % path for path in result.get("holders_units") or []]
    if command == "install-boot-unit":
        return ["%s %s (request %s)" % ("installed" if result["changed"] else "unchanged", result["unit"],
                                        result["request"])] + holders
    if command == "uninstall-boot-unit":
        return (["removed %s" % result["unit"] if result["removed"] else "no boot unit at %s" % result["unit"]] +
                ["removed " + line for line in holders])
    if command == "report-holders" and "rounds" in result:
        return ["holders report %s" % ("written" if result.get("written") else "unchanged" if result.get("unchanged")
                                       else "skipped: the node lock is held" if result.get("skipped")
                                       else "not written")]
    unit = result.get("boot_unit")
    if command == "disable" and isinstance(unit, dict):
        if unit.get("error") or unit.get("skipped"):
            return ["boot unit: %s" % (unit.get("error") or unit.get("skipped"))]
        return ["boot unit %s" % ("removed: %s" % unit["unit"] if unit.get("removed") else "not installed")]
    return []


def error_line(result):
    # type: (Dict[str, Any]) -> str
    """The one line (stderr) that says a command's error; the text summary names only its code."""
    return "node_bootstrap: error: %s" % printable(str(result["error"]["message"]))


def human(result):
    # type: (Dict[str, Any]) -> str
    lines = []  # type: List[str]
    result = _printable_data(result)  # names, labels and errors come from the driver and the cluster
    command = result.get("command") or "node_bootstrap"
    if "outcome" in result:
        outcome = result["outcome"]
        if command in READ_ONLY and outcome == "failed":
            outcome = "error"
        line = "%s: %s" % (command, outcome)
        code = (result.get("error") or {}).get("code")
        if code and code != outcome:  # the message itself is on stderr (cli.py): said once; its code here
            line += " (%s)" % code
        if "changes" in result and command not in READ_ONLY:
            line += ", %s" % _plural(result["changes"], "change")
        if result.get("sequence"):
            line += ", sequence %s" % result["sequence"]
        lines.append(line)
    for warning in result.get("warnings", []):
        lines.append("warning: %s" % warning)
    lines.extend(gpu_lines(command, result.get("gpus", [])))
    lines.extend(_boot_unit_line(command, result))
    for problem in result.get("client_problems", []):
        lines.append("clients: %s" % problem)
    if result.get("labels", {}).get("error"):
        lines.append("labels: %s" % result["labels"]["error"])
    if (result.get("event") or {}).get("error"):
        lines.append("event: %s" % result["event"]["error"])
    return "\n".join(lines)
