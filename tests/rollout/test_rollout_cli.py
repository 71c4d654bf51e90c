"""``ack-mig-hook rollout pause|resume --pool ID`` against the loopback CS emulator with the real cs20151215
SDK: the pool label ``ack-mig-hook/paused`` is set and removed through ModifyClusterNodePool with the pool's
whole label list (every other label written back exactly), nothing is written when the label already
says so, and the function's next plan (against the same emulator) defers the pool's nodes as ``paused``,
then rolls them once resumed."""

import json
import os

import pytest

from functions.commands import main as cli
from functions.commands.rollout import paused_labels, resumed_labels
from functions.kube.nodes import MemoryKube
from tests.function.conftest import AK, ROOT, SECRET, TOKEN
from tests.support.cli_errors import error_text

ROLLOUT = os.path.join(ROOT, "examples", "inventory-rollout.json")
POOL = "np8d3c1b6e2f4a4c1e9a7b2d5f0c8e3a61"
PAUSED = "ack-mig-hook/paused"


@pytest.fixture
def cs(monkeypatch, tmp_path):
    from tests.support.cs_emulator import CsEmulator

    with open(ROLLOUT) as fh:
        data = json.load(fh)
    pool = data["nodepools"][0]
    # labels of someone else's around ours, one without a value: all must come back exactly, in place
    pool["kubernetes_config"]["labels"] = [{"key": "team", "value": "vision"}] + \
        pool["kubernetes_config"]["labels"] + [{"key": "zone-pinned"}]
    pool["kubernetes_config"]["taints"] = [{"key": "ack-mig-hook/partition-pending", "value": "true",
                                            "effect": "NoSchedule"}]
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with CsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN).load_inventory(data) as emu:
        for name, value in {"ACK_MIG_CS_ENDPOINT": emu.endpoint, "ALIBABA_CLOUD_ACCESS_KEY_ID": AK,
                            "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET, "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN,
                            "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true", "HOME": str(tmp_path),
                            "ACK_MIG_API_TIMEOUT_S": "5"}.items():
            monkeypatch.setenv(name, value)
        emu.snapshot = data
        yield emu
        assert not emu.rejected


def rollout(capsys, cs, action, *extra):
    code = cli.main(["rollout", action, "--pool", POOL, "--cluster-id", cs.cluster_id, "--region", "cn-beijing"]
                    + list(extra))
    out, err = capsys.readouterr()
    return code, out, err


def labels(cs):
    return cs.pool(POOL)["kubernetes_config"]["labels"]


def plan(cs):
    """The function's dry-run reconcile against the emulator, the Kubernetes side from the snapshot."""
    from functions.base.logs import JsonLogger
    from functions.pipeline.event import run_event
    from functions.base.settings import load_settings

    settings = load_settings({"ACK_MIG_CS_ENDPOINT": cs.endpoint, "ACK_MIG_REGION": "cn-beijing",
                              "ALIBABA_CLOUD_ACCESS_KEY_ID": AK, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
                              "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_STARTUP_TAINT": "none"})
    result = run_event(json.dumps({"cluster_id": cs.cluster_id}), settings, dry_run=True, logger=JsonLogger("OFF"),
                       kube=MemoryKube.from_snapshot(cs.snapshot["kube_nodes"]))
    return {d.node_name: (d.action, d.reason) for d in result.decisions}


