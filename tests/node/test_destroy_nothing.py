"""A "destroy nothing" apply (``--no-destroy``, or ``"destroy": false`` in the request document): it adds
instances in free slots, and refuses before any change, with its own outcome (destroy-required, exit 7),
a node whose real placements would need an instance destroyed, a mode change or a reset (issue 18,
point 3: the function falls back to a drained rollout on that answer)."""

import base64
import json
import os

import pytest

from tests.node.nodecli import Node, gi_id, lay_out

ADDED = "3g.20gb-2g.10gb-1g.5gb"


def _b64(doc):
    return base64.b64encode(json.dumps(doc).encode()).decode()


def test_instances_are_added_beside_the_existing_ones(tmp_path):
    node = Node(tmp_path, count=2)
    lay_out(node, [[("3g.20gb", 0)]] * 2)
    kept = [gi_id(node, i, 0) for i in range(2)]
    res = node.run("apply", "--sequence", ADDED, "--no-destroy")
    assert res.rc == 0 and res.json["outcome"] == "success", res.stderr
    assert res.json["changes"] == 8  # two GPU instances and two compute instances per GPU, nothing else
    assert [gi_id(node, i, 0) for i in range(2)] == kept
    assert node.layout(0) == node.layout(1) == [(9, 0, 1), (14, 4, 1), (19, 6, 1)]


@pytest.mark.kube
def test_a_destroy_it_was_told_not_to_do_is_refused_with_its_own_outcome(tmp_path, kube_api):
    node = Node(tmp_path, count=2)
    kube_api.add_node("node-a", labels={"nvidia.com/mig.config.state": "success",
                                        "aliyun.accelerator/nvidia_mig_sequence": "3g.20gb-2g.10gb-1g.5gb"})
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a"))
    # GPU 1 was laid out elsewhere: its 2g.10gb sits where the request's 3g.20gb must go
    lay_out(node, [[("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)], [("2g.10gb", 0), ("2g.10gb", 4)]])
    before = open(node.state).read()
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--no-destroy")
    assert res.rc == 7, res.stderr
    assert res.json["outcome"] == "failed" and res.json["error"]["code"] == "destroy-required"
    message = res.json["error"]["message"]
    assert "GPU 0 needs destroying GPU instances %d, %d" % (gi_id(node, 0, 4), gi_id(node, 0, 6)) in message
    assert "GPU 1 needs destroying GPU instance" in message and "\n" not in message
    assert res.json["changes"] == 0 and open(node.state).read() == before
    # the labels still describe the node's unchanged layout; an Event says why nothing happened
    meta = kube_api.nodes["node-a"]["metadata"]
    assert res.json["labels"]["states"] == []
    assert meta["labels"]["nvidia.com/mig.config.state"] == "success"
    assert meta["labels"]["aliyun.accelerator/nvidia_mig_sequence"] == "3g.20gb-2g.10gb-1g.5gb"
    assert res.json["event"] == {"reason": "MigDestroyRequired", "written": True}
    event = [e for e in kube_api.events.values() if e["reason"] == "MigDestroyRequired"][-1]
    assert event["type"] == "Normal" and event["message"] == message


@pytest.mark.parametrize("layout, fragment", [
    ([[]], "GPU 0 needs a MIG mode change"),  # MIG off: turning it on may reset the GPU
    ([[("3g.20gb", 0), ("3g.20gb", 4)]], "GPU 0 needs destroying GPU instances"),
])
def test_a_mode_change_or_a_destroy_is_refused(tmp_path, layout, fragment):
    node = Node(tmp_path, count=1)
    lay_out(node, layout)
    before = open(node.state).read()
    res = node.run("apply", "--size", "1g.5gb", "--no-destroy")
    assert res.rc == 7 and fragment in res.json["error"]["message"], res.stderr
    assert open(node.state).read() == before


def test_replacing_the_compute_instances_of_a_kept_instance_is_a_destroy_too(tmp_path):
    node = Node(tmp_path, count=1)
    state = lay_out(node, [[("3g.20gb", 0)]])
    gpu = state["gpus"][0]
    gpu["gis"][0]["cis"] = [{"id": 0, "profile_id": 0}]  # a 1-slice compute instance in a 3-slice GPU instance
    with open(node.state, "w") as fh:
        json.dump(state, fh)
    res = node.run("apply", "--sequence", "3g.20gb", "--no-destroy")
    assert res.rc == 7 and "replacing the compute instances of GPU instance %d" % gpu["gis"][0]["id"] in \
        res.json["error"]["message"]


def test_the_request_document_carries_it(tmp_path):
    node = Node(tmp_path, count=1)
    lay_out(node, [[("3g.20gb", 0), ("3g.20gb", 4)]])
    doc = {"version": 1, "partition": {"kind": "sequence", "value": ADDED}, "destroy": False}
    res = node.run("apply", "--request-b64", _b64(doc))
    assert res.rc == 7 and res.json["error"]["code"] == "destroy-required", res.stderr
    doc["destroy"] = True  # (absent is the same)
    assert node.run("apply", "--request-b64", _b64(doc)).rc == 0
    doc["destroy"] = "no"
    bad = node.run("apply", "--request-b64", _b64(doc))
    assert bad.rc == 2 and '"destroy" must be true or false' in bad.json["error"]["message"]


def test_the_boot_unit_of_a_no_destroy_apply_re_applies_without_it(tmp_path):
    """After a reboot no instance is left and Hopper may come back with MIG off: the boot unit must be free
    to turn MIG on, so neither its request file nor its options say "destroy nothing"."""
    node = Node(tmp_path, count=1)
    lay_out(node, [[("3g.20gb", 0)]])
    root = tmp_path / "root"
    res = node.run("apply", "--sequence", ADDED, "--no-destroy", "--boot-unit", "--boot-unit-root", str(root))
    assert res.rc == 0 and res.json["boot_unit"]["installed"] is True, res.stderr
    request = json.loads((root / "etc/ack-mig-hook/request.json").read_text())
    assert "destroy" not in request
    unit = (root / "etc/systemd/system/ack-mig-hook.service").read_text()
    assert "--no-destroy" not in unit and os.path.exists(str(root))
