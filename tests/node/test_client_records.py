"""The stopped-clients and queued-clients records under the reader rule (node_bootstrap/outside.py): whatever
the files in the state directory hold, an entry that is not a client ``--clients`` accepts reads as absent, alone,
and never reaches systemctl or a file move (host/clients.py)."""

import json
import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from node_bootstrap.host.clients import ClientControl, check_state_dir, parse_clients

GOOD = ["systemd", "dcgm-exporter.service"]
HOSTILE = [
    {"systemd": "dcgm-exporter.service"},  # an object: its keys are no pairs
    ["systemd", {"x": 1}], ["systemd", ["a"]], [["a"], "b"], [1, 2], ["systemd", 5], ["systemd", None],
    "ab",  # a two-letter string unpacked into a kind and a target
    ["systemd", "--root=/tmp/x"], ["systemd", "-H"],  # a systemctl option, not a unit
    ["manifest", "relative/path.yml"], ["manifest", "/etc/x\ny"], ["manifest", "/" + "x" * 100000],
    ["other", "dcgm-exporter.service"], ["systemd", "a b"], ["systemd", ""], None, 1e300, True,
    ["systemd", "dcgm-exporter.service", "extra"],
]


def _control(tmp_path, record, queued, at_boot=False):
    for name, doc in (("stopped-clients.json", record), ("queued-clients.json", queued)):
        if doc is not None:
            (tmp_path / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    calls = []

    def run(argv):
        calls.append(argv)
        return (3, "inactive") if "is-active" in argv else (0, "")
    return ClientControl(parse_clients(""), run, str(tmp_path), lambda line: None, at_boot=at_boot), calls


@pytest.mark.parametrize("bad", HOSTILE, ids=range(len(HOSTILE)))
def test_a_record_entry_that_names_no_client_is_absent_and_the_others_are_read(tmp_path, bad):
    """Before: a pair holding an object or a list raised TypeError (unhashable) and a number AttributeError,
    out of the apply before its run (the check of the queue runs first); an object or a two-letter string was
    read as the client ``a:b``; ``--root=/tmp/x`` reached ``systemctl start`` as an option; and one entry that
    was not a pair (null) dropped every client the record named."""
    control, calls = _control(tmp_path, [bad, GOOD], [bad, GOOD])
    problems = control.check_queued()
    assert problems == ["systemd:dcgm-exporter.service, queued to start at boot, is inactive; starting it again"]
    stopped = control.stop()
    assert [str(c) for c in stopped] == ["systemd:dcgm-exporter.service"]
    assert control.start(stopped) == []
    assert calls == [["systemctl", "is-active", "dcgm-exporter.service"],
                     ["systemctl", "start", "dcgm-exporter.service"]]


def test_a_queued_record_names_units_only_and_a_record_is_bounded(tmp_path):
    """A manifest in the queue is none a boot run wrote (it queues units): never given to ``systemctl
    is-active``. A record of thousands of entries is not one a run of a few clients wrote: 64 are read."""
    many = [["systemd", "u%d.service" % n] for n in range(5000)]
    control, calls = _control(tmp_path, many, [["manifest", "/etc/kubernetes/manifests/x.yml"]])
    assert control.check_queued() == [] and calls == []
    assert len(control.stop()) == 64


@settings(max_examples=200)
@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                              st.text(max_size=12), st.sampled_from(["systemd", "manifest", "-x", "/a"])),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                    max_leaves=12))
@example([["systemd", {"x": 1}]])
@example(["ab"])
def test_any_json_in_the_records_reads_as_clients_parse_clients_would_accept(tmp_path_factory, doc):
    tmp_path = tmp_path_factory.mktemp("records")
    control, calls = _control(tmp_path, doc, doc)
    control.check_queued()
    stopped = control.stop()
    control.start(stopped)
    for client in stopped:
        assert parse_clients(str(client)) == [client]
    for argv in calls:
        assert argv[0] == "systemctl" and not argv[-1].startswith("-") and all(isinstance(a, str) for a in argv)


