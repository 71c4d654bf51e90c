"""The standard Alibaba Cloud credential chain, the way the official SDKs and the ``aliyun`` CLI find it.

Order (``alibabacloud_credentials``' default provider): the ``ALIBABA_CLOUD_ACCESS_KEY_ID`` /
``_SECRET`` / ``_SECURITY_TOKEN`` environment, OIDC role (ACK RRSA), the ``aliyun`` CLI profile
(``~/.aliyun/config.json``: ``ALIBABA_CLOUD_PROFILE``, else its ``current`` one), ``~/.alibabacloud/credentials``,
then the ECS instance role. The last step asks the instance metadata service;
``ALIBABA_CLOUD_ECS_METADATA_DISABLED=true`` turns it off (the tests always do: they never leave loopback).

``profile``: the one ``aliyun`` CLI profile of that name and nothing else (``--profile``, like the ``aliyun``
CLI's own option): a name that is not in the file is an error, never a silent fall back to other keys.

Every command that talks to the cloud (deploy, undeploy, doctor, invoke, status) resolves its keys here.
"""

import os
from typing import Any, NamedTuple, Optional

from functions.base.deadline import Guard, failure_code, failure_message, urllib3_guarded
from functions.base.textsafe import clip
from functions.commands.stack.exit_codes import EXIT_USAGE, CloudError
from functions.commands.stack.unreachable import said


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


def cli_profile_file() -> str:
    """The ``aliyun`` CLI's profile file of the user running the command (``~`` resolved now, not when the
    credentials SDK was imported)."""
    return os.path.join(os.path.expanduser("~"), ".aliyun", "config.json")


def resolve(profile: str = "") -> Keys:
    """The keys the command signs with; :class:`CredentialsMissing` (one line, what to do) when none. Their
    secret parts are registered with the log redactor (functions.base.logs.register_secret): an SDK's own
    debug record (``--debug``) that quotes them is masked like every other line."""
    from functions.base.logs import register_secret

    keys = _resolve(profile)
    for secret in keys.secrets():
        register_secret(secret)
    return keys


def _resolve(profile: str) -> Keys:
    if profile:
        return _from_profile(profile)
    # The environment first, read now: alibabacloud_credentials reads it once, when it is imported, so a
    # long-lived process (or a test run) would otherwise keep the first keys it saw.
    from functions.base.settings import ACCESS_KEY_ID, ACCESS_KEY_SECRET, SECURITY_TOKEN, env_text

    env_id, env_secret = env_text(ACCESS_KEY_ID), env_text(ACCESS_KEY_SECRET)
    if env_id and env_secret:
        return Keys(env_id, env_secret, env_text(SECURITY_TOKEN) or None)
    if env_id or env_secret:
        raise CredentialsMissing("only one of ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET is "
                                 "set: set both, or neither to use the aliyun CLI profile or the instance role")
    from alibabacloud_credentials.client import Client

    try:
        credential: Any = Client().get_credential()
    except Exception:  # the chain raises one CredentialException type, but providers add others
        # Its message lists every provider's failure on one huge line; what helps is where keys can come from.
        raise CredentialsMissing(
            "no Alibaba Cloud credentials found: set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET, "
            "run `aliyun configure` (or pass --profile NAME), or run on an instance with a RAM role") from None
    return Keys(credential.access_key_id, credential.access_key_secret, credential.security_token or None)


MAX_PROFILE_FILE = 1 << 20  # the aliyun CLI's file holds a few profiles: a few KiB


def read_cli_profiles(path: str = "") -> dict:
    """The ``aliyun`` CLI's profile file as JSON, read under the reader rule (node_bootstrap.outside.loads:
    bounded size and depth); {} when there is none. ValueError (OutsideDataError) for one that is unreadable
    or not JSON, OSError where it cannot be opened."""
    from node_bootstrap.outside import loads

    path = path or cli_profile_file()
    if not os.path.exists(path):
        return {}
    with open(path, "rb") as handle:
        data = loads(handle.read(MAX_PROFILE_FILE + 1), path, max_bytes=MAX_PROFILE_FILE)
    return data if isinstance(data, dict) else {}


def profile_names(config: dict) -> list:
    return [str(p.get("name")) for p in (config.get("profiles") or []) if isinstance(p, dict)]


def did_you_mean(word: str, choices) -> str:
    """`` (did you mean X?)`` for the choice closest to ``word``, or "" (one rule for commands and profiles)."""
    import difflib

    near = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return " (did you mean %s?)" % near[0] if near else ""


