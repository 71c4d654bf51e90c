"""``ack-mig-hook doctor``: every check against the loopback emulators (ACK, ECS Cloud Assistant, ROS)
and the local TLS Kubernetes API server, with the real SDKs; and each check's verdict on its own."""

import json
import os

import pytest
import yaml

from functions.commands import main as cli
from functions.commands import doctor
from tests.function.conftest import AK, ROOT, SECRET, TOKEN
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.ros_emulator import RosEmulator
from tests.support.rpc_emulator import Emulator, SimNode

pytestmark = pytest.mark.timeout(120)
CLUSTER_ROLE = "/apis/rbac.authorization.k8s.io/v1/clusterroles/ack-mig-hook"
BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
ROLE_BINDINGS = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings"
EVENTS_ROLE = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/ack-mig-hook-events"


def rbac_role():
    with open(doctor.RBAC_FILE) as handle:
        return next(d for d in yaml.safe_load_all(handle) if d and d.get("kind") == "ClusterRole")


def rbac_doc(kind):
    with open(doctor.RBAC_FILE) as handle:
        return next(d for d in yaml.safe_load_all(handle) if d and d.get("kind") == kind)


def plugin_pod(name, strategy):
    return {"metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"containers": [{"name": "plugin", "command": ["nvidia-device-plugin"],
                                     "args": ["--mig-strategy=%s" % strategy, "--fail-on-init-error=true"]}]}}


@pytest.fixture
def cloud(emulator, monkeypatch, tmp_path, kube_api):  # noqa: F811
    ecs = Emulator(access_key_id=AK, secret=SECRET, token=TOKEN)
    ecs.nodes["i-2zeb7c1mig0a100x1k4d"] = SimNode(agent_version="2.5.3.0")
    ecs.nodes["i-2zeb7c1mig0a100x2m8f"] = SimNode(agent_version="2.1.3.200")  # too old for built-in params
    ecs.nodes["i-2zeb7c1mig0a100x3q2h"] = SimNode(agent_version="2.5.3.0")
    ecs.nodes["i-2ze8typo0a100x1c4v7"] = SimNode(agent_ready=False)
    ecs.start()
    ros = RosEmulator(access_key_id=AK, secret=SECRET, token=TOKEN).start()
    with open(os.path.join(ROOT, "template.yml")) as handle:
        template = handle.read()
    ros.stacks["st-1"] = {"StackId": "st-1", "StackName": "ack-mig-hook-" + emulator.cluster_id, "Status": "CREATE_COMPLETE",
                          "RegionId": "cn-beijing", "_template": template, "_events": [],
                          "Parameters": [{"ParameterKey": "ClusterId", "ParameterValue": emulator.cluster_id}]}
    kube_api.read_only[CLUSTER_ROLE] = rbac_role()
    kube_api.read_only[BINDINGS] = {"items": [{"metadata": {"name": "ack-mig-hook"}, "roleRef": {
        "kind": "ClusterRole", "name": "ack-mig-hook"}, "subjects": [{"kind": "User", "name": "2765xxxx-role"}]}]}
    kube_api.read_only[ROLE_BINDINGS] = {"items": [rbac_doc("RoleBinding")]}  # deploy/rbac.yaml, as applied
    kube_api.read_only[EVENTS_ROLE] = rbac_doc("Role")
    kube_api.add_pod("kube-system", "nvidia-device-plugin-node-a", "node-a")
    kube_api.pods[("kube-system", "nvidia-device-plugin-node-a")].update(plugin_pod("nvidia-device-plugin-node-a",
                                                                                   "mixed"))
    kube_api.add_node("node-a", labels={"aliyun.accelerator/nvidia_count": "8"})
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert())
    for name, value in {"ACK_MIG_CS_ENDPOINT": emulator.endpoint, "ACK_MIG_ECS_ENDPOINT": ecs.endpoint,
                        "ACK_MIG_VPC_ENDPOINT": ecs.endpoint,
                        "ACK_MIG_ROS_ENDPOINT": ros.endpoint, "ALIBABA_CLOUD_ACCESS_KEY_ID": AK,
                        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET, "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN,
                        "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true", "HOME": str(tmp_path),
                        "ACK_MIG_API_TIMEOUT_S": "5"}.items():
        monkeypatch.setenv(name, value)
    yield emulator, ecs, ros, kube_api, str(kubeconfig)
    ecs.stop()
    ros.stop()
    assert not emulator.rejected and not ros.rejected


def doctor_run(capsys, emulator, kubeconfig, *extra):
    code = cli.main(["doctor", "--cluster-id", emulator.cluster_id, "--region", "cn-beijing",
                     "--kubeconfig", kubeconfig] + list(extra))
    out, err = capsys.readouterr()
    return code, out, err


