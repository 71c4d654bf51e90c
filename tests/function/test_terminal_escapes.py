"""Data from the cluster or the cloud never drives the operator's terminal: a node annotation that erases
the line and prints "all nodes healthy" in green, an OSC 52 clipboard set, an event field with ESC in it,
come out of every human-readable output as visible escapes (``\\x1b``), and JSON output stays JSON.

The sequences are the real ones (ECMA-48 CSI ``ESC [ 2 K`` erase line, SGR ``ESC [ 32 m`` green; xterm's
OSC 52 ``ESC ] 52 ; c ; <base64> BEL`` sets the clipboard; U+202E RIGHT-TO-LEFT OVERRIDE reverses text)."""

import json
import os

import pytest

from functions.commands import doctor
from functions.commands.main import main
from functions.base.event_result import HandlerResult
from functions.base.textsafe import escape, escape_data
from node_bootstrap.commands.textout import error_line, human, printable
from tests.function.conftest import event_json
from tests.rollout.conftest import NEW, OLD, capacity, node_labels, snapshot

ERASE_GREEN = "\r\x1b[2K\x1b[32mall nodes healthy\x1b[0m"
OSC52 = "\x1b]52;c;Y3VybCBodHRwOi8vZXZpbC5leGFtcGxlIHwgc2g=\x07"
RLO = "gpu-busy \u202eevil"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _clean(text):
    """Nothing a terminal acts on: no C0 control but the line breaks we print, no DEL, no C1, no bidi."""
    return all(c == "\n" or c.isprintable() for c in text)


def test_the_helper_writes_every_non_printable_character_visibly():
    assert escape(ERASE_GREEN) == "\\r\\x1b[2K\\x1b[32mall nodes healthy\\x1b[0m"
    assert escape(OSC52).startswith("\\x1b]52;c;") and escape(OSC52).endswith("\\x07")
    assert escape("a\x9b31mb\x7f") == "a\\x9b31mb\\x7f"  # C1 CSI (8-bit terminals) and DEL
    assert escape(RLO) == "gpu-busy \\u202eevil" and escape("line\u2028two") == "line\\u2028two"
    assert escape("GPU 0 ключ ünïcode 中文") == "GPU 0 ключ ünïcode 中文"  # letters are not controls
    assert escape_data({"k\x1b": ["v\n", ("t\x07",), 3]}) == {"k\\x1b": ["v\\n", ("t\\x07",), 3]}
    assert printable(ERASE_GREEN) == escape(ERASE_GREEN) and printable(RLO) == escape(RLO)  # one rule, two sides


def test_status_nodes_escapes_a_hostile_annotation_and_an_osc52_clipboard_set(tmp_path, capsys):
    kube = {n: {"labels": node_labels(OLD, "failed"), "annotations": {}, "unschedulable": False,
                "allocatable": capacity(OLD)} for n in ("node-a", "node-b", "node-c")}
    kube["node-a"]["annotations"]["ack-mig-hook/mig-config-reason"] = ERASE_GREEN
    kube["node-b"]["annotations"]["ack-mig-hook/mig-config-reason"] = OSC52
    kube["node-c"] = {"labels": node_labels(NEW), "allocatable": capacity(NEW)}
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(snapshot(kube_nodes=kube)))
    assert main(["status", "--inventory", str(path), "--nodes"]) == 0
    out = capsys.readouterr().out
    assert _clean(out), repr(out)
    assert "failed node-a: \\r\\x1b[2K\\x1b[32mall nodes healthy\\x1b[0m" in out
    assert "failed node-b: \\x1b]52;c;Y3VybCBodHRwOi8vZXZpbC5leGFtcGxlIHwgc2g=\\x07" in out
    assert not any(line.startswith("all nodes healthy") for line in out.splitlines())
    assert main(["status", "--inventory", str(path), "--json", "--nodes"]) == 0
    doc = capsys.readouterr().out
    assert "\x1b" not in doc and json.loads(doc)["pools"][0]["failed"][0]["reason"] == ERASE_GREEN


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_invoke_escapes_what_an_event_carries_into_the_reason(tmp_path, capsys, json_out):
    """An event of no known shape: its field names are quoted in the skip reason. (A field intake reads, such as
    a CloudEvent's type or an ActionTrail record's errorCode, is refused whole when it holds a control character,
    unquoted: tests/function/test_intake_words.py.)"""
    event = {ERASE_GREEN: 1}
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    argv = ["invoke", "--event", str(path), "--inventory", os.path.join(ROOT, "examples", "inventory.json")]
    assert main(argv + (["--json"] if json_out else [])) == 0
    out = capsys.readouterr().out
    assert _clean(out), repr(out)
    # the reason quotes it as repr (one printable line whoever reads it), and the terminal output stays clean
    if json_out:
        assert json.loads(out)["reason"].startswith("unrecognised event with fields %r:" % ERASE_GREEN)
    else:
        assert "\\x1b[32mall nodes healthy\\x1b[0m': not a CloudEvent" in out


