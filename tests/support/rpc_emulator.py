"""A loopback emulator of the ECS (Cloud Assistant) and Auto Scaling RPC APIs, for the real
``aliyun-python-sdk-core`` (what the product uses) and the official Tea SDKs (``alibabacloud_ecs20140526``,
``alibabacloud_ess20220222``: tests/contract) to talk to over HTTP on 127.0.0.1.

Each rule it enforces, and where it comes from:

* Signatures. Version 1 (the core SDK's ``CommonRequest``): ``Signature`` HMAC-SHA1 over the sorted,
  percent-encoded parameters ("Request signatures" of the ECS API reference; :func:`rpc_signature`, written
  independently of the SDK), ``SignatureMethod`` HMAC-SHA1, ``SignatureVersion`` 1.0, ``Format`` JSON, a
  ``SignatureNonce`` that never repeats, ``SecurityToken`` the STS token. Version 3 (the Tea SDKs' default,
  ``alibabacloud_tea_openapi`` ``Client.call_api`` -> ``do_request``): ``Authorization: ACS3-HMAC-SHA256``
  recomputed with tests/support/cs_emulator.py ``acs3_signature``, ``x-acs-action`` / ``x-acs-version`` /
  ``x-acs-signature-nonce`` / ``x-acs-security-token`` headers, parameters in the query string.
* Versions: ECS 2014-05-26, Auto Scaling 2022-02-22 (``Params(version=...)`` in each Tea client method).
* Required parameters: those the SDK request models mark "This parameter is required." (e.g.
  ``RunCommandRequest``: RegionId, Type, CommandContent). Booleans are accepted as the SDKs send them:
  ``true``/``false`` (CommonRequest) and ``True``/``False`` (Tea, ``str(bool)``); anything else is a 400.
* RunCommand: 1..100 ``InstanceId.N``; Base64 ``CommandContent`` <= 24 KB with ``KeepCommand`` false, 18 KB
  when kept (ECS "RunCommand" reference, facts.md). A ``ClientToken`` already answered gets that invocation
  again; one whose first request is still being processed (``hold_processing_next``) is answered 403
  ``IdempotentProcessing`` "The previous idempotent request(s) is still processing." ("A previous idempotent
  request is being processed. Try again later.": the error code tables of ECS's ClientToken APIs,
  InvokeCommand's among them). SendFile: 1..50 instances, ``Content`` <= 32 KB Base64.
  With ``reject_unrunnable`` they refuse the WHOLE call when one instance cannot run it, as the reference
  documents for InvokeCommand/RunCommand: 404 ``InvalidInstance.NotFound`` ("The specified instances does
  not exist."), 400 ``InvalidInstanceStatus`` (the instance must be Running), 400 ``InvalidInstance.NoClient``.
  With ``ram_tag = (key, value)`` they refuse the whole call with 403 ``Forbidden.RAM`` "User not authorized
  to operate on the specified resource, or this API doesn't support RAM." (the code and text of ECS's
  "Announcement of changes to the authentication mechanism for ECS query API operations", with an
  ``AccessDeniedDetail``) when one instance lacks the tag: the role's policy grants RunCommand/SendFile only
  on instances tagged ``acs:ResourceTag/ack.aliyun.com = <cluster id>`` (template.yml, docs/security.md), and
  RAM authorizes a request on every resource it names.
* DescribeCloudAssistantStatus: up to 100 ``InstanceId.N`` ("最多可指定100个实例ID", ECS reference 2679924);
  with InstanceId, PageSize/MaxResults "does not take effect" (same reference, and the SDK model's
  comments), so they are ignored here, never used to refuse. Paging without ids by MaxResults (<= 50) and
  NextToken. What it answers for an id it does not know (released, never existed) is NOT documented:
  ``unknown_status`` "omit" (default: no row, as a filter by id would) or "refuse" (404
  ``InvalidInstance.NotFound`` for the whole call, as RunCommand does) lets tests cover both.
* DescribeInvocationResults: ``Output`` in the ``ContentEncoding`` asked for (PlainText or Base64, default
  Base64: the SDK request model); ``MaxResults`` <= 50 (default 10) with ``NextToken``, the paging the SDK
  model recommends; ``PageNumber``/``PageSize`` (<= 50) still answered, marked "will soon be deprecated".
  A NextToken this emulator did not issue is refused (400; the code is ours, the API's is not documented).
  ``results_page_rows`` makes it answer fewer rows per page than asked: MaxResults is documented as "the
  maximum number of entries per page", a bound, not a promise.
* Security groups (``doctor``'s outbound check): ``DescribeSecurityGroups`` filtered by ``SecurityGroupId``
  (an id it does not hold lists nothing, as a filter does) with ``SecurityGroupType`` ``normal``/``enterprise``
  and ``VpcId``; ``DescribeSecurityGroupAttribute`` answers 404 ``InvalidSecurityGroupId.NotFound`` ("The
  specified SecurityGroupId does not exist.", ECS error code of the security group APIs) for an unknown group,
  filters ``Permissions.Permission`` by ``Direction`` (egress, ingress, all: default all) and pages them by
  ``MaxResults`` (10..1000, default 500) and ``NextToken``, every limit from the SDK request model's comments;
  another ``Direction`` is refused (400; the code is ours, the API's is not documented).
* Auto Scaling 2022-02-22: ``DescribeScalingInstances`` takes ``InstanceIds.N`` (at most 20 here, the
  2014-08-28 reference's limit; ids the group does not hold are "ignored ... and no error is returned", SDK
  model comment), ``PageSize`` <= 100 (SDK model), lists bare (``ScalingInstances: [...]``, the 2022 response
  model); each row names its ``ScalingGroupId``. ``DescribeLifecycleHooks`` takes ``LifecycleHookIds.N``
  (N <= 50), ``PageSize`` <= 50 (SDK model), and ignores ScalingGroupId when ids are given.
  ``RecordLifecycleActionHeartbeat`` takes the lower-case ``lifecycleHookId`` / ``lifecycleActionToken``
  the SDK model names.
  ``CompleteLifecycleAction`` answers 400 ``LifecycleHookIdAndLifecycleActionToken.Invalid`` ("The specified
  lifecycleActionToken and lifecycleHookId you provided does not match any in process lifecycle action.",
  the error codes of AlibabaCloudDocs/ess intl.en-US/API-Reference/Lifecycle Hook/CompleteLifecycleAction.md)
  when the hook and token name no action in process: one completed already, or a hook the emulator's
  records (``lifecycle_hooks``) do not hold while they hold any. The tokens ESS issued are not known here
  (an event carries them), so any token of a known hook is an action in process until it is completed.
  ``RecordLifecycleActionHeartbeat`` answers the same 400 for an action not in process (its error codes in
  the same docs, RecordLifecycleActionHeartbeat.md); its LifecycleAction.TimeExceeded (six hours) and
  LifecycleAction.RecordTimesExceeded (20 extensions) are not modelled.

Nodes are models (:class:`SimNode`): an agent that is or becomes ready, a script that takes a configured
time and returns a configured result, or (:class:`ShellNode`) one that really runs the script in a
subprocess against its own directory, so the bundle cache path is exercised for real. Faults: per-action
error queues (Throttling, 5xx), a per-call latency, late answers (``slow_next``), answers off the model
(``mangle_next``), an agent that is not ready, an instance released mid-run, execution timeouts, an
instance stopped or released between the agent check and the command (``lost_after``), an old agent
(``agent_version``), the whole-call refusals above. ``calls`` counts requests per action; ``exchanges`` records every request that came over the wire
with its answer, which tests/support/contract_plugin.py checks against the SDK models after each test.
A SimNode's run is decided when the command arrives and revealed by DescribeInvocationResults once its
``duration_s`` has passed (no thread per node, so 10,000 nodes fit in one process).
"""

