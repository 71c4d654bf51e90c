"""Cluster lookup through the ACK API (``alibabacloud-cs20151215``, ROA, version 2015-12-15).

Imported only when an event needs the cluster, so an irrelevant event never loads the SDK. The SDK signs
and serializes every request itself; tests point it at a loopback emulator through configuration
(``ACK_MIG_CS_ENDPOINT=http://127.0.0.1:PORT``), never by patching it.

Transient failures (throttling, 5xx, timeouts, connection errors) are retried here with a short
exponential backoff, ``ACK_MIG_API_MAX_ATTEMPTS`` attempts in all, then end the event as ``retry`` so FC
retries the asynchronous invocation. Anything else (access denied, unknown cluster) is an error: retrying
cannot fix it.
"""

import logging
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from alibabacloud_cs20151215 import models as cs_models
from alibabacloud_cs20151215.client import Client as CsClient
from alibabacloud_tea_openapi import utils_models as openapi_models
from alibabacloud_tea_openapi.exceptions import AlibabaCloudException, ThrottlingException
from darabonba.runtime import RuntimeOptions

from functions.cloud.cluster import node_from_api, nodepool_from_api
from functions.base.deadline import Guard, answer_too_large, urllib3_guarded
from functions.base.endpoints import resolve
from functions.base.errors import ConfigurationError, Refused, RetryLater
from functions.base.model import Node, NodePool
from functions.base.settings import Settings
from functions.cloud.answers import answer_body
from functions.base.textsafe import one_line
from node_bootstrap.outside import OutsideDataError, as_object, json_type, whole

PAGE_SIZE = 100  # the API's maximum
MAX_PAGES = 200  # 20 000 nodes: far beyond any cluster; stops a server that never ends its pages
IDS_PER_CALL = 100  # instance ids per DescribeClusterNodes call (comma-joined)
LISTINGS = 3  # listings of one node query whose pages disagree (total_count) before it is left for later

log = logging.getLogger(__name__)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ThrottlingException):
        return True
    if isinstance(exc, AlibabaCloudException):
        status = getattr(exc, "status_code", None) or 0
        code = str(getattr(exc, "code", "") or "")
        return status == 429 or status >= 500 or "throttling" in code.lower()
    return True  # connection refused, timeouts, resets: the SDK wraps them; all worth another try


def _code(exc: BaseException) -> str:
    """The answer's error code as one short line: it is the answer's text (a proxy may write a line break or
    kilobytes there), and it ends up in a pool's one-line refusal, the event's reason and a log line."""
    return one_line(getattr(exc, "code", "") or type(exc).__name__, 64)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, AlibabaCloudException):
        return "%s %s" % (getattr(exc, "status_code", "") or "", _code(exc))
    inner = getattr(exc, "inner_exception", None)
    return type(inner or exc).__name__


def _unique(nodes: List[Node]) -> List[Node]:
    """The nodes, each instance once (the first time it was listed)."""
    out: Dict[str, Node] = {}
    for node in nodes:
        out.setdefault(node.instance_id, node)
    return list(out.values())


def _ids(items: list) -> List[Any]:
    """What identifies each item of a page, in order: its instance id (an item without one: the item)."""
    return [item.get("instance_id") if isinstance(item, dict) else item for item in items]


def _listed(body: Mapping[str, Any], key: str, call: str) -> list:
    """``body[key]``, the answer's list of items ([] when absent); Refused when it is there but no list
    (read item by item, a text's characters or an object's keys were taken for items)."""
    items = body.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise Refused("%s answered %s as %s; expected a list of objects" % (call, key, json_type(items)), call, "",
                      "UnreadableAnswer")
    return items


