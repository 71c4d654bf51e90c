"""Which host each Alibaba Cloud API is called at: ECS, Auto Scaling (ESS), KMS, ACK (CS), ROS and OSS.

One resolver for every client the product builds, so the core-SDK RPC client (ECS, ESS) and the Tea
clients (CS, KMS, ROS) agree, and an override or the network choice applies to all of them:

1. An override (``ACK_MIG_<PRODUCT>_ENDPOINT``, :mod:`functions.base.settings`) wins.
2. ``network="vpc"``: the documented VPC endpoint, ``<product>-vpc.<region>.aliyuncs.com``, the same form
   for ECS, ESS, KMS and CS in each product's "Endpoints" reference (e.g. ECS "api-ecs-2014-05-26-endpoint":
   ``ecs-vpc.cn-beijing.aliyuncs.com``; Auto Scaling "api-ess-2022-02-22-endpoint": ``ess-vpc.cn-beijing...``
   even where the public one is central; KMS ``kms-vpc.<region>``; ACK ``cs-vpc.<region>``) and the rule
   of the SDKs' ``alibabacloud_endpoint_util.get_endpoint_rules(product, region, "regional", "vpc")``.
   A function whose internet access is off reaches only its VPC (Function Compute "Configure network
   settings": with "allow the function to access the internet" off, traffic goes through the VPC only).
3. Public (the default): what the product's official Tea SDK client resolves for the region (its
   ``_endpoint_map``, e.g. ``alibabacloud_ess20220222`` sends cn-beijing to the central
   ``ess.aliyuncs.com``, ``alibabacloud_ecs20140526`` sends cn-hangzhou to ``ecs-cn-hangzhou.aliyuncs.com``),
   else the regional rule ``<product>.<region>.aliyuncs.com``. The tables below are the entries of those
   maps that differ from the rule; tests/contract/test_endpoints.py compares every region any of the SDKs
   lists with the SDK clients themselves. aliyunsdkcore's bundled ``endpoints.json`` is NOT used: it still
   sends cn-beijing, cn-shanghai, ap-southeast-1 ... to the legacy ``ecs-cn-hangzhou.aliyuncs.com``.

OSS has no Tea endpoint map: ``oss-<region>.aliyuncs.com`` public, ``oss-<region>-internal.aliyuncs.com``
from a VPC in the same region (OSS "Regions and endpoints").

Standard library only: :mod:`functions.base.settings` uses it on a cold start.
"""

from typing import Dict, NamedTuple, Optional


class Endpoint(NamedTuple):
    """An API endpoint as the Tea / core SDKs take it: a host[:port] and a protocol."""

    host: str
    protocol: str  # "https" or "http"


PRODUCTS = ("ecs", "ess", "kms", "cs", "ros", "oss", "vpc")
NETWORKS = ("public", "vpc")


def _table(groups: Dict[str, str]) -> Dict[str, str]:
    return {region: host for host, regions in groups.items() for region in regions.split()}


