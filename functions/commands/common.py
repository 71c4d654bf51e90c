"""The contract every command that talks to the cloud shares (deploy, undeploy, doctor, invoke, status).

* **The same flags, the same defaults** (:func:`add_cloud_options`): ``--cluster-id`` (default
  ``$ACK_MIG_CLUSTER_ID``), ``--region`` (default ``$ACK_MIG_REGION``), ``--kubeconfig`` (default: none
  given, the command asks ACK for a short-lived one where it needs the Kubernetes API) and ``--profile``
  (an ``aliyun`` CLI profile; default: the standard chain).
* **The same credentials** (:func:`keys`): the standard chain of :mod:`functions.commands.stack.credentials`.
* **Checked input**: each value is checked where argparse reads it (an environment default too), so a
  bad one is one line naming the option, the value and the accepted form, exit 2, before any call.
  Cluster ids are ACK's form: ``c`` and 32 lower-case hex digits (DescribeClusterDetail's examples:
  ``c82e6987e2961451182edacd74faf****``, ``cbfa079eb225c44e7bce86c626f0c****``; ACK tags nodes
  ``ack.aliyun.com=<that id>``). Regions are those the official SDKs' endpoint maps name
  (:func:`functions.base.endpoints.known_regions`). Bucket names follow OSS's rules ("Bucket naming
  conventions": 3-63 characters, lower-case letters, digits and hyphens, starting and ending with a letter
  or a digit). ROS stack names: up to 255 letters, digits, ``-`` and ``_``, starting with a letter or digit
  (ros20190910 ``CreateStackRequest.stack_name``).
* **Quiet SDKs** (:func:`quiet_sdk_logs`): the credentials SDK logs every provider it tries, with
  tracebacks, through Python's last-resort handler; nothing of it may reach the terminal.
"""

import argparse
import difflib
import logging
import os
import re
from typing import Callable, Optional

from functions.base import settings
from functions.base.textsafe import clip
from functions.commands.stack.exit_codes import EXIT_USAGE

CLUSTER_ID = re.compile(r"^c[0-9a-f]{32}\Z")
EXAMPLE_CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]\Z")
STACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,254}\Z")
# Loggers of the SDKs a command loads: alibabacloud_credentials logs as "credentials" (provider/refreshable.py,
# ecs_ram_role.py ...); the Tea core and oss2 under their package names.
SDK_LOGGERS = ("credentials", "alibabacloud_credentials", "alibabacloud_tea_openapi", "alibabacloud_tea_util",
               "darabonba", "oss2", "urllib3", "aliyunsdkcore")


class UsageError(ValueError):
    """Bad input found after parsing (a combination of options, a missing setting). One line; exit 2."""

    exit_code = EXIT_USAGE


def quiet_sdk_logs() -> None:
    """No SDK log line reaches stderr (our own messages say what failed). ``disabled``, because
    alibabacloud_credentials gives its logger a StreamHandler and level INFO when its modules are imported
    (provider/refreshable.py, ecs_ram_role.py, oauth.py), which would undo a handler or level set before."""
    for name in SDK_LOGGERS:
        logger = logging.getLogger(name)
        logger.disabled = True
        logger.propagate = False


# ---- values, checked as argparse reads them (argparse.ArgumentTypeError -> one usage line, exit 2) ----

def cluster_id(text: str) -> str:
    value = (text or "").strip()
    if value and not CLUSTER_ID.match(value):
        raise argparse.ArgumentTypeError(
            "%r is not an ACK cluster id; use c followed by 32 lower-case hex digits, e.g. %s (the ACK console's "
            "cluster list, or `aliyun cs GET /clusters`)" % (value[:80], EXAMPLE_CLUSTER))
    return value


def region(text: str) -> str:
    from functions.base.endpoints import known_regions

    value = (text or "").strip()
    if value and value not in known_regions():
        near = difflib.get_close_matches(value.lower(), [r for r in known_regions() if "-" in r], n=1, cutoff=0.5)
        if not near:
            near = [r for r in known_regions() if r.endswith("-" + value.lower())][:1]
        raise argparse.ArgumentTypeError("%r is not a region the Alibaba Cloud SDKs know; use a region id such as "
                                         "cn-beijing or ap-southeast-1%s" % (
                                             value[:40], " (did you mean %s?)" % near[0] if near else ""))
    return value


