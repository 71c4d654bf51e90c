"""The RAM policy of the person deploying, as docs/first-deployment.md shows it: generated from what the
emulators record while the page's commands run, plus what ROS itself calls with the deployer's rights to
create the resources of template.yml, which no emulator sees, and the few actions of paths the page does
not take (:data:`OTHER_PATHS`).

tests/function/test_first_deployment.py compares the page's policy with :func:`render` of the actions it
recorded, and rewrites the page's block with ``WRITE_POLICY=1``.
"""

import json
import re
from typing import Dict, Iterable, List

# Resource type of template.yml -> the actions ROS calls, with the deployer's rights, to create, update and
# delete it (ROS "Resource types" reference: a resource is created with the caller's permissions; the
# actions are each service's API for the resource: RAM CreateRole/..., FC 3.0 CreateFunction/..., the
# SLS index, ACK's GrantPermissions, which reads the grants first (DescribeUserPermission)). No emulator
# serves them: each is named here by hand.
TEMPLATE_ACTIONS: Dict[str, List[str]] = {
    "ALIYUN::RAM::Role": ["ram:CreateRole", "ram:GetRole", "ram:DeleteRole", "ram:CreatePolicy", "ram:GetPolicy",
                          "ram:DeletePolicy", "ram:CreatePolicyVersion", "ram:DeletePolicyVersion",
                          "ram:ListPolicyVersions", "ram:AttachPolicyToRole", "ram:DetachPolicyFromRole",
                          "ram:ListPoliciesForRole"],
    "ALIYUN::FC3::Function": ["fc:CreateFunction", "fc:GetFunction", "fc:UpdateFunction", "fc:DeleteFunction",
                              "ram:PassRole"],
    "ALIYUN::FC3::Trigger": ["fc:CreateTrigger", "fc:GetTrigger", "fc:UpdateTrigger", "fc:DeleteTrigger",
                             "eventbridge:*"],
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


def render(names: List[str]) -> str:
    """The page's JSON block: one statement, the actions grouped by service, lines within WIDTH."""
    lines, line = [], ""
    service = None
    for name in names:
        item = json.dumps(name) + ","
        this = name.split(":")[0]
        if line and (this != service or len(line) + 1 + len(item) > WIDTH - 6):
            lines.append(line)
            line = ""
        line = (line + " " + item) if line else item
        service = this
    lines.append(line.rstrip(","))
    head = ['{', '  "Version": "1",', '  "Statement": [', '    {"Effect": "Allow", "Resource": "*", "Action": [']
    tail = ['    ]}', '  ]', '}']
    return "\n".join(head + ["      " + l for l in lines] + tail)
