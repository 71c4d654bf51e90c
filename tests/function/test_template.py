"""template.yml checked against the code: handler path, runtime, triggers, policy actions, settings."""

import copy
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest
import yaml

from functions.base import settings
from functions.commands.stack import code_package
from functions.pipeline.intake import HANDLED_TYPES, NODEPOOL_OPERATIONS
from tests.function.conftest import EVENTS, ROOT

TEMPLATE = os.path.join(ROOT, "template.yml")


_PARSED = {}  # (mtime, size) of template.yml -> the document


def load():
    """template.yml as parsed, a fresh copy on each call (a test may change what it gets). Parsed once per
    version of the file: PyYAML's pure-Python parser takes a fifth of a second on it, and the tests resolve
    hundreds of values, each through load()."""
    stat = os.stat(TEMPLATE)
    key = (stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        with open(TEMPLATE) as handle:
            _PARSED.clear()
            _PARSED[key] = yaml.safe_load(handle)
    return copy.deepcopy(_PARSED[key])


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
    assert props["Handler"] == code_package.HANDLER == "index.handler"
    # The function must outlive its slowest node: agent wait (the transport's default) + the node's own
    # timeout + a few minutes for the bundle round, submits and polls. FC 3.0 allows up to 86400 s.
    import inspect

    from functions.delivery.cloud_assistant import CloudAssistantTransport

    agent_wait = inspect.signature(CloudAssistantTransport).parameters["agent_wait_s"].default
    # One invocation may carry a whole rollout wave too: drain, partition, wait for the new capacity.
    for values in ({}, {"NodeTimeoutS": "10", "DrainTimeoutS": "1", "CapacityTimeoutS": "1"}, _maxima()):
        env = settings.load_settings(environment(values))
        timeout = resolve(props["Timeout"], values)
        assert timeout >= (agent_wait + env.delivery.node_timeout_s + env.rollout.drain_timeout_s
                           + env.rollout.capacity_timeout_s + 300), values
        assert timeout <= FC_MAX_TIMEOUT_S, values
    # Beyond one wave, the invocation keeps starting waves while it has time: InvocationTimeoutS, never less
    # than one wave's worst case, and what the function is told as its own budget.
    assert resolve(props["Timeout"], {}) == 14400
    assert resolve(props["Timeout"], {"InvocationTimeoutS": "60"}) == 600 + 900 + 300 + 420
    # FC tells the function its Timeout in the context (FC's Python "context": function.timeout), which
    # is the budget the rollout spends wave by wave.
    fc_context = type("Context", (), {"function": type("FunctionMeta", (), {"timeout": 14400})()})()
    assert settings.invocation_s(settings.load_settings(environment({}), context=fc_context)) == 14400
    assert props["Role"] == {"Fn::GetAtt": ["FunctionRole", "Arn"]}


# FC 3.0 CreateFunction: timeout 1..86400 seconds.
FC_MAX_TIMEOUT_S = 86400
PSEUDO = {"ALIYUN::Region": "cn-beijing", "ALIYUN::TenantId": "1234567890"}


def parameter_values(values=None):
    """Every parameter's value as ROS would resolve it: the given ones, else the template's default
    (the ones without a default get a placeholder)."""
    out = {}
    for name, spec in load()["Parameters"].items():
        out[name] = str(spec.get("Default", "<%s>" % name))
    out.update(values or {})
    return out


def resolve(value, values=None):
    """The template's intrinsic functions that the function's properties use, evaluated the way ROS
    documents them: Ref, Fn::Sub (``${Name}``), Fn::Max (the largest of a list), Fn::Calculate (``{n}``
    replaced by the n-th number, integer arithmetic). Anything else fails the test rather than being guessed."""
    params = parameter_values(values)
    if isinstance(value, dict) and len(value) == 1:
        (fn, arg), = value.items()
        if fn == "Ref":
            return PSEUDO[arg] if arg in PSEUDO else params[arg]
        if fn == "Fn::Sub":
            return re.sub(r"\$\{([\w:]+)\}", lambda m: str(resolve({"Ref": m.group(1)}, values)), arg)
        if fn == "Fn::Max":  # ROS "Fn::Max": the largest number of the list
            return max(int(resolve(n, values)) for n in arg)
        if fn == "Fn::Calculate":
            expression, _digits, numbers = arg
            numbers = [int(resolve(n, values)) for n in numbers]
            text = re.sub(r"\{(\d+)\}", lambda m: str(numbers[int(m.group(1))]), expression)
            assert re.fullmatch(r"[0-9+*() -]+", text), text
            return eval(text)  # digits and + - * ( ) only, checked above
        raise AssertionError("intrinsic %s not modelled here" % fn)
    return value


def environment(values=None):
    """The function's environment variables with the stack's parameters resolved."""
    return {k: str(resolve(v, values)) for k, v in function()["EnvironmentVariables"].items()}


def _maxima():
    return {name: str(spec["MaxValue"]) for name, spec in load()["Parameters"].items() if "MaxValue" in spec}


def test_environment_names_are_settings_names():
    names = set(function()["EnvironmentVariables"])
    known = {v.name for v in settings.ENV_VARS}
    assert names <= known, names - known
    assert {"ACK_MIG_CLUSTER_ID", "ACK_MIG_REGION"} <= names


# FC 3.0 (API 2023-03-30) EventBridgeTriggerConfig as its SDK model defines it (alibabacloud_fc20230330
# 4.8.3, models/_event_bridge_trigger_config.py, _event_sink_config.py, _delivery_option.py,
# _run_options.py): the only keys a trigger may carry. DeliveryOption has no "mode"; RunOptions'
# batchWindow is documented as unsupported in the event-driven mode, so it is not used.
TRIGGER_KEYS = {"asyncInvocationType", "eventRuleFilterPattern", "eventSinkConfig", "eventSourceConfig",
                "runOptions", "triggerEnable"}
DELIVERY_OPTION_KEYS = {"concurrency", "eventSchema"}
RUN_OPTION_KEYS = {"batchWindow", "deadLetterQueue", "errorsTolerance", "mode", "retryStrategy"}


SAMPLE_CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"  # the cluster of tests/events/ and examples/inventory.json


def _patterns():
    out = []
    for trigger in resources("ALIYUN::FC3::Trigger").values():
        props = trigger["Properties"]
        if props["TriggerType"] == "eventbridge":
            config = props["TriggerConfig"]
            assert set(config) <= TRIGGER_KEYS, set(config) - TRIGGER_KEYS
            # FC 3.0: false = asynchronous (FC queues the event; a long run is not re-pushed while running).
            assert config["asyncInvocationType"] is False
            assert set(config["eventSinkConfig"]["deliveryOption"]) <= DELIVERY_OPTION_KEYS
            run = config["runOptions"]
            assert set(run) <= RUN_OPTION_KEYS and run["mode"] == "event-driven" and "batchWindow" not in run
            # A pattern may name the stack's cluster (Fn::Sub): resolved with the samples' cluster.
            out.append(json.loads(resolve(config["eventRuleFilterPattern"], {"ClusterId": SAMPLE_CLUSTER})))
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


def test_the_pod_event_rule_takes_only_failed_scheduling_of_pods_of_this_cluster():
    from tests.support.eventbridge_pattern import matches

    (pattern,) = [p for p in _patterns() if p["type"] == ["cs:k8s:PodRelatedEvent"]]
    event = json.load(open(os.path.join(EVENTS, "ack_pod_failed_scheduling.json")))
    assert matches(pattern, event)
    for change in ({"reason": "Scheduled"}, {"involvedObject": dict(event["data"]["involvedObject"], kind="Node")}):
        assert not matches(pattern, dict(event, data=dict(event["data"], **change))), change
    other = event["subject"].replace(SAMPLE_CLUSTER, "c0000000000000000000000000000000b")
    assert not matches(pattern, dict(event, subject=other))
    assert not matches(pattern, dict(event, source="acs.ecs"))


def test_sample_events_match_a_rule():
    """Every sample CloudEvent the function handles would be routed to it by one of the rules (matched the way
    EventBridge documents it: tests/support/eventbridge_pattern.py)."""
    from tests.support.eventbridge_pattern import matches

    patterns = _patterns()

    for name in os.listdir(EVENTS):
        event = json.load(open(os.path.join(EVENTS, name)))
        if not isinstance(event, dict) or "specversion" not in event:
            continue
        routed = any(matches(p, event) for p in patterns)
        irrelevant = name in ("ess_scale_in_success.json", "actiontrail_api_describe_clusters.json",
                              "ecs_instance_stopping.json")
        assert routed != irrelevant, name


def test_timer_trigger():
    timers = {r["Properties"]["TriggerName"]: r["Properties"] for r in resources("ALIYUN::FC3::Trigger").values()
              if r["Properties"]["TriggerType"] == "timer"}
    assert sorted(timers) == ["auto-pools", "reconcile"]
    config = timers["reconcile"]["TriggerConfig"]
    assert config["enable"] is True and config["payload"] == ""  # empty payload: every labelled pool


def test_the_auto_pool_timer_is_a_ten_minute_safety_net_that_reaches_its_step():
    """Its payload is what the intake turns into an auto pool tick (functions/pipeline/auto_pool.py); pod
    events plan in seconds, so the timer only catches what they missed (docs/auto-pools.md)."""
    from functions.pipeline.envelope import read_envelope
    from functions.pipeline.intake import parse_envelope

    config = {r["Properties"]["TriggerName"]: r["Properties"] for r in resources("ALIYUN::FC3::Trigger").values()
              }["auto-pools"]["TriggerConfig"]
    assert config["cronExpression"] == {"Ref": "AutoPoolSchedule"} and config["enable"] is True
    assert load()["Parameters"]["AutoPoolSchedule"]["Default"] == "@every 10m"
    event = {"triggerTime": "2026-12-04T00:00:00Z", "triggerName": "auto-pools", "payload": config["payload"]}
    request = parse_envelope(read_envelope(json.dumps(event).encode()))
    assert request.auto_pools and request.trigger.value == "timer"


def _code_texts():
    """The function's code. The operator-side parts are left out (functions/commands/stack and the deploy, undeploy
    and doctor commands): they run on the operator's machine with the operator's credentials, never with
    the function's role."""
    operator_side = ("functions/commands/deploy.py", "functions/commands/doctor.py")
    for folder, _, files in os.walk(os.path.join(ROOT, "functions")):
        if os.path.relpath(folder, ROOT).replace(os.sep, "/").startswith("functions/commands/stack"):
            continue
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
            if name.endswith(".py") and rel not in operator_side:
                yield os.path.join(folder, name), open(os.path.join(folder, name)).read()


def _sdk_methods():
    """Tea SDK method -> RAM action, from the SDK clients the code uses (every ``*_with_options`` method)."""
    from alibabacloud_cs20151215.client import Client as CsClient
    from alibabacloud_kms20160120.client import Client as KmsClient

    out = {}
    for product, client in (("cs", CsClient), ("kms", KmsClient)):
        for attr in dir(client):
            if attr.endswith("_with_options") and not attr.endswith("_async"):
                method = attr[:-len("_with_options")]
                out[method] = "%s:%s" % (product, "".join(p.capitalize() for p in method.split("_")))
    return out


def _code_actions():
    """RAM actions the code calls: Tea SDK methods (CS, KMS) and every RPC ``<client>.call("Action", ...)``
    of functions/, whose product is the client attribute's name (``ecs`` or ``ess``). A call whose product
    cannot be told fails the test rather than being left out."""
    methods = _sdk_methods()
    actions = set()
    for path, text in _code_texts():
        for method in re.findall(r"\.([a-z_]+?)_with_options\(", text):
            if method in methods:
                actions.add(methods[method])
        for receiver, action in re.findall(r"(\w+)\.call\(\s*\"([A-Za-z]+)\"", text):
            assert receiver in ("ecs", "ess"), "%s: %s.call(%r): which product?" % (path, receiver, action)
            actions.add("%s:%s" % (receiver, action))
    return actions


def _keeps_commands():
    """Whether any RunCommand of the code keeps its command (``"KeepCommand": True``)."""
    texts = [text for _, text in _code_texts() if '"RunCommand"' in text]
    assert texts and all('"KeepCommand": False' in t for t in texts) or any('"KeepCommand": True' in t for t in texts)
    return any('"KeepCommand": True' in t for t in texts)


def _runs_code(action):
    """The Cloud Assistant actions that put and run something on an instance."""
    return action in ("ecs:RunCommand", "ecs:SendFile", "ecs:InvokeCommand")


def _sub(text):
    return {"Fn::Sub": text}


REGION_ACCOUNT = "${ALIYUN::Region}:${ALIYUN::TenantId}"
# Actions RAM authorizes only on "all resources", or for which no resource-level permission could be
# confirmed (docs/security.md says which): granted on '*', each with a comment in template.yml. None now.
STAR_ACTIONS = set()
# Cloud Assistant reads: RAM authorizes them on this region's and account's instances (and, for
# DescribeInvocationResults, its commands) per the ECS Cloud Assistant RAM policy samples and the API
# reference; no tag condition, as they name an invocation, not an instance.
INSTANCE_READS = {"ecs:DescribeCloudAssistantStatus", "ecs:DescribeSendFileResults"}


def _expected_grant(action):
    """(resource, condition) the least-privilege policy gives ``action``, from what the code sends it."""
    product = action.split(":")[0]
    if product == "cs":  # every CS call names the configured cluster
        return _sub("acs:cs:%s:cluster/${ClusterId}" % REGION_ACCOUNT), None
    if _runs_code(action):  # InstanceId.N: instances of this cluster only (ACK's node tag)
        # RunCommand with KeepCommand=true also creates a command (RAM resource command/*): needed only then.
        assert not _keeps_commands(), "KeepCommand is used: RunCommand also needs command/* (update both)"
        return (_sub("acs:ecs:%s:instance/*" % REGION_ACCOUNT),
                {"StringEquals": {"acs:ResourceTag/ack.aliyun.com": {"Ref": "ClusterId"}}})
    if action in INSTANCE_READS:
        return _sub("acs:ecs:%s:instance/*" % REGION_ACCOUNT), None
    if action == "ecs:DescribeInvocationResults":
        return [_sub("acs:ecs:%s:instance/*" % REGION_ACCOUNT), _sub("acs:ecs:%s:command/*" % REGION_ACCOUNT)], None
    # ScalingGroupId of a pool: unknown until the pool exists. DescribeLifecycleHooks always names the group
    # (membership.py), and its API reference's RAM table gives it the scalinggroup resource. So do the API
    # references of CompleteLifecycleAction (2014-08-28 and 2022-02-22: update, *ScalingGroup) and
    # RecordLifecycleActionHeartbeat (2022-02-22: update, *ScalingGroup), though the call names only the
    # hook: RAM checks the hook's scaling group.
    if action in ("ess:DescribeScalingInstances", "ess:DescribeLifecycleHooks", "ess:CompleteLifecycleAction",
                  "ess:RecordLifecycleActionHeartbeat"):
        return _sub("acs:ess:%s:scalinggroup/*" % REGION_ACCOUNT), None
    if action == "kms:GetSecretValue":  # SecretName: ACK_MIG_SSH_KEY_SECRET and ACK_MIG_NOTIFY_URL_SECRET, each a parameter
        return [_sub("acs:kms:%s:secret/${SshKeySecretName}" % REGION_ACCOUNT),
                _sub("acs:kms:%s:secret/${NotifyUrlSecretName}" % REGION_ACCOUNT)], None
    if action == "log:PostLogStoreLogs":  # FC writes the function's logs with its role: the configured store
        return _sub("acs:log:%s:project/${LogProject}/logstore/${LogStore}" % REGION_ACCOUNT), None
    assert action in STAR_ACTIONS, "%s: no least-privilege resource known; add one here and in template.yml" % action
    return "*", None


def _statements():
    (role,) = resources("ALIYUN::RAM::Role").values()
    return [s for p in role["Properties"]["Policies"] for s in p["PolicyDocument"]["Statement"]]


def test_policy_lists_exactly_the_actions_the_code_calls():
    statements = _statements()
    listed = {a for s in statements for a in s["Action"]}
    assert all("*" not in a for a in listed)
    assert all(s["Effect"] == "Allow" for s in statements)
    code = _code_actions()
    assert {"cs:DescribeClusterNodePools", "cs:DescribeClusterNodes", "ecs:RunCommand", "ecs:SendFile",
            "kms:GetSecretValue", "ess:CompleteLifecycleAction"} <= code
    assert listed - {"log:PostLogStoreLogs"} == code
    (role,) = resources("ALIYUN::RAM::Role").values()
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"]["Service"] == ["fc.aliyuncs.com"]


def test_every_grant_is_as_narrow_as_the_code_allows():
    """Each action's resources (and condition) are exactly the ones derived from what the code sends it:
    a wider resource, a missing tag condition or an extra resource fails here."""
    for statement in _statements():
        for action in statement["Action"]:
            resource, condition = _expected_grant(action)
            assert statement["Resource"] == (resource if isinstance(resource, list) else [resource]), \
                (action, statement["Resource"])
            assert statement.get("Condition") == condition, (action, statement.get("Condition"))
    # Nothing that can run code is ever granted on '*' or without the cluster's tag.
    for statement in _statements():
        if any(_runs_code(a) for a in statement["Action"]):
            assert "*" not in statement["Resource"] and statement["Condition"]


def test_every_star_resource_says_why_in_a_comment():
    lines = open(TEMPLATE).read().splitlines()
    for n, line in enumerate(lines):
        if line.strip() == "- '*'":
            start = n
            while not lines[start].lstrip().startswith("- Effect:"):
                start -= 1
            comment = []
            k = start - 1
            while lines[k].lstrip().startswith("#"):
                comment.insert(0, lines[k])
                k -= 1
            assert "'*'" in "".join(comment), "the '*' at line %d has no comment saying why" % (n + 1)


def test_kms_grant_is_the_configured_secret_and_no_key_is_in_the_template():
    doc = load()
    env = function()["EnvironmentVariables"]
    assert env["ACK_MIG_SSH_KEY_SECRET"] == {"Ref": "SshKeySecretName"}
    assert env["ACK_MIG_NOTIFY_URL_SECRET"] == {"Ref": "NotifyUrlSecretName"}
    assert "ACK_MIG_NOTIFY_URL" not in env  # the URL may hold a token: only through KMS in the deployed function
    assert "SshKeySecretName" in doc["Parameters"] and "SshPrivateKey" not in doc["Parameters"]
    assert not any("PRIVATE_KEY" in name for name in env)
    from functions.cloud import secrets

    assert secrets.SECRET_ACTION == "kms:GetSecretValue"


def test_package_resolves_the_templates_handler(tmp_path):
    """Build the zip, unpack it, and import the handler the way FC does: <file>.<function> from the root."""
    out = tmp_path / "pkg.zip"
    names = code_package.build(str(out))
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


def test_ssh_settings_come_from_parameters():
    env = function()["EnvironmentVariables"]
    assert env["ACK_MIG_SSH_KNOWN_HOSTS"] == {"Ref": "SshKnownHosts"}
    assert "ACK_MIG_SSH_HOST_KEY_POLICY" not in env  # host keys stay verified (the default)


def test_package_dependencies_are_the_projects(tmp_path):
    """code_package.DEPENDENCIES (checked in every --deps folder) is pyproject's runtime list, the KMS SDK in it;
    a --deps folder without one of them is refused with one line."""
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    block = text[text.index("dependencies = ["):]
    listed = re.findall(r'"([^"]+)"', block[:block.index("]")])
    assert sorted(req for req, _ in code_package.DEPENDENCIES) == sorted(listed)
    assert any(req.startswith("alibabacloud-kms20160120") for req in listed)
    deps = tmp_path / "deps"
    (deps / "paramiko").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "functions.commands.package", "--out", str(tmp_path / "x.zip"), "--deps",
                           str(deps)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "alibabacloud-kms20160120" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_package_carries_a_known_hosts_file(tmp_path):
    known = tmp_path / "known"
    known.write_text("192.168.0.9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBWkVjqQx\n")
    out = tmp_path / "pkg.zip"
    names = code_package.build(str(out), known_hosts=str(known))
    assert code_package.KNOWN_HOSTS_NAME in names
    with zipfile.ZipFile(out) as archive:
        assert archive.read("known_hosts") == known.read_bytes()
    missing = subprocess.run([sys.executable, "-m", "functions.commands.package", "--out", str(tmp_path / "x.zip"),
                              "--known-hosts", str(tmp_path / "nope")], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2 and missing.stderr.strip().startswith("error: --known-hosts")


# ---- parameters: the settings a user tunes, wired into the function's environment ----

def _fed_by():
    """parameter -> the environment variable it sets (a plain Ref, or Fn::Sub of the one parameter)."""
    declared = load()["Parameters"]
    out = {}
    for env_name, value in function()["EnvironmentVariables"].items():
        ref = value.get("Ref") if isinstance(value, dict) else None
        if isinstance(value, dict) and "Fn::Sub" in value:
            m = re.fullmatch(r"\$\{(\w+)\}", value["Fn::Sub"])
            ref = m.group(1) if m else None
        if ref in declared:
            out[ref] = env_name
    return out


def test_every_tunable_setting_is_a_parameter_and_no_environment_value_is_a_literal():
    """A hand edit of the function's environment is undone by the next UpdateStack; a parameter is kept
    (deploy passes UsePreviousParameters). So every value the function reads comes from a parameter or
    a pseudo parameter, never a literal in the template."""
    for name, value in function()["EnvironmentVariables"].items():
        assert isinstance(value, dict), "%s is a literal %r: make it a parameter" % (name, value)
    fed = _fed_by()
    for env_name in ("ACK_MIG_NODE_ARGS", "ACK_MIG_STARTUP_TAINT", "ACK_MIG_LOG_LEVEL", "ACK_MIG_NODE_TIMEOUT_S",
                     "ACK_MIG_TRANSPORT", "ACK_MIG_DRY_RUN", "ACK_MIG_MAX_UNAVAILABLE", "ACK_MIG_DRAIN_TIMEOUT_S",
                     "ACK_MIG_ON_LABEL_REMOVAL", "ACK_MIG_CAPACITY_TIMEOUT_S", "ACK_MIG_LIFECYCLE_FAILURE_RESULT"):
        assert env_name in fed.values(), env_name


def test_every_parameter_says_what_it_does():
    for name, spec in load()["Parameters"].items():
        assert len(str(spec.get("Description", ""))) >= 15, name
    for name, env_name in _fed_by().items():  # and names the setting it becomes
        assert env_name in load()["Parameters"][name]["Description"] or env_name in (
            "ACK_MIG_CLUSTER_ID", "ACK_MIG_SSH_KEY_SECRET", "ACK_MIG_SSH_KNOWN_HOSTS"), (name, env_name)


def test_template_defaults_are_the_settings_defaults():
    """Deployed with its defaults, the function runs with the same settings as an unset environment: the
    template and functions/base/settings.py cannot drift apart."""
    base = {"ACK_MIG_CLUSTER_ID": "<ClusterId>", "ACK_MIG_REGION": "cn-beijing"}
    assert settings.load_settings(environment()) == settings.load_settings(base)


def _accepted(env_name, value):
    """Whether the function accepts ``value`` for ``env_name``: functions/base/settings.py's parser, and for the
    startup taint the delivery's taint parser (which the executor runs on it before any node is touched)."""
    from functions.kube.taint import parse_taint

    try:
        loaded = settings.load_settings({env_name: value})
        if env_name == settings.STARTUP_TAINT and loaded.delivery.startup_taint:
            parse_taint(loaded.delivery.startup_taint)
    except ValueError:
        return False
    return True


# Narrower in the template than in settings, and why: the function's Timeout is their sum + 420 s and FC
# caps it at 86400 s (test_ros_template_with_fc3_function checks the sum at the maxima).
NARROWER_MAXIMA = {"NodeTimeoutS", "DrainTimeoutS", "CapacityTimeoutS"}


def test_parameter_constraints_agree_with_what_settings_accepts():
    """Each allowed value parses, and a value just outside is refused by functions/base/settings.py too: ROS
    never accepts a value the function would then fail on, and never refuses one that it could use."""
    declared = load()["Parameters"]
    fed = _fed_by()
    checked = set()
    for name, spec in declared.items():
        env_name = fed.get(name)
        if env_name is None:
            continue
        if "AllowedValues" in spec:
            for value in spec["AllowedValues"]:
                assert _accepted(env_name, str(value)), (name, value)
            assert not _accepted(env_name, "bogus"), name
            checked.add(name)
        if spec.get("Type") == "Number":
            low, high = spec["MinValue"], spec["MaxValue"]
            # whole seconds, as settings reads them (deploy refuses a fraction that ROS's Number would take)
            assert all(type(spec[k]) is int for k in ("MinValue", "MaxValue", "Default")), name
            assert not _accepted(env_name, "%d.5" % low), name
            assert _accepted(env_name, str(low)) and _accepted(env_name, str(high)), name
            assert not _accepted(env_name, str(low - 1)), name
            assert (not _accepted(env_name, str(high + 1))) or name in NARROWER_MAXIMA, name
            assert _accepted(env_name, str(spec["Default"])), name
            checked.add(name)
        if "AllowedPattern" in spec:
            checked.add(name)
    assert {"LogLevel", "Transport", "DryRun", "OnLabelRemoval", "LifecycleFailureResult", "NodeTimeoutS",
            "DrainTimeoutS", "CapacityTimeoutS", "MaxUnavailable", "StartupTaint"} <= checked


@pytest.mark.parametrize("name", ["SshKeySecretName", "NotifyUrlSecretName"])
def test_a_secret_name_is_what_kms_names_a_secret_and_never_a_ram_wildcard(name):
    """The kms:GetSecretValue grant is secret/${SshKeySecretName} (and NotifyUrlSecretName's): RAM reads * and ?
    there as wildcards, so a name holding one granted the role every secret it matched. The template and the
    function accept exactly KMS's secret names (letters, digits and _ / + = . - @, at most 192)."""
    spec, env_name = load()["Parameters"][name], _fed_by()[name]
    for value in ("mig-key", "prod/ack_mig+1=a.b@c-d", "x" * 192):
        assert re.fullmatch(spec["AllowedPattern"], value) and _accepted(env_name, value), value
    assert re.fullmatch(spec["AllowedPattern"], "") and _accepted(env_name, "")  # the default: none
    for value in ("*", "mig-*", "mig-key?", "a b", "x" * 193, "k\ney", "k\u00e9y"):
        assert not re.fullmatch(spec["AllowedPattern"], value) and not _accepted(env_name, value), value


def test_max_unavailable_pattern_agrees_with_settings():
    pattern = load()["Parameters"]["MaxUnavailable"]["AllowedPattern"]
    samples = [str(n) for n in range(0, 10002)] + ["%d%%" % n for n in range(0, 102)] + [
        "01", "007%", "-1", "1.5", "25 %", "%", "1%%", "2x"]
    for value in samples:
        if re.fullmatch(pattern, value):
            assert _accepted(settings.MAX_UNAVAILABLE, value), value
    for inside in ("1", "9999", "1%", "100%", "25%"):
        assert re.fullmatch(pattern, inside), inside
    for outside in ("0", "10000", "0%", "101%", "-1", "1.5"):
        assert not re.fullmatch(pattern, outside) and not _accepted(settings.MAX_UNAVAILABLE, outside), outside


def test_startup_taint_pattern_is_the_taint_parsers_form():
    spec = load()["Parameters"]["StartupTaint"]
    samples = [spec["Default"], "none", "a:NoExecute", "k=v:PreferNoSchedule", "k=:NoSchedule",
               "example.com/gpu=x:NoSchedule", "k=v", "k=v:Sometimes", ":NoSchedule", "-k:NoSchedule",
               "k=v w:NoSchedule", "k=v:NoSchedule; rm -rf /", "k" * 253 + ":NoSchedule", "k" * 254 + ":NoSchedule",
               "k=" + "v" * 63 + ":NoSchedule", "k=" + "v" * 64 + ":NoSchedule"]
    for value in samples:
        assert bool(re.fullmatch(spec["AllowedPattern"], value)) == _accepted(settings.STARTUP_TAINT, value), value
    assert re.fullmatch(spec["AllowedPattern"], spec["Default"])


def test_every_environment_value_parses_at_the_parameters_extremes():
    """The function starts with any combination the template lets through (settings load, taint parses)."""
    for values in ({}, _maxima(), {name: str(spec["MinValue"]) for name, spec in load()["Parameters"].items()
                                   if "MinValue" in spec}):
        loaded = settings.load_settings(environment(values))
        assert loaded.delivery.node_timeout_s == int(parameter_values(values)["NodeTimeoutS"])


# ---- Kubernetes RBAC in the same stack (ClusterRbac) ----

def _rbac_documents():
    with open(os.path.join(ROOT, "deploy", "rbac.yaml")) as handle:
        return [d for d in yaml.safe_load_all(handle) if d]


def _cluster_role_document():
    (role,) = [d for d in _rbac_documents() if d.get("kind") == "ClusterRole"]
    return role


def _applications():
    return {yaml.safe_load(r["Properties"]["YamlContent"])["metadata"]["name"]: (name, r)
            for name, r in resources("ALIYUN::CS::ClusterApplication").items()}


def test_rbac_stack_applies_the_cluster_role_of_deploy_rbac_yaml():
    apps = _applications()
    name, app = apps["ack-mig-hook"]
    assert yaml.safe_load(app["Properties"]["YamlContent"]) == _cluster_role_document()
    assert app["Properties"]["ClusterId"] == {"Ref": "ClusterId"}
    # The deployer's own RBAC applies it: no cluster-admin role for the deployer as a side effect.
    for _, app in apps.values():
        assert app["Properties"]["RolePolicy"] == "None" and app["Properties"]["CreationMode"] == "Apply"


def test_events_and_leases_are_granted_only_in_the_namespace_the_function_writes_them_to():
    """No cluster-wide events create: deploy/rbac.yaml has a Role and RoleBinding in default; the stack
    applies the same rules as a ClusterRole bound at namespace level in default (ACK binds ClusterRoles)."""
    import inspect

    from functions.rollout import executor

    docs = _rbac_documents()
    cluster_rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert not any("events" in r["resources"] for r in cluster_rules)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "default"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
                             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    assert not any("leases" in r["resources"] for r in cluster_rules)
    # The pools' budget Leases live there too.
    from functions.rollout.pool_lease import PoolBudget
    assert PoolBudget(None, "me", lambda: 0.0, 60.0).namespace == "default"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    # The function writes its Node Events in that namespace.
    assert '"namespace": "default"' in inspect.getsource(executor.event)
    # The stack: the Role's rules as the ClusterRole ack-mig-hook-events, bound at namespace level only.
    _, app = _applications()[role["metadata"]["name"]]
    applied = yaml.safe_load(app["Properties"]["YamlContent"])
    assert applied["kind"] == "ClusterRole" and applied["rules"] == role["rules"]
    (grant,) = resources("ALIYUN::CS::GrantPermissions").values()
    scoped = [p for p in grant["Properties"]["Permissions"] if p["RoleName"] == role["metadata"]["name"]]
    assert scoped == [{"ClusterId": {"Ref": "ClusterId"}, "RoleType": "namespace", "Namespace": "default",
                       "RoleName": role["metadata"]["name"], "IsCustom": True, "IsRamRole": True}]


def test_rbac_stack_binds_that_role_to_the_functions_ram_role_behind_a_parameter():
    doc = load()
    (name, grant), = resources("ALIYUN::CS::GrantPermissions").items()
    apps = _applications()
    props = grant["Properties"]
    assert props["UserId"] == {"Fn::GetAtt": ["FunctionRole", "RoleId"]}
    cluster = [p for p in props["Permissions"] if p["RoleType"] == "cluster"]
    assert cluster == [{"ClusterId": {"Ref": "ClusterId"}, "RoleType": "cluster",
                        "RoleName": _cluster_role_document()["metadata"]["name"], "IsCustom": True,
                        "IsRamRole": True}]
    assert sorted(grant["DependsOn"]) == sorted(n for n, _ in apps.values())  # the roles exist before they are bound
    assert all(grant["Condition"] == app["Condition"] == "CreateRbac" for _, app in apps.values())
    assert doc["Conditions"]["CreateRbac"] == {"Fn::Equals": ["true", {"Ref": "ClusterRbac"}]}
    assert doc["Parameters"]["ClusterRbac"]["Default"] == "true"
    assert doc["Parameters"]["ClusterRbac"]["AllowedValues"] == ["true", "false"]


# ---- docs/deploy.md lists every parameter ----

def test_every_parameter_is_documented_in_deploy_md():
    text = open(os.path.join(ROOT, "docs", "deploy.md")).read()
    rows = set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    assert set(load()["Parameters"]) <= rows, set(load()["Parameters"]) - rows
    assert rows <= set(load()["Parameters"]), rows - set(load()["Parameters"])


def _evaluate(node, params, conditions):
    """Ref, Fn::If, Fn::Join, Fn::Not and Fn::Equals as ROS evaluates them: enough for the template's names."""
    if isinstance(node, dict) and len(node) == 1:
        (fn, arg), = node.items()
        if fn == "Ref":
            return params[arg]
        if fn == "Fn::If":
            name, yes, no = arg
            return _evaluate(yes if _evaluate(conditions[name], params, conditions) else no, params, conditions)
        if fn == "Fn::Join":
            sep, items = arg
            return sep.join(_evaluate(i, params, conditions) for i in items)
        if fn == "Fn::Not":
            return not _evaluate(arg[0] if isinstance(arg, list) else arg, params, conditions)
        if fn == "Fn::Equals":
            return _evaluate(arg[0], params, conditions) == _evaluate(arg[1], params, conditions)
    return node


@pytest.mark.parametrize("given", ["", "my-mig"])
def test_the_templates_own_names_include_the_cluster_unless_one_is_given(given):
    """A stack made from template.yml by hand (the ROS console) names its function and role after the cluster,
    as `deploy` does (functions/commands/common.py default_name), so two clusters' stacks never collide."""
    from functions.commands.common import default_name

    doc = load()
    cluster = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
    params = {"FunctionName": given, "ClusterId": cluster}
    name = _evaluate(doc["Resources"]["Function"]["Properties"]["FunctionName"], params, doc["Conditions"])
    role = _evaluate(doc["Resources"]["FunctionRole"]["Properties"]["RoleName"], params, doc["Conditions"])
    assert name == (given or default_name(cluster)) and role == name + "-role"
    assert doc["Parameters"]["FunctionName"]["Default"] == ""
    triggers = [r for r in doc["Resources"].values() if r["Type"] == "ALIYUN::FC3::Trigger"]
    assert triggers and all(t["Properties"]["FunctionName"] == {"Fn::GetAtt": ["Function", "FunctionName"]}
                            for t in triggers)


@pytest.mark.parametrize("name", ["ClusterId", "LogProject", "LogStore"])
def test_a_parameter_in_the_roles_resources_takes_what_deploy_takes_and_never_a_ram_wildcard(name):
    """ClusterId, LogProject and LogStore end in the role's RAM resources (cluster/${ClusterId},
    project/${LogProject}/logstore/${LogStore}), where RAM reads * and ? as wildcards: deploy checks each, but a
    stack made from template.yml in ROS's console took any text (ClusterId * granted every cluster of the
    account). The template's pattern is deploy's own."""
    from functions.commands.common import CLUSTER_ID
    from functions.commands.deploy import LOG_PROJECT, LOG_STORE

    pattern = load()["Parameters"][name]["AllowedPattern"]
    ours = {"ClusterId": CLUSTER_ID, "LogProject": LOG_PROJECT, "LogStore": LOG_STORE}[name]
    samples = ["c" + "0123456789abcdef" * 2, "c" + "0" * 31, "C" + "a" * 32, "my-project", "my_store", "ab", "abc",
               "a" * 63, "a" * 64, "-ab", "ab-", "Ab1", "*", "c*", "my-*", "proj?", "a b", "", "x\ny"]
    for value in samples:
        assert bool(re.fullmatch(pattern, value)) == bool(ours.match(value)), value
    for wildcard in ("*", "c*", "my-*", "proj?"):
        assert not re.fullmatch(pattern, wildcard), wildcard
