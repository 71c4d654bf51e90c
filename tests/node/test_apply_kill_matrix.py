"""This bundle's apply killed (SIGKILL) at a seeded sample of its write points, then rerun or rebooted: one
invariant checker decides. A point is either a file write under the simulated host (the stopped-clients and
queued records, the held manifest, the simulated systemd, the node's labels and annotations, the boot and
holders units, the reboot record: tests/node/upgrade.py's audit-hook killer) or a GPU write (``--sim-fault
crash-after:N``). test_faults.py kills at every GPU write with a rerun, test_client_kills.py and
test_bootunit.py at the writes of one part each; none killed the whole apply at its file writes and followed it
with a reboot. ``KILL_MATRIX_SEED`` picks another sample (its value is in every assertion message);
``KILL_MATRIX_ALL=1`` tries every point."""

import os
import random

import pytest

from tests.node.upgrade import UpgradeNode

A = ("apply", "--boot-unit", "--sequence", "3g.20gb-3g.20gb")
B = ("apply", "--boot-unit", "--sequence", "3g.20gb-2g.10gb-1g.5gb")
A_LAYOUT = [[(9, 0, 1), (9, 4, 1)]] * 2  # (profile id, start, compute instances) per GPU
B_LAYOUT = [[(9, 0, 1), (14, 4, 1), (19, 6, 1)]] * 2
FILE_POINTS = 45  # more than the writes an apply of B after A makes under the host (fewer than 40)
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
