"""The holder scan never hangs the node: a file system that never answers (a FUSE daemon gone, a hard
NFS mount whose server is) cannot keep apply from starting its clients again, labelling the node and
freeing the lock (issue 36, item 2).

There is no FUSE here: the stall stand-in is the scan's stat seam waiting on an Event nobody sets, in
the worker process (a real stat on such a mount waits in the kernel the same way; SIGKILL does not end
it, which the stand-in ``kill`` that ends nothing models). A fake /proc tree (fd links, fdinfo,
mountinfo laid out as proc(5) describes them) stands in for the kernel's where the test says so.
"""

import json
import os
import re
import signal
import stat
import threading

import pytest

from node_bootstrap.errors import NodeFailure
from node_bootstrap.host import bounded, holders as hs
from node_bootstrap.host.holders import Holder, Scope
from node_bootstrap.host.lock import NodeLock
from tests.node.nodecli import Holder as HolderProcess, Node

STATE = "nvidia.com/mig.config.state"
REASON = "ack-mig-hook/mig-config-reason"
GPU_RDEV = os.makedev(195, 0)  # /dev/nvidia0: major 195 (nvidia-frontend), minor = the GPU's minor

MOUNTINFO = (
    # proc(5): id parent major:minor root mount-point options [optional fields] - type source super-options
    "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
    "24 27 0:6 / /dev rw,nosuid shared:2 - devtmpfs devtmpfs rw,size=100k\n"
    "27 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
    "40 27 0:45 / /mnt/fuse rw,nosuid,nodev,relatime shared:30 - fuse.sshfs user@host:/ rw,user_id=0\n"
    "41 27 0:46 / /mnt/nfs rw,relatime shared:31 - nfs4 server:/export rw,vers=4.1\n"
    "42 27 0:47 / /run/ctr/dev rw,nosuid master:5 - tmpfs tmpfs rw,mode=755\n"
)


def _stall_forever():
    # Never set: the daemon never answers. Bounded only so that a regression fails instead of hanging.
    threading.Event().wait(120)


class FakeProc(object):
    """A /proc tree: per process its fd links (to paths that need not exist), fdinfo and mountinfo."""

    def __init__(self, root):
        self.root = str(root)
        os.makedirs(self.root)

    def process(self, pid, command, fds):
        """``fds``: fd number -> (link target, mount id)."""
        base = os.path.join(self.root, str(pid))
        os.makedirs(os.path.join(base, "fd"))
        os.makedirs(os.path.join(base, "fdinfo"))
        with open(os.path.join(base, "comm"), "w") as fh:
            fh.write(command + "\n")
        with open(os.path.join(base, "mountinfo"), "w") as fh:
            fh.write(MOUNTINFO)
        for fd, (target, mnt) in fds.items():
            os.symlink(target, os.path.join(base, "fd", str(fd)))
            with open(os.path.join(base, "fdinfo", str(fd)), "w") as fh:
                fh.write("pos:\t0\nflags:\t0100002\nmnt_id:\t%d\nino:\t7\n" % mnt)

    def link(self, pid, fd):
        return os.path.join(self.root, str(pid), "fd", str(fd))


class RecordingStat(object):
    """The scan's stat seam: the GPU's device file and every container node answer as the GPU's
    character device; a path in ``stall`` never answers, one in ``forbidden`` fails the test at once."""

    def __init__(self, stall=(), forbidden=()):
        self.calls = []
        self.stall = set(stall)
        self.forbidden = set(forbidden)

    def __call__(self, path):
        self.calls.append(path)
        assert path not in self.forbidden, "a stat of %s: it could wait for good" % path
        if path in self.stall:
            _stall_forever()
        return os.stat_result((stat.S_IFCHR | 0o666, 1, 6, 1, 0, 0, 0, 0, 0, 0), {"st_rdev": GPU_RDEV})


# --- what procfs says about the mount under an fd (pure) -----------------------------------------

