"""``ack-mig-hook deploy`` / ``undeploy`` with the real ROS and OSS SDKs against loopback emulators that
recompute their signatures (tests/support/ros_emulator.py, oss_emulator.py)."""

import io
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest

from functions.commands import main as cli
from functions.commands.stack import build
from tests.support.cs_emulator import CsEmulator
from tests.support.oss_emulator import OssEmulator, crc64_ecma
from tests.support.ros_emulator import RosEmulator
from tests.support.sts_emulator import StsEmulator
from tests.support.cli_errors import error_text, is_one_error

KEY, SECRET, TOKEN = "LTAIdeploykey", "deploy-secret-value-9f2c", "deploy-sts-token-4e1a"
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
ACCOUNT = "1357924680135792"
BUCKET = "ack-mig-hook-%s-cn-beijing" % ACCOUNT  # the default: the caller's account id and the region


def make_deps(folder, tag="py3-none-any", leave_out=()):
    """A pip --target folder as pip writes it: one dist-info (METADATA, WHEEL with its tags) per
    runtime requirement, and a top-level module."""
    os.makedirs(folder, exist_ok=True)
    for requirement in build.runtime_requirements():
        name = build._name(requirement)
        if name in leave_out:
            continue
        info = os.path.join(folder, "%s-1.0.dist-info" % name.replace("-", "_"))
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "METADATA"), "w") as handle:
            handle.write("Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name)
        with open(os.path.join(info, "WHEEL"), "w") as handle:
            handle.write("Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: %s\n" % tag)
        module = os.path.join(folder, name.replace("-", "_"))
        os.makedirs(module, exist_ok=True)
        with open(os.path.join(module, "__init__.py"), "w") as handle:
            handle.write("VERSION = %r\n" % folder)
    return folder


@pytest.fixture
def cloud(monkeypatch, tmp_path):
    ros = RosEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN, steps=2).start()
    oss = OssEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN, account_id=ACCOUNT).start()
    sts = StsEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN, account_id=ACCOUNT).start()
    cs = CsEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN, cluster_id=CLUSTER).start()
    ros.ack = cs  # the cluster's ACK API, for the tests that change what it answers
    ros.code_store = lambda bucket, key: oss.buckets.get(bucket, {}).get(key)  # FC's Code.Checksum check
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aliyun profile of the machine running the tests
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")  # never ask 100.100.100.200
    for name in ("ALIBABA_CLOUD_PROFILE", "ALIBABA_CLOUD_CREDENTIALS_FILE", "ALIBABA_CLOUD_ROLE_ARN",
                 "ALIBABA_CLOUD_OIDC_TOKEN_FILE", "ACK_MIG_CLUSTER_ID", "ACK_MIG_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", SECRET)
    monkeypatch.setenv("ALIBABA_CLOUD_SECURITY_TOKEN", TOKEN)
    monkeypatch.setenv("ACK_MIG_ROS_ENDPOINT", ros.endpoint)
    monkeypatch.setenv("ACK_MIG_OSS_ENDPOINT", oss.endpoint)
    monkeypatch.setenv("ACK_MIG_STS_ENDPOINT", sts.endpoint)
    monkeypatch.setenv("ACK_MIG_CS_ENDPOINT", cs.endpoint)
    yield ros, oss
    ros.stop()
    oss.stop()
    sts.stop()
    cs.stop()
    assert not ros.rejected and not oss.rejected and not sts.rejected and not cs.rejected, (
        ros.rejected, oss.rejected, sts.rejected, cs.rejected)


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def deploy_args(deps, *extra):
    return ("deploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--log-project", "my-sls-project",
            "--log-store", "ack-mig-hook", "--deps-dir", deps, "--poll", "0") + extra


