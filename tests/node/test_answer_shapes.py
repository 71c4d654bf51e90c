"""The node's readers of API answers (the stdlib client, the device plugin's capacity wait and restart, the
mig-manager check, disable's wait) against answers of another shape than the call's, as a proxy or webhook in
front of the API server may send: the call fails alone with one line naming it, or that part reads as absent;
never an AttributeError or KeyError out of the run."""

import pytest

from functions.decision.waves import KubeNode, capacity_shows
from node_bootstrap.commands.disable import UNREADABLE, _mig_allocatable, wait_mig_resources_gone
from node_bootstrap.kube.client import KubeClient, KubeError, load_kubeconfig
from node_bootstrap.kube.deviceplugin import reported_capacity, restart_by_pod_delete, wait_for_capacity
from node_bootstrap.kube.migmanager import refuse_if_mig_manager

NODE = "node-a"
NODE_PATH = "/api/v1/nodes/" + NODE
PODS = "/api/v1/namespaces/kube-system/pods"
NOT_OBJECTS = ["[]", "[{}]", "5", '"Node"', "null"]
NOT_POD_LISTS = NOT_OBJECTS + ['{"items": 5}', '{"items": [1]}', '{"items": [{"metadata": {}}, []]}']
# Objects whose parts have another shape
ODD_NODES = [{"metadata": [], "status": []}, {"metadata": {"labels": []}, "status": {"capacity": []}},
             {"metadata": {"labels": "nvidia.com/mig.config"}, "status": {"allocatable": "x"}}, {"status": 5}]


def _client(kube_api, tmp_path):
    kube_api.add_node(NODE)
    return KubeClient(load_kubeconfig(kube_api.write_kubeconfig(tmp_path / "k.conf", node=NODE)))


@pytest.mark.parametrize("body", NOT_OBJECTS)
def test_a_node_answer_that_is_no_object_fails_that_call_with_one_line(kube_api, tmp_path, body):
    client = _client(kube_api, tmp_path)
    kube_api.answer_next("GET", NODE_PATH, body)
    with pytest.raises(KubeError) as err:
        client.get_node(NODE)
    assert str(err.value).startswith("GET %s: " % NODE_PATH) and "\n" not in str(err.value)
    assert client.get_node(NODE)["metadata"]["name"] == NODE


@pytest.mark.parametrize("body", NOT_POD_LISTS)
def test_a_pod_list_of_another_shape_fails_that_call_with_one_line(kube_api, tmp_path, body):
    client = _client(kube_api, tmp_path)
    kube_api.add_pod("kube-system", "nvdp", NODE, {"app": "nvdp"})
    kube_api.answer_next("GET", PODS, body)
    with pytest.raises(KubeError) as err:
        client.list_pods(namespace="kube-system", node_name=NODE)
    assert str(err.value).startswith("GET %s: " % PODS) and "pod list" in str(err.value), str(err.value)
    assert [p["metadata"]["name"] for p in client.list_pods(namespace="kube-system", node_name=NODE)] == ["nvdp"]


@pytest.mark.parametrize("body", NOT_OBJECTS)
def test_the_capacity_wait_and_the_mig_manager_check_go_on_with_one_line(kube_api, tmp_path, body):
    client = _client(kube_api, tmp_path)
    kube_api.answer_next("GET", NODE_PATH, body, times=100)
    result = wait_for_capacity(client, NODE, {"nvidia.com/mig-1g.10gb": 7}, 0, sleep=lambda s: None)
    assert not result["ready"] and result["error"].startswith("GET %s: " % NODE_PATH)
    lines = []
    refuse_if_mig_manager(client, NODE, lines.append)
    assert len(lines) == 1 and "could not read node" in lines[0]
    gone = wait_mig_resources_gone(client, NODE, 0, sleep=lambda s: None)
    assert not gone["ready"]


@pytest.mark.parametrize("node", ODD_NODES)
def test_parts_of_another_shape_read_as_absent(node):
    assert reported_capacity(node) == {}
    # disable's wait alone reads a status or allocatable of another shape as unreadable, never as none left
    # (test_disable_never_reads_an_allocatable_of_another_shape_as_no_mig_left)
    assert _mig_allocatable(node) in ({}, {UNREADABLE: 1})
    lines = []
    refuse_if_mig_manager(type("C", (), {"get_node": lambda self, name: node})(), NODE, lines.append)


