"""template.yml checked against the code: handler path, runtime, triggers, policy actions, settings."""

import json
import os
import re
import subprocess
import sys
import zipfile

import yaml

from functions import package, settings
from functions.intake import HANDLED_TYPES, NODEPOOL_OPERATIONS
from tests.function.conftest import EVENTS, ROOT

TEMPLATE = os.path.join(ROOT, "template.yml")


def load():
    with open(TEMPLATE) as handle:
        return yaml.safe_load(handle)


def resources(kind):
    return {name: r for name, r in load()["Resources"].items() if r["Type"] == kind}


def function():
    (fn,) = resources("ALIYUN::FC3::Function").values()
    return fn["Properties"]


def test_ros_template_with_fc3_function():
    doc = load()
    assert doc["ROSTemplateFormatVersion"] == "2015-09-01" and "Transform" not in doc
    props = function()
    assert props["Runtime"] == "python3.10"
    assert props["Handler"] == package.HANDLER == "index.handler"
    # The function must outlive its slowest node: agent wait (the transport's default) + the node's own
    # timeout + a few minutes for the bundle round, submits and polls. FC 3.0 allows up to 86400 s.
    import inspect

    from functions.delivery.cloud_assistant import CloudAssistantTransport

    agent_wait = inspect.signature(CloudAssistantTransport).parameters["agent_wait_s"].default
    node_timeout = int(props["EnvironmentVariables"]["ACK_MIG_NODE_TIMEOUT_S"])
    assert props["Timeout"] >= agent_wait + node_timeout + 300
    assert props["Role"] == {"Fn::GetAtt": ["FunctionRole", "Arn"]}


def test_environment_names_are_settings_names():
    names = set(function()["EnvironmentVariables"])
    known = {v.name for v in settings.ENV_VARS}
    assert names <= known, names - known
    assert {"ACK_MIG_CLUSTER_ID", "ACK_MIG_REGION"} <= names


def _patterns():
    out = []
    for trigger in resources("ALIYUN::FC3::Trigger").values():
        props = trigger["Properties"]
        if props["TriggerType"] == "eventbridge":
            config = props["TriggerConfig"]
            assert config["asyncInvocationType"] is True  # async: a raised retry is retried by FC
            assert config["runOptions"]["batchWindow"]["CountBasedWindow"] == 1  # one event per call
            out.append(json.loads(config["eventRuleFilterPattern"]))
    return out


def test_eventbridge_rules_cover_exactly_the_handled_types():
    types = set()
    for pattern in _patterns():
        types.update(pattern["type"])
    assert types == set(HANDLED_TYPES)


def test_rule_filters_agree_with_intake():
    for pattern in _patterns():
        if "data" in pattern and "eventName" in pattern["data"]:
            assert set(pattern["data"]["eventName"]) == set(NODEPOOL_OPERATIONS)
        if pattern["type"] == ["ecs:Instance:StateChange"]:
            assert pattern["data"]["state"] == ["Running"]


def test_sample_events_match_a_rule():
    """Every sample CloudEvent the function handles would be routed to it by one of the rules."""
    patterns = _patterns()

    def matches(pattern, event):
        for key, allowed in pattern.items():
            if isinstance(allowed, dict):
                if not isinstance(event.get(key), dict) or not matches(allowed, event[key]):
                    return False
            elif event.get(key) not in allowed:
                return False
        return True

    for name in os.listdir(EVENTS):
        event = json.load(open(os.path.join(EVENTS, name)))
        if not isinstance(event, dict) or "specversion" not in event:
            continue
        routed = any(matches(p, event) for p in patterns)
        irrelevant = name in ("ess_scale_in_success.json", "actiontrail_api_describe_clusters.json",
                              "ecs_instance_stopping.json")
        assert routed != irrelevant, name


def test_timer_trigger():
    timers = [r["Properties"] for r in resources("ALIYUN::FC3::Trigger").values()
              if r["Properties"]["TriggerType"] == "timer"]
    assert len(timers) == 1
    config = timers[0]["TriggerConfig"]
    assert config["enable"] is True and config["payload"] == ""  # empty payload: every labelled pool


