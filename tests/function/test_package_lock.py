"""The code package's dependencies: one lock (functions/commands/stack/requirements-fc.txt) that agrees with
pyproject.toml, consumed with ``pip --require-hashes``; distributions published only as source archives
built into pure-Python wheels. The fetch runs the real pip against a local package folder (``--no-index
--find-links``), so it needs no network: a wheel and a source archive whose in-tree build backend (PEP 517
``backend-path``, no build requirements) builds offline."""

import hashlib
import io
import json
import os
import re
import tarfile
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from functions.commands.stack import build, code_package, lock
from tests.function.conftest import ROOT


def _pyproject_dependencies():
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    block = text[text.index("dependencies = ["):]
    return re.findall(r'"([^"]+)"', block[:block.index("]")])


def test_the_lock_agrees_with_pyproject_and_pins_every_file_by_hash():
    """Change a runtime dependency in pyproject.toml without `make lock` and this fails."""
    locked = lock.read()
    assert sorted(locked.requirements) == sorted(_pyproject_dependencies()), "run `make lock`"
    assert sorted(locked.requirements) == sorted(r for r, _ in code_package.DEPENDENCIES)
    pins = {canonicalize_name(p.name): p for p in locked.pins}
    assert len(pins) == len(locked.pins), "a distribution is pinned twice"
    for text in locked.requirements:  # every direct dependency is pinned inside its range
        requirement = Requirement(text)
        pin = pins.get(canonicalize_name(requirement.name))
        assert pin is not None, "%s is not in the lock: run `make lock`" % requirement.name
        assert requirement.specifier.contains(pin.version, prereleases=True), (text, pin.version)
    # The distributions the facts name as source-only are built, not fetched as wheels.
    sdists = {canonicalize_name(p.name) for p in locked.pins if p.sdist}
    assert {"alibabacloud-endpoint-util", "alibabacloud-tea-xml"} <= sdists
    # And what each wheel needs at run time is there too (pydantic's compiled core, paramiko's crypto).
    assert {"pydantic-core", "cryptography", "bcrypt", "pynacl", "alibabacloud-tea-openapi"} <= set(pins)


def test_a_line_that_is_not_a_hashed_pin_is_refused(tmp_path):
    bad = tmp_path / "lock.txt"
    bad.write_text("# resolved from pyproject.toml [project] dependencies:\n#   x>=1\nx==1.0\n")
    with pytest.raises(lock.LockError, match="--hash=sha256"):
        lock.read(str(bad))
    good = tmp_path / "good.txt"
    pins = [lock.Pin("x", "1.0", "a" * 64, False), lock.Pin("y-src", "2.0", "b" * 64, True)]
    good.write_text(lock.render(lock.Lock(["x>=1", "y-src"], pins)))
    assert lock.read(str(good)) == lock.Lock(["x>=1", "y-src"], pins)


def test_a_long_bad_lock_line_is_shown_as_written_and_marked_cut(tmp_path):
    """The refusal shows the line as Python writes it (repr: the tab or stray whitespace that can be what makes a
    pin wrong stays visible), its first 120 characters; past them it says the line was cut, and how long it is,
    rather than pass the shown part off as the whole line."""
    bad = tmp_path / "lock.txt"
    line = "x==1.0\t--hash=sha256:" + "a" * 64 + "  # " + "b" * 100
    bad.write_text(line + "\n")
    with pytest.raises(lock.LockError) as caught:
        lock.read(str(bad))
    assert str(caught.value).endswith(": %r (cut: its first 120 of %d characters)" % (line[:120], len(line))), \
        str(caught.value)
    short = tmp_path / "short.txt"
    short.write_text("x==1.0\t--hash=sha256:" + "a" * 64 + "\n")
    with pytest.raises(lock.LockError) as caught:
        lock.read(str(short))
    assert str(caught.value).endswith(": %r" % ("x==1.0\t--hash=sha256:" + "a" * 64)), str(caught.value)


