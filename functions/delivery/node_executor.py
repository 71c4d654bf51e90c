"""The delivery executor: decisions in, one outcome per node out (``functions.pipeline.point_of_change`` loads it).

For one request: ``skip`` decisions become ``skipped`` and ``error`` decisions ``failed`` without
touching their node; ``partition`` decisions go to the configured transport in one call (so Cloud
Assistant can batch them), with lifecycle heartbeats running meanwhile. Then the lifecycle hook, if any,
is answered (the instances wait on it), and the startup taint is lifted from every node that ended
``partitioned`` or ``unchanged`` (an API server that does not answer is tried once, not once per node).
A taint that could not be lifted is recorded on the node's outcome (``taint``); the pipeline then ends
that node ``failed`` with the code ``taint-not-removed`` (``functions.delivery.outcome.settle``), after
the hook was answered: it is never the node's verdict on its GPUs.

Everything the executor talks to is built lazily from settings, so a request without a lifecycle hook
never creates an ESS client and a pool without a startup taint never asks for a kubeconfig.
"""

import logging
import shlex
import sys
import time
from contextlib import nullcontext
from typing import Callable, Dict, List, Optional, Sequence

from functions.base.errors import ConfigurationError, RetryLater
from functions.base.model import ACTION_ERROR, ACTION_PARTITION, ACTION_SKIP
from functions.base.settings import Settings
from functions.delivery import bundle as bundle_mod
from functions.delivery.node_script import node_args
from functions.delivery.outcome import (FAILED, NOT_REMOVED, PARTITIONED, SKIPPED, TAINT_NOT_JOINED, UNCHANGED,
                                       NodeTarget, Outcome, outcome)
from functions.delivery.transport import ScriptMaker, Transport

log = logging.getLogger(__name__)


