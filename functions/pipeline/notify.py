"""Notifications: one JSON line to a webhook when a rollout finishes or stops, or a node fails.

:func:`notifications` computes them from an event's final result alone (pure); :func:`deliver` POSTs each
line to the webhook with a deadline and bounded retries and never raises: a webhook that is down is
logged, and the event ends exactly as it would have without one. :func:`after_event` is the pipeline's one
call: it does nothing unless a URL is configured (``ACK_MIG_NOTIFY_URL``, or the KMS secret named by
``ACK_MIG_NOTIFY_URL_SECRET``, read only when there is something to send) and the event was not a dry run.

The URL may carry a token (Slack, DingTalk and Feishu webhooks do): it is registered with the log redactor
before any request, and a log line names the webhook only by its host.

Kinds (``kind``), schema :data:`SCHEMA`:

* ``node-failed``: nodes this event ran that ended ``failed`` (a taint that could not be lifted included);
  one line per event. A decision ``error`` (a label that does not parse) is not a node failure: every timer
  would repeat it; ``status`` and ``doctor`` show it. A failure is told once across FC's retries of the event:
  marked on the cluster after the webhook's 2xx (``functions.decision.alert_marks``), left out of a retry's
  line. At least once: a mark that cannot be read or written, or a crash between the 2xx and the mark, tells
  it again; nothing ever keeps a failure untold.
* ``rollout-stopped``: per pool, a node of this event's rollout waves ended ``failed``, ``drain-timeout`` or
  ``drain-refused``: the pool's rollout waits until someone removes that node's record. Such a ``failed`` node is
  also in ``node-failed``. A node the API server failed after its claim (code ``api-failed``: its record in
  progress is resumed by the next run) stops nothing: it is in ``node-failed`` only. An auto pool's node whose
  per-GPU change failed holds only that node: its line says "node N of auto pool P held", not "rollout ... stopped".
  A node whose claim the API server refused (code ``claim-refused``) recorded nothing and stopped nothing: the
  next node took its place, so it is in ``node-failed`` only, told once per node and cause although every run
  tries it again (``functions.decision.alert_marks``: told again once the node got past its claim). A node whose
  record was removed after the API server refused it (``record-refused``) stops nothing either. Level-triggered: a
  later run that reads a node's stop record in the pools it lists (``functions.rollout.run.read_stops``: one that
  halts the pool, or one no run is held up by any more) tells that stop as well unless the alert marks show it
  told (the run that wrote it may have been killed before its line), then marks it: at least once, and once told
  never again for the same record (``functions.decision.alert_marks``, :func:`stop_id`/:func:`stop_key`), but
  where a run was killed between the 2xx and the mark, or two runs at once both read it unmarked: the price of at
  least once (a claim before the line would not remove the first; docs/operations.md, Notifications).
* ``rollout-finished``: per pool, in an event that reconciles whole pools (the timer, a node pool operation, a
  manual run without instance ids), this event changed at least one of the pool's nodes and none is left to
  do (nothing deferred, failed or waiting): the pool holds its layout.
"""

import json
import math
import time
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from functions.decision.waves import PER_GPU_TARGET
from functions.delivery.outcome import TAINT_NOT_REMOVED
from functions.rollout.executor import API_FAILED, CLAIM_FAILED, CLAIM_REFUSED, RECORD_REFUSED
from functions.base.textsafe import one_line

SCHEMA = "ack-mig-hook/notification/v1"
MAX_NODES = 20  # nodes listed in one line (``count`` says how many there were)
MAX_REASON = 300
ATTEMPTS = 3  # per line: the first try and two retries
TIMEOUT_S = 5.0  # one whole attempt: connect, send, read the answer (never past DEADLINE_S)
DEADLINE_S = 20.0  # for all the lines of one event: an invocation never waits long on a webhook
DONE = ("partitioned", "unchanged", "skipped", "gone")  # gone: deleted mid-rollout, nothing left to do
# The outcomes of a wave node that got past its claim (its record was written): a refusal told before is news again.
CLAIMED = ("partitioned", "unchanged", "failed", "drain-timeout", "drain-refused", "destroy-required")
STOPPED = ("failed", "drain-timeout", "drain-refused")


