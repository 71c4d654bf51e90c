"""Nodes that never stop writing, and the function's side run in a child process to measure its peak RSS.

The node side is real: the real OpenSSH sshd on loopback (tests/support/sshd.py) or a local subprocess,
running the product's own node script. Only the ``python`` the script execs is a stand-in
(:func:`write_standin`): for an instance id starting ``i-flood-out`` it is ``cat /dev/zero`` (endless
stdout, no line break ever), ``i-flood-err`` the same on stderr, ``i-flood-lines`` ``yes`` (endless
lines); any other id gets the real interpreter, which runs the real runner and a small node_bootstrap
stand-in that answers success (:data:`NODE_MAIN`).

``python -m tests.support.flood_nodes CONFIG.json`` runs one transport over the configured targets in a
fresh process (its address space limited to ``memory_limit_mb``, 2 GB unless set) and prints one JSON
line: each node's error code or outcome, the wall time, and the process's peak RSS (``VmHWM``, the
high-water mark of its resident memory) before and after the run. A fresh process, so the measurement
is the transport's alone (bench/endless_output.py, and a small sample in
tests/delivery/test_hostile_node_output.py).
"""

import json
import os
import resource
import subprocess
import sys
import time
from typing import Any, Dict, List, Sequence

from tests.support.peak_rss import peak_rss_mb

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NODE_MAIN = b'''
import json, sys
print("a log line")
print(json.dumps({"outcome": "success", "changes": 2, "sequence": "3g.20gb-3g.20gb", "gpus": []}))
'''

STANDIN = """#!/bin/sh
# The node script runs: exec PYTHON -I - DIGEST ROOT ARGS DEADLINE PYTHON INSTANCE NAMES GRACE <<runner
case "$8" in
  i-flood-out*) exec cat /dev/zero ;;
  i-flood-err*) exec cat /dev/zero >&2 ;;
  i-flood-lines*) exec yes "a node that never stops talking" ;;
esac
exec {python} "$@"
"""


def write_standin(path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(STANDIN.format(python=sys.executable))
    os.chmod(path, 0o755)
    return path


def node_bundle():
    """The bundle the good nodes run: the product's packing of :data:`NODE_MAIN` as node_bootstrap."""
    from functions.delivery import bundle as bundle_mod

    return bundle_mod.pack([("node_bootstrap/__init__.py", b""), ("node_bootstrap/__main__.py", NODE_MAIN)])


def _peak_rss_mb() -> float:
    return peak_rss_mb()  # the child's own, not its parent's (tests/support/peak_rss.py)


def _run(config: Dict[str, Any]) -> Dict[str, Any]:
    from functions.delivery.node_script import node_args
    from functions.delivery.outcome import NodeTarget, outcome
    from functions.delivery.transport import ScriptMaker

    maker = ScriptMaker(node_bundle(), int(config["deadline_s"]), config["root"], config["python"], grace_s=1)
    args = tuple(node_args({"kind": "sequence", "value": "3g.20gb-3g.20gb"}))
    targets = [NodeTarget(iid, "cn-test.%s" % iid, config.get("address", "127.0.0.1"), args)
               for iid in config["targets"]]
    if config["transport"] == "ssh":
        from functions.delivery.ssh import SshTransport, load_key

        transport = SshTransport(maker, load_key(path=config["key"]), config["known_hosts"], port=config["port"],
                                 grace_s=float(config.get("grace_s", 2)))
    else:
        from functions.delivery.local import LocalTransport

        transport = LocalTransport(maker)
    before = _peak_rss_mb()
    started = time.monotonic()
    results = transport.run(targets)
    wall = time.monotonic() - started
    return {"before_rss_mb": before, "peak_rss_mb": _peak_rss_mb(), "wall_s": round(wall, 2),
            "nodes": {r.instance_id: {"error": r.error, "outcome": outcome(r).outcome, "message": r.message}
                      for r in results}}


def measure(config: Dict[str, Any], timeout_s: float = 120) -> Dict[str, Any]:
    """Run the child with ``config``; its JSON answer. The child inherits no proxy settings."""
    path = os.path.join(config["root"] + ".config.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = ROOT
    proc = subprocess.run([sys.executable, "-m", "tests.support.flood_nodes", path], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s, text=True)
    if proc.returncode != 0:
        raise RuntimeError("flood child failed (%d): %s" % (proc.returncode, proc.stderr[-2000:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ssh_config(sshd: Any, workdir: str, targets: Sequence[str], deadline_s: int = 20) -> Dict[str, Any]:
    return {"transport": "ssh", "port": sshd.port, "key": sshd.client_key, "known_hosts": sshd.known_hosts,
            "root": os.path.join(workdir, "node-root"), "python": write_standin(os.path.join(workdir, "python")),
            "targets": list(targets), "deadline_s": deadline_s}


def local_config(workdir: str, targets: Sequence[str], deadline_s: int = 20) -> Dict[str, Any]:
    return {"transport": "local", "root": os.path.join(workdir, "node-root"),
            "python": write_standin(os.path.join(workdir, "python")), "targets": list(targets),
            "deadline_s": deadline_s}


def main(argv: List[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        config = json.load(fh)
    # A transport without the bound would take this machine's memory (6 GB in 17 s, measured): the child
    # gets an address-space limit, so such a build fails with MemoryError instead.
    limit = int(config.get("memory_limit_mb", 2048)) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    print(json.dumps(_run(config)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
