"""A process blocks only what it uses: the instance the plan destroys, or its GPU's mode change. Creating
in free slots goes ahead while kept instances serve, and --force ends only the processes in the way, each
checked against what NVML listed (issue 18, point 1)."""

import signal

import pynvml
import pytest

from node_bootstrap.host import processkill
from node_bootstrap.mig import PartitionSpec
from node_bootstrap.driver.nvml import NvmlReader, NvmlWriter
from node_bootstrap.commands.reconcile import Host, reconcile
from node_bootstrap.driver.sim.faults import process_on_pid
from tests.node.nodecli import Node, gi_id, lay_out

SERVED = [("3g.20gb", 0)]  # one instance, serving a workload (fault process-on:0:0)
MIXED = [("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]
SERVING, DOOMED = process_on_pid(0, 0), process_on_pid(0, 4)  # 5000, 5004


def test_creating_beside_a_served_instance_goes_ahead(tmp_path):
    node = Node(tmp_path, count=1)
    lay_out(node, [SERVED])
    kept = gi_id(node, 0, 0)
    res = node.run("apply", "--sequence", "3g.20gb-2g.10gb-1g.5gb", "--sim-fault", "process-on:0:0")
    assert res.rc == 0, res.stderr
    assert res.json["changes"] == 4  # two GPU instances and their compute instances; nothing destroyed
    assert "killing" not in res.stderr
    assert node.layout(0) == [(9, 0, 1), (14, 4, 1), (19, 6, 1)] and gi_id(node, 0, 0) == kept
    # the workload is still there, in the instance it had
    status = node.run("status", "--sim-fault", "process-on:0:0").json["gpus"][0]
    assert status["processes"] == [SERVING]


def test_a_process_in_an_instance_the_plan_destroys_refuses_it_and_only_it_is_named(tmp_path):
    node = Node(tmp_path, count=1)
    lay_out(node, [MIXED])
    before = open(node.state).read()
    faults = ["--sim-fault", "process-on:0:0", "--sim-fault", "process-on:0:4"]
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", *faults)
    assert res.rc == 4 and res.json["error"]["code"] == "gpu-busy", res.stderr
    message = res.json["error"]["message"]
    assert "GPU 0 runs compute process %d in GPU instance %d (placed at 4), which the plan destroys" % (
        DOOMED, gi_id(node, 0, 4)) in message
    assert str(SERVING) not in message and "--force" in message
    assert open(node.state).read() == before
    # plan says the same before anyone runs apply
    plan = node.run("plan", "--sequence", "3g.20gb-3g.20gb", *faults).json
    assert plan["gpus"][0]["blocking_processes"] == [DOOMED] and plan["gpus"][0]["processes"] == [SERVING, DOOMED]
    assert "apply will be refused as gpu-busy" in plan["warnings"][0]


def test_force_ends_only_the_processes_in_the_way(tmp_path):
    node = Node(tmp_path, count=1)
    lay_out(node, [MIXED])
    kept = gi_id(node, 0, 0)
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--force", "--sim-fault", "process-on:0:0",
                   "--sim-fault", "process-on:0:4")
    assert res.rc == 0, res.stderr
    assert "killing compute process %d on GPU 0 (--force)" % DOOMED in res.stderr
    assert "killing compute process %d" % SERVING not in res.stderr
    assert node.layout(0) == [(9, 0, 1), (9, 4, 1)] and gi_id(node, 0, 0) == kept


def _host(ended):
    return Host(lambda: [], lambda stopped: [], lambda gpus: (0, ""),
                lambda targets, listed: ended.append([(pid, started, listed(pid)) for pid, started in targets]),
                lambda message: None)


def test_force_takes_each_start_time_as_nvml_lists_the_process(sim):
    """In process: the targets --force gets are the processes on doomed instances, with the start time
    read right when NVML listed them, and a way to ask NVML again before each signal."""
    lib = sim("A100-SXM4-40GB", 1, ["process-on:0:0", "process-on:0:4"])
    with NvmlWriter(pynvml) as writer:
        writer.set_mig_mode(0, True)
        for profile, start, size, slices in ((9, 0, 4, 3), (14, 4, 2, 2), (19, 6, 1, 1)):
            writer.create_full_compute_instance(0, writer.create_gpu_instance(0, profile, start, size), slices)
    stamped = []

    def stamp(pid):
        stamped.append(pid)
        return lib.start_time(pid)

    ended = []
    with NvmlWriter(pynvml, stamp=stamp) as writer:
        # the stand-in ends nothing: the run then gives up, naming the process still there
        with pytest.raises(Exception, match="even after killing"):
            reconcile(writer, PartitionSpec("sequence", "3g.20gb-3g.20gb"), _host(ended), force=True)
    assert ended == [[(DOOMED, 100000 + DOOMED, True)]]
    assert sorted(set(stamped)) == [SERVING, DOOMED]


def test_an_unreadable_process_list_does_not_stop_a_create_beside_served_instances(tmp_path):
    node = Node(tmp_path, count=1)
    lay_out(node, [SERVED])
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--sim-fault", "processes-unreadable")
    assert res.rc == 0, res.stderr  # nothing is taken from anyone: no proof of idleness needed
    # ...but it does stop a destroy
    res = node.run("apply", "--sequence", "9", "--sim-fault", "processes-unreadable")
    assert res.rc == 4 and "process list is unreadable" in res.json["error"]["message"]


def test_a_mode_change_is_blocked_by_every_process_of_the_gpu(tmp_path):
    node = Node(tmp_path, count=2)
    lay_out(node, [SERVED, []])  # GPU 1 still needs MIG mode on
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--sim-fault", "process-on:0:0", "--sim-fault",
                   "processes")  # pid 4242 sits in GPU 0's first instance; GPU 1 has none
    assert res.rc == 0, res.stderr
    node2 = Node(tmp_path / "two", count=1)
    res = node2.run("apply", "--sequence", "3g.20gb", "--sim-fault", "processes")  # 4242 on a GPU with MIG off
    assert res.rc == 4 and "GPU 0 runs compute process 4242 and its MIG mode must change" in \
        res.json["error"]["message"]


