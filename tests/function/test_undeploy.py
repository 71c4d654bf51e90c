"""``ack-mig-hook undeploy``: it says what would go, asks before deleting (``--yes`` without a terminal),
has a ``--dry-run``, warns of a rollout in progress (read from the nodes through a real TLS API server,
tests/support/kubeapi.py), and prints JSON with ``--json``. ROS is the loopback emulator."""

import io
import json

import pytest

from functions.decision import waves
from tests.function.test_deploy import CLUSTER, cloud, deploy_args, foreign_stacks, make_deps, run  # noqa: F401
from tests.support.cli_errors import error_text
from tests.support.cs_emulator import INSECURE_KUBECONFIG
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(180)
UNDEPLOY = ("undeploy", "--region", "cn-beijing", "--cluster-id", CLUSTER, "--poll", "0")
STACK = "ack-mig-hook-" + CLUSTER  # the default name: the cluster's own


class Terminal(io.StringIO):
    """stdin as a person at a terminal: isatty() and the answer they type."""

    def isatty(self):
        return True


@pytest.fixture
def deployed(cloud, capsys, tmp_path):  # noqa: F811
    ros, _ = cloud
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps"))))[0] == 0
    (stack,) = ros.stacks.values()
    return ros, stack


def rollout_record(step):
    return waves.Progress(target="sequence=3g.20gb-3g.20gb", step=step, cordoned=True, since=1.0).to_annotation()


def test_without_a_terminal_it_needs_yes_and_deletes_nothing(deployed, capsys, monkeypatch):
    ros, stack = deployed
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, out, err = run(capsys, *UNDEPLOY)
    assert code == 2 and stack["Status"] == "CREATE_COMPLETE" and ros.calls("DeleteStack") == 0
    text = error_text(err[err.index("ack-mig-hook: error:"):])
    assert text.startswith("ack-mig-hook: error: undeploy deletes stack " + STACK) and "--yes" in text


def test_on_a_terminal_it_asks_and_a_no_deletes_nothing(deployed, capsys, monkeypatch):
    ros, stack = deployed
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    code, _, err = run(capsys, *UNDEPLOY)
    assert code == 2 and "delete stack ack-mig-hook" in err and "[y/N]" in err and "not deleted" in err
    assert ros.calls("DeleteStack") == 0
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    code, out, err = run(capsys, *UNDEPLOY)
    assert code == 0 and "deleted" in out and stack["Status"] == "DELETE_COMPLETE"


def test_dry_run_lists_what_would_go_and_deletes_nothing(deployed, capsys):
    ros, stack = deployed
    code, out, err = run(capsys, *UNDEPLOY, "--dry-run")
    assert code == 0 and out.startswith("dry run: would delete stack ack-mig-hook")
    for name in ("Function ALIYUN::FC3::Function", "FunctionRole ALIYUN::RAM::Role", "ReconcileTimer"):
        assert name in out
    assert "OSS bucket" in out and ros.calls("DeleteStack") == 0 and stack["Status"] == "CREATE_COMPLETE"
    said = " ".join(out.split())  # what stays, as docs/deploy.md (Uninstall) lists it: the autoscaler's tags
    assert "node-template tags" in said and "Leases ack-mig-hook-* in default" in said, said  # (a pool left
    # with them gets nodes the autoscaler adds for MIG pods no new node serves) and the Leases
    assert "could not check for a rollout in progress" in err  # no kubeconfig, no cluster id


def test_a_rollout_in_progress_is_named_before_deleting(deployed, capsys, kube_api, tmp_path):  # noqa: F811
    ros, stack = deployed
    kube_api.add_node("cn-beijing.192.168.12.31", annotations={waves.PROGRESS_ANNOTATION: rollout_record("drained")})
    kube_api.add_node("cn-beijing.192.168.12.32", annotations={waves.PROGRESS_ANNOTATION: rollout_record("done")})
    kube_api.add_node("cn-beijing.192.168.12.33")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert())
    code, out, err = run(capsys, *UNDEPLOY, "--kubeconfig", str(kubeconfig), "--yes", "--json")
    assert code == 0, err
    assert "warning: a rollout is in progress on cn-beijing.192.168.12.31 (drained)" in err
    assert "192.168.12.32" not in err  # a finished record is no rollout in progress
    doc = json.loads(out)
    assert doc["status"] == "deleted" and doc["rollout"]["active"] == [
        {"node": "cn-beijing.192.168.12.31", "step": "drained", "target": "sequence=3g.20gb-3g.20gb"}]
    assert {r["logical_id"] for r in doc["resources"]} >= {"Function", "FunctionRole", "EssTrigger"}
    assert all(r.method == "GET" for r in kube_api.requests)


