"""Fan-out at scale: 10,000 nodes in one event over Cloud Assistant, against the loopback ECS emulator.

The emulator (``tests/support/rpc_emulator.py``, signatures and limits enforced, ``latency_s`` = 50 ms
added to every API call) runs in this process; the function side (the real core SDK and
:class:`~functions.delivery.cloud_assistant.CloudAssistantTransport` with its product defaults, the real
node bundle) runs in a fresh child process, so its peak RSS (``VmHWM``, tests/support/peak_rss.py) is the function's alone.
Every node is a ``SimNode`` whose script takes ``node_s`` = 3 s.

Ideal = node script + one poll interval (a result is seen at most one interval late) + the round trips
the transport cannot overlap: the first agent-status round (100 ids a call) and the RunCommand submits
(100 instances each), each ``ceil(calls / calls in flight) x latency``. Reported beside the ratio: the
call counts per action, the order check (every RunCommand before the first result poll) and the peak RSS.

    python bench/fanout_10k.py [NODES]
"""

import json
import math
import os
import subprocess
import sys
import time

import _path  # noqa: F401

from tests.support.peak_rss import peak_rss_mb  # noqa: E402  (the child's own peak, not its parent's)

LATENCY_S = 0.05
NODE_S = 3.0


def _child(endpoint: str, access_key_id: str, secret: str, token: str, region: str, nodes: int) -> dict:
    """The function's side, in its own process: one transport run over ``nodes`` targets."""
    from functions.delivery import bundle as bundle_mod
    from functions.delivery.cloud_assistant import CALLS_IN_FLIGHT, CloudAssistantTransport
    from functions.delivery.node_script import node_args
    from functions.delivery.outcome import NodeTarget, outcome
    from functions.cloud.rpc import ECS_VERSION, Backoff, RpcClient
    from functions.delivery.transport import ScriptMaker
    from functions.base.settings import Credentials, DeliverySettings, Endpoint

    ecs = RpcClient("ecs", ECS_VERSION, region, Credentials(access_key_id, secret, token),
                    Endpoint(endpoint.split("://", 1)[1], "http"), 10, Backoff(5))
    transport = CloudAssistantTransport(ecs, ScriptMaker(bundle_mod.build(), DeliverySettings().node_timeout_s))
    args = tuple(node_args({"kind": "sequence", "value": "3g.20gb-3g.20gb"}))
    targets = [NodeTarget("i-emu%05d" % n, "cn-beijing.10.%d.%d.%d" % (n // 62500, n // 250 % 250, n % 250), "",
                          args) for n in range(nodes)]
    started = time.perf_counter()
    results = transport.run(targets)
    wall = time.perf_counter() - started
    kinds = [kind for kind, _ in transport.trace]
    first_poll = kinds.index("poll") if "poll" in kinds else len(kinds)
    return {"wall_s": wall, "ok": sum(1 for r in results if outcome(r).outcome == "partitioned"),
            "rss_mb": peak_rss_mb(),
            "submits": kinds.count("submit"), "submits_before_first_poll": kinds[:first_poll].count("submit"),
            "poll_rounds": kinds.count("round"), "poll_s": transport.poll_s,
            "calls_in_flight": CALLS_IN_FLIGHT}


def measure(nodes: int = 10_000, latency_s: float = LATENCY_S, node_s: float = NODE_S) -> dict:
    from tests.support.rpc_emulator import Emulator, SimNode

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)  # loopback only: the SDK would honour a proxy
    with Emulator(latency_s=latency_s) as emu:
        for n in range(nodes):
            emu.nodes["i-emu%05d" % n] = SimNode(duration_s=node_s)
        config = [emu.endpoint, emu.access_key_id, emu.secret, emu.token, emu.region, str(nodes)]
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"] + config,
                              capture_output=True, text=True, timeout=600)
        calls = dict(emu.calls)
    if proc.returncode != 0:
        return {"fanout_cloud_assistant_10k_ratio": None,
                "fanout_cloud_assistant_10k_error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    in_flight = child["calls_in_flight"]
    status_first_round = math.ceil(nodes / 100)  # DescribeCloudAssistantStatus: 100 ids a call
    unoverlapped = (math.ceil(status_first_round / in_flight) + math.ceil(calls.get("RunCommand", 0) / in_flight)) \
        * latency_s
    ideal = node_s + child["poll_s"] + unoverlapped
    return {
        "fanout_cloud_assistant_10k_ratio": round(child["wall_s"] / ideal, 3),
        "fanout_cloud_assistant_10k_rss_mb": round(child["rss_mb"], 1),
        "fanout_cloud_assistant_10k_wall_s": round(child["wall_s"], 3),
        "fanout_cloud_assistant_10k_ideal_s": round(ideal, 3),
        "fanout_cloud_assistant_10k_ideal_parts": {"node_script_s": node_s, "poll_interval_s": child["poll_s"],
                                                   "unoverlapped_round_trips_s": round(unoverlapped, 3)},
        "fanout_cloud_assistant_10k_ok": child["ok"],
        "fanout_cloud_assistant_10k_calls": calls,
        "fanout_cloud_assistant_10k_submits_before_first_poll": child["submits_before_first_poll"],
        "fanout_cloud_assistant_10k_poll_rounds": child["poll_rounds"],
        "fanout_cloud_assistant_10k_settings": {"nodes": nodes, "api_latency_s": latency_s, "node_script_s": node_s,
                                                "calls_in_flight": in_flight, "batch": 100},
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        endpoint, key, secret, token, region, count = sys.argv[2:8]
        print(json.dumps(_child(endpoint, key, secret, token, region, int(count))))
    else:
        print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000), indent=2))
