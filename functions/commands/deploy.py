"""``ack-mig-hook deploy``: the whole stack in one command (``undeploy`` lives in functions/commands/undeploy.py).

check the settings (all missing ones reported at once) -> read the cluster's network from ACK (the function
joins its VPC to reach the API server's private endpoint, unless ``--parameter VpcId=...`` says otherwise)
-> build the code package with its dependencies for FC and check it -> upload it to OSS under a name that
carries its SHA-256 (skipped when that object already holds it) -> create or update the ROS stack from
``template.yml`` -> wait, printing this operation's events, until it is ready -> print what to do next.

``--dry-run`` builds and checks the package and asks ROS what it would do (PreviewStack for a new stack, a
change set computed and deleted for an existing one, functions/commands/stack/change_plan.py): the resources it would add,
modify or remove and the parameters that would change; it uploads and changes nothing. ``--json`` prints the
result (or the plan) as one JSON document on stdout; progress stays on stderr.
"""

import argparse
import difflib
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional

from functions.base import settings
from functions.base.textsafe import clip
from functions.commands import common, shipped
from functions.commands.stack.code_package import KNOWN_HOSTS_NAME
from functions.commands.stack.exit_codes import EXIT_CONFLICT

TEMPLATE = shipped.TEMPLATE  # template.yml, shipped with the package
OBJECT_PREFIX = "ack-mig-hook/"  # then the stack's name: each stack prunes its own packages only
KEEP_PACKAGES = 3
UsageError = common.UsageError
# Simple Log Service names ("Limits" of projects and logstores): 3-63 characters, lower-case letters, digits
# and hyphens (a logstore also underscores), starting and ending with a lower-case letter or a digit.
LOG_PROJECT = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]\Z")
LOG_STORE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]\Z")


def _named(pattern: "re.Pattern", what: str, form: str):
    def parse(text: str) -> str:
        if text and not pattern.match(text):
            raise argparse.ArgumentTypeError("%r is not a %s; use %s" % (text[:80], what, form))
        return text
    parse.__name__ = what
    return parse


