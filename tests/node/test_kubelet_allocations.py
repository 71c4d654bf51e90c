"""kubelet's allocations on the node (issue 35, item 1): a per-GPU request never destroys an instance kubelet
gave a pod that exists, process or not; what cannot be read destroys nothing; the holders report.

The checkpoint is written in kubelet's own format (kubernetes/kubernetes
pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go: Data.PodDeviceEntries with PodUID, ContainerName,
ResourceName, DeviceIDs per NUMA node, AllocResp; RegisteredDevices; Checksum), with the device IDs NVIDIA's
device plugin uses (k8s-device-plugin internal/rm/devices.go: the MIG device's NVML UUID; "<gpu>:<mig index>"
with deviceIDStrategy=index; "::<n>" for shared replicas)."""

import base64
import json
import os

import pytest

from node_bootstrap.kube.allocations import (DEFAULT_CHECKPOINT, MAX_CHECKPOINT_BYTES, Allocations, CheckpointError,
                                             Entry, keep_live, live_uids, parse_checkpoint, read_checkpoint)
from tests.node.nodecli import Node, lay_out

POD_A = "0b7c5a7e-1111-4b9e-9c53-5d2a8f0e0001"
POD_B = "0b7c5a7e-2222-4b9e-9c53-5d2a8f0e0002"


def per_gpu(*gpus):
    return {"version": 2, "kind": "per-gpu",
            "gpus": [{"index": i, "layout": [{"profile": p, "start": s} for p, s in pairs]} for i, pairs in gpus]}


def b64(doc):
    return base64.b64encode(json.dumps(doc).encode()).decode()


def checkpoint(entries, registered=None):
    """kubelet's checkpoint: ``entries`` as (pod uid, container, resource, [device ids]) on NUMA node 0."""
    return {"Data": {"PodDeviceEntries": [
        {"PodUID": uid, "ContainerName": container, "ResourceName": resource, "DeviceIDs": {"0": ids},
         "AllocResp": base64.b64encode(b"\x12\x08envs").decode()}
        for uid, container, resource, ids in entries] or None,
        "RegisteredDevices": registered or {}},
        "Checksum": 2166136261}


def write_checkpoint(node, doc):
    path = os.path.join(node.host, DEFAULT_CHECKPOINT.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w" if isinstance(doc, (dict, str)) else "wb") as fh:
        fh.write(json.dumps(doc) if isinstance(doc, dict) else doc)
    return path


def mig_devices(node, index):
    """{start: (MIG device UUID, its MIG device index)} of GPU ``index``, read through the node's status."""
    res = node.run("status")
    gpu = res.json["gpus"][index]
    uuids = {i["start"]: i["mig_devices"][0] for i in gpu["instances"]}
    order = sorted(uuids.values(), key=lambda u: [(i["gpu_instance_id"]) for i in gpu["instances"]
                                                  if i["mig_devices"][0] == u][0])
    return {start: (uuid, order.index(uuid)) for start, uuid in uuids.items()}


@pytest.fixture()
def node(tmp_path):
    n = Node(tmp_path, count=2)  # A100-SXM4-40GB
    lay_out(n, [[("3g.20gb", 0), ("3g.20gb", 4)], [("3g.20gb", 0), ("3g.20gb", 4)]])
    return n


# --- the simulator gives MIG devices UUIDs the way NVML does -----------------------------------------------

def test_each_mig_device_has_an_nvml_uuid_and_a_recreated_instance_a_new_one(node):
    first = mig_devices(node, 0)
    assert all(u.startswith("MIG-") and len(u) == 40 for u, _ in first.values())
    assert len(set(u for u, _ in first.values()) | set(u for u, _ in mig_devices(node, 1).values())) == 4
    assert mig_devices(node, 0) == first  # stable while the instance lives
    node.run("apply", "--request-b64", b64(per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]))))
    node.run("apply", "--request-b64", b64(per_gpu((0, [("3g.20gb", 0), ("3g.20gb", 4)]))))
    again = mig_devices(node, 0)
    assert again[0] == first[0] and again[4][0] != first[4][0]  # destroyed and created again: a new device


# --- never destroyed while allocated ---------------------------------------------------------------------