def test_deploy_uploads_the_package_creates_the_stack_and_waits(cloud, capsys, tmp_path):
    ros, oss = cloud
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 0, err
    (stack,) = ros.stacks.values()
    assert stack["Status"] == "CREATE_COMPLETE" and stack["StackName"] == "ack-mig-hook-" + CLUSTER
    params = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert params["ClusterId"] == CLUSTER and params["CodeBucket"] == BUCKET
    # A second cluster in this region gets its own function and RAM role (<FunctionName>-role), never this one.
    assert params["FunctionName"] == "ack-mig-hook-" + CLUSTER
    # The object the stack points at is the one uploaded, named by the package's own hash.
    data = oss.buckets[params["CodeBucket"]][params["CodeObject"]]
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "index.py" in names and "functions/handler.py" in names and "pydantic/__init__.py" in names
    import hashlib

    assert hashlib.sha256(data).hexdigest()[:16] in params["CodeObject"]
    template = os.path.join(os.path.dirname(cli.__file__), "..", "..", "template.yml")  # functions/commands/
    assert stack["_template"] == open(template).read()
    assert "CREATE_IN_PROGRESS" in err and "CREATE_COMPLETE" in err  # progress from the stack's events
    assert "CREATE_COMPLETE" in out and "kubectl get nodes" in out and "doctor" in out
    assert ros.calls("ValidateTemplate") == 1 and ros.calls("GetStack") >= 2
    for text in (out, err, json.dumps(ros.bodies), json.dumps([r.query for r in ros.requests])):
        assert SECRET not in text and TOKEN not in text


def test_rerun_without_change_is_a_no_op_and_a_code_change_updates(cloud, capsys, tmp_path):
    ros, oss = cloud
    deps = make_deps(str(tmp_path / "deps"))
    assert run(capsys, *deploy_args(deps))[0] == 0
    code, out, _ = run(capsys, *deploy_args(deps))
    assert code == 0 and "already up to date" in out
    assert ros.calls("UpdateStack") == 1 and ros.calls("CreateStack") == 1
    (stack,) = ros.stacks.values()
    assert stack["Status"] == "CREATE_COMPLETE"
    # New dependency content -> a new package hash -> a new CodeObject -> ROS updates the function.
    deps2 = make_deps(str(tmp_path / "deps2"))
    code, out, err = run(capsys, *deploy_args(deps2))
    assert code == 0, err
    assert stack["Status"] == "UPDATE_COMPLETE" and "UPDATE_COMPLETE" in out
    assert len(oss.buckets[BUCKET]) == 2


def test_dry_run_validates_and_changes_nothing(cloud, capsys, tmp_path):
    ros, oss = cloud
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--dry-run",
                                              "--parameter", "DryRun=true"))
    assert code == 0, err
    assert "would upload oss://%s/ack-mig-hook/" % BUCKET in out
    assert "plan: create stack ack-mig-hook-%s in cn-beijing, from ROS PreviewStack" % CLUSTER in out
    assert re.search(r"^    DryRun +true \(default false\)$", out, re.M), out
    assert not ros.stacks and not ros.change_sets and not oss.buckets
    assert {r.action for r in ros.requests} == {"ValidateTemplate", "ListStacks", "PreviewStack"}
    assert {verb for verb, _ in oss.requests} <= {"GET", "HEAD"}  # read-only: the bucket is looked at


def test_a_failed_stack_is_one_error_line_with_the_reason(cloud, capsys, tmp_path):
    ros, _ = cloud
    ros.fail_with = "Resource Function: the bucket is in another region"
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 1
    # ROS rolls a failed create back by default: the events show the failure, the stack ends rolled back.
    assert "CREATE_FAILED" in err and "CREATE_ROLLBACK_COMPLETE" in err.splitlines()[-1]
    assert "another region" in err.splitlines()[-1] and "Traceback" not in err
    # Nothing to update in a stack whose creation failed: the next deploy says how to start over.
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 6 and "its creation failed" in err and "ack-mig-hook undeploy --region cn-beijing" in err
    assert ros.calls("UpdateStack") == 0
    assert run(capsys, "undeploy", "--region", "cn-beijing", "--cluster-id", CLUSTER, "--poll", "0", "--yes")[0] == 0
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 0 and "CREATE_COMPLETE" in out, err


def test_bad_input_is_reported_at_once_and_calls_nothing(cloud, capsys, tmp_path):
    ros, oss = cloud
    code, out, err = run(capsys, "deploy", "--parameter", "NoSuch=1", "--parameter", "DryRun=maybe",
                         "--deps-dir", str(tmp_path))
    assert code == 2 and is_one_error(err)
    flat = " ".join(err.split())  # the hint is wrapped to the terminal: compare the words
    for part in ("--region", "NoSuch", "DryRun='maybe'", "ClusterId (--cluster-id)", "LogProject (--log-project)"):
        assert part in flat
    assert not ros.requests and not oss.requests


