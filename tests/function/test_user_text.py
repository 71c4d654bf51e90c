"""User text names nothing internal (issue 28 item 5): no source file of the project (``*.py``), no
reference note (facts.md), no file of the interpreter's C source (``_ssl.c``) in what an operator reads.
Files an operator uses (deploy/rbac.yaml, template.yml, docs/*.md) are fine to name."""

import ast
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from tests.support.stop_now import shutdown_now

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INTERNAL = re.compile(r"(?<![\w.-])[\w/.-]+\.(?:py|c|go)\b|facts\.md|shared/reference")
# Strings that name a source file on purpose, none of them shown to an operator: the bundle's and the code
# package's own file names, headers of generated files, and a developer's KeyError for an undeclared setting.
ALLOWED = {
    ("functions/delivery/bundle.py", "pynvml.py"),
    ("functions/delivery/node_script.py", "node_runner.py"),
    ("functions/delivery/node_script.py", "node_runner.py must not contain the heredoc marker"),
    ("functions/base/settings.py", "%s is not a documented setting (functions/base/settings.py owns every name)"),
    ("functions/commands/stack/code_package.py", "pynvml.py"),
    # the bundle's member names: the runner travels in the bundle and the boot unit runs it by name
    ("functions/delivery/bundle.py", "node_runner.py"),
    ("node_bootstrap/host/unitfile.py", "ack_mig_runner.py"),
}


def _strings(path):
    """Every string constant of a module but its docstrings (module, class, function)."""
    tree = ast.parse(open(path).read())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_message_of_the_function_the_cli_or_the_node_names_an_internal_file():
    found = []
    for folder, _, files in [w for top in ("functions", "node_bootstrap") for w in os.walk(os.path.join(ROOT, top))]:
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
            for text in _strings(os.path.join(ROOT, rel)):
                if text.startswith("#") or text.startswith('"""'):  # lines of a generated file, not a message
                    continue
                if INTERNAL.search(text) and (rel, text) not in ALLOWED:
                    found.append((rel, text[:120]))
    assert found == []


def test_the_interpreters_c_source_locations_are_left_out_of_user_text():
    from functions.base.textsafe import escape

    assert escape("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed (_ssl.c:1006); retry") == \
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed; retry"
    assert escape("socket closed (Modules/socketmodule.c:1201)") == "socket closed"
    assert escape("cost (3.5 GPUs)") == "cost (3.5 GPUs)"  # only a C file and line are dropped


class _Plain(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the stdlib's name
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_tls_failure_reaches_the_operator_without_internal_names(tmp_path):
    """The kubeconfig names https on a port that speaks plain HTTP: the TLS error is said, as one status
    line, with the server's address and no interpreter source file."""
    server = HTTPServer(("127.0.0.1", 0), _Plain)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conf = tmp_path / "plain.conf"
        conf.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:%d\n"
                        "users:\n- name: u\n  user:\n    token: t0ken\ncontexts:\n- name: x\n  context:\n    cluster: c\n"
                        "    user: u\ncurrent-context: x\n" % server.server_port)
        done = subprocess.run([sys.executable, "-m", "functions.commands.main", "status", "--inventory",
                               os.path.join(ROOT, "examples", "inventory.json"), "--kubeconfig", str(conf)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        shutdown_now(server)  # not at its loop's next 0.5 s poll
    text = done.stdout + done.stderr
    assert "127.0.0.1:%d" % server.server_port in text and "TLS" in text, text
    assert not INTERNAL.search(text) and "Traceback" not in text, text
