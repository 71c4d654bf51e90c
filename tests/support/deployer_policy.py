"""The RAM policy of the person deploying, as docs/first-deployment.md shows it: generated from what the
emulators record while the page's commands run, plus what ROS itself calls with the deployer's rights to
create the resources of template.yml, which no emulator sees, and the few actions of paths the page does
not take (:data:`OTHER_PATHS`).

Each action is granted on the narrowest resource RAM supports: RAM's role and policy actions on the stack's own
role and policy (``<name>-role``, ``<name>-policy``, names read from template.yml as ROS resolves them), the
EventBridge rule actions on the rules FC makes for the stack's EventBridge triggers, Function Compute's on the
stack's function and its triggers, ACK's on the cluster where ACK can restrict them, OSS's on the code bucket
and its packages, Simple Log Service's on
the deploy's logstore and the stack's saved searches
(where SLS's reference gives the action a resource: :data:`ANY_RESOURCE` lists the others, each with why),
ROS's on the stacks of the cluster's region and account,
``doctor``'s ECS and VPC reads on the groups, instances and vSwitches of the cluster's region and account,
everything else on ``*``. The page shows the default names with placeholders (``<account>``, ``<region>``,
``<cluster id>``, ``<log project>``, ``<log store>``); ``python -m tests.support.deployer_policy --account ID
--region R --cluster-id C --log-project P --log-store S [--function-name N] [--bucket B]`` prints it for
real ones.

tests/function/test_first_deployment.py compares the page's policy with :func:`render` of the actions it
recorded, and rewrites the page's block with ``WRITE_POLICY=1``; tests/function/test_deployer_policy.py
evaluates it (:func:`allows`).
"""

import argparse
import json
import os
import re
import sys
from typing import Dict, Iterable, List, Optional, Sequence

from tests.support import ros_template

# Rule actions of EventBridge, checked on the rule (EventBridge API reference, CreateRule, "RAM authorization":
# resource acs:eventbridge:{#regionId}:{#accountId}:eventbus/{#EventBusName}/rule/{#RuleName}). An FC 3.0
# EventBridge trigger is a rule FC makes on the default bus, named <function name>-<trigger name> (FC 3.0 user
# guide, "Configure event triggers for Alibaba Cloud services"; its "Before you start" has the RAM user granted
# EventBridge rights). The actions are the rule's life: create with its FC target (CreateRule, PutTargets, as
# the system policy AliyunEventBridgeResourceCreatePolicy pairs them), read, update, enable/disable
# (triggerEnable), delete with its targets: the rule actions of FC's own trigger policy
# AliyunServiceRolePolicyForFCTriggerEventBridge (GetRule, CreateRule, UpdateRule, DisableRule, DeleteRule,
# DeleteTargets). None of the bus, event source or streaming actions: the triggers use eventSourceType Default.
# EnableRule, which that SLR policy lacks, is EventBridge's own action on the same rule resource
# (https://help.aliyun.com/zh/eventbridge/enablerule: eventbridge:EnableRule, *Rule,
# acs:eventbridge:{#regionId}:{#accountId}:eventbus/{#EventBusName}/rule/{#RuleName}); Serverless Devs' FC 3.0
# trigger docs list it among a RAM user's rights for an EventBridge trigger (triggerEnable).
RULE_ACTIONS = ["eventbridge:CreateRule", "eventbridge:GetRule", "eventbridge:UpdateRule", "eventbridge:DeleteRule",
                "eventbridge:EnableRule", "eventbridge:DisableRule", "eventbridge:PutTargets",
                "eventbridge:DeleteTargets"]
# RAM checks role actions on the role and policy actions on the policy; AttachPolicyToRole and
# DetachPolicyFromRole on both (RAM API reference, AttachPolicyToRole, "Required permissions": Resource
# acs:ram:*:${AccountId}:role/${RoleName} and acs:ram:*:${AccountId}:policy/${PolicyName}, or
# acs:ram:*:system:policy/${PolicyName} for a system policy). So the deployer can attach only the stack's own
# policy, to the stack's own role, and pass (ram:PassRole, FC CreateFunction/UpdateFunction) only that role.
ROLE_ACTIONS = ["ram:CreateRole", "ram:GetRole", "ram:DeleteRole", "ram:ListPoliciesForRole",
                "ram:AttachPolicyToRole", "ram:DetachPolicyFromRole", "ram:PassRole"]
