"""Every environment variable the function reads, in one place, and the typed settings built from them.

Nothing else in ``functions/`` reads ``os.environ``: code asks :func:`load_settings` (or receives a
:class:`Settings`). ``ENV_VARS`` lists every name with its default, the part that reads it (function, delivery,
deploy, rollout, notify) and its meaning; docs/function.md's table is generated from it (``python -m
functions.base.settings``) and a test keeps the two equal. Each part reads its own section through the
:class:`Settings` it is given (``settings.delivery``, ``settings.rollout``, ``settings.notify``).

Values are checked here, so a wrong setting is one line naming the variable and the accepted form
(:class:`SettingsError`, exit code 2) instead of a failure deep inside an SDK.

Credentials are kept out of ``repr``: a settings object can be logged without leaking a secret.
Standard library only (and the reader rule's stdlib-only ``node_bootstrap.outside``), so importing settings costs
nothing on a cold start.
"""

import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from functions.base.endpoints import Endpoint, resolve  # stdlib only; Endpoint is re-exported from here
from node_bootstrap.outside import digits  # stdlib only: the reader rule's count

# The node's directory (bundle cache, file parts): its default and the paths the node script takes. One rule,
# here at the bottom, so ACK_MIG_NODE_ROOT is checked on load exactly as functions.delivery.node_script checks
# the directory it writes into the script.
DEFAULT_NODE_ROOT = "/var/lib/ack-mig-hook"
_NODE_PATH = re.compile(r"^/[A-Za-z0-9._/-]{1,200}\Z")


# Places any local user can write to (sticky world-writable on common Linux images: /tmp, /var/tmp, /dev/shm,
# /run/lock and its /var/lock link, /run/shm on older Debian), or that are not disk directories at all
# (/dev, /proc, /sys). A bundle cached there could have been put there by someone else before root's first
# run: the node runner refuses such a directory by its owner and modes (sshd's StrictModes rule); the
# function refuses these by name before any node is contacted.
SHARED_PLACES = ("/tmp", "/var/tmp", "/dev", "/run/shm", "/run/lock", "/var/lock", "/proc", "/sys")


def node_directory_problem(path: str) -> str:
    """Why the node script would not take ``path`` as the node's directory ("" when it would): absolute,
    letters, digits and . _ / -, no ``.`` or ``..`` part nor empty one, and not in a shared place."""
    if not (isinstance(path, str) and _NODE_PATH.match(path)):
        return "not an absolute path of letters, digits and . _ / -"
    parts = path.rstrip("/").split("/")[1:]
    if any(p in ("", ".", "..") for p in parts):
        return "not an absolute path without . or .. parts or repeated /"
    clean = "/" + "/".join(parts)
    for place in SHARED_PLACES:
        if clean == place or clean.startswith(place + "/"):
            return "inside %s, which other users can write to (or which is no disk directory)" % place
    return ""


def is_node_directory(path: str) -> bool:
    """Whether the node script takes ``path`` as the node's directory (:func:`node_directory_problem`)."""
    return not node_directory_problem(path)


# A region id as the SDKs' endpoint tables write them (cn-beijing, ap-southeast-1, cn-hangzhou-finance): a
# pattern, not the tables, so that a region newer than the SDK still works.
_REGION_ID = re.compile(r"^[a-z]{2,}(-[a-z0-9]+){1,4}\Z")


class SettingsError(ValueError):
    """An environment variable has a value that cannot be used. One line; exit code 2."""

    exit_code = 2


class EnvVar(NamedTuple):
    name: str
    default: str  # as documented; "" means unset
    section: str  # "function" or "delivery"
    doc: str


ENV_VARS: List[EnvVar] = []


def _var(name: str, default: str, doc: str, section: str = "function") -> str:
    ENV_VARS.append(EnvVar(name, default, section, doc))
    return name


# --- function (event intake, cluster lookup, decisions) ---
CLUSTER_ID = _var("ACK_MIG_CLUSTER_ID", "", "ACK cluster id (c and 32 hex digits) used when the event "
                                            "does not name one")
REGION = _var("ACK_MIG_REGION", "", "region id, e.g. cn-beijing; falls back to `FC_REGION`")
FC_REGION = _var("FC_REGION", "", "set by Function Compute: the function's region")
FC_ACCOUNT_ID = _var("FC_ACCOUNT_ID", "", "set by Function Compute: the account id (logged, never "
                                          "required)")
FC_FUNCTION_NAME = _var("FC_FUNCTION_NAME", "", "set by Function Compute: the function name (logged)")
DRY_RUN = _var("ACK_MIG_DRY_RUN", "false", "`true`: decide and report, never touch a node (an event's "
                                           '`"dry_run": true` or `--dry-run` also asks for it; any one is'
                                           " enough)")
LOG_LEVEL = _var("ACK_MIG_LOG_LEVEL", "INFO", "`DEBUG`, `INFO`, `WARNING` or `ERROR`")
CS_ENDPOINT = _var("ACK_MIG_CS_ENDPOINT", "", "override of the ACK (CS) API endpoint (default: the CS Tea"
                                              " SDK's for the region, `cs.<region>.aliyuncs.com`); "
                                              "`http://127.0.0.1:PORT` selects plain HTTP (tests, "
                                              "emulators)")
