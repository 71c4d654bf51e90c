"""Lifts the startup taint from a node once it is partitioned, so no pod lands on an unpartitioned node.

The kubelet cannot do this itself (NodeRestriction forbids a node to change its own taints), so this
uses a cluster credential: a short-lived kubeconfig from ACK's ``DescribeClusterUserKubeconfig`` with the
private endpoint, and the project's stdlib Kubernetes client (``node_bootstrap.kube``) with TLS verified
against the cluster CA. The kubeconfig is written to a private temp file only for the time it is read.

Removal is a JSON patch guarded by a ``test`` of the whole taint entry at its index, so a concurrent change of
the node's taints is never overwritten: on a conflict the node is read again (at most 3 times).
A node without the taint is fine (a duplicate event, or a pool without startup taints). No answer, 429
and 5xx are retried twice with backoff.
"""

import os
import re
import tempfile
import time
from typing import Callable, NamedTuple, Optional

from node_bootstrap.kube.client import KubeClient, KubeError, load_kubeconfig

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


def client_from_kubeconfig_text(text: str) -> KubeClient:
    """A client from kubeconfig text (ACK's, with the cluster CA): the text sits in a private temp file only
    while it is read."""
    fd, path = tempfile.mkstemp(prefix="ack-mig-kubeconfig-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return KubeClient(load_kubeconfig(path))
    except KubeError as exc:  # the temporary file's name means nothing to a reader (and differs per run)
        raise KubeError(str(exc).replace(path, "(the cluster kubeconfig)"), exc.status) from None
    finally:
        os.unlink(path)


class TaintRemover:
    def __init__(self, taint: Taint, kubeconfig_text: Callable[[], str],
                 sleep: Callable[[float], None] = time.sleep):
        self.taint, self.sleep = taint, sleep
        self._kubeconfig_text = kubeconfig_text
        self._client: Optional[KubeClient] = None

    def client(self) -> KubeClient:
        if self._client is None:
            self._client = client_from_kubeconfig_text(self._kubeconfig_text())
        return self._client

    def remove(self, node_name: str) -> str:
        """``removed`` or ``absent``; raises KubeError when it cannot."""
        for attempt in range(3):
            try:
                return self._remove(node_name)
            except KubeError as exc:
                # no answer, 429 or 5xx: the API server is busy or restarting; anything else is final
                if attempt == 2 or not (exc.status is None or exc.status == 429 or exc.status >= 500):
                    raise
                self.sleep(min(2.0, 0.25 * (2 ** attempt)))
        raise AssertionError("unreachable")

    def _remove(self, node_name: str) -> str:
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


def cs_kubeconfig(settings, cluster_id: str, minutes: int = 15) -> Callable[[], str]:
    """A provider of the cluster's kubeconfig (private endpoint, valid ``minutes``: ACK accepts 15..4320)
    through the CS API, with the function side's CS client and its retry rules (functions.cs_lookup)."""

    def fetch() -> str:
        from functions.cs_lookup import CsLookup

        return CsLookup(settings).user_kubeconfig(cluster_id, minutes=minutes)

    return fetch