def test_doctor_reports_each_area_line_by_line(cloud, capsys):
    emulator, ecs, ros, kube, kubeconfig = cloud
    code, out, err = doctor_run(capsys, emulator, kubeconfig, "--json")
    assert code == 1, err  # the typo pool and the stopped agent are problems
    report = json.loads(out)
    lines = {(c["area"], c["status"]): c["text"] for c in report["checks"]}
    assert ("credentials", "ok") in lines
    assert "3g.20gb" in lines[("pool gpu-mig-a100", "ok")]
    assert "hyphen" in lines[("pool gpu-mig-typo", "PROBLEM")].lower() or "," in lines[("pool gpu-mig-typo",
                                                                                            "PROBLEM")]
    assert ("pool gpu-passthrough", "warn") in lines  # passthrough: skipped, with ACK's reason
    assert "ack-mig-hook-%s CREATE_COMPLETE" % emulator.cluster_id in lines[("stack", "ok")]
    assert any(area.startswith("trigger ") and status == "ok" for area, status in lines)
    assert "i-2ze8typo0a100x1c4v7" not in json.dumps(report) or "192.168.16.23" in json.dumps(report)
    assert "192.168.12.47" in lines[("agents", "warn")] and "2.1.3.200" in lines[("agents", "warn")]
    assert "192.168.16.23" in lines[("agents", "PROBLEM")]
    rbac = [c["text"] for c in report["checks"] if c["area"] == "rbac"]
    assert any("every rule" in text for text in rbac) and any("bound to User 2765xxxx-role" in text for text in rbac)
    assert "events create in default through ack-mig-hook-events, bound to User ack-mig-hook-function-ram-role-id" \
        in rbac
    assert "mixed on all 1" in lines[("device plugin", "ok")]
    assert ("mig-manager", "ok") in lines
    assert report["problems"] == sum(c["status"] == "PROBLEM" for c in report["checks"])
    # Read-only: nothing but reads reached any server.
    assert {r.action for r in ros.requests} <= {"ListStacks", "GetStack", "ListStackResources"}
    assert all(r.method == "GET" for r in kube.requests)
    assert set(ecs.calls) == {"DescribeCloudAssistantStatus"}


def test_doctor_text_output_and_what_changes_with_the_cluster(cloud, capsys):
    emulator, ecs, ros, kube, kubeconfig = cloud
    kube.read_only.pop(CLUSTER_ROLE)
    kube.add_node("node-b", labels={"nvidia.com/mig.config": "all-1g.5gb"})
    kube.pods[("kube-system", "nvidia-device-plugin-node-a")].update(plugin_pod("nvidia-device-plugin-node-a",
                                                                               "single"))
    code, out, err = doctor_run(capsys, emulator, kubeconfig)
    assert code == 1
    assert out.splitlines()[0] == "ack-mig-hook doctor: cluster %s in cn-beijing" % emulator.cluster_id
    assert any(line.startswith("PROBLEM") and "no ClusterRole ack-mig-hook" in line for line in out.splitlines())
    assert any(line.startswith("PROBLEM") and "nvidia-device-plugin-node-a" in line for line in out.splitlines())
    assert any(line.startswith("warn") and "mig-manager" in line and "1 nodes" in line for line in out.splitlines())
    assert out.splitlines()[-1].endswith("problems") and SECRET not in out + err and TOKEN not in out + err


def test_missing_settings_exit_2_before_any_call(cloud, capsys, monkeypatch):
    emulator, ecs, ros, kube, kubeconfig = cloud
    monkeypatch.delenv("ACK_MIG_CLUSTER_ID", raising=False)
    monkeypatch.delenv("ACK_MIG_REGION", raising=False)
    code = cli.main(["doctor"])
    _, err = capsys.readouterr()
    assert code == 2 and "--cluster-id (or ACK_MIG_CLUSTER_ID) and --region (or ACK_MIG_REGION, ALIBABA_CLOUD_REGION_ID" in err
    assert not ros.requests and not emulator.requests


# ---- each check's verdict from its facts ----

def test_rbac_check_names_each_missing_rule():
    role = rbac_role()
    wanted = [(v, r) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]]
    assert ("create", "pods/eviction") in wanted and ("patch", "nodes") in wanted
    trimmed = {"rules": [dict(rule, verbs=[v for v in rule["verbs"] if v != "patch"]) for rule in role["rules"]]}
    checks = doctor.rbac_checks(trimmed, [])
    assert checks[0].status == "PROBLEM" and "patch nodes" in checks[0].text
    assert checks[1].status == "PROBLEM" and "bound to nobody" in checks[1].text
    assert doctor.rbac_checks(role, [{"roleRef": {"name": "ack-mig-hook"}, "subjects": [
        {"kind": "User", "name": "u"}]}])[0].status == "ok"