def test_a_package_missing_a_dependency_or_built_for_another_platform_stops_the_deploy(cloud, capsys, tmp_path):
    ros, oss = cloud
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "a"), leave_out=("pydantic",))))
    assert code == 1 and "would lack pydantic" in err
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "b"), tag="cp311-cp311-win_amd64")))
    assert code == 1 and "another Python or platform" in err and "cp311-cp311-win_amd64" in err
    assert not ros.stacks and not oss.requests


def test_wheel_tags_fc_can_load():
    assert build._fits_fc("cp310-cp310-manylinux_2_17_x86_64")
    assert build._fits_fc("cp37-abi3-manylinux2014_x86_64") and build._fits_fc("py2.py3-none-any")
    assert not build._fits_fc("cp310-cp310-manylinux_2_17_aarch64")
    assert not build._fits_fc("cp312-cp312-manylinux_2_17_x86_64")
    assert not build._fits_fc("cp310-cp310-macosx_11_0_arm64")


def test_deploy_only_dependencies_stay_out_of_the_function_package():
    names = {build._name(r) for r in build.runtime_requirements()}
    assert "pydantic" in names and "alibabacloud-cs20151215" in names
    assert not names & {"oss2", "alibabacloud-ros20190910", "pyyaml", "pytest"}


def test_undeploy_deletes_and_waits_then_finds_nothing(cloud, capsys, tmp_path):
    ros, _ = cloud
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))[0] == 0
    code, out, err = run(capsys, "undeploy", "--region", "cn-beijing", "--cluster-id", CLUSTER, "--poll", "0", "--yes")
    assert code == 0 and "deleted" in out
    (stack,) = ros.stacks.values()
    assert stack["Status"] == "DELETE_COMPLETE"
    code, out, _ = run(capsys, "undeploy", "--region", "cn-beijing", "--cluster-id", CLUSTER, "--poll", "0", "--yes")
    assert code == 0 and "nothing to remove" in out


def test_credentials_come_from_the_aliyun_cli_profile(cloud, tmp_path):
    # alibabacloud_credentials reads the environment when it is imported, so this runs the command as a
    # user does: a fresh process with its own environment.
    ros, _ = cloud
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_ACCESS_KEY")
           and k != "ALIBABA_CLOUD_SECURITY_TOKEN"}
    command = [sys.executable, "-m", "functions.commands.main", "undeploy", "--region", "cn-beijing"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # Without any source: one line that says where credentials can come from.
    done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "aliyun configure" in done.stderr, done.stderr
    assert is_one_error(done.stderr) and not ros.requests
    # The `aliyun` CLI's profile file (StsToken mode) is picked up, and its keys sign the calls.
    os.makedirs(tmp_path / ".aliyun")
    (tmp_path / ".aliyun" / "config.json").write_text(json.dumps({"current": "default", "profiles": [
        {"name": "default", "mode": "StsToken", "access_key_id": KEY, "access_key_secret": SECRET,
         "sts_token": TOKEN, "region_id": "cn-beijing"}]}))
    done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "nothing to remove" in done.stdout and ros.calls("ListStacks") == 1 and not ros.rejected


def test_dry_run_first_then_live_with_one_parameter_update(cloud, capsys, tmp_path):
    """docs/deploy.md's path: deploy with DryRun=true, upgrade (rerun without the parameter: the stack keeps
    it, UsePreviousParameters), then one update with DryRun=false goes live; nothing else changes."""
    ros, _ = cloud
    deps = make_deps(str(tmp_path / "deps"))

    def values():
        (stack,) = ros.stacks.values()
        return {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}

    assert run(capsys, *deploy_args(deps, "--parameter", "DryRun=true", "--parameter", "DrainTimeoutS=1200"))[0] == 0
    assert values()["DryRun"] == "true"
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2"))))  # a new package: an upgrade
    assert code == 0, err
    assert values()["DryRun"] == "true" and values()["DrainTimeoutS"] == "1200"
    assert ros.calls("UpdateStack") == 1
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2")), "--parameter", "DryRun=false"))
    assert code == 0, err
    assert values()["DryRun"] == "false" and values()["DrainTimeoutS"] == "1200"
    (stack,) = ros.stacks.values()
    assert stack["Status"] == "UPDATE_COMPLETE" and ros.calls("UpdateStack") == 2


def test_a_parameter_outside_the_templates_range_is_refused_before_any_call(cloud, capsys, tmp_path):
    ros, oss = cloud
    code, _, err = run(capsys, *deploy_args(str(tmp_path), "--parameter", "NodeTimeoutS=5", "--parameter",
                                            "MaxUnavailable=0", "--parameter", "StartupTaint=oops"))
    assert code == 2 and is_one_error(err)
    assert "NodeTimeoutS='5'" in err and "10..14400" in err and "MaxUnavailable='0'" in err and "StartupTaint" in err
    # ROS's Number takes 600.5; the function reads whole seconds, so deploy refuses it.
    code, _, err = run(capsys, *deploy_args(str(tmp_path), "--parameter", "DrainTimeoutS=600.5"))
    assert code == 2 and "DrainTimeoutS='600.5'" in err and "whole number" in err
    assert not ros.requests and not oss.requests


def _ssh_stack(capsys, tmp_path):
    """Deploys a stack of the ssh transport whose package carries a known_hosts file; returns the file."""
    known = tmp_path / "known_hosts"
    known.write_text("192.168.0.9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUm\n")
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--transport", "ssh",
                                            "--known-hosts", str(known), "--parameter", "SshKeySecretName=mig-key"))
    assert code == 0, err
    return known


