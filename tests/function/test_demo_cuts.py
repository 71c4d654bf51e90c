"""The demo's long lines, as a person runs it: a reason or a path cut short ends in "..." where it was cut,
its parentheses and quotes closed (textsafe.clip). They were cut at a fixed count with no mark: a line cut
inside "(nvidia.com/mig-2g.10gb=8" read as a whole one with its parenthesis open."""

import json
import shutil

from functions.commands import demo
from functions.commands.main import main
from functions.commands.shipped import EXAMPLES

LONG = "3g.20gb-2g.10gb-1g.5gb"  # three profiles: the capacity a reason names no longer fits the demo's cut


def _examples(tmp_path):
    """The shipped examples with the rolled pool's and the autoscaling pool's label asking for three profiles
    (what an operator trying the demo on a layout of their own would edit)."""
    folder = tmp_path / "examples"
    shutil.copytree(EXAMPLES, folder)
    for name in ("inventory-rollout.json", "inventory-autoscaling.json"):
        data = json.loads((folder / name).read_text())
        for label in data["nodepools"][0]["kubernetes_config"]["labels"]:
            if label["key"] == "ack.aliyun.com/gpu-partition-sequence":
                label["value"] = LONG
        (folder / name).write_text(json.dumps(data))
    return str(folder)


def test_the_demos_long_reasons_end_in_dots_with_their_parentheses_closed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(demo, "EXAMPLES", _examples(tmp_path))
    monkeypatch.setenv("COLUMNS", "1000")
    main(["demo"])
    out = capsys.readouterr().out
    lines = out.splitlines()  # COLUMNS=1000: no line wrapped
    rolled = [l for l in lines if l.startswith("    cn-beijing.192.168.12.")]
    assert len(rolled) >= 3 and all(l.count("(") == l.count(")") for l in rolled), out
    long = [l for l in rolled if "GPU DaemonSet pods restarted" in l or "deferred" in l]
    assert len(long) == 2 and all(l.endswith("...") for l in long), long
    tags = [l for l in lines if l.startswith("    sequence=%s on " % LONG)]
    assert tags[0].endswith("...") and tags[0].count("(") == tags[0].count(")"), tags


def test_the_demos_folders_it_cannot_use_are_named_with_dots_where_cut(tmp_path, monkeypatch, capsys):
    """TMPDIR and the cache both under a folder others can write to (a CI container's HOME under /tmp): the
    usage error names them, each cut to 120 characters with "..." where it was cut."""
    import tempfile

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # others may write here: the node runner's StrictModes rule refuses it, root or not
    deep = shared.joinpath(*["a-folder-of-the-ci-runner"] * 6)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep / "tmp"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(deep / "cache"))
    (deep / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    said = " ".join(err.split())
    assert "the temporary directory (%s" % str(deep)[:40] in said, err
    tmp, cache = said.split("the temporary directory (", 1)[1].split(") and the cache (", 1)
    cache = cache.split(") are not", 1)[0]
    assert tmp.endswith("...") and cache.endswith("...") and len(tmp) <= 123 and len(cache) <= 123, err
