"""Cloud Assistant transport: ECS ``RunCommand`` / ``SendFile`` through the real core SDK (:mod:`.rpc`).

Flow for a list of nodes:

1. ``DescribeCloudAssistantStatus`` (100 ``InstanceId.N`` per call, the documented maximum; no PageSize or
   MaxResults, which "do not take effect" with InstanceId) until every agent answers ``true`` or the
   agent wait runs out; nodes whose agent never came up end ``agent-not-ready``, instances the service
   does not know (released, another region) ``instance-gone``; neither is run. The answer also gives
   each agent's version (``CloudAssistantVersion``). What the call answers for an unknown id is not
   documented: an id it leaves out twice in a row is gone, and a call refused whole because of some ids
   (``InvalidInstance.NotFound``, ``Forbidden.RAM``...) is halved like RunCommand below.
2. Nodes that share their arguments share one script; ``RunCommand`` takes up to 100 instances, with
   the built-in parameter ``{{ACS::InstanceId}}`` telling each node who it is. That parameter needs a
   Linux agent >= 2.2.3.309 ("Use custom parameters in Cloud Assistant commands"); a node whose agent
   reports an older version gets a script of its own with its instance id written in, one RunCommand each.
3. Every batch is submitted (16 calls in flight) before any is polled; then ONE loop polls every open
   invocation per round (``DescribeInvocationResults``, ``MaxResults`` 50 and ``NextToken``: PageNumber and
   PageSize "will soon be deprecated", ECS SDK model) at a steady interval (growing only
   after a minute; API errors back off in :mod:`.rpc`), until every instance is final. So 10,000 nodes
   take one node run plus the submit round trips, not a node run per round of batches.
4. RunCommand and SendFile refuse a WHOLE call when one instance cannot run it (released: 404
   ``InvalidInstance.NotFound``; not Running: 400 ``InvalidInstanceStatus``; no agent: 400
   ``InvalidInstance.NoClient``, ECS API reference) or may not be touched (403 ``Forbidden.RAM``, or
   ``NoPermission``: the role's policy allows RunCommand/SendFile only on instances tagged with the
   cluster, and RAM authorizes every instance a call names). Then the agent status of that batch is asked again:
   instances it no longer lists end ``instance-gone``, those not ``true`` ``agent-unavailable``, and the
   rest is submitted again. When the status shows nothing wrong (a permission refusal never shows there)
   the batch is halved until the refused instance stands alone (about 7 extra calls per bad instance, at
   most 30 per batch); it ends with its own outcome (``permission-denied``, ``instance-gone``...) and
   the rest runs.
5. Nodes that answer ``bundle-missing`` get the bundle by ``SendFile`` (one call per part per 50 instances,
   each part <= 32 KB base64), and are run once more. A warm node therefore costs one RunCommand.

Every instance ends with exactly one :class:`~.outcome.NodeResult`; API failures after retries fail the
nodes of that batch, never the others.
"""

import base64
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from functions.delivery.outcome import NodeResult, NodeTarget, parse_output
from functions.cloud.rpc import ApiError, RpcClient
from functions.delivery.transport import ScriptMaker
from node_bootstrap.outside import as_object, objects

