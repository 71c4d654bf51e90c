"""The node tool's human output on the node's own interpreter (NODE_PYTHON, a real 3.6 where `make node-env`
found one) under the C locale: what a unit or a command started without LANG gets. Python 3.7+ reads the C
locale as UTF-8 (PEP 538, PEP 540); 3.6 gives stdout the ASCII codec, strict but for surrogates."""

import os
import subprocess

import pytest

from tests.node.nodecli import NODE_PYTHON, Node

pytestmark = pytest.mark.skipif(not os.path.isfile(NODE_PYTHON), reason="no .venv-node here (make node-env)")

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LC_CTYPE": "C"}


def test_a_client_problem_in_other_characters_is_printed_not_a_traceback_under_the_c_locale(tmp_path):
    """systemctl's own words (its output is read as UTF-8, an undecodable byte replaced by U+FFFD) reached the
    human result as they were: on 3.6 under the C locale writing it raised UnicodeEncodeError after the GPUs had
    changed, a traceback and exit 1 in place of the result."""
    node = Node(tmp_path, count=1, clients="systemd:dcgm-exporter.service")
    node.set_unit("dcgm-exporter.service", True)
    node.fail_systemctl("start", "Failed to start dcgm-exporter.service: \u62d2\u7edd\u8bbf\u95ee \ufffd")
    # human output: Node.run asks for --json, whose text is ASCII (escapes) on every Python
    done = subprocess.run([NODE_PYTHON, "-m", "node_bootstrap"] + node.args("apply", "--sequence", "3g.20gb-2g.10gb"),
                          cwd=node.dir, env=node.env(C_LOCALE), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120)
    out, err = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0 and "Traceback" not in err, err
    assert "apply: success" in out and "could not start systemd:dcgm-exporter.service" in out, out
    assert "dcgm-exporter.service: " in out.splitlines()[-1], out  # systemctl's words, as this locale can carry them
