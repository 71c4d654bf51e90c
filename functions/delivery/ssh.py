"""SSH transport (paramiko): for clusters where Cloud Assistant is not available.

Security defaults: host keys are verified against a configured known_hosts and an unknown or changed key
is refused (paramiko ``RejectPolicy``). ``accept-new`` must be chosen explicitly; it accepts a host seen
for the first time and records its key in the known_hosts file, but still refuses a changed key. The
private key comes from a file or from a KMS Secrets Manager secret (functions.cloud.secrets); neither is ever
logged. No agent, no key search in ~/.ssh: only the key configured.

Per node: connect (connect, banner and auth timeouts; refused or reset connections are retried with
backoff, 3 attempts), one exec of the node script, read to the channel's end of file (the exit status
comes before the last of the output); only when the node
reports ``bundle-missing`` an SFTP upload of the bundle (one file, atomically renamed) and a second exec.
Nothing waits unbounded: the session and SFTP channels open with a timeout, every read and write has
one, and the node's deadline (the runner's deadline plus ``grace_s``) shuts the connection's socket down,
which also ends the waits paramiko has no timeout for (the answer to an exec or subsystem request); such a
node ends ``node-timeout`` and never holds up the others, whether it stalls before login (key exchange,
authentication) or after it. The deadlines are entries of the one watchdog thread every call deadline
shares (functions/base/deadline.py), not a timer thread per node: an event may name 10,000 nodes. Nodes run concurrently (default 32 at once) on daemon
threads, and ``run`` waits for each at most its limit plus ``JOIN_SLACK_S``: a node whose worker still
does not return is reported ``node-timeout`` and left behind, never waited for.

What a node sends back is bounded too (functions.delivery.transport.OutputTail): the last 64 KB of its
stdout and of its stderr are kept, and a node that writes more than 1 MB in all has its channel closed
and ends ``output-too-large``; an SFTP server answering the upload with more than that is cut off the
same way. One node streaming without end costs the function nothing more than any other node.
"""

import io
import logging
import os
import random
import socket
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

import paramiko

from functions.delivery.outcome import NodeResult, NodeTarget, parse_output
from functions.delivery.transport import OUTPUT_CAP_BYTES, OutputTail, ScriptMaker, run_push_run
from functions.base.deadline import Guard
from functions.base.textsafe import one_line
from node_bootstrap.hostlookup import lookup


log = logging.getLogger(__name__)

# How long past a node's own limit (deadline + grace, which the watchdog enforces) ``run`` waits for its
# worker before it reports the node node-timeout and moves on without it: closing the connection wakes
# every paramiko wait within a second or two, so only a broken watchdog or a paramiko wait nobody can
# wake would need this. The worker is then left behind (a daemon thread), never waited for.
JOIN_SLACK_S = 10.0
# How long the exec channel is read after the node's exit status for what the node wrote before it ended:
# sshd sends the status as soon as the process ends, and what is still in the process's pipe after it
# (OpenSSH session.c, session_exit_message). The end of file follows at once, unless something the node
# left behind holds the pipe open; then what came in this time is the node's output.
AFTER_EXIT_S = 5.0


class SshError(ValueError):
    exit_code = 2


def load_key(text: str = "", path: str = "") -> paramiko.PKey:
    """The private key from its text (a secret) or a file; one line naming what is wrong otherwise."""
    if not text and not path:
        raise SshError("the SSH transport needs a private key: set ACK_MIG_SSH_KEY_SECRET (a KMS secret's "
                       "name) or ACK_MIG_SSH_KEY_FILE")
    if path and not text:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise SshError("cannot read the SSH key file %s: %s" % (path, exc.strerror)) from None
    for kind in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return kind.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError):
            continue
    raise SshError("the SSH private key is not an unencrypted Ed25519, ECDSA or RSA key")


def key_from_settings(settings) -> paramiko.PKey:
    """The key of ``functions.base.settings.Settings``: the KMS secret named by ACK_MIG_SSH_KEY_SECRET (read
    once per instance, see functions.cloud.secrets) or else ACK_MIG_SSH_KEY_FILE."""
    d = settings.delivery
    text = ""
    if d.ssh_key_secret:
        from functions.cloud.secrets import SecretError, get_secret

        try:
            text = get_secret(d.ssh_key_secret, settings.region, settings.credentials, d.kms_endpoint,
                              settings.api_timeout_s)
        except SecretError as exc:
            if exc.retryable:  # KMS throttled or unreachable: FC retries the event, nothing was touched
                from functions.base.errors import RetryLater

                raise RetryLater(str(exc)) from None
            raise SshError(str(exc)) from None
    return load_key(text, "" if text else d.ssh_key_file)