@pytest.mark.parametrize("semantics", ["replace", "merge"])
def test_pause_and_resume_write_the_pools_labels_through_the_ack_api(cs, capsys, semantics):
    """Whether ModifyClusterNodePool replaces the label list or merges into it is not documented: pause and
    resume come out the same under both (resume writes paused=false, it never relies on a label left out)."""
    cs.list_semantics = semantics
    before = [dict(x) for x in labels(cs)]
    assert plan(cs)["cn-beijing.192.168.12.31"][0] == "partition"
    asked = len(cs.requests)
    code, out, err = rollout(capsys, cs, "pause")
    assert (code, err) == (0, "")
    assert out.strip() == ("pool %s (gpu-mig-a100): paused: label ack-mig-hook/paused=true written, the 3 other "
                           "labels kept; no new node of its rollout starts, nodes in progress finish and are "
                           "uncordoned" % POOL)
    assert labels(cs) == before + [{"key": PAUSED, "value": "true"}]
    # the body says only what changes: the labels, no taints list (the SDK's model would send taints: []),
    # no update_nodes
    assert cs.modified == [{"nodepool_id": POOL, "body": {"kubernetes_config": {"labels": labels(cs)}}}]
    # read, read again just before the write (someone else's change meanwhile would be seen), write, read back
    assert [r.action for r in cs.requests[asked:]] == ["DescribeClusterNodePools", "DescribeClusterNodePools",
                                                       "ModifyClusterNodePool", "DescribeClusterNodePools"]
    assert cs.pool(POOL)["kubernetes_config"]["taints"][0]["key"] == "ack-mig-hook/partition-pending"
    decisions = plan(cs)
    for name in ("cn-beijing.192.168.12.31", "cn-beijing.192.168.12.47"):
        action, reason = decisions[name]
        assert action == "defer" and "paused: rollout of pool %s (gpu-mig-a100)" % POOL in reason
    # again: nothing to write
    code, out, _ = rollout(capsys, cs, "pause")
    assert code == 0 and "already paused" in out and len(cs.modified) == 1
    code, out, _ = rollout(capsys, cs, "resume", "--json")
    result = json.loads(out)
    resumed = before + [{"key": PAUSED, "value": "false"}]
    assert code == 0 and result["changed"] and result["labels"] == [{"key": x["key"], "value": x.get("value")}
                                                                     for x in resumed]
    assert labels(cs) == resumed and len(cs.modified) == 2
    assert plan(cs)["cn-beijing.192.168.12.31"][0] == "partition"
    code, out, _ = rollout(capsys, cs, "resume")
    assert code == 0 and "not paused; nothing written" in out and len(cs.modified) == 2


def test_the_label_list_cannot_be_sent_empty_nor_past_twenty(cs, capsys):
    pool = cs.pool(POOL)
    pool["kubernetes_config"]["labels"] = [{"key": PAUSED, "value": "true"}]
    code, out, _ = rollout(capsys, cs, "resume")
    # the pause is written off, never left out (an empty list would leave the pool as it is)
    assert code == 0 and labels(cs) == [{"key": PAUSED, "value": "false"}]
    pool["kubernetes_config"]["labels"] = [{"key": "l%d" % i, "value": "x"} for i in range(20)]
    code, out, err = rollout(capsys, cs, "pause")
    assert code == 2 and out == ""
    assert "has 20 labels, the most ACK allows; pausing needs one more" in error_text(err) and len(cs.modified) == 1


def test_the_emulator_refuses_what_ack_documents_as_refused(cs):
    from functions.cloud.cs_lookup import CsLookup
    from functions.base.errors import ConfigurationError
    from functions.base.settings import load_settings

    lookup = CsLookup(load_settings(dict(os.environ, ACK_MIG_REGION="cn-beijing")))
    for bad, why in ((["x"] * 2, "duplicate label keys"), (["k" * 65], "longer than 64"),
                     (["aliyun.com/x"], "reserved prefix"), (["l%d" % i for i in range(21)], "21 labels")):
        with pytest.raises(ConfigurationError, match=why):
            lookup.set_nodepool_labels(cs.cluster_id, POOL, [(k, "v") for k in bad])
    cs.rejected.clear()
    assert cs.modified == []


@pytest.mark.parametrize("args, needle", [
    (["--pool", "np bad"], "argument --pool: 'np bad' is not an ACK node pool id; use np followed by 32"),
    (["--pool", POOL, "--region", "beijing"], "argument --region: 'beijing' is not a region the Alibaba Cloud SDKs "
                                              "know; use a region id such as cn-beijing"),
    (["--pool", POOL, "--region", "cn-beijing", "--cluster-id", ""], "missing --cluster-id (or ACK_MIG_CLUSTER_ID)"),
])
def test_bad_flags_are_one_line_and_nothing_is_asked(cs, capsys, args, needle):
    code = cli.main(["rollout", "pause", "--cluster-id", cs.cluster_id, "--region", "cn-beijing"] + args)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and needle in error_text(err) and cs.requests == []


