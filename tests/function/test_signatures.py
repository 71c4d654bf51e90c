"""The emulators' signature checks are right: known answers from Alibaba Cloud's published examples, and
the real SDKs accepted (and a wrong secret refused) by the emulators that check them."""

from tests.support.cs_emulator import acs3_signature
from tests.support.kms_emulator import KmsEmulator


def test_acs3_signature_matches_alibabas_published_example():
    """Alibaba Cloud SDK docs, "Request syntax and signature method V3" (help.aliyun.com document 2593177,
    alibabacloud.com/help/en/sdk/product-overview/v3-request-structure-and-signature): RunInstances on
    ecs.cn-shanghai.aliyuncs.com with AccessKey secret ``YourAccessKeySecret``, x-acs-date
    2023-10-26T10:22:32Z, nonce 3156853299f313e23d1673dc12e1703d and an empty body; the page's Authorization
    header carries Signature=06563a9e...83c0."""
    query = {"ImageId": "win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd", "RegionId": "cn-shanghai"}
    headers = {"host": "ecs.cn-shanghai.aliyuncs.com", "x-acs-action": "RunInstances",
               "x-acs-content-sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
               "x-acs-date": "2023-10-26T10:22:32Z", "x-acs-signature-nonce": "3156853299f313e23d1673dc12e1703d",
               "x-acs-version": "2014-05-26"}
    signed = sorted(headers)
    assert acs3_signature("POST", "/", query, headers, signed, headers["x-acs-content-sha256"],
                          "YourAccessKeySecret") == "06563a9e1b43f5dfe96b81484da74bceab24a1d853912eee15083a6f0f3283c0"
    # One character changed anywhere changes the answer: the check is not a formality.
    assert acs3_signature("POST", "/", dict(query, RegionId="cn-shanghai "), headers, signed,
                          headers["x-acs-content-sha256"], "YourAccessKeySecret").startswith("06563a9e") is False


def _kms_client(kms, secret, version=None):
    from alibabacloud_kms20160120.client import Client
    from alibabacloud_tea_openapi import utils_models as openapi_models

    return Client(openapi_models.Config(access_key_id=kms.access_key_id, access_key_secret=secret,
                                        security_token=kms.token, region_id=kms.region,
                                        endpoint=kms.endpoint.split("://", 1)[1], protocol="http",
                                        signature_version=version))


def test_kms_emulator_checks_both_signatures_the_kms_sdk_can_send():
    """alibabacloud_kms20160120 signs ACS3-HMAC-SHA256 by default and ACS4-HMAC-SHA256 (the POP gateway)
    with signature_version='v4': the emulator recomputes both, and refuses either with a wrong secret."""
    import pytest
    from alibabacloud_kms20160120 import models

    with KmsEmulator() as kms:
        kms.put_secret("s", "value")
        for version, algorithm in ((None, "ACS3-HMAC-SHA256"), ("v4", "ACS4-HMAC-SHA256")):
            request = models.GetSecretValueRequest(secret_name="s")
            answer = _kms_client(kms, kms.secret, version).get_secret_value(request)
            assert answer.body.secret_data == "value" and kms.algorithms[-1] == algorithm
            with pytest.raises(Exception) as info:
                _kms_client(kms, "wrong-secret", version).get_secret_value(request)
            assert "SignatureDoesNotMatch" in str(info.value)
        assert kms.rejected == ["SignatureDoesNotMatch: the signature does not match"] * 2
