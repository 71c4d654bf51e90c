"""The Simple Log Service index the stack creates for the function's logs (template.yml ``FunctionLogIndex``,
ALIYUN::SLS::Index): it is on the template's own log project and logstore, behind ``LogIndex``, and it
indexes every field of the lines that tell a node's story (``decision``, ``node result``, the ``event ...``
summary), so the saved queries of docs/troubleshooting.md can ask by field."""

import io
import json
import os
import re

import yaml

from functions.base.logs import JsonLogger
from functions.pipeline.event import run_event
from functions.base.settings import load_settings
from tests.function.conftest import EVENTS, ROOT

CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"


def template():
    with open(os.path.join(ROOT, "template.yml")) as handle:
        return yaml.safe_load(handle)


def index():
    return template()["Resources"]["FunctionLogIndex"]


def story_lines():
    """The JSON lines a reconcile, a scale-out, a rollout and a manual event write, as FC would ship them."""
    out = io.StringIO()
    for event, snapshot in (("examples/event.json", "examples/inventory.json"),
                            ("examples/event-reconcile.json", "examples/inventory-rollout.json"),
                            (os.path.join(EVENTS, "manual.json"), "examples/inventory.json")):
        with open(os.path.join(ROOT, event), "rb") as handle:
            run_event(handle.read(), load_settings({"ACK_MIG_CLUSTER_ID": CLUSTER}),
                      inventory=os.path.join(ROOT, snapshot), dry_run=True, logger=JsonLogger("INFO", stream=out))
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_index_is_on_the_functions_logstore_behind_a_parameter():
    doc = template()
    assert index()["Type"] == "ALIYUN::SLS::Index" and index()["Condition"] == "CreateLogIndex"
    assert doc["Conditions"]["CreateLogIndex"] == {"Fn::Equals": ["true", {"Ref": "LogIndex"}]}
    assert doc["Parameters"]["LogIndex"]["Default"] == "true"
    props = index()["Properties"]
    function = doc["Resources"]["Function"]["Properties"]["LogConfig"]
    assert (props["ProjectName"], props["LogstoreName"]) == (function["Project"], function["Logstore"])
    assert props["FullTextIndex"]["Enable"] is True  # an instance id is found anywhere in a line


def test_every_field_of_a_nodes_story_is_indexed():
    (message,) = [k for k in index()["Properties"]["KeyIndices"] if k["Name"] == "message"]
    assert message["Type"] == "json"
    indexed = {k["Name"]: k["Type"] for k in message["JsonKeyIndices"]}
    lines = [line for line in story_lines() if line["message"] in ("decision", "node result")
             or line["message"].startswith("event ")]
    assert {line["message"] for line in lines} >= {"decision", "node result"}
    seen = {key for line in lines for key in line} - {"time"}  # SLS keeps its own __time__
    assert seen <= set(indexed), seen - set(indexed)
    assert indexed["duration_ms"] == "long"
    assert all(k["EnableAnalytics"] for k in message["JsonKeyIndices"])  # SQL group-by for the saved queries


def test_the_saved_queries_ask_only_for_indexed_fields():
    text = open(os.path.join(ROOT, "docs", "troubleshooting.md"), encoding="utf-8").read()
    section = text[text.index("### Saved queries"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    queries = re.findall(r"^```text\n(.*?)^```", section, re.M | re.S)
    assert len(queries) >= 3
    (message,) = [k for k in index()["Properties"]["KeyIndices"] if k["Name"] == "message"]
    indexed = {"message." + k["Name"] for k in message["JsonKeyIndices"]}
    used = set(re.findall(r"\bmessage\.[a-z_]+", "\n".join(queries)))
    assert used and used <= indexed, used - indexed
