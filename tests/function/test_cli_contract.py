"""One contract for every command that talks to the cloud (deploy, undeploy, doctor, invoke, status): the same
flags with the same defaults, the same credential chain, input checked before any call, one error line per
failure with the exit code of its cause, no SDK log line on the terminal (functions/commands/common.py,
functions/commands/stack/exit_codes.py, docs/cli.md "Exit codes"). The SDKs talk to loopback emulators."""

import http.server
import json
import os
import re
import subprocess
import sys
import threading

import pytest

from functions.commands import main as cli
from functions.commands.stack import exit_codes as errors
from tests.function.conftest import EVENTS, ROOT
from tests.function.test_deploy import ACCOUNT, CLUSTER, KEY, SECRET, TOKEN, make_deps
from tests.support.cs_emulator import CsEmulator
from tests.support.oss_emulator import OssEmulator
from tests.support.ros_emulator import RosEmulator
from tests.support.sts_emulator import StsEmulator
from tests.support.cli_errors import error_text
from tests.support.stop_now import shutdown_now

pytestmark = pytest.mark.timeout(180)
CLOUD_COMMANDS = ("deploy", "undeploy", "doctor", "invoke", "status", "rollout")
POOL = "np" + "1" * 32
EVENT = os.path.join(ROOT, "examples", "event.json")


def minimal(command):
    """The arguments that make each command go as far as the cloud."""
    return {"deploy": ["--log-project", "my-sls-project", "--log-store", "ack-mig-hook", "--dry-run"],
            "undeploy": ["--yes", "--poll", "0"], "doctor": [], "status": [],
            "invoke": ["--event", EVENT, "--dry-run"], "rollout": ["pause", "--pool", POOL]}[command]


@pytest.fixture
def services(monkeypatch, tmp_path):
    """ROS, OSS, STS and ACK emulators that know the test keys; the environment names their endpoints and
    keeps every command on loopback (no instance metadata, no ~/.aliyun of the machine)."""
    keys = dict(access_key_id=KEY, secret=SECRET, token=TOKEN)
    ros, oss = RosEmulator(steps=1, **keys).start(), OssEmulator(account_id=ACCOUNT, **keys).start()
    sts, cs = StsEmulator(account_id=ACCOUNT, **keys).start(), CsEmulator(cluster_id=CLUSTER, **keys).start()
    for name in ("ALIBABA_CLOUD_PROFILE", "ALIBABA_CLOUD_CREDENTIALS_FILE", "ALIBABA_CLOUD_ROLE_ARN",
                 "ALIBABA_CLOUD_OIDC_TOKEN_FILE", "ALIBABA_CLOUD_CREDENTIALS_URI", "ACK_MIG_CLUSTER_ID",
                 "ACK_MIG_REGION"):
        monkeypatch.delenv(name, raising=False)
    env = {"HOME": str(tmp_path), "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true", "ALIBABA_CLOUD_ACCESS_KEY_ID": KEY,
           "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET, "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN,
           "ACK_MIG_ROS_ENDPOINT": ros.endpoint, "ACK_MIG_OSS_ENDPOINT": oss.endpoint,
           "ACK_MIG_STS_ENDPOINT": sts.endpoint, "ACK_MIG_CS_ENDPOINT": cs.endpoint, "ACK_MIG_API_MAX_ATTEMPTS": "1",
           "ACK_MIG_API_TIMEOUT_S": "5", "ACK_MIG_CLUSTER_ID": CLUSTER, "ACK_MIG_REGION": "cn-beijing"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield {"ros": ros, "oss": oss, "sts": sts, "cs": cs, "env": env}
    for server in (ros, oss, sts, cs):
        server.stop()


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err):
    """The error's text: one line of at most 160 characters, the rest an indented hint (error_text)."""
    assert "internal error" not in err, err
    return error_text(err)


def calls(services):
    return sum(len(services[name].requests) for name in ("ros", "oss", "sts", "cs"))


# ---- the same flags, the same defaults ----

def _options(command):
    parser = cli._build([command])
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict)).choices[command]
    return sub, {o for a in sub._actions for o in a.option_strings}


@pytest.mark.parametrize("command", CLOUD_COMMANDS)
def test_every_cloud_command_takes_the_same_cluster_region_and_profile_flags(command, monkeypatch):
    monkeypatch.setenv("ACK_MIG_CLUSTER_ID", CLUSTER)
    monkeypatch.setenv("ACK_MIG_REGION", "cn-shanghai")
    sub, options = _options(command)
    assert {"--cluster-id", "--region", "--profile"} <= options
    # deploy and rollout never read the Kubernetes API; every other cloud command can be given a kubeconfig
    assert ("--kubeconfig" in options) == (command != "deploy")  # rollout reads it for status
    args = sub.parse_args(["--event", EVENT] if command == "invoke" else minimal(command) if command == "rollout"
                          else [])
    assert (args.cluster_id, args.region, args.profile) == (CLUSTER, "cn-shanghai", "")


