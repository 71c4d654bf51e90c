"""The deployer's RAM policy on docs/first-deployment.md grants every action on the narrowest resource RAM
supports: no wildcard action, RAM's role and policy actions (and ``ram:PassRole``) on the stack's own role and
policy only, the EventBridge rule actions on the rules FC creates for the stack's triggers only, Function
Compute's on the stack's function and triggers only, and Simple Log Service's on the deploy's logstore and the
stack's saved searches where SLS's reference gives those a resource. Checked
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
LOG_PROJECT, LOG_STORE = "my-sls-project", "ack-mig-hook"
ROLE = "acs:ram:*:%s:role/ack-mig-hook-%s-role" % (ACCOUNT, CLUSTER)
POLICY = "acs:ram:*:%s:policy/ack-mig-hook-%s-policy" % (ACCOUNT, CLUSTER)


def page_policy(account=ACCOUNT, region=REGION, cluster=CLUSTER):
    """The page's policy block, its placeholders filled in as the page says to."""
    text = open(PAGE, encoding="utf-8").read()
    (block,) = re.findall(r"^```json\n(.*?)^```", text, re.M | re.S)
    for placeholder, value in (("<account>", account), ("<region>", region), ("<cluster id>", cluster),
                               ("<log project>", LOG_PROJECT), ("<log store>", LOG_STORE)):
        block = block.replace(placeholder, value)
    return json.loads(block)


def allowed(policy, action, resource):
    return deployer_policy.allows(policy, action, resource)


def rule(name, function="ack-mig-hook-" + CLUSTER):
    return "acs:eventbridge:%s:%s:eventbus/default/rule/%s-%s" % (REGION, ACCOUNT, function, name)


def eventbridge_triggers():
    return triggers("eventbridge")


def triggers(kind=None):
    doc = ros_template.load(open(os.path.join(ROOT, "template.yml"), encoding="utf-8").read())
    return sorted(r["Properties"]["TriggerName"] for r in doc["Resources"].values()
                  if r["Type"] == "ALIYUN::FC3::Trigger" and kind in (None, r["Properties"]["TriggerType"]))


def fc(path, region=REGION):
    return "acs:fc:%s:%s:functions/%s" % (region, ACCOUNT, path)


def sls(path, project=LOG_PROJECT):
    return "acs:log:%s:%s:project/%s/%s" % (REGION, ACCOUNT, project, path)


def saved_searches(cluster=CLUSTER):
    doc = ros_template.load(open(os.path.join(ROOT, "template.yml"), encoding="utf-8").read())
    names = [r["Properties"]["Detail"]["SavedsearchName"]["Fn::Sub"] for r in doc["Resources"].values()
             if r["Type"] == "ALIYUN::SLS::Savedsearch"]
    return sorted(n.replace("${ClusterId}", cluster) for n in names)


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


def test_function_compute_actions_reach_only_the_stack_function_and_its_triggers():
    """FC 3.0 authorizes the function's actions on acs:fc:{region}:{uid}:functions/{functionName}, InvokeFunction
    also on .../functions/{functionName}/{qualifier}, and the trigger actions on
    .../functions/{functionName}/triggers/{triggerName} (FC 3.0 "Policies and sample custom policies"): the page
    granted them on "*", so its holder could replace or delete any function of the account, or invoke it."""
    policy = page_policy()
    function = "ack-mig-hook-" + CLUSTER
    for action in ("fc:CreateFunction", "fc:GetFunction", "fc:UpdateFunction", "fc:DeleteFunction",
                   "fc:InvokeFunction"):
        assert allowed(policy, action, fc(function)), action
        for other in (fc("payroll"), fc("ack-mig-hook-c00000000000000000000000000000000"), fc(function, "cn-hangzhou")):
            assert not allowed(policy, action, other), (action, other)
    assert allowed(policy, "fc:InvokeFunction", fc(function + "/LATEST"))
    assert not allowed(policy, "fc:UpdateFunction", fc(function + "/LATEST"))
    assert triggers() and set(eventbridge_triggers()) < set(triggers())  # the timers' triggers too
    for name in triggers():
        for action in ("fc:CreateTrigger", "fc:GetTrigger", "fc:UpdateTrigger", "fc:DeleteTrigger"):
            assert allowed(policy, action, fc("%s/triggers/%s" % (function, name))), (action, name)
    for action in ("fc:CreateTrigger", "fc:UpdateTrigger", "fc:DeleteTrigger"):
        assert not allowed(policy, action, fc("payroll/triggers/" + triggers()[0])), action
        assert not allowed(policy, action, fc("%s/triggers/http-anonymous" % function)), action
    for action in ("fc:ListFunctions", "fc:CreateCustomDomain", "fc:PutProvisionConfig"):
        assert not allowed(policy, action, "*"), action


