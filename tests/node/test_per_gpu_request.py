"""A per-GPU request (version 2, auto pools, issue 27): each listed GPU gets its own layout; apply destroys
only the instances a layout leaves out, leaves a GPU as it is when a process runs in one of those, and labels
the node with what each GPU holds (the layouts annotation; no one sequence when they differ)."""

import os
import base64
import json

import pytest

from node_bootstrap.errors import BadInput
from node_bootstrap.request import GpuLayouts, request_document, request_from_document
from node_bootstrap.driver.sim.faults import process_on_pid
from tests.node.nodecli import Node, gi_id, lay_out


def _b64(doc):
    return base64.b64encode(json.dumps(doc).encode()).decode()


def per_gpu(*gpus, destroy=True):
    return {"version": 2, "kind": "per-gpu", "destroy": destroy,
            "gpus": [{"index": i, "layout": [{"profile": p, "start": s} for p, s in pairs]} for i, pairs in gpus]}


def test_each_gpu_gets_its_own_layout_and_kept_instances_keep_their_ids(tmp_path):
    node = Node(tmp_path, count=2)  # A100-SXM4-40GB
    lay_out(node, [[("3g.20gb", 0)], [("7g.40gb", 0)]])
    kept = gi_id(node, 0, 0)
    doc = per_gpu((0, [("3g.20gb", 0), ("1g.5gb", 4), ("1g.5gb", 5)]), (1, [("2g.10gb", 0), ("2g.10gb", 2)]))
    res = node.run("apply", "--request-b64", _b64(doc))
    assert res.rc == 0 and res.json["outcome"] == "success", res.stderr
    assert node.layout(0) == [(9, 0, 1), (19, 4, 1), (19, 5, 1)] and gi_id(node, 0, 0) == kept
    assert node.layout(1) == [(14, 0, 1), (14, 2, 1)]  # the idle 7g.40gb was repartitioned


def test_a_gpu_that_turned_busy_is_left_as_it_is_and_the_others_change(tmp_path):
    node = Node(tmp_path, count=2)
    lay_out(node, [[("3g.20gb", 0), ("3g.20gb", 4)], [("7g.40gb", 0)]])
    before0 = node.layout(0)
    # the plan frees GPU 0's 3g.20gb at 4 for two 2g.10gb, but a process started in it since
    doc = per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]), (1, [("3g.20gb", 0), ("3g.20gb", 4)]))
    res = node.run("apply", "--request-b64", _b64(doc), "--sim-fault", "process-on:0:4")
    assert res.rc == 0, res.stderr
    assert node.layout(0) == before0  # nothing destroyed, nothing killed
    assert "killing" not in res.stderr and process_on_pid(0, 4) == 5004
    assert node.layout(1) == [(9, 0, 1), (9, 4, 1)]
    assert res.json["left"] == [{"gpu": 0, "why": "busy: a process runs in an instance the layout frees"}]


def test_a_gpu_with_mig_off_is_not_turned_on(tmp_path):
    node = Node(tmp_path, count=2)
    lay_out(node, [[], [("7g.40gb", 0)]])  # GPU 0: MIG off
    res = node.run("apply", "--request-b64", _b64(per_gpu((0, []), (1, [("7g.40gb", 0)]))))
    assert res.rc == 0 and res.json["changes"] == 0, res.stderr
    assert node.sim()["gpus"][0]["mig_current"] == 0 and res.json["left"] == [{"gpu": 0, "why": "MIG mode is off"}]


def test_a_gpu_not_listed_is_untouched(tmp_path):
    node = Node(tmp_path, count=2)
    lay_out(node, [[("7g.40gb", 0)], [("7g.40gb", 0)]])
    res = node.run("apply", "--request-b64", _b64(per_gpu((1, [("4g.20gb", 0), ("3g.20gb", 4)]))))
    assert res.rc == 0, res.stderr
    assert node.layout(0) == [(0, 0, 1)] and node.layout(1) == [(5, 0, 1), (9, 4, 1)]