def test_an_unknown_pool_is_one_line_naming_it(cs, capsys):
    unknown = "np" + "0" * 32
    code = cli.main(["rollout", "pause", "--pool", unknown, "--cluster-id", cs.cluster_id, "--region",
                     "cn-beijing"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and error_text(err)
    assert "cluster %s has no node pool %s (DescribeClusterNodePools lists 2)" % (cs.cluster_id, unknown) in err
    assert cs.modified == []


def test_the_pure_label_edits():
    assert paused_labels([("a", "1"), (PAUSED, "false"), ("b", None)]) == (
        [("a", "1"), (PAUSED, "true"), ("b", None)], True)
    assert paused_labels([(PAUSED, "true")]) == ([(PAUSED, "true")], False)
    assert resumed_labels([("a", "1"), (PAUSED, "TRUE")]) == ([("a", "1"), (PAUSED, "false")], True)
    assert resumed_labels([("a", "1"), (PAUSED, "false")]) == ([("a", "1"), (PAUSED, "false")], False)


def test_a_label_the_console_writes_between_the_read_and_the_write_is_kept(cs, capsys):
    """ModifyClusterNodePool has no precondition: the list is read again just before the write, and a list
    that moved is taken again, so the console's new label stands beside the pause."""
    def console(action, count):
        if action == "DescribeClusterNodePools" and count == 2:  # between the first read and the write
            cs.pool(POOL)["kubernetes_config"]["labels"].append({"key": "console-note", "value": "added"})
    cs.on_request = console
    code, out, err = rollout(capsys, cs, "pause")
    assert (code, err) == (0, "") and "paused" in out
    keys = [x["key"] for x in labels(cs)]
    assert "console-note" in keys and PAUSED in keys
    assert len(cs.modified) == 1 and {"key": "console-note", "value": "added"} in cs.modified[0]["body"][
        "kubernetes_config"]["labels"]


def test_a_list_that_changes_under_every_attempt_is_a_plain_conflict_and_nothing_is_written(cs, capsys):
    calls = []

    def busy(action, count):
        if action == "DescribeClusterNodePools":
            calls.append(count)
            cs.pool(POOL)["kubernetes_config"]["labels"].append({"key": "busy-%d" % count, "value": "x"})
    cs.on_request = busy
    code, out, err = rollout(capsys, cs, "pause")
    assert code == 6 and out == "" and "Traceback" not in err  # exit_codes.EXIT_CONFLICT
    line = err.strip().splitlines()[0]
    assert "the labels of node pool %s changed under each of 3 attempts" % POOL in line
    assert cs.modified == [] and len(calls) == 6  # read and read again, three times


def test_the_first_deployment_page_names_what_pause_needs_beyond_its_policy(cs, capsys):
    """docs/first-deployment.md suggests `rollout pause` in its last step, to a reader who holds the deployer's
    policy the page gives. Every ACK action pause and resume call is in that policy or named on the page
    beside the command: such a reader is never refused (exit 5) for an action nobody told them to grant."""
    from tests.function.test_first_deployment import PAGE, policy_actions

    asked = len(cs.requests)
    assert rollout(capsys, cs, "pause")[0] == 0 and rollout(capsys, cs, "resume")[0] == 0
    called = {"cs:" + r.action for r in cs.requests[asked:]}
    text = open(PAGE, encoding="utf-8").read()
    start = text.index("\n## 8.")
    step = text[start:text.index("\n## ", start + 1)]
    assert "ack-mig-hook rollout pause" in step
    missing = [a for a in sorted(called - policy_actions()) if "`%s`" % a not in step]
    assert "cs:ModifyClusterNodePool" in called and not missing, missing
