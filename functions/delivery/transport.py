"""The interface every transport implements (pyinfra's connector idea: one interface, one result type).

``run(targets)`` returns exactly one :class:`~.outcome.NodeResult` per target, in any order; a failing
node never hides the others. Each transport runs the same script (:mod:`.node_script`) and, when a node says
``bundle-missing``, sends the bundle parts and runs once more: a warm node costs one run, a cold one two.
"""

from typing import Callable, Dict, List, Optional, Protocol, Sequence

from functions.delivery.bundle import Bundle
from functions.delivery.node_script import ACS_INSTANCE_ID, DEFAULT_GRACE_S, DEFAULT_ROOT, render
from functions.delivery.outcome import NodeResult, NodeTarget


class Transport(Protocol):
    name: str

    def run(self, targets: Sequence[NodeTarget]) -> List[NodeResult]:
        ...


class ScriptMaker:
    """Renders the node script for a target; shared by all transports so they run the same thing."""

    def __init__(self, bundle: Bundle, deadline_s: int, root: str = DEFAULT_ROOT, python: str = "python3",
                 grace_s: int = DEFAULT_GRACE_S):
        self.bundle, self.deadline_s, self.root, self.python = bundle, deadline_s, root, python
        self.grace_s = grace_s  # node_bootstrap's SIGTERM -> SIGKILL on the node, after deadline_s

    def script(self, targets: Sequence[NodeTarget], instance_id: str = ACS_INSTANCE_ID) -> str:
        """One script for targets that share their arguments; ``instance_id`` is the node's own id for
        SSH and local, Cloud Assistant's per-instance parameter for a batch."""
        names = {t.instance_id: t.node_name for t in targets if t.node_name}
        return render(self.bundle.digest, targets[0].args, self.deadline_s, instance_id, names, self.root,
                      self.python, self.grace_s)


def run_push_run(target: NodeTarget, run: Callable[[NodeTarget], NodeResult],
                 push: Callable[[NodeTarget], Optional[NodeResult]]) -> NodeResult:
    """One node's cheap path: run; only if the node lacks the bundle, push it and run again."""
    first = run(target)
    if not first.bundle_missing:
        return first
    failed = push(target)
    if failed is not None:
        return failed
    second = run(target)
    second.attempts = first.attempts + second.attempts
    return second


def by_id(results: Sequence[NodeResult]) -> Dict[str, NodeResult]:
    return {r.instance_id: r for r in results}


# What a node may write back. The runner prints a few "# " lines and one JSON result (Cloud Assistant keeps
# at most 24 KB of output, so it stays far below these); a node that writes more is broken or hostile, and
# buffering it whole would grow the function without limit (one streaming node once took it to 2.9 GB).
OUTPUT_TAIL_BYTES = 64 * 1024  # kept of stdout and of stderr each: the result line is the last one
OUTPUT_CAP_BYTES = 1024 * 1024  # stdout and stderr together; past it the channel or process is closed
OUTPUT_TOO_LARGE = "output-too-large"


class OutputTail:
    """The last ``tail`` bytes of a node's stdout and of its stderr, and how much it wrote in all:
    memory stays bounded whatever the node sends, and ``add`` says when the node passed ``cap``."""

    def __init__(self, tail: int = OUTPUT_TAIL_BYTES, cap: int = OUTPUT_CAP_BYTES):
        self.tail, self.cap, self.total = tail, cap, 0
        self._out, self._err = bytearray(), bytearray()

    def add(self, data: bytes, stderr: bool = False) -> bool:
        """Keep ``data``'s tail; True once the node wrote more than ``cap`` bytes in all."""
        self.total += len(data)
        buf = self._err if stderr else self._out
        buf += data[-self.tail:]
        if len(buf) > self.tail:
            del buf[:len(buf) - self.tail]
        return self.over

    @property
    def over(self) -> bool:
        return self.total > self.cap

    def stdout(self) -> str:
        return self._out.decode("utf-8", "replace")

    def stderr(self) -> str:
        return self._err.decode("utf-8", "replace")

    def too_large(self, instance_id: str, transport: str, how: str) -> NodeResult:
        return NodeResult(instance_id, transport, error=OUTPUT_TOO_LARGE,
                          message="the node wrote more than %d bytes (stdout and stderr); %s and its output "
                                  "dropped" % (self.cap, how))