API_NETWORK = _var("ACK_MIG_API_NETWORK", "public", "`public` or `vpc`: `vpc` sends the function's ECS, "
                                                    "Auto Scaling, KMS and ACK API calls to their VPC "
                                                    "endpoints (`<product>-vpc.<region>.aliyuncs.com`), "
                                                    "for a function in a VPC without internet access; an "
                                                    "`ACK_MIG_*_ENDPOINT` override still wins "
                                                    "([delivery.md](delivery.md#api-endpoints))")
API_TIMEOUT_S = _var("ACK_MIG_API_TIMEOUT_S", "10", "connect and read timeout of each cloud API call, "
                                                    "seconds")
CONNECT_TIMEOUT_S = _var("ACK_MIG_CONNECT_TIMEOUT_S", "10", "command line: how long a command tries to connect to "
                         "the ACK API and the `--kubeconfig` API server before its first call, and to each "
                         "cloud API it calls (ROS, STS, OSS, Function Compute, SLS: the SDKs' connect timeout; "
                         "a connection never made is not tried again), name lookup included, giving up naming "
                         "it, seconds (1..15)")
API_MAX_ATTEMPTS = _var("ACK_MIG_API_MAX_ATTEMPTS", "3", "attempts per cloud API call on throttling, 5xx "
                                                         "or a timeout")
ACCESS_KEY_ID = _var("ALIBABA_CLOUD_ACCESS_KEY_ID", "", "set by Function Compute from the function's "
                                                        "role; the FC context's credentials win when "
                                                        "present")