def bucket(text: str) -> str:
    value = (text or "").strip()
    if value and (not BUCKET.match(value) or "--" in value):
        raise argparse.ArgumentTypeError(
            "%r is not an OSS bucket name; use 3-63 lower-case letters, digits and hyphens, starting and ending "
            "with a letter or a digit" % value[:80])
    return value


def stack_name(text: str) -> str:
    value = (text or "").strip()
    if value and not STACK_NAME.match(value):  # empty: the default, ack-mig-hook-<cluster id> (stack_of)
        raise argparse.ArgumentTypeError("%r is not a ROS stack name; use up to 255 letters, digits, - and _, "
                                         "starting with a letter or a digit" % value[:80])
    return value


def add_stack_name(parser, help="ROS stack name (default: ack-mig-hook-<cluster id>)"):
    """``--stack-name``: every command that reads or changes the stack takes it the same way."""
    parser.add_argument("--stack-name", type=stack_name, default="", help=help)


LEGACY_NAME = "ack-mig-hook"  # the one default before names carried the cluster: older stacks have it


def default_name(cluster: str) -> str:
    """The default stack and function name: ``ack-mig-hook-<cluster id>``, so two clusters deployed in one
    region and account never share a stack, a function or its RAM role (``<name>-role``). The longest
    (``ack-mig-hook-`` + 33 + ``-role``, 51) fits FC 3.0's function names and RAM's role names (64 each)."""
    return "%s-%s" % (LEGACY_NAME, cluster) if cluster else LEGACY_NAME


def stack_of(args: argparse.Namespace) -> str:
    """``--stack-name`` as given, else the cluster's default name (set on ``args`` so every line uses it)."""
    args.stack_name = args.stack_name or default_name(getattr(args, "cluster_id", "") or "")
    return args.stack_name


def find_stack(stacks, args: argparse.Namespace):
    """The stack undeploy and doctor act on: ``--stack-name`` as given; else the cluster's default name, and
    a stack of the old default name (``ack-mig-hook``) only when its ClusterId parameter is this cluster, so
    an older deployment is still found and another cluster's never is. Sets ``args.stack_name``."""
    if args.stack_name:
        return stacks.find(args.stack_name)
    cluster = getattr(args, "cluster_id", "") or ""
    args.stack_name = default_name(cluster)
    found = stacks.find(args.stack_name)
    if found or not cluster:
        return found
    legacy = stacks.find(LEGACY_NAME)
    params = stack_parameters(stacks.get(legacy["StackId"]) if legacy else None)
    if legacy and params.get("ClusterId") == cluster:
        args.stack_name = LEGACY_NAME
        return legacy
    return None


def not_ours(name: str, params: dict, cluster: str) -> str:
    """Why stack ``name`` (its GetStack ``params``, key -> value) is not the one to deploy to, delete or check
    for ``cluster`` ("" when it is). ``--stack-name`` names any stack of the region: one that serves another
    cluster would be moved to this one by an update, or deleted with its function; one without the template's
    required ClusterId parameter is not a stack deploy made, and an update would replace its resources."""
    if "ClusterId" not in params:
        return "stack %s has no ClusterId parameter: not a stack ack-mig-hook deploy made" % name
    if cluster and params["ClusterId"] != cluster:
        return "stack %s serves cluster %s, not %s" % (name, params["ClusterId"], cluster)
    return ""


def refuse_not_ours(name: str, stack, cluster: str, nothing: str) -> None:
    """Stop a command that reads or runs what stack ``name`` (its GetStack answer) names when :func:`not_ours`
    says it is not ``cluster``'s: exit 6, one line naming the stack, the cluster it serves, the accepted form
    and ``nothing`` (what was not done). For invoke --remote, logs and wait, as deploy and undeploy refuse it:
    the function, logstore or operation of another cluster would be taken for this one's."""
    from functions.commands.stack.exit_codes import EXIT_CONFLICT, CloudError

    foreign = not_ours(name, stack_parameters(stack), cluster)
    if foreign:
        raise CloudError("%s; name this cluster's stack with --stack-name, or leave it out; %s" % (foreign, nothing),
                         exit_code=EXIT_CONFLICT)


def stack_parameters(stack) -> dict:
    """A GetStack answer's parameters, key -> value ({} for no stack)."""
    return {str(p.get("ParameterKey")): str(p.get("ParameterValue") or "") for p in (stack or {}).get("Parameters")
            or []}


def existing_file(text: str) -> str:
    if text and not os.path.isfile(text):
        # clip marks the cut ("..."): a bare [:200] named another, shorter path than the one given
        raise argparse.ArgumentTypeError("%s is not a file" % clip(text, 200))
    return text