# ---- input checked before any call ----

@pytest.mark.parametrize("command", CLOUD_COMMANDS)
@pytest.mark.parametrize("flag, value, fragment", [
    ("--cluster-id", "foo bar", "use c followed by 32 lower-case hex digits, e.g. c3f5e8a1"),
    ("--cluster-id", "c-xxxxxxxx", "is not an ACK cluster id"),
    ("--region", "beijing", "did you mean cn-beijing?"),
    ("--region", "cn-atlantis-1", "is not a region the Alibaba Cloud SDKs know"),
])
def test_a_bad_cluster_id_or_region_is_one_line_exit_2_before_any_call(services, capsys, command, flag, value,
                                                                      fragment):
    code, out, err = run(capsys, command, flag, value, *minimal(command))
    assert code == 2 and fragment in one_line(err) and flag in err
    assert calls(services) == 0


@pytest.mark.parametrize("argv, fragment", [
    (["deploy", "--timeout", "-5"], "use a whole number of minutes, 10..1440"),
    (["undeploy", "--timeout", "100000"], "use a whole number of minutes, 10..1440"),
    (["deploy", "--poll", "-1"], "use a number of seconds, 0..60"),
    (["deploy", "--bucket", "My_Bucket"], "is not an OSS bucket name; use 3-63 lower-case letters"),
    (["deploy", "--bucket", "ab"], "is not an OSS bucket name"),
    (["deploy", "--stack-name", "my stack"], "is not a ROS stack name"),
    (["doctor", "--stack-name", "_stack"], "is not a ROS stack name"),
    (["deploy", "--log-project", "P"], "is not a Simple Log Service project name"),
    (["doctor", "--kubeconfig", "/nonexistent/kubeconfig"], "is not a file"),
])
def test_every_option_is_checked_with_the_accepted_form(services, capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2 and fragment in one_line(err)
    assert calls(services) == 0


def test_a_bad_cluster_id_from_the_environment_is_refused_the_same_way(services, capsys, monkeypatch):
    monkeypatch.setenv("ACK_MIG_CLUSTER_ID", "c0123456789abcdef")  # what the docs used to show
    code, _, err = run(capsys, "doctor")
    assert code == 2 and "'c0123456789abcdef' is not an ACK cluster id" in one_line(err)


# ---- the same cause, the same exit code, in every command ----

@pytest.mark.parametrize("command", CLOUD_COMMANDS)
def test_a_wrong_secret_is_exit_4_in_every_command(services, capsys, monkeypatch, command, tmp_path):
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "not-the-secret")
    extra = ["--deps-dir", make_deps(str(tmp_path / "deps"))] if command == "deploy" else []
    code, out, err = run(capsys, command, *minimal(command), *extra)
    line = one_line(err)
    assert code == errors.EXIT_CREDENTIALS == 4, err
    assert "SignatureDoesNotMatch" in line and "access key and secret" in line
    assert out == ""  # said once, on stderr
    for server in ("ros", "sts", "cs"):
        services[server].rejected.clear()


@pytest.mark.parametrize("command", ("deploy", "undeploy"))
def test_a_missing_sts_token_is_exit_4(services, capsys, monkeypatch, command, tmp_path):
    monkeypatch.delenv("ALIBABA_CLOUD_SECURITY_TOKEN")
    extra = ["--deps-dir", make_deps(str(tmp_path / "deps"))] if command == "deploy" else []
    code, _, err = run(capsys, command, *minimal(command), *extra)
    assert code == 4 and "InvalidSecurityToken" in one_line(err)
    for server in ("ros", "sts"):
        services[server].rejected.clear()


def test_a_missing_ram_permission_is_exit_5(services, capsys):
    services["ros"].fail_next("ListStacks", 403, "Forbidden.RAM")
    code, _, err = run(capsys, "undeploy", *minimal("undeploy"))
    assert code == errors.EXIT_PERMISSION == 5 and "Forbidden.RAM" in one_line(err) and "grant" in err
    services["cs"].fail_next("DescribeClusterNodePools", 403, "Forbidden.RAM")
    code, _, err = run(capsys, "doctor")
    assert code == 5 and "Forbidden.RAM" in one_line(err)


