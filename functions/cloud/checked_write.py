"""Read, change, write back a node pool's whole list (its labels, its autoscaler tags) without losing a change
someone else made meanwhile.

ACK's ModifyClusterNodePool takes a pool's whole ``kubernetes_config.labels`` or ``scaling_group.tags`` list
and has no precondition (no version, no etag: cs20151215's request model has none), so the console, Terraform
or a colleague writing the same list between this tool's read and its write would be silently undone. The
next best thing to a compare-and-swap:

1. read the list and compute the change from it (``change`` returns None when nothing needs to change);
2. read again just before the write: a list that moved meanwhile means someone else wrote; start over from
   the new list (the change is computed again, so their entry stays);
3. write, then read back: the change must be there (``change`` of what is read back is None). When it is not
   (another writer came between step 2 and the write), start over; after ``attempts`` rounds, give up with
   :class:`ConcurrentChange`, one line naming the pool and what to do.

The window left is the time between step 2's read and the write (one round trip); each round narrows it.
"""

from typing import Any, Callable, Generic, Optional, TypeVar

from functions.base.errors import RetryLater

L = TypeVar("L")  # what a read returns
W = TypeVar("W")  # what a write takes
ATTEMPTS = 3


class ConcurrentChange(RetryLater):
    """The list kept changing under every attempt (a transient state: another writer at work)."""


class Checked(Generic[L]):
    """The outcome: the list as read back, and whether this call wrote."""

    def __init__(self, value: L, written: bool) -> None:
        self.value, self.written = value, written


def checked_write(what: str, read: Callable[[], L], change: Callable[[L], Optional[W]],
                  write: Callable[[W], None], attempts: int = ATTEMPTS,
                  key: Callable[[L], Any] = lambda value: value) -> Checked[L]:
    """``what``: how the error names the list ("the labels of node pool np-1"); ``key``: the part of what
    ``read`` returns that is the list (a whole node pool also holds counts that move on their own). See the
    module docstring."""
    for _ in range(attempts):
        first = read()
        wanted = change(first)
        if wanted is None:
            return Checked(first, False)
        if key(read()) != key(first):
            continue  # someone wrote meanwhile: the change is computed again from theirs
        write(wanted)
        after = read()
        if change(after) is None:
            return Checked(after, True)
    raise ConcurrentChange("%s changed under each of %d attempts to write them (someone else is writing them: the "
                           "console, Terraform, another run); the last writer's list stands; try again once they "
                           "are done" % (what, attempts))