def profile_region(name: str = "") -> tuple:
    """(region, where) of the ``aliyun`` CLI profile the command uses: ``name`` (``--profile``), else
    ``ALIBABA_CLOUD_PROFILE``, else the file's ``current`` one; ("", "") when there is no file, no such
    profile or no ``region_id``: the region is optional there. The ``where`` names profile and file, for a
    message about a region that is wrong."""
    from functions.base.settings import CLI_PROFILE, env_text

    path = cli_profile_file()
    try:
        config = read_cli_profiles(path)
    except (OSError, ValueError):
        return "", ""  # --profile reports an unreadable file (_from_profile); a default region is optional
    chosen = name or env_text(CLI_PROFILE) or str(config.get("current") or "")
    for profile in config.get("profiles") or []:
        if isinstance(profile, dict) and profile.get("name") == chosen:
            region = profile.get("region_id")
            if isinstance(region, str) and region.strip():
                return region.strip(), "region_id of the aliyun CLI profile %s in %s" % (chosen[:64], path)
    return "", ""


def _from_profile(name: str) -> Keys:
    path = cli_profile_file()
    try:
        names = profile_names(read_cli_profiles(path))
        if not os.path.exists(path):
            raise OSError(path)
    except (OSError, ValueError, AttributeError):
        raise CredentialsMissing("--profile %s: cannot read the aliyun CLI profiles in %s; run `aliyun configure "
                                 "--profile %s`" % (name[:64], path, name[:64])) from None
    if name not in names:
        raise CredentialsMissing("--profile %s: no such profile in %s%s; it has %s; run `aliyun configure "
                                 "--profile %s` to add it" % (name[:64], path, did_you_mean(name, names),
                                                              ", ".join(names[:10]) or "none", name[:64]))
    from alibabacloud_credentials.provider import CLIProfileCredentialsProvider

    from functions.base.logs import redact_shown

    try:
        credential: Any = CLIProfileCredentialsProvider(profile_name=name, profile_file=path).get_credentials()
    except Exception as exc:  # a profile mode that needs a call (RamRoleArn, EcsRamRole) that failed
        # The SDK repeats the file's mode, and may quote a server's whole answer (an OAuth refresh without
        # refresh_token, an STS answer short of a field) with a new token in it: masked before the cut, which
        # could otherwise leave a token's first characters too short to be recognised.
        raise CredentialsMissing("--profile %s gave no credentials: %s" % (
            name[:64], clip(redact_shown(str(exc)), 200) or type(exc).__name__)) from None
    key_id, secret = credential.get_access_key_id(), credential.get_access_key_secret()
    token = credential.get_security_token() or None
    if not (isinstance(key_id, str) and key_id.strip() and isinstance(secret, str) and secret.strip()
            and (token is None or isinstance(token, str))):  # the SDK passes the file's values on as they are
        raise CredentialsMissing("--profile %s in %s: access_key_id and access_key_secret must be text; run `aliyun "
                                 "configure --profile %s`" % (name[:64], path, name[:64]))
    return Keys(key_id, secret, token)


class AccountUnknown(CloudError):
    pass


def account_id(keys: Keys, region: str, endpoint: Optional[Any] = None, timeout_s: int = 30) -> str:
    """The Alibaba Cloud account (UID) the keys act for, from STS ``GetCallerIdentity`` (official
    ``alibabacloud-sts20150401`` SDK; any identity may call it, no RAM grant is needed). ``deploy`` names
    its default bucket after it and checks that an existing bucket is owned by it."""
    from alibabacloud_sts20150401.client import Client
    from alibabacloud_tea_openapi import utils_models as openapi_models
    from darabonba.runtime import RuntimeOptions

    from functions.base.settings import connect_timeout_s

    connect_ms = min(connect_timeout_s(), timeout_s) * 1000  # a connection: seconds, not the call's 30
    config = openapi_models.Config(
        access_key_id=keys.access_key_id, access_key_secret=keys.access_key_secret,
        security_token=keys.security_token, region_id=region,
        endpoint=endpoint.host if endpoint else None, protocol=endpoint.protocol if endpoint else "https",
        read_timeout=timeout_s * 1000, connect_timeout=connect_ms)
    runtime = RuntimeOptions(read_timeout=timeout_s * 1000, connect_timeout=connect_ms)
    import urllib3  # the Tea SDK calls through requests: the Guard reaches its sockets

    urllib3_guarded(urllib3)
    guard = Guard(timeout_s)  # the whole call: the SDK's read timeout restarts at every byte read
    try:
        with guard:
            body = Client(config).get_caller_identity_with_options(runtime).body
    except Exception as exc:  # the SDK's exception types vary by version; code and message are common
        if guard.fired:
            exc = TimeoutError("no complete answer within %ds" % timeout_s)
        unreached = None if guard.fired else said("sts", exc)  # nothing answers there: as every command says it
        if unreached:
            raise AccountUnknown(unreached, exit_code=EXIT_USAGE) from None
        code = failure_code(exc)
        message = failure_message(exc, 200, fallback=exc if guard.fired else "")
        raise AccountUnknown("STS GetCallerIdentity failed (the account id names and guards the code bucket): "
                             "%s%s" % (code, ": " + message if message else ""), code=str(code)) from None
    account = str(getattr(body, "account_id", "") or "")
    if not (account.isascii() and account.isdigit()):
        raise AccountUnknown("STS GetCallerIdentity named no account id (got %r)" % account[:40])
    return account
