"""The node's API client on the node's own interpreter (NODE_PYTHON, a real 3.6 where `make node-env` found
one): http.client and ssl are the stdlib's of that Python, and what they do with a peer that misbehaves is
read here, not assumed from the test's own 3.10+ (tests/node/test_kube_cut_body.py runs the same client
in-process)."""

import json
import os
import subprocess

import pytest

from tests.node.nodecli import NODE_PYTHON, ROOT
from tests.support.drip import HTTP_HEAD, Drip, loopback_tls

pytestmark = pytest.mark.skipif(not os.path.isfile(NODE_PYTHON), reason="no .venv-node here (make node-env)")

# A whole JSON Node: what came parses, and only the Content-Length (100000) still owed says it is not all.
PART = b'{"kind": "Node", "metadata": {"name": "node-a", "labels": {}}}'

_CALL = r"""
import json, sys
from node_bootstrap.kube.client import KubeClient, KubeConfig, KubeError
server, ca = sys.argv[1:3]
client = KubeClient(KubeConfig(server, ca.encode("ascii"), None, None, "t0ken", None), timeout=2.0)
try:
    print(json.dumps({"node": client.get_node("node-a")}))
except KubeError as exc:
    print(json.dumps({"error": str(exc), "transient": exc.transient, "status": exc.status}))
"""


def node_call(server, ca_pem):
    done = subprocess.run([NODE_PYTHON, "-c", _CALL, server, ca_pem.decode("ascii")], cwd=ROOT, timeout=60,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          env={"PYTHONPATH": ROOT, "PATH": os.environ.get("PATH", "")})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("close_notify", [True, False], ids=["close_notify", "unannounced"])
def test_an_answer_closed_before_its_content_length_is_a_transient_failure_on_the_node_python(tmp_path, close_notify):
    """The eighth review's read of a body cut short (``read(amt)`` returns it short, the Content-Length still
    owed raises IncompleteRead), on the node's http.client. A close announced by TLS is an end of data to every
    Python; an unannounced one too, except under OpenSSL 3 before Python 3.10 (this machine's pyenv 3.6):
    there it is an SSLError named by a reason from an older table (KRB5_S_TKT_NYV), which was "TLS ... failed",
    not worth a retry."""
    ca_pem, context = loopback_tls(tmp_path, "node-python-cut-body-ca")
    # No interval: the part goes out at once, then the server closes the connection, 99,9xx bytes owed.
    with Drip(head=HTTP_HEAD, payload=PART, interval_s=0.0, life_s=10, tls=context, close_notify=close_notify) as peer:
        got = node_call("https://127.0.0.1:%d" % peer.port, ca_pem)
    assert "node" not in got, "an answer cut short was taken whole: %r" % (got,)
    assert "cut short" in got["error"] and "within" not in got["error"], got
    assert got["transient"] is True and got["status"] is None, got
    assert peer.sent == len(PART)


_PEAK = r"""
import json, sys
from node_bootstrap.kube.client import KubeClient, KubeConfig

def peak_kb():  # VmHWM: this process's own high-water mark (tests/support/peak_rss.py)
    with open("/proc/self/status") as fh:
        return int([line for line in fh if line.startswith("VmHWM:")][0].split()[1])

server, ca = sys.argv[1:3]
client = KubeClient(KubeConfig(server, ca.encode("ascii"), None, None, "t0ken", None), timeout=2.0)
before = peak_kb()
name = client.get_node("node-a")["metadata"]["name"]
print(json.dumps({"name": name, "grew_mb": (peak_kb() - before) / 1024.0}))
"""


def test_a_small_answer_costs_the_node_python_no_buffer_of_the_largest_answer(tmp_path):
    """The client reads at most MAX_ANSWER_BYTES + 1 (64 MiB): http.client's read(amt) before 3.10 allocates
    amt bytes up front and zeroes them (a bytearray it reads into), whatever the Content-Length, so on a node's
    3.6 every API call, a 60-byte Node too, touched 64 MiB (measured: peak 18.6 -> 85.6 MB)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(PART)
    ca_pem, context = loopback_tls(tmp_path, "node-python-peak-ca")
    with Drip(head=head, payload=PART, interval_s=0.0, life_s=10, tls=context, close_notify=True) as peer:
        done = subprocess.run([NODE_PYTHON, "-c", _PEAK, "https://127.0.0.1:%d" % peer.port, ca_pem.decode("ascii")],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              env={"PYTHONPATH": ROOT, "PATH": os.environ.get("PATH", "")}, timeout=60)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["name"] == "node-a" and got["grew_mb"] < 16, got
