"""A run-record Lease of an odd shape (someone's hand edit, another tool's object under the name): ``status``
says the record was not read, in one line, and goes on; never an exception out of ``collect``."""

import pytest

from functions.base.settings import load_settings
from functions.cloud.cluster import InventoryLookup
from functions.commands.status import collect, render
from functions.decision import run_record as lr
from tests.rollout.conftest import snapshot


@pytest.mark.parametrize("metadata", [
    {"name": lr.RECORD_LEASE, "annotations": {lr.RECORD_ANNOTATION: 5}},      # a number, not text
    {"name": lr.RECORD_LEASE, "annotations": ["ack-mig-hook/last-run"]},      # a list, not a map
], ids=["number-annotation", "list-annotations"])
def test_status_survives_a_run_record_lease_of_an_odd_shape(cluster, metadata):
    cluster.add_nodes()
    cluster.api.leases[("default", lr.RECORD_LEASE)] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": dict(metadata, namespace="default", resourceVersion="7"), "spec": {}}
    status = collect(load_settings({}), InventoryLookup.from_dict(snapshot()), kube=cluster.client())
    assert status["function"]["record"] is None and status["function"]["error"]
    assert "function: last run unknown" in render(status, nodes=False)


def test_a_refusal_whose_status_details_is_not_an_object_is_one_line(cluster):
    """A 403 Status whose ``details`` is text (a proxy or webhook in front of the API server wrote it): the
    client's error is a KubeError like any refusal, and status says the record was not read."""
    from tests.support.kubeapi import Refused

    class Refusing(dict):
        def get(self, key, default=None):
            raise Refused(403, "forbidden by a policy", details="see the policy engine")

    cluster.add_nodes()
    cluster.api.leases = Refusing()
    status = collect(load_settings({}), InventoryLookup.from_dict(snapshot()), kube=cluster.client())
    assert status["function"]["record"] is None and "403" in status["function"]["error"]