def known_hosts_file(text: str) -> str:
    """``--known-hosts FILE``: a file, in the known_hosts form the function's ssh transport can load."""
    from functions.delivery.known_hosts import file_problem

    path = existing_file(text)
    found = file_problem(path) if path else ""
    if found:
        raise argparse.ArgumentTypeError(found)
    return path


def whole_number(low: int, high: int, unit: str) -> Callable[[str], int]:
    """A whole number in ``low..high`` (``--timeout -5`` is refused with the range)."""
    def parse(text: str) -> int:
        if not re.fullmatch(r"-?[0-9]{1,9}", (text or "").strip()) or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError("%r is not accepted; use a whole number of %s, %d..%d"
                                             % (str(text)[:20], unit, low, high))
        return int(text)
    parse.__name__ = "whole number"
    return parse


def number(low: float, high: float, unit: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:  # NaN fails this too
            raise argparse.ArgumentTypeError("%r is not accepted; use a number of %s, %g..%g"
                                             % (str(text)[:20], unit, low, high))
        return value
    parse.__name__ = "number"
    return parse


# ---- the shared flags ----

def add_cloud_options(parser: argparse.ArgumentParser, cluster_help: str = "", region_help: str = "",
                      kubeconfig_help: str = "", kubeconfig: bool = True) -> None:
    """``--cluster-id``, ``--region``, ``--kubeconfig`` and ``--profile``, the same in every command
    (``kubeconfig=False``: a command that never reads the Kubernetes API, deploy, has no ``--kubeconfig``)."""
    parser.add_argument("--cluster-id", type=cluster_id, default=settings.env_text(settings.CLUSTER_ID),
                        metavar="ID", help=cluster_help or "the ACK cluster, c followed by 32 hex digits "
                                                           "(default: $ACK_MIG_CLUSTER_ID)")
    parser.add_argument("--region", type=region, default=settings.env_text(settings.REGION), metavar="REGION",
                        help=region_help or "the cluster's region, e.g. cn-beijing (default: $ACK_MIG_REGION, "
                                            "$ALIBABA_CLOUD_REGION_ID, the aliyun CLI profile's region_id)")
    if kubeconfig:
        parser.add_argument("--kubeconfig", type=existing_file, default="", metavar="FILE",
                            help=kubeconfig_help or "kubeconfig for the Kubernetes API (default: a 15-minute one "
                                                    "that ACK issues for the cluster's public endpoint)")
    parser.add_argument("--profile", default="", metavar="NAME",
                        help="take the credentials from this aliyun CLI profile (~/.aliyun/config.json) (default: "
                             "the ALIBABA_CLOUD_* environment, else the CLI's current profile, else the instance "
                             "role)")


def default_region(args: argparse.Namespace) -> None:
    """``args.region`` when no ``--region`` and no ``ACK_MIG_REGION`` gave one: ``ALIBABA_CLOUD_REGION_ID``
    (the SDKs' variable), else the ``region_id`` of the ``aliyun`` CLI profile the credentials come from
    (``--profile``, ``ALIBABA_CLOUD_PROFILE`` or the file's current one), as the ``aliyun`` CLI itself takes
    it. A value found there is checked like ``--region``; a wrong one is one line naming where it came from."""
    if getattr(args, "region", None) or not hasattr(args, "region"):
        return
    from functions.commands.stack.credentials import profile_region

    value, where = settings.env_text(settings.REGION_ID), settings.REGION_ID
    if not value:
        value, where = profile_region(getattr(args, "profile", "") or "")
    if not value:
        return
    try:
        args.region = region(value)
    except argparse.ArgumentTypeError as exc:
        raise UsageError("%s (from %s); pass --region" % (exc, where)) from None


def require(args: argparse.Namespace, *names: str) -> None:
    """Every named option that is still empty, in one line (exit 2)."""
    flags = {"cluster_id": "--cluster-id (or ACK_MIG_CLUSTER_ID)",
             "region": "--region (or ACK_MIG_REGION, ALIBABA_CLOUD_REGION_ID, the aliyun CLI profile's region_id)"}
    missing = [flags.get(n, "--" + n.replace("_", "-")) for n in names if not getattr(args, n, "")]
    if missing:
        raise UsageError("missing %s" % " and ".join(missing))


def log_level(args: argparse.Namespace) -> str:
    """The level of the function's own JSON log lines a command shows on stderr: none by default (the
    result is the output), ``-v`` INFO, ``-vv`` or ``--debug`` DEBUG, as is ``ACK_MIG_LOG_LEVEL=DEBUG``."""
    count = getattr(args, "verbose", 0) or 0
    if getattr(args, "debug", False) or count >= 2 or settings.env_text(settings.LOG_LEVEL).upper() == "DEBUG":
        return "DEBUG"
    return "INFO" if count else "OFF"


def keys(args: argparse.Namespace):
    """The credentials every cloud command signs with (functions.commands.stack.credentials' chain, ``--profile``)."""
    from functions.commands.stack.credentials import resolve

    return resolve(getattr(args, "profile", "") or "")


def environment_with(found_keys, region_value: Optional[str] = None, cluster: Optional[str] = None) -> dict:
    """The process environment with these keys (and region, cluster) in the ``ALIBABA_CLOUD_*`` names the
    function's settings read: invoke, status and doctor build the function's own settings from it."""
    env = settings.environment()
    if found_keys is not None:
        env.update({settings.ACCESS_KEY_ID: found_keys.access_key_id,
                    settings.ACCESS_KEY_SECRET: found_keys.access_key_secret,
                    settings.SECURITY_TOKEN: found_keys.security_token or ""})
    if region_value:
        env[settings.REGION] = region_value
    if cluster:
        env[settings.CLUSTER_ID] = cluster
    # On an operator's machine the API server's private endpoint is out of reach (it is the cluster VPC's):
    # a kubeconfig from ACK names the public one, as doctor and undeploy ask for, unless the caller chose.
    env.setdefault(settings.KUBE_ENDPOINT, "public")
    return env


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")  # what the SDKs' HTTP clients honour


def connect(what: str, host: str, port: int, fix: str) -> None:
    """One TCP connection to ``host:port``, the lookup of its name included, within ACK_MIG_CONNECT_TIMEOUT_S
    (default 10 s, at most 15) before a command's first call: an unreachable service is one line naming it at
    once (``what`` at host:port, the cause and ``fix``), not the SDK's retries a minute later. On a terminal, a
    connection that takes over 2 s says what it waits for (terminal.Waiting). Raises settings.SettingsError
    (exit 2)."""
    import socket

    from functions.commands.terminal import Waiting
    from node_bootstrap.hostlookup import LookupTimeout, create_connection

    timeout = settings.connect_timeout_s()
    where = "%s:%d" % (host, port)
    try:
        with Waiting("%s at %s" % (what, where), timeout):
            # the host's name lookup within the timeout too (socket.create_connection bounds the connect only)
            create_connection((host, port), timeout).close()
    except OSError as exc:
        if isinstance(exc, LookupTimeout):
            reason = "the name lookup of %s took over %ds" % (host, timeout)
        elif isinstance(exc, socket.timeout):
            reason = "no answer within %ds" % timeout
        else:
            reason = exc.strerror or str(exc)
        raise settings.SettingsError("cannot connect to %s at %s (%s); %s; ACK_MIG_CONNECT_TIMEOUT_S sets the wait"
                                     % (what, where, reason, fix)) from None


def reach_cloud(config: "settings.Settings") -> None:
    """Connect once to the ACK API, where every command's first cloud call goes, at the endpoint every client
    resolves (functions/base/endpoints.py, ACK_MIG_CS_ENDPOINT included). Behind a proxy (HTTPS_PROXY,
    ALL_PROXY) the SDK connects through it: nothing is checked."""
    from urllib.parse import urlsplit

    from functions.base.endpoints import resolve, url_of
    from functions.commands.stack.unreachable import fix

    env = settings.environment()
    if any(env.get(name) for name in PROXY_VARIABLES) or not (config.region or config.cs_endpoint):
        return
    endpoint = resolve("cs", config.region, config.cs_endpoint)
    split = urlsplit(url_of(endpoint))
    connect("the ACK API", split.hostname or "", split.port or (443 if endpoint.protocol == "https" else 80),
            fix("cs"))  # the override when one set it, else the network and the region, as every call says


def one_deadline(client):
    """A command's Kubernetes client, told to stop asking an API server that did not answer one call within
    its timeout (15 s): that call and every later one fail at once with one error naming host and port, and
    the command reports the rest (docs/cli.md). Anything else (a snapshot's view) is returned as it is."""
    from functions.kube.client import KubeApi

    if isinstance(client, KubeApi):
        client.stop_when_silent = True
    return client
