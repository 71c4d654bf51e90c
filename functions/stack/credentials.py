"""The standard Alibaba Cloud credential chain, the way the official SDKs and the ``aliyun`` CLI find it.

Order (``alibabacloud_credentials``' default provider): the ``ALIBABA_CLOUD_ACCESS_KEY_ID`` /
``_SECRET`` / ``_SECURITY_TOKEN`` environment, OIDC role (ACK RRSA), the ``aliyun`` CLI profile
(``~/.aliyun/config.json``), ``~/.alibabacloud/credentials``, then the ECS instance role. The last step
asks the instance metadata service; ``ALIBABA_CLOUD_ECS_METADATA_DISABLED=true`` turns it off (the tests
always do: they never leave loopback).
"""

from typing import Any, NamedTuple, Optional


class CredentialsMissing(ValueError):
    exit_code = 2


class Keys(NamedTuple):
    access_key_id: str
    access_key_secret: str
    security_token: Optional[str]

    def __repr__(self) -> str:  # never the secret parts
        return "Keys(access_key_id=%r, ...)" % self.access_key_id

    def secrets(self) -> tuple:
        return tuple(s for s in (self.access_key_secret, self.security_token) if s)


def resolve() -> Keys:
    # The environment first, read now: alibabacloud_credentials reads it once, when it is imported, so a
    # long-lived process (or a test run) would otherwise keep the first keys it saw.
    from functions.settings import ACCESS_KEY_ID, ACCESS_KEY_SECRET, SECURITY_TOKEN, env_text

    env_id, env_secret = env_text(ACCESS_KEY_ID), env_text(ACCESS_KEY_SECRET)
    if env_id and env_secret:
        return Keys(env_id, env_secret, env_text(SECURITY_TOKEN) or None)
    from alibabacloud_credentials.client import Client

    try:
        credential: Any = Client().get_credential()
    except Exception as exc:  # the chain raises one CredentialException type, but providers add others
        raise CredentialsMissing(
            "no Alibaba Cloud credentials found (%s): set ALIBABA_CLOUD_ACCESS_KEY_ID and "
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET, run `aliyun configure`, or run on an instance with a RAM role"
            % (str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__)) from None
    return Keys(credential.access_key_id, credential.access_key_secret, credential.security_token or None)


class AccountUnknown(RuntimeError):
    exit_code = 1


def account_id(keys: Keys, region: str, endpoint: Optional[Any] = None, timeout_s: int = 30) -> str:
    """The Alibaba Cloud account (UID) the keys act for, from STS ``GetCallerIdentity`` (official
    ``alibabacloud-sts20150401`` SDK; any identity may call it, no RAM grant is needed). ``deploy`` names
    its default bucket after it and checks that an existing bucket is owned by it."""
    from alibabacloud_sts20150401.client import Client
    from alibabacloud_tea_openapi import utils_models as openapi_models
    from darabonba.runtime import RuntimeOptions

    config = openapi_models.Config(
        access_key_id=keys.access_key_id, access_key_secret=keys.access_key_secret,
        security_token=keys.security_token, region_id=region,
        endpoint=endpoint.host if endpoint else None, protocol=endpoint.protocol if endpoint else "https",
        read_timeout=timeout_s * 1000, connect_timeout=timeout_s * 1000)
    runtime = RuntimeOptions(read_timeout=timeout_s * 1000, connect_timeout=timeout_s * 1000)
    try:
        body = Client(config).get_caller_identity_with_options(runtime).body
    except Exception as exc:  # the SDK's exception types vary by version; code and message are common
        code = getattr(exc, "code", "") or type(exc).__name__
        message = " ".join(str(getattr(exc, "message", "") or "").split())[:200]
        raise AccountUnknown("STS GetCallerIdentity failed (the account id names and guards the code bucket): "
                             "%s%s" % (code, ": " + message if message else "")) from None
    account = str(getattr(body, "account_id", "") or "")
    if not account.isdigit():
        raise AccountUnknown("STS GetCallerIdentity named no account id (got %r)" % account[:40])
    return account
