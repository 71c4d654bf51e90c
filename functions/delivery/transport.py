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
