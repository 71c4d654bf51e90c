"""Bounded waits that show themselves: on a terminal a wait longer than 2 s says what it waits for and when
it gives up (terminal.Waiting); invoke's connection to --kubeconfig's API server, bounded by
ACK_MIG_CONNECT_TIMEOUT_S, is tested in test_invoke_cli.py."""

import io
import time

from functions.commands import terminal


def test_a_wait_says_what_it_waits_for_after_its_delay_on_a_terminal_only():
    shown = io.StringIO()
    with terminal.Waiting("the API server at 127.0.0.1:6443", 15, stream=shown, after=0.05, tty=True):
        # a wait past the delay, until the note shows: a fixed sleep raced the note's thread, which a loaded
        # CI runner may not schedule in time (60 s is a hang guard)
        until = time.monotonic() + 60
        while not shown.getvalue() and time.monotonic() < until:
            time.sleep(0.01)
    assert shown.getvalue() == "ack-mig-hook: waiting for the API server at 127.0.0.1:6443 (gives up after 15s)\n"
    quick = io.StringIO()
    with terminal.Waiting("x", 15, stream=quick, after=60, tty=True):  # ends long before its delay, however slow
        pass
    piped = io.StringIO()
    with terminal.Waiting("x", 15, stream=piped, after=0.05, tty=False):
        time.sleep(0.2)
    assert quick.getvalue() == "" and piped.getvalue() == ""


import os  # noqa: E402
import pty  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

from tests.support.loopback import refused_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
CLOUD = ["--cluster-id", CLUSTER, "--region", "cn-beijing"]
COMMANDS = [["status"] + CLOUD, ["doctor"] + CLOUD, ["advise", "--pool", "llm"] + CLOUD,
            ["rollout", "pause", "--pool", "np1f6779297c4444a3a1cdd29be8e5a0b5"] + CLOUD,
            ["invoke", "--event", os.path.join(ROOT, "examples", "event.json")] + CLOUD]


def _env(port, **extra):
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update({"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI5tTestOnlyKey", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "not-a-secret",
                "ACK_MIG_CS_ENDPOINT": "http://127.0.0.1:%d" % port, "ALIBABA_CLOUD_PROFILE": ""}, **extra)
    return env


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_cloud_command_checks_the_ack_api_before_its_first_call(argv):
    """Item 4 and 7: nothing listens at the ACK API's address: one line naming it at once, exit 2, before any
    decision (invoke prints none) or any other call."""
    port = refused_port()  # a loopback port nothing listens on
    done = subprocess.run([sys.executable, "-m", "functions.commands.main"] + argv, cwd=ROOT, env=_env(port),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    first = done.stderr.splitlines()[0]
    assert first.startswith("ack-mig-hook: error: cannot connect to the ACK API at 127.0.0.1:%d (" % port), first
    assert len(first) <= 160 and done.stdout == "" and "Traceback" not in done.stderr


def test_a_slow_connection_says_what_it_waits_for_and_gives_up_at_its_deadline():
    """A listener whose queue is full drops the SYN: the connection neither fails nor succeeds. On a terminal
    the command says after 2 s what it waits for, and gives up at ACK_MIG_CONNECT_TIMEOUT_S."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):  # fill the accept queue (never accepted): later SYNs are dropped
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        time.sleep(0.2)
        master, slave = pty.openpty()
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "functions.commands.main"] + COMMANDS[0], cwd=ROOT,
                                env=_env(port, ACK_MIG_CONNECT_TIMEOUT_S="4"), stdout=subprocess.PIPE,
                                stderr=slave, text=True)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        proc.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        for s in fillers:
            s.close()
        listener.close()
    err = b"".join(chunks).decode().replace("\r\n", "\n")
    assert "ack-mig-hook: waiting for the ACK API at 127.0.0.1:%d (gives up after 4s)" % port in err, err
    assert "no answer within 4s" in err and proc.returncode == 2
    assert 4 <= took < 30, took
