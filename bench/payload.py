"""The largest request content the product sends to Cloud Assistant, measured on the wire.

A cold batch of 100 nodes (RunCommand's maximum) with long node names and the longest label value a
Kubernetes label can hold is run through the real transport against the loopback emulator: the first
RunCommand finds no bundle, the bundle goes out in SendFile parts, and the script runs again. The sizes
are those of the base64 ``CommandContent`` and ``Content`` parameters the emulator received.
Limits (facts.md): RunCommand content <= 24 KB base64 with KeepCommand=false; SendFile content <= 32 KB.
"""

import json
import os

import _path  # noqa: F401

from functions.delivery import bundle as bundle_mod
from functions.delivery.cloud_assistant import CloudAssistantTransport
from functions.delivery.node_script import node_args
from functions.delivery.outcome import NodeTarget, outcome
from functions.cloud.rpc import ECS_VERSION, Backoff, RpcClient
from functions.delivery.transport import ScriptMaker
from functions.base.settings import Credentials, DeliverySettings, Endpoint
from tests.support.rpc_emulator import Emulator, SimNode

RUNCOMMAND_LIMIT = 24 * 1024
SENDFILE_LIMIT = 32 * 1024
LONGEST_LABEL = "-".join(["1g.5gb"] * 9)[:63].rstrip("-")  # label values stop at 63 characters


def measure(nodes=100):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)
    bundle = bundle_mod.build()
    with Emulator() as emu:
        ids = emu.add_nodes(nodes, lambda iid: SimNode(bundle=False))
        ecs = RpcClient("ecs", ECS_VERSION, emu.region, Credentials(emu.access_key_id, emu.secret, emu.token),
                        Endpoint(emu.endpoint.split("://", 1)[1], "http"), 10, Backoff(5))
        transport = CloudAssistantTransport(ecs, ScriptMaker(bundle, DeliverySettings().node_timeout_s),
                                            poll_s=0.05, poll_max_s=0.1)
        args = tuple(node_args({"kind": "sequence", "value": LONGEST_LABEL}))
        # ACK names nodes <region>.<private IP>: the longest region id and IP there are.
        targets = [NodeTarget(iid, "ap-southeast-1.192.168.%d.%d" % (200 + n // 250, 100 + n % 150), "", args)
                   for n, iid in enumerate(ids)]
        results = transport.run(targets)
        run_sizes = [len(p["CommandContent"]) for a, p in emu.requests if a == "RunCommand"]
        send_sizes = [len(p["Content"]) for a, p in emu.requests if a == "SendFile"]
        rejected = list(emu.rejected)
    ok = sum(1 for r in results if outcome(r).outcome == "partitioned")
    largest = max(run_sizes + send_sizes)
    return {
        "payload_bytes_max": largest,
        "payload_runcommand_bytes_max": max(run_sizes),
        "payload_runcommand_limit": RUNCOMMAND_LIMIT,
        "payload_sendfile_bytes_max": max(send_sizes),
        "payload_sendfile_limit": SENDFILE_LIMIT,
        "payload_fits": max(run_sizes) <= RUNCOMMAND_LIMIT and max(send_sizes) <= SENDFILE_LIMIT and not rejected,
        "payload_transport_largest": transport.largest_request,
        "payload_bundle_bytes": len(bundle.packed),
        "payload_sendfile_parts": len(bundle.chunks()),
        "payload_nodes_ok": ok,
        "payload_batch_nodes": nodes,
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
