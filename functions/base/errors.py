"""One exception class per way an event can end other than ``done``. The pipeline turns each into a
``HandlerResult`` with that outcome; nothing else escapes to the handler or the command line.

Messages are one line that names the problem (and, for bad input, the field and the accepted form).
"""


class EventOutcome(Exception):
    """Base: the event ends here with ``outcome`` and this message as the reason."""

    outcome = "error"
    exit_code = 1

    def __init__(self, reason: str, trigger: str = "unknown", event_type: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.trigger = trigger
        self.event_type = event_type
        self.nodes = None  # node results, when the event failed after nodes were already run


class SkipEvent(EventOutcome):
    """Not ours, or nothing to do (an irrelevant event type, a test notification, a failed API call
    recorded by ActionTrail). Acknowledged; never retried."""

    outcome = "skip"
    exit_code = 0


class BadEvent(EventOutcome):
    """The event cannot be read: not JSON, or a field we need is missing or of the wrong type.
    Retrying the same bytes cannot help, so it is not retried. Exit code 2 on the command line."""

    outcome = "error"
    exit_code = 2


class ConfigurationError(EventOutcome):
    """The function is not configured for this event (no cluster id, no region, no credentials)."""

    outcome = "error"
    exit_code = 2


class Refused(ConfigurationError):
    """A cloud API answered a call with a refusal that no retry changes (not throttling, 5xx or no answer):
    ``call`` the action, ``status`` and ``code`` the answer's. Where the call is about one node pool (the
    nodes ACK lists in it), the caller may fail that pool alone; anywhere else it ends the event as a
    ConfigurationError does."""

    def __init__(self, reason: str, call: str = "", status: str = "", code: str = "") -> None:
        super().__init__(reason)
        self.call, self.status, self.code = call, status, code


class RetryLater(EventOutcome):
    """A transient cloud failure (throttling, 5xx, timeout) that outlasted the SDK's own retries. The FC
    handler raises so that the asynchronous invocation is retried; the command line exits 1."""

    outcome = "retry"
    exit_code = 1


class BadInventory(ValueError):
    """An ``--inventory`` snapshot file cannot be used. One line; exit code 2."""

    exit_code = 2
