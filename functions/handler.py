"""The Function Compute entry point: ``handler(event, context)`` (FC passes the event as bytes).

Kept light on purpose: importing this module loads pydantic and the function's own modules, never the
cloud SDKs or paramiko (they load when an event reaches the cluster or a node), so an irrelevant event
is answered at the cost of a pydantic import. FC's handler setting is ``index.handler``: the deployment
package puts an ``index.py`` at its root that re-exports this function (``functions/commands/stack/code_package.py``).
"""

import json
from typing import Any

from functions.base.logs import redact_text
from functions.pipeline.event import run_event
from functions.base.settings import SettingsError, load_settings


class RetryInvocation(RuntimeError):
    """Raised for outcome ``retry`` so FC counts the invocation as failed and retries it (async)."""


def handler(event: Any, context: Any) -> str:
    """Run one event; return the result as JSON text. Raises only to ask FC for a retry."""
    try:
        settings = load_settings(context=context)
    except SettingsError:
        settings = None  # run_event reports the bad setting as an error result, and logs nothing secret
    # record: the run record on the cluster (functions/kube/last_run.py), which `status` and `doctor` show.
    result = run_event(event, settings, context=context, record=True)
    # The result is returned to the caller and kept by FC's async invocation records: it gets the same
    # cleaning as the log lines (the credentials, and any secret read at run time such as the SSH key).
    secrets = settings.secrets() if settings is not None else ()
    if result.outcome == "retry":
        raise RetryInvocation(redact_text(result.reason, secrets))
    return redact_text(json.dumps(result.to_json()), secrets)
