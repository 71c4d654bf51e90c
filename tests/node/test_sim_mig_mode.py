"""MIG mode as the real driver sets it, through real pynvml over the simulator, and what apply and the
boot unit make of it: activated inside the call on an idle bare-metal GPU, pending with IN_USE while
something holds the GPU, pending with RESET_REQUIRED in a VM; Ampere keeps the mode over a reboot,
Hopper does not, and a Hopper in a VM never sends the node into a reboot loop."""

import json
import os
import subprocess

import pynvml
import pytest

from node_bootstrap.driver.sim import driver
from node_bootstrap.driver.sim.driver import Process, new_state
from tests.node.nodecli import Node, parse
from tests.support.systemd_unit import Unit, request_under

STATE = "nvidia.com/mig.config.state"



def _set(index, mode):
    """nvmlDeviceSetMigMode through pynvml: its return value is the activation status (the call itself
    raised nothing), then the mode read back."""
    pynvml.nvmlInit()
    try:
        dev = pynvml.nvmlDeviceGetHandleByIndex(index)
        status = pynvml.nvmlDeviceSetMigMode(dev, mode)
        return status, tuple(pynvml.nvmlDeviceGetMigMode(dev))
    finally:
        pynvml.nvmlShutdown()


@pytest.mark.parametrize("gpu", ["A100-SXM4-40GB", "A30", "H200"])
def test_an_idle_bare_metal_gpu_takes_the_mode_inside_the_call(sim, gpu):
    sim(gpu, 2)
    assert _set(1, 1) == (pynvml.NVML_SUCCESS, (1, 1))
    assert _set(0, 0) == (pynvml.NVML_SUCCESS, (0, 0))  # already current: nothing to activate


@pytest.mark.parametrize("gpu", ["A100-SXM4-40GB", "H200"])
@pytest.mark.parametrize("fault", ["processes", "reset-fails"])
def test_a_held_gpu_answers_success_with_activation_in_use_and_stays_pending(sim, gpu, fault):
    sim(gpu, 1, [fault])  # a compute process, or a client apply does not know, holds GPU 0
    status, mode = _set(0, 1)
    assert status == pynvml.NVML_ERROR_IN_USE and mode == (0, 1)


@pytest.mark.parametrize("gpu", ["A100-SXM4-40GB", "H200"])
def test_in_a_vm_the_mode_stays_pending_with_reset_required(sim, gpu):
    sim(gpu, 1, ["passthrough"])
    assert _set(0, 1) == (pynvml.NVML_ERROR_RESET_REQUIRED, (0, 1))


def test_ampere_keeps_a_pending_mode_over_a_reboot_and_hopper_loses_it():
    for gpu, after in (("A100-SXM4-40GB", (1, 1)), ("H200", (0, 0))):
        state = new_state(gpu, 1)
        assert driver.set_mig_mode(state, 0, 1, [], passthrough=True) == driver.ERROR_RESET_REQUIRED
        driver.reboot(state)
        assert (state["gpus"][0]["mig_current"], state["gpus"][0]["mig_pending"]) == after, gpu


def test_the_call_itself_still_refuses_bad_arguments_and_mig_off_with_instances():
    state = new_state("A100-SXM4-40GB", 1)
    with pytest.raises(driver.SimError) as bad:
        driver.set_mig_mode(state, 0, 2, [])
    assert bad.value.code == driver.ERROR_INVALID_ARGUMENT
    driver.set_mig_mode(state, 0, 1, [])
    driver.create_gpu_instance(state, 0, 9, 0, 4)
    with pytest.raises(driver.SimError) as busy:
        driver.set_mig_mode(state, 0, 0, [Process(1, 0, None, None)])
    assert busy.value.code == driver.ERROR_IN_USE


def test_apply_on_an_idle_bare_metal_node_needs_no_reset(tmp_path):
    node = Node(tmp_path, count=2)
    res = node.run("apply", "--sequence", "9-9")
    assert res.rc == 0, res.stderr
    assert res.json["changes"] == 2 * 5 and "resetting" not in res.stderr


def test_a_client_holding_the_gpu_leaves_the_mode_pending_and_apply_tries_the_reset(tmp_path):
    """reset-fails is a client apply does not know: the mode stays pending (IN_USE), the reset it then
    tries is refused as well, and only a reboot is left."""
    node = Node(tmp_path, count=1)
    res = node.run("apply", "--sequence", "9-9", "--sim-fault", "reset-fails")
    assert res.rc == 5 and res.json["outcome"] == "reboot-required"
    assert "(activation: In use by another client, NVML error 19)" in res.json["error"]["message"]
    assert "MIG mode pending, resetting" in res.stderr and "the GPU reset failed (exit 255" in res.stderr
    assert node.sim()["gpus"][0]["mig_current"] == 0 and node.sim()["gpus"][0]["mig_pending"] == 1


