"""Choosing the NVML backend and wiring what apply does outside NVML, for a real node or the simulator.

``--backend nvml`` loads the real ``libnvidia-ml.so.1`` through pynvml; ``--backend sim:<GPU>:<count>``
installs the simulated library (``node_bootstrap.driver.sim``) into pynvml instead. Either way the same
:mod:`node_bootstrap.driver.nvml` code runs. GPU resets and process kills differ: ``nvidia-smi -r`` and
signals on a node, state transitions in the simulator.
"""

import os
import re
import tempfile
import typing
from typing import Any, Callable, List, Optional, Tuple

from ..host import processkill
from ..errors import BadInput, NodeFailure
from ..mig import MigInputError, find_gpu
from ..host.runner import run
from ..driver.sim.driver import new_state
from ..driver.sim.faults import FaultError, parse_faults
from ..driver.sim.library import SimNvmlLibrary
from ..driver.sim.store import SimStateError, SimStore

_SIM = re.compile(r"^sim:(?P<gpu>[^:]+):(?P<count>[0-9]{1,2})\Z")
MAX_SIM_GPUS = 16


class Backend(typing.NamedTuple):
    name: str
    nv: Any  # the pynvml module
    sim: Optional[SimNvmlLibrary]


def open_backend(spec, sim_state=None, faults=None):
    # type: (str, Optional[str], Optional[List[str]]) -> Backend
    faults = faults or []
    if spec == "nvml":
        if faults:
            raise BadInput("--sim-fault needs --backend sim:<GPU>:<count>")
        try:
            import pynvml
        except ImportError:
            raise NodeFailure("pynvml is not installed; install nvidia-ml-py", code="nvml-unavailable")
        return Backend("nvml", pynvml, None)
    match = _SIM.match(spec or "")
    if not match:
        raise BadInput("bad --backend %r; use nvml or sim:<GPU>:<count>, e.g. sim:A100-SXM4-40GB:8" % (spec or "")[:60])
    try:
        model = find_gpu(match.group("gpu"))
    except MigInputError as exc:
        raise BadInput(str(exc))
    count = int(match.group("count"))
    if not 1 <= count <= MAX_SIM_GPUS:
        raise BadInput("sim GPU count must be 1 to %d, got %d" % (MAX_SIM_GPUS, count))
    try:
        parsed = parse_faults(faults)
    except FaultError as exc:
        raise BadInput(str(exc))
    try:
        import pynvml  # the simulator is a library under pynvml: nothing of it is written without pynvml
    except ImportError:
        raise NodeFailure("pynvml is not installed; install nvidia-ml-py (the simulator runs under it)",
                          code="nvml-unavailable")
    if sim_state is None:  # no state file: a fresh node for this one command
        sim_state = os.path.join(tempfile.mkdtemp(prefix="ack-mig-sim-"), "state.json")
    store = SimStore(sim_state)
    try:
        state = store.init(new_state(model.key, count, model.name))
    except SimStateError as exc:
        raise BadInput(str(exc))
    if state.get("gpu") != model.key or state.get("count") != count:
        raise BadInput("--sim-state %s holds %s x %s, but --backend asks for %d x %s; use another state file"
                       % (sim_state, state.get("count"), state.get("gpu"), count, model.key))
    library = SimNvmlLibrary(store, parsed)
    library.install()
    return Backend("sim:%s:%d" % (model.key, count), pynvml, library)


def reset_gpus(backend, runner=run):
    # type: (Backend, Callable[..., Tuple[int, str]]) -> Callable[[List[int]], Tuple[int, str]]
    if backend.sim is not None:
        return backend.sim.reset

    def reset(indices):
        # type: (List[int]) -> Tuple[int, str]
        return runner(["nvidia-smi", "-r", "-i", ",".join(str(i) for i in indices)], 300)

    return reset


def process_ops(backend):
    # type: (Backend) -> processkill.ProcessOps
    """What --force uses to see and end processes: the kernel's (``/proc``, signals), or for a simulated
    node its driver's simulated processes (never a process of this machine, whatever its PID)."""
    if backend.sim is not None:
        sim = backend.sim
        return processkill.ProcessOps(sim.start_time, sim.signal, lambda pid: None if pid > 1 else
                                      "PID %d is not a process that --force may signal" % pid)
    return processkill.HOST_OPS


def end_processes(backend, log, grace=10.0):
    # type: (Backend, Callable[[str], None], float) -> Callable[[processkill.Targets, Callable[[int], bool]], List[int]]
    """``--force``: SIGTERM, one grace period for all, then SIGKILL (processkill.end_all, with its rules)."""
    ops = process_ops(backend)

    def end(targets, still_listed):
        # type: (processkill.Targets, Callable[[int], bool]) -> List[int]
        return processkill.end_all(targets, still_listed, log, grace, ops)

    return end