RUN_BATCH = 100  # RunCommand and DescribeCloudAssistantStatus take at most 100 instances
SEND_BATCH = 50  # SendFile takes at most 50
RESULTS_PAGE = 50  # DescribeInvocationResults MaxResults maximum (ECS SDK model)
CALLS_IN_FLIGHT = 16  # concurrent API calls while submitting and per poll round: the run's one pool
RUNCOMMAND_LIMIT = 24 * 1024  # CommandContent, base64, KeepCommand=false
SLOW_AFTER_S = 60.0  # result polls keep their first interval this long, then back off
# {{ACS::InstanceId}} and other built-in parameters: Linux agent 2.2.3.309 or later.
PARAMETER_AGENT = (2, 2, 3, 309)
FINAL = {"Success", "Failed", "Error", "Timeout", "Cancelled", "Terminated", "Aborted", "Invalid", "Stopped"}
# A row's InvokeRecordStatus that is final too, whatever its InvocationStatus says (one outside FINAL was polled
# until the poll deadline, node deadline + 120 s). The ECS SDK model (DescribeInvocationResults, invocationResult.
# invokeRecordStatus), for a one-time task: "Finished: The execution was complete on all instances, or the
# execution was stopped on some instances and was complete on the other instances"; "Failed: The execution failed
# on all instances"; "Stopped: The task was stopped". Running, Stopping and PartialFailed (others may still run)
# are not.
RECORD_FINAL = {"Finished", "Failed", "Stopped"}
ERRORS = {  # Cloud Assistant ErrorCode (per instance, in the results) -> our transport error code
    "ClientNotRunning": "agent-not-ready", "ClientNotResponse": "agent-not-ready",
    "ClientIsUpgrading": "agent-not-ready", "ClientNeedUpgrade": "agent-not-ready",
    "DeliveryTimeout": "delivery-timeout", "ExecutionTimeout": "execution-timeout",
    "InstanceReleased": "instance-released", "InstanceNotExists": "instance-released",
    "InstanceNotRunning": "instance-not-running", "ExecutionInterrupted": "execution-interrupted",
    "ExecutionException": "execution-error",
}
# Errors with which RunCommand / SendFile refuse a whole call because of one instance (InvokeCommand's
# documented codes), and what a lone refused instance is reported as.
WHOLE_CALL = {"InvalidInstance.NotFound": "instance-gone", "InvalidInstanceId.NotFound": "instance-gone",
              "InvalidInstanceStatus": "agent-unavailable", "IncorrectInstanceStatus": "agent-unavailable",
              "InvalidInstance.NotRunning": "agent-unavailable", "InvalidInstance.NoClient": "agent-unavailable",
              # RAM refuses a call that names one instance the role may not touch: ECS answers 403
              # Forbidden.RAM ("User not authorized to operate on the specified resource", ECS announcement
              # of the authentication change for its APIs); NoPermission is the platform's generic code.
              "Forbidden.RAM": "permission-denied", "NoPermission": "permission-denied"}
# Extra calls one refused batch may cost while its bad instances are searched for: a few bad instances in
# 100 take about 7 each; a refusal of every instance (status fine, API refusing) must not cost 2 x 100.
ISOLATION_CALLS = 30
# At most 8 parts of at most 9 digits ("2.2.3.309"): the field is the answer's text, and ``int`` of a part of
# 5,000 digits raises ValueError (Python's 4,300-digit limit), which out of the agent wait would fail every node.
_VERSION = re.compile(r"^[0-9]{1,9}(\.[0-9]{1,9}){0,7}\Z")


