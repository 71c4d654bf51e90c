"""``disable``: turn MIG off on every GPU and undo what this tool left on the node; ``uninstall-boot-unit``.

``disable``, with the node lock held, in the frame ``apply`` runs in (:func:`apply.run_job`: a node NVIDIA's
mig-manager is in charge of is refused; every way out ends in a final state, clients started again and
an Event):

1. Read NVML. A GPU with compute processes that needs a change refuses the whole run (``gpu-busy``,
   their PIDs named) before anything changes, unless ``--force``: the same rule as ``apply``.
2. Remove the boot unit first (and the holders units: no report after the GPUs are off): a reboot that a
   pending mode asks for must not bring the layout back.
3. Label the node ``pending``, stop the GPU's clients and wait until they let go, destroy every compute
   instance, then every GPU instance (NVML refuses to turn MIG off while instances exist), then set MIG
   mode off. A mode left pending (Ampere) needs a GPU reset, ``nvidia-smi -r`` where allowed, otherwise
   the outcome is ``reboot-required`` (rerun ``disable`` after the reboot to clear the labels).
4. Read back: any GPU not off in current and pending mode is a failure. Start the clients again (the
   device plugin's static pod comes back and re-enumerates; ``--device-plugin-restart pod-delete``
   deletes a DaemonSet plugin's pod), wait until the node's allocatable ``nvidia.com/mig-*`` resources
   are gone, and remove the labels and the reason annotation this tool writes.

A GPU that is not MIG-capable is already "off". A rerun on a node that is off makes no NVML call that
changes anything (``changes`` 0) and runs no systemctl command.
"""

import argparse
import time
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..host import bootunit
from .apply import _Apply, _labeler, run_job
from .backend import Backend
from .common import boot_unit_files, boot_unit_outcome, gpus_json, stderr_log
from ..kube.deviceplugin import RESOURCE_PREFIX, poll_node, restart_by_pod_delete
from ..errors import OUTCOME_SUCCESS, BadInput, NodeFailure
from ..kube.client import KubeError
from ..outside import as_object, digits
from ..driver.live import MIG_DISABLED, LiveGpu, LiveProcess
from ..driver.nvml import NvmlWriter
from ..host.rebootguard import RebootGuard
from .reconcile import Host, _converge_instances, _handle_processes, _set_modes, before_first_change, release_scope
from .simhost import host_runner, is_host_root, is_sim


class OffPlan(typing.NamedTuple):
    """What turning MIG off takes on one GPU (duck-compatible with the GpuPlan fields reconcile reads)."""

    index: int
    name: str
    destroy_cis: Tuple[Tuple[int, int], ...]  # (gi id, ci id)
    destroy_gis: Tuple[int, ...]
    disable_mig: bool  # current or pending MIG mode is not "disabled"
    pids: Tuple[int, ...]
    pids_unreadable: str = ""
    processes: Tuple[LiveProcess, ...] = ()
    enable_mig = False
    create = ()  # type: Tuple[Any, ...]
    create_cis = ()  # type: Tuple[Tuple[int, int], ...]

    @property
    def converged(self):
        # type: () -> bool
        return not (self.disable_mig or self.destroy_cis or self.destroy_gis)

    @property
    def action_count(self):
        # type: () -> int
        return int(self.disable_mig) + len(self.destroy_cis) + len(self.destroy_gis)


def plan_off(gpus, _spec=None):
    # type: (List[LiveGpu], Any) -> List[OffPlan]
    """Pure: per GPU, the instances to destroy (compute first) and whether the mode must be set off."""
    plans = []
    for gpu in gpus:
        capable = gpu.mig_capable  # no MIG mode at all: nothing to turn off
        plans.append(OffPlan(
            index=gpu.index, name=gpu.name,
            destroy_cis=tuple((gi.id, ci.id) for gi in gpu.gis for ci in gi.cis),
            destroy_gis=tuple(gi.id for gi in gpu.gis),
            disable_mig=capable and (gpu.mig_current != MIG_DISABLED or gpu.mig_pending != MIG_DISABLED),
            pids=gpu.pids, pids_unreadable=gpu.pids_unreadable, processes=gpu.processes))
    return plans


class OffReport(typing.NamedTuple):
    plans: List[OffPlan]
    gpus: List[LiveGpu]
    resets: int
    client_problems: List[str]


