"""The alert marks (functions/decision/alert_marks.py, functions/kube/alerted.py): which failure a key names, what a
hostile document reads as, the bounds of what is kept, and that a dry run neither sends nor marks."""

import io
import json
from dataclasses import replace

import pytest

from functions.base.event_result import HandlerResult
from functions.base.logs import JsonLogger
from functions.base.settings import load_settings
from functions.decision import alert_marks as am
from functions.kube import alerted
from functions.kube.nodes import EVENT_NAMESPACE, MemoryKube
from functions.pipeline.notify import after_event
from tests.support.webhook import Webhook

NODE = "i-2zeb7c1mig0a100x3q2h"
BUSY = {"instance_id": NODE, "outcome": "failed", "code": "gpu-busy", "reason": "gpu-busy: GPU 0 has processes: 4242"}


def test_a_key_names_the_run_the_node_and_the_failure_but_not_the_details():
    key = am.failure_key("event-1", BUSY)
    assert key == am.failure_key("event-1", dict(BUSY, reason="gpu-busy: GPU 0 has processes: 5151"))
    assert key != am.failure_key("event-2", BUSY)
    assert key != am.failure_key("event-1", dict(BUSY, instance_id="i-other"))
    assert key != am.failure_key("event-1", dict(BUSY, code="mig-not-enabled"))
    uncoded = {"instance_id": NODE, "outcome": "failed", "reason": "unreachable: agent down after 30 s"}
    assert am.failure_key("e", uncoded) == am.failure_key("e", dict(uncoded, reason="unreachable: after 31 s"))


@pytest.mark.parametrize("text", ["{", "[]", "null", '"x"', '{"version": 2, "nodes": {}}', '{"version": 1}',
                                  '{"version": 1, "nodes": []}', "x" * (am.MAX_TEXT + 1), "[" * 50 + "]" * 50,
                                  '{"version": 1, "nodes": {"a": NaN}}'])
def test_a_document_that_is_not_ours_is_one_line_the_caller_reads_as_no_marks(text):
    with pytest.raises(ValueError) as info:
        am.read_text(text)
    assert "\n" not in str(info.value) and "alert marks" in str(info.value)
    kube = MemoryKube()
    kube.create_lease(EVENT_NAMESPACE, {"metadata": {"name": am.MARK_LEASE, "annotations": {am.MARK_ANNOTATION: text}}})
    keys = {NODE: am.failure_key("e", BUSY)}
    assert alerted.told(kube, keys) == set()  # not told: told now, never lost
    alerted.mark(kube, keys)  # and replaced by ours
    assert alerted.told(kube, keys) == {NODE}


def test_an_entry_that_is_not_ours_is_no_mark_for_its_node_alone():
    good = {"key": "a" * 32, "at": 1000.0}
    doc = {"version": 1, "nodes": {NODE: good, "i-bad1": {"key": 7, "at": 1}, "i-bad2": {"key": "a" * 32, "at": True},
                                   "i-bad3": "x", "i-bad4": {"key": "short", "at": 1}, "": good, "i-" * 40: good,
                                   "i-bad5": {"key": "a" * 32, "at": -1}, "i-bad6": {"key": "a" * 32, "at": 1e12}}}
    assert am.read_text(json.dumps(doc)) == {NODE: good}


def test_marks_are_kept_two_days_and_the_newest_few_hundred():
    now = 2e9
    marks = am.merge({"i-old": {"key": "a" * 32, "at": now - am.KEEP_S - 1},
                      "i-recent": {"key": "b" * 32, "at": now - 60}}, {NODE: "c" * 32}, now)
    assert sorted(marks) == [NODE, "i-recent"]
    many = {"i-%04d" % n: "d" * 32 for n in range(am.MAX_NODES + 50)}
    marks = am.merge(marks, many, now + 1)
    assert len(marks) == am.MAX_NODES and NODE not in marks and "i-recent" not in marks
    assert len(am.write_text(marks)) < am.MAX_TEXT and am.read_text(am.write_text(marks)) == marks


