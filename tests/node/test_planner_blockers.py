"""The node planner's blockers (node_bootstrap/commands/planner.py ``blockers``), unit-tested on real plans
of a live A100 state: a process NVML lists without a GPU instance (``gpuInstanceId`` 0xFFFFFFFF, or the v1
struct of an old pynvml: nvmlProcessInfo_t in nvml.h) could run in the instance a destroy removes, so it
blocks every destroy; it does not block creating beside kept instances (issue 30, "tests that bite")."""

from node_bootstrap.commands.planner import blockers, busy, plan_gpu
from node_bootstrap.driver.live import LiveProcess
from tests.node.test_planner_and_backend import gi, gpu, seq

KEPT_3G, DOOMED_3G = gi(1, 9, 0, 4, 3), gi(2, 9, 4, 4, 3)


def planned(processes, sequence):
    live = gpu([KEPT_3G, DOOMED_3G], pids=[p.pid for p in processes])._replace(processes=tuple(processes))
    return plan_gpu(live, seq(sequence))


def test_a_process_without_a_gpu_instance_blocks_a_destroy():
    unplaced = LiveProcess(4242, None, None)
    plan = planned([unplaced], "3g.20gb-2g.10gb-1g.5gb")  # keeps GI 1, destroys GI 2 to make room
    assert plan.destroy_gis == (2,)
    assert blockers(plan) == (unplaced,) and busy([plan]) == [plan]


def test_a_process_in_a_kept_instance_does_not_block_the_destroy_beside_it():
    served, doomed = LiveProcess(5000, 1, 0), LiveProcess(5004, 2, 0)
    plan = planned([served, doomed], "3g.20gb-2g.10gb-1g.5gb")
    assert blockers(plan) == (doomed,)
    assert blockers(planned([served], "3g.20gb-2g.10gb-1g.5gb")) == ()


def test_without_a_destroy_nothing_blocks_not_even_an_unplaced_process():
    plan = planned([LiveProcess(4242, None, None)], "3g.20gb-3g.20gb")  # the GPU holds this already
    assert plan.converged and blockers(plan) == ()