class _Watchdog(Guard):
    """A node's deadline: an entry of the one watchdog thread every call deadline shares (functions/base/
    deadline.py), not a thread of its own (a ``threading.Timer`` per node started 10,000 threads for an event
    of 10,000 nodes). At the deadline it shuts the node's socket down in both directions: paramiko's transport
    thread reads end of file and ends, and its end wakes every paramiko wait (an unanswered exec or subsystem
    request, a read, a write, a handshake, an authentication) with an error; a connect still in progress ends
    too. ``fired`` tells the caller that the deadline, not the node, ended it, and ``fired_step`` where it was
    stuck. Entered (``with``) for the node's whole run; once the ``with`` has ended it never fires."""

    def __init__(self, seconds: float):
        super().__init__(seconds, max_bytes=None)  # no SDK answers are read under it
        self.step = "starting"
        self.fired_step = ""

    def _fire(self) -> None:
        with self._lock:
            if not self.fired_step:  # the first cut names the step (a socket watched later is cut at once)
                self.fired_step = self.step
        super()._fire()


class _TooMuchAnswer(paramiko.SSHException):
    """The SFTP server sent more than a bundle upload's answers could ever be."""


class _CountedChannel:
    """The SFTP channel with a cap on what it may receive. paramiko's SFTP client reads a packet of
    whatever length the server announces (up to 16 MB) into memory; an upload's answers (status, handle,
    attributes) are a few bytes each, so more than OUTPUT_CAP_BYTES in all means a hostile server."""

    def __init__(self, channel: paramiko.Channel):
        self._channel, self._received = channel, 0

    def recv(self, n: int) -> bytes:
        data = self._channel.recv(n)
        self._received += len(data)
        if self._received > OUTPUT_CAP_BYTES:
            self._channel.close()
            raise _TooMuchAnswer("the SFTP server sent more than %d bytes" % OUTPUT_CAP_BYTES)
        return data

    def __getattr__(self, name: str):  # send, close, get_name, get_transport: the channel's own
        return getattr(self._channel, name)


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """ssh's ``StrictHostKeyChecking=accept-new``: trust a first-seen host and record its key."""

    def __init__(self, known_hosts: str, lock: threading.Lock):
        self.known_hosts, self.lock = known_hosts, lock

    def missing_host_key(self, client, hostname, key):
        with self.lock:
            entry = "%s %s %s\n" % (hostname, key.get_name(), key.get_base64())
            with open(self.known_hosts, "a", encoding="utf-8") as fh:
                fh.write(entry)
        client.get_host_keys().add(hostname, key.get_name(), key)