@pytest.mark.parametrize("doc, fragment", [
    (per_gpu((0, [("2g.10gb", 1)])), "cannot start at slot 1"),
    (per_gpu((0, [("3g.20gb", 0), ("4g.20gb", 0)])), "overlaps"),
    (per_gpu((0, [("9g.99gb", 0)])), "has no profile 9g.99gb"),
    (per_gpu((5, [("1g.5gb", 0)])), "names GPU 5, which this node does not have"),
])
def test_a_bad_layout_is_refused_before_any_change(tmp_path, doc, fragment):
    node = Node(tmp_path, count=2)
    lay_out(node, [[("7g.40gb", 0)], [("7g.40gb", 0)]])
    before = open(node.state).read()
    res = node.run("apply", "--request-b64", _b64(doc))
    assert res.rc == 2 and fragment in res.json["error"]["message"], res.stderr
    assert open(node.state).read() == before


@pytest.mark.parametrize("doc", [
    {"version": 2, "kind": "sequence", "gpus": []},
    {"version": 2, "kind": "per-gpu", "gpus": [{"index": 0, "layout": [{"profile": "1g.5gb", "start": "0"}]}]},
    {"version": 2, "kind": "per-gpu", "gpus": [{"index": 0, "layout": []}, {"index": 0, "layout": []}]},
    {"version": 3},
])
def test_document_shape_errors_are_one_line(doc):
    with pytest.raises(BadInput) as caught:
        request_from_document(doc, "--request-b64")
    assert "\n" not in str(caught.value) and "--request-b64" in str(caught.value)


def test_the_boot_unit_document_round_trips():
    request = request_from_document(per_gpu((1, [("1g.5gb", 6), ("3g.20gb", 0)])), "x")
    assert isinstance(request.spec, GpuLayouts) and request.spec.layout_of(1) == (("3g.20gb", 0), ("1g.5gb", 6))
    again = request_from_document(json.loads(request_document(request.spec)), "boot")
    assert again.spec == request.spec


@pytest.mark.kube
def test_the_node_says_what_each_gpu_holds(tmp_path, kube_api):
    node = Node(tmp_path, count=2)
    kube_api.add_node("node-a", labels={"nvidia.com/mig.config.state": "success",
                                        "aliyun.accelerator/nvidia_mig_sequence": "7g.40gb"})
    node.use_kube(kube_api.write_kubeconfig(tmp_path / "kubelet.conf", node="node-a"))
    lay_out(node, [[("7g.40gb", 0)], [("7g.40gb", 0)]])
    res = node.run("apply", "--request-b64", _b64(per_gpu((1, [("4g.20gb", 0), ("3g.20gb", 4)]))),
                   "--capacity-timeout", "0")
    assert res.rc == 0, res.stderr
    meta = kube_api.nodes["node-a"]["metadata"]
    assert meta["labels"]["nvidia.com/mig.config.state"] == "success"
    assert "aliyun.accelerator/nvidia_mig_sequence" not in meta["labels"]  # no one sequence names both GPUs
    assert json.loads(meta["annotations"]["ack-mig-hook/gpu-layouts"]) == {
        "0": [["7g.40gb", 0]], "1": [["4g.20gb", 0], ["3g.20gb", 4]]}


def test_a_process_in_a_compute_instance_the_layout_replaces_leaves_that_gpu_and_the_others_change(tmp_path):
    """GPU 0 keeps its 3g.20gb, but its compute instance (one slice, made by hand) is replaced by a full one,
    and a process runs in it. Only destroyed instances were checked for processes, so the whole apply ended
    gpu-busy (exit 4) and GPU 1 was not changed; now GPU 0 is left as it is and GPU 1 changes."""
    node = Node(tmp_path, count=2)
    state = lay_out(node, [[("3g.20gb", 0)], [("7g.40gb", 0)]])
    state["gpus"][0]["gis"][0]["cis"] = [{"id": 0, "profile_id": 0}]  # a 1-slice compute instance
    with open(node.state, "w") as fh:
        json.dump(state, fh)
    doc = per_gpu((0, [("3g.20gb", 0), ("3g.20gb", 4)]), (1, [("3g.20gb", 0), ("3g.20gb", 4)]))
    res = node.run("apply", "--request-b64", _b64(doc), "--sim-fault", "process-on:0:0")
    assert res.rc == 0 and res.json["outcome"] == "success", res.stderr
    assert res.json["left"] == [{"gpu": 0, "why": "busy: a process runs in an instance the layout frees"}]
    assert node.layout(1) == [(9, 0, 1), (9, 4, 1)] and process_on_pid(0, 0) == 5000


