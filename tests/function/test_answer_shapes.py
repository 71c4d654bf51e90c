"""An answer of another shape than the call's (a JSON list, a number, ``items`` that are no objects), as a
proxy, an aggregated API or a webhook in front of the API server may send: the call fails alone with one line
naming it, never an AttributeError out of the caller, and the next call is served as usual."""

import pytest

from functions.kube.client import ApiError, KubeApi
from node_bootstrap.kube import load_kubeconfig
from tests.support.kubeapi import kube_api  # noqa: F401  (fixture)

PODS = "/api/v1/pods"
SHAPES = ["[]", '[{"kind": "Pod"}]', "5", '"PodList"', "null", '{"items": 5}', '{"items": {"a": {}}}',
          '{"items": [1]}', '{"items": [{"metadata": {"name": "p"}}, "x"]}']


def _api(kube_api, tmp_path):  # noqa: F811
    return KubeApi(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "a.conf", cert=kube_api.admin_cert())),
                   attempts=1)


@pytest.mark.parametrize("body", SHAPES)
def test_a_pod_list_of_another_shape_fails_that_call_with_one_line(kube_api, tmp_path, body):  # noqa: F811
    kube_api.add_node("node-a")
    kube_api.add_pod("team", "p", "node-a", gpus=1)
    api = _api(kube_api, tmp_path)
    kube_api.answer_next("GET", PODS, body)
    with pytest.raises(ApiError) as err:
        api.list_pods("node-a")
    message = str(err.value)
    assert message.startswith("GET %s: " % PODS) and "\n" not in message and "pod list" in message, message
    assert [p["metadata"]["name"] for p in api.list_pods("node-a")] == ["p"]  # the next call: served


def test_a_pod_list_without_items_is_an_empty_list(kube_api, tmp_path):  # noqa: F811
    api = _api(kube_api, tmp_path)
    kube_api.answer_next("GET", PODS, '{"kind": "PodList", "metadata": {}}')
    assert api.list_pods("node-a") == []
