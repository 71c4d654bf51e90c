import pytest

from functions.delivery.outcome import CONFLICT, FAILED, PARTITIONED, REBOOT_REQUIRED, UNCHANGED, NodeResult, \
    outcome, parse_output


@pytest.mark.parametrize("exit_code,doc,want,reason", [
    (0, {"outcome": "success", "changes": 3}, PARTITIONED, "3 changes"),
    (0, {"outcome": "success", "changes": 0}, UNCHANGED, "already partitioned"),
    (5, {"outcome": "reboot-required", "changes": 1, "error": {"code": "reboot", "message": "mode pending"}},
     REBOOT_REQUIRED, "mode pending"),
    (4, {"outcome": "failed", "error": {"code": "gpu-busy", "message": "GPU 0 has processes"}}, FAILED,
     "gpu-busy: GPU 0 has processes"),
    (3, {"outcome": "failed"}, FAILED, "GPU not MIG-capable"),
    (6, {"outcome": "conflict", "error": {"code": "conflict", "message": "nvidia.com/mig.config is set"}}, CONFLICT,
     "conflict: nvidia.com/mig.config is set"),
    (6, {"outcome": "failed"}, CONFLICT, "another MIG manager is in charge"),
    (1, {"outcome": "success", "changes": 1}, FAILED, "exit 1"),  # a success with a bad exit is not trusted
    (0, {"outcome": "success", "changes": 2, "boot_unit": {"installed": False, "error": "systemctl enable\nexited 1"}},
     PARTITIONED, "2 changes; boot unit not installed: systemctl enable exited 1"),
    (0, {"outcome": "success", "changes": 0, "boot_unit": {"installed": True, "changed": False}}, UNCHANGED,
     "already partitioned as requested"),
    # an auto pool's per-GPU request: the GPUs the node left as they were, and why (a GPU not listed is no news)
    (0, {"outcome": "success", "changes": 4, "left": [{"gpu": 0, "why": "busy: a process runs in an instance the "
                                                                       "layout frees"},
                                                      {"gpu": 1, "why": "not in the request"}]},
     PARTITIONED, "4 changes; left as they were: GPU 0 (busy: a process runs in an instance the layout frees)"),
])
def test_node_results_map_to_exactly_one_outcome(exit_code, doc, want, reason):
    got = outcome(NodeResult("i-1", "local", exit_code, doc), "node-a")
    assert got.outcome == want and reason in got.reason and got.node_name == "node-a"


def test_a_transport_error_is_a_failure_with_its_code():
    got = outcome(NodeResult("i-1", "ssh", error="host-key-rejected", message="key differs"))
    assert got.outcome == FAILED and got.reason == "host-key-rejected: key differs"


def test_the_result_is_the_last_json_line():
    assert parse_output("# log\n{\"a\": 1}\n\n") == {"a": 1}
    assert parse_output("{\"a\": 1}\ntrailing text") is None
    assert parse_output("[1]") is None and parse_output("") is None
