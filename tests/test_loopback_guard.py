"""The suite's loopback guard (tests/conftest.py) holds: a test that would reach a real host fails at once
with a message naming it, and loopback keeps working."""

import socket

import pytest


@pytest.mark.parametrize("address", [("ecs.cn-beijing.aliyuncs.com", 443), ("8.8.8.8", 53), ("10.0.0.1", 6443)])
def test_a_connection_outside_loopback_is_refused_before_it_leaves(address):
    with pytest.raises(OSError, match="loopback only: .*%s" % address[0].replace(".", r"\.")):
        socket.create_connection(address, timeout=1)


def test_loopback_still_connects():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    with server, socket.create_connection(server.getsockname(), timeout=1) as client:
        peer, _ = server.accept()
        with peer:
            client.sendall(b"x")
            assert peer.recv(1) == b"x"


def test_a_refused_port_refuses_at_once_and_no_server_can_take_it():
    """tests.support.loopback.refused_port: a test that expects "Connection refused" must never reach a server
    another test (or pytest-xdist worker) started meanwhile on a port that was bound and closed again."""
    import errno

    from tests.support.loopback import refused_port

    port = refused_port()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
    other = socket.socket()
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as socketserver's servers bind
    with other, pytest.raises(OSError) as info:
        other.bind(("127.0.0.1", port))
    assert info.value.errno == errno.EADDRINUSE
    assert refused_port() == port
