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
import struct
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


def _ports():
    """Ports for sshd to try, each free when offered: below the kernel's ephemeral range, which every
    ``bind(("127.0.0.1", 0))`` and every outgoing connection's own port come from (the loopback emulators',
    another pytest-xdist worker's), and from a start of this process's own. sshd binds its port itself, some
    time after we chose it: an ephemeral port chosen then, free, could be given to another worker's server
    meanwhile, and sshd then failed to bind it, or the start check reached that other server."""
    low = 32768  # Linux's default first ephemeral port
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            low = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    base = 10000 if low > 12000 else 1024
    span = max(1, low - base)
    start = (os.getpid() * 7919) % span
    for step in range(span):
        port = base + (start + step) % span
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken: the next one
        yield port


LOOPBACK_HEX = "%08X" % struct.unpack("=I", socket.inet_aton("127.0.0.1"))[0]  # as /proc/net/tcp shows it


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself listens on 127.0.0.1:``port`` (Linux's /proc: the listening socket's
    inode among the process's open files). A connection that succeeds proves only that someone listens there:
    another server that took the port before sshd could bind it, while sshd was still starting."""
    inodes = set()
    with open("/proc/net/tcp") as fh:
        for line in fh.readlines()[1:]:
            fields = line.split()  # sl local rem st ... inode: Documentation/networking/proc_net_tcp.rst
            if fields[1] == "%s:%04X" % (LOOPBACK_HEX, port) and fields[3] == "0A":  # 0A: TCP_LISTEN
                inodes.add("socket:[%s]" % fields[9])
    if not inodes:
        return False
    fds = "/proc/%d/fd" % pid
    try:
        names = os.listdir(fds)
    except OSError:
        return False  # gone
    for name in names:
        try:
            if os.readlink(os.path.join(fds, name)) in inodes:
                return True
        except OSError:
            continue
    return False


class Sshd:
    def __init__(self, workdir: str):
        self.dir = workdir
        self._ports = _ports()
        self.port = next(self._ports)
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
        self.wrong_known_hosts = os.path.join(workdir, "wrong_known_hosts")
        self._host_pubs = (host_pub, _keypair(os.path.join(workdir, "other_ed25519")))
        self.config = os.path.join(workdir, "sshd_config")
        self._configure()
        self.proc: Optional[subprocess.Popen] = None
        self.log = os.path.join(workdir, "sshd.log")

    def _configure(self) -> None:
        """The files that name ``self.port``: sshd's config and the two known_hosts."""
        for path, pub in ((self.known_hosts, self._host_pubs[0]), (self.wrong_known_hosts, self._host_pubs[1])):
            with open(path, "w", encoding="utf-8") as fh:
                fh.write("[127.0.0.1]:%d %s\n" % (self.port, pub))
        with open(self.config, "w", encoding="utf-8") as fh:
            fh.write("\n".join([
                "Port %d" % self.port, "ListenAddress 127.0.0.1", "HostKey %s" % self.host_key,
                "AuthorizedKeysFile %s" % self.authorized_keys, "PidFile %s" % os.path.join(self.dir, "sshd.pid"),
                "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "MaxStartups 200:30:400",
                "MaxSessions 100", "LogLevel ERROR", "Subsystem sftp internal-sftp", ""]))

    def start(self) -> "Sshd":
        try:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        except OSError:
            pass  # not root: sshd runs without privilege separation and does not need it
        for _ in range(5):  # a port taken between our choice and sshd's bind: sshd exits, the next port
            self._log = open(self.log, "wb")
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", self.config], stdout=self._log, stderr=self._log)
            deadline = time.monotonic() + 30  # a hang guard: sshd starts slowly on a loaded CI runner
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _listens(self.proc.pid, self.port):
                    return self
                time.sleep(0.05)
            self._log.close()
            with open(self.log, encoding="utf-8", errors="replace") as fh:
                said = fh.read()[-500:]
            if self.proc.poll() is None:
                self.stop()
                raise RuntimeError("sshd did not listen on %d" % self.port)
            if "Cannot bind any address" not in said and "Address already in use" not in said:
                raise RuntimeError("sshd exited: %s" % said)
            self.port = next(self._ports)
            self._configure()
        raise RuntimeError("sshd found no free port: %s" % said)

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