def test_a_long_distribution_file_name_in_the_progress_is_marked_cut():
    """pip's ``Processing FILE`` line, of a file whose name is longer than the progress line shows (an sdist's
    built wheel, a long version and platform tag): the name is cut to 60 characters with a mark, never shown
    cut as if whole."""
    said = []
    counter = build._Counter(2, said.append, clock=lambda: 0.0)
    name = "alibabacloud_tea_openapi-0.3.12-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    counter("Processing /tmp/wheels/" + name)
    counter("Collecting x==1.0")
    assert said[0].startswith("  fetched 1/2: " + name[:40]) and said[0].endswith("...")
    assert len(said[0]) <= len("  fetched 1/2: ") + 60 + 3, said[0]
    assert said[1] == "  fetched 2/2: x==1.0"


# ---- the fetch, offline ----

BACKEND = '''
import os, zipfile, hashlib, base64

def _tag():
    return open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "TAG")).read().strip()

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "fakesrc-1.0-%s.whl" % _tag()
    files = {"fakesrc/__init__.py": b"BUILT = True\\n",
             "fakesrc-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: fakesrc\\nVersion: 1.0\\n",
             "fakesrc-1.0.dist-info/WHEEL": ("Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\n"
                                             "Tag: %s\\n" % _tag()).encode()}
    record = "".join("%s,sha256=%s,%d\\n" % (k, base64.urlsafe_b64encode(hashlib.sha256(v).digest())
                                             .rstrip(b"=").decode(), len(v)) for k, v in files.items())
    files["fakesrc-1.0.dist-info/RECORD"] = (record + "fakesrc-1.0.dist-info/RECORD,,\\n").encode()
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    return name
'''


def _wheel(folder, name="fakewheel", version="1.0", script=False):
    """A pure wheel; ``script``: with a console script, whose ``#!python`` pip rewrites to the python that
    installs it (as numpy's f2py or websocket-client's wsdump in the real lock)."""
    path = os.path.join(folder, "%s-%s-py3-none-any.whl" % (name, version))
    files = {"%s/__init__.py" % name: b"WHEEL = True\n",
             "%s-%s.dist-info/METADATA" % (name, version): ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
                                                             % (name, version)).encode(),
             "%s-%s.dist-info/WHEEL" % (name, version): b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if script:
        files["%s-%s.data/scripts/%s-cmd" % (name, version, name)] = b"#!python\nprint('hi')\n"
    files["%s-%s.dist-info/RECORD" % (name, version)] = b""
    with zipfile.ZipFile(path, "w") as archive:
        for k, v in files.items():
            archive.writestr(k, v)
    return path


def _sdist(folder, tag="py3-none-any"):
    path = os.path.join(folder, "fakesrc-1.0.tar.gz")
    members = {"fakesrc-1.0/PKG-INFO": b"Metadata-Version: 2.1\nName: fakesrc\nVersion: 1.0\n",
               "fakesrc-1.0/pyproject.toml": b'[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                             b'backend-path = ["."]\n',
               "fakesrc-1.0/backend.py": BACKEND.encode(), "fakesrc-1.0/TAG": tag.encode()}
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A package folder pip reads instead of the index (and no pip configuration of this machine)."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return str(folder)


def _lock(tmp_path, pins, name="requirements-fc.txt"):
    path = tmp_path / name
    path.write_text(lock.render(lock.Lock(["fakewheel", "fakesrc"], pins)))
    return str(path)


def test_locked_wheels_and_a_source_only_distribution_built_into_a_pure_wheel(index, tmp_path):
    wheel, sdist = _wheel(index), _sdist(index)
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", _sha(wheel), False),
                            lock.Pin("fakesrc", "1.0", _sha(sdist), True)])
    deps = tmp_path / "deps"
    build.fetch(str(deps), path)
    have = build.installed(str(deps))
    assert have["fakewheel"] == ["py3-none-any"] and have["fakesrc"] == ["py3-none-any"]
    assert (deps / "fakesrc" / "__init__.py").read_text() == "BUILT = True\n"
    assert build.check(str(deps), ["fakewheel", "fakesrc"]) == ([], [])


