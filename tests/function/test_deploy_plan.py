"""``deploy``'s plan and progress against the ROS emulator's PreviewStack and change sets (tests/support/
ros_emulator.py, ros_template.py), the function's network read from ACK (DescribeClusterDetail on the CS
emulator), and uploads that happen only when needed. The real ROS, OSS, STS and CS SDKs sign every call."""

import json
import re

import pytest
import yaml

from functions.commands import deploy as deploy_command
from functions.commands.stack import change_plan as plans
from functions.commands.stack.cluster_network import ClusterNetwork, from_detail
from tests.function.test_deploy import BUCKET, CLUSTER, cloud, deploy_args, make_deps, run  # noqa: F401
from tests.support import contract

pytestmark = pytest.mark.timeout(180)
VPC = ("vpc-2ze0cluster0vpc0a1b2", "vsw-2ze0control0plane0c3d4", "sg-2ze0cluster0nodes0e5f6")


def stack_values(ros):
    (stack,) = ros.stacks.values()
    return {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}


def template_resources(**conditions):
    with open(deploy_command.TEMPLATE) as handle:
        doc = yaml.safe_load(handle)
    return {name for name, spec in doc["Resources"].items()
            if conditions.get(spec.get("Condition"), True)}


# ---- the plan, from ROS ----

def test_dry_run_of_a_new_stack_lists_what_ros_would_create(cloud, capsys, tmp_path):
    ros, oss = cloud
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--dry-run", "--parameter",
                                              "LogIndex=false"))
    assert code == 0, err
    added = set(re.findall(r"^    \+ Add +(\w+) +ALIYUN::", out, re.M))
    assert added == template_resources(CreateLogIndex=False) and "FunctionLogIndex" not in added
    assert re.search(r"^    LogIndex +false \(default true\)$", out, re.M)
    assert re.search(r"^    VpcId +%s \(default ''\)$" % VPC[0], out, re.M)
    assert not ros.stacks and not ros.change_sets and ros.calls("PreviewStack") == 1


def test_dry_run_of_an_existing_stack_is_a_change_set_deleted_afterwards(cloud, capsys, tmp_path):
    ros, oss = cloud
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))[0] == 0
    before = json.dumps(stack_values(ros), sort_keys=True)
    sent = len(oss.requests)
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2")), "--dry-run", "--parameter",
                                              "DryRun=true", "--parameter", "LogIndex=false"))
    assert code == 0, err
    assert "from ROS change set ack-mig-hook-plan-" in out
    assert re.search(r"^    ~ Modify Function +ALIYUN::FC3::Function  \(Code, EnvironmentVariables; by CodeChecksum, "
                     r"CodeObject, DryRun; replacement False\)$", out, re.M), out
    assert re.search(r"^    - Remove FunctionLogIndex +ALIYUN::SLS::Index$", out, re.M), out
    assert re.search(r"^    DryRun +false -> true$", out, re.M) and re.search(r"^    LogIndex +true -> false$", out,
                                                                             re.M)
    # Nothing of the stack changed, and the change set is gone.
    assert not ros.change_sets and ros.calls("UpdateStack") == 0 and ros.calls("DeleteChangeSet") == 1
    assert json.dumps(stack_values(ros), sort_keys=True) == before
    (stack,) = ros.stacks.values()
    assert stack["Status"] == "CREATE_COMPLETE"
    assert "would upload" in out and {v for v, _ in oss.requests[sent:]} <= {"GET", "HEAD"}


def test_dry_run_with_nothing_to_change_says_so(cloud, capsys, tmp_path):
    ros, _ = cloud
    deps = make_deps(str(tmp_path / "deps"))
    assert run(capsys, *deploy_args(deps))[0] == 0
    code, out, err = run(capsys, *deploy_args(deps, "--dry-run"))
    assert code == 0, err
    assert out.startswith("plan: no change to stack ack-mig-hook") and "already uploaded: oss://%s/" % BUCKET in out


