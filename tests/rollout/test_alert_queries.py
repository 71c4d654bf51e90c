"""The stack's SLS alert rules (template.yml, docs/operations.md "Saved searches and alert rules") against the lines a
run really writes: each rule's search (the part before ``|``) evaluated on the JSON lines of a run that should fire
it. A rule keeps to its cluster's lines (``message.cluster_id: "<id>"``): a line without the field is a line the
rule never sees, whatever it says.

The evaluator follows SLS's search syntax for what the rules use (``key: value``, ``key: "phrase"``, ``and``, ``or``,
parentheses) on a text field indexed case-insensitively with SLS's default delimiters (the ``token`` list of SLS's
API reference, struct ``index``: ``, '";=()[]{}?@<&/:`` space, newline, tab, CR), where a phrase matches
its words in order."""

import io
import json
import re

import yaml

from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.cloud.cluster import InventoryLookup
from functions.pipeline.event import run_event
from tests.function.conftest import ROOT
from tests.rollout.conftest import TIMER, snapshot

_DELIMITERS = re.compile(r"""[,'";=()\[\]{}?@<&/:\s]+""")


def _words(value):
    return [w for w in _DELIMITERS.split(str(value).lower()) if w]


def _matches(line, field, value):
    if field not in line:
        return False
    have, want = _words(line[field]), _words(value)
    return any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


_TOKEN = re.compile(r'\s*(?:(?P<open>\()|(?P<close>\))|(?P<op>and|or)\b|message\.(?P<field>[a-z_]+):\s*'
                    r'(?:"(?P<phrase>[^"]*)"|(?P<word>[^\s()]+)))')


def search(query, line):
    """Whether ``line`` (a JSON log line, the ``message`` JSON key's fields) is among what the search finds."""
    tokens, at = [], 0
    text = query.split("|")[0].strip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        assert m, "the evaluator does not read %r" % text[at:]
        tokens.append(m)
        at = m.end()

    def expr(i):
        value, i = term(i)
        while i < len(tokens) and tokens[i].group("op"):
            op = tokens[i].group("op")
            right, i = term(i + 1)
            value = (value and right) if op == "and" else (value or right)
        return value, i

    def term(i):
        if tokens[i].group("open"):
            value, i = expr(i + 1)
            assert tokens[i].group("close")
            return value, i + 1
        t = tokens[i]
        return _matches(line, t.group("field"), t.group("phrase") if t.group("phrase") is not None
                        else t.group("word")), i + 1

    return expr(0)[0]


def alert_searches(cluster_id):
    with open(ROOT + "/template.yml", encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    found = {}
    for name, resource in doc["Resources"].items():
        if resource["Type"] == "ALIYUN::SLS::Alert":
            query = resource["Properties"]["Detail"]["Configuration"]["QueryList"][0]["Query"]["Fn::Sub"]
            found[name] = query.replace("${ClusterId}", cluster_id)
    return found


def test_a_stopped_rollout_fires_the_stopped_rollouts_and_failed_nodes_alerts(cluster):
    """The drain that times out (a PDB keeps node-a's pod) fails the node, and the next run finds the pool's
    rollout stopped: its "rollout stopped" line must be one the stopped-rollouts rule finds, in this cluster."""
    cluster.add_nodes()
    cluster.api.add_pod("team", "infer-0", "node-a", labels={"app": "infer"}, gpus=1, owner_kind="ReplicaSet")
    cluster.api.add_pdb("team", "infer", {"app": "infer"}, min_available=1)
    settings = load_settings(dict(cluster.settings_env, ACK_MIG_DRAIN_TIMEOUT_S="5"))
    from functions.delivery.node_executor import DeliveryExecutor

    def lines():
        out = io.StringIO()
        run_event(TIMER, settings, inventory=InventoryLookup.from_dict(snapshot()),
                  executor=DeliveryExecutor.from_settings(settings, transport=cluster.transport),
                  logger=JsonLogger("INFO", stream=out), kube=cluster.kube)
        return [json.loads(line) for line in out.getvalue().splitlines()]

    first, second = lines(), lines()
    cluster_id = next(line["cluster_id"] for line in first if line.get("cluster_id"))
    searches = alert_searches(cluster_id)
    assert [line for line in first if search(searches["FailedNodesAlert"], line)]
    stops = [line for line in second if line["message"] == "rollout stopped"]
    assert len(stops) == 1, second
    assert search(searches["StoppedRolloutsAlert"], stops[0]), stops[0]
    assert not any(search(q, line) for q in alert_searches("c" + "0" * 32).values() for line in first + second)


def test_an_event_that_ends_before_its_cluster_is_looked_up_fires_the_failed_events_alert():
    """An event that fails early (unreadable, or a lookup that keeps failing: ``retry``) ends before the cluster is
    looked up; its "event error" line must still name the function's own cluster (ACK_MIG_CLUSTER_ID, which the
    template sets to ClusterId), or the failed-events rule never finds it."""
    out = io.StringIO()
    settings = load_settings({"ACK_MIG_CLUSTER_ID": "c-rollout", "ACK_MIG_STARTUP_TAINT": "none"})
    result = run_event(b"{not json", settings, inventory=InventoryLookup.from_dict(snapshot()),
                       logger=JsonLogger("INFO", stream=out))
    assert result.outcome == "error"
    (ended,) = [json.loads(line) for line in out.getvalue().splitlines() if '"event error"' in line]
    assert search(alert_searches("c-rollout")["FailedEventsAlert"], ended), ended
    assert not search(alert_searches("c" + "0" * 32)["FailedEventsAlert"], ended)


def test_a_reconcile_run_keeps_the_no_run_alert_quiet(cluster):
    """The no-run rule fires when its search finds no line in NoRunAlertMinutes: every reconcile run must write one."""
    cluster.add_nodes()
    out = io.StringIO()
    timer = json.dumps({"triggerTime": "2026-11-29T02:00:00Z", "triggerName": "reconcile", "payload": ""})  # FC's
    run_event(timer, load_settings(dict(cluster.settings_env)), inventory=InventoryLookup.from_dict(snapshot()),
              logger=JsonLogger("INFO", stream=out), kube=cluster.kube, dry_run=True)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    cluster_id = next(line["cluster_id"] for line in lines if line.get("cluster_id"))
    assert [line for line in lines if search(alert_searches(cluster_id)["NoRunAlert"], line)]


def test_a_function_whose_settings_are_wrong_fires_the_failed_events_alert(monkeypatch):
    """Settings that do not load (a value the template let through) end every event ``error`` before anything
    else is known: the line must still name the cluster the deployment set (ACK_MIG_CLUSTER_ID), or a function
    that can do nothing is news only an hour later, from the no-run rule."""
    monkeypatch.setenv("ACK_MIG_CLUSTER_ID", "c-rollout")
    monkeypatch.setenv("ACK_MIG_DRAIN_TIMEOUT_S", "soon")
    out = io.StringIO()
    result = run_event(b"{}", None, logger=JsonLogger("INFO", stream=out))
    assert result.outcome == "error" and "ACK_MIG_DRAIN_TIMEOUT_S" in result.reason
    (ended,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert search(alert_searches("c-rollout")["FailedEventsAlert"], ended), ended