def test_ssh_deploy_packages_known_hosts_and_points_the_function_at_it(cloud, capsys, tmp_path):
    ros, oss = cloud
    known = _ssh_stack(capsys, tmp_path)
    (stack,) = ros.stacks.values()
    params = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert params["SshKnownHosts"] == "/code/known_hosts" and params["Transport"] == "ssh"
    data = oss.buckets[params["CodeBucket"]][params["CodeObject"]]
    assert zipfile.ZipFile(io.BytesIO(data)).read("known_hosts") == known.read_bytes()
    code, _, err = run(capsys, *deploy_args(str(tmp_path), "--known-hosts", str(tmp_path / "nope")))
    assert code == 2 and "--known-hosts" in err and is_one_error(err)


def test_a_known_hosts_file_the_function_could_not_load_is_refused_before_any_call(cloud, capsys, tmp_path):
    """paramiko, which checks the nodes' host keys in the function, fails to load a known_hosts file with an
    OpenSSH marker (@revoked, @cert-authority) or a key that does not decode, on every connection: every node
    would end internal-error once deployed. deploy refuses such a file at once, naming its line, and calls
    nothing; ``python -m functions.commands.package --known-hosts`` likewise."""
    ros, oss = cloud
    known = tmp_path / "known_hosts"
    known.write_text("192.168.0.9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUm\n"
                     "@revoked 192.168.0.9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUm\n")
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--transport", "ssh",
                                              "--known-hosts", str(known), "--parameter", "SshKeySecretName=mig-key"))
    flat = " ".join(err.split())
    assert code == 2 and is_one_error(err) and "--known-hosts" in flat and "line 2: @revoked" in flat, err
    assert not ros.requests and not oss.requests
    package = subprocess.run([sys.executable, "-m", "functions.commands.package", "--out", str(tmp_path / "x.zip"),
                              "--sources-only", "--known-hosts", str(known)], capture_output=True, text=True,
                             timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert package.returncode == 2 and "line 2: @revoked" in package.stderr and "Traceback" not in package.stderr
    assert not os.path.exists(tmp_path / "x.zip")


def test_an_upgrade_keeps_the_stacks_previous_values(cloud, capsys, tmp_path):
    ros, _ = cloud
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--parameter", "LogLevel=DEBUG"))[0] == 0
    # A new package later: the log settings are not given again, and the stack keeps them.
    code, out, err = run(capsys, "deploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--deps-dir",
                         make_deps(str(tmp_path / "deps2")), "--poll", "0")
    assert code == 0, err
    (stack,) = ros.stacks.values()
    params = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert stack["Status"] == "UPDATE_COMPLETE" and params["LogProject"] == "my-sls-project" and params["LogStore"] == "ack-mig-hook"
    assert params["LogLevel"] == "DEBUG"
    # Creating a stack still needs them, named at once.
    code, _, err = run(capsys, "deploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--deps-dir",
                       make_deps(str(tmp_path / "deps3")), "--stack-name", "other")
    assert code == 2 and "LogProject (--log-project), LogStore (--log-store)" in err


def test_the_package_command_never_builds_a_package_without_its_dependencies(tmp_path):
    """Without --deps it fetches them for FC (here pip is offline, so it fails in one line and writes
    nothing); with a --deps folder it checks it; only --sources-only leaves them out, and says so."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # an empty dependency cache of its own (deploy keeps one per lock under XDG_CACHE_HOME, which another run
    # on this machine may have filled) and an offline pip
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path), PIP_CONFIG_FILE=os.devnull,
               XDG_CACHE_HOME=str(tmp_path / "cache"))
    out = tmp_path / "pkg.zip"
    command = [sys.executable, "-m", "functions.commands.package", "--out", str(out)]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "pip could not fetch" in done.stderr and not out.exists()
    assert done.stderr.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in done.stderr
    done = subprocess.run(command + ["--deps", make_deps(str(tmp_path / "deps"), leave_out=("pydantic",))],
                          cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "would lack pydantic" in done.stderr and not out.exists()
    done = subprocess.run(command + ["--deps", make_deps(str(tmp_path / "deps2"))], cwd=root, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "dependencies checked" in done.stdout
    assert "pydantic/__init__.py" in zipfile.ZipFile(out).namelist()
    done = subprocess.run(command + ["--sources-only"], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "cannot run in FC" in done.stdout
    assert "pydantic/__init__.py" not in zipfile.ZipFile(out).namelist()


def test_an_unknown_parameter_names_the_close_ones_and_never_the_whole_list(cloud, capsys, tmp_path):
    ros, oss = cloud
    code, _, err = run(capsys, "deploy", "--region", "cn-beijing", "--parameter", "Transprt=ssh",
                       "--deps-dir", str(tmp_path))
    flat = " ".join(err.split())
    assert code == 2 and "no parameter 'Transprt' (did you mean Transport?)" in flat
    code, _, err = run(capsys, "deploy", "--region", "cn-beijing", "--parameter", "Zzz=1", "--deps-dir", str(tmp_path))
    flat = " ".join(err.split())
    assert code == 2 and "(it has FunctionName, ClusterId," in flat and "more)" in flat and "AutoPoolSchedule" not in flat
    assert not ros.requests and not oss.requests


@pytest.mark.parametrize("given, flag", [("CodeBucket=X_", "--bucket"), ("LogProject=A", "--log-project"),
                                         ("ClusterId=c1", "--cluster-id"), ("Transport=ssh", "--transport")])
def test_a_parameter_deploy_sets_from_its_own_flag_is_refused_as_a_parameter(cloud, capsys, tmp_path, given, flag):
    """Given with --parameter, CodeBucket=X_ went past --bucket's name check, and a given bucket was silently
    replaced by the flag's value (found by the docs audit)."""
    ros, oss = cloud
    code, _, err = run(capsys, "deploy", "--region", "cn-beijing", "--cluster-id", CLUSTER, "--parameter", given,
                       "--deps-dir", str(tmp_path))
    flat = " ".join(err.split())
    assert code == 2 and "--parameter %s is set by %s, not --parameter" % (given.split("=")[0], flag) in flat, flat
    assert not ros.requests and not oss.requests


def test_an_upgrade_of_a_stack_named_by_the_old_default_keeps_its_function_name(cloud, capsys, tmp_path):
    """A stack created when the template's FunctionName default was ack-mig-hook, without the parameter: an
    upgrade passes the name it has, so ROS does not give the new default (empty: ack-mig-hook-<ClusterId>) and
    replace the function and its role under another name."""
    ros, _ = cloud
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))[0] == 0
    (stack,) = ros.stacks.values()
    # as a stack of the old template is: FunctionName never passed, its default ack-mig-hook
    stack["Parameters"] = [p for p in stack["Parameters"] if p["ParameterKey"] != "FunctionName"]
    stack["_template"] = stack["_template"].replace("    Default: ''\n", "    Default: ack-mig-hook\n", 1)
    listed = {p["ParameterKey"]: p["ParameterValue"] for p in ros._listed_parameters(stack)}
    assert listed["FunctionName"] == "ack-mig-hook"
    code, _, err = run(capsys, "deploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--deps-dir",
                       make_deps(str(tmp_path / "deps2")), "--poll", "0")
    assert code == 0, err
    params = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert stack["Status"] == "UPDATE_COMPLETE" and params["FunctionName"] == "ack-mig-hook"


