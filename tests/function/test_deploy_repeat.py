"""Deploys in a row, as ``deploy`` runs them by default: the dependencies fetched by pip from the lock (here
a small lock and a local package folder: tests/function/test_package_lock.py's, offline) into the cache, the
package built, uploaded to the OSS emulator, the stack created in the ROS emulator.

Issue 38: each run re-fetched, built a different zip (pip's ``direct_url.json`` named its temporary
folder), uploaded it again and updated the function; the dry run's code object never matched the deploy's;
old packages piled up in the bucket."""

import io
import json
import os
import time
import zipfile

import pytest

from functions.commands.stack import build, lock
from functions.commands.stack.upload import prune_plan
from tests.function.test_deploy import BUCKET, CLUSTER, cloud, make_deps, run  # noqa: F401  (cloud: fixture)
from tests.function.test_package_lock import _sha, _wheel, index  # noqa: F401  (index: fixture)

STACK = "ack-mig-hook-" + CLUSTER
PREFIX = "ack-mig-hook/%s/" % STACK


@pytest.fixture
def small_lock(index, tmp_path, monkeypatch):  # noqa: F811
    """A lock of one wheel per runtime requirement (each with a console script), in the local package
    folder, and an empty cache."""
    pins = []
    for requirement in build.runtime_requirements():
        name = build._name(requirement).replace("-", "_")
        pins.append(lock.Pin(name, "1.0", _sha(_wheel(index, name, script=True)), False))
    path = tmp_path / "requirements-fc.txt"
    path.write_text(lock.render(lock.Lock(build.runtime_requirements(), pins)))
    monkeypatch.setattr(lock, "LOCK", str(path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return str(path)


def deploy(*extra):
    return ("deploy", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--log-project", "my-sls-project",
            "--log-store", "ack-mig-hook", "--poll", "0") + extra


def test_two_deploys_in_a_row_the_second_uploads_nothing_and_leaves_the_function(cloud, small_lock, capsys):  # noqa: F811
    ros, oss = cloud
    code, out, err = run(capsys, *deploy("--dry-run", "--json"))
    assert code == 0, err
    planned = json.loads(out)["package"]["object"]
    assert "dependencies: fetching for python3.10" in err and "  fetched 1/7: " in err
    code, out, err = run(capsys, *deploy("--json"))
    assert code == 0, err
    assert "dependencies: from the cache" in err and "fetching" not in err  # fetched once, by the dry run
    first = json.loads(out)
    assert first["package"]["object"] == planned  # the dry run's code object is the deploy's
    (stack,) = ros.stacks.values()
    params = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert "oss://%s/%s" % (BUCKET, params["CodeObject"]) == planned and params["CodeObject"].startswith(PREFIX)
    events, oss_seen, ros_seen = len(stack["_events"]), len(oss.actions), len(ros.requests)

    code, out, err = run(capsys, *deploy())
    assert code == 0, err
    second_oss = oss.actions[oss_seen:]
    assert "oss:PutObject" not in second_oss and "oss:DeleteObject" not in second_oss, second_oss
    assert "not uploaded again" in err
    assert out.startswith("stack %s is already up to date" % STACK)
    assert "the function was left as it is" in " ".join(out.split())
    # ROS was asked (UpdateStack, refused as "the completely same stack") and changed nothing.
    assert [r.action for r in ros.requests[ros_seen:]].count("UpdateStack") == 1
    assert stack["Status"] == "CREATE_COMPLETE" and len(stack["_events"]) == events
    assert {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]} == params
    assert sorted(oss.buckets[BUCKET]) == [params["CodeObject"]]


def test_the_package_carries_no_path_of_the_machine_that_built_it(cloud, small_lock, capsys, tmp_path):  # noqa: F811
    ros, oss = cloud
    assert run(capsys, *deploy())[0] == 0
    (data,) = oss.buckets[BUCKET].values()
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "pydantic/__init__.py" in names and not [n for n in names if n.endswith("direct_url.json")
                                                    or n.startswith("bin/")]
    assert str(tmp_path).encode() not in data and b"/tmp/" not in data


def test_old_packages_are_pruned_to_the_last_few_never_the_one_in_use(cloud, capsys, tmp_path):  # noqa: F811
    ros, oss = cloud
    other = "ack-mig-hook/ack-mig-hook-c0ffee/0123456789abcdef.zip"  # another cluster's stack, same bucket
    objects = []
    for n in range(4):  # four code changes
        code, out, err = run(capsys, *deploy("--deps-dir", make_deps(str(tmp_path / ("deps%d" % n))),
                                             "--keep-packages", "2", "--json"))
        assert code == 0, err
        objects.append(json.loads(out)["package"]["object"].split("/", 3)[3])
        # OSS's LastModified counts whole seconds: the deploys of a test come within one, days apart in life
        oss.modified[(BUCKET, objects[-1])] = time.time() - 1000 + 10 * n
        if n == 0:
            oss.buckets[BUCKET][other] = b"PK"
    (stack,) = ros.stacks.values()
    in_use = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}["CodeObject"]
    assert in_use == objects[-1]
    assert sorted(oss.buckets[BUCKET]) == sorted([objects[2], objects[3], other])
    assert "oss:DeleteObject" in oss.actions  # in the page's policy by tests/support/deployer_policy.OTHER_PATHS
    assert "pruned 1 old package from oss://%s/%s (kept 2, --keep-packages 2)" % (BUCKET, PREFIX) in \
        " ".join(err.split())
    # The package in use is kept whatever its age: back to the first package's code (a rollback) ...
    code, out, err = run(capsys, *deploy("--deps-dir", str(tmp_path / "deps0"), "--keep-packages", "1", "--json"))
    assert code == 0, err
    assert sorted(oss.buckets[BUCKET]) == sorted([objects[0], other])
    assert json.loads(out)["packages_pruned"] == ["oss://%s/%s" % (BUCKET, k) for k in sorted(objects[2:])]


def test_prune_plan_keeps_the_one_in_use_and_the_newest_others():
    objects = [(10, "a.zip"), (30, "c.zip"), (20, "b.zip"), (40, "d.zip")]
    assert prune_plan(objects, "a.zip", 3) == (("a.zip", "d.zip", "c.zip"), ("b.zip",))
    assert prune_plan(objects, "d.zip", 1) == (("d.zip",), ("a.zip", "b.zip", "c.zip"))
    assert prune_plan(objects, "gone.zip", 2) == (("d.zip", "c.zip"), ("a.zip", "b.zip"))
    assert prune_plan([], "a.zip", 3) == ((), ())


def test_a_prune_oss_refuses_is_a_warning_the_deploy_stands(cloud, capsys, tmp_path, monkeypatch):  # noqa: F811
    ros, oss = cloud
    from tests.support import oss_emulator

    monkeypatch.setattr(oss_emulator.OssEmulator, "_list", lambda self, bucket, query: self._error(
        403, "AccessDenied", "You have no right to access this bucket."))
    code, out, err = run(capsys, *deploy("--deps-dir", make_deps(str(tmp_path / "deps"))))
    assert code == 0 and "CREATE_COMPLETE" in out
    assert "warning: old packages were not pruned: " in err and "AccessDenied" in err and "oss:ListObjects" in err
    assert "oss:ListObjects" in oss.actions and "oss:DeleteObject" not in oss.actions
