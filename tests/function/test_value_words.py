"""What a value of the wrong shape is called in a one-line refusal: one helper (``node_bootstrap.outside.json_type``)
and one wording for every reader. ``functions.cloud.answers.kind`` and ``functions.kube.shapes._kind`` said the
same thing in other words ("no body", "a mapping", "a string", "a boolean"), so one answer read as an object
in one message and a mapping in the next."""

from types import SimpleNamespace

import pytest

from functions.base.errors import Refused
from functions.cloud import answers
from functions.kube import shapes
from node_bootstrap.outside import json_type

WORDS = [(None, "null"), (True, "true/false"), (3, "a number"), (1.5, "a number"), ("x", "text"),
         ([1], "a list"), ({"a": 1}, "an object")]


@pytest.mark.parametrize("value, words", WORDS)
def test_every_reader_names_a_value_in_the_same_words(value, words):
    assert json_type(value) == words
    if not isinstance(value, dict):  # an answer's body that is no JSON object
        response = SimpleNamespace(body=None, _map={"body": value})
        with pytest.raises(Refused) as refused:
            answers.answer_body(response, "DescribeClusterNodes")
        assert "DescribeClusterNodes answered %s, not the API's JSON object" % words in str(refused.value)
    if not isinstance(value, (list, type(None))):  # a Kubernetes object's list field of another shape
        assert shapes.problem({"spec": {"containers": value}}) == "spec.containers: expected a list, got %s" % words
    if not isinstance(value, (dict, type(None))):
        assert shapes.problem({"metadata": value}) == "metadata: expected an object, got %s" % words


def test_the_readers_keep_no_wording_of_their_own():
    assert not hasattr(answers, "kind") and not hasattr(shapes, "_kind")


@pytest.mark.parametrize("value, words", WORDS)
def test_the_kubeconfig_snapshot_and_mig_parted_readers_name_a_value_in_the_same_words(tmp_path, value, words):
    """The node's kubeconfig reader (``kube.client._kind``: "a mapping", "a string", "nothing"), the snapshot
    reader (``cluster._NAMES`` and Python's type names: "got str", "got list") and the mig-parted reader ("a
    mapping", "a boolean") each had their own words beside json_type: one kubeconfig said "a mapping" where the
    pod list said "an object", a snapshot "got int" where an ACK answer said "a number"."""
    import json

    from functions.cloud.cluster import InventoryLookup
    from functions.base.errors import BadInventory
    from functions.decision.migparted import from_mig_parted
    from node_bootstrap.kube.client import KubeError, load_kubeconfig

    if not isinstance(value, dict):
        conf = tmp_path / "kubeconfig"
        conf.write_text(json.dumps({"contexts": [value]}))
        with pytest.raises(KubeError) as refused:
            load_kubeconfig(str(conf))
        assert str(refused.value).endswith(
            "contexts[0]: expected an object {name, context: {cluster, user}}, got %s" % words), refused.value
    if not isinstance(value, (str, type(None))):
        snapshot = tmp_path / "snapshot.json"
        snapshot.write_text(json.dumps({"cluster_id": "c1", "nodes": [{"instance_id": value}]}))
        with pytest.raises(BadInventory) as refused:
            InventoryLookup.from_file(str(snapshot))
        assert str(refused.value).endswith("nodes[0].instance_id: expected text, got %s" % words), refused.value
    if value and not isinstance(value, dict):  # mig-parted's mig-devices: null or empty reads as none
        (done,) = from_mig_parted({"version": "v1", "mig-configs": {"x": [
            {"devices": "all", "mig-enabled": True, "mig-devices": value}]}})
        assert done.reason == "mig-devices must map profile names to counts, got %s" % words
    if isinstance(value, (bool, list, dict, type(None))):  # a count that is no number is named, not shown
        (done,) = from_mig_parted({"version": "v1", "mig-configs": {"x": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": value}}]}})
        assert done.reason == "mig-devices '1g.5gb': the count must be a whole number from 0 to 7, got %s" % words


def test_the_node_and_snapshot_readers_keep_no_wording_of_their_own():
    from functions.cloud import cluster
    from functions.decision import migparted
    from node_bootstrap.kube import client

    assert not hasattr(client, "_kind") and not hasattr(cluster, "_NAMES")
    assert "a boolean" not in open(migparted.__file__).read()