@pytest.mark.parametrize("device_id", ["uuid", "index", "replica"])
def test_an_allocated_instance_without_a_process_is_never_destroyed(node, device_id):
    uuid, mig_index = mig_devices(node, 0)[4]
    ident = {"uuid": uuid, "index": "0:%d" % mig_index, "replica": uuid + "::3"}[device_id]
    write_checkpoint(node, checkpoint([(POD_A, "serve", "nvidia.com/mig-3g.20gb", [ident])]))
    before = node.layout(0)
    # GPU 0's 3g.20gb at 4 goes for two 2g.10gb; its pod is pulling its image: no process anywhere
    doc = per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]), (1, [("3g.20gb", 0), ("2g.10gb", 4)]))
    res = node.run("apply", "--request-b64", b64(doc))
    assert res.rc == 0, res.stderr
    assert node.layout(0) == before  # kept, with its compute instance
    assert node.layout(1) == [(9, 0, 1), (14, 4, 1)]  # the other GPU's idle instance went
    if device_id == "index":  # an index names no instance for sure (below): GPU 0's holders are unknown
        assert res.json["left"][0]["gpu"] == 0 and "deviceIDStrategy=index" in res.json["left"][0]["why"]
        return
    assert res.json["left"][0]["gpu"] == 0 and POD_A in res.json["left"][0]["why"]
    assert res.json["left"][0]["why"].startswith("held: GPU instance")


def test_an_allocated_instance_nvmls_mig_device_walk_leaves_out_is_never_destroyed(node):
    """The MIG devices are walked as NVIDIA's device plugin walks them (every index below
    nvmlDeviceGetMaxMigDeviceCount, NOT_FOUND skipped), and the walk's answer was taken whole: a driver that
    answered NOT_FOUND ("no valid MIG device was found at index", nvml.h) where a compute instance exists, or a
    count below the instances there, listed fewer MIG devices than compute instances, so the pod's instance
    matched no device, read as free and was destroyed under it. Fewer devices than compute instances is a
    partial list: the GPU's holders are unknown and nothing on it is destroyed."""
    uuid, _ = mig_devices(node, 0)[4]
    write_checkpoint(node, checkpoint([(POD_A, "serve", "nvidia.com/mig-3g.20gb", [uuid])]))
    before = node.layout(0)
    res = node.run("apply", "--request-b64", b64(per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]))),
                   "--sim-fault", "gpu-error:0:nvmlDeviceGetMigDeviceHandleByIndex:6")  # nvml.h: 6 NOT_FOUND
    assert res.rc == 0, res.stderr
    assert node.layout(0) == before
    assert res.json["left"][0]["gpu"] == 0 and "NVML listed 0 MIG devices for its 2 compute instances" in \
        res.json["left"][0]["why"], res.json["left"]


def test_plan_says_so_before_apply(node):
    uuid, _ = mig_devices(node, 0)[4]
    write_checkpoint(node, checkpoint([(POD_A, "serve", "nvidia.com/mig-3g.20gb", [uuid])]))
    res = node.run("plan", "--request-b64", b64(per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]))))
    assert res.rc == 0 and res.json["converged"] is True and POD_A in res.json["left"][0]["why"]


def test_an_allocation_of_a_kept_instance_does_not_stop_adding_beside_it(tmp_path):
    node = Node(tmp_path, count=1)
    lay_out(node, [[("3g.20gb", 0)]])
    uuid, _ = mig_devices(node, 0)[0]
    write_checkpoint(node, checkpoint([(POD_A, "serve", "nvidia.com/mig-3g.20gb", [uuid])]))
    res = node.run("apply", "--request-b64", b64(per_gpu((0, [("3g.20gb", 0), ("3g.20gb", 4)]))))
    assert res.rc == 0 and "left" not in res.json, res.stderr
    assert node.layout(0) == [(9, 0, 1), (9, 4, 1)]


def test_a_stale_device_id_of_an_instance_long_gone_blocks_nothing(node):
    write_checkpoint(node, checkpoint([(POD_A, "serve", "nvidia.com/mig-3g.20gb",
                                        ["MIG-00000000-0000-5000-8000-000000000000"])]))
    res = node.run("apply", "--request-b64", b64(per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]))))
    assert res.rc == 0 and node.layout(0) == [(9, 0, 1), (14, 4, 1)], res.stderr


