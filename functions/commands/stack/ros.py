"""The ROS stack that holds the function: find, validate, create or update, delete, and wait with progress;
preview a new stack and compute (then delete) a change set for an existing one, for ``deploy --dry-run``.

A thin adapter over the official ``alibabacloud-ros20190910`` SDK (RPC API 2019-09-10). The endpoint is
the SDK's own for the region (it maps most regions to ``ros.aliyuncs.com``) unless
``ACK_MIG_ROS_ENDPOINT`` overrides it. Every wait has a deadline. A refusal is a :class:`StackError` whose
exit code follows the service's error code (:mod:`functions.commands.stack.exit_codes`).
"""

import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from functions.base.deadline import Guard, failure_code, failure_message, urllib3_guarded
from functions.base.endpoints import resolve
from functions.base.settings import Endpoint, connect_timeout_s
from functions.base.textsafe import clip
from functions.commands.stack.credentials import Keys
from functions.commands.stack.exit_codes import CloudError
from node_bootstrap.outside import as_object, json_type, objects

# ROS answers an UpdateStack whose template and parameters are unchanged with this code ("Update the
# completely same stack ... is not supported"): for us that is "nothing to do", not a failure.
UNCHANGED_CODE = "NotSupported"
PAGE_SIZE = 50  # ListStacks' maximum


class StackError(CloudError):
    pass


def client_token() -> str:
    """One per CreateStack / UpdateStack call, reused by the SDK's own retries of that call (they resend the
    same request): a retry after a lost answer is the same operation to ROS, not a second stack or an
    ``UpdateStack`` refused as a conflict with the one already running. Never derived from the request's
    content: ROS would answer a later deploy of the same template and parameters with the first, long gone,
    result. Format (ros20190910 model): <= 64 letters, digits, ``-``, ``_``."""
    return uuid.uuid4().hex


ATTEMPTS = 3
# Answers that say "try again" (ROS common error codes); a network failure or a read timeout reaches us as
# darabonba's UnretryableException wrapping a RetryError (it retries only with Config.retry_options).
# LastTokenProcessing (400): a retry of a CreateStack/UpdateStack whose first request, with the same
# ClientToken, is still being processed ("Try again later"): the next try gets that request's answer.
TRANSIENT_CODES = {"Throttling", "Throttling.User", "Throttling.Api", "ServiceUnavailable", "InternalError",
                   "LastTokenProcessing"}


def _transient(exc: BaseException) -> bool:
    if _code(exc) in TRANSIENT_CODES:
        return True
    return type(getattr(exc, "inner_exception", None)).__name__ == "RetryError"


def _event_key(event: Dict[str, Any]) -> str:
    """An event's EventId as text: a string in ROS's model (ListStackEventsResponseBodyEvents), but the SDK
    passes any JSON value on as it came, and a list or an object cannot be a member of the set of seen ids."""
    return str(event.get("EventId"))


def _named_id(body: Dict[str, Any], key: str, action: str, what: str,
              then: str = "nothing was done: rerun, or see the stack in the ROS console") -> str:
    """``body[key]``, the id every later call names (StackId, ChangeSetId: strings in ROS's model): an answer
    without one (or null, which the SDK's model drops, or another type, which it passes on) is ROS's failure,
    said in one line, not a KeyError that ends the command as an internal error."""
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise StackError("ROS %s %s without its %s; %s" % (action, what, key, then))
    return value


def _code(exc: BaseException) -> str:
    return failure_code(exc)


def _message(exc: BaseException) -> str:
    return failure_message(exc)


def _failed(action: str, exc: BaseException) -> StackError:
    """The error of a call that failed: a connection never made is said as every command says it (exit 2:
    nothing answers at that address, unreachable.said), else ROS's code and message."""
    from functions.commands.stack.exit_codes import EXIT_USAGE
    from functions.commands.stack.unreachable import said

    unreached = said("ros", exc)
    if unreached:
        return StackError(unreached, exit_code=EXIT_USAGE)
    return StackError("ROS %s failed: %s: %s" % (action, _code(exc), _message(exc)), _code(exc))