# Entries of each Tea client's ``_endpoint_map`` (client.py ``__init__``) that differ from
# ``<product>.<region>.aliyuncs.com``: alibabacloud_ecs20140526 7.11, alibabacloud_ess20220222 1.13,
# alibabacloud_cs20151215 7.2, alibabacloud_ros20190910 3.7, alibabacloud_vpc20160428 6.15 (doctor reads the
# function's vSwitch); alibabacloud_kms20160120 has no map.
_SDK_MAPS: Dict[str, Dict[str, str]] = {
    "vpc": _table({
        "vpc.aliyuncs.com": (
            "cn-hangzhou cn-shanghai-finance-1 cn-shenzhen-finance-1 cn-north-2-gov-1 ap-northeast-2-pop "
            "cn-beijing-finance-pop cn-beijing-gov-1 cn-beijing-nu16-b01 cn-fujian cn-haidian-cm12-c01 "
            "cn-hangzhou-bj-b01 cn-hangzhou-finance cn-hangzhou-internal-prod-1 cn-hongkong-finance-pop "
            "cn-shanghai-et2-b01 cn-shanghai-inner cn-shenzhen-inner cn-shenzhen-st4-d01 cn-shenzhen-su18-b01 "
            "cn-wuhan cn-yushanfang cn-zhangbei cn-zhangbei-na61-b01 rus-west-1-pop"),
        "vpc-nebula.cn-qingdao-nebula.aliyuncs.com": "cn-edge-1 cn-huhehaote-nebula-1 cn-qingdao-nebula cn-zhengzhou-nebula-1",
        "vpc-pre.cn-hangzhou.aliyuncs.com": (
            "cn-hangzhou-internal-test-1 cn-hangzhou-internal-test-3 cn-hangzhou-test-306 cn-shanghai-et15-b01 "
            "cn-shanghai-internal-test-1"),
        "vpc-inner-pre.cn-hangzhou.aliyuncs.com": "cn-hangzhou-internal-test-2",
        "vpc.cn-zhangjiakou.aliyuncs.com": "cn-zhangjiakou-na62-a01",
        "vpc-nebula.cn-shenzhen-cloudstone.aliyuncs.com": "eu-west-1-oxs",
    }),
    "ecs": _table({
        "ecs-cn-hangzhou.aliyuncs.com": (
            "cn-hangzhou cn-shanghai-finance-1 cn-shenzhen-finance-1 cn-beijing-nu16-b01 cn-fujian "
            "cn-haidian-cm12-c01 cn-hangzhou-bj-b01 cn-hangzhou-internal-prod-1 cn-hangzhou-internal-test-1 "
            "cn-hangzhou-internal-test-2 cn-hangzhou-internal-test-3 cn-hangzhou-test-306 cn-shanghai-et15-b01 "
            "cn-shanghai-et2-b01 cn-shanghai-internal-test-1 cn-shenzhen-st4-d01 cn-shenzhen-su18-b01 "
            "cn-zhangbei-na61-b01"),
        "ecs.aliyuncs.com": (
            "cn-north-2-gov-1 ap-northeast-2-pop cn-beijing-finance-pop cn-beijing-gov-1 cn-hangzhou-finance "
            "cn-hongkong-finance-pop cn-shanghai-inner cn-shenzhen-inner cn-wuhan cn-yushanfang cn-zhangbei "
            "rus-west-1-pop"),
        "ecs.cn-qingdao-nebula.aliyuncs.com": "cn-edge-1 cn-huhehaote-nebula-1 cn-zhengzhou-nebula-1",
        "ecs.cn-zhangjiakou.aliyuncs.com": "cn-zhangjiakou-na62-a01",
        "ecs.cn-shenzhen-cloudstone.aliyuncs.com": "eu-west-1-oxs",
    }),
    "ess": _table({
        "ess.aliyuncs.com": (
            "cn-qingdao cn-beijing cn-hangzhou cn-shanghai cn-shenzhen cn-hongkong ap-southeast-1 us-east-1 "
            "us-west-1 cn-nanjing cn-shanghai-finance-1 cn-shenzhen-finance-1 cn-beijing-finance-1 "
            "cn-north-2-gov-1 ap-northeast-2-pop cn-beijing-finance-pop cn-beijing-gov-1 cn-beijing-nu16-b01 "
            "cn-edge-1 cn-fujian cn-haidian-cm12-c01 cn-hangzhou-bj-b01 cn-hangzhou-finance "
            "cn-hangzhou-internal-prod-1 cn-hangzhou-internal-test-1 cn-hangzhou-internal-test-2 "
            "cn-hangzhou-internal-test-3 cn-hangzhou-test-306 cn-hongkong-finance-pop cn-huhehaote-nebula-1 "
            "cn-qingdao-nebula cn-shanghai-et15-b01 cn-shanghai-et2-b01 cn-shanghai-inner "
            "cn-shanghai-internal-test-1 cn-shenzhen-inner cn-shenzhen-st4-d01 cn-shenzhen-su18-b01 cn-wuhan "
            "cn-yushanfang cn-zhangbei cn-zhangbei-na61-b01 cn-zhangjiakou-na62-a01 cn-zhengzhou-nebula-1 "
            "eu-west-1-oxs rus-west-1-pop"),
    }),
    "kms": {},
    "cs": _table({
        "cs.aliyuncs.com": (
            "ap-northeast-2-pop cn-beijing-finance-pop cn-beijing-gov-1 cn-beijing-nu16-b01 cn-edge-1 cn-fujian "
            "cn-haidian-cm12-c01 cn-hangzhou-bj-b01 cn-hangzhou-internal-prod-1 cn-hangzhou-internal-test-1 "
            "cn-hangzhou-internal-test-2 cn-hangzhou-internal-test-3 cn-hangzhou-test-306 "
            "cn-hongkong-finance-pop cn-qingdao-nebula cn-shanghai-et15-b01 cn-shanghai-et2-b01 "
            "cn-shanghai-inner cn-shanghai-internal-test-1 cn-shenzhen-inner cn-shenzhen-st4-d01 "
            "cn-shenzhen-su18-b01 cn-wuhan cn-yushanfang cn-zhangbei cn-zhangbei-na61-b01 "
            "cn-zhangjiakou-na62-a01 cn-zhengzhou-nebula-1 eu-west-1-oxs rus-west-1-pop"),
    }),
    "ros": _table({
        "ros.aliyuncs.com": (
            "ap-northeast-1 ap-northeast-2 ap-southeast-1 ap-southeast-2 ap-southeast-3 ap-southeast-5 "
            "ap-southeast-6 ap-southeast-7 ap-southeast-8 cn-beijing cn-chengdu cn-fuzhou cn-guangzhou "
            "cn-hangzhou cn-heyuan cn-hongkong cn-huhehaote cn-nanjing cn-qingdao cn-shanghai cn-shenzhen "
            "cn-wuhan-lr cn-wulanchabu cn-zhangjiakou cn-zhengzhou-jva cn-zhongwei eu-central-1 eu-west-1 "
            "eu-west-2 na-south-1 sa-east-1 us-east-1 us-southeast-1 us-west-1 ap-south-1 me-central-1 "
            "me-east-1 cn-hangzhou-finance cn-heyuan-acdr-1 cn-shanghai-finance-1 cn-shenzhen-finance-1 "
            "cn-wulanchabu-gic-1"),
    }),
}


