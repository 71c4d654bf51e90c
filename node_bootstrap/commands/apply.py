"""``apply``: bring every GPU to the partition, with the node lock held, and end every way out (an error,
SIGTERM, SIGINT) in a final node label, clients started again and a result document.

The reconcile itself (assert, then apply) is :mod:`node_bootstrap.commands.reconcile`; this module wires it to
the host: clients, GPU resets, the device plugin and capacity wait, node labels and the boot unit.
"""

import argparse
import json
import os
import socket
import time
from contextlib import ExitStack
from typing import Any, Callable, Dict, List, Optional, Tuple

from .backend import Backend, end_processes, process_ops, reset_gpus
from ..host.clients import ClientControl, check_state_dir, parse_clients
from ..host import bootunit
from ..host.bootunit import check_values
from ..host.holdersunit import check as check_holders
from .common import as_failure, boot_args, gpus_json, holders_report, install_boot_unit, read_gpus_each, stderr_log
from ..driver.live import LiveGpu, effective_model, live_layout
from ..kube.deviceplugin import expected_capacity, restart_by_pod_delete, wait_for_capacity
from ..errors import OUTCOME_SUCCESS, BadInput, DestroyRequired, Locked, NodeFailure, Terminated, one_line
from ..kube.events import record_final_state
from ..host.holders import DEFAULT_DEVICE_GLOB, MIG_MINORS, Scope, look, wait_released
from ..kube.allocations import checkpoint_signature
from ..kube.client import KubeClient, KubeError, load_kubeconfig, node_name_from_certificate
from ..host.lock import NodeLock
from ..kube.migmanager import refuse_if_mig_manager
from ..mig import MigInputError, PartitionSpec
from ..mig.annotations import write_layouts
from ..kube.nodelabels import NodeLabeler, sequence_label_value
from ..driver.nvml import NvmlUnavailable, NvmlWriter
from .holdings import allocations_reader, checkpoint_reader, follow, report_value, same_report
from .planner import GpuPlan, node_sequence
from .reconcile import Host, ReleaseScope, reconcile
from ..host.rebootguard import RebootGuard, kernel_boot_id
from ..request import GpuLayouts, request_from_options
from ..driver.sim.driver import mig_minors
from .simhost import (SimNodeClient, host_root, host_runner, hung_mount_stat, is_host_root, sim_node_client,
                      under)

STATE_BY_OUTCOME = {"success": "success", "failed": "failed", "reboot-required": "rebooting"}


def _labeler(args, log):
    # type: (argparse.Namespace, Any) -> NodeLabeler
    if args.no_label:
        return NodeLabeler(None, None, log)
    stand_in = sim_node_client(args)
    if stand_in is not None:  # a simulated node without --kubeconfig: its own node object, never the cluster's
        return NodeLabeler(stand_in, args.node_name or "simulated-node", log)  # type: ignore[arg-type]
    try:
        config = load_kubeconfig(args.kubeconfig)
        client = KubeClient(config)
    except KubeError as exc:
        labeler = NodeLabeler(None, args.node_name, log)
        labeler.error = "no Kubernetes access: %s" % exc
        log(labeler.error)
        return labeler
    name = args.node_name or node_name_from_certificate(config) or socket.gethostname()
    return NodeLabeler(client, name, log)


def _mig_minors_text(args, backend):
    # type: (argparse.Namespace, Backend) -> str
    """The driver's capability table: a real node's /proc file, or the one a simulated node's driver
    publishes under its host directory (written from :func:`sim.driver.mig_minors`, as at module load)."""
    path = MIG_MINORS
    if backend.sim is not None:
        path = under(host_root(args.sim_state), MIG_MINORS)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(mig_minors(backend.sim.store.load()["count"]))
    try:
        with open(path) as fh:
            return fh.read()
    except (IOError, OSError):
        return ""  # no MIG capabilities published: no capability file to wait for