def test_an_update_clears_the_known_hosts_with_no_known_hosts(cloud, capsys, tmp_path):
    """--parameter SshKnownHosts=... is refused (--known-hosts sets it), and --known-hosts only sets a file: the
    operator who moves a stack back to cloud-assistant clears it with --no-known-hosts. Run as a person runs it:
    the command in its own process."""
    ros, oss = cloud
    known = _ssh_stack(capsys, tmp_path)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def deploy(*extra):
        command = [sys.executable, "-m", "functions.commands.main", "deploy", "--cluster-id", CLUSTER, "--region",
                   "cn-beijing", "--deps-dir", make_deps(str(tmp_path / "deps2")), "--poll", "0"] + list(extra)
        return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=120)

    def values():
        (stack,) = ros.stacks.values()
        return {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}

    # both, or clearing while the transport is ssh (it verifies host keys): one line, before any call
    calls = len(ros.requests)
    for extra in (("--known-hosts", str(known), "--no-known-hosts"), ("--transport", "ssh", "--no-known-hosts")):
        done = deploy(*extra)
        assert done.returncode == 2 and is_one_error(done.stderr), done.stderr
        assert "--no-known-hosts" in done.stderr and "Traceback" not in done.stderr
    assert len(ros.requests) == calls and values()["SshKnownHosts"] == "/code/known_hosts"
    done = deploy("--no-known-hosts")  # the stack's transport is ssh: refused before anything is built
    assert done.returncode == 2 and is_one_error(done.stderr) and "--transport cloud-assistant" in done.stderr
    assert not ros.calls("UpdateStack") and values()["SshKnownHosts"] == "/code/known_hosts"
    done = deploy("--transport", "cloud-assistant", "--no-known-hosts")
    assert done.returncode == 0, done.stderr
    assert values()["SshKnownHosts"] == "" and values()["Transport"] == "cloud-assistant"
    assert values()["SshKeySecretName"] == "mig-key"  # what was not named keeps its value
    data = oss.buckets[values()["CodeBucket"]][values()["CodeObject"]]
    assert "known_hosts" not in zipfile.ZipFile(io.BytesIO(data)).namelist()