def _cut(text: Any, limit: int = MAX_REASON) -> str:
    text = one_line(text if text is not None else "")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _node(n: Dict[str, Any]) -> Dict[str, Any]:
    out = {"instance_id": n.get("instance_id"), "node_name": n.get("node_name") or None,
           "outcome": n.get("outcome"), "reason": _cut(n.get("reason"))}
    if n.get("code"):
        out["code"] = n["code"]
    return out


def _target(decisions: Sequence[Any]) -> Optional[str]:
    for d in decisions:
        if getattr(d, "disable", False):
            return "mig=off"
        if d.partition is not None:
            return "%s=%s" % (d.partition.kind, d.partition.value)
    return None


def failed_nodes(result: Any) -> List[Dict[str, Any]]:
    """The nodes ``node-failed`` is about: they ran and ended ``failed``; a decision ``error`` is not told."""
    decisions = {d.instance_id: d for d in result.decisions or []}
    return [n for n in result.nodes or [] if n.get("outcome") == "failed"
            and getattr(decisions.get(n.get("instance_id")), "action", None) != "error"]


def wave_stopped(result: Any, wave_ids: Iterable[str]) -> Dict[str, List[Dict[str, Any]]]:
    """Pool id -> the nodes of this event's rollout waves that stopped the pool (``rollout-stopped``), in the
    decisions' order. A taint not lifted is settled after the wave (functions.delivery.outcome.settle), a
    refused claim recorded nothing (the next node took its place), and a node the API server failed after its
    claim (``api-failed``) keeps a record in progress that the next invocation resumes: nothing stopped."""
    waves = set(wave_ids)
    nodes = {n.get("instance_id"): n for n in result.nodes or []}
    out: Dict[str, List[Dict[str, Any]]] = {}
    for d in result.decisions or []:
        n = nodes.get(d.instance_id) if d.instance_id in waves else None
        if n is not None and n.get("outcome") in STOPPED \
                and n.get("code") not in (TAINT_NOT_REMOVED, CLAIM_REFUSED, RECORD_REFUSED, API_FAILED):
            out.setdefault(d.nodepool_id or "", []).append(n)
    return out


def _stop_node(stop: Mapping[str, Any]) -> Dict[str, Any]:
    """A stop record (``functions.rollout.run.stop_records``) as a line lists a node."""
    return {"instance_id": stop.get("instance_id") or None, "node_name": stop.get("node_name") or None,
            "outcome": stop.get("step"), "reason": _cut(stop.get("reason"))}


RESUME_HINT = "; fix the cause, then remove the node's annotation ack-mig-hook/rollout to resume"


def _stop_text(pool_id: str, target: Optional[str], node: Any, step: Any, reason: str, hint: str) -> str:
    """A ``rollout-stopped`` line's text. An auto pool's per-GPU change (target ``per-gpu=...``) holds only its
    node, the pool's other nodes go on (docs/auto-pools.md): saying its pool's rollout stopped would send a
    person after a pool that is not stuck."""
    if target and target.startswith(PER_GPU_TARGET):
        return _cut("node %s of auto pool %s held: its per-GPU change to %s ended %s (%s); the pool's other nodes "
                    "go on%s" % (node, pool_id, target, step, _cut(reason, 300), hint), 600)
    return _cut("rollout of pool %s to %s stopped: node %s ended %s (%s)%s"
                % (pool_id, target or "-", node, step, _cut(reason, 300), hint), 600)