def test_a_mark_write_that_meets_another_merges_with_it():
    kube = MemoryKube()
    alerted.mark(kube, {"i-first": "a" * 32})
    seen = kube.get_lease(EVENT_NAMESPACE, am.MARK_LEASE)
    alerted.mark(kube, {"i-second": "b" * 32})
    with pytest.raises(Exception):  # the version read by the first writer is gone: a blind write is refused
        kube.replace_lease(EVENT_NAMESPACE, seen)
    assert alerted.told(kube, {"i-first": "a" * 32, "i-second": "b" * 32}) == {"i-first", "i-second"}


def test_a_dry_run_neither_sends_nor_reads_nor_writes_a_mark():
    class Watched(MemoryKube):
        calls = []

        def get_lease(self, namespace, name):
            self.calls.append(name)
            return super().get_lease(namespace, name)

    kube = Watched()
    log = JsonLogger("DEBUG", stream=io.StringIO(), request_id="r-dry")
    with Webhook() as hook:
        settings = load_settings({"ACK_MIG_NOTIFY_URL": hook.url()})
        result = HandlerResult(trigger="lifecycle-hook", event_id="e-1", outcome="retry", reason="r", dry_run=True,
                               nodes=[dict(BUSY)])
        assert after_event(result, settings, log, kube=kube) == 0
        assert hook.lines() == [] and Watched.calls == [] and kube.leases == {}
        assert after_event(replace(result, dry_run=False), settings, log, kube=kube) == 1  # the same, for real
        assert [line["kind"] for line in hook.lines()] == ["node-failed"]
    assert alerted.told(kube, {NODE: am.failure_key("e-1", BUSY)}) == {NODE}


def test_an_event_without_an_id_is_keyed_by_its_request_id():
    """A manual run has no event id: the invocation's request id is the run (a repeat where FC changes it)."""
    kube = MemoryKube()
    with Webhook() as hook:
        settings = load_settings({"ACK_MIG_NOTIFY_URL": hook.url()})
        result = HandlerResult(trigger="manual", outcome="retry", reason="r", nodes=[dict(BUSY)])
        for request_id in ("r-1", "r-1", "r-2"):
            log = JsonLogger("DEBUG", stream=io.StringIO(), request_id=request_id)
            after_event(result, settings, log, kube=kube)
        assert len(hook.lines()) == 2


