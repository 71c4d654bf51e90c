"""docs/first-deployment.md, followed as written: every ``ack-mig-hook`` command of its shell blocks runs, in
the page's order, against the loopback emulators (ROS, OSS, STS, ACK, ECS Cloud Assistant) and the local
TLS Kubernetes API server that ACK's emulated kubeconfig names, in-process from the source tree here, and
from a wheel installed outside it in tests/function/test_wheel_install.py. What the test adds to a command
is :meth:`PageWorld.argv`. The page's cluster id is the emulated cluster's. The page's RAM policy for the
deployer is generated from the actions the commands called (tests/support/deployer_policy.py)."""

import json
import os
import re
import shlex
import urllib.parse

import pytest

from functions.commands import main as cli
from tests.function.conftest import AK, ROOT, SECRET, TOKEN
from tests.function.test_deploy import make_deps
from tests.function.test_doctor import cloud  # noqa: F401  (fixture: ACK, ECS, ROS, Kubernetes API)
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support import deployer_policy, rpc_emulator as rpc
from tests.support.oss_emulator import OssEmulator
from tests.support.sts_emulator import StsEmulator

pytestmark = pytest.mark.timeout(180)
PAGE = os.path.join(ROOT, "docs", "first-deployment.md")
FENCE = re.compile(r"^```(\w*)\s*$")
ACCOUNT = "1357924680135792"
VPC, VSWITCH, SG = "vpc-2ze0cluster0vpc0a1b2", "vsw-2ze0control0plane0c3d4", "sg-2ze0cluster0nodes0e5f6"  # ACK's


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


def policy_block():
    (lines,) = [lines for lang, lines in page_blocks() if lang == "json"]
    return "\n".join(lines)


def policy_actions():
    policy = json.loads(policy_block())
    return {a for statement in policy["Statement"] for a in statement["Action"]}


EXPECTED_COMMANDS = ["plan", "deploy", "deploy", "doctor", "status", "deploy", "deploy", "status", "undeploy",
                     "undeploy", "advise"]


def test_the_page_lists_every_step():
    commands = [argv[0] for kind, argv in page_steps() if kind == "run"]
    assert commands == EXPECTED_COMMANDS, commands


def test_the_page_installs_from_a_clone_or_a_wheel_and_names_no_unpublished_package():
    text = open(PAGE, encoding="utf-8").read()
    version = re.search(r'^version = "([^"]+)"', open(os.path.join(ROOT, "pyproject.toml")).read(), re.M).group(1)
    assert "pip install '.[deploy]'" in text
    assert "./dist/ack_mig_hook-%s-py3-none-any.whl[deploy]" % version in text
    assert "install 'ack-mig-hook[deploy]'" not in text and "install ack-mig-hook" not in text


