"""Local transport: runs the node script in a subprocess on this machine. Used by ``ack-mig-hook demo``
(with the simulated NVML backend) and by a node that runs the hook on itself at first boot. It goes
through the same script, bundle cache and result parsing as the remote transports, so the demo exercises
the real path."""

import os
import signal
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence

from functions.delivery.outcome import NodeResult, NodeTarget, parse_output
from functions.delivery.transport import ScriptMaker, run_push_run


class LocalTransport:
    name = "local"

    def __init__(self, maker: ScriptMaker, sim_state_dir: Optional[str] = None, concurrency: int = 8):
        self.maker = maker
        self.sim_state_dir = sim_state_dir  # one simulated node state file per instance (demo, tests)
        self.concurrency = concurrency
        self._lock = threading.Lock()

    def _args(self, target: NodeTarget) -> NodeTarget:
        if not self.sim_state_dir:
            return target
        state = os.path.join(self.sim_state_dir, "%s.json" % target.instance_id)
        return target._replace(args=("--sim-state", state) + tuple(target.args))

    def _run(self, target: NodeTarget) -> NodeResult:
        script = self.maker.script([self._args(target)], target.instance_id)
        # The runner stops node_bootstrap itself at the deadline (SIGTERM to its group, SIGKILL after the
        # grace); this limit is the backstop past that, and it ends the whole session, runner included.
        limit = self.maker.deadline_s + self.maker.grace_s + 15
        proc = subprocess.Popen(["/bin/sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.communicate()
            return NodeResult(target.instance_id, self.name, error="node-timeout",
                              message="the node script did not finish within %gs" % limit)
        proc = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        out = proc.stdout.decode("utf-8", "replace")
        doc = parse_output(out)
        if doc is None:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            return NodeResult(target.instance_id, self.name, proc.returncode, error="no-result",
                              message=(err[-1] if err else "exit %d" % proc.returncode)[:300])
        return NodeResult(target.instance_id, self.name, proc.returncode, doc)

    def _push(self, target: NodeTarget) -> Optional[NodeResult]:
        # Every local "node" shares this machine's directory: push once, atomically, under a lock.
        with self._lock:
            bundle = self.maker.bundle
            if os.path.isfile(os.path.join(self.maker.root, "bundles", bundle.digest, ".complete")):
                return None
            incoming = os.path.join(self.maker.root, "incoming")
            os.makedirs(incoming, mode=0o700, exist_ok=True)
            for name, chunk in zip(bundle.part_names(), bundle.chunks()):
                fd, tmp = tempfile.mkstemp(prefix=".part-", dir=incoming)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(chunk)
                os.replace(tmp, os.path.join(incoming, name))
        return None

    def run(self, targets: Sequence[NodeTarget]) -> List[NodeResult]:
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(targets) or 1))) as pool:
            return list(pool.map(lambda t: run_push_run(t, self._run, self._push), targets))
