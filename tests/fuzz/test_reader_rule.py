"""The reader rule (node_bootstrap/outside.py, docs/security.md): hostile JSON (NaN, +-Infinity, 1e400, -0,
huge integers, nesting past the parser, huge strings, wrong types at every level) through every reader of
outside data, and through the whole event path. Each reader either returns a value that obeys the rule
(finite numbers within their field's range) or refuses that one item with its own typed refusal; nothing
else ever leaves it, and on the event path the other items proceed.

Hypothesis draws fixed examples under ``make test`` (the "ci" profile, tests/conftest.py); ``make fuzz``
draws fresh ones, ten times as many."""

import base64
import json
import math
import os

import pytest
from hypothesis import given, settings, strategies as st

from functions.base.errors import BadEvent, BadInventory, SkipEvent
from functions.cloud.cluster import InventoryLookup
from functions.decision.waves import PROGRESS_ANNOTATION, KubeNode, Progress
from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.outcome import NodeResult, outcome, parse_output
from functions.kube.supply import node_supply, pool_supply
from functions.pipeline.event import run_event
from functions.pipeline.intake import parse_event
from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from node_bootstrap.errors import BadInput
from node_bootstrap.mig.annotations import LAYOUTS_ANNOTATION, MAX_START, read_layouts
from node_bootstrap.outside import MAX_INT_DIGITS, OutsideDataError, depth, digits, loads
from node_bootstrap.request import request_from_options
from tests.fuzz.harness import _MAKER, RecordingTransport, _paths
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

pytestmark = pytest.mark.hypothesis

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(ROOT, "examples", "inventory.json")
GOOD, HOSTILE = "i-2zeb7c1mig0a100x1k4d", "i-2zeb7c1mig0a100x2m8f"  # the two nodes examples/event.json scales out

# ---- hostile JSON text ----------------------------------------------------------------------------------

NUMBERS = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "-0", "-0.0", "1e-400", "1" * 30,
                           "-" + "9" * 25, "18446744073709551616", "1.7976931348623157e308", "4.9e-324", "0",
                           "7", "3.0", "-1", "0.5"])
ATOMS = st.one_of(NUMBERS, st.sampled_from(["null", "true", "false", '""', '"1g.10gb"', '"success"', '"0"']),
                  st.integers(min_value=-10 ** 20, max_value=10 ** 20).map(str),
                  st.text(max_size=16).map(json.dumps))


def _array(items):
    return "[" + ",".join(items) + "]"


def _object(pairs):
    return "{" + ",".join(json.dumps(k) + ":" + v for k, v in pairs.items()) + "}"


TREES = st.recursive(ATOMS, lambda inner: st.one_of(st.lists(inner, max_size=4).map(_array),
                                                    st.dictionaries(st.sampled_from(
                                                        ["0", "1", "target", "step", "expires", "since", "owner",
                                                         "changes", "outcome", "gpus", "x"]),
                                                        inner, max_size=4).map(_object)),
                     max_leaves=14)
DEEP = st.one_of(st.integers(min_value=30, max_value=3000).map(lambda n: "[" * n + "]" * n),
                 st.integers(min_value=30, max_value=3000).map(lambda n: '{"0":' * n + "1" + "}" * n),
                 st.integers(min_value=30, max_value=100000).map(lambda n: "[" * n))  # unclosed, as filed
HUGE = st.one_of(st.integers(min_value=1, max_value=400000).map(lambda n: '"' + "x" * n + '"'),
                 st.integers(min_value=19, max_value=6000).map(lambda n: "9" * n))

# Valid documents of each reader, each with one value (at any depth) replaced by a hostile fragment: wrong
# types and out-of-range numbers where the reader looks, not only at the top.
VALID = {
    "layouts": {"0": [["3g.40gb", 0], ["4g.40gb", 4]], "1": [["7g.80gb", 0]]},
    "record": {"target": "1g.10gb", "step": "applying", "cordoned": True, "since": 1.7e9, "reason": "",
               "owner": "req-1", "expires": 1.7e9 + 900, "drain": True, "autoscaler": False},
    "result": {"outcome": "success", "changes": 3, "gpus": [{"index": 0, "layout": "1g.10gb x7"}],
               "boot_unit": {"installed": True}, "left": [{"gpu": 1, "why": "busy"}]},
    "request": {"version": 2, "kind": "per-gpu", "gpus": [{"index": 0, "layout": [{"profile": "1g.10gb", "start": 0}]}]},
}
MARK = "\u0000hostile\u0000"