def test_a_listed_pod_without_a_name_is_not_deleted_and_the_others_are(kube_api, tmp_path):
    client = _client(kube_api, tmp_path)
    kube_api.add_pod("kube-system", "nvdp", NODE, {"app": "nvdp"})
    kube_api.answer_next("GET", PODS, '{"items": [{"metadata": []}, {"metadata": {"name": 5}}, '
                                      '{"metadata": {"name": "nvdp", "namespace": "kube-system"}}]}')
    assert restart_by_pod_delete(client, NODE, "kube-system", "app=nvdp") == ["nvdp"]
    assert ("kube-system", "nvdp") not in kube_api.pods


# ---- a Node whose allocatable cannot be read never shows MIG's resources gone ----

UNREADABLE_NODES = [{"metadata": {"name": NODE}, "status": {"allocatable": "x"}},
                    {"metadata": {"name": NODE}, "status": {"allocatable": []}},
                    {"metadata": {"name": NODE}, "status": 5}, {"metadata": {"name": NODE}, "status": []}]


@pytest.mark.parametrize("node", UNREADABLE_NODES)
def test_disable_never_reads_an_allocatable_of_another_shape_as_no_mig_left(node):
    """disable waits until no ``nvidia.com/mig-*`` resource is allocatable; an allocatable that is no object
    (a proxy's answer, a mangled Node) read as none, and disable reported MIG off done on a node it could not
    read. It waits on, and its timeout names why."""
    assert _mig_allocatable(node) == {UNREADABLE: 1}
    gone = wait_mig_resources_gone(type("C", (), {"get_node": lambda self, name: node})(), NODE, 0,
                                   sleep=lambda s: None)
    assert not gone["ready"] and list(gone["mig_resources_left"]) == [UNREADABLE]
    assert _mig_allocatable({"metadata": {"name": NODE}, "status": {"allocatable": {}}}) == {}


@pytest.mark.parametrize("node", UNREADABLE_NODES + [
    {"metadata": {"name": NODE}, "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7_0"}}}])
def test_the_rollout_never_reads_mig_off_done_on_a_node_whose_allocatable_does_not_read(node):
    """The rollout's capacity wait with MIG off (``waves.capacity_shows`` with nothing expected): an
    allocatable of another shape, or a MIG value that is no count, read as "no MIG resource left" and the
    node was finished as done. It is not done until the Node reads."""
    assert not capacity_shows(KubeNode.from_object(node), {}, True)
    assert capacity_shows(KubeNode.from_object({"metadata": {"name": NODE}, "status": {"allocatable": {
        "nvidia.com/mig-1g.10gb": "0", "cpu": "8"}}}), {}, True)


ODD_PODS = [({"metadata": {"name": "odd", "namespace": "ml", "uid": "u-odd"}, "status": "Running"}, "status", "text"),
            ({"metadata": [], "status": {"phase": "Running"}}, "metadata", "a list"),
            ({"metadata": {"name": "odd", "namespace": "ml", "annotations": ["x"]}}, "metadata.annotations",
             "a list")]


@pytest.mark.parametrize("pod,field,kind", ODD_PODS)
def test_a_pod_of_another_shape_keeps_every_allocation_and_is_named_in_the_line(kube_api, tmp_path, pod, field,
                                                                                 kind):
    """One pod of another shape in the node's pod list: which pods live cannot be told, so every kubelet
    allocation counts (the safe side), and the line names that pod and its field, not an AttributeError."""
    from node_bootstrap.commands.holdings import allocations_reader
    from node_bootstrap.kube.allocations import Allocations, Entry

    client = _client(kube_api, tmp_path)
    found = Allocations(True, entries=(Entry("u-gone", "c", "nvidia.com/mig-1g.10gb", "MIG-a"),))
    kube_api.answer_next("GET", "/api/v1/pods", '{"items": [%s]}' % __import__("json").dumps(pod))
    lines = []
    assert allocations_reader(lambda: found, client, NODE, lines.append)() == found
    assert len(lines) == 1 and "AttributeError" not in lines[0], lines
    assert ("its %s is %s" % (field, kind)) in lines[0] and "every kubelet allocation counts" in lines[0], lines
    if isinstance(pod["metadata"], dict):
        assert "ml/odd" in lines[0], lines