def _code_actions():
    """RAM actions the code calls: CS SDK methods and the RPC calls of delivery."""
    actions = set()
    for folder, _, files in os.walk(os.path.join(ROOT, "functions")):
        for name in files:
            if not name.endswith(".py"):
                continue
            text = open(os.path.join(folder, name)).read()
            for method in re.findall(r"\.(describe_cluster_[a-z_]+?)(?:_with_options)?\(", text):
                actions.add("cs:" + "".join(part.capitalize() for part in method.split("_")))
            for product, action in re.findall(r"\.(ecs|ess)\.call\(\s*\"([A-Za-z]+)\"", text):
                actions.add("%s:%s" % (product, action))
    return actions


def test_policy_lists_exactly_the_actions_the_code_calls():
    (role,) = resources("ALIYUN::RAM::Role").values()
    statements = [s for p in role["Properties"]["Policies"] for s in p["PolicyDocument"]["Statement"]]
    listed = {a for s in statements for a in s["Action"]}
    assert all("*" not in a for a in listed)
    assert all(s["Effect"] == "Allow" for s in statements)
    code = _code_actions()
    assert {"cs:DescribeClusterNodePools", "cs:DescribeClusterNodes"} <= code
    assert listed - {"log:PostLogStoreLogs"} == code
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"]["Service"] == ["fc.aliyuncs.com"]


def test_package_resolves_the_templates_handler(tmp_path):
    """Build the zip, unpack it, and import the handler the way FC does: <file>.<function> from the root."""
    out = tmp_path / "pkg.zip"
    names = package.build(str(out))
    assert "index.py" in names and "functions/handler.py" in names and "node_bootstrap/mig/solver.py" in names
    assert "pynvml.py" in names  # delivery builds the node bundle from it inside FC
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    root = tmp_path / "code"
    with zipfile.ZipFile(out) as archive:
        archive.extractall(root)
    module, func = function()["Handler"].rsplit(".", 1)
    probe = ("import importlib, sys; sys.path.insert(0, %r); m = importlib.import_module(%r); "
             "print(m.__file__); print(getattr(m, %r)(open(%r, 'rb').read(), None))"
             % (str(root), module, func, os.path.join(EVENTS, "ess_lifecycle_test.json")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACK_MIG_")}
    proc = subprocess.run([sys.executable, "-c", probe], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == str(root / "index.py")
    assert json.loads(lines[-1])["outcome"] == "skip"


def test_vpc_is_optional_and_wired_to_the_function():
    """The private API endpoint (taint removal) and ssh need the cluster's VPC; Cloud Assistant does not,
    so the VPC is a condition on three parameters rather than a requirement."""
    doc = load()
    params = doc["Parameters"]
    assert all(params[name]["Default"] == "" for name in ("VpcId", "VSwitchId", "SecurityGroupId"))
    assert doc["Conditions"]["HasVpc"] == {"Fn::Not": {"Fn::Equals": ["", {"Ref": "VpcId"}]}}
    when, vpc, otherwise = function()["VpcConfig"]["Fn::If"]
    assert when == "HasVpc" and otherwise == {"Ref": "ALIYUN::NoValue"}
    assert vpc == {"VpcId": {"Ref": "VpcId"}, "VSwitchIds": [{"Ref": "VSwitchId"}],
                   "SecurityGroupId": {"Ref": "SecurityGroupId"}}


def test_ssh_settings_come_from_parameters_and_the_key_is_never_echoed():
    doc = load()
    env = function()["EnvironmentVariables"]
    assert env["ACK_MIG_SSH_PRIVATE_KEY"] == {"Ref": "SshPrivateKey"}
    assert env["ACK_MIG_SSH_KNOWN_HOSTS"] == {"Ref": "SshKnownHosts"}
    assert doc["Parameters"]["SshPrivateKey"]["NoEcho"] is True
    assert "ACK_MIG_SSH_HOST_KEY_POLICY" not in env  # host keys stay verified (the default)


def test_package_carries_a_known_hosts_file(tmp_path):
    known = tmp_path / "known"
    known.write_text("192.168.0.9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBWkVjqQx\n")
    out = tmp_path / "pkg.zip"
    names = package.build(str(out), known_hosts=str(known))
    assert package.KNOWN_HOSTS_NAME in names
    with zipfile.ZipFile(out) as archive:
        assert archive.read("known_hosts") == known.read_bytes()
    missing = subprocess.run([sys.executable, "-m", "functions.package", "--out", str(tmp_path / "x.zip"),
                              "--known-hosts", str(tmp_path / "nope")], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2 and missing.stderr.strip().startswith("error: --known-hosts")