def test_events_check_finds_the_grant_in_default_whichever_way_it_was_made():
    """deploy/rbac.yaml's Role and RoleBinding, or the stack's ClusterRole bound at namespace level: both
    grant events create in default; anything less is a warning naming the way to fix it."""
    role, binding = rbac_doc("Role"), rbac_doc("RoleBinding")
    assert [c.status for c in doctor.events_checks(role, [binding])] == ["ok"]
    as_cluster_role = dict(binding, roleRef=dict(binding["roleRef"], kind="ClusterRole"))
    assert doctor.events_checks({"rules": role["rules"]}, [as_cluster_role])[0].status == "ok"
    (missing,) = doctor.events_checks(None, [])
    assert missing.status == "warn" and "no RoleBinding in default binds ack-mig-hook-events" in missing.text \
        and "ClusterRbac=true" in missing.text
    (gone,) = doctor.events_checks(None, [binding])
    assert gone.status == "warn" and "Role ack-mig-hook-events does not exist" in gone.text
    wrong = {"rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["list"]}]}
    assert "grants no events create" in doctor.events_checks(wrong, [binding])[0].text


def test_agent_check_version_order_is_numeric():
    rows = [{"InstanceId": "a", "CloudAssistantStatus": "true", "CloudAssistantVersion": "2.2.3.1000"},
            {"InstanceId": "b", "CloudAssistantStatus": "true", "CloudAssistantVersion": "2.2.3.309"},
            {"InstanceId": "c", "CloudAssistantStatus": "true", "CloudAssistantVersion": "2.2.10.1"}]
    assert [c.status for c in doctor.agent_checks(rows, {"a": "", "b": "", "c": ""})] == ["ok"]
    rows[1]["CloudAssistantVersion"] = "2.2.3.308"
    (check,) = doctor.agent_checks(rows, {"a": "", "b": "", "c": ""})
    assert check.status == "warn" and "b (2.2.3.308)" in check.text


def test_stack_check_failed_stack_and_missing_triggers():
    checks = doctor.stack_checks({"Status": "ROLLBACK_COMPLETE", "StatusReason": "Function: no bucket"}, [], "s")
    assert [c.status for c in checks] == ["PROBLEM", "PROBLEM"] and "no bucket" in checks[0].text
    assert doctor.stack_checks(None, [], "s")[0].text.endswith("run ack-mig-hook deploy")


def test_a_stack_or_trigger_reason_is_cut_where_it_reads_whole():
    """ROS's StatusReason is free text of any length (an SDK error with its own parentheses, several lines):
    the stack's and a trigger's PROBLEM lines cut it at a raw 200 / 160 characters, mid-parenthesis, and the
    trigger's kept its line breaks. Each is now one line, cut whole (textsafe.clip), the advice still after."""
    reason = ("Resource [EssTrigger] CREATE failed: ServerError: code: 400, the trigger could not be created for "
              "the function ack-mig-hook in service region cn-beijing (RequestId: 6583A1B2-0C4D-4E5F-8A9B-"
              "0123456789AB, Recommend: https://api.aliyun.com/troubleshoot?q=InvalidArgument)\nstack rolled back")
    checks = doctor.stack_checks({"Status": "ROLLBACK_COMPLETE", "StatusReason": reason},
                                 [{"ResourceType": doctor.TRIGGER_TYPE, "LogicalResourceId": "EssTrigger",
                                   "Status": "CREATE_FAILED", "StatusReason": reason}], "s")
    stack, trigger = checks[0].text, checks[1].text
    for text in (stack, trigger):
        assert "\n" not in text and text.count("(") == text.count(")"), text
        assert "Resource [EssTrigger] CREATE failed" in text and "(RequestId: 6583A1B2-0C4D" not in text, text
    assert stack.startswith("s ROLLBACK_COMPLETE: Resource") and "...; " in stack, stack


def test_a_stack_named_that_serves_another_cluster_is_a_problem_not_ok(cloud, capsys):
    """``--stack-name`` may name any stack: one of another cluster is complete and has its triggers, and
    still no event of this cluster reaches a function that serves it; one with no ClusterId is no stack
    deploy made."""
    emulator, _, ros, _, kubeconfig = cloud
    other = "c" + "0" * 32
    ros.stacks["st-2"] = dict(ros.stacks["st-1"], StackId="st-2", StackName="ack-mig-hook-" + other,
                              Parameters=[{"ParameterKey": "ClusterId", "ParameterValue": other}])
    code, out, err = doctor_run(capsys, emulator, kubeconfig, "--json", "--stack-name", "ack-mig-hook-" + other)
    stack = [c for c in json.loads(out)["checks"] if c["area"] == "stack"]
    assert code == 1 and [c["status"] for c in stack] == ["PROBLEM"], err
    assert "serves cluster %s, not %s" % (other, emulator.cluster_id) in stack[0]["text"]
    ros.put_stack("st-vpc", "network", VpcName="prod")  # no ClusterId: not a stack deploy made
    code, out, err = doctor_run(capsys, emulator, kubeconfig, "--json", "--stack-name", "network")
    stack = [c for c in json.loads(out)["checks"] if c["area"] == "stack"]
    assert code == 1 and [c["status"] for c in stack] == ["PROBLEM"], err
    assert "has no ClusterId parameter: not a stack ack-mig-hook deploy made" in stack[0]["text"]


# ---- the way to the API server ----

def test_doctor_checks_how_the_function_reaches_the_api_server(cloud, capsys):
    emulator, ecs, ros, kube, kubeconfig = cloud
    code, out, _ = doctor_run(capsys, emulator, kubeconfig, "--json")
    lines = {(c["area"], c["status"]): c["text"] for c in json.loads(out)["checks"]}
    assert lines[("api endpoint", "ok")].endswith("https://192.168.0.251:6443")
    problem = lines[("network", "PROBLEM")]  # the stack was deployed without the VPC parameters
    assert "not in a VPC" in problem and "192.168.0.251:6443" in problem and "ack-mig-hook deploy" in problem
    assert "VpcId=vpc-2ze0cluster0vpc0a1b2" in problem and "SecurityGroupId=sg-2ze0cluster0nodes0e5f6" in problem
    # Deployed into the cluster's network: every network line is ok.
    ros.stacks["st-1"]["Parameters"] = [{"ParameterKey": k, "ParameterValue": v} for k, v in (
        ("VpcId", "vpc-2ze0cluster0vpc0a1b2"), ("VSwitchId", "vsw-2ze0control0plane0c3d4"),
        ("SecurityGroupId", "sg-2ze0cluster0nodes0e5f6"))]
    ecs.security_groups["sg-2ze0cluster0nodes0e5f6"] = {"SecurityGroupType": "normal", "Permissions": [
        {"Direction": "ingress", "Policy": "Drop", "Priority": "1", "IpProtocol": "ALL", "PortRange": "-1/-1",
         "SourceCidrIp": "0.0.0.0/0"}]}
    code, out, _ = doctor_run(capsys, emulator, kubeconfig, "--json")
    network = [c for c in json.loads(out)["checks"] if c["area"] == "network"]
    assert [c["status"] for c in network] == ["ok", "ok", "ok"] and "cluster's own" in network[2]["text"]
    assert "allows TCP to 192.168.0.251:6443" in network[2]["text"] and "basic group" in network[2]["text"]
    assert emulator.calls("DescribeClusterDetail") == 2
    asked = [p for a, p in ecs.requests if a == "DescribeSecurityGroupAttribute"]
    assert asked and all(p["Direction"] == "egress" and p["SecurityGroupId"] == "sg-2ze0cluster0nodes0e5f6"
                         for p in asked)


def test_doctor_reads_the_security_groups_outbound_rules_across_pages(cloud, capsys):
    emulator, ecs, ros, kube, kubeconfig = cloud
    ros.stacks["st-1"]["Parameters"] = [{"ParameterKey": k, "ParameterValue": v} for k, v in (
        ("VpcId", "vpc-2ze0cluster0vpc0a1b2"), ("VSwitchId", "vsw-2ze0control0plane0c3d4"),
        ("SecurityGroupId", "sg-2ze0own0group0f00d"))]
    # An enterprise group (outbound denied by default) whose one Accept for the API server is on the
    # second page of 1000 rules, behind rules for other ports: it is found, and TCP 6443 is allowed.
    filler = [{"Direction": "egress", "Policy": "Accept", "Priority": "1", "IpProtocol": "TCP",
               "PortRange": "%d/%d" % (p, p), "DestCidrIp": "0.0.0.0/0"} for p in range(7000, 8000)]
    ecs.security_groups["sg-2ze0own0group0f00d"] = {"SecurityGroupType": "enterprise", "Permissions": filler + [
        {"Direction": "egress", "Policy": "Accept", "Priority": "10", "IpProtocol": "TCP", "PortRange": "6443/6443",
         "DestCidrIp": "192.168.0.0/16", "SecurityGroupRuleId": "sgr-api"}]}
    code, out, _ = doctor_run(capsys, emulator, kubeconfig, "--json")
    line = [c for c in json.loads(out)["checks"] if c["area"] == "network"][-1]
    assert line["status"] == "ok" and "sgr-api" in line["text"] and "not the cluster's" in line["text"]
    assert ecs.calls["DescribeSecurityGroupAttribute"] == 2
    # The same group without that rule: outbound TCP to the endpoint is denied, a PROBLEM that says the fix.
    ecs.security_groups["sg-2ze0own0group0f00d"]["Permissions"] = filler
    code, out, _ = doctor_run(capsys, emulator, kubeconfig, "--json")
    line = [c for c in json.loads(out)["checks"] if c["area"] == "network"][-1]
    assert code == 1 and line["status"] == "PROBLEM" and "enterprise group denies" in line["text"]
    assert "DestCidrIp 192.168.0.251/32" in line["text"] and "PortRange 6443/6443" in line["text"]
    # More rules than doctor pages through: never judged on part of them.
    ecs.security_groups["sg-2ze0own0group0f00d"]["Permissions"] = filler * 3 + filler[:1]
    code, out, _ = doctor_run(capsys, emulator, kubeconfig, "--json")
    line = [c for c in json.loads(out)["checks"] if c["area"] == "network"][-1]
    assert line["status"] == "warn" and "more than 3000 outbound rules" in line["text"]
    # Rules that cannot be read: a warning that names the grant, not a PROBLEM and not a guess.
    ecs.fail_next("DescribeSecurityGroupAttribute", "Forbidden.RAM", 403)
    code, out, _ = doctor_run(capsys, emulator, kubeconfig, "--json")
    line = [c for c in json.loads(out)["checks"] if c["area"] == "network"][-1]
    assert line["status"] == "warn" and "Forbidden.RAM" in line["text"]
    assert "ecs:DescribeSecurityGroupAttribute" in line["text"]


@pytest.mark.parametrize("unknown", ["refuse", "empty"])
def test_doctor_reads_the_functions_vswitch_for_rules_limited_by_source(cloud, capsys, unknown):
    """An outbound Drop limited to some source addresses, before the default Accept: whether it applies
    depends on the function's vSwitch, which doctor reads (VPC DescribeVSwitchAttributes) instead of saying
    unknown; a vSwitch VPC does not list (however it answers) or cannot be read leaves it unknown, saying why."""
    emulator, ecs, ros, kube, kubeconfig = cloud
    ecs.unknown_vswitch = unknown
    ros.stacks["st-1"]["Parameters"] = [{"ParameterKey": k, "ParameterValue": v} for k, v in (
        ("VpcId", "vpc-2ze0cluster0vpc0a1b2"), ("VSwitchId", "vsw-2ze0control0plane0c3d4"),
        ("SecurityGroupId", "sg-2ze0cluster0nodes0e5f6"))]
    ecs.security_groups["sg-2ze0cluster0nodes0e5f6"] = {"SecurityGroupType": "normal", "Permissions": [
        {"Direction": "egress", "Policy": "Drop", "Priority": "1", "IpProtocol": "TCP", "PortRange": "6443/6443",
         "DestCidrIp": "192.168.0.0/16", "SourceCidrIp": "10.8.0.0/16", "SecurityGroupRuleId": "sgr-office"}]}

    def egress_line():
        code, out, _ = doctor_run(capsys, emulator, kubeconfig, "--json")
        return [c for c in json.loads(out)["checks"] if c["area"] == "network"][-1]

    ecs.vswitches["vsw-2ze0control0plane0c3d4"] = {"CidrBlock": "192.168.0.0/24", "VpcId": "vpc-2ze0cluster0vpc0a1b2"}
    line = egress_line()  # the Drop's source is not the function's vSwitch: it does not apply
    assert line["status"] == "ok" and "allows TCP to 192.168.0.251:6443" in line["text"], line
    ecs.vswitches["vsw-2ze0control0plane0c3d4"]["CidrBlock"] = "10.8.3.0/24"
    line = egress_line()  # inside the Drop's source: denied
    assert line["status"] == "PROBLEM" and "sgr-office" in line["text"], line
    asked = [p for a, p in ecs.requests if a == "DescribeVSwitchAttributes"]
    assert asked and all(p["VSwitchId"] == "vsw-2ze0control0plane0c3d4" for p in asked)
    del ecs.vswitches["vsw-2ze0control0plane0c3d4"]
    line = egress_line()
    assert line["status"] == "warn" and "vsw-2ze0control0plane0c3d4" in line["text"], line
    assert ("InvalidVSwitchId.NotFound" if unknown == "refuse" else "VPC lists no vSwitch") in line["text"]
    ecs.vswitches["vsw-2ze0control0plane0c3d4"] = {"CidrBlock": "10.8.3.0/24"}
    ecs.fail_next("DescribeVSwitchAttributes", "Forbidden.RAM", 403)
    line = egress_line()
    assert line["status"] == "warn" and "vpc:DescribeVSwitchAttributes" in line["text"], line


def network(**changes):
    from functions.commands.stack.cluster_network import ClusterNetwork

    base = dict(cluster_id="c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b", name="", state="running", vpc_id="vpc-1",
                vswitch_ids=("vsw-a", "vsw-b"), security_group_id="sg-1", intranet_endpoint="https://10.0.0.5:6443",
                public_endpoint="")
    base.update(changes)
    return ClusterNetwork(**base)


def test_network_check_verdicts():
    from functions.commands.stack.egress import ALLOW, Verdict

    good = {"VpcId": "vpc-1", "VSwitchId": "vsw-b", "SecurityGroupId": "sg-1"}
    allowed = Verdict(ALLOW, "no rule matches and a basic group allows outbound traffic by default")
    assert [c.status for c in doctor.network_checks(network(), good, True, allowed)] == ["ok"] * 4
    unread = doctor.network_checks(network(), good, True)[-1]
    assert unread.status == "warn" and "not read" in unread.text and "the cluster's own" in unread.text
    other_vpc = doctor.network_checks(network(), dict(good, VpcId="vpc-9"), True)[-1]
    assert other_vpc.status == "PROBLEM" and "VPC vpc-9, the cluster in vpc-1" in other_vpc.text
    missing = doctor.network_checks(network(), dict(good, SecurityGroupId=""), True)[-1]
    assert missing.status == "PROBLEM" and "SecurityGroupId empty" in missing.text
    checks = doctor.network_checks(network(), dict(good, VSwitchId="vsw-z", SecurityGroupId="sg-9"), True)
    assert [c.status for c in checks] == ["ok", "ok", "warn", "warn"]
    assert "in VPC vpc-1" in checks[2].text and "allow TCP to 10.0.0.5:6443" in checks[3].text
    no_endpoint = doctor.network_checks(network(intranet_endpoint=""), good, True)[0]
    assert no_endpoint.status == "PROBLEM" and "no private API endpoint" in no_endpoint.text
    assert len(doctor.network_checks(network(), {}, False)) == 1  # no stack: the stack check says deploy


def test_a_network_that_cannot_be_read_is_one_problem_among_the_checks(cloud, capsys):
    emulator, ecs, ros, kube, kubeconfig = cloud
    emulator.fail_next("DescribeClusterDetail", 403, "Forbidden.RAM")
    code, out, _ = doctor_run(capsys, emulator, kubeconfig, "--json")
    lines = {(c["area"], c["status"]): c["text"] for c in json.loads(out)["checks"]}
    assert code == 1 and "Forbidden.RAM" in lines[("network", "PROBLEM")]
    assert "cs:DescribeClusterDetail" in lines[("network", "PROBLEM")] and ("mig-manager", "ok") in lines


AUTO_POOL = "np0a1b2c3d4e5f60718293a4b5c6d7e8f9"


def eventer_pod(args):
    """ack-node-problem-detector's eventer (kube-eventer) as ACK runs it in kube-system."""
    return {"metadata": {"name": "ack-node-problem-detector-eventer-598b6bf66b-m2n7p", "namespace": "kube-system"},
            "spec": {"containers": [{"name": "eventer", "command": ["/kube-eventer"], "args": list(args)}]}}


def test_pod_event_checks_say_whether_events_can_arrive_and_when_the_last_one_did():
    from functions.decision.coalesce import Marker

    rule = [{"LogicalResourceId": "PodEventTrigger", "Status": "CREATE_COMPLETE"}]
    assert doctor.pod_event_checks([], True, rule, [], {}, 0.0) == []  # no auto pool: not a concern
    fast = eventer_pod(["--source=kubernetes:https://kubernetes.default", "--sink=eventbridge", "--frequency=5s"])
    seen = {AUTO_POOL: Marker(last={"at": 1000.0, "pod": "llm/a", "event": "e"})}
    checks = doctor.pod_event_checks([AUTO_POOL], True, rule, [fast], seen, 1090.0)
    by = {c.area: c for c in checks}
    assert by["pod events"].status == "ok" and "every 5s" in by["pod events"].text
    assert by["pod event rule"].status == "ok"
    assert by["last pod event"].status == "ok" and "1 min ago, pod llm/a" in by["last pod event"].text
    slow = eventer_pod(["--sink=eventbridge"])  # kube-eventer's default frequency: 30 s
    checks = doctor.pod_event_checks([AUTO_POOL], True, [], [slow], {AUTO_POOL: Marker()}, 1090.0)
    by = {c.area: c for c in checks}
    assert by["pod events"].status == "warn" and "every 30s" in by["pod events"].text
    assert by["pod event rule"].status == "PROBLEM" and "PodEventTrigger" in by["pod event rule"].text
    assert by["last pod event"].status == "warn" and "none seen yet" in by["last pod event"].text
    other = eventer_pod(["--sink=sls"])
    line = doctor.pod_event_checks([AUTO_POOL], False, [], [other], {}, 0.0)[0]
    assert line.status == "warn" and "without an EventBridge sink" in line.text
    assert "no kube-eventer" in doctor.pod_event_checks([AUTO_POOL], False, [], [], {}, 0.0)[0].text


def test_doctor_reads_the_eventer_and_the_plan_marker_of_an_auto_pool(cloud, capsys):
    import time

    from functions.decision import coalesce as co
    from functions.rollout.plan_marker import marker_lease

    emulator, ecs, ros, kube, kubeconfig = cloud
    emulator.nodepools.append({"nodepool_info": {"nodepool_id": AUTO_POOL, "name": "llm-auto"},
                               "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}]}})
    secret = "accessKeySecret=s3cr3t-" + "x" * 8
    kube.add_pod("kube-system", "ack-node-problem-detector-eventer-598b6bf66b-m2n7p", "node-a")
    kube.pods[("kube-system", "ack-node-problem-detector-eventer-598b6bf66b-m2n7p")].update(eventer_pod(
        ["--sink=eventbridge:https://eventbridge.cn-beijing.aliyuncs.com?%s" % secret, "--frequency=5s"]))
    kube.leases[("default", marker_lease(AUTO_POOL))] = kube._stamp({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": marker_lease(AUTO_POOL), "namespace": "default", "uid": "lease-1",
                     "annotations": {co.MARKER_ANNOTATION: json.dumps(
                         {"holder": "", "until": 0, "asked": 4,
                          "last": {"at": time.time() - 30, "pod": "llm/waiting", "event": "e"}})}},
        "spec": {}})
    code, out, err = doctor_run(capsys, emulator, kubeconfig, "--json")
    lines = {(c["area"], c["status"]): c["text"] for c in json.loads(out)["checks"]}
    assert "every 5s" in lines[("pod events", "ok")]
    assert "PodEventTrigger" in lines[("pod event rule", "ok")]
    assert "pod llm/waiting" in lines[("last pod event", "ok")]
    assert "s3cr3t" not in out + err  # a sink URI's secret never reaches the report
    assert all(r.method == "GET" for r in kube.requests)  # still read-only



def test_doctor_shows_the_claim_a_pod_event_waited_out_and_names_a_note_that_does_not_read(cloud, capsys):
    """A holder that gave up waiting for another invocation's planning claim notes it in the plan marker, and the
    pool's later pod events skip at once while it holds: their pods wait for the timer. doctor showed the last
    event only, not why events of the pool end at once. It says whose claim was waited out and until when, in one
    line per pool; a note that does not read (forged, or not ours) is named, never raised, and its text never
    reaches the terminal as control characters."""
    import time

    from functions.decision import coalesce as co
    from functions.decision import claim_rules as pc
    from functions.decision.budget import lease_name
    from functions.rollout.plan_marker import marker_lease

    emulator, ecs, ros, kube, kubeconfig = cloud
    emulator.nodepools.append({"nodepool_info": {"nodepool_id": AUTO_POOL, "name": "llm-auto"},
                               "kubernetes_config": {"labels": [{"key": "ack-mig-hook/layout", "value": "auto"}]}})
    until = int(time.time()) + 1800

    def marked(waited):
        kube.leases[("default", marker_lease(AUTO_POOL))] = kube._stamp({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": marker_lease(AUTO_POOL), "namespace": "default", "uid": "lease-1",
                         "annotations": {co.MARKER_ANNOTATION: json.dumps(
                             {"holder": "", "until": 0, "asked": 4, "waited": waited,
                              "last": {"at": time.time() - 30, "pod": "llm/waiting", "event": "e"}})}},
            "spec": {}})

    def claimed(owner, expires):  # the pool's planning claim, as its holder writes and renews it
        kube.leases[("default", lease_name(AUTO_POOL))] = kube._stamp({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": lease_name(AUTO_POOL), "namespace": "default", "uid": "lease-2",
                         "annotations": {pc.PLANNING_ANNOTATION: pc.write_claim(pc.Claim(owner, expires))}},
            "spec": {}})

    def said():
        code, out, err = doctor_run(capsys, emulator, kubeconfig, "--json")
        lines = [c for c in json.loads(out)["checks"] if c["area"] == "claim waited out"]
        assert len(lines) == 1, lines
        return lines[0]

    marked({"owner": "timer-\x1b[31mtick", "until": until})
    claimed("timer-\x1b[31mtick", until)
    line = said()
    assert line["status"] == "warn", line
    assert line["text"].startswith("pool %s: an event waited for invocation timer-\x1b[31mtick's planning claim "
                                   "and gave up; the pool's pod events end at once while it holds, until %s ("
                                   % (AUTO_POOL, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until)))), line
    code, out, err = doctor_run(capsys, emulator, kubeconfig)
    assert "\x1b" not in out and "timer-\\x1b[31mtick" in out, out

    # The end noted has passed, but the same invocation has renewed its claim (it renews a short hold while it
    # works): the events still end at once, and doctor says until when as the Lease has it now, not the note.
    marked({"owner": "timer-tick", "until": time.time() - 60})
    renewed = int(time.time()) + 100
    claimed("timer-tick", renewed)
    line = said()
    assert line["status"] == "warn" and time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(renewed)) in line["text"], line
    claimed("timer-tick", time.time() - 5)  # run out (or given back): the events wait for claims again
    line = said()
    assert line["status"] == "ok" and "no longer held" in line["text"], line
    claimed("another-run", renewed)  # another invocation's claim now: not the one waited out
    assert said()["status"] == "ok"

    for forged, said in (({"owner": "timer-tick", "until": "soon"}, "waited.until is text, not a number"),
                         ("timer-tick", "waited is text, not an object {owner, until}"),
                         ({"owner": 7, "until": until}, "waited.owner is a number, not text")):
        marked(forged)
        code, out, err = doctor_run(capsys, emulator, kubeconfig, "--json")
        assert "Traceback" not in err, err
        lines = [c for c in json.loads(out)["checks"] if c["area"] == "claim waited out"]
        assert len(lines) == 1 and lines[0]["status"] == "warn" and said in lines[0]["text"], (forged, lines)
        assert "pod events read it as none" in lines[0]["text"]
    assert all(r.method == "GET" for r in kube.requests)  # still read-only