import base64
import hashlib
import hmac
import json
import os
import subprocess
import threading
import time
import uuid
from collections import Counter, deque
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple
from urllib.parse import parse_qsl, quote, urlsplit
from tests.support import contract
from tests.support.cs_emulator import ALGORITHM as ACS3, acs3_signature
from tests.support.loopback import Answer as LoopAnswer, LoopbackServer, json_answer

ECS_ACTIONS = {
    "DescribeCloudAssistantStatus": ("RegionId",),
    "RunCommand": ("RegionId", "Type", "CommandContent"),
    "DescribeInvocationResults": ("RegionId",),
    "SendFile": ("RegionId", "Name", "TargetDir", "Content"),  # InstanceId.N: 1..50 checked by the action
    "DescribeSendFileResults": ("RegionId",),
    "DescribeSecurityGroups": ("RegionId",),
    "DescribeSecurityGroupAttribute": ("RegionId", "SecurityGroupId"),
}
ESS_ACTIONS = {
    "CompleteLifecycleAction": ("LifecycleHookId", "LifecycleActionToken"),
    "RecordLifecycleActionHeartbeat": ("lifecycleHookId", "lifecycleActionToken"),
    "DescribeScalingInstances": ("RegionId",),
    "DescribeLifecycleHooks": (),  # nothing marked required in the 2022-02-22 model
}
VPC_ACTIONS = {"DescribeVSwitchAttributes": ("VSwitchId",)}  # RegionId optional (2016-04-28 reference)
VERSIONS = {a: "2014-05-26" for a in ECS_ACTIONS}
VERSIONS.update({a: "2022-02-22" for a in ESS_ACTIONS})
VERSIONS.update({a: "2016-04-28" for a in VPC_ACTIONS})
PRODUCTS = {a: "ecs" for a in ECS_ACTIONS}
PRODUCTS.update({a: "ess" for a in ESS_ACTIONS})
PRODUCTS.update({a: "vpc" for a in VPC_ACTIONS})
RUNCOMMAND_LIMIT = 24 * 1024
RUNCOMMAND_KEPT_LIMIT = 18 * 1024
SENDFILE_LIMIT = 32 * 1024
TRUE, FALSE = ("true", "True"), ("false", "False")  # CommonRequest sends lower case, the Tea SDKs str(bool)
# ECS "Announcement of changes to the authentication mechanism for ECS query API operations" (2025)
FORBIDDEN_RAM = "User not authorized to operate on the specified resource, or this API doesn't support RAM."


def flag(params: Dict[str, str], name: str, default: bool = False) -> Optional[bool]:
    """A boolean parameter as either SDK sends it; None when it is neither (the caller answers 400)."""
    value = params.get(name)
    if value is None or value == "":
        return default
    return True if value in TRUE else False if value in FALSE else None


def _enc(text: str) -> str:
    return quote(text, safe="-_.~")


def string_to_sign(method: str, params: Dict[str, str]) -> str:
    canonical = "&".join("%s=%s" % (_enc(k), _enc(v)) for k, v in sorted(params.items()))
    return "%s&%s&%s" % (method, _enc("/"), _enc(canonical))


