"""Fan-out: many nodes at once through the real transports, against loopback stand-ins.

Cloud Assistant: the real core SDK against ``tests/support/rpc_emulator.py`` with ``latency_s`` added to
every API call (signature checks and limits enforced as in the tests). The nodes are the emulator's
``SimNode`` model: the node script's run time is modelled (``duration_s``), since 200 real nodes cannot
run on this machine; everything on the function's side is real. The transport runs with its own
defaults (``poll_s`` 1 s, the steady interval of the first minute), as ``make_transport`` builds it.
Ideal = node script time + one submit round trip (the API latency) + one poll interval: a result can
be seen at most one interval after it exists.

SSH: a real OpenSSH sshd on 127.0.0.1 (``tests/support/sshd.py``); every node is a separate connection,
authentication and exec, the real node script (``command.py`` template + ``node_runner.py``) runs a
bundle whose ``node_bootstrap`` sleeps ``node_s`` (a real 1 s of work per node) and prints a result.
The bundle is warm (installed by one run first), as it is on every event after a node's first.
Ideal = ceil(nodes / concurrency) x node time. Also reported: CPU per node on each side, because here
all the "nodes" share this machine's cores, which no real cluster does.
"""

import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter

import _path  # noqa: F401

from functions.delivery import bundle as bundle_mod
from functions.delivery.cloud_assistant import CloudAssistantTransport
from functions.delivery.node_script import node_args
from functions.delivery.outcome import NodeTarget, outcome
from functions.cloud.rpc import ECS_VERSION, Backoff, RpcClient
from functions.delivery.ssh import SshTransport, load_key
from functions.delivery.transport import ScriptMaker
from functions.base.settings import Credentials, DeliverySettings, Endpoint
from tests.support.rpc_emulator import Emulator, SimNode
from tests.support.sshd import SSHD, Sshd

SEQUENCE = {"kind": "sequence", "value": "3g.20gb-3g.20gb"}

# A node_bootstrap stand-in for the SSH fan-out: really sleeps, then prints a result like the node's.
SLEEPING_MAIN = b'''
import base64, json, sys, time
args = sys.argv[1:]
doc = json.loads(base64.b64decode(args[args.index("--request-b64") + 1]).decode())
time.sleep(float(args[args.index("--bench-sleep") + 1]))
print(json.dumps({"outcome": "success", "changes": 1, "sequence": doc["partition"]["value"], "gpus": []}))
'''


def _no_proxy():
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)  # loopback only: the SDK would honour a proxy


