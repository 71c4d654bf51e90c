"""docs/first-deployment.md, followed as written: every ``ack-mig-hook`` command of its shell blocks runs, in
the page's order, against the loopback emulators (ROS, OSS, STS, ACK, ECS Cloud Assistant) and the local
TLS Kubernetes API server that ACK's emulated kubeconfig names. What the test adds to a command, and why:
``--deps-dir`` (deploy would fetch the function's dependencies from PyPI) and ``--poll 0`` (ROS's emulator
finishes at once). The page's cluster id is the emulated cluster's. The ROS and ACK actions the commands
call must each be in the page's RAM policy for the deployer."""

import json
import os
import re
import shlex

import pytest

from functions.commands import main as cli
from tests.function.conftest import AK, ROOT, SECRET, TOKEN
from tests.function.test_deploy import make_deps
from tests.function.test_doctor import cloud  # noqa: F401  (fixture: ACK, ECS, ROS, Kubernetes API)
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.oss_emulator import OssEmulator
from tests.support.sts_emulator import StsEmulator

pytestmark = pytest.mark.timeout(180)
PAGE = os.path.join(ROOT, "docs", "first-deployment.md")
FENCE = re.compile(r"^```(\w*)\s*$")
ACCOUNT = "1357924680135792"


def page_blocks():
    """(language, lines) of every fenced block of the page, in order."""
    blocks, lang, lines = [], None, []
    with open(PAGE, encoding="utf-8") as handle:
        for line in handle.read().splitlines():
            fence = FENCE.match(line.strip())
            if fence and lang is None:
                lang, lines = fence.group(1), []
            elif fence:
                blocks.append((lang, lines))
                lang = None
            elif lang is not None:
                lines.append(line)
    return blocks


def page_steps():
    """The page's exports and ack-mig-hook commands, as argv lists, in order."""
    steps = []
    for lang, lines in page_blocks():
        if lang not in ("sh", "console"):
            continue
        for line in lines:
            line = line[2:] if lang == "console" and line.startswith("$ ") else line
            words = shlex.split(line, comments=True)
            if words[:1] == ["export"]:
                steps.append(("export", dict(w.split("=", 1) for w in words[1:] if "=" in w)))
            elif words[:1] == ["ack-mig-hook"]:
                steps.append(("run", words[1:]))
    return steps


def policy_actions():
    (policy,) = [json.loads("\n".join(lines)) for lang, lines in page_blocks() if lang == "json"]
    return {a for statement in policy["Statement"] for a in statement["Action"]}


def test_the_page_lists_every_step():
    commands = [argv[0] for kind, argv in page_steps() if kind == "run"]
    assert commands == ["plan", "deploy", "deploy", "doctor", "status", "undeploy", "undeploy", "advise"], commands


def test_the_first_deployment_page_runs_as_written(cloud, capsys, monkeypatch, tmp_path):  # noqa: F811
    emulator, ecs, ros, kube, _ = cloud
    ros.stacks.clear()  # the page deploys the stack itself
    oss = OssEmulator(access_key_id=AK, secret=SECRET, token=TOKEN, account_id=ACCOUNT).start()
    sts = StsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN, account_id=ACCOUNT).start()
    ros.ack, ros.code_store = emulator, lambda bucket, key: oss.buckets.get(bucket, {}).get(key)
    # ACK issues a kubeconfig of the cluster's API server: here the local one (the page needs no --kubeconfig).
    emulator.kubeconfig = open(kube.write_kubeconfig(tmp_path / "ack.conf", cert=kube.admin_cert(),
                                                     inline=True)).read()
    monkeypatch.setenv("ACK_MIG_OSS_ENDPOINT", oss.endpoint)
    monkeypatch.setenv("ACK_MIG_STS_ENDPOINT", sts.endpoint)
    deps = make_deps(str(tmp_path / "deps"))
    monkeypatch.setenv("COLUMNS", "80")  # as an 80-column terminal shows it (issue 28: output that fits)
    outputs = []
    try:
        for kind, step in page_steps():
            if kind == "export":
                for name, value in step.items():
                    monkeypatch.setenv(name, emulator.cluster_id if name == "ACK_MIG_CLUSTER_ID" else value)
                continue
            argv = list(step)
            if argv[0] == "deploy":
                argv += ["--deps-dir", deps, "--poll", "0"]
            if argv[0] == "undeploy":
                argv += ["--poll", "0"]
            code = cli.main(argv)
            out, err = capsys.readouterr()
            outputs.append((argv, code, out, err))
            assert "Traceback" not in err and "internal error" not in err, (argv, err)
            # doctor exits 1 on this snapshot's deliberate problems (a typo pool, a stopped agent)
            assert code == (1 if argv[0] == "doctor" else 0), (argv, code, out, err)
    finally:
        oss.stop()
        sts.stop()
    wide = [(argv[0], line) for argv, _, out, _ in outputs for line in out.splitlines()
            if len(line) > 80 and len(line.split()) > 1]  # a word longer than a line (an OSS key) is never cut
    assert wide == [], wide[:3]  # every command of the page, the cloud ones included, fits 80 columns
    # (what a command says, read with its wrapping undone)
    by_step = {(argv[0], "--dry-run" in argv): " ".join(out.split()) for argv, _, out, _ in outputs}
    stack = "ack-mig-hook-" + emulator.cluster_id
    assert "pool label: ack.aliyun.com/gpu-partition-size=3g.20gb" in by_step[("plan", False)]
    assert "plan: create stack %s in cn-beijing, from ROS PreviewStack" % stack in by_step[("deploy", True)]
    assert "dry run: nothing was uploaded" in by_step[("deploy", True)]
    assert "stack %s: CREATE_COMPLETE" % stack in by_step[("deploy", False)]
    assert by_step[("doctor", False)].startswith("ack-mig-hook doctor: cluster %s" % emulator.cluster_id)
    assert "%s CREATE_COMPLETE" % stack in by_step[("doctor", False)]
    assert "stack %s deleted" % stack in by_step[("undeploy", False)]
    assert not ros.stacks or all(s["Status"] == "DELETE_COMPLETE" for s in ros.stacks.values())
    # The deployer's policy on the page holds every ROS and ACK action the commands called.
    called = {"ros:" + r.action for r in ros.requests} | {"cs:" + r.action for r in emulator.requests}
    assert {"ros:CreateStack", "ros:DeleteStack", "cs:DescribeClusterNodePools"} <= called
    assert called - policy_actions() == set(), called - policy_actions()
