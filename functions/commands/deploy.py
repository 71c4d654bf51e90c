"""``ack-mig-hook deploy`` and ``ack-mig-hook undeploy``: the whole stack in one command.

deploy: check the settings (all missing ones reported at once) -> build the code package with its
dependencies for FC and check it -> upload it to OSS under a name that carries its SHA-256 -> create or
update the ROS stack from ``template.yml`` -> wait, printing the stack's events, until it is ready ->
print what to do next. ``--dry-run`` builds and checks the package, has ROS validate the template and
says what it would do, changing nothing.

undeploy: delete the stack and wait until it is gone. What stays on nodes is listed in docs/deploy.md.
"""

import argparse
import os
import re
import sys
import tempfile
from typing import Dict, List

import yaml

from functions import settings
from functions.stack.code_package import KNOWN_HOSTS_NAME, ROOT

TEMPLATE = os.path.join(ROOT, "template.yml")
DEFAULT_STACK = "ack-mig-hook"
OBJECT_PREFIX = "ack-mig-hook/"


class UsageError(ValueError):
    exit_code = 2


def configure(parser, command):
    parser.add_argument("--cluster-id", default=settings.env_text(settings.CLUSTER_ID),
                        help="the ACK cluster (c-...) whose node pools the function serves "
                             "(default: $ACK_MIG_CLUSTER_ID)")
    parser.add_argument("--region", default=settings.env_text(settings.REGION),
                        help="the cluster's region, e.g. cn-beijing (default: $ACK_MIG_REGION)")
    parser.add_argument("--stack-name", default=DEFAULT_STACK, help="ROS stack name (default: %(default)s)")
    parser.add_argument("--timeout", type=int, default=30, metavar="MINUTES",
                        help="how long to wait for the stack (default: %(default)s)")
    parser.add_argument("--poll", type=float, default=5.0, metavar="SECONDS", help=argparse.SUPPRESS)
    if command == "undeploy":
        return
    parser.add_argument("--bucket", default="",
                        help="OSS bucket for the code package, created private if missing; an existing one "
                             "must be yours and private (default: ack-mig-hook-<account id>-<region>)")
    parser.add_argument("--transport", choices=settings.TRANSPORTS[:2], default=None,
                        help="how the bootstrap reaches nodes (template default: cloud-assistant)")
    parser.add_argument("--log-project", default="", help="Simple Log Service project for the function's logs")
    parser.add_argument("--log-store", default="", help="logstore in that project")
    parser.add_argument("--parameter", action="append", default=[], metavar="KEY=VALUE",
                        help="any other template.yml parameter (repeatable), e.g. DryRun=true")
    parser.add_argument("--known-hosts", default="", metavar="FILE",
                        help="ssh transport: the nodes' host keys (known_hosts format), packaged as "
                             "/code/known_hosts and set as the SshKnownHosts parameter")
    parser.add_argument("--deps-dir", default="", metavar="DIR",
                        help="use these already fetched dependencies (a pip --target folder for python3.10 "
                             "on Linux x86_64) instead of fetching them")
    parser.add_argument("--dry-run", action="store_true",
                        help="build and check the package, validate the template, say what would change; "
                             "upload and change nothing")


def _template_parameters() -> Dict[str, dict]:
    with open(TEMPLATE, encoding="utf-8") as handle:
        return yaml.safe_load(handle).get("Parameters") or {}


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
            problems.append("template.yml has no parameter %r (it has %s)" % (key.strip()[:40], ", ".join(declared)))
        else:
            values[key.strip()] = value
    if getattr(args, "known_hosts", "") and not os.path.isfile(args.known_hosts):
        problems.append("--known-hosts %s is not a file" % args.known_hosts)
    named = {"ClusterId": args.cluster_id, "CodeBucket": args.bucket, "CodeObject": code_object,
             "Transport": args.transport or "", "LogProject": args.log_project, "LogStore": args.log_store,
             "SshKnownHosts": "/code/" + KNOWN_HOSTS_NAME if getattr(args, "known_hosts", "") else ""}
    for key, value in named.items():
        if value and key in declared:
            values[key] = value
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
        # Every Number parameter of template.yml is a count of seconds that functions/settings.py reads as a
        # whole number; ROS's Number would also let 600.5 through, so the deploy refuses it here.
        low, high = spec.get("MinValue"), spec.get("MaxValue")
        number = int(value) if re.fullmatch(r"-?[0-9]{1,9}", value.strip()) else None
        if number is None or (low is not None and number < low) or (high is not None and number > high):
            return "%s=%r is not accepted; use a whole number %s..%s" % (
                key, value[:40], "" if low is None else low, "" if high is None else high)
    return ""