def rpc_signature(method: str, params: Dict[str, str], secret: str) -> str:
    """The RPC signature as Alibaba Cloud documents it, written independently of the SDK."""
    to_sign = string_to_sign(method, params)
    digest = hmac.new((secret + "&").encode(), to_sign.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


class Run:
    """What a node does with one command: exit code, output, error code, and how long it takes."""

    def __init__(self, exit_code=0, output="", error_code="", duration_s=0.0):
        self.exit_code, self.output, self.error_code, self.duration_s = exit_code, output, error_code, duration_s


class SimNode:
    """A node model. ``result`` is the node's JSON (printed as the last output line); ``bundle`` False
    makes the first run answer ``bundle-missing`` until a SendFile delivers the parts."""

    instant = True  # the run is a pure function of the node: decided at once, revealed after duration_s

    def __init__(self, agent_ready=True, ready_after=0, duration_s=0.0, result=None, exit_code=0,
                 bundle=True, timeout=False, released=False, agent_version="2.5.3.0", lost_after=None,
                 lost_as="stopped", tags=None):
        # ECS tags of the instance (RAM's acs:ResourceTag condition reads them; see Emulator.ram_tag)
        self.tags: Dict[str, str] = dict(tags or {})
        self.agent_ready, self.ready_after = agent_ready, ready_after
        # DescribeCloudAssistantStatus's CloudAssistantVersion ("" = null: agent not installed or not running)
        self.agent_version = agent_version
        # after this many agent-status answers the instance is "stopped", "released" or its agent is gone
        # ("agent-gone"): the race between the agent check and the command that makes RunCommand refuse a
        # whole call
        self.lost_after, self.lost_as = lost_after, lost_as
        self.duration_s, self.exit_code, self.bundle = duration_s, exit_code, bundle
        self.result = result if result is not None else {"outcome": "success", "changes": 1, "gpus": [],
                                                          "sequence": "1g.5gb"}
        self.timeout, self.released = timeout, released
        self.files: Dict[str, bytes] = {}
        self.status_queries = 0

    def is_ready(self) -> bool:
        running = self.state() == "running"
        self.status_queries += 1
        return self.agent_ready and self.status_queries > self.ready_after and running

    def state(self) -> str:
        """running, stopped, agent-gone or released (then unknown to every API)."""
        if self.lost_after is not None and self.status_queries >= self.lost_after:
            return self.lost_as
        return "released" if getattr(self, "gone", False) else "running"

    def run(self, script: str, timeout_s: int) -> Run:
        if self.released:
            return Run(None, "", "InstanceReleased", min(self.duration_s, 0.05))
        if self.timeout:
            return Run(None, "", "ExecutionTimeout", 0.0)
        if not self.bundle and not self.files:
            doc = {"outcome": "failed", "bundle": "missing", "error": {"code": "bundle-missing", "message": "x"}}
            return Run(10, json.dumps(doc) + "\n", "ExitCodeNonzero", 0.0)
        return Run(self.exit_code, "# node log\n" + json.dumps(self.result) + "\n",
                   "" if self.exit_code == 0 else "ExitCodeNonzero", self.duration_s)

    def receive(self, target_dir: str, name: str, data: bytes) -> None:
        self.files[os.path.join(target_dir, name)] = data


class ShellNode(SimNode):
    """Runs the command for real: ``sh -c`` in a subprocess, with the node's directory ``node_root``
    mapped under ``fs`` (its own filesystem), so each emulated node has its own bundle cache."""

    instant = False

    def __init__(self, fs: str, node_root: str, **kw):
        super().__init__(**kw)
        self.fs, self.node_root = fs, node_root
        self.scripts: List[str] = []

    def _map(self, path: str) -> str:
        return path.replace(self.node_root, os.path.join(self.fs, self.node_root.lstrip("/")), 1)

    def run(self, script: str, timeout_s: int) -> Run:
        self.scripts.append(script)
        mapped = script.replace("'%s" % self.node_root, "'%s" % self._map(self.node_root))
        try:
            proc = subprocess.run(["/bin/sh", "-c", mapped], capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return Run(None, "", "ExecutionTimeout", 0.0)
        # Cloud Assistant returns stdout and stderr together; keep stdout last so the JSON line stays last.
        out = proc.stderr.decode("utf-8", "replace")[-500:] + proc.stdout.decode("utf-8", "replace")
        return Run(proc.returncode, out, "" if proc.returncode == 0 else "ExitCodeNonzero", 0.0)

    def receive(self, target_dir: str, name: str, data: bytes) -> None:
        path = self._map(target_dir)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, name), "wb") as fh:
            fh.write(data)


