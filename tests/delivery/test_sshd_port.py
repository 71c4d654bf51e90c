"""The real sshd of the SSH tests (tests/support/sshd.py) is started by the test and binds its port itself,
some time after the test chose it. A port of the ephemeral range chosen free could be given to any other
server meanwhile (another test's, another pytest-xdist worker's): sshd then failed to bind it, and the start
check, reaching that other server, took the test's sshd for listening."""

import os
import socket

import pytest

from tests.support.sshd import SSHD, Sshd


def _ephemeral_low():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
        return int(fh.read().split()[0])


@pytest.mark.timeout(120)
def test_sshd_listens_below_the_ephemeral_range_and_moves_on_from_a_port_taken_meanwhile(tmp_path):
    if not os.path.exists(SSHD):
        pytest.skip("OpenSSH sshd is not installed (make test installs openssh-server)")
    server = Sshd(str(tmp_path))
    chosen = server.port
    assert chosen < _ephemeral_low()  # no bind(("127.0.0.1", 0)) and no outgoing connection is given it
    taker = socket.socket()  # another server takes the port before sshd binds it
    taker.bind(("127.0.0.1", chosen))
    taker.listen(1)
    try:
        server.start()
        assert server.port != chosen and server.port < _ephemeral_low()
        with open(server.known_hosts) as fh:
            assert fh.read().startswith("[127.0.0.1]:%d " % server.port)
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
            conn.settimeout(30)
            assert conn.recv(8) == b"SSH-2.0-"  # sshd itself answers there
    finally:
        server.stop()
        taker.close()