def turn_off(writer, host, force=False, allow_reset=True, before_change=None):
    # type: (NvmlWriter, Host, bool, bool, Optional[Callable[[], None]]) -> OffReport
    """MIG off on every GPU; ``before_change`` runs once, before the first change, only if one is due."""
    gpus = writer.read_all()
    plans = plan_off(gpus)
    if all(p.converged for p in plans):
        return OffReport(plans, gpus, 0, [])
    before_first_change(writer, plans, gpus, force, before_change)  # the checks apply makes, in its order
    plans = _handle_processes(writer, plans, None, host, force, replan=plan_off)
    stopped = host.stop_clients()
    resets = 0
    try:
        host.wait_released(release_scope(plans, gpus))
        _converge_instances(writer, [p for p in plans if not p.converged], host)
        resets = _set_modes(writer, [p for p in plan_off(writer.read_all()) if not p.converged], host,
                            allow_reset, enable=False)
        gpus = writer.read_all()
        plans = plan_off(gpus)
        left = [p for p in plans if not p.converged]
        if left:
            raise NodeFailure("GPU %s still has MIG mode or instances after turning MIG off (read back)"
                              % ", ".join(str(p.index) for p in left), code="verify-failed")
    finally:
        problems = host.start_clients(stopped)
    return OffReport(plans, gpus, resets, problems)


UNREADABLE = "(allocatable unreadable: status.allocatable is no object)"


def _mig_allocatable(node):
    # type: (dict) -> Dict[str, int]
    """The ``nvidia.com/mig-*`` resources still allocatable, by name; a value that is no count, or a status or
    allocatable of another shape than an object (a proxy's answer, a mangled Node), is one entry of its own:
    a Node that cannot be read never shows the resources gone (disable would report MIG off done). An
    allocatable left out (a Node whose kubelet has posted none) reads as none, as the API serves it."""
    status = as_object(node).get("status")
    allocatable = as_object(status).get("allocatable")
    if (status is not None and not isinstance(status, dict)) or \
            (allocatable is not None and not isinstance(allocatable, dict)):
        return {UNREADABLE: 1}
    out = {}
    for key, value in as_object(allocatable).items():
        if key.startswith(RESOURCE_PREFIX):
            count = digits(value)  # not int(): "\u0661" and "7_0" are no quantity the kubelet writes
            if count is None:  # a value that is no count cannot show the resource gone
                out["%s (not a count)" % key] = 1
            elif count:
                out[key] = count
    return out


def wait_mig_resources_gone(client, node_name, timeout, interval=3.0, sleep=time.sleep, clock=time.monotonic):
    # type: (Any, str, float, float, Callable[[float], None], Callable[[], float]) -> Dict[str, Any]
    """Poll the Node (deviceplugin.poll_node: a throttled read's Retry-After honoured within the timeout) until
    no ``nvidia.com/mig-*`` resource is allocatable. ``error``: the last read's, when it failed.

    Allocatable, not capacity: when a device plugin stops advertising a resource the kubelet marks its
    devices unhealthy at once (allocatable 0) but keeps them in capacity for a grace period of minutes
    (pkg/kubelet/cm/devicemanager, endpointStopGracePeriod) before it drops the resource.
    """
    node, error, ready = poll_node(client, node_name, lambda n: n is not None and not _mig_allocatable(n),
                                   timeout, interval, sleep, clock)
    if ready:
        return {"mig_resources_left": {}, "ready": True}
    out = {"mig_resources_left": _mig_allocatable(node) if node is not None else {}, "ready": False}
    if error:
        out["error"] = error
    return out


