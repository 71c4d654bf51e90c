"""The node script is a fixed template: nothing a label says can become shell text."""

import base64
import json
import re
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from functions.delivery.node_script import HEREDOC, CommandError, node_args, render

DIGEST = "ab" * 32
# The shell part of the script (everything before the runner's heredoc body), with its variable fields.
SHELL = re.compile(
    r"\A#!/bin/sh\n(#[^\n]*\n)+umask 077\n"
    r"exec (?P<py>[A-Za-z0-9._/-]+) -I - '[0-9a-f]{64}' '(?P<root>/[A-Za-z0-9._/-]+)' '(?P<args>[A-Za-z0-9+/=]*)' '[0-9]+' "
    r"'(?P=py)' '(?P<iid>[A-Za-z0-9_-]+|\{\{ACS::InstanceId\}\})' '(?P<names>[A-Za-z0-9+/=]*)' '[0-9]+' "
    r"<<'" + HEREDOC + r"'\n\Z")


def shell_part(script):
    head, _, _ = script.partition("<<'%s'\n" % HEREDOC)
    return head + "<<'%s'\n" % HEREDOC


HOSTILE = ["$(reboot)", "`id`", "'; rm -rf / #", "1g.5gb\nreboot", "\"$HOME\"", "a'b", "${IFS}",
           "ACK_MIG_RUNNER_EOF\nid", "{{ACS::InstanceId}}", "\x00\x1b[31m", "1g.5gb;id|cat&&x"]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_label_never_reaches_the_shell(value):
    script = render(DIGEST, node_args({"kind": "sequence", "value": value}), 600, "i-abc",
                    {"i-abc": "cn-x.10.0.0.1"})
    m = SHELL.match(shell_part(script))
    assert m, shell_part(script)
    assert value not in script
    # ... and the node gets it back intact, from base64 only
    args = json.loads(base64.b64decode(m.group("args")))
    doc = json.loads(base64.b64decode(args[args.index("--request-b64") + 1]))
    assert doc == {"version": 1, "partition": {"kind": "sequence", "value": value}}


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=80))
def test_any_label_text_changes_nothing_but_the_base64_field(value):
    def shell(v):
        m = SHELL.match(shell_part(render(DIGEST, node_args({"kind": "size", "value": v}), 60)))
        assert m
        return m.string[:m.start("args")] + "ARGS" + m.string[m.end("args"):], m.group("args")

    text, args_b64 = shell(value)
    assert text == shell("1g.5gb")[0]  # byte for byte the same shell, whatever the label says
    args = json.loads(base64.b64decode(args_b64))
    assert json.loads(base64.b64decode(args[-1]))["partition"]["value"] == value


def test_node_names_travel_compressed_and_each_node_finds_its_own():
    names = {"i-%d" % n: "cn-beijing.192.168.0.%d" % n for n in range(100)}
    m = SHELL.match(shell_part(render(DIGEST, ["--json"], 60, names=names)))
    assert m.group("iid") == "{{ACS::InstanceId}}"
    assert json.loads(zlib.decompress(base64.b64decode(m.group("names")))) == names


@pytest.mark.parametrize("kw", [
    {"root": "/var/lib/x'; id"}, {"root": "relative"}, {"root": "/var/../etc"}, {"python": "python3; id"},
    {"instance_id": "i-1'x"}, {"names": {"i-1": "Bad Name"}}, {"names": {"i 1": "ok"}}, {"deadline_s": 0},
    {"grace_s": 0}, {"grace_s": "5; id"},
])
def test_every_substitution_is_checked(kw):
    args = dict(digest=DIGEST, args=["--json"], deadline_s=60)
    args.update(kw)
    with pytest.raises(CommandError):
        render(**args)


def test_a_bad_hash_or_kind_is_refused():
    with pytest.raises(CommandError):
        render("zz" * 32, ["--json"], 60)
    with pytest.raises(CommandError):
        node_args({"kind": "shell", "value": "x"})


def test_every_apply_also_installs_the_boot_unit_and_carries_the_label_as_base64():
    import base64
    import json

    args = node_args({"kind": "sequence", "value": "9-9"}, ["--backend", "nvml"])
    assert args[:3] == ["--json", "--backend", "nvml"]
    assert args[3:5] == ["apply", "--boot-unit"]  # the layout must survive reboots
    assert args[5] == "--request-b64"
    assert json.loads(base64.b64decode(args[6])) == {"version": 1, "partition": {"kind": "sequence", "value": "9-9"}}


def test_the_runner_never_imports_from_the_directory_the_script_runs_in(tmp_path):
    """`python3 -` puts the working directory first on sys.path: a json.py (or hashlib.py...) there, in the
    home directory Cloud Assistant or sshd starts the script in, would have run as root before the bundle's
    check (found by a security review). The script runs the runner isolated (-I)."""
    import subprocess
    import sys

    work = tmp_path / "home"
    work.mkdir()
    marker = tmp_path / "imported"
    for name in ("json", "zlib", "base64", "hashlib", "tarfile"):
        (work / ("%s.py" % name)).write_text("open(%r, 'a').write(%r)\nraise SystemExit(99)\n" % (str(marker), name))
    root = tmp_path / "node"
    script = render(DIGEST, node_args({"kind": "size", "value": "1g.5gb"}), 30, instance_id="i-abc",
                    root=str(root), python=sys.executable)
    done = subprocess.run(["sh", "-c", script], cwd=str(work), capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(work)})
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 10, (done.returncode, done.stderr[-300:])  # bundle-missing: nothing was sent here