def cloud_assistant(nodes=200, latency_s=0.05, node_s=2.0):
    _no_proxy()
    with Emulator(latency_s=latency_s) as emu:
        ids = emu.add_nodes(nodes, lambda iid: SimNode(duration_s=node_s))
        ecs = RpcClient("ecs", ECS_VERSION, emu.region, Credentials(emu.access_key_id, emu.secret, emu.token),
                        Endpoint(emu.endpoint.split("://", 1)[1], "http"), 10, Backoff(5))
        maker = ScriptMaker(bundle_mod.build(), DeliverySettings().node_timeout_s)
        transport = CloudAssistantTransport(ecs, maker)  # the product's default agent wait and poll interval
        args = tuple(node_args(SEQUENCE))
        targets = [NodeTarget(iid, "cn-beijing.192.168.%d.%d" % (n // 250, n % 250), "", args)
                   for n, iid in enumerate(ids)]
        started = time.perf_counter()
        results = transport.run(targets)
        wall = time.perf_counter() - started
        polls = Counter(p["InvokeId"] for a, p in emu.requests if a == "DescribeInvocationResults")
        per_instance = sum(1 for a, p in emu.requests if a == "DescribeInvocationResults" and "InstanceId" in p)
        calls = dict(emu.calls)
    ok = sum(1 for r in results if outcome(r).outcome == "partitioned")
    ideal = node_s + latency_s + transport.poll_s
    return {
        "fanout_cloud_assistant_ratio": round(wall / ideal, 3),
        "fanout_cloud_assistant_wall_s": round(wall, 3),
        "fanout_cloud_assistant_ideal_s": round(ideal, 3),
        "fanout_cloud_assistant_settings": {"nodes": nodes, "api_latency_s": latency_s, "node_script_s": node_s,
                                            "poll_s": transport.poll_s, "batch": 100},
        "fanout_cloud_assistant_ok": ok,
        "fanout_cloud_assistant_calls": calls,
        "fanout_cloud_assistant_runcommand_calls": calls.get("RunCommand", 0),
        "fanout_cloud_assistant_result_calls_per_batch": sorted(polls.values()),
        "fanout_cloud_assistant_per_instance_polls": per_instance,
    }


def _tree_cpu_s(pid):
    """CPU seconds of ``pid`` and of its children it has waited for (sshd reaps every session)."""
    with open("/proc/%d/stat" % pid) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _shell_rc_ms(runs=5):
    """What the login shell costs before it runs anything, as sshd starts it: bash sources ~/.bashrc
    when SSH_CLIENT is set at shell level 1 (Debian's SSH_SOURCE_BASHRC)."""
    env = {k: v for k, v in os.environ.items() if k != "SHLVL"}
    env["SSH_CLIENT"] = "127.0.0.1 1 22"
    shell = os.environ.get("SHELL") or "/bin/sh"
    started = time.perf_counter()
    for _ in range(runs):
        subprocess.run([shell, "-c", "true"], env=env, stdin=subprocess.DEVNULL, check=False)
    return round((time.perf_counter() - started) / runs * 1000, 1)


def ssh(nodes=64, node_s=1.0, rounds=1):
    if not os.path.exists(SSHD):
        return {"fanout_ssh_ratio": None, "fanout_ssh_error": "OpenSSH sshd is not installed (make sshd)"}
    concurrency = DeliverySettings().ssh_concurrency
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as work:
        server = Sshd(work).start()
        try:
            fake = bundle_mod.pack([("node_bootstrap/__init__.py", b""), ("node_bootstrap/__main__.py", SLEEPING_MAIN)])
            maker = ScriptMaker(fake, 60, os.path.join(work, "node-root"), sys.executable)
            transport = SshTransport(maker, load_key(path=server.client_key), server.known_hosts, port=server.port,
                                     concurrency=concurrency)
            args = tuple(node_args(SEQUENCE, ("--bench-sleep", str(node_s))))
            targets = [NodeTarget("i-bench%04d" % n, "node-%d" % n, "127.0.0.1", args) for n in range(nodes)]
            first = transport.run(targets[:1])[0]  # installs the bundle: the nodes below are warm
            if outcome(first).outcome != "partitioned":
                return {"fanout_ssh_ratio": None, "fanout_ssh_error": outcome(first).reason}
            walls, cpu_client, cpu_nodes, ok = [], 0.0, 0.0, 0
            for _ in range(rounds):
                r0, s0 = resource.getrusage(resource.RUSAGE_SELF), _tree_cpu_s(server.proc.pid)
                started = time.perf_counter()
                results = transport.run(targets)
                walls.append(time.perf_counter() - started)
                r1, s1 = resource.getrusage(resource.RUSAGE_SELF), _tree_cpu_s(server.proc.pid)
                cpu_client += (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
                cpu_nodes += s1 - s0
                ok = sum(1 for r in results if outcome(r).outcome == "partitioned")
        finally:
            server.stop()
    wall = sorted(walls)[len(walls) // 2]
    ideal = math.ceil(nodes / concurrency) * node_s
    cores = os.cpu_count() or 1
    node_cpu_ms = cpu_nodes / rounds / nodes * 1000
    return {
        "fanout_ssh_ratio": round(wall / ideal, 3),
        "fanout_ssh_wall_s": round(wall, 3),
        "fanout_ssh_ideal_s": round(ideal, 3),
        "fanout_ssh_settings": {"nodes": nodes, "node_script_s": node_s, "concurrency": concurrency,
                                "cores": cores, "rounds": rounds},
        "fanout_ssh_ok": ok,
        "fanout_ssh_function_cpu_ms_per_node": round(cpu_client / rounds / nodes * 1000, 1),
        "fanout_ssh_node_cpu_ms_per_node": round(node_cpu_ms, 1),
        "fanout_ssh_login_shell_ms": _shell_rc_ms(),
        # The floor this machine imposes: all node-side CPU shared by its cores, plus the last node's sleep.
        "fanout_ssh_cpu_floor_s": round(nodes * node_cpu_ms / 1000 / cores + node_s, 2),
    }


def measure(quick=True):
    out = cloud_assistant()
    # The result is seen at the first poll after the node ends, so the ratio depends on where the end falls
    # between two polls: a 2.2 s node ends just after the second poll and waits almost a whole interval.
    late = cloud_assistant(node_s=2.2)
    out["fanout_cloud_assistant_ratio_late_phase"] = late["fanout_cloud_assistant_ratio"]
    out.update(ssh(rounds=1 if quick else 3))
    return out


if __name__ == "__main__":
    print(json.dumps(measure(quick="--quick" in sys.argv), indent=2))
