"""SSH transport against a real OpenSSH sshd on 127.0.0.1 with its own host key."""

import os
import sys
import time

import pytest

from functions.delivery.outcome import outcome
from functions.delivery.ssh import SshError, SshTransport, load_key
from functions.delivery.transport import ScriptMaker
from functions.base.settings import DeliverySettings
from tests.delivery.conftest import SECRET, node_dirs, targets
from tests.support.sshd import _keypair
from tests.support.stall_ssh_server import StallSshServer

pytestmark = pytest.mark.ssh


def make(sshd, maker, known_hosts=None, **kw):
    return SshTransport(maker, load_key(path=sshd.client_key), known_hosts or sshd.known_hosts, port=sshd.port, **kw)


def test_nodes_are_partitioned_and_a_warm_node_costs_one_exec(sshd, maker, monkeypatch):
    transport = make(sshd, maker)
    results = transport.run(targets(4))
    assert [outcome(r).outcome for r in results] == ["partitioned"] * 4
    assert results[2].result["node_name"] == "cn-test.10.0.0.2" and node_dirs(maker.root) == [maker.bundle.digest]
    calls = []
    for name in ("_exec", "_push"):
        real = getattr(transport, name)
        monkeypatch.setattr(transport, name,
                            lambda c, t, w, real=real, name=name: calls.append(name) or real(c, t, w))
    again = transport.run(targets(4))
    assert all(r.result["outcome"] == "success" for r in again)
    assert calls == ["_exec"] * 4  # the cache is warm: no upload, one exec per node


def test_the_key_can_come_from_a_secret(sshd, maker):
    transport = SshTransport(maker, load_key(text=sshd.client_key_text), sshd.known_hosts, port=sshd.port)
    assert outcome(transport.run(targets(1))[0]).outcome == "partitioned"


def test_a_wrong_host_key_is_refused(sshd, maker):
    result = make(sshd, maker, sshd.wrong_known_hosts).run(targets(1))[0]
    assert result.error == "host-key-rejected" and result.result is None
    assert node_dirs(maker.root) == []


