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


def test_an_answer_past_the_bound_is_not_read_past_it_and_the_next_call_is_served(kube_api, tmp_path):  # noqa: F811
    """The reader rule's bound on an API answer (64 MiB, node_bootstrap/kube/client.py) was checked only once the
    function's client had read the whole body into memory (``response.read()``): a proxy or a broken aggregated
    API in front of the server sending hundreds of MB filled the function's memory within the call's timeout
    before the answer was refused. The node's client reads one byte past the bound at most; so does this one
    now, drops the connection with the rest unread, and fails that call alone in one line."""
    import tracemalloc

    from node_bootstrap.kube.client import MAX_ANSWER_BYTES

    kube_api.add_node("node-a")
    api = _api(kube_api, tmp_path)
    assert api.get_node("node-a")["metadata"]["name"] == "node-a"  # the connection is open and kept
    huge = b" " * (MAX_ANSWER_BYTES + (192 << 20)) + b"{}"  # valid JSON: only a bound on its size refuses it
    kube_api.answer_next("GET", "/api/v1/nodes/node-a", huge)
    tracemalloc.start()
    try:
        with pytest.raises(ApiError) as err:
            api.get_node("node-a")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del huge
    message = str(err.value)
    assert "larger than %d bytes" % MAX_ANSWER_BYTES in message and "\n" not in message, message
    assert peak < 2 * MAX_ANSWER_BYTES + (32 << 20), peak  # the bound, and one copy of it as it is read
    assert api.get_node("node-a")["metadata"]["name"] == "node-a"  # the next call: served on a new connection
