"""This bundle's apply killed (SIGKILL) at a seeded sample of its write points, then rerun or rebooted: one
invariant checker decides. A point is either a file write under the simulated host (the stopped-clients and
queued records, the held manifest, the simulated systemd, the node's labels and annotations, the boot and
holders units, the reboot record: tests/node/upgrade.py's audit-hook killer) or a GPU write (``--sim-fault
crash-after:N``). test_faults.py kills at every GPU write with a rerun, test_client_kills.py and
test_bootunit.py at the writes of one part each; none killed the whole apply at its file writes and followed it
with a reboot. A state directory on a file system of its own adds the moves' hidden copies, killed at each
point they add. ``KILL_MATRIX_SEED`` picks another sample (its value is in every assertion message);
``KILL_MATRIX_ALL=1`` tries every point."""

import os
import random
import shutil
import tempfile

import pytest

from tests.node.upgrade import UpgradeNode

A = ("apply", "--boot-unit", "--sequence", "3g.20gb-3g.20gb")
B = ("apply", "--boot-unit", "--sequence", "3g.20gb-2g.10gb-1g.5gb")
A_LAYOUT = [[(9, 0, 1), (9, 4, 1)]] * 2  # (profile id, start, compute instances) per GPU
B_LAYOUT = [[(9, 0, 1), (14, 4, 1), (19, 6, 1)]] * 2
FILE_POINTS = 45  # at least the writes an apply of B after A makes under the host (40: checked below)
GPU_POINTS = 12  # A to B: 12 mutating calls


class LabelledNode(UpgradeNode):
    """An UpgradeNode whose runs label the simulated node (its stand-in under the host), so the labels'
    writes are kill points and the final state is checked."""

    def args(self, *command):
        return [a for a in super(LabelledNode, self).args(*command) if a != "--no-label"]

    def labels(self):
        doc = self.record_at("node-labels.json") or {}
        return doc.get("labels", {}), doc.get("annotations", {})

    def record_at(self, relative):
        import json

        path = self.path(relative)
        if not os.path.exists(path):
            return None
        with open(path) as fh:
            return json.load(fh)


def settled(node, layout, why, at_boot=False):
    """What is wrong with a node that should hold ``layout`` with nothing owed (a list; empty: settled).
    ``at_boot``: after the boot unit's run, which installs no unit: an enable the killed install owed is paid
    by the next apply (bootunit.install), and a unit enabled before stays enabled over a rewrite."""
    wrong = []
    if node.layout() != layout:
        wrong.append("layout %s" % node.layout())
    running = node.clients_running()
    if not all(running.values()):
        wrong.append("clients not running: %s" % sorted(k for k, v in running.items() if not v))
    if node.record():
        wrong.append("stopped-clients record %s" % node.record())
    held = node.path("var/lib/ack-mig-hook/held-manifests")
    if os.path.isdir(held) and os.listdir(held):
        wrong.append("held manifests %s" % os.listdir(held))
    if node.record("reboot-requested.json"):
        wrong.append("reboot record left")
    if node.unit_text() is None or (node.enable_pending() and not at_boot):
        wrong.append("boot unit %s, enable pending %s" % (node.unit_text() is not None, node.enable_pending()))
    labels, annotations = node.labels()
    if labels.get("nvidia.com/mig.config.state") != "success" or "ack-mig-hook/mig-config-reason" in annotations:
        wrong.append("label %s reason %s" % (labels.get("nvidia.com/mig.config.state"),
                                             annotations.get("ack-mig-hook/mig-config-reason")))
    return ["%s: %s" % (why, w) for w in wrong]


def check(node, after):
    """The one invariant: after the kill, ``after`` ("rerun": apply B again; "reboot": the boot unit's run)
    leaves a settled node, at B, or at A when the reboot came before B's request was installed; then apply
    B converges, a second apply of B changes nothing, and a reboot's boot run brings B back."""
    wrong = []
    if after == "reboot":
        boot = node.boot()
        if boot.rc != 0:
            wrong.append("boot run: rc %s %s" % (boot.rc, boot.json.get("error") or boot.stderr[-300:]))
        layout = B_LAYOUT if node.layout() == B_LAYOUT else A_LAYOUT
        wrong += settled(node, layout, "after the boot run", at_boot=True)
    run = node.deliver("new", *B)
    if run.rc != 0 or run.json.get("outcome") != "success":
        wrong.append("apply B: rc %s %s" % (run.rc, run.json.get("error") or run.stderr[-300:]))
    wrong += settled(node, B_LAYOUT, "after apply B")
    node.clear_calls()
    again = node.deliver("new", *B)
    if again.json.get("changes") != 0 or [c for c in node.calls() if "is-active" not in c]:
        wrong.append("second apply B: changes %s, systemctl %s" % (again.json.get("changes"), node.calls()))
    boot = node.boot()
    if boot.rc != 0 or node.layout() != B_LAYOUT:
        wrong.append("boot after B: rc %s layout %s" % (boot.rc, node.layout()))
    return wrong