def notifications(result: Any, wave_ids: Iterable[str] = (), whole_pools: bool = False,
                  now: Optional[float] = None, told: Iterable[str] = (),
                  stops: Sequence[Mapping[str, Any]] = ()) -> List[Dict[str, Any]]:
    """The lines an event's final result calls for (module docstring), in a stable order. ``wave_ids``: the
    instances of this event's rollout waves (every wave of the invocation); ``whole_pools``: whether the event
    reconciled whole pools; ``told``: instance ids whose failure an earlier attempt of this event told (left out
    of ``node-failed``); ``stops``: stop records of earlier runs that halt a pool of this event and no mark shows
    told (told as ``rollout-stopped`` where this event's waves did not stop that pool themselves)."""
    if getattr(result, "dry_run", False) or not (result.nodes or stops):
        return []
    waves = set(wave_ids)
    by_wave = wave_stopped(result, waves)
    stamp = datetime.fromtimestamp(time.time() if now is None else now, timezone.utc)
    head = {"schema": SCHEMA, "time": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"), "cluster_id": result.cluster_id,
            "trigger": result.trigger, "event_id": result.event_id}
    nodes = {n.get("instance_id"): n for n in result.nodes or []}
    pools: Dict[str, List[Any]] = {}
    for d in result.decisions or []:
        pools.setdefault(d.nodepool_id or "", []).append(d)
    for st in stops:  # a pool this event read a stop record in, whether or not it decided a node of it
        pools.setdefault(str(st.get("nodepool_id") or ""), [])
    out: List[Dict[str, Any]] = []

    for pool_id in sorted(pools):
        members = pools[pool_id]
        target = _target(members)
        stopped = by_wave.get(pool_id, [])
        earlier = [st for st in stops if st.get("nodepool_id") == pool_id]
        if not stopped and earlier and pool_id:  # an earlier run's stop, not told yet: the same line, from its record
            first = earlier[0]
            target = first.get("target") or target  # the rollout the record stopped (the pool may want another now)
            out.append(dict(head, kind="rollout-stopped", nodepool_id=pool_id, target=target, count=len(earlier),
                            nodes=[_stop_node(st) for st in earlier[:MAX_NODES]],
                            text=_stop_text(pool_id, target, first.get("node_name"), first.get("step"),
                                            str(first.get("reason") or "no reason recorded"), RESUME_HINT)))
            # no ``continue``: a stop of another target (the pool's label changed since) halts nothing, and the
            # pool may hold its layout all the same
        if stopped and pool_id:
            first = stopped[0]
            reason = str(first.get("reason") or "")
            # The executor's own words for a failure it could not record (the API server went away): the next
            # run resumes the node by itself; any other stop waits for a person.
            hint = "" if "next invocation resumes" in reason else RESUME_HINT
            # with the earlier runs' stops this event read there, untold: the run that reads a stop tells it
            listed = [_node(n) for n in stopped] + [_stop_node(st) for st in earlier]
            out.append(dict(head, kind="rollout-stopped", nodepool_id=pool_id, target=target, count=len(listed),
                            nodes=listed[:MAX_NODES],
                            text=_stop_text(pool_id, target, first.get("node_name") or first.get("instance_id"),
                                            first.get("outcome"), reason, hint)))
            continue
        finals = [nodes[d.instance_id].get("outcome") if d.instance_id in nodes
                  else ("skipped" if d.action == "skip" else d.action) for d in members]
        moved = [nodes[d.instance_id] for d in members if d.instance_id in nodes
                 and nodes[d.instance_id].get("outcome") in ("partitioned", "unchanged")
                 and (d.instance_id in waves or nodes[d.instance_id].get("outcome") == "partitioned")]
        if whole_pools and pool_id and moved and all(f in DONE for f in finals):
            out.append(dict(head, kind="rollout-finished", nodepool_id=pool_id, target=target, count=len(moved),
                            nodes=[_node(n) for n in moved[:MAX_NODES]],
                            text=_cut("pool %s holds %s on every node: this run changed %d node%s"
                                      % (pool_id, target or "its layout", len(moved), "" if len(moved) == 1 else "s"),
                                      600)))

    done = set(told)
    failed = [n for n in failed_nodes(result) if n.get("instance_id") not in done]
    if failed:
        codes: Dict[str, int] = {}
        for n in failed:
            key = n.get("code") or str(n.get("reason") or "").split(":", 1)[0][:40] or "failed"
            codes[key] = codes.get(key, 0) + 1
        out.append(dict(head, kind="node-failed", count=len(failed), nodes=[_node(n) for n in failed[:MAX_NODES]],
                        text=_cut("%d node%s failed (%s): %s" % (
                            len(failed), "" if len(failed) == 1 else "s",
                            ", ".join("%d %s" % (c, k) for k, c in sorted(codes.items())),
                            ", ".join(str(n.get("node_name") or n.get("instance_id")) for n in failed[:5])
                            + (", ..." if len(failed) > 5 else "")), 600)))
    return out


