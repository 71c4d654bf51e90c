"""The files the commands read at run time ship inside the package (functions/commands/shipped.py): in
the source tree ``functions/commands/data`` holds links to the root's files, so there is one copy of each;
``example:NAME`` names a shipped snapshot from any install. The wheel itself: test_wheel_install.py."""

import argparse
import os

import pytest

from functions.commands import deploy, demo, doctor, shipped
from tests.function.conftest import ROOT


def test_every_shipped_file_is_the_one_at_the_root_of_the_tree():
    for shipped_path, root_path in ((deploy.TEMPLATE, "template.yml"), (doctor.RBAC_FILE, "deploy/rbac.yaml"),
                                    (demo.EXAMPLES, "examples")):
        assert os.path.realpath(shipped_path) == os.path.realpath(os.path.join(ROOT, root_path))
        assert os.path.realpath(shipped_path).startswith(os.path.realpath(ROOT) + os.sep)


def test_example_names_a_shipped_snapshot_and_a_wrong_name_lists_the_right_ones():
    assert shipped.inventory_file("example:inventory-auto") == os.path.join(shipped.EXAMPLES, "inventory-auto.json")
    assert shipped.inventory_file("example:inventory.json") == os.path.join(shipped.EXAMPLES, "inventory.json")
    assert shipped.inventory_file("my/inventory.json") == "my/inventory.json"  # a file: as given
    for wrong in ("example:nope", "example:../template.yml", "example:event", "example:"):
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            shipped.inventory_file(wrong)
        message = str(refused.value)
        assert "\n" not in message and "example:NAME" in message and "inventory-auto" in message, message
        assert "event" not in message.split("one of")[1]  # events are not snapshots
