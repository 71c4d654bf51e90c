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