POLICY_ACTIONS = ["ram:CreatePolicy", "ram:GetPolicy", "ram:DeletePolicy", "ram:CreatePolicyVersion",
                  "ram:DeletePolicyVersion", "ram:ListPolicyVersions", "ram:AttachPolicyToRole",
                  "ram:DetachPolicyFromRole"]
# Function Compute 3.0 checks the function's actions on acs:fc:{region}:{uid}:functions/{functionName},
# InvokeFunction also on .../functions/{functionName}/{qualifier}, and the trigger actions on
# .../functions/{functionName}/triggers/{triggerName} (FC 3.0 user guide, "Policies and sample custom policies",
# https://www.alibabacloud.com/help/en/function-compute/latest/policies-and-sample-custom-policies: its custom
# policy table; its AccessDenied sample names 'fc:CreateTrigger' on 'acs:fc:xx:xx:functions/xx/triggers/xx').
FUNCTION_ACTIONS = ["fc:CreateFunction", "fc:GetFunction", "fc:UpdateFunction", "fc:DeleteFunction"]
INVOKE_ACTIONS = ["fc:InvokeFunction"]
TRIGGER_ACTIONS = ["fc:CreateTrigger", "fc:GetTrigger", "fc:UpdateTrigger", "fc:DeleteTrigger"]
# Simple Log Service (API 2020-12-30) checks these on the logstore,
# acs:log:{#regionId}:{#accountId}:project/{#project}/logstore/{#logstore}: CreateIndex
# (https://help.aliyun.com/zh/sls/developer-reference/api-sls-2020-12-30-createindex), GetIndex
# (https://www.alibabacloud.com/help/doc-detail/74911.htm), DeleteIndex (its Chinese API reference,
# https://help.aliyun.com/zh/sls/developer-reference/api-sls-2020-12-30-deleteindex: log:DeleteIndex, *LogStore,
# that ARN; https://help.aliyun.com/document_detail/74970.htm, 鉴权资源, the same), UpdateIndex (its API pages
# disclose no authorization, but SLS's own custom policies grant it on a logstore: "Authorize a RAM user to
# manage alerts", https://www.alibabacloud.com/help/doc-detail/109663.htm, log:UpdateIndex on
# acs:log:*:*:project/<project>/logstore/internal-alert-history, and the Cost Manager guide's on
# .../logstore/aliyun_bill; SLS's action list, https://www.alibabacloud.com/help/en/doc-detail/29051.htm, files
# UpdateIndex and DeleteIndex under the Logstore resource type) and GetLogStoreLogs, the action of GetLogs that
# `logs` calls (alibabacloud sls20201230 SDK, GetLogs' "Authentication resources").
LOGSTORE_ACTIONS = ["log:CreateIndex", "log:UpdateIndex", "log:DeleteIndex", "log:GetIndex", "log:GetLogStoreLogs"]
# ... and the saved search actions on acs:log:{#regionId}:{#accountId}:project/{#ProjectName}/savedsearch/
# {#SavedSearchName} (the same SDK's Create/Get/Update/DeleteSavedSearch "Authentication resources").
SAVEDSEARCH_ACTIONS = ["log:CreateSavedSearch", "log:GetSavedSearch", "log:UpdateSavedSearch",
                       "log:DeleteSavedSearch"]
# ACK restricts these to one cluster, acs:cs:{#regionId}:{#accountId}:cluster/{#ClusterId} (ACK user guide, "Create
# a custom RAM policy" (自定义RAM授权策略), its table of RAM actions: "supports restricting to a cluster"
# (是否支持限制集群) is yes for each; the form is the one template.yml grants the function on).
CLUSTER_ACTIONS = ["cs:DescribeClusterDetail", "cs:DescribeClusterNodePools", "cs:DescribeClusterNodes",
                   "cs:DescribeClusterUserKubeconfig"]