def test_more_clients_than_a_record_holds_are_refused_before_anything_stops():
    """A run's stopped-clients record is read back at most MAX_RECORDED entries: with 65 clients a killed
    run's record lost the 65th, and no later run started it again. --clients names at most that many."""
    from node_bootstrap.errors import BadInput
    from node_bootstrap.host.clients import MAX_RECORDED

    assert len(parse_clients(",".join("systemd:u%d.service" % n for n in range(MAX_RECORDED)))) == MAX_RECORDED
    with pytest.raises(BadInput) as caught:
        parse_clients(",".join("systemd:u%d.service" % n for n in range(MAX_RECORDED + 1)))
    assert "at most %d" % MAX_RECORDED in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("fault", ["insufficient-resources", "crash-after:1"])
def test_a_record_never_names_more_clients_than_are_read_back_and_no_stopped_one_is_lost(tmp_path, fault):
    """A killed run left 64 clients stopped (its --clients another list), and this run's --clients names one
    more that runs: noted as the 65th, it was past what a record is read back to (64), so after this run was
    killed (crash-after) the next run never started it again, and emptied the record. The run now stops nothing
    it cannot note: it fails before any change, naming the record, starts the leftovers, and the next run goes
    ahead."""
    from tests.node.nodecli import Node

    node = Node(tmp_path, clients="systemd:dcgm-exporter")
    node.set_unit("dcgm-exporter")  # active
    record = tmp_path / "var" / "stopped-clients.json"
    record.parent.mkdir()
    record.write_text(json.dumps([["systemd", "old-%d" % n] for n in range(64)]))
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb", "--sim-fault", fault)
    assert res.rc == 1 and res.json["error"] == {"code": "too-many-clients", "message": (
        "systemd:dcgm-exporter was not stopped: %s already names 64 clients this tool stopped (an earlier run's, "
        "not all in this --clients), the most a record keeps; they are started again now, then run again"
        % record)}, (res.json, res.stderr)
    assert res.json["changes"] == 0 and "client_problems" not in res.json
    assert node.unit_active("dcgm-exporter") and all(node.unit_active("old-%d" % n) for n in range(64))
    assert json.loads(record.read_text()) == []
    again = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert again.rc == 0 and again.json["changes"] > 0 and node.unit_active("dcgm-exporter"), again.json
    assert "systemctl stop dcgm-exporter" in node.systemctl() and json.loads(record.read_text()) == []


def test_the_units_queued_at_boot_join_the_record_only_as_far_as_it_is_read_back(tmp_path):
    """Units the boot run queued that are not active join the stopped-clients record, to be started at the
    run's end; a record already near its bound grew past it, and the entries past 64 were dropped when read
    back. What does not fit stays queued, and the next run (the record emptied meanwhile) takes it."""
    from node_bootstrap.commands.simhost import SimSystemd

    systemd = SimSystemd(str(tmp_path / "host"))
    record, queued = tmp_path / "stopped-clients.json", tmp_path / "queued-clients.json"
    record.write_text(json.dumps([["systemd", "old-%d" % n] for n in range(62)]))
    queued.write_text(json.dumps([["systemd", "q-%d" % n] for n in range(4)]))
    control = ClientControl(parse_clients(""), systemd.run, str(tmp_path), lambda line: None)
    problems = control.check_queued()
    assert problems == ["systemd:q-%d, queued to start at boot, is inactive; starting it again" % n for n in (0, 1)] + [
        "systemd:q-%d, queued to start at boot, is inactive; the stopped-clients record is full: the next run "
        "starts it" % n for n in (2, 3)]
    assert len(json.loads(record.read_text())) == 64 and json.loads(queued.read_text()) == [
        ["systemd", "q-2"], ["systemd", "q-3"]]
    assert control.start(control.leftovers()) == [] and json.loads(record.read_text()) == []
    again = ClientControl(parse_clients(""), systemd.run, str(tmp_path), lambda line: None)
    assert len(again.check_queued()) == 2 and not queued.exists()
    assert again.start(again.leftovers()) == []
    assert all(systemd.load()["units"].get("q-%d" % n) == "active" for n in range(4))


