"""Threads the Cloud Assistant transport starts for an event (docs/performance.md: 10,000 nodes in one event).

Every poll round of the agent wait made a thread pool of its own (up to ``calls_in_flight`` threads), and a
refused batch's status check one more: the threads started grew with the rounds an event's new nodes take
to come up. One pool now serves the whole run (agent wait, submits, polls, uploads), so the transport starts
at most ``calls_in_flight`` threads whatever the nodes and rounds. The emulator's own request threads
(socketserver's ``process_request_thread``) are the emulator's and are not counted."""

import threading
import time

import pytest

from functions.delivery.cloud_assistant import CloudAssistantTransport
from functions.delivery.outcome import outcome
from tests.delivery.conftest import targets
from tests.support.rpc_emulator import SimNode

pytestmark = pytest.mark.cloud_assistant


def _counting(monkeypatch):
    started = []
    start = threading.Thread.start

    def counted(self, *args, **kwargs):
        if getattr(getattr(self, "_target", None), "__name__", "") != "process_request_thread":
            started.append(self.name)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(threading.Thread, "start", counted)
    return started


def test_threads_started_do_not_grow_with_the_agent_waits_rounds(emulator, ecs, maker, monkeypatch):
    """300 new nodes (3 status pages, 3 batches) whose agents come up on the fifth status query, 3 calls in
    flight: the agent wait takes 5 rounds; at most 3 pool threads (and the shared call watchdog) start."""
    emulator.add_nodes(300, lambda iid: SimNode(ready_after=4))
    started = _counting(monkeypatch)
    transport = CloudAssistantTransport(ecs, maker, agent_wait_s=30, poll_s=0.02, poll_max_s=0.05, calls_in_flight=3)
    cpu = time.process_time()
    results = transport.run(targets(300, prefix="i-emu"))
    cpu = time.process_time() - cpu
    assert {outcome(r).outcome for r in results} == {"partitioned"}, {outcome(r).reason for r in results}
    assert emulator.calls["DescribeCloudAssistantStatus"] == 5 * 3
    print("threads started %d (%s), cpu %.2fs" % (len(started), sorted(set(started)), cpu))
    assert len([name for name in started if name != "deadline-watchdog"]) <= 3, started


def test_a_refused_batchs_status_check_starts_no_thread(emulator, ecs, maker, monkeypatch):
    """RunCommand refused whole for one stopped instance: the status check of that batch (one page) is a call
    of the submitting worker, not a pool of its own."""
    emulator.reject_unrunnable = True
    ids = emulator.add_nodes(150)
    emulator.nodes[ids[5]].lost_after = 1  # stopped after its agent answered "true"
    started = _counting(monkeypatch)
    transport = CloudAssistantTransport(ecs, maker, agent_wait_s=30, poll_s=0.02, poll_max_s=0.05, calls_in_flight=2)
    results = {r.instance_id: r for r in transport.run(targets(150, prefix="i-emu"))}
    assert results[ids[5]].error == "agent-unavailable"
    assert {outcome(r).outcome for iid, r in results.items() if iid != ids[5]} == {"partitioned"}
    assert emulator.calls["RunCommand"] == 3 and emulator.calls["DescribeCloudAssistantStatus"] == 3
    assert len([name for name in started if name != "deadline-watchdog"]) <= 2, started
