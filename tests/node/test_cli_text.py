"""What a person reads: each command's --help offers only its own options, each with help text; the text
output says what the JSON says (GPU ranges, the processes holding a GPU, a gpu-busy warning from plan)."""

import argparse
import subprocess

import pytest

from node_bootstrap.commands.cli import COMMAND_GROUPS, build_parser
from node_bootstrap.commands.textout import index_ranges
from tests.node.nodecli import Node, node_python


def _text(node, *argv):
    proc = subprocess.run([node_python(), "-m", "node_bootstrap"] + node.args(*argv), cwd=node.dir,
                          env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def _subparsers():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return parser, sub.choices


def _help(*argv):
    return subprocess.run([node_python(), "-m", "node_bootstrap"] + list(argv) + ["--help"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60).stdout


def test_every_option_of_every_command_has_help_text():
    parser, commands = _subparsers()
    assert set(commands) == set(COMMAND_GROUPS)
    for name, sub in [("(before the command)", parser)] + sorted(commands.items()):
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and action.help.strip(), (name, action.option_strings)


@pytest.mark.parametrize("command, absent, present", [
    ("status", ["--force", "--lock-file", "--clients", "--capacity-timeout", "--kubeconfig", "--root"],
     ["--backend", "--json", "--sim-fault"]),
    ("plan", ["--force", "--no-reset", "--device-plugin-restart"], ["--sequence", "--size"]),
    ("uninstall-boot-unit", ["--force", "--sequence", "--clients"], ["--root"]),
    ("install-boot-unit", ["--capacity-timeout", "--device-plugin-restart"], ["--force", "--clients", "--root"]),
    ("disable", ["--sequence", "--boot-unit"], ["--force", "--no-reset", "--root", "--capacity-timeout"]),
    ("apply", ["--root"], ["--force", "--boot-unit", "--capacity-timeout", "--sequence"]),
    ("report-holders", ["--lock-timeout", "--force", "--clients"], ["--lock-file", "--min-interval", "--kubeconfig"]),
])
def test_a_command_offers_only_the_options_that_apply_to_it(command, absent, present):
    text = _help(command)
    for option in absent:
        assert option not in text, (command, option)
    for option in present:
        assert option in text, (command, option)


def test_an_option_of_another_command_is_refused_in_one_line(tmp_path):
    node = Node(tmp_path, count=1)
    rc, out, err = _text(node, "status", "--force")
    assert rc == 2 and "unrecognized arguments: --force" in err and "Traceback" not in err


def test_index_ranges():
    assert index_ranges([0]) == "0"
    assert index_ranges([0, 1, 2, 3, 4, 5, 6, 7]) == "0-7"
    assert index_ranges([5, 0, 1, 3]) == "0-1, 3, 5"


def test_eight_identical_gpus_print_as_one_range_in_plan_and_apply(tmp_path):
    node = Node(tmp_path, count=8)
    rc, out, _ = _text(node, "plan", "--sequence", "3g.20gb-3g.20gb")
    assert rc == 0
    assert "GPU 0-7 NVIDIA A100-SXM4-40GB: keep 0, destroy 0, create 2 (5 mutating calls, enable MIG mode)" in out
    assert out.count("3g.20gb  # # # # . . . .") == 1 and "GPU 0-7 NVIDIA A100-SXM4-40GB (planned): 2 instances" in out
    assert "GPU 1 " not in out
    rc, out, _ = _text(node, "apply", "--sequence", "3g.20gb-3g.20gb")
    assert rc == 0
    assert out.splitlines()[:2] == ["apply: success, 40 changes, sequence 3g.20gb-3g.20gb",
                                    "GPU 0-7 NVIDIA A100-SXM4-40GB: MIG enabled"]
    assert out.count("start 4 size 4") == 1


def test_status_names_the_processes_holding_a_gpu_and_keeps_that_gpu_apart(tmp_path):
    node = Node(tmp_path, count=4)
    rc, out, _ = _text(node, "status", "--sim-fault", "processes")
    assert rc == 0
    lines = out.splitlines()
    assert "GPU 0 NVIDIA A100-SXM4-40GB: MIG disabled" in lines
    assert "  compute process on the GPU: 4242" in lines
    assert "GPU 1-3 NVIDIA A100-SXM4-40GB: MIG disabled" in lines
    assert node.run("status", "--sim-fault", "processes").json["gpus"][0]["processes"] == [4242]


def test_plan_warns_when_apply_would_be_refused_as_gpu_busy(tmp_path):
    node = Node(tmp_path, count=2)
    res = node.run("plan", "--sequence", "9-9", "--sim-fault", "processes")
    assert res.rc == 0
    (warning,) = res.json["warnings"]
    assert warning.startswith("apply will be refused as gpu-busy: GPU 0 runs compute process 4242")
    rc, out, _ = _text(node, "plan", "--sequence", "9-9", "--sim-fault", "processes")
    assert "warning: %s" % warning in out.splitlines()
    applied = node.run("apply", "--sequence", "9-9", "--sim-fault", "processes")
    assert applied.rc == 4 and applied.json["error"]["message"] in warning  # the same words as apply's refusal
    assert "warnings" not in node.run("plan", "--sequence", "9-9").json  # idle: nothing to warn about


@pytest.mark.parametrize("argv", [["plan", "--sequence", "9-9", "--sim-fault", "not-mig-capable"],
                                  ["plan", "--sequence", "5g.99gb"], ["plan"]])
def test_read_only_commands_never_say_failed(tmp_path, argv):
    node = Node(tmp_path, count=1)
    rc, out, err = _text(node, *argv)
    assert rc in (2, 3)
    assert out.splitlines()[0] == "plan: error (%s)" % node.run(*argv).json["error"]["code"]
    assert "failed" not in (out + err).lower()
    # the error is said once: its words on stderr, only its code in the summary
    message = node.run(*argv).json["error"]["message"]
    assert err.count(message) == 1 and message not in out
    res = node.run(*argv)
    assert res.json["outcome"] == "error" and "changes" not in res.json


def test_disable_text_says_what_it_did(tmp_path):
    node = Node(tmp_path, count=2)
    root = tmp_path / "root"
    assert node.run("apply", "--sequence", "9-9", "--boot-unit", "--boot-unit-root", str(root)).rc == 0
    rc, out, _ = _text(node, "disable", "--root", str(root))
    assert rc == 0
    assert out.splitlines()[:2] == ["disable: success, 10 changes", "GPU 0-1 NVIDIA A100-SXM4-40GB: MIG disabled"]
    assert "boot unit removed: %s" % (root / "etc/systemd/system/ack-mig-hook.service") in out
    rc, out, _ = _text(node, "uninstall-boot-unit", "--root", str(root))
    assert rc == 0 and out.splitlines() == ["uninstall-boot-unit: success", "no boot unit at %s"
                                            % (root / "etc/systemd/system/ack-mig-hook.service")]


@pytest.mark.parametrize("option, value, accepted", [
    ("--lock-timeout", "-5", "0..86400 seconds"), ("--lock-timeout", "nan", "0..86400 seconds"),
    ("--client-stop-timeout", "soon", "0..3600"), ("--capacity-interval", "0", "0.1..600 seconds")])
def test_a_number_out_of_its_range_is_refused_in_one_line_before_anything_changes(tmp_path, option, value,
                                                                                   accepted):
    node = Node(tmp_path, count=1)
    assert node.run("apply", "--sequence", "9").rc == 0
    with open(node.state) as fh:
        before = fh.read()
    rc, out, err = _text(node, "apply", "--sequence", "9-9", option, value)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and option in lines[0] and accepted in lines[0], err
    with open(node.state) as fh:
        assert fh.read() == before  # nothing was touched
