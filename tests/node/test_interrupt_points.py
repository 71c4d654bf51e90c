"""A signal at the worst moment of apply: its handler's exception raised at a chosen point of a real node
process (the node interpreter), not at whatever point a signal sent from outside happens to land.

``_AT_LOCK`` runs ``node_bootstrap`` as ``-m`` would, with a trace hook that calls the process's own handler
(apply's SIGTERM handler, or Python's SIGINT one) as the N-th exclusive lock of the simulated driver's state
file has just been taken, on the return from the context manager's ``__enter__``: the moment a handler runs
when the signal arrives between ``__enter__`` taking a lock and the ``with`` block beginning (CPython runs
handlers between bytecodes; an exception there skips ``__exit__``, bpo-29988)."""

import json
import subprocess

import pytest

from tests.node.nodecli import Node, node_python, parse

SEQ = "3g.20gb-3g.20gb"

_AT_LOCK = r"""
import contextlib, os, runpy, signal, sys
from node_bootstrap.driver.sim.store import SimStore

LOCKED = SimStore._locked.__wrapped__.__code__
ENTER = contextlib._GeneratorContextManager.__enter__.__code__
left = [int(os.environ["AT_EXCLUSIVE_LOCK"])]
signum = getattr(signal, os.environ["AT_SIGNAL"])

def local(frame, event, arg):
    if event == "return":
        gen = frame.f_locals["self"].gen
        if gen.gi_code is LOCKED and gen.gi_frame is not None and gen.gi_frame.f_locals.get("exclusive"):
            if left[0] == 0:
                sys.settrace(None)
                handler = signal.getsignal(signum)
                handler(signum, frame)  # raises (apply's Terminated, or KeyboardInterrupt) as the signal would
            left[0] -= 1
    return local

def hook(frame, event, arg):
    return local if frame.f_code is ENTER else None

sys.argv = ["node_bootstrap"] + sys.argv[1:]
sys.settrace(hook)
runpy.run_module("node_bootstrap", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("signame, at, message", [
    ("SIGTERM", 1, "interrupted by SIGTERM"),  # the first change: a GPU's MIG mode
    ("SIGINT", 1, "interrupted (SIGINT)"),
    ("SIGTERM", 3, "interrupted by SIGTERM"),  # a GPU instance's creation
])
def test_a_signal_just_as_a_driver_lock_is_taken_still_ends_in_a_final_state(tmp_path, signame, at, message):
    """The lock the interrupted ``with`` never released (its ``__exit__`` skipped, the suspended generator kept
    by the exception's traceback) was still held by this process when the failure path read the GPUs back
    under the same file's shared lock: that read waited on its own process for good, so apply never ended,
    its clients stayed stopped (SIGTERM: until systemd's SIGKILL), no result."""
    node = Node(tmp_path, clients="systemd:dcgm-exporter")
    node.set_unit("dcgm-exporter")  # active: apply stops it around the change and must start it again
    cmd = [node_python(), "-c", _AT_LOCK] + node.args("apply", "--sequence", SEQ) + ["--json"]
    proc = subprocess.Popen(cmd, cwd=node.dir, env=node.env({"AT_EXCLUSIVE_LOCK": str(at), "AT_SIGNAL": signame}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    try:
        out, err = proc.communicate(timeout=120)  # a hang guard (the bug), not a speed check
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError("apply never ended after the %s: %s" % (signame, err[-2000:]))
    res = parse(proc.returncode, out, err)
    assert res.rc == 1, err
    # the interrupt, as a signal during a call of the real C library ends (raised once the call returned): not
    # an "NVML error -1200753952" (the exception lost in the simulator's ctypes callback, its result garbage)
    assert res.json["error"] == {"code": "interrupted", "message": message}, res.json
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert node.unit_active("dcgm-exporter"), node.systemctl()
    assert json.loads((tmp_path / "var" / "stopped-clients.json").read_text()) == []
    # the GPUs were read back for the result: the read the stuck lock had held up
    assert [gpu["index"] for gpu in res.json["gpus"]] == [0, 1], res.json
    # and the state file is free again for the next run
    assert node.run("status").rc == 0


# A holder scan's worker (node_bootstrap/host/bounded.py) sent SIGTERM right after the fork, before it set its
# own handlers: what systemd's stop does (every process of the unit's cgroup gets it) as a look starts.
_AT_FORK = r"""
import os, signal, sys
from node_bootstrap.errors import Terminated
from node_bootstrap.host import bounded
from node_bootstrap.commands.cli import _on_sigterm

signal.signal(signal.SIGTERM, _on_sigterm)
parent = os.getpid()
CALL = bounded.call.__code__

def local(frame, event, arg):
    if event == "line" and os.getpid() != parent:  # the child's first line after os.fork()
        sys.settrace(None)
        os.kill(os.getpid(), signal.SIGTERM)
    return local

sys.settrace(lambda frame, event, arg: local if frame.f_code is CALL else None)
try:
    print("answer %s" % bounded.call(lambda note: "looked", 60))
except Terminated:
    print("unwound in the %s" % ("child" if os.getpid() != parent else "parent"))
except bounded.WorkFailed as exc:
    print("failed: %s" % exc)
sys.stdout.flush()
"""


def test_a_sigterm_as_the_scan_worker_forks_never_runs_the_applys_way_out_in_the_worker(tmp_path):
    """Between the fork and the worker's own handlers the child ran apply's SIGTERM handler: its exception
    unwound the child through apply's own frames, so the worker ran apply's failure path (clients started,
    the node labelled, a result printed on apply's stdout, which it still held) beside apply itself. The
    signals wait during the fork now, and a worker that gets one before its own handlers simply ends."""
    node = Node(tmp_path)
    done = subprocess.run([node_python(), "-c", _AT_FORK], cwd=node.dir, env=node.env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)  # a hang guard
    assert done.returncode == 0, done.stderr
    # the worker ended by the signal, without an answer: only the caller went on, and said so once
    assert done.stdout.splitlines() == ["failed: the worker process ended without an answer (after: starting)"], \
        done.stdout + done.stderr


# Ctrl-C twice: SIGINT's handler runs mid-change (the first GPU's MIG mode), then again as apply's way out
# starts the stopped clients again; each delivery goes to whatever handler is set by then, as a signal does.
_TWICE = r"""
import contextlib, os, runpy, signal, sys
from node_bootstrap.driver.sim.store import SimStore
from node_bootstrap.host.clients import ClientControl

LOCKED = SimStore._locked.__wrapped__.__code__
ENTER = contextlib._GeneratorContextManager.__enter__.__code__
seen = {"exclusive": 0, "start": 0}

def deliver(frame):
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)

def local(frame, event, arg):
    if event == "return":
        gen = frame.f_locals["self"].gen
        if gen.gi_code is LOCKED and gen.gi_frame is not None and gen.gi_frame.f_locals.get("exclusive"):
            seen["exclusive"] += 1
            if seen["exclusive"] == 2:  # the first after the state file's own: a GPU's MIG mode
                deliver(frame)
    return local

def hook(frame, event, arg):
    return local if frame.f_code is ENTER else None

start = ClientControl.start

def start_after(self, stopped):  # (a wrapper: a trace function that raised is unset, so the hook is gone by now)
    seen["start"] += 1
    if seen["start"] == 2:  # the first: reconcile's own, on its way out; the second: apply's failure path
        deliver(sys._getframe())
    return start(self, stopped)

ClientControl.start = start_after

sys.argv = ["node_bootstrap"] + sys.argv[1:]
sys.settrace(hook)
runpy.run_module("node_bootstrap", run_name="__main__", alter_sys=True)
"""


def test_a_second_sigint_does_not_cut_short_the_way_out_the_first_one_started(tmp_path):
    """As a second SIGTERM: the way out the first SIGINT started (clients started again, the final label)
    runs to its end. A second Ctrl-C raised out of it: the node kept its `pending` label and no reason."""
    node = Node(tmp_path, clients="systemd:dcgm-exporter")
    node.kube_args = []  # the simulated node's own labels (<host>/node-labels.json)
    node.set_unit("dcgm-exporter")
    cmd = [node_python(), "-c", _TWICE] + node.args("apply", "--sequence", SEQ) + ["--json"]
    done = subprocess.run(cmd, cwd=node.dir, env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)  # a hang guard
    res = parse(done.returncode, done.stdout, done.stderr)
    assert res.rc == 1 and res.json["error"] == {"code": "interrupted", "message": "interrupted (SIGINT)"}, \
        done.stdout + done.stderr
    labels = json.loads((tmp_path / "sim-state.host" / "node-labels.json").read_text())
    assert [h["labels"]["nvidia.com/mig.config.state"] for h in labels["history"]] == ["pending", "failed"]
    assert labels["annotations"]["ack-mig-hook/mig-config-reason"] == "interrupted (SIGINT)"
    assert node.unit_active("dcgm-exporter"), done.stderr