def test_a_file_that_is_not_the_locked_one_stops_the_build_naming_it(index, tmp_path):
    wheel, sdist = _wheel(index), _sdist(index)
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", "0" * 64, False),
                            lock.Pin("fakesrc", "1.0", _sha(sdist), True)])
    with pytest.raises(build.BuildError) as failed:
        build.fetch(str(tmp_path / "deps"), path)
    message = str(failed.value)
    assert "fakewheel" in message and "SHA-256" in message and "--deps-dir" in message
    assert "\n" not in message and not (tmp_path / "deps").exists()


def test_a_locked_distribution_missing_from_the_index_is_named(index, tmp_path):
    sdist = _sdist(index)
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", "1" * 64, False),
                            lock.Pin("fakesrc", "1.0", _sha(sdist), True)])
    with pytest.raises(build.BuildError) as failed:
        build.fetch(str(tmp_path / "deps"), path)
    assert "fakewheel" in str(failed.value) and "--deps-dir" in str(failed.value)


def test_a_source_archive_that_builds_a_platform_wheel_is_refused(index, tmp_path):
    """Built on this machine, a compiled wheel would be for its Python, not FC's python3.10."""
    wheel, sdist = _wheel(index), _sdist(index, tag="cp311-cp311-linux_x86_64")
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", _sha(wheel), False),
                            lock.Pin("fakesrc", "1.0", _sha(sdist), True)])
    with pytest.raises(build.BuildError) as failed:
        build.fetch(str(tmp_path / "deps"), path)
    message = str(failed.value)
    assert "fakesrc-1.0.tar.gz" in message and "cp311-cp311-linux_x86_64" in message and "pure-Python" in message
    assert "--deps-dir" in message


# ---- the same lock, the same bytes; fetched once; nothing left behind ----

def _zip_of(deps, out):
    code_package.build(str(out), str(deps))
    return open(str(out), "rb").read()


def test_the_same_lock_gives_the_same_zip_byte_for_byte(index, tmp_path, monkeypatch):
    """Two fetches of one lock in two caches (two machines, or a cache wiped in between): the same zip,
    and nothing in it names the folder it was built in or the python that ran pip."""
    wheel, sdist = _wheel(index, script=True), _sdist(index)
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", _sha(wheel), False),
                            lock.Pin("fakesrc", "1.0", _sha(sdist), True)])
    zips = []
    for n in (1, 2):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / ("cache%d" % n)))
        deps = build.cached(path)
        assert deps.startswith(str(tmp_path / ("cache%d" % n)))
        zips.append(_zip_of(deps, tmp_path / ("%d.zip" % n)))
    assert zips[0] == zips[1]
    names = zipfile.ZipFile(io.BytesIO(zips[0])).namelist()
    assert "fakewheel/__init__.py" in names and "fakesrc/__init__.py" in names
    assert not [n for n in names if n.endswith("direct_url.json") or n.startswith("bin/") or n.endswith(".pyc")]
    record = zipfile.ZipFile(io.BytesIO(zips[0])).read("fakewheel-1.0.dist-info/RECORD").decode()
    assert "fakewheel/__init__.py" in record and "direct_url" not in record and "fakewheel-cmd" not in record
    for text in (str(tmp_path), os.path.dirname(os.path.realpath(os.sys.executable))):
        assert text.encode() not in zips[0], text


def test_a_lock_is_fetched_once_then_comes_from_the_cache_with_progress(index, tmp_path, monkeypatch):
    wheel = _wheel(index)
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", _sha(wheel), False)])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    said = []
    first = build.cached(path, progress=said.append)
    assert said[0].startswith("dependencies: fetching for python3.10") and build.lock_digest(path)[:16] in said[0]
    assert any(line.startswith("  fetched 1/1: fakewheel-1.0") for line in said), said
    assert any(line.startswith("  installing 1 distributions") for line in said), said

    def no_pip(*args, **kwargs):
        raise AssertionError("pip ran for a lock already in the cache")

    real_pip = build._pip
    monkeypatch.setattr(build, "_pip", no_pip)
    said.clear()
    assert build.cached(path, progress=said.append) == first
    assert said == ["dependencies: from the cache %s (lock sha256 %s)" % (first, build.lock_digest(path)[:16])]
    # Another lock is another folder; the cache keeps this lock's and the one before, no more.
    root = os.path.dirname(first)
    for n in range(3):  # older locks' folders, used long ago
        os.makedirs(os.path.join(root, "%016d-python3.10" % n))
        os.utime(os.path.join(root, "%016d-python3.10" % n), (n, n))
    monkeypatch.setattr(build, "_pip", real_pip)
    other = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", _sha(wheel), False),
                             lock.Pin("fakewheel2", "1.0", _sha(_wheel(index, "fakewheel2")), False)], "other.txt")
    second = build.cached(other)
    assert second != first and sorted(os.listdir(root)) == sorted(
        os.path.basename(f) for f in (second, first)), os.listdir(root)


