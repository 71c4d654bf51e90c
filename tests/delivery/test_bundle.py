import base64
import io
import os
import lzma
import tarfile

from functions.delivery import bundle, node_runner
from functions.delivery.cloud_assistant import RUNCOMMAND_LIMIT
from functions.delivery.node_script import node_args, render


def test_the_bundle_is_reproducible_and_holds_node_bootstrap_and_pynvml():
    bundle.build.cache_clear()
    first = bundle.build()
    bundle.build.cache_clear()
    second = bundle.build()
    assert first.digest == second.digest and first.packed == second.packed
    names = tarfile.open(fileobj=io.BytesIO(lzma.decompress(first.packed))).getnames()
    assert "pynvml.py" in names and "node_bootstrap/__init__.py" in names
    assert "node_bootstrap/mig/solver.py" in names
    assert not any("__pycache__" in n or n.startswith("functions") for n in names)


def test_stray_files_beside_the_node_code_stay_out_of_the_bundle(tmp_path, monkeypatch):
    """A clone's leftovers in node_bootstrap/ (a JSON an editor or a test wrote, a unit or a note) went into the
    bundle: sent to every node, and a new digest, so every node fetched it again. Only the code travels."""
    import shutil
    import types

    import node_bootstrap

    copy = tmp_path / "node_bootstrap"
    shutil.copytree(os.path.dirname(node_bootstrap.__file__), str(copy),
                    ignore=shutil.ignore_patterns("__pycache__"))
    clean = dict(bundle._sources())
    for stray in ("x.json", "mig/notes.txt", "host/old.service"):
        (copy / stray).write_text("{}")
    monkeypatch.setattr(bundle, "node_bootstrap", types.SimpleNamespace(__file__=str(copy / "__init__.py")))
    names = [name for name, _ in bundle._sources()]
    assert names == sorted(clean) and not any(n.endswith((".json", ".txt", ".service")) for n in names), names


def test_the_bundle_carries_the_runner_the_boot_unit_runs():
    """The boot unit runs ROOT/bundles/HASH/ack_mig_runner.py: the bytes delivery sends as text, covered by the
    bundle's SHA-256; and the variable the runner sets is the one node_bootstrap reads."""
    from node_bootstrap.host import bootunit

    raw = tarfile.open(fileobj=io.BytesIO(lzma.decompress(bundle.build().packed)))
    with open(node_runner.__file__, "rb") as fh:
        own = fh.read()
    assert raw.extractfile(bootunit.RUNNER_NAME).read() == own
    assert ('env["%s"] = target' % bootunit.BUNDLE_ENV).encode() in own


def test_every_part_fits_one_sendfile_and_the_parts_rebuild_the_bundle():
    b = bundle.build()
    chunks = b.chunks()
    assert len(chunks) >= 2  # it does not fit one request: that is why it is cached on the node
    assert all(len(base64.b64encode(c)) <= 32 * 1024 for c in chunks)
    assert b"".join(chunks) == b.packed
    assert b.part_names()[-1].endswith(".%dof%d" % (len(chunks), len(chunks)))


def test_the_node_script_for_a_full_batch_fits_runcommand():
    b = bundle.build()
    names = {"i-%020d" % n: "cn-beijing.192.168.%d.%d" % (n // 250, n % 250) for n in range(100)}
    script = render(b.digest, node_args({"kind": "sequence", "value": "1g.5gb-" * 6 + "1g.5gb"},
                                        ["--backend", "nvml"]), 600, names=names)
    assert len(base64.b64encode(script.encode())) <= RUNCOMMAND_LIMIT


def test_a_change_in_content_changes_the_key():
    one = bundle.pack([("node_bootstrap/__init__.py", b"a")])
    two = bundle.pack([("node_bootstrap/__init__.py", b"b")])
    assert one.digest != two.digest
