"""Why a node command stopped: one class per exit code, each with a stable ``code`` for the JSON result.

Exit codes: 0 success, 2 bad input, 3 GPU not MIG-capable, 4 GPU busy, 5 reboot required, 6 another MIG
manager is in charge of the node, 7 the request said "destroy nothing" and the layout needs more than new
instances, 1 anything else (docs/node.md). Not of a failure here (``commands/cli.py``): 141 when the reader of
stdout went away, 1 for a result that could not be written (a failed command keeps its code in both), 2 for
a closed stdout. Messages are one line; they never hold credentials.
"""

from typing import Optional

OUTCOME_SUCCESS = "success"
OUTCOME_FAILED = "failed"
OUTCOME_REBOOT = "reboot-required"
OUTCOME_CONFLICT = "conflict"


def one_line(text, limit=None):
    # type: (object, Optional[int]) -> str
    """``text`` (made a string) on one line: each run of whitespace (what ``str.split`` splits on) one
    space, none at either end; then at most ``limit`` characters (None: all), cut where the limit falls,
    nothing added. Control characters that are not whitespace stay (``commands/textout.printable`` writes
    them escaped where a person reads them). The function's copy is ``functions/base/textsafe.py``'s
    (node code cannot import ``functions``)."""
    text = " ".join(str(text).split())
    return text if limit is None else text[:limit]


class NodeFailure(Exception):
    exit_code = 1
    code = "failed"
    outcome = OUTCOME_FAILED

    def __init__(self, message, code=None):
        # type: (str, str) -> None
        super(NodeFailure, self).__init__(one_line(message))
        if code is not None:
            self.code = code

    @property
    def message(self):
        # type: () -> str
        return str(self)


class BadInput(NodeFailure):
    exit_code = 2
    code = "bad-input"


class NotMigCapable(NodeFailure):
    exit_code = 3
    code = "not-mig-capable"


class GpuLost(NodeFailure):
    """NVML answered GPU_IS_LOST (nvml.h: "the target GPU has fallen off the bus or is otherwise
    inaccessible", Xid 79): nothing on that GPU can be read or changed until the node reboots. A code of its
    own, so the GPU is never taken for one that is not MIG-capable, and the reason says what to do."""

    code = "gpu-lost"


class Locked(NodeFailure):
    """Another run holds the node lock (:class:`host.lock.NodeLock`) past the wait allowed: apply and disable
    fail so; ``report-holders``, which never waits, skips its round (the lock holder reports itself)."""

    code = "locked"


class GpuBusy(NodeFailure):
    exit_code = 4
    code = "gpu-busy"


class RebootRequired(NodeFailure):
    exit_code = 5
    code = "reboot-required"
    outcome = OUTCOME_REBOOT


class Conflict(NodeFailure):
    """Another MIG manager (NVIDIA GPU Operator's mig-manager) is in charge: refused before any change,
    and no label of ours is written (``nvidia.com/mig.config.state`` is that manager's label too)."""

    exit_code = 6
    code = "conflict"
    outcome = OUTCOME_CONFLICT


class DestroyRequired(NodeFailure):
    """A "destroy nothing" request (``apply --no-destroy``, ``"destroy": false`` in the request document)
    on a node whose real placements need an existing instance destroyed, a MIG mode change or a GPU reset:
    refused before any change. The node's labels are left as they were (its layout is unchanged, and the
    labels still describe it); the caller repartitions the node the drained way instead."""

    exit_code = 7
    code = "destroy-required"


class Terminated(BaseException):
    """SIGTERM arrived (``systemctl stop``, the boot unit's TimeoutStartSec). A BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` on the way swallows it; apply turns it into a
    final state (clients started again, node labelled) and exits 1 with ``error.code`` "interrupted"."""