def test_an_unknown_host_is_refused_unless_accept_new_is_chosen(sshd, maker, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    assert make(sshd, maker, str(empty)).run(targets(1))[0].error == "host-key-rejected"
    result = make(sshd, maker, str(empty), policy="accept-new").run(targets(1))[0]
    assert outcome(result).outcome == "partitioned"
    assert "[127.0.0.1]:%d ssh-ed25519 " % sshd.port in empty.read_text()  # recorded ...
    assert outcome(make(sshd, maker, str(empty)).run(targets(1))[0]).outcome == "partitioned"  # ... and trusted


def test_accept_new_still_refuses_a_changed_key(sshd, maker):
    result = make(sshd, maker, sshd.wrong_known_hosts, policy="accept-new").run(targets(1))[0]
    assert result.error == "host-key-rejected"


@pytest.mark.parametrize("policy", ["verify", "accept-new"])
def test_a_known_hosts_line_paramiko_cannot_honour_is_refused_in_one_line(sshd, maker, tmp_path, policy):
    """OpenSSH's known_hosts has markers (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT: ``@revoked`` refuses a key,
    ``@cert-authority`` trusts a CA) that paramiko does not read: its HostKeys raised InvalidHostKey on each
    connection, so every node ended ``internal-error`` with paramiko's repr, and a revoked key could never be
    honoured. The file is refused before any node is touched, one line naming the file's line and the accepted
    form; a key that is no key (its base64 or its type) likewise. Nothing is appended to the file."""
    own = open(sshd.known_hosts, encoding="utf-8").read()
    host, key = own.split(" ", 1)
    for text, said in (("@revoked %s %s" % (host, key) + own, "line 1: @revoked"),
                       ("@cert-authority *.example.com %s" % key + own, "line 1: @cert-authority"),
                       (own + "%s ssh-ed25519 AAAA!notbase64\n" % host, "line 2:"),
                       (own + "%s ssh-rsa %s" % (host, key.split(" ")[1]), "line 2:")):
        path = tmp_path / "known_hosts"
        path.write_text(text)
        with pytest.raises(SshError) as refused:
            make(sshd, maker, str(path), policy=policy)
        message = str(refused.value)
        assert said in message and str(path) in message and "host key-type base64-key" in message, message
        assert "\n" not in message and path.read_text() == text
    assert node_dirs(maker.root) == []


def test_verify_needs_a_known_hosts_file(sshd, maker, tmp_path):
    with pytest.raises(SshError, match="ACK_MIG_SSH_KNOWN_HOSTS"):
        make(sshd, maker, str(tmp_path / "missing"))


def test_a_key_the_node_does_not_accept_fails_auth(sshd, maker, tmp_path):
    other = str(tmp_path / "other")
    _keypair(other)
    transport = SshTransport(maker, load_key(path=other), sshd.known_hosts, port=sshd.port)
    assert transport.run(targets(1))[0].error == "auth-failed"


def test_bad_key_text_is_one_clear_line():
    with pytest.raises(SshError, match="not an unencrypted"):
        load_key(text="-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n-----END OPENSSH PRIVATE KEY-----\n")
    with pytest.raises(SshError, match="needs a private key"):
        load_key()


def test_a_hung_node_gets_its_channel_closed(sshd, fake_bundle, tmp_path):
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(0o755)
    maker = ScriptMaker(fake_bundle, 1, str(tmp_path / "root"), str(hang))
    # A 2 s grace: connect, auth and exec must fit in deadline + grace on a loaded machine before the wait.
    result = make(sshd, maker, grace_s=2).run(targets(1))[0]
    assert result.error == "node-timeout" and "connection closed" in result.message
    assert "reading the node's output" in result.message


def test_the_node_deadline_is_reported_by_the_node(sshd, fake_bundle, tmp_path):
    maker = ScriptMaker(fake_bundle, 1, str(tmp_path / "root"), sys.executable)
    result = make(sshd, maker).run(targets(1, extra=("--fake-sleep", "30")))[0]
    assert outcome(result).outcome == "failed" and "node-timeout" in outcome(result).reason


def test_unreachable_and_addressless_nodes_fail_alone(sshd, maker):
    sleeps = []
    transport = make(sshd, maker, connect_timeout_s=2, retry_sleep=sleeps.append)
    good = targets(1)
    none = targets(1, prefix="i-none", address="")
    closed = targets(1, prefix="i-closed", address="127.0.0.2")
    results = {r.instance_id: r for r in transport.run(good + none + closed)}
    assert outcome(results["i-t0000"]).outcome == "partitioned"
    assert results["i-none0000"].error == "connect-failed" and results["i-closed0000"].error == "connect-failed"
    assert len(sleeps) == 2  # the refused connection was tried 3 times, with backoff in between


def test_default_concurrency_is_at_least_32(sshd, maker):
    assert DeliverySettings().ssh_concurrency >= 32 and make(sshd, maker).concurrency >= 32


def test_the_private_key_never_appears_in_results(sshd, maker):
    results = SshTransport(maker, load_key(text=sshd.client_key_text), sshd.wrong_known_hosts,
                           port=sshd.port).run(targets(1))
    body = sshd.client_key_text.split("\n")[1]
    assert body not in repr(results) and SECRET not in repr(results)
    assert os.path.exists(sshd.known_hosts)


STALLS = [("kex", "connecting (attempt 1)"), ("auth", "connecting (attempt 1)"),
          ("exec", "waiting for the exec request to be answered"), ("sftp", "waiting for the SFTP subsystem")]


@pytest.mark.timeout(60)  # a hang here is a bug: name it within a minute, not at the suite's 300 s
def test_servers_that_stall_before_or_after_login_end_node_timeout_and_the_others_finish(sshd, maker, tmp_path):
    """Real SSH servers (paramiko), one per stall on 127.0.0.3 to 127.0.0.6, same port as the real sshd, accept
    the connection and then never answer: key exchange (after its identification string), authentication,
    the exec request (after login), or, after a bundle-missing answer, the SFTP subsystem request. paramiko's
    own timeouts are set far beyond the test (60 s), so only the watchdog can end the wait: each of those
    nodes ends node-timeout at its deadline, naming its step; two nodes of the same event on the real sshd
    finish. The four stalled nodes are one event's, so their waits overlap: the test waits one deadline, not
    one per stall (each node has its own watchdog, connection and server)."""
    with open(sshd.authorized_keys, encoding="utf-8") as fh:
        pub = fh.readline()
    servers = {}
    try:
        for n, (stall, _) in enumerate(STALLS):
            servers[stall] = StallSshServer(str(tmp_path), "127.0.0.%d" % (3 + n), sshd.port, pub, stall=stall).start()
        known = tmp_path / "known_hosts"
        with open(sshd.known_hosts, encoding="utf-8") as fh:
            known.write_text(fh.read() + "".join(s.known_hosts_line + "\n" for s in servers.values()))
        maker.deadline_s = 2
        transport = make(sshd, maker, str(known), grace_s=1, connect_timeout_s=60)
        good = targets(2)
        stuck = [t for n, (stall, _) in enumerate(STALLS)
                 for t in targets(1, prefix="i-%s" % stall, address="127.0.0.%d" % (3 + n))]
        started = time.monotonic()
        results = {r.instance_id: r for r in transport.run(good + stuck)}
        elapsed = time.monotonic() - started
    finally:
        for server in servers.values():
            server.stop()
    for stall, step in STALLS:
        hung, server = results["i-%s0000" % stall], servers[stall]
        assert hung.error == "node-timeout" and step in hung.message, (stall, hung)
        assert outcome(hung).outcome == "failed" and outcome(hung).code == "node-timeout", (stall, hung)
        assert server.events[0] == stall if stall != "sftp" else server.events[:2] == ["exec", "subsystem:sftp"], \
            (stall, server.events)
    assert [outcome(results[t.instance_id]).outcome for t in good] == ["partitioned"] * 2
    assert 3 <= elapsed < 15  # the nodes' deadline (2 s + 1 s grace), not paramiko's 60 s, not forever


@pytest.mark.timeout(60)
def test_a_node_whose_worker_never_returns_is_left_behind_at_its_bound(sshd, maker, monkeypatch):
    """Should a paramiko wait ever be one the watchdog cannot wake (or the watchdog be broken), run() still
    returns at the node's bound (deadline + grace + JOIN_SLACK_S) with that node node-timeout, finishes
    every other node (more nodes than workers: the stuck worker is replaced), and keeps the order.

    The bound is read on ssh's own clock, which the test moves past it once the stuck node has begun: the real
    nodes keep a generous deadline (a short one, 4 s, was their premise too, and a cold node on a loaded
    machine could pass it and end node-timeout), and the stuck one is left behind by the clock, not by a wait."""
    import threading

    from functions.delivery import ssh
    from tests.support.module_time import module_time

    monkeypatch.setattr(ssh, "JOIN_SLACK_S", 1.0)
    maker.deadline_s = 30  # a hang guard for the real nodes (cold: exec, SFTP upload, exec), not a premise
    transport = make(sshd, maker, grace_s=1, concurrency=1)
    bound = maker.deadline_s + 1 + ssh.JOIN_SLACK_S
    jumped, release, abandoned = threading.Event(), threading.Event(), []
    monkeypatch.setattr(ssh, "time", module_time(monotonic=lambda: time.monotonic() + (bound + 1) * jumped.is_set()))
    real, real_abandoned = transport._one, transport._abandoned

    def one(target):
        if target.instance_id == "i-t0001":
            jumped.set()  # its bound has passed on ssh's clock
            release.wait(50)  # stuck where nothing can wake it
        return real(target)

    def left_behind(target, seconds):
        abandoned.append((target.instance_id, jumped.is_set()))
        return real_abandoned(target, seconds)

    monkeypatch.setattr(transport, "_one", one)
    monkeypatch.setattr(transport, "_abandoned", left_behind)
    started = time.monotonic()
    try:
        results = transport.run(targets(5))
    finally:
        release.set()
    assert time.monotonic() - started < 45  # a hang guard: run() did not wait for the stuck worker's release
    assert [r.instance_id for r in results] == ["i-t%04d" % n for n in range(5)]
    assert abandoned == [("i-t0001", True)]  # left behind once its bound had passed, and only it
    assert results[1].error == "node-timeout" and "left behind" in results[1].message
    assert "within %gs" % bound in results[1].message, results[1].message
    # one worker: the nodes after the stuck one ran only on the worker that replaced it
    assert [outcome(r).outcome for i, r in enumerate(results) if i != 1] == ["partitioned"] * 4, results


@pytest.mark.timeout(60)
def test_a_node_whose_sftp_server_answers_what_cannot_be_read_fails_alone(sshd, maker, tmp_path, monkeypatch):
    """paramiko parses a node's SFTP answers in the node's own thread: a VERSION packet one byte long raised
    struct.error, which no handler caught; SshTransport.run raised it once every node was done, and every node
    of the event (the two on the real sshd partitioned) ended failed internal-error."""
    import struct
    import threading

    import tests.support.stall_ssh_server as stall

    class HostileSftp(stall._Server):
        def check_channel_subsystem_request(self, channel, name):
            def serve():
                channel.settimeout(5)
                n = struct.unpack(">I", channel.recv(4))[0]  # the client's INIT
                while n > 0:
                    n -= len(channel.recv(n))
                # SSH_FXP_VERSION (type 2) without the uint32 version the SFTP draft (draft-ietf-secsh-filexfer-02,
                # section 4) says follows it: paramiko reads it with struct.unpack and raises struct.error
                channel.sendall(b"\x00\x00\x00\x01\x02")
            threading.Thread(target=serve, daemon=True).start()
            return True

    monkeypatch.setattr(stall, "_Server", HostileSftp)
    with open(sshd.authorized_keys, encoding="utf-8") as fh:
        key = fh.readline()
    server = StallSshServer(str(tmp_path), "127.0.0.3", sshd.port, key, stall="sftp").start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(open(sshd.known_hosts).read() + server.known_hosts_line + "\n")
        transport = SshTransport(maker, load_key(path=sshd.client_key), str(known), port=sshd.port)
        results = transport.run(targets(2) + targets(1, prefix="i-hostile", address="127.0.0.3"))
    finally:
        server.stop()
    done = [outcome(r) for r in results]
    assert [o.outcome for o in done[:2]] in (["partitioned"] * 2, ["unchanged"] * 2), [o.reason for o in done]
    assert done[2].outcome == "failed" and done[2].code == "bundle-missing", done[2].reason
    assert "SFTP upload failed: the node's SFTP server answered what cannot be read (error:" in done[2].reason


def test_whatever_one_node_raises_is_that_nodes_result(sshd, maker, monkeypatch):
    """Any exception from one node's steps (not only the connection errors the transport names) ends that
    node alone; it was raised for the whole run once every node was done."""
    transport = SshTransport(maker, load_key(path=sshd.client_key), sshd.known_hosts, port=sshd.port)
    real = SshTransport._one_bounded

    def one(self, target, watch):
        if target.instance_id.startswith("i-odd"):
            watch.step = "reading the node's answer"
            raise ValueError("an answer no rule reads")
        return real(self, target, watch)

    monkeypatch.setattr(SshTransport, "_one_bounded", one)
    done = [outcome(r) for r in transport.run(targets(1) + targets(1, prefix="i-odd"))]
    assert done[0].outcome in ("partitioned", "unchanged"), done[0].reason
    assert (done[1].outcome, done[1].code) == ("failed", "internal-error")
    assert done[1].reason == "internal-error: ValueError while reading the node's answer: an answer no rule reads"


def test_output_that_comes_after_the_exit_status_is_read(sshd, fake_bundle, tmp_path):
    """sshd sends the exit status as soon as the node's process ends, before what is still in its pipe
    (OpenSSH session.c, session_exit_message: "there could be some more data waiting in the pipe"). The
    transport stopped reading at the exit status: a node that wrote a large result and exited lost its last
    line now and then (no-result, "exit 0, no output"). Here the last line comes a moment after the exit, so
    the order is sure: the transport reads on to the channel's end of file."""
    standin = tmp_path / "py"
    doc = '{"outcome": "success", "changes": 1, "gpus": [], "sequence": "1g.5gb"}'
    standin.write_text("#!/bin/sh\n( sleep 1; echo '# a log line'; echo '%s' ) &\nexit 0\n" % doc)
    standin.chmod(0o755)
    maker = ScriptMaker(fake_bundle, 30, str(tmp_path / "root"), str(standin))
    results = make(sshd, maker).run(targets(2))
    assert [(outcome(r).outcome, r.exit_code) for r in results] == [("partitioned", 0)] * 2, results