def _release_wait(args, backend, log):
    # type: (argparse.Namespace, Backend, Any) -> Any
    # A simulated node has no device files of its own: look at this machine's only when asked to.
    pattern = args.gpu_device_glob or (DEFAULT_DEVICE_GLOB if backend.sim is None else None)
    stat_path = hung_mount_stat(os.stat) if backend.sim is not None and backend.sim.faults.hung_mount else os.stat

    def wait(scope):
        # type: (ReleaseScope) -> None
        if not pattern or args.client_stop_timeout <= 0 or scope.empty:
            return
        what = Scope(pattern, tuple(minor for _, minor in scope.gpus),
                     tuple((minor, gi, cis) for _, minor, gi, cis in scope.instances),
                     _mig_minors_text(args, backend) if scope.instances else "")
        me = os.getpid()  # read here: each look runs in a child, and this process's NVML holds the GPUs

        def find(note):
            # type: (Any) -> List[Any]
            return look(what, ignore_pids=[me], stat_path=stat_path, note=note)

        waited = wait_released(find, args.client_stop_timeout, log)
        if waited >= 0.5:
            log("the GPUs were released after %.1fs" % waited)

    return wait


def _sequence_value(plans):
    # type: (List[GpuPlan]) -> Optional[str]
    """The sequence label's value: the one layout every GPU holds (reconcile refused a request that gives
    GPUs different ones); its ids form only where every GPU's ids agree too."""
    if len(set(p.layout.sequence for p in plans)) > 1:
        return None  # a per-GPU request (version 2): no one sequence; the layouts annotation says it per GPU
    ids = set("-".join(str(i.profile.id) for i in p.layout.instances) for p in plans)
    return sequence_label_value(node_sequence(plans), ids.pop() if len(ids) == 1 else "")


def _layouts_value(plans):
    # type: (List[GpuPlan]) -> str
    """The layouts annotation: what each GPU holds after apply (a GPU left as it is: what it had)."""
    return write_layouts({p.index: [(i.profile.name, i.start) for i in p.target.instances] for p in plans})


def _read_back_layouts(gpus, unreadable):
    # type: (List[LiveGpu], Dict[int, NodeFailure]) -> str
    """The layouts annotation after a failure: what each GPU was read back holding; null for a GPU that could
    not be read (lost) or holds an instance its model cannot name, so no reader takes it for empty or for the
    layout the last success wrote."""
    per_gpu = dict((i, None) for i in unreadable)  # type: Dict[int, Optional[List[Tuple[str, int]]]]
    for gpu in gpus:
        layout = live_layout(gpu, effective_model(gpu)[0])
        per_gpu[gpu.index] = [(i.profile.name, i.start) for i in layout.instances] if layout is not None else None
    return write_layouts(per_gpu)


def _after_success(args, labeler, plans, changes, log):
    # type: (argparse.Namespace, NodeLabeler, List[GpuPlan], int, Any) -> Dict[str, Any]
    """Device plugin restart and capacity wait; returns the capacity report ({} when not checked)."""
    if not labeler.enabled or isinstance(labeler.client, SimNodeClient):
        return {}  # a simulated node's stand-in has no pods and no capacity to wait for
    client, node = labeler.client, labeler.node_name
    assert client is not None and node is not None
    if changes and args.device_plugin_restart == "pod-delete":
        try:
            deleted = restart_by_pod_delete(client, node, args.device_plugin_namespace, args.device_plugin_selector)
            log("device plugin pods deleted: %s" % (", ".join(deleted) or "none found"))
        except KubeError as exc:
            log("device plugin restart failed: %s" % exc)
    if args.capacity_timeout <= 0:
        return {}
    capacity = wait_for_capacity(client, node, expected_capacity(plans), args.capacity_timeout,
                                 args.capacity_interval)
    if not capacity["ready"] and capacity.get("error"):  # the API server's answer, not the plugin, is the news
        raise NodeFailure("the node's MIG resources could not be read within %gs (expected %s, last reported %s): %s"
                          % (args.capacity_timeout, _fmt(capacity["expected"]), _fmt(capacity["reported"]) or "none",
                             capacity["error"]), code="capacity-timeout")
    if not capacity["ready"]:
        raise NodeFailure("the node does not report the MIG resources after %ds (expected %s, reported %s): is the "
                          "device plugin running with the mixed strategy?"
                          % (args.capacity_timeout, _fmt(capacity["expected"]), _fmt(capacity["reported"]) or "none"),
                          code="capacity-timeout")
    return capacity


