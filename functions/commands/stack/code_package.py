"""The Function Compute code package: a zip of the sources (``python -m functions.commands.package`` writes one).

FC 3.0 resolves a Python handler as ``<file>.<function>`` with the file at the root of the package
(``index.handler`` -> ``index.py``, function ``handler``), which is the only form its documentation gives.
So the zip carries an ``index.py`` at its root that re-exports ``functions.handler.handler``, next to the
``functions`` and ``node_bootstrap`` packages; template.yml says ``Handler: index.handler``. With
``--deps DIR`` (a ``pip install --target DIR`` of the project's dependencies for python3.10 on Linux x86_64)
their contents are added at the root too, where FC's Python finds them.
"""

import os
import zipfile

HANDLER = "index.handler"  # what template.yml must say
INDEX_PY = '''"""Function Compute entry point (Handler: index.handler). Built by functions/commands/stack/code_package.py."""

from functions.handler import handler  # noqa: F401
'''
# functions/commands/stack/code_package.py -> the source tree's root (four levels up)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# The function's runtime dependencies (pyproject.toml [project] dependencies, which a test keeps equal)
# and the top-level module each one installs: functions.commands.stack.build checks a --deps folder holds each of
# them, built for FC; without one the package would fail on its first real event (the KMS SDK, for
# instance, only on the first ssh event).
DEPENDENCIES = (
    ("aliyun-python-sdk-core>=2.15,<3", "aliyunsdkcore"),
    ("alibabacloud-cs20151215>=5,<8", "alibabacloud_cs20151215"),
    ("alibabacloud-kms20160120>=3,<4", "alibabacloud_kms20160120"),
    ("paramiko>=3.4,<6", "paramiko"),
    ("nvidia-ml-py>=12.535,<14", "pynvml"),
    ("pydantic>=2.6,<3", "pydantic"),
    ("highspy>=1.8,<1.12", "highspy"),
)
PACKAGES = ("functions", "node_bootstrap")
_SKIP_DIRS = ("__pycache__",)
# The command line's shipped files (template.yml, rbac.yaml, examples: functions/commands/shipped.py): the
# function never reads them, and in a clone they are links, in a wheel files.
_SKIP_PATHS = (os.path.join("functions", "commands", "data"),)


# What our own packages ship: the modules and pyproject.toml's package data, named (its commands' data/ is
# skipped above; a test keeps the two lists equal). A clone's other files (an editor's leftovers, a .env, a
# cache, a stray JSON) are never packed: a deploy from a clone sends what one from the wheel sends, and the
# same sources the same bytes.
OUR_DATA = ("functions/commands/stack/requirements-fc.txt",)


def _walk(base: str, top: str, ours: bool = False):
    for folder, dirs, files in os.walk(os.path.join(base, top)):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".dist-info")
                         and not (ours and d.startswith("."))
                         and os.path.relpath(os.path.join(folder, d), base) not in _SKIP_PATHS)
        for name in sorted(files):
            path = os.path.join(folder, name)
            arcname = os.path.relpath(path, base)
            if name.endswith((".pyc", ".pyo")) or (ours and (name.startswith(".") or not (
                    name.endswith(".py") or arcname.replace(os.sep, "/") in OUR_DATA))):
                continue
            yield path, arcname


KNOWN_HOSTS_NAME = "known_hosts"  # FC unpacks the package under /code: ACK_MIG_SSH_KNOWN_HOSTS=/code/known_hosts


class _Zip(zipfile.ZipFile):
    """Entries carry a fixed time and mode, so the same sources give the same bytes: deploy names the OSS
    object by the package's hash, and an unchanged rebuild must not look like a new function version."""

    def write(self, filename, arcname=None, compress_type=None, compresslevel=None):
        with open(filename, "rb") as handle:
            self.writestr(arcname or filename, handle.read())

    def writestr(self, zinfo_or_arcname, data, compress_type=None, compresslevel=None):
        if not isinstance(zinfo_or_arcname, zipfile.ZipInfo):
            zinfo_or_arcname = zipfile.ZipInfo(zinfo_or_arcname, date_time=(1980, 1, 1, 0, 0, 0))
            zinfo_or_arcname.compress_type = zipfile.ZIP_DEFLATED
            zinfo_or_arcname.external_attr = 0o644 << 16
        super().writestr(zinfo_or_arcname, data, compress_type, compresslevel)


def build(out_path: str, deps_dir: str = "", root: str = ROOT, known_hosts: str = "") -> list:
    """Write the zip; return the archive names written. It is written beside ``out_path`` and renamed over it
    once whole: a build killed or failed midway (``package --out FILE``) leaves the last whole package at
    ``out_path``, never the entries written so far (a kill leaves the partial file, ``.<name>.partial-<pid>``)."""
    folder = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(folder, exist_ok=True)
    partial = os.path.join(folder, ".%s.partial-%d" % (os.path.basename(out_path), os.getpid()))
    try:
        names = _write(partial, deps_dir, root, known_hosts)
        os.replace(partial, out_path)
    except Exception:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    return names


def _write(out_path: str, deps_dir: str, root: str, known_hosts: str) -> list:
    names = []
    with _Zip(out_path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(HANDLER.split(".")[0] + ".py", INDEX_PY)
        names.append(HANDLER.split(".")[0] + ".py")
        if known_hosts:  # the ssh transport's host keys: verified against this file, never learned
            archive.write(known_hosts, KNOWN_HOSTS_NAME)
            names.append(KNOWN_HOSTS_NAME)
        for package in PACKAGES:
            for path, arcname in _walk(root, package, ours=True):
                archive.write(path, arcname)
                names.append(arcname)
        # The node bundle is built in FC from the pynvml the function can import; nvidia-ml-py is pure
        # Python and the same on every platform, so the package always carries one, even if --deps
        # lacks it (then every real event would end in "no pynvml").
        if not (deps_dir and os.path.isfile(os.path.join(deps_dir, "pynvml.py"))):
            import pynvml

            archive.write(pynvml.__file__, "pynvml.py")
            names.append("pynvml.py")
        if deps_dir:
            for top in sorted(os.listdir(deps_dir)):
                full = os.path.join(deps_dir, top)
                if os.path.isdir(full):
                    for path, arcname in _walk(deps_dir, top):
                        archive.write(path, arcname)
                        names.append(arcname)
                elif not top.endswith((".pyc", ".pth")):
                    archive.write(full, top)
                    names.append(top)
    return names