def test_dry_run_json_is_the_plan(cloud, capsys, tmp_path):
    ros, _ = cloud
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))[0] == 0
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2")), "--dry-run", "--json",
                                              "--parameter", "NodeTimeoutS=900"))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["dry_run"] is True and doc["operation"] == "update" and doc["package"]["would_upload"] is True
    (function,) = [r for r in doc["plan"]["resources"] if r["logical_id"] == "Function"]
    assert function["action"] == "Modify" and "NodeTimeoutS" in function["causes"]
    assert {"key": "NodeTimeoutS", "old": "600", "new": "900"} in doc["plan"]["parameters"]


def test_the_emulators_plan_answers_fit_the_ros_sdk_models(cloud, capsys, tmp_path):
    """PreviewStack, CreateChangeSet, GetChangeSet and DeleteChangeSet answers carry only fields of the
    ros20190910 response models, with their types (tests/support/contract.py's check)."""
    ros, _ = cloud  # (every ROS answer of every test is checked too: contract.SDKS has ros20190910)
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--dry-run"))[0] == 0
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))[0] == 0
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2")), "--dry-run"))[0] == 0
    answers = [e for e in ros.exchanges if e.action in ("PreviewStack", "CreateChangeSet", "GetChangeSet",
                                                         "DeleteChangeSet")]
    assert {e.action for e in answers} == {"PreviewStack", "CreateChangeSet", "GetChangeSet", "DeleteChangeSet"}
    problems = [p for e in answers for p in contract.check_answer("ros", "2019-09-10", e.action, e.answer)]
    assert problems == []


def test_a_change_set_that_ros_cannot_compute_is_one_line_and_is_deleted(cloud, capsys, tmp_path):
    ros, _ = cloud
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))[0] == 0
    ros.fail_next("GetChangeSet", 400, "InvalidParameter")  # not transient: no retry
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2")), "--dry-run"))
    assert code == 1 and err.strip().splitlines()[-1].startswith("ack-mig-hook: error: ROS GetChangeSet failed")
    assert not ros.change_sets  # deleted all the same


# ---- progress: this operation's events only ----

def test_an_update_and_a_delete_show_only_their_own_events(cloud, capsys, tmp_path):
    ros, _ = cloud
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 0 and "CREATE_COMPLETE Function" in err
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2")), "--parameter", "DryRun=true"))
    assert code == 0 and "UPDATE_COMPLETE Function" in err
    assert "CREATE_" not in err, err  # the create's events are history
    assert "UPDATE_IN_PROGRESS FunctionRole" not in err  # untouched resources are not listed
    code, _, err = run(capsys, "undeploy", "--region", "cn-beijing", "--cluster-id", CLUSTER, "--poll", "0", "--yes")
    assert code == 0 and "DELETE_COMPLETE Function" in err
    assert "CREATE_" not in err and "UPDATE_" not in err, err


# ---- uploaded only when uploaded ----

def test_a_package_already_in_oss_is_not_uploaded_again(cloud, capsys, tmp_path):
    ros, oss = cloud
    deps = make_deps(str(tmp_path / "deps"))
    code, _, err = run(capsys, *deploy_args(deps))
    assert code == 0 and "uploaded oss://%s/" % BUCKET in err
    puts = [p for v, p in oss.requests if v == "PUT" and p.endswith(".zip")]
    code, out, err = run(capsys, *deploy_args(deps, "--parameter", "DryRun=true", "--json"))
    assert code == 0 and "not uploaded again" in err and "uploaded oss://" not in err
    assert [p for v, p in oss.requests if v == "PUT" and p.endswith(".zip")] == puts
    doc = json.loads(out)
    assert doc["package"]["uploaded"] is False and doc["operation"] == "update" and doc["status"] == "UPDATE_COMPLETE"
    # The same name holding other bytes (someone replaced it) is uploaded again, not trusted.
    (key,) = oss.buckets[BUCKET]
    oss.buckets[BUCKET][key] = b"PK\x03\x04 other bytes"
    code, _, err = run(capsys, *deploy_args(deps, "--parameter", "DryRun=false"))
    assert code == 0 and "uploaded oss://" in err and len(puts) + 1 == len(
        [p for v, p in oss.requests if v == "PUT" and p.endswith(".zip")])


