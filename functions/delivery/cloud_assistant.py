"""Cloud Assistant transport: ECS ``RunCommand`` / ``SendFile`` through the real core SDK (:mod:`.rpc`).

Flow for a list of nodes:

1. ``DescribeCloudAssistantStatus`` (100 instances a call) until every agent answers ``true`` or the
   agent wait runs out; nodes whose agent never came up end ``agent-not-ready`` and are not run.
2. Nodes that share their arguments share one script; ``RunCommand`` takes up to 100 instances, with
   ``{{ACS::InstanceId}}`` telling each node who it is. All batches are submitted before any is polled.
3. ``DescribeInvocationResults`` once per batch per poll (paged by 50) at a steady interval (growing
   only after a minute, and API errors back off in :mod:`.rpc`), until every instance of the batch is
   final; the node's JSON result is the last line of the base64 Output.
4. Nodes that answer ``bundle-missing`` get the bundle by ``SendFile`` (one call per part per 50 instances,
   each part <= 32 KB base64), and are run once more. A warm node therefore costs one RunCommand.

Every instance ends with exactly one :class:`~.result.NodeResult`; API failures after retries fail the
nodes of that batch, never the others.
"""

import base64
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Sequence

from .result import NodeResult, NodeTarget, parse_output
from .rpc import ApiError, RpcClient
from .transport import ScriptMaker

RUN_BATCH = 100  # RunCommand and DescribeCloudAssistantStatus take at most 100 instances
SEND_BATCH = 50  # SendFile takes at most 50
PAGE = 50  # DescribeInvocationResults PageSize maximum
RUNCOMMAND_LIMIT = 24 * 1024  # CommandContent, base64, KeepCommand=false
SLOW_AFTER_S = 60.0  # result polls keep their first interval this long, then back off
FINAL = {"Success", "Failed", "Error", "Timeout", "Cancelled", "Terminated", "Aborted", "Invalid", "Stopped"}
ERRORS = {  # Cloud Assistant ErrorCode -> our transport error code
    "ClientNotRunning": "agent-not-ready", "ClientNotResponse": "agent-not-ready",
    "ClientIsUpgrading": "agent-not-ready", "ClientNeedUpgrade": "agent-not-ready",
    "DeliveryTimeout": "delivery-timeout", "ExecutionTimeout": "execution-timeout",
    "InstanceReleased": "instance-released", "InstanceNotExists": "instance-released",
    "InstanceNotRunning": "instance-not-running", "ExecutionInterrupted": "execution-interrupted",
    "ExecutionException": "execution-error",
}


