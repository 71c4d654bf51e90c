"""Answers ESS lifecycle hooks (Auto Scaling API 2022-02-22, functions.cloud.rpc.ESS_VERSION).

While nodes are being partitioned, a background thread calls ``RecordLifecycleActionHeartbeat`` every
``heartbeat_s`` so a long run extends the hook instead of letting it time out silently (ESS allows 20
extensions and 6 hours in Pending:Wait). When the work is done, ``CompleteLifecycleAction`` answers
``CONTINUE``, or the configured failure result (default ``ABANDON``) when every node under the hook failed
by its own verdict on its GPUs (a node that could not be reached is no reason to release an instance).

One token covers every instance of a scaling activity, so the answer is per hook, not per node: with a
mix of good and failed nodes it is ``CONTINUE`` (releasing the good ones would be worse), and the failed
ones keep the startup taint and their ``failed`` state label, so no pod lands on them.
"""

import logging
import threading
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

from functions.delivery.outcome import Outcome
from functions.cloud.rpc import ApiError, RpcClient

log = logging.getLogger(__name__)

# CompleteLifecycleAction's documented error for a hook and token that match no action in process (answered
# already, timed out, or a hook ESS does not hold): AlibabaCloudDocs/ess intl.en-US/API-Reference/Lifecycle
# Hook/CompleteLifecycleAction.md, its one code besides InvalidParamter.
ALREADY_ANSWERED = frozenset({"LifecycleHookIdAndLifecycleActionToken.Invalid"})


class Lifecycle:
    def __init__(self, ess: RpcClient, failure_result: str = "ABANDON", heartbeat_s: float = 240.0,
                 heartbeat_timeout_s: int = 600):
        self.ess, self.failure_result = ess, failure_result
        self.heartbeat_s, self.heartbeat_timeout_s = heartbeat_s, heartbeat_timeout_s

    def heartbeat(self, hook) -> None:
        self.ess.call("RecordLifecycleActionHeartbeat", {
            "RegionId": self.ess.region, "lifecycleHookId": hook.lifecycle_hook_id,
            "lifecycleActionToken": hook.lifecycle_action_token, "heartbeatTimeout": self.heartbeat_timeout_s})

    @contextmanager
    def kept_alive(self, hook) -> Iterator[None]:
        """Heartbeats while the body runs; a failed heartbeat is logged, never fatal."""
        if hook is None:
            yield
            return
        stop = threading.Event()

        def beat():
            while not stop.wait(self.heartbeat_s):
                try:
                    self.heartbeat(hook)
                except ApiError as exc:
                    log.warning("lifecycle heartbeat failed: %s", exc)

        thread = threading.Thread(target=beat, name="lifecycle-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(5)

    def result_for(self, outcomes: Sequence[Outcome]) -> str:
        # Give up on the instances only when every node failed by its own verdict on its GPUs (not
        # MIG-capable, busy, ...). Failing to reach a node (agent not up yet, no address, an API error)
        # says nothing about the instance: CONTINUE, and the startup taint keeps pods off it until a later
        # event (the timer) partitions it.
        if outcomes and all(o.node_verdict for o in outcomes):
            return self.failure_result
        return "CONTINUE"

    def complete(self, hook, outcomes: Sequence[Outcome]) -> Optional[str]:
        """Answers the hook; returns the result sent, or None when ESS says it was already answered."""
        result = self.result_for(outcomes)
        try:
            self.ess.call("CompleteLifecycleAction", {
                "RegionId": self.ess.region, "LifecycleHookId": hook.lifecycle_hook_id,
                "LifecycleActionToken": hook.lifecycle_action_token, "LifecycleActionResult": result})
        except ApiError as exc:
            # A duplicate event finds the hook already answered (or timed out): nothing left to do. Only the
            # code ESS documents for that counts; any other error leaves the hook waiting and is reported.
            if exc.code in ALREADY_ANSWERED:
                log.info("lifecycle hook already answered: %s", exc.code)
                return None
            raise
        return result