# ---- the network, from the cluster ----

def test_deploy_puts_the_function_in_the_clusters_vpc(cloud, capsys, tmp_path):
    ros, _ = cloud
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 0, err
    values = stack_values(ros)
    assert (values["VpcId"], values["VSwitchId"], values["SecurityGroupId"]) == VPC
    assert "the function joins the cluster's VPC %s" % VPC[0] in err and "https://192.168.0.251:6443" in err


def test_the_operator_overrides_the_vpc_and_a_later_deploy_keeps_it(cloud, capsys, tmp_path):
    ros, _ = cloud
    mine = ("vpc-2zeothervpc0000001", "vsw-2zeothervsw0000001", "sg-2zeothersg00000001")
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--parameter", "VpcId=" + mine[0],
                                            "--parameter", "VSwitchId=" + mine[1], "--parameter",
                                            "SecurityGroupId=" + mine[2]))
    assert code == 0 and "as given" in err
    assert tuple(stack_values(ros)[k] for k in ("VpcId", "VSwitchId", "SecurityGroupId")) == mine
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2"))))  # an upgrade
    assert code == 0 and "is kept" in err
    assert tuple(stack_values(ros)[k] for k in ("VpcId", "VSwitchId", "SecurityGroupId")) == mine


def test_an_explicitly_empty_vpc_runs_the_function_outside_any(cloud, capsys, tmp_path):
    ros, _ = cloud
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--parameter", "VpcId="))
    assert code == 0 and stack_values(ros).get("VpcId", "") == ""


def test_an_unknown_cluster_is_bad_input_before_anything_is_built(cloud, capsys, tmp_path):
    ros, oss = cloud
    other = "c" + "0" * 32
    code, _, err = run(capsys, "deploy", "--cluster-id", other, *deploy_args(str(tmp_path))[3:])
    assert code == 2 and "ACK knows no cluster %s in cn-beijing" % other in err and "--cluster-id" in err
    assert not ros.stacks and not any(v == "PUT" for v, _ in oss.requests)


def test_network_of_a_cluster_detail():
    network = from_detail({"cluster_id": CLUSTER, "vpc_id": "vpc-1", "vswitch_ids": ["vsw-a", "vsw-b"],
                           "security_group_id": "sg-1", "master_url": json.dumps({
                               "api_server_endpoint": "https://47.0.0.1:6443",
                               "intranet_api_server_endpoint": "https://192.168.0.251:6443"})})
    assert network.parameters() == {"VpcId": "vpc-1", "VSwitchId": "vsw-a", "SecurityGroupId": "sg-1"}
    assert network.intranet_endpoint == "https://192.168.0.251:6443"
    old = from_detail({"vpc_id": "vpc-1", "vswitch_id": "vsw-z", "security_group_id": "sg-1", "master_url": "{bad"})
    assert old.vswitch_ids == ("vsw-z",) and old.intranet_endpoint == ""
    assert ClusterNetwork(CLUSTER, "", "", "", (), "", "", "").parameters() == {}


def test_plan_rendering_masks_no_echo_parameters():
    declared = {"Secret": {"Type": "String", "NoEcho": True}, "Level": {"Type": "String", "Default": "INFO"}}
    found = plans.from_change_set("s", {"StackId": "st-1", "Parameters": [
        {"ParameterKey": "Secret", "ParameterValue": "old-secret"}, {"ParameterKey": "Level", "ParameterValue": "INFO"},
        {"ParameterKey": "ALIYUN::StackId", "ParameterValue": "st-1"}]}, {"ChangeSetName": "cs", "Parameters": [
            {"ParameterKey": "Secret", "ParameterValue": "new-secret"},
            {"ParameterKey": "Level", "ParameterValue": "DEBUG"}], "Changes": []}, declared)
    text = "\n".join(plans.render(found, "cn-beijing"))
    assert "new-secret" not in text and "old-secret" not in text and "Secret" not in text
    assert "Level INFO -> DEBUG" in text and "ALIYUN::" not in text