class EndpointError(ValueError):
    """No endpoint can be named: no region, an unknown product or network. One line."""


def sdk_regions(product: str) -> tuple:
    """The regions the product's SDK map names explicitly (tests iterate over them)."""
    return tuple(sorted(_SDK_MAPS.get(product, {})))


def known_regions() -> tuple:
    """Every region id the official SDKs' endpoint maps name (the ROS map lists the public regions; the
    others add the regions where a product differs from its rule): the command line's ``--region`` must be
    one of them, so a typo (``beijing``) stops before any call instead of naming a host that does not exist."""
    return tuple(sorted({region for table in _SDK_MAPS.values() for region in table}))


def host(product: str, region: str, network: str = "public") -> str:
    """The host of ``product`` in ``region`` on ``network`` (``public`` or ``vpc``), without override."""
    if product not in PRODUCTS:
        raise EndpointError("unknown API %r; one of %s" % (product, ", ".join(PRODUCTS)))
    if network not in NETWORKS:
        raise EndpointError("unknown network %r; use public or vpc" % network)
    region = (region or "").strip().lower()
    if not region:
        raise EndpointError("no region for the %s endpoint: set ACK_MIG_REGION (FC sets FC_REGION)" % product.upper())
    if product == "oss":
        return "oss-%s%s.aliyuncs.com" % (region, "-internal" if network == "vpc" else "")
    if network == "vpc":
        return "%s-vpc.%s.aliyuncs.com" % (product, region)
    return _SDK_MAPS[product].get(region) or "%s.%s.aliyuncs.com" % (product, region)


def url_of(endpoint: Endpoint) -> str:
    """``https://host`` (or ``http://127.0.0.1:PORT`` for an emulator)."""
    return "%s://%s" % (endpoint.protocol, endpoint.host)


def resolve(product: str, region: str, override: Optional[Endpoint] = None, network: str = "public") -> Endpoint:
    """The endpoint a client of ``product`` uses: the override, else :func:`host` over HTTPS."""
    if override is not None:
        return override
    return Endpoint(host(product, region, network), "https")