def _fmt(counts):
    # type: (Dict[str, int]) -> str
    return ", ".join("%s=%d" % kv for kv in sorted(counts.items()))


def _failure(exc, backend):
    # type: (BaseException, Backend) -> NodeFailure
    """Any way an apply can stop, as a NodeFailure (interrupts included: they end in a final state too)."""
    if isinstance(exc, Terminated):
        return NodeFailure("interrupted by SIGTERM", code="interrupted")
    if isinstance(exc, KeyboardInterrupt):
        return NodeFailure("interrupted (SIGINT)", code="interrupted")
    if isinstance(exc, NvmlUnavailable):
        return NodeFailure(str(exc), code="nvml-unavailable")
    if isinstance(exc, Exception):
        return as_failure(exc, backend)
    return NodeFailure("internal error: %s" % exc.__class__.__name__, code="internal-error")


def _boot_unit(args, backend, spec):
    # type: (argparse.Namespace, Backend, PartitionSpec) -> Dict[str, Any]
    if backend.sim is not None and is_host_root(args.boot_unit_root):
        # A simulated node must never install a unit into this machine's real systemd.
        return {"installed": False, "skipped": "simulated node: give --boot-unit-root DIR to install one there"}
    return install_boot_unit(args, spec, args.boot_unit_root)


def _stale_boot_unit(args, backend, spec):
    # type: (argparse.Namespace, Backend, PartitionSpec) -> str
    if backend.sim is not None and is_host_root(args.boot_unit_root):
        return ""  # a simulated node's unit is never this machine's
    try:
        return bootunit.stale(spec, args.boot_unit_root)
    except (IOError, OSError, ValueError):
        return ""


def _boot_id(backend):
    # type: (Backend) -> Optional[str]
    if backend.sim is not None:
        return "sim-boot-%d" % backend.sim.store.load().get("boots", 0)
    return kernel_boot_id()


