"""``ack-mig-hook version``: the version of this command line and where it runs, as ``kubectl version
--client`` and ``helm version`` print theirs; ``-o json|yaml`` for scripts. ``--version`` prints the first
line only."""

import json
import platform
import sys


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ack-mig-hook")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def info() -> dict:
    import functions

    return {"version": version(), "python": platform.python_version(),
            "implementation": platform.python_implementation(), "platform": sys.platform,
            "package": functions.__path__[0]}


def configure(parser, command):
    parser.add_argument("--json", action="store_true", help="print the version as one JSON object")


def run(args) -> int:
    found = info()
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print("ack-mig-hook %s" % found["version"])
    print("python %s (%s, %s)" % (found["python"], found["implementation"], found["platform"]))
    print("package %s" % found["package"])
    return 0