# OSS authorizes bucket operations on the bucket, acs:oss:*:*:<bucket>, and object operations on the object,
# acs:oss:*:*:<bucket>/<object> (OSS user guide, "Authorization syntax and elements",
# https://www.alibabacloud.com/help/en/oss/user-guide/authorization-syntax-and-elements: its Resource form
# acs:oss:*:*:bucket-name/*, and its bucket-level and object-level action lists). Bucket names are global, so
# the region and account stay *. deploy's packages are objects under ack-mig-hook/ (deploy.OBJECT_PREFIX).
BUCKET_ACTIONS = ["oss:PutBucket", "oss:GetBucketInfo", "oss:GetBucketPolicy", "oss:ListObjects"]
OBJECT_ACTIONS = ["oss:GetObject", "oss:PutObject", "oss:DeleteObject"]
# `doctor`'s reads of the function's network and nodes, in the cluster's region. ECS checks
# DescribeSecurityGroupAttribute on the group (https://help.aliyun.com/document_detail/25555.html, 授权信息:
# ecs:DescribeSecurityGroupAttribute, get, *SecurityGroup, acs:ecs:{#regionId}:{#accountId}:securitygroup/
# {#securitygroupId}), DescribeSecurityGroups, the list doctor asks for the group by id, on the group too
# (https://help.aliyun.com/document_detail/25556.htm, 授权信息: ecs:DescribeSecurityGroups, get, SecurityGroup
# acs:ecs:{#regionId}:{#accountId}:securitygroup/* and .../securitygroup/{#securitygroupId}) and DescribeCloudAssistantStatus on the instance
# (https://help.aliyun.com/document_detail/2679924.html: *Instance, acs:ecs:{#regionId}:{#accountId}:instance/
# {#instanceId}); VPC checks DescribeVSwitchAttributes on the vSwitch (VPC API reference, DescribeVSwitchAttributes,
# https://alibabacloud.com/help/tc/vpc/developer-reference/api-vpc-2016-04-28-describevswitchattributes: VSwitch,
# acs:vpc:{#regionId}:{#accountId}:vswitch/{#VSwitchId}). The ids are the cluster's, unknown to the page: every
# group, instance and vSwitch of the account in the cluster's region.
SECURITYGROUP_ACTIONS = ["ecs:DescribeSecurityGroupAttribute", "ecs:DescribeSecurityGroups"]
# ROS checks its stack and change set actions on the stack, acs:ros:{region}:{account}:stack/{stackId}, and the ones
# that name no stack yet on stack/*: CreateStack, ListStacks, PreviewStack, CreateChangeSet of type CREATE (ROS
# "RAM authorization", https://www.alibabacloud.com/help/doc-detail/131956.htm, its table of authorizable APIs;
# the current RAM reference, https://www.alibabacloud.com/help/en/ros/developer-reference/api-ros-2019-09-10-ram,
# gives the same Stack resource, acs:ros:{#regionId}:{#accountId}:stack/{#StackId}). ValidateTemplate is not
# authorized on any resource (the same table: 不鉴权), so it stays in ANY_RESOURCE. The stack's id exists only once
# CreateStack has made it: every stack of the account in the cluster's region.
STACK_ACTIONS = ["ros:CreateStack", "ros:GetStack", "ros:UpdateStack", "ros:DeleteStack", "ros:ListStacks",
                 "ros:ListStackEvents", "ros:ListStackResources", "ros:PreviewStack", "ros:CreateChangeSet",
                 "ros:GetChangeSet", "ros:ListChangeSets", "ros:DeleteChangeSet"]
INSTANCE_ACTIONS = ["ecs:DescribeCloudAssistantStatus"]
VSWITCH_ACTIONS = ["vpc:DescribeVSwitchAttributes"]
SCOPES = (("stack", STACK_ACTIONS), ("role", ROLE_ACTIONS), ("policy", POLICY_ACTIONS), ("rule", RULE_ACTIONS), ("cluster", CLUSTER_ACTIONS),
          ("bucket", BUCKET_ACTIONS), ("object", OBJECT_ACTIONS),
          ("function", FUNCTION_ACTIONS), ("invoke", INVOKE_ACTIONS), ("trigger", TRIGGER_ACTIONS),
          ("logstore", LOGSTORE_ACTIONS), ("savedsearch", SAVEDSEARCH_ACTIONS),
          ("securitygroup", SECURITYGROUP_ACTIONS), ("instance", INSTANCE_ACTIONS), ("vswitch", VSWITCH_ACTIONS))
