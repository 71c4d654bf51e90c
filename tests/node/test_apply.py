"""apply / status / plan end to end: real pynvml against the simulated driver, as a real process."""

import os

import pytest

from tests.node.nodecli import Node

A100_MIXED = "1g.5gb-2g.10gb-3g.20gb"


def test_fresh_a100_gets_the_solver_layout_with_one_full_compute_instance_each(tmp_path):
    node = Node(tmp_path)
    res = node.run("apply", "--sequence", A100_MIXED)
    assert res.rc == 0, res.stderr
    doc = res.json
    assert doc["outcome"] == "success"
    assert doc["sequence"] == "3g.20gb-2g.10gb-1g.5gb"
    # per GPU: set mode, 3 GPU instances, 3 compute instances; no reset: an idle bare-metal GPU takes the
    # new mode inside nvmlDeviceSetMigMode (the driver resets it itself)
    assert doc["changes"] == 2 * 7
    for index in (0, 1):
        assert node.layout(index) == [(9, 0, 1), (14, 4, 1), (19, 6, 1)]
        gpu = doc["gpus"][index]
        assert gpu["mig_mode"] == {"current": "enabled", "pending": "enabled"}
        assert [(i["profile"], i["id"], i["start"], i["size"]) for i in gpu["instances"]] == [
            ("3g.20gb", 9, 0, 4), ("2g.10gb", 14, 4, 2), ("1g.5gb", 19, 6, 1)]
        assert "3g.20gb  # # # # . . . ." in gpu["diagram"]
    assert node.commands() == []  # the simulator resets GPUs itself: no nvidia-smi, no clients configured


def test_a_node_already_right_is_left_untouched(tmp_path):
    node = Node(tmp_path)
    assert node.run("apply", "--sequence", A100_MIXED).rc == 0
    before = open(node.state).read()
    mtime = os.stat(node.state).st_mtime_ns
    again = node.run("apply", "--sequence", "9-14-19")  # same layout, written differently
    assert again.rc == 0 and again.json["outcome"] == "success"
    assert again.json["changes"] == 0
    assert open(node.state).read() == before and os.stat(node.state).st_mtime_ns == mtime


def test_changing_the_layout_keeps_matching_instances_and_replaces_the_rest(tmp_path):
    node = Node(tmp_path, count=1)
    assert node.run("apply", "--sequence", "9-9").rc == 0
    kept_id = [gi["id"] for gi in node.sim()["gpus"][0]["gis"] if gi["start"] == 4][0]
    res = node.run("apply", "--sequence", "3g.20gb-1g.5gb-1g.5gb-1g.5gb-1g.5gb")
    assert res.rc == 0, res.stderr
    # 1g starts only at 0-6, so the 3g.20gb goes to 4 and four 1g.5gb to 0-3: the 3g.20gb at 4 stays,
    # the one at 0 goes (1 CI + 1 GI), four GI + CI pairs are created; MIG mode is already on
    assert res.json["changes"] == 2 + 8
    assert node.layout() == [(9, 4, 1), (19, 0, 1), (19, 1, 1), (19, 2, 1), (19, 3, 1)]
    assert [gi["id"] for gi in node.sim()["gpus"][0]["gis"] if gi["start"] == 4] == [kept_id]


def test_size_fills_the_gpu(tmp_path):
    node = Node(tmp_path, count=1)
    res = node.run("apply", "--size", "1g.5gb")
    assert res.rc == 0
    assert [s for _, s, _ in node.layout()] == list(range(7))
    assert res.json["sequence"] == "-".join(["1g.5gb"] * 7)


def test_hopper_switches_mode_without_reset_and_loses_everything_on_reboot(tmp_path):
    node = Node(tmp_path, gpu="H200", count=1)
    res = node.run("apply", "--sequence", "3g.71gb-3g.71gb")
    assert res.rc == 0, res.stderr
    assert res.json["changes"] == 1 + 4  # mode (immediate on Hopper, no reset) + 2 x (GI + CI)
    rebooted = node.run("sim-reboot")
    assert rebooted.rc == 0
    assert rebooted.json["gpus"][0]["mig_mode"] == {"current": "disabled", "pending": "disabled"}
    assert rebooted.json["gpus"][0]["instances"] == []
    again = node.run("apply", "--sequence", "3g.71gb-3g.71gb")
    assert again.rc == 0 and again.json["changes"] == 5
    assert node.layout() == [(9, 0, 1), (9, 4, 1)]


