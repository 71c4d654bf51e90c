"""The deployer's RAM policy on docs/first-deployment.md grants every action on the narrowest resource RAM
supports: no wildcard action, RAM's role and policy actions (and ``ram:PassRole``) on the stack's own role and
policy only, and the EventBridge rule actions on the rules FC creates for the stack's triggers only. Checked
by evaluating the page's policy, with its placeholders filled in, the way RAM matches ``Action`` and
``Resource`` (``*`` and ``?`` wildcards; RAM's "Policy elements"), so a policy that lets its holder attach an
admin policy to a role, or pass another role, fails here whatever the generator says."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.function.conftest import ROOT
from tests.support import deployer_policy, ros_template

PAGE = os.path.join(ROOT, "docs", "first-deployment.md")
ACCOUNT, REGION, CLUSTER = "1357924680135792", "cn-beijing", "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
ROLE = "acs:ram:*:%s:role/ack-mig-hook-%s-role" % (ACCOUNT, CLUSTER)
POLICY = "acs:ram:*:%s:policy/ack-mig-hook-%s-policy" % (ACCOUNT, CLUSTER)


def page_policy(account=ACCOUNT, region=REGION, cluster=CLUSTER):
    """The page's policy block, its placeholders filled in as the page says to."""
    text = open(PAGE, encoding="utf-8").read()
    (block,) = re.findall(r"^```json\n(.*?)^```", text, re.M | re.S)
    for placeholder, value in (("<account>", account), ("<region>", region), ("<cluster id>", cluster)):
        block = block.replace(placeholder, value)
    return json.loads(block)


def allowed(policy, action, resource):
    return deployer_policy.allows(policy, action, resource)


def rule(name, function="ack-mig-hook-" + CLUSTER):
    return "acs:eventbridge:%s:%s:eventbus/default/rule/%s-%s" % (REGION, ACCOUNT, function, name)


def eventbridge_triggers():
    doc = ros_template.load(open(os.path.join(ROOT, "template.yml"), encoding="utf-8").read())
    return sorted(r["Properties"]["TriggerName"] for r in doc["Resources"].values()
                  if r["Type"] == "ALIYUN::FC3::Trigger" and r["Properties"]["TriggerType"] == "eventbridge")


def test_the_policy_names_every_action_exactly():
    policy = page_policy()
    wild = [a for s in policy["Statement"] for a in s["Action"] if "*" in a or "?" in a]
    assert wild == [], wild


def test_ram_actions_reach_only_the_stack_role_and_its_policy():
    policy = page_policy()
    for action in ("ram:CreateRole", "ram:GetRole", "ram:DeleteRole", "ram:AttachPolicyToRole",
                   "ram:DetachPolicyFromRole", "ram:ListPoliciesForRole", "ram:PassRole"):
        assert allowed(policy, action, ROLE), action
    for action in ("ram:CreatePolicy", "ram:GetPolicy", "ram:DeletePolicy", "ram:CreatePolicyVersion",
                   "ram:DeletePolicyVersion", "ram:ListPolicyVersions", "ram:AttachPolicyToRole",
                   "ram:DetachPolicyFromRole"):
        assert allowed(policy, action, POLICY), action
    # What the old Resource "*" allowed: make any role, pass any role, attach an admin policy to one.
    other_role = "acs:ram:*:%s:role/admin-by-the-back-door" % ACCOUNT
    other_cluster = "acs:ram:*:%s:role/ack-mig-hook-c00000000000000000000000000000000-role" % ACCOUNT
    for action in ("ram:CreateRole", "ram:AttachPolicyToRole", "ram:PassRole", "ram:DeleteRole"):
        assert not allowed(policy, action, other_role), action
        assert not allowed(policy, action, other_cluster), action
    for admin in ("acs:ram:*:system:policy/AdministratorAccess", "acs:ram:*:%s:policy/AdministratorAccess" % ACCOUNT,
                  "acs:ram:*:%s:policy/anything" % ACCOUNT):
        assert not allowed(policy, "ram:AttachPolicyToRole", admin), admin
        assert not allowed(policy, "ram:CreatePolicyVersion", admin), admin
    assert not allowed(policy, "ram:CreateUser", "*") and not allowed(policy, "ram:AttachPolicyToUser", "*")


def test_eventbridge_actions_reach_only_the_rules_of_the_stack_triggers():
    policy = page_policy()
    names = eventbridge_triggers()
    assert names  # the template has EventBridge triggers: FC makes a rule <function>-<trigger> for each
    for name in names:
        for action in ("eventbridge:CreateRule", "eventbridge:GetRule", "eventbridge:UpdateRule",
                       "eventbridge:DeleteRule", "eventbridge:PutTargets", "eventbridge:DeleteTargets"):
            assert allowed(policy, action, rule(name)), (action, name)
    for action in ("eventbridge:CreateRule", "eventbridge:DeleteRule", "eventbridge:PutTargets"):
        assert not allowed(policy, action, rule("other", function="someone-else")), action
        assert not allowed(policy, action, "acs:eventbridge:%s:%s:eventbus/default/rule/other" % (REGION, ACCOUNT))
    assert not allowed(policy, "eventbridge:PutEvents", "*")
    bus = "acs:eventbridge:%s:%s:eventbus/default" % (REGION, ACCOUNT)
    assert not allowed(policy, "eventbridge:DeleteEventBus", bus)


def test_the_generated_names_are_the_ones_the_template_gives_the_role_and_its_policy():
    """The policy's role and policy names come from template.yml as ROS resolves it for deploy's parameters
    (FunctionName ack-mig-hook-<cluster id>, or one given): a rename in the template renames them here."""
    made = deployer_policy.names(open(os.path.join(ROOT, "template.yml"), encoding="utf-8").read(), CLUSTER)
    assert made["role"] == "ack-mig-hook-%s-role" % CLUSTER and made["policy"] == "ack-mig-hook-%s-policy" % CLUSTER
    assert sorted(made["rules"]) == ["ack-mig-hook-%s-%s" % (CLUSTER, n) for n in eventbridge_triggers()]
    named = deployer_policy.names(open(os.path.join(ROOT, "template.yml"), encoding="utf-8").read(), CLUSTER, "mig")
    assert named["role"] == "mig-role" and named["policy"] == "mig-policy"


@pytest.mark.timeout(60)
def test_the_policy_for_other_names_is_the_page_policy_with_them(tmp_path):
    """``python -m tests.support.deployer_policy`` prints the page's policy for an account, region and cluster
    (and ``--function-name`` when deploy was given ``--parameter FunctionName=...``)."""
    run = subprocess.run([sys.executable, "-m", "tests.support.deployer_policy", "--account", ACCOUNT, "--region",
                          REGION, "--cluster-id", CLUSTER], cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == page_policy()
    run = subprocess.run([sys.executable, "-m", "tests.support.deployer_policy", "--account", ACCOUNT, "--region",
                          REGION, "--cluster-id", CLUSTER, "--function-name", "mig"], cwd=ROOT,
                         capture_output=True, text=True, timeout=50)
    policy = json.loads(run.stdout)
    assert allowed(policy, "ram:PassRole", "acs:ram:*:%s:role/mig-role" % ACCOUNT)
    assert not allowed(policy, "ram:PassRole", ROLE)
    assert allowed(policy, "eventbridge:CreateRule", rule(eventbridge_triggers()[0], function="mig"))
    bad = subprocess.run([sys.executable, "-m", "tests.support.deployer_policy", "--account", "12ab", "--region",
                          REGION, "--cluster-id", CLUSTER], cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--account" in bad.stderr
