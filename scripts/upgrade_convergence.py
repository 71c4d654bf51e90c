"""One-off sweep: does the node converge when the new bundle meets every state the old one (OLD, before the
node's state handling changed) can leave? And, reported only, does the old bundle cope with the new one's
state after a rollback?

    .venv/bin/python scripts/upgrade_convergence.py [--commit OLD] [--only NAME]

Each case is a fresh simulated node (tests/node/upgrade.py): the old bundle applies layout A with the boot
unit, then runs again and is killed at one point (each GPU write, ``--sim-fault crash-after:N``, and each
file write under the node's host, an audit hook's SIGKILL), or its ``systemctl enable`` fails; then the new
bundle delivers layout B. Converged: every GPU holds B, every GPU client stopped runs again, the
stopped-clients record is empty, the boot unit runs the new bundle with nothing owed (no enable-pending),
a rerun changes nothing and calls no systemctl, and a reboot's boot run brings B back. One line per case;
exit 1 when any case did not converge. tests/node/test_upgrade_convergence.py keeps representative cases.
"""

import argparse
import base64
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.node.upgrade import OLD, UpgradeNode, old_bundle  # noqa: E402
from tests.support.temproot import private_tmp  # noqa: E402

from functions.delivery import bundle as bundle_module  # noqa: E402

A = ("apply", "--boot-unit", "--sequence", "3g.20gb-3g.20gb")
B = ("apply", "--boot-unit", "--sequence", "3g.20gb-2g.10gb-1g.5gb")
# B as an auto pool's per-GPU request (version 2): the same layout, placed
B2 = ("apply", "--boot-unit", "--request-b64", base64.b64encode(json.dumps(
    {"version": 2, "kind": "per-gpu", "gpus": [
        {"index": i, "layout": [{"profile": "3g.20gb", "start": 0}, {"profile": "2g.10gb", "start": 4},
                                {"profile": "1g.5gb", "start": 6}]} for i in range(2)]}).encode()).decode())
MAX_POINTS = 80


def converged(node, run, layout_b):
    """What is wrong after the new bundle's apply of B (a list of lines; empty: converged)."""
    wrong = []
    if run.rc != 0 or run.json.get("outcome") != "success":
        wrong.append("new apply: rc %s %s" % (run.rc, run.json.get("error") or run.stderr[-300:]))
    if node.layout() != layout_b:
        wrong.append("layout %s" % node.layout())
    running = node.clients_running()
    if not all(running.values()):
        wrong.append("clients not running: %s" % sorted(k for k, v in running.items() if not v))
    if node.record():
        wrong.append("stopped-clients record %s" % node.record())
    held = node.path("var/lib/ack-mig-hook/held-manifests")
    if os.path.isdir(held) and os.listdir(held):
        wrong.append("held manifests %s" % os.listdir(held))
    if node.unit_bundle() != "new":
        wrong.append("boot unit runs %r" % node.unit_bundle())
    if node.enable_pending():
        wrong.append("enable-pending left")
    if node.record("reboot-requested.json"):
        wrong.append("reboot record left %s" % node.record("reboot-requested.json"))
    enables = [c for c in node.calls() if c.endswith("enable ack-mig-hook.service")]
    if run.json.get("boot_unit", {}).get("changed") and len(enables) != 1:
        wrong.append("unit changed, enabled %d times" % len(enables))
    node.clear_calls()
    again = node.deliver("new", *getattr(node, "final", B))
    if again.json.get("changes") != 0 or again.json.get("boot_unit", {}).get("changed") or \
            [c for c in node.calls() if "is-active" not in c]:
        wrong.append("rerun: changes %s, boot unit changed %s, systemctl %s" % (
            again.json.get("changes"), again.json.get("boot_unit", {}).get("changed"), node.calls()))
    boot = node.boot()
    if boot.rc != 0 or node.layout() != layout_b:
        wrong.append("boot: rc %s %s" % (boot.rc, boot.json.get("error") or boot.stderr[-300:]))
    return wrong


