"""The autoscaler's view on the command line: ``plan --instance-type``, ``status`` and ``doctor``'s check."""

import json
import subprocess
import sys

import pytest

from functions.cloud.cluster import InventoryLookup
from functions.commands.doctor import autoscaler_checks
from functions.commands.main import main
from tests.function.conftest import INVENTORY, ROOT
from tests.support.cli_errors import error_text, is_one_error

K3G = "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-3g.20gb"


def test_plan_for_an_instance_type_gives_the_node_resources_and_the_tags(capsys):
    assert main(["plan", "--instance-type", "ecs.ebmgn7.26xlarge", "--size", "3g.20gb", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["node_resources"] == {"nvidia.com/mig-3g.20gb": 16}
    assert out["autoscaler_tags"] == {K3G: "16"}
    assert out["gpu"] == "NVIDIA A100-SXM4-40GB" and out["gpus"] == 8 and len(out["instances"]) == 2
    assert main(["plan", "--instance-type", "ECS.EBMGN7.26XLARGE", "--sequence", "1g.5gb.me-1g.5gb"]) == 0
    text = capsys.readouterr().out
    assert "node ecs.ebmgn7.26xlarge: 8 x NVIDIA A100-SXM4-40GB" in text
    assert "node resources: nvidia.com/mig-1g.5gb=8, nvidia.com/mig-1g.5gb.me=8" in text
    assert "k8s.io/cluster-autoscaler/node-template/resource/nvidia.com/mig-1g.5gb.me: 8" in text


@pytest.mark.parametrize("instance_type, needle", [
    ("ecs.gn7i-c32g1.8xlarge", "has NVIDIA A10, which has no MIG"),
    ("ecs.gn7-c13g1.13xlarge", "passthrough"),
    ("ecs.ebmgn7.32xlarge", "does not know how many GPUs ecs.ebmgn7.32xlarge has"),
    ("ecs.ebmgn9x.48xlarge", "not in the family table"),
    ("m5.large", "is not an ECS instance type"),
    ("", "'' is not an ECS instance type"),  # (blank was taken as absent: --gpu None, an internal error)
])
def test_plan_refuses_an_instance_type_without_known_mig_gpus_in_one_line(instance_type, needle):
    proc = subprocess.run([sys.executable, "-m", "functions.commands.main", "plan", "--instance-type", instance_type,
                           "--size", "1g.5gb"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert needle in error_text(proc.stderr)


def test_status_says_whether_the_template_advertises_the_layout(capsys):
    assert main(["status", "--inventory", INVENTORY, "--json"]) == 0
    pools = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pools"]}
    a100 = pools["gpu-mig-a100"]["autoscaler"]
    assert a100["auto_scaling"] and a100["managed"] and not a100["advertises"]
    assert a100["expected"] == {"nvidia.com/mig-3g.20gb": 16} and a100["advertised"] == {}
    assert main(["status", "--inventory", INVENTORY]) == 0
    assert "autoscaler: auto scaling on; its template does NOT advertise the layout" in capsys.readouterr().out


def test_status_shows_an_autoscaling_pool_at_zero_nodes_with_its_tags(tmp_path, capsys):
    data = json.load(open(INVENTORY))
    pool = data["nodepools"][0]
    pool["scaling_group"]["tags"].append({"key": K3G, "value": "16"})
    data["nodes"] = [n for n in data["nodes"] if n["nodepool_id"] != pool["nodepool_info"]["nodepool_id"]]
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(data))
    assert main(["status", "--inventory", str(path), "--json"]) == 0
    pools = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pools"]}
    zero = pools["gpu-mig-a100"]
    assert zero["nodes"] == 0 and zero["label"] == "sequence=3g.20gb-3g.20gb" and zero["autoscaler"]["advertises"]
    assert main(["status", "--inventory", str(path)]) == 0
    assert "its template advertises nvidia.com/mig-3g.20gb=16" in capsys.readouterr().out


def test_doctor_checks_each_autoscaling_mig_pool():
    lookup = InventoryLookup.from_file(INVENTORY)
    pools = lookup.nodepools(lookup.cluster_id)
    (pending,) = autoscaler_checks(pools, "auto")
    assert pending.status == "warn" and "to set: nvidia.com/mig-3g.20gb=16" in pending.text
    (off,) = autoscaler_checks(pools, "off")
    assert off.status == "warn" and "ACK_MIG_AUTOSCALER_TAGS=off" in off.text
    tagged = [p.model_copy(update={"tags": dict(p.tags, **{K3G: "16"})}) for p in pools]
    (ok,) = autoscaler_checks(tagged, "auto")
    assert ok.status == "ok" and "a new node advertises nvidia.com/mig-3g.20gb=16" in ok.text
    # pools without auto scaling are not the autoscaler's business
    assert autoscaler_checks([p.model_copy(update={"auto_scaling": False}) for p in pools], "auto") == []


def test_status_shows_a_tag_value_of_5000_digits_as_it_is(tmp_path, capsys):
    """A template tag's value is the pool's text: one of 5,000 ASCII digits passed the digit check and ``int`` of it
    raised ValueError (Python's 4,300-digit limit), so ``status`` ended in an internal error and showed no pool. A
    value of more digits than any count is shown as it is, never read as a count."""
    data = json.load(open(INVENTORY))
    data["nodepools"][0]["scaling_group"]["tags"].append({"key": K3G, "value": "9" * 5000})
    path = tmp_path / "digits.json"
    path.write_text(json.dumps(data))
    assert main(["status", "--inventory", str(path), "--json"]) == 0
    pools = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pools"]}
    view = pools["gpu-mig-a100"]["autoscaler"]
    assert view["advertised"] == {"nvidia.com/mig-3g.20gb": "9" * 5000} and not view["advertises"]