# ---- delivery ----

def _opener(guard: Any = None):
    """urllib without redirects: a POST is never replayed to, nor its token shown to, another address. With
    ``guard`` (a :class:`functions.base.deadline.Guard`), every socket it opens is cut at the guard's deadline,
    from connect (TLS handshake included) to the last byte of the answer: a socket timeout alone restarts at
    every byte, so a peer that drips one byte a second would hold the call (issue 30). The host's name lookup,
    which has no socket to cut, ends within the attempt's timeout (node_bootstrap/hostlookup.py)."""
    import http.client
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102 - urllib's hook
            return None

    if guard is None:
        return urllib.request.build_opener(NoRedirect())

    from node_bootstrap.hostlookup import create_connection

    def guarded(base):
        class Connection(base):
            def connect(self) -> None:
                # the name lookup within the attempt too: the guard has no socket to cut while it waits
                self._create_connection = create_connection
                super().connect()
                # the socket it ends up with: TLS wraps the first one into a new object (base/deadline.py)
                guard.watch(self.sock)
        return Connection

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req):  # noqa: D102 - urllib's hook
            return self.do_open(guarded(http.client.HTTPConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):  # noqa: D102 - urllib's hook
            return self.do_open(guarded(http.client.HTTPSConnection), req, context=self._context)

    return urllib.request.build_opener(NoRedirect(), Http(), Https())


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).hostname or "?"


def _retry_after(headers: Any) -> Optional[float]:
    """``Retry-After`` by the one rule (``outside.delay_seconds``, the Kubernetes client's too): delay-seconds
    of any length, None for anything else (the backoff); the caller caps it by the deadline of all lines."""
    from node_bootstrap.outside import delay_seconds

    return delay_seconds((headers or {}).get("Retry-After"), math.inf)


def _retryable(status: Optional[int]) -> bool:
    return status is None or status >= 500 or status in (408, 429)