# Services whose every action here must be in a scope above or in ANY_RESOURCE: none of them falls back to
# Resource "*" unexplained.
SCOPED_SERVICES = ("ros", "ram", "eventbridge", "fc", "log", "cs", "oss", "ecs", "vpc")
# The actions of those services left on Resource "*", and why: the reference gives them "All Resources", or
# confirms no resource form for them, and a guessed one RAM does not match would stop the deploy.
# The SLS alert rule actions: their API references (2020-12-30, RAM authorization) give each "All Resources"
# (全部资源, Resource "*"): CreateAlert, GetAlert, UpdateAlert, EnableAlert
# (https://www.alibabacloud.com/help/tc/sls/developer-reference/api-sls-2020-12-30-<operation>, updated
# Dec 23, 2025) and DisableAlert (https://help.aliyun.com/en/sls/developer-reference/api-sls-2020-12-30-disablealert).
# DeleteAlert's table was not found; it is left on "*" with its siblings.
_SLS_ALERT = "https://www.alibabacloud.com/help/tc/sls/developer-reference/api-sls-2020-12-30-%s"
_ALL_RESOURCES = "SLS API reference, RAM authorization: All Resources (全部资源), %s"
_NO_CLUSTER = "ACK's custom RAM policy guide: it cannot be restricted to a cluster (不支持)"
ANY_RESOURCE: Dict[str, str] = {
    "ros:ValidateTemplate": "ROS's RAM authorization table (https://www.alibabacloud.com/help/doc-detail/131956.htm) "
                            "authorizes it on no resource (不鉴权); it only reads the template it is sent",
    "cs:GrantPermissions": _NO_CLUSTER + "; it replaces the grants of a RAM identity",
    "cs:DescribeUserPermission": _NO_CLUSTER + "; it reads the grants of a RAM identity",
    "log:CreateAlert": _ALL_RESOURCES % (_SLS_ALERT % "createalert"),
    "log:GetAlert": _ALL_RESOURCES % (_SLS_ALERT % "getalert"),
    "log:UpdateAlert": _ALL_RESOURCES % (_SLS_ALERT % "updatealert"),
    "log:EnableAlert": _ALL_RESOURCES % (_SLS_ALERT % "enablealert"),
    "log:DisableAlert": _ALL_RESOURCES % ("https://help.aliyun.com/en/sls/developer-reference/"
                                          "api-sls-2020-12-30-disablealert"),
    "log:DeleteAlert": ("its API reference's RAM table not found; its siblings' (%s) give All Resources, and no RAM "
                        "resource for an alert rule is documented" % (_SLS_ALERT % "createalert")),
}

# Resource type of template.yml -> the actions ROS calls, with the deployer's rights, to create, update and
# delete it (ROS "Resource types" reference: a resource is created with the caller's permissions; the
# actions are each service's API for the resource: RAM CreateRole/..., FC 3.0 CreateFunction/..., the
# SLS index, ACK's GrantPermissions, which reads the grants first (DescribeUserPermission)). No emulator
# serves them: each is named here by hand.
TEMPLATE_ACTIONS: Dict[str, List[str]] = {
    "ALIYUN::RAM::Role": sorted(set(ROLE_ACTIONS + POLICY_ACTIONS) - {"ram:PassRole"}),
    "ALIYUN::FC3::Function": ["fc:CreateFunction", "fc:GetFunction", "fc:UpdateFunction", "fc:DeleteFunction",
                              "ram:PassRole"],
    "ALIYUN::FC3::Trigger": ["fc:CreateTrigger", "fc:GetTrigger", "fc:UpdateTrigger", "fc:DeleteTrigger"]
                            + RULE_ACTIONS,
    "ALIYUN::SLS::Index": ["log:CreateIndex", "log:UpdateIndex", "log:DeleteIndex", "log:GetIndex"],
    # SLS API 2020-12-30 reference, RAM authorization of each operation: log:<Operation> (GetSavedSearch and
    # UpdateSavedSearch name theirs so; the alert operations' pages list the same pattern). ROS creates an
    # alert disabled or enabled as the template says, hence Enable/DisableAlert.
    "ALIYUN::SLS::Savedsearch": ["log:CreateSavedSearch", "log:GetSavedSearch", "log:UpdateSavedSearch",
                                 "log:DeleteSavedSearch"],
    "ALIYUN::SLS::Alert": ["log:CreateAlert", "log:GetAlert", "log:UpdateAlert", "log:DeleteAlert",
                           "log:EnableAlert", "log:DisableAlert"],
    "ALIYUN::CS::ClusterApplication": ["cs:DescribeClusterUserKubeconfig"],
    "ALIYUN::CS::GrantPermissions": ["cs:GrantPermissions", "cs:DescribeUserPermission"],
}
# Called by the page's commands on a path the page does not take, each with the test whose emulator records
# it (kept out of the recorded set by the page test, so the list stays what the page cannot show).
OTHER_PATHS: Dict[str, str] = {
    "oss:DeleteObject": "deploy prunes the stack's old packages after a code change (tests/function/"
                        "test_deploy_repeat.py::test_old_packages_are_pruned_to_the_last_few_never_the_one_in_use)",
    "fc:InvokeFunction": "invoke --remote runs the deployed function now (tests/function/test_remote_and_logs.py)",
    "log:GetLogStoreLogs": "logs reads the function's log lines (tests/function/test_remote_and_logs.py)",
}
# Recorded but needing no grant: STS GetCallerIdentity ("Any RAM user or role can call it", STS reference).
NO_GRANT = {"sts:GetCallerIdentity"}
SERVICES = ("ros", "cs", "oss", "ecs", "vpc", "ess", "ram", "fc", "eventbridge", "log")
WIDTH = 110
# The page's placeholders (the default function name is ack-mig-hook-<cluster id>, as deploy passes it).
ACCOUNT, REGION, CLUSTER = "<account>", "<region>", "<cluster id>"
LOG_PROJECT, LOG_STORE = "<log project>", "<log store>"
# deploy's code bucket when --bucket is not given (functions/commands/deploy.py default_bucket), in placeholders.
BUCKET = "ack-mig-hook-%s-%s" % (ACCOUNT, REGION)
OBJECT_PREFIX = "ack-mig-hook/"  # functions/commands/deploy.py OBJECT_PREFIX (tests/function/test_deployer_policy.py)
PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs",
                    "first-deployment.md")