def _shown(values: Dict[str, str], declared: Dict[str, dict]) -> str:
    return ", ".join("%s=%s" % (k, "****" if (declared.get(k) or {}).get("NoEcho") else v)
                     for k, v in sorted(values.items()))


def _common(args):
    problems = []
    if not args.region:
        problems.append("--region (or ACK_MIG_REGION)")
    if args.command == "deploy" and not args.cluster_id:
        problems.append("--cluster-id (or ACK_MIG_CLUSTER_ID)")
    if problems:
        raise UsageError("missing %s" % " and ".join(problems))
    from functions.stack.credentials import resolve
    from functions.stack.ros import Stacks

    keys = resolve()
    stacks = Stacks(args.region, keys, settings.parse_endpoint(settings.environment(), settings.ROS_ENDPOINT))
    return keys, stacks


def default_bucket(account: str, region: str) -> str:
    """The code bucket when --bucket is not given: one per account and region (FC reads the package from
    the stack's region). Bucket names are global, so the name carries the account id: another account
    cannot create it by guessing the cluster id, and one that does anyway fails the owner check of
    :mod:`functions.stack.upload`. 13 + 16 + 1 + region <= 63 characters, OSS's limit."""
    return ("ack-mig-hook-%s-%s" % (account, region)).lower()[:63].rstrip("-")


def _account(keys, region: str) -> str:
    from functions.stack.credentials import account_id

    return account_id(keys, region, settings.parse_endpoint(settings.environment(), settings.STS_ENDPOINT))


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args) -> int:
    return undeploy(args) if args.command == "undeploy" else deploy(args)


