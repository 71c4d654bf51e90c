"""A real SSH server (paramiko's server side) on a loopback address that lets a client in and then stalls.

It speaks real SSH: key exchange with its own Ed25519 host key, public-key authentication of one
authorized key, then one of four faults, two before login and two after:

- ``stall="kex"``: the TCP connection is accepted and the identification string sent (RFC 4253 4.2), then
  nothing more: the client's KEXINIT is never answered, so key exchange never completes;
- ``stall="auth"``: key exchange completes, then the public-key authentication request is never answered
  (the server's handler blocks, so its transport sends nothing more);
- ``stall="exec"``: the exec request is never answered (the handler blocks, so the server's transport
  sends nothing more), as a node whose sshd hangs after login would;
- ``stall="sftp"``: exec requests answer like a node without the bundle (the runner's ``bundle-missing``
  JSON line, exit 10), so the client goes on to SFTP, and the ``sftp`` subsystem request is never answered.

Nothing is ever run. ``known_hosts_line`` is the host key as a client's known_hosts lists it. Listen on
another loopback address (127.0.0.3, ...) with the real sshd's port, so one transport (one port) reaches
both. ``stop()`` releases every stalled handler and closes the sockets.
"""

import json
import os
import socket
import struct
import threading
from typing import Dict, List, Tuple

import paramiko
from paramiko.common import cMSG_CHANNEL_SUCCESS

from tests.support.sshd import _keypair

STALLS = ("kex", "auth", "exec", "sftp")
# What the kex stall sends before it falls silent: an identification string like OpenSSH's.
IDENTIFICATION = b"SSH-2.0-OpenSSH_9.6p1 stall\r\n"
BUNDLE_MISSING = {"outcome": "failed", "changes": 0, "bundle": "missing",
                  "error": {"code": "bundle-missing", "message": "bundle is not on this node"}}


class _Server(paramiko.ServerInterface):
    def __init__(self, owner: "StallSshServer"):
        self.owner = owner

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        if self.owner.stall == "auth":
            self.owner.events.append("auth")
            self.owner.release.wait()  # never answered while the server runs
            return paramiko.AUTH_FAILED
        if key.get_name() == self.owner.authorized.get_name() and \
                key.get_base64() == self.owner.authorized.get_base64():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        self.owner.events.append("exec")
        if self.owner.stall == "exec":
            self.owner.release.wait()  # never answered while the server runs
            return False
        answered = self.owner.answered.setdefault((id(channel.transport), channel.remote_chanid), threading.Event())
        threading.Thread(target=self._bundle_missing, args=(channel, answered), daemon=True).start()
        return True

    @staticmethod
    def _bundle_missing(channel, answered):
        # paramiko sends the request's SUCCESS only after this handler returns (channel.py, _handle_request):
        # output and close sent before it make the client's exec_command fail with "Channel closed.", which a
        # real sshd never does. So wait until the answer is out (bounded, like every wait here).
        answered.wait(5)
        channel.sendall((json.dumps(BUNDLE_MISSING) + "\n").encode())
        channel.send_exit_status(10)
        channel.close()

    def check_channel_subsystem_request(self, channel, name):
        self.owner.events.append("subsystem:%s" % name)
        self.owner.release.wait()  # the sftp subsystem never starts
        return False


class StallSshServer:
    def __init__(self, workdir: str, address: str, port: int, authorized_pub: str, stall: str = "exec"):
        if stall not in STALLS:
            raise ValueError("stall must be one of %s" % ", ".join(STALLS))
        self.address, self.port, self.stall = address, port, stall
        key_path = os.path.join(workdir, "stall_host_%s" % address.replace(".", "_"))
        _keypair(key_path)
        self.host_key = paramiko.Ed25519Key.from_private_key_file(key_path)
        kind, blob = authorized_pub.split()[:2]
        self.authorized = paramiko.PKey.from_type_string(kind, __import__("base64").b64decode(blob))
        self.known_hosts_line = "[%s]:%d %s %s" % (address, port, self.host_key.get_name(),
                                                   self.host_key.get_base64())
        self.release = threading.Event()
        self.events: List[str] = []
        self.answered: Dict[Tuple[int, int], threading.Event] = {}  # (transport, channel) -> answered
        self._transports: List[paramiko.Transport] = []
        self._silent: List[socket.socket] = []  # the kex stall's connections, held open and never answered
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((address, port))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> "StallSshServer":
        self._thread.start()
        return self

    def _serve(self):
        while not self.release.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self.stall == "kex":
                self.events.append("kex")
                conn.sendall(IDENTIFICATION)
                self._silent.append(conn)
                continue
            transport = paramiko.Transport(conn)
            self._note_answers(transport)
            transport.add_server_key(self.host_key)
            self._transports.append(transport)
            try:
                transport.start_server(server=_Server(self))
            except (paramiko.SSHException, EOFError, OSError):
                transport.close()

    def _note_answers(self, transport: paramiko.Transport) -> None:
        """Set the channel's event once the server has sent SUCCESS for its request (RFC 4254 5.4:
        byte SSH_MSG_CHANNEL_SUCCESS, uint32 recipient channel)."""
        send = transport._send_user_message

        def sent(message):
            send(message)
            data = message.asbytes()
            if data[:1] == cMSG_CHANNEL_SUCCESS:
                key = (id(transport), struct.unpack(">I", data[1:5])[0])
                self.answered.setdefault(key, threading.Event()).set()

        transport._send_user_message = sent

    def stop(self) -> None:
        self.release.set()
        for transport in self._transports:
            transport.close()
        for conn in self._silent:
            conn.close()
        self._sock.close()
        self._thread.join(5)