def template_actions(template_text: str) -> List[str]:
    """The actions the template's resource types need (an unknown type fails: name its actions above)."""
    types = sorted(set(re.findall(r"^\s+Type:\s+(ALIYUN::\S+)", template_text, re.M)))
    unknown = [t for t in types if t not in TEMPLATE_ACTIONS]
    assert not unknown, "template.yml has resource types with no actions in TEMPLATE_ACTIONS: %s" % unknown
    return sorted({a for t in types for a in TEMPLATE_ACTIONS[t]})


def actions(recorded: Iterable[str], template_text: str) -> List[str]:
    out = (set(recorded) - NO_GRANT) | set(template_actions(template_text)) | set(OTHER_PATHS)
    return sorted(out, key=lambda a: (SERVICES.index(a.split(":")[0]) if a.split(":")[0] in SERVICES
                                      else len(SERVICES), a.split(":")[0], a))


def _joined(node) -> str:
    """A name ros_template resolved, with the Fn::Join it leaves as written (the template builds names so)."""
    if isinstance(node, dict) and list(node) == ["Fn::Join"]:
        separator, parts = node["Fn::Join"]
        return separator.join(_joined(p) for p in parts)
    assert isinstance(node, str), "a name template.yml builds in a way this does not read: %r" % (node,)
    return node


def names(template_text: str, cluster: str = CLUSTER, function_name: str = "") -> Dict:
    """The function's role and policy names, its triggers and the EventBridge rules FC makes for them, and the
    saved searches, as ROS resolves template.yml for deploy's parameters (FunctionName empty:
    ack-mig-hook-<ClusterId>)."""
    doc = ros_template.load(template_text)
    params = ros_template.values(doc, {"ClusterId": cluster, "FunctionName": function_name,
                                       "LogProject": LOG_PROJECT, "LogStore": LOG_STORE})
    ctx = ros_template.Context(doc, params, {"ALIYUN::Region": REGION, "ALIYUN::TenantId": ACCOUNT})
    found = ros_template.resources(doc, ctx)

    def props(kind):
        (one,) = [r["Properties"] for r in found.values() if r["Type"] == kind]
        return one
    role = props("ALIYUN::RAM::Role")
    (policy,) = [_joined(p["PolicyName"]) for p in role.get("Policies") or []]
    function = _joined(props("ALIYUN::FC3::Function")["FunctionName"])
    triggers = [r["Properties"] for r in found.values() if r["Type"] == "ALIYUN::FC3::Trigger"]
    rules = ["%s-%s" % (function, t["TriggerName"]) for t in triggers if t.get("TriggerType") == "eventbridge"]
    searches = [_joined(r["Properties"]["Detail"]["SavedsearchName"]) for r in found.values()
                if r["Type"] == "ALIYUN::SLS::Savedsearch"]
    return {"function": function, "role": _joined(role["RoleName"]), "policy": policy, "rules": rules,
            "triggers": [t["TriggerName"] for t in triggers], "savedsearches": searches}


