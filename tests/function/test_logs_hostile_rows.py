"""``logs`` against SLS answers it cannot have expected: one bounded line or the rows shown, never exit 70."""

import pytest

from tests.function.test_remote_and_logs import KEY, SECRET, TOKEN, cli, cloud, seed_stack  # noqa: F401
from tests.support.loopback import json_answer
from tests.support.sls_emulator import SlsEmulator

pytestmark = pytest.mark.timeout(120)


class Hostile(SlsEmulator):
    data = None

    def _get_logs(self, rows, doc):
        return json_answer(200, {"meta": {"count": 1, "progress": "Complete"}, "data": self.data})


@pytest.mark.parametrize("data", [
    [{"__time__": "\u00b2", "message": "{}"}],                 # str.isdigit() is true, int() refuses it
    [{"__time__": "9" * 30, "message": "{}"}],                 # OverflowError in time.gmtime
    [{"__time__": "1700000000", "message": "[" * 100000}],     # RecursionError in json.loads
    ["not a row"],                                             # a row that is not an object
    {"data": "an object, not a list"},
], ids=["superscript-time", "huge-time", "deep-json", "string-row", "object-data"])
def test_logs_survives_hostile_getlogs_rows(cloud, data):
    ros, fc, env = cloud
    seed_stack(ros)
    sls = Hostile(access_key_id=KEY, secret=SECRET, token=TOKEN).start()
    sls.data = data
    sls.stores[("my-sls-project", "ack-mig-hook")] = []
    env["ACK_MIG_SLS_ENDPOINT"] = sls.endpoint
    try:
        done = cli(env, "logs")
    finally:
        sls.stop()
    assert "ProjectNotExist" not in done.stderr
    assert done.returncode in (0, 1) and "internal error" not in done.stderr, done.stderr[-400:]
    assert len(done.stderr) < 2000


def test_a_huge_sls_error_code_is_one_bounded_line(cloud):
    ros, fc, env = cloud
    seed_stack(ros)
    sls = SlsEmulator(access_key_id=KEY, secret=SECRET, token=TOKEN).start()
    sls.stores[("my-sls-project", "ack-mig-hook")] = []
    sls.fault = (400, "Bad" * 20000)
    env["ACK_MIG_SLS_ENDPOINT"] = sls.endpoint
    try:
        done = cli(env, "logs")
    finally:
        sls.stop()
    assert done.returncode not in (0, 70) and "SLS GetLogs" in done.stderr
    assert len(done.stderr) < 2000, len(done.stderr)
