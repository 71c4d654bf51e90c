"""A real OpenSSH ``sshd`` on 127.0.0.1 for the SSH transport tests.

Started as the current user with its own generated host key, a temporary ``sshd_config`` (``-f``),
``-D -e`` (foreground, log to stderr), a free port, ``UsePAM no``, ``StrictModes no`` and
``PermitRootLogin prohibit-password`` (key only), and an ``authorized_keys`` holding a client key made
here. ``known_hosts`` lists the real host key; ``wrong_known_hosts`` lists another key for the same host
(a man in the middle, as the client sees it).
"""

import os
import shutil
import socket
import subprocess
import time
from typing import Optional

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _keypair(path: str) -> str:
    """Write an OpenSSH private key to ``path``; return the public key line."""
    key = ed25519.Ed25519PrivateKey.generate()
    with open(path, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                   serialization.NoEncryption()))
    os.chmod(path, 0o600)
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    def __init__(self, workdir: str):
        self.dir = workdir
        self.port = _free_port()
        self.host_key = os.path.join(workdir, "host_ed25519")
        host_pub = _keypair(self.host_key)
        self.client_key = os.path.join(workdir, "client_ed25519")
        client_pub = _keypair(self.client_key)
        with open(self.client_key, encoding="utf-8") as fh:
            self.client_key_text = fh.read()
        self.authorized_keys = os.path.join(workdir, "authorized_keys")
        with open(self.authorized_keys, "w", encoding="utf-8") as fh:
            fh.write(client_pub + "\n")
        self.known_hosts = os.path.join(workdir, "known_hosts")
        with open(self.known_hosts, "w", encoding="utf-8") as fh:
            fh.write("[127.0.0.1]:%d %s\n" % (self.port, host_pub))
        self.wrong_known_hosts = os.path.join(workdir, "wrong_known_hosts")
        other = _keypair(os.path.join(workdir, "other_ed25519"))
        with open(self.wrong_known_hosts, "w", encoding="utf-8") as fh:
            fh.write("[127.0.0.1]:%d %s\n" % (self.port, other))
        self.config = os.path.join(workdir, "sshd_config")
        with open(self.config, "w", encoding="utf-8") as fh:
            fh.write("\n".join([
                "Port %d" % self.port, "ListenAddress 127.0.0.1", "HostKey %s" % self.host_key,
                "AuthorizedKeysFile %s" % self.authorized_keys, "PidFile %s" % os.path.join(workdir, "sshd.pid"),
                "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "MaxStartups 200:30:400",
                "MaxSessions 100", "LogLevel ERROR", "Subsystem sftp internal-sftp", ""]))
        self.proc: Optional[subprocess.Popen] = None
        self.log = os.path.join(workdir, "sshd.log")

    def start(self) -> "Sshd":
        try:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        except OSError:
            pass  # not root: sshd runs without privilege separation and does not need it
        self._log = open(self.log, "wb")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", self.config], stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("sshd exited: %s" % open(self.log).read()[-500:])
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not listen on %d" % self.port)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if getattr(self, "_log", None):
            self._log.close()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not os.path.exists(SSHD):
        pytest.skip("OpenSSH sshd is not installed (make test installs openssh-server)")
    server = Sshd(str(tmp_path_factory.mktemp("sshd"))).start()
    yield server
    server.stop()
