"""Build the Function Compute code package: ``python -m functions.commands.package --out dist/ack-mig-hook.zip``.

What goes in the zip, and why, is :mod:`functions.stack.code_package`; this is its command line.
"""

import argparse
import os
import sys

from functions.stack.code_package import DEPENDENCIES, HANDLER, ROOT, build, missing_dependencies


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m functions.commands.package", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "dist", "ack-mig-hook.zip"))
    parser.add_argument("--deps", default="", metavar="DIR", help="a pip --target directory to include")
    parser.add_argument("--known-hosts", default="", metavar="FILE",
                        help="the nodes' host keys for the ssh transport, packaged as /code/known_hosts")
    parser.add_argument("--requirements", action="store_true",
                        help="print the runtime requirements, one a line (for pip install --target DIR)")
    args = parser.parse_args(argv)
    if args.requirements:
        print("\n".join(req for req, _ in DEPENDENCIES))
        return 0
    if args.deps and not os.path.isdir(args.deps):
        print("error: --deps %s is not a directory" % args.deps, file=sys.stderr)
        return 2
    lacking = missing_dependencies(args.deps) if args.deps else []
    if lacking:
        print("error: --deps %s lacks %s; install them there: python -m pip install --target %s "
              "$(python -m functions.commands.package --requirements) ..." % (args.deps, ", ".join(lacking), args.deps),
              file=sys.stderr)
        return 2
    if args.known_hosts and not os.path.isfile(args.known_hosts):
        print("error: --known-hosts %s is not a file" % args.known_hosts, file=sys.stderr)
        return 2
    names = build(args.out, args.deps, known_hosts=args.known_hosts)
    print("%s: %d files, handler %s" % (args.out, len(names), HANDLER))
    return 0


if __name__ == "__main__":
    sys.exit(main())