class PageWorld:
    """The emulators the page's commands talk to, on top of test_doctor's ``cloud`` (ACK, ECS, ROS and the
    Kubernetes API): OSS and STS, and ACK's kubeconfig naming the local API server (the page needs no
    --kubeconfig). ``recorded()``: the RAM action of every request the emulators served."""

    def __init__(self, cloud, monkeypatch, tmp_path):  # noqa: F811
        self.emulator, self.ecs, self.ros, self.kube, _ = cloud
        self.ros.stacks.clear()  # the page deploys the stack itself
        self.oss = OssEmulator(access_key_id=AK, secret=SECRET, token=TOKEN, account_id=ACCOUNT).start()
        self.sts = StsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN, account_id=ACCOUNT).start()
        self.ros.ack = self.emulator
        self.ros.code_store = lambda bucket, key: self.oss.buckets.get(bucket, {}).get(key)
        self.emulator.kubeconfig = open(self.kube.write_kubeconfig(tmp_path / "ack.conf", cert=self.kube.admin_cert(),
                                                                   inline=True)).read()
        # The cluster's network as ECS and VPC hold it (doctor reads it): its security group lets the nodes'
        # vSwitch reach the API server, a rule limited by source, so doctor reads the vSwitch's block too.
        self.ecs.security_groups[SG] = {"SecurityGroupType": "normal", "VpcId": VPC, "Permissions": [
            {"Direction": "egress", "Policy": "Accept", "Priority": "1", "IpProtocol": "TCP",
             "PortRange": "6443/6443", "DestCidrIp": "192.168.0.0/16", "SourceCidrIp": "192.168.0.0/16"}]}
        self.ecs.vswitches[VSWITCH] = {"CidrBlock": "192.168.0.0/24", "VpcId": VPC}
        monkeypatch.setenv("ACK_MIG_OSS_ENDPOINT", self.oss.endpoint)
        monkeypatch.setenv("ACK_MIG_STS_ENDPOINT", self.sts.endpoint)
        self.deps = make_deps(str(tmp_path / "deps"))

    def stop(self):
        self.oss.stop()
        self.sts.stop()

    def exported(self, step):
        """An ``export`` line's variables, the page's cluster id replaced by the emulated cluster's; PATH is
        the install's (the caller's)."""
        return {name: self.emulator.cluster_id if name == "ACK_MIG_CLUSTER_ID" else value
                for name, value in step.items() if name != "PATH"}

    def argv(self, step, poll=True):
        """What the test adds, and why: ``--deps-dir`` (deploy would fetch the function's dependencies from
        PyPI), and in-process ``--poll 0`` (ROS's emulator finishes at once)."""
        argv = list(step)
        if argv[0] == "deploy":
            argv += ["--deps-dir", self.deps]
        if argv[0] in ("deploy", "undeploy") and not poll:
            argv += ["--poll", "0"]
        return argv

    def recorded(self):
        return ({"ros:" + r.action for r in self.ros.requests} | {"cs:" + r.action for r in self.emulator.requests}
                | set(self.oss.actions) | {"%s:%s" % (rpc.PRODUCTS[a], a) for a in self.ecs.calls}
                | {"%s:%s" % (rpc.PRODUCTS[a], a) for a in self.emulator.ess.calls})

    def check(self, outputs):
        """What the page says each command prints (read with its wrapping undone), and what the cloud holds."""
        said = [(argv[0], "--dry-run" in argv, " ".join(out.split()), " ".join(err.split()))
                for argv, _, out, err in outputs]
        stack = "ack-mig-hook-" + self.emulator.cluster_id
        plan, create_plan, create, _doctor, _status, live_plan, live = [s for s in said][:7]
        assert "pool label: ack.aliyun.com/gpu-partition-size=3g.20gb" in plan[2]
        assert create_plan[:2] == ("deploy", True)
        assert "plan: create stack %s in cn-beijing, from ROS PreviewStack" % stack in create_plan[2]
        assert "dry run: nothing was uploaded" in create_plan[2]
        assert "stack %s: CREATE_COMPLETE" % stack in create[2]
        assert "DryRun" in live_plan[2] and "false" in live_plan[2] and "dry run: nothing was uploaded" in live_plan[2]
        assert "stack %s: UPDATE_COMPLETE" % stack in live[2] and "not uploaded again" in live[3]
        # the dry run names the package the deploy uploads (a long key may wrap: read without spaces)
        planned = re.search(r"wouldupload(oss://\S+/ack-mig-hook/%s/[0-9a-f]{16}\.zip)" % stack,
                            create_plan[2].replace(" ", ""))
        assert planned and "uploaded %s" % planned.group(1) in create[3].replace(" ", "").replace("uploaded", "uploaded ")
        doctor = next(s for s in said if s[0] == "doctor")
        assert doctor[2].startswith("ack-mig-hook doctor: cluster %s" % self.emulator.cluster_id)
        assert "%s CREATE_COMPLETE" % stack in doctor[2]
        assert "stack %s deleted" % stack in next(s for s in said if s[0] == "undeploy" and not s[1])[2]
        assert not self.ros.stacks or all(s["Status"] == "DELETE_COMPLETE" for s in self.ros.stacks.values())
        assert [a for a in self.oss.actions if a == "oss:PutObject"] == ["oss:PutObject"]
        values = {}
        for stack_doc in self.ros.stacks.values():
            values = {p["ParameterKey"]: p["ParameterValue"] for p in stack_doc["Parameters"]}
        assert values.get("DryRun") == "false", values  # live at the end, after the dry-run phase


