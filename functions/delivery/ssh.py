"""SSH transport (paramiko): for clusters where Cloud Assistant is not available.

Security defaults: host keys are verified against a configured known_hosts and an unknown or changed key
is refused (paramiko ``RejectPolicy``). ``accept-new`` must be chosen explicitly; it accepts a host seen
for the first time and records its key in the known_hosts file, but still refuses a changed key. The
private key comes from a file or from a KMS Secrets Manager secret (functions.secrets); neither is ever
logged. No agent, no key search in ~/.ssh: only the key configured.

Per node: connect (connect, banner and auth timeouts; refused or reset connections are retried with
backoff, 3 attempts), one exec of the node script; only when the node
reports ``bundle-missing`` an SFTP upload of the bundle (one file, atomically renamed) and a second exec.
Nothing waits unbounded: the session and SFTP channels open with a timeout, every read and write has
one, and a per-node watchdog closes the connection at the node's deadline (the runner's deadline plus
``grace_s``), which also ends the waits paramiko has no timeout for (the answer to an exec or subsystem
request); such a node ends ``node-timeout`` and never holds up the others. Nodes run concurrently
(default 32 at once).
"""

import io
import logging
import os
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence

import paramiko

from functions.delivery.outcome import NodeResult, NodeTarget, parse_output
from functions.delivery.transport import ScriptMaker, run_push_run


log = logging.getLogger(__name__)


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
    """The key of ``functions.settings.Settings``: the KMS secret named by ACK_MIG_SSH_KEY_SECRET (read
    once per instance, see functions.secrets) or else ACK_MIG_SSH_KEY_FILE."""
    d = settings.delivery
    text = ""
    if d.ssh_key_secret:
        from functions.secrets import SecretError, get_secret

        try:
            text = get_secret(d.ssh_key_secret, settings.region, settings.credentials, d.kms_endpoint,
                              settings.api_timeout_s)
        except SecretError as exc:
            if exc.retryable:  # KMS throttled or unreachable: FC retries the event, nothing was touched
                from functions.errors import RetryLater

                raise RetryLater(str(exc)) from None
            raise SshError(str(exc)) from None
    return load_key(text, "" if text else d.ssh_key_file)


class _Watchdog:
    """Closes a node's SSH client at the node's deadline. Closing the transport wakes every paramiko wait
    (an unanswered exec or subsystem request, a read, a write, a handshake) with an error; ``fired`` tells
    the caller that the deadline, not the node, ended it, and ``fired_step`` where it was stuck."""

    def __init__(self, seconds: float):
        self.client: Optional[paramiko.SSHClient] = None
        self.step = "starting"
        self.fired = False
        self.fired_step = ""
        self._done = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._done:  # the node finished just in time: its result stands
                return
            self.fired_step = self.step
            self.fired = True
        client = self.client
        if client is not None:
            client.close()

    def cancel(self) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()


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
        self.maker, self.key, self.known_hosts, self.user, self.port = maker, key, known_hosts, user, port
        self.policy, self.concurrency, self.connect_timeout_s = policy, max(1, concurrency), connect_timeout_s
        self.grace_s = grace_s  # beyond the runner's own deadline, before the channel is closed
        self.connect_attempts, self.retry_sleep = max(1, connect_attempts), retry_sleep
        self._lock = threading.Lock()

    def _connect(self, target: NodeTarget, watch: "_Watchdog") -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        watch.client = client  # from now on the watchdog can close it, mid-handshake included
        if os.path.isfile(self.known_hosts):
            client.load_host_keys(self.known_hosts)
        client.set_missing_host_key_policy(_AcceptNewPolicy(self.known_hosts, self._lock)
                                           if self.policy == "accept-new" else paramiko.RejectPolicy())
        try:
            client.connect(target.address, port=self.port, username=self.user, pkey=self.key,
                           timeout=self.connect_timeout_s, banner_timeout=self.connect_timeout_s,
                           auth_timeout=self.connect_timeout_s, allow_agent=False, look_for_keys=False)
        except BaseException:
            # A refused host key or login leaves paramiko's transport thread and socket open: on a warm
            # FC instance those would pile up across events.
            client.close()
            raise
        return client

    def _exec(self, client: paramiko.SSHClient, target: NodeTarget, watch: "_Watchdog") -> NodeResult:
        script = self.maker.script([target], target.instance_id)
        watch.step = "opening a session"
        channel = client.get_transport().open_session(timeout=self.connect_timeout_s)
        channel.settimeout(1.0)  # every read and write below returns within a second
        out, err = bytearray(), bytearray()
        try:
            # paramiko waits for the answer to an exec request without a timeout of its own: the watchdog
            # closing the transport at the node's deadline is what ends this wait on a stalled server.
            watch.step = "waiting for the exec request to be answered"
            channel.exec_command(script)
            watch.step = "reading the node's output"
            while not watch.fired:
                if channel.recv_ready():
                    out += channel.recv(65536)
                elif channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                elif channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                else:
                    time.sleep(0.02)
            code = channel.recv_exit_status() if not watch.fired else -1
        finally:
            channel.close()
        doc = parse_output(out.decode("utf-8", "replace"))
        if doc is None:
            tail = err.decode("utf-8", "replace").strip().splitlines()
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
            with paramiko.SFTPClient(channel) as sftp:
                tmp = "%s/.%s.%d.tmp" % (incoming, name, threading.get_ident())
                sftp.putfo(io.BytesIO(bundle.packed), tmp, confirm=True)
                sftp.posix_rename(tmp, "%s/%s" % (incoming, name))
        except (OSError, paramiko.SSHException, EOFError) as exc:
            return NodeResult(target.instance_id, self.name, error="bundle-missing",
                              message="SFTP upload failed: %s" % (exc or type(exc).__name__))
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
        """One node, never longer than its deadline (the runner's deadline plus ``grace_s``): a watchdog
        closes the connection then, whatever step paramiko is waiting in, and the node ends node-timeout."""
        limit = self.maker.deadline_s + self.grace_s
        watch = _Watchdog(limit)
        try:
            result = self._one_bounded(target, watch)
        except Exception as exc:  # noqa: BLE001 - whatever a closed transport raises, mid-step
            if not watch.fired:
                raise
            result = None
            log.debug("node %s: %s after the watchdog closed the connection", target.instance_id,
                      type(exc).__name__)
        finally:
            watch.cancel()  # from here on the watchdog can no longer fire
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
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(reachable) or 1))) as pool:
            return no_address + list(pool.map(self._one, reachable))
