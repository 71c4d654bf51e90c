"""The cloud commands the pages show (``deploy``, ``undeploy``, ``doctor``, ``status``, ``rollout``, ``wait``,
``logs``, ``invoke --remote``), run as written: tests/test_docs_commands.py only checks their options against
``--help``, since they need a cloud account. Here each page's commands run in the page's order, each as its own
process of the installed ``ack-mig-hook``, from a shell with no ``ACK_MIG_CLUSTER_ID`` or ``ACK_MIG_REGION`` (a
page that relies on an ``export`` shows it: docs/first-deployment.md, run by its own test), against the loopback
emulators: ACK, ECS, ROS, OSS, STS, FC, SLS and the Kubernetes API server the kubeconfig ACK issues names. The
pages' ids (cluster, pool, nodes) are those of examples/inventory.json, which the ACK emulator serves.

What the test adds to a command, and why: ``--deps-dir`` to ``deploy`` (it would fetch the function's
dependencies from PyPI), ``--poll 0`` to ``deploy`` and ``undeploy`` (ROS's emulator finishes at once; the
commands' own polling is run in tests/function/test_wheel_install.py). A confirmation a command asks for is
answered ``y`` on a terminal, as a person does. A ``text`` block right after a command's block is the first
command's sample output: what it prints must read the same, ``...`` standing for what changes."""

import os
import pty
import re
import shlex
import subprocess
import time

import pytest

from tests.function.conftest import AK, ROOT, SECRET, TOKEN
from tests.function.test_doctor import cloud  # noqa: F401  (fixture: ACK, ECS, ROS, Kubernetes API)
from tests.function.test_first_deployment import PageWorld
from tests.function.test_remote_and_logs import seed_stack
from tests.support.fc_emulator import FcEmulator
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)
from tests.support.sls_emulator import SlsEmulator
from tests.test_docs_commands import SHOWN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
CLOUD = re.compile(r"^(?:\.venv/bin/)?ack-mig-hook\s+(deploy|undeploy|doctor|status|rollout|wait|logs|invoke)\b")
PAGES = ("README.md", "docs/cli.md", "docs/deploy.md", "docs/operations.md", "docs/troubleshooting.md")
PROGRAM = os.path.join(ROOT, ".venv", "bin", "ack-mig-hook")
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"
# The exit a command shown ends with on the emulated cluster, when not 0: doctor finds the snapshot's deliberate
# problems (a pool whose label has a typo, an agent that is not running).
EXPECTED = {"doctor": 1}
DEPLOYED = ("docs/cli.md", "docs/operations.md", "docs/troubleshooting.md")  # reference pages: a reader has deployed


def page_commands(page):
    """The page's cloud commands, in its order, continuation lines joined."""
    return [cmd.replace("\\\n", " ") for where, cmd, _ in SHOWN
            if where.split(":")[0] == page and CLOUD.match(cmd.strip())]


def samples(page):
    """{first command of a shell block: the ``text`` block right after it}, its sample output."""
    lines, found, i = open(os.path.join(ROOT, page), encoding="utf-8").read().splitlines(), {}, 0
    while i < len(lines):
        if lines[i].strip() in ("```sh", "```bash"):
            end = lines.index("```", i + 1)
            after = end + 1 + (lines[end + 1:end + 2] == [""])
            if after < len(lines) and lines[after].strip() == "```text":
                first = " ".join(lines[i + 1].rstrip("\\").split())
                found[first] = lines[after + 1:lines.index("```", after + 1)]
            i = end
        i += 1
    return found


def shows(sample, out):
    """Whether ``out`` is what ``sample`` shows, read with its wrapping undone; ``...`` stands for any text."""
    said = " ".join(" ".join(sample).split())
    pattern = ".*?".join(re.escape(part.strip()) for part in said.split("..."))
    return re.fullmatch(r"\s*" + pattern + r"\s*", " ".join(out.split())) is not None


def test_the_pages_show_the_cloud_commands():
    shown = {page: page_commands(page) for page in PAGES}
    assert all(shown.values()), shown
    kinds = {CLOUD.match(c).group(1) for cmds in shown.values() for c in cmds}
    assert kinds == {"deploy", "undeploy", "doctor", "status", "rollout", "wait", "logs", "invoke"}, kinds


def rolled_out(world):
    """The example pool's rollout done, as the function leaves it: its new node joined (ACK names it), each node
    labelled with the pool's layout, so ``rollout status`` (which follows a rollout until it is complete) ends."""
    for node in world.emulator.nodes:
        if node.get("nodepool_id") == POOL:
            if node.get("state") == "initial":
                node.update(state="running", node_name="cn-beijing.192.168.12.52")
            world.kube.add_node(node["node_name"], labels={
                "alibabacloud.com/nodepool-id": POOL, "nvidia.com/mig.config.state": "success",
                "aliyun.accelerator/nvidia_mig_sequence": "3g.20gb-3g.20gb"})


