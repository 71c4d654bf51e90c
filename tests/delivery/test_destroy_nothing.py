"""The delivery side of "destroy nothing": a decision the rollout takes without drain (``drain`` False)
sends the node a request with ``"destroy": false`` (node_bootstrap/request.py reads it), every other one
the plain request; the node's refusal (exit 7, ``destroy-required``) is its own outcome, not ``failed``."""

import base64
import json

import pytest

from functions.delivery.node_executor import DeliveryExecutor
from functions.delivery.node_script import node_args
from functions.delivery.outcome import DESTROY_REQUIRED, NodeResult, outcome
from functions.base.model import Decision, PartitionLabel, Request, Trigger


def request_of(args):
    return json.loads(base64.b64decode(args[args.index("--request-b64") + 1]))


def test_the_request_asks_to_destroy_nothing_only_when_told():
    assert request_of(node_args({"kind": "sequence", "value": "3g.20gb"})) == {
        "version": 1, "partition": {"kind": "sequence", "value": "3g.20gb"}}
    assert request_of(node_args({"kind": "sequence", "value": "3g.20gb"}, destroy=False)) == {
        "version": 1, "partition": {"kind": "sequence", "value": "3g.20gb"}, "destroy": False}


class Recorder:
    name = "recorded"

    def __init__(self, answer):
        self.answer, self.targets = answer, []

    def run(self, targets):
        self.targets.extend(targets)
        return [NodeResult(t.instance_id, self.name, *self.answer) for t in targets]


@pytest.mark.parametrize("drain, destroy", [(False, False), (True, None), (None, None)])
def test_only_a_decision_without_drain_sends_destroy_false(drain, destroy):
    transport = Recorder((0, {"outcome": "success", "changes": 2}))
    executor = DeliveryExecutor(transport)
    d = Decision(instance_id="i-1", node_name="node-a", action="partition", reason="r", drain=drain,
                 partition=PartitionLabel(kind="sequence", value="3g.20gb-2g.10gb"))
    out = executor.execute(Request(trigger=Trigger.MANUAL, event_type="manual"), [d])
    assert out[0]["outcome"] == "partitioned"
    assert request_of(list(transport.targets[0].args)).get("destroy") is destroy
    assert d.to_json()["drain"] is drain


@pytest.mark.parametrize("exit_code, doc, reason", [
    (7, {"outcome": "failed", "changes": 0, "error": {"code": "destroy-required", "message": "GPU 0 needs destroying "
                                                      "GPU instance 3; nothing was changed"}},
     "destroy-required: GPU 0 needs destroying GPU instance 3; nothing was changed"),
    (7, {"outcome": "failed", "changes": 0},  # the exit code alone says it
     "destroy-required: destroy required (adding instances alone cannot reach the layout)"),
])
def test_the_nodes_refusal_is_destroy_required_not_failed(exit_code, doc, reason):
    got = outcome(NodeResult("i-1", "local", exit_code, doc), "node-a")
    assert (got.outcome, got.code, got.reason) == (DESTROY_REQUIRED, DESTROY_REQUIRED, reason)
    assert not got.node_verdict  # never a reason to give up on a lifecycle hook's instance