def _manifest_node(tmp_path):
    from tests.node.nodecli import Node

    manifest = tmp_path / "manifests" / "nvidia-device-plugin.yml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    held = tmp_path / "var" / "held-manifests" / str(manifest).strip("/").replace("/", "__")
    return Node(tmp_path, clients="manifest:%s" % manifest), manifest, held


def test_a_directory_where_a_manifest_is_held_aside_never_takes_the_manifest_inside_it(tmp_path):
    """shutil.move onto a directory moves into it: the device plugin's manifest went inside a directory found at
    its held-aside place, and moving that back put a directory at the manifest's path. The kubelet ran no device
    plugin from it, and every run said success. Now the run stops before any change, naming the directory; the
    manifest stays where it is, and once the directory is gone the next run goes ahead."""
    node, manifest, held = _manifest_node(tmp_path)
    held.mkdir(parents=True)
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert res.rc == 1 and res.json["error"] == {"code": "client-stop-failed", "message": (
        "could not stop manifest:%s: [Errno 21] %s is a directory, not made by this tool: remove it; the GPUs were "
        "not changed" % (manifest, held))}, res.json
    assert res.json["changes"] == 0 and "client_problems" not in res.json
    assert manifest.read_text() == "kind: Pod\n" and json.loads(
        (tmp_path / "var" / "stopped-clients.json").read_text()) == []
    held.rmdir()
    again = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert again.rc == 0 and again.json["changes"] > 0 and manifest.read_text() == "kind: Pod\n", again.json


def test_a_held_manifest_that_is_no_file_is_never_moved_to_the_manifests_place(tmp_path):
    """A killed run's record names the manifest, and its held-aside place holds a directory: it was moved to
    the manifest's path. Now it stays, and the run says what to do."""
    node, manifest, held = _manifest_node(tmp_path)
    manifest.unlink()
    (held / "nvidia-device-plugin.yml").parent.mkdir(parents=True)
    (held / "nvidia-device-plugin.yml").write_text("kind: Pod\n")
    (tmp_path / "var" / "stopped-clients.json").write_text(json.dumps([["manifest", str(manifest)]]))
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert res.rc == 0 and res.json["client_problems"] == [
        "could not start manifest:%s: [Errno 17] %s is a directory, not a manifest this tool held aside: put the "
        "manifest back at %s and remove it" % (manifest, held, manifest)], res.json
    assert not os.path.lexists(str(manifest)) and held.is_dir()