class _Apply(object):
    """One apply: what exists so far (clients, NVML writer, resets), so that every way out, an exception,
    SIGTERM or SIGINT included, ends in :meth:`fail`: clients started again, a final label, a result."""

    def __init__(self, args, backend, labeler, log):
        # type: (argparse.Namespace, Backend, NodeLabeler, Any) -> None
        self.args, self.backend, self.labeler, self.log = args, backend, labeler, log
        self.result = {"command": "apply", "backend": backend.name, "outcome": OUTCOME_SUCCESS, "changes": 0,
                       "sequence": None}  # type: Dict[str, Any]
        self.exit_code = 0
        self.spec = None  # type: Optional[PartitionSpec]
        self.allow_destroy = True  # False: a "destroy nothing" request (--no-destroy, "destroy": false)
        self.control = None  # type: Optional[ClientControl]
        self.writer = None  # type: Optional[NvmlWriter]
        self.resets = []  # type: List[List[Any]]
        self.failed = False

    def _problems(self, problems):
        # type: (List[str]) -> None
        merged = list(self.result.get("client_problems", []))
        for problem in problems:  # once each: a unit that would not start is named by each start of the run
            if problem not in merged:
                merged.append(problem)
        if merged:
            self.result["client_problems"] = merged

    def _install_boot_unit(self):
        # type: () -> None
        # After a reboot no instance is left (and Hopper may come back with MIG off): the unit re-applies
        # before the kubelet starts. Installed while the node lock is held, as soon as the GPUs are right
        # (or only a reboot is missing: the reboot finishes the job), whatever the capacity wait says.
        if self.args.boot_unit and self.spec is not None and "boot_unit" not in self.result:
            self.result["boot_unit"] = _boot_unit(self.args, self.backend, self.spec)
        elif not self.args.boot_unit and self.spec is not None and "boot_unit" not in self.result:
            why = _stale_boot_unit(self.args, self.backend, self.spec)
            if why:
                self.result["boot_unit"] = {"installed": False, "stale": why}
                self.log("warning: " + why)

    def _guard(self):
        # type: () -> RebootGuard
        assert self.spec is not None
        return RebootGuard(self.args.state_dir, _boot_id(self.backend), self.spec.to_dict())

    def _host(self):
        # type: () -> Host
        """What reconcile (and disable) may do to the node beyond NVML: stop and start the GPU's clients,
        reset GPUs (each reset counted as a change), kill processes, wait until the GPUs are let go."""
        args, backend, log = self.args, self.backend, self.log
        assert self.control is not None
        reset = reset_gpus(backend)

        def counted_reset(gpus):
            # type: (List[Any]) -> Tuple[int, str]
            self.resets.append(gpus)  # a GPU reset changes the GPU: it counts like a mutating call
            return reset(gpus)

        return Host(self.control.stop, self.control.start, counted_reset, end_processes(backend, log), log,
                    _release_wait(args, backend, log), process_ops(backend).start_time, self._allocations())

    def _allocations(self, list_pods=True):
        # type: (bool) -> Any
        """kubelet's allocations, read afresh each call; the node's pods listed with the kubelet's credential
        where there is one (a simulated node's stand-in lists none: every entry of its checkpoint counts).
        ``list_pods=False``: the checkpoint alone, every entry counting (more holders, never fewer)."""
        client = self.labeler.client if self.labeler.enabled and list_pods else None
        return allocations_reader(checkpoint_reader(self.args, self.backend), client, self.labeler.node_name,
                                  self.log)

    def run_locked(self):
        # type: () -> None
        args, backend, log, control = self.args, self.backend, self.log, self.control
        assert self.spec is not None and control is not None
        host = self._host()
        writer = NvmlWriter(backend.nv, stamp=host.start_time)  # start times taken as NVML lists processes
        with writer:
            self.writer = writer
            try:
                report = reconcile(writer, self.spec, host, force=args.force, allow_reset=not args.no_reset,
                                   on_change=lambda plans: self.labeler.set("pending"),
                                   allow_destroy=self.allow_destroy, at_boot=getattr(args, "at_boot", False))
                self.result["changes"] = writer.changes + len(self.resets)
                self.result["sequence"] = node_sequence(report.plans)
                self.result["gpus"] = gpus_json(report.gpus)
                # Why a GPU was left as it was: the first reason this run found (reconcile keeps a GPU it left so,
                # with that reason, for the rest of the run, so the last plans hold every one)
                left = [{"gpu": q.index, "why": q.left} for q in report.plans if q.left]
                if left:  # a per-GPU request (version 2) left these GPUs as they were: the function reports why
                    self.result["left"] = left
                self._install_boot_unit()
                self._problems(report.client_problems + control.start(control.leftovers()))
                capacity = _after_success(args, self.labeler, report.plans, self.result["changes"], log)
                if capacity:
                    self.result["capacity"] = capacity
                self._guard().clear()
                holders = report_value(report.gpus, host.allocations())
                self.result["holders"] = json.loads(holders)
                self.labeler.set("success", _sequence_value(report.plans), layouts=_layouts_value(report.plans),
                                 holders=holders)
            except BaseException as exc:  # noqa: B036 - SIGTERM and SIGINT too: every path ends in a final label
                self.fail(exc, label=True)

    def fail(self, exc, label):
        # type: (BaseException, bool) -> None
        """Record the failure, start stopped clients again, label the node (when ``label``). Runs once."""
        if self.failed:
            return
        self.failed = True
        failure = _failure(exc, self.backend)
        if self.spec is not None:
            try:
                failure = self._guard().review(failure)  # a reboot that did not help is not asked for again
            except Exception:  # noqa: BLE001 - the guard is advice (the boot id read can fail); the label is not
                pass
        self.result.update(outcome=failure.outcome, error={"code": failure.code, "message": failure.message})
        self.exit_code = failure.exit_code
        layouts = holders = None  # type: Optional[str]
        if self.writer is not None:
            self.result["changes"] = self.writer.changes + len(self.resets)
            try:
                # GPU by GPU: one off the bus must not hide the others, which this run may have changed
                gpus, unreadable = self.writer.read_each()
                self.result["gpus"] = gpus_json(gpus, unreadable)
                layouts = _read_back_layouts(gpus, unreadable)
                # The checkpoint alone: the final label is written with this report, and the pod list is an
                # API call of up to 30 s that a SIGTERM's 15 s grace may not hold; more holders is the safe side.
                holders = report_value(gpus, self._allocations(list_pods=False)(), unreadable=unreadable)
            except Exception:  # noqa: BLE001 - the state is a courtesy; the failure is what counts
                pass
        if self.control is not None:
            try:
                self._problems(self.control.start(self.control.leftovers()))
            except Exception as exc2:  # noqa: BLE001 - never let a client problem skip the label
                self._problems(["could not start the stopped clients: %s" % one_line(exc2, 200)])
        if failure.outcome == "reboot-required":
            self._install_boot_unit()
        if label and not (isinstance(failure, DestroyRequired) and self.labeler.last_state is None):
            # A "destroy nothing" refused before any change changed nothing: the labels still describe the
            # node's layout. (Refused later, after "pending", the label must end in a final state.)
            self.labeler.set(STATE_BY_OUTCOME[failure.outcome], reason=failure.message, layouts=layouts,
                             holders=holders)