def statements(granted: Sequence[str], template_text: str, account: str = ACCOUNT, region: str = REGION,
               cluster: str = CLUSTER, function_name: str = "") -> List[Dict]:
    """One statement on "*" for the actions RAM cannot narrow here, one per scope for the rest."""
    made = names(template_text, cluster, function_name)
    fc = "acs:fc:%s:%s:functions/%s" % (region, account, made["function"])
    sls = "acs:log:%s:%s:project/%s" % (region, account, LOG_PROJECT)
    resources = {"stack": ["acs:ros:%s:%s:stack/*" % (region, account)],
                 "role": ["acs:ram:*:%s:role/%s" % (account, made["role"])],
                 "policy": ["acs:ram:*:%s:policy/%s" % (account, made["policy"])],
                 "rule": ["acs:eventbridge:%s:%s:eventbus/default/rule/%s" % (region, account, r)
                          for r in made["rules"]],
                 "cluster": ["acs:cs:%s:%s:cluster/%s" % (region, account, cluster)],
                 "bucket": ["acs:oss:*:*:" + BUCKET], "object": ["acs:oss:*:*:%s/%s*" % (BUCKET, OBJECT_PREFIX)],
                 "function": [fc], "invoke": [fc, fc + "/*"],
                 "trigger": ["%s/triggers/%s" % (fc, t) for t in made["triggers"]],
                 "logstore": ["%s/logstore/%s" % (sls, LOG_STORE)],
                 "savedsearch": ["%s/savedsearch/%s" % (sls, n) for n in made["savedsearches"]],
                 "securitygroup": ["acs:ecs:%s:%s:securitygroup/*" % (region, account)],
                 "instance": ["acs:ecs:%s:%s:instance/*" % (region, account)],
                 "vswitch": ["acs:vpc:%s:%s:vswitch/*" % (region, account)]}
    scoped = {a for _, listed in SCOPES for a in listed}
    loose = [a for a in granted if a.split(":")[0] in SCOPED_SERVICES and a not in scoped
             and a not in ANY_RESOURCE]
    assert not loose, "actions with no resource scope (add them to a scope above): %s" % loose
    out = [{"Effect": "Allow", "Resource": "*", "Action": [a for a in granted if a not in scoped]}]
    for kind, listed in SCOPES:
        mine = [a for a in granted if a in listed]
        if mine and resources[kind]:
            out.append({"Effect": "Allow", "Resource": resources[kind], "Action": mine})
    return out


def _lines(items: List[str], group) -> List[str]:
    lines, line, last = [], "", None
    for name in items:
        item = json.dumps(name) + ","
        if line and (group(name) != last or len(line) + 1 + len(item) > WIDTH - 6):
            lines.append(line)
            line = ""
        line = (line + " " + item) if line else item
        last = group(name)
    lines.append(line.rstrip(","))
    return ["      " + l for l in lines]


def render(granted: List[str], template_text: str) -> str:
    """The page's JSON block: the statements of :func:`statements`, actions grouped by service, lines within
    WIDTH, the placeholders for the account, region and cluster."""
    body = []
    for statement in statements(granted, template_text):
        if statement["Resource"] == "*":
            body.append('    {"Effect": "Allow", "Resource": "*", "Action": [')
        else:
            body.append('    {"Effect": "Allow", "Resource": [')
            body += ["      " + json.dumps(r) + "," for r in statement["Resource"]]
            body[-1] = body[-1].rstrip(",")
            body.append('    ], "Action": [')
        body += _lines(statement["Action"], lambda a: a.split(":")[0])
        body.append("    ]},")
    body[-1] = body[-1].rstrip(",")
    return "\n".join(['{', '  "Version": "1",', '  "Statement": ['] + body + ['  ]', '}'])


def page_block(path: str = PAGE) -> str:
    """The page's one json block, as written."""
    with open(path, encoding="utf-8") as handle:
        (block,) = re.findall(r"^```json\n(.*?)\n^```", handle.read(), re.M | re.S)
    return block