def test_a_start_past_eight_slots_is_placed_where_the_gpu_model_has_it(tmp_path):
    """An RTX PRO 6000 places 1g.24gb at 0, 3, 6 and 9 (12 memory slots): a request naming start 9 was refused
    as bad input by a bound of 8 slots before it met the GPU."""
    node = Node(tmp_path, gpu="RTX-PRO-6000", count=1)
    lay_out(node, [[("4g.96gb", 0)]])
    doc = per_gpu((0, [("1g.24gb", 0), ("1g.24gb", 3), ("1g.24gb", 6), ("1g.24gb", 9)]))
    res = node.run("apply", "--request-b64", _b64(doc))
    assert res.rc == 0 and res.json["outcome"] == "success", res.stdout + res.stderr
    assert [start for _, start, _ in node.layout(0)] == [0, 3, 6, 9]


def _apply_here(node, doc, capsys, *extra):
    """apply run in this process (so the test can make the world change at one moment of it): (rc, result)."""
    from node_bootstrap.commands.cli import main

    rc = main(node.args("apply", "--request-b64", _b64(doc), "--json", *extra))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return rc, json.loads(lines[-1])


def test_a_gpu_left_busy_stays_left_when_its_process_ends_during_the_apply(tmp_path, monkeypatch, capsys):
    """The first plan leaves GPU 0 (a process runs in the instance its layout frees); the process ends while
    apply stops the GPU clients. The plan made before the destroys no longer left GPU 0 and repartitioned it,
    without the holder wait of its instances, while the result still said it was left (the next plan is
    trusted not to change a GPU the node left, the dwell does not hold it). Now it stays left for the run."""
    import pynvml

    from node_bootstrap.host import clients

    node = Node(tmp_path, count=2)
    lay_out(node, [[("3g.20gb", 0), ("3g.20gb", 4)], [("7g.40gb", 0)]])
    before = node.layout(0)
    stop = clients.ClientControl.stop

    def stop_and_end_the_job(self):
        pynvml.nvmlLib._killed.add(process_on_pid(0, 4))  # the job in GPU 0's 3g.20gb at 4 ends now
        return stop(self)

    monkeypatch.setattr(clients.ClientControl, "stop", stop_and_end_the_job)
    doc = per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]), (1, [("3g.20gb", 0), ("3g.20gb", 4)]))
    rc, result = _apply_here(node, doc, capsys, "--sim-fault", "process-on:0:4")
    assert rc == 0 and result["outcome"] == "success", result
    assert node.layout(0) == before and node.layout(1) == [(9, 0, 1), (9, 4, 1)]
    assert result["left"] == [{"gpu": 0, "why": "busy: a process runs in an instance the layout frees"}]