def cmd_apply(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    log = stderr_log(args)
    # The labeler first: every failure after it, a bad request included, can be written on the node.
    apply = _Apply(args, backend, _labeler(args, log), log)

    def prepare():
        # type: () -> None
        if getattr(args, "at_boot", False) and args.request_file is not None:
            # The boot unit's run: its request, applied as root, is read only from a directory and a file this
            # user alone may write (install checks them with the same function, and repairs them)
            bootunit.check_config_dir(os.path.dirname(os.path.abspath(args.request_file)), args.request_file, log,
                                      repair=False)
        request = request_from_options(args.size, args.sequence, args.request_b64, args.request_file)
        apply.spec = request.spec
        apply.allow_destroy = request.destroy and not args.no_destroy
        if args.boot_unit:  # refused before any change, not after the GPUs were partitioned
            check_values(boot_args(args))
            report = holders_report(args)
            if report is not None and isinstance(request.spec, GpuLayouts):
                check_holders(report)

    return run_job(apply, prepare)


def run_job(job, prepare):
    # type: (_Apply, Callable[[], None]) -> Tuple[Dict[str, Any], int]
    """The frame of every command that changes GPUs (apply, disable): a node NVIDIA's mig-manager is in
    charge of is refused, ``prepare`` reads the request, then ``job.run_locked`` under the node lock. Every
    way out ends in ``job.fail``, the labels' summary and an Event for the final state."""
    args, log = job.args, job.log
    try:
        # First: on mig-manager's node not even a bad request may write our (its) state label.
        refuse_if_mig_manager(job.labeler.client, job.labeler.node_name, log)
        prepare()
        clients = parse_clients(args.clients)  # a wrong --clients is refused before the wait
        with NodeLock(args.lock_file, args.lock_timeout):
            try:
                # Before any record in it is read: a state directory others can write is refused (and the
                # node labelled so), its records and held manifests left as they are.
                check_state_dir(args.state_dir)
                # Only the run holding the lock may touch the clients: the stopped-clients file it would start
                # again on a failure is the lock holder's while another run waits (a run that gave up waiting
                # started the device plugin of the apply about to change the GPUs).
                job.control = ClientControl(clients, host_runner(args), args.state_dir, log,
                                            at_boot=getattr(args, "at_boot", False))
                # A unit the last boot run only queued: whether it came up is said here, by the next run.
                job._problems(job.control.check_queued())
                job.run_locked()
            except BaseException as exc:  # noqa: B036 - NVML unavailable, or an interrupt while failing
                job.fail(exc, label=True)
    except BaseException as exc:  # noqa: B036 - before the lock: conflict, bad input, lock timeout, interrupted
        # A bad request is a verdict on this node's request: say so on the node. A lock timeout or an
        # interrupt while waiting says nothing about the node; the apply holding the lock labels it.
        # A conflict leaves mig-manager's labels alone. A boot request refused as anybody's is a verdict on
        # this node too: its GPUs came back without their instances, whatever the last label said.
        job.fail(exc, label=isinstance(exc, BadInput) or isinstance(exc, MigInputError) or
                 (isinstance(exc, NodeFailure) and exc.code == "config-dir-unsafe"))
    job.result["labels"] = job.labeler.summary()
    event = record_final_state(job.labeler, job.result)
    if event is not None:
        job.result["event"] = event
    return job.result, job.exit_code


def cmd_report_holders(args, backend):
    # type: (argparse.Namespace, Backend) -> Tuple[Dict[str, Any], int]
    """Write ``ack-mig-hook/gpu-holders`` from what the GPUs hold and kubelet allocated now, only where it
    says something other than the node object has (``at`` aside); changes no GPU and no label. Each round
    holds the node lock, or is skipped while another run does. With ``--min-interval`` the holders unit's
    rounds (:func:`holdings.follow`). Exit 1 (``not-written``) when the last round's report could not be
    written."""
    log = stderr_log(args)
    labeler = _labeler(args, log)
    checkpoint = checkpoint_reader(args, backend)
    client = labeler.client if labeler.enabled else None

    def once():
        # type: () -> Tuple[Optional[str], str]
        with ExitStack() as held:
            # The node lock, from the GPU read to the write, never waited for: a round that read the GPUs
            # before an apply changed them could otherwise write after the apply's own report and put the old
            # layout back. While an apply or disable holds it the round is skipped: that run writes the report
            # itself (or, disable, removes it), and a report round never delays it by more than its own length.
            try:
                held.enter_context(NodeLock(args.lock_file, timeout=0))
            except Locked:
                log("the node lock %s is held (an apply or disable is running and reports itself): round skipped"
                    % args.lock_file)
                return None, "skipped"
            # GPU by GPU, as a failed apply's report: one off the bus (null in the report) must not stop
            # the reports of the others, whose pods come and go until the node reboots
            gpus, unreadable = read_gpus_each(backend)
            for index in sorted(unreadable):
                log("GPU %d: %s" % (index, unreadable[index].message))
            value = report_value(gpus, allocations_reader(checkpoint, client, labeler.node_name, log)(),
                                 unreadable=unreadable)
            if same_report(labeler.holders_now(), value):
                return value, "unchanged"
            return value, "written" if labeler.report_holders(value) else ""

    rounds = follow(once, lambda: checkpoint_signature(args.kubelet_checkpoint), time.sleep, time.time,
                    getattr(args, "min_interval", 0.0))
    value, how = rounds[-1]
    result = {"command": "report-holders", "backend": backend.name, "outcome": OUTCOME_SUCCESS,
              "holders": json.loads(value) if value is not None else None, "node": labeler.node_name,
              "written": how == "written", "unchanged": how == "unchanged", "skipped": how == "skipped",
              "rounds": len(rounds), "writes": sum(1 for _, h in rounds if h == "written")}  # type: Dict[str, Any]
    if how:
        return result, 0
    result.update(outcome="failed",
                  error={"code": "not-written", "message": labeler.error or "no Kubernetes access (--no-label)"})
    return result, 1
