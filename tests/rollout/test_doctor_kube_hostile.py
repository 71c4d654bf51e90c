"""``doctor``'s Kubernetes checks against objects of odd shapes (a hand-edited or foreign object, a proxy's
answer): each is a check line that says so, never an exception out of ``_kube_checks`` (exit 70)."""

import argparse

import pytest

from functions.commands import doctor


def _node_labels_a_list(api):
    api.nodes["odd-node"]["metadata"]["labels"] = ["nvidia.com/mig.config"]


def _pod_env_a_string(api):
    api.pods[("kube-system", "nvidia-device-plugin-x")]["spec"]["containers"][0]["env"] = ["MIG_STRATEGY=mixed"]


def _pod_name_a_number(api):
    api.pods[("kube-system", "nvidia-device-plugin-x")]["metadata"]["name"] = 7


@pytest.mark.parametrize("spoil", [_node_labels_a_list, _pod_env_a_string, _pod_name_a_number],
                         ids=["node-labels-list", "pod-env-string", "pod-name-number"])
def test_doctor_survives_objects_of_odd_shapes(kube_api, tmp_path, spoil):
    kube_api.add_node("odd-node")
    kube_api.add_pod("kube-system", "nvidia-device-plugin-x", "odd-node")
    spoil(kube_api)
    args = argparse.Namespace(kubeconfig=kube_api.write_kubeconfig(tmp_path / "k.conf", cert=kube_api.admin_cert()),
                              cluster_id="c-x")
    found = doctor._kube_checks(args, None)
    assert found and all(c.status in ("ok", "warn", "PROBLEM") for c in found)