def cases():
    seed = int(os.environ.get("KILL_MATRIX_SEED", "4711"))
    points = [("file", k) for k in range(FILE_POINTS)] + [("gpu", n) for n in range(1, GPU_POINTS + 1)]
    if os.environ.get("KILL_MATRIX_ALL") != "1":
        rng = random.Random(seed)
        points = sorted(rng.sample(points[:FILE_POINTS], 5) + rng.sample(points[FILE_POINTS:], 2))
    rng = random.Random(seed + 1)
    return [(seed, kind, k, rng.choice(("rerun", "reboot"))) for kind, k in points]


@pytest.fixture(scope="module")
def bundle():
    from functions.delivery import bundle as bundle_module

    return bundle_module.build()


@pytest.mark.slow
@pytest.mark.parametrize("seed, kind, k, after", cases())
def test_an_apply_killed_at_a_write_is_settled_by_a_rerun_or_a_reboot(tmp_path, bundle, seed, kind, k, after):
    node = LabelledNode(str(tmp_path), old=bundle, new=bundle)
    first = node.deliver("new", *A)
    assert first.rc == 0 and node.layout() == A_LAYOUT, first.stderr
    if kind == "file":
        killed = node.deliver("new", *B, kill_at_write=k)
    else:
        killed = node.deliver("new", *(B + ("--sim-fault", "crash-after:%d" % k)))
    labels, _ = node.labels()
    # killed before any final word: the label says the old success or pending, never success at a mixed layout
    if killed.rc != 0 and labels.get("nvidia.com/mig.config.state") == "success":
        assert node.layout() in (A_LAYOUT, B_LAYOUT), (seed, kind, k, node.layout())
    wrong = check(node, after)
    assert not wrong, "seed %d: killed at %s write %d, then %s: %s" % (seed, kind, k, after, "; ".join(wrong))


def writes_of_apply_b(node):
    """The writes (``"EVENT PATH"``) an apply of B after A makes where the killer counts them, each a kill point."""
    first = node.deliver("new", *A)
    assert first.rc == 0 and node.layout() == A_LAYOUT, first.stderr
    node.writes_log = os.path.join(node.dir, "writes.log")
    run = node.deliver("new", *B, kill_at_write=10 ** 6)
    node.writes_log = None
    assert run.rc == 0 and node.layout() == B_LAYOUT, run.stderr
    with open(os.path.join(node.dir, "writes.log")) as fh:
        return fh.read().splitlines()


def test_the_matrix_kills_after_every_write_an_apply_makes(tmp_path, bundle):
    """The matrix tries kill points 0..FILE_POINTS-1, each right before one write: a write an apply gains past
    that bound (a new record, a copy) would never be killed at, and no one would notice."""
    writes = writes_of_apply_b(LabelledNode(str(tmp_path), old=bundle, new=bundle))
    assert 0 < len(writes) <= FILE_POINTS, "raise FILE_POINTS: %d writes\n%s" % (len(writes), "\n".join(writes))


class OtherDiskNode(LabelledNode):
    """The state directory (/var/lib/ack-mig-hook) on a file system of its own (a tmpfs under /dev/shm, linked
    into the host): the held manifest then moves as a synced hidden copy, renamed, its source removed."""

    def prepare_host(self):
        super(OtherDiskNode, self).prepare_host()
        if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(self.host).st_dev:
            pytest.skip("no second file system here")
        self.disk = tempfile.mkdtemp(prefix="ack-mig-state-", dir="/dev/shm")  # 0700
        state = self.path("var/lib/ack-mig-hook")
        os.makedirs(os.path.dirname(state), exist_ok=True)
        os.symlink(self.disk, state)
        self.kill_roots = [self.disk]


def _hidden_copy_points(writes):
    """Each hidden copy's kill points: right after the copy (before its rename), after the rename (before the
    source is removed)."""
    opened = [i for i, w in enumerate(writes) if w.startswith("open ") and os.path.basename(w).startswith(".")]
    return [k for i in opened for k in (i + 1, i + 2)]


def other_disk_node(directory, bundle):
    os.mkdir(directory)
    return OtherDiskNode(directory, old=bundle, new=bundle)


@pytest.mark.slow
@pytest.mark.parametrize("after", ["rerun", "reboot"])
def test_an_apply_killed_in_a_move_across_file_systems_is_settled(tmp_path, bundle, after):
    """The hidden copy a move across file systems writes (held aside and put back: two copies, two points
    each) killed at, then rerun or rebooted: the one invariant checker decides, as for every other write."""
    nodes = []
    try:
        nodes.append(other_disk_node(str(tmp_path / "count"), bundle))
        points = _hidden_copy_points(writes_of_apply_b(nodes[-1]))
        assert len(points) == 4, points
        for k in points:
            nodes.append(other_disk_node(str(tmp_path / ("kill-%d" % k)), bundle))
            node = nodes[-1]
            assert node.deliver("new", *A).rc == 0
            assert node.deliver("new", *B, kill_at_write=k).rc != 0, k
            wrong = check(node, after)
            assert not wrong, "killed at write %d, then %s: %s" % (k, after, "; ".join(wrong))
    finally:
        for node in nodes:
            shutil.rmtree(node.disk, ignore_errors=True)