def home_of(word, home):
    """A word as the shell gives it: ``~/`` is the home folder."""
    return str(home) + word[1:] if word.startswith("~/") else word


def deployed(world, env, cwd):
    """What a reference page assumes: the hook deployed (its stack, function and logstore), and a stack of the
    old default name, ``ack-mig-hook``, that the pages' ``--stack-name`` examples name."""
    argv = [PROGRAM, "deploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--log-project", "my-sls-project",
            "--log-store", "ack-mig-hook", "--deps-dir", world.deps, "--poll", "0"]
    done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-1000:]
    seed_stack(world.ros, name="ack-mig-hook", function="ack-mig-hook")


def _confirmed(argv, env, cwd):
    """The command on a terminal, answered ``y`` when it asks."""
    master, slave = pty.openpty()
    try:
        os.write(master, b"y\n")
        done = subprocess.run(argv, cwd=cwd, env=env, stdin=slave, capture_output=True, text=True, timeout=300)
    finally:
        os.close(slave)
        os.close(master)
    return done


@pytest.mark.parametrize("page", PAGES)
def test_every_cloud_command_a_page_shows_runs_as_written(page, cloud, monkeypatch, tmp_path):  # noqa: F811
    world = PageWorld(cloud, monkeypatch, tmp_path)
    fc = FcEmulator(functions=("ack-mig-hook-" + CLUSTER, "ack-mig-hook"), access_key_id=AK, secret=SECRET,
                    token=TOKEN).start()
    sls = SlsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN).start()
    failures, ran = [], []
    try:
        rolled_out(world)
        sls.add("my-sls-project", "ack-mig-hook", int(time.time()) - 600, {  # docs/cli.md's sample line
            "time": "2026-10-01T02:14:09Z", "level": "ERROR", "message": "node result", "node_name": "cn-beijing.192.168.12.31",
            "instance_id": "i-2zeb7c1mig0a100x1k4d", "nodepool_id": POOL, "outcome": "failed", "code": "nvml-error",
            "duration_ms": 4210, "request_id": "req-1", "reason": "nvidia-smi mig -cgi failed"})
        # The reader's kubeconfig (docs/cli.md's doctor --kubeconfig ~/.kube/config), known_hosts (docs/deploy.md)
        home = tmp_path / "home"
        (home / ".kube").mkdir(parents=True)
        world.kube.write_kubeconfig(home / ".kube" / "config", cert=world.kube.admin_cert(), inline=True)
        work = tmp_path / "work"  # the clone, as the reader's current folder: examples/ resolves
        work.mkdir()
        os.symlink(os.path.join(ROOT, "examples"), str(work / "examples"))
        (work / "known_hosts").write_text("192.168.12.31 ssh-ed25519 "
                                          "AAAAC3NzaC1lZDI1NTE5AAAAIHhvc3Qta2V5LW9mLXRoZS1ub2Rl\n")
        env = {k: v for k, v in os.environ.items() if k not in ("ACK_MIG_CLUSTER_ID", "ACK_MIG_REGION", "COLUMNS")}
        env.update(HOME=str(home), ACK_MIG_FC_ENDPOINT=fc.endpoint, ACK_MIG_SLS_ENDPOINT=sls.endpoint)
        if page in DEPLOYED:
            deployed(world, env, str(work))
        sample_of = samples(page)
        for cmd in page_commands(page):
            words = [home_of(w, home) for w in shlex.split(cmd, comments=True)]
            said = re.search(r"#\s*exit\s+(\d+)", cmd)
            expected = int(said.group(1)) if said else EXPECTED.get(words[1], 0)
            argv = [PROGRAM] + world.argv(words[1:], poll=False)
            asks = words[1] == "undeploy" and not {"--yes", "--dry-run"} & set(words)
            done = _confirmed(argv, env, str(work)) if asks else subprocess.run(
                argv, cwd=str(work), env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
            ran.append(words[1])
            if done.returncode != expected or "Traceback" in done.stderr:
                failures.append("%s\n  exit %d, expected %d\n  %s" % (cmd, done.returncode, expected,
                                                                  (done.stderr or done.stdout).strip()[-800:]))
            sample = sample_of.pop(" ".join(cmd.replace("\\\n", " ").split()), None)
            if sample is not None and not shows(sample, done.stdout):
                failures.append("%s\n  prints what its sample does not show:\n%s" % (cmd, done.stdout[-1500:]))
    finally:
        world.stop()
        fc.stop()
        sls.stop()
    assert ran and not fc.rejected and not sls.rejected, (ran, fc.rejected, sls.rejected)
    assert not failures, "%s:\n" % page + "\n".join(failures)
    assert not sample_of, "samples of commands that were not run: %s" % sorted(sample_of)