def test_ampere_keeps_mig_mode_over_a_reboot_but_not_its_instances(tmp_path):
    node = Node(tmp_path, count=1)
    assert node.run("apply", "--sequence", "9-9").rc == 0
    rebooted = node.run("sim-reboot").json["gpus"][0]
    assert rebooted["mig_mode"] == {"current": "enabled", "pending": "enabled"}
    assert rebooted["instances"] == []
    again = node.run("apply", "--sequence", "9-9")
    assert again.json["changes"] == 4  # no mode change, no reset


@pytest.mark.parametrize("command", [["status"], ["plan", "--sequence", "9-9"]])
def test_status_and_plan_make_no_mutating_call(tmp_path, command):
    node = Node(tmp_path)
    assert node.run("apply", "--sequence", "19-19-19-19-19-19-19").rc == 0
    before = open(node.state).read()
    # crash-after:1 kills the process at the first mutating call: a read-only command must live
    res = node.run(*(command + ["--sim-fault", "crash-after:1"]))
    assert res.rc == 0, res.stderr
    assert open(node.state).read() == before


def test_plan_lists_what_apply_would_do_and_apply_does_exactly_that(tmp_path):
    node = Node(tmp_path, count=1)
    assert node.run("apply", "--sequence", "9-9").rc == 0
    plan = node.run("plan", "--sequence", "4g.20gb-3g.20gb")
    assert plan.rc == 0
    gpu = plan.json["gpus"][0]
    assert gpu["mode_change"] is False and gpu["converged"] is False
    assert [(k["profile"], k["start"]) for k in gpu["keep"]] == [("3g.20gb", 4)]
    assert [(d["profile"], d["start"]) for d in gpu["destroy"]] == [("3g.20gb", 0)]
    assert [(c["profile"], c["start"]) for c in gpu["create"]] == [("4g.20gb", 0)]
    applied = node.run("apply", "--sequence", "4g.20gb-3g.20gb")
    assert applied.json["changes"] == plan.json["mutating_calls"] == 4
    assert node.run("plan", "--sequence", "5-9").json["converged"] is True


def test_status_reports_profiles_placements_and_where_they_came_from(tmp_path):
    node = Node(tmp_path, gpu="H200", count=1)
    off = node.run("status").json["gpus"][0]
    # MIG disabled: the driver still lists its profiles (as a real H200 does), so they win
    assert off["mig_capable"] is True and off["profiles_source"] == "nvml"
    assert off["mig_mode"] == {"current": "disabled", "pending": "disabled"} and off["instances"] == []
    assert off["pci_device_id"] == "0x233510de"
    assert node.run("apply", "--sequence", "7g.141gb").rc == 0
    on = node.run("status").json["gpus"][0]
    assert on["profiles_source"] == "nvml"
    by_name = {p["name"]: p for p in on["profiles"]}
    assert by_name["1g.35gb"]["placements"] == [[0, 2], [2, 2], [4, 2], [6, 2]]
    assert by_name["1g.18gb+me"]["max_instances"] == 1
    assert on["instances"][0]["profile"] == "7g.141gb" and on["instances"][0]["compute_instances"] == [0]


def test_plus_me_profile_by_id_and_its_label_value(tmp_path):
    node = Node(tmp_path, count=1)
    res = node.run("apply", "--sequence", "20-19-19")
    assert res.rc == 0
    assert sorted(i["profile"] for i in res.json["gpus"][0]["instances"]) == ["1g.5gb", "1g.5gb", "1g.5gb+me"]


def test_options_work_before_the_subcommand_too(tmp_path):
    node = Node(tmp_path, count=1)
    argv = node.args()  # global options first
    res = node.run(*(argv + ["apply", "--sequence", "9"]), raw=True)
    assert res.rc == 0 and res.json["outcome"] == "success"