def test_the_rollout_check_asks_ack_for_a_kubeconfig_when_the_cluster_is_known(deployed, capsys, kube_api,
                                                                              tmp_path):  # noqa: F811
    ros, _ = deployed
    kube_api.add_node("cn-beijing.192.168.12.31", annotations={waves.PROGRESS_ANNOTATION: rollout_record("applying")})
    path = kube_api.write_kubeconfig(tmp_path / "ack.conf", cert=kube_api.admin_cert(), inline=True)
    ros.ack.kubeconfig = open(path).read()
    code, out, err = run(capsys, *UNDEPLOY, "--cluster-id", ros.ack.cluster_id, "--dry-run")
    assert code == 0 and "cn-beijing.192.168.12.31 (applying)" in err
    assert ros.ack.kubeconfig_requests[-1].get("PrivateIpAddress") in ("false", "False")  # the public endpoint


def test_an_unreachable_api_server_is_said_not_hidden(deployed, capsys, tmp_path):
    """The CS emulator's default kubeconfig is shaped as ACK's (the cluster CA, a client certificate) and
    points at a loopback port where nothing listens: the client loads it, connects, is refused, and the
    warning says the server could not be reached (it was refused before connecting when the default asked
    to skip TLS verification)."""
    ros, _ = deployed
    code, out, err = run(capsys, *UNDEPLOY, "--cluster-id", ros.ack.cluster_id, "--dry-run")
    (line,) = [text for text in err.splitlines() if "could not check for a rollout in progress" in text]
    assert code == 0 and "Traceback" not in err
    assert "cannot reach https://127.0.0.1:" in line and "skip TLS" not in line, line
    assert "answered" not in line, line  # no answer came: the warning never says the API answered


def test_a_rollout_check_that_answers_says_the_api_answered(deployed, capsys, kube_api, tmp_path):  # noqa: F811
    """The one cause that is the API server's answer (here 403: the credential may not list nodes) is said as
    one; a kubeconfig refused or a server not reached is not ("the Kubernetes API answered: cannot reach")."""
    ros, _ = deployed
    kube_api.break_next(times=10, status=403, method="GET", path="/api/v1/nodes", message="nodes is forbidden")
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "admin.conf", cert=kube_api.admin_cert())
    code, out, err = run(capsys, *UNDEPLOY, "--kubeconfig", str(kubeconfig), "--dry-run")
    (line,) = [text for text in err.splitlines() if "could not check for a rollout in progress" in text]
    assert code == 0 and "(the Kubernetes API answered: " in line and "forbidden" in line, line


def test_nothing_to_remove_is_json_too(cloud, capsys):  # noqa: F811
    code, out, _ = run(capsys, *UNDEPLOY, "--json")
    assert code == 0 and json.loads(out) == {"stack": STACK, "region": "cn-beijing", "dry_run": False,
                                             "status": "absent"}


def test_a_stack_of_the_old_default_name_is_found_only_for_its_own_cluster(cloud, capsys):  # noqa: F811
    """Two clusters in one region never share a default name; a stack deployed when the default was plain
    ack-mig-hook is still found by its own cluster (its ClusterId parameter), never by another."""
    ros, _ = cloud
    ros.put_stack("st-old", "ack-mig-hook", ClusterId=CLUSTER)
    other = "c" + "0" * 32
    code, out, _ = run(capsys, "undeploy", "--region", "cn-beijing", "--cluster-id", other, "--json", "--dry-run")
    assert code == 0 and json.loads(out)["status"] == "absent" and json.loads(out)["stack"] == "ack-mig-hook-" + other
    code, out, _ = run(capsys, *UNDEPLOY, "--json", "--dry-run")
    assert code == 0 and json.loads(out)["stack"] == "ack-mig-hook" and ros.calls("DeleteStack") == 0


def test_a_stack_name_that_serves_another_cluster_or_no_cluster_is_never_deleted(cloud, capsys):  # noqa: F811
    """``--stack-name`` with ``--cluster-id``: the stack named must be that cluster's, else a typo or a pasted
    command deletes another cluster's function (after checking the wrong cluster's nodes for a rollout); a
    stack with no ClusterId parameter is not one deploy made, and is never deleted."""
    ros, _ = cloud
    other = foreign_stacks(ros)
    code, _, err = run(capsys, *UNDEPLOY, "--stack-name", "ack-mig-hook-" + other, "--yes")
    text = error_text(err)
    assert code == 6 and "serves cluster %s, not %s" % (other, CLUSTER) in text, err
    code, _, err = run(capsys, "undeploy", "--region", "cn-beijing", "--stack-name", "network", "--yes", "--poll", "0")
    assert code == 6 and "has no ClusterId parameter: not a stack ack-mig-hook deploy made" in error_text(err), err
    assert ros.calls("DeleteStack") == 0 and set(ros.stacks) == {"st-other", "st-vpc"}