class Emulator(LoopbackServer):
    def __init__(self, access_key_id="LTAItestkey", secret="test-secret-value", token="sts-token-value",
                 region="cn-test-1", latency_s=0.0):
        self.access_key_id, self.secret, self.token, self.region = access_key_id, secret, token, region
        self.latency_s = latency_s
        self.nodes: Dict[str, SimNode] = {}
        self.calls: Counter = Counter()
        self.requests: List[Tuple[str, Dict[str, str]]] = []
        self.faults: Dict[str, deque] = {}
        self.slow: Dict[str, deque] = {}
        self.mangle: Dict[str, deque] = {}
        self.invocations: Dict[str, Dict[str, dict]] = {}
        self.sends: Dict[str, Dict[str, dict]] = {}
        self.lifecycle: List[Tuple[str, Dict[str, str]]] = []
        self.completed_actions: set = set()  # (LifecycleHookId, LifecycleActionToken) completed: no longer in process
        # Auto Scaling's records: scaling group id -> its instance ids; lifecycle hook id -> its group.
        self.scaling_instances: Dict[str, List[str]] = {}
        self.lifecycle_hooks: Dict[str, str] = {}
        self.client_tokens: Dict[str, str] = {}
        self.nonces = set()
        self.rejected: List[str] = []
        self.reject_unrunnable = False  # the fault: RunCommand/SendFile refuse a whole call (see above)
        # (tag key, value) the role's RAM policy requires on RunCommand/SendFile targets; None: no condition
        self.ram_tag: Optional[Tuple[str, str]] = None
        # The fault: DescribeScalingInstances lists the asked ids whatever their group (as DescribeLifecycleHooks
        # ignores ScalingGroupId when ids are given); each row still names its own group.
        self.list_other_groups = False
        # security group id -> {"SecurityGroupType": "normal"|"enterprise", "VpcId": ..., "Permissions": [rows
        # as DescribeSecurityGroupAttribute lists them, each with its Direction]}
        self.security_groups: Dict[str, dict] = {}
        # vSwitch id -> {"CidrBlock": ..., "VpcId": ...} (VPC DescribeVSwitchAttributes, doctor). What the API
        # answers for an id it does not hold is not documented: "refuse" (404 InvalidVSwitchId.NotFound, the
        # code the VPC and ECS references give for an unknown vSwitch elsewhere) or "empty" (200 naming
        # nothing), so tests cover both.
        self.vswitches: Dict[str, dict] = {}
        self.unknown_vswitch = "refuse"
        self.unknown_status = "omit"  # DescribeCloudAssistantStatus for an unknown id: "omit" or "refuse"
        self.exchanges: List[contract.Exchange] = []
        self.tokens: Dict[str, Tuple[str, int]] = {}  # NextToken issued -> (what it pages, offset)
        self.results_page_rows: Optional[int] = None  # DescribeInvocationResults: at most this many rows a page
        self.holds: Dict[str, deque] = {}  # action -> events a held first request waits on (hold_processing_next)
        self.processing: Dict[str, threading.Event] = {}  # ClientToken -> its first request, still processing
        self._lock = threading.Lock()
        contract.register(self)

    # ---- configuration ----

    def add_nodes(self, count: int, factory: Callable[[str], SimNode] = lambda iid: SimNode(),
                  prefix="i-emu") -> List[str]:
        ids = ["%s%04d" % (prefix, len(self.nodes) + n) for n in range(count)]
        for iid in ids:
            self.nodes[iid] = factory(iid)
        return ids

    def load_inventory(self, inventory: dict) -> "Emulator":
        """Auto Scaling's records from a snapshot's ``scaling_instances`` and ``lifecycle_hooks`` keys."""
        self.scaling_instances.update({g: list(ids) for g, ids in (inventory.get("scaling_instances") or {}).items()})
        self.lifecycle_hooks.update(inventory.get("lifecycle_hooks") or {})
        return self

    def fail_next(self, action: str, code: str, status: int, times: int = 1,
                  when: Optional[Callable[[Dict[str, str]], bool]] = None) -> None:
        """The next ``times`` calls of ``action`` (that match ``when``, if given) answer this error
        (e.g. Throttling.User 400, ServiceUnavailable 503, InternalError 500)."""
        self.faults.setdefault(action, deque()).extend([(code, status, when)] * times)

    def mangle_next(self, action: str, change: Callable[[dict], object], times: int = 1) -> None:
        """The next ``times`` answers to ``action`` are changed in place by ``change`` before they are sent, or
        replaced by what it returns when that is not None: an answer off the API's model (a field of another
        type, a list for the whole answer), as a broken or hostile endpoint might give."""
        with self._lock:
            self.mangle.setdefault(action, deque()).extend([change] * times)

    def hold_processing_next(self, action: str = "RunCommand") -> None:
        """The next ``action`` (RunCommand) stays in processing, its answer not yet decided, until a request
        with the same ClientToken has been answered IdempotentProcessing (at most 10 s): a first request
        still running when the client, its read timed out, sends it again."""
        with self._lock:
            self.holds.setdefault(action, deque()).append(threading.Event())

    def slow_next(self, action: str, seconds: float, times: int = 1) -> None:
        """The next ``times`` answers to ``action`` come ``seconds`` late (after the request was served)."""
        with self._lock:
            self.slow.setdefault(action, deque()).extend([seconds] * times)

    def _fault(self, action: str, params: Dict[str, str]):
        with self._lock:
            queue = self.faults.get(action) or deque()
            for fault in list(queue):
                if fault[2] is None or fault[2](params):
                    queue.remove(fault)
                    return fault
        return None

    def respond(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> LoopAnswer:
        # RPC: the parameters in the query string and, for POST, the form body (the core SDK uses both).
        split = urlsplit(path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        params = dict(query)
        params.update(dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True)))
        v3 = headers.get("authorization", "").startswith(ACS3 + " ")
        if v3:  # the Tea SDKs: action and version in headers, signed ACS3-HMAC-SHA256
            params.update(Action=headers.get("x-acs-action", ""), Version=headers.get("x-acs-version", ""))
        status, answer = self.handle(method, params, (split.path, query, headers, body) if v3 else None)
        action = params.get("Action", "")
        if action in VERSIONS:
            with self._lock:
                self.exchanges.append(contract.Exchange(PRODUCTS[action], params.get("Version", ""), action,
                                               {k: v for k, v in params.items()}, status, answer))
        return json_answer(status, answer)

    # ---- requests ----

    def _error(self, status, code, message):
        return status, {"Code": code, "Message": message, "RequestId": uuid.uuid4().hex}

    def handle(self, method: str, params: Dict[str, str], v3=None):
        """One request; ``v3`` is (path, query, headers, body) of an ACS3-signed one, None for version 1."""
        action = params.get("Action", "")
        with self._lock:
            self.calls[action] += 1
            self.requests.append((action, dict(params)))
        if self.latency_s:
            time.sleep(self.latency_s)
        bad = self._verify(method, params, action, v3) if v3 else self._verify(method, params, action)
        if bad:
            self.rejected.append(bad[1]["Code"])
            return bad
        fault = self._fault(action, params)
        if fault:
            return self._error(fault[1], fault[0], "injected fault")
        answer = getattr(self, "_" + action)(params)
        with self._lock:
            queue = self.slow.get(action)
            delay = queue.popleft() if queue else 0.0
        if delay:  # the work is done, only the answer is late: a client timeout here must not redo it
            time.sleep(delay)
        if isinstance(answer, tuple):
            return answer
        with self._lock:
            queue = self.mangle.get(action)
            change = queue.popleft() if queue else None
        if change:
            answer = json.loads(json.dumps(answer))  # a copy: the emulator's own records stay as they were
            replaced = change(answer)
            if replaced is not None:
                return 200, replaced
        answer["RequestId"] = uuid.uuid4().hex
        return 200, answer

    def _verify(self, method, params, action, v3=None):
        if action not in VERSIONS:
            return self._error(400, "InvalidAction.NotFound", "unknown action %s" % action)
        if params.get("Version") != VERSIONS[action]:
            return self._error(400, "InvalidVersion", "%s needs Version %s" % (action, VERSIONS[action]))
        bad = self._verify_v3(method, v3) if v3 else self._verify_v1(method, params)
        if bad:
            return bad
        required = ECS_ACTIONS.get(action) or ESS_ACTIONS.get(action) or VPC_ACTIONS.get(action) or ()
        missing = [k for k in required if not params.get(k)]
        if missing:
            return self._error(400, "MissingParameter", "%s requires %s" % (action, ", ".join(missing)))
        return None

    def _verify_v3(self, method, v3):
        """The V3 signature as the Tea SDKs send it (same checks as tests/support/cs_emulator.py)."""
        path, query, headers, body = v3
        nonce = headers.get("x-acs-signature-nonce")
        with self._lock:
            if not nonce or nonce in self.nonces:
                return self._error(400, "SignatureNonceUsed", "nonce missing or reused")
            self.nonces.add(nonce)
        payload_hash = hashlib.sha256(body).hexdigest()
        if headers.get("x-acs-content-sha256") != payload_hash or not headers.get("x-acs-date"):
            return self._error(400, "InvalidParameter", "x-acs-content-sha256 or x-acs-date")
        if self.token and headers.get("x-acs-security-token") != self.token:
            return self._error(400, "InvalidSecurityToken.Mismatch", "bad x-acs-security-token")
        auth = headers.get("authorization", "")
        fields = dict(part.strip().split("=", 1) for part in auth[len(ACS3) + 1:].split(",") if "=" in part)
        if fields.get("Credential") != self.access_key_id:
            return self._error(404, "InvalidAccessKeyId.NotFound", "unknown AccessKeyId")
        signed = fields.get("SignedHeaders", "").split(";")
        if not {"host", "x-acs-action", "x-acs-version", "x-acs-signature-nonce"} <= set(signed):
            return self._error(400, "IncompleteSignature", "required headers are not signed")
        expected = acs3_signature(method, path, query, headers, signed, payload_hash, self.secret)
        if not hmac.compare_digest(expected, fields.get("Signature", "")):
            return self._error(400, "SignatureDoesNotMatch", "Specified signature is not matched with our calculation.")
        return None

    def _verify_v1(self, method, params):
        for key, want in (("SignatureMethod", "HMAC-SHA1"), ("SignatureVersion", "1.0"), ("Format", "JSON")):
            if params.get(key) != want:
                return self._error(400, "InvalidParameter", "%s must be %s" % (key, want))
        if params.get("AccessKeyId") != self.access_key_id:
            return self._error(404, "InvalidAccessKeyId.NotFound", "unknown AccessKeyId")
        if self.token and params.get("SecurityToken") != self.token:
            return self._error(400, "InvalidSecurityToken.Mismatch", "bad SecurityToken")
        nonce = params.get("SignatureNonce")
        with self._lock:
            if not nonce or nonce in self.nonces:
                return self._error(400, "SignatureNonceUsed", "nonce missing or reused")
            self.nonces.add(nonce)
        signed = {k: v for k, v in params.items() if k != "Signature"}
        if not hmac.compare_digest(rpc_signature(method, signed, self.secret), params.get("Signature", "")):
            # The service's own wording: the SDK parses the string to sign out of it.
            return self._error(400, "SignatureDoesNotMatch", "Specified signature is not matched with our "
                               "calculation. server string to sign is:%s" % string_to_sign(method, signed))
        return None

    def _instance_ids(self, params):
        ids, n = [], 1
        while "InstanceId.%d" % n in params:
            ids.append(params["InstanceId.%d" % n])
            n += 1
        return ids

    def _DescribeCloudAssistantStatus(self, params):
        ids = self._instance_ids(params)
        if len(ids) > 100:
            return self._error(403, "InstanceIds.ExceedLimit", "at most 100")
        if self.unknown_status == "refuse" and any(self.nodes.get(i) is None or self.nodes[i].state() == "released"
                                                   for i in ids):
            return self._error(404, "InvalidInstance.NotFound", "The specified instances does not exist.")
        # With InstanceId, PageSize/MaxResults do not take effect (reference); an unknown id gets no row.
        rows = []
        for iid in ids if ids else sorted(self.nodes):
            node = self.nodes.get(iid)
            if node is None or node.state() == "released":
                continue
            ready = node.is_ready()
            rows.append({"InstanceId": iid, "CloudAssistantStatus": "true" if ready else "false",
                         "CloudAssistantVersion": node.agent_version if ready else "", "OSType": "Linux"})
        if ids:
            return {"InstanceCloudAssistantStatusSet": {"InstanceCloudAssistantStatus": rows},
                    "TotalCount": len(rows), "NextToken": ""}
        chunk, token, error = self._token_page(params, "status", rows)
        if error:
            return error
        # "If you specify MaxResults or NextToken ... the TotalCount response parameter is invalid": left out.
        return {"InstanceCloudAssistantStatusSet": {"InstanceCloudAssistantStatus": chunk}, "NextToken": token}

    def _token_page(self, params, what, rows, limit=50, default=10, least=1, most=None):
        """(rows of this page, NextToken or "", None) by MaxResults/NextToken, or (None, None, error answer).
        ``most``: the service answers at most this many rows a page, whatever MaxResults asks."""
        try:
            size = int(params.get("MaxResults") or default)
        except ValueError:
            return None, None, self._error(400, "InvalidParam.MaxResults", "MaxResults is an integer")
        if not least <= size <= limit:
            return None, None, self._error(400, "InvalidParam.MaxResults", "MaxResults must be %d to %d" % (
                least, limit))
        size = min(size, most or size)
        start = 0
        if params.get("NextToken"):
            with self._lock:
                issued = self.tokens.get(params["NextToken"])
            if issued is None or issued[0] != what:
                return None, None, self._error(400, "InvalidParam.NextToken", "the NextToken was not issued "
                                               "for this query")
            start = issued[1]
        chunk = rows[start:start + size]
        token = ""
        if start + size < len(rows):
            token = base64.b64encode(uuid.uuid4().bytes).decode()
            with self._lock:
                self.tokens[token] = (what, start + size)
        return chunk, token, None

    def _DescribeSecurityGroups(self, params):
        wanted = params.get("SecurityGroupId")
        rows = [{"SecurityGroupId": gid, "SecurityGroupType": g.get("SecurityGroupType", "normal"),
                 "VpcId": g.get("VpcId", ""), "SecurityGroupName": gid}
                for gid, g in sorted(self.security_groups.items()) if not wanted or gid == wanted]
        return {"SecurityGroups": {"SecurityGroup": rows}, "TotalCount": len(rows), "RegionId": params["RegionId"],
                "NextToken": ""}

    def _DescribeVSwitchAttributes(self, params):
        vsw = self.vswitches.get(params["VSwitchId"])
        if vsw is None:
            if self.unknown_vswitch == "refuse":
                return self._error(404, "InvalidVSwitchId.NotFound", "The specified vSwitch does not exist.")
            return {"RequestId": uuid.uuid4().hex}
        return {"RequestId": uuid.uuid4().hex, "VSwitchId": params["VSwitchId"], "VpcId": vsw.get("VpcId", ""),
                "CidrBlock": vsw["CidrBlock"], "Status": "Available", "ZoneId": vsw.get("ZoneId", "cn-test-1a"),
                "AvailableIpAddressCount": 250, "IsDefault": False, "VSwitchName": params["VSwitchId"]}

    def _DescribeSecurityGroupAttribute(self, params):
        gid = params["SecurityGroupId"]
        group = self.security_groups.get(gid)
        if group is None:
            return self._error(404, "InvalidSecurityGroupId.NotFound", "The specified SecurityGroupId does not exist.")
        direction = (params.get("Direction") or "all").lower()
        if direction not in ("egress", "ingress", "all"):
            return self._error(400, "InvalidParam.Direction", "Direction is egress, ingress or all")
        rows = [r for r in group.get("Permissions", []) if direction == "all" or r.get("Direction") == direction]
        chunk, token, error = self._token_page(params, "rules:" + gid, rows, limit=1000, default=500, least=10)
        if error:
            return error
        return {"SecurityGroupId": gid, "RegionId": params["RegionId"], "VpcId": group.get("VpcId", ""),
                "InnerAccessPolicy": "Accept", "Permissions": {"Permission": chunk}, "NextToken": token}

    def _RunCommand(self, params):
        ids = self._instance_ids(params)
        if not 1 <= len(ids) <= 100:
            return self._error(403, "InstanceIds.ExceedLimit", "1 to 100 instances")
        if params.get("ContentEncoding") != "Base64" or params.get("Type") != "RunShellScript":
            return self._error(400, "InvalidParameter", "expected Base64 RunShellScript")
        keep, parameters = flag(params, "KeepCommand"), flag(params, "EnableParameter")
        if keep is None or parameters is None:
            return self._error(400, "InvalidParameter", "KeepCommand and EnableParameter are booleans")
        if len(params["CommandContent"]) > (RUNCOMMAND_KEPT_LIMIT if keep else RUNCOMMAND_LIMIT):
            return self._error(400, "InvalidCommandContent.LengthLimitExceed", "content over the limit")
        refused = self._unrunnable(ids)
        if refused:
            return refused
        token = params.get("ClientToken")
        with self._lock:
            if token and token in self.processing:  # its first request is not answered yet
                self.processing[token].set()
                return self._error(403, "IdempotentProcessing", "The previous idempotent request(s) is still "
                                                                "processing.")
            if token and token in self.client_tokens:  # idempotent retry: the same invocation
                return {"InvokeId": self.client_tokens[token], "CommandId": "c-emu"}
            held = self.holds["RunCommand"].popleft() if token and self.holds.get("RunCommand") else None
            if held is not None:
                self.processing[token] = held
        if held is not None:
            held.wait(10)
        script = base64.b64decode(params["CommandContent"]).decode("utf-8")
        timeout_s = int(params.get("Timeout") or 60)
        invoke_id = "t-" + uuid.uuid4().hex[:16]
        results = {}
        for iid in ids:
            results[iid] = {"InstanceId": iid, "InvokeId": invoke_id, "InvocationStatus": "Pending",
                            "InvokeRecordStatus": "Running", "Output": "", "ExitCode": None, "ErrorCode": "",
                            "ErrorInfo": "", "Dropped": 0}
        with self._lock:  # processing until answered, in one step: a retry finds one or the other, never neither
            self.invocations[invoke_id] = results
            if token:
                self.client_tokens[token] = invoke_id
                self.processing.pop(token, None)
        for iid in ids:
            node = self.nodes.get(iid)
            text = script.replace("{{ACS::InstanceId}}", iid) if parameters else script
            if node is None or node.instant:
                self._decide(results[iid], node, text, timeout_s, parameters)
            else:
                threading.Thread(target=self._execute, args=(results[iid], node, text, timeout_s, parameters),
                                 daemon=True).start()
        return {"InvokeId": invoke_id, "CommandId": "c-emu"}

    def _unrunnable(self, ids, action="RunCommand"):
        """The error that refuses the whole call because of one instance, else None: RAM's refusal of an
        instance without the required tag (``ram_tag``), then, with ``reject_unrunnable``, InvokeCommand's
        documented codes for an instance that cannot run it."""
        if self.ram_tag is not None:
            key, value = self.ram_tag
            for iid in ids:
                node = self.nodes.get(iid)
                if node is not None and node.tags.get(key) != value:
                    answer = self._error(403, "Forbidden.RAM", FORBIDDEN_RAM)
                    answer[1]["AccessDeniedDetail"] = {"AuthAction": "ecs:" + action, "NoPermissionType": "ImplicitDeny",
                                                       "PolicyType": "AccountLevelIdentityBasedPolicy"}
                    return answer
        if not self.reject_unrunnable:
            return None
        for iid in ids:
            node = self.nodes.get(iid)
            if node is None or node.state() == "released":
                return self._error(404, "InvalidInstance.NotFound", "The specified instances does not exist.")
            if node.state() == "stopped":
                return self._error(400, "InvalidInstanceStatus",
                                   "The specified instance's status can not execute this operation")
            if not node.agent_ready or node.state() == "agent-gone":
                return self._error(400, "InvalidInstance.NoClient",
                                   "The specified instances have no cloud assistant client installed.")
        return None

    def _early_failure(self, node, parameters=False):
        failure = self._not_run(node, parameters)
        if failure:
            # Nothing ran: the record failed. ECS SDK model, DescribeInvocationResults invokeRecordStatus, for a
            # one-time task: "Failed: The execution failed on all instances" (Running, Finished, Failed,
            # PartialFailed, Stopped, Stopping are its values).
            failure["InvokeRecordStatus"] = "Failed"
        return failure

    def _not_run(self, node, parameters=False):
        if node is None or node.state() == "released":
            return {"InvocationStatus": "Failed", "ErrorCode": "InstanceNotExists",
                    "ErrorInfo": "the specified instance does not exists"}
        if node.state() == "stopped":
            return {"InvocationStatus": "Failed", "ErrorCode": "InstanceNotRunning",
                    "ErrorInfo": "the instance is not running when create task"}
        if not (node.agent_ready and node.status_queries > node.ready_after) or node.state() == "agent-gone":
            return {"InvocationStatus": "Failed", "ErrorCode": "ClientNotRunning",
                    "ErrorInfo": "the aliyun service is not running on the instance"}
        version = tuple(int(p) for p in node.agent_version.split(".")) if node.agent_version else ()
        if parameters and version < (2, 2, 3, 309):
            # Parameters ({{ACS::InstanceId}}) need Linux agent 2.2.3.309 ("Use custom parameters in Cloud
            # Assistant commands"); RunCommand documents ClientNeedUpgrade for features an agent lacks.
            return {"InvocationStatus": "Failed", "ErrorCode": "ClientNeedUpgrade",
                    "ErrorInfo": "the aliyun service in the instance need upgrade"}
        return None

    def _decide(self, row, node, script, timeout_s, parameters=False):
        """An instant node: its final row now, shown by DescribeInvocationResults after its duration."""
        failure = self._early_failure(node, parameters)
        if failure:
            row.update(failure)
            return
        row.update(InvocationStatus="Running")
        run = node.run(script, timeout_s)
        row["_reveal"] = (time.monotonic() + (run.duration_s or 0.0), self._final(run))

    def _execute(self, row, node, script, timeout_s, parameters=False):
        failure = self._early_failure(node, parameters)
        if failure:
            row.update(failure)
            return
        row.update(InvocationStatus="Running")
        run = node.run(script, timeout_s)
        if run.duration_s:
            time.sleep(run.duration_s)
        row.update(self._final(run))

    @staticmethod
    def _final(run):
        # InvokeRecordStatus Finished: "The execution was complete on all instances" (ECS SDK model, as above),
        # whatever InvocationStatus says. Output past 24 KB is dropped and counted in Dropped ("The size of the
        # Output text that was truncated and discarded because the Output value exceeded 24 KB", same model);
        # which end is kept is not documented: this keeps the tail.
        full = run.output.encode("utf-8")
        output = full[-24 * 1024:]
        status = {"": "Success", "ExitCodeNonzero": "Failed", "ExecutionTimeout": "Timeout",
                  "InstanceReleased": "Error"}.get(run.error_code, "Error")
        info = {"ExitCodeNonzero": "the command execution exit code is not zero",
                "ExecutionTimeout": "the command execution has been timeout",
                "InstanceReleased": "the instance has released when create task"}.get(run.error_code, "")
        return dict(Output=base64.b64encode(output).decode(), ExitCode=run.exit_code, ErrorCode=run.error_code,
                    ErrorInfo=info, InvokeRecordStatus="Finished", InvocationStatus=status,
                    Dropped=len(full) - len(output))

    def _DescribeInvocationResults(self, params):
        # ContentEncoding (SDK model, DescribeInvocationResultsRequest): the encoding of Output in the answer,
        # PlainText or Base64, "Default value: Base64". Another value is refused (400; the code is ours).
        encoding = params.get("ContentEncoding") or "Base64"
        if encoding not in ("PlainText", "Base64"):
            return self._error(400, "InvalidParam.ContentEncoding", "ContentEncoding is PlainText or Base64")
        invocation = self.invocations.get(params.get("InvokeId")) or {}
        rows = list(invocation.values())
        legacy = "PageNumber" in params or "PageSize" in params
        if legacy and not ("MaxResults" in params or "NextToken" in params):
            size = int(params.get("PageSize") or 10)
            if not 1 <= size <= 50:
                return self._error(403, "InvalidParam.PageSize", "PageSize at most 50")
            page = int(params.get("PageNumber") or 1)
            chunk, token = rows[(page - 1) * size: page * size], None
        else:
            chunk, token, error = self._token_page(params, "results:%s" % params.get("InvokeId"), rows,
                                                   most=self.results_page_rows)
            if error:
                return error
        now = time.monotonic()
        out = []
        for row in chunk:
            reveal = row.get("_reveal")
            if reveal and reveal[0] <= now:
                with self._lock:
                    if row.pop("_reveal", None):
                        row.update(reveal[1])
            shown = {k: v for k, v in row.items() if k != "_reveal"}
            if encoding == "PlainText" and shown.get("Output"):
                shown["Output"] = base64.b64decode(shown["Output"]).decode("utf-8", "replace")
            out.append(shown)
        answer = {"InvocationResults": {"InvocationResult": out}, "TotalCount": len(rows)}
        if token is None:
            answer.update(PageNumber=page, PageSize=size)
        else:
            answer.update(NextToken=token)
        return {"Invocation": answer}

    def _SendFile(self, params):
        ids = self._instance_ids(params)
        if not 1 <= len(ids) <= 50:
            return self._error(403, "InstanceIds.ExceedLimit", "1 to 50 instances")
        if len(params["Content"]) > SENDFILE_LIMIT or params.get("ContentType") != "Base64":
            return self._error(400, "InvalidParameter", "Base64 content up to 32 KB")
        if flag(params, "Overwrite") is None:
            return self._error(400, "InvalidParameter", "Overwrite is a boolean")
        refused = self._unrunnable(ids, "SendFile")
        if refused:
            return refused
        data = base64.b64decode(params["Content"])
        invoke_id = "f-" + uuid.uuid4().hex[:16]
        rows = {}
        for iid in ids:
            node = self.nodes.get(iid)
            if node is None or node.released or node.state() != "running":
                rows[iid] = {"InstanceId": iid, "InvocationStatus": "Failed", "ErrorCode": "InstanceReleased",
                             "ErrorInfo": "released"}
                continue
            node.receive(params["TargetDir"], params["Name"], data)
            rows[iid] = {"InstanceId": iid, "InvocationStatus": "Success", "ErrorCode": "", "ErrorInfo": ""}
        self.sends[invoke_id] = rows
        return {"InvokeId": invoke_id}

    def _DescribeSendFileResults(self, params):
        rows = list((self.sends.get(params.get("InvokeId")) or {}).values())
        return {"Invocations": {"Invocation": [{"InvokeId": params.get("InvokeId"),
                                                "InvokeInstances": {"InvokeInstance": rows}}]},
                "TotalCount": 1}

    def _CompleteLifecycleAction(self, params):
        if params.get("LifecycleActionResult", "CONTINUE") not in ("CONTINUE", "ABANDON", "ROLLBACK"):
            return self._error(400, "InvalidParameter", "LifecycleActionResult")
        action = (params.get("LifecycleHookId"), params.get("LifecycleActionToken"))
        with self._lock:
            refused = self._not_in_process(action)
            if refused:
                return refused
            self.completed_actions.add(action)
        self.lifecycle.append(("complete", dict(params)))
        return {}

    def _not_in_process(self, action):
        """The documented refusal of a lifecycle action that is not in process (see the module docstring)."""
        if (self.lifecycle_hooks and action[0] not in self.lifecycle_hooks) or action in self.completed_actions:
            return self._error(400, "LifecycleHookIdAndLifecycleActionToken.Invalid",
                               "The specified lifecycleActionToken and lifecycleHookId you provided does not "
                               "match any in process lifecycle action.")
        return None

    def _RecordLifecycleActionHeartbeat(self, params):
        with self._lock:
            refused = self._not_in_process((params.get("lifecycleHookId"), params.get("lifecycleActionToken")))
        if refused:
            return refused
        self.lifecycle.append(("heartbeat", dict(params)))
        return {}

    # Auto Scaling reads, 2022-02-22 (see the module docstring for each rule's source).

    def _numbered(self, params, name):
        found, n = [], 1
        while "%s.%d" % (name, n) in params:
            found.append(params["%s.%d" % (name, n)])
            n += 1
        return found

    def _page(self, params, rows, outer, limit):
        try:
            size, page = int(params.get("PageSize") or 10), int(params.get("PageNumber") or 1)
        except ValueError:
            return self._error(400, "InvalidParameter", "PageSize and PageNumber are integers")
        if not 1 <= size <= limit or page < 1:
            return self._error(400, "InvalidParameter.PageSize", "PageSize must be 1 to %d, PageNumber >= 1" % limit)
        return {outer: rows[(page - 1) * size: page * size], "TotalCount": len(rows), "PageNumber": page,
                "PageSize": size}

    def _DescribeScalingInstances(self, params):
        ids = self._numbered(params, "InstanceIds")
        if len(ids) > 20:
            return self._error(400, "InvalidParameter", "InstanceIds.N: N is 1 to 20")
        group = None if self.list_other_groups else params.get("ScalingGroupId")
        rows = [{"InstanceId": iid, "ScalingGroupId": g, "LifecycleState": "InService", "HealthStatus": "Healthy",
                 "CreationType": "AutoCreated"}
                for g, members in sorted(self.scaling_instances.items()) if not group or g == group
                for iid in members if not ids or iid in ids]
        return self._page(params, rows, "ScalingInstances", 100)

    def _DescribeLifecycleHooks(self, params):
        ids = self._numbered(params, "LifecycleHookIds")
        if len(ids) > 50:
            return self._error(400, "InvalidParameter", "LifecycleHookIds.N: N is 1 to 50")
        group = None if ids else params.get("ScalingGroupId")
        rows = [{"LifecycleHookId": hook, "ScalingGroupId": g, "LifecycleTransition": "SCALE_OUT",
                 "DefaultResult": "CONTINUE", "HeartbeatTimeout": 600, "LifecycleHookStatus": "Active"}
                for hook, g in sorted(self.lifecycle_hooks.items())
                if (not ids or hook in ids) and (not group or g == group)]
        return self._page(params, rows, "LifecycleHooks", 50)
