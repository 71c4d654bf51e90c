"""Every command's ``--json`` is written the same way: ``json.dumps(..., indent=2)``, so a reader (or
``diff``) sees the same shape from demo, status and invoke (``demo --json`` was one long line)."""

import json
import os

import pytest

from functions.commands.main import main
from tests.function.conftest import INVENTORY, ROOT
from tests.support.demo_run import demo_json


@pytest.mark.parametrize("argv", [
    ["demo", "--json"],
    ["status", "--inventory", INVENTORY, "--json"],
    ["invoke", "--event", os.path.join(ROOT, "examples", "event.json"), "--inventory", INVENTORY, "--dry-run",
     "--json"],
])
def test_json_is_indented_like_every_other_command(argv, capsys):
    if argv[0] == "demo":  # the process's one run of demo --json (tests/support/demo_run.py)
        out = demo_json()
    else:
        main(argv)
        out = capsys.readouterr().out
    assert out.startswith("{\n  \"")
    assert out == json.dumps(json.loads(out), indent=2) + "\n"