# --- unknown allocations: nothing is destroyed, nothing raises -----------------------------------------------

@pytest.mark.parametrize("content", [
    None,  # no file
    "{not json",
    '{"Data": {"PodDeviceEntries": [{"PodUID": "x", "DeviceIDs": {"0": ["a"]}}]}, "Checksum": NaN}',
    '{"Data": {"PodDeviceEntries": []}, "Checksum": 1' + "0" * 400 + "}",
    '{"Data": {"PodDeviceEntries": [{"PodUID": "x", "DeviceIDs": {"numa": ["a"]}}]}, "Checksum": 1}',
    '{"Data": {"PodDeviceEntries": {"PodUID": "x"}}, "Checksum": 1}',
    b"\xff\xfe" * 10,
    "[" * 100000,
    " " * (MAX_CHECKPOINT_BYTES + 1),
])
def test_an_unreadable_checkpoint_destroys_nothing_and_adds_still_go(tmp_path, content):
    node = Node(tmp_path, count=2)
    lay_out(node, [[("3g.20gb", 0), ("3g.20gb", 4)], [("3g.20gb", 0)]])
    path = os.path.join(str(tmp_path), "elsewhere", "kubelet_internal_checkpoint")
    if content is not None:
        os.makedirs(os.path.dirname(path))
        with open(path, "wb") as fh:
            fh.write(content if isinstance(content, bytes) else content.encode())
    before = node.layout(0)
    doc = per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]), (1, [("3g.20gb", 0), ("3g.20gb", 4)]))
    res = node.run("apply", "--request-b64", b64(doc), "--kubelet-checkpoint", path)
    assert res.rc == 0 and res.json["outcome"] == "success", res.stderr
    assert node.layout(0) == before  # a destroy with nobody knowing who holds what: never
    assert node.layout(1) == [(9, 0, 1), (9, 4, 1)]  # an add takes nothing from anyone
    assert res.json["left"][0]["why"].startswith("allocations unknown (kubelet's device checkpoint %s" % path)
    assert "Traceback" not in res.stderr
    assert "unknown" in res.json["holders"]


# --- the holders report -------------------------------------------------------------------------------------

def test_apply_and_report_holders_write_who_holds_each_instance(node):
    uuid, _ = mig_devices(node, 1)[4]
    write_checkpoint(node, checkpoint([(POD_A, "serve", "nvidia.com/mig-3g.20gb", [uuid])]))
    node.kube_args = []  # the simulated node's own labels file (sim-state.host/node-labels.json)
    res = node.run("apply", "--request-b64", b64(per_gpu((0, [("3g.20gb", 0), ("3g.20gb", 4)]))))
    assert res.rc == 0, res.stderr
    report = json.loads(annotations(node)["ack-mig-hook/gpu-holders"])
    assert report["pods"] == [POD_A] and report["at"].endswith("Z")
    assert report["gpus"] == {"0": [["3g.20gb", 0, None], ["3g.20gb", 4, None]],
                              "1": [["3g.20gb", 0, None], ["3g.20gb", 4, POD_A]]}
    # the pod ends and another one starts on GPU 0: the report follows without any apply
    uuid0, _ = mig_devices(node, 0)[0]
    write_checkpoint(node, checkpoint([(POD_B, "train", "nvidia.com/mig-3g.20gb", [uuid0])]))
    res = node.run("report-holders")
    assert res.rc == 0 and res.json["written"] is True, res.stderr
    report = json.loads(annotations(node)["ack-mig-hook/gpu-holders"])
    assert report["pods"] == [POD_B] and report["gpus"]["0"][0] == ["3g.20gb", 0, POD_B]
    assert report["gpus"]["1"][1] == ["3g.20gb", 4, None]


def test_report_holders_without_kubernetes_access_says_not_written(node):
    res = node.run("report-holders")  # --no-label
    assert res.rc == 1 and res.json["error"]["code"] == "not-written" and res.json["written"] is False