def test_ack_actions_reach_only_the_cluster_where_ack_can_restrict_them():
    """ACK restricts DescribeClusterDetail, DescribeClusterNodePools, DescribeClusterNodes and
    DescribeClusterUserKubeconfig to a cluster (acs:cs:...:cluster/<id>) and not GrantPermissions nor
    DescribeUserPermission (ACK's custom RAM policy guide, its action table). The page had all of them on "*":
    its holder could read every cluster's kubeconfig."""
    policy = page_policy()
    cluster = "acs:cs:%s:%s:cluster/%s" % (REGION, ACCOUNT, CLUSTER)
    for action in ("cs:DescribeClusterDetail", "cs:DescribeClusterNodePools", "cs:DescribeClusterNodes",
                   "cs:DescribeClusterUserKubeconfig"):
        assert allowed(policy, action, cluster), action
        for other in ("acs:cs:%s:%s:cluster/c00000000000000000000000000000000" % (REGION, ACCOUNT), "*"):
            assert not allowed(policy, action, other), (action, other)
    for action in ("cs:GrantPermissions", "cs:DescribeUserPermission"):
        assert allowed(policy, action, "*") and deployer_policy.ANY_RESOURCE[action], action
    assert not allowed(policy, "cs:DeleteCluster", cluster) and not allowed(policy, "cs:ModifyCluster", cluster)


def test_doctors_ecs_and_vpc_reads_reach_only_this_region_and_account():
    """ECS authorizes DescribeSecurityGroupAttribute on the security group and DescribeCloudAssistantStatus on
    the instance, VPC DescribeVSwitchAttributes on the vSwitch (their API references' RAM tables: *SecurityGroup
    acs:ecs:{region}:{account}:securitygroup/{id}, *Instance .../instance/{id}, VSwitch
    acs:vpc:{region}:{account}:vswitch/{id}). `doctor` reads the function's own group, vSwitch and nodes, of the
    cluster's region, whose ids the page cannot know: granted on that region's and account's groups, vSwitches
    and instances. The page had them on "*", every region's. DescribeSecurityGroups, the list doctor asks for the
    function's group by id, is authorized on the security group too (its API reference, 授权信息: SecurityGroup
    acs:ecs:{#regionId}:{#accountId}:securitygroup/* and .../securitygroup/{#securitygroupId}): no ECS or VPC
    action is left on "*"."""
    policy = page_policy()
    for action, service, kind, name in (("ecs:DescribeSecurityGroupAttribute", "ecs", "securitygroup", "sg-1"),
                                        ("ecs:DescribeSecurityGroups", "ecs", "securitygroup", "sg-1"),
                                        ("ecs:DescribeSecurityGroups", "ecs", "securitygroup", "*"),
                                        ("ecs:DescribeCloudAssistantStatus", "ecs", "instance", "i-1"),
                                        ("vpc:DescribeVSwitchAttributes", "vpc", "vswitch", "vsw-1")):
        assert allowed(policy, action, "acs:%s:%s:%s:%s/%s" % (service, REGION, ACCOUNT, kind, name)), action
        for other in ("acs:%s:cn-shanghai:%s:%s/%s" % (service, ACCOUNT, kind, name), "*"):
            assert not allowed(policy, action, other), (action, other)
    loose = [a for s in policy["Statement"] if s["Resource"] == "*" for a in s["Action"]
             if a.startswith(("ecs:", "vpc:"))]
    assert loose == [], loose


def oss(path):
    return "acs:oss:*:*:" + path


