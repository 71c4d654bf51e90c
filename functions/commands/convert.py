"""``ack-mig-hook convert``: mig-parted configs to pool labels and back (the core is functions.decision.migparted).

    ack-mig-hook convert --from-mig-parted FILE [--config NAME] [--gpu GPU] [--json]
    ack-mig-hook convert --to-mig-parted VALUE [--size] --gpu GPU [--config NAME]

Exit codes: 0 converted; 1 a config was refused (the reason is printed); 2 bad input (one line).
"""

import json
import sys

from node_bootstrap.mig import PartitionSpec, find_gpu

from functions.base.textsafe import clip

from functions.decision.migparted import (ConvertError, from_mig_parted, render_mig_parted, render_results,
                      to_mig_parted)


def configure(parser, command):
    way = parser.add_mutually_exclusive_group(required=True)
    way.add_argument("--from-mig-parted", metavar="FILE", help="a mig-parted config (YAML or JSON; '-' for stdin)")
    way.add_argument("--to-mig-parted", metavar="VALUE", help="a partition label value to turn into a mig-parted config")
    parser.add_argument("--config", metavar="NAME", help="the mig-parted config to convert (default: all) / to name")
    parser.add_argument("--gpu", help="GPU model (NVML name, ACK's form or PCI id): checks the layout fits and "
                                      "writes +me profiles as ids; required with --to-mig-parted")
    parser.add_argument("--size", action="store_true",
                        help="with --to-mig-parted: VALUE is a gpu-partition-size value (default: a sequence)")
    parser.add_argument("--json", action="store_true", help="print JSON")


MAX_CONFIG_BYTES = 1 << 20  # mig-parted's own example config is 10 KiB; a file past 1 MiB is not one
# Values of the document as read, each alias again: NVIDIA's config for every GPU it knows holds a few thousand.
# YAML anchors let a 300 KB file repeat a list 10^8 times; reading that (every config, every entry, each
# device filter made text) ran for hours, so the walk below stops at this count.
MAX_CONFIG_VALUES = 100000


def _load(path):
    try:
        if path == "-":
            text = sys.stdin.read(MAX_CONFIG_BYTES + 1)
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(MAX_CONFIG_BYTES + 1)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # (ValueError: a NUL in the path)
        raise ConvertError("cannot read %s: %s" % (path, getattr(exc, "strerror", None) or exc)) from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConvertError("%s is larger than %d MiB: not a mig-parted config" % (path, MAX_CONFIG_BYTES >> 20))
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:
        raise ConvertError("%s is nested too deeply to be a mig-parted config" % path) from None
    import yaml  # the deploy extra (PyYAML is no runtime dependency of the function): main names the install
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConvertError("%s is not YAML: %s" % (path, _yaml_problem(exc))) from None
    except RecursionError:
        raise ConvertError("%s is nested too deeply to be a mig-parted config" % path) from None
    return _bounded(doc, path)


def _yaml_problem(exc) -> str:
    """Where PyYAML found the problem, then what it is, cut where it reads whole. Its own text (str(exc))
    copies the lines around each mark before naming the problem's line and column last: cut to a line's
    length, the place was what went."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None or not problem:  # an error without a place (a reader error names its position in words)
        return clip(str(exc), 160)
    text = "line %d, column %d: %s" % (mark.line + 1, mark.column + 1, problem)
    context, started = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context:
        text += " (%s%s)" % (context, " started at line %d, column %d" % (started.line + 1, started.column + 1)
                             if started is not None else "")
    return clip(text, 160)


def _bounded(doc, path):
    """``doc``, refused when it holds more than MAX_CONFIG_VALUES values counted as converting reads them: an
    alias counts again each time it is used. The walk stops at the count, whatever the aliases expand to (a
    list's items are counted before the next alias is opened)."""
    left, pending = MAX_CONFIG_VALUES, [doc]
    while pending:
        value = pending.pop()
        left -= 1
        if left < 0:
            raise ConvertError("%s holds more than %d values once its YAML aliases are expanded: not a mig-parted "
                               "config; write the configs out, or use fewer aliases" % (path, MAX_CONFIG_VALUES))
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return doc


def run(args):
    gpu = find_gpu(args.gpu) if args.gpu else None
    if args.to_mig_parted is not None:
        if gpu is None:
            raise ConvertError("--to-mig-parted needs --gpu: the layout and profile names depend on the GPU model")
        doc = to_mig_parted(PartitionSpec("size" if args.size else "sequence", args.to_mig_parted), gpu, args.config)
        if args.json:
            print(json.dumps(doc, indent=2))
        else:
            print(render_mig_parted(doc), end="")
        return 0
    results = from_mig_parted(_load(args.from_mig_parted), args.config, gpu)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        print("\n".join(render_results(results)))
    return 1 if any(r.reason for r in results) else 0
