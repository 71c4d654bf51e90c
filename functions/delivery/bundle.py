"""The node bundle: ``node_bootstrap``, ``pynvml`` and the node runner (``ack_mig_runner.py``) as one xz-compressed tar, named by the SHA-256 of
the tar, so it runs on the node's system Python with nothing downloaded there.

Why a tar.xz and not a zipapp: the node unpacks once into ``ROOT/bundles/<hash>`` and every later run is a
plain import from disk; xz is in Python 3.6's standard library and makes the bundle about a quarter
smaller than zip's deflate (79 KB against 109 KB today; pynvml alone is 330 KB of source). The tar is
byte-for-byte reproducible (sorted names, zeroed times and owners), so the hash, and therefore the node
cache, only changes when the code does.

The bundle is too big for one Cloud Assistant request (RunCommand <= 24 KB base64, SendFile <= 32 KB
base64), so :func:`chunks` cuts it into parts that each fit one SendFile; the node reassembles and checks
the hash before it trusts anything (``node_runner.py``).
"""

import functools
import hashlib
import importlib.util
import io
import lzma
import os
import tarfile
from typing import List, NamedTuple

import node_bootstrap
from node_bootstrap.host.bootunit import RUNNER_NAME  # the member the boot unit runs

# SendFile accepts at most 32 KB of base64 per file; 24000 raw bytes are 32000 base64 characters.
SENDFILE_RAW_LIMIT = 24000
# node_bootstrap is code alone (its unit files and defaults are written from Python): anything else in a clone's
# folder (an editor's or a test's leftover JSON, a note) would travel to every node and change the digest.
_SUFFIXES = (".py",)


class Bundle(NamedTuple):
    digest: str  # sha256 hex of the uncompressed tar: the cache key on the node
    packed: bytes  # the xz-compressed tar that travels
    files: int
    raw_size: int

    def chunks(self, limit: int = SENDFILE_RAW_LIMIT) -> List[bytes]:
        return [self.packed[i:i + limit] for i in range(0, len(self.packed), limit)] or [b""]

    def part_names(self, limit: int = SENDFILE_RAW_LIMIT) -> List[str]:
        count = len(self.chunks(limit))
        return ["%s.%dof%d" % (self.digest, i, count) for i in range(1, count + 1)]


def _sources():
    """(archive name, path) of every file the node needs, in a stable order."""
    package_dir = os.path.dirname(os.path.abspath(node_bootstrap.__file__))
    found = []
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(_SUFFIXES):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.dirname(package_dir))
                found.append((rel.replace(os.sep, "/"), path))
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin:
        raise RuntimeError("pynvml (nvidia-ml-py) is not installed; the node bundle needs it")
    found.append(("pynvml.py", spec.origin))
    # the node runner itself, so that the boot unit runs the same checked runner delivery sends as text
    found.append((RUNNER_NAME, os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_runner.py")))
    return sorted(found)


def pack(files) -> Bundle:
    """A bundle of ``(archive name, bytes)`` pairs: a reproducible tar (zeroed times and owners) in xz."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    packed = lzma.compress(raw, format=lzma.FORMAT_XZ, preset=9 | lzma.PRESET_EXTREME)
    return Bundle(hashlib.sha256(raw).hexdigest(), packed, len(files), len(raw))


@functools.lru_cache(maxsize=1)
def build() -> Bundle:
    """The node bundle from the installed ``node_bootstrap`` and ``pynvml``, built once per process."""
    files = []
    for name, path in _sources():
        with open(path, "rb") as fh:
            files.append((name, fh.read()))
    return pack(files)
