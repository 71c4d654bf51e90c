"""The end of a node's rollout record that the API server refuses for a cause of the node's own (another party
filled its annotations to the 262,144-byte limit, a webhook): one rule for the executor's end of a wave node
(``executor._unrecorded``), its takeover of a stopped run's record (``executor._stale``) and a tick's end of an
auto pool's stranded record (``auto_waves.finish_stranded``).

The end without its reason is tried first: it is usually shorter than the record it replaces, but not always
(a record whose owner was empty now names this run, ``autoscaler`` true becomes false, ``expires`` gains digits),
so a size limit may refuse it too (the executor then tries the end written short, ``compact``, inside its
``end``: a stop that is removed would be claimed, drained and stopped again by every run). Then the record is
removed, with the cordon and the opt-out it says this hook set: a write that only shrinks the annotations,
which a size limit always lets through."""

from typing import Any, Callable, Optional, Tuple

from functions.decision import waves as rp


def removal(p: Optional[rp.Progress]) -> Tuple[Optional[dict], Optional[dict]]:
    """(the spec, the annotations) written with the record ``p``'s removal: the cordon it set lifted, this hook's
    scale-down opt-out removed (someone else's is never in a record that says autoscaler)."""
    spec = {"unschedulable": None} if p is not None and p.cordoned else None
    notes = {rp.SCALE_DOWN_DISABLED: None} if p is not None and p.autoscaler else None
    return spec, notes


def end_or_remove(end: Callable[[], Any], remove: Callable[[], Any], refused: Callable[[Exception], bool]) -> bool:
    """``end()`` (the record ended without its reason); where its error is ``refused`` (the node's own cause),
    ``remove()``. True when the record was removed. Any other error of ``end``, and any of ``remove``, propagate."""
    try:
        end()
        return False
    except Exception as exc:  # noqa: BLE001 - ``refused`` says which; the others are raised again
        if not refused(exc):
            raise
    remove()
    return True