def annotations(node):
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        return json.load(fh)["annotations"]


# --- the parser, pure ---------------------------------------------------------------------------------------

def test_the_checkpoint_kubelet_writes_is_read_entry_by_entry():
    doc = checkpoint([(POD_A, "serve", "nvidia.com/mig-1g.10gb", ["MIG-a", "MIG-b::2"]),
                      (POD_B, "init", "example.com/nic", ["nic0"])], {"nvidia.com/mig-1g.10gb": ["MIG-a"]})
    doc["BootID"] = "5d1c..."  # newer kubelets write it outside Data
    entries = parse_checkpoint(json.dumps(doc).encode())
    assert entries == [Entry(POD_A, "serve", "nvidia.com/mig-1g.10gb", "MIG-a"),
                       Entry(POD_A, "serve", "nvidia.com/mig-1g.10gb", "MIG-b"),
                       Entry(POD_B, "init", "example.com/nic", "nic0")]
    old = {"Data": {"PodDeviceEntries": [{"PodUID": POD_A, "ContainerName": "c", "ResourceName": "r",
                                          "DeviceIDs": ["MIG-c"]}], "RegisteredDevices": None}, "Checksum": 7}
    assert parse_checkpoint(json.dumps(old).encode())[0].device_id == "MIG-c"  # kubelet before 1.20
    assert parse_checkpoint(b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":0}') == []


@pytest.mark.parametrize("text, fragment", [
    (b'{"Data": {}, "Checksum": -1}', "Checksum"),
    (b'{"Data": {}, "Checksum": 1.5}', "only integers"),
    (b'{"Data": {}, "Checksum": Infinity}', "Infinity"),
    (b'{"Checksum": 1}', '"Data"'),
    (b'{"Data": {"PodDeviceEntries": [{"PodUID": ""}]}, "Checksum": 1}', "empty PodUID"),
    (b'{"Data": {"PodDeviceEntries": [{"PodUID": "u", "DeviceIDs": {"0": [7]}}]}, "Checksum": 1}', "not a string"),
])
def test_a_checkpoint_not_in_kubelets_shape_is_one_line_saying_why(text, fragment):
    with pytest.raises(CheckpointError) as err:
        parse_checkpoint(text)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_read_checkpoint_never_raises(tmp_path):
    missing = read_checkpoint(str(tmp_path / "none"))
    assert not missing.known and "cannot be read" in missing.why
    os.mkdir(str(tmp_path / "dir"))
    assert not read_checkpoint(str(tmp_path / "dir")).known


def test_entries_of_pods_the_api_server_says_are_gone_or_finished_are_dropped():
    found = Allocations(True, entries=(Entry(POD_A, "c", "r", "MIG-a"), Entry(POD_B, "c", "r", "MIG-b"),
                                       Entry("static-hash", "c", "r", "MIG-s")))
    pods = [{"metadata": {"uid": POD_A}, "status": {"phase": "Running"}},
            {"metadata": {"uid": POD_B}, "status": {"phase": "Succeeded"}},
            {"metadata": {"uid": "mirror-uid", "annotations": {"kubernetes.io/config.mirror": "static-hash"}},
             "status": {"phase": "Running"}}]
    kept = keep_live(found, live_uids(pods))
    assert sorted(kept.pods) == [POD_A, "static-hash"] and kept.dropped == (POD_B,)
    assert keep_live(found, None) == found  # no answer from the API server: every entry stands


# --- deviceIDStrategy=index: the IDs kubelet recorded shift when an instance below goes ------------------------

def test_an_index_id_never_moves_a_pods_holding_onto_another_instance(tmp_path):
    """With deviceIDStrategy=index the device plugin names a MIG device "<gpu>:<MIG device index>", and NVML
    numbers a GPU's MIG devices in order (by GPU instance id): destroying an idle instance numbered below the
    pod's shifts the pod's instance down, while kubelet's checkpoint keeps the ID it recorded at allocation.
    That ID then names another instance (or none): the report gave the pod's holding to a new instance and
    called its own free, and the next apply destroyed the instance the pod was allocated."""
    node = Node(tmp_path, count=1)
    # A100 ids by placement (docs/simulator.md): 2g.10gb at 4 is GPU instance 3, at 0 is 5, at 2 is 6
    lay_out(node, [[("2g.10gb", 4), ("2g.10gb", 0), ("2g.10gb", 2)]])
    _, mig_index = mig_devices(node, 0)[2]
    assert mig_index == 2  # below it: the instances at 4 (index 0) and 0 (index 1)
    write_checkpoint(node, checkpoint([(POD_A, "serve", "nvidia.com/mig-2g.10gb", ["0:%d" % mig_index])]))
    node.kube_args = []  # the simulated node's own labels file, for the holders report
    # the idle 2g.10gb at 4 goes for a 1g.5gb there (GPU instance 7: MIG device index 2 after the change)
    res = node.run("apply", "--request-b64", b64(per_gpu((0, [("2g.10gb", 0), ("2g.10gb", 2), ("1g.5gb", 4)]))))
    assert res.rc == 0, res.stderr
    report = json.loads(annotations(node)["ack-mig-hook/gpu-holders"])
    named = [row for row in (report["gpus"]["0"] or []) if row[2] == POD_A]
    assert named in ([], [["2g.10gb", 2, POD_A]])  # never another instance
    assert not any(row[:2] == ["2g.10gb", 2] and row[2] is None for row in report["gpus"]["0"] or [])
    # then a layout that replaces the pod's 2g.10gb at 2: it is allocated, so it stays
    res = node.run("apply", "--request-b64", b64(per_gpu((0, [("2g.10gb", 0), ("1g.5gb", 2), ("1g.5gb", 3),
                                                              ("1g.5gb", 4)]))))
    assert res.rc == 0, res.stderr
    assert (14, 2, 1) in node.layout(0), node.layout(0)  # 2g.10gb (profile 14) at 2, its compute instance
    assert res.json["left"][0]["gpu"] == 0


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_checkpoint_or_state_file_that_is_no_regular_file_is_unknown_at_once(tmp_path, kind):
    """A FIFO where kubelet's checkpoint (or the stopped-clients record) is expected: the apply waited in
    open() for a writer, for good (the boot unit's runner killed it after its timeout, the GPUs unchanged).
    A directory or a device is unknown too, said in one line, and the apply goes on with its adds."""
    node = Node(tmp_path, count=2)
    lay_out(node, [[("3g.20gb", 0), ("3g.20gb", 4)], [("3g.20gb", 0)]])
    path = os.path.join(str(tmp_path), "checkpoint")
    if kind == "fifo":
        os.mkfifo(path)
        os.makedirs(os.path.join(node.dir, "var"))
        os.mkfifo(os.path.join(node.dir, "var", "stopped-clients.json"))
    elif kind == "directory":
        os.makedirs(path)
    else:
        path = "/dev/zero"
    before = node.layout(0)
    doc = per_gpu((0, [("3g.20gb", 0), ("2g.10gb", 4)]), (1, [("3g.20gb", 0), ("3g.20gb", 4)]))
    proc = node.popen("apply", "--request-b64", b64(doc), "--kubelet-checkpoint", path)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    res = json.loads(out)
    assert proc.returncode == 0 and res["outcome"] == "success", err
    assert node.layout(0) == before and node.layout(1) == [(9, 0, 1), (9, 4, 1)]
    assert res["left"][0]["why"].startswith("allocations unknown (kubelet's device checkpoint %s cannot be read "
                                            "(not a regular file but a" % path), res["left"]
    assert "Traceback" not in err


# --- the report's size: "at most about 32 KiB" (docs/node.md) --------------------------------------------------

def long_uid(n, width):
    """A pod UID that is no UUID, ``width`` characters: kubelet keeps the metadata.uid a static pod's manifest
    gives as it is (kubernetes pkg/kubelet/config/common.go applyDefaults: only an empty one becomes the md5
    hex of the manifest), and the checkpoint's PodUID is that string."""
    return ("static-%04d-" % n).ljust(width, "x")


@pytest.mark.parametrize("width", [256, 100])
def test_the_holders_report_stays_within_32_kib_whatever_kubelet_names(node, width):
    """512 pods (MAX_REPORT_PODS) with long non-UUID ids in the checkpoint while the API server's pod list is
    unavailable (every entry counts): the report was 512 x (width + 3) characters, 132 KiB for 256, past the
    32 KiB docs/node.md promises and the planner's 64 KiB read. The holders of the instances stay; pods that
    do not fit are left out of ``pods`` with a count (``pods_left_out``): the planner then counts them as not
    covered, so the instances of the profiles they ask count as in use (more in use, never fewer)."""
    from functions.kube.supply import MAX_HOLDERS_CHARS, _holders
    from node_bootstrap.commands.holdings import MAX_REPORT_CHARS, MAX_REPORT_PODS

    assert MAX_REPORT_CHARS == 32 * 1024 < MAX_HOLDERS_CHARS
    uuid0, _ = mig_devices(node, 0)[4]
    uuid1, _ = mig_devices(node, 1)[0]
    holders = [long_uid(MAX_REPORT_PODS - 2, width), long_uid(MAX_REPORT_PODS - 1, width)]  # last in order
    entries = [(holders[0], "serve", "nvidia.com/mig-3g.20gb", [uuid0]),
               (holders[1], "serve", "nvidia.com/mig-3g.20gb", [uuid1])]
    entries += [(long_uid(n, width), "c", "example.com/nic", ["nic%d" % n]) for n in range(MAX_REPORT_PODS - 2)]
    write_checkpoint(node, checkpoint(entries))
    node.kube_args = []  # the simulated node's labels file: no pod list, so every entry counts
    res = node.run("report-holders")
    assert res.rc == 0 and res.json["written"] is True, res.stderr
    value = annotations(node)["ack-mig-hook/gpu-holders"]
    assert len(value) <= MAX_REPORT_CHARS, len(value)
    report = json.loads(value)
    assert report["gpus"] == {"0": [["3g.20gb", 0, None], ["3g.20gb", 4, holders[0]]],
                              "1": [["3g.20gb", 0, holders[1]], ["3g.20gb", 4, None]]}
    assert set(holders) <= set(report["pods"]) and report["pods"] == sorted(report["pods"])
    assert 0 < report["pods_left_out"] == MAX_REPORT_PODS - len(report["pods"])
    read = _holders(value)  # the planner's reader takes it, pods as written
    assert read is not None and read.pods == frozenset(report["pods"])


def test_a_report_whose_instances_alone_outgrow_the_bound_is_unknown():
    from node_bootstrap.commands.holdings import MAX_REPORT_CHARS, _bounded

    rows = [["1g.5gb", n, long_uid(n, 256)] for n in range(200)]  # more than any GPU holds: the guard only
    value = _bounded("2026-12-07T10:00:00Z", sorted(r[2] for r in rows), {"0": rows})
    assert len(value) <= MAX_REPORT_CHARS and "over 32768 characters" in json.loads(value)["unknown"]


def test_holders_that_do_not_all_fit_are_cut_and_every_held_instance_still_counts_in_use():
    """The report kept "the instances' holders always": on 16 GPUs of 7 instances held by pods whose uids are
    256 characters, the rows alone take most of 32 KiB and ``pods`` keeps only a few holders. Held instances
    still count in use, the holders the report leaves out counting as not covered, and the bound holds."""
    from functions.kube.supply import _holders, _in_use
    from node_bootstrap.commands.holdings import MAX_REPORT_CHARS, _bounded

    per_gpu = {str(g): [["1g.10gb", i, long_uid(g * 7 + i, 256)] for i in range(7)] for g in range(16)}
    held = sorted(row[2] for rows in per_gpu.values() for row in rows)
    value = _bounded("2026-12-07T10:00:00Z", held, per_gpu)
    report = json.loads(value)
    assert len(value) <= MAX_REPORT_CHARS and 0 < len(report["pods"]) < len(held), len(report["pods"])
    assert report["pods_left_out"] == len(held) - len(report["pods"])
    live = {uid: {"1g.10gb": 1} for uid in held}
    in_use = _in_use([[("1g.10gb", i) for i in range(7)]] * 16, live, _holders(value))
    assert len(in_use) == 16 * 7