def test_a_state_directory_that_is_a_file_stops_the_run_naming_it(tmp_path):
    """The stopped-clients record cannot be written (a file where the state directory goes): an internal error,
    as if a bug; now one line naming it, before any change."""
    from tests.node.nodecli import Node

    node = Node(tmp_path, clients="systemd:dcgm-exporter")
    node.set_unit("dcgm-exporter")
    (tmp_path / "var").write_text("")
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert res.rc == 1 and res.json["error"] == {"code": "client-stop-failed", "message": (
        "could not stop systemd:dcgm-exporter: [Errno 17] File exists: '%s'; the GPUs were not changed"
        % (tmp_path / "var"))}, res.json
    assert res.json["changes"] == 0 and node.unit_active("dcgm-exporter")


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_a_state_directory_others_can_write_is_refused_and_nothing_in_it_is_moved_into_place(tmp_path, mode):
    """The stopped-clients record names the manifests a root run moves back into place from the state directory:
    one that others could write (created under umask 0, or by hand) let any local user plant a record and a
    "held" file, and the next apply moved that file, as root, to any path (/etc/cron.d here). Now the run stops
    before any change, naming the directory and what to do, labels the node failed, and moves nothing."""
    from tests.node.nodecli import Node

    node = Node(tmp_path)
    node.kube_args = []  # labels go to the simulated node's stand-in
    target = tmp_path / "etc" / "cron.d" / "planted"
    state = tmp_path / "var"
    held = state / "held-manifests" / str(target).strip("/").replace("/", "__")
    held.parent.mkdir(parents=True)
    held.write_text("* * * * * root id\n")
    (state / "stopped-clients.json").write_text(json.dumps([["manifest", str(target)]]))
    os.chmod(str(state), mode)
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert res.rc == 1 and res.json["error"] == {"code": "state-dir-unsafe", "message": (
        "the state directory %s is writable by others (mode %04o): the records in it say which clients a run "
        "starts and which files it moves into place, so it must be writable by this user (uid %d) alone; check "
        "what is in it, then chmod go-w it, or pass --state-dir" % (state, mode, os.geteuid()))}, res.json
    assert not target.exists() and held.exists() and res.json["changes"] == 0
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        meta = json.load(fh)
    assert meta["labels"]["nvidia.com/mig.config.state"] == "failed"
    assert meta["annotations"]["ack-mig-hook/mig-config-reason"] == res.json["error"]["message"]
    held.unlink()
    os.chmod(str(state), 0o755)
    again = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert again.rc == 0 and again.json["changes"] > 0, again.json


def test_the_state_directory_is_made_private_whatever_the_umask(tmp_path):
    """Made by a run under umask 0, the state directory was writable by everyone (and then refused by the next
    run): it is made 0700 whatever the umask."""
    manifest = tmp_path / "manifests" / "dp.yml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    state = tmp_path / "state" / "ack-mig-hook"
    control = ClientControl(parse_clients("manifest:%s" % manifest), lambda argv: (0, ""), str(state),
                            lambda line: None)
    old = os.umask(0)
    try:
        stopped = control.stop()
    finally:
        os.umask(old)
    assert os.stat(str(state)).st_mode & 0o777 == 0o700
    assert os.stat(str(state / "held-manifests")).st_mode & 0o777 == 0o700
    # its record is no file others may write either, which the next run would refuse (state-dir-unsafe)
    assert os.stat(str(state / "stopped-clients.json")).st_mode & 0o022 == 0
    check_state_dir(str(state))
    assert control.start(stopped) == [] and manifest.read_text() == "kind: Pod\n"


def test_a_manifest_directory_made_again_to_put_a_manifest_back_is_writable_by_root_alone(tmp_path):
    """A held manifest whose directory is gone by the start (the static pods' directory removed meanwhile) is put
    back into one made anew, with os.makedirs: under umask 0 /etc/kubernetes/manifests came back writable by
    everyone, and any local user's manifest there is a pod the kubelet runs (privileged, hostPath /: root).
    It is made 0755 at most, parents too, whatever the umask."""
    manifest = tmp_path / "etc" / "kubernetes" / "manifests" / "dp.yml"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("kind: Pod\n")
    control = ClientControl(parse_clients("manifest:%s" % manifest), lambda argv: (0, ""), str(tmp_path / "state"),
                            lambda line: None)
    stopped = control.stop()
    manifest.parent.rmdir()
    (tmp_path / "etc" / "kubernetes").rmdir()
    old = os.umask(0)
    try:
        assert control.start(stopped) == []
    finally:
        os.umask(old)
    assert manifest.read_text() == "kind: Pod\n"
    for directory in (manifest.parent, manifest.parent.parent):
        assert os.stat(str(directory)).st_mode & 0o777 == 0o755, directory


def _other_file_system(tmp_path):
    """A directory on another file system than ``tmp_path`` (/dev/shm, a tmpfs), or a skip."""
    import tempfile

    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(str(tmp_path)).st_dev:
        pytest.skip("no second file system here")
    return tempfile.mkdtemp(prefix="ack-mig-state-", dir="/dev/shm")


