"""SSH transport (paramiko): for clusters where Cloud Assistant is not available.

Security defaults: host keys are verified against a configured known_hosts and an unknown or changed key
is refused (paramiko ``RejectPolicy``). ``accept-new`` must be chosen explicitly; it accepts a host seen
for the first time and records its key in the known_hosts file, but still refuses a changed key. The
private key comes from a file or from a secret (the text itself); neither is ever logged. No agent, no
key search in ~/.ssh: only the key configured.

Per node: connect (connect, banner and auth timeouts; refused or reset connections are retried with
backoff, 3 attempts), one exec of the node script; only when the node
reports ``bundle-missing`` an SFTP upload of the bundle (one file, atomically renamed) and a second exec.
The command's deadline closes the channel. Nodes run concurrently (default 32 at once).
"""

import io
import os
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence

import paramiko

from .result import NodeResult, NodeTarget, parse_output
from .transport import ScriptMaker, run_push_run


class SshError(ValueError):
    exit_code = 2


def load_key(text: str = "", path: str = "") -> paramiko.PKey:
    """The private key from its text (a secret) or a file; one line naming what is wrong otherwise."""
    if not text and not path:
        raise SshError("the SSH transport needs a private key: set ACK_MIG_SSH_PRIVATE_KEY or ACK_MIG_SSH_KEY_FILE")
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

    def _connect(self, target: NodeTarget) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
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

    def _exec(self, client: paramiko.SSHClient, target: NodeTarget) -> NodeResult:
        script = self.maker.script([target], target.instance_id)
        channel = client.get_transport().open_session(timeout=self.connect_timeout_s)
        channel.settimeout(1.0)
        limit = self.maker.deadline_s + self.grace_s
        deadline = time.monotonic() + limit
        out, err = bytearray(), bytearray()
        try:
            channel.exec_command(script)
            while True:
                if channel.recv_ready():
                    out += channel.recv(65536)
                elif channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                elif channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                elif time.monotonic() > deadline:
                    return NodeResult(target.instance_id, self.name, error="execution-timeout",
                                      message="no answer within %gs; channel closed" % limit)
                else:
                    time.sleep(0.02)
            code = channel.recv_exit_status()
        finally:
            channel.close()
        doc = parse_output(out.decode("utf-8", "replace"))
        if doc is None:
            tail = err.decode("utf-8", "replace").strip().splitlines()
            return NodeResult(target.instance_id, self.name, code, error="no-result",
                              message=(tail[-1] if tail else "exit %d, no output" % code)[:300])
        return NodeResult(target.instance_id, self.name, code, doc)

    def _push(self, client: paramiko.SSHClient, target: NodeTarget) -> Optional[NodeResult]:
        bundle = self.maker.bundle
        name = bundle.part_names(len(bundle.packed) + 1)[0]  # one part: SFTP has no size limit
        incoming = "%s/incoming" % self.maker.root
        try:
            with client.open_sftp() as sftp:
                tmp = "%s/.%s.%d.tmp" % (incoming, name, threading.get_ident())
                sftp.putfo(io.BytesIO(bundle.packed), tmp, confirm=True)
                sftp.posix_rename(tmp, "%s/%s" % (incoming, name))
        except (OSError, paramiko.SSHException) as exc:
            return NodeResult(target.instance_id, self.name, error="bundle-missing",
                              message="SFTP upload failed: %s" % exc)
        return None

    def _connect_retrying(self, target: NodeTarget) -> paramiko.SSHClient:
        """Connection errors (refused, reset, timeout) are retried with backoff; a host key or
        authentication failure is not: retrying cannot change the answer."""
        for attempt in range(self.connect_attempts):
            try:
                return self._connect(target)
            except (OSError, socket.timeout, EOFError):
                if attempt + 1 == self.connect_attempts:
                    raise
                self.retry_sleep(random.uniform(0, min(4.0, 0.5 * (2 ** attempt))))
            except paramiko.SSHException as exc:
                if isinstance(exc, (paramiko.AuthenticationException, paramiko.BadHostKeyException)) \
                        or "known_hosts" in str(exc) or attempt + 1 == self.connect_attempts:
                    raise
                self.retry_sleep(random.uniform(0, min(4.0, 0.5 * (2 ** attempt))))
        raise AssertionError("unreachable")

    def _one(self, target: NodeTarget) -> NodeResult:
        try:
            client = self._connect_retrying(target)
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
            return run_push_run(target, lambda t: self._exec(client, t), lambda t: self._push(client, t))
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