def for_names(block: str, account: str, region: str, cluster: str, function_name: str = "",
              log_project: str = LOG_PROJECT, log_store: str = LOG_STORE, bucket: str = "") -> str:
    """The page's policy for real names: the placeholders filled in; a FunctionName given to deploy replaces
    the default ack-mig-hook-<cluster id> in the function's, trigger, role, policy and rule names, never in the
    saved searches' (named after the cluster alone); a bucket given to deploy replaces its default one."""
    if bucket:
        block = block.replace(BUCKET, bucket)
    if function_name:
        block = "\n".join(line if "/savedsearch/" in line else line.replace("ack-mig-hook-" + CLUSTER, function_name)
                          for line in block.split("\n"))
    for placeholder, value in ((ACCOUNT, account), (REGION, region), (CLUSTER, cluster),
                               (LOG_PROJECT, log_project), (LOG_STORE, log_store)):
        block = block.replace(placeholder, value)
    return block


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse's own adds the usage first)
        sys.stderr.write("deployer_policy: %s\n" % message)
        sys.exit(2)


def _checked(pattern: str, form: str):
    def check(text: str) -> str:
        if not re.fullmatch(pattern, text or ""):
            raise argparse.ArgumentTypeError("%r is not %s" % (text[:80], form))
        return text
    return check


def main(argv: Optional[List[str]] = None) -> int:
    parser = _Parser(prog="python -m tests.support.deployer_policy",
                     description="Print the deployer's RAM policy of docs/first-deployment.md for real names.")
    parser.add_argument("--account", required=True, type=_checked(r"[0-9]{1,20}", "an account id (digits)"))
    parser.add_argument("--region", required=True, type=_checked(r"[a-z]{2}(-[a-z0-9]+)+", "a region id such "
                                                                 "as cn-beijing"))
    parser.add_argument("--cluster-id", required=True, type=_checked(r"c[0-9a-f]{32}", "an ACK cluster id (c "
                                                                     "and 32 lower-case hex digits)"))
    parser.add_argument("--function-name", default=None, type=_checked(
        r"[A-Za-z_][A-Za-z0-9_-]{0,58}", "a function name (letters, digits, _ and -, not starting with a digit "
        "or -; at most 59, so <name>-role fits RAM's 64)"),
        help="the FunctionName given to deploy with --parameter, if any (default: ack-mig-hook-<cluster id>)")
    # deploy's own checks of these names (functions/commands/deploy.py LOG_PROJECT, LOG_STORE): no * or ?
    # reaches a Resource, where RAM would read it as a wildcard.
    parser.add_argument("--log-project", required=True, type=_checked(
        r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", "a Simple Log Service project name (3-63 of a-z, 0-9 and -)"),
        help="the --log-project given to deploy")
    parser.add_argument("--log-store", required=True, type=_checked(
        r"[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]", "a logstore name (3-63 of a-z, 0-9, _ and -)"),
        help="the --log-store given to deploy")
    parser.add_argument("--bucket", default=None, type=_checked(
        r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", "an OSS bucket name (3-63 of a-z, 0-9 and -)"),
        help="the --bucket given to deploy, if any (default: ack-mig-hook-<account>-<region>)")
    args = parser.parse_args(argv)
    print(for_names(page_block(), args.account, args.region, args.cluster_id, args.function_name or "",
                    args.log_project, args.log_store, args.bucket or ""))
    return 0


def _match(pattern: str, value: str, fold: bool) -> bool:
    # RAM's "Policy elements": Action and Resource take * (any run of characters) and ? (one character); action
    # names are not case-sensitive, resource names are.
    if fold:
        pattern, value = pattern.lower(), value.lower()
    return re.fullmatch("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
                        value, re.S) is not None


def allows(policy: dict, action: str, resource: str) -> bool:
    """Whether an Allow statement of ``policy`` names ``action`` on ``resource`` (the policy has no Deny)."""
    def listed(value):
        return [value] if isinstance(value, str) else list(value)
    return any(s.get("Effect") == "Allow" and any(_match(a, action, True) for a in listed(s["Action"]))
               and any(_match(r, resource, False) for r in listed(s["Resource"])) for s in policy["Statement"])


def _script() -> int:
    """``python -m tests.support.deployer_policy ... | head``: a reader that went away ends it quietly, 141 as a
    writer SIGPIPE kills (stdout then points at /dev/null, so nothing fails again at exit), as ack-mig-hook's
    commands do, never a BrokenPipeError traceback."""
    try:
        try:
            code = main()
        except SystemExit as exc:  # --help, or a refused argument (said on stderr already)
            code = exc.code if isinstance(exc.code, int) else 2
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(_script())