def _kill_at_the_copys_fsync(monkeypatch, dst, seen):
    """Make the fsync of a copy written beside ``dst`` the kill point: it notes whether the copy has a hidden
    name and whether ``dst`` was there yet (a record's write, in another directory, syncs as always)."""
    from tests.support.kills import Killed

    from node_bootstrap.host import clients

    real_fsync = os.fsync

    def fsync(fd):
        path = os.readlink("/proc/self/fd/%d" % fd)
        if os.path.dirname(path) != os.path.dirname(dst):
            return real_fsync(fd)  # a record's write, not the copy
        seen.append((os.path.basename(path).startswith("."), os.path.exists(dst)))
        raise Killed("fsync")  # the copy written, not yet renamed: a kill here

    monkeypatch.setattr(clients.os, "fsync", fsync)


def _next_run_puts_the_whole_manifest_back(manifest, state, text):
    """The next run (one that changes nothing, as a boot run at the layout already there) puts the whole
    manifest back and leaves no copy behind: neither beside the manifest nor among the held manifests, where
    a killed hold's hidden copy stayed for good (the next hold removed it, yet a run that holds nothing never
    came to it)."""
    after = ClientControl(parse_clients("manifest:%s" % manifest), lambda argv: (0, ""), str(state),
                          lambda line: None)
    assert after.start(after.leftovers()) == []
    assert manifest.read_text() == text and not [n for n in os.listdir(str(manifest.parent)) if n != "dp.yml"]
    held_dir = os.path.join(str(state), "held-manifests")
    assert not os.path.isdir(held_dir) or os.listdir(held_dir) == []


@pytest.mark.parametrize("way", ["held-aside", "put-back"])
def test_a_manifest_moved_across_file_systems_never_has_its_name_half_written(tmp_path, monkeypatch, way):
    """A state directory on another file system than the manifests (/var on a disk of its own) turned the move
    into shutil's copy and delete: written in place, unsynced. Killed mid-copy while holding the device
    plugin's manifest aside, the next run moved the half copy back over the whole manifest (the kubelet then
    runs no device plugin); killed putting it back, the manifest itself was left half written. The copy is
    written beside its place under a name the kubelet skips (a leading dot), synced, then renamed; the source
    goes last. A kill at the sync leaves the manifest whole."""
    import shutil
    from tests.support.kills import Killed

    state = _other_file_system(tmp_path)
    try:
        manifest = tmp_path / "manifests" / "dp.yml"
        manifest.parent.mkdir()
        text = "kind: Pod\n" + "# padding\n" * 5000
        manifest.write_text(text)
        control = ClientControl(parse_clients("manifest:%s" % manifest), lambda argv: (0, ""), state,
                                lambda line: None)
        held = control._held_path(parse_clients("manifest:%s" % manifest)[0])
        stopped = None if way == "held-aside" else control.stop()
        dst = held if way == "held-aside" else str(manifest)
        seen = []
        _kill_at_the_copys_fsync(monkeypatch, dst, seen)
        with pytest.raises(Killed):
            control.stop() if way == "held-aside" else control.start(stopped)
        assert seen == [(True, False)]  # a hidden copy, synced before it takes its place
        monkeypatch.undo()
        _next_run_puts_the_whole_manifest_back(manifest, state, text)
    finally:
        shutil.rmtree(state, ignore_errors=True)