def test_an_upgrade_of_an_ssh_stack_without_known_hosts_is_refused_before_it_drops_the_file(cloud, capsys, tmp_path):
    """SshKnownHosts=/code/known_hosts names a file of the code package, and only --known-hosts puts it there:
    an upgrade without it built a package without the file while the stack kept the parameter (an update keeps
    what it is not given), and every ssh delivery failed for want of the host keys."""
    ros, oss = cloud
    known = _ssh_stack(capsys, tmp_path)
    (stack,) = ros.stacks.values()
    object_before = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}["CodeObject"]
    uploads = len(oss.requests)
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2"))))
    assert code == 2 and is_one_error(err), err
    flat = " ".join(err.split())
    assert "/code/known_hosts" in flat and "--known-hosts FILE" in flat and "--no-known-hosts" in flat
    assert not ros.calls("UpdateStack") and len(oss.requests) == uploads
    params = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert params["CodeObject"] == object_before
    # with the file again, the upgrade goes, and the new package carries it
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2")), "--known-hosts", str(known)))
    assert code == 0, err
    params = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert params["CodeObject"] != object_before and params["SshKnownHosts"] == "/code/known_hosts"
    data = oss.buckets[params["CodeBucket"]][params["CodeObject"]]
    assert zipfile.ZipFile(io.BytesIO(data)).read("known_hosts") == known.read_bytes()


def foreign_stacks(ros) -> str:
    """Two stacks of the region that are not this cluster's: ``st-other`` serving another cluster (returned)
    under the default name it would have, and ``st-vpc`` named ``network`` with no ClusterId parameter."""
    other = "c" + "0" * 32
    ros.put_stack("st-other", "ack-mig-hook-" + other, ClusterId=other)
    ros.put_stack("st-vpc", "network", VpcName="prod")
    return other


def test_a_stack_name_of_another_cluster_or_of_no_cluster_is_never_updated(cloud, capsys, tmp_path):
    """``deploy --stack-name`` naming a stack that serves another cluster would move it (and its function) to
    this one; one that is no ack-mig-hook stack would lose every resource to template.yml's. Both stop before
    anything is built or uploaded."""
    ros, oss = cloud
    other = foreign_stacks(ros)
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps")), "--stack-name", "ack-mig-hook-" + other))
    assert code == 6 and "serves cluster %s, not %s" % (other, CLUSTER) in error_text(err), err
    code, _, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps2")), "--stack-name", "network"))
    assert code == 6 and "has no ClusterId parameter: not a stack ack-mig-hook deploy made" in error_text(err), err
    assert ros.calls("UpdateStack") == 0 and ros.stacks["st-other"]["Parameters"][0]["ParameterValue"] == other
    assert not [r for r in oss.requests if r[0] == "PUT"]  # nothing uploaded