def _body(response: Any, action: str) -> Dict[str, Any]:
    """The answer as ROS sent it, not as the SDK's model read it (``answers.answer_body``: a field of another
    shape left the model's body None, a stack still in progress read as one with no status)."""
    from functions.base.errors import Refused
    from functions.cloud.answers import answer_body

    try:
        return answer_body(response, action)
    except Refused as exc:
        raise StackError("ROS %s" % exc, exc.code) from None


def _items(body: Dict[str, Any], key: str, action: str) -> List[Any]:
    """``body[key]``, a list of items ([] when absent); StackError when it is there but no list (read item by
    item, a text's characters or an object's keys would be taken for items). Its items of another shape are
    the caller's to leave out (``objects``)."""
    items = body.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise StackError("ROS %s answered %s as %s; expected a list of objects" % (action, key, json_type(items)))
    return items


class Stacks:
    def __init__(self, region: str, keys: Keys, endpoint: Optional[Endpoint] = None, timeout_s: int = 30,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        from alibabacloud_ros20190910.client import Client
        from alibabacloud_tea_openapi import utils_models as openapi_models
        from darabonba.runtime import RuntimeOptions

        endpoint = resolve("ros", region, endpoint)  # the override, else the ROS SDK's (functions/base/endpoints.py)
        # A connection is given ACK_MIG_CONNECT_TIMEOUT_S (10 s), not the call's 30: a black-holed address is
        # said in seconds; an answer still has the call's whole timeout.
        self._connect_s = min(connect_timeout_s(), timeout_s)
        config = openapi_models.Config(
            access_key_id=keys.access_key_id, access_key_secret=keys.access_key_secret,
            security_token=keys.security_token, region_id=region,
            endpoint=endpoint.host, protocol=endpoint.protocol,
            read_timeout=timeout_s * 1000, connect_timeout=self._connect_s * 1000)
        self._client = Client(config)
        # The Tea SDK (tea-openapi 0.4) retries only through Config.retry_options, not RuntimeOptions'
        # autoretry: the retries of transient failures are ours (_attempt), each reusing its request.
        self._runtime = RuntimeOptions(read_timeout=timeout_s * 1000, connect_timeout=self._connect_s * 1000)
        self.region = region
        self._sleep, self._clock = sleep, clock
        self._timeout_s = timeout_s
        self._connected = False  # has any call reached ROS: until then, a connection never made is not retried
        import urllib3  # the Tea SDK calls through requests: let each attempt's Guard reach its sockets

        urllib3_guarded(urllib3)

    def _attempt(self, fn: Callable[[], Any], end: Optional[float] = None) -> Any:
        """``fn()``, again after a transient failure (a lost connection, a read timeout, throttling, a 5xx), at
        most ATTEMPTS times with a growing pause. ``fn`` sends the same request object each time, so a
        CreateStack or UpdateStack retried carries the same ClientToken and ROS treats it as one operation.

        ``end`` (on this client's clock): the deadline of the wait the call is made in. Each try is then cut
        at the time left (its whole-call Guard, and the SDK's connect and read timeouts with it: the Guard
        only reaches a socket once it is connected), a back-off sleeps at most that, and no try starts once
        it has passed, so a slow ROS cannot hold a wait a round of tries (3 x 30 s and the pauses) past
        its --timeout. A call the deadline ended is told from one that failed before it by the clock
        (:meth:`_poll`).

        A connection that could not be made (unreachable.said) before any call of this client reached ROS
        is not tried again: nothing answers at that address (a wrong endpoint, no route, a black hole), and
        three tries would only triple the wait for the same line. Once ROS has answered, it is a lost
        connection in the middle of the command's work (a wait's poll), retried like any transient failure."""
        failure: Optional[BaseException] = None
        for attempt in range(1, ATTEMPTS + 1):
            bound = self._timeout_s if end is None else min(self._timeout_s, end - self._clock())
            if bound <= 0:
                raise failure or TimeoutError("the wait's deadline passed before the call") from None
            self._runtime.read_timeout = max(1, int(bound * 1000))
            self._runtime.connect_timeout = max(1, int(min(bound, self._connect_s) * 1000))
            guard = Guard(bound)  # the whole attempt: the SDK's read timeout restarts at every byte
            try:
                with guard:
                    answer = fn()
                self._connected = True
                return answer
            except Exception as exc:  # the SDK's exception types vary by version; code and message are common
                from functions.commands.stack.unreachable import said

                if guard.fired:  # cut at the attempt's bound: transient, like a read timeout
                    exc = TimeoutError("no complete answer within %gs" % round(bound, 1))
                never = not guard.fired and said("ros", exc) is not None
                self._connected = self._connected or not never
                if attempt == ATTEMPTS or not (guard.fired or _transient(exc)) or (never and not self._connected):
                    raise exc from None
                failure = exc
                self._pause(float(attempt), end)
        raise AssertionError("unreachable")

    def _pause(self, pause_s: float, end: Optional[float]) -> None:
        """A sleep cut to the time left before ``end`` (None: no deadline): a wait's pause between two polls,
        or a back-off between two tries of a call in it, ends at the deadline, not a whole --poll past it."""
        self._sleep(pause_s if end is None else min(pause_s, max(0.0, end - self._clock())))

    def _poll(self, read: Callable[[], Any], end: float, overdue: Callable[[], StackError]) -> Any:
        """One look of a wait, ``read()`` (its calls given ``end``): a call that failed once the deadline had
        passed (cut at it, or not started) ends the wait as the deadline does, with ``overdue()``; one that
        failed before it is ROS's answer and raised as such."""
        try:
            return read()
        except StackError:
            if self._clock() < end:
                raise
            raise overdue() from None

    def _call(self, action: str, fn: Callable[[], Any], end: Optional[float] = None) -> Dict[str, Any]:
        try:
            response = self._attempt(fn, end)
        except Exception as exc:  # the SDK's exception types vary by version; code and message are common
            raise _failed(action, exc) from None
        return _body(response, action)

    # ---- reads ----

    def find(self, name: str) -> Optional[Dict[str, Any]]:
        """The live stack of that name (deleted stacks are not listed), or None."""
        from alibabacloud_ros20190910 import models

        unreadable = 0
        for page in range(1, 21):
            body = self._call("ListStacks", lambda: self._client.list_stacks_with_options(models.ListStacksRequest(
                region_id=self.region, stack_name=[name], page_size=PAGE_SIZE, page_number=page), self._runtime))
            stacks = _items(body, "Stacks", "ListStacks")
            for stack in objects(stacks):
                if stack.get("StackName") == name:
                    _named_id(stack, "StackId", "ListStacks", "listed stack %s" % name)
                    return stack
            unreadable += len(stacks) - len(objects(stacks))
            if len(stacks) < PAGE_SIZE:
                break
        if unreadable:  # one of them may be the stack: "none" would let deploy create a second, undeploy say done
            raise StackError("ROS ListStacks listed %d stack(s) of another shape than ROS's objects and none named %s "
                             "it could read; nothing was done: rerun, or check what answers at the ROS endpoint "
                             "(ACK_MIG_ROS_ENDPOINT)" % (unreadable, name))
        return None

    def get(self, stack_id: str, end: Optional[float] = None) -> Optional[Dict[str, Any]]:
        from alibabacloud_ros20190910 import models

        try:  # through _attempt like every call: the poll of each wait, bounded whatever the peer drips
            response = self._attempt(lambda: self._client.get_stack_with_options(
                models.GetStackRequest(region_id=self.region, stack_id=stack_id), self._runtime), end)
        except Exception as exc:
            if _code(exc) == "StackNotFound":
                return None
            raise _failed("GetStack", exc) from None
        body = _body(response, "GetStack")
        # ROS answers a stack with its StackId and Status (GetStackResponseBody), a gone one StackNotFound (above):
        # an answer without them is unreadable, not "no stack" (read as gone, a command said to deploy again)
        _named_id(body, "StackId", "GetStack", "answered for stack %s" % stack_id,
                  "nothing of it is read: rerun, or check what answers at the ROS endpoint (ACK_MIG_ROS_ENDPOINT)")
        _named_id(body, "Status", "GetStack", "answered for stack %s" % stack_id,
                  "nothing of it is read: rerun, or check what answers at the ROS endpoint (ACK_MIG_ROS_ENDPOINT)")
        return body

    def events(self, stack_id: str, end: Optional[float] = None) -> List[Dict[str, Any]]:
        from alibabacloud_ros20190910 import models

        body = self._call("ListStackEvents", lambda: self._client.list_stack_events_with_options(
            models.ListStackEventsRequest(region_id=self.region, stack_id=stack_id, page_size=50), self._runtime),
            end)
        return objects(_items(body, "Events", "ListStackEvents"))

    def resources(self, stack_id: str) -> List[Dict[str, Any]]:
        from alibabacloud_ros20190910 import models

        body = self._call("ListStackResources", lambda: self._client.list_stack_resources_with_options(
            models.ListStackResourcesRequest(region_id=self.region, stack_id=stack_id), self._runtime))
        return objects(_items(body, "Resources", "ListStackResources"))

    def event_ids(self, stack_id: str) -> set:
        """The ids of the events the stack has now: :meth:`wait` leaves them out, so an update or a delete
        shows its own events, not the stack's history (ListStackEvents lists the newest first)."""
        try:
            return {_event_key(e) for e in self.events(stack_id)}
        except StackError:
            return set()

    def validate(self, template: str) -> List[str]:
        """ROS's own check of the template (read-only); returns the parameter names it declares."""
        from alibabacloud_ros20190910 import models

        body = self._call("ValidateTemplate", lambda: self._client.validate_template_with_options(
            models.ValidateTemplateRequest(region_id=self.region, template_body=template), self._runtime))
        return [p.get("ParameterKey") for p in objects(_items(body, "Parameters", "ValidateTemplate"))]

    # ---- changes ----

    @staticmethod
    def _parameters(values: Dict[str, str]) -> list:
        from alibabacloud_ros20190910 import models

        return [models.CreateStackRequestParameters(parameter_key=k, parameter_value=v)
                for k, v in sorted(values.items())]

    def create(self, name: str, template: str, values: Dict[str, str], timeout_min: int) -> str:
        from alibabacloud_ros20190910 import models

        request = models.CreateStackRequest(region_id=self.region, stack_name=name, template_body=template,
                                            parameters=self._parameters(values), timeout_in_minutes=timeout_min,
                                            client_token=client_token())
        return _named_id(self._call("CreateStack", lambda: self._client.create_stack_with_options(
            request, self._runtime)), "StackId", "CreateStack", "answered for stack %s" % name,
            "the stack may exist now: `ack-mig-hook wait --stack-name %s` finds it, or see the ROS console" % name)

    def update(self, stack_id: str, template: str, values: Dict[str, str], timeout_min: int) -> bool:
        """Start an update; False when ROS says nothing changed. Parameters not in ``values`` keep the
        stack's current values (UsePreviousParameters; without it ROS resets them to the template's
        defaults, so an upgrade would silently undo e.g. DryRun=true or a tuned timeout)."""
        from alibabacloud_ros20190910 import models

        params = [models.UpdateStackRequestParameters(parameter_key=k, parameter_value=v)
                  for k, v in sorted(values.items())]
        request = models.UpdateStackRequest(region_id=self.region, stack_id=stack_id, template_body=template,
                                            parameters=params, timeout_in_minutes=timeout_min,
                                            use_previous_parameters=True, client_token=client_token())
        try:
            self._attempt(lambda: self._client.update_stack_with_options(request, self._runtime))
        except Exception as exc:
            if _code(exc) == UNCHANGED_CODE and "same" in _message(exc).lower():
                return False
            raise _failed("UpdateStack", exc) from None
        return True

    # ---- plans (deploy --dry-run): read-only for the stack ----

    def preview(self, name: str, template: str, values: Dict[str, str], timeout_min: int) -> Dict[str, Any]:
        """PreviewStack of a stack not created yet: ``{"Parameters": [...], "Resources": [{"LogicalResourceId",
        "ResourceType", "Action": "Add", ...}]}`` (ros20190910 ``PreviewStackResponseBodyStack``)."""
        from alibabacloud_ros20190910 import models

        params = [models.PreviewStackRequestParameters(parameter_key=k, parameter_value=v)
                  for k, v in sorted(values.items())]
        request = models.PreviewStackRequest(region_id=self.region, stack_name=name, template_body=template,
                                             parameters=params, timeout_in_minutes=timeout_min,
                                             client_token=client_token())
        return as_object(self._call("PreviewStack", lambda: self._client.preview_stack_with_options(
            request, self._runtime)).get("Stack"))

    def create_change_set(self, stack_id: str, name: str, template: str, values: Dict[str, str],
                          timeout_min: int) -> str:
        """CreateChangeSet of type UPDATE with UsePreviousParameters, as :meth:`update` would send it;
        returns the change set's id. Nothing changes until it is executed, and it never is here."""
        from alibabacloud_ros20190910 import models

        params = [models.CreateChangeSetRequestParameters(parameter_key=k, parameter_value=v)
                  for k, v in sorted(values.items())]
        request = models.CreateChangeSetRequest(
            region_id=self.region, stack_id=stack_id, change_set_name=name, change_set_type="UPDATE",
            template_body=template, parameters=params, timeout_in_minutes=timeout_min,
            use_previous_parameters=True, client_token=client_token())
        return _named_id(self._call("CreateChangeSet", lambda: self._client.create_change_set_with_options(
            request, self._runtime)), "ChangeSetId", "CreateChangeSet", "answered for stack %s" % stack_id,
            "the stack was not changed; rerun the dry run")

    def change_set(self, change_set_id: str, end: Optional[float] = None) -> Dict[str, Any]:
        from alibabacloud_ros20190910 import models

        return self._call("GetChangeSet", lambda: self._client.get_change_set_with_options(
            models.GetChangeSetRequest(region_id=self.region, change_set_id=change_set_id), self._runtime), end)

    def change_sets(self, stack_id: str, name: str) -> List[Dict[str, Any]]:
        """The stack's change sets whose name matches ``name`` (ListChangeSets' ``ChangeSetName``: ``*`` a
        wildcard), every page: ``{"ChangeSetId", "ChangeSetName", "Status", ...}`` (ros20190910
        ``ListChangeSetsResponseBodyChangeSets``)."""
        from alibabacloud_ros20190910 import models

        found: List[Dict[str, Any]] = []
        for page in range(1, 21):
            body = self._call("ListChangeSets", lambda: self._client.list_change_sets_with_options(
                models.ListChangeSetsRequest(region_id=self.region, stack_id=stack_id, change_set_name=[name],
                                             page_size=PAGE_SIZE, page_number=page), self._runtime))
            items = _items(body, "ChangeSets", "ListChangeSets")
            found += objects(items)
            if len(items) < PAGE_SIZE:
                break
        return found

    def delete_change_set(self, change_set_id: str) -> None:
        from alibabacloud_ros20190910 import models

        self._call("DeleteChangeSet", lambda: self._client.delete_change_set_with_options(
            models.DeleteChangeSetRequest(region_id=self.region, change_set_id=change_set_id), self._runtime))

    def wait_change_set(self, change_set_id: str, deadline_s: float, poll_s: float) -> Dict[str, Any]:
        """GetChangeSet until it leaves ``CREATE_PENDING`` / ``CREATE_IN_PROGRESS`` (ListChangeSets reference:
        CREATE_PENDING, CREATE_IN_PROGRESS, CREATE_COMPLETE, CREATE_FAILED, ...). Raises at the deadline."""
        end = self._clock() + deadline_s
        status = "CREATE_PENDING"  # until ROS answers: what CreateChangeSet left

        def overdue() -> StackError:
            return StackError("ROS change set %s still %s after %d s; rerun later" % (change_set_id, status,
                                                                                      deadline_s))

        while True:
            found = self._poll(lambda: self.change_set(change_set_id, end), end, overdue)
            status = found.get("Status")
            if status not in ("CREATE_PENDING", "CREATE_IN_PROGRESS"):
                return found
            if self._clock() >= end:
                raise overdue()
            self._pause(poll_s, end)

    def delete(self, stack_id: str) -> bool:
        """Start deleting the stack; False when ROS answers StackNotFound: it is gone already (a delete started
        before, by an undeploy that was killed, ended meanwhile), which is what was asked."""
        from alibabacloud_ros20190910 import models

        try:
            self._attempt(lambda: self._client.delete_stack_with_options(
                models.DeleteStackRequest(region_id=self.region, stack_id=stack_id), self._runtime))
        except Exception as exc:  # the SDK's exception types vary by version; code and message are common
            if _code(exc) == "StackNotFound":
                return False
            raise _failed("DeleteStack", exc) from None
        return True

    def wait(self, stack_id: str, deadline_s: float, poll_s: float,
             progress: Callable[[str], None], before: Optional[set] = None) -> Optional[Dict[str, Any]]:
        """Poll until the stack leaves ``*_IN_PROGRESS`` (or is gone, for a delete); report each new event,
        leaving out ``before`` (:meth:`event_ids` taken before the operation started). Returns the final
        stack, None once deleted. Raises StackError at the deadline."""
        end = self._clock() + deadline_s
        seen = set(before or ())
        status = "in progress"  # until ROS answers: the operation the caller started or found

        def overdue() -> StackError:
            return StackError("stack %s still %s after %d s; watch it in the ROS console or rerun to keep "
                              "waiting" % (stack_id, status, deadline_s))

        while True:  # every call in the loop gets at most the time left (_attempt's end)
            stack = self._poll(lambda: self.get(stack_id, end), end, overdue)
            try:
                fresh = [e for e in reversed(self.events(stack_id, end)) if _event_key(e) not in seen]
            except StackError:
                fresh = []  # progress is a courtesy; the stack's status decides
            for event in fresh:
                seen.add(_event_key(event))
                reason = clip(event.get("StatusReason") or "", 160)
                progress("  %s %s%s" % (event.get("Status", "?"), event.get("LogicalResourceId", "?"),
                                         (": " + reason) if reason else ""))
            if stack is None or not str(stack.get("Status", "")).endswith("_IN_PROGRESS"):
                return stack
            status = stack.get("Status")
            if self._clock() >= end:
                raise overdue()
            self._pause(poll_s, end)


DONE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "DELETE_COMPLETE", "IMPORT_CREATE_COMPLETE",
        "IMPORT_UPDATE_COMPLETE", "CHECK_COMPLETE")  # the ROS stack statuses of an operation that succeeded


def advice(status: str, name: str, region: str = "") -> str:
    """What to do about a stack in ``status`` (ROS's stack statuses, GetStack reference): the one line doctor,
    deploy and this command print."""
    where = " --stack-name %s%s" % (name, " --region %s" % region if region else "")
    if status.endswith("_IN_PROGRESS"):
        return "an operation is in progress; `ack-mig-hook wait%s` follows it to its end, then rerun" % where
    if status in DONE:
        return "nothing to do"
    if status in ("CREATE_FAILED", "CREATE_ROLLBACK_COMPLETE", "CREATE_ROLLBACK_FAILED"):
        return ("its creation failed: ROS keeps the name taken; `ack-mig-hook undeploy%s --yes`, fix the cause "
                "(the events above, or the ROS console), then deploy again" % where)
    if status in ("UPDATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED"):
        return ("the last update failed%s; the function runs as before it; fix the cause (the events above, or "
                "the ROS console) and deploy again" % (" and was rolled back" if status.startswith("ROLLBACK")
                                                        else ""))
    if status == "DELETE_FAILED":
        return "a delete failed: a resource stayed (the ROS console names it); `ack-mig-hook undeploy%s` again" % where
    return "see the stack's events in the ROS console"