def _parsed(parse: Callable[[Any], Any], items: Any, what: str) -> list:
    """API items as models; an item we cannot read (of another shape, or missing what a model needs) is
    left out with a warning. Raising would fail the event, and FC's retries would meet the same item again:
    one odd node must not stop the others."""
    out = []
    for item in items or []:
        if not item:
            continue
        if not isinstance(item, dict):
            log.warning("ACK API %s left out, unreadable: %s, not an object", what, json_type(item))
            continue
        try:
            out.append(parse(item))
        except (KeyError, ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            log.warning("ACK API %s left out, unreadable: %s: %s", what, type(exc).__name__,
                        one_line(exc, 200))
    return out


class CsLookup:
    """The ACK API as a :class:`functions.cloud.cluster.ClusterLookup`."""

    def __init__(self, settings: Settings, sleep: Callable[[float], None] = time.sleep) -> None:
        if not settings.region and settings.cs_endpoint is None:
            raise ConfigurationError("no region: set ACK_MIG_REGION (or run in FC, which sets FC_REGION)")
        if settings.credentials is None:
            raise ConfigurationError("no credentials: give the function a role (FC sets ALIBABA_CLOUD_ACCESS_KEY_"
                                     "ID/_SECRET/_SECURITY_TOKEN) or set them, or use --inventory")
        creds = settings.credentials
        endpoint = resolve("cs", settings.region, settings.cs_endpoint)  # functions/base/endpoints.py
        config = openapi_models.Config(
            access_key_id=creds.access_key_id, access_key_secret=creds.access_key_secret,
            security_token=creds.security_token or None, region_id=settings.region or None,
            endpoint=endpoint.host, protocol=endpoint.protocol,
            read_timeout=settings.api_timeout_s * 1000, connect_timeout=settings.api_timeout_s * 1000)
        self._client = CsClient(config)
        self._runtime = RuntimeOptions(read_timeout=settings.api_timeout_s * 1000,
                                       connect_timeout=settings.api_timeout_s * 1000)
        self._attempts = settings.api_max_attempts
        self._timeout_s = settings.api_timeout_s
        self._sleep = sleep
        import urllib3  # the Tea SDK calls through requests: let each attempt's Guard reach its sockets

        urllib3_guarded(urllib3)
        self.calls = 0  # API calls made, for the log and the benchmarks

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        for attempt in range(1, self._attempts + 1):
            self.calls += 1
            guard = Guard(self._timeout_s)  # the whole attempt: the SDK's read timeout restarts at every byte
            try:
                with guard:
                    return fn()
            except Exception as exc:  # the SDK raises several unrelated types; sorted out below
                too_large = answer_too_large(exc)
                if too_large is not None:  # the endpoint's, not one pool's: the next try would read the same
                    raise ConfigurationError("%s failed: %s" % (what, too_large)) from None
                if guard.fired:  # cut at the attempt's bound: transient, like a read timeout
                    exc = TimeoutError("no complete answer within %ds" % self._timeout_s)
                if not _transient(exc):
                    raise Refused("%s failed: %s: %s" % (what, _describe(exc),
                                                        str(getattr(exc, "message", "")
                                                            or exc).splitlines()[0][:200]),
                                  what, str(getattr(exc, "status_code", "") or ""),
                                  _code(exc)) from None
                if attempt == self._attempts:
                    # the function's caller retries the invocation, a person reruns the command: say neither
                    raise RetryLater("%s failed %d times, last: %s; transient, a later try may pass"
                                     % (what, attempt, _describe(exc))) from None
                self._sleep(min(0.2 * (2 ** (attempt - 1)), 2.0))
        raise AssertionError("unreachable")

    def nodepools(self, cluster_id: str) -> List[NodePool]:
        response = self._call("DescribeClusterNodePools", lambda: self._client.describe_cluster_node_pools_with_options(
            cluster_id, cs_models.DescribeClusterNodePoolsRequest(), {}, self._runtime))
        return _parsed(nodepool_from_api, _listed(answer_body(response, "DescribeClusterNodePools"), "nodepools",
                                                  "DescribeClusterNodePools"), "node pool")

    def nodes(self, cluster_id: str, nodepool_id: Optional[str] = None,
              instance_ids: Sequence[str] = ()) -> List[Node]:
        ids = list(instance_ids)
        if not ids:
            return self._pages(cluster_id, nodepool_id, None)
        out: List[Node] = []
        for start in range(0, len(ids), IDS_PER_CALL):
            out.extend(self._pages(cluster_id, nodepool_id, ",".join(ids[start:start + IDS_PER_CALL])))
        return out

    def _page(self, cluster_id: str, nodepool_id: Optional[str], joined_ids: Optional[str], page: int
              ) -> Tuple[list, Any]:
        """One page of a listing: (its non-empty items, the answer's ``page.total_count``)."""
        request = cs_models.DescribeClusterNodesRequest(nodepool_id=nodepool_id, instance_ids=joined_ids,
                                                        page_number=str(page), page_size=str(PAGE_SIZE))
        response = self._call("DescribeClusterNodes", lambda: self._client.describe_cluster_nodes_with_options(
            cluster_id, request, {}, self._runtime))
        body = answer_body(response, "DescribeClusterNodes")
        items = [item for item in _listed(body, "nodes", "DescribeClusterNodes") if item]
        try:  # the reader rule: a count from 1 up (true is an int to Python, and it or 0 ended the pages early)
            total: Optional[int] = whole(as_object(body.get("page")).get("total_count"), "page.total_count", 1, 2 ** 62)
        except OutsideDataError:
            total = None  # no total: the pages are followed until one comes short
        return items, total

    def _pages(self, cluster_id: str, nodepool_id: Optional[str], joined_ids: Optional[str]) -> List[Node]:
        """Every page of one listing. ACK pages by number over the list as it is at each call: a node removed
        (or added) between two pages shifts the later ones, so one node is skipped (or listed twice) and a
        pool member would be missing. A listing whose ``total_count`` differs between its pages is read again;
        so is one whose pages before the last, read again after it, no longer list the same nodes in the same
        order: a removal and an addition between two pages keep the total as it was while shifting what
        follows, and the removal shows as a change of a page before the cursor. One page (a pool of up to 100
        nodes) is one answer and costs one call; P > 1 pages cost 2P - 1 calls. LISTINGS listings in all, then
        RetryLater: the pool is changing faster than it can be read."""
        for _listing in range(LISTINGS):
            pages: List[list] = []
            first_total: Any = None
            moved = False
            for page in range(1, MAX_PAGES + 1):
                items, total = self._page(cluster_id, nodepool_id, joined_ids, page)
                pages.append(items)
                if page == 1:
                    first_total = total
                elif total != first_total:
                    moved = True  # the list changed between two pages: a node may have been skipped
                    break
                read = sum(len(p) for p in pages)
                if not items or len(items) < PAGE_SIZE or (isinstance(total, int) and read >= total):
                    break
            if not moved:
                moved = any(_ids(self._page(cluster_id, nodepool_id, joined_ids, page)[0]) != _ids(pages[page - 1])
                            for page in range(1, len(pages)))
            if not moved:
                return _unique(_parsed(node_from_api, [item for p in pages for item in p], "node"))
        raise RetryLater("DescribeClusterNodes: the node list changed while it was read page by page, %d times "
                         "in a row; transient, a later try may pass" % LISTINGS)

    def user_kubeconfig(self, cluster_id: str, minutes: int = 15, private: bool = True) -> str:
        """A short-lived kubeconfig of the cluster with its private API endpoint (delivery lifts startup
        taints with it; the kubelet's own credentials may not touch taints). ``private=False``: the public
        endpoint, for ``doctor`` on an operator's machine outside the VPC."""
        request = cs_models.DescribeClusterUserKubeconfigRequest(private_ip_address=private,
                                                                 temporary_duration_minutes=minutes)
        response = self._call("DescribeClusterUserKubeconfig",
                              lambda: self._client.describe_cluster_user_kubeconfig_with_options(
                                  cluster_id, request, {}, self._runtime))
        config = answer_body(response, "DescribeClusterUserKubeconfig").get("config")
        if not isinstance(config, str) or not config.strip():
            raise Refused("DescribeClusterUserKubeconfig answered %s as its config; expected the kubeconfig's "
                          "text" % json_type(config), "DescribeClusterUserKubeconfig", "", "UnreadableAnswer")
        return config

    def set_nodepool_tags(self, cluster_id: str, nodepool_id: str, tags: Sequence[Tuple[str, str]]) -> None:
        """ModifyClusterNodePool (``PUT /clusters/{ClusterId}/nodepools/{NodepoolId}``) with the pool's whole
        ``scaling_group.tags`` list and nothing else (functions/pipeline/autoscaler_sync.py decides the list). The same
        list twice is the same request, so a retry after a timeout is safe."""
        group = _TagsOnly(tags=[cs_models.Tag(key=k, value=v) for k, v in tags])
        request = cs_models.ModifyClusterNodePoolRequest(scaling_group=group)
        self._call("ModifyClusterNodePool", lambda: self._client.modify_cluster_node_pool_with_options(
            cluster_id, nodepool_id, request, {}, self._runtime))


    def nodepool_labels(self, cluster_id: str, nodepool_id: str) -> Tuple[str, List[Tuple[str, Optional[str]]]]:
        """The pool's name and its ``kubernetes_config.labels`` as (key, value) pairs, in the API's order and
        exactly as answered (a value the API leaves out stays None), from DescribeClusterNodePools (the call
        the function makes anyway: no other grant). ConfigurationError when the cluster has no such pool."""
        response = self._call("DescribeClusterNodePools", lambda: self._client.describe_cluster_node_pools_with_options(
            cluster_id, cs_models.DescribeClusterNodePoolsRequest(), {}, self._runtime))
        body = answer_body(response, "DescribeClusterNodePools")
        for pool in _listed(body, "nodepools", "DescribeClusterNodePools"):
            info = as_object(as_object(pool).get("nodepool_info"))
            if info.get("nodepool_id") != nodepool_id:
                continue
            listed = _listed(as_object(pool.get("kubernetes_config")), "labels", "DescribeClusterNodePools")
            # written back whole: a label that cannot be read would be dropped from the pool by the write
            odd = next((n for n, t in enumerate(listed) if t and not (isinstance(t, dict) and isinstance(
                t.get("key") or "", str))), None)
            if odd is not None:
                item = listed[odd]
                raise Refused("DescribeClusterNodePools answered label %d of node pool %s as %s, not {\"key\": "
                              "\"<text>\", \"value\": ...}; the labels are written back whole, so none is changed"
                              % (odd, nodepool_id, "an object whose key is %s" % json_type(item.get("key"))
                                 if isinstance(item, dict) else json_type(item)), "DescribeClusterNodePools", "",
                              "UnreadableAnswer")
            labels = [(str(t["key"]), None if t.get("value") is None else str(t["value"]))
                      for t in listed if t and t.get("key")]
            return str(info.get("name") or ""), labels
        raise ConfigurationError("cluster %s has no node pool %s (DescribeClusterNodePools lists %d)"
                                 % (cluster_id, nodepool_id, len(body.get("nodepools") or [])))

    def set_nodepool_labels(self, cluster_id: str, nodepool_id: str,
                            labels: Sequence[Tuple[str, Optional[str]]]) -> None:
        """ModifyClusterNodePool with the pool's whole ``kubernetes_config.labels`` list and nothing else
        (no taints: the SDK's own model would send ``taints: []`` beside them; no ``update_nodes``: the
        running nodes' labels stay as they are). The caller read the list and changes one key in it; the
        same list twice is the same request, so a retry after a timeout is safe."""
        config = _LabelsOnly(labels=[cs_models.Tag(key=k, value=v) for k, v in labels])
        request = cs_models.ModifyClusterNodePoolRequest(kubernetes_config=config)
        self._call("ModifyClusterNodePool", lambda: self._client.modify_cluster_node_pool_with_options(
            cluster_id, nodepool_id, request, {}, self._runtime))


class _LabelsOnly(cs_models.ModifyClusterNodePoolRequestKubernetesConfig):
    """The Kubernetes part of a ModifyClusterNodePool body holding ``labels`` alone. The SDK model's own
    ``to_map`` also writes ``taints`` as an empty list whatever was set, which would say "no taints" to an
    API that reads the list as the pool's whole set (the startup taint among them); this request says only
    what it means to change."""

    def to_map(self) -> dict:
        return {"labels": [t.to_map() for t in self.labels or []]}


class _TagsOnly(cs_models.ModifyClusterNodePoolRequestScalingGroup):
    """The scaling group part of a ModifyClusterNodePool body holding ``tags`` alone. The SDK model's own
    ``to_map`` also writes ``data_disks``, ``disk_init``, ``instance_patterns`` and ``spot_price_limit`` as
    empty lists whatever was set; this request says only what it means to change."""

    def to_map(self) -> dict:
        return {"tags": [t.to_map() for t in self.tags or []]}
