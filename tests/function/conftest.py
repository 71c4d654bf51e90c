import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVENTS = os.path.join(ROOT, "tests", "events")
INVENTORY = os.path.join(ROOT, "examples", "inventory.json")

# Test credentials shared with the emulator (never real ones).
AK, SECRET, TOKEN = "LTAItestkey", "test-secret-value-7f3a9c", "sts-token-value-b81e44"


def event_bytes(name):
    with open(os.path.join(EVENTS, name), "rb") as handle:
        return handle.read()


def event_json(name):
    return json.loads(event_bytes(name))


@pytest.fixture
def inventory_dict():
    with open(INVENTORY) as handle:
        return json.load(handle)


@pytest.fixture
def no_proxy(monkeypatch):
    # The SDK honours HTTP(S)_PROXY: loopback traffic must never leave through a proxy.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def emulator(inventory_dict, no_proxy):
    """The CS emulator with the snapshot; ``emu.ess`` is an Auto Scaling emulator with the snapshot's
    scaling groups and hooks (the membership checks ask it), so no test reaches a real endpoint."""
    from tests.support.cs_emulator import CsEmulator
    from tests.support.rpc_emulator import Emulator

    with CsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN).load_inventory(inventory_dict) as emu, \
            Emulator(AK, SECRET, TOKEN, "cn-beijing").load_inventory(inventory_dict) as ess:
        emu.ess = ess
        yield emu


# The CS emulator's default kubeconfig names a loopback port where nothing listens: a test that does not look
# at the Kubernetes side tries each call once (cloud_env(emu, **ONE_KUBE_TRY)), not five times with backoff.
ONE_KUBE_TRY = {"ACK_MIG_KUBE_MAX_ATTEMPTS": "1"}


def cloud_env(emu, **extra):
    env = {"ACK_MIG_CS_ENDPOINT": emu.endpoint, "ACK_MIG_REGION": "cn-beijing",
           "ALIBABA_CLOUD_ACCESS_KEY_ID": AK, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
           "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN, "ACK_MIG_CLUSTER_ID": emu.cluster_id,
           "ACK_MIG_API_TIMEOUT_S": "2"}
    if getattr(emu, "ess", None) is not None:
        env["ACK_MIG_ESS_ENDPOINT"] = emu.ess.endpoint
    env.update(extra)
    return env


@pytest.fixture
def kms():
    """A KMS emulator in cn-beijing that knows the test credentials, with the secrets cache empty around it."""
    from functions.cloud import secrets
    from tests.support.kms_emulator import KmsEmulator

    secrets.forget_all()
    with KmsEmulator(access_key_id=AK, secret=SECRET, token=TOKEN, region="cn-beijing") as emu:
        yield emu
    secrets.forget_all()
