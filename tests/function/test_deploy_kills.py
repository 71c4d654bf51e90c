"""``deploy`` and ``undeploy`` killed at each write they make to the cloud, then run again: one invariant.

A kill -9 of the operator's command (a closed laptop, a lost shell) right after a write reached the cloud: the
write stands, the process is gone (tests/support/kills.py's :class:`Killed`, raised as the answer comes back;
nothing in the command catches it, and a write after it never reaches the emulator). The writes are every
mutating request the command sends, whatever module sends it, seen where both SDKs send (``requests``'
``Session.send``): ROS ``CreateStack``/``UpdateStack``/``DeleteStack``/``CreateChangeSet``/``DeleteChangeSet``,
OSS ``PUT``/``POST``/``DELETE`` (the bucket, the package, the old packages pruned). The log project's index
and saved searches are stack resources ROS writes, not the command.

Then the command is run again, as the operator would: a rerun refused because the stack's operation is still in
progress (exit 6) names ``ack-mig-hook wait ...``, which is run, then the command once more. The invariant
(:func:`converged`): exactly one stack, complete, its package the one uploaded (its CRC-64 the stack's
CodeChecksum), no package of its own beyond ``--keep-packages``, no change set left on it, no other bucket;
every run's stderr one clear line per step (no traceback). For undeploy: the rerun removes what is left, a
further one says "nothing to remove", and only then.

A third of the kill points run in ``make test`` (tests/support/failpoints.py); ``ACK_MIG_TEST_ALL_FAILPOINTS=1``
runs them all. The writes each scenario makes are checked in full by :func:`test_the_writes_are_the_ones_killed`,
so a write added to deploy joins the matrix or fails that test."""

import io
import re

import pytest
import requests

from tests.function.test_deploy import BUCKET, CLUSTER, cloud, deploy_args, make_deps, run  # noqa: F401
from tests.support.cli_errors import error_text
from tests.support.failpoints import ALL
from tests.support.kills import Killed
from tests.support.oss_emulator import crc64_ecma

pytestmark = pytest.mark.timeout(300)
STACK = "ack-mig-hook-" + CLUSTER
PREFIX = "ack-mig-hook/%s/" % STACK
ROS_WRITES = ("CreateStack", "UpdateStack", "DeleteStack", "CreateChangeSet", "DeleteChangeSet", "ExecuteChangeSet")
UNDEPLOY = ("undeploy", "--region", "cn-beijing", "--cluster-id", CLUSTER, "--poll", "0", "--yes")


def write_of(request) -> str:
    """What a request writes ("" for a read): a ROS action names itself in ``x-acs-action``; OSS writes with
    PUT, POST and DELETE (OSS API reference: PutBucket, PutObject, DeleteObject ...)."""
    action = request.headers.get("x-acs-action")
    if action:
        return action if action in ROS_WRITES else ""
    if request.method not in ("PUT", "POST", "DELETE"):
        return ""
    path = request.path_url.split("?")[0].strip("/")  # /bucket/ or /bucket/key (path style)
    return "oss %s %s" % (request.method, "object" if "/" in path else "bucket")


class Killer:
    """Counts the writes; the ``k``-th reaches the cloud and its answer never reaches the command."""

    def __init__(self):
        self.k, self.calls = 0, []

    def arm(self, k):
        self.k, self.calls = k, []


@pytest.fixture
def killer(monkeypatch):
    real = requests.Session.send
    found = Killer()

    def send(session, request, **kwargs):
        what = write_of(request)
        if what and found.k and len(found.calls) >= found.k:
            raise Killed("after the kill: %s" % what)  # a dead process sends nothing more
        answer = real(session, request, **kwargs)
        if what:
            found.calls.append(what)
            if len(found.calls) == found.k:
                raise Killed(what)
        return answer

    monkeypatch.setattr(requests.Session, "send", send)
    return found


def params(stack):
    return {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}


def clear(out, err):
    """Each run says what it did one line a step: no traceback, no internal error, nothing unprintable."""
    for text in (out, err):
        assert "Traceback" not in text and "internal error" not in text, text
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text), text
    if "ack-mig-hook: error:" in err:
        error_text(err[err.index("ack-mig-hook: error:"):])


def again(capsys, argv):
    """Run ``argv`` as the operator would after the kill: a refusal while the stack's operation is in progress
    (exit 6) is followed by the `ack-mig-hook wait ...` it names, then ``argv`` once more."""
    code, out, err = run(capsys, *argv)
    clear(out, err)
    if code == 6 and "ack-mig-hook wait" in err:
        text = error_text(err[err.index("ack-mig-hook: error:"):])
        follow = re.search(r"`ack-mig-hook (wait [^`]+)`", text).group(1).split()
        code, out, err = run(capsys, *follow, "--poll", "0")
        clear(out, err)
        assert code == 0, err
        code, out, err = run(capsys, *argv)
        clear(out, err)
    return code, out, err


