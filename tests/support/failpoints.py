"""Which writes a fail-once matrix tries: every one under ``ACK_MIG_TEST_ALL_FAILPOINTS=1``, a third in ``make
test``.

A fail-once matrix runs a whole invocation and the ones after it for each write it fails (503, the connection
closed unanswered, 409): the three kinds over every write cost several seconds a point through the simulated
node, minutes for the suite on 2 cores. Each kind tries every third write, offset by its place among the kinds,
so the three together still fail every write once (each with one kind), and the kill matrix beside them still
kills after every write. The full cross product stays one variable away."""

import os
from typing import List

ALL = os.environ.get("ACK_MIG_TEST_ALL_FAILPOINTS") == "1"
KINDS = (503, None, 409)  # the order the matrices parametrize them in: 5xx, no answer, conflict


def failpoints(count: int, kind: object) -> List[int]:
    """The writes 1..count the matrix fails once with ``kind`` (one of KINDS)."""
    if ALL:
        return list(range(1, count + 1))
    offset = KINDS.index(kind)
    return [k for k in range(1, count + 1) if k % len(KINDS) == offset]