def test_the_first_deployment_page_runs_as_written(cloud, capsys, monkeypatch, tmp_path):  # noqa: F811
    world = PageWorld(cloud, monkeypatch, tmp_path)
    monkeypatch.setenv("COLUMNS", "80")  # as an 80-column terminal shows it (issue 28: output that fits)
    outputs = []
    try:
        for kind, step in page_steps():
            if kind == "export":
                for name, value in world.exported(step).items():
                    monkeypatch.setenv(name, value)
                continue
            argv = world.argv(step, poll=False)
            code = cli.main(argv)
            out, err = capsys.readouterr()
            outputs.append((argv, code, out, err))
            assert "Traceback" not in err and "internal error" not in err, (argv, err)
            # doctor exits 1 on this snapshot's deliberate problems (a typo pool, a stopped agent)
            assert code == (1 if argv[0] == "doctor" else 0), (argv, code, out, err)
    finally:
        world.stop()
    wide = [(argv[0], line) for argv, _, out, _ in outputs for line in out.splitlines()
            if len(line) > 80 and len(line.split()) > 1]  # a word longer than a line (an OSS key) is never cut
    assert wide == [], wide[:3]  # every command of the page, the cloud ones included, fits 80 columns
    world.check(outputs)
    # The deployer's policy on the page is generated from every action the commands called (and what ROS
    # needs for the template's resources): a missing one and one nobody calls both fail here.
    called = world.recorded()
    assert {"ros:CreateStack", "ros:UpdateStack", "ros:DeleteStack", "cs:DescribeClusterNodePools",
            "oss:GetBucketPolicy", "oss:ListObjects"} <= called
    assert not called & set(deployer_policy.OTHER_PATHS), "recorded here: drop it from OTHER_PATHS"
    with open(os.path.join(ROOT, "template.yml"), encoding="utf-8") as handle:
        template = handle.read()
    expected = deployer_policy.render(deployer_policy.actions(called, template), template)
    if os.environ.get("WRITE_POLICY") == "1" and policy_block() != expected:
        text = open(PAGE, encoding="utf-8").read().replace(policy_block(), expected)
        with open(PAGE, "w", encoding="utf-8") as handle:
            handle.write(text)
    assert policy_block() == expected, "the page's policy is not the recorded one (WRITE_POLICY=1 rewrites it):\n" \
        + expected
    # With the page's placeholders filled in for this deploy, RAM would allow every recorded call, and the role,
    # policy and rules it is narrowed to are the ones ROS makes for the FunctionName this deploy passed.
    policy = json.loads(deployer_policy.for_names(policy_block(), ACCOUNT, "cn-beijing", world.emulator.cluster_id,
                                                  log_project="my-sls-project", log_store="ack-mig-hook"))
    cluster = "acs:cs:cn-beijing:%s:cluster/%s" % (ACCOUNT, world.emulator.cluster_id)
    per_request = set(deployer_policy.SECURITYGROUP_ACTIONS + deployer_policy.INSTANCE_ACTIONS
                      + deployer_policy.VSWITCH_ACTIONS)
    stacks = ["acs:ros:cn-beijing:%s:stack/%s" % (ACCOUNT, s) for s in sorted(world.ros.stacks)] or ["none"]
    for action in called - deployer_policy.NO_GRANT - set(world.oss.actions) - per_request:
        for resource in ([cluster] if action in deployer_policy.CLUSTER_ACTIONS else
                         stacks if action in deployer_policy.STACK_ACTIONS else
                         ["acs:%s:cn-beijing:%s:any" % (action.split(":")[0], ACCOUNT)]):
            assert deployer_policy.allows(policy, action, resource), (action, resource)
    # doctor's ECS and VPC reads on what each request named: the group, the vSwitch, the instances.
    named = {"SecurityGroupId": "ecs:%s:securitygroup", "VSwitchId": "vpc:%s:vswitch", "InstanceId": "ecs:%s:instance"}
    checked = set()
    for operation, params in world.ecs.requests:
        action = "%s:%s" % (rpc.PRODUCTS[operation], operation)
        for key, value in params.items():
            if action in per_request and key.split(".")[0] in named:
                resource = "acs:%s/%s" % (named[key.split(".")[0]] % ("cn-beijing:" + ACCOUNT), value)
                assert deployer_policy.allows(policy, action, resource), (action, resource)
                checked.add(action)
    assert checked == per_request & called, per_request & called - checked
    # Every OSS request on the resource it named: the bucket, or the bucket's object.
    assert len(world.oss.actions) == len(world.oss.requests)
    for action, (_, path) in zip(world.oss.actions, world.oss.requests):
        named = urllib.parse.unquote(path.split("?")[0]).strip("/")
        assert deployer_policy.allows(policy, action, "acs:oss:*:*:" + named), (action, path)
    (function,) = {p["ParameterValue"] for stack in world.ros.stacks.values() for p in stack["Parameters"]
                   if p["ParameterKey"] == "FunctionName"}
    made = deployer_policy.names(template, world.emulator.cluster_id, function)
    for action in ("ram:CreateRole", "ram:AttachPolicyToRole", "ram:PassRole"):
        assert deployer_policy.allows(policy, action, "acs:ram:*:%s:role/%s" % (ACCOUNT, made["role"])), action
    assert deployer_policy.allows(policy, "ram:CreatePolicy", "acs:ram:*:%s:policy/%s" % (ACCOUNT, made["policy"]))
    for rule in made["rules"]:
        assert deployer_policy.allows(policy, "eventbridge:CreateRule",
                                      "acs:eventbridge:cn-beijing:%s:eventbus/default/rule/%s" % (ACCOUNT, rule))
    assert deployer_policy.allows(policy, "fc:CreateFunction", "acs:fc:cn-beijing:%s:functions/%s" % (
        ACCOUNT, made["function"]))
    assert deployer_policy.allows(policy, "log:CreateIndex", "acs:log:cn-beijing:%s:project/my-sls-project/"
                                  "logstore/ack-mig-hook" % ACCOUNT)