def converged(ros, oss, keep):
    """One stack, complete, on the package uploaded for it; nothing else of it left behind."""
    live = [s for s in ros.stacks.values() if s["Status"] != "DELETE_COMPLETE"]
    assert [s["StackName"] for s in live] == [STACK], [(s["StackName"], s["Status"]) for s in live]
    (stack,) = live
    assert stack["Status"] in ("CREATE_COMPLETE", "UPDATE_COMPLETE"), stack["Status"]
    values = params(stack)
    data = oss.buckets[BUCKET][values["CodeObject"]]
    assert str(crc64_ecma(data)) == values["CodeChecksum"] and values["CodeObject"].startswith(PREFIX)
    mine = [k for k in oss.buckets[BUCKET] if k.startswith(PREFIX)]
    assert values["CodeObject"] in mine and len(mine) <= keep, mine
    assert list(oss.buckets) == [BUCKET]
    assert not [c["ChangeSetName"] for c in ros.change_sets.values()], ros.change_sets


# ---- the scenarios: what is there before, the command killed ----

def _first(capsys, tmp_path):
    return deploy_args(make_deps(str(tmp_path / "deps1")), "--keep-packages", "1")


def _update(capsys, tmp_path):
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps0"))))[0] == 0
    capsys.readouterr()
    return deploy_args(make_deps(str(tmp_path / "deps1")), "--keep-packages", "1")


def _plan(capsys, tmp_path):
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps0"))))[0] == 0
    capsys.readouterr()
    return deploy_args(make_deps(str(tmp_path / "deps1")), "--dry-run")


def _undeploy(capsys, tmp_path):
    assert run(capsys, *deploy_args(make_deps(str(tmp_path / "deps0"))))[0] == 0
    capsys.readouterr()
    return UNDEPLOY


SCENARIOS = {
    "first": (_first, ["oss PUT bucket", "oss PUT object", "CreateStack"]),
    "update": (_update, ["oss PUT object", "UpdateStack", "oss DELETE object"]),  # the old package pruned
    "plan": (_plan, ["CreateChangeSet", "DeleteChangeSet"]),
    "undeploy": (_undeploy, ["DeleteStack"]),
}
POINTS = [(name, k) for name, (_, writes) in SCENARIOS.items() for k in range(1, len(writes) + 1)]
SAMPLED = POINTS if ALL else POINTS[2::3]  # every third, as tests/support/failpoints.py samples


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_writes_are_the_ones_killed(cloud, killer, capsys, tmp_path, name):  # noqa: F811
    setup, writes = SCENARIOS[name]
    argv = setup(capsys, tmp_path)
    killer.arm(0)
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert killer.calls == writes


def killed(capsys, killer, argv, k):
    killer.arm(k)
    with pytest.raises(Killed):
        run(capsys, *argv)
    capsys.readouterr()
    killer.arm(0)


def check_rerun(cloud, capsys, name, argv):  # noqa: F811
    ros, oss = cloud
    before = {sid: (s["Status"], params(s)) for sid, s in ros.stacks.items()}
    code, out, err = again(capsys, argv)
    assert code == 0, err
    if name == "undeploy":
        assert "deleted" in out and not [s for s in ros.stacks.values() if s["Status"] != "DELETE_COMPLETE"]
        code, out, err = run(capsys, *argv)
        assert code == 0 and "nothing to remove" in out, out + err
        return
    if name == "plan":  # the plan is shown, and the stack is as it was
        assert out.startswith("plan: update stack %s" % STACK), out
        assert {sid: (s["Status"], params(s)) for sid, s in ros.stacks.items()} == before
        assert not ros.change_sets, ros.change_sets
        return
    converged(ros, oss, keep=1)
    code, out, err = run(capsys, *argv)  # and a further run changes nothing
    assert code == 0 and "already up to date" in out, out + err
    converged(ros, oss, keep=1)


@pytest.mark.parametrize("name,k", SAMPLED, ids=["%s-%s" % (n, SCENARIOS[n][1][k - 1].replace(" ", "-"))
                                                  for n, k in SAMPLED])
def test_killed_at_a_write_the_rerun_converges(cloud, killer, capsys, tmp_path, name, k):  # noqa: F811
    argv = SCENARIOS[name][0](capsys, tmp_path)
    killed(capsys, killer, argv, k)
    check_rerun(cloud, capsys, name, argv)