def test_the_mount_type_under_an_fd_comes_from_fdinfo_and_mountinfo():
    assert hs.fd_mount_id("pos:\t0\nflags:\t0100002\nmnt_id:\t40\nino:\t7\n") == 40
    assert hs.fd_mount_id("pos:\t0\nflags:\t0100002\n") is None  # before Linux 3.15: not said
    types = hs.mount_types(MOUNTINFO + "garbage line\n")
    assert types == {22: "proc", 24: "devtmpfs", 27: "ext4", 40: "fuse.sshfs", 41: "nfs4", 42: "tmpfs"}
    assert [t for t in sorted(types.values()) if hs.may_hang(t)] == ["fuse.sshfs", "nfs4"]
    assert not hs.may_hang(None) and hs.may_hang("fuseblk") and hs.may_hang("cifs") and hs.may_hang("virtiofs")


def test_a_file_named_like_a_gpu_on_a_fuse_or_nfs_mount_is_never_stated(tmp_path):
    """The filed case: a process holds a FUSE file named like a GPU device. Its stat could wait for good,
    so it is never made; a container's own node (on its tmpfs /dev) still is, and counts by number."""
    proc = FakeProc(tmp_path / "proc")
    proc.process(100, "fuse-user", {3: ("/mnt/fuse/nvidia0", 40), 4: ("/mnt/nfs/nvidia-smi.log", 41)})
    proc.process(200, "in-a-pod", {5: ("/dev/nvidia0", 42)})  # the container's /dev, another inode
    stat_path = RecordingStat(forbidden=[proc.link(100, 3), proc.link(100, 4)])
    found = hs.holders({"/host/dev/nvidia0"}, proc=proc.root, ignore_pids=[], stat_path=stat_path)
    assert found == [Holder(200, "in-a-pod", ["/dev/nvidia0"])]
    assert stat_path.calls == ["/host/dev/nvidia0", proc.link(200, 5)]


def test_a_mount_point_that_is_not_utf8_never_hides_the_fuse_mount_of_a_file_named_like_a_gpu(tmp_path):
    """mountinfo gives mount points as the bytes they were made with (proc(5) escapes only space, tab, newline
    and backslash). Read as text, one mount point of a process that is not UTF-8 (a user's FUSE mount on a
    directory named in Latin-1) made the whole file unreadable: no fd had a known type, and that user's FUSE file
    named like a GPU device was stated, a stat that may never return. Read as bytes, the types stay known."""
    proc = FakeProc(tmp_path / "proc")
    proc.process(100, "fuse-user", {3: ("/mnt/fuse/nvidia0", 40)})
    with open(os.path.join(proc.root, "100", "mountinfo"), "ab") as fh:
        fh.write(b"43 27 0:48 / /home/u/caf\xe9 rw,nosuid shared:32 - fuse.sshfs u@h:/ rw,user_id=1000\n")
    stat_path = RecordingStat(forbidden=[proc.link(100, 3)])
    assert hs.holders({"/host/dev/nvidia0"}, proc=proc.root, ignore_pids=[], stat_path=stat_path) == []
    assert stat_path.calls == ["/host/dev/nvidia0"]


def test_an_fd_whose_mount_procfs_does_not_name_is_stated_in_the_bounded_look(tmp_path):
    """An older kernel's fdinfo has no mnt_id: the stat is made, with the deadline as the guard."""
    proc = FakeProc(tmp_path / "proc")
    proc.process(300, "old-kernel", {3: ("/srv/nvidia1", 27)})
    os.remove(os.path.join(proc.root, "300", "fdinfo", "3"))
    stat_path = RecordingStat()
    found = hs.holders({"/dev/nvidia0"}, proc=proc.root, ignore_pids=[], stat_path=stat_path)
    assert found == [Holder(300, "old-kernel", ["/srv/nvidia1"])]
    assert proc.link(300, 3) in stat_path.calls


# --- the worker: a stat that never answers is given up on ----------------------------------------

