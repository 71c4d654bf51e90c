"""What the fuzz tests and ``bench/run.py --fuzz`` share: input strategies, and the checks each input
must pass on the whole function path (``run_event`` with a cluster snapshot and the real delivery
executor, whose transport records the scripts it would send instead of sending them).

Nothing here opens a socket: the snapshot answers the cluster lookups, and the recording transport stands
where Cloud Assistant or SSH would be.
"""

import base64
import contextlib
import copy
import io
import json
import os
import string
from typing import Any, Dict, List, Optional, Tuple

from hypothesis import strategies as st

from functions.cloud.cluster import InventoryLookup
from functions.delivery import bundle as bundle_mod
from functions.delivery.node_script import encode_args, encode_names
from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.outcome import NodeResult
from functions.delivery.transport import ScriptMaker
from functions.base.event_result import NODE_OUTCOMES
from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from node_bootstrap.mig import GPUS, MigInputError, PARTITION_LABELS, PartitionSpec, find_gpu, parse, plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVENTS_DIR = os.path.join(ROOT, "tests", "events")
INVENTORY_PATH = os.path.join(ROOT, "examples", "inventory.json")
OUTCOMES = ("done", "skip", "error", "retry")
SEQUENCE_KEY, SIZE_KEY = "ack.aliyun.com/gpu-partition-sequence", "ack.aliyun.com/gpu-partition-size"
assert set(PARTITION_LABELS) == {SEQUENCE_KEY, SIZE_KEY}

with open(INVENTORY_PATH) as _fh:
    INVENTORY: Dict[str, Any] = json.load(_fh)
CLUSTER = INVENTORY["cluster_id"]
A100_POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"  # ecs.ebmgn7.26xlarge: the GPU is known, the label is planned
# A pool of a family the table does not confirm: the label is only checked to read on some GPU and the
# node decides. That is the loosest gate a label passes on its way to a node, so it is fuzzed too.
OPEN_POOL = "np0fuzz0open0family0000000000000001"
OPEN_INSTANCE = "i-2zefuzz0open0x1a2b"

SAMPLES: List[Tuple[str, Any]] = []
for _name in sorted(os.listdir(EVENTS_DIR)):
    if _name.endswith(".json"):
        with open(os.path.join(EVENTS_DIR, _name)) as _fh:
            SAMPLES.append((_name, json.load(_fh)))


# ---- strategies ---------------------------------------------------------------------------------

HUGE_INTS = st.sampled_from([2 ** 63, -2 ** 63 - 1, 10 ** 400, 0, -1])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), HUGE_INTS, st.floats(allow_nan=False),
                    st.text(max_size=40), st.sampled_from(["", "i-", "c-x", "ess:LifecycleHook:ScaleOut",
                                                           "SCALE_OUT", "true", "null", "\x00", "\u202e"]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                     st.dictionaries(st.text(max_size=12), inner, max_size=5)),
                    max_leaves=20)
HUGE = st.one_of(
    st.integers(min_value=1, max_value=200_000).map(lambda n: "x" * n),
    st.integers(min_value=1, max_value=5000).map(lambda n: ["i-%020d" % i for i in range(n)]),
    st.integers(min_value=1, max_value=400).map(lambda n: json.loads("[" * n + "]" * n)),  # deep nesting
    # JSON *text* nested past the decoder's recursion limit, for the fields read as JSON text (data,
    # data.content, a timer payload, requestParameters, instance ids): one error line, never a traceback.
    st.integers(min_value=900, max_value=3000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=900, max_value=3000).map(lambda n: '{"a":' * n + "1" + "}" * n),
)


