"""Endpoints as the official SDKs resolve them (functions/base/endpoints.py), for every region any of them lists.

The reference is the SDKs themselves, not a copy: each Tea client (alibabacloud_ecs20140526,
alibabacloud_ess20220222, alibabacloud_kms20160120, alibabacloud_cs20151215, alibabacloud_ros20190910) is
built for the region and asked for its ``_endpoint``; the VPC form is the SDKs' own rule
(``alibabacloud_endpoint_util.get_endpoint_rules(..., "vpc")``) and rows of the products' "Endpoints" pages.
"""

import importlib
import json
import os

import pytest

from functions.base import endpoints
from functions.cloud.rpc import ECS_VERSION, RpcClient, resolve_endpoint
from functions.base.settings import Credentials, Endpoint, load_settings

SDKS = {"ecs": "alibabacloud_ecs20140526", "ess": "alibabacloud_ess20220222", "kms": "alibabacloud_kms20160120",
        "cs": "alibabacloud_cs20151215", "ros": "alibabacloud_ros20190910", "vpc": "alibabacloud_vpc20160428"}


def _sdk_client(product, region):
    from alibabacloud_tea_openapi import utils_models as openapi_models

    client = importlib.import_module(SDKS[product] + ".client").Client
    return client(openapi_models.Config(access_key_id="ak", access_key_secret="sk", region_id=region))


def _regions():
    """Every region an SDK map names, those aliyunsdkcore's bundled data lists, and the ECS doc's."""
    import aliyunsdkcore

    regions = set()
    for product in SDKS:
        regions.update(_sdk_client(product, "cn-hangzhou")._endpoint_map or {})  # noqa: SLF001
    with open(os.path.join(os.path.dirname(aliyunsdkcore.__file__), "data", "endpoints.json")) as fh:
        regions.update(json.load(fh)["regions"])
    regions.update(("cn-wulanchabu", "cn-guangzhou", "ap-southeast-7", "me-central-1", "cn-heyuan"))
    return sorted(regions)


REGIONS = _regions()


@pytest.mark.parametrize("product", sorted(SDKS))
def test_every_region_resolves_as_the_products_tea_sdk_does(product):
    wrong = {r: (endpoints.host(product, r), _sdk_client(product, r)._endpoint)  # noqa: SLF001
             for r in REGIONS if endpoints.host(product, r) != _sdk_client(product, r)._endpoint}  # noqa: SLF001
    assert len(REGIONS) > 60 and wrong == {}


@pytest.mark.parametrize("region", ["cn-beijing", "cn-shanghai", "cn-shenzhen", "cn-hongkong", "ap-southeast-1",
                                    "us-west-1", "eu-central-1"])
def test_ecs_is_regional_not_the_legacy_hangzhou_host(region):
    """aliyunsdkcore's bundled data sends these to ecs-cn-hangzhou.aliyuncs.com; the SDKs do not."""
    want = Endpoint("ecs.%s.aliyuncs.com" % region, "https")
    assert resolve_endpoint("ecs", region) == want
    assert RpcClient("ecs", ECS_VERSION, region, Credentials("ak", "sk")).endpoint == want


@pytest.mark.parametrize("product", ["ecs", "ess", "kms", "cs"])
def test_the_vpc_endpoint_is_the_documented_one(product):
    from alibabacloud_endpoint_util.client import Client as rules

    for region in REGIONS:
        assert endpoints.host(product, region, "vpc") == rules.get_endpoint_rules(product, region, "regional", "vpc")
    # rows of the products' Endpoints pages (ESS: public ess.aliyuncs.com, VPC regional)
    assert endpoints.host(product, "cn-beijing", "vpc") == "%s-vpc.cn-beijing.aliyuncs.com" % product


def test_oss_follows_the_documented_form():
    assert endpoints.host("oss", "cn-beijing") == "oss-cn-beijing.aliyuncs.com"
    assert endpoints.host("oss", "cn-beijing", "vpc") == "oss-cn-beijing-internal.aliyuncs.com"


def test_the_network_setting_moves_every_function_api_to_its_vpc_endpoint_and_overrides_still_win():
    from functions.cloud.cs_lookup import CsLookup

    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "sk",
           "ACK_MIG_REGION": "cn-beijing", "ACK_MIG_API_NETWORK": "vpc",
           "ACK_MIG_KMS_ENDPOINT": "http://127.0.0.1:9"}
    settings = load_settings(env)
    d = settings.delivery
    assert (settings.cs_endpoint.host, d.ecs_endpoint.host, d.ess_endpoint.host) == (
        "cs-vpc.cn-beijing.aliyuncs.com", "ecs-vpc.cn-beijing.aliyuncs.com", "ess-vpc.cn-beijing.aliyuncs.com")
    assert d.kms_endpoint == Endpoint("127.0.0.1:9", "http")
    assert CsLookup(settings)._client._endpoint == "cs-vpc.cn-beijing.aliyuncs.com"  # noqa: SLF001
    public = load_settings(dict(env, ACK_MIG_API_NETWORK="public"))
    assert public.delivery.ecs_endpoint is None and public.api_network == "public"


def test_a_bad_network_or_a_missing_region_is_one_line():
    from functions.base.settings import SettingsError

    with pytest.raises(SettingsError, match="ACK_MIG_API_NETWORK.*public, vpc"):
        load_settings({"ACK_MIG_API_NETWORK": "intranet"})
    with pytest.raises(endpoints.EndpointError, match="no region"):
        endpoints.host("ecs", "")
