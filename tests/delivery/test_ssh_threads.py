"""Threads the SSH transport starts for an event's nodes (docs/performance.md: 10,000 nodes in one event).

Each node's deadline was a ``threading.Timer``: a thread started per node, on top of the node's worker, so an
event of 10,000 nodes started 10,000 timer threads. The deadline is now an entry of the one watchdog thread
every call deadline shares (functions/base/deadline.py ``_Watchdog``), which shuts the node's socket down.
paramiko's own threads, two per connection (``paramiko.Transport`` is a Thread, and its Packetizer starts a
Timer for the handshake's timeout, paramiko/packet.py ``start_handshake``), are the library's and are not
counted: what is counted is what the transport itself starts. Real sshd on 127.0.0.1."""

import os
import threading
import time

import paramiko
import pytest

from functions.delivery.outcome import outcome
from functions.delivery.ssh import SshTransport, load_key
from tests.delivery.conftest import targets

pytestmark = pytest.mark.ssh

NODES = int(os.environ.get("SSH_THREADS_NODES", "24"))  # docs/delivery.md: measured with 200


def _paramikos(thread):
    """paramiko's connection thread, or the handshake Timer its Packetizer starts."""
    owner = getattr(getattr(thread, "function", None), "__self__", None)
    return isinstance(thread, paramiko.Transport) or isinstance(owner, paramiko.packet.Packetizer)


def test_threads_started_do_not_grow_with_the_nodes(sshd, maker, monkeypatch):
    """``NODES`` nodes, 4 at a time: the transport starts its 4 workers and at most the shared watchdog,
    whatever the number of nodes (a Timer per node started ``NODES`` more)."""
    started = []
    start = threading.Thread.start

    def counted(self, *args, **kwargs):
        if not _paramikos(self):
            started.append(self.name)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(threading.Thread, "start", counted)
    transport = SshTransport(maker, load_key(path=sshd.client_key), sshd.known_hosts, port=sshd.port,
                             concurrency=4)
    cpu = time.process_time()
    results = transport.run(targets(NODES))
    cpu = time.process_time() - cpu
    assert [outcome(r).outcome for r in results] == ["partitioned"] * NODES, [outcome(r).reason for r in results]
    print("nodes %d: threads started %d (%s), cpu %.2fs" % (NODES, len(started), sorted(set(started)), cpu))
    assert started.count("ssh-node") == 4, started
    assert len(started) <= 4 + 1, started  # the workers and the shared watchdog: no thread per node
