"""SSH from connect to the last byte ends at the node's deadline (issue 30 item 3): a server that drips its
identification string one byte a second (tests/support/drip.py) resets paramiko's banner timeout with every
byte; only the transport's watchdog ends it, and the node ends ``node-timeout`` alone."""

import time

import pytest

from functions.delivery.outcome import outcome
from functions.delivery.ssh import SshTransport, load_key
from tests.delivery.conftest import targets
from tests.support.drip import Drip

pytestmark = pytest.mark.ssh


@pytest.mark.timeout(60)
def test_an_ssh_server_that_drips_its_banner_ends_node_timeout_at_the_deadline(sshd, maker):
    with Drip(payload=b"SSH-2.0-" + b"x" * 200, read_first=False, life_s=20) as drip:
        maker.deadline_s = 1
        transport = SshTransport(maker, load_key(path=sshd.client_key), sshd.known_hosts, port=drip.port,
                                 grace_s=1, connect_timeout_s=60, connect_attempts=1)
        started = time.monotonic()
        [result] = transport.run(targets(1, prefix="i-drip"))
        elapsed = time.monotonic() - started
        assert drip.sent >= 2  # it was dripping all along
    assert result.error == "node-timeout" and outcome(result).code == "node-timeout", result
    assert 1.5 < elapsed < 15, elapsed  # the deadline (1 s) and its grace (1 s), never the drip's 20 s