def add_stack_options(parser: argparse.ArgumentParser) -> None:
    """The options deploy and undeploy share besides the cloud ones."""
    common.add_stack_name(parser, help="ROS stack name (default: ack-mig-hook-<cluster id>; a stack deployed before "
                             "names carried the cluster is ack-mig-hook)")
    parser.add_argument("--timeout", type=common.whole_number(10, 1440, "minutes"), default=30, metavar="MINUTES",
                        help="how long to wait for the stack, 10..1440 (ROS's TimeoutInMinutes) (default: "
                             "%(default)s)")
    parser.add_argument("--poll", type=common.number(0, 60, "seconds"), default=5.0, metavar="SECONDS",
                        help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def configure(parser, command):
    common.add_cloud_options(parser, cluster_help="the ACK cluster whose node pools the function serves, c "
                                                  "followed by 32 hex digits (default: $ACK_MIG_CLUSTER_ID)",
                             kubeconfig=False)
    add_stack_options(parser)
    parser.add_argument("--bucket", type=common.bucket, default="",
                        help="OSS bucket for the code package, created private if missing; an existing one "
                             "must be yours and private (default: ack-mig-hook-<account id>-<region>)")
    parser.add_argument("--force", action="store_true",
                        help="use a code bucket of yours even when its ACL is not private or its policy lets "
                             "others write there (printed as a warning); never another account's bucket "
                             "nor one in another region")
    parser.add_argument("--transport", choices=settings.TRANSPORTS[:2], default=None,
                        help="how the bootstrap reaches nodes (template default: cloud-assistant)")
    parser.add_argument("--log-project", type=_named(LOG_PROJECT, "Simple Log Service project name",
                                                     "3-63 lower-case letters, digits and hyphens"),
                        default="", help="Simple Log Service project for the function's logs")
    parser.add_argument("--log-store", type=_named(LOG_STORE, "logstore name",
                                                   "3-63 lower-case letters, digits, hyphens and underscores"),
                        default="", help="logstore in that project")
    parser.add_argument("--parameter", action="append", default=[], metavar="KEY=VALUE",
                        help="any other template.yml parameter (repeatable), e.g. DryRun=true; VpcId, VSwitchId "
                             "and SecurityGroupId replace the ones read from the cluster")
    parser.add_argument("--known-hosts", type=common.known_hosts_file, default="", metavar="FILE",
                        help="ssh transport: the nodes' host keys (known_hosts format), packaged as "
                             "/code/known_hosts and set as the SshKnownHosts parameter")
    parser.add_argument("--no-known-hosts", action="store_true",
                        help="clear the stack's SshKnownHosts parameter (no known_hosts packaged): for a stack "
                             "that leaves the ssh transport, which cannot run without it")
    parser.add_argument("--deps-dir", default="", metavar="DIR",
                        help="use these already fetched dependencies (a pip --target folder for python3.10 "
                             "on Linux x86_64) instead of fetching them")
    parser.add_argument("--keep-packages", type=common.whole_number(1, 1000, "packages"), default=KEEP_PACKAGES,
                        metavar="N", help="after a deploy, keep this stack's N newest code packages in the bucket, "
                                          "the one in use always among them; delete the older ones "
                                          "(default: %(default)s)")
    parser.add_argument("--dry-run", action="store_true",
                        help="build and check the package and show ROS's plan: the resources the stack would "
                             "add, modify or remove and the parameters that would change; upload and change "
                             "nothing")


def _template_parameters() -> Dict[str, dict]:
    import yaml  # the deploy extra: imported where it is used, so `deploy --help` works without it

    with open(TEMPLATE, encoding="utf-8") as handle:
        return yaml.safe_load(handle).get("Parameters") or {}


def given_parameters(args) -> Dict[str, str]:
    """The ``--parameter KEY=VALUE`` pairs as given (checked by :func:`parameters`)."""
    return {k.strip(): v for k, sep, v in (item.partition("=") for item in args.parameter) if sep and k.strip()}


def _known(key: str, declared: Dict[str, dict]) -> str:
    """What to say of an unknown parameter: the close names, else the first few (the template has dozens: the
    whole list would push the other problems of the same error out of sight)."""
    close = difflib.get_close_matches(key, list(declared), n=3, cutoff=0.6)
    if close:
        return "did you mean %s?" % " or ".join(close)
    names = list(declared)
    return "it has %s%s" % (", ".join(names[:5]), ", and %d more" % (len(names) - 5) if len(names) > 5 else "")


# Parameters deploy fills from a flag of its own, which checks the value; given with --parameter instead, the
# value went past those checks, or was silently overwritten by the flag's default.
OWN_FLAG = {"ClusterId": "--cluster-id", "CodeBucket": "--bucket", "CodeObject": "deploy (the object it uploads)",
            "Transport": "--transport", "LogProject": "--log-project", "LogStore": "--log-store",
            "SshKnownHosts": "--known-hosts (--no-known-hosts clears it)"}


def parameters(args, declared: Dict[str, dict], code_object: str, require: bool = True) -> Dict[str, str]:
    """The stack's parameter values; every problem in one error. ``require``: every parameter without a
    default must be given (a new stack); an update keeps the stack's previous values (UsePreviousParameters)."""
    problems: List[str] = [] if getattr(args, "region", "") else ["missing --region (or ACK_MIG_REGION)"]
    values: Dict[str, str] = {}
    for item in args.parameter:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            problems.append("--parameter %r is not KEY=VALUE" % item[:60])
        elif key.strip() not in declared:
            problems.append("template.yml has no parameter %r (%s)" % (key.strip()[:40], _known(key.strip(), declared)))
        elif key.strip() in OWN_FLAG:  # the flag checks the value (a bucket's name, a project's) and wins
            problems.append("--parameter %s is set by %s, not --parameter" % (key.strip(), OWN_FLAG[key.strip()]))
        else:
            values[key.strip()] = value
    clear_known_hosts = getattr(args, "no_known_hosts", False)
    if clear_known_hosts and getattr(args, "known_hosts", ""):
        problems.append("--known-hosts and --no-known-hosts exclude each other")
    elif clear_known_hosts and args.transport == "ssh":
        problems.append("--no-known-hosts with --transport ssh: the ssh transport verifies every node's host key; "
                        "give --known-hosts FILE")
    if getattr(args, "deps_dir", "") and not os.path.isdir(args.deps_dir):
        problems.append("--deps-dir %s is not a folder" % args.deps_dir)
    named = {"ClusterId": args.cluster_id, "CodeBucket": args.bucket, "CodeObject": code_object,
             "Transport": args.transport or "", "LogProject": args.log_project, "LogStore": args.log_store,
             "SshKnownHosts": "/code/" + KNOWN_HOSTS_NAME if getattr(args, "known_hosts", "") else ""}
    for key, value in named.items():
        if value and key in declared:
            values[key] = value
    if clear_known_hosts and "SshKnownHosts" in declared:
        values["SshKnownHosts"] = ""  # sent empty: left out, an update keeps the stack's (UsePreviousParameters)
    if require and "FunctionName" in declared and "FunctionName" not in values and args.cluster_id:
        values["FunctionName"] = common.default_name(args.cluster_id)  # a new stack: never another cluster's
    missing = [k for k, spec in declared.items() if "Default" not in (spec or {}) and not values.get(k)
               and require]
    hints = {"ClusterId": "--cluster-id", "LogProject": "--log-project", "LogStore": "--log-store",
             "CodeBucket": "--bucket"}
    if missing:
        problems.append("missing %s" % ", ".join("%s (%s)" % (k, hints.get(k, "--parameter %s=..." % k))
                                                  for k in missing))
    for key, value in values.items():
        problem = _constraint_problem(key, value, declared[key] or {})
        if problem:
            problems.append(problem)
    if problems:
        raise UsageError("; ".join(problems))
    return values


def _constraint_problem(key: str, value: str, spec: dict) -> str:
    """The template's own constraints (AllowedValues, AllowedPattern, Number MinValue/MaxValue), checked
    before any work so a wrong value is one line rather than a failed stack."""
    allowed = spec.get("AllowedValues")
    if allowed and value not in [str(a) for a in allowed]:
        return "%s=%r is not accepted; use one of %s" % (key, value[:40], ", ".join(map(str, allowed)))
    pattern = spec.get("AllowedPattern")
    if pattern and not re.fullmatch(pattern, value):
        return "%s=%r is not accepted; it must match %s (docs/deploy.md, Parameters)" % (key, value[:40], pattern)
    if spec.get("Type") == "Number":
        # Every Number parameter of template.yml is a count of seconds that functions/base/settings.py reads as a
        # whole number; ROS's Number would also let 600.5 through, so the deploy refuses it here.
        low, high = spec.get("MinValue"), spec.get("MaxValue")
        number = int(value) if re.fullmatch(r"-?[0-9]{1,9}", value.strip()) else None
        if number is None or (low is not None and number < low) or (high is not None and number > high):
            return "%s=%r is not accepted; use a whole number %s..%s" % (
                key, value[:40], "" if low is None else low, "" if high is None else high)
    return ""


def stacks_for(args, found_keys):
    from functions.commands.stack.ros import Stacks

    return Stacks(args.region, found_keys, settings.parse_endpoint(settings.environment(), settings.ROS_ENDPOINT))


def default_bucket(account: str, region: str) -> str:
    """The code bucket when --bucket is not given: one per account and region (FC reads the package from
    the stack's region). Bucket names are global, so the name carries the account id: another account
    cannot create it by guessing the cluster id, and one that does anyway fails the owner check of
    :mod:`functions.commands.stack.upload`. 13 + 16 + 1 + region <= 63 characters, OSS's limit."""
    return ("ack-mig-hook-%s-%s" % (account, region)).lower()[:63].rstrip("-")


def _account(found_keys, region: str) -> str:
    from functions.commands.stack.credentials import account_id

    return account_id(found_keys, region, settings.parse_endpoint(settings.environment(), settings.STS_ENDPOINT))


def progress(line: str) -> None:
    from functions.base.textsafe import escape

    print(escape(line), file=sys.stderr, flush=True)


def run(args) -> int:
    common.stack_of(args)
    return deploy(args)


def _stack_parameters(stacks, existing: Optional[Dict[str, Any]]) -> Dict[str, str]:
    if not existing:
        return {}
    return common.stack_parameters(stacks.get(existing["StackId"]))


def network_values(args, network, previous: Dict[str, str]) -> Dict[str, Any]:
    """Pure: which VPC parameters to send and why. ``--parameter`` for any of them wins (the operator owns
    all three then); a stack that already has a VPC keeps it (UsePreviousParameters); else the cluster's."""
    from functions.commands.stack.cluster_network import VPC_PARAMETERS

    given = {k: v for k, v in given_parameters(args).items() if k in VPC_PARAMETERS}
    if given:
        return {"source": "--parameter", "values": {}, "why": "as given: %s" % ", ".join(
            "%s=%s" % kv for kv in sorted(given.items()))}
    if all(previous.get(k) for k in VPC_PARAMETERS):
        return {"source": "stack", "values": {}, "why": "the stack's VPC %s (vSwitch %s, security group %s) is kept"
                % tuple(previous[k] for k in VPC_PARAMETERS)}
    derived = network.parameters()
    if not derived:
        return {"source": "none", "values": {}, "why": "ACK names no VPC, vSwitch and security group for cluster %s:"
                " the function runs outside a VPC and cannot reach the API server's private endpoint (startup "
                "taints stay, rollouts cannot run); give --parameter VpcId=... VSwitchId=... SecurityGroupId=..."
                % network.cluster_id}
    return {"source": "cluster", "values": derived, "why": "the function joins the cluster's VPC %s (vSwitch %s, "
            "security group %s) to reach the API server at %s" % (
                derived["VpcId"], derived["VSwitchId"], derived["SecurityGroupId"],
                network.intranet_endpoint or "its private endpoint")}


def deploy(args) -> int:
    from functions.base.textsafe import escape
    from functions.commands.stack import build, cluster_network
    from functions.commands.stack.ros import StackError
    from functions.commands.stack.upload import crc64, inspect, upload

    declared = _template_parameters()
    # Bad input stops here, before any work. Without a region no stack can be looked up, so everything a
    # new stack needs is reported too.
    parameters(args, declared, OBJECT_PREFIX + "x.zip", require=not args.region)
    common.require(args, "region", "cluster_id")
    found_keys = common.keys(args)
    stacks = stacks_for(args, found_keys)
    account = _account(found_keys, args.region)
    args.bucket = args.bucket or default_bucket(account, args.region)
    existing = stacks.find(args.stack_name)
    parameters(args, declared, OBJECT_PREFIX + "x.zip", require=not existing)
    _refuse_unchangeable(args, existing)
    previous = _stack_parameters(stacks, existing)
    foreign = common.not_ours(args.stack_name, previous, args.cluster_id) if existing else ""
    if foreign:  # before anything is built or uploaded: an update would take the stack over
        raise StackError("%s; name this cluster's stack with --stack-name, or leave it out" % foreign,
                         exit_code=EXIT_CONFLICT)
    if args.no_known_hosts and not args.transport and previous.get("Transport") == "ssh":
        raise UsageError("--no-known-hosts: stack %s uses the ssh transport, which verifies every node's host key; "
                         "add --transport cloud-assistant, or give --known-hosts FILE" % args.stack_name)
    packaged = "/code/" + KNOWN_HOSTS_NAME
    transport = args.transport or previous.get("Transport") or "cloud-assistant"
    if previous.get("SshKnownHosts") == packaged and transport == "ssh" and not args.known_hosts \
            and not args.no_known_hosts:
        # The file lives in the code package, which only --known-hosts fills: the update would keep the parameter
        # (UsePreviousParameters) and ship a package without the file, and every ssh delivery would fail.
        raise UsageError("stack %s verifies nodes against %s, a file of its code package: give --known-hosts FILE "
                         "again (the new package must carry it), or --transport cloud-assistant --no-known-hosts"
                         % (args.stack_name, packaged))
    network = cluster_network.read(found_keys, args.region, args.cluster_id,
                                   settings.parse_endpoint(settings.environment(), settings.CS_ENDPOINT))
    route = network_values(args, network, previous)
    progress("network: %s" % route["why"])

    with open(TEMPLATE, encoding="utf-8") as handle:
        template = handle.read()
    with build.work_folder() as work:  # removed however the deploy ends (after a kill: by the next one)
        # The lock's dependencies, fetched once and cached by the lock's hash (functions/commands/stack/build.py)
        deps = args.deps_dir or build.cached(progress=progress)
        zip_path = os.path.join(work, "ack-mig-hook.zip")
        digest = build.build(zip_path, deps, known_hosts=args.known_hosts)
        code_object = package_prefix(args.stack_name) + "%s.zip" % digest[:16]
        values = parameters(args, declared, code_object, require=not existing)
        values.update(route["values"])
        if existing and "FunctionName" not in values and "FunctionName" in previous:
            # The stack keeps the name it has: the template's default changed (ack-mig-hook, now empty for
            # ack-mig-hook-<ClusterId>), and UpdateStack gives a parameter never passed the new default, which
            # would replace the function and its role under a new name.
            values["FunctionName"] = previous["FunctionName"]
        with open(zip_path, "rb") as handle:
            checksum = crc64(handle.read())
        values["CodeChecksum"] = checksum  # FC refuses a package whose CRC-64 is not this one
        size_kb = os.path.getsize(zip_path) // 1024
        progress("package: %d KiB, sha256 %s" % (size_kb, digest[:16]))
        stacks.validate(template)
        oss = settings.parse_endpoint(settings.environment(), settings.OSS_ENDPOINT)
        package = {"object": "oss://%s/%s" % (args.bucket, code_object), "sha256": digest, "crc64": checksum,
                   "size_kb": size_kb}
        if args.dry_run:
            stored = inspect(found_keys, args.region, args.bucket, code_object, zip_path, account, oss,
                             allow_shared=args.force)
            for warning in stored.warnings:
                progress("warning (--force): %s" % warning)
            package.update(uploaded=False, would_upload=not stored.object_present,
                           bucket_exists=stored.bucket_exists, bucket_warnings=list(stored.warnings))
            return _show_plan(args, stacks, existing, template, values, declared, package, route)
        uploaded = upload(found_keys, args.region, args.bucket, code_object, zip_path, account, oss,
                          allow_shared=args.force)
        for warning in uploaded.warnings:
            progress("warning (--force): %s" % warning)
        package.update(uploaded=uploaded.uploaded, bucket_warnings=list(uploaded.warnings))
        progress("uploaded %s (CRC-64 %s)" % (uploaded.where, uploaded.crc64) if uploaded.uploaded else
                 "package already in %s (CRC-64 %s): not uploaded again" % (uploaded.where, uploaded.crc64))
    result = {"stack": args.stack_name, "region": args.region, "cluster_id": args.cluster_id, "package": package,
              "network": route, "dry_run": False}
    if existing:
        stack_id = existing["StackId"]
        before = stacks.event_ids(stack_id)
        if not stacks.update(stack_id, template, values, args.timeout):
            result.update(stack_id=stack_id, operation="none", status=existing.get("Status"))
            _prune(args, found_keys, oss, code_object, result)
            _print(args, result, "stack %s is already up to date (%s): nothing changed, the function was left "
                   "as it is" % (args.stack_name, escape(stack_id)))
            return 0
        result["operation"] = "update"
        progress("updating stack %s (%s) ..." % (args.stack_name, stack_id))
    else:
        before = set()
        stack_id = stacks.create(args.stack_name, template, values, args.timeout)
        result["operation"] = "create"
        progress("creating stack %s (%s) ..." % (args.stack_name, stack_id))
    final = stacks.wait(stack_id, args.timeout * 60, args.poll, progress, before)
    status = str((final or {}).get("Status", "gone"))  # as ROS answered it: text, written visibly below
    result.update(stack_id=stack_id, status=status)
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status:
        reason = clip((final or {}).get("StatusReason", ""), 300)
        result["reason"] = reason
        if args.json:
            print(json.dumps(result, indent=2))
        raise StackError("stack %s ended %s: %s" % (args.stack_name, status, reason))
    _prune(args, found_keys, oss, code_object, result)
    _print(args, result, "stack %s: %s (%s)\n%s" % (args.stack_name, escape(status), escape(stack_id),
                                                    NEXT_STEPS % {"cluster": args.cluster_id, "region": args.region}))
    return 0


def package_prefix(stack_name: str) -> str:
    return "%s%s/" % (OBJECT_PREFIX, stack_name)


def _prune(args, found_keys, oss, in_use: str, result: Dict[str, Any]) -> None:
    """After a deploy that left the stack on ``in_use``: the stack's older packages beyond --keep-packages
    go. The stack is deployed whatever happens here, so a refusal is a warning, not a failure."""
    from functions.commands.stack.upload import UploadError, prune

    try:
        pruned = prune(found_keys, args.region, args.bucket, package_prefix(args.stack_name), in_use,
                       args.keep_packages, oss)
    except UploadError as exc:
        progress("warning: old packages were not pruned: %s (deploy needs oss:ListObjects and oss:DeleteObject "
                 "for it)" % exc)
        result["packages_pruned"] = None
        return
    result["packages_pruned"] = ["oss://%s/%s" % (args.bucket, k) for k in pruned.deleted]
    if pruned.deleted:
        progress("pruned %d old package%s from oss://%s/%s (kept %d, --keep-packages %d)"
                 % (len(pruned.deleted), "" if len(pruned.deleted) == 1 else "s", args.bucket,
                    package_prefix(args.stack_name), len(pruned.kept), args.keep_packages))


def _refuse_unchangeable(args, existing: Optional[Dict[str, Any]]) -> None:
    """A stack that cannot take an update stops here, before anything is built or uploaded (exit 6)."""
    from functions.commands.stack.ros import StackError

    if not existing:
        return
    status = str(existing.get("Status", ""))
    if status.endswith("_IN_PROGRESS"):
        from functions.commands.stack.ros import advice

        raise StackError("stack %s is %s; %s" % (args.stack_name, status, advice(status, args.stack_name, args.region)),
                         exit_code=EXIT_CONFLICT)
    if status.startswith("CREATE_") and status != "CREATE_COMPLETE":
        # Its creation failed (and was rolled back): nothing to update. ROS keeps the name taken.
        raise StackError("stack %s is %s: its creation failed; remove it with `ack-mig-hook undeploy --region %s%s "
                         "--yes`, then deploy again" % (
                             args.stack_name, status, args.region,
                             " --cluster-id %s" % args.cluster_id if args.stack_name == common.default_name(
                                 args.cluster_id) else " --stack-name %s" % args.stack_name),
                         exit_code=EXIT_CONFLICT)


def _show_plan(args, stacks, existing, template: str, values: Dict[str, str], declared: Dict[str, dict],
               package: Dict[str, Any], route: Dict[str, Any]) -> int:
    from functions.commands.stack import change_plan as plans
    from functions.base.textsafe import escape

    found = plans.compute(stacks, existing, args.stack_name, template, values, declared, args.timeout, args.poll,
                          progress=progress)
    if args.json:
        print(json.dumps({"stack": args.stack_name, "region": args.region, "cluster_id": args.cluster_id,
                          "operation": found.operation, "plan": found.to_json(), "package": package,
                          "network": route, "dry_run": True}, indent=2))
        return 0
    lines = plans.render(found, args.region)
    lines.append("  package: %s %s (%d KiB)" % (
        "would upload" if package["would_upload"] else "already uploaded:", package["object"], package["size_kb"]))
    if not package["bucket_exists"]:
        lines.append("  bucket: %s would be created, private" % args.bucket)
    lines.append("  network: %s" % route["why"])
    lines.append("dry run: nothing was uploaded or changed (template.yml validated by ROS)")
    print("\n".join(escape(line) for line in lines))
    return 0


def _print(args, result: Dict[str, Any], text: str) -> None:
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(text)


NEXT_STEPS = """next:
  1. label a GPU node pool (ACK console > Node Pools > Edit > Node Labels), e.g.
     ack.aliyun.com/gpu-partition-size=1g.5gb, or ack-mig-hook/layout=auto to
     follow the pods that wait (in seconds with ack-node-problem-detector's
     EventBridge sink: docs/auto-pools.md "Pod events")
  2. check the function sees it:  ack-mig-hook doctor --cluster-id %(cluster)s --region %(region)s
  3. watch the nodes:  kubectl get nodes -L nvidia.com/mig.config.state,aliyun.accelerator/nvidia_mig_sequence"""