def sweep(name, bundles, first, killed, after, check, layout_b, base):
    """Cases ``name``: ``first`` (old A), then ``killed(node, k)`` for k = 0, 1, ... until a run finishes
    unkilled, then ``after`` (the other bundle) and ``check``."""
    failures = 0
    for k in range(MAX_POINTS):
        node = UpgradeNode(tempfile.mkdtemp(dir=base), **bundles)
        try:
            first(node)
            done = killed(node, k)
            result = after(node)
            wrong = check(node, result, layout_b)
            print("%-28s k=%-3d %s%s" % (name, k, "ok" if not wrong else "NOT CONVERGED: " + "; ".join(wrong),
                                         " (run finished: last point)" if done else ""))
            failures += bool(wrong)
            if done:
                break
        finally:
            node.remove()
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", default=OLD)
    parser.add_argument("--only", default="")
    opts = parser.parse_args()
    base = tempfile.mkdtemp(dir=private_tmp(), prefix="upgrade-")
    bundles = {"old": old_bundle(opts.commit), "new": bundle_module.build()}
    started = time.time()
    probe = UpgradeNode(tempfile.mkdtemp(dir=base), **bundles)
    probe.deliver("new", *B)
    layout_b = probe.layout()
    probe.remove()

    def old_a(node):
        assert node.deliver("old", *A).rc == 0

    def kill_gpu(node, k):
        run = node.deliver("old", *(B + ("--sim-fault", "crash-after:%d" % (k + 1))))
        return run.rc == 0

    def kill_write(command):
        def killed(node, k):
            return node.deliver("old", *command, kill_at_write=k).rc == 0
        return killed

    def failing_enable(node, k):
        state = node.systemd()
        state["failing"]["enable"] = "Failed to enable (injected)"
        node.write_systemd(state)
        node.deliver("old", *B)
        assert node.enable_pending(), "the old install failed its enable and owes it"
        state["failing"] = {}
        node.write_systemd(state)
        return True

    def new_b(node):
        node.clear_calls()
        return node.deliver("new", *B)

    def old_b2_killed(node, k):
        node.final = B2
        return node.deliver("old", *B2, kill_at_write=k).rc == 0

    def new_b2(node):
        node.clear_calls()
        return node.deliver("new", *B2)

    def new_install_then_b(node):
        node.deliver("new", "install-boot-unit", "--sequence", B[-1])
        node.clear_calls()
        return node.deliver("new", *B)

    def old_boot_killed(node, k):  # the old unit's boot run, killed at each write
        return node.boot(kill_at_write=k).rc == 0

    def old_killed_then_old_boot(node, k):  # the old run killed, a reboot, the old unit's boot run
        done = node.deliver("old", *B, kill_at_write=k).rc == 0
        node.boot()
        return done

    def old_reboot_required(node, k):  # the old run asks for a reboot (passthrough): its record, then a reboot
        run = node.deliver("old", *(B + ("--sim-fault", "passthrough")))
        assert run.json.get("outcome") == "reboot-required", run.json
        assert node.record("reboot-requested.json"), "no reboot record"
        from node_bootstrap.driver.sim import driver
        from node_bootstrap.driver.sim.store import SimStore
        with SimStore(node.state).transaction() as state:
            driver.reboot(state)
        return True

    def new_disable(node):
        node.final = ("disable",)
        return node.deliver("new", "disable")

    def disabled(node, run, layout_b):
        wrong = []
        if run.rc != 0 or node.layout() != [[], []]:
            wrong.append("new disable: rc %s %s layout %s" % (run.rc, run.json.get("error"), node.layout()))
        if not all(node.clients_running().values()) or node.record():
            wrong.append("clients %s record %s" % (node.clients_running(), node.record()))
        if node.unit_text() is not None or node.enable_pending():
            wrong.append("unit left %s, pending %s" % (node.unit_bundle(), node.enable_pending()))
        node.clear_calls()
        again = node.deliver("new", "disable")
        if again.json.get("changes") != 0 or [c for c in node.calls() if "is-active" not in c]:
            wrong.append("rerun: %s %s" % (again.json.get("changes"), node.calls()))
        return wrong

    cases = [
        ("old-reboot-required/new-apply", lambda node: None, old_reboot_required, new_b),
        ("old-boot-kill/new-apply", old_a, old_boot_killed, new_b),
        ("old-per-gpu-kill/new-per-gpu", old_a, old_b2_killed, new_b2),
        ("old-kill+old-boot/new-apply", old_a, old_killed_then_old_boot, new_b),
        ("old-gpu-kill/new-apply", old_a, kill_gpu, new_b),
        ("old-write-kill/new-apply", old_a, kill_write(B), new_b),
        ("old-install-kill/new-install", old_a, kill_write(("install-boot-unit", "--sequence", B[-1])),
         new_install_then_b),
        ("old-enable-failed/new-apply", old_a, failing_enable, new_b),
    ]
    failures = 0
    for name, first, killed, after in cases:
        if opts.only and opts.only not in name:
            continue
        failures += sweep(name, bundles, first, killed, after, converged, layout_b, base)
    if not opts.only or "disable" in opts.only:
        failures += sweep("old-write-kill/new-disable", bundles, old_a, kill_write(B), new_disable, disabled,
                          layout_b, base)
    # The reverse, reported only: the new bundle killed at each write, then the old one (a rollback).
    if not opts.only or "rollback" in opts.only:
        def new_a(node):
            assert node.deliver("new", *A).rc == 0

        def kill_new(node, k):
            return node.deliver("new", *B, kill_at_write=k).rc == 0

        def old_b(node):
            return node.deliver("old", *B)

        def rolled_back(node, run, layout_b):
            wrong = []
            if run.rc != 0 or node.layout() != layout_b:
                wrong.append("old apply: rc %s %s" % (run.rc, run.json.get("error")))
            if not all(node.clients_running().values()) or node.record():
                wrong.append("clients %s record %s" % (node.clients_running(), node.record()))
            if node.unit_bundle() != "old" or node.enable_pending():
                wrong.append("unit %r pending %s" % (node.unit_bundle(), node.enable_pending()))
            return wrong

        failures += sweep("rollback:new-write-kill/old", bundles, new_a, kill_new, old_b, rolled_back, layout_b,
                          base)  # the old bundle's own verdict on the new one's leftovers
    shutil.rmtree(base, ignore_errors=True)
    print("%d case(s) not converged, %.0f s" % (failures, time.time() - started))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
