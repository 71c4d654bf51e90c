"""Nodes that never stop writing: the function's peak RSS while they stream, over SSH and locally.

SSH: the real OpenSSH sshd on 127.0.0.1 (``tests/support/sshd.py``), 24 streaming nodes (8 on stdout
without a line break, 8 on stderr, 8 endless lines) among 8 good ones, all at once (the transport's
default concurrency is 32). Local: 6 streaming nodes and 2 good ones. The function's side runs in a
fresh child process (``tests/support/flood_nodes.py``), whose peak RSS (``VmHWM``) is the number: before the
bound a single streaming node took the SSH transport to 377 MB in 4 s and the local one to 6 GB in
17 s (this machine, measured). Target: under 200 MB (FC gives the function 512 MB).

    python bench/endless_output.py
"""

import json
import os
import tempfile

import _path  # noqa: F401

from tests.support.flood_nodes import local_config, measure as child, ssh_config
from tests.support.sshd import SSHD, Sshd


def _floods(per_kind):
    return ["i-flood-%s%02d" % (kind, n) for n in range(per_kind) for kind in ("out", "err", "lines")]


def _summary(prefix, report, floods, good):
    nodes = report["nodes"]
    return {
        prefix + "_rss_mb": report["peak_rss_mb"],
        prefix + "_rss_before_mb": report["before_rss_mb"],
        prefix + "_wall_s": report["wall_s"],
        prefix + "_cut_off": sum(1 for t in floods if nodes[t]["error"] == "output-too-large"),
        prefix + "_streaming_nodes": len(floods),
        prefix + "_good_ok": sum(1 for t in good if nodes[t]["outcome"] == "partitioned"),
        prefix + "_good_nodes": len(good),
    }


def measure():
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)
    results = {}
    with tempfile.TemporaryDirectory(prefix="ack-mig-endless-") as work:
        floods, good = _floods(2), ["i-good%02d" % n for n in range(2)]
        results.update(_summary("endless_output_local", child(local_config(os.path.join(work, "local"),
                                                                           good + floods)), floods, good))
        if not os.path.exists(SSHD):
            results["endless_output_ssh_error"] = "OpenSSH sshd is not installed (make sshd)"
            return results
        os.makedirs(os.path.join(work, "sshd"))
        server = Sshd(os.path.join(work, "sshd")).start()
        try:
            floods, good = _floods(8), ["i-good%02d" % n for n in range(8)]
            report = child(ssh_config(server, os.path.join(work, "ssh"), good + floods), timeout_s=300)
            results.update(_summary("endless_output_ssh", report, floods, good))
        finally:
            server.stop()
    return results


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