def _post(url: str, body: bytes, attempts: int, timeout_s: float, end: float,
          clock: Callable[[], float], sleep: Callable[[float], None]):
    """(HTTP status or None for no answer, the error's type name) of the last attempt at one line. Each
    attempt, from connect to the last byte read, ends within ``timeout_s`` and before ``end`` (a
    :class:`~functions.base.deadline.Guard` cuts its socket), whatever the peer does."""
    import http.client
    import ssl
    import urllib.error
    import urllib.request

    from functions.base.deadline import Guard
    from node_bootstrap.hostlookup import LookupTimeout

    status: Optional[int] = None
    error = ""
    for attempt in range(attempts):
        left = end - clock()
        if left <= 0:
            return status, error or "deadline"
        wait: Optional[float] = None
        budget = min(timeout_s, left)  # never past the deadline of all the lines (a per-attempt timeout may be longer)
        guard = Guard(budget)
        answered: Optional[int] = None
        try:
            request = urllib.request.Request(url, data=body, method="POST", headers={
                "Content-Type": "application/json", "User-Agent": "ack-mig-hook"})
            with guard, _opener(guard).open(request, timeout=budget) as answer:
                status = answered = answer.status
                error = ""
                answer.read(65536)
        except urllib.error.HTTPError as exc:  # an answer that is not 2xx (a redirect included)
            status, error, wait = exc.code, "", _retry_after(exc.headers)
            exc.close()
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            if answered is not None:  # the status came: the line is in the channel; a retry would post it twice
                return answered, ""
            reason = getattr(exc, "reason", None) or exc
            status, error = None, type(reason).__name__
            if isinstance(reason, LookupTimeout):  # the webhook's name, not the webhook, did not answer
                error = "name lookup timeout"
            elif guard.fired:  # cut at the attempt's deadline: a timeout, whatever error the cut socket raised
                error = "timeout"
            elif isinstance(reason, ssl.SSLError):  # a certificate that does not verify will not next time
                return status, error
        if not _retryable(status):
            return status, error  # accepted, or refused: the same line would be refused again
        if attempt + 1 < attempts:
            sleep(max(0.0, min(wait if wait is not None else 0.5 * 2 ** attempt, end - clock())))
    return status, error


