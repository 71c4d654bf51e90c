"""An auto pool's plan reaches the node (issue 27): the planner's per-GPU targets, made into the node request
by the function (node_script.per_gpu_partition / node_args), applied by node_bootstrap on the simulated
driver: every GPU ends holding its target, the instance in use keeps its id, and pods for three profiles
get instances without a drain."""

import base64
import json

from functions.decision.layout import Bounds, GpuSupply, Instance, PodDemand, plan
from functions.delivery.node_script import node_args, per_gpu_partition
from node_bootstrap.mig import find_gpu
from tests.node.nodecli import Node, gi_id, lay_out

A100_40 = "NVIDIA A100-SXM4-40GB"
MODEL = find_gpu(A100_40)


def test_the_plan_applied_on_the_node_gives_each_gpu_its_target(tmp_path):
    node = Node(tmp_path, count=2)  # A100-SXM4-40GB
    lay_out(node, [[("3g.20gb", 0)], [("7g.40gb", 0)]])
    serving = gi_id(node, 0, 0)
    supply = [GpuSupply("n1", 0, A100_40, (Instance("3g.20gb", 0, True),)),
              GpuSupply("n1", 1, A100_40, (Instance("7g.40gb", 0, False),))]
    demand = [PodDemand("llm/a", "deployment llm/a", "1g.5gb", 2), PodDemand("llm/b", "deployment llm/b", "2g.10gb"),
              PodDemand("llm/c", "deployment llm/c", "3g.20gb"),
              PodDemand("llm/run", "deployment llm/run", "3g.20gb", pending=False, node="n1")]
    result = plan(supply, demand, Bounds())
    assert result.unserved == () and result.changes
    argv = node_args(per_gpu_partition(result.targets))
    request = argv[argv.index("--request-b64") + 1]
    assert json.loads(base64.b64decode(request))["version"] == 2
    res = node.run("apply", "--request-b64", request)
    assert res.rc == 0 and res.json["outcome"] == "success", res.stderr
    for target in result.targets:
        held = [(gi["profile_id"], gi["start"]) for gi in node.sim()["gpus"][target.index]["gis"]]
        assert sorted((MODEL.profile_by_id(p).name, s) for p, s in held) == sorted(target.layout)
    assert gi_id(node, 0, 0) == serving  # the instance in use was never touched
    counts = {}
    for gpu in node.sim()["gpus"]:
        for gi in gpu["gis"]:
            counts[gi["profile_id"]] = counts.get(gi["profile_id"], 0) + 1
    named = {MODEL.profile_by_id(p).name: n for p, n in counts.items()}
    assert named.get("1g.5gb", 0) >= 2 and named.get("2g.10gb", 0) >= 1 and named.get("3g.20gb", 0) >= 2