A100_POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"  # examples/inventory.json: the labelled pool of three A100 nodes


def test_a_pool_ack_refuses_to_list_is_one_problem_and_the_other_pools_agents_are_checked(cloud, capsys):
    """ACK refusing for good the list of one labelled pool's nodes (a pool deleted while the cluster still lists
    it) ended the whole doctor run; it is one PROBLEM line naming the pool and ACK's answer, and the other
    pools' agents are checked. A missing RAM permission is refused for every pool alike and keeps its exit 5."""
    emulator, ecs, ros, kube, kubeconfig = cloud
    emulator.refuse_pool(A100_POOL)
    code, out, err = doctor_run(capsys, emulator, kubeconfig, "--json")
    assert code == 1, err
    checks = json.loads(out)["checks"]
    agents = [(c["status"], c["text"]) for c in checks if c["area"] == "agents"]
    assert agents[0][0] == "PROBLEM" and "192.168.16.23" in agents[0][1]  # the typo pool's stopped agent
    assert "192.168.12.47" not in json.dumps(agents)  # the refused pool's nodes: not read, not judged
    assert agents[1] == ("PROBLEM", "pool %s: ACK refused the list of its nodes (DescribeClusterNodes: 404 "
                                    "ErrorNodePoolNotFound): its nodes' Cloud Assistant not checked, and the "
                                    "function decides none of them; is the pool deleted or being deleted?"
                         % A100_POOL)
    assert ("mig-manager", "ok") in {(c["area"], c["status"]) for c in checks}  # the checks after it ran
    emulator.refuse_pool(A100_POOL, 403, "Forbidden.RAM")
    code, out, err = doctor_run(capsys, emulator, kubeconfig, "--json")
    error = json.loads(out)  # no check printed: the error alone, as for any refused permission
    assert code == 5 == error["exit_code"] and "Forbidden.RAM" in error["error"] and "grant" in err, (out, err)


def test_a_cluster_api_that_cannot_be_read_says_its_cause_whole(cloud, capsys):
    """No --kubeconfig: doctor asks ACK for one. When the client refuses it (one asking to skip TLS
    verification), the PROBLEM line cut the cause at 200 characters mid-parenthesis ("...instead (the "); it
    now reads whole (textsafe.clip): parentheses closed, never mid-word, naming what to give."""
    from tests.support.cs_emulator import INSECURE_KUBECONFIG

    emulator, _, _, _, _ = cloud
    emulator.kubeconfig = INSECURE_KUBECONFIG
    code = cli.main(["doctor", "--cluster-id", emulator.cluster_id, "--region", "cn-beijing", "--json"])
    out, err = capsys.readouterr()
    (text,) = [c["text"] for c in json.loads(out)["checks"] if c["area"] == "kubernetes"]
    assert code == 1 and text.startswith("cannot read the cluster's API: kubeconfig (the cluster kubeconfig)"), text
    assert text.count("(") == text.count(")") and not text.endswith("(the "), text
    assert "skip TLS verification" in text and "certificate-authority-data" in text, text
