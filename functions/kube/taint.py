"""Lifts the startup taint from a node once it is partitioned, so no pod lands on an unpartitioned node.

The kubelet cannot do this itself (NodeRestriction forbids a node to change its own taints), so this
uses a cluster credential (:func:`cs_kubeconfig`: a short-lived kubeconfig from ACK's
``DescribeClusterUserKubeconfig`` with the private endpoint, or the operator's own with ``--kubeconfig``)
and the function's Kubernetes client (``functions.kube.client``: TLS verified against the cluster CA, no
answer, 429 and 5xx retried with backoff).

Removal is a JSON patch guarded by a ``test`` of the whole taint entry at its index, so a concurrent change of
the node's taints is never overwritten: on a conflict the node is read again (at most 3 times).
A node without the taint is fine (a duplicate event, or a pool without startup taints).
"""

import re
import time
from typing import Callable, NamedTuple, Optional

from functions.kube.client import ClusterCredential, KubeApi
from node_bootstrap.kube import KubeError

_TAINT = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_./]{0,252})(?:=([-A-Za-z0-9_.]{0,63}))?:"
                    r"(NoSchedule|PreferNoSchedule|NoExecute)\Z")


class Taint(NamedTuple):
    key: str
    value: Optional[str]
    effect: str


class TaintError(ValueError):
    exit_code = 2


def parse_taint(text: str) -> Taint:
    m = _TAINT.match(text.strip())
    if not m:
        raise TaintError("ACK_MIG_STARTUP_TAINT=%r is not key[=value]:Effect (NoSchedule, PreferNoSchedule "
                         "or NoExecute)" % text[:80])
    return Taint(m.group(1), m.group(2), m.group(3))


class TaintRemover:
    """``kubeconfig``: a :class:`functions.kube.client.ClusterCredential` (what :func:`cs_kubeconfig` gives) or
    any provider of kubeconfig text."""

    def __init__(self, taint: Taint, kubeconfig: Callable[[], str], sleep: Callable[[float], None] = time.sleep):
        self.taint, self.sleep = taint, sleep
        self._credential = kubeconfig if isinstance(kubeconfig, ClusterCredential) else ClusterCredential(kubeconfig)
        self._client: Optional[KubeApi] = None

    def client(self) -> KubeApi:
        if self._client is None:
            self._client = self._credential.client(sleep=self.sleep)
        return self._client

    def remove(self, node_name: str) -> str:
        """``removed`` or ``absent``; raises KubeError when it cannot."""
        client = self.client()
        for _ in range(3):
            node = client.get_node(node_name)
            taints = (node.get("spec") or {}).get("taints") or []
            index = next((i for i, t in enumerate(taints) if t.get("key") == self.taint.key
                          and t.get("effect") == self.taint.effect), None)
            if index is None:
                return "absent"
            try:
                # Test the whole entry, not just its key: if another controller reordered the list, an
                # entry with the same key but another effect may now sit at this index.
                client.json_patch_node(node_name, [
                    {"op": "test", "path": "/spec/taints/%d" % index, "value": taints[index]},
                    {"op": "remove", "path": "/spec/taints/%d" % index}])
                return "removed"
            except KubeError as exc:
                if exc.status not in (409, 422):
                    raise
        raise KubeError("the taints of %s kept changing; try again" % node_name, 409)


def cs_kubeconfig(settings, cluster_id: str, minutes: int = 15) -> ClusterCredential:
    """The function's cluster credential: the operator's kubeconfig file when the command line gave one
    (``ACK_MIG_KUBECONFIG``), else ACK's (valid ``minutes``: ACK accepts 15..4320) through the CS API,
    with the function side's CS client and its retry rules (functions.cloud.cs_lookup): for the private endpoint
    the function reaches in the cluster's VPC, or the public one the command line asks for on an operator's
    machine (``ACK_MIG_KUBE_ENDPOINT``)."""
    from functions.base.settings import longest_run_s

    options = dict(attempts=settings.rollout.kube_max_attempts, deadline_s=float(longest_run_s(settings)))
    if settings.rollout.kubeconfig:
        return ClusterCredential(path=settings.rollout.kubeconfig, **options)

    def fetch() -> str:
        from functions.cloud.cs_lookup import CsLookup

        return CsLookup(settings).user_kubeconfig(cluster_id, minutes=minutes,
                                                  private=settings.rollout.kube_endpoint != "public")

    return ClusterCredential(fetch, **options)