@pytest.mark.parametrize("where", ["stopped-clients.json", "held-manifests/etc__cron.d__planted"])
@pytest.mark.parametrize("how", ["mode", "owner"])
def test_a_record_or_held_file_others_can_write_or_own_is_refused(tmp_path, where, how):
    """The state directory's owner and mode were checked, not the files in it: a record made 0666 under umask 0
    by an older run (or a file another user planted while the directory was open, then closed with chmod)
    could be rewritten by any local user through a directory others may enter (0755), and the next apply
    moved the held file, as root, where the record says. Such a file is refused too, naming it, before any
    change; nothing is repaired, since what it holds cannot be trusted. (Another owner needs root to set up.)"""
    from tests.node.nodecli import Node

    if how == "owner" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    node = Node(tmp_path)
    target = tmp_path / "etc" / "cron.d" / "planted"
    state = tmp_path / "var"
    held = state / "held-manifests" / str(target).strip("/").replace("/", "__")
    held.parent.mkdir(parents=True)
    held.write_text("* * * * * root id\n")
    (state / "stopped-clients.json").write_text(json.dumps([["manifest", str(target)]]))
    for path in (state, held.parent):
        os.chmod(str(path), 0o755)
    for path in (held, state / "stopped-clients.json"):
        os.chmod(str(path), 0o600)
    if where.startswith("held-manifests/"):
        where = "held-manifests/" + held.name
    path = state / where
    if how == "mode":
        os.chmod(str(path), 0o666)
        why = "is writable by others (mode 0666)"
    else:
        os.chown(str(path), 65534, 65534)
        why = "is owned by uid 65534"
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert res.rc == 1 and res.json["error"]["code"] == "state-dir-unsafe", res.json
    assert res.json["error"]["message"].startswith("the state directory %s holds %s, which %s" % (state, path, why))
    assert not target.exists() and held.exists() and res.json["changes"] == 0


def test_a_manifest_moved_across_bind_mounts_of_one_file_system_never_has_its_name_half_written(tmp_path,
                                                                                              monkeypatch):
    """The same file system mounted twice (the state directory bind-mounted from the manifests' disk, as a
    container or a node image may do): the devices agree (one st_dev), yet rename(2) refuses with EXDEV across
    the two mount points ("rename() does not work across different mount points, even if the same filesystem
    is mounted on both", rename(2)). Taken for one file system by its st_dev, the move went to shutil.move,
    whose fallback copies into the manifest's own name, unsynced: the half manifest the hidden copy exists to
    prevent. A rename that meets EXDEV now takes the hidden, synced copy as another file system does."""
    import errno

    from tests.support.kills import Killed

    from node_bootstrap.host import clients

    state = tmp_path / "state"
    state.mkdir()
    manifest = tmp_path / "manifests" / "dp.yml"
    manifest.parent.mkdir()
    text = "kind: Pod\n" + "# padding\n" * 5000
    manifest.write_text(text)
    control = ClientControl(parse_clients("manifest:%s" % manifest), lambda argv: (0, ""), str(state),
                            lambda line: None)
    held = control._held_path(parse_clients("manifest:%s" % manifest)[0])
    real_rename, seen = os.rename, []

    def rename(src, dst, *args, **kwargs):  # the two directories are two mount points of one file system
        if os.path.dirname(os.path.abspath(str(src))) != os.path.dirname(os.path.abspath(str(dst))):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(clients.os, "rename", rename)
    _kill_at_the_copys_fsync(monkeypatch, held, seen)
    with pytest.raises(Killed):
        control.stop()
    assert seen == [(True, False)]  # a hidden copy, synced before it takes its place
    monkeypatch.undo()
    _next_run_puts_the_whole_manifest_back(manifest, state, text)


def test_a_manifest_that_is_a_symbolic_link_is_put_back_as_it_was(tmp_path):
    """The device plugin's manifest as a symbolic link (a node image keeping it with the rest of its files):
    rename(2) held the link itself aside, and putting it back refused it as "a symbolic link, not a manifest
    this tool held aside", so the device plugin stayed down after every run. The link is held aside and put
    back as it was; the file it names is never moved."""
    node, manifest, held = _manifest_node(tmp_path)
    real = tmp_path / "image" / "nvidia-device-plugin.yml"
    real.parent.mkdir()
    manifest.rename(real)
    os.symlink(str(real), str(manifest))
    res = node.run("apply", "--sequence", "3g.20gb-3g.20gb")
    assert res.rc == 0 and res.json["changes"] > 0 and "client_problems" not in res.json, res.json
    assert os.path.islink(str(manifest)) and os.readlink(str(manifest)) == str(real)
    assert real.read_text() == "kind: Pod\n" and not os.path.lexists(str(held))
    assert json.loads((tmp_path / "var" / "stopped-clients.json").read_text()) == []