class DeliveryExecutor:
    def __init__(self, transport: Transport, extra_args: Sequence[str] = (),
                 lifecycle: Optional[Callable[[], object]] = None,
                 taints: Optional[Callable[[str], object]] = None):
        self.transport = transport
        self.extra_args = tuple(extra_args)
        self._lifecycle_factory = lifecycle  # () -> Lifecycle, built on the first hook
        self._taints_factory = taints  # (cluster_id) -> TaintRemover or None
        self._lifecycle = None

    # ---- construction from settings ----

    @classmethod
    def from_settings(cls, settings: Settings, transport: Optional[Transport] = None) -> "DeliveryExecutor":
        """Everything checked now, so a wrong setting ends the event as one ``error`` line (nothing has
        been touched yet) instead of a failure halfway through the nodes."""
        from functions.kube.taint import parse_taint

        d = settings.delivery
        try:
            if d.startup_taint:
                parse_taint(d.startup_taint)
            extra = shlex.split(d.node_args)
            if transport is None:
                transport = make_transport(settings)
        except (ValueError, RuntimeError) as exc:  # bad taint, key, known_hosts, no credentials, no pynvml
            raise ConfigurationError("delivery: %s" % exc) from None

        def lifecycle():
            from functions.delivery.lifecycle import Lifecycle
            from functions.cloud.rpc import ESS_VERSION, Backoff, RpcClient

            ess = RpcClient("ess", ESS_VERSION, settings.region, settings.credentials, d.ess_endpoint,
                            settings.api_timeout_s, Backoff(settings.api_max_attempts + 2))
            return Lifecycle(ess, d.lifecycle_failure_result, heartbeat_s=d.lifecycle_heartbeat_s)

        def taints(cluster_id):
            from functions.kube.taint import TaintRemover, cs_kubeconfig, parse_taint

            if not d.startup_taint or not cluster_id:
                return None
            return TaintRemover(parse_taint(d.startup_taint), cs_kubeconfig(settings, cluster_id))

        return cls(transport, extra, lifecycle, taints)

    # ---- the Executor protocol ----

    def execute(self, request, decisions) -> List[dict]:
        outcomes: Dict[str, Outcome] = {}
        targets: List[NodeTarget] = []
        names = {}
        for d in decisions:
            names[d.instance_id] = d.node_name or ""
            if d.action == ACTION_SKIP:
                outcomes[d.instance_id] = Outcome(d.instance_id, d.node_name or "", SKIPPED, d.reason)
            elif d.action == ACTION_PARTITION and getattr(d, "disable", False):  # MIG off (functions/rollout/run.py)
                args = ["--json"] + list(self.extra_args) + ["disable"]
                targets.append(NodeTarget(d.instance_id, d.node_name or "", d.ip_address or "", tuple(args)))
            elif d.action == ACTION_PARTITION and getattr(d, "gpu_layouts", None):  # an auto pool's per-GPU targets
                args = node_args(d.gpu_layouts, self.extra_args)
                targets.append(NodeTarget(d.instance_id, d.node_name or "", d.ip_address or "", tuple(args)))
            elif d.action == ACTION_ERROR or d.partition is None:
                outcomes[d.instance_id] = Outcome(d.instance_id, d.node_name or "", FAILED, d.reason)
            elif d.action == ACTION_PARTITION:
                # A running node the rollout changes without drain is told to destroy nothing (Decision.drain).
                args = node_args({"kind": d.partition.kind, "value": d.partition.value}, self.extra_args,
                                 destroy=getattr(d, "drain", None) is not False)
                targets.append(NodeTarget(d.instance_id, d.node_name or "", d.ip_address or "", tuple(args)))
        hook = getattr(request, "lifecycle", None)
        try:
            lifecycle = self._get_lifecycle() if hook is not None else None
        except (ValueError, RuntimeError) as exc:  # e.g. no credentials for ESS: before any node is touched
            raise ConfigurationError("delivery: lifecycle hook: %s" % exc) from None
        if targets:
            with (lifecycle.kept_alive(hook) if lifecycle else nullcontext()):
                self._run_transport(targets, names, outcomes)
        order = [d.instance_id for d in decisions]
        # The hook first: the instances are waiting on it, while lifting taints may be slow (API server).
        if lifecycle is not None:
            self._answer(lifecycle, hook, outcomes, order)
        self._lift_taints(request, outcomes)
        return [outcomes[iid].to_dict() for iid in order if iid in outcomes]

    def _run_transport(self, targets: List[NodeTarget], names: Dict[str, str],
                       outcomes: Dict[str, Outcome]) -> None:
        """Every target ends with an outcome, even when the transport itself breaks: a bug there must not
        leave the lifecycle hook unanswered or hide the nodes that did finish."""
        started = time.monotonic()
        try:
            # The transport yields each node's result as it comes (a batch runs its nodes at once): the time to
            # it is that node's duration.
            for res in self.transport.run(targets):
                try:
                    done = outcome(res, names.get(res.instance_id, ""))
                except Exception as exc:  # noqa: BLE001 - a result no rule reads fails its node alone
                    log.error("node %s: its result could not be read: %s: %s", res.instance_id,
                              type(exc).__name__, exc)
                    done = Outcome(res.instance_id, names.get(res.instance_id, ""), FAILED,
                                   "internal-error: the node's result could not be read (%s)" % type(exc).__name__,
                                   code="internal-error")
                outcomes[res.instance_id] = done
                outcomes[res.instance_id].duration_ms = round((time.monotonic() - started) * 1000, 1)
        except Exception as exc:  # noqa: BLE001 - reported per node below, and logged
            log.error("transport %s failed: %s: %s", getattr(self.transport, "name", "?"), type(exc).__name__, exc)
            why = "internal-error: the %s transport failed (%s)" % (getattr(self.transport, "name", "?"),
                                                                    type(exc).__name__)
            for t in targets:
                if t.instance_id not in outcomes:
                    outcomes[t.instance_id] = Outcome(t.instance_id, t.node_name, FAILED, why, code="internal-error")

    @staticmethod
    def _answer(lifecycle, hook, outcomes: Dict[str, Outcome], order: Sequence[str]) -> None:
        from functions.cloud.rpc import ApiError

        try:
            sent = lifecycle.complete(hook, list(outcomes.values()))
        except ApiError as exc:
            # The nodes are done (a rerun finds them unchanged), but the hook still waits: a transient
            # failure retries the event, anything else is an error the operator must see. The node
            # results travel with the exception so the event's result still shows them.
            counts: Dict[str, int] = {}
            for o in outcomes.values():
                counts[o.outcome] = counts.get(o.outcome, 0) + 1
            nodes = ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items()))
            cls = RetryLater if exc.retryable else ConfigurationError
            failure = cls("nodes %s; lifecycle hook %s not answered: %s" % (nodes, hook.lifecycle_hook_id, exc))
            failure.nodes = [outcomes[iid].to_dict() for iid in order if iid in outcomes]
            raise failure from None
        log.info("lifecycle hook %s answered %s", hook.lifecycle_hook_id, sent or "(already answered)")

    def _get_lifecycle(self):
        if self._lifecycle is None and self._lifecycle_factory is not None:
            self._lifecycle = self._lifecycle_factory()
        return self._lifecycle

    def _lift_taints(self, request, outcomes: Dict[str, Outcome]) -> None:
        done = [o for o in outcomes.values() if o.outcome in (PARTITIONED, UNCHANGED)]
        if not done or self._taints_factory is None:
            return
        remover = self._taints_factory(getattr(request, "cluster_id", None))  # no API call yet
        if remover is None:  # taint removal turned off (ACK_MIG_STARTUP_TAINT=none)
            return
        unreachable = ""
        for o in done:
            if not o.node_name:
                o.taint = TAINT_NOT_JOINED  # the expected case under a lifecycle hook: a later event lifts it
                continue
            if unreachable:  # one unreachable API server is enough: do not wait out its timeouts per node
                o.taint = NOT_REMOVED + unreachable
                continue
            try:
                o.taint = remover.remove(o.node_name)
            except Exception as exc:  # noqa: BLE001 - one node's taint never hides the others' results
                o.taint = NOT_REMOVED + str(exc)[:200]
                log.warning("startup taint of %s not removed: %s", o.node_name, exc)
                if getattr(exc, "status", 0) is None:  # no HTTP answer at all (KubeError without status)
                    unreachable = "the API server did not answer (%s)" % str(exc)[:120]


def make_transport(settings: Settings, sim_state_dir: Optional[str] = None, root: Optional[str] = None,
                   python: Optional[str] = None) -> Transport:
    d = settings.delivery
    maker = ScriptMaker(bundle_mod.build(), d.node_timeout_s, root or d.node_root, python or "python3")
    if d.transport == "local":
        from functions.delivery.local import LocalTransport

        maker.python = python or sys.executable
        return LocalTransport(maker, sim_state_dir=sim_state_dir)
    if d.transport == "ssh":
        from functions.delivery.ssh import SshTransport, key_from_settings

        return SshTransport(maker, key_from_settings(settings), d.ssh_known_hosts, d.ssh_user,
                            d.ssh_port, d.ssh_host_key_policy, d.ssh_concurrency, settings.api_timeout_s)
    from functions.delivery.cloud_assistant import CloudAssistantTransport
    from functions.cloud.rpc import ECS_VERSION, Backoff, RpcClient

    ecs = RpcClient("ecs", ECS_VERSION, settings.region, settings.credentials, d.ecs_endpoint,
                    settings.api_timeout_s, Backoff(settings.api_max_attempts + 2))
    return CloudAssistantTransport(ecs, maker)