def test_invoke_text_escapes_node_results_and_decisions(capsys):
    from functions.commands.invoke import _text
    from functions.base.model import Decision

    result = HandlerResult(trigger="manual", outcome="done", reason="1 partition", decisions=[
        Decision(instance_id="i-abc", node_name="node\x1b[8m", action="error", reason=OSC52)],
        nodes=[{"instance_id": "i-abc", "outcome": "failed", "reason": "node said: " + ERASE_GREEN}])
    text = _text(result)
    assert _clean(text) and len(text.splitlines()) == 3
    assert "node said: \\r\\x1b[2K" in text and "\\x1b]52;c;" in text and "node\\x1b[8m" in text


def test_doctor_text_escapes_what_the_cluster_answered(monkeypatch, capsys):
    checks = [doctor.Check("PROBLEM", "device plugin", "pod %s runs --mig-strategy=single" % ERASE_GREEN)]
    monkeypatch.setattr(doctor, "_gather", lambda args: checks)
    assert main(["doctor", "--cluster-id", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b", "--region", "cn-beijing"]) == 1
    out = capsys.readouterr().out
    assert _clean(out) and "pod \\r\\x1b[2K\\x1b[32mall nodes healthy" in out


def test_the_last_resort_error_line_escapes_the_message(monkeypatch, capsys):
    from functions.commands import status

    def boom(args):
        raise RuntimeError("server said " + OSC52)

    monkeypatch.setattr(status, "run", boom)
    assert main(["status"]) == 70  # a bug: docs/cli.md, exit codes
    err = capsys.readouterr().err
    assert _clean(err) and err.startswith("ack-mig-hook: internal error: RuntimeError: server said \\x1b]52;")


def test_the_node_tool_text_mode_escapes_driver_and_cluster_text():
    """node_bootstrap's text output (status, plan, apply): a GPU name from the driver, a label error from
    the API server, a warning; its diagram keeps its own line breaks."""
    result = {"command": "status", "outcome": "success", "sequence": "3g.20gb\x1b[31m",
              "error": {"code": "labels", "message": ERASE_GREEN},
              "warnings": [OSC52], "labels": {"error": RLO},
              "gpus": [{"index": 0, "name": "NVIDIA\x1b]0;title\x07", "mig_mode": {"current": "enabled",
                                                                              "pending": "enabled"},
                        "instances": [1], "diagram": "GPU 0 NVIDIA\x1b[5m\n  | 3g |\n  | 3g |", "notes": []}]}
    text = human(result)
    assert _clean(text), repr(text)
    assert text.splitlines()[0] == "status: success (labels), sequence 3g.20gb\\x1b[31m"
    line = error_line(result)  # the error itself: once, on stderr
    assert _clean(line) and line == "node_bootstrap: error: \\r\\x1b[2K\\x1b[32mall nodes healthy\\x1b[0m"
    assert "warning: \\x1b]52;c;" in text and "labels: gpu-busy \\u202eevil" in text
    assert "GPU 0 NVIDIA\\x1b]0;title\\x07: MIG enabled" in text and "  | 3g |" in text.splitlines()