class _Disable(_Apply):
    """One disable: apply's bookkeeping (clients, writer, resets, one failure path), MIG-off steps."""

    def __init__(self, args, backend, labeler, log):
        # type: (argparse.Namespace, Backend, Any, Any) -> None
        super(_Disable, self).__init__(args, backend, labeler, log)
        self.result = {"command": "disable", "backend": backend.name, "outcome": OUTCOME_SUCCESS,
                       "changes": 0}  # type: Dict[str, Any]

    def _install_boot_unit(self):
        # type: () -> None
        pass  # apply re-installs its unit on reboot-required; disable has just removed it

    def _remove_boot_unit(self):
        # type: () -> None
        if "boot_unit" not in self.result:
            self.result["boot_unit"] = remove_boot_unit(self.args, self.log)

    def _before_change(self):
        # type: () -> None
        self._remove_boot_unit()
        self.labeler.set("pending")

    def run_locked(self):
        # type: () -> None
        args, backend, control = self.args, self.backend, self.control
        assert control is not None
        host = self._host()
        writer = NvmlWriter(backend.nv, stamp=host.start_time)
        with writer:
            self.writer = writer
            try:
                report = turn_off(writer, host, force=args.force, allow_reset=not args.no_reset,
                                  before_change=self._before_change)
                self._remove_boot_unit()  # the GPUs were off already: the unit may still be there
                self.result["changes"] = writer.changes + len(self.resets)
                self.result["gpus"] = gpus_json(report.gpus)
                self._problems(report.client_problems + control.start(control.leftovers()))
                if self.result["boot_unit"].get("error"):
                    raise NodeFailure(self.result["boot_unit"]["error"], code="boot-unit-failed")
                resources = self._after_off(self.result["changes"])
                if resources:
                    self.result["resources"] = resources
                # An earlier apply's reboot request is moot once MIG is off: a later apply of the same layout
                # that needs a reboot must be asked for, not called ineffective.
                RebootGuard(args.state_dir, None, {}).clear()
                self.labeler.clear()
            except BaseException as exc:  # noqa: B036 - SIGTERM and SIGINT too: every path ends in a final label
                self.fail(exc, label=True)

    def _after_off(self, changes):
        # type: (int) -> Dict[str, Any]
        """Device plugin restart (pod-delete) and the wait until no MIG resource is allocatable."""
        args, labeler = self.args, self.labeler
        if not labeler.enabled or getattr(labeler.client, "get_node", None) is None:
            return {}  # no API server (a simulated node's label stand-in has no capacity)
        client, node = labeler.client, labeler.node_name
        if changes and args.device_plugin_restart == "pod-delete":
            try:
                deleted = restart_by_pod_delete(client, node, args.device_plugin_namespace,
                                                args.device_plugin_selector)
                self.log("device plugin pods deleted: %s" % (", ".join(deleted) or "none found"))
            except KubeError as exc:
                self.log("device plugin restart failed: %s" % exc)
        if args.capacity_timeout <= 0:
            return {}
        waited = wait_mig_resources_gone(client, node, args.capacity_timeout, args.capacity_interval)
        if not waited["ready"] and waited.get("error"):  # the API server's answer, not the plugin, is the news
            raise NodeFailure("the node's MIG resources could not be read within %gs after MIG was turned off (last "
                              "left: %s): %s" % (args.capacity_timeout, ", ".join(
                                  "%s=%d" % kv for kv in sorted(waited["mig_resources_left"].items())) or "none read",
                                  waited["error"]), code="capacity-timeout")
        if not waited["ready"]:
            raise NodeFailure("the node still offers %s %ds after MIG was turned off: is the device plugin running "
                              "and restarted?" % (", ".join("%s=%d" % kv for kv in sorted(waited["mig_resources_left"]
                                                                                         .items())),
                                                  args.capacity_timeout), code="capacity-timeout")
        return waited


def remove_boot_unit(args, log):
    # type: (argparse.Namespace, Callable[[str], None]) -> Dict[str, Any]
    """Remove the boot unit under ``--root``; a problem is reported in the result, never raised."""
    if is_sim(args) and is_host_root(args.root):
        # A simulated node must never remove this machine's real unit.
        return {"removed": False, "skipped": "simulated node: its boot unit is under --root DIR"}
    try:
        removed = boot_unit_files("removed", lambda: bootunit.uninstall(root=args.root, runner=host_runner(args)))
    except NodeFailure as exc:
        return {"removed": False, "error": str(exc)}
    if removed.changed:
        log("boot unit removed: %s" % removed.unit_path)
    out = {"removed": removed.changed, "unit": removed.unit_path, "request": removed.request_path,
           "commands": removed.commands}  # type: Dict[str, Any]
    if removed.holders_units:
        out["holders_units"] = list(removed.holders_units)
    if removed.errors:
        out["error"] = "; ".join(removed.errors)
    return out


def cmd_disable(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    log = stderr_log(args)
    job = _Disable(args, backend, _labeler(args, log), log)
    return run_job(job, lambda: None)


def cmd_uninstall_boot_unit(args, backend):
    # type: (argparse.Namespace, Optional[Backend]) -> Tuple[Dict[str, Any], int]
    """Only the boot unit: the GPUs keep their layout until the next reboot (instances never survive one)."""
    if is_sim(args) and is_host_root(args.root):
        raise BadInput("a simulated node's boot unit is under --root DIR, never in this machine's /etc")
    return boot_unit_outcome("uninstall-boot-unit", boot_unit_files(
        "removed", lambda: bootunit.uninstall(root=args.root, runner=host_runner(args))), "removed")
