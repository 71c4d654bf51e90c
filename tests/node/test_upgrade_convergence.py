"""A node meets the new bundle with what an older bundle left (tests/node/upgrade.py: the old code is the
bundle ``git archive OLD`` builds, the new one this checkout's, each delivered and run in its own processes as
a node runs them, on one simulated node). The new bundle must converge: GPUs at the layout, every GPU client
the old run stopped running again and its record empty, the boot unit running the new bundle with nothing
owed, and a rerun that changes nothing. These are representative cases; scripts/upgrade_convergence.py tries
every kill point (each GPU write, each file write), the boot runs and a rollback."""

import pytest

from tests.node.upgrade import OLD, UNITS, UpgradeNode, git_has, old_bundle

pytestmark = pytest.mark.skipif(not git_has(), reason="commit %s is not in this clone's history" % OLD)

A = ("apply", "--boot-unit", "--sequence", "3g.20gb-3g.20gb")
B = ("apply", "--boot-unit", "--sequence", "3g.20gb-2g.10gb-1g.5gb")
B_LAYOUT = [[(9, 0, 1), (14, 4, 1), (19, 6, 1)]] * 2  # (profile id, start, compute instances) per GPU


@pytest.fixture(scope="module")
def bundles():
    from functions.delivery import bundle

    return {"old": old_bundle(), "new": bundle.build()}


@pytest.fixture
def node(tmp_path, bundles):
    return UpgradeNode(str(tmp_path), **bundles)


def enables(node):
    return [c for c in node.calls() if c.endswith("enable ack-mig-hook.service")]


def assert_settled(node, command=B):
    """A rerun of the new bundle changes nothing and calls no systemctl but to look; a reboot's boot run (the
    new unit) brings the layout back."""
    node.clear_calls()
    again = node.deliver("new", *command)
    assert again.rc == 0 and again.json["changes"] == 0 and again.json["boot_unit"]["changed"] is False, again.json
    assert [c for c in node.calls() if "is-active" not in c] == []
    boot = node.boot()
    assert boot.rc == 0 and node.layout() == B_LAYOUT, (boot.stdout, boot.stderr)


def test_an_old_apply_killed_with_its_clients_stopped_is_finished_by_the_new_bundle(node):
    assert node.deliver("old", *A).rc == 0
    killed = node.deliver("old", *(B + ("--sim-fault", "crash-after:3")))  # one GPU half changed
    assert killed.rc != 0 and killed.json["error"]["code"] == "no-result", killed.json
    # the old code's leftovers: its record (read back by the new reader, or nothing starts them: they are
    # not running, so the new run's own stop passes them by), the manifest held aside, its unit
    assert sorted(kind for kind, _ in node.record()) == ["manifest", "systemd", "systemd"]
    assert not any(node.clients_running().values()) and node.unit_bundle() == "old"
    assert node.layout() != B_LAYOUT
    node.clear_calls()
    done = node.deliver("new", *B)
    assert done.rc == 0 and done.json["outcome"] == "success", (done.json, done.stderr)
    assert "client_problems" not in done.json
    assert node.layout() == B_LAYOUT
    assert node.clients_running() == dict([(u, True) for u in UNITS] + [("manifest", True)])
    assert node.record() == []
    assert node.unit_bundle() == "new" and not node.enable_pending() and len(enables(node)) == 1
    assert_settled(node)


def test_an_old_unit_install_killed_before_its_enable_is_enabled_once_by_the_new_bundle(node):
    """The old install owed its enable from just before the call: killed after the unit file and before the
    marker, it left a unit never enabled that its own reruns said "installed" of, calling nothing."""
    for k in range(12):
        run = node.deliver("old", "install-boot-unit", "--sequence", B[-1], kill_at_write=k)
        if node.unit_bundle() == "old" and not node.enable_pending() and not enables(node):
            break
        node.remove_boot_unit()
    else:
        pytest.fail("no kill point left the old unit written and not enabled")
    assert run.rc != 0
    rerun = node.deliver("old", "install-boot-unit", "--sequence", B[-1])  # the old code: nothing owed
    assert rerun.rc == 0 and enables(node) == [], node.calls()
    installed = node.deliver("new", "install-boot-unit", "--sequence", B[-1])
    assert installed.rc == 0 and installed.json["changed"] is True, installed.json
    assert node.unit_bundle() == "new" and not node.enable_pending() and len(enables(node)) == 1
    node.clear_calls()
    done = node.deliver("new", *B)  # delivery's apply: the unit is the one it wants, nothing owed
    assert done.rc == 0 and done.json["boot_unit"]["changed"] is False and enables(node) == []
    assert_settled(node)


def test_the_kill_at_write_wrapper_kills_on_the_node_interpreter(node):
    """The wrapper installed an audit hook, which a node's 3.6 does not have (3.8+): there every run "killed
    at a write" died of an AttributeError before its first one, and the kill tests passed on nothing done."""
    killed = node.deliver("new", *A, kill_at_write=0)
    assert "exited -9" in killed.json["error"]["message"], (killed.json, killed.stderr)