def test_the_bounds_docs_operations_states_are_the_codes():
    """docs/operations.md tells how long marks are kept and how many ("Marks go after two days, and beyond the
    newest 512"); the tests above use the module's constants, so the page could drift from them unseen."""
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "operations.md"), encoding="utf-8") as handle:
        page = " ".join(handle.read().split())
    found = re.search(r"Marks go after (\w+) days?, and beyond the newest ([0-9,]+)\.", page)
    assert found, "docs/operations.md no longer says how long alert marks are kept and how many"
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
    days = int(found.group(1)) if found.group(1).isdigit() else words[found.group(1)]
    assert (days * 86400.0, int(found.group(2).replace(",", ""))) == (am.KEEP_S, am.MAX_NODES)
    sticky = re.search(r"A refusal's mark goes after (\w+) days", page)
    assert sticky, "docs/operations.md no longer says how long a refusal's mark is kept"
    assert sticky.group(1) == {30: "thirty"}.get(int(am.STICKY_KEEP_S // 86400), "?"), sticky.group(0)


REFUSED = {"instance_id": NODE, "outcome": "failed", "code": "claim-refused",
           "cause": 'PATCH /api/v1/nodes/n: HTTP 422 Node "n" is invalid: metadata.annotations: Too long',
           "reason": "cannot claim or cordon: ..."}


def test_a_refusal_is_keyed_by_its_cause_whichever_run_meets_it():
    from functions.rollout.executor import CLAIM_REFUSED

    assert CLAIM_REFUSED in am.STICKY_CODES and am.sticky(REFUSED) and not am.sticky(BUSY)
    key = am.failure_key("timer-run-1", REFUSED)
    assert key == am.failure_key("timer-run-2", dict(REFUSED, reason="cannot claim or cordon: another wording"))
    assert key != am.failure_key("timer-run-1", dict(REFUSED, cause="HTTP 403 admission webhook denied the request"))
    assert key != am.failure_key("timer-run-1", dict(REFUSED, instance_id="i-other"))


def test_a_sticky_mark_outlives_the_two_days_until_its_node_passes_its_claim():
    now = 2e9
    marks = am.merge({}, {NODE: "a" * 32, "i-busy": "b" * 32}, now, sticky_ids=[NODE])
    assert am.read_text(am.write_text(marks)) == marks and marks[NODE]["sticky"] is True
    later = am.merge(marks, {"i-next": "c" * 32}, now + am.KEEP_S + 60)
    assert sorted(later) == [NODE, "i-next"]  # the other mark went after two days, the refusal's did not
    assert am.passed(later, [NODE, "i-next"]) == {"i-next": later["i-next"]}  # only a sticky mark goes
    kube = MemoryKube()
    alerted.passed(kube, [NODE])  # no Lease: nothing to do, nothing created
    alerted.mark(kube, {NODE: "a" * 32}, sticky=[NODE])
    assert alerted.told(kube, {NODE: "a" * 32}) == {NODE}
    alerted.passed(kube, [NODE])
    assert alerted.told(kube, {NODE: "a" * 32}) == set()


def test_a_node_that_failed_at_its_claim_for_another_cause_keeps_its_refusals_mark():
    """A node whose claim failed for a cause that is not its own (a 5xx, RBAC's 403: the executor's reason
    ``cannot claim or cordon: ...``, no code) did not get past its claim: its sticky mark stayed removed, or was
    replaced by that failure's, so the next refusal for the same cause was told again."""
    from functions.rollout.executor import CLAIM_FAILED

    kube = MemoryKube()
    sticky_key = am.failure_key("timer-run-1", REFUSED)
    alerted.mark(kube, {NODE: sticky_key}, sticky=[NODE])
    down = {"instance_id": NODE, "node_name": "n", "outcome": "failed", "wave": 1,
            "reason": "%s: PATCH /api/v1/nodes/n: HTTP 503 the server is currently unable to handle the request"
                      % CLAIM_FAILED}
    with Webhook() as hook:
        settings = load_settings({"ACK_MIG_NOTIFY_URL": hook.url()})
        log = JsonLogger("DEBUG", stream=io.StringIO(), request_id="timer-run-2")
        result = HandlerResult(trigger="timer", outcome="retry", reason="r", nodes=[down])
        assert after_event(result, settings, log, kube=kube) == 1  # that failure is told
        assert alerted.told(kube, {NODE: sticky_key}) == {NODE}  # and the refusal's mark stays
        partitioned = dict(down, outcome="partitioned", reason="done")
        after_event(replace(result, outcome="done", nodes=[partitioned]), settings, log, kube=kube)
    assert alerted.told(kube, {NODE: sticky_key}) == set()  # past its claim: the next refusal is news


def test_a_sticky_mark_of_a_node_that_never_passes_again_goes_after_thirty_days():
    """A node deleted while its claim was refused never gets past its claim: its sticky mark stayed until 512
    newer marks pushed it out. It goes once it is STICKY_KEEP_S old (a refusal that lasts so long is told again,
    a reminder, never a loss)."""
    now = 2e9
    marks = am.merge({}, {NODE: "a" * 32}, now, sticky_ids=[NODE])
    assert NODE in am.merge(marks, {"i-next": "b" * 32}, now + am.KEEP_S + 86400)
    assert am.STICKY_KEEP_S >= 7 * am.KEEP_S
    later = am.merge(marks, {"i-next": "b" * 32}, now + am.STICKY_KEEP_S + 1)
    assert sorted(later) == ["i-next"]
    # read before any write drops it: an expired mark no longer counts as told
    import time

    from functions.kube import leases

    kube = MemoryKube()
    old = am.merge({}, {NODE: "a" * 32}, time.time() - am.STICKY_KEEP_S - 60, sticky_ids=[NODE])
    leases.write(kube, EVENT_NAMESPACE, leases.read_or_create(kube, EVENT_NAMESPACE, am.MARK_LEASE, {}),
                 {am.MARK_ANNOTATION: am.write_text(old)})
    assert alerted.told(kube, {NODE: "a" * 32}) == set()