def test_an_interrupted_fetch_leaves_no_temporary_folder(index, tmp_path, monkeypatch):
    """Ctrl-C while pip installs: the work folder (downloads, built wheels, pip's own temporary folders,
    which live under it) is removed, the system's temporary folder holds nothing of pip's, and no partial
    folder is cached. A fetch killed outright leaves its work folder; the next fetch removes it."""
    wheel, sdist = _wheel(index), _sdist(index)
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", _sha(wheel), False),
                            lock.Pin("fakesrc", "1.0", _sha(sdist), True)])
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setattr(build.tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real_pip, seen_tmp = build._pip, []

    def interrupted(args, what, env=None, on_line=None):
        seen_tmp.append((env or {}).get("TMPDIR"))
        if args[0] == "install":
            raise KeyboardInterrupt
        return real_pip(args, what, env, on_line)

    monkeypatch.setattr(build, "_pip", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build.cached(path)
    root = tmp_path / "cache" / "ack-mig-hook" / "deps"
    assert os.listdir(str(root)) == [] and os.listdir(str(system_tmp)) == []
    assert seen_tmp and all(t and t.startswith(str(root)) for t in seen_tmp), seen_tmp
    # killed (no cleanup at all): its folder stays until the next fetch, which removes it
    dead = root / (".work-%d-x" % (2 ** 22 + 1))  # above Linux's largest pid: no such process
    (dead / "tmp" / "pip-unpack-x").mkdir(parents=True)
    monkeypatch.setattr(build, "_pip", real_pip)
    done = build.cached(path)
    assert sorted(os.listdir(str(root))) == [os.path.basename(done)]


def test_pip_and_the_source_builds_it_runs_never_get_the_clouds_credentials(index, tmp_path, monkeypatch):
    """deploy fetches the dependencies with pip, which runs the build backend of each source-only distribution
    (aliyun-python-sdk-core is one): code that needs no AccessKey, STS token or webhook URL, and would see the
    operator's in its environment (and in /proc/<pid>/environ). pip's own settings (PIP_*) still reach it."""
    secrets = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIpipkeyid000001", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "pip-ak-secret-71",
               "ALIBABA_CLOUD_SECURITY_TOKEN": "pip-sts-token-72", "ALICLOUD_ACCESS_KEY": "pip-legacy-key-73",
               "ACK_MIG_NOTIFY_URL": "https://hooks.example.com/services/T0/B0/piptoken74"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    seen = tmp_path / "backend-env.json"
    sdist = _sdist(index)
    with tarfile.open(sdist) as archive:  # the same source archive, whose backend also writes down its environment
        members = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}
    members["fakesrc-1.0/backend.py"] += ("\nimport json as _json\n_json.dump(dict(os.environ), open(%r, 'w'))\n"
                                          % str(seen)).encode()
    with tarfile.open(sdist, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    wheel = _wheel(index)
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", _sha(wheel), False),
                            lock.Pin("fakesrc", "1.0", _sha(sdist), True)])
    build.fetch(str(tmp_path / "deps"), path)
    env = json.loads(seen.read_text())
    assert env.get("PIP_FIND_LINKS") == index  # pip's configuration is its own, and kept
    assert not [name for name in secrets if name in env]
    assert not [value for value in secrets.values() if value in json.dumps(env)]