@pytest.mark.contract_exempt("ListStackResources naming a resource with terminal escape sequences in it")
def test_the_confirmation_prompt_never_writes_a_resource_name_raw(deployed, capsys, monkeypatch):
    """The prompt lists the stack's resources as ROS names them; a name holding an escape sequence (OSC 52 sets
    the clipboard, CSI 2K erases the line) reached the operator's terminal raw there, where every other line
    undeploy prints goes through textsafe.escape."""
    ros, stack = deployed
    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2KFunction"
    ros.tamper_next("ListStackResources", lambda payload: dict(payload, Resources=[
        {"LogicalResourceId": hostile, "ResourceType": "ALIYUN::FC3::Function" + hostile, "Status": "CREATE_COMPLETE",
         "PhysicalResourceId": "fn", "StatusReason": ""}]))
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    code, out, err = run(capsys, *UNDEPLOY)
    assert code == 2 and "[y/N]" in err and ros.calls("DeleteStack") == 0
    assert "\x1b" not in err and "\x07" not in err and "\x1b" not in out, repr(err)
    assert "Function ALIYUN::FC3::Function" in err  # still named, written visibly


def test_a_rollout_check_that_fails_says_its_cause_whole_and_the_fix(deployed, capsys):
    """The check's cause was cut at 200 characters wherever they ended, mid-parenthesis ("...instead (the );
    give --kubeconfig FILE to check"). The line now reads whole: its parentheses close, it names what to give
    the kubeconfig (one asking to skip TLS verification, which ACK never answers and the client refuses) and
    the command's own fix."""
    ros, _ = deployed
    ros.ack.kubeconfig = INSECURE_KUBECONFIG
    code, out, err = run(capsys, *UNDEPLOY, "--cluster-id", ros.ack.cluster_id, "--dry-run")
    (line,) = [text for text in err.splitlines() if "could not check for a rollout in progress" in text]
    assert code == 0 and line.count("(") == line.count(")") and "(the )" not in line, line
    assert "certificate-authority-data" in line and line.endswith("; give --kubeconfig FILE to check"), line
    assert "answered" not in line, line  # refused here, before any call: the API never answered


def test_a_cause_is_cut_where_it_reads_whole():
    """textsafe.clip, at every limit: one line, parentheses balanced, never mid-word, "..." where it cut."""
    from functions.base.textsafe import clip

    text = ("kubeconfig (the cluster kubeconfig) asks to skip TLS verification (clusters[0].cluster.insecure-skip-"
            "tls-verify: true), which is never done; give the certificate-authority-data instead (the ACK "
            "console's kubeconfig has it)")
    words = {word.rstrip(",;:") for word in text.replace("(", " ").replace(")", " ").split()}
    assert clip(text, len(text)) == text and clip("a\nb", 10) == "a b"
    for limit in range(1, len(text)):
        cut = clip(text, limit)
        kept = cut.rstrip(")")
        assert kept.endswith("...") and len(cut) <= limit + 3 and cut.count("(") == cut.count(")"), (limit, cut)
        assert len(kept) - 3 >= limit // 2 - 1, (limit, cut)  # never (nearly) all of it dropped
        last = kept[:-3].replace("(", " ").replace(")", " ").split()
        space = text[:limit].rfind(" ")
        if space >= limit // 2:  # a word's end within reach: a whole word, its trailing comma dropped
            assert not last or last[-1] in words, (limit, cut)


def test_a_long_word_or_an_early_parenthesis_is_cut_inside_not_dropped():
    """One long word (a URL, a token) or a parenthesis opened near the start left only "..." (the cut went back
    to the word's start, or to the parenthesis, and so to nothing): half the limit is kept at least, what it
    leaves open closed after the dots."""
    from functions.base.textsafe import clip

    assert clip("x" * 500, 100) == "x" * 100 + "..."
    cut = clip("see (" + "y " * 200 + ")", 60)
    assert cut.startswith("see (y y") and cut.endswith("...)") and len(cut) <= 63, cut
    assert cut.count("(") == cut.count(")")
