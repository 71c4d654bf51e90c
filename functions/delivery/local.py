"""Local transport: runs the node script in a subprocess on this machine. Used by ``ack-mig-hook demo``
(with the simulated NVML backend) and by a node that runs the hook on itself at first boot. It goes
through the same script, bundle cache and result parsing as the remote transports, so the demo exercises
the real path. Its output is read with the same bound as SSH's (64 KB tails, 1 MB in all, then the script's
session is killed and the node ends ``output-too-large``)."""

import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence

from functions.base.logs import secret_name
from functions.base.settings import child_environment
from functions.delivery.outcome import NodeResult, NodeTarget, parse_output
from functions.delivery.transport import OutputTail, ScriptMaker, run_push_run


def node_environment(environ=None) -> dict:
    """What the node script starts with: :func:`functions.base.settings.child_environment` (no cloud credential,
    none of the function's ACK_MIG_* settings: the runner sets the two node_bootstrap reads), nor any variable
    whose name says it holds a secret (``GITHUB_TOKEN``, ``DB_PASSWORD``: the log redactor's rule,
    functions.base.logs.secret_name). On a remote node none of them is there; the node tool reads none."""
    return {k: v for k, v in child_environment(environ).items() if not secret_name(k)}


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
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=node_environment())
        output = OutputTail()
        try:
            finished = _read_bounded(proc, output, limit)
        finally:
            if proc.poll() is None:  # the deadline passed or the node wrote too much: end the whole session
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        if output.over:
            return output.too_large(target.instance_id, self.name, "the node script was killed")
        if not finished:
            return NodeResult(target.instance_id, self.name, error="node-timeout",
                              message="the node script did not finish within %gs" % limit)
        doc = parse_output(output.stdout())
        if doc is None:
            err = output.stderr().strip().splitlines()
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


def _read_bounded(proc: subprocess.Popen, output: OutputTail, limit_s: float) -> bool:
    """Read the script's stdout and stderr into ``output`` until both close (True), the deadline passes or
    the script writes more than the cap (False). ``communicate`` would keep everything it wrote."""
    deadline = time.monotonic() + limit_s
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, False)
        selector.register(proc.stderr, selectors.EVENT_READ, True)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for key, _ in selector.select(min(remaining, 1.0)):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                elif output.add(data, stderr=key.data):
                    return False
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:  # the pipes closed but the script still runs
        return False
    return True