def deploy(args) -> int:
    from functions.stack import build
    from functions.stack.ros import StackError
    from functions.stack.upload import crc64, upload

    declared = _template_parameters()
    # Bad input stops here, before any work. Without a region no stack can be looked up, so everything a
    # new stack needs is reported too.
    parameters(args, declared, OBJECT_PREFIX + "x.zip", require=not args.region)
    keys, stacks = _common(args)
    account = _account(keys, args.region)
    args.bucket = args.bucket or default_bucket(account, args.region)
    existing = stacks.find(args.stack_name)
    parameters(args, declared, OBJECT_PREFIX + "x.zip", require=not existing)
    if existing:  # a stack that cannot take an update stops here, before anything is built or uploaded
        if existing.get("Status", "").endswith("_IN_PROGRESS"):
            raise StackError("stack %s is %s; wait for it to finish, then rerun"
                             % (args.stack_name, existing["Status"]))
        if existing.get("Status", "").startswith("CREATE_") and existing["Status"] != "CREATE_COMPLETE":
            # Its creation failed (and was rolled back): nothing to update. ROS keeps the name taken.
            raise StackError("stack %s is %s: its creation failed; remove it with `ack-mig-hook undeploy "
                             "--region %s%s`, then deploy again" % (
                                 args.stack_name, existing["Status"], args.region,
                                 "" if args.stack_name == DEFAULT_STACK else " --stack-name %s" % args.stack_name))

    with open(TEMPLATE, encoding="utf-8") as handle:
        template = handle.read()
    with tempfile.TemporaryDirectory(prefix="ack-mig-hook-deploy-") as work:
        deps = args.deps_dir
        if not deps:
            deps = os.path.join(work, "deps")
            _progress("fetching the function's dependencies for python%s on Linux x86_64 ..." % build.FC_PYTHON)
            build.fetch(deps)
        elif not os.path.isdir(deps):
            raise UsageError("--deps-dir %s is not a folder" % deps)
        zip_path = os.path.join(work, "ack-mig-hook.zip")
        digest = build.build(zip_path, deps, known_hosts=args.known_hosts)
        code_object = "%s%s.zip" % (OBJECT_PREFIX, digest[:16])
        values = parameters(args, declared, code_object, require=not existing)
        with open(zip_path, "rb") as handle:
            checksum = crc64(handle.read())
        values["CodeChecksum"] = checksum  # FC refuses a package whose CRC-64 is not this one
        _progress("package: %d KB, sha256 %s" % (os.path.getsize(zip_path) // 1024, digest[:16]))
        stacks.validate(template)
        action = "update stack %s (%s)" % (existing["StackId"], existing.get("Status")) if existing \
            else "create stack %s" % args.stack_name
        if args.dry_run:
            print("dry run: would upload oss://%s/%s, then %s in %s with %s"
                  % (args.bucket, code_object, action, args.region, _shown(values, declared)))
            print("dry run: template.yml validated by ROS; nothing was uploaded or changed")
            return 0
        uploaded = upload(keys, args.region, args.bucket, code_object, zip_path, account,
                          settings.parse_endpoint(settings.environment(), settings.OSS_ENDPOINT))
        _progress("uploaded %s (CRC-64 %s)" % (uploaded.where, uploaded.crc64))
    if existing:
        stack_id = existing["StackId"]
        if not stacks.update(stack_id, template, values, args.timeout):
            print("stack %s is already up to date (%s)" % (args.stack_name, stack_id))
            return 0
        _progress("updating stack %s ..." % args.stack_name)
    else:
        stack_id = stacks.create(args.stack_name, template, values, args.timeout)
        _progress("creating stack %s (%s) ..." % (args.stack_name, stack_id))
    final = stacks.wait(stack_id, args.timeout * 60, args.poll, _progress)
    status = (final or {}).get("Status", "gone")
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status:
        print("ack-mig-hook: error: stack %s ended %s: %s" % (args.stack_name, status,
                                                              " ".join(str((final or {}).get("StatusReason", "")).split())[:300]),
              file=sys.stderr)
        return 1
    print("stack %s: %s (%s)" % (args.stack_name, status, stack_id))
    print(NEXT_STEPS % {"cluster": args.cluster_id, "region": args.region})
    return 0


NEXT_STEPS = """next:
  1. label a GPU node pool (ACK console > Node Pools > Edit > Node Labels), e.g.
     ack.aliyun.com/gpu-partition-size=1g.5gb
  2. check the function sees it:  ack-mig-hook doctor --cluster-id %(cluster)s --region %(region)s
  3. watch the nodes:  kubectl get nodes -L nvidia.com/mig.config.state,aliyun.accelerator/nvidia_mig_sequence"""


def undeploy(args) -> int:
    _keys, stacks = _common(args)
    existing = stacks.find(args.stack_name)
    if not existing:
        print("no stack %s in %s: nothing to remove" % (args.stack_name, args.region))
        return 0
    stacks.delete(existing["StackId"])
    _progress("deleting stack %s (%s) ..." % (args.stack_name, existing["StackId"]))
    final = stacks.wait(existing["StackId"], args.timeout * 60, args.poll, _progress)
    if final is not None and final.get("Status") != "DELETE_COMPLETE":
        print("ack-mig-hook: error: stack %s ended %s: %s" % (args.stack_name, final.get("Status"),
                                                              final.get("StatusReason", "")), file=sys.stderr)
        return 1
    print("stack %s deleted; the OSS bucket and what runs on nodes stay: see docs/deploy.md (Uninstall)"
          % args.stack_name)
    return 0

