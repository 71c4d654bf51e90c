"""One install, one contract: without the deploy extra every command's --help works, and a command that
needs the extra says which in one line, exit 2, never a traceback. The extra's absence is real inside the
child process: an import hook refuses its modules as a venv without them would (ModuleNotFoundError)."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from functions.commands.main import COMMANDS, EXTRA_MODULES, INSTALL_EXTRA

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"

WITHOUT_EXTRA = textwrap.dedent("""
    import sys
    BLOCKED = %r

    class NoExtra:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError("No module named %%r" %% name, name=name)
            return None

    sys.meta_path.insert(0, NoExtra())
    from functions.commands.main import main
    sys.exit(main(sys.argv[1:]))
""") % (EXTRA_MODULES,)


def without_extra(*argv, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=ROOT, ACK_MIG_CLUSTER_ID="", ACK_MIG_REGION="")
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRA] + list(argv), capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=60)


def test_every_help_works_without_the_extra():
    for command in COMMANDS:
        done = without_extra(command, "--help")
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.startswith("usage: ack-mig-hook %s" % command), command
        assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize("argv", [
    ["deploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--dry-run"],
    ["undeploy", "--cluster-id", CLUSTER, "--region", "cn-beijing"],
])
def test_a_command_that_needs_the_extra_names_it(argv):
    done = without_extra(*argv)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and INSTALL_EXTRA in lines[0] and argv[0] in lines[0], done.stderr
    assert done.stdout == ""


def test_convert_of_yaml_names_the_extra_and_json_needs_none(tmp_path):
    yaml_file = tmp_path / "config.yaml"
    yaml_file.write_text("version: v1\nmig-configs:\n  all-1g:\n    - devices: all\n      mig-enabled: true\n")
    done = without_extra("convert", "--from-mig-parted", str(yaml_file), "--gpu", "A100-SXM4-40GB")
    assert done.returncode == 2 and INSTALL_EXTRA in done.stderr and "Traceback" not in done.stderr, done.stderr
    json_file = tmp_path / "config.json"
    json_file.write_text(json.dumps({"version": "v1", "mig-configs": {"all-3g": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]}}))
    done = without_extra("convert", "--from-mig-parted", str(json_file), "--gpu", "A100-SXM4-40GB")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "all-3g: ack.aliyun.com/gpu-partition-sequence=3g.20gb-3g.20gb\n"


def test_usage_errors_go_to_stderr():
    done = without_extra()
    assert done.returncode == 2 and done.stdout == "" and "usage: ack-mig-hook" in done.stderr
    done = without_extra("plan", "--gpu", "H200", "--size", "7g.141gb", "--bogus")
    assert done.returncode == 2 and done.stdout == "" and "--bogus" in done.stderr


POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"
# Each command as it runs against the cloud (credentials, no snapshot): the credential chain, ROS, OSS, FC, SLS
# and shtab are the deploy extra's. The endpoints are closed loopback ports: nothing would leave the machine.
CLOUD_RUNS = {
    "invoke": ["invoke", "--event", os.path.join(ROOT, "examples", "event.json"), "--cluster-id", CLUSTER,
               "--region", "cn-beijing", "--dry-run"],
    "status": ["status", "--cluster-id", CLUSTER, "--region", "cn-beijing"],
    "advise": ["advise", "--pool", "llm-auto", "--cluster-id", CLUSTER, "--region", "cn-beijing"],
    "rollout": ["rollout", "pause", "--pool", POOL, "--cluster-id", CLUSTER, "--region", "cn-beijing"],
    "deploy": ["deploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--log-project", "my-sls-project",
               "--log-store", "ack-mig-hook"],
    "undeploy": ["undeploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--yes"],
    "doctor": ["doctor", "--cluster-id", CLUSTER, "--region", "cn-beijing"],
    "wait": ["wait", "--cluster-id", CLUSTER, "--region", "cn-beijing"],
    "logs": ["logs", "--cluster-id", CLUSTER, "--region", "cn-beijing"],
    "completion": ["completion", "bash"],
}


def _needs_column():
    """docs/cli.md's command table: command (first word of the first column) -> its "needs" cells, joined."""
    needs = {}
    for line in open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8"):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 3 and re.match(r"`[a-z]", cells[0]):
            for command in set(re.findall(r"`([a-z]+)", cells[0])):
                needs[command] = needs.get(command, "") + " " + cells[2]
    return needs


def test_docs_cli_md_says_each_command_that_needs_the_extra_needs_it(monkeypatch):
    """docs/cli.md's table says what each command needs. Every command whose cloud run the extra's absence stops
    says "deploy extra" there: a reader who installed the package alone and was told `status` needs credentials
    got "status needs the deploy extra" instead."""
    for name in ("CS", "ROS", "OSS", "STS", "FC", "SLS", "ECS", "ESS", "KMS", "VPC"):
        monkeypatch.setenv("ACK_MIG_%s_ENDPOINT" % name, "http://127.0.0.1:9")
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")
    needs, wrong = _needs_column(), []
    assert set(CLOUD_RUNS) <= set(needs), set(CLOUD_RUNS) - set(needs)
    for command, argv in CLOUD_RUNS.items():
        done = without_extra(*argv)
        assert done.returncode == 2 and INSTALL_EXTRA in " ".join(done.stderr.split()), (command, done.stderr)
        if "deploy extra" not in needs[command]:
            wrong.append("%s: %s" % (command, needs[command].strip()))
    assert not wrong, "docs/cli.md does not say these need the deploy extra:\n" + "\n".join(wrong)
