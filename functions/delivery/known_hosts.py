"""The ssh transport's known_hosts file, checked before any node is touched (the function's SshTransport) and
before it is packaged (``deploy --known-hosts``, ``python -m functions.commands.package --known-hosts``).

OpenSSH's format (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"): one entry a line, ``[marker] hostnames keytype
base64-key [comment]``; blank lines and lines starting with ``#`` are ignored. paramiko, which verifies the
host keys (functions/delivery/ssh.py), reads only entries without a marker: on a ``@revoked`` or
``@cert-authority`` line, a key whose base64 does not decode, or a blob of another type than the line names, its
HostKeys raises while it loads the file, on every connection. So every node ended ``internal-error``, and a
revoked key could never be honoured; the file is refused instead, naming the line and the accepted form.
"""

import base64
import binascii
import struct
from typing import Optional

FORM = "host key-type base64-key, one a line, as ssh-keyscan prints it"
MAX_BYTES = 4 << 20  # the nodes' keys: a few hundred bytes a node. More than this is not a known_hosts file.
MARKERS = ("@revoked", "@cert-authority")


def _blob_type(blob: bytes) -> Optional[str]:
    """The key type a public key blob starts with (RFC 4253 6.6: string "ssh-ed25519", ...), None if none."""
    if len(blob) < 4:
        return None
    (size,) = struct.unpack(">I", blob[:4])
    if size == 0 or size > 64 or len(blob) < 4 + size:
        return None
    try:
        return blob[4:4 + size].decode("ascii")
    except UnicodeDecodeError:
        return None


def problem(text: str, where: str) -> str:
    """Why ``text`` (the file ``where``) is not a known_hosts file paramiko verifies against, "" when it is."""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if fields[0] in MARKERS:
            return ("%s line %d: %s entries are not supported (paramiko, which checks the nodes' host keys, does "
                    "not read them); list each node's own key: %s" % (where, number, fields[0], FORM))
        if fields[0].startswith("@") or len(fields) < 3:
            return "%s line %d is not a known_hosts entry; use %s" % (where, number, FORM)
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except (binascii.Error, ValueError):
            return "%s line %d: the key is not base64; use %s" % (where, number, FORM)
        # An RSA key verified with SHA-2 still names itself ssh-rsa in its blob (RFC 8332 3).
        if _blob_type(blob) != fields[1]:
            return "%s line %d: the key is not a %s key; use %s" % (where, number, fields[1][:40], FORM)
    return ""


def file_problem(path: str) -> str:
    """:func:`problem` of the file ``path``, read up to :data:`MAX_BYTES` (one more is refused, never read whole)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        return "cannot read the known_hosts file %s: %s" % (path, exc.strerror or exc)
    if len(data) > MAX_BYTES:
        return "the known_hosts file %s is larger than %d MiB: not a known_hosts file" % (path, MAX_BYTES >> 20)
    return problem(data.decode("utf-8", "replace"), "the known_hosts file %s" % path)