def _chunks(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


def _content_size(script: str) -> int:
    """Bytes of the script as RunCommand's CommandContent (base64, ContentEncoding=Base64)."""
    return (len(script.encode("utf-8")) + 2) // 3 * 4


def agent_version(text) -> Optional[tuple]:
    """``"2.2.3.309"`` -> ``(2, 2, 3, 309)``; None when the agent did not report one (null, odd text, one past
    the bound of :data:`_VERSION`)."""
    text = text.strip() if isinstance(text, str) else ""
    return tuple(int(p) for p in text.split(".")) if _VERSION.match(text) else None


def _rows(value) -> List[dict]:
    """The rows of an answer's list that name their instance by text. The reader rule (docs/security.md): a
    part of another shape reads as absent, that row alone; one odd row raised out of the poll loop (a list is
    no dict key, nor a set member) and every node of the event ended internal-error."""
    return [row for row in objects(value) if isinstance(row.get("InstanceId"), str)]


def _field(row: dict, name: str) -> str:
    """A text field of an answer's row; a value of another type reads as absent ("")."""
    value = row.get(name)
    return value if isinstance(value, str) else ""


def _final(row: dict) -> bool:
    """Whether a DescribeInvocationResults row is done: its outcome is then read from ExitCode, ErrorCode and
    Output (:meth:`CloudAssistantTransport._result`), whichever of the two fields said so."""
    return _field(row, "InvocationStatus") in FINAL or _field(row, "InvokeRecordStatus") in RECORD_FINAL


def _invoke_id(answer: dict, action: str) -> str:
    """The ``InvokeId`` of a RunCommand or SendFile answer; none, or one that is no text, fails that call (it
    keys the poll loop's tables: a list there raised out of the transport and failed every node)."""
    invoke_id = answer.get("InvokeId")
    if not invoke_id or not isinstance(invoke_id, str):
        raise ApiError(action, "SDK.Unexpected", "no InvokeId in the answer")
    return invoke_id


def refused_whole_call(exc: ApiError) -> bool:
    """The call was refused because of (some of) its instances, not because of the request itself."""
    return exc.code in WHOLE_CALL


class Batch(NamedTuple):
    targets: List[NodeTarget]
    script: str
    parameters: bool  # the script uses {{ACS::InstanceId}} (EnableParameter=true)


class CloudAssistantTransport:
    name = "cloud-assistant"

    def __init__(self, ecs: RpcClient, maker: ScriptMaker, agent_wait_s: float = 120.0,
                 poll_s: float = 1.0, poll_max_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, calls_in_flight: int = CALLS_IN_FLIGHT):
        self.ecs, self.maker = ecs, maker
        self.calls_in_flight = max(1, calls_in_flight)
        self.agent_wait_s, self.poll_s, self.poll_max_s = agent_wait_s, poll_s, poll_max_s
        self.clock, self.sleep = clock, sleep
        self.largest_request = 0  # bytes of the largest CommandContent / Content sent (benchmarks read it)
        self.versions: Dict[str, Optional[tuple]] = {}  # instance id -> agent version, from the status
        # ("submit"|"poll", invoke id) and ("round", "") markers, in order (tests and benchmarks read it)
        self.trace: List[Tuple[str, str]] = []
        self._local = threading.local()  # the pool of the run this thread is in; ``worker``: a thread of one

    # ---- the interface ----

    def run(self, targets: Sequence[NodeTarget]) -> List[NodeResult]:
        # One pool for the whole run (agent wait, submits, polls, uploads): a pool per agent-wait round and per
        # step started threads in proportion to the rounds an event's new nodes take to come up.
        with ThreadPoolExecutor(max_workers=self.calls_in_flight, initializer=self._mark_worker) as pool:
            self._local.pool = pool
            try:
                return self._run(targets)
            finally:
                self._local.pool = None

    def _mark_worker(self) -> None:
        self._local.worker = True

    def _map(self, call: Callable, items: Sequence) -> List:
        """``[call(item) for item in items]``, ``calls_in_flight`` at a time on the run's pool (threads start
        only as calls need them, and are reused). One item is called in this thread, and so is a call made
        from a thread of the pool (a refused batch's status check inside a submit: a pool thread waiting on
        its own pool could wait for itself)."""
        if len(items) <= 1 or getattr(self._local, "worker", False):
            return [call(item) for item in items]
        pool = getattr(self._local, "pool", None)
        if pool is None:  # outside run(): a pool for this map alone
            with ThreadPoolExecutor(max_workers=min(self.calls_in_flight, len(items))) as own:
                return list(own.map(call, items))
        return list(pool.map(call, items))

    def _run(self, targets: Sequence[NodeTarget]) -> List[NodeResult]:
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

    def _status_pages(self, ids: Sequence[str]) -> List[object]:
        """One answer per batch of ``ids``: {iid: row} for the ids the service listed, or the ApiError. A
        lone instance the call was refused for has the row ``{"refused": ApiError}``."""
        pages = _chunks(sorted(ids), RUN_BATCH)
        if not pages:
            return []
        return list(zip(pages, self._map(self._agent_status, pages)))

    def _wait_for_agents(self, targets: List[NodeTarget], results: Dict[str, NodeResult]) -> List[NodeTarget]:
        pending = {t.instance_id: t for t in targets}
        unknown: Dict[str, int] = {}  # instance id -> answers in a row that did not list it
        deadline = self.clock() + self.agent_wait_s
        interval = self.poll_s
        while pending:
            for batch, answer in self._status_pages(pending):
                if isinstance(answer, ApiError):
                    for iid in batch:
                        results[iid] = NodeResult(iid, self.name, error="api-error", message=str(answer))
                        pending.pop(iid)
                    continue
                for iid in batch:
                    row = answer.get(iid)
                    if row is not None and "refused" in row:
                        refusal = row["refused"]
                        results[iid] = NodeResult(iid, self.name, error=WHOLE_CALL.get(refusal.code, "api-error"),
                                                  message="DescribeCloudAssistantStatus refused the instance: %s"
                                                  % refusal)
                        pending.pop(iid)
                        continue
                    if row is None:
                        # Not listed twice in a row: the instance does not exist (any more). Once could be
                        # a brand-new instance the service has not caught up with.
                        unknown[iid] = unknown.get(iid, 0) + 1
                        if unknown[iid] >= 2:
                            results[iid] = NodeResult(iid, self.name, error="instance-gone", message=(
                                "DescribeCloudAssistantStatus does not know the instance: released, or not "
                                "in region %s" % self.ecs.region))
                            pending.pop(iid)
                        continue
                    unknown.pop(iid, None)
                    if str(row.get("CloudAssistantStatus")).lower() == "true":
                        self.versions[iid] = agent_version(row.get("CloudAssistantVersion"))
                        pending.pop(iid)
            if not pending or self.clock() >= deadline:
                break
            self.sleep(interval)
            interval = min(interval * 1.5, self.poll_max_s)
        for iid in pending:
            results[iid] = NodeResult(iid, self.name, error="agent-not-ready", message="the Cloud Assistant "
                                      "agent did not report running within %gs" % self.agent_wait_s)
        return [t for t in targets if t.instance_id not in results]

    def _agent_status(self, batch: List[str], budget: Optional[List[int]] = None):
        """{instance id: status row} for the ids of ``batch`` the service lists, or the ApiError. A call
        refused whole because of some of its instances is halved (at most ISOLATION_CALLS extra calls);
        a lone refused instance gets the row ``{"refused": ApiError}``."""
        params = {"RegionId": self.ecs.region}  # with InstanceId, paging parameters do not take effect
        params.update({"InstanceId.%d" % (i + 1): iid for i, iid in enumerate(batch)})
        try:
            body = self.ecs.call("DescribeCloudAssistantStatus", params)
        except ApiError as exc:
            budget = [ISOLATION_CALLS] if budget is None else budget
            if not refused_whole_call(exc) or budget[0] <= 0:
                return exc
            if len(batch) == 1:
                return {batch[0]: {"refused": exc}}
            rows: Dict[str, object] = {}
            half = len(batch) // 2
            for part in (batch[:half], batch[half:]):
                budget[0] -= 1
                got = self._agent_status(part, budget)
                if isinstance(got, ApiError):
                    got = {iid: {"refused": got} for iid in part}
                rows.update(got)
            return rows
        rows = _rows(as_object(body.get("InstanceCloudAssistantStatusSet")).get("InstanceCloudAssistantStatus"))
        return {row["InstanceId"]: row for row in rows}

    # ---- whole-call refusals ----

    def _isolating(self, ids: List[str], call: Callable[[List[str]], object], depth: int = 0,
                   budget: Optional[List[int]] = None):
        """``call(ids)``; when the API refuses the whole call because of some instances, find them (agent
        status again, else halve the batch) and call again without them. Returns ``(done, failed)``:
        [(ids, value)] for the calls that went through, {iid: NodeResult} for the instances left out."""
        if budget is None:
            budget = [ISOLATION_CALLS]
        elif budget[0] <= 0:  # refused again and again: not one bad instance; stop calling, report them all
            return [], {iid: NodeResult(iid, self.name, error="api-error", message=(
                "left out after %d calls refused because of their instances" % ISOLATION_CALLS)) for iid in ids}
        else:
            budget[0] -= 1
        try:
            return [(ids, call(ids))], {}
        except ApiError as exc:
            if not refused_whole_call(exc):
                if depth == 0:
                    raise
                # a part of a refused batch hit another error: only that part fails; the parts already
                # submitted are running and keep their invocations
                return [], {iid: NodeResult(iid, self.name, error="api-error", message=str(exc)) for iid in ids}
            refusal = exc
        failed: Dict[str, NodeResult] = {}
        if depth == 0:  # once per refused batch: the status shows stopped, released and agentless instances
            for page, answer in self._status_pages(ids):
                if isinstance(answer, ApiError):
                    continue  # no better knowledge: halving below still finds the refused instance
                for iid in page:
                    row = answer.get(iid)
                    if row is not None and "refused" in row:
                        continue  # the status call was refused for it too: halving below finds out
                    if row is None:
                        failed[iid] = NodeResult(iid, self.name, error="instance-gone", message=(
                            "%s: the instance no longer exists (%s)" % (refusal.action, refusal.code)))
                    elif str(row.get("CloudAssistantStatus")).lower() != "true":
                        failed[iid] = NodeResult(iid, self.name, error="agent-unavailable", message=(
                            "%s: the instance is not running or its Cloud Assistant agent is gone (%s)"
                            % (refusal.action, refusal.code)))
        rest = [iid for iid in ids if iid not in failed]
        if failed:
            if not rest:
                return [], failed
            done, more = self._isolating(rest, call, depth + 1, budget)
            failed.update(more)
            return done, failed
        if len(ids) == 1:
            code = WHOLE_CALL.get(refusal.code, "api-error")
            return [], {ids[0]: NodeResult(ids[0], self.name, error=code, message=str(refusal))}
        half = len(ids) // 2
        done: list = []
        for part in (ids[:half], ids[half:]):
            got, more = self._isolating(part, call, depth + 1, budget)
            done.extend(got)
            failed.update(more)
        return done, failed

    # ---- run ----

    def _batches(self, targets: Sequence[NodeTarget]) -> List[Batch]:
        groups: Dict[tuple, List[NodeTarget]] = {}
        for t in targets:
            groups.setdefault(tuple(t.args), []).append(t)
        batches = []
        for group in groups.values():
            shared = [t for t in group if not self._old_agent(t.instance_id)]
            for chunk in _chunks(shared, RUN_BATCH):
                batches.extend(self._fitting(chunk))
            for t in group:  # an older agent cannot fill in "{{ACS::InstanceId}}": its own id, written in
                if self._old_agent(t.instance_id):
                    batches.append(Batch([t], self.maker.script([t], t.instance_id), False))
        return batches

    def _fitting(self, chunk: List[NodeTarget]) -> List[Batch]:
        """``chunk`` as shared-script batches whose CommandContent fits RunCommand's limit. The script carries
        every node's name (compressed), and names and instance ids that do not compress (ACK's custom node
        names, up to Kubernetes' 253 characters) put 100 nodes past it: such a chunk is halved until each
        half fits, rather than refused whole. One node's script that cannot fit stays, and fails alone."""
        script = self.maker.script(chunk)
        if len(chunk) == 1 or _content_size(script) <= RUNCOMMAND_LIMIT:
            return [Batch(chunk, script, True)]
        half = (len(chunk) + 1) // 2
        return self._fitting(chunk[:half]) + self._fitting(chunk[half:])

    def _old_agent(self, instance_id: str) -> bool:
        """The agent reported a version older than built-in parameters need. No version at all counts as
        current (the field is documented): a batch of 100 is not split into 100 calls on a guess, and an
        agent that is in fact too old answers ClientNeedUpgrade, which that node alone reports."""
        version = self.versions.get(instance_id)
        return version is not None and version < PARAMETER_AGENT

    def _run_all(self, targets: Sequence[NodeTarget]) -> Dict[str, NodeResult]:
        batches = self._batches(targets)
        if not batches:
            return {}
        results: Dict[str, NodeResult] = {}
        invocations: List[Tuple[str, List[NodeTarget]]] = []
        # Every batch is submitted before any is polled: a node's run starts as soon as its batch is in.
        for submitted, failed in self._map(self._submit, batches):
            invocations.extend(submitted)
            results.update(failed)
        results.update(self._poll_all(invocations))
        return results

    def _submit(self, batch: Batch):
        """RunCommand for one batch: ([(invoke id, targets)], {iid: failure})."""
        content = base64.b64encode(batch.script.encode("utf-8")).decode("ascii")
        self.largest_request = max(self.largest_request, len(content))
        if len(content) > RUNCOMMAND_LIMIT:  # one node's own script (_fitting halves batches): refuse, never truncate
            return [], self._fail(batch.targets, "api-error", "command content is %d bytes, over RunCommand's "
                                  "limit" % len(content))
        by_id = {t.instance_id: t for t in batch.targets}

        def run_command(ids: List[str]) -> str:
            params = {"RegionId": self.ecs.region, "Type": "RunShellScript", "CommandContent": content,
                      "ContentEncoding": "Base64", "Timeout": self.maker.deadline_s + 60, "KeepCommand": False,
                      "EnableParameter": batch.parameters, "Name": "ack-mig-hook", "ClientToken": uuid.uuid4().hex}
            params.update({"InstanceId.%d" % (i + 1): iid for i, iid in enumerate(ids)})
            invoke_id = _invoke_id(self.ecs.call("RunCommand", params), "RunCommand")
            self.trace.append(("submit", invoke_id))
            return invoke_id

        try:
            done, failed = self._isolating(list(by_id), run_command)
        except ApiError as exc:
            return [], self._fail(batch.targets, "api-error", str(exc))
        return [(invoke_id, [by_id[i] for i in ids]) for ids, invoke_id in done], failed

    def _poll_all(self, invocations: List[Tuple[str, List[NodeTarget]]]) -> Dict[str, NodeResult]:
        """One loop for every open invocation: each round reads all of them (16 calls in flight)."""
        done: Dict[str, NodeResult] = {}
        open_: Dict[str, set] = {invoke_id: {t.instance_id for t in batch} for invoke_id, batch in invocations}
        members = {invoke_id: batch for invoke_id, batch in invocations}
        started = self.clock()
        deadline = started + self.maker.deadline_s + 120
        interval = self.poll_s
        if not open_:
            return done
        beat = self.clock()
        while open_:
            # A fixed beat, not a pause after each round: a round that took a while (thousands of nodes)
            # does not push the next one later, so a result is still seen at most one interval late.
            beat += interval
            self.sleep(max(0.0, beat - self.clock()))
            ids = list(open_)
            last = self.clock() >= deadline  # the last round reads every page of what is still open
            self.trace.append(("round", ""))
            for invoke_id, answer in zip(ids, self._map(
                    lambda i: self._results_or_error(i, len(members[i]), last), ids)):
                wanted = open_[invoke_id]
                if isinstance(answer, ApiError):
                    if answer.retryable and not last:
                        continue  # the next round asks again
                    done.update(self._fail([t for t in members[invoke_id] if t.instance_id in wanted],
                                           "api-error", str(answer)))
                    del open_[invoke_id]
                    continue
                for row in answer:
                    iid = row.get("InstanceId")
                    if iid in wanted and _final(row):
                        done[iid] = self._result(row)
                        wanted.discard(iid)
                if not wanted:
                    del open_[invoke_id]
            if open_ and last:
                for invoke_id, wanted in open_.items():
                    done.update(self._fail([t for t in members[invoke_id] if t.instance_id in wanted],
                                           "execution-timeout", "no final result from Cloud Assistant in time"))
                break
            # A steady beat while a normal run lasts (a result is seen at most one interval late); past a
            # minute the node is slow anyway, and the interval grows to spare the API.
            if self.clock() - started > SLOW_AFTER_S:
                interval = min(interval * 1.5, self.poll_max_s)
        return done

    def _results_or_error(self, invoke_id: str, size: int, whole: bool = False):
        self.trace.append(("poll", invoke_id))
        try:
            return self._results(invoke_id, size, whole)
        except ApiError as exc:
            return exc

    def _results(self, invoke_id: str, size: int, whole: bool = False) -> List[dict]:
        """The rows of an invocation of ``size`` instances, page by page (``MaxResults`` + ``NextToken``; the
        last page has none). Unless ``whole``, a page with an instance still running ends the read: the
        invocation is not done, and its later pages are read in a later round, from the first page again
        (half the calls per round for a batch of 100 while its nodes run, and no token kept across rounds)."""
        rows: List[dict] = []
        token = ""
        # MaxResults is a maximum ("entries per page"), not a promise: a page may hold fewer rows, so pages are
        # followed until ``size`` rows came. Each page holds one row at least, so ``size`` pages are the bound
        # (a fixed 2-page cap left a batch paged by 10 unread past its 40th row, until the poll deadline).
        for _ in range(max(1, size)):
            params = {"RegionId": self.ecs.region, "InvokeId": invoke_id, "MaxResults": RESULTS_PAGE,
                      "ContentEncoding": "Base64"}
            if token:
                params["NextToken"] = token
            body = self.ecs.call("DescribeInvocationResults", params)
            inv = as_object(body.get("Invocation"))
            got = _rows(as_object(inv.get("InvocationResults")).get("InvocationResult"))
            rows.extend(got)
            token = str(inv.get("NextToken") or "")
            if not got or not token or len(rows) >= size:
                return rows
            if not whole and not all(_final(row) for row in got):
                return rows
        return rows

    def _result(self, row: dict) -> NodeResult:
        iid = row["InstanceId"]
        try:
            output = base64.b64decode(_field(row, "Output")).decode("utf-8", "replace")
        except ValueError:
            output = ""
        doc = parse_output(output)
        exit_code = row.get("ExitCode")
        if not isinstance(exit_code, int) or isinstance(exit_code, bool):
            exit_code = None
        code = _field(row, "ErrorCode")
        if doc is not None and code in ("", "ExitCodeNonzero"):
            return NodeResult(iid, self.name, exit_code, doc)
        error = ERRORS.get(code, "execution-error" if code else "no-result")
        info = _field(row, "ErrorInfo") or ("the node script gave no result (status %s)"
                                            % _field(row, "InvocationStatus"))
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

            def send_file(ids: List[str]) -> str:
                params = {"RegionId": self.ecs.region, "Name": name, "TargetDir": incoming, "Content": content,
                          "ContentType": "Base64", "FileMode": "0600", "Overwrite": True, "Timeout": 120}
                params.update({"InstanceId.%d" % (i + 1): iid for i, iid in enumerate(ids)})
                return _invoke_id(self.ecs.call("SendFile", params), "SendFile")

            try:
                done, refused = self._isolating(list(batch), send_file)
                bad = {iid: res for iid, res in refused.items()}
                for ids, invoke_id in done:
                    bad.update({iid: why for iid, why in self._wait_sent(invoke_id, ids).items()})
                return bad
            except ApiError as exc:
                return {iid: "api-error: %s" % exc for iid in batch}

        for bad in self._map(send, jobs):
            for iid, why in bad.items():
                if isinstance(why, NodeResult):  # refused: the instance itself is gone or unavailable
                    failed[iid] = why
                else:
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
            for inv in objects(as_object(body.get("Invocations")).get("Invocation")):
                for row in _rows(as_object(inv.get("InvokeInstances")).get("InvokeInstance")):
                    states[row["InstanceId"]] = row
            final = {iid: row for iid, row in states.items() if _field(row, "InvocationStatus") in FINAL}
            if set(batch) <= set(final) or self.clock() >= deadline:
                return {iid: "%s %s" % (_field(final[iid], "ErrorCode") or _field(final[iid], "InvocationStatus"),
                                        _field(final[iid], "ErrorInfo"))
                        if iid in final else "no result in time"
                        for iid in batch if iid not in final or _field(final[iid], "InvocationStatus") != "Success"}
            interval = min(interval * 1.5, self.poll_max_s)

    def _fail(self, batch: Sequence[NodeTarget], error: str, message: str) -> Dict[str, NodeResult]:
        return {t.instance_id: NodeResult(t.instance_id, self.name, error=error, message=message) for t in batch}