def _boot_unit_argv(node, root):
    """The installed unit's ExecStart as systemd would run it (its request file under the test root)."""
    with open(os.path.join(root, "etc/systemd/system/ack-mig-hook.service")) as fh:
        return request_under(Unit(fh.read()).exec_start(), root)


def _boot(node, argv, *extra):
    """One boot: the simulated node reboots, then its boot unit runs."""
    assert node.run("sim-reboot").rc == 0
    proc = subprocess.run(argv + list(extra), env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    return parse(proc.returncode, proc.stdout, proc.stderr)


def _states(node):
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        return [h["labels"][STATE] for h in json.load(fh)["history"]]


def test_hopper_in_a_vm_asks_for_one_reboot_and_then_fails_instead_of_looping(tmp_path):
    """H200 passed through to a VM: the mode stays pending (RESET_REQUIRED) and is gone after the reboot
    (Hopper does not keep it). The boot unit must not answer reboot-required at every boot."""
    node = Node(tmp_path, gpu="H200", count=1)
    node.kube_args = []  # labels go to the simulated node's own stand-in
    first = node.run("apply", "--sequence", "3g.71gb-3g.71gb", "--boot-unit", "--sim-fault", "passthrough")
    assert first.rc == 5 and first.json["outcome"] == "reboot-required", first.stderr
    assert first.json["boot_unit"]["installed"] is True
    again = node.run("apply", "--sequence", "3g.71gb-3g.71gb", "--sim-fault", "passthrough")
    assert again.rc == 5  # no reboot happened yet: asking for one is still right
    argv = _boot_unit_argv(node, node.host)
    for boot in range(3):
        res = _boot(node, argv, "--sim-fault", "passthrough")  # still the same VM
        assert res.rc == 1, (boot, res.stderr)
        assert res.json["outcome"] == "failed" and res.json["error"]["code"] == "reboot-ineffective"
        assert "already rebooted" in res.json["error"]["message"]
    states = _states(node)
    assert states.count("rebooting") == 2 and states[-1] == "failed"  # the two applies before any reboot
    assert [s for s in states if s != "pending"][2:] == ["failed"] * 3  # never "rebooting" after a boot


def test_ampere_in_a_vm_reboots_once_and_the_boot_unit_finishes_the_job(tmp_path):
    node = Node(tmp_path, count=1)
    node.kube_args = []
    first = node.run("apply", "--sequence", "9-9", "--boot-unit", "--sim-fault", "passthrough")
    assert first.rc == 5, first.stderr
    argv = _boot_unit_argv(node, node.host)
    res = _boot(node, argv, "--sim-fault", "passthrough")
    assert res.rc == 0 and res.json["outcome"] == "success", res.stderr
    assert res.json["changes"] == 4  # the mode came back current from the InfoROM: instances only
    assert _states(node)[-1] == "success"
    assert not os.path.exists(os.path.join(str(tmp_path), "var", "reboot-requested.json"))  # cleared


def test_the_reboot_guard_only_turns_a_second_boots_same_request_into_a_failure(tmp_path):
    from node_bootstrap.errors import GpuBusy, RebootRequired
    from node_bootstrap.host.rebootguard import RebootGuard, kernel_boot_id

    request = {"kind": "sequence", "value": "9-9"}
    pending = RebootRequired("MIG mode is pending on GPU 0 and the GPUs are passed through to a VM")
    first = RebootGuard(str(tmp_path), "boot-a", request)
    assert first.review(pending) is pending
    assert first.review(pending) is pending  # the same boot again: no reboot happened yet
    assert RebootGuard(str(tmp_path), "boot-b", {"kind": "size", "value": "19"}).review(pending) is pending
    again = RebootGuard(str(tmp_path), "boot-c", {"kind": "size", "value": "19"}).review(pending)
    assert again.code == "reboot-ineffective" and again.exit_code == 1 and again.outcome == "failed"
    busy = GpuBusy("pid 7")
    assert RebootGuard(str(tmp_path), "boot-d", {"kind": "size", "value": "19"}).review(busy) is busy
    RebootGuard(str(tmp_path), "boot-d", request).clear()
    assert RebootGuard(str(tmp_path), "boot-e", request).review(pending) is pending  # cleared: ask once more
    assert RebootGuard(str(tmp_path / "x"), None, request).review(pending) is pending  # no boot id: no guard
    assert kernel_boot_id() and kernel_boot_id() == kernel_boot_id()  # Linux: one id per boot
