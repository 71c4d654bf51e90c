"""A node with two GPU models: the sequence label names one layout for the node, so it is written only
when every GPU holds that layout; a request that gives the models different layouts is refused before
any change, with the reason on the node (issue 18, point 5)."""

import json
import os

from tests.node.nodecli import Node, lay_out

SEQUENCE_LABEL = "aliyun.accelerator/nvidia_mig_sequence"
STATE = "nvidia.com/mig.config.state"


def _mixed(tmp_path):
    """GPU 0 an A100-SXM4-40GB, GPU 1 an A100-SXM4-80GB, both with MIG off (state file: gpus[].gpu)."""
    node = Node(tmp_path, count=2)
    node.kube_args = []  # labels go to the simulated node's stand-in
    lay_out(node, [[], []], models=["A100-SXM4-40GB", "A100-80GB"])
    return node


def _labels(node):
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        return json.load(fh)


def test_the_simulated_node_answers_each_gpus_own_model(tmp_path):
    gpus = _mixed(tmp_path).run("status").json["gpus"]
    assert [(g["name"], g["pci_device_id"]) for g in gpus] == [("NVIDIA A100-SXM4-40GB", "0x20b010de"),
                                                                ("NVIDIA A100-SXM4-80GB", "0x20b210de")]


def test_a_request_that_gives_the_models_different_layouts_is_refused_and_says_why(tmp_path):
    node = _mixed(tmp_path)
    before = open(node.state).read()
    # 1g.10gb: the 40GB's double-memory 1-slice profile (x4), the 80GB's plain one (x7)
    res = node.run("apply", "--size", "1g.10gb")
    assert res.rc == 2 and res.json["error"]["code"] == "mixed-layouts", res.stderr
    message = res.json["error"]["message"]
    assert "GPU 0 (NVIDIA A100-SXM4-40GB) 1g.10gb-1g.10gb-1g.10gb-1g.10gb" in message
    assert "GPU 1 (NVIDIA A100-SXM4-80GB) " + "-".join(["1g.10gb"] * 7) in message
    assert res.json["changes"] == 0 and open(node.state).read() == before
    labels = _labels(node)
    assert labels["labels"][STATE] == "failed" and SEQUENCE_LABEL not in labels["labels"]
    assert labels["annotations"]["ack-mig-hook/mig-config-reason"] == message
    plan = node.run("plan", "--size", "1g.10gb").json
    assert plan["warnings"] == ["apply will be refused as mixed-layouts: " + message]


def test_a_layout_every_gpu_holds_is_labelled(tmp_path):
    node = _mixed(tmp_path)
    res = node.run("apply", "--sequence", "1g.10gb-1g.10gb")  # the same names on both, other profile ids
    assert res.rc == 0, res.stderr
    assert res.json["sequence"] == "1g.10gb-1g.10gb"
    assert _labels(node)["labels"][SEQUENCE_LABEL] == "1g.10gb-1g.10gb"
    assert [gi["profile_id"] for gi in node.sim()["gpus"][0]["gis"]] == [15, 15]  # 40GB: the 1-slice 10 GB
    assert [gi["profile_id"] for gi in node.sim()["gpus"][1]["gis"]] == [19, 19]  # 80GB: its smallest