def test_a_plan_killed_after_its_change_set_leaves_none_once_planned_again(cloud, killer, capsys,  # noqa: F811
                                                                          tmp_path):
    """A dry run killed after CreateChangeSet: its cleanup never ran. The next dry runs left its change set
    there, one more for each kill, until ROS's 20 change sets a stack refused every plan. Now a plan deletes the
    plans' change sets it finds first; a change set a person made for the stack is not the plan's, and stays."""
    ros, _ = cloud
    argv = _plan(capsys, tmp_path)
    (stack,) = ros.stacks.values()
    killed(capsys, killer, argv, 1)
    assert [c["ChangeSetName"][:18] for c in ros.change_sets.values()] == ["ack-mig-hook-plan-"]
    ros.change_sets["mine"] = dict(next(iter(ros.change_sets.values())), ChangeSetId="mine",
                                   ChangeSetName="reviewed-by-ops", Status="CREATE_COMPLETE")
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    clear(out, err)
    assert out.startswith("plan: update stack %s" % STACK), out
    assert [c["ChangeSetName"] for c in ros.change_sets.values()] == ["reviewed-by-ops"]
    assert stack["Status"] == "CREATE_COMPLETE" and ros.calls("UpdateStack") == 0


def test_an_undeploy_rerun_as_the_killed_ones_delete_ends_finds_nothing_to_remove(cloud, killer, capsys,  # noqa: F811
                                                                                   tmp_path):
    """undeploy killed after DeleteStack; ROS goes on deleting and ends between the rerun's ListStacks (the stack
    listed, DELETE_IN_PROGRESS) and its GetStack (StackNotFound: the emulator's stack ends at its next look).
    The rerun took the stack it could no longer read for one without a ClusterId, "not a stack ack-mig-hook
    deploy made", exit 6: the operator was told a stack they deployed was not theirs, and nothing was left
    to remove. Now a stack gone as it is read is gone: nothing to remove, exit 0."""
    ros, _ = cloud
    killed(capsys, killer, _undeploy(capsys, tmp_path), 1)
    (stack,) = ros.stacks.values()
    assert stack["Status"] == "DELETE_IN_PROGRESS"
    ros.steps = 1
    code, out, err = run(capsys, *UNDEPLOY)
    clear(out, err)
    assert code == 0 and "nothing to remove" in out, out + err
    assert stack["Status"] == "DELETE_COMPLETE" and ros.calls("DeleteStack") == 1


class Answers(io.StringIO):
    """stdin at a terminal where a person answers ``y``, taking long enough for ``meanwhile`` to happen."""

    def __init__(self, meanwhile):
        super().__init__("y\n")
        self.meanwhile = meanwhile

    def isatty(self):
        return True

    def readline(self, *args):
        self.meanwhile()
        return super().readline(*args)


def test_an_undeploy_rerun_whose_delete_ends_while_it_asks_says_deleted(cloud, killer, capsys, tmp_path,  # noqa: F811
                                                                        monkeypatch):
    """undeploy killed after DeleteStack; the rerun, at a terminal, asks before deleting again, and ROS ends the
    first delete while the person reads the question. The rerun's DeleteStack then met StackNotFound and ended
    "ROS DeleteStack failed", exit 1, for a stack that is gone as asked. Now a stack gone when it is deleted
    is deleted: the rerun says so, exit 0."""
    ros, _ = cloud
    killed(capsys, killer, _undeploy(capsys, tmp_path), 1)
    (stack,) = ros.stacks.values()

    def delete_ends():
        stack["Status"] = "DELETE_COMPLETE"

    monkeypatch.setattr("sys.stdin", Answers(delete_ends))
    argv = tuple(a for a in UNDEPLOY if a != "--yes")
    code, out, err = run(capsys, *argv)
    clear(out, err)
    assert code == 0 and "deleted" in out, out + err
    code, out, err = run(capsys, *argv)
    assert code == 0 and "nothing to remove" in out, out + err


def test_a_package_build_killed_mid_zip_leaves_the_last_whole_package(tmp_path, monkeypatch):
    """``python -m functions.commands.package --out FILE`` killed while it writes the zip (the write deploy's
    package is made by): FILE was written in place, so the package built before was gone and FILE held the
    entries written so far (a zip that imports nothing past them, or none at all). Now the zip is written
    beside FILE and renamed over it once whole: a kill leaves the last whole package."""
    from functions.commands import package
    from functions.commands.stack import code_package

    out = str(tmp_path / "dist" / "ack-mig-hook.zip")
    assert package.main(["--sources-only", "--out", out]) == 0
    with open(out, "rb") as handle:
        whole = handle.read()
    entries = []
    real = code_package._Zip.writestr

    def writestr(self, *args, **kwargs):
        real(self, *args, **kwargs)
        entries.append(args[0])
        if len(entries) == 10:
            raise Killed("zip entry %d" % len(entries))

    monkeypatch.setattr(code_package._Zip, "writestr", writestr)
    with pytest.raises(Killed):
        package.main(["--sources-only", "--out", out])
    with open(out, "rb") as handle:
        assert handle.read() == whole