def test_oss_actions_reach_only_the_code_bucket_and_its_packages():
    """OSS authorizes bucket operations (PutBucket, GetBucketInfo, GetBucketPolicy, ListObjects) on the bucket and
    object operations on bucket/object (OSS "Authorization syntax and elements": acs:oss:*:*:bucket-name/*).
    The page had them on "*": its holder could overwrite or delete any object of any bucket of the account."""
    policy = page_policy()
    from functions.commands import deploy

    bucket = "ack-mig-hook-%s-%s" % (ACCOUNT, REGION)
    assert bucket == deploy.default_bucket(ACCOUNT, REGION) and deployer_policy.OBJECT_PREFIX == deploy.OBJECT_PREFIX
    package = "%s/ack-mig-hook/ack-mig-hook-%s/%s.zip" % (bucket, CLUSTER, "0" * 64)
    for action in ("oss:PutBucket", "oss:GetBucketInfo", "oss:GetBucketPolicy", "oss:ListObjects"):
        assert allowed(policy, action, oss(bucket)), action
        assert not allowed(policy, action, oss("payroll")) and not allowed(policy, action, "*"), action
    for action in ("oss:GetObject", "oss:PutObject", "oss:DeleteObject"):
        assert allowed(policy, action, oss(package)), action
        for other in (oss("payroll/ack-mig-hook/x.zip"), oss(bucket + "/backups/db.tar"), "*"):
            assert not allowed(policy, action, other), (action, other)
    assert not allowed(policy, "oss:PutBucketPolicy", oss(bucket)) and not allowed(policy, "oss:DeleteBucket",
                                                                                    oss(bucket))


def test_log_actions_reach_only_the_deploys_logstore_and_the_stacks_saved_searches():
    """SLS authorizes CreateIndex, UpdateIndex, DeleteIndex, GetIndex and GetLogStoreLogs (GetLogs) on
    acs:log:{region}:{account}:project/{project}/logstore/{logstore} and the saved search actions on
    .../project/{project}/savedsearch/{name}: granted there only. The page had every SLS action on "*", and
    then UpdateIndex and DeleteIndex still, which let its holder drop the index of any logstore of the
    account (an audit store's included)."""
    policy = page_policy()
    for action in ("log:CreateIndex", "log:UpdateIndex", "log:DeleteIndex", "log:GetIndex", "log:GetLogStoreLogs"):
        assert allowed(policy, action, sls("logstore/" + LOG_STORE)), action
        for other in (sls("logstore/audit"), sls("logstore/" + LOG_STORE, project="billing"), "*"):
            assert not allowed(policy, action, other), (action, other)
    assert saved_searches()
    for name in saved_searches():
        for action in ("log:CreateSavedSearch", "log:GetSavedSearch", "log:UpdateSavedSearch",
                       "log:DeleteSavedSearch"):
            assert allowed(policy, action, sls("savedsearch/" + name)), (action, name)
    for action in ("log:CreateSavedSearch", "log:DeleteSavedSearch"):
        assert not allowed(policy, action, sls("savedsearch/someone-elses")), action
        assert not allowed(policy, action, sls("savedsearch/" + saved_searches()[0], project="billing")), action
    # What stays on "*" is exactly what SLS's reference gives no resource for, each with its reason and the page
    # that says so (the alert rules': "All Resources" in their API references' RAM tables).
    loose = sorted(a for s in policy["Statement"] if s["Resource"] == "*" for a in s["Action"]
                   if a.startswith("log:"))
    assert loose == sorted(a for a in deployer_policy.ANY_RESOURCE if a.startswith("log:")), loose
    assert all("https://" in deployer_policy.ANY_RESOURCE[a] for a in loose), loose


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
    logs = ["--log-project", LOG_PROJECT, "--log-store", LOG_STORE]
    run = subprocess.run([sys.executable, "-m", "tests.support.deployer_policy", "--account", ACCOUNT, "--region",
                          REGION, "--cluster-id", CLUSTER] + logs, cwd=ROOT, capture_output=True, text=True,
                         timeout=50)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == page_policy()
    run = subprocess.run([sys.executable, "-m", "tests.support.deployer_policy", "--account", ACCOUNT, "--region",
                          REGION, "--cluster-id", CLUSTER, "--function-name", "mig"] + logs, cwd=ROOT,
                         capture_output=True, text=True, timeout=50)
    policy = json.loads(run.stdout)
    assert allowed(policy, "ram:PassRole", "acs:ram:*:%s:role/mig-role" % ACCOUNT)
    assert not allowed(policy, "ram:PassRole", ROLE)
    assert allowed(policy, "eventbridge:CreateRule", rule(eventbridge_triggers()[0], function="mig"))
    assert allowed(policy, "fc:UpdateFunction", fc("mig")) and not allowed(policy, "fc:UpdateFunction", fc(
        "ack-mig-hook-" + CLUSTER))
    assert allowed(policy, "fc:CreateTrigger", fc("mig/triggers/" + triggers()[0]))
    assert allowed(policy, "cs:DescribeClusterUserKubeconfig", "acs:cs:%s:%s:cluster/%s" % (REGION, ACCOUNT, CLUSTER))
    run = subprocess.run([sys.executable, "-m", "tests.support.deployer_policy", "--account", ACCOUNT, "--region",
                          REGION, "--cluster-id", CLUSTER, "--bucket", "my-code"] + logs, cwd=ROOT,
                         capture_output=True, text=True, timeout=50)
    assert run.returncode == 0, run.stderr
    mine = json.loads(run.stdout)
    assert allowed(mine, "oss:PutObject", oss("my-code/ack-mig-hook/x.zip"))
    assert not allowed(mine, "oss:PutObject", oss("ack-mig-hook-%s-%s/ack-mig-hook/x.zip" % (ACCOUNT, REGION)))
    # The saved searches are named after the cluster, whatever the function is called.
    assert allowed(policy, "log:CreateSavedSearch", sls("savedsearch/" + saved_searches()[0]))
    bad = subprocess.run([sys.executable, "-m", "tests.support.deployer_policy", "--account", "12ab", "--region",
                          REGION, "--cluster-id", CLUSTER] + logs, cwd=ROOT, capture_output=True, text=True,
                         timeout=50)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--account" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "tests.support.deployer_policy", "--account", ACCOUNT, "--region",
                          REGION, "--cluster-id", CLUSTER, "--log-project", "Bad*", "--log-store", LOG_STORE],
                         cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--log-project" in bad.stderr