def _chunks(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


class CloudAssistantTransport:
    name = "cloud-assistant"

    def __init__(self, ecs: RpcClient, maker: ScriptMaker, agent_wait_s: float = 120.0,
                 poll_s: float = 1.0, poll_max_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.ecs, self.maker = ecs, maker
        self.agent_wait_s, self.poll_s, self.poll_max_s = agent_wait_s, poll_s, poll_max_s
        self.clock, self.sleep = clock, sleep
        self.largest_request = 0  # bytes of the largest CommandContent / Content sent (benchmarks read it)

    # ---- the interface ----

    def run(self, targets: Sequence[NodeTarget]) -> List[NodeResult]:
        results: Dict[str, NodeResult] = {}
        ready = self._wait_for_agents(list(targets), results)
        first = self._run_all(ready)
        results.update(first)
        missing = [t for t in ready if first[t.instance_id].bundle_missing]
        if missing:
            failed = self._send_bundle(missing)
            results.update(failed)
            again = self._run_all([t for t in missing if t.instance_id not in failed])
            for iid, res in again.items():
                res.attempts += 1
            results.update(again)
        return [results[t.instance_id] for t in targets]

    # ---- agents ----

    def _wait_for_agents(self, targets: List[NodeTarget], results: Dict[str, NodeResult]) -> List[NodeTarget]:
        pending = {t.instance_id: t for t in targets}
        deadline = self.clock() + self.agent_wait_s
        interval = self.poll_s
        while pending:
            # Pages of 50: DescribeCloudAssistantStatus documents PageSize 1-50, so a larger query could be
            # answered in part, and the rest would look like agents that never start.
            batches = _chunks(sorted(pending), PAGE)
            with ThreadPoolExecutor(max_workers=min(16, len(batches))) as pool:
                answers = list(pool.map(self._agent_status, batches))
            for batch, answer in zip(batches, answers):
                if isinstance(answer, ApiError):
                    for iid in batch:
                        results[iid] = NodeResult(iid, self.name, error="api-error", message=str(answer))
                        pending.pop(iid)
                    continue
                for iid in answer:
                    pending.pop(iid, None)
            if not pending or self.clock() >= deadline:
                break
            self.sleep(interval)
            interval = min(interval * 1.5, self.poll_max_s)
        for iid in pending:
            results[iid] = NodeResult(iid, self.name, error="agent-not-ready", message="the Cloud Assistant "
                                      "agent did not report running within %gs" % self.agent_wait_s)
        return [t for t in targets if t.instance_id not in results]

    def _agent_status(self, batch: List[str]):
        """The ids of ``batch`` whose agent is running, or the ApiError that stopped the call."""
        params = {"RegionId": self.ecs.region, "PageSize": PAGE}
        params.update({"InstanceId.%d" % (i + 1): iid for i, iid in enumerate(batch)})
        try:
            body = self.ecs.call("DescribeCloudAssistantStatus", params)
        except ApiError as exc:
            return exc
        rows = (body.get("InstanceCloudAssistantStatusSet") or {}).get("InstanceCloudAssistantStatus") or []
        return [row.get("InstanceId") for row in rows if str(row.get("CloudAssistantStatus")).lower() == "true"]

    # ---- run ----

    def _run_all(self, targets: Sequence[NodeTarget]) -> Dict[str, NodeResult]:
        groups: Dict[tuple, List[NodeTarget]] = {}
        for t in targets:
            groups.setdefault(tuple(t.args), []).append(t)
        batches = [b for group in groups.values() for b in _chunks(group, RUN_BATCH)]
        if not batches:
            return {}
        # Submit everything first, then poll each batch: the wall time is one node run, not one per batch.
        with ThreadPoolExecutor(max_workers=min(16, len(batches))) as pool:
            return {iid: res for part in pool.map(self._run_batch, batches) for iid, res in part.items()}

    def _run_batch(self, batch: List[NodeTarget]) -> Dict[str, NodeResult]:
        content = base64.b64encode(self.maker.script(batch).encode("utf-8")).decode("ascii")
        self.largest_request = max(self.largest_request, len(content))
        if len(content) > RUNCOMMAND_LIMIT:  # cannot happen with our script; refuse rather than truncate
            return self._fail(batch, "api-error", "command content is %d bytes, over RunCommand's limit"
                              % len(content))
        params = {"RegionId": self.ecs.region, "Type": "RunShellScript", "CommandContent": content,
                  "ContentEncoding": "Base64", "Timeout": self.maker.deadline_s + 60, "KeepCommand": False,
                  "EnableParameter": True, "Name": "ack-mig-hook", "ClientToken": uuid.uuid4().hex}
        params.update({"InstanceId.%d" % (i + 1): t.instance_id for i, t in enumerate(batch)})
        try:
            invoke_id = self.ecs.call("RunCommand", params)["InvokeId"]
        except (ApiError, KeyError) as exc:
            return self._fail(batch, "api-error", str(exc))
        return self._poll(invoke_id, batch)

    def _poll(self, invoke_id: str, batch: List[NodeTarget]) -> Dict[str, NodeResult]:
        done: Dict[str, NodeResult] = {}
        wanted = {t.instance_id for t in batch}
        started = self.clock()
        deadline = started + self.maker.deadline_s + 120
        interval = self.poll_s
        while True:
            self.sleep(interval)
            try:
                rows = self._results(invoke_id)
            except ApiError as exc:
                if self.clock() < deadline and exc.retryable:
                    continue
                done.update(self._fail([t for t in batch if t.instance_id not in done], "api-error", str(exc)))
                return done
            for row in rows:
                iid = row.get("InstanceId")
                if iid in wanted and iid not in done and row.get("InvocationStatus") in FINAL:
                    done[iid] = self._result(row)
            if wanted <= set(done):
                return done
            if self.clock() >= deadline:
                done.update(self._fail([t for t in batch if t.instance_id not in done], "execution-timeout",
                                       "no final result from Cloud Assistant in time"))
                return done
            # A steady beat while a normal run lasts (a result is seen at most one interval late); past a
            # minute the node is slow anyway, and the interval grows to spare the API.
            if self.clock() - started > SLOW_AFTER_S:
                interval = min(interval * 1.5, self.poll_max_s)

    def _results(self, invoke_id: str) -> List[dict]:
        rows: List[dict] = []
        page = 1
        while True:
            body = self.ecs.call("DescribeInvocationResults", {
                "RegionId": self.ecs.region, "InvokeId": invoke_id, "PageSize": PAGE, "PageNumber": page,
                "ContentEncoding": "Base64"})
            inv = body.get("Invocation") or {}
            got = (inv.get("InvocationResults") or {}).get("InvocationResult") or []
            rows.extend(got)
            if not got or len(rows) >= int(inv.get("TotalCount") or 0):
                return rows
            page += 1

    def _result(self, row: dict) -> NodeResult:
        iid = row.get("InstanceId")
        try:
            output = base64.b64decode(row.get("Output") or "").decode("utf-8", "replace")
        except ValueError:
            output = ""
        doc = parse_output(output)
        exit_code = row.get("ExitCode")
        code = row.get("ErrorCode") or ""
        if doc is not None and code in ("", "ExitCodeNonzero"):
            return NodeResult(iid, self.name, exit_code, doc)
        error = ERRORS.get(code, "execution-error" if code else "no-result")
        info = row.get("ErrorInfo") or ("the node script gave no result (status %s)" % row.get("InvocationStatus"))
        return NodeResult(iid, self.name, exit_code, doc if error == "no-result" else None, error,
                          "%s%s" % (code + ": " if code else "", info))

    # ---- bundle ----

    def _send_bundle(self, targets: Sequence[NodeTarget]) -> Dict[str, NodeResult]:
        """SendFile every part to these nodes; returns the nodes it could not reach (as failures)."""
        bundle = self.maker.bundle
        incoming = "%s/incoming" % self.maker.root
        jobs = [(name, base64.b64encode(chunk).decode("ascii"), batch)
                for name, chunk in zip(bundle.part_names(), bundle.chunks())
                for batch in _chunks([t.instance_id for t in targets], SEND_BATCH)]
        failed: Dict[str, NodeResult] = {}

        def send(job):
            name, content, batch = job
            self.largest_request = max(self.largest_request, len(content))
            params = {"RegionId": self.ecs.region, "Name": name, "TargetDir": incoming, "Content": content,
                      "ContentType": "Base64", "FileMode": "0600", "Overwrite": True,
                      "Timeout": 120}
            params.update({"InstanceId.%d" % (i + 1): iid for i, iid in enumerate(batch)})
            try:
                invoke_id = self.ecs.call("SendFile", params)["InvokeId"]
                return self._wait_sent(invoke_id, batch)
            except (ApiError, KeyError) as exc:
                return {iid: "api-error: %s" % exc for iid in batch}

        with ThreadPoolExecutor(max_workers=min(16, len(jobs))) as pool:
            for bad in pool.map(send, jobs):
                for iid, why in bad.items():
                    failed.setdefault(iid, NodeResult(iid, self.name, error="bundle-missing",
                                                      message="SendFile: %s" % why))
        return failed

    def _wait_sent(self, invoke_id: str, batch: List[str]) -> Dict[str, str]:
        deadline = self.clock() + 180
        interval = self.poll_s
        while True:
            self.sleep(interval)
            body = self.ecs.call("DescribeSendFileResults", {"RegionId": self.ecs.region,
                                                               "InvokeId": invoke_id})
            states: Dict[str, dict] = {}
            for inv in (body.get("Invocations") or {}).get("Invocation") or []:
                for row in (inv.get("InvokeInstances") or {}).get("InvokeInstance") or []:
                    states[row.get("InstanceId")] = row
            final = {iid: row for iid, row in states.items() if row.get("InvocationStatus") in FINAL}
            if set(batch) <= set(final) or self.clock() >= deadline:
                return {iid: "%s %s" % (final[iid].get("ErrorCode") or final[iid].get("InvocationStatus"),
                                        final[iid].get("ErrorInfo") or "")
                        if iid in final else "no result in time"
                        for iid in batch if iid not in final or final[iid].get("InvocationStatus") != "Success"}
            interval = min(interval * 1.5, self.poll_max_s)

    def _fail(self, batch: Sequence[NodeTarget], error: str, message: str) -> Dict[str, NodeResult]:
        return {t.instance_id: NodeResult(t.instance_id, self.name, error=error, message=message) for t in batch}
