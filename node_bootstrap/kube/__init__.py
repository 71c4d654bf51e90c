"""The node's Kubernetes side, with the kubelet's own credential: a small standard-library client
(``client``, its YAML reader ``kubeyaml``), the labels (``nodelabels``), Events (``events``), the device
plugin (``deviceplugin``) and the check for NVIDIA's mig-manager (``migmanager``).

The function side uses the client too (``from node_bootstrap.kube.client import KubeClient``); the names it
uses are re-exported here. Imports only the pure MIG core and the node's error classes: never the driver,
the host or the commands (tests/test_layout.py).
"""

from .client import DEFAULT_KUBELET_KUBECONFIG, KubeClient, KubeConfig, KubeError, load_kubeconfig, \
    node_name_from_certificate

__all__ = ["DEFAULT_KUBELET_KUBECONFIG", "KubeClient", "KubeConfig", "KubeError", "load_kubeconfig",
           "node_name_from_certificate"]