def test_a_look_that_never_answers_fails_with_the_pid_and_fd_it_waits_on(tmp_path):
    proc = FakeProc(tmp_path / "proc")
    proc.process(4242, "stuck-reader", {7: ("/var/lib/data/nvidia0", 27)})  # ext4 by mountinfo: stated
    stat_path = RecordingStat(stall=[proc.link(4242, 7)])
    logged = []

    def find(note):
        return hs.look(Scope(str(tmp_path / "dev" / "nvidia[0-9]*"), (None,)), proc=proc.root, ignore_pids=[],
                       stat_path=stat_path, note=note)

    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    with pytest.raises(NodeFailure) as err:
        hs.wait_released(find, 30, logged.append, scan_timeout=0.5)
    assert err.value.code == "holder-scan-timeout" and err.value.exit_code == 1
    assert "no answer within 0.5s from a stat of pid 4242's %s (-> /var/lib/data/nvidia0)" % proc.link(4242, 7) \
        in err.value.message
    assert "the GPUs were not changed" in err.value.message and "\n" not in err.value.message
    assert logged == []  # no holder was ever reported: the look did not finish


def test_a_worker_that_sigkill_does_not_end_is_left_behind_holding_nothing_of_ours(tmp_path):
    """SIGKILL does not end a wait in a hung FUSE request: the stand-in ``kill`` ends nothing. The caller
    still gets its answer in time, and the stuck child holds neither the node lock (an flock is the open
    file's, which a fork shares), nor the caller's output, nor any other descriptor of ours."""
    lock_path = str(tmp_path / "apply.lock")
    kills = []
    with NodeLock(lock_path, timeout=0):
        def work(note):
            note("a stat of pid 77's /proc/77/fd/9 (-> /mnt/fuse/nvidia0)")
            _stall_forever()
            return "answered"

        with pytest.raises(bounded.NoAnswer) as err:
            bounded.call(work, 0.3, kill=lambda pid, sig: kills.append((pid, sig)))
    assert err.value.last == "a stat of pid 77's /proc/77/fd/9 (-> /mnt/fuse/nvidia0)"
    [(child, sig)] = kills
    assert sig == signal.SIGKILL
    try:
        assert os.path.exists("/proc/%d" % child) and child in bounded._abandoned  # left behind, still there
        # the lock is free while the stuck child lives: another apply can take it
        with NodeLock(lock_path, timeout=0):  # (timeout 0: one try, else NodeFailure "locked")
            pass
        # all it has open: its pipe to us (gone on our side) and /dev/null as stdin, stdout and stderr
        fd_dir = "/proc/%d/fd" % child
        targets = sorted(os.readlink(os.path.join(fd_dir, fd)) for fd in os.listdir(fd_dir))
        assert targets[:3] == ["/dev/null"] * 3 and len(targets) == 4 and targets[3].startswith("pipe:")
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        bounded._abandoned.remove(child)