def deliver(lines: Sequence[Dict[str, Any]], url: str, log: Any, attempts: int = ATTEMPTS,
            timeout_s: float = TIMEOUT_S, deadline_s: float = DEADLINE_S,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> int:
    """POST each line (``application/json``, one JSON object and a newline); returns how many a 2xx
    accepted. No answer, 408, 429 and 5xx are retried (``Retry-After`` honoured) up to ``attempts`` within
    ``deadline_s`` for all lines; another answer (a 4xx, a redirect) is not. Once a line gets no 2xx after
    its retries for lack of an answer, the rest are not tried (the webhook is down). Never raises."""
    return len(_deliver(lines, url, log, attempts, timeout_s, deadline_s, clock, sleep))


def _deliver(lines: Sequence[Dict[str, Any]], url: str, log: Any, attempts: int = ATTEMPTS,
             timeout_s: float = TIMEOUT_S, deadline_s: float = DEADLINE_S,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> List[int]:
    """:func:`deliver`, saying which lines a 2xx accepted (their indexes): only those may be marked told."""
    from urllib.parse import urlsplit

    from functions.base.logs import register_secret

    register_secret(url)  # masked in every log line, result and command-line output from here on
    parts = urlsplit(url)
    token = parts.path + ("?" + parts.query if parts.query else "")
    if len(token) >= 16:  # a path or query long enough to be a token is masked on its own as well
        register_secret(token)
    host, end = _host(url), clock() + deadline_s
    sent: List[int] = []
    redact = getattr(log, "redact", None) or (lambda text: text)
    for number, line in enumerate(lines):
        body = (redact(json.dumps(line, sort_keys=True)) + "\n").encode("utf-8")  # as every log line
        status, error = _post(url, body, attempts, timeout_s, end, clock, sleep)
        if status is not None and 200 <= status < 300:
            sent.append(number)
            continue
        log.warning("notification not sent", kind=line.get("kind"), webhook_host=host, status=status,
                    error=error or None)
        if _retryable(status):  # still failing after its retries: the webhook is down, stop here
            if number + 1 < len(lines):
                log.warning("notifications left unsent: the webhook does not answer", webhook_host=host,
                            left=len(lines) - number - 1)
            break
    return sent


def webhook_url(settings: Any) -> str:
    """The configured URL: the KMS secret's value when a secret is named, else ACK_MIG_NOTIFY_URL ("" when
    neither). Raises SecretError or SettingsError (neither quotes the URL)."""
    notify = settings.notify
    if notify.url_secret:
        from functions.cloud.secrets import get_secret
        from functions.base.settings import NOTIFY_URL_SECRET, check_notify_url

        value = get_secret(notify.url_secret, settings.region, settings.credentials, settings.delivery.kms_endpoint,
                           settings.api_timeout_s)
        return check_notify_url(value, "the URL in secret %r (%s)" % (notify.url_secret, NOTIFY_URL_SECRET))
    return notify.url


def _redacted(result: Any, log: Any) -> Any:
    """``result`` with its reasons given the log lines' cleaning (the credentials, secrets read at run time)
    before the lines cut them: a chat channel is another reader, and a secret a cut splits is found no more."""
    redact = getattr(log, "redact", None)
    if redact is None:
        return result
    from dataclasses import replace

    nodes = [dict(n, reason=redact(one_line(n.get("reason") or "")))
             if isinstance(n, dict) and n.get("reason") else n for n in result.nodes or []]
    decisions = [d.model_copy(update={"reason": redact(str(d.reason or ""))}) if getattr(d, "reason", None) else d
                 for d in result.decisions or []]
    return replace(result, reason=redact(str(result.reason or "")),
                   nodes=nodes if result.nodes is not None else None, decisions=decisions)


class _Marks:
    """The alert marks' Lease as this event read it: one GET for the marks of the nodes past their claim, the stops
    and the node failures alike (read when first asked; a read that failed stays failed, and each caller tells
    everything: a repeat, never a loss)."""

    def __init__(self, kube: Any) -> None:
        self.kube, self.client = kube, None
        self.read = False
        self.value: Optional[Dict[str, Any]] = None
        self.error: Optional[Exception] = None
        self.noted = False  # a document that is not ours is said once an event

    def lease(self) -> Optional[Dict[str, Any]]:
        """The Lease (None: there is none). Raises what the read raised."""
        from functions.kube import alerted

        if not self.read:
            self.read = True
            try:
                self.client = alerted.client(self.kube)  # the marks' short-deadline client, made when first asked
                self.value = alerted.get(self.client)
            except Exception as exc:  # noqa: BLE001 - said by each caller, which tells everything
                self.error = exc
        if self.error is not None:
            raise self.error
        return self.value

    def told(self, keys: Mapping[str, str], log: Any) -> Set[str]:
        from functions.decision import alert_marks as am
        from functions.kube import alerted

        def note(why: str) -> None:  # the reader rule's one line: told again, and why
            if not self.noted:
                self.noted = True
                log.warning("alert marks not ours: every failure is told and the marks are replaced", reason=why)

        if not keys:
            return set()
        lease = self.lease()  # first: it makes the client
        return am.told(alerted.kept(self.client, lease, note), keys)


def _passed(result: Any, kube: Any, log: Any, read: Optional[_Marks] = None) -> None:
    """The sticky marks of this event's wave nodes (any wave: the executor numbers each one's) that got past their
    claim, removed: a refusal told once is told again when it comes back (``functions.decision.alert_marks``).
    Read only when such a node is there."""
    # A node that failed at its claim for any cause (a 5xx, RBAC's 403, not only its own refusal) is not past it.
    ids = {str(n.get("instance_id")) for n in result.nodes or [] if n.get("wave") and n.get("instance_id")
           and n.get("outcome") in CLAIMED and n.get("code") != CLAIM_REFUSED
           and not str(n.get("reason") or "").startswith(CLAIM_FAILED + ":")}
    if kube is None or not ids:
        return
    from functions.decision.alert_marks import stop_id
    from functions.kube import alerted

    # a node claimed again has no stop record left (a person removed it): the mark of its old stop goes too
    ids |= {stop_id(str(n.get("node_name"))) for n in result.nodes or [] if str(n.get("instance_id")) in ids
            and n.get("node_name")}
    try:
        alerted.passed(alerted.client(kube), ids, read=read.lease if read is not None else None)
    except Exception as exc:  # noqa: BLE001 - the event ends as it would have
        log.warning("alert marks of nodes past their claim not removed", nodes=len(ids), reason="%s: %s" % (
            type(exc).__name__, one_line(exc, 200)))


def _told(result: Any, kube: Optional[_Marks], log: Any) -> Tuple[Dict[str, str], Set[str]]:
    """(instance id -> failure key of each failed node, the ids an earlier attempt of this event already told:
    ``functions.decision.alert_marks``). A mark that cannot be read tells every failure: a repeat, never a loss."""
    from functions.decision.alert_marks import failure_key

    failed = failed_nodes(result)
    if kube is None or not failed:
        return {}, set()
    run = result.event_id or str(getattr(log, "context", {}).get("request_id") or "")
    keys = {str(n.get("instance_id")): failure_key(run, n) for n in failed if n.get("instance_id")}
    try:
        return keys, kube.told(keys, log)
    except Exception as exc:  # noqa: BLE001 - the API server's trouble must not silence an alert
        log.warning("alert marks not read: every node failure is told", reason="%s: %s" % (
            type(exc).__name__, one_line(exc, 200)))
        return keys, set()


def _untold_stops(stops: Iterable[Mapping[str, Any]], owner: str, by_wave: Mapping[str, List[Dict[str, Any]]],
                  kube: Optional[_Marks], log: Any) -> List[Dict[str, Any]]:
    """The stop records this event read (``functions.rollout.run.read_stops``: those that halted a pool, and any
    other on the nodes it listed) and no alert mark shows told, once each; not those this event's own waves stopped
    (their line is told anyway). A mark that cannot be read tells them all: a repeat, never a loss."""
    from functions.decision.alert_marks import stop_id, stop_key

    own = {str(n.get("node_name")) for nodes in by_wave.values() for n in nodes}
    seen: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for st in stops:
        name, by = str(st.get("node_name") or ""), str(st.get("owner") or "")
        if name and not (by and by == owner and name in own):
            seen.setdefault((name, by), dict(st))
    if not seen or kube is None:
        return list(seen.values())
    keys = {stop_id(name): stop_key(name, by) for name, by in seen}
    try:
        told = kube.told(keys, log)
    except Exception as exc:  # noqa: BLE001 - the API server's trouble must not silence a stop
        log.warning("alert marks not read: every stopped rollout is told", reason="%s: %s" % (
            type(exc).__name__, one_line(exc, 200)))
        told = set()
    if told:
        log.info("stopped rollouts told before are not told again", nodes=sorted(told))
    return [st for (name, _), st in sorted(seen.items()) if stop_id(name) not in told]


def _stop_marks(lines: Sequence[Dict[str, Any]], accepted: Iterable[int], by_wave: Mapping[str, List[Dict[str, Any]]],
                stops: Sequence[Mapping[str, Any]], owner: str) -> Dict[str, str]:
    """The marks of the stops the accepted ``rollout-stopped`` lines told: this event's own (its waves' nodes, whose
    records it wrote as ``owner``) and the earlier runs' it told from their records."""
    from functions.decision.alert_marks import stop_id, stop_key

    out: Dict[str, str] = {}
    for i in accepted:
        if lines[i]["kind"] != "rollout-stopped":
            continue
        pool = lines[i]["nodepool_id"]
        for n in by_wave.get(pool, []) if owner else ():
            out[stop_id(str(n.get("node_name") or ""))] = stop_key(str(n.get("node_name") or ""), owner)
        for st in stops:
            if st.get("nodepool_id") == pool:
                out[stop_id(str(st.get("node_name")))] = stop_key(str(st.get("node_name")), str(st.get("owner") or ""))
    return out


def _mark(keys: Dict[str, str], kube: Any, log: Any, sticky: Iterable[str] = ()) -> None:
    """Mark the failures of a ``node-failed`` line the webhook took. At least once: a crash between the 2xx and
    this write, or a write that fails, leaves them unmarked, and a retry of the event tells them again."""
    from functions.kube import alerted

    try:
        alerted.mark(alerted.client(kube), keys, sticky=sticky)
    except Exception as exc:  # noqa: BLE001 - the alert went out; the event ends as it would have
        log.warning("alert marks not written: a retry of this event tells these failures again",
                    nodes=len(keys), reason="%s: %s" % (type(exc).__name__, one_line(exc, 200)))


def after_event(result: Any, settings: Any, log: Any, wave_ids: Iterable[str] = (),
                whole_pools: bool = False, kube: Any = None, stops: Sequence[Mapping[str, Any]] = (),
                owner: str = "") -> int:
    """The pipeline's call once an event has its final result: the lines it calls for, sent. Returns how
    many were accepted; never raises (a bug here must not change how the event ended). ``kube``: the event's
    Kubernetes side (a NodeView or its backend), where the failures and stops told are marked (None: not marked,
    and an FC retry of the event, or the next run, tells them again). ``stops``: the stop records this event
    read (``functions.rollout.run.Rollout.stops``, an auto pool step's), told unless marked told; ``owner``: this event's
    rollout (the owner of the stop records its waves wrote)."""
    if settings is None or not (settings.notify.url or settings.notify.url_secret):
        return 0
    try:
        if getattr(result, "dry_run", False):
            return 0  # a dry run sends nothing, and reads and writes no mark
        redacted = _redacted(result, log)
        waves = set(wave_ids)
        read = _Marks(kube) if kube is not None else None  # one read of the marks for all that asks them
        _passed(result, kube, log, read)
        by_wave = wave_stopped(result, waves)
        redact = getattr(log, "redact", None) or (lambda text: text)  # a record's reason, as a result's (_redacted)
        # a node this event claimed has no old record left (its stop was removed, or of another target): not told
        claimed = {str(n.get("node_name")) for n in result.nodes or [] if n.get("wave") and n.get("outcome") in CLAIMED
                   and n.get("code") != CLAIM_REFUSED and not str(n.get("reason") or "").startswith(CLAIM_FAILED + ":")}
        untold = _untold_stops([st for st in stops if str(st.get("node_name")) not in claimed], owner, by_wave, read,
                               log)
        earlier = [dict(st, reason=redact(one_line(st.get("reason") or ""))) for st in untold]
        lines = notifications(redacted, waves, whole_pools, stops=earlier)
        if not lines:
            return 0
        keys, told = _told(result, read, log)  # none read unless a node failed: a node-failed line is there
        if told:  # an earlier attempt of this event (FC retries one that ended retry), or an earlier run (a
            # refusal told once per cause), told these failures
            lines = notifications(redacted, waves, whole_pools, told=told, stops=earlier)
            log.info("node failures told before are not told again", nodes=sorted(told))
            if not lines:
                return 0
        try:
            url = webhook_url(settings)
        except (ValueError, RuntimeError) as exc:  # SettingsError (no usable URL; never quoted), SecretError (KMS)
            log.warning("notifications not sent", reason=str(exc), count=len(lines))
            return 0
        accepted = _deliver(lines, url, log)
        new = {iid: key for iid, key in keys.items() if iid not in told}
        marks: Dict[str, str] = {}
        held: List[str] = []
        if new and any(lines[i]["kind"] == "node-failed" for i in accepted):
            from functions.decision.alert_marks import sticky

            marks.update(new)
            held = [n.get("instance_id") for n in failed_nodes(result) if n.get("instance_id") in new and sticky(n)]
        stopped = _stop_marks(lines, accepted, by_wave, earlier, owner) if kube is not None else {}
        if marks or stopped:  # one write for both; a stop's mark lasts while its record does (sticky)
            _mark(dict(marks, **stopped), kube, log, held + sorted(stopped))
        log.info("notifications", sent=len(accepted), kinds=[line["kind"] for line in lines], webhook_host=_host(url))
        return len(accepted)
    except Exception as exc:  # noqa: BLE001 - never fail an event for its notification
        log.error("notification internal error", error=type(exc).__name__)
        return 0
