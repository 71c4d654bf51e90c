"""An irrelevant event must not load the cloud SDKs or paramiko: checked in fresh processes."""

import json
import os
import subprocess
import sys

from tests.function.conftest import EVENTS, INVENTORY, ROOT

HEAVY = ("alibabacloud_cs20151215", "alibabacloud_tea_openapi", "aliyunsdkcore", "paramiko", "darabonba")


def loaded_after(snippet, heavy=HEAVY):
    code = snippet + "\nimport sys, json\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in %r)))" \
        % (tuple(heavy),)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACK_MIG_", "ALIBABA_CLOUD_"))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_handler_import_and_ess_test_event_stay_light():
    snippet = ("from functions.handler import handler\n"
               "out = handler(open(%r, 'rb').read(), None)\n"
               "assert '\"outcome\": \"skip\"' in out, out" % os.path.join(EVENTS, "ess_lifecycle_test.json"))
    assert loaded_after(snippet) == []
    # Stage 1 (functions.pipeline.envelope) ends the test notification before any pydantic model is needed.
    assert loaded_after(snippet, heavy=("pydantic", "pydantic_core")) == []


def test_relevant_event_does_load_pydantic():
    """The probe above can see pydantic: a scale-out event (stage 2) loads it."""
    snippet = ("from functions.pipeline.event import run_event\n"
               "from functions.base.logs import JsonLogger\n"
               "run_event(open(%r, 'rb').read(), None, inventory=%r, dry_run=True, logger=JsonLogger('OFF'))"
               % (os.path.join(EVENTS, "ess_scale_out_success.json"), INVENTORY))
    assert "pydantic" in loaded_after(snippet, heavy=("pydantic",))


def test_irrelevant_events_stay_light():
    for name in ("ess_scale_in_success.json", "actiontrail_api_describe_clusters.json", "ecs_instance_stopping.json"):
        snippet = ("from functions.handler import handler\nhandler(open(%r, 'rb').read(), None)"
                   % os.path.join(EVENTS, name))
        assert loaded_after(snippet) == [], name


def test_a_pod_event_other_than_failed_scheduling_ends_before_pydantic(tmp_path):
    """The rule lets only FailedScheduling through; any other pod event that arrives ends in stage 1."""
    event = json.load(open(os.path.join(EVENTS, "ack_pod_failed_scheduling.json")))
    event["data"]["reason"] = "Pulled"
    path = tmp_path / "pulled.json"
    path.write_text(json.dumps(event))
    snippet = ("from functions.handler import handler\n"
               "out = handler(open(%r, 'rb').read(), None)\n"
               "assert 'only FailedScheduling' in out, out" % str(path))
    assert loaded_after(snippet, heavy=("pydantic", "pydantic_core")) == []


def test_snapshot_dry_run_needs_no_sdk():
    snippet = ("from functions.pipeline.event import run_event\n"
               "from functions.base.logs import JsonLogger\n"
               "r = run_event(open(%r, 'rb').read(), None, inventory=%r, dry_run=True, logger=JsonLogger('OFF'))\n"
               "assert r.outcome == 'done', r" % (os.path.join(EVENTS, "ess_scale_out_success.json"), INVENTORY))
    assert loaded_after(snippet) == []


def test_bench_script_reports_numbers():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import cold_start
    finally:
        sys.path.pop(0)
    result = cold_start.measure(runs=1)
    assert result["cold_start_heavy_modules"] == []
    assert result["cold_start_skip_ms"] > 0 and result["cold_start_ratio"] > 0
