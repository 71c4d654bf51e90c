"""Build the Function Compute code package: ``python -m functions.commands.package --out dist/ack-mig-hook.zip``.

What goes in the zip, and why, is :mod:`functions.commands.stack.code_package`. The function's dependencies come
from ``--deps DIR`` (a ``pip install --target`` folder) or are fetched for FC's python3.10 on Linux x86_64
as the lock pins them (:mod:`functions.commands.stack.lock`, by SHA-256), once per lock into the cache that
deploy uses too; either way :mod:`functions.commands.stack.build`
checks them, so a package never silently lacks one. Only ``--sources-only`` (for looking inside, never for
FC) builds a zip without them.
"""

import argparse
import os
import sys

from functions.commands.stack import build as deps
from functions.commands.stack.code_package import HANDLER, build


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own is the usage block, then the problem: one line, as every command's
        print("%s: error: %s; see --help" % (self.prog, message), file=sys.stderr)
        self.exit(2)


def _out_problem(out: str) -> str:
    """Why the zip cannot be written at ``out`` (a folder, or under a file), "" when it can be tried."""
    if os.path.isdir(out):
        return "--out %s is a directory; give the zip's file name (e.g. %s)" % (
            out, os.path.join(out, "ack-mig-hook.zip"))
    parent = os.path.dirname(os.path.abspath(out))
    while parent and not os.path.exists(parent):  # the folders build() would make
        parent = os.path.dirname(parent) if os.path.dirname(parent) != parent else ""
    if parent and not os.path.isdir(parent):
        return "--out %s: %s is not a directory; give a zip file under a folder" % (out, parent)
    return ""


def main(argv=None) -> int:
    parser = _Parser(prog="python -m functions.commands.package", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("dist", "ack-mig-hook.zip"),
                        help="the zip to write (default: %(default)s, under the current folder)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--deps", default="", metavar="DIR",
                        help="a pip --target folder of the dependencies for python3.10 on Linux x86_64 "
                             "(default: fetch them)")
    source.add_argument("--sources-only", action="store_true",
                        help="leave the dependencies out: the zip cannot run in FC (for inspection only)")
    parser.add_argument("--known-hosts", default="", metavar="FILE",
                        help="the nodes' host keys for the ssh transport, packaged as /code/known_hosts")
    parser.add_argument("--requirements", action="store_true",
                        help="print the runtime requirements, one a line (for pip install --target DIR)")
    args = parser.parse_args(argv)
    if args.requirements:
        print("\n".join(deps.runtime_requirements()))
        return 0
    problems = []
    if args.deps and not os.path.isdir(args.deps):
        problems.append("--deps %s is not a directory" % args.deps)
    if not args.requirements and _out_problem(args.out):
        problems.append(_out_problem(args.out))
    if args.known_hosts and not os.path.isfile(args.known_hosts):
        problems.append("--known-hosts %s is not a file" % args.known_hosts)
    elif args.known_hosts:
        from functions.delivery.known_hosts import file_problem

        found = file_problem(args.known_hosts)  # the function's ssh transport could not load it
        if found:
            problems.append("--known-hosts: " + found)
    if problems:
        print("error: %s" % "; ".join(problems), file=sys.stderr)
        return 2
    try:
        if args.sources_only:
            names = build(args.out, "", known_hosts=args.known_hosts)
        elif args.deps:
            return _checked(args, args.deps)
        else:  # fetched once per lock, like deploy's (the same cache)
            return _checked(args, deps.cached(progress=lambda line: print(line, file=sys.stderr, flush=True)))
    except deps.BuildError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    except OSError as exc:  # a file that could not be written or read (no room, no permission): said, no traceback
        where = str(exc.filename or "")
        if not where or os.path.dirname(os.path.abspath(where)) == os.path.dirname(os.path.abspath(args.out)):
            where = args.out  # the zip, or the partial file written beside it (code_package.build)
        print("error: cannot write %s: %s" % (where, exc.strerror or exc), file=sys.stderr)
        return 1
    print("%s: %d files, handler %s (sources only: it cannot run in FC)" % (args.out, len(names), HANDLER))
    return 0


def _checked(args, folder: str) -> int:
    digest = deps.build(args.out, folder, known_hosts=args.known_hosts)  # raises BuildError, naming what lacks
    print("%s: handler %s, dependencies checked for python%s on Linux x86_64, sha256 %s"
          % (args.out, HANDLER, deps.FC_PYTHON, digest[:16]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
