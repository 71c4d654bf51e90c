"""A MIG resource count the API server publishes is a Kubernetes quantity (k8s.io/apimachinery
pkg/api/resource/quantity.go: ASCII digits, an optional fraction, suffix or exponent). Python's ``int`` also
takes other scripts' digits ("١" is 1) and underscores ("7_0" is 70), which no quantity holds: such a value
must read as no count, never as another number."""

import pytest

from functions.decision.waves import KubeNode
from node_bootstrap.commands.disable import _mig_allocatable
from node_bootstrap.kube.deviceplugin import reported_capacity

RESOURCE = "nvidia.com/mig-1g.10gb"
NOT_QUANTITIES = ["\u0661", "7_0", "\uff17", "\u0663_\u0663"]  # Arabic-Indic 1, 7_0, fullwidth 7


def _node(value):
    return {"metadata": {"name": "n"}, "status": {"capacity": {RESOURCE: value}, "allocatable": {RESOURCE: value}}}


@pytest.mark.parametrize("value", NOT_QUANTITIES)
def test_the_function_reads_no_count_from_text_that_is_no_quantity(value):
    assert KubeNode.from_object(_node(value)).mig_allocatable() == {}


@pytest.mark.parametrize("value", NOT_QUANTITIES)
def test_the_node_reads_no_count_from_text_that_is_no_quantity(value):
    assert reported_capacity(_node(value)) == {}


@pytest.mark.parametrize("value", NOT_QUANTITIES)
def test_disable_never_reads_a_resource_whose_count_is_no_quantity_as_gone(value):
    assert list(_mig_allocatable(_node(value))) == [RESOURCE + " (not a count)"]
    assert _mig_allocatable(_node("0")) == {}


def test_quantities_the_api_server_writes_still_read():
    assert KubeNode.from_object(_node("7")).mig_allocatable() == {RESOURCE: 7}
    assert KubeNode.from_object(_node(7)).mig_allocatable() == {RESOURCE: 7}  # a snapshot's number
    assert KubeNode.from_object(_node("0")).mig_allocatable() == {RESOURCE: 0}
    assert reported_capacity(_node("7")) == {RESOURCE: 7}
    assert reported_capacity(_node("9" * 5000)) == {}