ACCESS_KEY_SECRET = _var("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "", "secret of the above; never logged")
SECURITY_TOKEN = _var("ALIBABA_CLOUD_SECURITY_TOKEN", "", "STS token of the above; never logged")
DEBUG = _var("ACK_MIG_HOOK_DEBUG", "", "command line only: show the traceback of an internal error")
REGION_ID = _var("ALIBABA_CLOUD_REGION_ID", "", "command line only: the region when neither `--region` nor "
                                                "`ACK_MIG_REGION` gives one (the Alibaba Cloud SDKs' variable); "
                                                "then the `aliyun` CLI profile's `region_id`")
CLI_PROFILE = _var("ALIBABA_CLOUD_PROFILE", "", "command line only: the `aliyun` CLI profile that gives the "
                                                "credentials and the region when `--profile` names none "
                                                "(default: the file's `current` one)")
AUTOSCALER_TAGS = _var("ACK_MIG_AUTOSCALER_TAGS", "auto", "the node pool tags that tell ACK's "
                                                          "cluster-autoscaler the MIG resources of a new "
                                                          "node ([operations.md](operations.md#autoscalin"
                                                          "g-mig-pools)): `auto` (labelled pools with "
                                                          "auto scaling enabled), `on` (every labelled "
                                                          "pool) or `off` (never written; pools keep the "
                                                          "tags they have)")
AUTOSCALER_TAG_MODES = ("auto", "on", "off")
AUTO_DWELL_S = _var("ACK_MIG_AUTO_DWELL_S", "600", "auto pools: a GPU the hook changed is not repartitioned "
                    "again for this long, seconds (demand that alternates between profiles changes a GPU at "
                    "most once per dwell; [auto-pools.md](auto-pools.md#stable-the-dwell)); `0`: no dwell")
AUTO_MAX_WAIT_S = _var("ACK_MIG_AUTO_MAX_WAIT_S", "300", "auto pools: a pod that has waited longer than this, "
                       "seconds, may have a GPU within its dwell repartitioned for it")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _get(env: Mapping[str, str], name: str) -> str:
    return (env.get(name) or "").strip()


# A KMS Secrets Manager secret's name (CreateSecret: at most 192 letters, digits and _ / + = . - @); template.yml's
# SshKeySecretName and NotifyUrlSecretName accept the same, since the role's grant names the secret and RAM would
# read a * or ? in it as a wildcard.
SECRET_NAME = re.compile(r"[A-Za-z0-9_/+=.@-]{1,192}")


def parse_secret_name(env: Mapping[str, str], name: str) -> str:
    """A KMS secret's name, "" when unset; anything a secret name cannot be is refused naming the form."""
    text = _get(env, name)
    if text and not SECRET_NAME.fullmatch(text):
        raise SettingsError("%s=%r is not a KMS secret name; use at most 192 letters, digits and _ / + = . - @"
                            % (name, text[:40]))
    return text


def parse_bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    text = _get(env, name).lower()
    if not text:
        return default
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingsError("%s=%r is not a boolean; use true or false" % (name, text[:20]))


def parse_int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = _get(env, name)
    if not text:
        return default
    value = digits(text)  # ASCII digits only: int() read other scripts' digits, "9_00" and "+900" too
    if value is None:
        raise SettingsError("%s=%r is not a whole number; use %d..%d" % (name, text[:20], low, high))
    if not low <= value <= high:
        raise SettingsError("%s=%d is out of range; use %d..%d" % (name, value, low, high))
    return value


def parse_choice(env: Mapping[str, str], name: str, default: str, choices: Tuple[str, ...],
                 upper: bool = False) -> str:
    text = _get(env, name)
    text = text.upper() if upper else text.lower()
    if not text:
        return default
    if text not in choices:
        raise SettingsError("%s=%r is not accepted; use one of %s" % (name, text[:20], ", ".join(choices)))
    return text


def parse_endpoint(env: Mapping[str, str], name: str) -> Optional[Endpoint]:
    """``host[:port]`` (HTTPS) or ``http(s)://host[:port]``; None when unset."""
    text = _get(env, name)
    if not text:
        return None
    protocol = "https"
    if "://" in text:
        protocol, _, text = text.partition("://")
        protocol = protocol.lower()
        if protocol not in ("http", "https"):
            raise SettingsError("%s has scheme %r; use http:// or https:// (or just host[:port])"
                                % (name, protocol[:10]))
    host = text.rstrip("/")
    if not host or "/" in host or any(c.isspace() for c in host):
        raise SettingsError("%s=%r is not an endpoint; use host[:port] or http://host:port" % (name, text[:60]))
    return Endpoint(host, protocol)


@dataclass(frozen=True)
class Credentials:
    """Role credentials (STS) of the function. The secret parts never show in repr or str."""

    access_key_id: str = field(repr=False)
    access_key_secret: str = field(repr=False)
    security_token: str = field(default="", repr=False)

    def __repr__(self) -> str:
        return "Credentials(<redacted>)"

    def secrets(self) -> Tuple[str, ...]:
        """The values a log line must never contain (the id is not secret, but is kept out as well)."""
        return tuple(v for v in (self.access_key_id, self.access_key_secret, self.security_token) if v)


def credentials_from(env: Mapping[str, str], context: Any = None) -> Optional[Credentials]:
    """The FC context's credentials (fresh each invocation, up to python3.10) or else the environment."""
    creds = getattr(context, "credentials", None) if context is not None else None
    if creds is not None:
        ak = getattr(creds, "access_key_id", None) or getattr(creds, "accessKeyId", None)
        secret = getattr(creds, "access_key_secret", None) or getattr(creds, "accessKeySecret", None)
        token = getattr(creds, "security_token", None) or getattr(creds, "securityToken", None)
        if ak and secret:
            return Credentials(str(ak), str(secret), str(token or ""))
    ak, secret = _get(env, ACCESS_KEY_ID), _get(env, ACCESS_KEY_SECRET)
    if ak and secret:
        return Credentials(ak, secret, _get(env, SECURITY_TOKEN))
    if ak or secret:
        raise SettingsError("set both %s and %s (or neither)" % (ACCESS_KEY_ID, ACCESS_KEY_SECRET))
    return None


@dataclass(frozen=True)
class Settings:
    """Everything configurable, typed and checked. Build it with :func:`load_settings`."""

    cluster_id: str = ""
    region: str = ""
    dry_run: bool = False
    log_level: str = "INFO"
    cs_endpoint: Optional[Endpoint] = None
    api_network: str = "public"
    api_timeout_s: int = 10
    api_max_attempts: int = 3
    credentials: Optional[Credentials] = None
    account_id: str = ""
    function_name: str = ""
    function_timeout_s: int = 0  # the function's Timeout as FC tells it (context.function.timeout); 0 outside FC
    autoscaler_tags: str = "auto"  # ACK_MIG_AUTOSCALER_TAGS (functions/decision/autoscaler_tags.py)
    auto_dwell_s: int = 600  # ACK_MIG_AUTO_DWELL_S (functions/decision/layout/dwell.py)
    auto_max_wait_s: int = 300  # ACK_MIG_AUTO_MAX_WAIT_S
    delivery: "DeliverySettings" = field(default_factory=lambda: DeliverySettings())
    rollout: "RolloutSettings" = field(default_factory=lambda: RolloutSettings())
    notify: "NotifySettings" = field(default_factory=lambda: NotifySettings())

    def secrets(self) -> Tuple[str, ...]:
        """Every secret value these settings hold, for the log redactor."""
        found = list(self.credentials.secrets()) if self.credentials else []
        found.extend(self.delivery.secrets())
        found.extend(self.notify.secrets())
        return tuple(found)


def load_settings(environ: Optional[Mapping[str, str]] = None, context: Any = None) -> Settings:
    """Settings from ``environ`` (default ``os.environ``) and the FC ``context`` (credentials, region)."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    region = _get(env, REGION) or _get(env, FC_REGION) or str(getattr(context, "region", "") or "")
    if region and not _REGION_ID.match(region):
        # It becomes a host name (cs.<region>.aliyuncs.com): a wrong one failed every call as "transient",
        # and FC retried the invocation for good.
        raise SettingsError("%s=%s is not a region id; use one such as cn-beijing or ap-southeast-1" % (
            REGION if _get(env, REGION) else FC_REGION if _get(env, FC_REGION) else "the FC context's region",
            repr(region[:40])))
    network = parse_choice(env, API_NETWORK, "public", API_NETWORKS)
    settings = Settings(
        cluster_id=_get(env, CLUSTER_ID),
        region=region,
        dry_run=parse_bool(env, DRY_RUN),
        log_level=parse_choice(env, LOG_LEVEL, "INFO", LOG_LEVELS, upper=True),
        cs_endpoint=parse_endpoint(env, CS_ENDPOINT),
        api_network=network,
        api_timeout_s=parse_int(env, API_TIMEOUT_S, 10, 1, 300),
        api_max_attempts=parse_int(env, API_MAX_ATTEMPTS, 3, 1, 10),
        credentials=credentials_from(env, context),
        account_id=_get(env, FC_ACCOUNT_ID),
        function_name=_get(env, FC_FUNCTION_NAME),
        function_timeout_s=_context_timeout(context),
        autoscaler_tags=parse_choice(env, AUTOSCALER_TAGS, "auto", AUTOSCALER_TAG_MODES),
        auto_dwell_s=parse_int(env, AUTO_DWELL_S, 600, 0, 86400),
        auto_max_wait_s=parse_int(env, AUTO_MAX_WAIT_S, 300, 0, 86400),
        delivery=delivery_from_env(env),
        rollout=rollout_from_env(env),
        notify=notify_from_env(env),
    )
    return _on_network(settings) if network == "vpc" and region else settings


API_NETWORKS = ("public", "vpc")


def _on_network(settings: "Settings") -> "Settings":
    """``vpc``: every API the function calls (ACK, ECS, Auto Scaling, KMS) without an override gets its VPC
    endpoint (functions.base.endpoints), so each client needs no network setting of its own."""
    from dataclasses import replace

    d = settings.delivery
    return replace(
        settings, cs_endpoint=resolve("cs", settings.region, settings.cs_endpoint, "vpc"),
        delivery=replace(d, ecs_endpoint=resolve("ecs", settings.region, d.ecs_endpoint, "vpc"),
                         ess_endpoint=resolve("ess", settings.region, d.ess_endpoint, "vpc"),
                         kms_endpoint=resolve("kms", settings.region, d.kms_endpoint, "vpc")))


def _context_timeout(context: Any) -> int:
    """``context.function.timeout`` (seconds) of the FC Python runtime's context, 0 when there is none."""
    value = getattr(getattr(context, "function", None), "timeout", None) if context is not None else None
    try:
        return max(0, int(value)) if value is not None else 0
    except (TypeError, ValueError):
        return 0


WAVE_MARGIN_S = 420  # agent waits, submits, polls and events around one wave's own timeouts


def wave_s(settings: "Settings", drain: bool = True) -> int:
    """The longest one rollout wave can take by the settings: a node's apply + (a drain) + the capacity
    wait. A wave of nodes that change without drain needs no drain time."""
    return (settings.delivery.node_timeout_s + (settings.rollout.drain_timeout_s if drain else 0)
            + settings.rollout.capacity_timeout_s)


def longest_run_s(settings: "Settings") -> int:
    """The longest one wave can work: a node's apply + a drain + the capacity wait + 420 s for agent
    waits, submits, polls and events. template.yml sets the function's Timeout by the same sum; a rollout
    record is held for this long after its wave starts."""
    return wave_s(settings) + WAVE_MARGIN_S


def invocation_s(settings: "Settings") -> int:
    """How long one invocation may work: ``ACK_MIG_INVOCATION_TIMEOUT_S`` (never past the function's
    Timeout, which FC enforces), else the function's Timeout as FC tells it, else one wave
    (:func:`longest_run_s`). A rollout starts a further wave only while the wave's worst case plus the
    margin still fits; the cluster credential asked for must outlive it."""
    setting, fc = settings.rollout.invocation_timeout_s, settings.function_timeout_s
    if setting and fc:
        return min(setting, fc)
    return setting or fc or longest_run_s(settings)


# What the Alibaba Cloud credential chain reads (the SDKs' ALIBABA_CLOUD_*, the older ALICLOUD_* and ALIYUN_*
# names) and this tool's own settings (ACK_MIG_*, the webhook URL with its token among them).
CLOUD_AND_OWN_PREFIXES = ("ALIBABA_CLOUD_", "ALICLOUD_", "ALIYUN_", "ACK_MIG_")


def child_environment(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment for a child process that is neither a cloud SDK nor this tool (pip and the source builds it
    runs, the local transport's node script): without the credentials and settings above, which such a process
    never reads and which /proc/<pid>/environ would show. ``environ``: default, this process's."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if not k.upper().startswith(CLOUD_AND_OWN_PREFIXES)}


def environment() -> Dict[str, str]:
    """A copy of the process environment: with :func:`child_environment`, the one place outside load_settings
    that reads it (the command line's defaults and the operator commands' credential chain)."""
    return dict(os.environ)


def connect_timeout_s(env: Optional[Mapping[str, str]] = None) -> int:
    """``ACK_MIG_CONNECT_TIMEOUT_S`` (default 10, 1..15): the command line's bound on making one connection,
    the check before a command's first call and every cloud SDK client it builds alike (their connect
    timeout; the read timeout stays each call's own). An operator waits seconds, not the SDKs' 30-60 s."""
    return parse_int(os.environ if env is None else env, CONNECT_TIMEOUT_S, 10, 1, 15)


def env_text(name: str) -> str:
    """One documented variable's value, stripped ("" when unset)."""
    if name not in documented():
        raise KeyError("%s is not a documented setting (functions/base/settings.py owns every name)" % name)
    return _get(os.environ, name)


def documented() -> Dict[str, EnvVar]:
    return {v.name: v for v in ENV_VARS}


TABLE_HEAD = "| variable | default | part | meaning |\n| --- | --- | --- | --- |\n"


def markdown_table() -> str:
    """docs/function.md's configuration table, generated from ``ENV_VARS`` (``python -m
    functions.base.settings`` prints it; a test keeps the page equal to it): one table for every part."""
    return TABLE_HEAD + "".join("| `%s` |%s| %s | %s |\n" % (v.name, " `%s` " % v.default if v.default else " ",
                                                              v.section, v.doc) for v in ENV_VARS)


# --- delivery (functions/delivery) ---
# Delivery settings: names, defaults and parsing of everything that reaches a node.
TRANSPORT = _var("ACK_MIG_TRANSPORT", "cloud-assistant", "how the bootstrap reaches a node: "
                                                         "`cloud-assistant`, `ssh` or `local`", "delivery")
ECS_ENDPOINT = _var("ACK_MIG_ECS_ENDPOINT", "", "override of the ECS API endpoint (Cloud Assistant; "
                                                "default: the ECS Tea SDK's, `ecs.<region>.aliyuncs.com`)", "delivery")
ESS_ENDPOINT = _var("ACK_MIG_ESS_ENDPOINT", "", "override of the Auto Scaling API endpoint (membership, "
                                                "lifecycle hook answers; default: the ESS Tea SDK's, "
                                                "`ess.aliyuncs.com` for the central regions, else "
                                                "`ess.<region>.aliyuncs.com`)", "delivery")
NODE_ROOT = _var("ACK_MIG_NODE_ROOT", DEFAULT_NODE_ROOT, "directory on the node that keeps the "
                                                         "bootstrap's bundle cache and file parts (an "
                                                         "absolute path of letters, digits and `. _ / "
                                                         "-`); the node tool's own state stays where "
                                                         "`--state-dir` in `ACK_MIG_NODE_ARGS` puts it", "delivery")
SSH_USER = _var("ACK_MIG_SSH_USER", "root", "SSH transport: login user", "delivery")
SSH_PORT = _var("ACK_MIG_SSH_PORT", "22", "SSH transport: port", "delivery")
SSH_KEY_FILE = _var("ACK_MIG_SSH_KEY_FILE", "", "SSH transport: private key file", "delivery")
SSH_KEY_SECRET = _var("ACK_MIG_SSH_KEY_SECRET", "", "SSH transport: name of the KMS Secrets Manager "
                                                    "secret holding the private key (read at run time, "
                                                    "cached for the instance's life, never logged); wins "
                                                    "over the key file", "delivery")
KMS_ENDPOINT = _var("ACK_MIG_KMS_ENDPOINT", "", "override of the KMS endpoint (default: the SDK's, "
                                                "`kms.<region>.aliyuncs.com`)", "delivery")
SSH_KNOWN_HOSTS = _var("ACK_MIG_SSH_KNOWN_HOSTS", "", "SSH transport: known_hosts file (required with "
                                                      "`verify`)", "delivery")
SSH_HOST_KEY_POLICY = _var("ACK_MIG_SSH_HOST_KEY_POLICY", "verify", "SSH transport: `verify` (known hosts "
                                                                    "only) or `accept-new` (a person's runs "
                                                                    "only: refused in Function Compute)",
                           "delivery")
SSH_CONCURRENCY = _var("ACK_MIG_SSH_CONCURRENCY", "32", "SSH transport: nodes handled at once", "delivery")
NODE_TIMEOUT_S = _var("ACK_MIG_NODE_TIMEOUT_S", "600", "time one node may take to partition, seconds; the"
                                                       " runner stops node_bootstrap past it",
                      "delivery")
LIFECYCLE_FAILURE_RESULT = _var("ACK_MIG_LIFECYCLE_FAILURE_RESULT", "ABANDON",
                                "lifecycle hook answer when every node under it failed by its own verdict: "
                                "`CONTINUE`, `ABANDON` or `ROLLBACK`", "delivery")
STARTUP_TAINT = _var("ACK_MIG_STARTUP_TAINT", "ack-mig-hook/partition-pending=true:NoSchedule",
                     "the taint the pool puts on new nodes, lifted once a node is partitioned; `none`: "
                     "never touch taints", "delivery")
NODE_ARGS = _var("ACK_MIG_NODE_ARGS", "", "extra node_bootstrap arguments, split like a shell command "
                                          "line (e.g. the demo's `--backend sim:A100-SXM4-40GB:8 "
                                          "--no-label`); they travel in base64", "delivery")
LIFECYCLE_HEARTBEAT_S = _var("ACK_MIG_LIFECYCLE_HEARTBEAT_S", "240", "seconds between lifecycle hook "
                                                                     "heartbeats while nodes run (each extends"
                                                                     " the hook by 600 s)",
                             "delivery")

# --- deploy (ack-mig-hook deploy, undeploy, doctor: run on an operator's machine, never in FC) ---
ROS_ENDPOINT = _var("ACK_MIG_ROS_ENDPOINT", "", "`deploy`/`doctor`: override of the ROS API endpoint "
                                                "(default: the SDK's own for the region)", "deploy")
VPC_ENDPOINT = _var("ACK_MIG_VPC_ENDPOINT", "", "`doctor`: override of the VPC API endpoint, where it reads the "
                                                "function's vSwitch (default: the VPC Tea SDK's for the region)",
                    "deploy")
OSS_ENDPOINT = _var("ACK_MIG_OSS_ENDPOINT", "", "`deploy`: override of the OSS endpoint (default "
                                                "`oss-<region>.aliyuncs.com`)", "deploy")
FC_PYTHON = _var("ACK_MIG_FC_PYTHON", "", "`make lock` / `make package-check`: a CPython 3.10 (FC's "
                                          "runtime) when `python3.10` is neither on PATH nor in "
                                          "`~/.pyenv`", "deploy")
STS_ENDPOINT = _var("ACK_MIG_STS_ENDPOINT", "", "`deploy`: override of the STS endpoint that tells the "
                                                "caller's account id (default: the SDK's own for the "
                                                "region)",
                    "deploy")

FC_ENDPOINT = _var("ACK_MIG_FC_ENDPOINT", "", "`invoke --remote`: override of the Function Compute 3.0 API "
                                              "endpoint (default: the FC SDK's own for the region)", "deploy")
SLS_ENDPOINT = _var("ACK_MIG_SLS_ENDPOINT", "", "`logs`: override of the Simple Log Service endpoint (default "
                                                "`<region>.log.aliyuncs.com`); an IP address (an emulator) gets "
                                                "every request as an HTTP proxy, since SLS names the project in "
                                                "the host", "deploy")

TRANSPORTS = ("cloud-assistant", "ssh", "local")
HOST_KEY_POLICIES = ("verify", "accept-new")


def _host_key_policy(env: Mapping[str, str]) -> str:
    """``accept-new`` trusts a host seen for the first time: a person's choice on a workstation, never the
    deployed function's (in FC a machine answering at a new node's address would get the node command and
    could answer "partitioned"; the function verifies against the known_hosts deploy packages)."""
    policy = parse_choice(env, SSH_HOST_KEY_POLICY, "verify", HOST_KEY_POLICIES)
    if policy == "accept-new" and _get(env, FC_FUNCTION_NAME):
        raise SettingsError("%s=accept-new is not accepted in Function Compute: the function verifies host keys; "
                            "package the nodes' keys with `ack-mig-hook deploy --known-hosts FILE` and use verify"
                            % SSH_HOST_KEY_POLICY)
    return policy
LIFECYCLE_RESULTS = ("CONTINUE", "ABANDON", "ROLLBACK")


@dataclass(frozen=True)
class DeliverySettings:
    transport: str = "cloud-assistant"
    ecs_endpoint: Optional[Endpoint] = None
    ess_endpoint: Optional[Endpoint] = None
    ssh_user: str = "root"
    ssh_port: int = 22
    ssh_key_file: str = ""
    ssh_key_secret: str = ""  # a secret's name, not a secret: the value lives in KMS
    kms_endpoint: Optional[Endpoint] = None
    ssh_known_hosts: str = ""
    ssh_host_key_policy: str = "verify"
    ssh_concurrency: int = 32
    node_timeout_s: int = 600
    lifecycle_failure_result: str = "ABANDON"
    startup_taint: str = "ack-mig-hook/partition-pending=true:NoSchedule"
    node_args: str = ""
    lifecycle_heartbeat_s: int = 240
    node_root: str = DEFAULT_NODE_ROOT

    def secrets(self) -> Tuple[str, ...]:
        # The SSH key is never held here: functions.cloud.secrets registers it with the redactor when read.
        return ()


def _startup_taint(env: Mapping[str, str]) -> str:
    """The taint to lift; ``none`` turns taint removal off (a pool that registers nodes without one)."""
    text = _get(env, STARTUP_TAINT)
    if text.lower() == "none":
        return ""
    return text or "ack-mig-hook/partition-pending=true:NoSchedule"


def delivery_from_env(env: Mapping[str, str]) -> DeliverySettings:
    return DeliverySettings(
        transport=parse_choice(env, TRANSPORT, "cloud-assistant", TRANSPORTS),
        ecs_endpoint=parse_endpoint(env, ECS_ENDPOINT),
        ess_endpoint=parse_endpoint(env, ESS_ENDPOINT),
        ssh_user=_get(env, SSH_USER) or "root",
        ssh_port=parse_int(env, SSH_PORT, 22, 1, 65535),
        ssh_key_file=_get(env, SSH_KEY_FILE),
        ssh_key_secret=parse_secret_name(env, SSH_KEY_SECRET),
        kms_endpoint=parse_endpoint(env, KMS_ENDPOINT),
        ssh_known_hosts=_get(env, SSH_KNOWN_HOSTS),
        ssh_host_key_policy=_host_key_policy(env),
        ssh_concurrency=parse_int(env, SSH_CONCURRENCY, 32, 1, 1024),
        node_timeout_s=parse_int(env, NODE_TIMEOUT_S, 600, 10, 86400),
        lifecycle_failure_result=parse_choice(env, LIFECYCLE_FAILURE_RESULT, "ABANDON", LIFECYCLE_RESULTS,
                                              upper=True),
        startup_taint=_startup_taint(env),
        node_args=_get(env, NODE_ARGS),
        lifecycle_heartbeat_s=parse_int(env, LIFECYCLE_HEARTBEAT_S, 240, 1, 3600),
        node_root=_node_root(env),
    )


def _node_root(env: Mapping[str, str]) -> str:
    text = _get(env, NODE_ROOT) or DEFAULT_NODE_ROOT
    problem = node_directory_problem(text)
    if problem:
        raise SettingsError("%s=%r is refused: %s; use an absolute path of letters, digits and . _ / - "
                            "outside %s, owned by root and writable by root alone on the node (default %s)"
                            % (NODE_ROOT, text[:60], problem, ", ".join(SHARED_PLACES), DEFAULT_NODE_ROOT))
    return text


# --- rollout of running nodes (functions/rollout/run.py); documented in docs/operations.md ---
MAX_UNAVAILABLE = _var("ACK_MIG_MAX_UNAVAILABLE", "1", "running nodes of one pool disrupted at once by a "
                                                       "repartition: a count (`2`) or a percentage of the"
                                                       " pool's nodes (`25%`); the pool label "
                                                       "`ack-mig-hook/max-unavailable` (a count) "
                                                       "overrides it", "rollout")
DRAIN_TIMEOUT_S = _var("ACK_MIG_DRAIN_TIMEOUT_S", "900", "how long evicting a node's GPU pods may take "
                                                         "(PodDisruptionBudget refusals are retried "
                                                         "meanwhile) before the node ends `drain-timeout`"
                                                         " and the pool's rollout stops, seconds", "rollout")
CAPACITY_TIMEOUT_S = _var("ACK_MIG_CAPACITY_TIMEOUT_S", "300", "how long to wait after a node's apply for"
                                                               " its new `nvidia.com/mig-*` capacity to "
                                                               "show, seconds", "rollout")
ON_LABEL_REMOVAL = _var("ACK_MIG_ON_LABEL_REMOVAL", "keep", "a pool whose partition label is removed: "
                                                            "`keep` (partitioned nodes keep their layout)"
                                                            " or `disable` (roll them to MIG off)", "rollout")
DRAIN_FORCE = _var("ACK_MIG_DRAIN_FORCE", "false", "`true`: also evict GPU pods that declare no "
                                                   "controller (as `kubectl drain --force`: such a pod is"
                                                   " gone for good); `false`: such a pod defers its node,"
                                                   " named in the reason", "rollout")
DRAIN_EMPTYDIR = _var("ACK_MIG_DRAIN_EMPTYDIR", "memory", "GPU pods with emptyDir volumes: `memory` "
                                                          "(evicted when every emptyDir is `medium: "
                                                          "Memory`, e.g. `/dev/shm`; a disk-backed one "
                                                          "defers the node), `any` (as `kubectl drain "
                                                          "--delete-emptydir-data`) or `none` (any "
                                                          "emptyDir defers the node)", "rollout")
DRAIN_SKIP_WAIT_S = _var("ACK_MIG_DRAIN_SKIP_WAIT_S", "300", "a GPU pod terminating for longer than this "
                         "is not waited for (as `kubectl drain --skip-wait-for-delete-timeout`: a pod stuck on "
                         "a NotReady kubelet would hold the drain to its deadline), seconds; `0`: always wait",
                         "rollout")
KUBE_MAX_ATTEMPTS = _var("ACK_MIG_KUBE_MAX_ATTEMPTS", "5", "attempts per Kubernetes API call on no "
                                                           "answer, throttling (429, `Retry-After` "
                                                           "honoured) or 5xx, within the invocation's "
                                                           "time", "rollout")
INVOCATION_TIMEOUT_S = _var("ACK_MIG_INVOCATION_TIMEOUT_S", "0", "how long one invocation may work, "
                                                                 "seconds: a rollout starts a further wave"
                                                                 " while that wave's worst case (node + "
                                                                 "drain + capacity timeouts, no drain time"
                                                                 " for nodes that only gain instances) "
                                                                 "plus 420 s still fits; never past the "
                                                                 "function's Timeout; `0`: the function's "
                                                                 "Timeout as FC tells it "
                                                                 "(`context.function.timeout`), else one "
                                                                 "wave ([operations.md](operations.md#pace"
                                                                 "-several-waves-per-invocation))", "rollout")
KUBECONFIG = _var("ACK_MIG_KUBECONFIG", "", "command line only (`--kubeconfig` of `invoke` and `status`):"
                                            " the operator's kubeconfig for the Kubernetes side instead "
                                            "of a short-lived one from ACK")
KUBE_ENDPOINT = _var("ACK_MIG_KUBE_ENDPOINT", "private", "which API server endpoint the kubeconfig ACK "
                                                         "issues names: `private` (the function, in the "
                                                         "cluster's VPC) or `public` (what the command "
                                                         "line sets on an operator's machine for `status`"
                                                         " and `invoke`, as `doctor` and `undeploy` ask "
                                                         "ACK)")
KUBE_ENDPOINTS = ("private", "public")

LABEL_REMOVAL_CHOICES = ("keep", "disable")
EMPTYDIR_CHOICES = ("memory", "any", "none")


@dataclass(frozen=True)
class RolloutSettings:
    max_unavailable: str = "1"
    drain_timeout_s: int = 900
    capacity_timeout_s: int = 300
    on_label_removal: str = "keep"
    drain_force: bool = False
    drain_emptydir: str = "memory"
    drain_skip_wait_s: int = 300  # 0: always wait for a terminating pod
    kube_max_attempts: int = 5
    invocation_timeout_s: int = 0  # 0: the function's Timeout (Settings.function_timeout_s), else one wave
    kubeconfig: str = ""  # a file path (the command line's --kubeconfig); "" asks ACK for a credential
    kube_endpoint: str = "private"  # the endpoint ACK's kubeconfig names: private (in the VPC) or public


def rollout_from_env(env: Mapping[str, str]) -> RolloutSettings:
    import re

    text = _get(env, MAX_UNAVAILABLE) or "1"
    m = re.match(r"^([0-9]{1,4})(%?)\Z", text)
    if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(1)) > 100):
        raise SettingsError("%s=%r is not accepted; use a count >= 1 (e.g. 2) or a percentage 1%%..100%% "
                            "(e.g. 25%%)" % (MAX_UNAVAILABLE, text[:20]))
    return RolloutSettings(
        max_unavailable=text,
        drain_timeout_s=parse_int(env, DRAIN_TIMEOUT_S, 900, 1, 86400),
        capacity_timeout_s=parse_int(env, CAPACITY_TIMEOUT_S, 300, 1, 86400),
        on_label_removal=parse_choice(env, ON_LABEL_REMOVAL, "keep", LABEL_REMOVAL_CHOICES),
        drain_force=parse_bool(env, DRAIN_FORCE),
        drain_emptydir=parse_choice(env, DRAIN_EMPTYDIR, "memory", EMPTYDIR_CHOICES),
        drain_skip_wait_s=parse_int(env, DRAIN_SKIP_WAIT_S, 300, 0, 86400),
        kube_max_attempts=parse_int(env, KUBE_MAX_ATTEMPTS, 5, 1, 10),
        invocation_timeout_s=parse_int(env, INVOCATION_TIMEOUT_S, 0, 0, 86400),
        kubeconfig=_get(env, KUBECONFIG),
        kube_endpoint=parse_choice(env, KUBE_ENDPOINT, "private", KUBE_ENDPOINTS),
    )


# --- notifications (functions/pipeline/notify.py); documented in docs/operations.md ---
NOTIFY_URL = _var("ACK_MIG_NOTIFY_URL", "", "a webhook that gets one JSON line when a rollout finishes or"
                                            " stops, or a node fails "
                                            "([operations.md](operations.md#notifications)); `https://` "
                                            "only (`http://` to a loopback address, for tests), no "
                                            "`user:password@`; it may "
                                            "carry a token: never logged, kept out of results; prefer "
                                            "`ACK_MIG_NOTIFY_URL_SECRET`", "notify")
NOTIFY_URL_SECRET = _var("ACK_MIG_NOTIFY_URL_SECRET", "", "name of the KMS Secrets Manager secret that "
                                                          "holds the webhook URL (read only when there is"
                                                          " something to send, cached for the instance's "
                                                          "life, never logged); wins over "
                                                          "`ACK_MIG_NOTIFY_URL`; the template's "
                                                          "`NotifyUrlSecretName`", "notify")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")  # urlsplit's hostname: lower case, no brackets


@dataclass(frozen=True)
class NotifySettings:
    url: str = field(default="", repr=False)  # may hold a token: kept out of repr, masked in every log line
    url_secret: str = ""  # a secret's name, not a secret: the URL lives in KMS

    def secrets(self) -> Tuple[str, ...]:
        return (self.url,) if self.url else ()


def check_notify_url(text: str, name: str = NOTIFY_URL) -> str:
    """The webhook URL, checked; the message never quotes it (its path or query may be a token).
    https:// only, so a token never crosses a network in clear text; http:// to a loopback host (tests)."""
    from urllib.parse import urlsplit

    url = text.strip()
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # a port that is not a number raises ValueError
    except ValueError:
        raise SettingsError("%s is not a URL; use https://host[:port]/path" % name) from None
    if parts.scheme not in ("https", "http") or not host or any(c.isspace() for c in url):
        raise SettingsError("%s is not a URL; use https://host[:port]/path" % name)
    if "@" in parts.netloc:
        # urllib would take "user:password@host" for the host (never posted: a port "password@host"), and a
        # password in a URL is a secret in clear text; webhooks carry their token in the path or query.
        raise SettingsError("%s carries user info (user:password@); use https://host[:port]/path with the "
                            "webhook's token in the path or query" % name)
    if parts.scheme == "http" and host not in LOOPBACK_HOSTS:
        raise SettingsError("%s uses http://; use https:// (http:// only to a loopback address)" % name)
    return url


def notify_from_env(env: Mapping[str, str]) -> NotifySettings:
    url = _get(env, NOTIFY_URL)
    return NotifySettings(url=check_notify_url(url) if url else "", url_secret=parse_secret_name(env, NOTIFY_URL_SECRET))


if __name__ == "__main__":
    print(markdown_table(), end="")
