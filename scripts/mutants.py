"""The deliberate bugs ``make mutation`` plants (scripts/mutation.py), one at a time, each in the security-
or safety-critical code it names, with the subsystem tests that must catch it.

Each is a realistic slip: a condition loosened, a limit dropped, a check reduced to half of itself. When a
bug is fixed, add the mutant that would bring it back (docs/development.md, "Mutation tests"): ``find`` is
a piece of the current source that occurs exactly once in ``file``, ``replace`` the buggy version, and
``tests`` the test files of that subsystem (never the whole suite: the point is that the subsystem's own
tests catch it).
"""

from typing import NamedTuple, Tuple


class Mutant(NamedTuple):
    id: str
    file: str
    edits: Tuple[Tuple[str, str], ...]  # (find, replace) pairs, applied in order; each find occurs once
    tests: Tuple[str, ...]
    why: str


def mutant(id: str, file: str, find: str, replace: str, tests: Tuple[str, ...], why: str) -> Mutant:
    """The usual mutant: one piece of source replaced."""
    return Mutant(id, file, ((find, replace),), tests, why)


MUTANTS = (
    # ---- membership: the confused deputy across the account's scaling groups (issue 20 item 1) ----
    mutant("membership-any-listed-row", "functions/cloud/membership.py",
           'if item.get("ScalingGroupId") == scaling_group_id and item.get("InstanceId") in chunk:',
           'if item.get("InstanceId") in chunk:',
           ("tests/function/test_membership.py",),
           "an instance Auto Scaling lists under another group counts as a member of the event's group"),
    # ---- intake: bounded events (issue 16 point 8, issue 20 item 7) ----
    mutant("intake-no-text-cap", "functions/pipeline/intake.py",
           "    if isinstance(value, str) and len(value) > MAX_TEXT:\n        raise ValueError(",
           "    if False:\n        raise ValueError(",
           ("tests/function/test_event_bounds.py", "tests/function/test_intake.py"),
           "event string fields longer than 512 characters are accepted and copied into every log line"),
    # ---- redaction (issue 20 item 2) ----
    mutant("logs-authorization-not-secret", "functions/base/logs.py",
           '"apikey",\n                 "authorization", "credential", "cookie")',
           '"apikey",\n                 "credential", "cookie")',
           ("tests/function/test_settings_logs.py",),
           "an Authorization header in a logged dict is printed in clear"),
    # ---- KMS read retries connection failures (issue 20 item 6) ----
    mutant("kms-connection-failure-final", "functions/cloud/secrets.py",
           "(isinstance(status, int) and status >= 500) or not getattr(exc, \"code\", None)",
           "(isinstance(status, int) and status >= 500)",
           ("tests/function/test_settings_logs.py", "tests/delivery/test_ssh.py"),
           "a connection reset while reading the SSH key from KMS fails the event instead of retrying"),
    # ---- delivery: one bad instance never fails its batch ----
    mutant("cloud-assistant-no-halving", "functions/delivery/cloud_assistant.py",
           "        if len(ids) == 1:\n            code = WHOLE_CALL.get(refusal.code, \"api-error\")",
           "        if True:\n            code = WHOLE_CALL.get(refusal.code, \"api-error\")",
           ("tests/delivery/test_cloud_assistant.py",),
           "a batch refused because of one instance fails every instance of it"),
    mutant("lifecycle-any-verdict-abandons", "functions/delivery/lifecycle.py",
           "if outcomes and all(o.node_verdict for o in outcomes):",
           "if outcomes and any(o.node_verdict for o in outcomes):",
           ("tests/delivery/test_lifecycle_verdict.py",),
           "one node's own failure abandons the lifecycle hook for all its instances"),
    # ---- SSH: the watchdog covers the handshake (issue 20 item 3) ----
    Mutant("ssh-watchdog-after-handshake", "functions/delivery/ssh.py", (
        ("        watch.client = client  # from now on the watchdog can close it, mid-handshake included\n", ""),
        ("            client.close()\n            raise\n        return client\n",
         "            client.close()\n            raise\n        watch.client = client\n        return client\n")),
           ("tests/delivery/test_ssh.py",),
           "a server that stalls in key exchange or authentication holds the node past its deadline"),
    # ---- issue 30: the three bugs the suite let through ----
    mutant("notify-attempt-past-deadline", "functions/pipeline/notify.py",
           "        budget = min(timeout_s, left)",
           "        budget = timeout_s",
           ("tests/function/test_notify_deadline.py",),
           "a webhook attempt runs its whole per-attempt timeout past the notification deadline"),
    mutant("agent-status-first-page-only", "functions/delivery/cloud_assistant.py",
           "        pages = _chunks(sorted(ids), RUN_BATCH)\n",
           "        pages = _chunks(sorted(ids), RUN_BATCH)[:1]\n",
           ("tests/delivery/test_cloud_assistant_status.py",),
           "only the first 100 pending instances get their agent status asked each round"),
    mutant("blockers-unplaced-process-ignored", "node_bootstrap/commands/planner.py",
           "if p.gi is None or p.gi in doomed_gis",
           "if p.gi in doomed_gis",
           ("tests/node/test_planner_blockers.py",),
           "a process NVML lists without a GPU instance no longer blocks a destroy"),
    mutant("upload-skipped-on-crc64", "functions/commands/stack/upload.py",
           "    if not (head.server_crc is not None and str(head.server_crc) == checksum\n"
           "            and hmac.compare_digest(stored.lower(), digest)):\n        return False\n",
           "    return head.server_crc is not None and str(head.server_crc) == checksum\n",
           ("tests/function/test_package_integrity.py",),
           "an object with the package's CRC-64 but other bytes is taken for the package and not replaced"),
    mutant("runner-trusts-cached-bundle", "functions/delivery/node_runner.py",
           "    if not verified(target, digest):  # what runs is what was checked",
           "    if False:  # what runs is what was checked",
           ("tests/delivery/test_node_directory.py",),
           "a bundle altered in the node's cache after it was installed is run as root"),
    mutant("egress-source-ignored", "functions/commands/stack/egress.py",
           "    source = _source(rule, vswitch)\n",
           "    source = True\n",
           ("tests/function/test_egress_source.py",),
           "doctor takes an outbound rule for other source addresses or ports as deciding the function's traffic"),
    mutant("rpc-per-read-timeout-only", "functions/cloud/rpc.py",
           "            guard = Guard(self.timeout_s)",
           "            guard = Guard(3600)",
           ("tests/function/test_whole_call_deadlines.py",),
           "an ECS/ESS call to a peer that drips a byte a second outlives its timeout"),
    # ---- the node: change only what must change, and never less than asked ----
    mutant("planner-keeps-nothing", "node_bootstrap/commands/planner.py",
           "    for size in range(min(len(cands), len(wanted)), -1, -1):",
           "    for size in range(0, -1, -1):",
           ("tests/node/test_keep_layout.py",),
           "a valid layout someone else made is destroyed and rebuilt instead of kept"),
    mutant("blockers-whole-gpu", "node_bootstrap/commands/planner.py",
           "    if not (doomed_gis or doomed_cis):\n        return ()\n",
           "    if not (doomed_gis or doomed_cis or getattr(plan, \"create\", ())):\n        return ()\n    return processes\n",
           ("tests/node/test_busy_instances.py",),
           "a process in a kept instance blocks creating beside it (every label change would need a drain)"),
    mutant("per-gpu-busy-ignored", "node_bootstrap/commands/planner.py",
           "    if doomed and (busy_in or gpu.pids_unreadable):",
           "    if False:",
           ("tests/node/test_per_gpu_request.py",),
           "an auto pool's per-GPU request fails the whole node when one GPU turned busy, instead of leaving it"),
    mutant("matching-taints-ignored", "functions/decision/layout/matching.py",
           "        if taint.get(\"effect\") in BLOCKING_EFFECTS and not any(",
           "        if False and not any(",
           ("tests/function/test_auto_pool_matching.py", "tests/rollout/test_auto_pool_advise.py"),
           "pods that do not tolerate an auto pool's taints are counted as its demand"),
    mutant("refuse-destroy-ignored", "node_bootstrap/commands/reconcile.py",
           "    if not allow_destroy:\n        refuse_destroy(initial)",
           "    if False:\n        refuse_destroy(initial)",
           ("tests/node/test_destroy_nothing.py",),
           "a node told to destroy nothing destroys served instances anyway"),
    mutant("disable-current-mode-only", "node_bootstrap/commands/disable.py",
           "(gpu.mig_current != MIG_DISABLED or gpu.mig_pending != MIG_DISABLED)",
           "(gpu.mig_current != MIG_DISABLED)",
           ("tests/node/test_disable.py",),
           "disable leaves a pending enable that turns MIG on at the next reset (issue 20 item 8)"),
    # ---- the node runner: a run past its deadline is ended, whatever it does with SIGTERM ----
    mutant("runner-no-sigkill", "functions/delivery/node_runner.py",
           "        pass\n    _signal_group(proc, signal.SIGKILL)\n    out, err = _drain(proc, PIPE_DRAIN_S)",
           "        pass\n    out, err = _drain(proc, PIPE_DRAIN_S)",
           ("tests/delivery/test_runner.py",),
           "a node command that ignores SIGTERM runs on past its deadline"),
    # ---- rollout: waves, leases, drain (issue 15) ----
    mutant("waves-ignore-max-unavailable", "functions/decision/waves.py",
           "    takes = [] if halted else waiting[:slots]",
           "    takes = [] if halted else waiting",
           ("tests/rollout/test_waves.py",),
           "a repartition disrupts every node of the pool at once instead of max-unavailable"),
    mutant("waves-drain-timeout-goes-on", "functions/decision/waves.py",
           "STOP_STEPS = (DRAIN_TIMEOUT, FAILED)",
           "STOP_STEPS = (FAILED,)",
           ("tests/rollout/test_waves.py", "tests/rollout/test_event_sources.py"),
           "a node that ended drain-timeout does not stop its pool's rollout: the next nodes are taken anyway"),
    mutant("lease-never-held", "functions/decision/waves.py",
           "        return bool(self.owner) and self.owner != me and now < self.expires",
           "        return False",
           ("tests/rollout/test_concurrency.py", "tests/rollout/test_waves.py"),
           "two overlapping invocations drive the same node (the lease is ignored)"),
    mutant("lease-write-without-resource-version", "functions/rollout/executor.py",
           '        patch: Dict[str, Any] = {"metadata": {"resourceVersion": w.rv,\n',
           '        patch: Dict[str, Any] = {"metadata": {\n',
           ("tests/rollout/test_concurrency.py",),
           "a claim or progress write is not a compare-and-swap: two invocations both take a node"),
    mutant("drain-bare-pods-evicted", "functions/rollout/drain.py",
           "    if not controller and not rules.force:",
           "    if False:",
           ("tests/rollout/test_drain.py",),
           "a pod without a controller is evicted (gone for good) without kubectl drain's --force"),
    mutant("drain-daemonset-by-any-owner", "functions/rollout/drain.py",
           "    if controller.get(\"kind\") == \"DaemonSet\":",
           "    if any(r.get(\"kind\") == \"DaemonSet\" for r in meta.get(\"ownerReferences\") or []):",
           ("tests/rollout/test_drain.py",),
           "a pod that merely lists a DaemonSet owner (not its controller) is left on the node"),
    mutant("drain-misses-gpu-sharing", "functions/rollout/drain.py",
           'GPU_RESOURCE_PREFIXES = ("nvidia.com/", "aliyun.com/gpu")',
           'GPU_RESOURCE_PREFIXES = ("nvidia.com/",)',
           ("tests/rollout/test_drain.py",),
           "pods using ACK GPU sharing (aliyun.com/gpu-mem) are not evicted and the node fails gpu-busy"),
    mutant("capacity-waits-on-drain-timeout", "functions/rollout/executor.py",
           "        deadline = self.clock() + self.settings.capacity_timeout_s  # its own deadline, not the drain's",
           "        deadline = self.clock() + self.settings.drain_timeout_s",
           ("tests/rollout/test_resilience.py",),
           "the capacity wait runs to the drain timeout instead of its own (issue 20 item 4)"),
    mutant("node-list-first-page-only", "functions/kube/client.py",
           '                    token = (answer.get("metadata") or {}).get("continue")',
           '                    token = None',
           ("tests/rollout/test_resilience.py", "tests/rollout/test_kubeapi_client.py"),
           "node lists stop after the first page: nodes left out of every rollout and status (issue 20 item 5)"),
    mutant("additive-drops-destroy-nothing", "functions/decision/waves.py",
           "    refused = [(gpu, why) for gpu, ok, why in verdicts if not ok]",
           "    refused = []",
           ("tests/rollout/test_change_path.py",),
           "a change that moves or removes served instances goes without drain"),
    mutant("egress-accept-before-drop", "functions/commands/stack/egress.py",
           "key=lambda r: (_priority(r), not _drop(r))",
           "key=lambda r: (_priority(r), _drop(r))",
           ("tests/function/test_egress.py",),
           "doctor says ok for a group whose drop rule of the same priority blocks the API server"),
)
