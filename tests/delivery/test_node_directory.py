"""What runs as root is what we built (issue 30 item 2): the node runner, run for real, refuses a node
directory another user could have prepared (sshd's StrictModes rule: owner root, no group or other write,
up the whole path) and checks the cached bundle's SHA-256 and contents before EVERY run, not only when the
parts arrive. The function refuses shared places by name before any node is contacted."""

import os
import subprocess

import pytest

from functions.base.settings import SettingsError, load_settings, node_directory_problem
from functions.delivery import node_runner
from functions.delivery.node_script import CommandError, node_args, render
from functions.delivery.outcome import parse_output
from tests.delivery.conftest import node_dirs


def run(maker, root=None):
    script = render(maker.bundle.digest, node_args({"kind": "size", "value": "1g.5gb"}), maker.deadline_s, "i-1",
                    {}, root or maker.root, maker.python)
    proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, timeout=60)
    return proc.returncode, parse_output(proc.stdout.decode())


def put_parts(maker, root=None):
    incoming = os.path.join(root or maker.root, "incoming")
    os.makedirs(incoming, mode=0o700, exist_ok=True)
    for name, chunk in zip(maker.bundle.part_names(200), maker.bundle.chunks(200)):
        with open(os.path.join(incoming, name), "wb") as fh:
            fh.write(chunk)


def another_owner(path):
    """Make ``path`` belong to someone else (as root: nobody's uid), returning the uid the runner takes."""
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        return 0
    return os.geteuid() + 1  # the runner's own uid if it ran as another user: the owner is no longer trusted


@pytest.mark.parametrize("mode, why", [(0o777, "writable by group and others"), (0o1777, "writable by group and others"),
                                       (0o775, "writable by group"), (0o757, "writable by others")])
def test_a_writable_directory_above_the_node_directory_is_refused_and_nothing_runs(maker, tmp_path, mode, why):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), mode)
    root = str(shared / "node")
    code, doc = run(maker, root)
    assert code == 2 and doc["error"]["code"] == "unsafe-node-directory"
    message = doc["error"]["message"]
    assert "%s is %s" % (shared, why) in message and "owned by root" in message
    assert not os.path.exists(root)  # refused before anything was created, let alone run


def test_a_node_directory_writable_by_others_or_owned_by_another_user_is_refused(maker, fake_bundle):
    put_parts(maker)
    os.chmod(maker.root, 0o707)
    code, doc = run(maker)
    assert code == 2 and "%s is writable by others (mode 0707)" % maker.root in doc["error"]["message"]
    os.chmod(maker.root, 0o700)
    uid = another_owner(maker.root)
    assert "is owned by uid" in node_runner.unsafe(maker.root, uid)
    if uid == 0:  # really owned by another user: the runner itself refuses
        code, doc = run(maker)
        assert code == 2 and "%s is owned by uid 65534, not by root" % maker.root in doc["error"]["message"]
        assert node_dirs(maker.root) == []


def test_a_link_to_a_shared_place_is_judged_where_it_leads(maker, tmp_path):
    shared = tmp_path / "shared"
    (shared / "node").mkdir(parents=True)
    os.chmod(str(shared), 0o1777)
    link = tmp_path / "node-link"
    link.symlink_to(shared / "node")
    code, doc = run(maker, str(link))
    assert code == 2 and "%s is writable by group and others" % shared in doc["error"]["message"]


def test_the_cached_bundle_is_checked_before_every_run(maker, tmp_path):
    put_parts(maker)
    assert run(maker)[0] == 0
    target = os.path.join(maker.root, "bundles", maker.bundle.digest)
    marker = tmp_path / "ran"
    # Something dropped next to the bundle that Python would import from PYTHONPATH by itself:
    with open(os.path.join(target, "sitecustomize.py"), "w") as fh:
        fh.write("open(%r, 'w').close()\n" % str(marker))
    code, doc = run(maker)
    assert code == 10 and doc["bundle"] == "missing" and "failed its SHA-256 check" in doc["error"]["message"]
    assert not marker.exists() and node_dirs(maker.root) == []  # never run, and the cache is gone
    # a member changed in place, tar and all: the tar no longer has the bundle's SHA-256
    put_parts(maker)
    assert run(maker)[0] == 0
    main = os.path.join(target, "node_bootstrap", "__main__.py")
    with open(main, "a") as fh:
        fh.write("\nopen(%r, 'w').close()\n" % str(marker))
    assert run(maker)[0] == 10 and not marker.exists()
    # the parts arrive again (the transport's answer to bundle-missing): rebuilt and run
    put_parts(maker)
    code, doc = run(maker)
    assert code == 0 and doc["outcome"] == "success" and node_dirs(maker.root) == [maker.bundle.digest]


def test_an_old_cache_without_its_tar_is_rebuilt_from_parts_in_the_same_run(maker):
    put_parts(maker)
    assert run(maker)[0] == 0
    os.unlink(os.path.join(maker.root, "bundles", maker.bundle.digest, node_runner.BUNDLE_TAR))
    put_parts(maker)  # parts still there: no round trip needed
    code, doc = run(maker)
    assert code == 0 and doc["outcome"] == "success"


@pytest.mark.parametrize("path", ["/tmp/x", "/tmp", "/var/tmp/ack", "/dev/shm/ack", "/run/lock/x", "/var/lock/x",
                                  "/proc/1", "/sys/fs/x", "/var//lib/x", "/var/lib/./x"])
def test_the_function_refuses_shared_places_before_any_node_is_contacted(path):
    with pytest.raises(SettingsError) as info:
        load_settings({"ACK_MIG_NODE_ROOT": path})
    text = str(info.value)
    assert "ACK_MIG_NODE_ROOT" in text and "\n" not in text and "/var/lib/ack-mig-hook" in text
    with pytest.raises(CommandError):
        render("0" * 64, [], 30, root=path)


def test_ordinary_places_are_taken():
    for path in ("/var/lib/ack-mig-hook", "/srv/mig-hook", "/opt/ack/tmp", "/var/lib/tmpfiles"):
        assert node_directory_problem(path) == "" and load_settings({"ACK_MIG_NODE_ROOT": path})