def _paths(doc: Any, prefix: Tuple = ()) -> List[Tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.extend(_paths(value, prefix + (key,)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out.extend(_paths(value, prefix + (index,)))
    return out


def _mutate(doc: Any, mutations: List[Tuple[int, str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for pick, how, value in mutations:
        paths = _paths(doc)
        path = paths[pick % len(paths)]
        if not path:
            if how == "set":
                doc = value
            continue
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            key = path[-1]
            if how == "delete":
                del parent[key]
            elif how == "wrap":
                parent[key] = [parent[key]]
            elif how == "stringify":
                parent[key] = json.dumps(parent[key])
            else:
                parent[key] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation changed the shape under this path
    return doc


MUTATED = st.builds(_mutate, st.sampled_from([doc for _, doc in SAMPLES]),
                    st.lists(st.tuples(st.integers(min_value=0, max_value=10 ** 6),
                                       st.sampled_from(["set", "set", "delete", "wrap", "stringify"]),
                                       st.one_of(JSON, HUGE)), min_size=1, max_size=4))


def _as_raw(doc_and_form: Tuple[Any, str]) -> Any:
    doc, form = doc_and_form
    if form == "bytes":
        return json.dumps(doc).encode("utf-8")
    if form == "str":
        return json.dumps(doc)
    if form == "list-of-one":
        return json.dumps([doc]).encode("utf-8")
    return doc  # already decoded JSON


RAW_EVENTS = st.one_of(
    st.tuples(MUTATED, st.sampled_from(["bytes", "str", "decoded", "list-of-one"])).map(_as_raw),
    st.tuples(JSON, st.sampled_from(["bytes", "str", "decoded"])).map(_as_raw),
    st.binary(max_size=200),  # not JSON, not UTF-8
    st.one_of(st.none(), st.integers(), st.floats(), st.booleans(), st.lists(st.integers(), max_size=3)),
    st.tuples(st.sampled_from([doc for _, doc in SAMPLES]), HUGE).map(
        lambda pair: json.dumps(dict(pair[0], data=pair[1])).encode("utf-8")),
    st.integers(min_value=1, max_value=400_000).map(lambda n: b'{"a": "' + b"x" * n + b'"}'),
)

SHELL = ["$(reboot)", "`id`", ";", "|", "&&", "'", '"', "\\", "\n", "\r", "\x00", "\t", " ", "${IFS}", ">",
         "<", "*", "?", "#", "!", "~", "%", "EOF", "ACK_MIG_RUNNER_EOF", "{{ACS::InstanceId}}", "%s", "{}"]
PIECES = ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.10gb", "1g.5gb+me", "19", "14", "9", "5",
          "0", "20", "1G.5GB", "1g.18gb", "-", "--", ",", "+me", "\u202e", "\u0661", "\u00a0", "..", "\ufeff"]
HOSTILE_LABELS = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=string.printable, max_size=80),
    st.lists(st.sampled_from(SHELL + PIECES), max_size=24).map("".join),
    st.lists(st.sampled_from(PIECES[:13]), min_size=1, max_size=8).map("-".join),  # mostly valid
    st.integers(min_value=1, max_value=10_000).map(lambda n: ("1g.5gb-" * (n // 7 + 1))[:n]),
    st.integers(min_value=1, max_value=10_000).map(lambda n: "$(reboot)" * (n // 9 + 1)),
)
LABEL_KEYS = st.sampled_from([(SEQUENCE_KEY,), (SIZE_KEY,), (SEQUENCE_KEY, SIZE_KEY)])


# ---- the path under test --------------------------------------------------------------------------

class RecordingTransport:
    """Stands where Cloud Assistant or SSH would: renders each node's script exactly as a transport does
    (``ScriptMaker``), keeps it, and answers a node result as a node would."""

    name = "recording"

    def __init__(self, maker: ScriptMaker):
        self.maker = maker
        self.sent: List[Tuple[Any, str]] = []

    def run(self, targets):
        results = []
        for t in targets:
            self.sent.append((t, self.maker.script([t], t.instance_id)))
            results.append(NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 1, "gpus": []}))
        return results


_MAKER = ScriptMaker(bundle_mod.build(), 600)
_SETTINGS = load_settings({"ACK_MIG_CLUSTER_ID": CLUSTER, "ACK_MIG_LOG_LEVEL": "ERROR"})


def _quiet():
    return JsonLogger("OFF")


def _lookup_with_labels(keys: Tuple[str, ...], value: str) -> InventoryLookup:
    data = copy.deepcopy(INVENTORY)
    pools = data["nodepools"]
    target = [p for p in pools if p["nodepool_info"]["nodepool_id"] == A100_POOL][0]
    target["kubernetes_config"]["labels"] = [{"key": k, "value": value} for k in keys]
    open_pool = copy.deepcopy(target)
    open_pool["nodepool_info"].update(nodepool_id=OPEN_POOL, name="gpu-open-family")
    open_pool["scaling_group"].update(scaling_group_id="asg-fuzz-open", instance_types=["ecs.ebmgn7ex.32xlarge"])
    pools.append(open_pool)
    data["nodes"].append({"instance_id": OPEN_INSTANCE, "nodepool_id": OPEN_POOL,
                          "instance_type": "ecs.ebmgn7ex.32xlarge", "node_name": "cn-beijing.192.168.20.9",
                          "ip_address": ["192.168.20.9"], "state": "running"})
    return InventoryLookup.from_dict(data)


def check_event(raw: Any, executor: Optional[Any] = None) -> str:
    """One raw event through ``run_event``: a typed result whatever the input. Returns the outcome."""
    transport = RecordingTransport(_MAKER)
    result = run_event(raw, _SETTINGS, inventory=InventoryLookup.from_dict(INVENTORY),
                       executor=executor or DeliveryExecutor(transport), logger=_quiet())
    assert result.outcome in OUTCOMES, result.outcome
    # what `ack-mig-hook logs --outcome` accepts (functions/commands/sls_logs.py): every node outcome written
    assert all(n.get("outcome") in NODE_OUTCOMES for n in result.nodes or ()), result.nodes
    assert isinstance(result.reason, str)
    assert "Traceback" not in result.reason
    json.dumps(result.to_json())  # the handler's answer can always be written
    if result.outcome != "done":
        assert not transport.sent
    return result.outcome


def _request_value(args: Tuple[str, ...]) -> Tuple[str, str]:
    doc = json.loads(base64.b64decode(args[args.index("--request-b64") + 1]).decode("utf-8"))
    return doc["partition"]["kind"], doc["partition"]["value"]


def _shape(target, script: str) -> str:
    """The script with its two data fields (the base64 arguments and node names) blanked: what is left is
    the fixed template, and it must be the same text whatever the label."""
    names = {target.instance_id: target.node_name} if target.node_name else {}
    return script.replace(encode_args(target.args), "ARGS").replace(encode_names(names), "NAMES")


def _benign_shape(target) -> str:
    benign = target._replace(args=("--json", "apply", "--request-b64", "e30="))
    return _shape(benign, _MAKER.script([benign], target.instance_id))


def _accepted_on(value: str, kind: str, pool: str) -> bool:
    spec = PartitionSpec(kind, value)
    if pool == A100_POOL:
        plan(spec, find_gpu("A100-SXM4-40GB"))
        return True
    for gpu in GPUS:
        try:
            parse(spec, gpu)
            return True
        except MigInputError:
            continue
    return False


class LabelReport:
    """What one hostile label did: how many nodes it reached, and whether any of that was wrong."""

    def __init__(self):
        self.delivered = 0
        self.leaks: List[str] = []  # a label that reached a node without passing validation, or as shell text
        self.multiline_reasons: List[str] = []


def check_label(keys: Tuple[str, ...], value: str) -> LabelReport:
    """A hostile label value on two pools (a known GPU, and a family the node decides) through the timer
    event (every labelled pool) and a scale-out of the A100 pool: no exception, a typed result, and a
    label reaches delivery only if it validated, and then only inside the base64 request."""
    report = LabelReport()
    lookup = _lookup_with_labels(keys, value)
    for event in ("fc_timer.json", "ess_scale_out_success.json"):
        transport = RecordingTransport(_MAKER)
        raw = dict(SAMPLES)[event]
        result = run_event(json.dumps(raw).encode(), _SETTINGS, inventory=lookup,
                           executor=DeliveryExecutor(transport), logger=_quiet())
        assert result.outcome in OUTCOMES, result.outcome
        json.dumps(result.to_json())
        by_id = {d.instance_id: d for d in result.decisions}
        for d in result.decisions:
            assert d.action in ("partition", "skip", "error")
            if any(c in d.reason for c in "\n\r\x00"):
                report.multiline_reasons.append(d.reason)
        for target, script in transport.sent:
            report.delivered += 1
            decision = by_id[target.instance_id]
            kind, sent = _request_value(target.args)
            pool = decision.nodepool_id
            if len(keys) != 1 or sent != value or kind != ("sequence" if keys[0] == SEQUENCE_KEY else "size"):
                report.leaks.append("request %r for label %r" % (sent[:60], value[:60]))
            try:
                ok = _accepted_on(sent, kind, pool)
            except MigInputError:
                ok = False
            if not ok:
                report.leaks.append("unvalidated label %r reached %s" % (value[:60], target.instance_id))
            if encode_args(target.args) not in script:
                report.leaks.append("arguments not carried as base64")
            elif _shape(target, script) != _benign_shape(target):
                report.leaks.append("label %r changed the shell text" % value[:60])
    return report


# ---- the FC handler, with the CS API on the loopback emulator ----------------------------------------

@contextlib.contextmanager
def handler_environment():
    """The environment the handler reads, pointing at a loopback CS emulator holding the snapshot and an
    Auto Scaling emulator holding its scaling groups and hooks (the membership checks); dry run, so no
    node is contacted. The emulator's kubeconfig (ACK's shape) names a loopback port where nothing listens:
    one attempt per call, the refusal is not retried. Restores the environment afterwards."""
    from tests.function.conftest import AK, SECRET, TOKEN
    from tests.support.cs_emulator import CsEmulator
    from tests.support.rpc_emulator import Emulator

    saved = dict(os.environ)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)  # loopback traffic only
    try:
        with CsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN).load_inventory(INVENTORY) as emu, \
                Emulator(AK, SECRET, TOKEN, "cn-beijing").load_inventory(INVENTORY) as ess:
            os.environ.update({"ACK_MIG_CS_ENDPOINT": emu.endpoint, "ACK_MIG_ESS_ENDPOINT": ess.endpoint,
                               "ACK_MIG_REGION": "cn-beijing",
                               "ALIBABA_CLOUD_ACCESS_KEY_ID": AK, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
                               "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_CLUSTER_ID": emu.cluster_id,
                               "ACK_MIG_DRY_RUN": "true", "ACK_MIG_API_TIMEOUT_S": "2",
                               "ACK_MIG_API_MAX_ATTEMPTS": "1", "ACK_MIG_KUBE_MAX_ATTEMPTS": "1"})
            yield emu
    finally:
        os.environ.clear()
        os.environ.update(saved)


def check_handler(raw: Any) -> str:
    """One raw event through the FC entry point: a JSON answer with a typed outcome (or the retry it
    raises on purpose), one JSON object per printed line, never a traceback. Returns the outcome."""
    from functions.handler import RetryInvocation, handler

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            outcome = json.loads(handler(raw, None))["outcome"]
        except RetryInvocation:
            outcome = "retry"
    printed = out.getvalue()
    assert outcome in OUTCOMES, outcome
    assert "Traceback" not in printed
    for line in printed.splitlines():
        json.loads(line)
    return outcome