def test_a_manifest_link_moved_across_mount_points_stays_a_link(tmp_path, monkeypatch):
    """Across mount points (EXDEV) the copy read through a link: the held manifest became a file, and the
    link came back as a copy of what it named, no longer following it. The link is made again beside its
    place, under the hidden name, then renamed, as the rename within one mount point moves it."""
    import errno

    from node_bootstrap.host import clients

    real_rename = os.rename

    def rename(src, dst, *args, **kwargs):  # the state directory another mount point than the manifests
        if os.path.dirname(os.path.abspath(str(src))) != os.path.dirname(os.path.abspath(str(dst))):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(clients.os, "rename", rename)
    real = tmp_path / "image" / "dp.yml"
    real.parent.mkdir()
    real.write_text("kind: Pod\n")
    manifest = tmp_path / "manifests" / "dp.yml"
    manifest.parent.mkdir()
    os.symlink(str(real), str(manifest))
    control = ClientControl(parse_clients("manifest:%s" % manifest), lambda argv: (0, ""), str(tmp_path / "state"),
                            lambda line: None)
    held = control._held_path(parse_clients("manifest:%s" % manifest)[0])
    stopped = control.stop()
    assert not os.path.lexists(str(manifest)) and os.readlink(held) == str(real)
    assert control.start(stopped) == []
    assert os.readlink(str(manifest)) == str(real) and real.read_text() == "kind: Pod\n"
    assert os.listdir(str(manifest.parent)) == ["dp.yml"] and os.listdir(os.path.dirname(held)) == []


@pytest.mark.parametrize("way", ["held-aside", "put-back"])
def test_a_manifest_moved_across_mount_points_is_renamed_durably_before_its_source_goes(tmp_path, monkeypatch,
                                                                                         way):
    """The copy was synced, but not its rename: the source, on the other file system, was removed at once,
    and each file system commits its own journal. A power loss could keep the removal and lose the rename,
    leaving the manifest under no name but the hidden copy's, which no run puts back (the device plugin gone
    for good). The directory the copy is renamed in is synced before the source is removed."""
    import errno

    from node_bootstrap.host import clients

    real_rename, real_fsync, real_remove, events = os.rename, os.fsync, os.remove, []

    def rename(src, dst, *args, **kwargs):  # the state directory another mount point than the manifests
        if os.path.dirname(os.path.abspath(str(src))) != os.path.dirname(os.path.abspath(str(dst))):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        events.append(("rename", str(dst)))
        return real_rename(src, dst, *args, **kwargs)

    def fsync(fd):
        events.append(("fsync", os.readlink("/proc/self/fd/%d" % fd)))
        return real_fsync(fd)

    def remove(path, *args, **kwargs):
        events.append(("remove", str(path)))
        return real_remove(path, *args, **kwargs)

    manifest = tmp_path / "manifests" / "dp.yml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    control = ClientControl(parse_clients("manifest:%s" % manifest), lambda argv: (0, ""), str(tmp_path / "state"),
                            lambda line: None)
    held = control._held_path(parse_clients("manifest:%s" % manifest)[0])
    stopped = control.stop() if way == "put-back" else None
    for name, double in (("rename", rename), ("fsync", fsync), ("remove", remove)):
        monkeypatch.setattr(clients.os, name, double)
    if way == "held-aside":
        control.stop()
        src, dst = str(manifest), held
    else:
        control.start(stopped)
        src, dst = held, str(manifest)
    renamed = events.index(("rename", dst))
    removed = events.index(("remove", src))
    assert ("fsync", os.path.dirname(dst)) in events[renamed:removed], events