def put_at(doc, path, value):
    """``doc`` with the part at ``path`` (keys and indexes) replaced by ``value``; ``value`` for the root."""
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


def _spliced(kind, pick, fragment):
    doc = json.loads(json.dumps(VALID[kind]))
    paths = _paths(doc)
    path = paths[pick % len(paths)]
    if not path:
        return fragment
    return json.dumps(put_at(doc, path, MARK)).replace(json.dumps(MARK), fragment)


def hostile(kind):
    return st.one_of(TREES, DEEP, HUGE,
                     st.builds(_spliced, st.just(kind), st.integers(min_value=0, max_value=10 ** 6),
                               st.one_of(TREES, NUMBERS, DEEP)))


def _finite_everywhere(value, level=0):
    """What the rule promises of an accepted value: finite floats, integers within int64's digits, and no
    deeper than the loader's bound."""
    assert level <= 64
    if isinstance(value, float):
        assert math.isfinite(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        assert abs(value) < 10 ** MAX_INT_DIGITS
    elif isinstance(value, list):
        for item in value:
            _finite_everywhere(item, level + 1)
    elif isinstance(value, dict):
        for item in value.values():
            _finite_everywhere(item, level + 1)


# ---- each reader ------------------------------------------------------------------------------------------

@settings(max_examples=300)
@given(hostile("result"))
def test_the_loader_accepts_only_what_obeys_the_rule(text):
    try:
        value = loads(text, "x", max_bytes=256 * 1024, max_depth=32)
    except OutsideDataError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("x")
        return
    _finite_everywhere(value)
    assert depth(text, 40) <= 32


def test_the_filed_values_are_refused_with_a_reason():
    for text, why in [("[" * 100000, "nested too deeply"), ('{"expires": 1e400}', "out of range"),
                      ('{"a": NaN}', "not a number JSON allows"), ("[Infinity]", "not a number JSON allows"),
                      ("1" * 40, "40 digits"), ('"' + "x" * 300000 + '"', "larger than 262144 bytes")]:
        with pytest.raises(OutsideDataError, match=why):
            loads(text, "the field", max_bytes=262144)
    assert loads("-0", "x") == 0 and loads('"[[[["', "x") == "[[[["  # brackets inside a string are text


def test_brackets_in_a_string_are_text_and_bytes_must_be_utf8():
    """Past the depth bound too: a reason quoting '[[[[...' is one string, not nesting (the depth count drops
    strings first)."""
    deep_text = '{"reason": "%s", "more": ["%s"]}' % ("[" * 40, "{" * 40)
    assert loads(deep_text, "x", max_depth=4) == {"reason": "[" * 40, "more": ["{" * 40]}
    assert depth(deep_text) == 2
    with pytest.raises(OutsideDataError, match="^x is not UTF-8$"):
        loads(b'{"a": "\xff"}', "x")


def test_a_fields_value_is_checked_against_its_kind_and_range():
    """number() and whole(), which every reader applies after parsing (docs/security.md, "The reader rule"):
    never a bool, a string or a fraction for a whole number, always inside the field's range; a value of another
    kind is named in json_type's words, as every other reader names it, not Python's."""
    from node_bootstrap.outside import as_list, as_object, number, whole

    assert number(2, "f", 0, 10) == 2.0 and number(None, "f", 0, 10, default=3.0) == 3.0
    assert whole(2.0, "n", 0, 10) == 2 and whole(None, "n", 0, 10, default=4) == 4
    for call, why in [(lambda: number(True, "f", 0, 10), "^f is true/false, not a number$"),
                      (lambda: number("1", "f", 0, 10), "^f is text, not a number$"),
                      (lambda: number({}, "f", 0, 10), "^f is an object, not a number$"),
                      (lambda: number(10.5, "f", 0, 10), "^f 10.5 is outside 0 to 10$"),
                      (lambda: number(float("nan"), "f", 0, 10), "^f nan is outside 0 to 10$"),
                      (lambda: whole(2.5, "n", 0, 10), "^n 2.5 is not a whole number$"),
                      (lambda: whole(True, "n", 0, 10), "^n is true/false, not a whole number$"),
                      (lambda: whole("2", "n", 0, 10), "^n is text, not a whole number$"),
                      (lambda: whole([2], "n", 0, 10), "^n is a list, not a whole number$"),
                      (lambda: whole(-1, "n", 0, 10), "^n -1 is outside 0 to 10$"),
                      (lambda: whole(10 ** 30, "n", 0, 10), r"^n \(a 100-bit integer\) is outside 0 to 10$")]:
        with pytest.raises(OutsideDataError, match=why):
            call()
    assert as_list("abc") == [] and as_list({"a": 1}) == [] and as_list([1]) == [1]
    assert as_object(["a"]) == {} and as_object("a") == {} and as_object({"a": 1}) == {"a": 1}


@given(hostile("layouts"))
def test_the_layouts_annotation_reads_or_is_refused(text):
    try:
        held = read_layouts(text)
    except OutsideDataError:
        return
    for index, layout in held.items():
        assert 0 <= index <= 63
        assert layout is None or all(isinstance(p, str) and type(s) is int and 0 <= s <= MAX_START for p, s in layout)


def test_a_layout_the_planner_makes_past_slot_7_reads_back_from_the_node():
    """An RTX PRO 6000 places 1g.24gb at 9 (12 memory slots): the planner asks for it, the node applies it
    (tests/node/test_per_gpu_request.py) and writes it; every reader bounded starts at 7 and left the node out
    of its auto pool for good."""
    from functions.decision.layout import Bounds, GpuSupply, PodDemand, plan

    rtx = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    (target,) = plan([GpuSupply("rtx-a", 0, rtx, ())], [PodDemand("ns/p%d" % i, "o", "1g.24gb") for i in range(4)],
                     Bounds()).changes
    assert ("1g.24gb", 9) in target.layout
    text = json.dumps({"0": [[n, s] for n, s in target.layout]})
    assert read_layouts(text) == {0: target.layout}
    node = {"metadata": {"name": "rtx-a", "labels": {
        "aliyun.accelerator/nvidia_name": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        "aliyun.accelerator/nvidia_count": "1", "nvidia.com/mig.config.state": "success"},
        "annotations": {LAYOUTS_ANNOTATION: text}}, "status": {"allocatable": {}}}
    supply, notes = pool_supply([node], {})
    assert notes == [] and [(i.profile, i.start) for i in supply[0].instances] == list(target.layout)
    request = {"version": 2, "kind": "per-gpu", "gpus": [{"index": 0, "layout": [
        {"profile": n, "start": s} for n, s in target.layout]}]}
    assert request_from_options(None, None, base64.b64encode(json.dumps(request).encode()).decode(), None)


def _node(name, annotations, count="2"):
    return {"metadata": {"name": name, "labels": {"aliyun.accelerator/nvidia_name": "NVIDIA-A100-SXM4-80GB",
                                                  "aliyun.accelerator/nvidia_count": count,
                                                  "nvidia.com/mig.config.state": "success"},
                         "annotations": annotations}}


@given(hostile("layouts"))
def test_a_hostile_layouts_annotation_leaves_that_node_out_and_the_pool_goes_on(text):
    """The auto pool's supply reader (issue 36: '[' * 100000 there ended every auto pool's tick)."""
    good = _node("good", {LAYOUTS_ANNOTATION: json.dumps(VALID["layouts"])})
    bad = _node("bad", {LAYOUTS_ANNOTATION: text})
    supply, notes = pool_supply([bad, good], {})
    assert [(g.node, g.index) for g in supply if g.node == "good"] == [("good", 0), ("good", 1)]
    assert all(g.node != "bad" for g in supply) or not notes  # left out with a note, or it was readable
    for gpu in supply:
        assert all(0 <= i.start <= MAX_START for i in gpu.instances)
    # status and the claim read the same annotation through the same reader
    from functions.commands.status import gpu_layouts
    from functions.decision.waves import held_layouts

    kube = KubeNode.from_object(bad)
    shown, held = gpu_layouts(kube), held_layouts(kube)
    assert (shown is None) == (held is None)


@given(hostile("record"))
def test_a_rollout_record_reads_with_times_in_range_or_not_at_all(text):
    progress = Progress.from_annotation(text)
    if progress is not None:
        assert 0.0 <= progress.since <= 4102444800.0 and 0.0 <= progress.expires <= 4102444800.0
        progress.held_by_another("me", 1.7e9, 840.0)
        int(progress.expires - 1.7e9)  # what the planner shows ("expires in N s") can always be computed
    node = KubeNode.from_object({"metadata": {"name": "n", "annotations": {PROGRESS_ANNOTATION: text}}})
    assert node.progress == progress


@given(hostile("result"))
def test_a_node_result_line_gives_one_outcome(text):
    doc = parse_output("# node log\n" + text + "\n")
    result = outcome(NodeResult(HOSTILE, "test", 0, doc, None if doc is not None else "no-result"), "node-1")
    assert result.outcome in ("partitioned", "unchanged", "failed", "reboot-required", "conflict",
                              "destroy-required")
    assert 0 <= result.changes <= 100000 and "\n" not in result.reason


@given(hostile("request"))
def test_a_node_request_is_read_or_refused_as_bad_input(text):
    b64 = base64.b64encode(text.encode("utf-8")).decode("ascii")
    try:
        request_from_options(request_b64=b64)
    except BadInput as exc:
        assert "\n" not in exc.message


@given(hostile("result"))
def test_an_inventory_file_is_read_or_refused_as_bad_inventory(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("inv") / "inventory.json"
    path.write_text(text)
    try:
        InventoryLookup.from_file(str(path))
    except BadInventory as exc:
        assert "\n" not in str(exc)


# ---- the whole event path -----------------------------------------------------------------------------

@given(hostile("result"))
def test_an_event_carrying_hostile_json_is_one_typed_answer(text):
    for raw in (text, '{"cluster_id": "c1", "instance_ids": ' + text + "}",
                json.dumps({"cluster_id": "c1", "instance_ids": text})):
        try:
            parse_event(raw)
        except (BadEvent, SkipEvent) as exc:
            assert "\n" not in str(exc)


class HostileOutput(RecordingTransport):
    """One node of the batch prints ``text`` as its result line; the other answers as a node does."""

    def __init__(self, text):
        super().__init__(_MAKER)
        self.text = text

    def run(self, targets):
        out = []
        for result in super().run(targets):
            if result.instance_id == HOSTILE:
                doc = parse_output(self.text)
                result = NodeResult(HOSTILE, self.name, 0, doc, None if doc is not None else "no-result")
            out.append(result)
        return out


@settings(max_examples=60)
@given(hostile("result"))
def test_a_hostile_node_result_fails_that_node_alone(text):
    """Issue 36: '"changes": 1e400' in one node's output failed the whole batch, the nodes that succeeded
    too, and left their startup taints on."""
    inventory = InventoryLookup.from_file(INVENTORY)
    settings_ = load_settings({"ACK_MIG_CLUSTER_ID": inventory.cluster_id, "ACK_MIG_STARTUP_TAINT": "none"})
    with open(os.path.join(ROOT, "examples", "event.json"), "rb") as fh:
        raw = fh.read()
    result = run_event(raw, settings_, inventory=inventory, logger=JsonLogger("OFF"),
                       executor=DeliveryExecutor.from_settings(settings_, HostileOutput(text)))
    assert result.outcome == "done", result.reason
    nodes = {n["instance_id"]: n for n in result.nodes}
    assert nodes[GOOD]["outcome"] == "partitioned"
    assert nodes[HOSTILE]["outcome"] in ("partitioned", "unchanged", "failed", "reboot-required", "conflict",
                                         "destroy-required")
    json.dumps(result.to_json())


def test_changes_1e400_in_one_node_s_output_fails_that_node_alone():
    text = '{"outcome": "success", "changes": 1e400, "gpus": []}'
    test_a_hostile_node_result_fails_that_node_alone.hypothesis.inner_test(text)
    assert parse_output(text) is None


# ---- API server answers -------------------------------------------------------------------------------------

@pytest.mark.kube
@pytest.mark.parametrize("value, why", [(float("inf"), "not a number JSON allows"),
                                        (json.loads("[" * 80 + "]" * 80), "nested too deeply")])
def test_an_api_answer_that_breaks_the_rule_fails_that_call_alone(kube_api, tmp_path, value, why):  # noqa: F811
    """A list answer holding Infinity (as Go would never write it, and a double or a proxy might) or nesting
    past 64 levels: the function's client refuses that call with the reason, and the node's client too;
    another call on the same client still works."""
    from functions.kube.client import ApiError, KubeApi
    from node_bootstrap.kube import KubeError, load_kubeconfig
    from node_bootstrap.kube.client import KubeClient

    kube_api.add_node("n1")
    pod = kube_api.add_pod("llm", "odd", "n1")
    with kube_api.lock:
        pod["spec"]["priority"] = value
    path = kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert())
    api = KubeApi.from_file(str(path), attempts=1)
    try:
        with pytest.raises(ApiError, match=why):
            api.list_pods(namespace="llm")
        assert [n["metadata"]["name"] for n in api.list_nodes()] == ["n1"]
    finally:
        api.close()
    node = KubeClient(load_kubeconfig(str(path)))
    with pytest.raises(KubeError, match=why):
        node.request("GET", "/api/v1/namespaces/llm/pods/odd")
    assert node.get_node("n1")["metadata"]["name"] == "n1"


@pytest.mark.parametrize("field, value", [("gpus", 5), ("gpus", True), ("gpus", 1.5), ("left", 7), ("left", "x")])
def test_a_result_field_of_the_wrong_type_is_read_as_absent_and_the_other_nodes_keep_theirs(field, value):
    """One node printing ``"gpus": 5`` raised TypeError inside the executor's loop over the transport's results,
    and every node without an outcome yet, partitioned ones included, ended failed internal-error."""
    from types import SimpleNamespace

    class Answering:
        name = "played"

        def run(self, targets):
            for t in targets:
                doc = {"outcome": "success", "changes": 1, "gpus": []}
                if t.instance_id == "i-bad":
                    doc[field] = value
                yield NodeResult(t.instance_id, self.name, 0, doc)

    part = SimpleNamespace(kind="size", value="1g.5gb")
    decisions = [SimpleNamespace(instance_id=i, node_name="n-" + i, action="partition", partition=part, reason="",
                                 ip_address="", gpu_layouts=None, disable=False, drain=None)
                 for i in ("i-bad", "i-good1", "i-good2")]
    out = DeliveryExecutor(Answering()).execute(SimpleNamespace(lifecycle=None, cluster_id=None), decisions)
    assert [(o["instance_id"], o["outcome"]) for o in out] == [
        ("i-bad", "partitioned"), ("i-good1", "partitioned"), ("i-good2", "partitioned")], out


def test_a_result_no_rule_reads_fails_its_node_alone(monkeypatch):
    """Whatever goes wrong reading one node's result (a bug included) fails that node, not the event."""
    from types import SimpleNamespace

    from functions.delivery import node_executor

    class Answering:
        name = "played"

        def run(self, targets):
            for t in targets:
                yield NodeResult(t.instance_id, self.name, 0, {"outcome": "success", "changes": 1})

    real = node_executor.outcome
    monkeypatch.setattr(node_executor, "outcome", lambda res, name="": (
        (_ for _ in ()).throw(RuntimeError("a bug")) if res.instance_id == "i-bad" else real(res, name)))
    part = SimpleNamespace(kind="size", value="1g.5gb")
    decisions = [SimpleNamespace(instance_id=i, node_name="n-" + i, action="partition", partition=part, reason="",
                                 ip_address="", gpu_layouts=None, disable=False, drain=None)
                 for i in ("i-bad", "i-good")]
    out = DeliveryExecutor(Answering()).execute(SimpleNamespace(lifecycle=None, cluster_id=None), decisions)
    assert [(o["instance_id"], o["outcome"]) for o in out] == [("i-bad", "failed"), ("i-good", "partitioned")]
    assert out[0]["reason"] == "internal-error: the node's result could not be read (RuntimeError)"


@pytest.mark.parametrize("gpu", [[0], {"i": 0}, "0", True, -1, 64, 1.0, None])
def test_a_left_gpu_that_is_not_an_index_is_dropped_and_the_readers_that_key_by_it_keep_working(gpu):
    """A node's ``left`` entry naming its GPU by a list raised ``unhashable type`` in the dwell's marks and the
    created-capacity count, and the auto pool's whole tick ended internal-error with every node's result lost."""
    from types import SimpleNamespace as NS

    from functions.rollout.executor import created_capacity
    from functions.rollout.plan_claim import PlanClaims

    doc = {"outcome": "success", "changes": 1, "left": [{"gpu": gpu, "why": "busy"}, {"gpu": 1, "why": "busy\nx"}]}
    out = outcome(NodeResult("i-a", "ssh", 0, doc), "auto-a")
    assert out.outcome == "partitioned"
    assert out.left == [{"gpu": 1, "why": "busy x"}]
    assert out.reason == "1 change; left as they were: GPU 1 (busy x)"
    assert created_capacity({0: ["3g.20gb"], 1: ["1g.5gb"]}, out.to_dict().get("left")) is not None
    claims = PlanClaims(None, "me", lambda: 0.0, 60.0, 600.0)
    claims.mark([(NS(nodepool_id="np"), NS(node_name="auto-a"), [NS(node="auto-a", index=0, change="create"),
                                                                  NS(node="auto-a", index=1, change="create")])],
                [dict(out.to_dict(), node_name="auto-a")])
    assert claims.marks == {"np": [("auto-a", 0)]}  # GPU 1 was left as it was: not marked for the dwell


@pytest.mark.parametrize("doc, code", [
    ({"outcome": "reboot-required", "error": {"message": {"x": [1, 2]}}}, 5),
    ({"outcome": "reboot-required", "error": {"message": "line one\nrm -rf /"}}, 5),
    ({"outcome": "failed", "error": {"code": "gpu-busy", "message": "a\nb"}}, 4),
    ({"outcome": "failed", "error": {"code": "x" * 5000 + "\ny", "message": "m"}}, 1),
    ({"outcome": "failed", "error": {"code": ["gpu-busy"], "message": 7}}, 1),
    ({"outcome": "conflict", "error": {"message": "x" * 200000}}, 6),
    ({"outcome": "failed", "error": {"code": "destroy-required", "message": "a\r\nb"}}, 7)])
def test_a_nodes_error_text_becomes_a_one_line_bounded_reason_and_code(doc, code):
    """The reason goes into the node's annotation, a Warning Event and the operator's terminal: one line, bounded,
    text, whatever the node printed (found by a review: a dict, a newline, 200 KB went through as they were)."""
    out = outcome(NodeResult("i-a", "ssh", code, doc), "n-a")
    assert isinstance(out.reason, str) and "\n" not in out.reason and "\r" not in out.reason
    assert len(out.reason) <= 400
    assert isinstance(out.code, str) and "\n" not in out.code and len(out.code) <= 64


@pytest.mark.parametrize("text, count", [
    ("16", 16), ("0", 0), ("9" * MAX_INT_DIGITS, 10 ** MAX_INT_DIGITS - 1), ("9" * (MAX_INT_DIGITS + 1), None),
    ("9" * 5000, None), ("", None), ("-1", None), ("+1", None), (" 1", None), ("1\n", None), ("\u0661", None),
    ("\u00b2", None), ("1.0", None), (16, None), (None, None), (True, None),
], ids=repr)
def test_digits_reads_a_count_in_ascii_digits_only_and_of_at_most_18(text, count):
    """The one reading of a count held as text (labels, tags, mig-parted names): str.isdigit takes other scripts'
    digits and superscripts, and int of 5,000 digits raises ValueError past Python's limit."""
    assert digits(text) == count