# --- processkill.end_all: what --force does with the targets ---------------------------------------

class _Procs(object):
    """Processes as the kernel shows them: start times, and a log of the signals sent and the sleeps."""

    def __init__(self, started):
        self.started = dict(started)
        self.events = []
        self.now = 0.0

    def ops(self):
        return processkill.ProcessOps(self.started.get, self.send, lambda pid: None, self.sleep,
                                      lambda: self.now)

    def send(self, pid, sig):
        if pid not in self.started:
            raise OSError(3, "No such process")
        self.events.append((pid, sig))

    def sleep(self, seconds):
        self.events.append("sleep")
        self.now += seconds


def test_force_sends_every_sigterm_before_one_shared_grace_period():
    procs = _Procs({11: 500, 12: 600})
    ended = processkill.end_all([(11, 500), (12, 600)], lambda pid: True, lambda m: None, 1.0, procs.ops())
    assert ended == [11, 12]
    terms = procs.events[:2]
    assert terms == [(11, signal.SIGTERM), (12, signal.SIGTERM)]  # both before any waiting
    assert procs.events.count("sleep") == 5  # one second of 0.2 s looks, for both together
    assert procs.events[-2:] == [(11, signal.SIGKILL), (12, signal.SIGKILL)]


def test_force_asks_nvml_again_and_compares_start_times_before_each_signal():
    procs = _Procs({11: 500, 12: 999, 13: 700})
    messages = []
    listed = {11: True, 12: True, 13: False}
    ended = processkill.end_all([(11, 500), (12, 600), (13, 700), (14, None)], listed.get, messages.append, 0.0,
                                procs.ops())
    assert ended == [11]  # 12: its PID now belongs to another process; 13: NVML lists it no more
    assert (12, signal.SIGTERM) not in procs.events and (13, signal.SIGTERM) not in procs.events
    assert any("not killing 12: it is not the process NVML listed (its start time changed)" in m for m in messages)
    assert any("compute process 13 is gone (NVML no longer lists it)" in m for m in messages)


def test_the_reader_gives_each_process_its_instance(sim):
    lib = sim("A100-SXM4-40GB", 1, ["process-on:0:4", "processes"], mig=True)
    with NvmlWriter(pynvml) as writer:
        gi = writer.create_gpu_instance(0, 14, 4, 2)
        writer.create_full_compute_instance(0, gi, 2)
    with NvmlReader(pynvml, stamp=lib.start_time) as reader:
        processes = reader.read_gpu(0).processes
    # nvmlProcessInfo_t's gpuInstanceId / computeInstanceId; the start time taken as it was listed
    assert sorted(processes) == [(4242, gi, 0, 104242), (DOOMED, gi, 0, 100000 + DOOMED)]


SEVEN = [("1g.5gb", s) for s in range(7)]  # seven 1g.5gb, a process in the one at slot 4


def test_of_equal_plans_the_one_that_keeps_the_busy_instance_is_chosen(tmp_path):
    # Three of the seven 1g.5gb can stay beside a new 3g.20gb: those at 0-2 (3g.20gb at 4) or those at 4-6
    # (3g.20gb at 0). A process runs in the one at 4: the plan that keeps it destroys nothing anyone uses, so
    # apply goes ahead without --force, and the process goes on in the instance it had.
    node = Node(tmp_path, count=1)
    lay_out(node, [SEVEN])
    busy = gi_id(node, 0, 4)
    fault = ["--sim-fault", "process-on:0:4"]
    res = node.run("apply", "--sequence", "3g.20gb-1g.5gb-1g.5gb-1g.5gb", *fault)
    assert res.rc == 0, res.stderr
    assert node.layout(0) == [(9, 0, 1), (19, 4, 1), (19, 5, 1), (19, 6, 1)] and gi_id(node, 0, 4) == busy
    assert node.run("status", *fault).json["gpus"][0]["processes"] == [process_on_pid(0, 4)]
    assert node.run("apply", "--sequence", "3g.20gb-1g.5gb-1g.5gb-1g.5gb", *fault).json["changes"] == 0
