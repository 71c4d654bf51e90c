"""The files the commands read at run time, shipped inside the package: ``template.yml`` (deploy),
``deploy/rbac.yaml`` (doctor) and ``examples/`` (demo, and ``example:NAME`` for ``--inventory``).

They live at the root of the source tree, where people read them; ``functions/commands/data/`` holds links
to them, and the wheel carries them as files (pyproject.toml's package-data). So the same path works from a
clone, an editable install and a wheel installed anywhere (issue 38: a wheel without them crashed).
"""

import argparse
import os
from importlib import resources

EXAMPLE_PREFIX = "example:"


def path(*parts: str) -> str:
    """The file's path on disk (the package is always installed as files, never zipped)."""
    return os.fspath(resources.files("functions.commands").joinpath("data", *parts))


TEMPLATE = path("template.yml")
RBAC = path("rbac.yaml")
EXAMPLES = path("examples")


def inventories() -> list:
    """The shipped cluster snapshots, by file name."""
    return sorted(n for n in os.listdir(EXAMPLES) if n.startswith("inventory") and n.endswith(".json"))


def inventory_file(text: str) -> str:
    """``--inventory``: a file, or ``example:NAME`` for a snapshot shipped with the package (the names
    docs/first-deployment.md uses work from any install, not only from a clone)."""
    if not text.startswith(EXAMPLE_PREFIX):
        return text
    name = text[len(EXAMPLE_PREFIX):]
    name = name if name.endswith(".json") else name + ".json"
    if os.sep in name or name not in inventories():
        raise argparse.ArgumentTypeError("%r is not a shipped example; use example:NAME with NAME one of %s"
                                         % (text[:80], ", ".join(n[:-5] for n in inventories())))
    return os.path.join(EXAMPLES, name)
