"""The cluster's network, read from ACK, and the function's VPC settings derived from it.

The function reaches the cluster's API server (to lift the startup taint, to cordon, drain and read nodes
during a rollout) through the private endpoint that ``DescribeClusterUserKubeconfig`` with
``PrivateIpAddress=true`` names. That address is inside the cluster's VPC, so the function must run in
that VPC: ``deploy`` sets the template's ``VpcId``, ``VSwitchId`` and ``SecurityGroupId`` from
``DescribeClusterDetail`` (``GET /clusters/{ClusterId}``, ``alibabacloud_cs20151215``'s
``DescribeClusterDetailResponseBody``):

* ``vpc_id``: "The ID of the virtual private cloud (VPC) where the cluster is deployed";
* ``vswitch_ids``: "The vSwitches for the cluster control plane" (``vswitch_id`` is deprecated); the first
  one is used: it is in the cluster's VPC, and the control plane's private endpoint is reachable from it;
* ``security_group_id``: "The ID of the security group to which the cluster belongs", the one its nodes
  use; a function's network interface in it may talk to the nodes and to the API server's internal load
  balancer like a node does;
* ``master_url``: a JSON text with ``api_server_endpoint`` (public, may be empty) and
  ``intranet_api_server_endpoint`` (the terraform-provider-alicloud reads it the same way,
  ``resource_alicloud_cs_kubernetes.go``; the SDK model's example is
  ``{"intranet_api_server_endpoint":"https://192.168.0.251:6443"}``).

Function Compute 3.0 attaches the function to the VPC with its service-linked role
``AliyunServiceRoleForFC`` (``vpc:DescribeVSwitchAttributes``, ``ecs:CreateNetworkInterface`` ...; FC
"Service-linked role of Function Compute"): the function's own role needs no network grant.
"""

from typing import Any, Dict, NamedTuple, Optional, Tuple

from functions.base.deadline import Guard, failure_code, failure_message, urllib3_guarded
from functions.base.settings import Endpoint
from functions.commands.stack.credentials import Keys
from functions.commands.stack.exit_codes import EXIT_USAGE, CloudError
from functions.commands.stack.unreachable import said
from node_bootstrap.outside import OutsideDataError, loads

VPC_PARAMETERS = ("VpcId", "VSwitchId", "SecurityGroupId")


class ClusterUnreadable(CloudError):
    pass


class ClusterNetwork(NamedTuple):
    cluster_id: str
    name: str
    state: str
    vpc_id: str
    vswitch_ids: Tuple[str, ...]
    security_group_id: str
    intranet_endpoint: str  # https://192.168.0.251:6443, or "" when the cluster names none
    public_endpoint: str

    def parameters(self) -> Dict[str, str]:
        """The template's VPC parameters for a function in this cluster's network ({} when ACK names no VPC)."""
        if not (self.vpc_id and self.vswitch_ids and self.security_group_id):
            return {}
        return {"VpcId": self.vpc_id, "VSwitchId": self.vswitch_ids[0], "SecurityGroupId": self.security_group_id}


def from_detail(body: Dict[str, Any]) -> ClusterNetwork:
    """Pure: a DescribeClusterDetail answer (its body as the API sent it, answers.answer_body) -> its network."""
    try:  # the reader rule (node_bootstrap/outside.py): a map of URLs, nothing deeper
        endpoints = loads(str(body.get("master_url") or "{}"), "master_url", 65536, max_depth=2)
    except OutsideDataError:
        endpoints = {}
    endpoints = endpoints if isinstance(endpoints, dict) else {}
    vswitches = tuple(v for v in (body.get("vswitch_ids") or []) if isinstance(v, str) and v)
    if not vswitches and body.get("vswitch_id"):  # older answers: the deprecated single field
        vswitches = tuple(v for v in str(body["vswitch_id"]).split(",") if v)
    return ClusterNetwork(
        cluster_id=str(body.get("cluster_id") or ""), name=str(body.get("name") or ""),
        state=str(body.get("state") or ""), vpc_id=str(body.get("vpc_id") or ""), vswitch_ids=vswitches,
        security_group_id=str(body.get("security_group_id") or ""),
        intranet_endpoint=str(endpoints.get("intranet_api_server_endpoint") or ""),
        public_endpoint=str(endpoints.get("api_server_endpoint") or ""))


def read(keys: Keys, region: str, cluster_id: str, endpoint: Optional[Endpoint] = None,
         timeout_s: int = 30) -> ClusterNetwork:
    """DescribeClusterDetail through the official SDK. An unknown cluster is bad input (exit 2)."""
    from alibabacloud_cs20151215.client import Client
    from alibabacloud_tea_openapi import utils_models as openapi_models
    from darabonba.runtime import RuntimeOptions

    from functions.base.endpoints import resolve

    from functions.base.settings import connect_timeout_s

    where = resolve("cs", region, endpoint)
    connect_ms = min(connect_timeout_s(), timeout_s) * 1000  # a connection: seconds, not the call's 30
    config = openapi_models.Config(
        access_key_id=keys.access_key_id, access_key_secret=keys.access_key_secret,
        security_token=keys.security_token, region_id=region, endpoint=where.host, protocol=where.protocol,
        read_timeout=timeout_s * 1000, connect_timeout=connect_ms)
    runtime = RuntimeOptions(read_timeout=timeout_s * 1000, connect_timeout=connect_ms)
    import urllib3  # the Tea SDK calls through requests: the Guard reaches its sockets

    urllib3_guarded(urllib3)
    guard = Guard(timeout_s)  # the whole call: the SDK's read timeout restarts at every byte read
    try:
        with guard:
            response = Client(config).describe_cluster_detail_with_options(cluster_id, {}, runtime)
    except Exception as exc:  # the SDK's exception types vary by version; code and message are common
        if guard.fired:  # cut at the bound: whatever the SDK made of the shut socket, this is what happened
            exc = TimeoutError("no complete answer within %ds" % timeout_s)
        unreached = None if guard.fired else said("cs", exc)  # nothing answers there: as every command says it
        if unreached:
            raise ClusterUnreadable(unreached, "", EXIT_USAGE) from None
        code = failure_code(exc)
        message = failure_message(exc, 200, fallback=exc if guard.fired else "")
        if code == "ErrorClusterNotFound" or getattr(exc, "status_code", None) == 404:
            raise ClusterUnreadable("ACK knows no cluster %s in %s (%s): check --cluster-id and --region"
                                    % (cluster_id, region, code), code, EXIT_USAGE) from None
        raise ClusterUnreadable("ACK DescribeClusterDetail failed: %s%s" % (code, ": " + message if message else ""),
                                code) from None
    from functions.base.errors import Refused
    from functions.cloud.answers import answer_body  # a field the SDK's model does not fit: the body as sent

    try:
        return from_detail(answer_body(response, "DescribeClusterDetail"))
    except Refused as exc:  # a body that is no JSON object
        raise ClusterUnreadable("ACK %s" % exc, exc.code) from None