def ros_stack(stack_id="4a6c9851-3b0f-4f5f-b4ca-a14bf691abcd", region=REGION, account=ACCOUNT):
    return "acs:ros:%s:%s:stack/%s" % (region, account, stack_id)


def test_ros_actions_reach_only_the_stacks_of_this_region_and_account():
    """ROS authorizes its stack and change set actions on the stack, acs:ros:{region}:{account}:stack/{stackId}
    (stack/* for CreateStack, ListStacks, PreviewStack and a CREATE change set), and ValidateTemplate on nothing
    (ROS "RAM authorization", its table of authorizable APIs). The stack's id exists only once it is created:
    granted on this region's and account's stacks. The page had them on "*": its holder could update or delete
    any stack of the account in any region. Only ValidateTemplate stays on "*", with its reason."""
    policy = page_policy()
    ros = sorted(a for s in policy["Statement"] for a in s["Action"] if a.startswith("ros:"))
    assert "ros:CreateStack" in ros and "ros:DeleteStack" in ros and "ros:CreateChangeSet" in ros
    for action in ros:
        if action in deployer_policy.ANY_RESOURCE:
            continue
        for stack in (ros_stack(), ros_stack("*")):
            assert allowed(policy, action, stack), (action, stack)
        for other in (ros_stack(region="cn-shanghai"), ros_stack(account="2468013579246801"), "*",
                      "acs:ros:%s:%s:template/t-1" % (REGION, ACCOUNT)):
            assert not allowed(policy, action, other), (action, other)
    loose = sorted(a for s in policy["Statement"] if s["Resource"] == "*" for a in s["Action"]
                   if a.startswith("ros:"))
    assert loose == ["ros:ValidateTemplate"], loose
    assert "ros" in deployer_policy.SCOPED_SERVICES and deployer_policy.ANY_RESOURCE["ros:ValidateTemplate"]