def test_a_folder_pip_cannot_write_is_said_not_a_stale_lock(index, tmp_path):
    """pip stopped by a folder it cannot write (a file where a folder of the path should be: what root cannot
    write either; a read-only disk, a full one, no permission) was told "refresh the lock (make lock)", which
    rewrites a lock that is right and fails the same. The line now says the folder cannot be written and what
    to check; a distribution the index lacks still says to refresh the lock."""
    wheel = _wheel(index)
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", _sha(wheel), False)])
    (tmp_path / "a-file").write_text("")
    with pytest.raises(build.BuildError) as failed:
        build.fetch(str(tmp_path / "a-file" / "deps"), path)
    message = str(failed.value)
    assert "refresh the lock" not in message and "make lock" not in message, message
    assert "Not a directory" in message and str(tmp_path / "a-file" / "deps") in message, message
    assert "cannot be written" in message and "no file in its path" in message and "--deps-dir" in message, message
    assert "\n" not in message and not (tmp_path / "a-file").read_text()
    missing = _lock(tmp_path, [lock.Pin("notindexed", "1.0", "1" * 64, False)], "missing.txt")
    with pytest.raises(build.BuildError) as failed:
        build.fetch(str(tmp_path / "deps"), missing)
    assert "notindexed" in str(failed.value) and "refresh the lock (make lock)" in str(failed.value), failed.value


def test_make_locks_pip_line_is_cut_with_dots(index, tmp_path):
    """`make lock` (python -m functions.commands.stack.lock, as a person runs it) said pip's last line cut at 300
    characters with no mark, mid-word and inside the quoted path, so it read as pip's whole line. The line is
    cut where it reads whole now, "..." where it was cut and the quote closed. pip's own setting (a constraints
    file, PIP_CONSTRAINT, at a long path that is not there) gives the long line before pip reads any index."""
    import subprocess
    import sys

    python310 = lock.find_python310()
    if python310 is None:
        pytest.skip("no CPython 3.10 here (make lock resolves on one)")
    missing = tmp_path.joinpath(*["a-folder-of-the-release-team"] * 12) / "constraints.txt"  # (pip splits at spaces)
    env = dict(os.environ, ACK_MIG_FC_PYTHON=python310, PIP_CONSTRAINT=str(missing))
    done = subprocess.run([sys.executable, "-m", "functions.commands.stack.lock", "--out", str(tmp_path / "out.txt")],
                          capture_output=True, text=True, env=env, timeout=120)
    (line,) = done.stderr.splitlines()
    assert done.returncode == 1 and not (tmp_path / "out.txt").exists(), done.stderr
    assert line.startswith("error: pip could not resolve the function's dependencies on python3.10: ") and \
        "No such file or directory: '" in line, line
    pips = line.split("python3.10: ", 1)[1]
    assert pips.endswith("...'") and "a-folder-of-the-release-team/a-folder" in pips and len(pips) <= 303, line


def test_pips_reason_is_cut_where_it_reads_whole(index, tmp_path):
    """pip's last line names the path it could not write; under a long folder, cut at 200 characters, the line
    ended inside the path with its parenthesis open ("not-a-folder (a file; refresh the lock ...")."""
    wheel = _wheel(index)
    path = _lock(tmp_path, [lock.Pin("fakewheel", "1.0", _sha(wheel), False)])
    deep = tmp_path / " ".join(["a-folder-of-the-release-team-for-deps"] * 4)
    deep.mkdir()
    (deep / "not-a-folder (a file)").write_text("")
    with pytest.raises(build.BuildError) as failed:
        build.fetch(str(deep / "not-a-folder (a file)" / "deps"), path)
    message = str(failed.value)
    assert message.startswith("pip could not install for python3.10 on Linux x86_64: [Errno 20] Not a directory: "
                              "'"), message
    reason = message.split("; a folder it writes to cannot be written")[0]
    # cut inside the quoted path: the quote closed after the dots, as the parentheses are
    assert reason.endswith("...'") and reason.count("(") == reason.count(")") and reason.count("'") == 2, message
    # pip's line as clipped (200): at a word's end, unless that would keep less than half of it; which of the two
    # depends on how long the test's own folder is (short under /tmp, long under a cache directory)
    kept = reason[:-4].split("x86_64: ", 1)[1]
    assert len(kept) >= 99, message  # never (nearly) all of it dropped
    assert kept.endswith("a-folder-of-the-release-team-for-deps") or " " not in kept[100:], message