class SshTransport:
    name = "ssh"

    def __init__(self, maker: ScriptMaker, key: paramiko.PKey, known_hosts: str, user: str = "root",
                 port: int = 22, policy: str = "verify", concurrency: int = 32, connect_timeout_s: float = 10.0,
                 grace_s: float = 30.0, connect_attempts: int = 3,
                 retry_sleep: Callable[[float], None] = time.sleep):
        if policy not in ("verify", "accept-new"):
            raise SshError("host key policy must be verify or accept-new")
        if not known_hosts or (policy == "verify" and not os.path.isfile(known_hosts)):
            raise SshError("the SSH transport verifies host keys: set ACK_MIG_SSH_KNOWN_HOSTS to a known_hosts "
                           "file (or choose ACK_MIG_SSH_HOST_KEY_POLICY=accept-new)")
        if os.path.isfile(known_hosts):  # accept-new may start without one: it records the first keys there
            from functions.delivery.known_hosts import file_problem

            found = file_problem(known_hosts)  # paramiko would fail to load it on every connection
            if found:
                raise SshError(found)
        self.maker, self.key, self.known_hosts, self.user, self.port = maker, key, known_hosts, user, port
        self.policy, self.concurrency, self.connect_timeout_s = policy, max(1, concurrency), connect_timeout_s
        self.grace_s = grace_s  # beyond the runner's own deadline, before the channel is closed
        self.connect_attempts, self.retry_sleep = max(1, connect_attempts), retry_sleep
        self._lock = threading.Lock()

    def _open_socket(self, target: NodeTarget, watch: "_Watchdog") -> socket.socket:
        """The node's TCP connection, made here for paramiko (``connect(sock=)``) so that the watchdog holds its
        socket from before the connect: a server that accepts and then stalls in key exchange or
        authentication is cut at the node's deadline like one that stalls later. Each connect within the
        connect timeout and the node's time left; a host name (node addresses are IPs) is looked up within
        them too (node_bootstrap/hostlookup.py)."""
        found = lookup(target.address, self.port, min(self.connect_timeout_s, watch.left()))  # an IP: no thread
        error: Optional[OSError] = None
        for family, kind, proto, _, where in found:
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(max(0.001, min(self.connect_timeout_s, watch.left())))
                watch.watch(sock)
                if not watch.fired:  # past the deadline the watch shut it down at once: no connect
                    sock.connect(where)
                if watch.fired:
                    raise socket.timeout("node deadline reached")
                return sock
            except OSError as exc:
                sock.close()
                if watch.fired:
                    raise
                error = exc
        raise error or OSError("no address found for %s" % target.address)

    def _connect(self, target: NodeTarget, watch: "_Watchdog") -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if os.path.isfile(self.known_hosts):
            client.load_host_keys(self.known_hosts)
        client.set_missing_host_key_policy(_AcceptNewPolicy(self.known_hosts, self._lock)
                                           if self.policy == "accept-new" else paramiko.RejectPolicy())
        sock = self._open_socket(target, watch)  # watched from now on, mid-handshake included
        try:
            client.connect(target.address, port=self.port, username=self.user, pkey=self.key, sock=sock,
                           banner_timeout=self.connect_timeout_s, auth_timeout=self.connect_timeout_s,
                           allow_agent=False, look_for_keys=False)
        except BaseException:
            # A refused host key or login leaves paramiko's transport thread and socket open: on a warm
            # FC instance those would pile up across events.
            client.close()
            sock.close()
            raise
        return client

    def _exec(self, client: paramiko.SSHClient, target: NodeTarget, watch: "_Watchdog") -> NodeResult:
        script = self.maker.script([target], target.instance_id)
        watch.step = "opening a session"
        channel = client.get_transport().open_session(timeout=self.connect_timeout_s)
        channel.settimeout(1.0)  # every read and write below returns within a second
        output = OutputTail()  # a bounded tail: a node streaming without end cannot grow the function
        try:
            # paramiko waits for the answer to an exec request without a timeout of its own: the watchdog
            # closing the transport at the node's deadline is what ends this wait on a stalled server.
            watch.step = "waiting for the exec request to be answered"
            channel.exec_command(script)
            watch.step = "reading the node's output"
            exited = None  # when the exit status came
            while not watch.fired and not output.over:
                if channel.recv_ready():
                    output.add(channel.recv(65536))
                elif channel.recv_stderr_ready():
                    output.add(channel.recv_stderr(65536), stderr=True)
                elif channel.exit_status_ready():  # the status came, or the channel closed
                    if channel.eof_received or channel.closed:  # and nothing more can come
                        break
                    # Not the end yet: the last of the node's output (its result line) may follow the status.
                    exited = time.monotonic() if exited is None else exited
                    if time.monotonic() - exited > AFTER_EXIT_S:
                        break
                    time.sleep(0.02)
                else:
                    time.sleep(0.02)
            if output.over:  # closed below, before the node has said anything more
                return output.too_large(target.instance_id, self.name, "the SSH channel was closed")
            code = channel.recv_exit_status() if not watch.fired else -1
        finally:
            channel.close()
        doc = parse_output(output.stdout())
        if doc is None:
            tail = output.stderr().strip().splitlines()
            return NodeResult(target.instance_id, self.name, code, error="no-result",
                              message=(tail[-1] if tail else "exit %d, no output" % code)[:300])
        return NodeResult(target.instance_id, self.name, code, doc)

    def _push(self, client: paramiko.SSHClient, target: NodeTarget, watch: "_Watchdog") -> Optional[NodeResult]:
        bundle = self.maker.bundle
        name = bundle.part_names(len(bundle.packed) + 1)[0]  # one part: SFTP has no size limit
        incoming = "%s/incoming" % self.maker.root
        try:
            # open_sftp() would wait for the subsystem without any timeout: open the channel ourselves
            # (bounded), give every SFTP read and write a timeout, and leave the subsystem request to the
            # watchdog, as for exec.
            watch.step = "opening the SFTP channel"
            channel = client.get_transport().open_session(timeout=self.connect_timeout_s)
            channel.settimeout(self.connect_timeout_s)
            watch.step = "waiting for the SFTP subsystem"
            channel.invoke_subsystem("sftp")
            watch.step = "uploading the bundle by SFTP"
            with paramiko.SFTPClient(_CountedChannel(channel)) as sftp:
                tmp = "%s/.%s.%d.tmp" % (incoming, name, threading.get_ident())
                sftp.putfo(io.BytesIO(bundle.packed), tmp, confirm=True)
                sftp.posix_rename(tmp, "%s/%s" % (incoming, name))
        except _TooMuchAnswer:
            return OutputTail().too_large(target.instance_id, self.name, "the SFTP channel was closed")
        except (OSError, paramiko.SSHException, EOFError) as exc:
            return NodeResult(target.instance_id, self.name, error="bundle-missing",
                              message="SFTP upload failed: %s" % (exc or type(exc).__name__))
        except Exception as exc:  # noqa: BLE001 - paramiko parses the node's SFTP answers in this thread: a
            # malformed one raises what it raises (struct.error for a short VERSION packet), and the node is
            # a machine that may be broken or hostile
            return NodeResult(target.instance_id, self.name, error="bundle-missing",
                              message="SFTP upload failed: the node's SFTP server answered what cannot be read "
                                      "(%s: %s)" % (type(exc).__name__, one_line(exc, 120)))
        return None

    def _connect_retrying(self, target: NodeTarget, watch: "_Watchdog") -> paramiko.SSHClient:
        """Connection errors (refused, reset, timeout) are retried with backoff; a host key or
        authentication failure is not: retrying cannot change the answer."""
        for attempt in range(self.connect_attempts):
            if watch.fired:  # the deadline passed during the backoff: no new connection
                raise socket.timeout("node deadline reached")
            watch.step = "connecting (attempt %d)" % (attempt + 1)
            try:
                return self._connect(target, watch)
            except (OSError, socket.timeout, EOFError):
                if attempt + 1 == self.connect_attempts or watch.fired:
                    raise
                self.retry_sleep(random.uniform(0, min(4.0, 0.5 * (2 ** attempt))))
            except paramiko.SSHException as exc:
                if isinstance(exc, (paramiko.AuthenticationException, paramiko.BadHostKeyException)) \
                        or "known_hosts" in str(exc) or attempt + 1 == self.connect_attempts or watch.fired:
                    raise
                self.retry_sleep(random.uniform(0, min(4.0, 0.5 * (2 ** attempt))))
        raise AssertionError("unreachable")

    def _one(self, target: NodeTarget) -> NodeResult:
        """One node, never longer than its deadline (the runner's deadline plus ``grace_s``): its watchdog
        shuts the connection down then, whatever step paramiko is waiting in, and the node ends node-timeout."""
        limit = self.maker.deadline_s + self.grace_s
        with _Watchdog(limit) as watch:  # once the with has ended the watchdog can no longer fire
            try:
                result = self._one_bounded(target, watch)
            except Exception as exc:  # noqa: BLE001 - whatever a closed transport raises, mid-step
                result = None
                if not watch.fired:  # one node's failure, whatever raised it, is that node's alone
                    log.error("node %s: %s while %s: %s", target.instance_id, type(exc).__name__, watch.step, exc)
                    result = NodeResult(target.instance_id, self.name, error="internal-error",
                                        message="%s while %s: %s" % (type(exc).__name__, watch.step,
                                                                     one_line(exc, 160)))
                else:
                    log.debug("node %s: %s after the watchdog cut the connection", target.instance_id,
                              type(exc).__name__)
        if watch.fired:
            return NodeResult(target.instance_id, self.name, error="node-timeout",
                              message="no answer within %gs (%s); connection closed" % (limit, watch.fired_step))
        return result

    def _one_bounded(self, target: NodeTarget, watch: "_Watchdog") -> NodeResult:
        try:
            client = self._connect_retrying(target, watch)
        except paramiko.BadHostKeyException:
            return NodeResult(target.instance_id, self.name, error="host-key-rejected",
                              message="%s presented a host key that differs from known_hosts" % target.address)
        except paramiko.SSHException as exc:
            text = str(exc)
            if "not found in known_hosts" in text:
                return NodeResult(target.instance_id, self.name, error="host-key-rejected",
                                  message="%s is not in known_hosts (policy verify)" % target.address)
            if isinstance(exc, paramiko.AuthenticationException):
                return NodeResult(target.instance_id, self.name, error="auth-failed",
                                  message="%s refused the key for %s" % (target.address, self.user))
            return NodeResult(target.instance_id, self.name, error="connect-failed", message=text[:200])
        except (OSError, socket.timeout, EOFError) as exc:
            return NodeResult(target.instance_id, self.name, error="connect-failed",
                              message="%s:%d: %s" % (target.address, self.port, exc))
        try:
            return run_push_run(target, lambda t: self._exec(client, t, watch),
                                lambda t: self._push(client, t, watch))
        except (OSError, paramiko.SSHException, EOFError) as exc:
            return NodeResult(target.instance_id, self.name, error="connect-failed", message=str(exc)[:200])
        finally:
            client.close()

    def run(self, targets: Sequence[NodeTarget]) -> List[NodeResult]:
        no_address = [NodeResult(t.instance_id, self.name, error="connect-failed", message="no IP address known")
                      for t in targets if not t.address]
        reachable = [t for t in targets if t.address]
        limit = self.maker.deadline_s + self.grace_s + JOIN_SLACK_S
        return no_address + _bounded_map(self._one, reachable, self.concurrency, limit, self._abandoned)

    def _abandoned(self, target: NodeTarget, seconds: float) -> NodeResult:
        log.warning("node %s: its SSH worker did not return within %gs; left behind", target.instance_id, seconds)
        return NodeResult(target.instance_id, self.name, error="node-timeout",
                          message="no answer within %gs and the connection could not be closed; the node was "
                                  "left behind" % seconds)