@pytest.mark.parametrize("command", CLOUD_COMMANDS)
def test_no_credentials_is_exit_2_in_every_command(services, command):
    """A fresh process, as a user runs it: alibabacloud_credentials reads the environment when imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_ACCESS_KEY")
           and k != "ALIBABA_CLOUD_SECURITY_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "functions.commands.main", command, *minimal(command)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "credentials" in one_line(done.stderr), done.stderr
    assert done.stdout == "" and calls(services) == 0


@pytest.mark.parametrize("command", CLOUD_COMMANDS)
def test_json_is_json_even_when_the_command_fails(services, command):
    """--json: stdout is one JSON error object (the stderr line's text and the exit code), never plain text."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_ACCESS_KEY")
           and k != "ALIBABA_CLOUD_SECURITY_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "functions.commands.main", command, *minimal(command), "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "credentials" in one_line(done.stderr), done.stderr
    answer = json.loads(done.stdout)
    assert answer["exit_code"] == 2 and "credentials" in answer["error"] and calls(services) == 0


# ---- credentials: --profile ----

def test_profile_takes_that_aliyun_cli_profile_and_names_the_ones_there(services, capsys, monkeypatch, tmp_path):
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"):
        monkeypatch.delenv(name)
    os.makedirs(tmp_path / ".aliyun")
    (tmp_path / ".aliyun" / "config.json").write_text(json.dumps({"current": "default", "profiles": [
        {"name": "default", "mode": "AK", "access_key_id": "LTAIsomeoneelse", "access_key_secret": "nope"},
        {"name": "ops", "mode": "StsToken", "access_key_id": KEY, "access_key_secret": SECRET, "sts_token": TOKEN}]}))
    code, out, err = run(capsys, "undeploy", "--profile", "ops", *minimal("undeploy"))
    assert code == 0 and "nothing to remove" in out, err
    code, _, err = run(capsys, "undeploy", "--profile", "prod", *minimal("undeploy"))
    assert code == 2 and "no such profile" in one_line(err) and "default, ops" in err
    assert not services["ros"].rejected  # (the chain's own choice of the current profile needs a fresh
    # process: alibabacloud_credentials reads the environment when imported; test_deploy.py runs one)


def test_a_profile_whose_keys_are_not_text_is_one_usage_error(services, capsys, monkeypatch, tmp_path):
    """The SDK passes the file's values on as they are: a list for the key id was an internal error."""
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"):
        monkeypatch.delenv(name)
    os.makedirs(tmp_path / ".aliyun")
    (tmp_path / ".aliyun" / "config.json").write_text(json.dumps({"current": "r", "profiles": [
        {"name": "r", "mode": "AK", "access_key_id": ["x"], "access_key_secret": {"a": "b"}}]}))
    code, _, err = run(capsys, "undeploy", "--profile", "r", *minimal("undeploy"))
    assert code == 2 and "access_key_id and access_key_secret must be text" in one_line(err), err
    assert not services["ros"].rejected and "['x']" not in err


# ---- nothing of the SDKs on the terminal ----

class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # a credentials URI that answers 404 (the SDK logs a traceback for each try)
        self.send_response(404)
        self.send_header("content-length", "9")
        self.end_headers()
        self.wfile.write(b"not found")

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("command", ("undeploy", "invoke"))  # main() quiets the SDKs for every command
def test_a_failing_credential_provider_leaves_one_line_on_the_terminal(services, command, tmp_path):
    """alibabacloud_credentials logs each failed provider with a traceback through its own StreamHandler
    ("Refresh credentials failed ..."); the command line shows one line and nothing else."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_ACCESS_KEY")
               and k != "ALIBABA_CLOUD_SECURITY_TOKEN"}
        env["ALIBABA_CLOUD_CREDENTIALS_URI"] = "http://127.0.0.1:%d/credentials" % server.server_address[1]
        done = subprocess.run([sys.executable, "-m", "functions.commands.main", command, *minimal(command)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    finally:
        shutdown_now(server)  # not at its loop's next 0.5 s poll
        server.server_close()
    assert done.returncode == 2 and "credentials" in one_line(done.stderr), done.stderr
    assert "Refresh credentials failed" not in done.stderr and calls(services) == 0


# ---- errors printed once ----

def test_invoke_says_an_error_once(services, capsys, tmp_path):
    event = tmp_path / "typo.json"
    event.write_text(json.dumps({"nodepool_idd": "np-1", "dry_run": True}))
    code, out, err = run(capsys, "invoke", "--event", str(event), "--inventory",
                         os.path.join(ROOT, "examples", "inventory.json"))
    assert code == 2 and out == "" and "payload.nodepool_idd" in one_line(err)
    assert os.path.isfile(os.path.join(EVENTS, "manual.json"))


# ---- the documented exit codes ----

def test_docs_cli_md_lists_the_exit_codes_the_code_uses():
    text = open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8").read()
    section = text[text.index("## Exit codes"):]
    rows = {int(code) for code in re.findall(r"^\| `?(\d+)`? \|", section, re.M)}
    assert rows == {code for code, _ in errors.EXIT_CODES}