def test_each_look_has_at_most_10s_and_never_more_than_the_wait_has_left(monkeypatch):
    given = []
    now = [0.0]

    def fake_look(find, timeout, kill):
        given.append(timeout)
        now[0] += 0.5
        return find(None)

    monkeypatch.setattr(hs, "bounded_look", fake_look)
    held = [Holder(9, "slow", ["/dev/nvidia0"])]
    with pytest.raises(NodeFailure):
        hs.wait_released(lambda note: held, 12, lambda text: None, interval=1.0,
                         sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    # a look every 1.5 s for 12 s: 10 s while more is left, then what is left, at least 1 s for the last one
    assert given == [10.0, 10.0, 9.0, 7.5, 6.0, 4.5, 3.0, 1.5, 1.0] and hs.SCAN_TIMEOUT == 10.0


def test_a_worker_answers_and_is_reaped():
    def answers(note):
        note("one step")
        return {"held": [1, "x"]}

    def breaks(note):
        raise ValueError("no such thing")

    before = set(bounded._abandoned)  # an earlier test's stuck child may be reaped meanwhile: only new ones count
    assert bounded.call(answers, 30) == {"held": [1, "x"]}
    with pytest.raises(bounded.WorkFailed, match="ValueError: no such thing"):
        bounded.call(breaks, 30)
    assert set(bounded._abandoned) - before == set()


def test_the_scan_runs_in_a_child_that_ignores_the_caller_and_reports_real_holders(tmp_path):
    """Through the real /proc: a process holding the file is found from the child, and the caller's own
    descriptor (apply's NVML holds the GPUs) is not counted, whichever process looks."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").write_text("")
    mine = open(str(dev / "nvidia0"))
    other = HolderProcess(tmp_path, "monitor", [str(dev / "nvidia0")])
    try:
        me = os.getpid()
        scope = Scope(str(dev / "nvidia[0-9]*"), (0,))
        found = hs.bounded_look(lambda note: hs.look(scope, ignore_pids=[me], note=note), 30)
        assert found == [Holder(other.pid, "monitor", [str(dev / "nvidia0")])]
    finally:
        other.stop()
        mine.close()


# --- the whole apply, through the node CLI ----------------------------------------------------------

def test_apply_whose_scan_hangs_fails_restarts_its_clients_and_frees_the_lock(tmp_path, holders):
    """Fault ``hung-mount``: a process holds a file named like a GPU device on a mount that never answers.
    The GPUs' files are links to /dev/full, a character device standing in for a GPU's (the scan stats
    an fd's target only where device numbers can tell). Apply fails ``holder-scan-timeout`` naming the
    pid and fd, the stopped client is back, nothing changed, and the next apply takes the lock."""
    manifest = tmp_path / "manifests" / "nvidia-device-plugin.yml"
    manifest.parent.mkdir()
    manifest.write_text("kind: Pod\n")
    node = Node(tmp_path, count=1, clients="manifest:%s" % manifest)
    node.kube_args = []  # labels go to <state>.host/node-labels.json
    assert node.run("status").rc == 0
    before = open(node.state).read()
    dev = tmp_path / "dev"
    dev.mkdir()
    os.symlink("/dev/full", str(dev / "nvidia0"))
    (tmp_path / "fuse").mkdir()
    (tmp_path / "fuse" / "nvidia0").write_text("")  # plain file: a FUSE file named like a GPU device
    stuck = HolderProcess(tmp_path, "fuse-reader", [str(tmp_path / "fuse" / "nvidia0")])
    holders.append(stuck)
    args = ("apply", "--sequence", "3g.20gb-3g.20gb", "--gpu-device-glob", str(dev / "nvidia[0-9]*"),
            "--client-stop-timeout", "1")
    res = node.run(*args, "--sim-fault", "hung-mount")
    assert res.rc == 1, res.stderr
    error = res.json["error"]
    assert res.json["outcome"] == "failed" and error["code"] == "holder-scan-timeout"
    # the look stops at the first process that stalls it (another test's holder may come first)
    named = re.search(r"no answer within 1s from a stat of pid ([0-9]+)'s /proc/\1/fd/[0-9]+ \(-> (\S+)\)",
                      error["message"])
    assert named and os.path.basename(named.group(2)).startswith("nvidia"), error["message"]
    assert "Traceback" not in res.stderr
    assert res.json["changes"] == 0 and open(node.state).read() == before
    assert manifest.read_text() == "kind: Pod\n"  # the stopped client was started again
    with open(os.path.join(node.host, "node-labels.json")) as fh:
        labels = json.load(fh)
    assert [h["labels"][STATE] for h in labels["history"]] == ["pending", "failed"]
    assert labels["annotations"][REASON] == error["message"]
    # the lock is free, and nothing the failed run left stands in the way
    with NodeLock(os.path.join(node.dir, "apply.lock"), timeout=0):
        pass
    res = node.run(*args)
    assert res.rc == 0, res.stderr
    assert node.layout(0) == [(9, 0, 1), (9, 4, 1)]


def test_hung_mount_is_a_known_fault():
    from node_bootstrap.driver.sim.faults import KINDS, parse_faults

    assert parse_faults(["hung-mount"]).hung_mount and "never answers" in KINDS["hung-mount"]
    assert not parse_faults([]).hung_mount