Outcome = Union[NodeResult, BaseException]


def _bounded_map(one: Callable[[NodeTarget], NodeResult], targets: Sequence[NodeTarget], concurrency: int,
                 limit_s: float, abandon: Callable[[NodeTarget, float], NodeResult]) -> List[NodeResult]:
    """``[one(t) for t in targets]``, ``concurrency`` at a time on daemon threads, in order. A call still
    running ``limit_s`` after it started gets ``abandon(target, limit_s)`` instead, and a new worker
    takes its place: the caller never waits on a stuck node longer than its own bound (a thread pool's
    shutdown would wait forever), and the process can still exit. An exception of ``one`` is raised here
    once every node is done, as ``map`` would."""
    queue: Deque[Tuple[int, NodeTarget]] = deque(enumerate(targets))
    running: Dict[int, float] = {}  # in flight: index -> when it started (at most the workers' number)
    results: Dict[int, Outcome] = {}
    changed = threading.Condition()

    def work() -> None:
        while True:
            with changed:
                if not queue:
                    return
                index, target = queue.popleft()
                running[index] = time.monotonic()
            try:
                outcome: Outcome = one(target)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                outcome = exc
            with changed:
                if running.pop(index, None) is None:  # abandoned meanwhile: its node-timeout stands,
                    return  # and a replacement worker already took this one's place
                results[index] = outcome
                changed.notify_all()

    def spawn() -> None:
        threading.Thread(target=work, name="ssh-node", daemon=True).start()

    for _ in range(max(1, min(concurrency, len(targets)))):
        spawn()
    with changed:
        while len(results) < len(targets):
            now = time.monotonic()
            for index, began in list(running.items()):
                if now - began > limit_s:
                    del running[index]
                    results[index] = abandon(targets[index], limit_s)
                    spawn()  # the stuck worker no longer counts: the queue keeps its concurrency
            changed.wait(max(0.05, min([began + limit_s - now for began in running.values()] + [1.0])))
    out: List[NodeResult] = []
    for index in range(len(targets)):
        outcome = results[index]
        if isinstance(outcome, BaseException):
            raise outcome
        out.append(outcome)
    return out