@pytest.mark.parametrize("given", ["SshKeySecretName=*", "NotifyUrlSecretName=prod/*", "SshKeySecretName=mig-key?",
                                   "NotifyUrlSecretName=a b"])
def test_a_secret_name_that_would_widen_the_kms_grant_is_refused_before_any_call(cloud, capsys, tmp_path, given):
    """The role's kms:GetSecretValue names the secret: acs:kms:...:secret/<SshKeySecretName>. RAM reads * and ?
    in a resource as wildcards, so SshKeySecretName=* granted the function every secret of the account. KMS
    secret names are letters, digits and _ / + = . - @ (CreateSecret), which is all the template accepts."""
    ros, oss = cloud
    code, _, err = run(capsys, *deploy_args(str(tmp_path), "--parameter", given))
    assert code == 2 and is_one_error(err), err
    assert given.split("=")[0] in err and "_/+=.@-" in err.replace("\\", "")
    assert not ros.requests and not oss.requests


@pytest.mark.contract_exempt("GetStack answering a Status with terminal escape sequences in it")
def test_deploy_never_prints_the_stacks_status_raw(cloud, capsys, tmp_path):
    """deploy's last line quotes the status GetStack answered; one that ends in _COMPLETE passes as done
    whatever comes before it, and an escape sequence there (OSC 52 sets the clipboard) reached the terminal
    raw. It is written visibly now, as wait writes it (test_wait_hostile_status.py)."""
    ros, oss = cloud
    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2KCREATE_COMPLETE"
    ros.tamper_next("GetStack", lambda payload: dict(payload, Status=hostile))
    code, out, err = run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[2KCREATE_COMPLETE" in out, repr(out)


@pytest.fixture
def sdk_loggers():
    """The SDK loggers as they were: --debug gives them a handler on the stderr of its run."""
    import logging

    from functions.commands.common import SDK_LOGGERS

    saved = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).level,
                    logging.getLogger(name).disabled, logging.getLogger(name).propagate) for name in SDK_LOGGERS}
    yield
    for name, (handlers, level, disabled, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers, logger.disabled, logger.propagate = handlers, disabled, propagate
        logger.setLevel(level)


def test_the_sdks_debug_records_are_masked_where_they_are_formatted():
    """The SDK records' own formatter masks what they carry, not only the terminal's last pass (a handler that
    writes them elsewhere, a file or a pipe, gets them masked too): oss2's signed headers, as its http.py logs
    them, with the STS token and the signature."""
    import logging

    from functions.base.logs import sdk_log_formatter

    record = logging.LogRecord("oss2.http", logging.DEBUG, __file__, 1, "Send request, method: %s, headers: %s",
                               ("PUT", {"x-oss-security-token": TOKEN, "Authorization": "OSS4-HMAC-SHA256 Credential="
                                        "%s/20261207/cn-beijing/oss/aliyun_v4_request,Signature=%s" % (KEY, "ab" * 32)}),
                               None)
    line = sdk_log_formatter("%(name)s: %(message)s").format(record)
    assert line.startswith("oss2.http: Send request, method: PUT") and TOKEN not in line and "ab" * 32 not in line, line


def test_debug_shows_the_sdks_requests_but_never_the_credentials_they_carry(cloud, capsys, tmp_path, sdk_loggers):
    """--debug puts the cloud SDKs' own log records on stderr, output a user pastes into an issue. oss2 logs each
    request's signed headers (http.py "Send request ... headers") and its V4 canonical request (auth.py "Make
    signature"), both with the STS token (x-oss-security-token) and the signature (Authorization): those are
    masked there as in every other line; the requests themselves are still shown."""
    code, out, err = run(capsys, "--debug", *deploy_args(make_deps(str(tmp_path / "deps")), "--dry-run"))
    assert code == 0, err
    assert "ack-mig-hook: debug: oss2" in err and "Send request" in err, err[-3000:]
    for secret in (TOKEN, SECRET):
        leaks = [line[:160] for line in (out + err).splitlines() if secret in line]
        assert not leaks, leaks[:3]
    signatures = re.findall(r"Signature=[0-9a-f]{16,}", err)
    assert not signatures, signatures[:2]
