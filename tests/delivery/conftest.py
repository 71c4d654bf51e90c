"""Fixtures for the delivery tests: a small fake node bundle (so transport tests do not depend on the
node code's behaviour), the RPC emulator with test credentials, and the real sshd."""

import os
import sys

import pytest

from functions.delivery import bundle as bundle_mod
from functions.delivery.node_script import node_args
from functions.delivery.outcome import NodeTarget
from functions.cloud.rpc import ECS_VERSION, ESS_VERSION, Backoff, RpcClient
from functions.delivery.transport import ScriptMaker
from functions.base.settings import Credentials, Endpoint
from tests.support.rpc_emulator import Emulator
from tests.support.sshd import sshd  # noqa: F401  (fixture)

# A stand-in for node_bootstrap's CLI: echoes what it was asked, behaves as its --fake-* options say.
FAKE_MAIN = b'''
import base64, json, sys, time
args = sys.argv[1:]
def opt(name, default=None):
    return args[args.index(name) + 1] if name in args else default
doc = json.loads(base64.b64decode(opt("--request-b64")).decode())
if opt("--fake-child"):  # a child of its own (a tool it started); --fake-escape: one that left the group
    import os, subprocess
    child = subprocess.Popen(["sleep", "60"], start_new_session=bool(opt("--fake-escape")))
    with open(opt("--fake-child"), "w") as fh:
        fh.write(str(child.pid))
if opt("--fake-pid"):  # its own pid, so a test can see it ended
    import os
    with open(opt("--fake-pid"), "w") as fh:
        fh.write(str(os.getpid()))
if opt("--fake-env"):  # the environment it was started with, so a test can see what reached the node tool
    import os
    with open(opt("--fake-env"), "w") as fh:
        json.dump(dict(os.environ), fh)
if opt("--fake-ignore-term"):  # a process that will not stop on SIGTERM: only SIGKILL ends it
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(float(opt("--fake-sleep", 0)))
sys.stderr.write("fake node: working\\n")
if opt("--fake-silent"):
    sys.exit(1)
code = int(opt("--fake-exit", 0))
outcome = {0: "success", 5: "reboot-required"}.get(code, "failed")
result = {"outcome": outcome, "changes": int(opt("--fake-changes", 2)), "sequence": doc["partition"]["value"],
          "node_name": opt("--node-name"), "request": doc, "argv": args,
          "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-40GB", "diagram": "slot 0 1\\n# #"} for i in range(2)]}
if code not in (0, 5):
    result["error"] = {"code": "gpu-busy", "message": "GPU 0 has running processes"}
if opt("--fake-stderr-flood"):  # 200 long lines of non-ASCII text: far past Cloud Assistant's 24 KB of output
    for n in range(200):
        sys.stderr.write("fake node: \\u00e9tape %d %s\\n" % (n, "\\u00e9" * 5000))
print("a log line")
print(json.dumps(result))
sys.exit(code)
'''

SECRET = "s3cr3t-Value-that-must-not-leak"
TOKEN = "sts-TOKEN-that-must-not-leak"


@pytest.fixture(scope="session")
def fake_bundle():
    return bundle_mod.pack([("node_bootstrap/__init__.py", b""), ("node_bootstrap/__main__.py", FAKE_MAIN)])


@pytest.fixture
def node_root(tmp_path):
    return str(tmp_path / "node-root")


@pytest.fixture
def maker(fake_bundle, node_root):
    return ScriptMaker(fake_bundle, 30, node_root, sys.executable)


def targets(count, extra=(), value="3g.20gb-3g.20gb", address="127.0.0.1", prefix="i-t"):
    args = tuple(node_args({"kind": "sequence", "value": value}, extra))
    return [NodeTarget("%s%04d" % (prefix, n), "cn-test.10.0.%d.%d" % (n // 250, n % 250), address, args)
            for n in range(count)]


@pytest.fixture
def emulator():
    with Emulator(access_key_id="LTAIdelivery", secret=SECRET, token=TOKEN) as emu:
        yield emu


def rpc(emu, product="ecs", secret=SECRET, attempts=4, timeout_s=5):
    host = emu.endpoint.split("://", 1)[1]
    return RpcClient(product, ECS_VERSION if product == "ecs" else ESS_VERSION, emu.region,
                     Credentials(emu.access_key_id, secret, emu.token), Endpoint(host, "http"), timeout_s=timeout_s,
                     backoff=Backoff(attempts, sleep=lambda s: None))


@pytest.fixture
def ecs(emulator):
    return rpc(emulator)


def node_dirs(root):
    return sorted(os.listdir(os.path.join(root, "bundles"))) if os.path.isdir(os.path.join(root, "bundles")) else []