def test_a_gpu_left_held_before_the_destroys_is_not_a_failed_read_back_when_its_pod_goes(tmp_path, monkeypatch,
                                                                                        capsys):
    """The read just before the destroys finds GPU 0's doomed instance allocated to a pod (admitted while the
    device plugin stopped): GPU 0 is left. The pod is gone by the read-back, which planned GPU 0 afresh and
    called the whole apply verify-failed (label failed, MigFailed) though every GPU was as decided."""
    from node_bootstrap.commands import apply as apply_command
    from node_bootstrap.kube.allocations import Allocations, Entry

    node = Node(tmp_path, count=2)
    lay_out(node, [[("3g.20gb", 0), ("3g.20gb", 4)], [("7g.40gb", 0)]])
    reads = []

    def allocations(self):
        def read():
            reads.append(1)
            gi = next(g for g in node.sim()["gpus"][0]["gis"] if g["start"] == 4)
            if len(reads) == 2:  # just before the destroys: a pod was admitted onto it meanwhile
                return Allocations(True, entries=(Entry("pod-x", "c", "nvidia.com/mig-3g.20gb",
                                                        gi["cis"][0].get("uuid")),))
            return Allocations(True, entries=())  # before it, none yet; at the read-back, the pod is gone
        return read

    monkeypatch.setattr(apply_command._Apply, "_allocations", allocations)
    doc = per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]), (1, [("3g.20gb", 0), ("3g.20gb", 4)]))
    rc, result = _apply_here(node, doc, capsys)
    assert rc == 0 and result["outcome"] == "success", result
    assert len(reads) >= 3 and [g["gpu"] for g in result["left"]] == [0]
    assert result["left"][0]["why"].startswith("held: GPU instance")
    assert node.layout(1) == [(9, 0, 1), (9, 4, 1)]


@pytest.mark.parametrize("unknown", ["checkpoint", "processes"])
def test_a_per_gpu_apply_killed_between_an_instances_two_creates_is_finished_whatever_is_unknown(tmp_path, unknown):
    """Killed after creating a GPU instance and before its compute instance: the next run left that GPU as it
    was ("allocations unknown" with kubelet's checkpoint unreadable, "busy" with the process list unreadable),
    for good, while adding the compute instance frees nothing: an instance without one has no MIG device
    (found by a review of the node side)."""
    node = Node(tmp_path, count=1)
    lay_out(node, [[("3g.20gb", 0)]])
    req = _b64(per_gpu((0, [("3g.20gb", 0), ("3g.20gb", 4)])))
    crashed = node.run("apply", "--request-b64", req, "--sim-fault", "crash-after:1")
    assert crashed.rc < 0 and node.layout(0) == [(9, 0, 1), (9, 4, 0)]  # the GPU instance at 4 has no CI
    extra = []
    if unknown == "checkpoint":
        checkpoint = tmp_path / "sim-state.host/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
        checkpoint.parent.mkdir(parents=True)
        checkpoint.write_text("{}")  # not kubelet's shape: allocations unknown
    else:
        extra = ["--sim-fault", "processes-unreadable"]
    healed = node.run("apply", "--request-b64", req, *extra)
    assert healed.rc == 0, healed.stderr
    assert "left" not in healed.json, healed.json.get("left")
    assert node.layout(0) == [(9, 0, 1), (9, 4, 1)]


@pytest.mark.parametrize("text", ["", "not json", "{", "\\xff"])
def test_a_request_that_is_no_json_names_the_accepted_forms(text):
    """``--request-b64 ''`` said only "is not UTF-8 JSON": the refusal names the forms a request takes."""
    from node_bootstrap.request import request_from_options

    with pytest.raises(BadInput) as caught:
        request_from_options(request_b64=__import__("base64").b64encode(text.encode("latin-1")).decode())
    message = str(caught.value)
    assert "\n" not in message and "is not UTF-8 JSON" in message and '"version": 1' in message and \
        '"version": 2' in message, message


@pytest.mark.timeout(30)
def test_a_request_file_that_is_a_fifo_is_refused_at_once(tmp_path):
    """The boot unit applies --request-file /etc/ack-mig-hook/request.json: a FIFO there blocked the open until
    something wrote to it (the boot apply held until the runner's deadline killed it, no reason given)."""
    from node_bootstrap.request import request_from_options

    fifo = str(tmp_path / "request.json")
    os.mkfifo(fifo)
    with pytest.raises(BadInput) as caught:
        request_from_options(request_file=fifo)
    assert "cannot read --request-file" in str(caught.value) and "FIFO" in str(caught.value)
